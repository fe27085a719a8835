//! What GitLab really has decides what changegate writes and reports: a
//! file already on the target branch with other content is updated, not
//! taken as written; a commit GitLab refuses for another reason fails the
//! step with GitLab's message; a write answered 5xx is not sent twice.

use changegate_sim::gitlab::{Endpoint, Fault, FaultKind, PipelineOutcome};

use super::end_to_end::{World, WorldOptions, world, world_with};
use super::*;

const FILE: &str = "bindings/demo.feature-flags/alice.json";

async fn finished(w: &World, id: &str) -> Value {
    wait_for(&w.app, id, |v| {
        v["status"] == "VALIDATED" || v["next"] == "CONTACT_TEAM"
    })
    .await
}

#[tokio::test]
async fn a_file_already_on_main_with_other_content_ends_validated_with_the_rendered_content() {
    for test_db in each_backend().await {
        let w = world(&test_db.url, "").await;
        w.gitlab
            .push(
                w.project,
                w.users[0],
                "main",
                &[(FILE, Some("{\"by\": \"hand\"}\n"))],
            )
            .unwrap();

        let id = apply(&w.app).await;
        let view = finished(&w, &id).await;

        assert_eq!(view["status"], "VALIDATED", "{}: {view}", test_db.name);
        let on_main = w.gitlab.file(w.project, "main", FILE).unwrap();
        assert!(
            on_main.contains(&format!("\"operationId\": \"{id}\"")),
            "{}: main holds the rendered file, not the old one: {on_main}",
            test_db.name
        );
        assert_eq!(
            w.gitlab.calls(Endpoint::CreateMergeRequest),
            1,
            "{}",
            test_db.name
        );
    }
}

#[tokio::test]
async fn a_commit_gitlab_refuses_for_another_reason_fails_with_its_message() {
    let db = crate::helpers::sqlite_db().await;
    let w = world(&db.url, "").await;
    w.gitlab
        .inject(Fault::new(Endpoint::CreateCommit, FaultKind::Status(400)));

    let id = apply(&w.app).await;
    let view = finished(&w, &id).await;

    assert_eq!(
        (view["status"].as_str(), view["next"].as_str()),
        (Some("CREATE_FAILED"), Some("CONTACT_TEAM")),
        "{view}"
    );
    assert!(
        view["message"].as_str().unwrap().contains("400"),
        "GitLab's answer is in the message: {view}"
    );
    assert_eq!(
        w.gitlab.calls(Endpoint::CreateMergeRequest),
        0,
        "no MR without its commit"
    );
    assert!(w.gitlab.file(w.project, "main", FILE).is_none());
}

#[tokio::test]
async fn a_write_answered_5xx_is_not_sent_again_blindly_and_the_request_still_lands() {
    let db = crate::helpers::sqlite_db().await;
    let w = world(&db.url, "").await;
    // Unapplied 503s: each is left for the next round, which re-reads.
    w.gitlab
        .inject(Fault::new(Endpoint::CreateCommit, FaultKind::Status(503)).times(2));
    w.gitlab
        .inject(Fault::new(Endpoint::CreateMergeRequest, FaultKind::Status(502)).times(1));

    let id = apply(&w.app).await;
    let view = finished(&w, &id).await;

    assert_eq!(view["status"], "VALIDATED", "{view}");
    let creates = w
        .gitlab
        .requests()
        .into_iter()
        .filter(|r| r.endpoint == Endpoint::CreateMergeRequest)
        .count();
    assert_eq!(creates, 2, "the 502 and one create after re-reading");
    assert_eq!(
        w.gitlab.merge_request(w.project, 2).map(|mr| mr.iid),
        None,
        "exactly one MR"
    );
}

#[tokio::test]
async fn a_create_gitlab_applied_but_answered_502_is_adopted_one_mr_and_validated() {
    for test_db in each_backend().await {
        let w = world(&test_db.url, "").await;
        w.gitlab.inject(
            Fault::new(
                Endpoint::CreateMergeRequest,
                FaultKind::AppliedThenStatus(502),
            )
            .times(1),
        );
        w.gitlab
            .inject(Fault::new(Endpoint::CreateCommit, FaultKind::AppliedThenStatus(504)).times(1));

        let id = apply(&w.app).await;
        let view = finished(&w, &id).await;

        assert_eq!(view["status"], "VALIDATED", "{}: {view}", test_db.name);
        assert_eq!(view["mergeRequest"]["iid"], 1, "{}: {view}", test_db.name);
        assert!(
            w.gitlab.merge_request(w.project, 2).is_none(),
            "{}: exactly one MR",
            test_db.name
        );
        let on_main = w.gitlab.file(w.project, "main", FILE).unwrap();
        assert!(on_main.contains(&id), "{}: {on_main}", test_db.name);
    }
}

