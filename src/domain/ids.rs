//! Identifiers and kinds of operations.

use std::fmt;
use std::str::FromStr;

use super::UnknownCode;

/// The id of one attempt (apply or close): a UUID in its hyphenated form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperationId(uuid::Uuid);

impl OperationId {
    /// A fresh random id.
    pub fn new() -> Self {
        Self(uuid::Uuid::new_v4())
    }

    /// Parses a client-supplied id; only UUIDs are accepted.
    pub fn parse(text: &str) -> Result<Self, uuid::Error> {
        uuid::Uuid::parse_str(text.trim()).map(Self)
    }

    /// The stored form: lower-case hyphenated, 36 characters.
    pub fn as_string(&self) -> String {
        self.0.hyphenated().to_string()
    }
}

impl Default for OperationId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.hyphenated(), f)
    }
}

/// What an operation does to its binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperationKind {
    /// Create or change the binding's file.
    Apply,
    /// Remove the binding's file.
    Close,
}

impl OperationKind {
    /// The stored name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Apply => "APPLY",
            Self::Close => "CLOSE",
        }
    }
}

impl FromStr for OperationKind {
    type Err = UnknownCode;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "APPLY" => Ok(Self::Apply),
            "CLOSE" => Ok(Self::Close),
            _ => Err(UnknownCode {
                kind: "operation kind",
                value: value.to_owned(),
            }),
        }
    }
}

/// For decoding stored rows.
impl TryFrom<String> for OperationKind {
    type Error = UnknownCode;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_ids_are_uuids_in_one_canonical_form() {
        let id = OperationId::parse(" 3F2504E0-4F89-11D3-9A0C-0305E82C3301 ").unwrap();
        assert_eq!(id.as_string(), "3f2504e0-4f89-11d3-9a0c-0305e82c3301");
        assert!(OperationId::parse("op-1").is_err());
        assert_ne!(OperationId::new(), OperationId::new());
    }
}
