use super::*;
use crate::config::source;

fn projects(toml: &str) -> Projects {
    let table = source::parse(toml).expect("valid TOML");
    let (settings, problems) = Settings::from_table(&table, None);
    assert!(problems.is_empty(), "{problems:?}");
    Projects::of(&settings)
}

const TWO_BY_PATH: &str = "[gitlab]\nproject = \"Team/A\"\n\
    [targets.\"a.flags\"]\n[targets.\"b.flags\"]\nproject = \"team/b\"\n";

fn key(name: &str) -> ProjectKey {
    ProjectKey::new(name)
}

#[test]
fn one_project_is_the_default_for_a_callback_naming_none() {
    let single = projects("[gitlab]\nproject = \"config/repo\"\n[targets.\"a\"]\n");
    assert_eq!(
        single.resolve(None),
        Ok(NamedProject::Known(key("config/repo")))
    );
    let elsewhere = projects(
        "[gitlab]\nproject = \"config/repo\"\n[targets.\"a\"]\nproject = \"other/repo\"\n",
    );
    assert_eq!(
        elsewhere.resolve(None),
        Ok(NamedProject::Known(key("other/repo"))),
        "the one project the targets use, even if it is not gitlab.project"
    );
    let empty = projects("[gitlab]\nproject = \"42\"\n");
    assert_eq!(empty.resolve(None), Ok(NamedProject::Known(key("42"))));
}

#[test]
fn several_projects_need_the_callback_to_name_one() {
    let two = projects(TWO_BY_PATH);
    let err = two.resolve(None).unwrap_err();
    assert_eq!(err, ProjectError::Required("team/a, team/b".to_owned()));
    assert!(
        err.to_string().contains("field `project`: required"),
        "{err}"
    );
    assert_eq!(two.resolve(Some(" ")), Err(ProjectError::Empty));
}

#[test]
fn paths_match_case_insensitively_and_ids_match_ids() {
    let two = projects(TWO_BY_PATH);
    assert_eq!(
        two.resolve(Some("TEAM/b")),
        Ok(NamedProject::Known(key("team/b")))
    );
    assert_eq!(
        two.resolve(Some("team/a")),
        Ok(NamedProject::Known(key("team/a"))),
        "`Team/A` in the configuration"
    );
    assert_eq!(
        two.resolve(Some("team/c")),
        Ok(NamedProject::Unknown(key("team/c"))),
        "a path no target uses cannot be one of the configured paths"
    );
    let by_id =
        projects("[gitlab]\nproject = \"7\"\n[targets.\"a\"]\n[targets.\"b\"]\nproject = \"8\"\n");
    assert_eq!(by_id.resolve(Some("8")), Ok(NamedProject::Known(key("8"))));
    assert_eq!(
        by_id.resolve(Some("9")),
        Ok(NamedProject::Unknown(key("9")))
    );
}

#[test]
fn a_form_the_configuration_does_not_use_cannot_be_matched() {
    let two = projects(TWO_BY_PATH);
    let err = two.resolve(Some("12")).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("cannot match a numeric id against projects configured by path")
            && message.contains("team/a, team/b"),
        "{message}"
    );
    let mixed = projects(
        "[gitlab]\nproject = \"7\"\n[targets.\"a\"]\n[targets.\"b\"]\nproject = \"team/b\"\n",
    );
    assert_eq!(mixed.resolve(Some("7")), Ok(NamedProject::Known(key("7"))));
    assert!(
        matches!(mixed.resolve(Some("9")), Err(ProjectError::Unmatchable { ref configured, .. }) if configured == "team/b"),
        "9 may be team/b's id"
    );
    assert!(matches!(
        mixed.resolve(Some("team/c")),
        Err(ProjectError::Unmatchable { ref configured, .. }) if configured == "7"
    ));
}

#[test]
fn the_default_project_owns_legacy_reports_and_uncatalogued_targets() {
    let two = projects(TWO_BY_PATH);
    assert_eq!(two.default_key(), &key("team/a"));
    assert_eq!(two.report_keys(&key("team/a")), vec!["team/a", ""]);
    assert_eq!(two.report_keys(&key("team/b")), vec!["team/b"]);
    assert_eq!(
        two.target_filter(&key("team/a")),
        TargetFilter::NotIn(vec!["b.flags".to_owned()])
    );
    assert_eq!(
        two.target_filter(&key("team/b")),
        TargetFilter::In(vec!["b.flags".to_owned()])
    );
    let keys: Vec<&str> = two.keys().map(ProjectKey::as_str).collect();
    assert_eq!(keys, ["team/a", "team/b"]);
}
