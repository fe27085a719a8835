//! Approvals: CE/EE bodies relative to the caller, approve/unapprove quirks, checklist.

use std::collections::BTreeSet;

use changegate_sim::gitlab::{ChecklistItem, Tier};
use serde_json::{Value, json};

use super::support::{ALICE, BOB, BOT, Fixture, OUTSIDER, REPORTER};

fn keys(body: &Value) -> BTreeSet<&str> {
    body.as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect()
}

#[tokio::test]
async fn approvals_body_is_per_tier_and_relative_to_the_caller() {
    let fx = Fixture::start().await;
    let iid = fx.open_mr("bot/one", &[("a", "a")]).await;
    let approvals = fx.mr_path(iid, "/approvals");

    let ce = fx.get(ALICE, &approvals).await;
    assert_eq!(ce.status, 200);
    assert_eq!(
        keys(&ce.body),
        BTreeSet::from([
            "approved",
            "approved_by",
            "user_can_approve",
            "user_has_approved"
        ])
    );
    assert_eq!(ce.body["approved"], false);
    assert_eq!(ce.body["user_can_approve"], true);

    let approved = fx
        .post(ALICE, &fx.mr_path(iid, "/approve"), json!({}))
        .await;
    assert_eq!(approved.status, 201);
    assert_eq!(approved.body["user_has_approved"], true);
    assert_eq!(
        approved.body["approved_by"][0]["user"]["username"],
        "rev-alice"
    );

    let as_alice = fx.get(ALICE, &approvals).await.body;
    assert_eq!(
        (
            as_alice["user_has_approved"].clone(),
            as_alice["user_can_approve"].clone()
        ),
        (json!(true), json!(false))
    );
    let as_bob = fx.get(BOB, &approvals).await.body;
    assert_eq!(
        (
            as_bob["user_has_approved"].clone(),
            as_bob["user_can_approve"].clone()
        ),
        (json!(false), json!(true))
    );
    assert_eq!(as_bob["approved"], true);

    fx.sim
        .update_settings(fx.project, |s| s.tier = Tier::Ee)
        .unwrap();
    let ee = fx.get(BOB, &approvals).await.body;
    for field in [
        "id",
        "iid",
        "project_id",
        "title",
        "state",
        "merge_status",
        "approval_rules_left",
        "suggested_approvers",
    ] {
        assert!(ee.get(field).is_some(), "EE body lacks {field}");
    }
    assert_eq!(ee["approvals_required"], 2);
    assert_eq!(ee["approvals_left"], 1);
    assert_eq!(ee["approved"], false);
    assert_eq!(ee["user_can_approve"], true);
}

#[tokio::test]
async fn approve_checks_in_gitlab_order_and_repeat_is_401() {
    let fx = Fixture::start().await;
    let iid = fx.open_mr("bot/one", &[("a", "a")]).await;
    let approve = fx.mr_path(iid, "/approve");

    for token in [OUTSIDER, REPORTER] {
        let denied = fx.post(token, &approve, json!({})).await;
        assert_eq!(denied.status, 403);
        assert_eq!(denied.body, json!({ "message": "403 Forbidden" }));
    }
    let head = fx.sim.merge_request(fx.project, iid).unwrap().sha;
    let stale = fx
        .post(ALICE, &approve, json!({ "sha": "0".repeat(40) }))
        .await;
    assert_eq!(stale.status, 409);
    assert_eq!(
        stale.str("message"),
        format!("SHA does not match HEAD of source branch: {head}")
    );
    let ok = fx.post(ALICE, &approve, json!({ "sha": head })).await;
    assert_eq!(ok.status, 201);
    let repeat = fx.post(ALICE, &approve, json!({})).await;
    assert_eq!(repeat.status, 401);
    assert_eq!(repeat.body, json!({ "message": "401 Unauthorized" }));
    let snapshot = fx.sim.merge_request(fx.project, iid).unwrap();
    assert_eq!(snapshot.approved_by, ["rev-alice"]);
    let missing = fx.post(ALICE, &fx.mr_path(42, "/approve"), json!({})).await;
    assert_eq!(missing.status, 404);
}

#[tokio::test]
async fn unapprove_without_approval_is_404() {
    let fx = Fixture::start().await;
    let iid = fx.open_mr("bot/one", &[("a", "a")]).await;
    let unapprove = fx.mr_path(iid, "/unapprove");
    let none = fx.post(BOB, &unapprove, json!({})).await;
    assert_eq!(none.status, 404);
    assert_eq!(none.body, json!({ "message": "404 Not Found" }));
    fx.post(BOB, &fx.mr_path(iid, "/approve"), json!({})).await;
    let removed = fx.post(BOB, &unapprove, json!({})).await;
    assert_eq!(removed.status, 201);
    assert_eq!(removed.body["approved_by"], json!([]));
    assert!(
        fx.sim
            .merge_request(fx.project, iid)
            .unwrap()
            .approved_by
            .is_empty()
    );
    let again = fx.post(BOB, &fx.mr_path(iid, "/approve"), json!({})).await;
    assert_eq!(again.status, 201);
}

