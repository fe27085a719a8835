//! Closes out lost deploy callbacks (SPEC §8): a MERGED binding whose deploy
//! callback never came is VALIDATED once a deploy is known to include it:
//! exactly, when a deploy report of its project names its batch's merge
//! commit (the callback named operations is matched exactly when it
//! arrives); else by its project's watermark. The deploy pipeline deploys a
//! project's target branch in merge order, so a successful deploy of MR N
//! of a project includes every MR of that project merged before it (the
//! watermark rule); MR iids are numbered per project, so each project has
//! its own watermark and a deploy of one moves no other's. Only bindings in
//! the window `(now - max_age, now - min_age)` are looked at: younger ones
//! may still get their own callback, older ones are left to operators. The
//! flip goes through the same guarded, set-based move as every member move,
//! so a callback racing this job flips a binding once and counts it once.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;

use super::Outcome;
use crate::config::projects::{ProjectKey, Projects};
use crate::db::Db;
use crate::db::callbacks::{deploy_watermarks, merged_below_watermark, merged_by_deployed_commit};
use crate::domain::{BindingStatus, StepStatus};
use crate::store::{Change, move_members};
use crate::write_tx;

const BATCH: u32 = 500;

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// One round over the catalog's `projects`: the exact match first (a deploy
/// report naming a batch's merge commit), then each project's watermark
/// over the window; how many bindings it validated.
pub async fn run_once(
    db: &Db,
    projects: &Projects,
    min_age: Duration,
    max_age: Duration,
) -> anyhow::Result<Outcome> {
    let exact =
        merged_by_deployed_commit(db, projects.default_key().as_str(), millis(max_age), BATCH)
            .await
            .context("matching deploys by merge commit")?;
    let mut done = validate(db, &exact, "a deploy names its merge commit").await?;
    let mut full = exact.len() == BATCH as usize;
    for (project, watermark) in watermarks(db, projects).await? {
        let candidates = merged_below_watermark(
            db,
            millis(min_age),
            millis(max_age),
            &projects.target_filter(&project),
            watermark,
            BATCH,
        )
        .await
        .with_context(|| format!("listing merged bindings of {project}"))?;
        let why = format!("a later deploy ({project}!{watermark}) includes this change");
        done += validate(db, &candidates, &why).await?;
        full |= candidates.len() == BATCH as usize;
    }
    if done > 0 {
        tracing::info!(validated = done, "lost deploy callbacks reconciled");
    }
    Ok(match done {
        0 => Outcome::Idle,
        done => Outcome::Worked { done, full },
    })
}

/// The watermark of each of `projects` that has one. Reports without a
/// project (from before callbacks named one) count for the default project.
async fn watermarks(db: &Db, projects: &Projects) -> anyhow::Result<BTreeMap<ProjectKey, i64>> {
    let mut marks: BTreeMap<ProjectKey, i64> = BTreeMap::new();
    let reported = deploy_watermarks(db)
        .await
        .context("reading the watermarks")?;
    for (project, watermark) in reported {
        let key = if project.is_empty() {
            projects.default_key().clone()
        } else {
            ProjectKey::new(&project)
        };
        let mark = marks.entry(key).or_insert(watermark);
        *mark = (*mark).max(watermark);
    }
    marks.retain(|key, _| projects.keys().any(|known| known == key));
    Ok(marks)
}

/// Validates the MERGED ones of `candidates` (flip-once, set-based).
async fn validate(db: &Db, candidates: &[String], why: &str) -> anyhow::Result<u64> {
    if candidates.is_empty() {
        return Ok(0);
    }
    let change = Change {
        step: StepStatus::DeployReconciled,
        message: Some(why),
        actor: "reconciliation",
    };
    let moved = write_tx!(db, |tx| {
        move_members(
            tx,
            candidates,
            &[BindingStatus::Merged],
            Some(BindingStatus::Validated),
            change,
            None,
        )
        .await
        .context("validating reconciled bindings")
    })
    .await?;
    Ok(moved.len() as u64)
}
