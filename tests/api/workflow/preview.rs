//! The preview of an apply or a close against the GitLab simulator, on
//! both backends: the file on the target branch and the diff (update,
//! create, a shared file's key, delete), each blocker a submit would meet,
//! GitLab out of reach, and that a preview writes nothing (no operation, no
//! idempotency key, no audit entry, no GitLab write, nothing counted
//! against the apply limit).

use serde_json::{Value, json};

use super::batched::{approve_all, manual_rounds, rounds_until_settled};
use super::end_to_end::{World, WorldOptions, world_with};
use crate::helpers::{each_backend, spawn_app};

const OPERATION: &str = "5d2f0b8e-6a43-4c1e-9a57-0c3a4e1f2b61";

const TARGETS: &str = r#"
[targets."team.values"]
self_only = false
path = "values/{subject}.yaml"
template = """
replicas: {{ params.replicas }}
tag: {{ params.tag | tojson }}
"""
[targets."team.values".params_schema]
type = "object"
required = ["tag"]
additionalProperties = false
properties.replicas = { type = "integer", minimum = 1, maximum = 10, default = 2 }
properties.tag = { type = "string", pattern = "^v[0-9.]+$" }

[targets."team.pools"]
self_only = false
edit = { file = "config/pools.toml", key = "pools.{subject}" }
[targets."team.pools".params_schema]
type = "object"
additionalProperties = false
properties.size = { type = "integer", minimum = 1, maximum = 500, default = 20 }
"#;

const POOLS: &str = "\
# Connection pools, one table per team.

[pools.legacy]
size = 5 # do not raise
";

fn options() -> WorldOptions {
    WorldOptions {
        extra: TARGETS.to_owned(),
        ..manual_rounds()
    }
}

async fn preview(w: &World, user: &str, path: &str, body: &Value) -> Value {
    let answer = w.app.post_as(user, path, body).await;
    assert_eq!(answer.status(), 200, "{path}");
    answer.json().await.unwrap()
}

async fn preview_apply(w: &World, user: &str, body: Value) -> Value {
    preview(w, user, "/api/v1/applications/preview", &body).await
}

