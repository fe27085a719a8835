//! The `/_sim` control API of the GitLab simulator, and faults that strike with a
//! probability drawn from the seeded generator.

use changegate_sim::gitlab::{Endpoint, Fault, FaultKind, GitLabSimOptions};
use reqwest::Method;
use serde_json::{Value, json};

use super::support::{ALICE, BOB, BOT, Fixture};
use crate::control_client::{Answer, call};

impl Fixture {
    /// Calls `{base_url}/_sim{path}`.
    async fn control(&self, method: Method, path: &str, body: Option<Value>) -> Answer {
        call(method, &format!("{}/_sim{path}", self.sim.base_url()), body).await
    }
}

#[tokio::test]
async fn users_projects_members_and_settings_can_be_set_up_over_http() {
    let fx = Fixture::start().await;
    let project = fx
        .control(
            Method::POST,
            "/projects",
            Some(json!({ "path": "team/other" })),
        )
        .await;
    assert_eq!(project.status, 201);
    let user = json!({ "username": "dev", "token": "dev-token" });
    let user = fx.control(Method::POST, "/users", Some(user)).await;
    assert_eq!(user.status, 201);
    let user_id = user.body["id"].as_u64().unwrap();

    let developer = json!({ "access_level": "developer" });
    let member = format!("/projects/team%2Fother/members/{user_id}");
    let added = fx
        .control(Method::PUT, &member, Some(developer.clone()))
        .await;
    assert_eq!(added.status, 204, "{:?}", added.body);
    let settings = json!({ "approvals_required": 1, "tier": "ee" });
    let by_id = format!("/projects/{}/settings", project.body["id"]);
    assert_eq!(
        fx.control(Method::PUT, &by_id, Some(settings)).await.status,
        204
    );
    let read = fx.get("dev-token", "/projects/team%2Fother").await;
    assert_eq!(read.status, 200);
    assert_eq!(read.body["approvals_before_merge"], 1);

    let unknown_project = "/projects/nope/members/1";
    let missing = fx
        .control(Method::PUT, unknown_project, Some(developer.clone()))
        .await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.body, json!({ "error": "no project nope" }));
    let unknown_user = fx
        .control(
            Method::PUT,
            "/projects/team%2Fother/members/999",
            Some(developer),
        )
        .await;
    assert_eq!(unknown_user.status, 404);
    let owner = Some(json!({ "access_level": "owner" }));
    let bad_level = fx.control(Method::PUT, &member, owner).await;
    assert_eq!(bad_level.status, 400);
    assert!(bad_level.body["error"].as_str().unwrap().contains("owner"));
}

#[tokio::test]
async fn merge_method_merged_results_and_an_approval_rule_are_set_over_http() {
    let fx = Fixture::start().await;
    let alice = fx.sim.add_user("rev-alice", ALICE);
    let settings = format!("/projects/{}/settings", fx.project);
    let put = |body: Value| fx.control(Method::PUT, &settings, Some(body));
    let set = json!({
        "merge_method": "ff",
        "merged_results_pipelines": true,
        "tier": "ee",
        "eligible_approvers": [alice],
    });
    assert_eq!(put(set).await.status, 204);
    assert_eq!(fx.get(BOT, &fx.root).await.body["merge_method"], "ff");
    let iid = fx.open_mr("bot/one", &[("a.json", "{}\n")]).await;
    let mr = fx.get(BOT, &fx.mr_path(iid, "")).await.body;
    assert_eq!(
        mr["head_pipeline"]["ref"],
        format!("refs/merge-requests/{iid}/merge")
    );
    let approvals = fx.mr_path(iid, "/approvals");
    assert_eq!(
        fx.get(BOB, &approvals).await.body["user_can_approve"],
        false
    );

    // Leaving a field out keeps it; `null` drops the rule.
    assert_eq!(put(json!({ "approvals_required": 2 })).await.status, 204);
    assert_eq!(
        fx.get(BOB, &approvals).await.body["user_can_approve"],
        false
    );
    assert_eq!(put(json!({ "eligible_approvers": null })).await.status, 204);
    assert_eq!(fx.get(BOB, &approvals).await.body["user_can_approve"], true);
    let unknown = put(json!({ "merge_method": "squash" })).await;
    assert_eq!(unknown.status, 400);
}

