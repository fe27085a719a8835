//! Approval bodies per tier, approve and unapprove against `approvals.json`.

use changegate_sim::gitlab::Tier;
use serde_json::json;

use super::Contract;
use crate::gitlab::support::{ALICE, BOB, Fixture, REPORTER};

#[tokio::test]
async fn approvals_follow_the_contract() {
    let contract = Contract::new(include_str!("../../fixtures/gitlab/approvals.json"));
    let fx = Fixture::start().await;
    let iid = fx.open_mr("bot/one", &[("a.json", "{}\n")]).await;
    let approvals = fx.mr_path(iid, "/approvals");
    let approve = fx.mr_path(iid, "/approve");

    contract.check("ce", &fx.get(ALICE, &approvals).await);
    let forbidden = fx.post(REPORTER, &approve, json!({})).await;
    contract.check("approve_forbidden", &forbidden);
    let stale = fx
        .post(ALICE, &approve, json!({ "sha": "0".repeat(40) }))
        .await;
    contract.check("approve_stale_sha", &stale);
    let approved = fx.post(ALICE, &approve, json!({})).await;
    contract.check("approved", &approved);
    let again = fx.post(ALICE, &approve, json!({})).await;
    contract.check("approved_again", &again);
    let unapprove = fx
        .post(BOB, &fx.mr_path(iid, "/unapprove"), json!({}))
        .await;
    contract.check("unapprove_not_approved", &unapprove);

    fx.sim
        .update_settings(fx.project, |settings| settings.tier = Tier::Ee)
        .unwrap();
    contract.check("ee", &fx.get(BOB, &approvals).await);

    contract.assert_all_checked();
}
