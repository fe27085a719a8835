//! An online copy of the embedded SQLite database: `VACUUM INTO` reads one
//! consistent snapshot (a read transaction, so the service keeps writing)
//! and writes it, compacted, to a new file. MySQL has its own tools
//! (`mysqldump --single-transaction`; see docs/src/how-to/backups-upgrades.md).

use std::path::Path;

use super::Db;

/// Why no copy was made.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The database is not SQLite.
    #[error(
        "changegate backup copies a SQLite database; for MySQL use mysqldump --single-transaction (see the manual, How-to: Backups and upgrades)"
    )]
    NotSqlite,
    /// The target exists: a copy never overwrites anything.
    #[error("{0} already exists: name a new file")]
    Exists(String),
    /// SQLite could not write the copy.
    #[error("cannot write the copy: {0}")]
    Write(#[source] sqlx::Error),
}

/// Writes a consistent copy of `db` to the new file `target`.
pub async fn backup_sqlite(db: &Db, target: &Path) -> Result<(), BackupError> {
    let Db::Sqlite(sqlite) = db else {
        return Err(BackupError::NotSqlite);
    };
    if target.exists() {
        return Err(BackupError::Exists(target.display().to_string()));
    }
    sqlx::query("VACUUM INTO ?")
        .bind(target.to_string_lossy().into_owned())
        .execute(&sqlite.reader)
        .await
        .map(drop)
        .map_err(BackupError::Write)
}
