//! The merge queue's database guarantees under real concurrency: one active
//! batch at every instant (I1), every request claimed exactly once (I2), no
//! empty batch, enqueue never blocked by an open claim (I3), idempotent
//! enqueue (I4), and a batch settled once however many settle it.

use crate::helpers::{one_at_a_time, system_client};
use changegate::clients::health::System;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use changegate::batch::{Claimed, MergeQueue, Settled, claim_batch, claim_in, queue_estimate};
use changegate::clients::approval::ApprovalClient;
use changegate::clients::gitlab::{GitLabClient, RetryPolicy};
use changegate::config::LiveConfig;
use changegate::db::batch_queue::enqueue;
use changegate::db::batches::{acquire_batch_lease, get_batch, release_batch_lease};
use changegate::db::{Db, DbSlot};
use changegate::store::StoreTx;
use changegate::workflow::Workflow;

use crate::helpers::{each_backend, mysql_db, settings_from};

async fn scalar(db: &Db, sql: &'static str) -> i64 {
    changegate::with_pool!(db, reader, |pool| {
        sqlx::query_scalar(sql).fetch_one(pool).await
    })
    .unwrap()
}

/// `count` waiting requests (ids only: the claim does not need more).
async fn enqueue_many(db: &Db, count: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(count);
    for chunk in (0..count).collect::<Vec<_>>().chunks(100) {
        let mut tx = db.begin().await.unwrap();
        for _ in chunk {
            let id = uuid::Uuid::new_v4().to_string();
            assert!(
                enqueue(&mut tx, &id, "", "config/repo", None)
                    .await
                    .unwrap()
            );
            ids.push(id);
        }
        tx.commit().await.unwrap();
    }
    // The claim takes rows created before the database's now (ms precision).
    tokio::time::sleep(Duration::from_millis(5)).await;
    ids
}

/// Approved requests of `subjects` waiting for a merge round, each with its
/// operation and binding (MR_CREATING, QUEUED), as the workflow leaves them.
async fn queued_requests(db: &Db, subjects: std::ops::Range<usize>) -> Vec<String> {
    queued_requests_of(db, "config/repo", subjects).await
}