#[tokio::test]
async fn an_mr_without_commits_fails_at_once_instead_of_waiting_for_its_deadline() {
    let db = crate::helpers::sqlite_db().await;
    let w = world_with(
        &db.url,
        WorldOptions {
            batch_keys: "enabled = false".to_owned(),
            ..WorldOptions::default()
        },
    )
    .await;
    w.gitlab
        .script_pipelines(w.project, [PipelineOutcome::StuckRunning])
        .unwrap();
    let id = apply(&w.app).await;
    let opened = wait_for(&w.app, &id, |v| v["status"] == "MR_CREATED").await;
    let iid = u64::try_from(opened["mergeRequest"]["iid"].as_i64().unwrap()).unwrap();
    let mr = w.gitlab.merge_request(w.project, iid).unwrap();
    // Someone deletes the MR's branch: the MR has no commits now, which
    // GitLab will not merge, however long changegate waits.
    let deleted = crate::helpers::plain_client()
        .build()
        .unwrap()
        .delete(format!(
            "{}/projects/{}/repository/branches/{}",
            w.gitlab.api_url(),
            w.project,
            mr.source_branch.replace('/', "%2F")
        ))
        .header("PRIVATE-TOKEN", "alice-token")
        .send()
        .await
        .unwrap();
    assert!(deleted.status().is_success(), "{}", deleted.status());
    let (pipeline, _) = mr.head_pipeline.unwrap();
    w.gitlab
        .force_pipeline(w.project, pipeline, PipelineOutcome::Success)
        .unwrap();

    let view = finished(&w, &id).await;

    assert_eq!(view["next"], "CONTACT_TEAM", "{view}");
    assert!(
        view["message"].as_str().unwrap().contains("has no commits"),
        "{view}"
    );
    assert_eq!(w.gitlab.calls(Endpoint::Merge), 0, "{view}");
}

/// A request whose file the target branch already holds exactly as it
/// would be rendered, batched or not: VALIDATED, with no MR at all.
async fn a_file_already_in_place_needs_no_merge_request(batch_keys: &str) {
    for test_db in each_backend().await {
        let w = world_with(
            &test_db.url,
            WorldOptions {
                batch_keys: batch_keys.to_owned(),
                ..WorldOptions::default()
            },
        )
        .await;
        let id = apply(&w.app).await;
        assert_eq!(finished(&w, &id).await["status"], "VALIDATED");
        let rendered = w.gitlab.file(w.project, "main", FILE).unwrap();
        // Removed by hand, then the same removal is asked for: nothing to do.
        w.gitlab
            .push(w.project, w.users[0], "main", &[(FILE, None)])
            .unwrap();
        let close_id = close(&w.app).await;
        let closed = wait_for(&w.app, &close_id, |v| {
            v["status"] == "CLOSED" || v["next"] == "CONTACT_TEAM"
        })
        .await;
        assert_eq!(
            (closed["status"].as_str(), closed["step"]["name"].as_str()),
            (Some("CLOSED"), Some("ALREADY_IN_PLACE")),
            "{}: {closed}",
            test_db.name
        );
        // The file put back by hand exactly as the next apply renders it.
        let again = uuid::Uuid::new_v4().to_string();
        let in_place = rendered.replace(&id, &again);
        w.gitlab
            .push(w.project, w.users[0], "main", &[(FILE, Some(&in_place))])
            .unwrap();
        let body = serde_json::json!({
            "operationId": again,
            "targetKey": "demo.feature-flags",
            "reason": "try it"
        });
        let answer = w.app.post_as("alice", "/api/v1/applications", &body).await;
        assert_eq!(answer.status(), 202, "{}", test_db.name);

        let view = finished(&w, &again).await;

        assert_eq!(
            (view["status"].as_str(), view["step"]["name"].as_str()),
            (Some("VALIDATED"), Some("ALREADY_IN_PLACE")),
            "{}: {view}",
            test_db.name
        );
        assert_eq!(
            w.gitlab.calls(Endpoint::CreateMergeRequest),
            1,
            "{}: only the first apply opened an MR",
            test_db.name
        );
        assert_eq!(
            w.gitlab.calls(Endpoint::CreateBranch),
            1,
            "{}",
            test_db.name
        );
        assert_eq!(
            w.gitlab.file(w.project, "main", FILE).as_deref(),
            Some(in_place.as_str()),
            "{}",
            test_db.name
        );
    }
}

#[tokio::test]
async fn a_batched_request_whose_file_is_already_in_place_is_validated_without_an_mr() {
    a_file_already_in_place_needs_no_merge_request("interval = \"200ms\"").await;
}

#[tokio::test]
async fn an_unbatched_request_whose_file_is_already_in_place_is_validated_without_an_mr() {
    a_file_already_in_place_needs_no_merge_request("enabled = false").await;
}