fn codes(answer: &Value) -> Vec<&str> {
    answer["blockers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["code"].as_str().unwrap())
        .collect()
}

async fn items(w: &World, path: &str) -> Vec<Value> {
    let page: Value = w.app.get_as("admin", path).await.json().await.unwrap();
    page["items"].as_array().cloned().unwrap_or_default()
}

/// Nothing the preview may not do happened: no operation recorded, no audit
/// entry, nothing but reads sent to GitLab.
async fn nothing_written(w: &World, name: &str) {
    assert!(
        items(w, "/admin/v1/operations").await.is_empty(),
        "{name}: no operation"
    );
    assert!(
        items(w, "/admin/v1/audit").await.is_empty(),
        "{name}: no audit entry"
    );
    let writes: Vec<String> = w
        .gitlab
        .requests()
        .iter()
        .filter(|r| !matches!(r.method.as_str(), "GET" | "HEAD"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(writes.is_empty(), "{name}: GitLab writes {writes:?}");
}

#[tokio::test]
async fn an_update_shows_the_file_on_the_target_branch_its_diff_and_the_route_and_writes_nothing() {
    for test_db in each_backend().await {
        let name = &test_db.name;
        let w = world_with(&test_db.url, options()).await;
        let by_hand = "{\n  \"written\": \"by hand\"\n}\n";
        w.gitlab
            .push(
                w.project,
                w.users[0],
                "main",
                &[("bindings/team.access/alice.json", Some(by_hand))],
            )
            .unwrap();
        let body = json!({ "operationId": OPERATION, "targetKey": "team.access",
            "params": { "level": "write" }, "reason": "preview" });
        let answer = preview_apply(&w, "alice", body.clone()).await;
        assert_eq!(answer["blockers"], json!([]), "{name}: {answer}");
        assert_eq!(answer["gitlab"]["readable"], true, "{name}: {answer}");
        let file = &answer["files"][0];
        assert_eq!(file["path"], "bindings/team.access/alice.json");
        assert_eq!(file["action"], "update", "{name}: {file}");
        assert_eq!(file["current"], by_hand);
        assert_eq!(file["currentKnown"], true);
        let proposed = file["proposed"].as_str().unwrap();
        assert!(proposed.contains("\"level\": \"write\""), "{proposed}");
        assert!(proposed.contains(OPERATION), "{proposed}");
        let diff = file["diff"].as_str().unwrap();
        assert!(
            diff.starts_with(
                "--- a/bindings/team.access/alice.json\n+++ b/bindings/team.access/alice.json\n@@"
            ),
            "{diff}"
        );
        assert!(diff.contains("\n-  \"written\": \"by hand\"\n"), "{diff}");
        assert!(diff.contains("\n+  \"params\": {\n"), "{diff}");
        assert_eq!(
            answer["route"],
            json!({ "approval": "http", "batched": true,
                "reviewers": ["reviewer bot 1", "reviewer bot 2"],
                "project": "config/repo", "targetBranch": "main" }),
            "{name}"
        );
        // Asked again, the file comes from the cache by its blob id (from
        // the HEAD's X-Gitlab-Blob-Id): one more HEAD, no read.
        let raw_reads = w.gitlab.calls(changegate_sim::gitlab::Endpoint::GetRawFile);
        let heads = w
            .gitlab
            .calls(changegate_sim::gitlab::Endpoint::GetFileMetadata);
        let again = preview_apply(&w, "alice", body.clone()).await;
        assert_eq!(again["files"], answer["files"], "{name}");
        assert_eq!(
            w.gitlab.calls(changegate_sim::gitlab::Endpoint::GetRawFile),
            raw_reads,
            "{name}: the file is not read again"
        );
        assert_eq!(
            w.gitlab
                .calls(changegate_sim::gitlab::Endpoint::GetFileMetadata),
            heads + 1,
            "{name}"
        );
        nothing_written(&w, name).await;

        // The submit claims the same operation id as new (the preview took
        // no key), and the MR writes exactly the proposed file.
        let submitted = w.app.post_as("alice", "/api/v1/applications", &body).await;
        assert_eq!(submitted.status(), 202, "{name}");
        let submitted: Value = submitted.json().await.unwrap();
        assert_eq!(submitted["code"], "ACCEPTED", "{name}: {submitted}");
        approve_all(&w, &[OPERATION.to_owned()]).await;
        let views = rounds_until_settled(&w, &[OPERATION.to_owned()]).await;
        assert_eq!(views[0]["status"], "VALIDATED", "{name}: {}", views[0]);
        assert_eq!(
            w.gitlab
                .file(w.project, "main", "bindings/team.access/alice.json")
                .as_deref(),
            Some(proposed),
            "{name}: the preview showed what the MR wrote"
        );
    }
}

#[tokio::test]
async fn a_new_file_is_a_create_and_a_shared_file_shows_the_whole_file_after_the_edit() {
    for test_db in each_backend().await {
        let name = &test_db.name;
        let w = world_with(&test_db.url, options()).await;
        let answer = preview_apply(
            &w,
            "alice",
            json!({ "targetKey": "team.values", "subjectId": "payments",
                "params": { "tag": "v1.2" }, "reason": "preview" }),
        )
        .await;
        let file = &answer["files"][0];
        assert_eq!(file["action"], "create", "{name}: {answer}");
        assert_eq!(file["current"], Value::Null);
        assert_eq!(file["proposed"], "replicas: 2\ntag: \"v1.2\"\n");
        assert_eq!(
            file["diff"],
            "--- /dev/null\n+++ b/values/payments.yaml\n@@ -0,0 +1,2 @@\n+replicas: 2\n+tag: \"v1.2\"\n"
        );

        w.gitlab
            .push(
                w.project,
                w.users[0],
                "main",
                &[("config/pools.toml", Some(POOLS))],
            )
            .unwrap();
        let answer = preview_apply(
            &w,
            "alice",
            json!({ "targetKey": "team.pools", "subjectId": "payments",
                "params": { "size": 40 }, "reason": "preview" }),
        )
        .await;
        let file = &answer["files"][0];
        assert_eq!(file["path"], "config/pools.toml", "{name}: {answer}");
        assert_eq!(file["action"], "update");
        let proposed = file["proposed"].as_str().unwrap();
        assert!(
            proposed.starts_with(POOLS),
            "the rest of the file is kept: {proposed}"
        );
        assert!(
            proposed.contains("[pools.payments]\nsize = 40\n"),
            "{proposed}"
        );
        let diff = file["diff"].as_str().unwrap();
        assert!(diff.contains("+[pools.payments]\n+size = 40\n"), "{diff}");
        assert!(!diff.contains("\n-"), "nothing removed: {diff}");
        nothing_written(&w, name).await;
    }
}

#[tokio::test]
async fn a_close_deletes_the_file_and_only_its_requester_sees_it() {
    for test_db in each_backend().await {
        let name = &test_db.name;
        let w = world_with(&test_db.url, options()).await;
        let body = json!({ "operationId": OPERATION, "targetKey": "team.access",
            "params": { "level": "read" }, "reason": "live" });
        let submitted = w.app.post_as("alice", "/api/v1/applications", &body).await;
        assert_eq!(submitted.status(), 202, "{name}");
        approve_all(&w, &[OPERATION.to_owned()]).await;
        let views = rounds_until_settled(&w, &[OPERATION.to_owned()]).await;
        assert_eq!(views[0]["status"], "VALIDATED", "{name}: {}", views[0]);
        let on_main = w
            .gitlab
            .file(w.project, "main", "bindings/team.access/alice.json")
            .unwrap();
        let writes_before = w.gitlab.requests().len();

        let close = json!({ "reason": "done" });
        let path = "/api/v1/bindings/team.access/close/preview";
        let answer = preview(&w, "alice", path, &close).await;
        assert_eq!(answer["blockers"], json!([]), "{name}: {answer}");
        let file = &answer["files"][0];
        assert_eq!(file["action"], "delete", "{name}: {answer}");
        // A removal asks no approval and gets its own MR at once.
        assert_eq!(
            (&answer["route"]["approval"], &answer["route"]["batched"]),
            (&json!("none"), &json!(false)),
            "{name}: {answer}"
        );
        assert_eq!(file["current"], on_main.as_str());
        assert_eq!(file["proposed"], Value::Null);
        let diff = file["diff"].as_str().unwrap();
        assert!(
            diff.starts_with("--- a/bindings/team.access/alice.json\n+++ /dev/null\n"),
            "{diff}"
        );

        // Bob previewing the removal of alice's binding learns nothing of it.
        let bobs = preview(
            &w,
            "bob",
            path,
            &json!({ "subjectId": "alice", "reason": "x" }),
        )
        .await;
        assert_eq!(codes(&bobs), ["NOT_FOUND"], "{name}: {bobs}");
        assert_eq!(bobs["files"], json!([]));
        let since: Vec<_> = w.gitlab.requests()[writes_before..]
            .iter()
            .filter(|r| !matches!(r.method.as_str(), "GET" | "HEAD"))
            .map(|r| format!("{} {}", r.method, r.path))
            .collect();
        assert!(since.is_empty(), "{name}: {since:?}");
    }
}

#[tokio::test]
async fn each_refusal_a_submit_would_meet_is_a_blocker_with_the_submits_code() {
    for test_db in each_backend().await {
        let name = &test_db.name;
        let w = world_with(
            &test_db.url,
            WorldOptions {
                extra: format!("{TARGETS}\n[rate_limit]\napply = 2\n"),
                ..manual_rounds()
            },
        )
        .await;

        // Field validation: the schema's failures with their fields, and
        // the reason; the file is still shown when it can be rendered.
        let answer = preview_apply(
            &w,
            "alice",
            json!({ "targetKey": "team.values", "params": { "tag": "1.0" }, "reason": "x" }),
        )
        .await;
        assert_eq!(codes(&answer), ["INVALID_ARGUMENT"], "{name}: {answer}");
        assert_eq!(answer["blockers"][0]["fields"][0]["field"], "params.tag");
        assert_eq!(answer["blockers"][0]["effect"], "REFUSE");
        assert_eq!(answer["files"], json!([]));
        let answer = preview_apply(
            &w,
            "alice",
            json!({ "targetKey": "team.access", "reason": " " }),
        )
        .await;
        assert_eq!(codes(&answer), ["INVALID_ARGUMENT"], "{name}: {answer}");
        assert!(
            answer["blockers"][0]["message"]
                .as_str()
                .unwrap()
                .starts_with("field `reason`")
        );
        assert_eq!(answer["files"][0]["action"], "create", "{answer}");

        // Permission: nothing of the file is shown.
        let answer = preview_apply(
            &w,
            "alice",
            json!({ "targetKey": "restricted", "reason": "x" }),
        )
        .await;
        assert_eq!(codes(&answer), ["FORBIDDEN"], "{name}: {answer}");
        assert_eq!(answer["blockers"][0]["message"], "Access denied");
        assert_eq!(answer["files"], json!([]));

        // Many previews count nothing against the apply limit of 2.
        let body = json!({ "targetKey": "team.access", "params": { "level": "a" }, "reason": "x" });
        for _ in 0..5 {
            assert_eq!(
                codes(&preview_apply(&w, "carol", body.clone()).await),
                Vec::<&str>::new()
            );
        }
        let first = w.app.post_as("carol", "/api/v1/applications", &body).await;
        assert_eq!(first.status(), 202, "{name}");
        let first: Value = first.json().await.unwrap();

        // Another request for the relation: IN_PROGRESS naming it.
        let answer = preview_apply(&w, "carol", body.clone()).await;
        assert_eq!(codes(&answer), ["IN_PROGRESS"], "{name}: {answer}");
        assert_eq!(
            answer["blockers"][0]["operationId"], first["operationId"],
            "{answer}"
        );
        assert!(
            answer["blockers"][0]["message"]
                .as_str()
                .unwrap()
                .contains(first["operationId"].as_str().unwrap())
        );

        // Over the limit: the second apply is still admitted, a third
        // would not be.
        let other = json!({ "targetKey": "team.values", "params": { "tag": "v1" }, "reason": "x" });
        let second = w.app.post_as("carol", "/api/v1/applications", &other).await;
        assert_eq!(second.status(), 202, "{name}");
        let answer = preview_apply(
            &w,
            "carol",
            json!({ "targetKey": "team.pools", "reason": "x" }),
        )
        .await;
        assert_eq!(codes(&answer), ["RATE_LIMITED"], "{name}: {answer}");

        // A closed window: the same database, submissions closed.
        let closed = spawn_app(
            &test_db.url,
            &w.config.replace("mode = \"OPEN\"", "mode = \"CLOSED\""),
        )
        .await;
        closed.wait_until_ready().await;
        let answer: Value = closed
            .post_as(
                "dave",
                "/api/v1/applications/preview",
                &json!({ "targetKey": "team.access", "reason": "x" }),
            )
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(codes(&answer), ["SERVICE_CLOSED"], "{name}: {answer}");
        assert!(
            answer["blockers"][0]["message"]
                .as_str()
                .unwrap()
                .starts_with("submissions are closed right now")
        );
        assert_eq!(answer["files"][0]["action"], "create", "{answer}");
        closed.stop().await.unwrap();
    }
}

#[tokio::test]
async fn a_frozen_merge_queue_holds_rather_than_refuses() {
    for test_db in each_backend().await {
        let name = &test_db.name;
        let w = world_with(
            &test_db.url,
            WorldOptions {
                batch_keys: "interval = \"1h\"\nfreeze = true".to_owned(),
                ..options()
            },
        )
        .await;
        let answer = preview_apply(
            &w,
            "alice",
            json!({ "targetKey": "team.access", "reason": "x" }),
        )
        .await;
        assert_eq!(codes(&answer), ["MERGE_FROZEN"], "{name}: {answer}");
        assert_eq!(answer["blockers"][0]["effect"], "HOLD");
        assert_eq!(answer["files"][0]["action"], "create");
    }
}

#[tokio::test]
async fn gitlab_out_of_reach_answers_the_preview_with_the_reason() {
    for test_db in each_backend().await {
        let name = &test_db.name;
        let w = world_with(
            &test_db.url,
            WorldOptions {
                gitlab_url: Some("http://127.0.0.1:9".to_owned()),
                ..options()
            },
        )
        .await;
        let answer = preview_apply(
            &w,
            "alice",
            json!({ "targetKey": "team.access", "params": { "level": "x" }, "reason": "x" }),
        )
        .await;
        assert_eq!(answer["gitlab"]["readable"], false, "{name}: {answer}");
        let reason = answer["gitlab"]["reason"].as_str().unwrap();
        assert!(reason.contains("could not be read from GitLab"), "{reason}");
        let file = &answer["files"][0];
        assert_eq!(file["currentKnown"], false, "{answer}");
        assert_eq!(file["current"], Value::Null);
        assert_eq!(file["diff"], Value::Null);
        assert_eq!(file["action"], "create");
        assert!(
            file["proposed"]
                .as_str()
                .unwrap()
                .contains("\"level\": \"x\"")
        );
        assert_eq!(answer["blockers"], json!([]));
    }
}
