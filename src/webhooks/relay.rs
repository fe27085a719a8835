//! The relay: fans `event` rows out into deliveries, one transaction per
//! page (see `relay_events` and migration 0008 for why not a cursor).

use anyhow::Context;

use crate::db::webhook_deliveries::{Relayed, relay_events};
use crate::db::{Db, retrying};
use crate::jobs::Outcome;

/// Events fanned out per transaction.
pub const PAGE: u32 = 200;

/// One round: relays one page of events. In silent mode the deliveries are
/// recorded `silent`, so ending silent mode never sends them.
pub async fn run_once(db: &Db, silent: bool) -> anyhow::Result<Outcome> {
    let relayed = match retrying(|| relay_events(db, PAGE, silent, super::body_of)).await {
        // Lock races lost on every retry rolled everything back: next round.
        Err(err) if crate::db::is_retryable_conflict(&err) => Relayed::Lost,
        other => other.context("relaying events to webhook deliveries")?,
    };
    match relayed {
        Relayed::Done { events: 0, .. } => Ok(Outcome::Idle),
        Relayed::Done { events, .. } => Ok(Outcome::Worked {
            done: events as u64,
            full: events == PAGE as usize,
        }),
        // Another instance took this page; there may be more right away.
        Relayed::Lost => Ok(Outcome::Worked {
            done: 0,
            full: true,
        }),
    }
}
