//! Every approval-simulator fault kind, with counts and operation scoping, plus callback
//! retries.

use std::time::{Duration, Instant};

use changegate_sim::approval::{ApprovalFault, ApprovalFaultKind, Decision, DecisionPolicy};
use serde_json::json;
use uuid::Uuid;

use super::{Fixture, WAIT, request_body};

fn fault(kind: ApprovalFaultKind) -> ApprovalFault {
    ApprovalFault::new(kind)
}

#[tokio::test]
async fn status_faults_answer_without_recording_and_are_counted() {
    let fx = Fixture::manual().await;
    let operation = Uuid::new_v4();
    let other = Uuid::new_v4();
    fx.sim.inject(
        fault(ApprovalFaultKind::Status(503))
            .for_operation(operation)
            .times(2),
    );
    fx.sim
        .inject(fault(ApprovalFaultKind::Status(429)).for_operation(operation));
    // Scoped to `operation`: another operation goes through meanwhile.
    fx.request(other).await;

    let body = request_body(operation);
    for expected in [503, 503] {
        let reply = fx.post(&body).await.unwrap();
        assert_eq!(reply.status, expected);
        assert_eq!(reply.body["code"], "UNAVAILABLE");
        assert!(fx.sim.approval(operation).is_none());
    }
    let limited = fx.post(&body).await.unwrap();
    assert_eq!(limited.status, 429);
    assert_eq!(limited.headers["retry-after"], "1");
    assert!(fx.sim.approval(operation).is_none());
    assert_eq!(fx.post(&body).await.unwrap().status, 201);

    let faults: Vec<_> = fx.sim.requests().iter().map(|r| r.fault).collect();
    assert_eq!(
        faults,
        vec![
            None,
            Some(ApprovalFaultKind::Status(503)),
            Some(ApprovalFaultKind::Status(503)),
            Some(ApprovalFaultKind::Status(429)),
            None,
        ]
    );

    fx.sim
        .inject(fault(ApprovalFaultKind::Status(500)).times(5));
    fx.sim.clear_faults();
    fx.request(Uuid::new_v4()).await;
}

#[tokio::test]
async fn slow_answers_arrive_late_but_the_approval_exists_at_once() {
    let fx = Fixture::manual().await;
    let operation = Uuid::new_v4();
    let delay = Duration::from_millis(400);
    fx.sim.inject(fault(ApprovalFaultKind::Slow(delay)));
    let started = Instant::now();
    let body = request_body(operation);
    let replied = async {
        let reply = fx.post(&body).await;
        (reply, Instant::now())
    };
    let recorded = async {
        while fx.sim.approval(operation).is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Instant::now()
    };
    let ((reply, replied_at), recorded_at) =
        tokio::time::timeout(WAIT, async { tokio::join!(replied, recorded) })
            .await
            .expect("answered and recorded");
    assert_eq!(reply.unwrap().status, 201);
    assert!(recorded_at < replied_at);
    assert!(replied_at - started >= delay);
}

#[tokio::test]
async fn a_lost_response_times_out_the_client_yet_the_approval_is_decided() {
    let fx = Fixture::start(DecisionPolicy::Auto {
        result: Decision::Approved,
        delay: Duration::from_millis(50),
    })
    .await;
    let operation = Uuid::new_v4();
    fx.sim.inject(fault(ApprovalFaultKind::LostResponse));
    let impatient = crate::client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let lost = fx.post_with(&impatient, &request_body(operation)).await;
    assert!(lost.err().is_some_and(|err| err.is_timeout()));
    let approval = fx
        .sim
        .approval(operation)
        .expect("recorded although unanswered");

    let received = fx.receiver.wait_for(1, WAIT).await;
    assert_eq!(received[0].body["result"], "APPROVED");
    // changegate's retry finds the same approval.
    let retried = fx.post(&request_body(operation)).await.unwrap();
    assert_eq!(retried.status, 200);
    assert_eq!(retried.body["approvalId"], approval.approval_id.to_string());
}

#[tokio::test]
async fn the_callback_can_beat_the_201() {
    let fx = Fixture::start(DecisionPolicy::Auto {
        result: Decision::Rejected,
        delay: Duration::from_millis(50),
    })
    .await;
    let operation = Uuid::new_v4();
    fx.sim.inject(fault(ApprovalFaultKind::CallbackBeforeAnswer(
        Decision::Approved,
    )));
    let mut body = request_body(operation);
    body["ext"] = json!({ "mrId": 7 });
    let reply = fx.post(&body).await.unwrap();
    assert_eq!(reply.status, 201);
    // Delivered and answered before the POST was answered: no waiting needed.
    let received = fx.receiver.received();
    assert_eq!(received.len(), 1, "the callback was not first");
    assert_eq!(received[0].body["result"], "APPROVED");
    assert_eq!(received[0].body["ext"], json!({ "mrId": 7 }));
    assert_eq!(received[0].verified, Ok(()));
    // The early callback was the decision: the policy does not decide again.
    fx.receiver
        .assert_stays_at(1, Duration::from_millis(300))
        .await;
}

