//! The `/_sim` control API of the deploy simulator, and faults that strike with a
//! probability drawn from the seeded generator.

use changegate_sim::deploy::{DeployFault, DeployFaultKind, DeploySim, DeploySimOptions};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Fixture, SETTLE, WAIT, trailers};
use crate::control_client::{Answer, call};

impl Fixture {
    /// Calls the deploy simulator's `{base_url}/_sim{path}`.
    async fn control(&self, method: Method, path: &str, body: Option<Value>) -> Answer {
        call(
            method,
            &format!("{}/_sim{path}", self.deploy.base_url()),
            body,
        )
        .await
    }
}

#[tokio::test]
async fn faults_and_settings_are_controlled_over_http() {
    let fx = Fixture::start().await;
    let lose = Some(json!({ "kind": "lose" }));
    assert_eq!(fx.control(Method::POST, "/faults", lose).await.status, 204);
    let quiet = Some(json!({ "send": false }));
    let set = fx.control(Method::PUT, "/send_operation_ids", quiet).await;
    assert_eq!(set.status, 204);
    let by_id = Some(json!({ "field": "id" }));
    let set = fx.control(Method::PUT, "/project_field", by_id).await;
    assert_eq!(set.status, 204);
    let operation = Uuid::new_v4();
    let (lost, sha) = fx.merge("one", &trailers(&[operation])).await;
    fx.noticed(1).await;
    let merges = fx.control(Method::GET, "/merges", None).await.body;
    assert_eq!(
        merges,
        json!([{
            "project": fx.project,
            "iid": lost,
            "sha": sha,
            "operation_ids": [operation.to_string()],
            "fault": { "kind": "lose" }
        }])
    );
    fx.receiver.assert_stays_at(0, SETTLE).await;

    let delay = Some(json!({ "kind": "delay", "delay_ms": 300 }));
    fx.control(Method::POST, "/faults", delay).await;
    let (late, _) = fx.merge("two", &trailers(&[operation])).await;
    let received = fx.receiver.wait_for(1, WAIT).await;
    assert_eq!(received[0].body["mrIid"], late);
    assert_eq!(received[0].body["project"], fx.project, "CI_PROJECT_ID");
    assert!(received[0].body.get("operationIds").is_none());
    // The receiver records a callback before the simulator has read its answer.
    fx.deploy.wait_for_callbacks(1, WAIT).await;
    let callbacks = fx.control(Method::GET, "/callbacks", None).await.body;
    assert_eq!(callbacks[0]["status"], 200);

    let nowhere = Some(json!({ "url": "http://127.0.0.1:1/callbacks/deploy" }));
    fx.control(Method::PUT, "/callback_url", nowhere).await;
    fx.merge("three", "").await;
    let sent = fx.deploy.wait_for_callbacks(4, WAIT).await;
    assert!(sent[1..].iter().all(|attempt| attempt.status.is_none()));

    let incomplete = Some(json!({ "kind": "delay" }));
    assert_eq!(
        fx.control(Method::POST, "/faults", incomplete).await.status,
        400
    );
    let reverse = Some(json!({ "kind": "reverse", "times": 3 }));
    fx.control(Method::POST, "/faults", reverse).await;
    assert_eq!(
        fx.control(Method::DELETE, "/faults", None).await.status,
        204
    );
    assert_eq!(fx.control(Method::GET, "/nothing", None).await.status, 404);
}

/// The faults ten merges meet under a 50 % `Failed` fault, with `seed`.
async fn strikes(seed: u64) -> Vec<Option<DeployFaultKind>> {
    let fx = Fixture::start().await;
    let options = DeploySimOptions {
        fault_seed: seed,
        ..DeploySimOptions::default()
    };
    let seeded = DeploySim::start(fx.gitlab.observer(), options)
        .await
        .unwrap();
    seeded.inject(
        DeployFault::new(DeployFaultKind::Failed)
            .times(100)
            .probability(0.5),
    );
    for branch in 0..10 {
        fx.merge(&format!("b{branch}"), "").await;
    }
    let merges = seeded.wait_for_merges(10, WAIT).await;
    merges.iter().map(|merge| merge.fault).collect()
}

#[tokio::test]
async fn probabilistic_faults_repeat_with_the_seed() {
    let first = strikes(5).await;
    assert_eq!(first.len(), 10);
    assert_eq!(first, strikes(5).await);
    assert_ne!(first, strikes(6).await);
}
