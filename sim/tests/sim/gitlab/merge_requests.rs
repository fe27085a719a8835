//! Merge request create/get/list/update, asynchronous mergeability and pipelines.

use changegate_sim::gitlab::{GitLabSimOptions, MrState, PipelineStatus};
use serde_json::{Value, json};

use super::support::{BOT, Fixture};

#[tokio::test]
async fn create_answers_gitlab_validation_errors() {
    let fx = Fixture::start().await;
    let fx = &fx;
    let iid = fx.open_mr("bot/one", &[("a.json", "{}\n")]).await;
    assert_eq!(iid, 1);
    let create = |body: Value| {
        let path = format!("{}/merge_requests", fx.root);
        async move { fx.post(BOT, &path, body).await }
    };
    let duplicate = create(json!({
        "source_branch": "bot/one", "target_branch": "main", "title": "again"
    }))
    .await;
    assert_eq!(duplicate.status, 409);
    assert_eq!(
        duplicate.body,
        json!({ "message": ["Another open merge request already exists for this source branch: !1"] })
    );
    let same =
        create(json!({ "source_branch": "main", "target_branch": "main", "title": "t" })).await;
    assert_eq!(same.status, 422);
    assert_eq!(
        same.body,
        json!({ "message": ["You can't use same project/branch for source and target"] })
    );
    let missing_branch =
        create(json!({ "source_branch": "ghost", "target_branch": "main", "title": "t" })).await;
    assert_eq!(missing_branch.status, 422);
    assert_eq!(
        missing_branch.body,
        json!({ "message": ["Source branch \"ghost\" does not exist"] })
    );
    let no_title = create(json!({ "source_branch": "bot/one", "target_branch": "main" })).await;
    assert_eq!(no_title.status, 400);
    assert_eq!(no_title.body, json!({ "error": "title is missing" }));
    let long_title = create(json!({
        "source_branch": "bot/two", "target_branch": "main", "title": "é".repeat(256)
    }))
    .await;
    assert_eq!(long_title.status, 400);
    assert_eq!(
        long_title.body,
        json!({ "message": { "title": ["is too long (maximum is 255 characters)"] } })
    );
    let long_description = create(json!({
        "source_branch": "bot/two", "target_branch": "main", "title": "t",
        "description": "x".repeat((1 << 20) + 1)
    }))
    .await;
    assert_eq!(long_description.status, 400);
    assert_eq!(
        long_description.body,
        json!({ "message": { "description": ["is too long (maximum is 1048576 characters)"] } })
    );
}

