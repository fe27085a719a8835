//! The target catalog's keys: each way a schema, a template or an edit can
//! be wrong is an error naming its key, and the layouts they make.

use serde_json::json;

use super::*;
use crate::config::{Problem, Settings, Severity, source};

fn load(text: &str) -> (Settings, Vec<Problem>) {
    Settings::from_table(&source::parse(text).unwrap(), None)
}

/// The errors, as (key, message).
fn errors(text: &str) -> Vec<(String, String)> {
    load(text)
        .1
        .into_iter()
        .filter(|p| p.severity == Severity::Error)
        .map(|p| (p.key, p.message))
        .collect()
}

fn assert_error(text: &str, key: &str, says: &str) {
    let errors = errors(text);
    assert!(
        errors.iter().any(|(k, m)| k == key && m.contains(says)),
        "expected {key}: …{says}… in {errors:?}"
    );
}

#[test]
fn a_schema_that_cannot_be_used_is_an_error_naming_its_key() {
    assert_error(
        "[targets.t.params_schema]\ntype = \"object\"\nproperties.n = { type = \"integr\" }\n",
        "targets.t.params_schema",
        "not a valid JSON Schema",
    );
    assert_error(
        "[targets.t.params_schema]\ntype = \"array\"\n",
        "targets.t.params_schema",
        "type = \"object\"",
    );
    assert_error(
        "[targets.t]\nparams = [\"a\"]\nparams_schema = { type = \"object\" }\n",
        "targets.t",
        "give one of params, params_schema and params_schema_file",
    );
    assert_error(
        "[targets.t]\nparams_schema_file = \"/nonexistent/schema.json\"\n",
        "targets.t.params_schema_file",
        "cannot read /nonexistent/schema.json",
    );
}

#[test]
fn a_schema_file_is_read_relative_to_the_configuration_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("pools.schema.json"),
        r#"{"type": "object", "properties": {"size": {"type": "integer", "default": 3}}}"#,
    )
    .unwrap();
    let config = dir.path().join("changegate.toml");
    std::fs::write(
        &config,
        "[targets.t]\nparams_schema_file = \"pools.schema.json\"\n",
    )
    .unwrap();
    let (settings, problems) = crate::config::load(Some(&config), None).expect("loads");
    assert!(problems.is_empty(), "{problems:?}");
    let target = &settings.targets["t"];
    assert_eq!(target.params.check(&json!({})), Ok(json!({ "size": 3 })));
}

#[test]
fn a_template_that_fails_or_writes_what_does_not_parse_is_an_error_at_load() {
    assert_error(
        "[targets.t]\npath = \"v/{subject}.yaml\"\ntemplate = \"a: {{ params.x\"\n",
        "targets.t.template",
        "syntax error",
    );
    assert_error(
        "[targets.t]\npath = \"v/{subject}.yaml\"\ntemplate = \"a: {{ params.missing }}\\n\"\n",
        "targets.t.template",
        "undefined",
    );
    // The example value of a string parameter is bare text: `a: b: example`.
    assert_error(
        "[targets.t]\npath = \"v/{subject}.yaml\"\ntemplate = \"a: b: {{ params.x }}\\n\"\n\
         [targets.t.params_schema]\ntype = \"object\"\nrequired = [\"x\"]\nproperties.x = { type = \"string\" }\n",
        "targets.t.template",
        "not valid yaml",
    );
    assert!(errors(
        "[targets.t]\npath = \"v/{subject}.yaml\"\ntemplate = \"a: {{ params.x | tojson }}\\n\"\n\
         [targets.t.params_schema]\ntype = \"object\"\nrequired = [\"x\"]\nproperties.x = { type = \"string\" }\n",
    )
    .is_empty());
}

#[test]
fn a_template_that_fails_without_an_optional_parameter_is_an_error_at_load() {
    assert_error(
        "[targets.t]\npath = \"v/{subject}.yaml\"\n\
         template = \"{% if params.debug %}debug: true{% endif %}\\nname: x\\n\"\n\
         [targets.t.params_schema]\ntype = \"object\"\nproperties.debug = { type = \"boolean\" }\n",
        "targets.t.template",
        "undefined",
    );
}

#[test]
fn two_targets_whose_keys_in_one_file_can_meet_are_an_error() {
    for (a, b) in [
        ("pools.{subject}", "pools.{subject}"),
        ("pools.{subject}", "pools.{subject}.replica"),
        ("pools.{subject}", "pools.reports"),
    ] {
        assert_error(
            &format!(
                "[targets.a]\nedit = {{ file = \"p.toml\", key = \"{a}\" }}\n\
                 [targets.b]\nedit = {{ file = \"p.toml\", key = \"{b}\" }}\n"
            ),
            "targets.b.edit.key",
            "can meet targets.a's key in p.toml",
        );
    }
    let apart = "[targets.a]\nedit = { file = \"p.toml\", key = \"pools.{subject}\" }\n\
                 [targets.b]\nedit = { file = \"p.toml\", key = \"caches.{subject}\" }\n\
                 [targets.c]\nedit = { file = \"q.toml\", key = \"pools.{subject}\" }\n";
    assert!(errors(apart).is_empty(), "{:?}", errors(apart));
}

#[test]
fn an_edit_names_its_file_and_a_key_with_the_subject() {
    assert_error(
        "[targets.t]\nedit = { file = \"pools.toml\", key = \"pools\" }\n",
        "targets.t.edit.key",
        "containing {subject}",
    );
    assert_error(
        "[targets.t]\nedit = { file = \"pools.toml\", key = \"pools..{subject}\" }\n",
        "targets.t.edit.key",
        "dotted key",
    );
    assert_error(
        "[targets.t]\nedit = { file = \"pools.txt\", key = \"p.{subject}\" }\n",
        "targets.t.format",
        "json, yaml or toml",
    );
    assert_error(
        "[targets.t]\ntemplate = \"x\"\nedit = { file = \"p.toml\", key = \"p.{subject}\" }\n",
        "targets.t",
        "template or edit, not both",
    );
    assert_error(
        "[targets.t]\nformat = \"ini\"\n",
        "targets.t.format",
        "\"ini\" is not json, yaml or toml",
    );
    let (settings, problems) =
        load("[targets.t]\nedit = { file = \"config/pools.toml\", key = \"pools.{subject}\" }\n");
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        settings.targets["t"].layout,
        Layout::SharedKey {
            file: "config/pools.toml".to_owned(),
            key: vec!["pools".to_owned(), "{subject}".to_owned()],
            format: FileFormat::Toml,
        }
    );
}

#[test]
fn a_target_that_names_nothing_keeps_todays_json_file() {
    let (settings, problems) = load("[targets.t]\n");
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(settings.targets["t"].layout, Layout::default_file());
    assert_eq!(settings.targets["t"].params, ParamsSchema::of_names(&[]));
}
