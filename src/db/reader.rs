//! Reads that run either on the pools or inside a transaction, written
//! once: a caller that needs several reads to agree passes a read
//! snapshot ([`Db::begin_read`]), the others pass the database.

use super::{Backend, Db, DbTx};

/// Where a read runs.
#[derive(Debug)]
pub enum Reader<'a> {
    /// On the pools (SQLite's reader pool), each statement on its own.
    Db(&'a Db),
    /// Inside an open transaction, on its connection.
    Tx(&'a mut DbTx),
}

impl Reader<'_> {
    /// Which engine the read runs on.
    pub fn backend(&self) -> Backend {
        match self {
            Self::Db(db) => db.backend(),
            Self::Tx(tx) => tx.backend(),
        }
    }
}

impl<'a> From<&'a Db> for Reader<'a> {
    fn from(db: &'a Db) -> Self {
        Self::Db(db)
    }
}

impl<'a> From<&'a mut DbTx> for Reader<'a> {
    fn from(tx: &'a mut DbTx) -> Self {
        Self::Tx(tx)
    }
}

/// Expands `$body` once per backend and place with `$exec` bound to an
/// executor: the pool, or the transaction's connection. `$body` runs one
/// statement with `$exec`.
#[macro_export]
macro_rules! with_reader {
    ($reader:expr, |$exec:ident| $body:expr) => {
        match $reader {
            $crate::db::Reader::Db($crate::db::Db::Sqlite(sqlite)) => {
                let $exec = &sqlite.reader;
                $body
            }
            $crate::db::Reader::Db($crate::db::Db::MySql(mysql)) => {
                let $exec = &mysql.pool;
                $body
            }
            $crate::db::Reader::Tx($crate::db::DbTx::Sqlite(tx)) => {
                let $exec: &mut sqlx::SqliteConnection = &mut *tx;
                $body
            }
            $crate::db::Reader::Tx($crate::db::DbTx::MySql(tx)) => {
                let $exec: &mut sqlx::MySqlConnection = &mut *tx;
                $body
            }
        }
    };
}
