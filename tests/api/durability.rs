//! The service as a real process against all three simulators: killed with
//! SIGKILL in the middle of 50 workflows and started again, every request
//! reaches its terminal state and GitLab shows no duplicate MR, commit or
//! approval; and the flow order switched by editing the watched file while
//! requests are in flight, each finishing in the order it started.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use changegate_sim::approval::{
    ApprovalSim, ApprovalSimHandle, ApprovalSimOptions, Decision, DecisionPolicy,
};
use changegate_sim::callback::{DeliverySettings, generate_secret};
use changegate_sim::deploy::{DeploySim, DeploySimHandle, DeploySimOptions};
use changegate_sim::gitlab::{Endpoint, GitLabSimHandle, GitLabSimOptions, ProjectId};
use serde_json::{Value, json};

use crate::helpers::{REQUESTER_CONFIG, changegate_command, each_backend};
use crate::workflow::end_to_end::gitlab_with_bot_and_reviewers;

/// Callbacks keep trying while the service is down (a real approval system
/// or deploy pipeline retries too).
fn patient_delivery() -> DeliverySettings {
    DeliverySettings {
        timeout: Duration::from_secs(2),
        retries: 200,
        retry_backoff: Duration::from_millis(20),
    }
}

pub(crate) struct Outside {
    pub(crate) gitlab: GitLabSimHandle,
    pub(crate) project: ProjectId,
    pub(crate) approval: ApprovalSimHandle,
    pub(crate) deploy: DeploySimHandle,
}

pub(crate) async fn outside(policy: DecisionPolicy) -> Outside {
    // Pipelines take a moment, as real ones do: the kill lands while they run.
    let (gitlab, project, _) = gitlab_with_bot_and_reviewers(GitLabSimOptions {
        pipeline_duration: Duration::from_secs(1),
        ..GitLabSimOptions::default()
    })
    .await;
    let approval = ApprovalSim::start(ApprovalSimOptions {
        secret: generate_secret(),
        policy,
        delivery: patient_delivery(),
        ..ApprovalSimOptions::default()
    })
    .await
    .unwrap();
    let deploy = DeploySim::start(
        gitlab.observer(),
        DeploySimOptions {
            secret: generate_secret(),
            delivery: patient_delivery(),
            ..DeploySimOptions::default()
        },
    )
    .await
    .unwrap();
    Outside {
        gitlab,
        project,
        approval,
        deploy,
    }
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) fn config(
    db_url: &str,
    port: u16,
    outside: &Outside,
    flow_order: &str,
    batched: bool,
) -> String {
    format!(
        "[batch]\nenabled = {batched}\ninterval = \"500ms\"\n\
         [server]\nlisten = \"127.0.0.1:{port}\"\n\
         [database]\nurl = {db_url:?}\n\
         [log]\nlevel = \"warn\"\n\
         [executor]\nworkers = 8\nlease = \"2s\"\npoll_interval = \"200ms\"\n\
         [workflow]\nflow_order = {flow_order:?}\n\
         {REQUESTER_CONFIG}\
         [gitlab]\nbase_url = {:?}\nproject = \"config/repo\"\nbot_token = \"bot-token\"\nreviewer_tokens = [\"alice-token\", \"bob-token\"]\n\
         [approval]\nprovider = \"http\"\nurl = \"{}/approvals\"\ncallback_secret = {:?}\n\
         [deploy]\ncallback_secret = {:?}\n",
        outside.gitlab.base_url(),
        outside.approval.base_url(),
        outside.approval.secret(),
        outside.deploy.secret(),
    )
}

