//! Configuration files read and edited in JSON, YAML and TOML, keeping what
//! a person wrote in them: an edit changes the one key it is about and
//! leaves comments, blank lines and the order and spelling of every other
//! entry as they were, so a merge request shows only the change.
//!
//! Every edit is checked before it is returned: the edited text is parsed
//! again and must hold exactly the original document with the one key set
//! or removed. An editor library's quirk then becomes an error naming the
//! key, never a file that says something nobody asked for. Everything here
//! is deterministic (same input, same bytes), since callers compare the git
//! blob ids of what they write.

mod json;
mod toml;
mod yaml;

use serde_json::{Map, Value};

/// A configuration file's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// JSON (RFC 8259: no comments, no trailing commas).
    Json,
    /// YAML, a single document whose root is a mapping.
    Yaml,
    /// TOML 1.0.
    Toml,
}

impl FileFormat {
    /// The format a configuration names: `json`, `yaml` or `toml`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "json" => Some(Self::Json),
            "yaml" => Some(Self::Yaml),
            "toml" => Some(Self::Toml),
            _ => None,
        }
    }

    /// The format a file's extension says: `.json`, `.yaml`/`.yml`, `.toml`.
    pub fn of_path(path: &str) -> Option<Self> {
        let (_, extension) = path.rsplit_once('.')?;
        match extension {
            "json" => Some(Self::Json),
            "yaml" | "yml" => Some(Self::Yaml),
            "toml" => Some(Self::Toml),
            _ => None,
        }
    }

    /// The format's name, as [`FileFormat::from_name`] reads it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Yaml => "yaml",
            Self::Toml => "toml",
        }
    }

    /// The name in a sentence.
    fn label(self) -> &'static str {
        match self {
            Self::Json => "JSON",
            Self::Yaml => "YAML",
            Self::Toml => "TOML",
        }
    }

    /// What the format calls a group of keys, for messages in its words.
    fn table_word(self) -> &'static str {
        match self {
            Self::Json => "an object",
            Self::Yaml => "a mapping",
            Self::Toml => "a table",
        }
    }
}

/// Why a document could not be read, rendered or edited; Display is a short
/// sentence a requester or operator can act on (with line/column when the
/// parser gives one), no Rust debug output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DocumentError(pub String);

impl DocumentError {
    fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// The document as JSON values (YAML/TOML mapped the obvious way; TOML
/// datetimes as their string).
pub fn parse(format: FileFormat, text: &str) -> Result<Value, DocumentError> {
    match format {
        FileFormat::Json => json::parse(text),
        FileFormat::Yaml => yaml::parse(text),
        FileFormat::Toml => toml::parse(text),
    }
}

/// A whole document written from a value, deterministically (same value →
/// same bytes, always ending in one '\n'): JSON pretty with two-space indent
/// (serde_json::to_string_pretty) + '\n'; YAML and TOML in a stable,
/// conventional style. Object keys are written in the order the
/// serde_json::Map iterates (sorted, serde_json's default). TOML has no
/// null: a null anywhere is an error naming its dotted path; a top-level
/// value that is not an object is an error for TOML.
pub fn render(format: FileFormat, value: &Value) -> Result<String, DocumentError> {
    match format {
        FileFormat::Json => json::render(value),
        FileFormat::Yaml => yaml::render(value),
        FileFormat::Toml => toml::render(value),
    }
}

/// The value at `key` (a path of table/mapping keys from the root), None
/// when absent. An intermediate that is not a table/mapping is an error.
///
/// A blank text is an empty document. An intermediate that is null (YAML's
/// `pools:` with nothing under it) holds nothing, so the value is absent,
/// and [`set_key`] puts a mapping there.
pub fn value_at(
    format: FileFormat,
    text: &str,
    key: &[String],
) -> Result<Option<Value>, DocumentError> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    lookup(format, &parse(format, text)?, key).map(|found| found.cloned())
}

