//! What people see of a merge batch names its number, not its id: the
//! first batch of a project is #1 in its MR's title, its branch, its
//! members' messages and status, and the operators' view,
//! though another project's batch took the first id.

use serde_json::Value;

use super::deploy_projects::{SECOND_PROJECT, apply_for, second_project};
use super::end_to_end::world;
use super::wait_for;
use crate::helpers::each_backend;

fn merged(view: &Value) -> bool {
    matches!(view["status"].as_str(), Some("MERGED" | "VALIDATED"))
        || view["next"] == "CONTACT_TEAM"
}

#[tokio::test]
async fn a_batch_mr_title_branch_and_messages_carry_its_projects_number_not_its_id() {
    for test_db in each_backend().await {
        let name = test_db.name;
        let w = world(&test_db.url, SECOND_PROJECT).await;
        second_project(&w);
        let in_b = apply_for(&w, "b.flags").await;
        let b = wait_for(&w.app, &in_b, merged).await;
        let in_a = apply_for(&w, "demo.feature-flags").await;
        let a = wait_for(&w.app, &in_a, merged).await;
        for view in [&a, &b] {
            assert_ne!(view["status"], "CREATE_FAILED", "{name}: {view}");
            assert_eq!(view["batchNumber"], 1, "{name}: {view}");
        }
        let batch_id = a["batchId"].as_i64().unwrap();
        assert!(
            batch_id > b["batchId"].as_i64().unwrap(),
            "{name}: team/b's batch came first: {a} {b}"
        );

        for project in ["config/repo", "team/b"] {
            let project = w.gitlab.project_id(project).unwrap();
            let mr = w.gitlab.merge_request(project, 1).unwrap();
            assert_eq!(
                (mr.title.as_str(), mr.source_branch.as_str()),
                (
                    "changegate: merge batch #1 (1 changes)",
                    "changegate/merge-batch-1"
                ),
                "{name}: {mr:?}"
            );
        }

        let timeline: Value = w
            .app
            .get_as("alice", &format!("/api/v1/operations/{in_a}/timeline"))
            .await
            .json()
            .await
            .unwrap();
        let messages: Vec<&str> = timeline["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|item| item["message"].as_str())
            .collect();
        for said in [
            "in merge batch #1",
            "merge batch #1 opened MR !1",
            "merge batch #1: pipeline passed",
            "merged in batch #1",
        ] {
            assert!(messages.contains(&said), "{name}: {said:?} in {messages:?}");
        }
        assert_eq!(timeline["operation"]["batchNumber"], 1, "{name}");

        let detail: Value = w
            .app
            .get_as("admin", &format!("/admin/v1/batches/{batch_id}"))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(
            (&detail["batch"]["id"], &detail["batch"]["number"]),
            (&Value::from(batch_id), &Value::from(1)),
            "{name}: {detail}"
        );
        let list: Value = w
            .app
            .get_as("admin", "/admin/v1/batches")
            .await
            .json()
            .await
            .unwrap();
        let listed: Vec<(&str, i64)> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                (
                    b["project"].as_str().unwrap(),
                    b["number"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            listed,
            [("config/repo", 1), ("team/b", 1)],
            "{name}: newest first, each project from #1"
        );
    }
}
