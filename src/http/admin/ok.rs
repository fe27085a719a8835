//! The `code` of an operator action that did what it was asked, as an
//! enum of one value so the document (and a client generated from it) says
//! exactly what the answer holds.

use serde::Serialize;

/// `OK`: the action was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub enum OkCode {
    /// Done.
    #[serde(rename = "OK")]
    Ok,
}

/// An answer that says only that the action was done.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Done {
    /// Always `OK`.
    pub code: OkCode,
}

impl Done {
    /// The answer.
    pub const OK: Self = Self { code: OkCode::Ok };
}
