//! The bodies of the operator actions: typed, so the document shows them
//! and the server refuses what they do not allow. Each may carry the
//! reserved `__authenticatedOperator`, which is ignored: the audit log
//! writes the authenticated operator there itself.

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::db::audit::audited_params;
use crate::http::error::ApiResult;
use crate::http::reason::{MAX_OPERATOR_REASON_CHARS, checked_reason};

/// An action whose reason is optional.
#[derive(Debug, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OptionalReason {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = crate::http::reason::optional_operator_reason_schema)]
    reason: Option<String>,
    #[serde(rename = "__authenticatedOperator", default, skip_serializing)]
    #[schema(ignore)]
    _operator: Option<IgnoredAny>,
}

impl OptionalReason {
    /// The reason, checked and trimmed, if one was given.
    pub fn reason(&self) -> ApiResult<Option<String>> {
        self.reason
            .as_deref()
            .map(|reason| checked_reason(reason, MAX_OPERATOR_REASON_CHARS))
            .transpose()
    }
}

/// An action that needs a reason.
#[derive(Debug, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RequiredReason {
    #[schema(schema_with = crate::http::reason::operator_reason_schema)]
    reason: String,
    #[serde(rename = "__authenticatedOperator", default, skip_serializing)]
    #[schema(ignore)]
    _operator: Option<IgnoredAny>,
}

impl RequiredReason {
    /// The reason, checked and trimmed.
    pub fn reason(&self) -> ApiResult<String> {
        checked_reason(&self.reason, MAX_OPERATOR_REASON_CHARS)
    }
}

/// Freezing or thawing the merge queue.
#[derive(Debug, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FreezeBody {
    /// `true` freezes, `false` thaws.
    pub frozen: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = crate::http::reason::optional_operator_reason_schema)]
    reason: Option<String>,
    #[serde(rename = "__authenticatedOperator", default, skip_serializing)]
    #[schema(ignore)]
    _operator: Option<IgnoredAny>,
}

impl FreezeBody {
    /// The reason, checked and trimmed, if one was given.
    pub fn reason(&self) -> ApiResult<Option<String>> {
        self.reason
            .as_deref()
            .map(|reason| checked_reason(reason, MAX_OPERATOR_REASON_CHARS))
            .transpose()
    }
}

/// What the audit log records of `body`, with `operator` written over the
/// reserved key.
pub fn audited<T: Serialize>(body: &T, operator: &str) -> Value {
    audited_params(&serde_json::to_value(body).unwrap_or_default(), operator)
}
