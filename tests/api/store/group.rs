//! Group commit: submissions that arrive together are written in one
//! transaction (on MySQL one script), each exactly once, with the answers
//! `store::submit` gives.

use changegate::db::Db;
use changegate::domain::{BindingStatus, OperationId};
use changegate::store::{IdempotencyClaim, NewRequest, StoreError, SubmissionQueue};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

use super::apply;
use crate::helpers::each_backend;

const FRESH: usize = 200;
const REPEATED: usize = 20;

fn with_key(mut request: NewRequest, key: &str) -> NewRequest {
    request.idempotency = Some(IdempotencyClaim {
        key: key.to_owned(),
        request_hash: "hash".to_owned(),
        ttl_ms: 86_400_000,
    });
    request
}

async fn count(db: &Db, sql: &'static str) -> i64 {
    changegate::with_pool!(db, reader, |pool| {
        sqlx::query_scalar(sql).fetch_one(pool).await
    })
    .unwrap()
}

/// `FRESH` first requests for distinct relations, each with its own key,
/// and then `REPEATED` of them sent again with the same operation id and key,
/// all at once through one queue.
async fn submit_all(db: &Db) -> Vec<Result<OperationId, StoreError>> {
    let queue = SubmissionQueue::start();
    let fresh: Vec<NewRequest> = (0..FRESH)
        .map(|i| with_key(apply(&format!("s-{i}"), "t"), &format!("k-{i}")))
        .collect();
    let repeats = fresh.iter().take(REPEATED).cloned();
    let tasks: Vec<_> = fresh
        .iter()
        .cloned()
        .chain(repeats)
        .map(|request| {
            let queue = queue.clone();
            let db = db.clone();
            tokio::spawn(async move {
                let id = request.operation_id;
                queue.submit(&db, request).await.map(|_| id)
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    outcomes
}

#[test]
fn requests_arriving_together_are_written_in_groups_each_exactly_once() {
    // A local recorder sees the group sizes of this test only; the runtime
    // is on this thread so the writer's tasks record into it too.
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let backends = metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let backends = each_backend().await;
            for test_db in &backends {
                let db = &test_db.db;
                let outcomes = submit_all(db).await;
                let name = &test_db.name;

                let accepted = outcomes.iter().filter(|outcome| outcome.is_ok()).count();
                assert_eq!(accepted, FRESH, "{name}: one acceptance per request");
                for repeat in &outcomes[FRESH..] {
                    assert!(
                        matches!(
                            repeat,
                            Err(StoreError::DuplicateKey
                                | StoreError::DuplicateOperation
                                | StoreError::InProgress {
                                    status: BindingStatus::ApprovalSending,
                                    ..
                                }
                                | StoreError::Preempted)
                        ),
                        "{name}: a repeat is refused, not recorded: {repeat:?}"
                    );
                }
                for (table, sql) in [
                    ("operation", "SELECT COUNT(*) FROM operation"),
                    ("binding", "SELECT COUNT(*) FROM binding"),
                    (
                        "operation_history",
                        "SELECT COUNT(*) FROM operation_history",
                    ),
                    ("event", "SELECT COUNT(*) FROM event"),
                    (
                        "idempotency_record",
                        "SELECT COUNT(*) FROM idempotency_record",
                    ),
                ] {
                    assert_eq!(
                        count(db, sql).await,
                        FRESH as i64,
                        "{name}: rows in {table}"
                    );
                }
                let consistent = count(
                    db,
                    "SELECT COUNT(*) FROM binding b \
                     JOIN operation o ON o.operation_id = b.operation_id \
                     JOIN idempotency_record i ON i.operation_id = o.operation_id \
                     JOIN operation_history h ON h.operation_id = o.operation_id \
                     JOIN event e ON e.operation_id = o.operation_id \
                     WHERE b.subject_id = o.subject_id AND b.status = 'APPROVAL_SENDING' \
                       AND i.requester = o.requested_by",
                )
                .await;
                assert_eq!(
                    consistent, FRESH as i64,
                    "{name}: each request's rows belong together"
                );
            }
            backends.len()
        })
    });
    let sizes: Vec<f64> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == "changegate_submission_group_size")
        .flat_map(|(.., value)| match value {
            DebugValue::Histogram(sizes) => {
                sizes.into_iter().map(|size| size.into_inner()).collect()
            }
            _ => Vec::new(),
        })
        .collect();
    let written: f64 = sizes.iter().sum();
    assert!(backends >= 1);
    assert_eq!(
        written,
        ((FRESH + REPEATED) * backends) as f64,
        "every submission went through a group once: {sizes:?}"
    );
    assert!(
        sizes.iter().any(|size| *size > 1.0),
        "some requests were written together: {sizes:?}"
    );
}
