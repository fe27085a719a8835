//! Operators: local approvals, retry and force-fail, the operations
//! listing and the audit log. Local approvals by operators, with the built-in approval provider: only
//! operators, only requests awaiting approval, every action audited with the
//! identity the server writes.

use changegate::db::audit::list_audit;
use changegate::db::operations::get_operation;
use changegate::domain::{BindingStatus, StepStatus};
use serde_json::{Value, json};

use crate::helpers::each_backend;
use crate::requests::{apply_body, requester_app};
use crate::store::{apply, drive};

async fn applied(app: &crate::helpers::TestApp, user: &str, body: &Value) -> String {
    let answer: Value = app
        .post_as(user, "/api/v1/applications", body)
        .await
        .json()
        .await
        .unwrap();
    answer["operationId"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn an_operator_approves_or_rejects_and_it_is_audited() {
    for test_db in each_backend().await {
        let app = requester_app(&test_db.url, "").await;
        let id = applied(&app, "alice", &apply_body("demo.feature-flags")).await;
        let path = format!("/admin/v1/approvals/{id}/approve");
        let forged = json!({ "reason": "looks fine", "__authenticatedOperator": "mallory" });

        assert_eq!(
            app.post_as("alice", &path, &forged).await.status(),
            403,
            "requesters are not operators"
        );
        let answer = app.post_as("admin", &path, &forged).await;
        assert_eq!(answer.status(), 200, "{}", test_db.name);
        let answer: Value = answer.json().await.unwrap();
        assert_eq!(answer["status"], "MR_CREATING");
        let view: Value = app
            .get_as("alice", &format!("/api/v1/operations/{id}"))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(
            (view["status"].as_str(), view["message"].as_str()),
            (Some("MR_CREATING"), Some("looks fine"))
        );

        let again = app.post_as("admin", &path, &json!({})).await;
        assert_eq!(again.status(), 409);
        let again: Value = again.json().await.unwrap();
        assert_eq!(again["code"], "CONFLICT");

        let audit = list_audit(&test_db.db, &id).await.unwrap();
        let outcomes: Vec<(&str, &str, &str)> = audit
            .iter()
            .map(|entry| {
                (
                    entry.actor.as_str(),
                    entry.action.as_str(),
                    entry.outcome.as_str(),
                )
            })
            .collect();
        assert_eq!(
            outcomes,
            [
                ("admin", "approval.approve", "DONE"),
                ("admin", "approval.approve", "REFUSED")
            ],
            "{}: the approval, then the refused second one",
            test_db.name
        );
        let params: Value = serde_json::from_str(&audit[0].params).unwrap();
        assert_eq!(
            params["__authenticatedOperator"], "admin",
            "the server's identity wins over the client's"
        );

        let other = applied(&app, "bob", &apply_body("demo.feature-flags")).await;
        let rejected = app
            .post_as(
                "admin",
                &format!("/admin/v1/approvals/{other}/reject"),
                &json!({}),
            )
            .await;
        assert_eq!(rejected.status(), 200);
        let view: Value = app
            .get_as("bob", &format!("/api/v1/operations/{other}"))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(
            (view["status"].as_str(), view["next"].as_str()),
            (Some("REJECTED"), Some("REAPPLY"))
        );

        let missing = app
            .post_as(
                "admin",
                "/admin/v1/approvals/6d5c3a3e-9f55-4a7f-8d50-2b1f9d9a7c11/approve",
                &json!({}),
            )
            .await;
        assert_eq!(missing.status(), 404);
    }
}

#[tokio::test]
async fn with_an_external_approval_system_local_decisions_are_refused() {
    let db = crate::helpers::sqlite_db().await;
    let app = requester_app(
        &db.url,
        "[approval]\nprovider = \"http\"\nurl = \"http://127.0.0.1:1/approvals\"\n",
    )
    .await;
    let id = applied(&app, "alice", &apply_body("demo.feature-flags")).await;
    let answer = app
        .post_as(
            "admin",
            &format!("/admin/v1/approvals/{id}/approve"),
            &json!({}),
        )
        .await;
    assert_eq!(answer.status(), 409);
    let message = answer.json::<Value>().await.unwrap()["message"].clone();
    let audit = list_audit(&db.db, &id).await.unwrap();
    assert_eq!(audit.len(), 1, "refused, and audited as such");
    assert_eq!(
        (
            audit[0].action.as_str(),
            audit[0].outcome.as_str(),
            audit[0].refusal_reason.as_deref()
        ),
        ("approval.approve", "REFUSED", message.as_str())
    );
}

/// The path of a request whose reviewer bots could not approve.
const TO_HANDLE_FAILED: &[(StepStatus, BindingStatus)] = &[
    (StepStatus::ApprovalSent, BindingStatus::ApprovalSent),
    (StepStatus::CalledBackApproved, BindingStatus::MrCreating),
    (StepStatus::MrCreated, BindingStatus::MrCreated),
    (StepStatus::HandleStarted, BindingStatus::Merging),
    (StepStatus::HandleApproveFailed, BindingStatus::HandleFailed),
];

async fn view(app: &crate::helpers::TestApp, id: &str) -> Value {
    app.get_as("admin", &format!("/api/v1/operations/{id}"))
        .await
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn an_operator_retries_a_failed_step_and_it_runs_again_audited() {
    for test_db in each_backend().await {
        let app = requester_app(&test_db.url, "").await;
        let (failed, _) = drive(
            &test_db.db,
            &apply("alice", "demo.feature-flags"),
            TO_HANDLE_FAILED,
        )
        .await;
        let path = format!("/admin/v1/operations/{failed}/retry");
        let body =
            json!({ "reason": "reviewer permissions fixed", "__authenticatedOperator": "mallory" });

        assert_eq!(app.post_as("alice", &path, &body).await.status(), 403);
        let answer = app.post_as("admin", &path, &body).await;
        assert_eq!(answer.status(), 200, "{}", test_db.name);
        let answer: Value = answer.json().await.unwrap();
        assert_eq!(answer["operation"]["status"], "MERGING", "{}", test_db.name);
        assert_eq!(answer["operation"]["step"]["name"], "HANDLE_STARTED");
        assert_eq!(answer["operation"]["next"], "WAIT");
        let operation = get_operation(&test_db.db, &failed).await.unwrap().unwrap();
        assert!(operation.due_at.is_some(), "{}: due at once", test_db.name);

        let audit = list_audit(&test_db.db, &failed).await.unwrap();
        assert_eq!(
            (
                audit.len(),
                audit[0].action.as_str(),
                audit[0].actor.as_str()
            ),
            (1, "operation.retry", "admin")
        );
        let params: Value = serde_json::from_str(&audit[0].params).unwrap();
        assert_eq!(params["__authenticatedOperator"], "admin");

        // In flight: the same step again, recorded in the timeline.
        let again = app.post_as("admin", &path, &json!({})).await;
        assert_eq!(again.status(), 200);
        let timeline: Value = app
            .get_as("alice", &format!("/api/v1/operations/{failed}/timeline"))
            .await
            .json()
            .await
            .unwrap();
        let steps: Vec<&str> = timeline["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|entry| entry["step"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            steps,
            [
                "ACCEPTED",
                "APPROVAL_SENT",
                "CALLED_BACK_APPROVED",
                "MR_CREATED",
                "HANDLE_STARTED",
                "HANDLE_APPROVE_FAILED",
                "HANDLE_STARTED",
                "HANDLE_STARTED"
            ],
            "{}",
            test_db.name
        );
        assert_eq!(timeline["items"][6]["actor"], "admin");
        assert_eq!(
            timeline["items"][6]["message"],
            "retried by admin: reviewer permissions fixed"
        );
        assert_eq!(
            app.get_as("bob", &format!("/api/v1/operations/{failed}/timeline"))
                .await
                .status(),
            404,
            "other people's timelines do not exist for them"
        );

        // Waiting for an outside decision: nothing of changegate's to re-run.
        let (waiting, _) = drive(
            &test_db.db,
            &apply("carol", "demo.feature-flags"),
            &TO_HANDLE_FAILED[..1],
        )
        .await;
        let refused = app
            .post_as(
                "admin",
                &format!("/admin/v1/operations/{waiting}/retry"),
                &json!({}),
            )
            .await;
        assert_eq!(refused.status(), 409, "{}", test_db.name);
        assert_eq!(
            view(&app, &waiting).await["status"],
            "APPROVAL_SENT",
            "nothing changed"
        );
    }
}

#[tokio::test]
async fn an_operator_force_fails_with_a_reason_and_the_request_may_be_applied_for_again() {
    for test_db in each_backend().await {
        let app = requester_app(&test_db.url, "").await;
        let (stuck, _) = drive(
            &test_db.db,
            &apply("alice", "demo.feature-flags"),
            &TO_HANDLE_FAILED[..3],
        )
        .await;
        let path = format!("/admin/v1/operations/{stuck}/fail");

        for body in [json!({}), json!({ "reason": "  " }), json!({ "reason": 7 })] {
            let refused = app.post_as("admin", &path, &body).await;
            assert_eq!(refused.status(), 400, "{body}");
            let refused: Value = refused.json().await.unwrap();
            assert!(refused["message"].as_str().unwrap().contains("reason"));
        }
        let answer = app
            .post_as(
                "admin",
                &path,
                &json!({ "reason": "pipeline broken upstream" }),
            )
            .await;
        assert_eq!(answer.status(), 200, "{}", test_db.name);
        let answer: Value = answer.json().await.unwrap();
        assert_eq!(
            (
                answer["operation"]["status"].as_str(),
                answer["operation"]["step"]["name"].as_str(),
                answer["operation"]["next"].as_str(),
                answer["operation"]["message"].as_str()
            ),
            (
                Some("ABANDONED"),
                Some("MANUAL_ABANDONED"),
                Some("REAPPLY"),
                Some("force-failed by admin: pipeline broken upstream")
            )
        );
        let operation = get_operation(&test_db.db, &stuck).await.unwrap().unwrap();
        assert_eq!(
            operation.due_at, None,
            "{}: nothing runs it any more",
            test_db.name
        );
        let again = app
            .post_as("admin", &path, &json!({ "reason": "twice" }))
            .await;
        assert_eq!(again.status(), 409);
        let audit = list_audit(&test_db.db, &stuck).await.unwrap();
        let outcomes: Vec<(&str, &str)> = audit
            .iter()
            .map(|entry| (entry.action.as_str(), entry.outcome.as_str()))
            .collect();
        assert_eq!(
            outcomes,
            [
                ("operation.force_fail", "DONE"),
                ("operation.force_fail", "REFUSED")
            ],
            "{}: what happened, then the refusal (a 400 is not audited)",
            test_db.name
        );

        let reapplied = app
            .post_as(
                "alice",
                "/api/v1/applications",
                &apply_body("demo.feature-flags"),
            )
            .await;
        assert_eq!(reapplied.status(), 202, "{}", test_db.name);
    }
}

#[tokio::test]
async fn operators_find_operations_by_status_step_and_age_and_read_the_audit_log() {
    for test_db in each_backend().await {
        let app = requester_app(&test_db.url, "").await;
        let db = &test_db.db;
        let (failed, _) = drive(db, &apply("alice", "demo.feature-flags"), TO_HANDLE_FAILED).await;
        let (waiting, _) = drive(
            db,
            &apply("bob", "demo.feature-flags"),
            &TO_HANDLE_FAILED[..1],
        )
        .await;
        let mut fresh = Vec::new();
        for subject in ["c1", "c2", "c3"] {
            fresh.push(
                drive(db, &apply(subject, "demo.feature-flags"), &[])
                    .await
                    .0,
            );
        }
        let ids = |page: &Value| -> Vec<String> {
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|item| item["operationId"].as_str().unwrap().to_owned())
                .collect()
        };
        let get = |query: &str| {
            let app = &app;
            let query = query.to_owned();
            async move {
                let answer = app
                    .get_as("admin", &format!("/admin/v1/operations{query}"))
                    .await;
                let status = answer.status().as_u16();
                (status, answer.json::<Value>().await.unwrap())
            }
        };

        let (status, page) = get("?status=HANDLE_FAILED").await;
        assert_eq!(
            (status, ids(&page)),
            (200, vec![failed.clone()]),
            "{}",
            test_db.name
        );
        let (_, page) = get("?step=APPROVAL_SENT").await;
        assert_eq!(ids(&page), vec![waiting.clone()]);
        // The console offers only what would succeed.
        let actions = |page: &Value| page["items"][0]["actions"].clone();
        // And says why what an operator may look for is not offered.
        let withheld = |page: &Value| {
            page["items"][0]["withheldActions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|withheld| {
                    let action = withheld["action"].as_str().unwrap().to_owned();
                    (action, withheld["reason"].as_str().unwrap().to_owned())
                })
                .collect::<Vec<_>>()
        };
        let waiting_outside = (
            "retry".to_owned(),
            "the request is waiting for an outside decision or confirmation; nothing to re-run"
                .to_owned(),
        );
        assert_eq!(actions(&page), json!(["fail", "approve", "reject"]));
        assert_eq!(withheld(&page), std::slice::from_ref(&waiting_outside));
        let (_, failed_page) = get("?status=HANDLE_FAILED").await;
        assert_eq!(actions(&failed_page), json!(["retry", "fail"]));
        assert_eq!(withheld(&failed_page), []);
        let outside = requester_app(
            &test_db.url,
            "[approval]\nprovider = \"http\"\nurl = \"http://127.0.0.1:9/approvals\"\n",
        )
        .await;
        let decided_outside: Value = outside
            .get_as("admin", "/admin/v1/operations?step=APPROVAL_SENT")
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(
            actions(&decided_outside),
            json!(["fail"]),
            "{}: the approval system decides, nothing to re-run",
            test_db.name
        );
        let decided_by_the_system = |action: &str| {
            (
                action.to_owned(),
                "the approval system decides this request (approval.provider is not \"builtin\")"
                    .to_owned(),
            )
        };
        assert_eq!(
            withheld(&decided_outside),
            [
                waiting_outside,
                decided_by_the_system("approve"),
                decided_by_the_system("reject")
            ],
            "{}",
            test_db.name
        );
        let (_, page) = get(&format!("?step={}", StepStatus::HandleApproveFailed.code())).await;
        assert_eq!(ids(&page), vec![failed.clone()]);
        let (_, page) = get("?olderThanSeconds=3600").await;
        assert!(
            ids(&page).is_empty(),
            "{}: nothing is an hour old",
            test_db.name
        );

        // Newest first, page by page.
        let (_, first) = get("?limit=2").await;
        assert_eq!(ids(&first), vec![fresh[2].clone(), fresh[1].clone()]);
        let cursor = first["nextCursor"].as_str().unwrap();
        let (_, second) = get(&format!("?limit=2&cursor={cursor}")).await;
        assert_eq!(ids(&second), vec![fresh[0].clone(), waiting.clone()]);
        let (_, last) = get(&format!(
            "?limit=2&cursor={}",
            second["nextCursor"].as_str().unwrap()
        ))
        .await;
        assert_eq!(
            (ids(&last), last["nextCursor"].clone()),
            (vec![failed.clone()], Value::Null)
        );

        for bad in [
            "?status=NOPE",
            "?step=99",
            "?limit=0",
            "?cursor=x",
            "?colour=red",
        ] {
            let (status, error) = get(bad).await;
            assert_eq!(
                (status, error["code"].as_str()),
                (400, Some("INVALID_ARGUMENT")),
                "{bad}"
            );
        }
        assert_eq!(
            app.get_as("alice", "/admin/v1/operations").await.status(),
            403
        );

        app.post_as(
            "admin",
            &format!("/admin/v1/operations/{failed}/retry"),
            &json!({}),
        )
        .await;
        app.post_as(
            "admin",
            &format!("/admin/v1/operations/{waiting}/fail"),
            &json!({ "reason": "stale" }),
        )
        .await;
        let audit: Value = app
            .get_as("admin", "/admin/v1/audit?limit=1")
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(
            audit["items"][0]["action"], "operation.force_fail",
            "{}",
            test_db.name
        );
        assert_eq!(audit["items"][0]["target"], waiting.as_str());
        assert_eq!(audit["items"][0]["params"]["reason"], "stale");
        let older: Value = app
            .get_as(
                "admin",
                &format!(
                    "/admin/v1/audit?cursor={}",
                    audit["nextCursor"].as_str().unwrap()
                ),
            )
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(older["items"][0]["action"], "operation.retry");
        assert_eq!(older["nextCursor"], Value::Null);
        assert_eq!(app.get_as("alice", "/admin/v1/audit").await.status(), 403);
    }
}

#[tokio::test]
async fn operators_read_the_effective_configuration_without_its_secrets() {
    let db = crate::helpers::sqlite_db().await;
    let secret = "whsec_c2VjcmV0LXRoYXQtbXVzdC1ub3QtbGVhaw==";
    let sealing_key = "KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio=";
    let extra = format!(
        "[approval]\ncallback_secret = {secret:?}\n[gitlab]\nbot_token = \"bot-token-value\"\n\
         [workflow]\nflow_order = \"mr_first\"\n\
         [batch]\nfreeze = true\ntimeout = \"10m\"\nmax_split_depth = 2\npartition_by_project = true\n\
         [webhooks]\nsecret_key = {sealing_key:?}\n[retention]\naudit_log = 0\n"
    );
    let app = requester_app(&db.url, &extra).await;
    assert_eq!(app.get_as("alice", "/admin/v1/config").await.status(), 403);
    let answer = app.get_as("admin", "/admin/v1/config").await;
    assert_eq!(answer.status(), 200);
    let text = answer.text().await.unwrap();
    assert!(
        !text.contains("c2VjcmV0")
            && !text.contains("bot-token-value")
            && !text.contains("KioqKioq"),
        "{text}"
    );
    let config: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(config["approval"]["callbackSecret"], "[redacted]");
    assert_eq!(config["gitlab"]["botToken"], "[redacted]");
    assert_eq!(config["workflow"]["flowOrder"], "mr_first");
    assert_eq!(config["webhooks"]["secretKey"], "[redacted]");
    let batch = &config["batch"];
    assert_eq!(
        (
            &batch["freeze"],
            &batch["timeout"],
            &batch["maxSplitDepth"],
            &batch["partitionByProject"]
        ),
        (&json!(true), &json!("600s"), &json!(2), &json!(true))
    );
    assert_eq!(config["retention"]["auditLog"], "0");
    assert_eq!(config["retention"]["events"], "2592000s");
    assert_eq!(config["access"]["mode"], "OPEN");
    assert_eq!(
        config["targets"]["demo.feature-flags"]["description"],
        "Demo flags"
    );
}
