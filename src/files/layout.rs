//! Where a target's bindings live in the repository and what they say
//! there: a file per binding (changegate's own JSON document, or a template
//! in the repository's format), or one key of a file shared by many
//! bindings. Whatever the layout, the same binding renders the same bytes
//! every time, and nothing that does not parse as its format is ever
//! proposed.

use serde_json::{Map, Value};

use super::document::{self, FileFormat};
use super::template::{FileTemplate, TemplateContext};
use crate::domain::render::{BindingFile, file_path};

/// A target's layout, from `path`, `format`, `template` and `edit`.
#[derive(Debug, Clone, PartialEq)]
pub enum Layout {
    /// One file per binding at `path` (with `{target}` and `{subject}`).
    FilePerBinding {
        /// The path template.
        path: String,
        /// The file's format.
        format: FileFormat,
        /// The template; none: the binding document in `format`.
        template: Option<FileTemplate>,
    },
    /// The binding is the value at `key` in the shared `file`.
    SharedKey {
        /// The file's path template (`{target}` may appear).
        file: String,
        /// The key's segments, each a template with `{subject}` and `{target}`.
        key: Vec<String>,
        /// The file's format.
        format: FileFormat,
    },
}

/// What one request does to the repository.
#[derive(Debug, Clone, PartialEq)]
pub enum FileChange {
    /// The whole file at `path`: written with `content`, or deleted.
    Whole {
        /// The file.
        path: String,
        /// Its exact bytes; none: the file is deleted.
        content: Option<String>,
    },
    /// One key of the shared file at `path`: set to `value`, or removed.
    Key {
        /// The file.
        path: String,
        /// The file's format.
        format: FileFormat,
        /// The key, one segment per level.
        key: Vec<String>,
        /// The value; none: the key is removed.
        value: Option<Value>,
    },
}

impl FileChange {
    /// The file the change touches.
    pub fn path(&self) -> &str {
        match self {
            Self::Whole { path, .. } | Self::Key { path, .. } => path,
        }
    }

    /// The bytes the change carries, for sizing a commit.
    pub fn weight(&self) -> usize {
        self.path().len()
            + match self {
                Self::Whole { content, .. } => content.as_ref().map_or(0, String::len),
                Self::Key { key, value, .. } => {
                    key.iter().map(String::len).sum::<usize>()
                        + value.as_ref().map_or(0, |v| v.to_string().len())
                }
            }
    }
}

impl Layout {
    /// Today's layout: `bindings/{target}/{subject}.json`, changegate's document.
    pub fn default_file() -> Self {
        Self::FilePerBinding {
            path: "bindings/{target}/{subject}.json".to_owned(),
            format: FileFormat::Json,
            template: None,
        }
    }

    /// The file a binding of `target` for `subject` lives in.
    pub fn path(&self, target: &str, subject: &str) -> String {
        match self {
            Self::FilePerBinding { path, .. } => file_path(path, target, subject),
            Self::SharedKey { file, .. } => file_path(file, target, subject),
        }
    }

    /// The file's format.
    pub fn format(&self) -> FileFormat {
        match self {
            Self::FilePerBinding { format, .. } | Self::SharedKey { format, .. } => *format,
        }
    }

    /// The layout as the catalog and the effective configuration show it.
    pub fn summary(&self) -> Value {
        match self {
            Self::FilePerBinding {
                path,
                format,
                template,
            } => serde_json::json!({
                "path": path,
                "format": format.as_str(),
                "templated": template.is_some(),
            }),
            Self::SharedKey { file, key, format } => serde_json::json!({
                "edit": { "file": file, "key": key.join(".") },
                "format": format.as_str(),
            }),
        }
    }

