//! Deletes expired idempotency records, a bounded batch per round.

use anyhow::Context;

use super::Outcome;
use crate::db::{Db, idempotency};

/// Rows deleted per round; small enough to keep each DELETE short.
pub const BATCH: u32 = 1000;

/// One round: deletes up to [`BATCH`] expired records.
pub async fn run_once(db: &Db) -> anyhow::Result<Outcome> {
    let done = idempotency::delete_expired(db, BATCH)
        .await
        .context("deleting expired idempotency records")?;
    Ok(match done {
        0 => Outcome::Idle,
        done => Outcome::Worked {
            done,
            full: done == u64::from(BATCH),
        },
    })
}
