//! What GitLab's MR answer says about merging it: its merge state, read from
//! `detailed_merge_status` or, before 15.6, `merge_status`, and whether its
//! head pipeline passed for the head that would merge.

use crate::clients::gitlab::MergeRequest;

/// `detailed_merge_status` (doc/api/merge_requests.md, "Merge status"), or
/// on GitLab before 15.6, which has none, the same read from the older
/// `merge_status` (a git conflict is all it can tell). A value this version
/// does not know is logged once and waited on like `checking`.
pub(super) fn merge_state(mr: &MergeRequest) -> &str {
    const KNOWN: &[&str] = &[
        "approvals_syncing",
        "checking",
        "ci_must_pass",
        "ci_still_running",
        "commits_status",
        "conflict",
        "discussions_not_resolved",
        "draft_status",
        "external_status_checks",
        "jira_association_missing",
        "locked_lfs_files",
        "locked_paths",
        "merge_request_blocked",
        "merge_time",
        "mergeable",
        "need_rebase",
        "not_approved",
        "not_open",
        "preparing",
        "requested_changes",
        "security_policy_evaluation",
        "security_policy_violations",
        "status_checks_must_pass",
        "title_regex",
        "unchecked",
        "merged",
    ];
    static REPORTED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    match (
        mr.detailed_merge_status.as_deref(),
        mr.merge_status.as_deref(),
    ) {
        (Some(detailed), _) => {
            if !KNOWN.contains(&detailed) {
                let mut reported = REPORTED
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if !reported.iter().any(|r| r == detailed) {
                    tracing::warn!(
                        status = detailed,
                        "GitLab reports a detailed_merge_status changegate does not know; waiting on it as on `checking`"
                    );
                    reported.push(detailed.to_owned());
                }
            }
            detailed
        }
        (None, Some("can_be_merged")) => "mergeable",
        (None, Some("cannot_be_merged")) => "conflict",
        (None, _) => "checking",
    }
}

/// Whether `mr`'s head pipeline succeeded for the head that would merge.
pub(super) fn passed_for_head(mr: &MergeRequest, iid: i64) -> bool {
    let Some(pipeline) = &mr.head_pipeline else {
        return false;
    };
    let merged_results = pipeline
        .reference
        .as_deref()
        .is_some_and(|r| r == format!("refs/merge-requests/{iid}/merge"));
    pipeline.status == "success"
        && (merged_results || pipeline.sha.is_none() || pipeline.sha == mr.sha)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mr(head: &str, pipeline: serde_json::Value) -> MergeRequest {
        serde_json::from_value(serde_json::json!({
            "iid": 7, "state": "opened", "sha": head, "head_pipeline": pipeline,
        }))
        .expect("an MR body")
    }

    #[test]
    fn gitlab_before_15_6_is_read_from_merge_status() {
        let with = |detailed: Option<&str>, legacy: Option<&str>| {
            let mut mr = mr("abc", serde_json::Value::Null);
            mr.detailed_merge_status = detailed.map(str::to_owned);
            mr.merge_status = legacy.map(str::to_owned);
            merge_state(&mr).to_owned()
        };
        assert_eq!(with(None, Some("can_be_merged")), "mergeable");
        assert_eq!(with(None, Some("cannot_be_merged")), "conflict");
        assert_eq!(with(None, Some("unchecked")), "checking");
        assert_eq!(with(None, None), "checking");
        assert_eq!(
            with(Some("need_rebase"), Some("can_be_merged")),
            "need_rebase"
        );
        assert_eq!(
            with(Some("a_status_from_the_future"), None),
            "a_status_from_the_future"
        );
    }

    #[test]
    fn only_a_passed_pipeline_of_the_head_or_of_the_merge_ref_lets_an_mr_merge() {
        let passed = |sha: &str, reference: &str| serde_json::json!({"id": 1, "sha": sha, "ref": reference, "status": "success"});
        assert!(passed_for_head(&mr("abc", passed("abc", "cg-1")), 7));
        assert!(
            !passed_for_head(&mr("abc", passed("old", "cg-1")), 7),
            "an old head's pipeline"
        );
        assert!(
            passed_for_head(
                &mr(
                    "abc",
                    passed("merge-ref-sha", "refs/merge-requests/7/merge")
                ),
                7
            ),
            "a merged-results pipeline runs on the merge ref's commit"
        );
        assert!(!passed_for_head(
            &mr("abc", passed("x", "refs/merge-requests/8/merge")),
            7
        ));
        let running = serde_json::json!({"id": 1, "sha": "abc", "status": "running"});
        assert!(!passed_for_head(&mr("abc", running), 7));
        assert!(!passed_for_head(&mr("abc", serde_json::Value::Null), 7));
    }
}
