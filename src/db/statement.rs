//! A write statement as data: its SQL text and the values of its `?`
//! placeholders, so that the same INSERT runs as a prepared statement in a
//! transaction or is written into a [`script`](super::script).

use chrono::NaiveDateTime;
use sqlx::AssertSqlSafe;

use super::DbTx;
use crate::with_tx;

/// One placeholder's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SqlValue<'a> {
    /// Text.
    Text(&'a str),
    /// Text or NULL.
    OptText(Option<&'a str>),
    /// An integer.
    Int(i64),
    /// An integer or NULL.
    OptInt(Option<i64>),
    /// A date-time or NULL.
    OptTime(Option<NaiveDateTime>),
}

/// SQL with `?` placeholders and their values, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement<'a> {
    /// The SQL text; `?` appears only as a placeholder.
    pub sql: String,
    /// One value per placeholder.
    pub values: Vec<SqlValue<'a>>,
}

impl Statement<'_> {
    /// Runs the statement, prepared, in `tx`.
    pub async fn execute(self, tx: &mut DbTx) -> Result<(), sqlx::Error> {
        with_tx!(tx, |conn| {
            let mut query = sqlx::query(AssertSqlSafe(self.sql));
            for value in self.values {
                query = match value {
                    SqlValue::Text(text) => query.bind(text),
                    SqlValue::OptText(text) => query.bind(text),
                    SqlValue::Int(number) => query.bind(number),
                    SqlValue::OptInt(number) => query.bind(number),
                    SqlValue::OptTime(time) => query.bind(time),
                };
            }
            query.execute(conn).await.map(|_| ())
        })
    }
}
