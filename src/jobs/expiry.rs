//! Closes bindings whose `expiresAt` has passed: one close operation per
//! binding, opened by changegate itself. Racing instances cannot open two:
//! the close takes the binding over with a write that names the status and
//! version read, so the second one is refused.

use anyhow::Context;

use super::Outcome;
use crate::config::resolve::FlowOrder;
use crate::db::Db;
use crate::db::bindings::list_expired;
use crate::domain::{OperationId, OperationKind};
use crate::store::{self, Controls, NewRequest, StoreError};
use crate::workflow::Executor;

/// The identity changegate acts as.
pub const SYSTEM_IDENTITY: &str = "changegate";
const BATCH: u32 = 100;

/// One round: opens a close operation for up to `BATCH` expired bindings.
pub async fn run_once(db: &Db, executor: &Executor) -> anyhow::Result<Outcome> {
    let expired = list_expired(db, BATCH)
        .await
        .context("listing expired bindings")?;
    let mut opened = 0;
    for (subject_id, target_key) in expired {
        let request = NewRequest {
            operation_id: OperationId::new(),
            kind: OperationKind::Close,
            subject_id,
            target_key,
            requested_by: SYSTEM_IDENTITY.to_owned(),
            flow_order: FlowOrder::ApprovalFirst,
            params: serde_json::json!({}),
            reason: "the binding expired".to_owned(),
            expires_at: None,
            idempotency: None,
            busy: false,
            expired: true,
            trace_parent: None,
            controls: Controls::default(),
        };
        match store::submit(db, &request).await {
            Ok(_) => {
                opened += 1;
                // A full queue is fine: the dispatcher finds it due later.
                let _ = executor.try_submit(request.operation_id.as_string());
            }
            // Another instance (or a person) got there first.
            Err(StoreError::InProgress { .. } | StoreError::Preempted) => {}
            Err(err) => return Err(err).context("opening a close for an expired binding"),
        }
    }
    Ok(match opened {
        0 => Outcome::Idle,
        done => Outcome::Worked {
            done,
            full: done == u64::from(BATCH),
        },
    })
}