/// `text` (None: the file does not exist yet, an empty document) with the
/// value at `key` set to `value`, intermediate tables/mappings created as
/// needed; everything else kept byte for byte where the format's editor
/// allows: comments, blank lines, the order and formatting of the other
/// entries. Setting a key to the value it already has returns `text`
/// unchanged (byte-identical). Deterministic.
///
/// When both the old and the new value are tables/mappings, the old one is
/// edited key by key (values updated in place, keys that are gone removed,
/// new ones appended), so the comments inside it survive.
pub fn set_key(
    format: FileFormat,
    text: Option<&str>,
    key: &[String],
    value: &Value,
) -> Result<String, DocumentError> {
    if key.is_empty() {
        return Err(DocumentError::new(
            "the key is empty: name the entry to set (render writes a whole document)",
        ));
    }
    if format == FileFormat::Toml {
        toml::refuse_nulls(value, key)?;
    }
    let text = match text.filter(|text| !text.trim().is_empty()) {
        Some(text) => text,
        // TOML's editor decides which objects become `[tables]`, so it
        // writes the new file too.
        None if format == FileFormat::Toml => "",
        // Nothing a person wrote to keep: the conventional rendering.
        None => return render(format, &nested(key, value.clone())),
    };
    let current = parse(format, text)?;
    if lookup(format, &current, key)? == Some(value) {
        return Ok(text.to_owned());
    }
    let mut expected = root_object(format, &current)?;
    set_in(&mut expected, key, value.clone());
    let expected = Value::Object(expected);
    let edited = match format {
        FileFormat::Json => json::set(text, &current, key, value)?,
        FileFormat::Toml => toml::set(text, &current, key, value)?,
        FileFormat::Yaml => {
            let edited = yaml::set(text, &current, key, value, yaml::Scalars::Block)?;
            if parse(format, &edited).is_ok_and(|back| back == expected) {
                return Ok(edited);
            }
            // A string a `|` block cannot carry exactly: quoted instead.
            yaml::set(text, &current, key, value, yaml::Scalars::Quoted)?
        }
    };
    check(format, edited, &expected, key)
}

/// `text` without the value at `key`; a key already absent returns `text`
/// unchanged. Parent tables/mappings that become empty are kept.
pub fn remove_key(format: FileFormat, text: &str, key: &[String]) -> Result<String, DocumentError> {
    if key.is_empty() {
        return Err(DocumentError::new(
            "the key is empty: name the entry to remove",
        ));
    }
    if text.trim().is_empty() {
        return Ok(text.to_owned());
    }
    let current = parse(format, text)?;
    if lookup(format, &current, key)?.is_none() {
        return Ok(text.to_owned());
    }
    let mut expected = root_object(format, &current)?;
    remove_in(&mut expected, key);
    let edited = match format {
        FileFormat::Json => json::remove(text, key)?,
        FileFormat::Yaml => yaml::remove(text, key)?,
        FileFormat::Toml => toml::remove(text, key)?,
    };
    check(format, edited, &Value::Object(expected), key)
}

/// The value at `key` in a parsed document, by the rules of [`value_at`]:
/// for a document parsed once and read at many keys.
pub fn lookup<'v>(
    format: FileFormat,
    document: &'v Value,
    key: &[String],
) -> Result<Option<&'v Value>, DocumentError> {
    let mut node = document;
    for (depth, segment) in key.iter().enumerate() {
        node = match node {
            Value::Object(map) => match map.get(segment) {
                Some(child) => child,
                None => return Ok(None),
            },
            Value::Null => return Ok(None),
            other => {
                let what = if depth == 0 {
                    format!("the {} document", format.label())
                } else {
                    dotted(&key[..depth])
                };
                return Err(DocumentError(format!(
                    "{what} is {}, not {}: it has no key {segment:?}",
                    kind(other),
                    format.table_word()
                )));
            }
        };
    }
    Ok(Some(node))
}

