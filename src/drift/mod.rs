//! Drift (SPEC §13): a job, on one instance at a time under its lease,
//! compares each managed directory of the target branch with what
//! changegate believes (the rendering of every live binding, no file for
//! the others) by git blob id, one tree listing per directory and page, so
//! its GitLab calls grow with directories, not bindings. Bindings with a
//! request in flight are skipped: their file is expected to move; so are
//! those whose binding changed while the pass read the branch. What it
//! finds is recorded (`drift_finding`), shown at `GET /admin/v1/drift` and
//! counted in `changegate_drift_files{kind, target}`. Nothing is written
//! to the repository.
//!
//! Shared files (a target that edits one key of a file) are read once
//! each per pass and compared key by key (`shared`).

mod adopt;
mod compare;
mod shared;

pub use adopt::{Place, adoptable_params, place_of};
use compare::covers;
pub use compare::{Belief, Believed, compare, directory};
use shared::{BelievedKey, EntriesAt, SharedFile, compare_shared, location};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use anyhow::Context;

use crate::clients::gitlab::{GitLabClient, git_blob_id};
use crate::config::Settings;
use crate::db::Db;
use serde_json::json;

use crate::db::bindings::get_binding;
use crate::db::drift::{
    BindingStates, FindingRow, NewFinding, acceptances_of, binding_states, delete_finding,
    findings_of, forget_acceptances, insert_finding, list_findings, live_operations,
    other_relations, refresh_finding, set_since_commit,
};
use crate::db::events::{BINDING_DRIFT_RESOLVED, BINDING_DRIFTED, append_drift_event};
use crate::db::retention::{release_job_lease, take_job_lease};
use crate::files::layout::{FileChange, Layout};
use crate::jobs::Outcome;
use crate::workflow::{bot, file_change};
use crate::write_tx;

/// The job's name on its lease.
const JOB: &str = "drift";
/// How long a pass may hold the lease before another instance may take it.
const LEASE: Duration = Duration::from_secs(600);
/// The kinds of drift, as stored and as the metric labels them.
pub const KINDS: [&str; 3] = ["CHANGED", "MISSING", "UNEXPECTED"];

/// One pass, if no other instance runs one (`owner`: this instance's id on
/// the lease), then the metric from what is recorded: every instance
/// exports the same counts, whichever ran the pass. `Worked` counts the
/// files found drifted.
pub async fn run_once(
    db: &Db,
    settings: &Settings,
    gitlab: &GitLabClient,
    owner: &str,
) -> anyhow::Result<Outcome> {
    if settings.drift.interval.is_zero() {
        return Ok(Outcome::Idle);
    }
    let found = if take_job_lease(db, JOB, owner, LEASE)
        .await
        .context("taking the drift lease")?
    {
        let found = pass(db, settings, gitlab).await;
        release_job_lease(db, JOB, owner)
            .await
            .context("giving the drift lease back")?;
        found
    } else {
        Ok(0)
    };
    export_counts(db, settings).await?;
    Ok(match found? {
        0 => Outcome::Idle,
        done => Outcome::Worked {
            done: done as u64,
            full: false,
        },
    })
}

/// Compares every project's managed directories with what changegate
/// believes and records the findings; how many files drifted.
pub async fn pass(db: &Db, settings: &Settings, gitlab: &GitLabClient) -> anyhow::Result<usize> {
    let token = bot(settings).context("the bot token")?;
    let reference = settings.gitlab.target_branch.as_str();
    let mut drifted = 0;
    let (beliefs, read_before) = beliefs(db, settings).await?;
    for (project, (mut belief, directories)) in beliefs {
        let mut listed = HashMap::new();
        for directory in &directories {
            listed.extend(
                gitlab
                    .blobs_in(token, &project, directory, reference)
                    .await
                    .with_context(|| format!("listing {directory} in {project}"))?,
            );
        }
        let mut texts = Vec::with_capacity(belief.shared.len());
        for file in belief.shared.keys() {
            let text = gitlab
                .file_content(token, &project, file, reference)
                .await
                .with_context(|| format!("reading {file} in {project}"))?;
            texts.push((file.clone(), text));
        }
        let read_after = binding_states(db).await?;
        belief.moving.extend(moved_meanwhile(
            settings,
            &project,
            &read_before,
            &read_after,
        ));
        let mut findings = compare(&belief, &listed);
        let mut settled = belief.settled_acceptances(&listed);
        for (file, text) in texts {
            let found = compare_shared(&belief, &file, &belief.shared[&file], text.as_deref());
            findings.extend(found.findings);
            settled.extend(found.settled);
        }
        drifted += findings.len();
        forget_acceptances(db, &project, &settled).await?;
        record(db, &project, &findings).await?;
    }
    Ok(drifted)
}

