//! Database outages under load: 200 requests go through the whole flow while
//! the database goes away for 30 s mid-run (a MariaDB server killed with
//! SIGKILL, the SQLite file's directory read-only) and comes back. changegate
//! must stay up, say it is not ready while the database is gone and ready
//! again after without a restart, answer the callbacks it cannot record with
//! a 5xx (so their senders retry) and apply them once they come again, bring
//! every request to VALIDATED with no external effect twice, and keep no
//! broken connection in its pools.
//!
//! They need root, a MariaDB server binary and FUSE, and take about a minute
//! each, so they run only with [`OUTAGE_VAR`] set (CI sets it).

mod mariadb;
mod read_only_dir;
mod sqlite;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use changegate_sim::approval::{ApprovalControl, Decision, DecisionPolicy};
use changegate_sim::callback::{CallbackDelivery, DeliverySettings};
use changegate_sim::deploy::{DeployFault, DeployFaultKind};
use futures_util::future::join_all;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::task::JoinSet;
use uuid::Uuid;

use crate::helpers::TestApp;
use crate::workflow::end_to_end::{World, WorldOptions, world_with};
use crate::workflow::soak::{assert_each_effect_once, settled};

/// Set to `1` to run the outage tests; when set, anything they need that is
/// missing fails them instead of skipping them.
pub const OUTAGE_VAR: &str = "CHANGEGATE_TEST_DB_OUTAGE";

const REQUESTS: usize = 200;
/// Submitted and approved before the outage: their batches are in flight when
/// it starts.
const APPROVED_BEFORE: usize = 80;
/// Submitted before the outage; their approvals are decided while it lasts.
const DECIDED_DURING: usize = 40;
const OUTAGE: Duration = Duration::from_secs(30);
/// How long after the outage's start `/readyz` may still answer 200 (a check
/// that began just before it).
const READINESS_NOTICE: Duration = Duration::from_secs(5);

/// Whether the outage tests run; says so when they do not.
pub fn enabled(test: &str) -> bool {
    let on = std::env::var(OUTAGE_VAR).is_ok_and(|value| value == "1");
    if !on {
        eprintln!("skipped {test}: set {OUTAGE_VAR}=1 to run it (needs root, mariadbd and FUSE)");
    }
    on
}

/// Fails the test with `missing` when `present` is false: with [`OUTAGE_VAR`]
/// set, a missing prerequisite is an error, not a reason to skip.
pub fn require(present: bool, missing: &str) {
    assert!(present, "{OUTAGE_VAR} is set but {missing}");
}

/// A way to take the database away and give it back.
pub(crate) trait Outage {
    /// From now on the database refuses work.
    async fn begin(&mut self);
    /// The database works again.
    async fn end(&mut self);
}

/// Applications of `member{n}` for itself, as its own requester (the apply
/// rate limit is per person).
#[derive(Clone)]
struct Requester {
    address: String,
    client: reqwest::Client,
}

/// What became of one application.
struct Submitted {
    operation_id: String,
    /// Tries answered with a 5xx before one was accepted.
    refused: usize,
}

impl Requester {
    fn of(app: &TestApp) -> Self {
        Self {
            address: app.address.clone(),
            client: app.client.clone(),
        }
    }

