//! Secrets from `_file` keys: each way a file can be wrong, both forms at
//! once, newline trimming, the reviewer list and the database password.

use std::path::Path;

use secrecy::ExposeSecret;
use tempfile::TempDir;

use super::*;
use crate::config::{Problem, Settings, Severity, effective, source};

fn load(text: &str) -> (Settings, Vec<Problem>) {
    Settings::from_table(&source::parse(text).unwrap(), None)
}

fn errors(problems: &[Problem]) -> Vec<(String, String)> {
    problems
        .iter()
        .filter(|p| p.severity == Severity::Error)
        .map(|p| (p.key.clone(), p.message.clone()))
        .collect()
}

/// `path` as a TOML string.
fn quoted(path: &Path) -> String {
    format!("{:?}", path.display().to_string())
}

/// A file `name` holding `content` in `dir`.
fn secret_file(dir: &TempDir, name: &str, content: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, content).unwrap();
    path
}

fn bot_token(settings: &Settings) -> Option<&str> {
    settings
        .gitlab
        .bot_token
        .as_ref()
        .map(ExposeSecret::expose_secret)
}

#[test]
fn a_secret_file_is_read_with_its_trailing_newlines_trimmed() {
    let dir = tempfile::tempdir().unwrap();
    for (content, expected) in [
        ("glpat-abc\n", "glpat-abc"),
        ("glpat-abc\r\n", "glpat-abc"),
        ("glpat-abc\n\n", "glpat-abc"),
        ("glpat-abc", "glpat-abc"),
        (" glpat abc \n", " glpat abc "),
    ] {
        let path = secret_file(&dir, "token", content);
        let (settings, problems) = load(&format!("[gitlab]\nbot_token_file = {}\n", quoted(&path)));
        assert!(problems.is_empty(), "{content:?}: {problems:?}");
        assert_eq!(bot_token(&settings), Some(expected), "{content:?}");
        assert_eq!(settings.secret_files.get("gitlab.bot_token_file"), [path]);
    }
}

#[test]
fn every_secret_key_has_a_file_form() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str| quoted(&secret_file(&dir, name, &format!("{name}-value\n")));
    let (settings, problems) = load(&format!(
        "[approval]\ncallback_secret_file = {}\n[deploy]\ncallback_secret_file = {}\n\
         [identity.jwt]\nhs256_secret_file = {}\nrs256_public_key_file = {}\n",
        file("approval"),
        file("deploy"),
        file("hs256"),
        file("rs256"),
    ));
    assert!(problems.is_empty(), "{problems:?}");
    let exposed = |secret: Option<&SecretString>| secret.map(|s| s.expose_secret().to_owned());
    assert_eq!(
        exposed(settings.approval.callback_secret.as_ref()).as_deref(),
        Some("approval-value")
    );
    assert_eq!(
        exposed(settings.deploy_callback_secret.as_ref()).as_deref(),
        Some("deploy-value")
    );
    assert_eq!(
        exposed(settings.identity.jwt.hs256_secret.as_ref()).as_deref(),
        Some("hs256-value")
    );
    assert_eq!(
        settings.identity.jwt.rs256_public_key.as_deref(),
        Some("rs256-value")
    );
    assert_eq!(settings.secret_files.paths().count(), 4);
}

#[test]
fn a_missing_secret_file_is_an_error_naming_the_file_key_and_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent-token");
    let (_, problems) = load(&format!("[gitlab]\nbot_token_file = {}\n", quoted(&path)));
    let errors = errors(&problems);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, "gitlab.bot_token_file");
    assert!(
        errors[0]
            .1
            .starts_with(&format!("cannot read {}", path.display())),
        "{}",
        errors[0].1
    );
}

#[test]
fn an_empty_secret_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    for content in ["", "\n", "\r\n", " \n"] {
        let path = secret_file(&dir, "secret", content);
        let (_, problems) = load(&format!(
            "[deploy]\ncallback_secret_file = {}\n",
            quoted(&path)
        ));
        assert_eq!(
            errors(&problems),
            [(
                "deploy.callback_secret_file".to_owned(),
                format!("{} is empty", path.display())
            )],
            "{content:?}"
        );
    }
}

#[test]
fn an_oversized_secret_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = secret_file(&dir, "huge", &"x".repeat(MAX_SECRET_BYTES + 1));
    let (_, problems) = load(&format!("[gitlab]\nbot_token_file = {}\n", quoted(&path)));
    let errors = errors(&problems);
    assert_eq!(errors.len(), 1);
    assert!(errors[0].1.contains("not a secret file"), "{}", errors[0].1);
}

#[test]
fn giving_a_secret_both_inline_and_as_a_file_is_an_error_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = quoted(&secret_file(&dir, "token", "from-file\n"));
    let (_, problems) = load(&format!(
        "[gitlab]\nbot_token = \"inline\"\nbot_token_file = {path}\n\
         reviewer_tokens = [\"a\", \"b\"]\nreviewer_token_files = [{path}, {path}]\n\
         [identity.jwt]\nhs256_secret = \"inline\"\nhs256_secret_file = {path}\n"
    ));
    assert_eq!(
        errors(&problems),
        [
            (
                "identity.jwt.hs256_secret".to_owned(),
                "give either identity.jwt.hs256_secret or identity.jwt.hs256_secret_file, not both"
                    .to_owned()
            ),
            (
                "gitlab.bot_token".to_owned(),
                "give either gitlab.bot_token or gitlab.bot_token_file, not both".to_owned()
            ),
            (
                "gitlab.reviewer_tokens".to_owned(),
                "give either gitlab.reviewer_tokens or gitlab.reviewer_token_files, not both"
                    .to_owned()
            ),
        ]
    );
}

