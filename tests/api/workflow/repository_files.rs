//! Targets that write the repository's own files, end to end with the
//! simulators, on both backends: a YAML values file from a template, and
//! one key per binding of a shared TOML file whose comments and other
//! entries stay as people wrote them.

use changegate::files::document::{FileFormat, parse, value_at};
use std::time::Duration;

use changegate_sim::gitlab::{Endpoint, Fault, FaultKind, MrState};
use serde_json::{Value, json};

use super::batched::{approve_all, claim_round, manual_rounds, rounds_until_settled, view};
use super::end_to_end::{World, WorldOptions, world_with};
use crate::helpers::each_backend;

const TARGETS: &str = r#"
[targets."team.values"]
self_only = false
path = "values/{subject}.yaml"
template = """
# Managed by changegate: {{ target }} for {{ subject }}
replicas: {{ params.replicas }}
image:
  tag: {{ params.tag | tojson }}
{% if params.debug %}
debug: true
{% endif %}
"""
[targets."team.values".params_schema]
type = "object"
required = ["tag"]
additionalProperties = false
[targets."team.values".params_schema.properties.replicas]
type = "integer"
minimum = 1
maximum = 10
default = 2
[targets."team.values".params_schema.properties.tag]
type = "string"
pattern = "^v[0-9.]+$"
[targets."team.values".params_schema.properties.debug]
type = "boolean"
default = false

[targets."team.pools"]
self_only = false
edit = { file = "config/pools.toml", key = "pools.{subject}" }
[targets."team.pools".params_schema]
type = "object"
additionalProperties = false
[targets."team.pools".params_schema.properties.size]
type = "integer"
minimum = 1
maximum = 500
default = 20
[targets."team.pools".params_schema.properties.mode]
type = "string"
enum = ["read", "read-write"]
default = "read"
"#;

/// The shared file as people keep it, before changegate touches it.
const POOLS: &str = "\
# Connection pools, one table per team.
# Ask #platform before raising a size above 100.

[pools.legacy]
size = 5 # do not raise: the old primary
mode = \"read\"

# The reporting team's pool.
[pools.reports]
size = 12
mode = \"read\"
";

fn options() -> WorldOptions {
    WorldOptions {
        extra: TARGETS.to_owned(),
        ..manual_rounds()
    }
}

async fn apply(w: &World, target: &str, subject: &str, params: Value) -> String {
    let answer = w
        .app
        .post_as(
            subject,
            "/api/v1/applications",
            &json!({ "targetKey": target, "subjectId": subject, "params": params, "reason": "files" }),
        )
        .await;
    assert_eq!(answer.status(), 202, "{target} for {subject}");
    let answer: Value = answer.json().await.unwrap();
    answer["operationId"].as_str().unwrap().to_owned()
}

fn pool(w: &World, subject: &str) -> Option<Value> {
    let text = w.gitlab.file(w.project, "main", "config/pools.toml")?;
    value_at(
        FileFormat::Toml,
        &text,
        &["pools".to_owned(), subject.to_owned()],
    )
    .unwrap()
}

#[tokio::test]
async fn a_yaml_template_is_rendered_with_its_defaults_and_merged_as_valid_yaml() {
    for test_db in each_backend().await {
        let w = world_with(&test_db.url, options()).await;
        let id = apply(&w, "team.values", "payments", json!({ "tag": "v1.4.2" })).await;
        approve_all(&w, std::slice::from_ref(&id)).await;
        let views = rounds_until_settled(&w, std::slice::from_ref(&id)).await;
        assert_eq!(
            views[0]["status"], "VALIDATED",
            "{}: {}",
            test_db.name, views[0]
        );

        let file = w
            .gitlab
            .file(w.project, "main", "values/payments.yaml")
            .expect("the values file is on main");
        assert_eq!(
            file,
            "# Managed by changegate: team.values for payments\nreplicas: 2\nimage:\n  tag: \"v1.4.2\"\n",
            "{}",
            test_db.name
        );
        assert_eq!(
            parse(FileFormat::Yaml, &file).unwrap(),
            json!({ "replicas": 2, "image": { "tag": "v1.4.2" } })
        );
    }
}

