//! The command line: clear messages and exit codes for bad input, never a panic.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::helpers::changegate_command;

/// Runs changegate in `dir` with a clean changegate environment plus `env`.
fn run(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = changegate_command();
    command.args(args).current_dir(dir);
    command.env("CHANGEGATE_LISTEN", "127.0.0.1:0");
    command.envs(env.iter().copied());
    command.output().expect("changegate runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const BAD_CONFIG: &str = r#"
[server]
listen = "everywhere"
[database]
url = "postgres://db/changegate"
[access]
mode = "OPNE"
[gitlab]
bse_url = "https://gitlab.example.com"
"#;

#[test]
fn check_config_names_every_problem_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.toml"), BAD_CONFIG).unwrap();
    let output = run(dir.path(), &["check-config", "bad.toml"], &[]);
    assert_eq!(output.status.code(), Some(2));
    let stdout = text(&output.stdout);
    for expected in [
        "error: server.listen:",
        "error: database.url: unknown scheme",
        "error: gitlab.bse_url: unknown key",
        "warning: access.mode: unknown mode \"OPNE\"",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
}

#[test]
fn check_config_suggests_the_nearest_known_key_and_section() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("typo.toml"),
        "[batch]\nmax_request = 50\n[databse]\nurl = \"sqlite://x.db\"\n",
    )
    .unwrap();
    let output = run(dir.path(), &["check-config", "typo.toml"], &[]);
    assert_eq!(output.status.code(), Some(2));
    let stdout = text(&output.stdout);
    for expected in [
        "error: batch.max_request: unknown key (did you mean `batch.max_requests`?)",
        "error: databse: unknown section (did you mean `database`?)",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
}

#[test]
fn check_config_reports_toml_syntax_errors_with_the_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("broken.toml"),
        "[server]\nlisten = \"a\"\n[[[\n",
    )
    .unwrap();
    let output = run(dir.path(), &["check-config", "broken.toml"], &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stdout).contains("line 3"),
        "{}",
        text(&output.stdout)
    );
}

#[test]
fn the_shipped_configs_are_valid() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in ["config/default.toml", "config/demo.toml"] {
        let output = run(root, &["check-config", file], &[]);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{file}: {}",
            text(&output.stdout)
        );
    }
}

#[test]
fn serve_refuses_an_invalid_config_without_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.toml"), BAD_CONFIG).unwrap();
    let output = run(dir.path(), &["serve", "--config", "bad.toml"], &[]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("error: database.url: unknown scheme"),
        "{stderr}"
    );
    assert!(
        stderr.contains("error: gitlab.bse_url: unknown key"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn no_subcommand_serves_with_the_config_the_environment_names() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.toml"), BAD_CONFIG).unwrap();
    let output = run(dir.path(), &[], &[("CHANGEGATE_CONFIG", "bad.toml")]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("error: gitlab.bse_url: unknown key"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn an_unknown_database_scheme_from_the_environment_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(
        dir.path(),
        &["serve"],
        &[("CHANGEGATE_DATABASE_URL", "postgres://db/x")],
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("error: database.url: unknown scheme"));
}

#[test]
fn an_invalid_ssl_mode_in_the_database_url_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(
        dir.path(),
        &["serve"],
        &[(
            "CHANGEGATE_DATABASE_URL",
            "mysql://app@db.internal/changegate?ssl-mode=VERIFY",
        )],
    );
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(
            "error: database.url: ssl-mode \"VERIFY\" is not DISABLED, PREFERRED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY"
        ),
        "{stderr}"
    );
}

#[test]
fn an_unwritable_sqlite_path_stops_start_up_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(
        dir.path(),
        &["serve"],
        &[("CHANGEGATE_DATABASE_URL", "sqlite:///proc/cg/x.db")],
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("error: cannot open SQLite database /proc/cg/x.db"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn migrate_creates_and_migrates_the_default_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(dir.path(), &["migrate"], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("migrations applied"));
    assert!(dir.path().join("data/changegate.db").exists());
    let again = run(dir.path(), &["migrate"], &[]);
    assert!(again.status.success(), "{}", text(&again.stderr));
}

#[test]
fn completions_prints_a_script_naming_the_subcommands() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(dir.path(), &["completions", "bash"], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let script = text(&output.stdout);
    assert!(script.contains("complete -F _changegate"), "{script}");
    for subcommand in ["serve", "migrate", "backup", "check-config", "completions"] {
        assert!(script.contains(subcommand), "no {subcommand} in:\n{script}");
    }
}

#[test]
fn completions_for_an_unknown_shell_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(dir.path(), &["completions", "tcsh"], &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("invalid value 'tcsh'")
            && stderr.contains("[possible values: bash, elvish, fish, powershell, zsh]"),
        "{stderr}"
    );
}

#[test]
fn sigterm_stops_the_service_gracefully() {
    let dir = tempfile::tempdir().unwrap();
    let port = crate::reload::free_port();
    let mut child = changegate_command()
        .arg("serve")
        .current_dir(dir.path())
        .env("CHANGEGATE_LISTEN", format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "service never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "exit status {status}");
            break;
        }
        assert!(Instant::now() < deadline, "did not stop after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}