#[tokio::test]
async fn pushes_branches_merge_requests_and_pipelines_are_controlled_over_http() {
    let fx = Fixture::start().await;
    let iid = fx.open_mr("bot/one", &[("a.json", "{}\n")]).await;
    let root = format!("/projects/{}", fx.project);

    let change = json!({ "path": "notes.txt", "content": "moved\n" });
    let push = json!({ "user_id": fx.bot, "branch": "main", "changes": [change] });
    let pushed = fx
        .control(Method::POST, &format!("{root}/pushes"), Some(push))
        .await;
    assert_eq!(pushed.status, 201, "{:?}", pushed.body);
    let head = fx.sim.branch_head(fx.project, "main").unwrap();
    assert_eq!(pushed.body["sha"], head.as_str());
    let main = fx
        .control(Method::GET, &format!("{root}/branches/main"), None)
        .await;
    assert_eq!(main.body["head"], head.as_str());
    assert_eq!(main.body["files"]["notes.txt"], "moved\n");
    let ghost = fx
        .control(Method::GET, &format!("{root}/branches/ghost"), None)
        .await;
    assert_eq!(ghost.status, 404);

    let mr_path = format!("{root}/merge_requests/{iid}");
    let mr = fx.control(Method::GET, &mr_path, None).await;
    assert_eq!(mr.body["state"], "opened");
    assert_eq!(mr.body["source_branch"], "bot/one");
    assert_eq!(mr.body["head_pipeline"]["status"], "created");
    let pipeline = mr.body["head_pipeline"]["id"].as_u64().unwrap();
    let pipeline_path = format!("{root}/pipelines/{pipeline}");
    let advanced = fx
        .control(Method::POST, &format!("{pipeline_path}/advance"), None)
        .await;
    assert_eq!(
        advanced.body,
        json!({ "id": pipeline, "status": "pending", "duration_ms": 0 })
    );
    let failed = json!({ "outcome": "failed" });
    let forced = fx
        .control(
            Method::POST,
            &format!("{pipeline_path}/force"),
            Some(failed),
        )
        .await;
    assert_eq!(forced.body["status"], "failed");
    let read = fx.control(Method::GET, &pipeline_path, None).await;
    assert_eq!(read.body["status"], "failed");
    let unknown = fx
        .control(Method::GET, &format!("{root}/pipelines/1"), None)
        .await;
    assert_eq!(unknown.status, 404);

    let script = json!({ "outcomes": ["stuck_running"] });
    let scripted = fx
        .control(
            Method::POST,
            &format!("{root}/pipeline_script"),
            Some(script),
        )
        .await;
    assert_eq!(scripted.status, 204);
    let repush = json!({ "user_id": fx.bot, "branch": "bot/one", "changes": [
        { "path": "a.json", "content": null }
    ] });
    fx.control(Method::POST, &format!("{root}/pushes"), Some(repush))
        .await;
    for _ in 0..5 {
        fx.get(BOT, &fx.mr_path(iid, "")).await;
    }
    let mr = fx.control(Method::GET, &mr_path, None).await;
    assert_ne!(mr.body["head_pipeline"]["id"], pipeline);
    assert_eq!(mr.body["head_pipeline"]["status"], "running");
    let merged = fx
        .control(Method::GET, "/merged_merge_requests", None)
        .await;
    assert_eq!(merged.body, json!([]));
}