#[tokio::test]
async fn a_duplicate_callback_repeats_the_callback_id() {
    let fx = Fixture::manual().await;
    let operation = Uuid::new_v4();
    fx.request(operation).await;
    fx.sim.inject(fault(ApprovalFaultKind::DuplicateCallback));
    let attempts = fx.sim.decide(operation, Decision::Approved).await.unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0].callback_id, attempts[1].callback_id);
    assert_eq!(attempts[0].answer, json!({ "code": "OK" }));
    assert_eq!(attempts[1].answer, json!({ "code": "DUPLICATE" }));
    let received = fx.receiver.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].body, received[1].body);
    assert_eq!(
        received[0].header("webhook-id"),
        received[1].header("webhook-id")
    );
    // Used up: the next decision is sent once.
    fx.sim.decide(operation, Decision::Withdrawn).await.unwrap();
    assert_eq!(fx.receiver.received().len(), 3);
}

#[tokio::test]
async fn a_lost_callback_is_recorded_but_never_arrives() {
    let fx = Fixture::manual().await;
    let operation = Uuid::new_v4();
    fx.request(operation).await;
    fx.sim.inject(fault(ApprovalFaultKind::LostCallback));
    let attempts = fx.sim.decide(operation, Decision::Approved).await.unwrap();
    assert!(attempts.is_empty());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(fx.receiver.received().is_empty());
    let approval = fx.sim.approval(operation).unwrap();
    assert_eq!(approval.decisions, [Decision::Approved]);
    // Used up: the next decision arrives.
    fx.sim.decide(operation, Decision::Withdrawn).await.unwrap();
    assert_eq!(fx.receiver.received().len(), 1);
}

#[tokio::test]
async fn a_late_callback_comes_after_the_extra_delay() {
    let fx = Fixture::start(DecisionPolicy::Auto {
        result: Decision::Approved,
        delay: Duration::ZERO,
    })
    .await;
    let late = Duration::from_millis(500);
    let operation = Uuid::new_v4();
    fx.sim
        .inject(fault(ApprovalFaultKind::LateCallback(late)).for_operation(operation));
    let started = Instant::now();
    fx.request(operation).await;
    // An unaffected operation is decided at once, overtaking the late one.
    let prompt = Uuid::new_v4();
    fx.request(prompt).await;
    let received = fx.receiver.wait_for(2, WAIT).await;
    assert_eq!(received[0].body["operationId"], prompt.to_string());
    assert_eq!(received[1].body["operationId"], operation.to_string());
    assert!(received[1].at - started >= late);
}

#[tokio::test]
async fn out_of_order_sends_the_stale_decision_first() {
    let fx = Fixture::manual().await;
    let operation = Uuid::new_v4();
    fx.request(operation).await;
    fx.sim.inject(fault(ApprovalFaultKind::OutOfOrder {
        first: Decision::Withdrawn,
    }));
    fx.sim.decide(operation, Decision::Approved).await.unwrap();
    let received = fx.receiver.received();
    let results: Vec<_> = received.iter().map(|r| r.body["result"].clone()).collect();
    assert_eq!(results, vec![json!("WITHDRAWN"), json!("APPROVED")]);
    assert_ne!(
        received[0].body["callbackId"],
        received[1].body["callbackId"]
    );
    assert!(received.iter().all(|r| r.verified.is_ok()));
    assert_eq!(
        fx.sim.approval(operation).unwrap().decisions,
        vec![Decision::Withdrawn, Decision::Approved]
    );
}

#[tokio::test]
async fn a_bad_signature_is_refused_and_not_retried() {
    let fx = Fixture::manual().await;
    let operation = Uuid::new_v4();
    fx.request(operation).await;
    fx.sim.inject(fault(ApprovalFaultKind::BadSignature));
    let attempts = fx.sim.decide(operation, Decision::Approved).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].status, Some(401));
    assert!(attempts[0].bad_signature);
    let received = fx.receiver.received();
    assert_eq!(received[0].verified, Err("signature invalid".to_owned()));
    // The next decision is signed properly again.
    fx.sim.decide(operation, Decision::Approved).await.unwrap();
    assert_eq!(fx.receiver.received()[1].verified, Ok(()));
}

#[tokio::test]
async fn transient_callback_failures_are_retried_with_the_same_id() {
    let fx = Fixture::manual().await;
    let operation = Uuid::new_v4();
    fx.request(operation).await;
    fx.receiver.fail_next(503);
    fx.receiver.fail_next(429);
    let attempts = fx.sim.decide(operation, Decision::Approved).await.unwrap();
    let statuses: Vec<_> = attempts.iter().map(|a| (a.attempt, a.status)).collect();
    assert_eq!(
        statuses,
        vec![(1, Some(503)), (2, Some(429)), (3, Some(200))]
    );
    assert!(
        attempts
            .iter()
            .all(|a| a.callback_id == attempts[0].callback_id)
    );
    assert_eq!(fx.sim.callbacks(), attempts);
    let ids: Vec<_> = fx
        .receiver
        .received()
        .iter()
        .map(|r| r.header("webhook-id").to_owned())
        .collect();
    assert_eq!(ids, vec![attempts[0].callback_id.to_string(); 3]);
    assert_eq!(fx.sim.wait_for_callbacks(3, WAIT).await.len(), 3);
}
