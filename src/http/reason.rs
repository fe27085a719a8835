//! The reason a person gives for a request or an operator action: the one
//! check behind every `reason` field, and the schema that states it in the
//! OpenAPI document.

use utoipa::openapi::schema::{Object, ObjectBuilder, SchemaType, Type};

use super::error::ApiError;

/// The longest reason of a request (apply, close).
pub const MAX_REQUEST_REASON_CHARS: usize = 2000;
/// The longest reason of an operator action.
pub const MAX_OPERATOR_REASON_CHARS: usize = 1000;

/// At least one character that is not whitespace (as [`str::trim`] counts
/// it, listed so every regex dialect reads it alike), and no NUL.
const REASON_PATTERN: &str = "^[^\\u0000]*[^\\u0000\\t\\n\\u000b\\u000c\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000][^\\u0000]*$";

/// `text` as a reason: 1 to `max` characters (as sent), not only
/// whitespace, no NUL; trimmed.
pub fn checked_reason(text: &str, max: usize) -> Result<String, ApiError> {
    let trimmed = text.trim();
    if trimmed.is_empty() || text.chars().count() > max || text.contains('\0') {
        return Err(ApiError::InvalidArgument(format!(
            "field `reason`: 1 to {max} characters, not only spaces, without NUL"
        )));
    }
    Ok(trimmed.to_owned())
}

/// The schema of a request's reason.
pub fn request_reason_schema() -> Object {
    reason_schema(Type::String.into(), MAX_REQUEST_REASON_CHARS)
}

/// The schema of an operator's required reason.
pub fn operator_reason_schema() -> Object {
    reason_schema(Type::String.into(), MAX_OPERATOR_REASON_CHARS)
}

/// The schema of an operator's optional reason (null as good as absent).
pub fn optional_operator_reason_schema() -> Object {
    reason_schema(
        SchemaType::from_iter([Type::String, Type::Null]),
        MAX_OPERATOR_REASON_CHARS,
    )
}

fn reason_schema(types: SchemaType, max: usize) -> Object {
    ObjectBuilder::new()
        .schema_type(types)
        .description(Some(format!(
            "Why: 1 to {max} characters, not only whitespace, without NUL (audited)"
        )))
        .min_length(Some(1))
        .max_length(Some(max))
        .pattern(Some(REASON_PATTERN))
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_trimmed_and_blank_long_or_nul_ones_are_refused() {
        assert_eq!(checked_reason("  why \n", 10).unwrap(), "why");
        for bad in ["", " \t\n", "\u{3000}\u{85}", "a\0", "elevenchars"] {
            assert!(checked_reason(bad, 10).is_err(), "{bad:?}");
        }
        assert!(
            checked_reason("\u{feff}", 10).is_ok(),
            "not whitespace to Rust"
        );
    }
}
