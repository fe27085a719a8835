//! A request in each status of the old releases (their
//! `src/domain/binding_status.rs`, alike for both), left as their workflow
//! left it, and where the current release must take it.

use super::gitlab::OldGitLab;
use super::old_release::{OldRelease, OldRequest, OldStep, steps};
use super::{End, PROJECT, REQUESTER, TARGET};

pub(super) fn waiting(status: &str, step_code: i64) -> OldStep<'_> {
    OldStep {
        status: Some(status),
        step_code,
        due_now: false,
    }
}

pub(super) fn due_now(status: &str, step_code: i64) -> OldStep<'_> {
    OldStep {
        status: Some(status),
        step_code,
        due_now: true,
    }
}

/// Every status, and where the current release must take a request in each.
pub(super) const EVERY_STATUS: [(&str, End); 15] = [
    ("APPROVAL_SENDING", End::Validated),
    ("APPROVAL_SENT", End::Validated),
    ("MR_CREATING", End::Validated),
    ("MR_CREATED", End::Validated),
    ("MERGING", End::Validated),
    ("MERGED", End::Validated),
    ("VALIDATED", End::AsItWas),
    ("CREATE_FAILED", End::AsItWas),
    ("HANDLE_FAILED", End::AsItWas),
    ("REJECTED", End::AsItWas),
    ("BUSY_REJECTED", End::AsItWas),
    ("CLOSING", End::Closed),
    ("CLOSE_FAILED", End::AsItWas),
    ("CLOSED", End::AsItWas),
    ("ABANDONED", End::AsItWas),
];

pub(super) async fn step(old: &OldRelease, operation_id: &str, to: OldStep<'_>) {
    old.transition(operation_id, &to).await.unwrap();
}

/// A request in `status`, left as the old release's workflow left it; the
/// id of the operation that owns the binding.
pub(super) async fn write_in_status(
    old: &OldRelease,
    gitlab: &OldGitLab<'_>,
    status: &str,
) -> String {
    let operation_id = uuid::Uuid::new_v4().to_string();
    let subject = format!("svc-{}", status.to_lowercase().replace('_', "-"));
    let request = OldRequest {
        operation_id: &operation_id,
        subject_id: &subject,
        target_key: TARGET,
        requested_by: REQUESTER,
    };
    old.submit(&request).await.unwrap();
    match status {
        "APPROVAL_SENDING" => {}
        "APPROVAL_SENT" => {
            gitlab.request_approval(&operation_id, &subject).await;
            step(
                old,
                &operation_id,
                waiting("APPROVAL_SENT", steps::APPROVAL_SENT),
            )
            .await;
        }
        // Approved, waiting for a merge round.
        "MR_CREATING" => {
            step(old, &operation_id, waiting("MR_CREATING", steps::QUEUED)).await;
            old.enqueue(&operation_id, PROJECT).await.unwrap();
        }
        "MR_CREATED" | "MERGING" | "MERGED" | "CLOSING" => {
            let (iid, url) = gitlab.open_merge_request(&operation_id, &subject).await;
            old.record_merge_request(&operation_id, iid, &url)
                .await
                .unwrap();
            step(old, &operation_id, due_now("MR_CREATED", steps::MR_CREATED)).await;
            if status == "MR_CREATED" {
                return operation_id;
            }
            gitlab.wait_for_pipeline(iid).await;
            step(
                old,
                &operation_id,
                due_now("MERGING", steps::HANDLE_STARTED),
            )
            .await;
            if status == "MERGING" {
                return operation_id;
            }
            gitlab.approve_and_merge(iid).await;
            step(old, &operation_id, waiting("MERGED", steps::HANDLE_MERGED)).await;
            if status == "MERGED" {
                return operation_id;
            }
            step(
                old,
                &operation_id,
                waiting("VALIDATED", steps::DEPLOY_CONFIRMED),
            )
            .await;
            let close_id = uuid::Uuid::new_v4().to_string();
            old.close(&request, &close_id).await.unwrap();
            return close_id;
        }
        "VALIDATED" => {
            step(
                old,
                &operation_id,
                waiting("VALIDATED", steps::DEPLOY_CONFIRMED),
            )
            .await
        }
        "CREATE_FAILED" => {
            step(
                old,
                &operation_id,
                waiting("CREATE_FAILED", steps::CREATE_REFUSED),
            )
            .await
        }
        "HANDLE_FAILED" => {
            step(
                old,
                &operation_id,
                waiting("HANDLE_FAILED", steps::HANDLE_MERGE_REFUSED),
            )
            .await
        }
        "REJECTED" => {
            step(
                old,
                &operation_id,
                waiting("REJECTED", steps::CALLED_BACK_REJECTED),
            )
            .await
        }
        "BUSY_REJECTED" => {
            step(
                old,
                &operation_id,
                waiting("BUSY_REJECTED", steps::BUSY_REJECTED),
            )
            .await
        }
        "ABANDONED" => {
            step(
                old,
                &operation_id,
                waiting("ABANDONED", steps::MANUAL_ABANDONED),
            )
            .await
        }
        "CLOSE_FAILED" | "CLOSED" => {
            step(
                old,
                &operation_id,
                waiting("VALIDATED", steps::DEPLOY_CONFIRMED),
            )
            .await;
            let close_id = uuid::Uuid::new_v4().to_string();
            old.close(&request, &close_id).await.unwrap();
            let step_code = if status == "CLOSED" {
                steps::CLOSED
            } else {
                steps::CLOSE_FAILED
            };
            step(old, &close_id, waiting(status, step_code)).await;
            return close_id;
        }
        other => panic!("no way to write {other}"),
    }
    operation_id
}
