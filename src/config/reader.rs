//! Reads a configuration table key by key, collecting problems named by key.

use std::time::Duration;

use toml::{Table, Value};

use super::resolve::{self, Resolved};
use super::{Problem, Severity};

/// Keys each section accepts; `None` means any key (a map such as `rate_limit`).
pub(super) type Schema<'s> = &'s [(&'s str, Option<&'s [&'s str]>)];

/// Collects problems while reading a table, each named by its dotted key.
pub(super) struct Reader<'a> {
    table: &'a Table,
    problems: Vec<Problem>,
}

impl<'a> Reader<'a> {
    pub fn new(table: &'a Table) -> Self {
        Self {
            table,
            problems: Vec::new(),
        }
    }

    pub fn into_problems(self) -> Vec<Problem> {
        self.problems
    }

    /// The value at `path` (each element one level; keys may contain dots).
    pub fn at(&self, path: &[&str]) -> Option<&'a Value> {
        let (last, parents) = path.split_last()?;
        let mut table = self.table;
        for part in parents {
            table = table.get(*part)?.as_table()?;
        }
        table.get(*last)
    }

    pub fn get(&self, section: &str, key: &str) -> Option<&'a Value> {
        self.at(&[section, key])
    }

    pub fn error(&mut self, key: &str, message: impl Into<String>) {
        self.problems
            .push(Problem::new(Severity::Error, key, message));
    }

    pub fn warning(&mut self, key: &str, message: impl Into<String>) {
        self.problems
            .push(Problem::new(Severity::Warning, key, message));
    }

    pub fn resolved<T>(&mut self, key: &str, resolved: Resolved<T>) -> T {
        if let Some(message) = resolved.warning {
            self.warning(key, message);
        }
        resolved.value
    }

    /// Reports unknown sections, non-table sections and unknown keys.
    pub fn check_schema(&mut self, schema: Schema<'_>) {
        for (section, value) in self.table {
            let Some((_, keys)) = schema.iter().find(|(name, _)| name == section) else {
                let nearest = nearest(section, schema.iter().map(|(name, _)| *name));
                self.error(section, unknown("section", nearest));
                continue;
            };
            self.check_keys(section, value, *keys);
        }
    }

    /// Reports a value at `name` that is not a table, or has keys outside `keys`.
    pub fn check_keys(&mut self, name: &str, value: &Value, keys: Option<&[&str]>) {
        let Some(entries) = value.as_table() else {
            self.error(name, "must be a table, like [section]");
            return;
        };
        if let Some(keys) = keys {
            for key in entries.keys().filter(|key| !keys.contains(&key.as_str())) {
                let nearest =
                    nearest(key, keys.iter().copied()).map(|near| format!("{name}.{near}"));
                self.error(&format!("{name}.{key}"), unknown("key", nearest));
            }
        }
    }

    /// A string at `path`, trimmed; `default` when absent; an error when not a
    /// string. Numbers and booleans are taken as their text, so a numeric
    /// project id or an all-digit token set through the environment (read as
    /// TOML) still works.
    pub fn string_at(&mut self, path: &[&str], default: &str) -> String {
        match self.at(path) {
            None => default.to_owned(),
            Some(Value::String(text)) => text.trim().to_owned(),
            Some(scalar @ (Value::Integer(_) | Value::Float(_) | Value::Boolean(_))) => {
                scalar.to_string()
            }
            Some(other) => {
                let name = path.join(".");
                self.error(&name, format!("must be a string, not {}", other.type_str()));
                default.to_owned()
            }
        }
    }

    pub fn string(&mut self, section: &str, key: &str, default: &str) -> String {
        self.string_at(&[section, key], default)
    }

    /// A list of non-empty strings at `path`; empty when absent; an error otherwise.
    pub fn string_list_at(&mut self, path: &[&str]) -> Vec<String> {
        match self.at(path) {
            None => Vec::new(),
            Some(Value::Array(items))
                if items
                    .iter()
                    .all(|i| i.as_str().is_some_and(|s| !s.trim().is_empty())) =>
            {
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|item| item.trim().to_owned())
                    .collect()
            }
            Some(_) => {
                self.error(&path.join("."), "must be a list of non-empty strings");
                Vec::new()
            }
        }
    }

    /// A boolean at `path`; `default` when absent; an error otherwise.
    pub fn bool_at(&mut self, path: &[&str], default: bool) -> bool {
        match self.at(path) {
            None => default,
            Some(Value::Boolean(on)) => *on,
            Some(_) => {
                self.error(&path.join("."), "must be true or false");
                default
            }
        }
    }

    /// A whole number in `range` at `path`; `default` when absent; an error otherwise.
    pub fn count_at(
        &mut self,
        path: &[&str],
        range: std::ops::RangeInclusive<i64>,
        default: u32,
    ) -> u32 {
        match self.at(path) {
            None => default,
            Some(Value::Integer(n)) if range.contains(n) => u32::try_from(*n).unwrap_or(default),
            Some(_) => {
                let (low, high) = range.into_inner();
                self.error(
                    &path.join("."),
                    format!("must be a number from {low} to {high}"),
                );
                default
            }
        }
    }

    /// A positive duration at `path` for a static setting: an error when invalid.
    pub fn static_duration_at(&mut self, path: &[&str], default: Duration) -> Duration {
        let resolved = resolve::duration(self.at(path), default);
        if resolved.warning.is_some() {
            self.error(&path.join("."), "must be a positive duration like \"10s\"");
        }
        resolved.value
    }

    pub fn static_duration(&mut self, section: &str, key: &str, default: Duration) -> Duration {
        self.static_duration_at(&[section, key], default)
    }
}