/// The commit a finding's file differs since, for the request's page: the
/// one recorded, else the newest commit that changed the file, read now
/// (`GET repository/commits?path=`) and recorded, so a page reads it once
/// and a pass never does (its GitLab calls stay the listings). None when
/// GitLab cannot tell; the page then shows the finding without it.
pub async fn since_commit(
    db: &Db,
    settings: &Settings,
    gitlab: &GitLabClient,
    finding: &FindingRow,
) -> Option<String> {
    if finding.since_commit.is_some() {
        return finding.since_commit.clone();
    }
    let token = bot(settings).ok()?;
    let place = place_of(
        settings,
        (finding.target_key.as_deref(), finding.subject_id.as_deref()),
        &finding.path,
    );
    let reference = settings.gitlab.target_branch.as_str();
    let commit = match gitlab
        .last_commit_of(token, &finding.project, &place.file, reference)
        .await
    {
        Ok(commit) => commit?,
        Err(err) => {
            tracing::info!(
                file = place.file,
                "drift: no last commit of the file: {err}"
            );
            return None;
        }
    };
    if let Err(err) = set_since_commit(db, &finding.project, &finding.path, &commit.id).await {
        tracing::info!(path = finding.path, "drift: the commit not recorded: {err}");
    }
    Some(commit.id)
}

/// Where the files of the relations whose binding changed between two
/// reads of `project`'s bindings sit: changegate's belief about them may
/// be younger or older than the branch listed between the reads (a request
/// submitted, or merged, meanwhile), so the pass does not judge them.
fn moved_meanwhile(
    settings: &Settings,
    project: &str,
    before: &BindingStates,
    after: &BindingStates,
) -> Vec<String> {
    let changed = before
        .iter()
        .filter(|(relation, state)| after.get(*relation) != Some(state))
        .map(|(relation, _)| relation)
        .chain(
            after
                .keys()
                .filter(|relation| !before.contains_key(*relation)),
        );
    changed
        .filter_map(|(subject, target_key)| {
            let target = settings.targets.get(target_key)?;
            (settings.project_for(target_key) == project)
                .then(|| place_named(&target.layout.remove(target_key, subject)))
        })
        .collect()
}

/// The place a pass names for a relation's file: the file, or the key's
/// location in a shared file.
fn place_named(change: &FileChange) -> String {
    match change {
        FileChange::Whole { path, .. } => path.clone(),
        FileChange::Key { path, key, .. } => location(path, key),
    }
}

/// Each project's beliefs, with the directories that hold its files.
type Beliefs = BTreeMap<String, (Belief, BTreeSet<String>)>;

/// What changegate believes of each project's files, and the directories
/// that hold them, with the bindings' states they were read from. The
/// bindings are read in one snapshot: a binding whose request merges
/// between two separate reads would be in neither (not yet live in the
/// first, no longer moving in the second), and its file on the branch
/// reported as unexpected for one pass.
async fn beliefs(db: &Db, settings: &Settings) -> anyhow::Result<(Beliefs, BindingStates)> {
    let mut beliefs = Beliefs::new();
    // A target whose files sit in one directory manages it even while no
    // binding of it is live: a file there is unexpected.
    for (key, target) in &settings.targets {
        let project = settings.project_for(key).to_owned();
        match &target.layout {
            Layout::FilePerBinding { .. } => {
                let one = target.layout.path(key, "a");
                let other = target.layout.path(key, "b");
                if directory(&one) == directory(&other) {
                    let entry = beliefs.entry(project).or_default();
                    entry.1.insert(directory(&one).to_owned());
                }
            }
            Layout::SharedKey { format, .. } => {
                let (belief, _) = beliefs.entry(project).or_default();
                let file = belief
                    .shared
                    .entry(target.layout.path(key, ""))
                    .or_insert_with(|| SharedFile::new(*format));
                if let Some((prefix, rest)) = target.layout.entries_at(key) {
                    file.entries.push(EntriesAt {
                        target_key: key.clone(),
                        prefix,
                        rest,
                    });
                }
            }
        }
    }
    let mut snapshot = db.begin_read().await?;
    let live = live_operations(&mut snapshot).await?;
    let others = other_relations(&mut snapshot).await?;
    let states = binding_states(&mut snapshot).await?;
    snapshot.commit().await?;
    for operation in live {
        if !settings.targets.contains_key(&operation.target_key) {
            continue;
        }
        let project = settings.project_for(&operation.target_key).to_owned();
        match file_change(settings, &operation) {
            Ok(FileChange::Whole {
                path,
                content: Some(content),
            }) => {
                let (belief, directories) = beliefs.entry(project).or_default();
                directories.insert(directory(&path).to_owned());
                belief.owners.insert(
                    path.clone(),
                    (operation.target_key.clone(), operation.subject_id.clone()),
                );
                belief.files.push(Believed {
                    path,
                    blob_id: git_blob_id(&content),
                    target_key: operation.target_key,
                    subject_id: operation.subject_id,
                });
            }
            Ok(FileChange::Key {
                path,
                format,
                key,
                value: Some(value),
            }) => {
                let (belief, _) = beliefs.entry(project).or_default();
                let file = belief
                    .shared
                    .entry(path)
                    .or_insert_with(|| SharedFile::new(format));
                file.keys.push(BelievedKey {
                    key,
                    value,
                    target_key: operation.target_key,
                    subject_id: operation.subject_id,
                });
            }
            Ok(_) => {}
            Err(reason) => tracing::warn!(
                operation_id = operation.operation_id,
                "drift: the binding's file cannot be rendered now, so it is not compared: {reason}"
            ),
        }
    }
    for (subject, target_key, is_moving) in others {
        let Some(target) = settings.targets.get(&target_key) else {
            continue;
        };
        let project = settings.project_for(&target_key).to_owned();
        let (belief, _) = beliefs.entry(project).or_default();
        let change = target.layout.remove(&target_key, &subject);
        if is_moving {
            belief.moving.insert(place_named(&change));
        }
        if let FileChange::Whole { path, .. } = change {
            belief.owners.entry(path).or_insert((target_key, subject));
        }
    }
    for (project, (belief, _)) in &mut beliefs {
        belief.accepted = acceptances_of(db, project).await?;
    }
    Ok((beliefs, states))
}

