//! Every fault kind, each scoped to an endpoint and a count.

use std::time::{Duration, Instant};

use changegate_sim::gitlab::{
    ChecklistItem, Endpoint, Fault, FaultKind, GitLabSimOptions, MrState,
};
use changegate_sim::tls::TestCa;
use reqwest::Method;
use serde_json::{Value, json};

use super::support::{ALICE, BOT, Fixture, Reply};
use crate::control_client::call;

#[tokio::test]
async fn status_faults_hit_the_next_n_calls_without_applying_them() {
    let fx = Fixture::start().await;
    let iid = fx.open_mr("bot/one", &[("a", "a")]).await;
    let approve = fx.mr_path(iid, "/approve");
    fx.sim
        .inject(Fault::new(Endpoint::Approve, FaultKind::Status(500)).times(2));
    fx.sim
        .inject(Fault::new(Endpoint::Approve, FaultKind::Status(502)));
    fx.sim
        .inject(Fault::new(Endpoint::Approve, FaultKind::Status(503)));
    let before = fx.sim.calls(Endpoint::Approve);

    let first = fx.post(ALICE, &approve, json!({})).await;
    assert_eq!(first.status, 500);
    assert_eq!(
        first.body,
        json!({ "message": "500 Internal Server Error" })
    );
    assert_eq!(fx.post(ALICE, &approve, json!({})).await.status, 500);
    let bad_gateway = fx.post(ALICE, &approve, json!({})).await;
    assert_eq!(bad_gateway.status, 502);
    assert_eq!(bad_gateway.body, Value::Null);
    assert!(
        bad_gateway.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert_eq!(fx.post(ALICE, &approve, json!({})).await.status, 503);
    assert!(
        fx.sim
            .merge_request(fx.project, iid)
            .unwrap()
            .approved_by
            .is_empty()
    );
    // Other endpoints are untouched meanwhile; the approve goes through once the faults are spent.
    assert_eq!(
        fx.get(ALICE, &fx.mr_path(iid, "/approvals")).await.status,
        200
    );
    assert_eq!(fx.post(ALICE, &approve, json!({})).await.status, 201);
    assert_eq!(fx.sim.calls(Endpoint::Approve) - before, 5);
    let handled: Vec<Option<u16>> = fx
        .sim
        .requests()
        .iter()
        .filter(|r| r.endpoint == Endpoint::Approve)
        .map(|r| r.handled)
        .collect();
    assert_eq!(
        handled,
        [None, None, None, None, Some(201)],
        "a status fault answers in the endpoint's place"
    );

    fx.sim.inject(Fault::any(FaultKind::Status(500)).times(3));
    fx.sim.clear_faults();
    assert_eq!(fx.get(BOT, &fx.root).await.status, 200);
}

#[tokio::test]
async fn rate_limit_with_and_without_headers() {
    let fx = Fixture::start().await;
    let retry_after = Duration::from_secs(7);
    fx.sim.inject(Fault::new(
        Endpoint::GetProject,
        FaultKind::RateLimited { retry_after },
    ));
    fx.sim
        .inject(Fault::new(Endpoint::GetProject, FaultKind::RateLimitedBare));

    let limited = fx.get(BOT, &fx.root).await;
    assert_eq!(limited.status, 429);
    assert_eq!(limited.text, "Retry later\n");
    let header = |name: &str| limited.headers[name].to_str().unwrap().to_owned();
    assert_eq!(header("retry-after"), "7");
    assert_eq!(header("ratelimit-remaining"), "0");
    let reset: i64 = header("ratelimit-reset").parse().unwrap();
    let now = chrono::Utc::now().timestamp();
    assert!(
        (now + 5..=now + 8).contains(&reset),
        "reset {reset} is an epoch, not a delta"
    );
    assert!(header("ratelimit-resettime").ends_with("GMT"));
    assert!(limited.headers.contains_key("ratelimit-limit"));

    let bare = fx.get(BOT, &fx.root).await;
    assert_eq!(bare.status, 429);
    assert!(!bare.headers.contains_key("retry-after"));
    assert!(
        !bare
            .headers
            .keys()
            .any(|name| name.as_str().starts_with("ratelimit"))
    );
    assert_eq!(fx.get(BOT, &fx.root).await.status, 200);
}

#[tokio::test]
async fn slow_response_is_applied_and_answered_late() {
    let fx = Fixture::start().await;
    let iid = fx.open_mr("bot/one", &[("a", "a")]).await;
    let delay = Duration::from_millis(400);
    fx.sim
        .inject(Fault::new(Endpoint::Approve, FaultKind::Slow(delay)));
    let started = Instant::now();
    let reply = fx
        .post(ALICE, &fx.mr_path(iid, "/approve"), json!({}))
        .await;
    assert_eq!(reply.status, 201);
    assert!(started.elapsed() >= delay);
}

#[tokio::test]
async fn lost_response_applies_the_change_although_the_client_times_out() {
    let fx = Fixture::start().await;
    let iid = fx.open_mr("bot/one", &[("a", "a")]).await;
    let impatient = crate::client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    fx.sim
        .inject(Fault::new(Endpoint::Approve, FaultKind::LostResponse));
    let approve = fx.mr_path(iid, "/approve");
    let lost = fx
        .try_send(
            &impatient,
            Method::POST,
            Some(ALICE),
            &approve,
            Some(json!({})),
        )
        .await;
    assert!(lost.is_err_and(|err| err.is_timeout()));
    assert_eq!(
        fx.sim.merge_request(fx.project, iid).unwrap().approved_by,
        ["rev-alice"]
    );
    // The retry meets GitLab's quirk; reading the approvals tells what really happened.
    let retry = fx.post(ALICE, &approve, json!({})).await;
    assert_eq!(retry.status, 401);
    let approvals = fx.get(ALICE, &fx.mr_path(iid, "/approvals")).await;
    assert_eq!(approvals.body["user_has_approved"], true);

    fx.sim.inject(Fault::new(
        Endpoint::CreateMergeRequest,
        FaultKind::LostResponse,
    ));
    let body = json!({ "source_branch": "main", "target_branch": "bot/one", "title": "back" });
    let path = format!("{}/merge_requests", fx.root);
    let lost = fx
        .try_send(
            &impatient,
            Method::POST,
            Some(BOT),
            &path,
            Some(body.clone()),
        )
        .await;
    assert!(lost.is_err());
    let duplicate = fx.post(BOT, &path, body).await;
    assert_eq!(duplicate.status, 409);
}

#[tokio::test]
async fn merge_refusals_leave_the_merge_request_open() {
    let fx = Fixture::start().await;
    let iid = fx.ready_mr("bot/one", &[("a", "a")]).await;
    let merge = fx.mr_path(iid, "/merge");
    for code in [405, 406, 422] {
        fx.sim
            .inject(Fault::new(Endpoint::Merge, FaultKind::MergeRefused(code)));
        let refused = fx.put(BOT, &merge, json!({})).await;
        assert_eq!(refused.status, code);
        let message = if code == 405 {
            "405 Method Not Allowed"
        } else {
            "Branch cannot be merged"
        };
        assert_eq!(refused.body, json!({ "message": message }));
        assert_eq!(
            fx.sim.merge_request(fx.project, iid).unwrap().state,
            MrState::Opened
        );
    }
    let merged = fx.put(BOT, &merge, json!({})).await;
    assert_eq!(merged.status, 200);
    assert_eq!(merged.body["state"], "merged");
}

#[tokio::test]
async fn rebase_conflict_fault_fails_an_otherwise_clean_rebase() {
    let fx = Fixture::start().await;
    let iid = fx.ready_mr("bot/one", &[("a", "a")]).await;
    fx.sim
        .push(fx.project, fx.bot, "main", &[("b", Some("b"))])
        .unwrap();
    fx.sim
        .inject(Fault::new(Endpoint::Rebase, FaultKind::RebaseConflict));
    let sha = fx.sim.merge_request(fx.project, iid).unwrap().sha;
    assert_eq!(
        fx.put(BOT, &fx.mr_path(iid, "/rebase"), json!({}))
            .await
            .status,
        202
    );
    fx.get(BOT, &fx.mr_path(iid, "")).await;
    let failed = fx.get(BOT, &fx.mr_path(iid, "")).await.body;
    assert!(
        failed["merge_error"]
            .as_str()
            .unwrap()
            .starts_with("Rebase failed")
    );
    assert_eq!(failed["sha"], sha.as_str());

    assert_eq!(
        fx.put(BOT, &fx.mr_path(iid, "/rebase"), json!({}))
            .await
            .status,
        202
    );
    fx.get(BOT, &fx.mr_path(iid, "")).await;
    let rebased = fx.get(BOT, &fx.mr_path(iid, "")).await.body;
    assert_eq!(rebased["merge_error"], Value::Null);
    assert_ne!(rebased["sha"], sha.as_str());
}

#[tokio::test]
async fn checklist_fault_answers_422_with_the_current_list_without_approving() {
    let fx = Fixture::start().await;
    let iid = fx.open_mr("bot/one", &[("a", "a")]).await;
    fx.sim
        .update_settings(fx.project, |s| {
            s.approval_checklist = vec![ChecklistItem::new("tests-pass", "Tests pass")];
        })
        .unwrap();
    fx.sim
        .inject(Fault::new(Endpoint::Approve, FaultKind::ChecklistMismatch));
    let approve = fx.mr_path(iid, "/approve");
    let refused = fx.post(ALICE, &approve, json!({})).await;
    assert_eq!(refused.status, 422);
    assert_eq!(
        refused.body,
        json!({
            "message": "checklist mismatch",
            "checklist": { "items": [{ "id": "tests-pass", "label": "Tests pass" }] }
        })
    );
    assert!(
        fx.sim
            .merge_request(fx.project, iid)
            .unwrap()
            .approved_by
            .is_empty()
    );
    assert_eq!(fx.post(ALICE, &approve, json!({})).await.status, 201);
}

#[tokio::test]
async fn applied_then_status_makes_the_change_but_answers_the_proxy_page() {
    let fx = Fixture::start().await;
    let is_proxy_page = |reply: &Reply, code: u16| {
        reply.status == code
            && reply.body == Value::Null
            && reply.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/html")
    };
    // Over the control API, with its spelling.
    let fault =
        json!({ "endpoint": "create_branch", "kind": "applied_then_status", "status": 504 });
    let injected = call(
        Method::POST,
        &format!("{}/_sim/faults", fx.sim.base_url()),
        Some(fault),
    )
    .await;
    assert_eq!(injected.status, 204, "{:?}", injected.body);
    let branches = format!("{}/repository/branches", fx.root);
    let created = fx
        .post(
            BOT,
            &branches,
            json!({ "branch": "bot/one", "ref": "main" }),
        )
        .await;
    assert!(is_proxy_page(&created, 504), "{}", created.text);
    assert!(fx.sim.branch_head(fx.project, "bot/one").is_some());

    fx.sim.inject(Fault::new(
        Endpoint::CreateCommit,
        FaultKind::AppliedThenStatus(502),
    ));
    let actions = json!([{ "action": "create", "file_path": "a", "content": "a" }]);
    let commit = json!({ "branch": "bot/one", "commit_message": "add a", "actions": actions });
    let commits = format!("{}/repository/commits", fx.root);
    let committed = fx.post(BOT, &commits, commit.clone()).await;
    assert!(is_proxy_page(&committed, 502), "{}", committed.text);
    assert_eq!(
        fx.sim.file(fx.project, "bot/one", "a").as_deref(),
        Some("a")
    );
    // A blind retry of the commit meets the file it already wrote.
    let retried = fx.post(BOT, &commits, commit).await;
    assert_eq!(retried.status, 400);
    assert_eq!(
        retried.body,
        json!({ "message": "A file with this name already exists" })
    );

    fx.sim.inject(Fault::new(
        Endpoint::CreateMergeRequest,
        FaultKind::AppliedThenStatus(502),
    ));
    let mrs = format!("{}/merge_requests", fx.root);
    let body = json!({ "source_branch": "bot/one", "target_branch": "main", "title": "bot: a" });
    let opened = fx.post(BOT, &mrs, body.clone()).await;
    assert!(is_proxy_page(&opened, 502), "{}", opened.text);
    let mr = fx.sim.merge_request(fx.project, 1).unwrap();
    assert_eq!(mr.state, MrState::Opened);
    assert_eq!(fx.post(BOT, &mrs, body).await.status, 409);

    fx.poll_pipeline(1, "success").await;
    fx.sim.inject(Fault::new(
        Endpoint::Approve,
        FaultKind::AppliedThenStatus(503),
    ));
    let approved = fx.post(ALICE, &fx.mr_path(1, "/approve"), json!({})).await;
    assert!(is_proxy_page(&approved, 503), "{}", approved.text);
    assert_eq!(
        fx.sim.merge_request(fx.project, 1).unwrap().approved_by,
        ["rev-alice"]
    );

    let logged = fx.sim.requests();
    let last = logged.last().unwrap();
    assert_eq!(last.endpoint, Endpoint::Approve);
    assert_eq!(last.status, 503);
    assert_eq!(last.handled, Some(201), "the approval was made");
    assert_eq!(last.user.as_deref(), Some("rev-alice"));
    assert_eq!(last.fault, Some(FaultKind::AppliedThenStatus(503)));
}

/// `err` is the connection ending without an answer: neither a timeout nor a refused
/// connection, and no status.
fn is_dropped_exchange(err: &reqwest::Error) -> bool {
    !err.is_timeout() && !err.is_connect() && err.status().is_none()
}

#[tokio::test]
async fn applied_then_drop_makes_the_change_and_closes_the_connection_unanswered() {
    let hold = Duration::from_secs(30);
    let fx = Fixture::with_options(GitLabSimOptions {
        lost_response_hold: hold,
        ..GitLabSimOptions::default()
    })
    .await;
    // Over the control API, with its spelling.
    let fault = json!({ "endpoint": "create_branch", "kind": "applied_then_drop" });
    let injected = call(
        Method::POST,
        &format!("{}/_sim/faults", fx.sim.base_url()),
        Some(fault),
    )
    .await;
    assert_eq!(injected.status, 204, "{:?}", injected.body);
    let branches = format!("{}/repository/branches", fx.root);
    let body = json!({ "branch": "bot/one", "ref": "main" });
    let started = Instant::now();
    let dropped = fx
        .try_send(&fx.client, Method::POST, Some(BOT), &branches, Some(body))
        .await;
    let err = dropped.err().expect("no answer arrives");
    assert!(is_dropped_exchange(&err), "{err:?}");
    assert!(
        started.elapsed() < hold,
        "the connection is closed at once, not held"
    );
    assert!(fx.sim.branch_head(fx.project, "bot/one").is_some());

    fx.sim.inject(Fault::new(
        Endpoint::CreateCommit,
        FaultKind::AppliedThenDrop,
    ));
    let actions = json!([{ "action": "create", "file_path": "a", "content": "a" }]);
    let commit = json!({ "branch": "bot/one", "commit_message": "add a", "actions": actions });
    let commits = format!("{}/repository/commits", fx.root);
    let dropped = fx
        .try_send(&fx.client, Method::POST, Some(BOT), &commits, Some(commit))
        .await;
    assert!(dropped.is_err_and(|err| is_dropped_exchange(&err)));
    assert_eq!(
        fx.sim.file(fx.project, "bot/one", "a").as_deref(),
        Some("a")
    );
    let logged = fx.sim.requests();
    let last = logged.last().unwrap();
    assert_eq!(
        (last.endpoint, last.status, last.handled, last.fault.clone()),
        (
            Endpoint::CreateCommit,
            201,
            Some(201),
            Some(FaultKind::AppliedThenDrop)
        ),
        "logged with the answer the client never saw"
    );
    // The simulator serves the next connection as usual.
    assert_eq!(fx.get(BOT, &fx.root).await.status, 200);
}

#[tokio::test]
async fn applied_then_drop_closes_an_https_connection_too() {
    let ca = TestCa::new();
    let fx = Fixture::with_options(GitLabSimOptions {
        tls: Some(ca.server_tls()),
        ..GitLabSimOptions::default()
    })
    .await;
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(ca.client_config())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    fx.sim.inject(Fault::new(
        Endpoint::CreateBranch,
        FaultKind::AppliedThenDrop,
    ));
    let branches = format!("{}/repository/branches", fx.root);
    let body = json!({ "branch": "bot/one", "ref": "main" });
    let dropped = fx
        .try_send(&client, Method::POST, Some(BOT), &branches, Some(body))
        .await;
    assert!(dropped.is_err_and(|err| is_dropped_exchange(&err)));
    assert!(fx.sim.branch_head(fx.project, "bot/one").is_some());
    let project = fx
        .try_send(&client, Method::GET, Some(BOT), &fx.root, None)
        .await
        .unwrap();
    assert_eq!(project.status, 200);
}