/// How similar (Jaro-Winkler, 0 to 1) a name must be to a known one to be
/// taken for a mistake for it. Jaro-Winkler weighs a shared start, so a
/// misspelling (`bse_url`), a missing or extra letter (`max_request`) and a
/// name cut short (`password` for `password_file`) all score above 0.8,
/// while unrelated words (`colour`, `port` in `[server]`) stay below 0.75:
/// those get no suggestion rather than a misleading one.
const SIMILAR_ENOUGH: f64 = 0.8;

/// The known name `given` is most likely a mistake for, if any.
fn nearest<'k>(given: &str, known: impl IntoIterator<Item = &'k str>) -> Option<&'k str> {
    known
        .into_iter()
        .map(|name| (strsim::jaro_winkler(given, name), name))
        .filter(|(similarity, _)| *similarity >= SIMILAR_ENOUGH)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, name)| name)
}

/// The message for an unknown section or key, with the name it may have
/// meant.
fn unknown(what: &str, nearest: Option<impl std::fmt::Display>) -> String {
    match nearest {
        Some(name) => format!("unknown {what} (did you mean `{name}`?)"),
        None => format!("unknown {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<String> {
        let table = text.parse::<Table>().unwrap();
        let mut reader = Reader::new(&table);
        reader.check_schema(crate::config::schema::SCHEMA);
        reader
            .into_problems()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_misspelt_key_or_section_gets_the_nearest_known_name() {
        assert_eq!(
            problems("[batch]\nmax_request = 5\n[gitlab]\nbse_url = \"x\"\n[databse]\n"),
            [
                "error: batch.max_request: unknown key (did you mean `batch.max_requests`?)",
                "error: databse: unknown section (did you mean `database`?)",
                "error: gitlab.bse_url: unknown key (did you mean `gitlab.base_url`?)",
            ]
        );
    }

    #[test]
    fn an_unrelated_name_gets_no_suggestion() {
        assert_eq!(
            problems("[server]\nport = 80\n[colour]\n"),
            [
                "error: colour: unknown section",
                "error: server.port: unknown key",
            ]
        );
    }

    #[test]
    fn the_nearest_of_several_close_names_wins() {
        let keys = ["bot_token", "bot_token_file", "reviewer_tokens"];
        assert_eq!(nearest("bot_tokn", keys), Some("bot_token"));
        assert_eq!(nearest("bot_token_fle", keys), Some("bot_token_file"));
        assert_eq!(nearest("banana", keys), None);
    }
}
