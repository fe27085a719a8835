//! The merge gates, a merge, auto-merge and rebase (success, busy, failure, gone source)
//! against `merging.json`.

use changegate_sim::gitlab::MergeMethod;
use reqwest::Method;
use serde_json::json;

use super::Contract;
use crate::gitlab::support::{ALICE, BOT, Fixture, REPORTER};

#[tokio::test]
async fn merge_and_rebase_follow_the_contract() {
    let contract = Contract::new(include_str!("../../fixtures/gitlab/merging.json"));
    let fx = Fixture::start().await;
    // Semi-linear history, so a target that moved on must be rebased.
    fx.sim
        .update_settings(fx.project, |s| s.merge_method = MergeMethod::RebaseMerge)
        .unwrap();
    let iid = fx.open_mr("bot/one", &[("a.json", "{}\n")]).await;
    let merge = fx.mr_path(iid, "/merge");
    let rebase = fx.mr_path(iid, "/rebase");
    let poll = fx.mr_path(iid, "?include_rebase_in_progress=true");

    let unauthorized = fx.put(REPORTER, &merge, json!({})).await;
    contract.check("merge_unauthorized", &unauthorized);
    let not_ready = fx.put(BOT, &merge, json!({})).await;
    contract.check("merge_not_allowed", &not_ready);

    fx.poll_pipeline(iid, "success").await;
    fx.approve_both(iid).await;
    let old_head = fx.sim.merge_request(fx.project, iid).unwrap().sha;
    let moved = [("other.txt", Some("x\n"))];
    fx.sim.push(fx.project, fx.bot, "main", &moved).unwrap();
    // A stale sha as well: the git check must answer before the sha check.
    let behind = fx.put(BOT, &merge, json!({ "sha": "0".repeat(40) })).await;
    contract.check("merge_cannot_be_merged", &behind);

    contract.check("rebase_accepted", &fx.put(BOT, &rebase, json!({})).await);
    contract.check("rebase_busy", &fx.put(BOT, &rebase, json!({})).await);
    contract.check("rebase_polled_in_progress", &fx.get(BOT, &poll).await);
    contract.check("rebase_polled_done", &fx.get(BOT, &poll).await);
    fx.poll_pipeline(iid, "success").await;
    let stale = fx.put(BOT, &merge, json!({ "sha": old_head })).await;
    contract.check("merge_stale_sha", &stale);
    contract.check("merged", &fx.put(BOT, &merge, json!({})).await);

    let conflicting = fx.open_mr("bot/two", &[("shared.txt", "ours\n")]).await;
    let theirs = [("shared.txt", Some("theirs\n"))];
    fx.sim.push(fx.project, fx.bot, "main", &theirs).unwrap();
    let rebase = fx.mr_path(conflicting, "/rebase");
    assert_eq!(fx.put(BOT, &rebase, json!({})).await.status, 202);
    let poll = fx.mr_path(conflicting, "?include_rebase_in_progress=true");
    fx.get(BOT, &poll).await;
    contract.check("rebase_polled_failed", &fx.get(BOT, &poll).await);
    let branch = format!("{}/repository/branches/bot%2Ftwo", fx.root);
    fx.send(Method::DELETE, Some(BOT), &branch, None).await;
    let gone = fx.put(BOT, &rebase, json!({})).await;
    contract.check("rebase_source_missing", &gone);

    let armed = fx.open_mr("bot/three", &[("b.json", "{}\n")]).await;
    let approve = fx.mr_path(armed, "/approve");
    assert_eq!(fx.post(ALICE, &approve, json!({})).await.status, 201);
    let auto = json!({ "merge_when_pipeline_succeeds": true });
    let reply = fx.put(BOT, &fx.mr_path(armed, "/merge"), auto).await;
    contract.check("auto_merge_armed", &reply);

    contract.assert_all_checked();
}
