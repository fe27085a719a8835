//! The whole flow against all three simulators: apply → approval →
//! branch, commit, MR → pipeline → two reviewer approvals → merge →
//! deploy callback → VALIDATED.

use changegate_sim::callback::DeliverySettings;
use changegate_sim::deploy::{DeploySim, DeploySimHandle, DeploySimOptions};
use changegate_sim::gitlab::{
    AccessLevel, GitLabSim, GitLabSimHandle, GitLabSimOptions, PipelineOutcome, ProjectId, UserId,
};
use changegate_sim::tls::ServerTls;

use super::*;

/// changegate wired to the three simulators.
pub struct World {
    pub gitlab: GitLabSimHandle,
    /// The bot, then the two reviewers.
    pub users: Vec<UserId>,
    pub project: ProjectId,
    pub approval: ApprovalSimHandle,
    pub deploy: DeploySimHandle,
    pub app: TestApp,
    /// changegate's configuration, to start it again on the same database.
    pub config: String,
}

/// How a [`World`] differs from the default one.
pub struct WorldOptions {
    /// Lines inside the `[database]` section.
    pub database_keys: String,
    /// Lines added to the `[access]` section.
    pub access_keys: String,
    /// Configuration sections appended to the file.
    pub extra: String,
    /// Lines inside the `[gitlab]` section.
    pub gitlab_keys: String,
    /// Lines inside the `[batch]` section.
    pub batch_keys: String,
    /// Lines inside the `[executor]` section.
    pub executor_keys: String,
    /// How the approval simulator decides.
    pub policy: DecisionPolicy,
    /// The GitLab simulator's options.
    pub gitlab: GitLabSimOptions,
    /// The identity the approval and deploy simulators serve HTTPS with.
    pub tls: Option<ServerTls>,
    /// Where changegate calls GitLab, when not the simulator.
    pub gitlab_url: Option<String>,
    /// How the approval and deploy simulators send and retry their callbacks.
    pub delivery: DeliverySettings,
}

impl Default for WorldOptions {
    fn default() -> Self {
        Self {
            database_keys: String::new(),
            access_keys: String::new(),
            extra: String::new(),
            gitlab_keys: String::new(),
            batch_keys: "interval = \"200ms\"".to_owned(),
            executor_keys: String::new(),
            policy: DecisionPolicy::Auto {
                result: Decision::Approved,
                delay: Duration::ZERO,
            },
            gitlab: GitLabSimOptions::default(),
            tls: None,
            gitlab_url: None,
            delivery: DeliverySettings::default(),
        }
    }
}

/// The default world plus `extra` configuration sections.
pub async fn world(db_url: &str, extra: &str) -> World {
    world_with(
        db_url,
        WorldOptions {
            extra: extra.to_owned(),
            ..WorldOptions::default()
        },
    )
    .await
}

/// A GitLab simulator as `options` say, with the project `config/repo` and
/// its members: the bot (`bot-token`), then the two reviewers
/// (`alice-token`, `bob-token`).
pub async fn gitlab_with_bot_and_reviewers(
    options: GitLabSimOptions,
) -> (GitLabSimHandle, ProjectId, Vec<UserId>) {
    let gitlab = GitLabSim::start(options).await.unwrap();
    let project = gitlab.create_project("config/repo");
    let mut users = Vec::new();
    for (name, token) in [
        ("change-bot", "bot-token"),
        ("rev-alice", "alice-token"),
        ("rev-bob", "bob-token"),
    ] {
        let user = gitlab.add_user(name, token);
        gitlab
            .add_member(project, user, AccessLevel::Developer)
            .unwrap();
        users.push(user);
    }
    (gitlab, project, users)
}

/// A world as `options` say.
pub async fn world_with(db_url: &str, options: WorldOptions) -> World {
    let (gitlab, project, users) = gitlab_with_bot_and_reviewers(options.gitlab).await;
    let approval = ApprovalSim::start(ApprovalSimOptions {
        secret: generate_secret(),
        policy: options.policy,
        lost_response_hold: Duration::from_secs(3),
        tls: options.tls.clone(),
        delivery: options.delivery.clone(),
        ..ApprovalSimOptions::default()
    })
    .await
    .unwrap();
    let deploy = DeploySim::start(
        gitlab.observer(),
        DeploySimOptions {
            secret: generate_secret(),
            tls: options.tls,
            delivery: options.delivery,
            ..DeploySimOptions::default()
        },
    )
    .await
    .unwrap();
    let config = format!(
        "{}\n{}\
         [gitlab]\nbase_url = {:?}\nproject = \"config/repo\"\nbot_token = \"bot-token\"\nreviewer_tokens = [\"alice-token\", \"bob-token\"]\n{}\n\
         [executor]\npoll_interval = \"100ms\"\n{}\n[batch]\n{}\n\
         [approval]\nprovider = \"http\"\nurl = \"{}/approvals\"\ncallback_secret = {:?}\n\
         [deploy]\ncallback_secret = {:?}\n",
        options.database_keys,
        REQUESTER_CONFIG.replace(
            "mode = \"OPEN\"\n",
            &format!("mode = \"OPEN\"\n{}", options.access_keys)
        ),
        options
            .gitlab_url
            .as_deref()
            .unwrap_or_else(|| gitlab.base_url()),
        options.gitlab_keys,
        options.executor_keys,
        options.batch_keys,
        approval.base_url(),
        approval.secret(),
        deploy.secret(),
    ) + &options.extra;
    let app = spawn_app(db_url, &config).await;
    app.wait_until_ready().await;
    approval.set_callback_url(format!("{}/callbacks/approval", app.address));
    deploy.set_callback_url(format!("{}/callbacks/deploy", app.address));
    World {
        gitlab,
        users,
        project,
        approval,
        deploy,
        app,
        config,
    }
}

