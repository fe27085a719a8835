//! The span of a merge batch round: one round works for every member, so it
//! links to the request that submitted each (rather than joining one trace).

use tracing::Instrument;

use crate::config::Settings;
use crate::db::Db;
use crate::db::batches::BatchRow;
use crate::db::operations::member_trace_parents;
use crate::store::StoreError;
use crate::traces::propagation;

use super::MergeQueue;

impl MergeQueue {
    /// [`MergeQueue::drive`] in its span; the members' trace context is read
    /// only when the span is exported.
    pub(super) async fn drive_traced(
        &self,
        db: &Db,
        settings: &Settings,
        batch: BatchRow,
    ) -> Result<(), StoreError> {
        let span = tracing::debug_span!(
            "batch round",
            otel.name = format!("batch round {}", batch.phase),
            batch.id = batch.id,
            batch.number = batch.shown_number(),
            mr.iid = batch.mr_iid,
            phase = %batch.phase,
        );
        if !span.is_disabled() {
            for (operation_id, trace_parent) in member_trace_parents(db, batch.id).await? {
                propagation::link_stored(&span, Some(&trace_parent), &operation_id);
            }
        }
        self.drive(db, settings, batch).instrument(span).await
    }
}
