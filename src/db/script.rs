//! A MySQL write transaction in one round trip.
//!
//! Prepared statements take a round trip each, so a transaction of five
//! INSERTs is seven (`BEGIN`, five, `COMMIT`), and on a busy machine each one
//! costs both processes a wake-up. A script sends them all as one
//! multi-statement text query, values written as literals. sqlx has no
//! client-side parameter interpolation, hence the hand-written literals: text
//! is written as a hexadecimal literal with a character-set introducer, so no
//! value can end its literal whatever it contains.
//!
//! Never on a Galera node: see [`super::Db::script_pool`].

use std::fmt::Write;

use futures_util::TryStreamExt;
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, MySql, MySqlPool};

use super::statement::{SqlValue, Statement};

/// A statement of a script failed; nothing of the script was committed.
#[derive(Debug)]
pub struct ScriptFailure {
    /// The index of the failed statement, or `None` when the script did not
    /// get as far as its statements.
    pub statement: Option<usize>,
    /// What the database said.
    pub error: sqlx::Error,
}

/// Runs `statements` in one transaction, all or nothing, in one round trip
/// (two when a statement fails: the rollback is its own).
pub async fn run_transaction(
    pool: &MySqlPool,
    statements: &[Statement<'_>],
) -> Result<(), ScriptFailure> {
    let not_started = |error| ScriptFailure {
        statement: None,
        error,
    };
    let mut connection = OpenTransaction(Some(pool.acquire().await.map_err(not_started)?));
    let conn = connection.0.as_mut().expect("held until the end");
    let mut results = sqlx::raw_sql(AssertSqlSafe(script(statements))).execute_many(&mut **conn);
    // Each statement that succeeds answers with one result, `START
    // TRANSACTION` first; the server stops at the first error.
    let mut answered: usize = 0;
    let failure = loop {
        match results.try_next().await {
            Ok(Some(_)) => answered += 1,
            Ok(None) => break None,
            Err(error) => break Some(error),
        }
    };
    drop(results);
    // Every statement answers, `START TRANSACTION` and `COMMIT` included,
    // or the server stopped early: the client follows the server's "more
    // results" flag, so a script the server ended without an error would
    // look done though its `COMMIT` never ran. Its transaction may still be
    // open: the connection is closed (the server rolls it back), not
    // pooled, and the caller is told nothing was written.
    let expected = statements.len() + 2;
    if failure.is_none() && answered != expected {
        tracing::error!(
            answered,
            expected,
            "the database ended a transaction script early without an error; nothing of it is taken as written"
        );
        return Err(ScriptFailure {
            statement: None,
            error: sqlx::Error::Protocol(format!(
                "the database answered {answered} of the {expected} statements of a transaction script"
            )),
        });
    }
    let Some(error) = failure else {
        connection.release();
        return Ok(());
    };
    let failed = ScriptFailure {
        statement: answered.checked_sub(1),
        error,
    };
    if sqlx::raw_sql("ROLLBACK").execute(&mut **conn).await.is_ok() {
        connection.release();
    }
    Err(failed)
}

/// A pooled connection that may have a transaction open: unless released
/// after a `COMMIT` or `ROLLBACK` answered, it is closed instead of going
/// back to the pool, and the server rolls the transaction back. This covers
/// a caller that stops waiting halfway.
struct OpenTransaction(Option<PoolConnection<MySql>>);

impl OpenTransaction {
    fn release(mut self) {
        self.0.take();
    }
}

impl Drop for OpenTransaction {
    fn drop(&mut self) {
        if let Some(connection) = self.0.as_mut() {
            connection.close_on_drop();
        }
    }
}

/// `START TRANSACTION; statement; …; COMMIT` with every value as a literal.
fn script(statements: &[Statement<'_>]) -> String {
    let mut text = String::from("START TRANSACTION;");
    for statement in statements {
        let mut values = statement.values.iter();
        for (index, part) in statement.sql.split('?').enumerate() {
            if index > 0 {
                let value = values.next().expect("a value for every placeholder");
                write_literal(&mut text, value);
            }
            text.push_str(part);
        }
        assert!(values.next().is_none(), "a placeholder for every value");
        text.push(';');
    }
    text.push_str("COMMIT");
    text
}

fn write_literal(text: &mut String, value: &SqlValue<'_>) {
    match value {
        SqlValue::Text(value) | SqlValue::OptText(Some(value)) => {
            text.push_str("_utf8mb4 X'");
            for byte in value.bytes() {
                let _ = write!(text, "{byte:02x}");
            }
            text.push('\'');
        }
        SqlValue::Int(number) | SqlValue::OptInt(Some(number)) => {
            let _ = write!(text, "{number}");
        }
        SqlValue::OptTime(Some(time)) => {
            let _ = write!(text, "'{}'", time.format("%Y-%m-%d %H:%M:%S%.6f"));
        }
        SqlValue::OptText(None) | SqlValue::OptInt(None) | SqlValue::OptTime(None) => {
            text.push_str("NULL");
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::NaiveDate;

    use super::*;

    #[test]
    fn values_become_literals_that_no_text_can_break_out_of() {
        let time = NaiveDate::from_ymd_opt(2026, 11, 30)
            .and_then(|day| day.and_hms_milli_opt(10, 5, 1, 250))
            .expect("valid time");
        let statement = Statement {
            sql: "INSERT INTO t (a, b, c, d, e) VALUES (?, ?, ?, ?, NOW() + ?)".to_owned(),
            values: vec![
                SqlValue::Text("x'); DROP TABLE t; --"),
                SqlValue::OptText(None),
                SqlValue::OptTime(Some(time)),
                SqlValue::OptInt(Some(-7)),
                SqlValue::Int(42),
            ],
        };
        assert_eq!(
            script(&[statement]),
            "START TRANSACTION;INSERT INTO t (a, b, c, d, e) VALUES (\
             _utf8mb4 X'7827293b2044524f50205441424c4520743b202d2d', NULL, \
             '2026-11-30 10:05:01.250000', -7, NOW() + 42);COMMIT"
        );
    }

    #[test]
    #[should_panic(expected = "a value for every placeholder")]
    fn a_missing_value_is_a_bug_not_a_null() {
        script(&[Statement {
            sql: "INSERT INTO t (a) VALUES (?)".to_owned(),
            values: Vec::new(),
        }]);
    }
}
