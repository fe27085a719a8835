//! One project's comparison: what changegate believes the target branch
//! holds against what its tree listing shows, by git blob id, file by file,
//! without reading any file.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::shared::SharedFile;
use crate::db::drift::{AcceptanceRow, NewFinding};

/// A live binding's file as changegate rendered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Believed {
    /// The file.
    pub path: String,
    /// The git blob id of its rendering.
    pub blob_id: String,
    /// The binding's target.
    pub target_key: String,
    /// The binding's subject.
    pub subject_id: String,
}

/// What one pass compares, for one project.
#[derive(Debug, Default)]
pub struct Belief {
    /// The live bindings' files.
    pub files: Vec<Believed>,
    /// Files whose binding has a request in flight: expected to move, so
    /// never reported.
    pub moving: HashSet<String>,
    /// Every file a binding of any status names, with its target and
    /// subject, so a file found with no live binding says whose it was.
    pub owners: HashMap<String, (String, String)>,
    /// Operators' acceptances: a file ignored, or adopted as it is.
    pub accepted: HashMap<String, AcceptanceRow>,
    /// The shared files, by path.
    pub shared: BTreeMap<String, SharedFile>,
}

impl Belief {
    /// Whether an operator accepted `path` holding `listed` (none: absent).
    pub(super) fn accepts(&self, path: &str, listed: Option<&String>) -> bool {
        self.accepted
            .get(path)
            .is_some_and(|acceptance| covers(acceptance, listed))
    }

    /// The acceptances that no longer matter: the file is the binding's
    /// rendering again (its next change landed, or it was put back).
    pub fn settled_acceptances(&self, listed: &HashMap<String, String>) -> Vec<String> {
        self.files
            .iter()
            .filter(|file| self.accepted.contains_key(&file.path))
            .filter(|file| listed.get(&file.path) == Some(&file.blob_id))
            .map(|file| file.path.clone())
            .collect()
    }
}

/// Whether `acceptance` covers its file holding `listed` (none: absent):
/// ignored whatever it holds, or adopted as it holds it.
pub(super) fn covers(acceptance: &AcceptanceRow, listed: Option<&String>) -> bool {
    acceptance.action == "IGNORE" || acceptance.blob_id.as_ref() == listed
}

/// The directory of `path` ("" for a file at the root).
pub fn directory(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(directory, _)| directory)
}

/// The findings of `belief` against `listed` (path → blob id of every file
/// in the directories it manages), in path order.
pub fn compare(belief: &Belief, listed: &HashMap<String, String>) -> Vec<NewFinding> {
    let mut findings = BTreeMap::new();
    let mut believed = HashSet::with_capacity(belief.files.len());
    for file in &belief.files {
        believed.insert(file.path.as_str());
        if belief.moving.contains(&file.path) {
            continue;
        }
        let kind = match listed.get(&file.path) {
            Some(blob) if *blob == file.blob_id => continue,
            _ if belief.accepts(&file.path, listed.get(&file.path)) => continue,
            Some(_) => "CHANGED",
            None => "MISSING",
        };
        findings.insert(
            file.path.clone(),
            NewFinding {
                path: file.path.clone(),
                kind,
                target_key: Some(file.target_key.clone()),
                subject_id: Some(file.subject_id.clone()),
                blob_id: listed.get(&file.path).cloned(),
            },
        );
    }
    for (path, blob) in listed {
        if believed.contains(path.as_str())
            || belief.moving.contains(path)
            || belief.accepts(path, Some(blob))
        {
            continue;
        }
        let owner = belief.owners.get(path);
        findings.insert(
            path.clone(),
            NewFinding {
                path: path.clone(),
                kind: "UNEXPECTED",
                target_key: owner.map(|(target, _)| target.clone()),
                subject_id: owner.map(|(_, subject)| subject.clone()),
                blob_id: Some(blob.clone()),
            },
        );
    }
    findings.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn believed(path: &str, blob: &str) -> Believed {
        Believed {
            path: path.to_owned(),
            blob_id: blob.to_owned(),
            target_key: "t".to_owned(),
            subject_id: path.rsplit('/').next().unwrap().to_owned(),
        }
    }

    fn listing(files: &[(&str, &str)]) -> HashMap<String, String> {
        files
            .iter()
            .map(|(path, blob)| ((*path).to_owned(), (*blob).to_owned()))
            .collect()
    }

    #[test]
    fn each_kind_is_found_and_agreement_is_not_reported() {
        let belief = Belief {
            files: vec![
                believed("b/t/same", "1"),
                believed("b/t/edited", "2"),
                believed("b/t/deleted", "3"),
            ],
            ..Belief::default()
        };
        let listed = listing(&[("b/t/same", "1"), ("b/t/edited", "9"), ("b/t/stray", "7")]);
        let found: Vec<(String, &str, Option<String>)> = compare(&belief, &listed)
            .into_iter()
            .map(|f| (f.path, f.kind, f.blob_id))
            .collect();
        assert_eq!(
            found,
            vec![
                ("b/t/deleted".to_owned(), "MISSING", None),
                ("b/t/edited".to_owned(), "CHANGED", Some("9".to_owned())),
                ("b/t/stray".to_owned(), "UNEXPECTED", Some("7".to_owned())),
            ]
        );
    }

    #[test]
    fn a_file_expected_to_move_is_never_reported_and_a_stray_names_its_last_owner() {
        let mut belief = Belief {
            files: vec![believed("b/t/busy", "1")],
            ..Belief::default()
        };
        belief.moving.insert("b/t/busy".to_owned());
        belief.moving.insert("b/t/coming".to_owned());
        belief.owners.insert(
            "b/t/closed".to_owned(),
            ("t".to_owned(), "closed".to_owned()),
        );
        let listed = listing(&[("b/t/busy", "5"), ("b/t/coming", "6"), ("b/t/closed", "8")]);
        let found = compare(&belief, &listed);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, "UNEXPECTED");
        assert_eq!(found[0].subject_id.as_deref(), Some("closed"));
    }

    #[test]
    fn an_adopted_file_is_not_reported_until_it_changes_again_and_an_ignored_one_never() {
        let mut belief = Belief {
            files: vec![believed("b/t/adopted", "1")],
            ..Belief::default()
        };
        for (path, action, blob) in [
            ("b/t/adopted", "ADOPT", Some("5")),
            ("b/t/noise", "IGNORE", None),
        ] {
            belief.accepted.insert(
                path.to_owned(),
                AcceptanceRow {
                    path: path.to_owned(),
                    action: action.to_owned(),
                    blob_id: blob.map(str::to_owned),
                },
            );
        }
        let listed = listing(&[("b/t/adopted", "5"), ("b/t/noise", "6")]);
        assert!(compare(&belief, &listed).is_empty());
        let edited_again = listing(&[("b/t/adopted", "7"), ("b/t/noise", "8")]);
        let found = compare(&belief, &edited_again);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].path.as_str(), found[0].kind),
            ("b/t/adopted", "CHANGED")
        );
        let rendered_again = listing(&[("b/t/adopted", "1")]);
        assert_eq!(
            belief.settled_acceptances(&rendered_again),
            vec!["b/t/adopted".to_owned()]
        );
        assert!(belief.settled_acceptances(&listed).is_empty());
    }

    #[test]
    fn the_directory_of_a_path() {
        assert_eq!(directory("bindings/t/alice.json"), "bindings/t");
        assert_eq!(directory("top.json"), "");
    }
}
