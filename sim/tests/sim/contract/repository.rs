//! Branch creation and commits with actions against `repository.json`.

use serde_json::json;

use super::Contract;
use crate::gitlab::support::{BOT, Fixture};

#[tokio::test]
async fn branches_and_commits_follow_the_contract() {
    let contract = Contract::new(include_str!("../../fixtures/gitlab/repository.json"));
    let fx = Fixture::start().await;
    let branches = format!("{}/repository/branches", fx.root);
    let branch = |name: &str, start: &str| json!({ "branch": name, "ref": start });

    let created = fx.post(BOT, &branches, branch("bot/one", "main")).await;
    contract.check("branch_created", &created);
    let exists = fx.post(BOT, &branches, branch("bot/one", "main")).await;
    contract.check("branch_exists", &exists);
    let empty = fx.post(BOT, &branches, branch("bot/two", "")).await;
    contract.check("branch_ref_empty", &empty);
    let unknown = fx.post(BOT, &branches, branch("bot/two", "nowhere")).await;
    contract.check("branch_ref_unknown", &unknown);

    let commits = format!("{}/repository/commits", fx.root);
    let commit = |action: &str| {
        json!({
            "branch": "bot/one",
            "commit_message": "bot: add binding",
            "actions": [{ "action": action, "file_path": "bindings/a.json", "content": "{}\n" }]
        })
    };
    let committed = fx.post(BOT, &commits, commit("create")).await;
    contract.check("commit_created", &committed);
    let invalid = fx.post(BOT, &commits, commit("copy")).await;
    contract.check("commit_invalid_action", &invalid);
    let exists = fx.post(BOT, &commits, commit("create")).await;
    contract.check("commit_file_exists", &exists);
    let not_json = fx
        .client
        .post(format!("{}{commits}", fx.sim.api_url()))
        .header("PRIVATE-TOKEN", BOT)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    contract.check(
        "commit_invalid_json",
        &Fixture::reply(not_json).await.unwrap(),
    );

    contract.assert_all_checked();
}
