//! What an adoption takes into the binding: the parameters the file on the
//! target branch holds, where they can be read back. changegate's own
//! document keeps them under `params`; a shared file's key holds them as
//! its value. A templated file cannot be read back (a template need not
//! show every parameter), so its adoption only accepts the content.

use serde_json::Value;

use super::shared::{value_at, value_id};
use crate::clients::gitlab::git_blob_id;
use crate::config::Settings;
use crate::files::document;
use crate::files::layout::{FileChange, Layout};

/// The place of a finding in its file: the file, and for a key of a shared
/// file, the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The file.
    pub file: String,
    /// The key, for a shared file's entry.
    pub key: Option<Vec<String>>,
}

/// Where the finding at `place` of the binding `(target, subject)` sits, by
/// the target's layout: a shared file's key is reported as
/// `<file>#<dotted key>`.
pub fn place_of(settings: &Settings, binding: (Option<&str>, Option<&str>), place: &str) -> Place {
    let whole = || Place {
        file: place.to_owned(),
        key: None,
    };
    let (Some(target_key), Some(subject)) = binding else {
        return whole();
    };
    let Some(target) = settings.targets.get(target_key) else {
        return whole();
    };
    match target.layout.remove(target_key, subject) {
        FileChange::Key { path, key, .. } if super::location(&path, &key) == place => Place {
            file: path,
            key: Some(key),
        },
        _ => whole(),
    }
}

/// The parameters `text` (the file at `place`, as the target branch holds
/// it) gives the binding of `target_key`, if they can be read back, are
/// still what the finding recorded (`recorded`: its blob id) and pass the
/// target's schema (with its defaults filled in).
pub fn adoptable_params(
    settings: &Settings,
    target_key: &str,
    place: &Place,
    text: &str,
    recorded: Option<&str>,
) -> Option<Value> {
    let target = settings.targets.get(target_key)?;
    let params = match (&target.layout, &place.key) {
        (
            Layout::FilePerBinding {
                format,
                template: None,
                ..
            },
            None,
        ) => {
            if recorded != Some(git_blob_id(text).as_str()) {
                return None;
            }
            document::parse(*format, text).ok()?.get("params")?.clone()
        }
        (Layout::SharedKey { format, .. }, Some(key)) => {
            let document = document::parse(*format, text).ok()?;
            let value = value_at(*format, &document, key)?;
            if recorded != Some(value_id(value).as_str()) {
                return None;
            }
            value.clone()
        }
        _ => return None,
    };
    target.params.check(&params).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::source;

    fn settings() -> Settings {
        let text = r#"
            [gitlab]
            base_url = "https://gitlab.example"
            project = "config/repo"
            [targets.templated]
            description = "templated"
            template = "owner = \"{{ subject }}\"\n"
            path = "t/{subject}.toml"
            format = "toml"
            [targets.pools]
            description = "shared"
            params = ["size"]
            edit = { file = "pools.yaml", key = "pools.{subject}" }
            format = "yaml"
            [targets.own]
            description = "own document"
            [targets.own.params_schema]
            type = "object"
            required = ["tier"]
            properties.size = { type = "integer", default = 1 }
            properties.tier = { type = "string" }
        "#;
        let table = source::parse(text).expect("toml");
        let (settings, problems) = Settings::from_table(&table, None);
        assert!(problems.is_empty(), "{problems:?}");
        settings
    }

    #[test]
    fn a_shared_key_is_placed_in_its_file_and_a_whole_file_is_its_own_place() {
        let settings = settings();
        assert_eq!(
            place_of(&settings, (Some("pools"), Some("a")), "pools.yaml#pools.a"),
            Place {
                file: "pools.yaml".to_owned(),
                key: Some(vec!["pools".to_owned(), "a".to_owned()])
            }
        );
        let own = "bindings/own/a.json";
        assert_eq!(place_of(&settings, (Some("own"), Some("a")), own).file, own);
        assert_eq!(place_of(&settings, (None, None), own).key, None);
    }

    #[test]
    fn own_documents_and_shared_keys_give_their_parameters_back_checked_and_filled() {
        let settings = settings();
        let own = place_of(&settings, (Some("own"), Some("a")), "bindings/own/a.json");
        let text = r#"{"subject":"a","target":"own","params":{"tier":"gold"}}"#;
        assert_eq!(
            adoptable_params(&settings, "own", &own, text, Some(&git_blob_id(text))),
            Some(json!({"tier": "gold", "size": 1}))
        );
        // Not what the pass recorded (the file moved on), or not the schema.
        assert_eq!(
            adoptable_params(&settings, "own", &own, text, Some("other")),
            None
        );
        let bad = r#"{"params":{"size":2}}"#;
        assert_eq!(
            adoptable_params(&settings, "own", &own, bad, Some(&git_blob_id(bad))),
            None
        );

        let key = place_of(&settings, (Some("pools"), Some("a")), "pools.yaml#pools.a");
        let text = "pools:\n  a: {size: '9'}\n  b: {size: '1'}\n";
        let value = json!({"size": "9"});
        assert_eq!(
            adoptable_params(&settings, "pools", &key, text, Some(&value_id(&value))),
            Some(value)
        );
    }

    #[test]
    fn a_templated_file_is_never_read_back() {
        let settings = settings();
        let place = place_of(&settings, (Some("templated"), Some("a")), "t/a.toml");
        let text = "size = 3\n";
        assert_eq!(
            adoptable_params(
                &settings,
                "templated",
                &place,
                text,
                Some(&git_blob_id(text))
            ),
            None
        );
    }
}
