//! The approval-system simulator over real HTTP: requests in, signed callbacks out to a
//! receiver that verifies them with the official `standardwebhooks` crate. Policies are here; every fault kind
//! is in `approval/faults.rs`.

mod control;
mod faults;

use std::time::{Duration, Instant};

use super::receiver::Receiver;
use changegate_sim::approval::{
    ApprovalSim, ApprovalSimError, ApprovalSimHandle, ApprovalSimOptions, Decision, DecisionPolicy,
};
use changegate_sim::callback::generate_secret;
use serde_json::{Value, json};
use uuid::Uuid;

/// Long enough for any callback in these tests to arrive.
pub(crate) const WAIT: Duration = Duration::from_secs(5);

/// A simulator wired to a receiver that shares its secret.
pub(crate) struct Fixture {
    /// The simulator under test.
    pub(crate) sim: ApprovalSimHandle,
    /// Where its callbacks go.
    pub(crate) receiver: Receiver,
    /// The client playing changegate.
    pub(crate) client: reqwest::Client,
}

/// An answer to `POST /approvals`.
pub(crate) struct Reply {
    /// The status code.
    pub(crate) status: u16,
    /// The response headers.
    pub(crate) headers: reqwest::header::HeaderMap,
    /// The JSON body, `Null` when there is none.
    pub(crate) body: Value,
}

impl Fixture {
    /// A simulator deciding by `policy`, its callbacks going to a fresh receiver.
    pub(crate) async fn start(policy: DecisionPolicy) -> Self {
        let secret = generate_secret();
        let receiver = Receiver::start(&secret).await;
        let options = ApprovalSimOptions {
            callback_url: Some(receiver.url("approval")),
            secret,
            policy,
            ..ApprovalSimOptions::default()
        };
        let sim = ApprovalSim::start(options).await.expect("simulator starts");
        let client = crate::client::builder()
            .timeout(WAIT)
            .build()
            .expect("client builds");
        Self {
            sim,
            receiver,
            client,
        }
    }

    /// A simulator that decides only when told to.
    pub(crate) async fn manual() -> Self {
        Self::start(DecisionPolicy::Manual).await
    }

    /// Sends `body` as changegate would.
    pub(crate) async fn post(&self, body: &Value) -> reqwest::Result<Reply> {
        self.post_with(&self.client, body).await
    }

    /// Sends `body` with a chosen client (e.g. an impatient one), surfacing transport
    /// errors.
    pub(crate) async fn post_with(
        &self,
        client: &reqwest::Client,
        body: &Value,
    ) -> reqwest::Result<Reply> {
        let url = format!("{}/approvals", self.sim.base_url());
        let response = client.post(url).json(body).send().await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.json().await.unwrap_or(Value::Null);
        Ok(Reply {
            status,
            headers,
            body,
        })
    }

    /// Requests approval of a new operation; asserts the 201.
    pub(crate) async fn request(&self, operation: Uuid) -> Value {
        let reply = self.post(&request_body(operation)).await.expect("answered");
        assert_eq!(reply.status, 201, "{}", reply.body);
        reply.body
    }
}

/// A complete request body for `operation`.
pub(crate) fn request_body(operation: Uuid) -> Value {
    json!({
        "operationId": operation.to_string(),
        "subjectId": "app-42",
        "targetKey": "demo.feature-flags",
        "requestedBy": "alice",
        "reason": "enable the new checkout",
        "params": { "flag": "checkout-v2", "enabled": true },
    })
}

#[tokio::test]
async fn auto_policy_approves_after_the_delay_with_a_verified_callback() {
    let delay = Duration::from_millis(200);
    let fx = Fixture::start(DecisionPolicy::Auto {
        result: Decision::Approved,
        delay,
    })
    .await;
    let operation = Uuid::new_v4();
    let mut body = request_body(operation);
    body["ext"] = json!({ "mrId": 12 });
    let started = Instant::now();
    let reply = fx.post(&body).await.unwrap();
    assert_eq!(reply.status, 201);
    assert_eq!(reply.body["operationId"], operation.to_string());
    let approval_id = reply.body["approvalId"].as_str().unwrap().to_owned();

    let received = fx.receiver.wait_for(1, WAIT).await;
    let callback = &received[0];
    assert!(callback.at - started >= delay);
    assert_eq!(callback.verified, Ok(()));
    assert_eq!(callback.status, 200);
    assert_eq!(callback.body["operationId"], operation.to_string());
    assert_eq!(callback.body["result"], "APPROVED");
    assert_eq!(callback.body["ext"], json!({ "mrId": 12 }));
    let callback_id = callback.body["callbackId"].as_str().unwrap();
    assert!(Uuid::parse_str(callback_id).is_ok());
    assert_eq!(callback.header("webhook-id"), callback_id);
    assert_eq!(callback.header("content-type"), "application/json");

    // The receiver records a callback before the simulator has read its answer.
    let sent = fx.sim.wait_for_callbacks(1, WAIT).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].status, Some(200));
    assert_eq!(sent[0].answer, json!({ "code": "OK" }));
    assert_eq!(sent[0].body, callback.body);
    let approval = fx.sim.approval(operation).unwrap();
    assert_eq!(approval.approval_id.to_string(), approval_id);
    assert_eq!(approval.target_key, "demo.feature-flags");
    assert_eq!(approval.params["flag"], "checkout-v2");
    assert_eq!(approval.decisions, vec![Decision::Approved]);
    fx.receiver
        .assert_stays_at(1, Duration::from_millis(300))
        .await;
}