/// The document's root as an object to edit; an empty YAML document (only
/// comments) is an empty mapping.
fn root_object(format: FileFormat, document: &Value) -> Result<Map<String, Value>, DocumentError> {
    match document {
        Value::Object(map) => Ok(map.clone()),
        Value::Null if format == FileFormat::Yaml => Ok(Map::new()),
        other => Err(DocumentError(format!(
            "the {} document is {}, not {}: it has no keys to edit",
            format.label(),
            kind(other),
            format.table_word()
        ))),
    }
}

/// `value` under the keys of `key`, outermost first.
fn nested(key: &[String], value: Value) -> Value {
    key.iter().rev().fold(value, |inner, segment| {
        Value::Object(Map::from_iter([(segment.clone(), inner)]))
    })
}

/// `root` with `value` at `key`, as [`set_key`] promises: what an edit
/// must read back as.
fn set_in(root: &mut Map<String, Value>, key: &[String], value: Value) {
    let Some((last, parents)) = key.split_last() else {
        return;
    };
    let mut map = root;
    for segment in parents {
        let child = map.entry(segment.clone()).or_insert(Value::Null);
        if !child.is_object() {
            *child = Value::Object(Map::new());
        }
        let Value::Object(inner) = child else {
            return;
        };
        map = inner;
    }
    map.insert(last.clone(), value);
}

/// `root` without the value at `key`.
fn remove_in(root: &mut Map<String, Value>, key: &[String]) {
    let Some((last, parents)) = key.split_last() else {
        return;
    };
    let mut map = root;
    for segment in parents {
        match map.get_mut(segment) {
            Some(Value::Object(inner)) => map = inner,
            _ => return,
        }
    }
    map.remove(last);
}

/// `edited` if it reads back as `expected`, else an error: an editor that
/// would touch more than the key must not produce the file.
fn check(
    format: FileFormat,
    edited: String,
    expected: &Value,
    key: &[String],
) -> Result<String, DocumentError> {
    let what = dotted(key);
    match parse(format, &edited) {
        Ok(value) if &value == expected => Ok(edited),
        Ok(_) => {
            // In YAML the usual cause: an alias elsewhere shares the value.
            let hint = if format == FileFormat::Yaml {
                " (an alias may refer to it)"
            } else {
                ""
            };
            Err(DocumentError(format!(
                "the {} editor could not change {what} without changing other entries{hint}; edit the file by hand",
                format.label()
            )))
        }
        Err(err) => Err(DocumentError(format!(
            "the {} editor could not change {what} and keep the file valid ({err}); edit the file by hand",
            format.label()
        ))),
    }
}

/// A key path as people write it: `pools.alice`.
fn dotted(key: &[String]) -> String {
    key.join(".")
}

/// A value's kind in a sentence.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a group of keys",
    }
}

