//! Single-writer behaviour of the store.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use changegate::db::bindings::get_binding;
use changegate::db::events::list_events;
use changegate::db::history::list_history;
use changegate::db::operations::get_operation;
use changegate::domain::{BindingStatus, OperationKind, StepStatus};
use changegate::store::{self, StoreError, StoreTx};

use super::{TO_MERGED, TO_REJECTED, apply, change, drive};
use crate::helpers::each_backend;

#[tokio::test]
async fn a_new_request_writes_operation_binding_history_and_event_together() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let request = apply("app-1", "payments.api.allowlist");
        let submitted = store::submit(db, &request).await.unwrap();
        assert_eq!(submitted.status, BindingStatus::ApprovalSending);
        assert_eq!(submitted.replaced, None);

        let id = request.operation_id.as_string();
        let operation = get_operation(db, &id).await.unwrap().unwrap();
        assert_eq!(
            (operation.step, operation.version),
            (StepStatus::Accepted, 1)
        );
        assert_eq!(operation.kind, OperationKind::Apply);
        let binding = get_binding(db, "app-1", "payments.api.allowlist")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (binding.status, binding.operation_id.as_str()),
            (BindingStatus::ApprovalSending, id.as_str())
        );
        assert_eq!(list_history(db, &id).await.unwrap().len(), 1);
        let events = list_events(db, &id).await.unwrap();
        assert_eq!(events.len(), 1, "{}", test_db.name);
        assert_eq!(
            (
                events[0].from_status.as_deref(),
                events[0].to_status.as_str()
            ),
            (None, "APPROVAL_SENDING")
        );
        let payload: serde_json::Value = serde_json::from_str(&events[0].payload).unwrap();
        assert_eq!(payload["operationId"], id.as_str());
    }
}

#[tokio::test]
async fn a_relation_in_progress_is_not_applied_for_again() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let first = apply("app-1", "t");
        store::submit(db, &first).await.unwrap();
        let err = store::submit(db, &apply("app-1", "t")).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::InProgress { status: BindingStatus::ApprovalSending, operation_id } if *operation_id == first.operation_id.as_string()),
            "{}: {err:?}",
            test_db.name
        );
    }
}

#[tokio::test]
async fn re_apply_resets_the_one_row_in_place_with_the_new_operation() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let (old_id, _) = drive(db, &apply("app-1", "t"), TO_REJECTED).await;
        let before = get_binding(db, "app-1", "t").await.unwrap().unwrap();

        let again = apply("app-1", "t");
        let submitted = store::submit(db, &again).await.unwrap();
        assert_eq!(submitted.replaced, Some(BindingStatus::Rejected));
        let after = get_binding(db, "app-1", "t").await.unwrap().unwrap();
        assert_eq!(after.id, before.id, "{}: same row", test_db.name);
        assert_eq!(after.operation_id, again.operation_id.as_string());
        assert_eq!(after.status, BindingStatus::ApprovalSending);
        assert!(after.version > before.version);

        // The superseded operation can no longer move the binding.
        let old = get_operation(db, &old_id).await.unwrap().unwrap();
        let stale = store::transition(
            db,
            &old_id,
            old.version,
            Some(BindingStatus::MrCreating),
            change(StepStatus::CalledBackApproved),
        )
        .await;
        assert!(
            matches!(stale, Err(StoreError::Preempted)),
            "{}: {stale:?}",
            test_db.name
        );
    }
}

#[tokio::test]
async fn re_apply_over_a_failed_row_awaiting_recovery_is_refused_and_leaves_it_untouched() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let path = [
            (StepStatus::ApprovalSent, BindingStatus::ApprovalSent),
            (StepStatus::CalledBackApproved, BindingStatus::MrCreating),
            (
                StepStatus::CreatePipelineFailed,
                BindingStatus::CreateFailed,
            ),
        ];
        let (id, version) = drive(db, &apply("app-1", "t"), &path).await;
        let before = get_binding(db, "app-1", "t").await.unwrap().unwrap();

        let err = store::submit(db, &apply("app-1", "t")).await.unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::InProgress {
                    status: BindingStatus::CreateFailed,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            get_binding(db, "app-1", "t").await.unwrap().unwrap(),
            before
        );
        assert_eq!(
            get_operation(db, &id).await.unwrap().unwrap().version,
            version
        );
    }
}

