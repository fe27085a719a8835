//! The background task of the deploy simulator: polls the GitLab simulator for new merges
//! and turns each into a deploy callback, shaped by the next queued fault.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;
use uuid::Uuid;

use super::{DeployFaultKind, NoticedMerge, ProjectField, Shared, spawn_until_released};
use crate::gitlab::{GitLabObserver, MergedMergeRequest, ProjectId};

/// The description line that names an operation merged by the merge request.
const OPERATION_TRAILER: &str = "changegate-operation:";

/// The background task: notices merges and dispatches their callbacks.
pub(super) struct Watcher {
    shared: Arc<Shared>,
    gitlab: GitLabObserver,
    /// `(project, iid)` of every merge already handled.
    seen: HashSet<(ProjectId, u64)>,
    /// A callback held back by the reverse fault, with its id.
    held: Option<(Uuid, Value)>,
    released: watch::Receiver<()>,
}

impl Watcher {
    /// A watcher that reports merges from now on: those already merged count as seen.
    pub(super) fn new(
        shared: Arc<Shared>,
        gitlab: GitLabObserver,
        released: watch::Receiver<()>,
    ) -> Self {
        let merged = gitlab.merged_merge_requests().unwrap_or_default();
        Self {
            shared,
            seen: merged.iter().map(|mr| (mr.project, mr.iid)).collect(),
            gitlab,
            held: None,
            released,
        }
    }

    /// Polls until the GitLab simulator is gone (the handle's drop ends it from outside).
    pub(super) async fn run(mut self, poll_interval: Duration) {
        loop {
            tokio::time::sleep(poll_interval).await;
            let Some(merged) = self.gitlab.merged_merge_requests() else {
                return;
            };
            for mr in merged {
                if self.seen.insert((mr.project, mr.iid)) {
                    self.on_merge(mr).await;
                }
            }
        }
    }

    /// Records a merge and sends, holds, delays or drops its callback as the fault says.
    /// Callbacks go out in merge order and one at a time, as a single pipeline reports.
    async fn on_merge(&mut self, mr: MergedMergeRequest) {
        let fault = self.shared.take_fault();
        let operation_ids = operation_ids(&mr.description);
        let (send_ids, project_field) = {
            let mut state = self.shared.lock();
            state.merges.push(NoticedMerge {
                project: mr.project,
                iid: mr.iid,
                sha: mr.merged_sha.clone(),
                operation_ids: operation_ids.clone(),
                fault,
            });
            (state.send_operation_ids, state.project_field)
        };
        tracing::debug!(iid = mr.iid, ?fault, "deploy simulator noticed a merge");
        let status = if fault == Some(DeployFaultKind::Failed) {
            "failed"
        } else {
            "success"
        };
        let callback_id = Uuid::new_v4();
        let mut body = json!({
            "callbackId": callback_id.to_string(),
            "mrIid": mr.iid,
            "status": status,
            "sha": mr.merged_sha,
        });
        match project_field {
            ProjectField::Path => body["project"] = json!(mr.project_path),
            ProjectField::Id => body["project"] = json!(mr.project),
            ProjectField::Omitted => {}
        }
        if send_ids && !operation_ids.is_empty() {
            let ids: Vec<String> = operation_ids.iter().map(Uuid::to_string).collect();
            body["operationIds"] = json!(ids);
        }
        let mut callbacks = match fault {
            Some(DeployFaultKind::Lose) => return,
            Some(DeployFaultKind::Reverse) if self.held.is_none() => {
                self.held = Some((callback_id, body));
                return;
            }
            Some(DeployFaultKind::Duplicate) => {
                vec![(callback_id, body.clone()), (callback_id, body)]
            }
            _ => vec![(callback_id, body)],
        };
        callbacks.extend(self.held.take());
        if let Some(DeployFaultKind::Delay(delay)) = fault {
            let shared = Arc::clone(&self.shared);
            spawn_until_released(self.released.clone(), async move {
                tokio::time::sleep(delay).await;
                shared.send_all(callbacks).await;
            });
        } else {
            self.shared.send_all(callbacks).await;
        }
    }
}

/// The operation ids named by `Changegate-Operation: <uuid>` lines, in order and without
/// repeats. The key is matched case-insensitively, as git trailers are; lines whose value
/// is not a UUID are ignored.
fn operation_ids(description: &str) -> Vec<Uuid> {
    let mut ids = Vec::new();
    for line in description.lines() {
        let Some((key, value)) = line.trim().split_at_checked(OPERATION_TRAILER.len()) else {
            continue;
        };
        if !key.eq_ignore_ascii_case(OPERATION_TRAILER) {
            continue;
        }
        if let Ok(id) = Uuid::parse_str(value.trim())
            && !ids.contains(&id)
        {
            ids.push(id);
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_ids_come_from_trailer_lines_only() {
        let a = Uuid::new_v4();
        let b = Uuid::new_v4();
        let description = format!(
            "Batch of two\n\nChangegate-Operation: {a}\n  changegate-operation:{b}  \n\
             Changegate-Operation: not-a-uuid\nChangegate-Operation: {a}\n\
             Mentions Changegate-Operation: {b} mid-line"
        );
        assert_eq!(operation_ids(&description), vec![a, b]);
        assert!(operation_ids("no trailers\n").is_empty());
        assert!(operation_ids("Changegate-Op").is_empty());
    }
}
