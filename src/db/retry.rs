//! Retrying a whole write transaction that lost a race for locks (SPEC §6:
//! deadlocks and lock-wait timeouts are retried inside the store and never
//! reach a caller).
//!
//! InnoDB picks a victim among transactions that wait on each other and rolls
//! it back whole (1213); a lock wait past `innodb_lock_wait_timeout` fails the
//! statement (1205); SQLite answers BUSY once its busy timeout is spent. None
//! of them means the write was wrong, only that it came at a bad moment: the
//! same transaction, begun again after a short, jittered pause, succeeds. The
//! pause is jittered so that two victims of one deadlock do not meet again.
//!
//! On a Galera cluster, a transaction that conflicts with one certified on
//! another node fails at any statement or at commit with 1213 as well; while
//! a node rejoins it answers 1047 (not prepared for application use) and may
//! fail a commit with 1180. Those are retried alike.

use std::future::Future;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable, RetryableWithContext};

/// How many times a transaction is begun again after losing a lock race
/// (so it runs at most one more time than this). On a Galera cluster a row
/// another node keeps writing (a request's first steps, right after it was
/// submitted there) can abort a transaction several times in a row: the
/// attempts span about a second, well within a request's timeout.
pub const RETRIES: usize = 8;

/// Why a transaction lost a race for locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict {
    /// InnoDB chose it as a deadlock victim (MySQL 1213).
    Deadlock,
    /// It waited longer than `innodb_lock_wait_timeout` (MySQL 1205).
    LockWaitTimeout,
    /// SQLite was busy or locked past the busy timeout (codes 5, 6, 517).
    Busy,
    /// A Galera node not ready for application use yet (MariaDB 1047, `WSREP
    /// has not yet prepared node for application use`).
    NodeNotReady,
    /// The commit itself failed (MySQL 1180), as on a Galera node that is
    /// leaving or rejoining the cluster.
    CommitFailed,
    /// A deadlock or lock-wait timeout on a table's AUTO-INC lock (MySQL
    /// 1467, `Failed to read auto-increment value from storage engine`).
    AutoIncrementLock,
}

impl Conflict {
    /// The conflict `err` reports, if it is one.
    pub fn of(err: &sqlx::Error) -> Option<Self> {
        let db_error = err.as_database_error()?;
        if let Some(mysql) = db_error.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
            return match mysql.number() {
                1213 => Some(Self::Deadlock),
                1205 => Some(Self::LockWaitTimeout),
                1047 => Some(Self::NodeNotReady),
                1180 => Some(Self::CommitFailed),
                1467 => Some(Self::AutoIncrementLock),
                _ => None,
            };
        }
        matches!(db_error.code().as_deref(), Some("5" | "6" | "517")).then_some(Self::Busy)
    }

    /// The `reason` label of the retry counter.
    pub fn label(self) -> &'static str {
        match self {
            Self::Deadlock => "deadlock",
            Self::LockWaitTimeout => "lock_wait_timeout",
            Self::Busy => "busy",
            Self::NodeNotReady => "node_not_ready",
            Self::CommitFailed => "commit_failed",
            Self::AutoIncrementLock => "autoinc_lock",
        }
    }

    /// Every conflict, for registering the counters' series.
    pub const ALL: [Self; 6] = [
        Self::Deadlock,
        Self::LockWaitTimeout,
        Self::Busy,
        Self::NodeNotReady,
        Self::CommitFailed,
        Self::AutoIncrementLock,
    ];
}

/// An error that may be a lost lock race underneath.
pub trait Contended {
    /// The lock race this error reports, if it is one.
    fn conflict(&self) -> Option<Conflict>;
}

impl Contended for sqlx::Error {
    fn conflict(&self) -> Option<Conflict> {
        Conflict::of(self)
    }
}

/// Runs `attempt`, a future that begins, writes and commits (or rolls back)
/// one whole transaction, and runs it again while it fails on a lost lock
/// race, at most [`RETRIES`] more times. Any other outcome is passed on as
/// it is; so is the last conflict, counted as exhausted.
pub async fn retrying<T, E, Fut>(attempt: impl FnMut() -> Fut) -> Result<T, E>
where
    E: Contended,
    Fut: Future<Output = Result<T, E>>,
{
    let outcome = attempt
        .retry(policy())
        .when(|err: &E| err.conflict().is_some())
        .notify(count_retry)
        .await;
    count_if_exhausted(outcome)
}

/// [`retrying`] for an attempt that needs `context` mutably (a closure the
/// caller passes in, say): each attempt takes it and gives it back.
pub async fn retrying_with<C, T, E, Fut>(context: C, attempt: impl FnMut(C) -> Fut) -> Result<T, E>
where
    E: Contended,
    Fut: Future<Output = (C, Result<T, E>)>,
{
    let (_, outcome) = attempt
        .retry(policy())
        .context(context)
        .when(|err: &E| err.conflict().is_some())
        .notify(count_retry)
        .await;
    count_if_exhausted(outcome)
}

/// 5 ms, then doubling to at most 250 ms, each pause plus a random part of
/// itself: the first retry comes at once in human terms, and all of them
/// together (under two seconds) stay well under a request's timeout.
fn policy() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(5))
        .with_max_delay(Duration::from_millis(250))
        .with_factor(2.0)
        .with_max_times(RETRIES)
        .with_jitter()
}

fn count_retry<E: Contended>(err: &E, pause: Duration) {
    let Some(conflict) = err.conflict() else {
        return;
    };
    tracing::debug!(
        reason = conflict.label(),
        "a store write lost a lock race; retrying in {pause:?}"
    );
    metrics::counter!("changegate_store_retries_total", "reason" => conflict.label()).increment(1);
}

/// Counts and logs a race lost on every retry: at error, for the write was
/// not done (a request answers 503 and must be sent again), which the
/// retries exist to prevent.
fn count_if_exhausted<T, E: Contended>(outcome: Result<T, E>) -> Result<T, E> {
    if let Err(err) = &outcome
        && let Some(conflict) = err.conflict()
    {
        tracing::error!(
            reason = conflict.label(),
            "a store write lost {} lock races in a row; giving up",
            RETRIES + 1
        );
        metrics::counter!("changegate_store_retries_exhausted_total").increment(1);
    }
    outcome
}

/// Describes the retry counters and starts their series at zero, so that
/// /metrics shows them (and rates over them work) before the first retry.
pub fn describe_metrics() {
    metrics::describe_counter!(
        "changegate_store_retries_total",
        "Store transactions begun again after losing a lock race, by reason."
    );
    metrics::describe_counter!(
        "changegate_store_retries_exhausted_total",
        "Store transactions that still lost a lock race after every retry."
    );
    for conflict in Conflict::ALL {
        metrics::counter!("changegate_store_retries_total", "reason" => conflict.label())
            .increment(0);
    }
    metrics::counter!("changegate_store_retries_exhausted_total").increment(0);
}
