//! Where configuration values come from: the TOML file, then environment overrides.

use std::path::Path;

use toml::{Table, Value};

/// Environment variables with a conventional short name, and the key each one sets.
/// Tooling (Docker, orchestrators, acceptance checks) relies on these names.
pub const SHORT_ENV_NAMES: [(&str, &str, &str); 3] = [
    ("CHANGEGATE_LISTEN", "server", "listen"),
    ("CHANGEGATE_DATABASE_URL", "database", "url"),
    ("CHANGEGATE_LOG", "log", "level"),
];

/// Prefix of the generic override `CHANGEGATE__<SECTION>__<KEY>`.
pub const ENV_PREFIX: &str = "CHANGEGATE__";

/// Reads and parses a TOML file. The error is one line naming the file and,
/// for syntax errors, the line and column.
pub fn read_file(path: &Path) -> Result<Table, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| format!("cannot read config file {}: {err}", path.display()))?;
    parse(&text).map_err(|err| format!("config file {}: {err}", path.display()))
}

/// Parses TOML text into a table, flattening the parser's multi-line report
/// into one line so it reads well in a log line or a terminal.
pub fn parse(text: &str) -> Result<Table, String> {
    text.parse::<Table>().map_err(|err| {
        let location = err.span().map(|span| {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {column}: ")
        });
        format!(
            "invalid TOML: {}{}",
            location.unwrap_or_default(),
            err.message()
        )
    })
}

/// Applies environment overrides on top of the file's table. Environment wins
/// over the file, so a deployment can pin a value the file cannot change.
pub fn apply_env_overrides<I>(table: &mut Table, vars: I)
where
    I: IntoIterator<Item = (String, String)>,
{
    for (name, raw) in vars {
        if let Some((_, section, key)) = SHORT_ENV_NAMES.iter().find(|(n, _, _)| *n == name) {
            set(table, &[section, key], Value::String(raw));
        } else if let Some(path) = name.strip_prefix(ENV_PREFIX) {
            let path: Vec<String> = path.split("__").map(str::to_ascii_lowercase).collect();
            if path.iter().all(|part| !part.is_empty()) {
                let path: Vec<&str> = path.iter().map(String::as_str).collect();
                set(table, &path, env_value(&raw));
            }
        }
    }
}

/// An environment value is read as a TOML value when it is one (`5`, `true`,
/// `["a", "b"]`), otherwise as a plain string, so `CHANGEGATE__BATCH__MAX_REQUESTS=50`
/// and `CHANGEGATE__GITLAB__PROJECT=config/repo` both do what they say.
fn env_value(raw: &str) -> Value {
    format!("v = {raw}")
        .parse::<Table>()
        .ok()
        .and_then(|mut table| table.remove("v"))
        .unwrap_or_else(|| Value::String(raw.to_owned()))
}

fn set(table: &mut Table, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut current = table;
    for part in parents {
        let entry = current
            .entry((*part).to_owned())
            .or_insert_with(|| Value::Table(Table::new()));
        if !entry.is_table() {
            *entry = Value::Table(Table::new());
        }
        let Value::Table(next) = entry else {
            unreachable!("entry was just made a table")
        };
        current = next;
    }
    current.insert((*last).to_owned(), value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn env_overrides_win_over_the_file_and_keep_their_types() {
        let mut table = parse("[batch]\nmax_requests = 10\n[gitlab]\nproject = \"a/b\"\n").unwrap();
        apply_env_overrides(
            &mut table,
            vars(&[
                ("CHANGEGATE__BATCH__MAX_REQUESTS", "50"),
                ("CHANGEGATE__GITLAB__PROJECT", "config/repo"),
                ("CHANGEGATE__GITLAB__REVIEWER_TOKENS", r#"["x", "y"]"#),
                ("CHANGEGATE_LISTEN", "0.0.0.0:9000"),
                ("CHANGEGATE_LOG", "debug"),
                ("UNRELATED", "1"),
            ]),
        );
        assert_eq!(table["batch"]["max_requests"].as_integer(), Some(50));
        assert_eq!(table["gitlab"]["project"].as_str(), Some("config/repo"));
        assert_eq!(
            table["gitlab"]["reviewer_tokens"].as_array().map(Vec::len),
            Some(2)
        );
        assert_eq!(table["server"]["listen"].as_str(), Some("0.0.0.0:9000"));
        assert_eq!(table["log"]["level"].as_str(), Some("debug"));
        assert_eq!(table.len(), 4);
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let err = parse("[server]\nlisten = \n").unwrap_err();
        assert!(err.contains("line 2"), "{err}");
    }
}