#[tokio::test]
async fn auto_policy_can_reject_and_changes_apply_to_new_approvals() {
    let fx = Fixture::start(DecisionPolicy::Auto {
        result: Decision::Rejected,
        delay: Duration::ZERO,
    })
    .await;
    let first = Uuid::new_v4();
    fx.request(first).await;
    let received = fx.receiver.wait_for(1, WAIT).await;
    assert_eq!(received[0].body["result"], "REJECTED");
    // No ext in the request: none in the callback.
    assert!(received[0].body.get("ext").is_none());

    fx.sim.set_policy(DecisionPolicy::Manual);
    fx.request(Uuid::new_v4()).await;
    fx.receiver
        .assert_stays_at(1, Duration::from_millis(300))
        .await;
}

#[tokio::test]
async fn manual_policy_holds_until_decided() {
    let fx = Fixture::manual().await;
    let operation = Uuid::new_v4();
    fx.request(operation).await;
    fx.receiver
        .assert_stays_at(0, Duration::from_millis(300))
        .await;
    assert!(fx.sim.approval(operation).unwrap().decisions.is_empty());

    let attempts = fx.sim.decide(operation, Decision::Rejected).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].status, Some(200));
    let received = fx.receiver.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].body["result"], "REJECTED");
    assert_eq!(received[0].verified, Ok(()));

    // A later withdrawal is a second decision with its own callback id.
    fx.sim.decide(operation, Decision::Withdrawn).await.unwrap();
    let received = fx.receiver.received();
    assert_eq!(received[1].body["result"], "WITHDRAWN");
    assert_ne!(
        received[0].body["callbackId"],
        received[1].body["callbackId"]
    );

    let unknown = Uuid::new_v4();
    assert_eq!(
        fx.sim.decide(unknown, Decision::Approved).await,
        Err(ApprovalSimError::UnknownOperation(unknown))
    );
}

#[tokio::test]
async fn a_repeated_request_returns_the_existing_approval() {
    let fx = Fixture::start(DecisionPolicy::default()).await;
    let operation = Uuid::new_v4();
    let first = fx.request(operation).await;
    let again = fx.post(&request_body(operation)).await.unwrap();
    assert_eq!(again.status, 200);
    assert_eq!(again.body, first);
    fx.receiver.wait_for(1, WAIT).await;
    // Decided once, however often it was requested.
    fx.receiver
        .assert_stays_at(1, Duration::from_millis(300))
        .await;
    let statuses: Vec<u16> = fx.sim.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![201, 200]);
    assert_eq!(fx.sim.requests()[0].body, request_body(operation));
}

#[tokio::test]
async fn invalid_requests_are_refused_and_recorded() {
    let fx = Fixture::manual().await;
    let mut missing = request_body(Uuid::new_v4());
    missing.as_object_mut().unwrap().remove("requestedBy");
    let mut not_uuid = request_body(Uuid::new_v4());
    not_uuid["operationId"] = json!("op-1");
    for body in [missing, not_uuid, json!("text")] {
        let reply = fx.post(&body).await.unwrap();
        assert_eq!(reply.status, 400, "{body}");
        assert_eq!(reply.body["code"], "INVALID_ARGUMENT");
    }
    assert_eq!(fx.sim.requests().len(), 3);
}

#[tokio::test]
async fn an_api_token_is_required_when_configured() {
    let options = ApprovalSimOptions {
        api_token: Some("s3cret".to_owned()),
        policy: DecisionPolicy::Manual,
        ..ApprovalSimOptions::default()
    };
    let sim = ApprovalSim::start(options).await.unwrap();
    let client = crate::client::client();
    let url = format!("{}/approvals", sim.base_url());
    let body = request_body(Uuid::new_v4());
    let anonymous = client.post(&url).json(&body).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let wrong = client.post(&url).bearer_auth("nope").json(&body);
    assert_eq!(wrong.send().await.unwrap().status(), 401);
    let right = client.post(&url).bearer_auth("s3cret").json(&body);
    assert_eq!(right.send().await.unwrap().status(), 201);
}

#[tokio::test]
async fn the_callback_url_can_be_set_after_start() {
    let secret = generate_secret();
    let receiver = Receiver::start(&secret).await;
    let options = ApprovalSimOptions {
        secret,
        policy: DecisionPolicy::Manual,
        ..ApprovalSimOptions::default()
    };
    let sim = ApprovalSim::start(options).await.unwrap();
    assert_eq!(sim.secret().len(), "whsec_".len() + 44);
    let client = crate::client::client();
    let operation = Uuid::new_v4();
    let url = format!("{}/approvals", sim.base_url());
    let created = client.post(&url).json(&request_body(operation)).send();
    assert_eq!(created.await.unwrap().status(), 201);

    // Without a URL the attempt is recorded as unanswered rather than silently dropped.
    let unsent = sim.decide(operation, Decision::Approved).await.unwrap();
    assert_eq!(unsent.len(), 1);
    assert_eq!(unsent[0].status, None);
    assert!(unsent[0].error.is_some());

    sim.set_callback_url(receiver.url("approval"));
    sim.decide(operation, Decision::Approved).await.unwrap();
    let received = receiver.wait_for(1, WAIT).await;
    assert_eq!(received[0].verified, Ok(()));
}