    /// What an apply writes for `binding`, or why it cannot be written: a
    /// template that fails, or output that does not parse as the format.
    pub fn write(&self, binding: &TemplateContext<'_>) -> Result<FileChange, String> {
        let path = self.path(binding.target, binding.subject);
        match self {
            Self::FilePerBinding {
                format, template, ..
            } => {
                let content = match template {
                    Some(template) => template.render(binding)?,
                    None => own_document(*format, binding)?,
                };
                document::parse(*format, &content).map_err(|err| {
                    format!("the rendered file is not valid {}: {err}", format.as_str())
                })?;
                Ok(FileChange::Whole {
                    path,
                    content: Some(content),
                })
            }
            Self::SharedKey { key, format, .. } => {
                let key = key_of(key, binding.target, binding.subject);
                // Written into an empty document first: a value the format
                // cannot hold (TOML has no null) is refused here, at submit,
                // not when the shared file is edited.
                document::set_key(*format, None, &key, binding.params)
                    .map_err(|err| format!("the value cannot be written: {err}"))?;
                Ok(FileChange::Key {
                    path,
                    format: *format,
                    key,
                    value: Some(binding.params.clone()),
                })
            }
        }
    }

    /// Where a shared file keeps its bindings' entries: the key before the
    /// segment that is exactly `{subject}` and the key after it, with the
    /// target put in. None for a file per binding, or a key that names the
    /// subject in no segment, or in a segment with other text, or twice:
    /// then an entry's subject cannot be read from its key.
    pub fn entries_at(&self, target: &str) -> Option<(Vec<String>, Vec<String>)> {
        let Self::SharedKey { key, .. } = self else {
            return None;
        };
        let at = key.iter().position(|segment| segment == "{subject}")?;
        let (before, after) = (&key[..at], &key[at + 1..]);
        if before
            .iter()
            .chain(after)
            .any(|segment| segment.contains("{subject}"))
        {
            return None;
        }
        Some((key_of(before, target, ""), key_of(after, target, "")))
    }

    /// What a close does: delete the binding's file, or remove its key.
    pub fn remove(&self, target: &str, subject: &str) -> FileChange {
        let path = self.path(target, subject);
        match self {
            Self::FilePerBinding { .. } => FileChange::Whole {
                path,
                content: None,
            },
            Self::SharedKey { key, format, .. } => FileChange::Key {
                path,
                format: *format,
                key: key_of(key, target, subject),
                value: None,
            },
        }
    }
}

/// The key's segments with the binding's names put in. Segments are split
/// before substituting, so a subject with a dot stays one segment.
fn key_of(segments: &[String], target: &str, subject: &str) -> Vec<String> {
    segments
        .iter()
        .map(|segment| file_path(segment, target, subject))
        .collect()
}

/// changegate's own binding document in `format`. JSON keeps today's bytes
/// (a fixed key order); YAML and TOML write the same fields, sorted, and
/// leave out an expiry that is not set (TOML has no null).
fn own_document(format: FileFormat, binding: &TemplateContext<'_>) -> Result<String, String> {
    let expires_at = binding.expires_at.map(str::to_owned);
    if format == FileFormat::Json {
        return Ok(BindingFile {
            subject: binding.subject,
            target: binding.target,
            params: binding.params,
            expires_at,
            operation_id: binding.operation_id,
            requested_by: binding.requested_by,
        }
        .render());
    }
    let mut fields = Map::new();
    fields.insert("subject".into(), binding.subject.into());
    fields.insert("target".into(), binding.target.into());
    fields.insert("params".into(), binding.params.clone());
    if let Some(at) = expires_at {
        fields.insert("expiresAt".into(), at.into());
    }
    fields.insert("operationId".into(), binding.operation_id.into());
    fields.insert("requestedBy".into(), binding.requested_by.into());
    document::render(format, &Value::Object(fields)).map_err(|err| err.to_string())
}

/// `current` (the shared file as it is, none when it does not exist yet)
/// with every edit applied in order: none when the file does not exist and
/// nothing is to be set in it.
pub fn edited(
    format: FileFormat,
    current: Option<&str>,
    edits: &[(&[String], Option<&Value>)],
) -> Result<Option<String>, String> {
    let mut text = current.map(str::to_owned);
    for (key, value) in edits {
        text = match (value, text) {
            (Some(value), text) => Some(
                document::set_key(format, text.as_deref(), key, value)
                    .map_err(|err| err.to_string())?,
            ),
            (None, Some(text)) => {
                Some(document::remove_key(format, &text, key).map_err(|err| err.to_string())?)
            }
            (None, None) => None,
        };
    }
    Ok(text)
}

