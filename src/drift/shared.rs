//! Shared files: a target that edits one key of a file keeps each binding
//! as the value at its key, among entries other people write. A pass reads
//! each shared file once (one GitLab call however many bindings it holds),
//! parses it once, and compares the value at every live binding's key with
//! the binding's parameters, as the landed-files check does. A key's place
//! in findings and acceptances is `<file>#<dotted key>`; its "blob id" is
//! the git blob id of the value's JSON, so an operator's adoption of a
//! value holds until the value changes.

use std::collections::BTreeMap;

use serde_json::Value;

use super::Belief;
use crate::clients::gitlab::git_blob_id;
use crate::db::drift::NewFinding;
use crate::files::document::{self, FileFormat};

/// One shared file as changegate believes it.
#[derive(Debug)]
pub struct SharedFile {
    /// The file's format.
    pub format: FileFormat,
    /// The live bindings' keys, each with the value it should hold.
    pub keys: Vec<BelievedKey>,
    /// Where each target keeps its entries (see [`EntriesAt`]).
    pub entries: Vec<EntriesAt>,
}

impl SharedFile {
    /// A file in `format` with nothing believed yet.
    pub fn new(format: FileFormat) -> Self {
        Self {
            format,
            keys: Vec::new(),
            entries: Vec::new(),
        }
    }
}

/// A live binding's key in a shared file.
#[derive(Debug, Clone, PartialEq)]
pub struct BelievedKey {
    /// The key, one segment per level.
    pub key: Vec<String>,
    /// What it should hold: the binding's parameters.
    pub value: Value,
    /// The binding's target.
    pub target_key: String,
    /// The binding's subject.
    pub subject_id: String,
}

/// Where a target keeps its entries: every key under `prefix` followed by
/// `rest` is one subject's entry, so one with no live binding is found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntriesAt {
    /// The target.
    pub target_key: String,
    /// The key of the table holding one entry per subject.
    pub prefix: Vec<String>,
    /// The key inside each subject's entry.
    pub rest: Vec<String>,
}

/// Where a key of a shared file is reported and accepted.
pub fn location(file: &str, key: &[String]) -> String {
    format!("{file}#{}", key.join("."))
}

/// The id a key's value is compared by: the git blob id of its JSON.
pub fn value_id(value: &Value) -> String {
    git_blob_id(&value.to_string())
}

/// The value at `key` of a parsed shared file, as the landed-files check
/// reads it; none where a level above it is not a table (nothing is held
/// there).
pub fn value_at<'v>(format: FileFormat, document: &'v Value, key: &[String]) -> Option<&'v Value> {
    document::lookup(format, document, key).ok().flatten()
}

/// What one pass found of one shared file: its findings, and the
/// acceptances that no longer matter (the key holds the binding's value
/// again).
#[derive(Debug, Default)]
pub struct SharedFindings {
    /// The keys that differ, in location order.
    pub findings: Vec<NewFinding>,
    /// Locations whose acceptance is settled.
    pub settled: Vec<String>,
}

/// Compares `shared` (the file `file` as changegate believes it) with
/// `text`, what the target branch holds (none: no such file). A file that
/// no longer parses holds none of its values: every live key is `CHANGED`
/// there, with the whole file's blob id.
pub fn compare_shared(
    belief: &Belief,
    file: &str,
    shared: &SharedFile,
    text: Option<&str>,
) -> SharedFindings {
    let parsed = match text {
        Some(text) if text.trim().is_empty() => Ok(Some(Value::Object(Default::default()))),
        Some(text) => document::parse(shared.format, text).map(Some),
        None => Ok(None),
    };
    let mut found = SharedFindings::default();
    let mut findings = BTreeMap::new();
    let document = match parsed {
        Ok(document) => document,
        Err(_) => {
            let blob = text.map(git_blob_id);
            for believed in &shared.keys {
                let place = location(file, &believed.key);
                if belief.moving.contains(&place) || belief.accepts(&place, blob.as_ref()) {
                    continue;
                }
                findings.insert(
                    place.clone(),
                    finding(place, "CHANGED", believed, blob.clone()),
                );
            }
            found.findings = findings.into_values().collect();
            return found;
        }
    };
    let there = |key: &[String]| {
        document
            .as_ref()
            .and_then(|doc| value_at(shared.format, doc, key))
    };
    let mut believed_places = std::collections::HashSet::new();
    for believed in &shared.keys {
        let place = location(file, &believed.key);
        believed_places.insert(place.clone());
        let held = there(&believed.key);
        let id = held.map(value_id);
        if held == Some(&believed.value) {
            if belief.accepted.contains_key(&place) {
                found.settled.push(place);
            }
            continue;
        }
        if belief.moving.contains(&place) || belief.accepts(&place, id.as_ref()) {
            continue;
        }
        let kind = if held.is_some() { "CHANGED" } else { "MISSING" };
        findings.insert(place.clone(), finding(place, kind, believed, id));
    }
    for entries in &shared.entries {
        let Some(Value::Object(table)) = there(&entries.prefix) else {
            continue;
        };
        for (subject, entry) in table {
            let Some(value) = value_at(shared.format, entry, &entries.rest) else {
                continue;
            };
            let mut key = entries.prefix.clone();
            key.push(subject.clone());
            key.extend(entries.rest.iter().cloned());
            let place = location(file, &key);
            let id = value_id(value);
            if believed_places.contains(&place)
                || belief.moving.contains(&place)
                || belief.accepts(&place, Some(&id))
            {
                continue;
            }
            findings.entry(place.clone()).or_insert(NewFinding {
                path: place,
                kind: "UNEXPECTED",
                target_key: Some(entries.target_key.clone()),
                subject_id: Some(subject.clone()),
                blob_id: Some(id),
            });
        }
    }
    found.findings = findings.into_values().collect();
    found
}