/// Replaces `project`'s findings with `findings`: new ones recorded from
/// now, seen ones refreshed, gone ones deleted (resolved). Each appearance
/// and each resolution is one webhook event, written in the same
/// transaction: once per appearance, however often a pass sees it. The
/// pass compared against the acceptances it read before; one an operator
/// recorded since (adopt or ignore, which deletes the finding) is read
/// again here, so the file it covers is not reported anew.
async fn record(db: &Db, project: &str, findings: &[NewFinding]) -> anyhow::Result<()> {
    write_tx!(db, |tx| {
        let mut before = findings_of(tx.db(), project).await?;
        let accepted = acceptances_of(tx.db(), project).await?;
        let accepted_since = |finding: &NewFinding| {
            accepted
                .get(&finding.path)
                .is_some_and(|acceptance| covers(acceptance, finding.blob_id.as_ref()))
        };
        for finding in findings {
            match before.remove(&finding.path) {
                Some(seen) => refresh_finding(tx.db(), seen.id, finding).await?,
                None if accepted_since(finding) => {}
                None => {
                    insert_finding(tx.db(), project, finding).await?;
                    let payload = json!({
                        "kind": finding.kind, "project": project, "path": finding.path,
                        "blobId": finding.blob_id,
                    });
                    let about = (finding.subject_id.as_deref(), finding.target_key.as_deref());
                    event(tx, BINDING_DRIFTED, about, &payload).await?;
                }
            }
        }
        for gone in before.into_values() {
            delete_finding(tx.db(), gone.id).await?;
            let payload = json!({ "kind": gone.kind, "project": project, "path": gone.path });
            let about = (gone.subject_id.as_deref(), gone.target_key.as_deref());
            event(tx, BINDING_DRIFT_RESOLVED, about, &payload).await?;
        }
        Ok::<_, crate::store::StoreError>(())
    })
    .await
    .context("recording the drift findings")
}

/// A drift event about the binding of `(subject, target)`, if one names
/// the file.
async fn event(
    tx: &mut crate::store::StoreTx,
    event_type: &str,
    (subject, target): (Option<&str>, Option<&str>),
    payload: &serde_json::Value,
) -> Result<(), crate::store::StoreError> {
    let (subject, target) = (subject.unwrap_or_default(), target.unwrap_or_default());
    let binding = if subject.is_empty() {
        None
    } else {
        get_binding(tx.db(), subject, target).await?
    };
    append_drift_event(
        tx.db(),
        event_type,
        (subject, target),
        binding
            .as_ref()
            .map(|binding| (binding.operation_id.as_str(), binding.status)),
        &payload.to_string(),
    )
    .await?;
    Ok(())
}

/// Sets `changegate_drift_files{kind, target}` from the findings recorded,
/// zero for every target and kind with none.
pub async fn export_counts(db: &Db, settings: &Settings) -> anyhow::Result<()> {
    let mut counts: BTreeMap<(String, &str), f64> = BTreeMap::new();
    for key in settings.targets.keys() {
        for kind in KINDS {
            counts.insert((key.clone(), kind), 0.0);
        }
    }
    for finding in list_findings(db).await.context("reading the findings")? {
        let target = finding.target_key.unwrap_or_default();
        let kind = KINDS
            .into_iter()
            .find(|kind| *kind == finding.kind)
            .unwrap_or("UNEXPECTED");
        *counts.entry((target, kind)).or_default() += 1.0;
    }
    for ((target, kind), files) in counts {
        metrics::gauge!("changegate_drift_files", "kind" => kind.to_ascii_lowercase(), "target" => target)
            .set(files);
    }
    Ok(())
}

