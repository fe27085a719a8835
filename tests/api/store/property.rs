//! Random sequences of legal and illegal writes, several racing copies at a
//! time, with the store's invariants checked after every step.

use std::collections::HashMap;

use changegate::db::Db;
use changegate::db::bindings::get_binding;
use changegate::domain::{BindingStatus, StepStatus, check_transition};
use changegate::store::{self, StoreError};
use changegate::with_pool;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use super::{apply, change};
use crate::helpers::{mysql_db, sqlite_db};

const RELATIONS: usize = 2;

#[derive(Debug, Clone)]
enum Action {
    /// Apply for a relation (new, re-apply, or refused).
    Submit { relation: usize },
    /// `copies` writers that all read the same version try to move the binding.
    Transition {
        relation: usize,
        to: BindingStatus,
        copies: usize,
    },
    /// `copies` racing flips from the status read to `to`.
    Flip {
        relation: usize,
        to: BindingStatus,
        copies: usize,
    },
}

fn action() -> impl Strategy<Value = Action> {
    let relation = 0..RELATIONS;
    let status = proptest::sample::select(BindingStatus::ALL.to_vec());
    prop_oneof![
        relation
            .clone()
            .prop_map(|relation| Action::Submit { relation }),
        (relation.clone(), status.clone(), 1..4usize).prop_map(|(relation, to, copies)| {
            Action::Transition {
                relation,
                to,
                copies,
            }
        }),
        (relation, status, 1..4usize).prop_map(|(relation, to, copies)| Action::Flip {
            relation,
            to,
            copies
        }),
    ]
}

/// What the test has seen, to check against the database.
#[derive(Default)]
struct Seen {
    flips: i64,
    versions: HashMap<String, i64>,
}

async fn run(db: &Db, prefix: &str, actions: Vec<Action>) -> Result<(), TestCaseError> {
    let mut seen = Seen::default();
    for action in actions {
        let relation = match &action {
            Action::Submit { relation }
            | Action::Transition { relation, .. }
            | Action::Flip { relation, .. } => *relation,
        };
        let subject = format!("{prefix}-{relation}");
        let current = get_binding(db, &subject, "t").await.map_err(fail)?;
        let mut tasks = Vec::new();
        match (action, &current) {
            (Action::Submit { .. }, _) => {
                let db = db.clone();
                let request = apply(&subject, "t");
                tasks.push(tokio::spawn(async move {
                    store::submit(&db, &request).await.map(|_| true)
                }));
            }
            (Action::Transition { to, copies, .. }, Some(binding)) => {
                let operation =
                    changegate::db::operations::get_operation(db, &binding.operation_id)
                        .await
                        .map_err(fail)?
                        .ok_or_else(|| TestCaseError::fail("binding without operation"))?;
                for _ in 0..copies {
                    let (db, id) = (db.clone(), binding.operation_id.clone());
                    let version = operation.version;
                    tasks.push(tokio::spawn(async move {
                        store::transition(
                            &db,
                            &id,
                            version,
                            Some(to),
                            change(StepStatus::ManualRetry),
                        )
                        .await
                        .map(|done| done.flip.is_some())
                    }));
                }
            }
            (Action::Flip { to, copies, .. }, Some(binding)) => {
                for _ in 0..copies {
                    let (db, id, from) = (db.clone(), binding.operation_id.clone(), binding.status);
                    tasks.push(tokio::spawn(async move {
                        store::flip(&db, &id, &[from], to, change(StepStatus::ManualRetry))
                            .await
                            .map(|f| f.is_some())
                    }));
                }
            }
            (_, None) => {}
        }
        let mut wins = 0;
        for task in tasks {
            match task
                .await
                .map_err(|err| TestCaseError::fail(err.to_string()))?
            {
                Ok(true) => wins += 1,
                Ok(false)
                | Err(
                    StoreError::Preempted | StoreError::Illegal(_) | StoreError::InProgress { .. },
                ) => {}
                Err(other) => return Err(TestCaseError::fail(format!("unexpected {other:?}"))),
            }
        }
        prop_assert!(wins <= 1, "{wins} racing writers all changed the status");
        seen.flips += wins;
        check_invariants(db, prefix, &mut seen).await?;
    }
    Ok(())
}

async fn check_invariants(db: &Db, prefix: &str, seen: &mut Seen) -> Result<(), TestCaseError> {
    let pattern = format!("{prefix}-%");
    type Bindings = Vec<(String, String, i64)>;
    type Events = Vec<(Option<String>, String)>;
    let (rows, events): (Bindings, Events) = with_pool!(db, reader, |pool| {
        let rows = sqlx::query_as(
            "SELECT subject_id, status, version FROM binding WHERE subject_id LIKE ?",
        )
        .bind(&pattern)
        .fetch_all(pool)
        .await?;
        let events = sqlx::query_as(
            "SELECT from_status, to_status FROM event WHERE subject_id LIKE ? ORDER BY id",
        )
        .bind(&pattern)
        .fetch_all(pool)
        .await?;
        Ok::<_, sqlx::Error>((rows, events))
    })
    .map_err(fail)?;

    let mut subjects: Vec<&String> = rows.iter().map(|(subject, _, _)| subject).collect();
    subjects.sort();
    subjects.dedup();
    prop_assert_eq!(subjects.len(), rows.len(), "one binding row per relation");
    // Every binding is owned by an operation for that same relation.
    let owned: i64 = with_pool!(db, reader, |pool| {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM binding b JOIN operation o ON o.operation_id = b.operation_id \
             WHERE b.subject_id LIKE ? AND o.subject_id = b.subject_id AND o.target_key = b.target_key",
        )
        .bind(&pattern)
        .fetch_one(pool)
        .await
    })
    .map_err(fail)?;
    prop_assert_eq!(
        owned,
        rows.len() as i64,
        "each binding belongs to an operation of its relation"
    );
    for (subject, _, version) in &rows {
        let last = seen.versions.insert(subject.clone(), *version).unwrap_or(0);
        prop_assert!(
            *version >= last,
            "version of {} went back from {} to {}",
            subject,
            last,
            version
        );
    }
    for (from, to) in &events {
        if let Some(from) = from {
            let (from, to) = (from.parse().map_err(fail)?, to.parse().map_err(fail)?);
            prop_assert!(
                check_transition(from, to).is_ok(),
                "event records an illegal move {} -> {}",
                from,
                to
            );
        }
    }
    prop_assert_eq!(events.len() as i64, seen.flips, "one event per real flip");
    Ok(())
}

fn fail(err: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(err.to_string())
}

#[test]
fn random_racing_writes_keep_the_invariants() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let mut backends = vec![runtime.block_on(sqlite_db())];
    backends.extend(runtime.block_on(mysql_db()));
    for test_db in &backends {
        let mut runner = TestRunner::new(Config {
            cases: 24,
            ..Config::default()
        });
        // Cases share the database; each gets its own relations.
        let case = std::sync::atomic::AtomicUsize::new(0);
        let result = runner.run(&proptest::collection::vec(action(), 1..25), |actions| {
            let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            runtime.block_on(run(&test_db.db, &format!("case{case}"), actions))
        });
        if let Err(err) = result {
            panic!("{}: {err}", test_db.name);
        }
    }
}