/// Whether the shared file `text` holds `value` at `key` (none: holds no
/// value there). A file that no longer parses holds nothing as rendered.
pub fn holds(
    format: FileFormat,
    text: Option<&str>,
    key: &[String],
    value: Option<&Value>,
) -> bool {
    let there = match text {
        Some(text) => match document::value_at(format, text, key) {
            Ok(there) => there,
            Err(_) => return false,
        },
        None => None,
    };
    there.as_ref() == value
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn binding(params: &Value) -> TemplateContext<'_> {
        TemplateContext {
            subject: "team.a",
            target: "db.pools",
            params,
            expires_at: None,
            operation_id: "3f2504e0-4f89-11d3-9a0c-0305e82c3301",
            requested_by: "alice",
        }
    }

    #[test]
    fn the_default_layout_writes_todays_document_byte_for_byte() {
        let params = json!({ "a": 1 });
        let change = Layout::default_file()
            .write(&binding(&params))
            .expect("renders");
        let expected = BindingFile {
            subject: "team.a",
            target: "db.pools",
            params: &params,
            expires_at: None,
            operation_id: "3f2504e0-4f89-11d3-9a0c-0305e82c3301",
            requested_by: "alice",
        }
        .render();
        assert_eq!(
            change,
            FileChange::Whole {
                path: "bindings/db.pools/team.a.json".to_owned(),
                content: Some(expected)
            }
        );
    }

    #[test]
    fn a_template_whose_output_does_not_parse_is_refused_with_the_reason() {
        let layout = Layout::FilePerBinding {
            path: "values/{subject}.yaml".to_owned(),
            format: FileFormat::Yaml,
            template: Some(FileTemplate::compile("size: [{{ params.size }}\n").expect("compiles")),
        };
        let err = layout
            .write(&binding(&json!({ "size": 5 })))
            .expect_err("broken YAML");
        assert!(
            err.starts_with("the rendered file is not valid yaml"),
            "{err}"
        );
    }

    #[test]
    fn a_shared_key_keeps_a_dotted_subject_as_one_segment() {
        let layout = Layout::SharedKey {
            file: "config/pools.toml".to_owned(),
            key: vec!["pools".to_owned(), "{subject}".to_owned()],
            format: FileFormat::Toml,
        };
        let params = json!({ "size": 5 });
        let FileChange::Key { key, path, .. } = layout.write(&binding(&params)).expect("writes")
        else {
            panic!("a key change");
        };
        assert_eq!(path, "config/pools.toml");
        assert_eq!(key, ["pools", "team.a"]);
        let refused = layout.write(&binding(&json!({ "size": null })));
        assert!(refused.is_err(), "TOML has no null: {refused:?}");
    }

    #[test]
    fn edits_of_one_file_apply_in_order_and_a_removal_from_no_file_makes_none() {
        let pools = ["pools".to_owned(), "a".to_owned()];
        let other = ["pools".to_owned(), "b".to_owned()];
        let text = edited(
            FileFormat::Toml,
            Some("# shared\n[pools.c]\nsize = 1\n"),
            &[
                (&pools, Some(&json!({ "size": 2 }))),
                (&other, Some(&json!({ "size": 3 }))),
            ],
        )
        .expect("edits")
        .expect("a file");
        assert!(
            text.starts_with("# shared\n[pools.c]\nsize = 1\n"),
            "{text}"
        );
        assert!(holds(
            FileFormat::Toml,
            Some(&text),
            &pools,
            Some(&json!({ "size": 2 }))
        ));
        assert!(holds(
            FileFormat::Toml,
            Some(&text),
            &other,
            Some(&json!({ "size": 3 }))
        ));
        assert!(!holds(FileFormat::Toml, Some(&text), &other, None));
        assert_eq!(edited(FileFormat::Toml, None, &[(&pools, None)]), Ok(None));
        assert!(holds(FileFormat::Toml, None, &pools, None));
    }
}