/// A request whose MR branch someone edits before it merges, batched or
/// not: the merge happens, and the request says its file did not land.
async fn an_edited_branch_is_caught_after_the_merge(batch_keys: &str) {
    for test_db in each_backend().await {
        let w = world_with(
            &test_db.url,
            WorldOptions {
                batch_keys: batch_keys.to_owned(),
                ..WorldOptions::default()
            },
        )
        .await;
        w.gitlab
            .script_pipelines(w.project, [PipelineOutcome::StuckRunning])
            .unwrap();
        let id = apply(&w.app).await;
        let opened = wait_for(&w.app, &id, |v| v["status"] == "MR_CREATED").await;
        let iid = opened["mergeRequest"]["iid"].as_i64().unwrap();
        let branch = w
            .gitlab
            .merge_request(w.project, u64::try_from(iid).unwrap())
            .unwrap()
            .source_branch;
        // Someone edits the MR's branch; its new pipeline passes and it merges.
        w.gitlab
            .push(
                w.project,
                w.users[1],
                &branch,
                &[(FILE, Some("{\"edited\": true}\n"))],
            )
            .unwrap();

        let view = finished(&w, &id).await;

        assert_eq!(
            (
                view["status"].as_str(),
                view["step"]["name"].as_str(),
                view["next"].as_str()
            ),
            (
                Some("HANDLE_FAILED"),
                Some("HANDLE_NOT_LANDED"),
                Some("CONTACT_TEAM")
            ),
            "{}: {view}",
            test_db.name
        );
        assert!(
            view["message"]
                .as_str()
                .unwrap()
                .contains("not what was rendered"),
            "{}: {view}",
            test_db.name
        );
        assert_eq!(
            w.gitlab.file(w.project, "main", FILE).as_deref(),
            Some("{\"edited\": true}\n"),
            "{}: the merge did happen",
            test_db.name
        );
    }
}

#[tokio::test]
async fn a_batch_merge_that_did_not_put_the_rendered_file_on_main_is_not_reported_merged() {
    an_edited_branch_is_caught_after_the_merge("interval = \"200ms\"").await;
}

#[tokio::test]
async fn an_unbatched_merge_that_did_not_put_the_rendered_file_on_main_is_not_reported_merged() {
    an_edited_branch_is_caught_after_the_merge("enabled = false").await;
}

#[tokio::test]
async fn a_title_longer_than_gitlab_allows_is_cut_to_255_characters() {
    let db = crate::helpers::sqlite_db().await;
    let target = format!("team.{}", "t".repeat(115));
    // Unbatched: a request's own MR is titled after its target and subject.
    let w = world_with(
        &db.url,
        WorldOptions {
            extra: format!("[targets.\"{target}\"]\nself_only = false\n"),
            batch_keys: "enabled = false".to_owned(),
            ..WorldOptions::default()
        },
    )
    .await;
    let subject = "s".repeat(128);
    let body =
        serde_json::json!({ "targetKey": target, "subjectId": subject, "reason": "long names" });
    let answer: Value = w
        .app
        .post_as("alice", "/api/v1/applications", &body)
        .await
        .json()
        .await
        .unwrap();
    let id = answer["operationId"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_owned();

    let view = finished(&w, &id).await;

    assert_eq!(view["status"], "VALIDATED", "{view}");
    let mr = w.gitlab.merge_request(w.project, 1).unwrap();
    assert_eq!(mr.title.chars().count(), 255, "{}", mr.title);
    assert!(mr.title.ends_with('…'), "{}", mr.title);
}

/// Writes whose connection dropped after GitLab applied them, batched or not:
/// each is read back in the same round, never sent again.
async fn dropped_writes_are_read_back_not_sent_again(batch_keys: &str) {
    let db = crate::helpers::sqlite_db().await;
    let w = world_with(
        &db.url,
        WorldOptions {
            batch_keys: batch_keys.to_owned(),
            ..WorldOptions::default()
        },
    )
    .await;
    for endpoint in [
        Endpoint::CreateBranch,
        Endpoint::CreateCommit,
        Endpoint::CreateMergeRequest,
    ] {
        w.gitlab
            .inject(Fault::new(endpoint, FaultKind::AppliedThenDrop));
    }

    let id = apply(&w.app).await;
    let view = finished(&w, &id).await;

    assert_eq!(view["status"], "VALIDATED", "{batch_keys}: {view}");
    let calls: Vec<usize> = [
        Endpoint::CreateBranch,
        Endpoint::CreateCommit,
        Endpoint::CreateMergeRequest,
    ]
    .into_iter()
    .map(|endpoint| w.gitlab.calls(endpoint))
    .collect();
    assert_eq!(calls, [1, 1, 1], "{batch_keys}: one of each write");
    assert!(w.gitlab.merge_request(w.project, 2).is_none(), "one MR");
    let on_main = w.gitlab.file(w.project, "main", FILE).unwrap();
    assert!(on_main.contains(&id), "{batch_keys}: {on_main}");
}

#[tokio::test]
async fn batched_writes_whose_connection_dropped_are_read_back_not_sent_again() {
    dropped_writes_are_read_back_not_sent_again("interval = \"200ms\"").await;
}

#[tokio::test]
async fn unbatched_writes_whose_connection_dropped_are_read_back_not_sent_again() {
    dropped_writes_are_read_back_not_sent_again("enabled = false").await;
}