#[tokio::test]
async fn a_request_goes_all_the_way_to_validated() {
    for test_db in each_backend().await {
        let w = world(&test_db.url, "").await;
        let id = apply(&w.app).await;
        let view = wait_for(&w.app, &id, |v| {
            v["status"] == "VALIDATED" || v["next"] == "CONTACT_TEAM"
        })
        .await;
        assert_eq!(
            (view["status"].as_str(), view["step"]["name"].as_str()),
            (Some("VALIDATED"), Some("DEPLOY_CONFIRMED")),
            "{}: {view}",
            test_db.name
        );
        assert_eq!(view["next"], "NONE");
        let iid = view["mergeRequest"]["iid"].as_i64().unwrap();
        let mr = w
            .gitlab
            .merge_request(w.project, u64::try_from(iid).unwrap())
            .unwrap();
        assert_eq!(format!("{:?}", mr.state), "Merged", "{mr:?}");
        let file = w
            .gitlab
            .file(w.project, "main", "bindings/demo.feature-flags/alice.json")
            .unwrap();
        assert!(
            file.contains(&format!("\"operationId\": \"{id}\"")),
            "{file}"
        );
        assert!(file.ends_with("}\n"));
        assert_eq!(w.approval.requests().len(), 1);
        drop(w.deploy);
    }
}

#[tokio::test]
async fn a_live_binding_can_be_closed_and_its_file_is_deleted() {
    let db = crate::helpers::sqlite_db().await;
    let w = world(&db.url, "").await;
    let id = apply(&w.app).await;
    wait_for(&w.app, &id, |v| v["status"] == "VALIDATED").await;
    let path = "bindings/demo.feature-flags/alice.json";
    assert!(w.gitlab.file(w.project, "main", path).is_some());

    let close_id = close(&w.app).await;
    let view = wait_for(&w.app, &close_id, |v| {
        v["status"] == "CLOSED" || v["next"] == "CONTACT_TEAM"
    })
    .await;
    assert_eq!(
        (
            view["status"].as_str(),
            view["step"]["name"].as_str(),
            view["next"].as_str()
        ),
        (Some("CLOSED"), Some("CLOSED"), Some("REAPPLY")),
        "{view}"
    );
    assert!(
        w.gitlab.file(w.project, "main", path).is_none(),
        "the binding's file is deleted"
    );
    // And the relation can be applied for again.
    assert_eq!(
        w.app
            .post_as(
                "alice",
                "/api/v1/applications",
                &apply_body("demo.feature-flags")
            )
            .await
            .status(),
        202
    );
}

#[tokio::test]
async fn an_mr_first_request_gets_its_mr_before_approval_and_reaches_validated() {
    let db = crate::helpers::sqlite_db().await;
    let w = world(&db.url, "[workflow]\nflow_order = \"mr_first\"\n").await;
    let id = apply(&w.app).await;
    let view = wait_for(&w.app, &id, |v| {
        v["status"] == "VALIDATED" || v["next"] == "CONTACT_TEAM"
    })
    .await;
    assert_eq!(view["status"], "VALIDATED", "{view}");
    let requests = w.approval.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].body["ext"]["mrId"], view["mergeRequest"]["iid"],
        "the approval carries the MR"
    );
}

#[tokio::test]
async fn a_failed_pipeline_stops_the_request_with_contact_the_team() {
    let db = crate::helpers::sqlite_db().await;
    let w = world(&db.url, "").await;
    w.gitlab
        .script_pipelines(w.project, [PipelineOutcome::Failed])
        .unwrap();
    let id = apply(&w.app).await;
    let view = wait_for(&w.app, &id, |v| v["status"] == "CREATE_FAILED").await;
    assert_eq!(
        (view["step"]["name"].as_str(), view["next"].as_str()),
        (Some("CREATE_PIPELINE_FAILED"), Some("CONTACT_TEAM"))
    );
}
