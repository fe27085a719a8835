//! Deploy callbacks with targets in two GitLab projects, whose MRs are
//! numbered apart: both projects' first MR is !1, and a deploy of one
//! project's !1 validates only that project's bindings. A callback must then
//! name its project, in the form the configuration does.

use changegate_sim::deploy::{DeployFault, DeployFaultKind};
use changegate_sim::gitlab::AccessLevel;
use serde_json::{Value, json};

use super::end_to_end::{World, world};
use super::wait_for;
use crate::callbacks::post_signed;
use crate::helpers::each_backend;

/// `b.flags` lives in `team/b`; the other targets in `config/repo`, the default.
pub(super) const SECOND_PROJECT: &str = "[targets.\"b.flags\"]\nproject = \"team/b\"\n";

/// Creates `team/b` in the GitLab simulator, with the world's bot and
/// reviewers as its developers.
pub(super) fn second_project(w: &World) {
    let project = w.gitlab.create_project("team/b");
    for user in &w.users {
        w.gitlab
            .add_member(project, *user, AccessLevel::Developer)
            .unwrap();
    }
}

/// Alice applies for `target`; the operation id.
pub(super) async fn apply_for(w: &World, target: &str) -> String {
    let body = json!({ "targetKey": target, "reason": "testing" });
    let answer: Value = w
        .app
        .post_as("alice", "/api/v1/applications", &body)
        .await
        .json()
        .await
        .unwrap();
    answer["operationId"].as_str().unwrap().to_owned()
}

async fn status(w: &World, id: &str) -> Value {
    wait_for(&w.app, id, |_| true).await
}

#[tokio::test]
async fn a_deploy_of_one_projects_mr_validates_only_that_projects_bindings() {
    for test_db in each_backend().await {
        let w = world(&test_db.url, SECOND_PROJECT).await;
        second_project(&w);
        // Both merges' callbacks are lost; the test sends its own, naming
        // MRs and not operations, as older pipelines do.
        w.deploy
            .inject(DeployFault::new(DeployFaultKind::Lose).times(2));
        let merged = |v: &Value| v["status"] == "MERGED" || v["next"] == "CONTACT_TEAM";
        let in_b = apply_for(&w, "b.flags").await;
        let b = wait_for(&w.app, &in_b, merged).await;
        assert_eq!(b["status"], "MERGED", "{}: {b}", test_db.name);
        let in_a = apply_for(&w, "demo.feature-flags").await;
        let a = wait_for(&w.app, &in_a, merged).await;
        assert_eq!(a["status"], "MERGED", "{}: {a}", test_db.name);
        assert_eq!(
            a["mergeRequest"]["iid"], b["mergeRequest"]["iid"],
            "both projects' first MR has the same iid"
        );

        let iid = b["mergeRequest"]["iid"].clone();
        let secret = w.deploy.secret();
        let callback = |id: &str, project: Option<Value>| {
            let mut body = json!({ "callbackId": id, "mrIid": iid, "status": "success" });
            if let Some(project) = project {
                body["project"] = project;
            }
            body
        };
        let (_, answer) = post_signed(
            &w.app,
            "/callbacks/deploy",
            secret,
            &callback("a-by-path", Some(json!("config/repo"))),
            None,
        )
        .await;
        assert_eq!(answer["code"], "OK", "{}", test_db.name);
        assert_eq!(status(&w, &in_a).await["status"], "VALIDATED");
        assert_eq!(
            status(&w, &in_b).await["status"],
            "MERGED",
            "{}: config/repo's deploy says nothing of team/b's MR with the same iid",
            test_db.name
        );

        let (code, answer) = post_signed(
            &w.app,
            "/callbacks/deploy",
            secret,
            &callback("b-none", None),
            None,
        )
        .await;
        assert_eq!(
            (code, answer["code"].as_str()),
            (400, Some("INVALID_ARGUMENT"))
        );
        let message = answer["message"].as_str().unwrap();
        assert!(
            message.contains("field `project`: required")
                && message.contains("config/repo, team/b"),
            "{message}"
        );

        let b_id = w.gitlab.project_id("team/b").unwrap();
        let (code, answer) = post_signed(
            &w.app,
            "/callbacks/deploy",
            secret,
            &callback("b-by-id", Some(json!(b_id))),
            None,
        )
        .await;
        assert_eq!(code, 400, "{answer}");
        assert!(
            answer["message"]
                .as_str()
                .unwrap()
                .contains("cannot match a numeric id against projects configured by path"),
            "{answer}"
        );

        let (_, answer) = post_signed(
            &w.app,
            "/callbacks/deploy",
            secret,
            &callback("b-elsewhere", Some(json!("other/repo"))),
            None,
        )
        .await;
        assert_eq!(answer["code"], "IGNORED_STALE", "a project no target uses");
        assert_eq!(status(&w, &in_b).await["status"], "MERGED");

        let (_, answer) = post_signed(
            &w.app,
            "/callbacks/deploy",
            secret,
            &callback("b-by-path", Some(json!("Team/B"))),
            None,
        )
        .await;
        assert_eq!(answer["code"], "OK", "{}", test_db.name);
        let b = status(&w, &in_b).await;
        assert_eq!(
            (b["status"].as_str(), b["step"]["name"].as_str()),
            (Some("VALIDATED"), Some("DEPLOY_CONFIRMED")),
            "{}: {b}",
            test_db.name
        );
    }
}
