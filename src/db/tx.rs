//! Write transactions over either backend.

use sqlx::{MySql, Sqlite, Transaction};

use super::{Backend, Db};

/// An open write transaction. Dropping it without [`DbTx::commit`] rolls back.
#[derive(Debug)]
pub enum DbTx {
    /// On the single SQLite writer connection.
    Sqlite(Transaction<'static, Sqlite>),
    /// On a MySQL pool connection.
    MySql(Transaction<'static, MySql>),
}

/// Expands `$body` once per backend with `$conn` bound to the transaction's
/// connection (`&mut SqliteConnection` or `&mut MySqlConnection`); use
/// `&mut *$conn` to run several statements.
#[macro_export]
macro_rules! with_tx {
    ($tx:expr, |$conn:ident| $body:expr) => {
        match $tx {
            $crate::db::DbTx::Sqlite(tx) => {
                let $conn: &mut sqlx::SqliteConnection = &mut *tx;
                $body
            }
            $crate::db::DbTx::MySql(tx) => {
                let $conn: &mut sqlx::MySqlConnection = &mut *tx;
                $body
            }
        }
    };
}

impl Db {
    /// Begins a write transaction. On SQLite it is `BEGIN IMMEDIATE`: the
    /// write lock is taken up front, so a transaction that reads before it
    /// writes can never fail on a lock upgrade.
    pub async fn begin(&self) -> Result<DbTx, sqlx::Error> {
        match self {
            Self::Sqlite(sqlite) => sqlite
                .writer
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map(DbTx::Sqlite),
            Self::MySql(mysql) => mysql.pool.begin().await.map(DbTx::MySql),
        }
    }
}

impl Db {
    /// Begins a read-only transaction in which every read sees one
    /// snapshot, so that what a page shows from several queries agrees.
    /// SQLite (WAL) takes the snapshot at the first read, on a reader
    /// connection; MySQL at once, with its consistent snapshot.
    pub async fn begin_read(&self) -> Result<DbTx, sqlx::Error> {
        match self {
            Self::Sqlite(sqlite) => sqlite.reader.begin().await.map(DbTx::Sqlite),
            Self::MySql(mysql) => mysql
                .pool
                .begin_with("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
                .await
                .map(DbTx::MySql),
        }
    }
}

impl DbTx {
    /// Which engine this transaction runs on.
    pub fn backend(&self) -> Backend {
        match self {
            Self::Sqlite(_) => Backend::Sqlite,
            Self::MySql(_) => Backend::MySql,
        }
    }

    /// Commits.
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Self::Sqlite(tx) => tx.commit().await,
            Self::MySql(tx) => tx.commit().await,
        }
    }

    /// Rolls back explicitly (dropping does the same, later).
    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        match self {
            Self::Sqlite(tx) => tx.rollback().await,
            Self::MySql(tx) => tx.rollback().await,
        }
    }
}
