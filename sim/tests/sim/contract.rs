//! Contract tests: the GitLab simulator's answers held to fixtures written from
//! `shared/GITLAB.md` (`tests/fixtures/gitlab/`, format in its README). Each submodule
//! provokes the situations of one fixture file and checks every case of it, so a case added
//! to a fixture fails the test until a scenario covers it.

mod approvals;
mod cross_cutting;
mod merge_requests;
mod merging;
mod repository;

use std::cell::RefCell;
use std::collections::BTreeSet;

use chrono::DateTime;
use serde_json::{Map, Value};

use crate::gitlab::support::Reply;

/// The enumerations `enum:<name>` field types refer to.
const ENUMS: &str = include_str!("../fixtures/gitlab/enums.json");

/// The keys a case may use; anything else is a typo in the fixture.
const CASE_KEYS: [&str; 11] = [
    "status",
    "body",
    "keys",
    "fields",
    "equals",
    "prefix",
    "one_of",
    "absent",
    "headers",
    "headers_absent",
    "text",
];

/// One fixture file, and the cases checked so far.
pub(crate) struct Contract {
    cases: Map<String, Value>,
    enums: Value,
    checked: RefCell<BTreeSet<String>>,
}

impl Contract {
    /// Parses a fixture file (passed through `include_str!`).
    pub(crate) fn new(fixture: &str) -> Self {
        let fixture: Value = serde_json::from_str(fixture).expect("fixture is JSON");
        let cases = fixture["cases"]
            .as_object()
            .expect("fixture has cases")
            .clone();
        Self {
            cases,
            enums: serde_json::from_str(ENUMS).expect("enums are JSON"),
            checked: RefCell::default(),
        }
    }

    /// Asserts that `reply` satisfies `case`, listing every violation at once.
    pub(crate) fn check(&self, case: &str, reply: &Reply) {
        let spec = self
            .cases
            .get(case)
            .unwrap_or_else(|| panic!("no case {case}"));
        let spec = spec.as_object().expect("a case is an object");
        let mut violations = Vec::new();
        for (key, expected) in spec.iter().filter(|(key, _)| !key.starts_with('_')) {
            assert!(
                CASE_KEYS.contains(&key.as_str()),
                "{case}: unknown key {key}"
            );
            self.check_key(key, expected, reply, &mut violations);
        }
        assert!(
            violations.is_empty(),
            "contract case {case} violated:\n  {}\nanswer: {} {}",
            violations.join("\n  "),
            reply.status,
            reply.text
        );
        self.checked.borrow_mut().insert(case.to_owned());
    }

    /// Asserts that every case of the fixture was checked.
    pub(crate) fn assert_all_checked(&self) {
        let checked = self.checked.borrow();
        let unchecked: Vec<&String> = self
            .cases
            .keys()
            .filter(|c| !checked.contains(*c))
            .collect();
        assert!(unchecked.is_empty(), "cases never provoked: {unchecked:?}");
    }

    fn check_key(&self, key: &str, expected: &Value, reply: &Reply, out: &mut Vec<String>) {
        let body = &reply.body;
        let entries = || expected.as_object().expect("a map").iter();
        let names = || {
            expected
                .as_array()
                .expect("a list")
                .iter()
                .filter_map(Value::as_str)
        };
        match key {
            "status" => {
                let allowed = expected
                    .as_array()
                    .cloned()
                    .unwrap_or_else(|| vec![expected.clone()]);
                if !allowed.contains(&Value::from(reply.status)) {
                    out.push(format!("status {} is not {expected}", reply.status));
                }
            }
            "body" if body != expected => out.push(format!("body is not {expected}")),
            "keys" => {
                let actual: BTreeSet<&str> = body
                    .as_object()
                    .map(|fields| fields.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                let wanted: BTreeSet<&str> = names().collect();
                if actual != wanted {
                    out.push(format!("keys {actual:?} are not {wanted:?}"));
                }
            }
            "fields" => {
                for (path, spec) in entries() {
                    let spec = spec.as_str().expect("a type");
                    if !self.has_type(lookup(body, path), spec) {
                        let found = lookup(body, path);
                        out.push(format!("{path} is {found:?}, not {spec}"));
                    }
                }
            }
            "equals" => {
                for (path, value) in entries() {
                    if lookup(body, path) != Some(value) {
                        out.push(format!("{path} is {:?}, not {value}", lookup(body, path)));
                    }
                }
            }
            "prefix" => {
                for (path, prefix) in entries() {
                    let prefix = prefix.as_str().expect("a string");
                    let found = lookup(body, path).and_then(Value::as_str);
                    if !found.is_some_and(|text| text.starts_with(prefix)) {
                        out.push(format!("{path} is {found:?}, not starting {prefix:?}"));
                    }
                }
            }
            "one_of" => {
                for (path, allowed) in entries() {
                    let found = lookup(body, path);
                    let allowed = allowed.as_array().expect("a list");
                    if !found.is_some_and(|value| allowed.contains(value)) {
                        out.push(format!("{path} is {found:?}, not one of {allowed:?}"));
                    }
                }
            }
            "absent" => {
                let present = names().filter(|path| lookup(body, path).is_some());
                out.extend(present.map(|path| format!("{path} is present")));
            }
            "headers" => {
                for (name, spec) in entries() {
                    let value = reply.headers.get(name).and_then(|v| v.to_str().ok());
                    let spec = spec.as_str().expect("a header type");
                    if !value.is_some_and(|value| header_has_type(value, spec)) {
                        out.push(format!("header {name} is {value:?}, not {spec}"));
                    }
                }
            }
            "headers_absent" => {
                let sent = names().filter(|name| reply.headers.contains_key(*name));
                out.extend(sent.map(|name| format!("header {name} is sent")));
            }
            "text" if reply.text.trim() != expected.as_str().expect("a string") => {
                out.push(format!("text {:?} is not {expected}", reply.text));
            }
            _ => {}
        }
    }

    /// Whether `value` matches one of the `|`-separated alternatives of `spec`.
    fn has_type(&self, value: Option<&Value>, spec: &str) -> bool {
        let Some(value) = value else {
            return false;
        };
        spec.split('|').any(|alternative| match alternative {
            "string" => value.is_string(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "object" => value.is_object(),
            "array" => value.is_array(),
            "null" => value.is_null(),
            other => {
                let name = other.strip_prefix("enum:").expect("a known type");
                let allowed = self.enums[name].as_array().expect("a known enum");
                allowed.contains(value)
            }
        })
    }
}

/// The value at a dot-separated path (`$` is the whole body); numbers index arrays.
fn lookup<'a>(body: &'a Value, path: &str) -> Option<&'a Value> {
    if path == "$" {
        return Some(body);
    }
    path.split('.')
        .try_fold(body, |value, segment| match value {
            Value::Array(items) => items.get(segment.parse::<usize>().ok()?),
            _ => value.get(segment),
        })
}

/// Whether a header value has the fixture's type.
fn header_has_type(value: &str, spec: &str) -> bool {
    match spec {
        "integer" => value.parse::<u64>().is_ok(),
        // Later than 2001-09-09: a delta of seconds would be far smaller.
        "epoch" => value.parse::<u64>().is_ok_and(|secs| secs > 1_000_000_000),
        "http-date" => DateTime::parse_from_rfc2822(value).is_ok(),
        "string" => true,
        other => panic!("unknown header type {other}"),
    }
}