/// Describes the drift metric.
pub fn describe_metrics() {
    metrics::describe_gauge!(
        "changegate_drift_files",
        "Files where the target branch and changegate disagree, as the last drift pass found them, by kind (changed, missing, unexpected) and target (empty: a file no binding names)."
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::source;
    use crate::db::drift::accept;

    const PROJECT: &str = "config/repo";
    const PATH: &str = "bindings/demo/alice.json";

    async fn sqlite() -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("drift.db").display());
        let table = source::parse(&format!("[database]\nurl = {url:?}\n")).unwrap();
        let (settings, problems) = Settings::from_table(&table, None);
        assert!(problems.is_empty(), "{problems:?}");
        let db = crate::db::open(&settings.database).await.unwrap();
        (dir, db)
    }

    fn changed(blob: &str) -> NewFinding {
        NewFinding {
            path: PATH.to_owned(),
            kind: "CHANGED",
            target_key: Some("demo".to_owned()),
            subject_id: Some("alice".to_owned()),
            blob_id: Some(blob.to_owned()),
        }
    }

    async fn drifted_events(db: &Db) -> i64 {
        crate::with_pool!(db, reader, |pool| {
            sqlx::query_scalar("SELECT COUNT(*) FROM event WHERE event_type = ?")
                .bind(BINDING_DRIFTED)
                .fetch_one(pool)
                .await
        })
        .unwrap()
    }

    #[test]
    fn the_files_of_relations_that_changed_between_the_reads_are_left_to_the_next_pass() {
        let toml = "[gitlab]\nproject = \"config/repo\"\n[targets.\"a\"]\n\
                    [targets.\"b\"]\nproject = \"other/repo\"\n";
        let (settings, problems) = Settings::from_table(&source::parse(toml).unwrap(), None);
        assert!(problems.is_empty(), "{problems:?}");
        let state = |status: &str, operation: &str| (status.to_owned(), operation.to_owned());
        let relation = |subject: &str, target: &str| (subject.to_owned(), target.to_owned());
        let before = BindingStates::from([
            (relation("steady", "a"), state("VALIDATED", "op-1")),
            (relation("merged", "a"), state("MERGING", "op-2")),
            (relation("again", "a"), state("CLOSED", "op-3")),
            (relation("closed", "a"), state("VALIDATED", "op-4")),
            (relation("elsewhere", "b"), state("MERGING", "op-5")),
        ]);
        let after = BindingStates::from([
            (relation("steady", "a"), state("VALIDATED", "op-1")),
            (relation("merged", "a"), state("MERGED", "op-2")),
            (relation("again", "a"), state("CLOSED", "op-6")),
            (relation("new", "a"), state("APPROVAL_SENDING", "op-7")),
            (relation("elsewhere", "b"), state("MERGED", "op-5")),
        ]);
        let path = |subject: &str| match settings.targets["a"].layout.remove("a", subject) {
            FileChange::Whole { path, .. } => path,
            other => panic!("{other:?}"),
        };
        let mut moved = moved_meanwhile(&settings, "config/repo", &before, &after);
        moved.sort();
        let mut expected = vec![path("merged"), path("again"), path("closed"), path("new")];
        expected.sort();
        assert_eq!(moved, expected);
        assert_eq!(
            moved_meanwhile(&settings, "other/repo", &before, &after).len(),
            1
        );
    }

    #[tokio::test]
    async fn a_pass_that_compared_before_an_adoption_does_not_report_the_adopted_file_again() {
        // The pass read the acceptances (none) and listed the file as
        // changed; an operator adopted it as it is before the pass
        // recorded: the file is not reported again.
        let (_dir, db) = sqlite().await;
        write_tx!(&db, |tx| {
            accept(tx.db(), PROJECT, PATH, "ADOPT", Some("blob-a"), "op", "ok").await?;
            Ok::<_, crate::store::StoreError>(())
        })
        .await
        .unwrap();
        record(&db, PROJECT, &[changed("blob-a")]).await.unwrap();
        assert!(list_findings(&db).await.unwrap().is_empty());
        assert_eq!(drifted_events(&db).await, 0);

        // Edited again after the adoption, it is.
        record(&db, PROJECT, &[changed("blob-b")]).await.unwrap();
        let findings = list_findings(&db).await.unwrap();
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(drifted_events(&db).await, 1);
    }
}
