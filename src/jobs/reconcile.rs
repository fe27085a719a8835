//! Closes out lost deploy callbacks (SPEC §8): a MERGED binding whose deploy
//! callback never came is VALIDATED once a deploy is known to include it:
//! exactly, when a deploy report names its batch's merge commit (the
//! callback named operations is matched exactly when it arrives); else by
//! the watermark. The deploy pipeline deploys the target branch in merge order, so a
//! successful deploy of MR N includes every MR merged before it (the
//! watermark rule). Only bindings in the window `(now - max_age, now -
//! min_age)` are looked at: younger ones may still get their own callback,
//! older ones are left to operators. The flip goes through the same guarded,
//! set-based move as every member move, so a callback racing this job flips
//! a binding once and counts it once.

use std::time::Duration;

use anyhow::Context;

use super::Outcome;
use crate::db::Db;
use crate::db::callbacks::{deploy_watermark, merged_below_watermark, merged_by_deployed_commit};
use crate::domain::{BindingStatus, StepStatus};
use crate::store::{Change, move_members};
use crate::write_tx;

const BATCH: u32 = 500;

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// One round: the exact match first (a deploy report naming a batch's merge
/// commit), then the watermark over the window; how many bindings it validated.
pub async fn run_once(db: &Db, min_age: Duration, max_age: Duration) -> anyhow::Result<Outcome> {
    let exact = merged_by_deployed_commit(db, millis(max_age), BATCH)
        .await
        .context("matching deploys by merge commit")?;
    let mut done = validate(db, &exact, "a deploy names its merge commit").await?;
    let mut full = exact.len() == BATCH as usize;
    if let Some(watermark) = deploy_watermark(db)
        .await
        .context("reading the watermark")?
    {
        let candidates =
            merged_below_watermark(db, millis(min_age), millis(max_age), watermark, BATCH)
                .await
                .context("listing merged bindings")?;
        let why = format!("a later deploy (MR !{watermark}) includes this change");
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