#[tokio::test]
async fn faults_are_injected_and_requests_listed_over_http() {
    let fx = Fixture::start().await;
    let fault = json!({ "endpoint": "get_project", "kind": "status", "status": 503, "times": 2 });
    let injected = fx.control(Method::POST, "/faults", Some(fault)).await;
    assert_eq!(injected.status, 204, "{:?}", injected.body);
    assert_eq!(fx.get(BOT, &fx.root).await.status, 503);
    assert_eq!(fx.get(BOT, &fx.root).await.status, 503);
    assert_eq!(fx.get(BOT, &fx.root).await.status, 200);
    let limited = json!({ "kind": "rate_limited", "retry_after_secs": 3 });
    fx.control(Method::POST, "/faults", Some(limited)).await;
    let reply = fx
        .get(BOT, &format!("{}/repository/branches", fx.root))
        .await;
    assert_eq!(reply.status, 429);
    assert_eq!(reply.headers["retry-after"], "3");

    for (bad, complaint) in [
        (json!({ "kind": "melt" }), "melt"),
        (json!({ "kind": "status" }), "status"),
        (
            json!({ "endpoint": "nowhere", "kind": "lost_response" }),
            "nowhere",
        ),
        (
            json!({ "kind": "lost_response", "probability": 1.5 }),
            "probability",
        ),
    ] {
        let refused = fx.control(Method::POST, "/faults", Some(bad)).await;
        assert_eq!(refused.status, 400);
        let error = refused.body["error"].as_str().unwrap();
        assert!(error.contains(complaint), "{error}");
    }
    let slow = json!({ "kind": "slow", "delay_ms": 60_000 });
    fx.control(Method::POST, "/faults", Some(slow)).await;
    assert_eq!(
        fx.control(Method::DELETE, "/faults", None).await.status,
        204
    );
    assert_eq!(fx.get(BOT, &fx.root).await.status, 200);

    let requests = fx.control(Method::GET, "/requests", None).await.body;
    let requests = requests.as_array().unwrap();
    assert_eq!(
        requests.len(),
        5,
        "control calls are not logged: {requests:#?}"
    );
    assert_eq!(
        requests[0],
        json!({
            "endpoint": "get_project",
            "method": "GET",
            "path": "/api/v4/projects/config%2Frepo",
            "status": 503,
            "handled": null,
            "user": "change-bot",
            "fault": { "kind": "status", "status": 503 }
        })
    );
    assert_eq!(requests[2]["fault"], Value::Null);
    assert_eq!(
        requests[3]["fault"],
        json!({ "kind": "rate_limited", "retry_after_secs": 3 })
    );
    let calls = fx.control(Method::GET, "/calls/get_project", None).await;
    assert_eq!(calls.body, json!({ "endpoint": "get_project", "calls": 4 }));
    assert_eq!(
        fx.control(Method::GET, "/calls/bogus", None).await.status,
        400
    );

    // The control API is never part of the simulated GitLab API.
    let hidden = fx.get(BOT, "/_sim/requests").await;
    assert_eq!(hidden.status, 404);
}

/// Which of 24 reads of the project a 50 % fault strikes, with `seed`.
async fn strikes(seed: u64) -> Vec<bool> {
    let options = GitLabSimOptions {
        fault_seed: seed,
        ..GitLabSimOptions::default()
    };
    let fx = Fixture::with_options(options).await;
    let fault = Fault::new(Endpoint::GetProject, FaultKind::Status(503));
    fx.sim.inject(fault.times(100).probability(0.5));
    let mut pattern = Vec::new();
    for _ in 0..24 {
        pattern.push(fx.get(BOT, &fx.root).await.status == 503);
    }
    pattern
}

#[tokio::test]
async fn probabilistic_faults_repeat_with_the_seed() {
    let first = strikes(7).await;
    assert_eq!(first, strikes(7).await);
    assert_ne!(first, strikes(8).await);
    let hits = first.iter().filter(|hit| **hit).count();
    assert!((4..=20).contains(&hits), "{hits} of 24 struck");

    // A fault that loses its draw lets the call meet the next one.
    let fx = Fixture::start().await;
    let never = Fault::new(Endpoint::GetProject, FaultKind::Status(500)).probability(0.0);
    fx.sim.inject(never.times(5));
    fx.sim
        .inject(Fault::new(Endpoint::GetProject, FaultKind::Status(502)));
    assert_eq!(fx.get(BOT, &fx.root).await.status, 502);
    assert_eq!(fx.get(BOT, &fx.root).await.status, 200);
}