    /// Sends `member{n}`'s application until it is accepted. Every try
    /// carries the same idempotency key, so a try answered 5xx that was
    /// recorded after all is answered with its id, not taken twice.
    async fn submit(&self, n: usize) -> Submitted {
        let subject = format!("member{n}");
        let body = json!({ "targetKey": "team.access", "subjectId": subject,
                           "params": { "level": "read" }, "reason": "outage" });
        let deadline = Instant::now() + OUTAGE * 3;
        let mut refused = 0;
        loop {
            let response = self
                .client
                .post(format!("{}/api/v1/applications", self.address))
                .header("x-auth-request-user", &subject)
                .header("idempotency-key", format!("outage-{subject}"))
                .json(&body)
                .send()
                .await
                .unwrap_or_else(|err| panic!("{subject}'s application got no answer: {err}"));
            let status = response.status();
            let answer: Value = response.json().await.unwrap_or(Value::Null);
            if let Some(id) = answer["operationId"].as_str() {
                return Submitted {
                    operation_id: id.to_owned(),
                    refused,
                };
            }
            if status.is_server_error() {
                refused += 1;
            } else {
                assert!(
                    answer["code"] == "RETRY_LATER" || status == StatusCode::TOO_MANY_REQUESTS,
                    "{subject}: {status} {answer}"
                );
            }
            assert!(Instant::now() < deadline, "{subject} was never accepted");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Batches of ten; callbacks retried with a linearly growing pause for well
/// over the outage, as the real senders do.
fn outage_world() -> WorldOptions {
    WorldOptions {
        gitlab_keys: "timeout = \"5s\"".to_owned(),
        batch_keys: "interval = \"300ms\"\nmax_requests = 10".to_owned(),
        policy: DecisionPolicy::Manual,
        delivery: DeliverySettings {
            timeout: Duration::from_secs(5),
            retries: 40,
            retry_backoff: Duration::from_millis(100),
        },
        ..WorldOptions::default()
    }
}

/// `/healthz` and `/readyz` as answered at one moment of the outage.
struct Probe {
    at: Duration,
    health: StatusCode,
    ready: StatusCode,
}

async fn probe(app: &TestApp, since: Instant) -> Probe {
    Probe {
        at: since.elapsed(),
        health: app.get("/healthz").await.status(),
        ready: app.get("/readyz").await.status(),
    }
}

/// The approval sim's decision for `operation_id`, sent when `after` has passed;
/// the attempts its delivery took.
async fn approve_later(
    approver: ApprovalControl,
    operation_id: String,
    after: Duration,
) -> (String, Vec<CallbackDelivery>) {
    tokio::time::sleep(after).await;
    let operation = Uuid::parse_str(&operation_id).unwrap();
    let attempts = approver
        .decide(operation, Decision::Approved)
        .await
        .unwrap();
    (operation_id, attempts)
}

async fn wait_until(what: &str, timeout: Duration, done: impl Fn() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The scenario, on the database at `db_url` that `outage` takes away.
pub(crate) async fn two_hundred_requests_through(
    db_url: &str,
    backend: &str,
    outage: &mut impl Outage,
) {
    let started = Instant::now();
    let w = world_with(db_url, outage_world()).await;
    // Deploy callbacks come 2 s after their merge: the first merge's, when
    // the database is gone.
    w.deploy
        .inject(DeployFault::new(DeployFaultKind::Delay(Duration::from_secs(2))).times(u32::MAX));
    let requester = Requester::of(&w.app);
    let approver: ApprovalControl = (*w.approval).clone();

    let mut ids = Vec::with_capacity(REQUESTS);
    for n in 0..APPROVED_BEFORE + DECIDED_DURING {
        ids.push(requester.submit(n).await.operation_id);
    }
    wait_until(
        "every approval was requested",
        Duration::from_secs(30),
        || w.approval.approvals().len() == ids.len(),
    )
    .await;
    let mut approved = JoinSet::new();
    for id in &ids[..APPROVED_BEFORE] {
        approved.spawn(approve_later(approver.clone(), id.clone(), Duration::ZERO));
    }
    wait_until("a batch merged", Duration::from_secs(60), || {
        !w.deploy.merges().is_empty()
    })
    .await;

    outage.begin().await;
    let outage_started = Instant::now();
    let merged_before: usize = w
        .deploy
        .merges()
        .iter()
        .map(|merge| merge.operation_ids.len())
        .sum();
    assert!(
        merged_before < APPROVED_BEFORE,
        "{backend}: the outage came with batches in flight"
    );
    w.approval.set_policy(DecisionPolicy::Auto {
        result: Decision::Approved,
        delay: Duration::ZERO,
    });
    let mut decided_during = JoinSet::new();
    for (k, id) in ids[APPROVED_BEFORE..].iter().enumerate() {
        let after = Duration::from_millis(250) * u32::try_from(k).unwrap();
        decided_during.spawn(approve_later(approver.clone(), id.clone(), after));
    }
    let late = {
        let requester = requester.clone();
        tokio::spawn(async move {
            let mut submitted = Vec::new();
            for n in APPROVED_BEFORE + DECIDED_DURING..REQUESTS {
                submitted.push(requester.submit(n).await);
            }
            submitted
        })
    };
    let mut probes = Vec::new();
    while outage_started.elapsed() < OUTAGE {
        probes.push(probe(&w.app, outage_started).await);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    outage.end().await;
    let recovery_started = Instant::now();
    w.app.wait_until_ready().await;
    let recovered_in = recovery_started.elapsed();

    for probe in &probes {
        assert_eq!(probe.health, 200, "{backend}: /healthz at {:?}", probe.at);
        if probe.at >= READINESS_NOTICE {
            assert_eq!(probe.ready, 503, "{backend}: /readyz at {:?}", probe.at);
        }
    }
    assert!(
        probes.iter().any(|probe| probe.ready == 503),
        "{backend}: never not ready"
    );

    let late = late.await.unwrap();
    assert!(
        late[0].refused > 0,
        "{backend}: the application sent during the outage was answered 5xx"
    );
    ids.extend(late.into_iter().map(|submitted| submitted.operation_id));
    let views = settled(&w, &ids, backend).await;
    for view in &views {
        assert_eq!(view["status"], "VALIDATED", "{backend}: {view}");
    }
    approved.join_all().await;
    let decided_during = decided_during.join_all().await;

    assert_callbacks_retried_and_taken(&w, &decided_during, backend);
    let batches = assert_each_effect_once(&w, &ids, backend).await;
    let approvals = w.approval.approvals();
    assert_eq!(approvals.len(), REQUESTS, "{backend}: one approval each");
    for approval in &approvals {
        assert_eq!(
            approval.decisions,
            [Decision::Approved],
            "{backend}: {approval:?}"
        );
    }
    assert_pools_healthy(&w.app, &ids, backend).await;
    eprintln!(
        "{backend}: {} batches, {} approval requests for {REQUESTS} approvals, ready again {recovered_in:?} after the outage, in {:?}",
        batches.len(),
        w.approval.requests().len(),
        started.elapsed()
    );
    let World { app, .. } = w;
    app.stop().await.expect("changegate stops gracefully");
}

/// Every approval decided during the outage, and the deploy callbacks that
/// came then, were answered 5xx and retried until changegate took them; every
/// other callback was taken at once. An approval is taken with `OK` (nothing
/// had recorded it before). A deploy callback may also be taken with
/// `IGNORED_STALE`: when it comes before changegate has recorded the merge
/// (the outage struck between the two), its report is kept and its members are
/// validated once the merge is recorded, which `VALIDATED` for every request
/// shows.
fn assert_callbacks_retried_and_taken(
    w: &World,
    decided_during: &[(String, Vec<CallbackDelivery>)],
    backend: &str,
) {
    for (operation_id, attempts) in decided_during {
        let what = format!("{backend}: approval of {operation_id}");
        assert!(
            attempts.len() > 1,
            "{what}: came during the outage: {attempts:?}"
        );
        assert_taken_after_5xx(attempts, &["OK"], &what);
    }
    let mut sends: BTreeMap<Uuid, Vec<CallbackDelivery>> = BTreeMap::new();
    for attempt in w.deploy.callbacks() {
        sends.entry(attempt.callback_id).or_default().push(attempt);
    }
    for (callback_id, attempts) in &sends {
        let what = format!("{backend}: deploy callback {callback_id}");
        assert_taken_after_5xx(attempts, &["OK", "IGNORED_STALE"], &what);
    }
    assert!(
        sends.values().any(|attempts| attempts.len() > 1),
        "{backend}: a deploy callback came during the outage: {sends:?}"
    );
}

/// The last of `attempts` was answered 200 with one of the `taken` codes, and
/// every one before it 5xx (changegate was up, so none went unanswered).
fn assert_taken_after_5xx(attempts: &[CallbackDelivery], taken: &[&str], what: &str) {
    let (last, earlier) = attempts.split_last().expect("at least one attempt");
    for attempt in earlier {
        assert!(
            attempt.status.is_some_and(|status| status >= 500),
            "{what}: answered 5xx during the outage: {attempt:?}"
        );
    }
    assert_eq!(
        last.status,
        Some(200),
        "{what}: taken after the outage: {last:?}"
    );
    assert!(
        last.answer["code"]
            .as_str()
            .is_some_and(|code| taken.contains(&code)),
        "{what}: taken after the outage: {last:?}"
    );
}

/// Many calls after the outage, one after the other and all at once, each
/// answered: no connection the outage broke is still handed out.
async fn assert_pools_healthy(app: &TestApp, ids: &[String], backend: &str) {
    for id in ids {
        let status = app
            .get_as("admin", &format!("/api/v1/operations/{id}"))
            .await
            .status();
        assert_eq!(status, 200, "{backend}: sequential read of {id}");
        assert_eq!(app.get("/readyz").await.status(), 200, "{backend}: /readyz");
    }
    for round in 0..4 {
        let answers = join_all(ids.iter().map(|id| async move {
            app.get_as("admin", &format!("/api/v1/operations/{id}"))
                .await
                .status()
        }))
        .await;
        assert!(
            answers.iter().all(|status| *status == 200),
            "{backend}: concurrent round {round}: {answers:?}"
        );
    }
}
