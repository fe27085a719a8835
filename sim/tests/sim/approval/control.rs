//! The `/_sim` control API of the approval simulator, and faults that strike with a
//! probability drawn from the seeded generator.

use std::time::Duration;

use changegate_sim::approval::{ApprovalSim, ApprovalSimOptions, DecisionPolicy};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Fixture, WAIT, request_body};
use crate::control_client::{Answer, call};

impl Fixture {
    /// Calls `{base_url}/_sim{path}`.
    async fn control(&self, method: Method, path: &str, body: Option<Value>) -> Answer {
        call(method, &format!("{}/_sim{path}", self.sim.base_url()), body).await
    }
}

#[tokio::test]
async fn policy_decisions_and_callback_url_are_controlled_over_http() {
    let fx = Fixture::start(DecisionPolicy::default()).await;
    let manual = Some(json!({ "mode": "manual" }));
    assert_eq!(fx.control(Method::PUT, "/policy", manual).await.status, 204);
    let operation = Uuid::new_v4();
    fx.request(operation).await;
    fx.receiver
        .assert_stays_at(0, Duration::from_millis(200))
        .await;

    let listed = fx.control(Method::GET, "/approvals", None).await.body;
    assert_eq!(listed[0]["operation_id"], operation.to_string());
    assert_eq!(listed[0]["target_key"], "demo.feature-flags");
    assert_eq!(listed[0]["decisions"], json!([]));
    let one = fx
        .control(Method::GET, &format!("/approvals/{operation}"), None)
        .await;
    assert_eq!(one.body, listed[0]);

    let decision = format!("/approvals/{operation}/decision");
    let rejected = Some(json!({ "result": "REJECTED" }));
    let attempts = fx.control(Method::POST, &decision, rejected).await;
    assert_eq!(attempts.status, 200, "{:?}", attempts.body);
    let attempt = &attempts.body[0];
    assert_eq!(attempt["status"], 200);
    assert_eq!(attempt["answer"], json!({ "code": "OK" }));
    assert_eq!(attempt["attempt"], 1);
    assert_eq!(attempt["bad_signature"], false);
    assert_eq!(attempt["body"]["result"], "REJECTED");
    assert_eq!(attempt["callback_id"], attempt["body"]["callbackId"]);
    assert!(fx.receiver.received()[0].verified.is_ok());

    let unknown = format!("/approvals/{}/decision", Uuid::new_v4());
    let approved = Some(json!({ "result": "APPROVED" }));
    assert_eq!(
        fx.control(Method::POST, &unknown, approved).await.status,
        404
    );
    let maybe = Some(json!({ "result": "MAYBE" }));
    assert_eq!(fx.control(Method::POST, &decision, maybe).await.status, 400);
    let not_uuid = fx.control(Method::GET, "/approvals/op-1", None).await;
    assert_eq!(not_uuid.status, 400);

    let auto = json!({ "mode": "auto", "result": "APPROVED", "delay_ms": 0 });
    fx.control(Method::PUT, "/policy", Some(auto)).await;
    fx.request(Uuid::new_v4()).await;
    let received = fx.receiver.wait_for(2, WAIT).await;
    assert_eq!(received[1].body["result"], "APPROVED");

    // Nothing listens on port 1: the attempts are logged as unanswered.
    let nowhere = Some(json!({ "url": "http://127.0.0.1:1/callbacks/approval" }));
    let set = fx.control(Method::PUT, "/callback_url", nowhere).await;
    assert_eq!(set.status, 204);
    let withdrawn = Some(json!({ "result": "WITHDRAWN" }));
    let lost = fx.control(Method::POST, &decision, withdrawn).await.body;
    assert!(
        lost.as_array()
            .unwrap()
            .iter()
            .all(|a| a["status"].is_null())
    );
    let callbacks = fx.control(Method::GET, "/callbacks", None).await.body;
    assert_eq!(callbacks.as_array().unwrap().len(), 2 + 3);
    let requests = fx.control(Method::GET, "/requests", None).await.body;
    let statuses: Vec<&Value> = requests
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["status"])
        .collect();
    assert_eq!(statuses, [&json!(201), &json!(201)]);
}

#[tokio::test]
async fn faults_are_injected_over_http_per_operation() {
    let fx = Fixture::manual().await;
    let operation = Uuid::new_v4();
    let fault = json!({
        "kind": "status", "status": 503, "operation": operation.to_string(), "times": 2
    });
    let injected = fx.control(Method::POST, "/faults", Some(fault)).await;
    assert_eq!(injected.status, 204, "{:?}", injected.body);
    fx.request(Uuid::new_v4()).await;
    for expected in [503, 503, 201] {
        let reply = fx.post(&request_body(operation)).await.unwrap();
        assert_eq!(reply.status, expected);
    }
    let requests = fx.control(Method::GET, "/requests", None).await.body;
    assert_eq!(
        requests[1]["fault"],
        json!({ "kind": "status", "status": 503 })
    );
    assert_eq!(requests[3]["fault"], Value::Null);

    let duplicate = Some(json!({ "kind": "duplicate_callback" }));
    fx.control(Method::POST, "/faults", duplicate).await;
    let decision = format!("/approvals/{operation}/decision");
    let approved = Some(json!({ "result": "APPROVED" }));
    let attempts = fx.control(Method::POST, &decision, approved).await.body;
    assert_eq!(attempts.as_array().unwrap().len(), 2);
    assert_eq!(attempts[1]["answer"], json!({ "code": "DUPLICATE" }));

    for bad in [
        json!({ "kind": "out_of_order" }),
        json!({ "kind": "status", "status": 503, "operation": "op-1" }),
        json!({ "kind": "bad_signature", "probability": -0.1 }),
    ] {
        let refused = fx.control(Method::POST, "/faults", Some(bad)).await;
        assert_eq!(refused.status, 400, "{:?}", refused.body);
    }
    let late = Some(json!({ "kind": "late_callback", "delay_ms": 60_000 }));
    fx.control(Method::POST, "/faults", late).await;
    assert_eq!(
        fx.control(Method::DELETE, "/faults", None).await.status,
        204
    );
    let withdrawn = Some(json!({ "result": "WITHDRAWN" }));
    let prompt = fx.control(Method::POST, &decision, withdrawn).await.body;
    assert_eq!(prompt[0]["status"], 200);
}

/// The statuses of 16 approval requests under a 50 % 503 fault, with `seed`.
async fn strikes(seed: u64) -> Vec<u16> {
    let options = ApprovalSimOptions {
        policy: DecisionPolicy::Manual,
        fault_seed: seed,
        ..ApprovalSimOptions::default()
    };
    let sim = ApprovalSim::start(options).await.unwrap();
    let url = format!("{}/_sim/faults", sim.base_url());
    let fault = json!({ "kind": "status", "status": 503, "times": 100, "probability": 0.5 });
    assert_eq!(call(Method::POST, &url, Some(fault)).await.status, 204);
    let client = crate::client::client();
    let mut statuses = Vec::new();
    for _ in 0..16 {
        let body = request_body(Uuid::new_v4());
        let url = format!("{}/approvals", sim.base_url());
        let reply = client.post(url).json(&body).send().await.unwrap();
        statuses.push(reply.status().as_u16());
    }
    statuses
}

#[tokio::test]
async fn probabilistic_faults_repeat_with_the_seed() {
    let first = strikes(11).await;
    assert_eq!(first, strikes(11).await);
    assert_ne!(first, strikes(12).await);
    assert!(first.contains(&503) && first.contains(&201), "{first:?}");
}
