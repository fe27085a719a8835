//! The clock of a connection outage, kept on an operation or a merge batch
//! (`unreachable_since`, migration 0012) in the database's time, so every
//! instance and every restart measure the same outage.

use std::time::Duration;

use sqlx::AssertSqlSafe;

use super::{Backend, Db, dialect};
use crate::with_pool;

/// What a write does to the outage clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OutageClock {
    /// An answer came: any outage is over.
    #[default]
    Stop,
    /// Neither a connection failure nor an answer (a timeout, a 5xx, a
    /// rate-limit pause): the clock stays as it is.
    Keep,
    /// The connection failed: the clock starts now unless it runs already.
    Run,
}

impl OutageClock {
    /// The `SET` assignment of the clock's column.
    pub fn assignment(self, backend: Backend) -> String {
        match self {
            Self::Stop => "unreachable_since = NULL".to_owned(),
            Self::Keep => "unreachable_since = unreachable_since".to_owned(),
            Self::Run => format!(
                "unreachable_since = COALESCE(unreachable_since, {})",
                dialect::now_ms(backend)
            ),
        }
    }
}

/// Whether the operation's outage has lasted longer than `deadline`.
pub async fn operation_unreachable_for(
    db: &Db,
    operation_id: &str,
    deadline: Duration,
) -> Result<bool, sqlx::Error> {
    let sql = outlasted_sql(db.backend(), "operation", "operation_id");
    with_pool!(db, reader, |pool| {
        sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql))
            .bind(operation_id)
            .bind(millis(deadline))
            .fetch_one(pool)
            .await
            .map(|count| count > 0)
    })
}

/// Whether the batch's outage has lasted longer than `deadline`.
pub async fn batch_unreachable_for(
    db: &Db,
    batch_id: i64,
    deadline: Duration,
) -> Result<bool, sqlx::Error> {
    let sql = outlasted_sql(db.backend(), "merge_batch", "id");
    with_pool!(db, reader, |pool| {
        sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql))
            .bind(batch_id)
            .bind(millis(deadline))
            .fetch_one(pool)
            .await
            .map(|count| count > 0)
    })
}

fn outlasted_sql(backend: Backend, table: &str, key: &str) -> String {
    format!(
        "SELECT COUNT(*) FROM {table} WHERE {key} = ? AND unreachable_since < {}",
        dialect::now_minus_ms(backend)
    )
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
