//! The file a binding becomes in the configuration repository (SPEC §1):
//! JSON with a fixed key order, two-space indent and a trailing newline, so
//! re-running a step writes byte-identical content.

use serde::Serialize;

/// What a binding's file holds, in the order it is written.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingFile<'a> {
    /// Subject.
    pub subject: &'a str,
    /// Target.
    pub target: &'a str,
    /// Parameters (pass them through [`canonical_json`] for a stable key order).
    pub params: &'a serde_json::Value,
    /// Expiry, RFC 3339 UTC, or null.
    pub expires_at: Option<String>,
    /// The operation that wrote it.
    pub operation_id: &'a str,
    /// Who asked for it.
    pub requested_by: &'a str,
}

impl BindingFile<'_> {
    /// The file's exact bytes.
    pub fn render(&self) -> String {
        let mut text =
            serde_json::to_string_pretty(self).expect("a binding file always serialises");
        text.push('\n');
        text
    }
}

/// `value` with every object's keys in sorted order, whatever order the
/// client sent them in, so equal requests hash and render equally.
pub fn canonical_json(value: &serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            serde_json::Value::Object(
                keys.into_iter()
                    .map(|key| (key.clone(), canonical_json(&map[key])))
                    .collect(),
            )
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.iter().map(canonical_json).collect())
        }
        other => other.clone(),
    }
}

/// Characters allowed in a subject, which becomes part of a file path: no
/// separators, no `..`, nothing a shell or a URL would mangle.
pub fn valid_subject(subject: &str) -> bool {
    !subject.is_empty()
        && subject.len() <= 128
        && !subject.starts_with('.')
        && subject
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@' | '+'))
}

/// The file path of a binding from the target's template.
pub fn file_path(template: &str, target: &str, subject: &str) -> String {
    template
        .replace("{target}", target)
        .replace("{subject}", subject)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendering_is_stable_byte_for_byte() {
        let params = serde_json::json!({ "b": 2, "a": { "z": true, "y": null } });
        let file = BindingFile {
            subject: "app-1",
            target: "demo.feature-flags",
            params: &params,
            expires_at: None,
            operation_id: "3f2504e0-4f89-11d3-9a0c-0305e82c3301",
            requested_by: "alice",
        };
        let expected = "{\n  \"subject\": \"app-1\",\n  \"target\": \"demo.feature-flags\",\n  \"params\": {\n    \"a\": {\n      \"y\": null,\n      \"z\": true\n    },\n    \"b\": 2\n  },\n  \"expiresAt\": null,\n  \"operationId\": \"3f2504e0-4f89-11d3-9a0c-0305e82c3301\",\n  \"requestedBy\": \"alice\"\n}\n";
        assert_eq!(file.render(), expected);
        assert_eq!(file.render(), file.render());
    }

    #[test]
    fn subjects_cannot_escape_their_directory() {
        assert!(valid_subject("alice@example.com"));
        assert!(valid_subject("app-1.prod"));
        for bad in ["", "../etc", "a/b", "..", ".hidden", "a b", "a\u{0}b", "ü"] {
            assert!(!valid_subject(bad), "{bad:?}");
        }
        assert_eq!(
            file_path("bindings/{target}/{subject}.json", "t", "s"),
            "bindings/t/s.json"
        );
    }
}