#[tokio::test]
async fn checklist_422_carries_the_current_list_and_a_rebuilt_approve_succeeds() {
    let fx = Fixture::start().await;
    let iid = fx.open_mr("bot/one", &[("a", "a")]).await;
    let items = vec![
        ChecklistItem::new("tests-pass", "Tests pass"),
        ChecklistItem::new("reviewed", "Diff reviewed"),
    ];
    fx.sim
        .update_settings(fx.project, |s| {
            s.approval_checklist_required = true;
            s.approval_checklist = items;
        })
        .unwrap();
    let served = fx
        .get(BOT, &format!("{}/approval_checklist", fx.root))
        .await;
    assert_eq!(
        served.body,
        json!({ "items": [
            { "id": "tests-pass", "label": "Tests pass" },
            { "id": "reviewed", "label": "Diff reviewed" }
        ] })
    );
    let approve = fx.mr_path(iid, "/approve");
    let missing = fx.post(ALICE, &approve, json!({})).await;
    assert_eq!(missing.status, 422);
    assert_eq!(missing.body["message"], "checklist mismatch");
    assert_eq!(missing.body["checklist"], served.body);

    // A client answers from the 422 body, as the approve component does.
    let answer = |checklist: &Value| -> Value {
        let answers: Vec<Value> = checklist["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| json!({ "id": item["id"], "checked": true }))
            .collect();
        json!({ "checklist": answers })
    };
    let ok = fx
        .post(ALICE, &approve, answer(&missing.body["checklist"]))
        .await;
    assert_eq!(ok.status, 201, "{}", ok.text);

    let stale = answer(&served.body);
    fx.sim
        .update_settings(fx.project, |s| {
            s.approval_checklist
                .push(ChecklistItem::new("rollback", "Rollback planned"));
        })
        .unwrap();
    let outdated = fx.post(BOB, &approve, stale).await;
    assert_eq!(outdated.status, 422);
    assert_eq!(outdated.body["checklist"]["items"][2]["id"], "rollback");
    let unchecked = json!({ "checklist": [
        { "id": "tests-pass", "checked": true },
        { "id": "reviewed", "checked": false },
        { "id": "rollback", "checked": true }
    ] });
    assert_eq!(fx.post(BOB, &approve, unchecked).await.status, 422);
    let rebuilt = fx
        .post(BOB, &approve, answer(&outdated.body["checklist"]))
        .await;
    assert_eq!(rebuilt.status, 201);
    assert_eq!(
        fx.sim
            .merge_request(fx.project, iid)
            .unwrap()
            .approved_by
            .len(),
        2
    );
}

#[tokio::test]
async fn with_no_approvals_required_the_free_body_stands_and_the_merge_needs_none() {
    let fx = Fixture::start().await;
    fx.sim
        .update_settings(fx.project, |s| {
            s.tier = Tier::Ce;
            s.approvals_required = 0;
        })
        .unwrap();
    let iid = fx.open_mr("bot/one", &[("a", "a")]).await;
    let mr = fx.poll_pipeline(iid, "success").await;
    assert_eq!(mr["detailed_merge_status"], "mergeable", "{mr}");
    let free = fx.get(ALICE, &fx.mr_path(iid, "/approvals")).await.body;
    assert!(free.get("approvals_left").is_none(), "{free}");
    assert_eq!(free["approved"], false);
    let merged = fx.put(BOT, &fx.mr_path(iid, "/merge"), json!({})).await;
    assert_eq!(merged.status, 200, "{}", merged.text);
}

#[tokio::test]
async fn approvals_still_required_after_every_approval_leave_the_mr_not_approved() {
    let fx = Fixture::start().await;
    fx.sim
        .update_settings(fx.project, |s| {
            s.tier = Tier::Ee;
            s.approvals_required = 3;
        })
        .unwrap();
    let iid = fx.ready_mr("bot/one", &[("a", "a")]).await;
    let state = fx.get(BOT, &fx.mr_path(iid, "/approvals")).await.body;
    assert_eq!(state["approved_by"].as_array().unwrap().len(), 2);
    assert_eq!(
        (state["approvals_left"].clone(), state["approved"].clone()),
        (json!(1), json!(false))
    );
    assert_eq!(
        state["approval_rules_left"],
        json!([{ "id": 1, "name": "All Members", "rule_type": "any_approver" }])
    );
    let mr = fx.get(BOT, &fx.mr_path(iid, "")).await.body;
    assert_eq!(mr["detailed_merge_status"], "not_approved");
    let refused = fx.put(BOT, &fx.mr_path(iid, "/merge"), json!({})).await;
    assert_eq!(refused.status, 405);
}

#[tokio::test]
async fn a_rule_counts_only_its_approvers_and_lets_others_approve_once_it_is_met() {
    let fx = Fixture::start().await;
    let alice = fx.sim.add_user("rev-alice", ALICE);
    fx.sim
        .update_settings(fx.project, |s| {
            s.tier = Tier::Ee;
            s.approvals_required = 1;
            s.eligible_approvers = Some(vec![alice]);
        })
        .unwrap();
    let iid = fx.open_mr("bot/one", &[("a", "a")]).await;
    let approvals = fx.mr_path(iid, "/approvals");
    let approve = fx.mr_path(iid, "/approve");

    let as_bob = fx.get(BOB, &approvals).await.body;
    assert_eq!(
        (
            as_bob["user_can_approve"].clone(),
            as_bob["approvals_left"].clone()
        ),
        (json!(false), json!(1))
    );
    assert_eq!(
        as_bob["approval_rules_left"],
        json!([{ "id": 1, "name": "Approvers", "rule_type": "regular" }])
    );
    assert_eq!(as_bob["approvers"][0]["user"]["username"], "rev-alice");
    let refused = fx.post(BOB, &approve, json!({})).await;
    assert_eq!(refused.status, 401);
    assert_eq!(fx.post(ALICE, &approve, json!({})).await.status, 201);

    let met = fx.get(BOB, &approvals).await.body;
    assert_eq!(
        (
            met["approvals_left"].clone(),
            met["approved"].clone(),
            met["user_can_approve"].clone()
        ),
        (json!(0), json!(true), json!(true))
    );
    assert_eq!(met["approval_rules_left"], json!([]));
    assert_eq!(fx.post(BOB, &approve, json!({})).await.status, 201);
}