/// Line and column (1-based) of a byte offset, for parsers that report a
/// span.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit('\n')
        .next()
        .map_or(0, |rest| rest.chars().count())
        + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    const ALL: [FileFormat; 3] = [FileFormat::Json, FileFormat::Yaml, FileFormat::Toml];

    #[test]
    fn formats_are_named_by_configuration_and_by_extension() {
        for format in ALL {
            assert_eq!(FileFormat::from_name(format.as_str()), Some(format));
        }
        assert_eq!(FileFormat::from_name("yml"), None);
        assert_eq!(FileFormat::from_name("JSON"), None);
        assert_eq!(FileFormat::of_path("pools/a.json"), Some(FileFormat::Json));
        assert_eq!(FileFormat::of_path("values.yaml"), Some(FileFormat::Yaml));
        assert_eq!(FileFormat::of_path("values.yml"), Some(FileFormat::Yaml));
        assert_eq!(
            FileFormat::of_path("dir.v2/Cargo.toml"),
            Some(FileFormat::Toml)
        );
        assert_eq!(FileFormat::of_path("README"), None);
        assert_eq!(FileFormat::of_path("notes.txt"), None);
    }

    #[test]
    fn an_empty_key_and_a_blank_file_have_plain_answers() {
        for format in ALL {
            let err = set_key(format, None, &[], &json!(1)).unwrap_err();
            assert!(err.to_string().starts_with("the key is empty"), "{err}");
            assert!(remove_key(format, "a = 1", &[]).is_err());
            let key = ["a".to_owned()];
            assert_eq!(value_at(format, " \n", &key), Ok(None));
            assert_eq!(remove_key(format, "\n", &key).unwrap(), "\n");
            assert_eq!(
                value_at(format, &render(format, &json!({})).unwrap(), &key),
                Ok(None)
            );
        }
    }

    fn leaf(format: FileFormat) -> BoxedStrategy<Value> {
        let text = prop_oneof![
            "[ -~\t\né✓]{0,12}",
            prop::sample::select(vec![
                "yes", "n", "null", "~", "012", "1e3", "- x", "a: b", "#c", ""
            ])
            .prop_map(str::to_owned),
        ];
        let common = prop_oneof![
            text.prop_map(Value::String),
            any::<i64>().prop_map(Value::from),
            any::<bool>().prop_map(Value::Bool),
            // Finite floats that serde_json reads back from their shortest
            // spelling: its default parser is not exact for every 17-digit
            // float (`float_roundtrip` would change parsing crate-wide), so
            // a JSON edit of such a float is refused by the read-back check.
            (-1e12f64..1e12)
                .prop_filter("serde_json reads it back", |float| {
                    serde_json::from_str::<f64>(&float.to_string()).ok() == Some(*float)
                })
                .prop_map(Value::from),
        ];
        if format == FileFormat::Toml {
            // TOML has no null: set_key refuses one (tested on its own).
            common.boxed()
        } else {
            prop_oneof![common, Just(Value::Null)].boxed()
        }
    }

    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z]{1,8}",
            // Keys a YAML 1.1 reader takes for booleans or null.
            prop::sample::select(vec!["yes", "no", "y", "n", "on", "off", "null", "true"])
                .prop_map(str::to_owned),
        ]
    }

    fn value(format: FileFormat) -> impl Strategy<Value = Value> {
        leaf(format).prop_recursive(3, 16, 4, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map(name(), inner, 0..4)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    fn object(format: FileFormat) -> impl Strategy<Value = Value> {
        prop::collection::btree_map(name(), value(format), 0..4)
            .prop_map(|map| Value::Object(map.into_iter().collect()))
    }

    fn case() -> impl Strategy<Value = (FileFormat, Value, Vec<String>, Value)> {
        prop::sample::select(ALL.to_vec()).prop_flat_map(|format| {
            (
                Just(format),
                object(format),
                prop::collection::vec(name(), 1..4),
                value(format),
            )
        })
    }

    proptest! {
        #[test]
        fn set_key_then_value_at_reads_the_value_back((format, document, key, value) in case()) {
            let fresh = set_key(format, None, &key, &value).unwrap();
            prop_assert_eq!(value_at(format, &fresh, &key).unwrap(), Some(value.clone()));

            let text = render(format, &document).unwrap();
            prop_assert_eq!(parse(format, &text).unwrap(), document.clone());
            // A key under a value that is not a table/mapping is refused.
            let Ok(edited) = set_key(format, Some(&text), &key, &value) else {
                prop_assert!(lookup(format, &document, &key).is_err());
                return Ok(());
            };
            prop_assert_eq!(value_at(format, &edited, &key).unwrap(), Some(value.clone()));
            prop_assert_eq!(set_key(format, Some(&edited), &key, &value).unwrap(), edited.clone());
            let removed = remove_key(format, &edited, &key).unwrap();
            prop_assert_eq!(value_at(format, &removed, &key).unwrap(), None);
        }
    }
}