fn finding(
    place: String,
    kind: &'static str,
    believed: &BelievedKey,
    blob_id: Option<String>,
) -> NewFinding {
    NewFinding {
        path: place,
        kind,
        target_key: Some(believed.target_key.clone()),
        subject_id: Some(believed.subject_id.clone()),
        blob_id,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::db::drift::AcceptanceRow;

    const FILE: &str = "pools.yaml";

    fn key(subject: &str) -> Vec<String> {
        vec!["pools".to_owned(), subject.to_owned(), "size".to_owned()]
    }

    fn shared() -> SharedFile {
        let mut shared = SharedFile::new(FileFormat::Yaml);
        for (subject, size) in [("alice", 5), ("bob", 7)] {
            shared.keys.push(BelievedKey {
                key: key(subject),
                value: json!(size),
                target_key: "db".to_owned(),
                subject_id: subject.to_owned(),
            });
        }
        shared.entries.push(EntriesAt {
            target_key: "db".to_owned(),
            prefix: vec!["pools".to_owned()],
            rest: vec!["size".to_owned()],
        });
        shared
    }

    fn kinds(found: &SharedFindings) -> Vec<(&str, &str)> {
        found
            .findings
            .iter()
            .map(|finding| (finding.path.as_str(), finding.kind))
            .collect()
    }

    #[test]
    fn a_file_as_believed_has_no_findings_whatever_else_it_holds() {
        let text = "# ours and others'\npools:\n  alice: {size: 5}\n  bob: {size: 7}\nother: 1\n";
        let found = compare_shared(&Belief::default(), FILE, &shared(), Some(text));
        assert!(found.findings.is_empty(), "{:?}", found.findings);
    }

    #[test]
    fn a_changed_value_a_missing_key_and_an_entry_no_binding_names_are_told_apart() {
        let text = "pools:\n  alice: {size: 9}\n  carol: {size: 3}\n  dave: {note: x}\n";
        let found = compare_shared(&Belief::default(), FILE, &shared(), Some(text));
        assert_eq!(
            kinds(&found),
            [
                ("pools.yaml#pools.alice.size", "CHANGED"),
                ("pools.yaml#pools.bob.size", "MISSING"),
                ("pools.yaml#pools.carol.size", "UNEXPECTED"),
            ]
        );
        let carol = &found.findings[2];
        assert_eq!(carol.subject_id.as_deref(), Some("carol"));
        assert_eq!(carol.blob_id, Some(value_id(&json!(3))));
    }

    #[test]
    fn no_file_means_every_key_is_missing_and_a_broken_one_every_key_changed() {
        let found = compare_shared(&Belief::default(), FILE, &shared(), None);
        assert_eq!(
            kinds(&found),
            [
                ("pools.yaml#pools.alice.size", "MISSING"),
                ("pools.yaml#pools.bob.size", "MISSING"),
            ]
        );
        let broken = "pools: [unclosed";
        let found = compare_shared(&Belief::default(), FILE, &shared(), Some(broken));
        assert_eq!(
            kinds(&found),
            [
                ("pools.yaml#pools.alice.size", "CHANGED"),
                ("pools.yaml#pools.bob.size", "CHANGED"),
            ]
        );
        assert_eq!(found.findings[0].blob_id, Some(git_blob_id(broken)));
    }

    #[test]
    fn moving_and_accepted_keys_are_not_reported_and_a_value_put_back_settles_its_acceptance() {
        let mut belief = Belief::default();
        belief.moving.insert(location(FILE, &key("bob")));
        let accepted = |action: &str, blob: Option<String>| AcceptanceRow {
            path: String::new(),
            action: action.to_owned(),
            blob_id: blob,
        };
        belief.accepted.insert(
            location(FILE, &key("alice")),
            accepted("ADOPT", Some(value_id(&json!(9)))),
        );
        belief
            .accepted
            .insert(location(FILE, &key("carol")), accepted("IGNORE", None));
        let text = "pools:\n  alice: {size: 9}\n  carol: {size: 3}\n";
        let found = compare_shared(&belief, FILE, &shared(), Some(text));
        assert!(found.findings.is_empty(), "{:?}", found.findings);

        let text = "pools:\n  alice: {size: 10}\n";
        let found = compare_shared(&belief, FILE, &shared(), Some(text));
        assert_eq!(kinds(&found), [("pools.yaml#pools.alice.size", "CHANGED")]);

        let text = "pools:\n  alice: {size: 5}\n";
        let found = compare_shared(&belief, FILE, &shared(), Some(text));
        assert!(found.findings.is_empty());
        assert_eq!(found.settled, [location(FILE, &key("alice"))]);
    }
}
