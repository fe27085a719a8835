//! The timeline events a request's MR goes through, made from GitLab's
//! answers: a pipeline run that finished, a reviewer bot's approval, a
//! rebase, the merge commit. Each message names what it is about (pipeline
//! id and outcome, the head approved or rebased, the commit), so a round run
//! again after its answer was lost records nothing twice
//! ([`record_events`](crate::db::timeline_events::record_events)), while a
//! new head's approval or a retried pipeline's new outcome is a new event.

use crate::clients::gitlab::{MergeRequest, Pipeline};
use crate::db::timeline_events::{EventKind, TimelineEvent};

/// Who reports pipeline runs and merges.
const GITLAB: &str = "gitlab";

/// A finished run of `pipeline` (passed, failed or canceled); `None` while
/// it has not finished.
fn pipeline_finished(pipeline: &Pipeline, iid: i64) -> Option<TimelineEvent> {
    let outcome = match pipeline.status.as_str() {
        "success" => "passed",
        "failed" => "failed",
        "canceled" => "was canceled",
        _ => return None,
    };
    let took = pipeline
        .duration
        .map(|seconds| format!(" ({} s)", seconds.round()))
        .unwrap_or_default();
    Some(TimelineEvent {
        kind: EventKind::Pipeline,
        actor: GITLAB.to_owned(),
        message: format!("pipeline #{} of MR !{iid} {outcome}{took}", pipeline.id),
        detail: Some(pipeline.status.clone()),
        url: pipeline.web_url.clone(),
    })
}

/// The finished run of `mr`'s head pipeline; `None` while it runs or when
/// the MR has none.
pub(crate) fn head_pipeline_run(mr: &MergeRequest) -> Option<TimelineEvent> {
    mr.head_pipeline
        .as_ref()
        .and_then(|pipeline| pipeline_finished(pipeline, mr.iid))
}

/// Reviewer bot `reviewer` (1-based, in `gitlab.reviewer_tokens` order, as
/// the step's messages number them) approved `mr` at its current head.
pub(crate) fn approved(reviewer: usize, mr: &MergeRequest) -> TimelineEvent {
    let actor = format!("reviewer bot {reviewer}");
    TimelineEvent {
        kind: EventKind::Approval,
        message: format!("{actor} approved MR !{}{}", mr.iid, at_head(mr)),
        actor,
        detail: Some(reviewer.to_string()),
        url: mr.web_url.clone(),
    }
}

/// A rebase of `mr` onto its target branch was asked for.
pub(crate) fn rebasing(mr: &MergeRequest, actor: &str) -> TimelineEvent {
    TimelineEvent {
        kind: EventKind::Rebase,
        actor: actor.to_owned(),
        message: format!(
            "MR !{}{} is behind its target branch: rebasing it",
            mr.iid,
            at_head(mr)
        ),
        detail: mr.sha.clone(),
        url: mr.web_url.clone(),
    }
}

/// What a merged MR's answer tells: the run of its head pipeline that
/// passed (when not recorded already, say after a rebase) and the commit
/// the merge put on the target branch.
pub(crate) fn merged(mr: &MergeRequest) -> Vec<TimelineEvent> {
    let pipeline = head_pipeline_run(mr);
    let commit = mr.landed_at().map(|sha| TimelineEvent {
        kind: EventKind::Merge,
        actor: GITLAB.to_owned(),
        message: format!("MR !{} merged as {}", mr.iid, short(sha)),
        detail: Some(sha.to_owned()),
        url: mr
            .web_url
            .as_deref()
            .and_then(|url| commit_url(url, mr.iid, sha)),
    });
    pipeline.into_iter().chain(commit).collect()
}

/// The commit's page, next to the MR's: GitLab serves both under the
/// project's path (`/-/merge_requests/:iid` and `/-/commit/:sha`,
/// config/routes/merge_requests.rb and config/routes/repository.rb).
fn commit_url(mr_url: &str, iid: i64, sha: &str) -> Option<String> {
    let project = mr_url.strip_suffix(&format!("/-/merge_requests/{iid}"))?;
    Some(format!("{project}/-/commit/{sha}"))
}

fn at_head(mr: &MergeRequest) -> String {
    mr.sha
        .as_deref()
        .map(|sha| format!(" at {}", short(sha)))
        .unwrap_or_default()
}

/// The short form GitLab shows (`short_id`, 8 characters).
fn short(sha: &str) -> &str {
    sha.get(..8).unwrap_or(sha)
}

#[cfg(test)]
mod tests {
    use super::commit_url;

    #[test]
    fn the_commit_page_is_beside_the_merge_request_page() {
        assert_eq!(
            commit_url(
                "https://gitlab.example/config/repo/-/merge_requests/3",
                3,
                "abc"
            )
            .as_deref(),
            Some("https://gitlab.example/config/repo/-/commit/abc")
        );
        assert_eq!(commit_url("https://gitlab.example/other", 3, "abc"), None);
    }
}
