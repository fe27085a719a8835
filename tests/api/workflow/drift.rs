//! Drift (SPEC §13): the target branch edited by hand (changed, deleted,
//! added files, a revert MR merged outside changegate) is reported as the
//! right kind by the drift job's next pass, a binding with a request in
//! flight is not, and a drift put right disappears.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::end_to_end::{World, world};
use super::wait_for_as;
use crate::helpers::each_backend;

const DIR: &str = "bindings/demo.feature-flags";

fn file(subject: &str) -> String {
    format!("{DIR}/{subject}.json")
}

async fn applied(w: &World, who: &str) -> String {
    let id = super::apply_as(&w.app, who).await;
    let view = wait_for_as(&w.app, who, &id, |v| {
        v["status"] == "VALIDATED" || v["next"] == "CONTACT_TEAM"
    })
    .await;
    assert_eq!(view["status"], "VALIDATED", "{view}");
    id
}

/// The drift report once `done` holds for it.
pub(super) async fn drift_until(w: &World, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let report: Value = w
            .app
            .get_as("admin", "/admin/v1/drift")
            .await
            .json()
            .await
            .unwrap();
        let items = report["items"].as_array().cloned().unwrap_or_default();
        if done(&items) {
            return items;
        }
        assert!(Instant::now() < deadline, "gave up; last report {report}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until one line of the metrics is `wanted`.
async fn metrics_until(w: &World, wanted: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = w.app.get("/metrics").await.text().await.unwrap();
        if metrics.lines().any(&wanted) {
            return;
        }
        assert!(Instant::now() < deadline, "gave up; last metrics {metrics}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The report once a pass that started after now found `expected`: every
/// finding seen again since (the passes refresh `detectedAt`).
async fn after_a_pass(w: &World, expected: &[(String, String)]) -> Vec<Value> {
    let mark = chrono::Utc::now();
    drift_until(w, |items| {
        kinds(items) == expected
            && items.iter().all(|item| {
                item["detectedAt"]
                    .as_str()
                    .and_then(|at| at.parse::<chrono::DateTime<chrono::Utc>>().ok())
                    .is_some_and(|at| at > mark)
            })
    })
    .await
}

pub(super) fn kinds(items: &[Value]) -> Vec<(String, String)> {
    let mut kinds: Vec<(String, String)> = items
        .iter()
        .map(|item| {
            (
                item["path"].as_str().unwrap().to_owned(),
                item["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    kinds.sort();
    kinds
}

/// A human merges an MR deleting `path`, through GitLab's API (the
/// project's approval and pipeline rules lifted for it: no CI runs it).
async fn revert_mr_by_hand(w: &World, path: &str) {
    w.gitlab
        .update_settings(w.project, |s| {
            s.approvals_required = 0;
            s.pipelines_must_succeed = false;
        })
        .unwrap();
    let api = format!("{}/api/v4/projects/config%2Frepo", w.gitlab.base_url());
    let client = reqwest::Client::new();
    let send = |request: reqwest::RequestBuilder| async move {
        let response = request
            .header("private-token", "alice-token")
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        (status.as_u16(), body)
    };
    let (status, _) = send(
        client
            .post(format!("{api}/repository/branches"))
            .json(&json!({ "branch": "revert-by-hand", "ref": "main" })),
    )
    .await;
    assert_eq!(status, 201);
    let (status, _) = send(
        client
            .post(format!("{api}/repository/commits"))
            .json(&json!({
                "branch": "revert-by-hand", "commit_message": "Revert the flags",
                "actions": [{ "action": "delete", "file_path": path }]
            })),
    )
    .await;
    assert_eq!(status, 201);
    let (status, mr) = send(client.post(format!("{api}/merge_requests")).json(&json!({
        "source_branch": "revert-by-hand", "target_branch": "main", "title": "Revert the flags"
    })))
    .await;
    assert_eq!(status, 201, "{mr}");
    let iid = mr["iid"].as_u64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, merged) = send(client.put(format!("{api}/merge_requests/{iid}/merge"))).await;
        if status == 200 {
            assert_eq!(merged["state"], "merged", "{merged}");
            return;
        }
        assert!(Instant::now() < deadline, "never merged: {status} {merged}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn edits_by_hand_are_reported_as_their_kind_and_clear_once_put_right() {
    for test_db in each_backend().await {
        let w = world(&test_db.url, "[drift]\ninterval = \"200ms\"\n").await;
        let alice_id = applied(&w, "alice").await;
        for who in ["bob", "carol", "dave"] {
            applied(&w, who).await;
        }
        let alice = w.gitlab.file(w.project, "main", &file("alice")).unwrap();
        // A request in flight for erin, whose file is expected to move.
        let scheduled: Value = w
            .app
            .post_as(
                "erin",
                "/api/v1/applications",
                &json!({ "targetKey": "demo.feature-flags", "reason": "later",
                         "notBefore": (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339() }),
            )
            .await
            .json()
            .await
            .unwrap();
        let scheduled = scheduled["operationId"].as_str().unwrap().to_owned();
        wait_for_as(&w.app, "erin", &scheduled, |v| {
            v["step"]["name"] == "SCHEDULED"
        })
        .await;
        assert!(
            drift_until(&w, |items| items.is_empty()).await.is_empty(),
            "{}: nothing differs yet",
            test_db.name
        );

        let edited = alice.replace("\"params\": {}", "\"params\": {\"debug\": true}");
        assert_ne!(edited, alice);
        let hand = w
            .gitlab
            .push(
                w.project,
                w.users[1],
                "main",
                &[
                    (&file("alice"), Some(&edited)),
                    (&file("bob"), None),
                    (&file("mallory"), Some("{}\n")),
                    (&file("erin"), Some("{\"early\": true}\n")),
                ],
            )
            .unwrap();
        revert_mr_by_hand(&w, &file("carol")).await;
        let expected = vec![
            (file("alice"), "CHANGED".to_owned()),
            (file("bob"), "MISSING".to_owned()),
            (file("carol"), "MISSING".to_owned()),
            (file("mallory"), "UNEXPECTED".to_owned()),
        ];
        let items = drift_until(&w, |items| kinds(items) == expected).await;
        let alice_item = items.iter().find(|i| i["path"] == file("alice")).unwrap();
        assert_eq!(alice_item["targetKey"], "demo.feature-flags");
        assert_eq!(alice_item["subjectId"], "alice");
        assert_eq!(
            alice_item["lastCommit"]["id"], hand,
            "{}: {alice_item}",
            test_db.name
        );
        // Its diff: what changegate wrote against what the branch holds.
        let diff: Value = w
            .app
            .get_as(
                "admin",
                &format!("/admin/v1/drift/diff?project=config%2Frepo&path={DIR}%2Falice.json"),
            )
            .await
            .json()
            .await
            .unwrap();
        let text = diff["diff"].as_str().unwrap();
        assert!(
            text.contains("-  \"params\": {},\n")
                && text.contains("+  \"params\": {\"debug\": true},\n"),
            "{diff}"
        );
        // The request's page says so, with the commit that changed the file.
        let page = wait_for_as(&w.app, "alice", &alice_id, |v| v["drift"].is_object()).await;
        assert_eq!(page["drift"]["kind"], "CHANGED", "{page}");
        assert_eq!(
            page["drift"]["sinceCommit"], hand,
            "{}: {page}",
            test_db.name
        );
        // The pass exports its counts once it has recorded every finding,
        // which the answers above may show before.
        metrics_until(&w, |line| {
            line.starts_with("changegate_drift_files")
                && line.contains("kind=\"missing\"")
                && line.contains("target=\"demo.feature-flags\"")
                && line.ends_with(" 2")
        })
        .await;

        // Repairs that accept the repository: ignore only an unexpected file.
        let refused = repair(&w, &file("alice"), "ignore").await;
        assert_eq!(refused.0, 409, "{}", refused.1);
        let adopted = repair(&w, &file("alice"), "adopt").await;
        assert_eq!(adopted.0, 200, "{}", adopted.1);
        // The target takes no parameters, so `{debug: true}` fails its
        // schema: the file is accepted as it is, the binding keeps its own.
        assert!(adopted.1.get("adopted").is_none(), "{}", adopted.1);
        let ignored = repair(&w, &file("mallory"), "ignore").await;
        assert_eq!(ignored.0, 200, "{}", ignored.1);
        let missing = vec![
            (file("bob"), "MISSING".to_owned()),
            (file("carol"), "MISSING".to_owned()),
        ];
        assert_eq!(kinds(ignored.1["items"].as_array().unwrap()), missing);
        // Two passes later they stay repaired.
        for _ in 0..2 {
            after_a_pass(&w, &missing).await;
        }

        // Edited again, the adopted file drifts again; put back as
        // changegate wrote it, it is clean (and its adoption forgotten).
        let again = alice.replace("\"params\": {}", "\"params\": {\"debug\": false}");
        w.gitlab
            .push(
                w.project,
                w.users[1],
                "main",
                &[(&file("alice"), Some(&again))],
            )
            .unwrap();
        let mut with_alice = missing.clone();
        with_alice.insert(0, (file("alice"), "CHANGED".to_owned()));
        drift_until(&w, |items| kinds(items) == with_alice).await;
        w.gitlab
            .push(
                w.project,
                w.users[1],
                "main",
                &[(&file("alice"), Some(&alice))],
            )
            .unwrap();
        drift_until(&w, |items| kinds(items) == missing).await;

        assert_eq!(
            events(&test_db.db, "binding.drifted").await,
            vec![
                file("alice"),
                file("alice"),
                file("bob"),
                file("carol"),
                file("mallory")
            ],
            "{}: once per appearance",
            test_db.name
        );
        assert_eq!(
            events(&test_db.db, "binding.drift_resolved").await,
            vec![file("alice"), file("alice"), file("mallory")],
            "{}",
            test_db.name
        );
        let audit: Value = w
            .app
            .get_as("admin", "/admin/v1/audit")
            .await
            .json()
            .await
            .unwrap();
        let repairs: Vec<&str> = audit["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|entry| entry["action"] == "drift.repair")
            .map(|entry| entry["outcome"].as_str().unwrap())
            .collect();
        assert_eq!(repairs, vec!["DONE", "DONE", "REFUSED"], "{audit}");
    }
}

/// An operator's repair of `path`: the status and the answer.
pub(super) async fn repair(w: &World, path: &str, action: &str) -> (u16, Value) {
    let answer = w
        .app
        .post_as(
            "admin",
            "/admin/v1/drift/repair",
            &json!({ "project": "config/repo", "path": path, "action": action,
                     "reason": "the platform team's edit stands" }),
        )
        .await;
    (answer.status().as_u16(), answer.json().await.unwrap())
}

/// The paths of the outbox's events of `event_type`, sorted.
pub(super) async fn events(db: &changegate::db::Db, event_type: &str) -> Vec<String> {
    let payloads: Vec<String> = changegate::with_pool!(db, reader, |pool| {
        sqlx::query_scalar("SELECT payload FROM event WHERE event_type = ?")
            .bind(event_type)
            .fetch_all(pool)
            .await
            .unwrap()
    });
    let mut paths: Vec<String> = payloads
        .iter()
        .map(|payload| {
            let payload: Value = serde_json::from_str(payload).unwrap();
            payload["path"].as_str().unwrap().to_owned()
        })
        .collect();
    paths.sort();
    paths
}

#[tokio::test]
async fn a_force_push_that_rewrites_the_target_branch_is_reported_and_a_live_edit_is_reported_again()
 {
    for test_db in each_backend().await {
        let w = world(&test_db.url, "[drift]\ninterval = \"200ms\"\n").await;
        applied(&w, "alice").await;
        let before_bob = w.gitlab.branch_head(w.project, "main").unwrap();
        applied(&w, "bob").await;
        drift_until(&w, |items| items.is_empty()).await;

        // History rewritten: main forced to a commit built on the head from
        // before bob's merge, with a file of its own.
        let rewritten = w
            .gitlab
            .push_onto(
                w.project,
                w.users[1],
                &before_bob,
                &[(&file("rewrite"), Some("{\"forced\": true}\n"))],
            )
            .unwrap();
        w.gitlab
            .force_push(w.project, w.users[1], "main", &rewritten)
            .unwrap();
        let expected = vec![
            (file("bob"), "MISSING".to_owned()),
            (file("rewrite"), "UNEXPECTED".to_owned()),
        ];
        let items = drift_until(&w, |items| kinds(items) == expected).await;
        let rewrite = items.iter().find(|i| i["path"] == file("rewrite")).unwrap();
        assert_eq!(
            rewrite["lastCommit"]["id"], rewritten,
            "{}: {rewrite}",
            test_db.name
        );
        assert!(
            rewrite.get("targetKey").is_none(),
            "no binding names it: {rewrite}"
        );
    }
}

#[tokio::test]
async fn a_restore_writes_the_binding_again_through_the_normal_flow_and_clears_the_drift() {
    for test_db in each_backend().await {
        let w = world(
            &test_db.url,
            "[drift]\ninterval = \"200ms\"\nrestore_requires_approval = false\n",
        )
        .await;
        applied(&w, "alice").await;
        w.gitlab
            .push(
                w.project,
                w.users[1],
                "main",
                &[(&file("alice"), None), (&file("stray"), Some("{}\n"))],
            )
            .unwrap();
        let expected = vec![
            (file("alice"), "MISSING".to_owned()),
            (file("stray"), "UNEXPECTED".to_owned()),
        ];
        drift_until(&w, |items| kinds(items) == expected).await;
        let approvals = w.approval.requests().len();

        let restore = |path: String| {
            let app = &w.app;
            async move {
                let answer = app
                    .post_as(
                        "admin",
                        "/admin/v1/drift/restore",
                        &json!({ "project": "config/repo", "path": path,
                                 "reason": "the flags were deleted by mistake" }),
                    )
                    .await;
                let status = answer.status().as_u16();
                (status, answer.json::<Value>().await.unwrap())
            }
        };
        let (status, refused) = restore(file("stray")).await;
        assert_eq!(status, 409, "{refused}");
        let (status, accepted) = restore(file("alice")).await;
        assert_eq!(status, 202, "{}: {accepted}", test_db.name);
        let id = accepted["operationId"].as_str().unwrap().to_owned();
        let view = wait_for_as(&w.app, "admin", &id, |v| {
            v["status"] == "VALIDATED" || v["next"] == "CONTACT_TEAM"
        })
        .await;
        assert_eq!(view["status"], "VALIDATED", "{}: {view}", test_db.name);
        let restored = w.gitlab.file(w.project, "main", &file("alice")).unwrap();
        assert!(restored.contains(&id), "written by the restore: {restored}");
        assert_eq!(
            w.approval.requests().len(),
            approvals,
            "{}: restores need no approval here",
            test_db.name
        );
        let only_stray = vec![(file("stray"), "UNEXPECTED".to_owned())];
        drift_until(&w, |items| kinds(items) == only_stray).await;
    }
}
