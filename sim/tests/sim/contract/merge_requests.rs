//! Merge request create, get, list and close against `merge_requests.json`, and the
//! pipeline reads against `pipelines.json`.

use serde_json::json;

use super::Contract;
use crate::gitlab::support::{BOT, Fixture};

#[tokio::test]
async fn merge_requests_follow_the_contract() {
    let contract = Contract::new(include_str!("../../fixtures/gitlab/merge_requests.json"));
    let fx = Fixture::start().await;
    fx.post(
        BOT,
        &format!("{}/repository/commits", fx.root),
        json!({
            "branch": "bot/one",
            "start_branch": "main",
            "commit_message": "bot: add",
            "actions": [{ "action": "create", "file_path": "a.json", "content": "{}\n" }]
        }),
    )
    .await;
    let merge_requests = format!("{}/merge_requests", fx.root);
    let create =
        json!({ "source_branch": "bot/one", "target_branch": "main", "title": "bot: change" });

    let created = fx.post(BOT, &merge_requests, create.clone()).await;
    contract.check("created", &created);
    let duplicate = fx.post(BOT, &merge_requests, create).await;
    contract.check("duplicate", &duplicate);

    let iid = created.body["iid"].as_u64().unwrap();
    fx.poll_pipeline(iid, "running").await;
    let polled = fx
        .get(BOT, &fx.mr_path(iid, "?include_rebase_in_progress=true"))
        .await;
    contract.check("get", &polled);
    let plain = fx.get(BOT, &fx.mr_path(iid, "")).await;
    contract.check("get_without_rebase_flag", &plain);
    let missing = fx.get(BOT, &fx.mr_path(iid + 100, "")).await;
    contract.check("not_found", &missing);
    let listed = fx.get(BOT, &merge_requests).await;
    contract.check("list", &listed);

    let nothing = fx.put(BOT, &fx.mr_path(iid, ""), json!({})).await;
    contract.check("update_without_attributes", &nothing);
    let close = json!({ "state_event": "close" });
    let closed = fx.put(BOT, &fx.mr_path(iid, ""), close).await;
    contract.check("closed", &closed);

    contract.assert_all_checked();
}

#[tokio::test]
async fn pipelines_follow_the_contract() {
    let contract = Contract::new(include_str!("../../fixtures/gitlab/pipelines.json"));
    let fx = Fixture::start().await;
    let iid = fx.open_mr("bot/one", &[("a.json", "{}\n")]).await;
    let snapshot = fx.sim.merge_request(fx.project, iid).unwrap();
    let (id, _) = snapshot.head_pipeline.unwrap();

    let pipeline = fx.get(BOT, &format!("{}/pipelines/{id}", fx.root)).await;
    contract.check("get", &pipeline);
    let listed = fx.get(BOT, &fx.mr_path(iid, "/pipelines")).await;
    contract.check("list_for_merge_request", &listed);
    let project = fx
        .get(
            BOT,
            &format!(
                "{}/pipelines?status=success&source=merge_request_event",
                fx.root
            ),
        )
        .await;
    contract.check("list_for_project", &project);
    let invalid = fx
        .get(BOT, &format!("{}/pipelines?status=green", fx.root))
        .await;
    contract.check("list_for_project_invalid_status", &invalid);
    let missing = fx
        .get(BOT, &format!("{}/pipelines/{}", fx.root, id + 100))
        .await;
    contract.check("not_found", &missing);

    contract.assert_all_checked();
}
