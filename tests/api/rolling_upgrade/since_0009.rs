//! Requests only the release through 0012 could leave behind, one for each
//! thing its migrations 0009–0012 let it write:
//!
//! - a step whose call to GitLab could not connect: its obstacle (0009) and
//!   outage clock (0012), under the step lease of an instance that keeps
//!   running through the upgrade (on another host) and gives it back when
//!   it shuts down (owner ids by seat and life, 0010);
//! - a merge the deploy pipeline reported before it was recorded: the
//!   report stored under its project's key (0011), and its callback lost on
//!   the way to the current release, so only that report can confirm it;
//!   the step's lease left by an instance that died on the seat the
//!   current release's instance then takes (0010);
//! - a request whose first merge batch was settled by the timeout sweep
//!   (its settle counted, 0012) and whose second batch's round could not
//!   connect (the batch's obstacle, 0009, and outage clock, 0012), the
//!   batch's lease left by that same dead instance.
//!
//! The dead instance held its leases for `executor.lease = "5m"`, longer
//! than the test waits: only the current release's take-over of an earlier
//! run's leases on its seat lets that work go on in time.

use super::gitlab::OldGitLab;
use super::old_release::{OldInstance, OldRelease, OldRequest, steps};
use super::statuses::{due_now, step, waiting};
use super::{End, PROJECT, REQUESTER, TARGET, Written};

/// The dead instance's `executor.lease`.
const DEAD_LEASE_MS: i64 = 5 * 60 * 1000;
/// The live instance's `executor.lease`, the default.
pub(super) const LIVE_LEASE_MS: i64 = 60_000;

/// What [`write`] left.
pub(super) struct Left {
    /// Each request, in progress: the current release takes each to VALIDATED.
    pub(super) written: Vec<Written>,
    /// The one whose step lease the live instance holds until it shuts down.
    pub(super) held: String,
}

/// Submits an apply for `subject`.
async fn submitted(old: &OldRelease, subject: &str) -> String {
    let operation_id = uuid::Uuid::new_v4().to_string();
    old.submit(&OldRequest {
        operation_id: &operation_id,
        subject_id: subject,
        target_key: TARGET,
        requested_by: REQUESTER,
    })
    .await
    .unwrap();
    operation_id
}

/// An apply for `subject` whose MR is open: MR_CREATED, its pipeline check
/// due now. Its id and the MR's iid.
async fn with_merge_request(
    old: &OldRelease,
    gitlab: &OldGitLab<'_>,
    subject: &str,
) -> (String, i64) {
    let operation_id = submitted(old, subject).await;
    let (iid, url) = gitlab.open_merge_request(&operation_id, subject).await;
    old.record_merge_request(&operation_id, iid, &url)
        .await
        .unwrap();
    step(old, &operation_id, due_now("MR_CREATED", steps::MR_CREATED)).await;
    (operation_id, iid)
}

/// Writes the three requests; `live` keeps running through the upgrade,
/// `dead` served on the seat the current release's instance will take.
pub(super) async fn write(
    old: &OldRelease,
    gitlab: &OldGitLab<'_>,
    live: &OldInstance,
    dead: &OldInstance,
) -> Left {
    let (held, _) = with_merge_request(old, gitlab, "svc-gitlab-unreachable").await;
    old.step_cannot_connect(&held, live, LIVE_LEASE_MS)
        .await
        .unwrap();

    let subject = "svc-deployed-before-recorded";
    let (deployed, iid) = with_merge_request(old, gitlab, subject).await;
    gitlab.wait_for_pipeline(iid).await;
    step(old, &deployed, due_now("MERGING", steps::HANDLE_STARTED)).await;
    assert!(
        old.take_lease(&deployed, dead, DEAD_LEASE_MS)
            .await
            .unwrap()
    );
    let sha = gitlab.merge_with_lost_deploy(iid).await;
    let callback_id = uuid::Uuid::new_v4().to_string();
    // The project's key as the release stored it: trimmed, lowercased.
    old.deploy_reported_early(&callback_id, &PROJECT.to_lowercase(), iid, &sha)
        .await
        .unwrap();

    let batched = submitted(old, "svc-batch-unreachable").await;
    step(old, &batched, waiting("MR_CREATING", steps::QUEUED)).await;
    old.enqueue(&batched, PROJECT).await.unwrap();
    let (first, member) = old.claim().await.unwrap();
    assert_eq!(member, batched);
    old.settle(first, "ran past batch.timeout").await.unwrap();
    let (second, member) = old.claim().await.unwrap();
    assert_eq!(member, batched);
    old.round_cannot_connect(second, dead, DEAD_LEASE_MS)
        .await
        .unwrap();

    let in_progress = |operation_id: &str, label: &'static str, status: &'static str| Written {
        operation_id: operation_id.to_owned(),
        label,
        status,
        end: End::Validated,
    };
    Left {
        written: vec![
            in_progress(&held, "step that cannot reach GitLab", "MR_CREATED"),
            in_progress(&deployed, "deployed before recorded", "MERGING"),
            in_progress(&batched, "batch that cannot reach GitLab", "MR_CREATING"),
        ],
        held,
    }
}