/// [`queued_requests`] of a project's target.
async fn queued_requests_of(
    db: &Db,
    project: &str,
    subjects: std::ops::Range<usize>,
) -> Vec<String> {
    use changegate::config::resolve::FlowOrder;
    use changegate::domain::{BindingStatus, OperationId, OperationKind, StepStatus};
    use changegate::store::{Change, Controls, NewRequest};

    let mut ids = Vec::new();
    for n in subjects {
        let request = NewRequest {
            operation_id: OperationId::new(),
            kind: OperationKind::Apply,
            subject_id: format!("s{n}"),
            target_key: "t".to_owned(),
            requested_by: format!("s{n}"),
            flow_order: FlowOrder::ApprovalFirst,
            params: serde_json::json!({}),
            reason: "race".to_owned(),
            expires_at: None,
            idempotency: None,
            busy: false,
            expired: false,
            trace_parent: None,
            controls: Controls::default(),
        };
        changegate::store::submit(db, &request).await.unwrap();
        let id = request.operation_id.as_string();
        let queued = Change {
            step: StepStatus::Queued,
            message: None,
            actor: "test",
        };
        changegate::store::transition(db, &id, 1, Some(BindingStatus::MrCreating), queued)
            .await
            .unwrap();
        let mut tx = db.begin().await.unwrap();
        enqueue(&mut tx, &id, "", project, None).await.unwrap();
        tx.commit().await.unwrap();
        ids.push(id);
    }
    // The claim takes rows created before the database's now (ms precision).
    tokio::time::sleep(Duration::from_millis(5)).await;
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_racing_claimers_keep_one_active_batch_and_claim_every_request_once() {
    for test_db in each_backend().await {
        let db = test_db.db.clone();
        let requests = enqueue_many(&db, 500).await;
        let done = Arc::new(AtomicBool::new(false));

        // Samples the table: never two active batches.
        let sampler = {
            let (db, done) = (db.clone(), done.clone());
            tokio::spawn(async move {
                let mut worst = 0;
                while !done.load(Ordering::Relaxed) {
                    worst = worst.max(
                        scalar(&db, "SELECT COUNT(*) FROM merge_batch WHERE status IN ('RUNNING', 'BLOCKED')").await,
                    );
                    tokio::task::yield_now().await;
                }
                worst
            })
        };
        // Finishes whichever batch is active, so the slot comes free again.
        let finisher = {
            let (db, done) = (db.clone(), done.clone());
            tokio::spawn(async move {
                while !done.load(Ordering::Relaxed) {
                    // A range UPDATE racing the claims: InnoDB may pick it as
                    // a deadlock victim, which rolls it back whole; the next
                    // pass finishes the batch then.
                    let finished = changegate::with_pool!(&db, writer, |pool| {
                        sqlx::query(
                            "UPDATE merge_batch SET status = 'SUCCEEDED' WHERE status = 'RUNNING'",
                        )
                        .execute(pool)
                        .await
                        .map(|_| ())
                    });
                    if let Err(err) = finished {
                        assert!(
                            changegate::db::is_retryable_conflict(&err),
                            "finishing the active batch: {err}"
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            })
        };
        let mut claimers = tokio::task::JoinSet::new();
        for _ in 0..20 {
            let db = db.clone();
            claimers.spawn(async move { claim_until_empty(&db, "").await });
        }
        let outcomes: Vec<Claimed> = claimers.join_all().await.into_iter().flatten().collect();
        done.store(true, Ordering::Relaxed);
        finisher.await.unwrap();
        let worst = sampler.await.unwrap();
        assert!(
            worst <= 1,
            "{}: {worst} active batches at once",
            test_db.name
        );

        let mut claimed: Vec<String> = outcomes
            .iter()
            .filter_map(|o| match o {
                Claimed::Batch { members, .. } => Some(members.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        claimed.sort();
        let mut expected = requests.clone();
        expected.sort();
        assert_eq!(
            claimed, expected,
            "{}: every request claimed exactly once",
            test_db.name
        );
        assert!(
            outcomes.contains(&Claimed::SlotOccupied),
            "{}: the claimers did race for the slot",
            test_db.name
        );
        assert_eq!(
            scalar(
                &db,
                "SELECT COUNT(*) FROM merge_batch_request WHERE batch_id IS NULL"
            )
            .await,
            0
        );
        assert_eq!(
            scalar(
                &db,
                "SELECT COUNT(*) FROM merge_batch b WHERE NOT EXISTS \
                 (SELECT 1 FROM merge_batch_request r WHERE r.batch_id = b.id)"
            )
            .await,
            0,
            "{}: no empty batch was committed",
            test_db.name
        );
        assert_eq!(
            scalar(
                &db,
                "SELECT COUNT(*) FROM merge_batch_history WHERE event = 'CLAIMED'"
            )
            .await,
            500,
            "{}: one membership record per claim",
            test_db.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn enqueues_complete_while_a_claim_transaction_is_held_open() {
    // The locking question is InnoDB's; SQLite has one writer by design.
    let Some(test_db) = mysql_db().await else {
        return;
    };
    let db = test_db.db.clone();
    enqueue_many(&db, 50).await;
    let mut claim = StoreTx::begin(&db).await.unwrap();
    let claimed = claim_in(&mut claim, "", one_at_a_time(500), &|_| true)
        .await
        .unwrap();
    assert!(matches!(claimed, Claimed::Batch { ref members, .. } if members.len() == 50));

    let started = Instant::now();
    let mut enqueuers = tokio::task::JoinSet::new();
    for _ in 0..10 {
        let db = db.clone();
        enqueuers.spawn(async move {
            tokio::time::timeout(Duration::from_secs(10), enqueue_many(&db, 100))
                .await
                .expect("an enqueue waited on the open claim")
        });
    }
    let enqueued: usize = enqueuers.join_all().await.iter().map(Vec::len).sum();
    assert_eq!(enqueued, 1000);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    claim.commit().await.unwrap();
    assert_eq!(
        scalar(
            &db,
            "SELECT COUNT(*) FROM merge_batch_request WHERE batch_id IS NULL"
        )
        .await,
        1000,
        "the new requests wait for the next round"
    );
}

#[tokio::test]
async fn enqueue_is_idempotent_and_an_empty_round_holds_no_slot() {
    for test_db in each_backend().await {
        let db = &test_db.db;
        assert_eq!(
            claim_batch(db, "", one_at_a_time(10), &|_| true)
                .await
                .unwrap(),
            Claimed::Empty
        );
        assert_eq!(
            scalar(db, "SELECT COUNT(*) FROM merge_batch").await,
            0,
            "{}",
            test_db.name
        );
        let mut tx = db.begin().await.unwrap();
        assert!(enqueue(&mut tx, "op-1", "", "p", None).await.unwrap());
        assert!(
            !enqueue(&mut tx, "op-1", "", "p", None).await.unwrap(),
            "already queued"
        );
        tx.commit().await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let first = claim_batch(db, "", one_at_a_time(10), &|_| true)
            .await
            .unwrap();
        assert!(matches!(first, Claimed::Batch { ref members, .. } if members == &["op-1"]));
        let mut tx = db.begin().await.unwrap();
        assert!(enqueue(&mut tx, "op-2", "", "p", None).await.unwrap());
        tx.commit().await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(
            claim_batch(db, "", one_at_a_time(10), &|_| true)
                .await
                .unwrap(),
            Claimed::SlotOccupied,
            "{}: one active batch",
            test_db.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_several_racing_settlers_exactly_one_settles_a_batch() {
    for test_db in each_backend().await {
        let db = test_db.db.clone();
        queued_requests(&db, 0..5).await;
        let Claimed::Batch { id, .. } = claim_batch(&db, "", one_at_a_time(10), &|_| true)
            .await
            .unwrap()
        else {
            panic!("a batch");
        };
        let (settings, _) = settings_from("");
        let config = LiveConfig::new(settings, None, None);
        let slot = DbSlot::ready(db.clone());
        let gitlab = GitLabClient::new(
            system_client(System::GitLab),
            "http://127.0.0.1:9",
            Duration::from_secs(1),
            RetryPolicy::default(),
        );
        let workflow = Workflow::new(
            slot.clone(),
            config.clone(),
            ApprovalClient::new(system_client(System::Approval)),
            gitlab,
        );
        let queue = MergeQueue::new(slot, config, workflow);
        // A round of the batch in progress (another instance holds its
        // lease): the sweep or an operator waits, then says so.
        assert!(
            acquire_batch_lease(&db, id, "a-runner", Duration::from_secs(60))
                .await
                .unwrap()
        );
        assert_eq!(queue.settle(id, "too early").await.unwrap(), Settled::Busy);
        release_batch_lease(&db, id, "a-runner").await.unwrap();

        let mut settlers = tokio::task::JoinSet::new();
        for n in 0..8 {
            let queue = queue.clone();
            settlers.spawn(async move {
                queue.settle(id, &format!("settler {n}")).await.unwrap() == Settled::Released
            });
        }
        let settled = settlers.join_all().await.into_iter().filter(|s| *s).count();
        assert_eq!(settled, 1, "{}", test_db.name);
        assert_eq!(
            scalar(
                &db,
                "SELECT COUNT(*) FROM merge_batch_history WHERE event = 'RELEASED'"
            )
            .await,
            5,
            "{}: the members were released once",
            test_db.name
        );
        assert_eq!(
            scalar(
                &db,
                "SELECT COUNT(*) FROM merge_batch_request WHERE batch_id IS NULL"
            )
            .await,
            5,
            "{}: and wait for the next round",
            test_db.name
        );
    }
}

/// A merge queue whose rounds the test runs, on `db` with `more_settings`,
/// against a GitLab simulator whose project `config/repo` has the bot and
/// both reviewers and whose pipelines run until the test ends them.
struct DrivenQueue {
    gitlab: changegate_sim::gitlab::GitLabSimHandle,
    project: changegate_sim::gitlab::ProjectId,
    /// The bot and the two reviewers.
    users: Vec<changegate_sim::gitlab::UserId>,
    client: GitLabClient,
    queue: MergeQueue,
}

impl DrivenQueue {
    async fn on(db: &Db, more_settings: &str) -> Self {
        use changegate_sim::gitlab::{AccessLevel, GitLabSim, GitLabSimOptions, PipelineOutcome};

        let gitlab = GitLabSim::start(GitLabSimOptions::default()).await.unwrap();
        let project = gitlab.create_project("config/repo");
        let mut users = Vec::new();
        for (name, token) in [
            ("bot", "bot-token"),
            ("rev-a", "a-token"),
            ("rev-b", "b-token"),
        ] {
            let user = gitlab.add_user(name, token);
            gitlab
                .add_member(project, user, AccessLevel::Developer)
                .unwrap();
            users.push(user);
        }
        gitlab
            .script_pipelines(project, [PipelineOutcome::StuckRunning])
            .unwrap();
        let (settings, problems) = settings_from(&format!(
            "[gitlab]\nbase_url = {:?}\nproject = \"config/repo\"\nbot_token = \"bot-token\"\n\
             reviewer_tokens = [\"a-token\", \"b-token\"]\n{more_settings}",
            gitlab.base_url()
        ));
        assert!(problems.is_empty(), "{problems:?}");
        let config = LiveConfig::new(settings, None, None);
        let slot = DbSlot::ready(db.clone());
        let client = GitLabClient::new(
            system_client(System::GitLab),
            gitlab.base_url(),
            Duration::from_secs(5),
            RetryPolicy::default(),
        );
        let workflow = Workflow::new(
            slot.clone(),
            config.clone(),
            ApprovalClient::new(system_client(System::Approval)),
            client.clone(),
        );
        let queue = MergeQueue::new(slot, config, workflow);
        Self {
            gitlab,
            project,
            users,
            client,
            queue,
        }
    }

    /// `project`'s last pipelines in GitLab took a minute (its CI
    /// history): a train paces its batches half a minute apart.
    fn pipelines_took_a_minute(&self, project: changegate_sim::gitlab::ProjectId) {
        self.gitlab
            .record_past_pipelines(project, &[Duration::from_secs(60); 5])
            .unwrap();
    }

    /// Another project the bot and the reviewers work in.
    fn another_project(&self, path: &str) -> changegate_sim::gitlab::ProjectId {
        let project = self.gitlab.create_project(path);
        for user in &self.users {
            self.gitlab
                .add_member(
                    project,
                    *user,
                    changegate_sim::gitlab::AccessLevel::Developer,
                )
                .unwrap();
        }
        project
    }

    /// Claims a batch of what waits and opens its MR: the batch's id and
    /// the MR's iid.
    async fn opened(&self, db: &Db) -> (i64, i64) {
        let Claimed::Batch { id, .. } = claim_batch(db, "", one_at_a_time(10), &|_| true)
            .await
            .unwrap()
        else {
            panic!("a batch");
        };
        self.queue.drive_round().await.unwrap(); // opens the MR
        self.queue.drive_round().await.unwrap(); // its pipeline runs on and on
        let batch = get_batch(db, id).await.unwrap();
        (id, batch.unwrap().mr_iid.unwrap())
    }

    /// Ends the pipeline of MR `iid`, passed: the MR as it was then.
    fn pass_pipeline(&self, iid: i64) -> changegate_sim::gitlab::MergeRequestSnapshot {
        let mr = self
            .gitlab
            .merge_request(self.project, u64::try_from(iid).unwrap())
            .unwrap();
        self.gitlab
            .force_pipeline(
                self.project,
                mr.head_pipeline.unwrap().0,
                changegate_sim::gitlab::PipelineOutcome::Success,
            )
            .unwrap();
        mr
    }
}

#[tokio::test]
async fn a_train_held_back_by_its_pace_claims_again_when_it_lets_a_batch_board_and_not_sooner_than_the_interval()
 {
    // The project's pipelines take a minute (its CI history): a new
    // batch of ordinary requests boards at most every 30 s in a train. One
    // batch at a time has no pace: its next claims once this one merged.
    let one_at_a_time = crate::helpers::train_depth() == 1;
    for (interval, pace) in [("1s", 30), ("1h", 3600)] {
        let test_db = crate::helpers::sqlite_db().await;
        let db = test_db.db.clone();
        let batch = format!("[batch]\ninterval = \"{interval}\"\n");
        let driven = DrivenQueue::on(&db, &batch).await;
        driven.pipelines_took_a_minute(driven.project);
        let queue = &driven.queue;
        queued_requests(&db, 0..3).await;
        let boarded = queue.claim_round().await.unwrap();
        assert!(
            matches!(boarded.as_slice(), [Claimed::Batch { members, .. }, ..] if members.len() == 3),
            "{boarded:?}"
        );
        assert_eq!(
            queue.until_pace_allows(),
            None,
            "{interval}: nothing held back"
        );

        queued_requests(&db, 3..5).await;
        let held = queue.claim_round().await.unwrap();
        assert!(
            !held
                .iter()
                .any(|claim| matches!(claim, Claimed::Batch { .. })),
            "{interval}: {held:?}"
        );
        if one_at_a_time {
            assert_eq!(queue.until_pace_allows(), None, "{interval}: no pace");
            continue;
        }
        let until = queue
            .until_pace_allows()
            .expect("the moment the pace lets the batch board is kept");
        let pace = Duration::from_secs(pace);
        assert!(
            until <= pace && until > pace - Duration::from_secs(5),
            "{interval}: {until:?}"
        );
        assert!(!queue.pace_allows(), "{interval}: not yet");
    }
}

/// What a claim round boarded: each batch's project and size.
async fn boarded(db: &Db, round: &[Claimed]) -> Vec<(String, usize)> {
    let mut boarded = Vec::new();
    for claim in round {
        if let Claimed::Batch { id, members, .. } = claim {
            let batch = get_batch(db, *id).await.unwrap().unwrap();
            boarded.push((batch.project, members.len()));
        }
    }
    boarded
}

#[tokio::test]
async fn each_project_sharing_a_train_has_its_own_pace() {
    // Both projects' requests share the default partition, so one train.
    // The pipelines of both take a minute: a project's next batch boards
    // 30 s after its last. Project B's requests are not built on A's
    // batch, and nothing of B's has boarded: B's batch boards at once.
    let one_at_a_time = crate::helpers::train_depth() == 1;
    let test_db = crate::helpers::sqlite_db().await;
    let db = test_db.db.clone();
    let driven = DrivenQueue::on(&db, "[batch]\ninterval = \"1s\"\n").await;
    let other = driven.another_project("other/repo");
    for project in [driven.project, other] {
        driven.pipelines_took_a_minute(project);
    }
    let queue = &driven.queue;
    queued_requests(&db, 0..3).await;
    let first = queue.claim_round().await.unwrap();
    assert_eq!(
        boarded(&db, &first).await,
        [("config/repo".to_owned(), 3)],
        "{first:?}"
    );

    queued_requests(&db, 3..5).await;
    queued_requests_of(&db, "other/repo", 100..102).await;
    let second = queue.claim_round().await.unwrap();
    if one_at_a_time {
        // One batch at a time: nothing boards beside A's batch.
        assert_eq!(boarded(&db, &second).await, [], "{second:?}");
        return;
    }
    assert_eq!(
        boarded(&db, &second).await,
        [("other/repo".to_owned(), 2)],
        "{second:?}"
    );
    let until = queue
        .until_pace_allows()
        .expect("A's pace holds its batch back, and the moment is kept");
    assert!(until > Duration::from_secs(25), "{until:?}");
}

#[tokio::test]
async fn a_full_batch_boards_without_waiting_for_the_pace_and_what_is_left_waits_for_it() {
    // Batches of at most two, a pipeline of a minute: five waiting
    // requests fill two batches, which board in one round; the fifth alone
    // would gain from waiting for others, and waits for the pace.
    let one_at_a_time = crate::helpers::train_depth() == 1;
    let test_db = crate::helpers::sqlite_db().await;
    let db = test_db.db.clone();
    let driven = DrivenQueue::on(&db, "[batch]\ninterval = \"1s\"\nmax_requests = 2\n").await;
    driven.pipelines_took_a_minute(driven.project);
    let queue = &driven.queue;
    queued_requests(&db, 0..5).await;
    let round = queue.claim_round().await.unwrap();
    let project = "config/repo".to_owned();
    if one_at_a_time {
        assert_eq!(boarded(&db, &round).await, [(project, 2)], "{round:?}");
        return;
    }
    assert_eq!(
        boarded(&db, &round).await,
        [(project.clone(), 2), (project, 2)],
        "{round:?}"
    );
    assert!(
        queue.until_pace_allows().is_some(),
        "the last request waits for the pace"
    );
}

#[tokio::test]
async fn another_projects_requests_waiting_ahead_board_in_a_batch_of_their_own() {
    // Both projects share the default partition. Another project's three
    // requests, older, never share a batch with this project's two: the
    // queue ahead of this project's second request is their batch, then
    // its own; this project's own requests ahead share its batch.
    let test_db = crate::helpers::sqlite_db().await;
    let db = test_db.db.clone();
    let (settings, problems) = settings_from("");
    assert!(problems.is_empty(), "{problems:?}");
    queued_requests_of(&db, "other/repo", 0..3).await;
    let own = queued_requests(&db, 3..5).await;
    let mut snapshot = db.begin_read().await.unwrap();
    let estimate = queue_estimate(&mut snapshot, &settings, &own[1])
        .await
        .unwrap()
        .expect("waiting");
    assert_eq!((estimate.position, estimate.of), (2, 2), "{estimate:?}");
    assert!(
        estimate.basis.starts_with("no estimate yet"),
        "{estimate:?}"
    );
}

/// Three merged batches of `project` in its history, each with a
/// pipeline of `pipeline` seconds and a merge round of one.
async fn merged_history(db: &Db, project: &str, pipeline: i64) {
    let sql = "INSERT INTO merge_batch (status, project, number, opened_at, passed_at, \
               merging_at, updated_at) VALUES ('SUCCEEDED', ?, ?, ?, ?, ?, ?)";
    for number in 1001..1004 {
        let opened = chrono::DateTime::from_timestamp(number * 10_000, 0)
            .unwrap()
            .naive_utc();
        let passed = opened + chrono::TimeDelta::seconds(pipeline);
        let merged = passed + chrono::TimeDelta::seconds(1);
        changegate::with_pool!(db, writer, |pool| {
            sqlx::query(sql)
                .bind(project)
                .bind(number)
                .bind(opened)
                .bind(passed)
                .bind(passed)
                .bind(merged)
                .execute(pool)
                .await
                .map(drop)
        })
        .unwrap();
    }
}

#[tokio::test]
async fn a_request_behind_another_projects_batch_is_timed_by_that_projects_pipelines() {
    // Another project's batch boards ahead and merges first: its pipelines
    // take ten minutes where this project's take ten seconds.
    for test_db in each_backend().await {
        let db = test_db.db.clone();
        let (settings, problems) = settings_from("");
        assert!(problems.is_empty(), "{problems:?}");
        merged_history(&db, "config/repo", 10).await;
        queued_requests_of(&db, "other/repo", 0..3).await;
        let own = queued_requests(&db, 3..4).await;
        let read = || async {
            let mut snapshot = db.begin_read().await.unwrap();
            let estimate = queue_estimate(&mut snapshot, &settings, &own[0])
                .await
                .unwrap()
                .expect("waiting");
            let wait = estimate.expected_merge_at.expect("an expected time") - chrono::Utc::now();
            (estimate, wait.as_seconds_f64())
        };
        // Without a history of its own, the other project's batch is
        // timed as this project's, and the basis says so.
        let (estimate, wait) = read().await;
        assert!(wait < 60.0, "{}: {wait} s, {estimate:?}", test_db.name);
        assert!(
            estimate
                .basis
                .contains("batches of other/repo ahead timed as config/repo's"),
            "{estimate:?}"
        );
        merged_history(&db, "other/repo", 600).await;
        let (estimate, wait) = read().await;
        assert!(
            (600.0..700.0).contains(&wait),
            "{}: {wait} s, {estimate:?}",
            test_db.name
        );
        assert!(
            estimate
                .basis
                .contains("batches of other/repo ahead by its own medians (pipeline 600 s"),
            "{estimate:?}"
        );
    }
}

/// Pipeline `id` of a CI history, finished `at` (seconds since the epoch)
/// after running `seconds`.
fn past_pipeline(id: i64, at: i64, seconds: f64) -> changegate::db::estimates::CiPipeline {
    changegate::db::estimates::CiPipeline {
        pipeline_id: id,
        seconds,
        finished_at: chrono::DateTime::from_timestamp(at, 0).unwrap().naive_utc(),
    }
}

async fn keep_ci_history(
    db: &Db,
    project: &str,
    pipelines: &[changegate::db::estimates::CiPipeline],
) {
    let mut tx = StoreTx::begin(db).await.unwrap();
    changegate::db::estimates::record_ci_history(tx.db(), project, pipelines)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn a_projects_ci_history_keeps_each_pipeline_once_and_only_the_newest_twenty() {
    use changegate::db::estimates::ci_history;

    for test_db in each_backend().await {
        let db = test_db.db.clone();
        let first: Vec<_> = (1..=15)
            .map(|id| past_pipeline(id, 1_000_000 + 60 * id, 10.0))
            .collect();
        keep_ci_history(&db, "config/repo", &first).await;
        // Read again five minutes later: ten of those again, ten newer.
        let again: Vec<_> = (6..=25)
            .map(|id| past_pipeline(id, 1_000_000 + 60 * id, 10.0))
            .collect();
        keep_ci_history(&db, "config/repo", &again).await;
        keep_ci_history(&db, "other/repo", &[past_pipeline(1, 1, 99.0)]).await;
        let kept = ci_history(&db, "config/repo").await.unwrap();
        let ids: Vec<i64> = kept.iter().map(|p| p.pipeline_id).collect();
        assert_eq!(ids, (6..=25).rev().collect::<Vec<_>>(), "{}", test_db.name);
        let rows = scalar(
            &db,
            "SELECT COUNT(*) FROM ci_pipeline WHERE project = 'config/repo'",
        )
        .await;
        assert_eq!(rows, 20, "{}: the oldest five are gone", test_db.name);
        assert_eq!(ci_history(&db, "other/repo").await.unwrap().len(), 1);
    }
}

#[tokio::test]
async fn a_project_new_to_changegate_has_its_ci_history_read_when_its_first_batch_boards() {
    use changegate::db::estimates::ci_history;

    let test_db = crate::helpers::sqlite_db().await;
    let db = test_db.db.clone();
    let driven = DrivenQueue::on(&db, "[batch]\ninterval = \"1s\"\n").await;
    driven.pipelines_took_a_minute(driven.project);
    queued_requests(&db, 0..3).await;
    driven.queue.claim_round().await.unwrap();
    // Paced or not (one batch at a time), its expected times count it.
    let kept = ci_history(&db, "config/repo").await.unwrap();
    let seconds: Vec<f64> = kept.iter().map(|p| p.seconds.round()).collect();
    assert_eq!(seconds, [60.0; 5]);
}

#[tokio::test]
async fn the_pipeline_median_of_an_estimate_takes_the_ci_history_from_before_changegate() {
    for test_db in each_backend().await {
        let db = test_db.db.clone();
        let (settings, problems) = settings_from("");
        assert!(problems.is_empty(), "{problems:?}");
        // Three merged batches of 10-s pipelines (the first opened at
        // 10,010,000 s); five pipelines of 40 s in GitLab before them, and
        // one after, which is changegate's own or of its time.
        merged_history(&db, "config/repo", 10).await;
        let mut ci: Vec<_> = (1..=5)
            .map(|id| past_pipeline(id, 10_000_000 - 60 * id, 40.0))
            .collect();
        ci.push(past_pipeline(6, 10_020_000, 500.0));
        keep_ci_history(&db, "config/repo", &ci).await;
        let own = queued_requests(&db, 0..1).await;
        let mut snapshot = db.begin_read().await.unwrap();
        let estimate = queue_estimate(&mut snapshot, &settings, &own[0])
            .await
            .unwrap()
            .expect("waiting");
        // The median of 10, 10, 10, 40, 40, 40, 40, 40.
        assert!(
            estimate.basis.starts_with(
                "medians of the last 3 merged batches of config/repo (the pipeline's with 5 earlier pipelines of its CI in GitLab): pipeline 40 s"
            ),
            "{}: {estimate:?}",
            test_db.name
        );
        let wait = estimate.expected_merge_at.expect("an expected time") - chrono::Utc::now();
        assert!(
            (40.0..50.0).contains(&wait.as_seconds_f64()),
            "{}: {wait}",
            test_db.name
        );
    }
}

/// Every operation of `ids` merged, and its request says so.
async fn assert_all_merged(db: &Db, ids: &[String]) {
    use changegate::db::operations::get_operation_with_status;
    use changegate::domain::{BindingStatus, StepStatus};

    for id in ids {
        let (operation, status, _) = get_operation_with_status(db, id).await.unwrap().unwrap();
        assert_eq!(
            (status, operation.step),
            (Some(BindingStatus::Merged), StepStatus::HandleMerged),
            "{id}"
        );
    }
}

#[tokio::test]
async fn a_batch_whose_pipeline_passed_merges_in_that_round_not_a_round_later() {
    use changegate_sim::gitlab::MrState;

    let test_db = crate::helpers::sqlite_db().await;
    let db = test_db.db.clone();
    let driven = DrivenQueue::on(&db, "").await;
    let ids = queued_requests(&db, 0..3).await;
    let (batch_id, iid) = driven.opened(&db).await;
    driven.pass_pipeline(iid);

    // One round sees the pipeline passed, starts merging (the batch is
    // the front) and merges.
    driven.queue.drive_round().await.unwrap();
    let batch = get_batch(&db, batch_id).await.unwrap().unwrap();
    assert_eq!(batch.status, "SUCCEEDED", "{batch:?}");
    let mr = driven
        .gitlab
        .merge_request(driven.project, u64::try_from(iid).unwrap())
        .unwrap();
    assert_eq!(mr.state, MrState::Merged);
    assert_all_merged(&db, &ids).await;
}

#[tokio::test]
async fn a_batch_whose_mr_merged_meanwhile_settles_as_merged() {
    use secrecy::SecretString;

    let test_db = crate::helpers::sqlite_db().await;
    let db = test_db.db.clone();
    let driven = DrivenQueue::on(&db, "").await;
    let ids = queued_requests(&db, 0..3).await;
    let (batch_id, iid) = driven.opened(&db).await;
    let (queue, client) = (&driven.queue, &driven.client);

    // Someone finishes the pipeline, approves and merges it by hand just as
    // an operator gives up on the batch.
    let mr = driven.pass_pipeline(iid);
    for token in ["a-token", "b-token"] {
        client
            .approve(&SecretString::from(token), "config/repo", iid)
            .await
            .unwrap();
    }
    let bot = SecretString::from("bot-token");
    client
        .merge(&bot, "config/repo", iid, &mr.sha)
        .await
        .unwrap();

    assert_eq!(
        queue.settle(batch_id, "operator gave up").await.unwrap(),
        Settled::Merged
    );
    let batch = get_batch(&db, batch_id).await.unwrap().unwrap();
    assert_eq!(batch.status, "SUCCEEDED", "merged wins: {batch:?}");
    assert_all_merged(&db, &ids).await;
    assert_eq!(
        queue.settle(batch_id, "again").await.unwrap(),
        Settled::NotRunning,
        "settled once"
    );
}

/// Claims batches of at most 7 in `partition` until a claim finds the
/// queue empty (or 30 s pass); every outcome, in order.
pub(crate) async fn claim_until_empty(db: &Db, partition: &str) -> Vec<Claimed> {
    let mut outcomes = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let outcome = claim_batch(db, partition, one_at_a_time(7), &|_| true)
            .await
            .unwrap();
        let empty = outcome == Claimed::Empty;
        outcomes.push(outcome);
        if empty {
            break;
        }
    }
    outcomes
}