#[test]
fn a_blank_inline_value_does_not_count_as_given() {
    let dir = tempfile::tempdir().unwrap();
    let path = quoted(&secret_file(&dir, "token", "from-file\n"));
    let (settings, problems) = load(&format!(
        "[gitlab]\nbot_token = \"\"\nbot_token_file = {path}\n"
    ));
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(bot_token(&settings), Some("from-file"));
}

#[test]
fn reviewer_tokens_come_from_a_list_of_files_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let alice = secret_file(&dir, "alice", "alice-token\n");
    let bob = secret_file(&dir, "bob", "bob-token\r\n");
    let (settings, problems) = load(&format!(
        "[gitlab]\nreviewer_token_files = [{}, {}]\n",
        quoted(&alice),
        quoted(&bob)
    ));
    assert!(problems.is_empty(), "{problems:?}");
    let tokens: Vec<&str> = settings
        .gitlab
        .reviewer_tokens
        .iter()
        .map(ExposeSecret::expose_secret)
        .collect();
    assert_eq!(tokens, ["alice-token", "bob-token"]);
    assert_eq!(
        settings.secret_files.get("gitlab.reviewer_token_files"),
        [alice.clone(), bob]
    );

    let absent = dir.path().join("carol");
    let (_, problems) = load(&format!(
        "[gitlab]\nreviewer_token_files = [{}, {}]\n",
        quoted(&alice),
        quoted(&absent)
    ));
    let errors = errors(&problems);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, "gitlab.reviewer_token_files");
    assert!(
        errors[0].1.contains(&absent.display().to_string()),
        "{}",
        errors[0].1
    );
}

#[test]
fn the_database_password_file_goes_into_the_url_percent_encoded() {
    let dir = tempfile::tempdir().unwrap();
    let path = secret_file(&dir, "db-password", "p@ss/w:rd\n");
    let (settings, problems) = load(&format!(
        "[database]\nurl = \"mysql://app@db.internal:3306/changegate?ssl-mode=required\"\n\
         password_file = {}\n",
        quoted(&path)
    ));
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        settings.database.url,
        "mysql://app:p%40ss%2Fw%3Ard@db.internal:3306/changegate?ssl-mode=required"
    );
    assert_eq!(settings.database.password_file, Some(path));
}

#[test]
fn a_database_password_file_needs_a_url_with_a_user_and_no_password() {
    let dir = tempfile::tempdir().unwrap();
    let path = quoted(&secret_file(&dir, "db-password", "secret\n"));
    for (url, reason) in [
        (
            "mysql://app:inline@db/changegate",
            "already holds a password",
        ),
        ("mysql://db/changegate", "must name a user"),
        ("mysql://@db/changegate", "must name a user"),
        ("sqlite://data/changegate.db", "SQLite"),
    ] {
        let (_, problems) = load(&format!(
            "[database]\nurl = {url:?}\npassword_file = {path}\n"
        ));
        let errors = errors(&problems);
        assert_eq!(errors.len(), 1, "{url}: {errors:?}");
        assert_eq!(errors[0].0, "database.password_file", "{url}");
        assert!(errors[0].1.contains(reason), "{url}: {}", errors[0].1);
    }
}

#[test]
fn a_file_key_set_from_the_environment_works_like_one_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = secret_file(&dir, "token", "from-env-file\n");
    let mut table = source::parse("").unwrap();
    source::apply_env_overrides(
        &mut table,
        [(
            "CHANGEGATE__GITLAB__BOT_TOKEN_FILE".to_owned(),
            path.display().to_string(),
        )],
    );
    let (settings, problems) = Settings::from_table(&table, None);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(bot_token(&settings), Some("from-env-file"));
}

#[test]
fn every_load_reads_the_file_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = secret_file(&dir, "token", "first\n");
    let text = format!("[gitlab]\nbot_token_file = {}\n", quoted(&path));
    let (running, _) = load(&text);
    std::fs::write(&path, "second\n").unwrap();
    let (reloaded, problems) = Settings::from_table(&source::parse(&text).unwrap(), Some(&running));
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(bot_token(&reloaded), Some("second"));
}

#[test]
fn the_effective_config_shows_the_file_never_its_content() {
    let dir = tempfile::tempdir().unwrap();
    let token = secret_file(&dir, "token", "very-secret-token\n");
    let password = secret_file(&dir, "db-password", "very-secret-password\n");
    let (settings, problems) = load(&format!(
        "[gitlab]\nbot_token_file = {}\n[database]\nurl = \"mysql://app@db/cg\"\npassword_file = {}\n",
        quoted(&token),
        quoted(&password)
    ));
    assert!(problems.is_empty(), "{problems:?}");
    let shown = serde_json::to_value(effective::effective(&settings)).unwrap();
    assert_eq!(shown["gitlab"]["botToken"], "[redacted]");
    assert_eq!(shown["gitlab"]["botTokenFile"], token.display().to_string());
    assert_eq!(
        shown["database"]["passwordFile"],
        password.display().to_string()
    );
    let text = shown.to_string();
    assert!(!text.contains("very-secret"), "{text}");
}