#[tokio::test]
async fn create_response_then_polls_show_async_mergeability_and_pipeline() {
    let options = GitLabSimOptions {
        mergeability_polls: 2,
        ..GitLabSimOptions::default()
    };
    let fx = Fixture::with_options(options).await;
    let fx = &fx;
    fx.post(
        BOT,
        &format!("{}/repository/branches", fx.root),
        json!({ "branch": "bot/one", "ref": "main" }),
    )
    .await;
    fx.sim
        .push(fx.project, fx.bot, "bot/one", &[("a.json", Some("{}\n"))])
        .expect("push works");
    let created = fx
        .post(
            BOT,
            &format!("{}/merge_requests", fx.root),
            json!({ "source_branch": "bot/one", "target_branch": "main", "title": "t", "description": "d" }),
        )
        .await;
    assert_eq!(created.status, 201);
    assert_eq!(created.body["state"], "opened");
    assert_eq!(created.body["detailed_merge_status"], "unchecked");
    assert_eq!(created.body["head_pipeline"], Value::Null);
    assert_eq!(
        created.body["sha"],
        fx.sim.branch_head(fx.project, "bot/one").unwrap().as_str()
    );
    assert!(created.body["id"] != created.body["iid"]);

    let mut seen = Vec::new();
    for _ in 0..4 {
        let mr = fx.get(BOT, &fx.mr_path(1, "")).await;
        assert_eq!(mr.body["head_pipeline"]["sha"], mr.body["sha"]);
        seen.push((
            mr.str("detailed_merge_status").to_owned(),
            mr.body["head_pipeline"]["status"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        ));
    }
    let expected = [
        ("unchecked", "pending"),
        ("checking", "running"),
        ("not_approved", "success"),
        ("not_approved", "success"),
    ];
    let seen: Vec<(&str, &str)> = seen.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(seen, expected);

    let snapshot = fx.sim.merge_request(fx.project, 1).expect("mr exists");
    let (pipeline_id, status) = snapshot.head_pipeline.expect("has a pipeline");
    assert_eq!(status, PipelineStatus::Success);
    let pipeline = fx
        .get(BOT, &format!("{}/pipelines/{pipeline_id}", fx.root))
        .await;
    assert_eq!(pipeline.body["status"], "success");
    assert_eq!(pipeline.body["ref"], "refs/merge-requests/1/head");
    let list = fx.get(BOT, &fx.mr_path(1, "/pipelines")).await;
    assert_eq!(list.body[0]["id"], pipeline_id);
}

#[tokio::test]
async fn pipeline_steps_once_per_pipeline_read_and_new_push_gets_new_pipeline() {
    let fx = Fixture::start().await;
    let fx = &fx;
    let iid = fx.open_mr("bot/one", &[("a.json", "1\n")]).await;
    let (first, status) = fx
        .sim
        .merge_request(fx.project, iid)
        .unwrap()
        .head_pipeline
        .unwrap();
    assert_eq!(status, PipelineStatus::Created);
    let path = format!("{}/pipelines/{first}", fx.root);
    let statuses = [
        fx.get(BOT, &path).await.body["status"].clone(),
        fx.get(BOT, &path).await.body["status"].clone(),
        fx.get(BOT, &path).await.body["status"].clone(),
    ];
    assert_eq!(
        statuses,
        [json!("pending"), json!("running"), json!("success")]
    );

    let new_head = fx
        .sim
        .push(fx.project, fx.bot, "bot/one", &[("a.json", Some("2\n"))])
        .unwrap();
    let mr = fx.get(BOT, &fx.mr_path(iid, "")).await;
    assert_eq!(mr.body["sha"], new_head.as_str());
    assert_eq!(mr.body["head_pipeline"]["sha"], new_head.as_str());
    assert_ne!(mr.body["head_pipeline"]["id"], first);
    assert_eq!(mr.body["detailed_merge_status"], "unchecked");
    let all = fx.get(BOT, &fx.mr_path(iid, "/pipelines")).await;
    assert_eq!(all.body.as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn list_filters_by_state_and_source_branch() {
    let fx = Fixture::start().await;
    let fx = &fx;
    fx.open_mr("bot/one", &[("a", "a")]).await;
    fx.open_mr("bot/two", &[("b", "b")]).await;
    fx.put(BOT, &fx.mr_path(1, ""), json!({ "state_event": "close" }))
        .await;
    let list = |query: &str| {
        let path = format!("{}/merge_requests{query}", fx.root);
        async move { fx.get(BOT, &path).await.body }
    };
    let iids = |body: Value| -> Vec<u64> {
        body.as_array()
            .unwrap()
            .iter()
            .map(|mr| mr["iid"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(iids(list("").await), [2, 1]);
    assert_eq!(iids(list("?state=opened").await), [2]);
    assert_eq!(iids(list("?state=closed").await), [1]);
    assert_eq!(iids(list("?source_branch=bot%2Fone").await), [1]);
    assert_eq!(
        iids(list("?state=opened&source_branch=bot%2Fone").await),
        Vec::<u64>::new()
    );
}

#[tokio::test]
async fn update_closes_reopens_and_validates() {
    let fx = Fixture::start().await;
    let fx = &fx;
    let iid = fx.open_mr("bot/one", &[("a", "a")]).await;
    let path = fx.mr_path(iid, "");
    let nothing = fx.put(BOT, &path, json!({})).await;
    assert_eq!(nothing.status, 400);
    assert!(
        nothing
            .str("error")
            .ends_with("at least one parameter must be provided")
    );
    let bad = fx.put(BOT, &path, json!({ "state_event": "merge" })).await;
    assert_eq!(
        bad.body,
        json!({ "error": "state_event does not have a valid value" })
    );

    let closed = fx.put(BOT, &path, json!({ "state_event": "close" })).await;
    assert_eq!(closed.status, 200);
    assert_eq!(closed.body["state"], "closed");
    assert!(closed.body["closed_at"].is_string());
    assert_eq!(closed.body["closed_by"]["username"], "change-bot");
    let again = fx.put(BOT, &path, json!({ "state_event": "close" })).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body["closed_at"], closed.body["closed_at"]);

    let other = fx
        .post(
            BOT,
            &format!("{}/merge_requests", fx.root),
            json!({ "source_branch": "bot/one", "target_branch": "main", "title": "second" }),
        )
        .await;
    assert_eq!(other.status, 201);
    let blocked = fx.put(BOT, &path, json!({ "state_event": "reopen" })).await;
    assert_eq!(blocked.status, 409);
    assert!(blocked.body["message"].is_array());
    fx.put(BOT, &fx.mr_path(2, ""), json!({ "state_event": "close" }))
        .await;
    let reopened = fx
        .put(
            BOT,
            &path,
            json!({ "state_event": "reopen", "title": "renamed" }),
        )
        .await;
    assert_eq!(reopened.body["state"], "opened");
    assert_eq!(reopened.body["title"], "renamed");
    assert_eq!(reopened.body["closed_at"], Value::Null);
    assert_eq!(
        fx.sim.merge_request(fx.project, iid).unwrap().state,
        MrState::Opened
    );
    let missing = fx.get(BOT, &fx.mr_path(99, "")).await;
    assert_eq!(missing.status, 404);
}