/// The service as a child process; killed (SIGKILL) when dropped.
pub(crate) struct Service(pub(crate) Child);

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) async fn start(config_path: &Path, address: &str, client: &reqwest::Client) -> Service {
    let child = changegate_command()
        .args(["serve", "--config"])
        .arg(config_path)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("changegate starts");
    let service = Service(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = client.get(format!("{address}/readyz")).send().await;
        if ready.is_ok_and(|r| r.status() == 200) {
            return service;
        }
        assert!(Instant::now() < deadline, "changegate did not become ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Applies as `user`, sending again (the same operation id) when told to
/// retry later, as SPEC §2.1 allows a client to.
pub(crate) async fn apply_as(client: &reqwest::Client, address: &str, user: &str) -> String {
    let operation_id = uuid::Uuid::new_v4().to_string();
    for _ in 0..10 {
        let answer: Value = client
            .post(format!("{address}/api/v1/applications"))
            .header("x-auth-request-user", user)
            .json(&json!({ "operationId": operation_id, "targetKey": "demo.feature-flags", "reason": "durability" }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if answer["code"] == "RETRY_LATER" {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        assert!(
            matches!(
                answer["code"].as_str(),
                Some("ACCEPTED" | "DUPLICATE_SUBMIT")
            ),
            "{answer}"
        );
        assert_eq!(answer["operationId"], operation_id.as_str());
        return operation_id;
    }
    panic!("{user}: still told to retry later");
}

/// Waits until every operation of `requests` is VALIDATED; returns their views.
pub(crate) async fn all_validated(
    client: &reqwest::Client,
    address: &str,
    requests: &[(String, String)],
    within: Duration,
) -> Vec<Value> {
    let deadline = Instant::now() + within;
    loop {
        let mut views = Vec::new();
        for (user, id) in requests {
            let view = client
                .get(format!("{address}/api/v1/operations/{id}"))
                .header("x-auth-request-user", user)
                .send()
                .await;
            if let Ok(view) = view
                && let Ok(view) = view.json::<Value>().await
            {
                views.push(view);
            }
        }
        let done = views.iter().filter(|v| v["status"] == "VALIDATED").count();
        if done == requests.len() {
            return views;
        }
        assert!(
            Instant::now() < deadline,
            "{done} of {} VALIDATED; the others: {:?}",
            requests.len(),
            views
                .iter()
                .filter(|v| v["status"] != "VALIDATED")
                .map(|v| format!("{} {} {}", v["status"], v["step"]["name"], v["message"]))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every merge request in the project, by iid.
fn merge_requests(outside: &Outside) -> Vec<changegate_sim::gitlab::MergeRequestSnapshot> {
    (1..)
        .map_while(|iid| outside.gitlab.merge_request(outside.project, iid))
        .collect()
}

/// Calls to `endpoint` that GitLab answered with `status` (the change took effect).
fn effective_calls(outside: &Outside, endpoint: Endpoint, status: u16) -> usize {
    outside
        .gitlab
        .requests()
        .iter()
        .filter(|r| r.endpoint == endpoint && r.status == status)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_mid_flight_with_50_requests_every_one_finishes_and_nothing_happens_twice() {
    killed_mid_flight(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_mid_flight_with_50_batched_requests_every_one_finishes_and_nothing_happens_twice() {
    killed_mid_flight(true).await;
}

/// 50 requests, each with its own MR or (`batched`) merged in batches; the
/// service is killed with SIGKILL once MRs are open and restarted.
async fn killed_mid_flight(batched: bool) {
    const REQUESTS: usize = 50;
    for test_db in each_backend().await {
        let outside = outside(DecisionPolicy::Auto {
            result: Decision::Approved,
            delay: Duration::from_millis(300),
        })
        .await;
        let port = free_port();
        let address = format!("http://127.0.0.1:{port}");
        outside
            .approval
            .set_callback_url(format!("{address}/callbacks/approval"));
        outside
            .deploy
            .set_callback_url(format!("{address}/callbacks/deploy"));
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("changegate.toml");
        std::fs::write(
            &config_path,
            config(&test_db.url, port, &outside, "approval_first", batched),
        )
        .unwrap();
        // An answer slowed by a loaded machine is waited for: what is
        // checked is what happens to each request, not how fast.
        let client = crate::helpers::plain_client()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();

        let service = start(&config_path, &address, &client).await;
        let mut requests = Vec::new();
        for n in 0..REQUESTS {
            let user = format!("user{n}");
            let id = apply_as(&client, &address, &user).await;
            requests.push((user, id));
        }
        // Kill it while the requests are spread over the steps: some MRs
        // open, none or few merged.
        let deadline = Instant::now() + Duration::from_secs(30);
        let opened_before_kill = if batched { 1 } else { REQUESTS / 5 };
        let in_flight = |mrs: &[changegate_sim::gitlab::MergeRequestSnapshot]| {
            mrs.len() >= opened_before_kill
                && mrs.iter().any(|mr| format!("{:?}", mr.state) == "Opened")
        };
        while !in_flight(&merge_requests(&outside)) {
            assert!(Instant::now() < deadline, "no MRs were opened");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(service);
        assert!(
            in_flight(&merge_requests(&outside)),
            "{}: the kill came while no MR was open",
            test_db.name
        );

        let _service = start(&config_path, &address, &client).await;
        let views = all_validated(&client, &address, &requests, Duration::from_secs(120)).await;

        let mrs = merge_requests(&outside);
        if !batched {
            assert_eq!(mrs.len(), REQUESTS, "{}: one MR per request", test_db.name);
        }
        let mut branches: Vec<&str> = mrs.iter().map(|mr| mr.source_branch.as_str()).collect();
        branches.sort_unstable();
        branches.dedup();
        assert_eq!(
            branches.len(),
            mrs.len(),
            "{}: no branch has two MRs",
            test_db.name
        );
        for mr in &mrs {
            assert_eq!(format!("{:?}", mr.state), "Merged", "{mr:?}");
            let mut approvers = mr.approved_by.clone();
            approvers.sort();
            assert_eq!(approvers, ["rev-alice", "rev-bob"], "{mr:?}");
        }
        for view in &views {
            let iid = view["mergeRequest"]["iid"].as_u64().unwrap();
            let mr = &mrs[usize::try_from(iid).unwrap() - 1];
            let id = view["operationId"].as_str().unwrap();
            if !batched {
                assert_eq!(mr.source_branch, format!("changegate/{id}"), "{view}");
            }
        }
        assert_eq!(
            effective_calls(&outside, Endpoint::CreateCommit, 201),
            mrs.len(),
            "{}: one commit per MR",
            test_db.name
        );
        assert_eq!(
            effective_calls(&outside, Endpoint::CreateMergeRequest, 201),
            mrs.len(),
            "{}",
            test_db.name
        );
        assert_eq!(
            effective_calls(&outside, Endpoint::Approve, 201),
            2 * mrs.len(),
            "{}: two approvals per MR, none repeated",
            test_db.name
        );
        let files = outside.gitlab.files(outside.project, "main").unwrap();
        assert_eq!(
            files
                .keys()
                .filter(|path| path.starts_with("bindings/demo.feature-flags/"))
                .count(),
            REQUESTS,
            "{}: every request's file is on main",
            test_db.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn switching_the_flow_order_mid_flight_strands_nothing_and_each_request_keeps_its_order() {
    let test_db = crate::helpers::sqlite_db().await;
    let outside = outside(DecisionPolicy::Manual).await;
    let port = free_port();
    let address = format!("http://127.0.0.1:{port}");
    outside
        .approval
        .set_callback_url(format!("{address}/callbacks/approval"));
    outside
        .deploy
        .set_callback_url(format!("{address}/callbacks/deploy"));
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("changegate.toml");
    std::fs::write(
        &config_path,
        config(&test_db.url, port, &outside, "approval_first", true),
    )
    .unwrap();
    let client = crate::helpers::plain_client()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let _service = start(&config_path, &address, &client).await;

    let mut first = Vec::new();
    for n in 0..5 {
        let user = format!("early{n}");
        first.push((user.clone(), apply_as(&client, &address, &user).await));
    }
    // Every early request waits for its decision before any MR exists.
    let deadline = Instant::now() + Duration::from_secs(20);
    while outside.approval.approvals().len() < first.len() {
        assert!(Instant::now() < deadline, "approvals were not requested");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(merge_requests(&outside).is_empty());

    std::fs::write(
        &config_path,
        config(&test_db.url, port, &outside, "mr_first", true),
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let effective: Value = client
            .get(format!("{address}/admin/v1/config"))
            .header("x-auth-request-user", "admin")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if effective["workflow"]["flowOrder"] == "mr_first" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the file change was not picked up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut second = Vec::new();
    for n in 0..5 {
        let user = format!("late{n}");
        second.push((user.clone(), apply_as(&client, &address, &user).await));
    }
    // MR first: each late request's approval is asked for only once its MR passed CI.
    let deadline = Instant::now() + Duration::from_secs(30);
    while outside.approval.approvals().len() < first.len() + second.len() {
        assert!(
            Instant::now() < deadline,
            "late approvals were not requested"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(merge_requests(&outside).len(), second.len());

    for approval in outside.approval.approvals() {
        outside
            .approval
            .decide(approval.operation_id, Decision::Approved)
            .await
            .unwrap();
    }
    all_validated(
        &client,
        &address,
        &[first.clone(), second.clone()].concat(),
        Duration::from_secs(60),
    )
    .await;

    let carried_mr: Vec<(String, bool)> = outside
        .approval
        .requests()
        .iter()
        .map(|r| {
            let id = r.body["operationId"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            (id, r.body["ext"]["mrId"].is_number())
        })
        .collect();
    for (_, id) in &first {
        assert!(
            carried_mr.contains(&(id.clone(), false)),
            "{id}: started approval-first, asked without an MR"
        );
    }
    for (_, id) in &second {
        assert!(
            carried_mr.contains(&(id.clone(), true)),
            "{id}: started MR-first, asked with its MR"
        );
    }
    // Approval first: merged in a batch; MR first: each its own MR.
    let mrs = merge_requests(&outside);
    for (user, id) in first.iter().chain(&second) {
        let view: Value = client
            .get(format!("{address}/api/v1/operations/{id}"))
            .header("x-auth-request-user", user)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let iid = view["mergeRequest"]["iid"].as_u64().unwrap();
        let branch = &mrs[usize::try_from(iid).unwrap() - 1].source_branch;
        let own = format!("changegate/{id}");
        let started_mr_first = second.iter().any(|(_, late)| late == id);
        assert_eq!(*branch == own, started_mr_first, "{id}: {branch}");
    }
}