#[tokio::test]
async fn illegal_moves_and_stale_versions_write_nothing() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let (id, version) = drive(db, &apply("app-1", "t"), TO_MERGED).await;
        let history_before = list_history(db, &id).await.unwrap().len();

        let illegal = store::transition(
            db,
            &id,
            version,
            Some(BindingStatus::ApprovalSent),
            change(StepStatus::ApprovalSent),
        )
        .await;
        assert!(
            matches!(illegal, Err(StoreError::Illegal(_))),
            "{illegal:?}"
        );
        let stale = store::transition(
            db,
            &id,
            version - 1,
            Some(BindingStatus::Validated),
            change(StepStatus::DeployConfirmed),
        )
        .await;
        assert!(matches!(stale, Err(StoreError::Preempted)), "{stale:?}");

        let operation = get_operation(db, &id).await.unwrap().unwrap();
        assert_eq!(
            (operation.version, operation.step),
            (version, StepStatus::HandleMerged)
        );
        assert_eq!(
            get_binding(db, "app-1", "t").await.unwrap().unwrap().status,
            BindingStatus::Merged
        );
        assert_eq!(
            list_history(db, &id).await.unwrap().len(),
            history_before,
            "{}",
            test_db.name
        );
    }
}

#[tokio::test]
async fn a_status_that_leaves_and_returns_is_still_detected_as_changed() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let to_merging = &super::TO_MERGED[..4];
        let (id, read_version) = drive(db, &apply("app-1", "t"), to_merging).await;

        // Another writer takes MERGING -> MR_CREATING -> MR_CREATED -> MERGING.
        let mut version = read_version;
        for (step, status) in [
            (StepStatus::HandleBatchRetry, BindingStatus::MrCreating),
            (StepStatus::MrCreated, BindingStatus::MrCreated),
            (StepStatus::HandleStarted, BindingStatus::Merging),
        ] {
            version = store::transition(db, &id, version, Some(status), change(step))
                .await
                .unwrap()
                .operation_version;
        }
        assert_eq!(
            get_binding(db, "app-1", "t").await.unwrap().unwrap().status,
            BindingStatus::Merging
        );

        // The writer that read MERGING at the old version must not win.
        let stale = store::transition(
            db,
            &id,
            read_version,
            Some(BindingStatus::Merged),
            change(StepStatus::HandleMerged),
        )
        .await;
        assert!(
            matches!(stale, Err(StoreError::Preempted)),
            "{}: {stale:?}",
            test_db.name
        );
    }
}

#[tokio::test]
async fn a_close_takes_over_a_live_binding_and_keeps_the_applicant() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        drive(db, &apply("app-1", "t"), TO_MERGED).await;
        let mut close = apply("app-1", "t");
        close.kind = changegate::domain::OperationKind::Close;
        close.requested_by = "operator".to_owned();
        let submitted = store::submit(db, &close).await.unwrap();
        assert_eq!(
            (submitted.status, submitted.step),
            (BindingStatus::Closing, StepStatus::CloseRequested)
        );
        let binding = get_binding(db, "app-1", "t").await.unwrap().unwrap();
        assert_eq!(binding.requested_by, "app-1");
        assert_eq!(binding.operation_id, close.operation_id.as_string());

        let mut missing = apply("nobody", "t");
        missing.kind = changegate::domain::OperationKind::Close;
        assert!(matches!(
            store::submit(db, &missing).await,
            Err(StoreError::NotFound)
        ));
    }
}

#[tokio::test]
async fn effects_run_only_after_commit() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        let runs = Arc::new(AtomicUsize::new(0));

        let mut rolled_back = StoreTx::begin(db).await.unwrap();
        let counter = runs.clone();
        rolled_back.after_commit(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        rolled_back.rollback().await.unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 0);

        let mut dropped = StoreTx::begin(db).await.unwrap();
        let counter = runs.clone();
        dropped.after_commit(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        drop(dropped);
        assert_eq!(runs.load(Ordering::SeqCst), 0);

        let mut committed = StoreTx::begin(db).await.unwrap();
        committed.after_commit(|| panic!("a broken metric"));
        let counter = runs.clone();
        committed.after_commit(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        committed
            .commit()
            .await
            .expect("a panicking effect does not fail the commit");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{}", test_db.name);
    }
}
