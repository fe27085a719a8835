//! A write transaction that carries effects to run only after it commits.

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::db::{Db, DbTx};

type Effect = Box<dyn FnOnce() + Send>;

/// Runs `$body` with `$tx` bound to a new [`StoreTx`] on `$db`, commits
/// when it evaluates to `Ok` and rolls back when `Err` ([`StoreTx::finish`]);
/// a transaction that lost a lock race (a deadlock, a lock-wait timeout,
/// SQLite busy) is begun again and `$body` runs again, whole
/// ([`crate::db::retrying`]). So `$body` reads what it decides on inside
/// the transaction, and may borrow its surroundings only immutably.
///
/// ```text
/// let moved = write_tx!(db, |tx| {
///     move_members(tx, &ids, from, Some(to), change, None).await
/// })
/// .await?;
/// ```
#[macro_export]
macro_rules! write_tx {
    ($db:expr, |$tx:ident| $body:expr) => {
        $crate::db::retrying(|| async {
            let mut transaction = $crate::store::StoreTx::begin($db).await?;
            let outcome = async {
                let $tx = &mut transaction;
                $body
            }
            .await;
            transaction.finish(outcome).await
        })
    };
}

/// A write transaction plus the effects (metrics, notifications) that must
/// happen only if it commits. [`StoreTx::rollback`] (or dropping it) rolls
/// back and discards the effects, so a rolled-back flip is never counted.
/// Prefer [`StoreTx::finish`], which never leaves locks behind.
pub struct StoreTx {
    tx: DbTx,
    effects: Vec<Effect>,
}

impl StoreTx {
    /// Begins a write transaction.
    pub async fn begin(db: &Db) -> Result<Self, sqlx::Error> {
        Ok(Self {
            tx: db.begin().await?,
            effects: Vec::new(),
        })
    }

    /// The underlying transaction, for `db::*` functions.
    pub fn db(&mut self) -> &mut DbTx {
        &mut self.tx
    }

    /// Queues `effect` to run after a successful commit.
    pub fn after_commit(&mut self, effect: impl FnOnce() + Send + 'static) {
        self.effects.push(Box::new(effect));
    }

    /// Commits, then runs the queued effects in order. An effect that panics
    /// is logged and skipped: observability never changes the outcome.
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await?;
        for effect in self.effects {
            if catch_unwind(AssertUnwindSafe(effect)).is_err() {
                tracing::error!("an after-commit effect panicked; the commit stands");
            }
        }
        Ok(())
    }

    /// Rolls back and discards the queued effects.
    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        self.tx.rollback().await
    }

    /// Commits when `outcome` is `Ok`, rolls back when it is `Err`, and
    /// passes the outcome on. Rolling back explicitly matters on MySQL: a
    /// dropped transaction is only rolled back when its pooled connection is
    /// next used, and until then its row locks block every other writer.
    pub async fn finish<T, E: From<sqlx::Error>>(self, outcome: Result<T, E>) -> Result<T, E> {
        match outcome {
            Ok(value) => {
                self.commit().await?;
                Ok(value)
            }
            Err(err) => {
                // The original error is the answer; a failed rollback (the
                // connection is gone, and the transaction with it) is only logged.
                if let Err(rollback) = self.rollback().await {
                    tracing::warn!("rollback failed: {rollback}");
                }
                Err(err)
            }
        }
    }
}