#[tokio::test]
async fn two_requests_in_one_batch_edit_a_shared_toml_file_in_one_commit_keeping_what_people_wrote()
{
    for test_db in each_backend().await {
        let w = world_with(&test_db.url, options()).await;
        w.gitlab
            .push(
                w.project,
                w.users[0],
                "main",
                &[("config/pools.toml", Some(POOLS))],
            )
            .unwrap();
        let ids = vec![
            apply(&w, "team.pools", "payments", json!({ "size": 40 })).await,
            apply(&w, "team.pools", "search", json!({ "mode": "read-write" })).await,
        ];
        approve_all(&w, &ids).await;
        let views = rounds_until_settled(&w, &ids).await;
        for v in &views {
            assert_eq!(v["status"], "VALIDATED", "{}: {v}", test_db.name);
            assert_eq!(
                v["mergeRequest"]["iid"], views[0]["mergeRequest"]["iid"],
                "one MR"
            );
        }
        let mr = w.gitlab.merge_request(w.project, 1).unwrap();
        assert_eq!(mr.state, MrState::Merged);
        assert_eq!(
            w.gitlab.calls(Endpoint::CreateCommit),
            1,
            "one commit carries both edits"
        );

        let text = w
            .gitlab
            .file(w.project, "main", "config/pools.toml")
            .unwrap();
        assert!(
            text.starts_with(POOLS),
            "{}: what people wrote is kept byte for byte:\n{text}",
            test_db.name
        );
        assert_eq!(
            pool(&w, "payments"),
            Some(json!({ "size": 40, "mode": "read" }))
        );
        assert_eq!(
            pool(&w, "search"),
            Some(json!({ "size": 20, "mode": "read-write" }))
        );
        assert_eq!(
            pool(&w, "legacy"),
            Some(json!({ "size": 5, "mode": "read" }))
        );

        // A close removes its key, and only its key.
        let close = w
            .app
            .post_as(
                "payments",
                "/api/v1/bindings/team.pools/close",
                &json!({ "subjectId": "payments", "reason": "done" }),
            )
            .await;
        assert_eq!(close.status(), 202, "{}", test_db.name);
        let close: Value = close.json().await.unwrap();
        let close_id = close["operationId"].as_str().unwrap().to_owned();
        rounds_until_closed(&w, &close_id).await;
        let text = w
            .gitlab
            .file(w.project, "main", "config/pools.toml")
            .unwrap();
        assert!(text.starts_with(POOLS), "{}:\n{text}", test_db.name);
        assert_eq!(pool(&w, "payments"), None, "{text}");
        assert_eq!(
            pool(&w, "search"),
            Some(json!({ "size": 20, "mode": "read-write" }))
        );
    }
}

#[tokio::test]
async fn an_edit_someone_else_makes_before_the_commit_is_kept_not_overwritten() {
    for test_db in each_backend().await {
        let w = world_with(&test_db.url, options()).await;
        w.gitlab
            .push(
                w.project,
                w.users[0],
                "main",
                &[("config/pools.toml", Some(POOLS))],
            )
            .unwrap();
        let id = apply(&w, "team.pools", "payments", json!({ "size": 40 })).await;
        approve_all(&w, std::slice::from_ref(&id)).await;
        // Between the request and its commit, someone edits another entry
        // by hand on the target branch.
        let edited = POOLS.replace("size = 12", "size = 14 # raised for the quarter's close");
        w.gitlab
            .push(
                w.project,
                w.users[0],
                "main",
                &[("config/pools.toml", Some(&edited))],
            )
            .unwrap();
        let views = rounds_until_settled(&w, std::slice::from_ref(&id)).await;
        assert_eq!(
            views[0]["status"], "VALIDATED",
            "{}: {}",
            test_db.name, views[0]
        );
        let text = w
            .gitlab
            .file(w.project, "main", "config/pools.toml")
            .unwrap();
        assert!(
            text.starts_with(&edited),
            "{}: the hand edit is kept:\n{text}",
            test_db.name
        );
        assert_eq!(
            pool(&w, "reports"),
            Some(json!({ "size": 14, "mode": "read" }))
        );
        assert_eq!(
            pool(&w, "payments"),
            Some(json!({ "size": 40, "mode": "read" }))
        );
    }
}

#[tokio::test]
async fn an_edit_that_lands_between_the_read_of_the_target_and_the_new_branch_is_kept() {
    for test_db in each_backend().await {
        let w = world_with(&test_db.url, options()).await;
        w.gitlab
            .push(
                w.project,
                w.users[0],
                "main",
                &[("config/pools.toml", Some(POOLS))],
            )
            .unwrap();
        let id = apply(&w, "team.pools", "payments", json!({ "size": 40 })).await;
        approve_all(&w, std::slice::from_ref(&id)).await;
        // The round's read of the shared file on main is answered late;
        // the hand edit lands after the read, before the branch is made.
        w.gitlab.inject(Fault::new(
            Endpoint::GetRawFile,
            FaultKind::Slow(Duration::from_secs(2)),
        ));
        let edited = POOLS.replace("size = 12", "size = 14 # raised for the quarter's close");
        let run_body = json!({});
        let round = w.app.post_as("admin", "/admin/v1/batches/run", &run_body);
        let hand_edit = async {
            while !w
                .gitlab
                .requests()
                .iter()
                .any(|r| r.endpoint == Endpoint::GetRawFile)
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            w.gitlab
                .push(
                    w.project,
                    w.users[0],
                    "main",
                    &[("config/pools.toml", Some(&edited))],
                )
                .unwrap();
        };
        let (ran, ()) = tokio::join!(round, hand_edit);
        assert_eq!(ran.status(), 200);
        let views = rounds_until_settled(&w, std::slice::from_ref(&id)).await;
        assert_eq!(
            views[0]["status"], "VALIDATED",
            "{}: {}",
            test_db.name, views[0]
        );
        let text = w
            .gitlab
            .file(w.project, "main", "config/pools.toml")
            .unwrap();
        assert!(
            text.starts_with(&edited),
            "{}: the hand edit is kept:\n{text}",
            test_db.name
        );
        assert_eq!(
            pool(&w, "payments"),
            Some(json!({ "size": 40, "mode": "read" }))
        );
    }
}

/// Runs merge rounds until the close `id` is CLOSED.
async fn rounds_until_closed(w: &World, id: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        claim_round(w).await;
        let v = view(w, id).await;
        if v["status"] == "CLOSED" {
            return;
        }
        assert_ne!(v["next"], "CONTACT_TEAM", "{v}");
        assert!(std::time::Instant::now() < deadline, "not closed: {v}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
