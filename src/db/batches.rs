//! `merge_batch`, `merge_batch_request` and `merge_batch_history`: the batch
//! merge queue's batches, their members and their history (SPEC §7); the
//! waiting set and the claim are in [`super::batch_queue`]. Each query names
//! the index it uses.

use std::time::Duration;

use chrono::NaiveDateTime;
use sqlx::AssertSqlSafe;

use super::outage::OutageClock;
use super::{
    Db, DbTx, IN_LIST_CHUNK, Reader, dialect, is_retryable_conflict, placeholders, retrying,
};
use crate::{with_pool, with_reader, with_tx};

/// A batch.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct BatchRow {
    /// Its id: internal, for links and references between rows.
    pub id: i64,
    /// Its number among its project's batches, 1, 2, 3, … without gaps:
    /// what people see (see [`BatchRow::shown_number`]). `None` only for a
    /// batch a release before migration 0020 claimed after that migration
    /// ran, while it was being replaced.
    pub number: Option<i64>,
    /// `RUNNING`, `SUCCEEDED`, `FAILED` or `BLOCKED`.
    pub status: String,
    /// The partition whose train it is in.
    pub partition_key: String,
    /// Its place in its partition's train: unique among the partition's
    /// active batches, the front's the smallest (migration 0021).
    pub train_position: i64,
    /// The batch of the same project it was built on, if it was built on
    /// one (its branch starts at that batch's head).
    pub ahead_batch_id: Option<i64>,
    /// The commit its branch starts from: the head of the batch ahead, or
    /// the target branch's head (`None` for a batch opened one at a time).
    pub base_sha: Option<String>,
    /// The head its MR was opened with: what its pipeline tests.
    pub head_sha: Option<String>,
    /// How often it was built again (the batch ahead failed, or the target
    /// branch moved); each build has a branch of its own.
    pub rebuilds: i32,
    /// When its MR opened (its pipeline started), database time.
    pub opened_at: Option<NaiveDateTime>,
    /// When its pipeline passed.
    pub passed_at: Option<NaiveDateTime>,
    /// When it started merging (its turn came).
    pub merging_at: Option<NaiveDateTime>,
    /// The GitLab project of its MR.
    pub project: String,
    /// The half of a failed batch it retries (`""` for a first try).
    pub split_group: String,
    /// `OPENING`, `PIPELINE` or `MERGING` while it runs.
    pub phase: String,
    /// Its MR, once opened.
    pub mr_iid: Option<i64>,
    /// The MR's address.
    pub mr_url: Option<String>,
    /// The head that was merged (the one whose pipeline passed).
    pub merge_sha: Option<String>,
    /// The commit the merge made on the target branch (what deploys name).
    pub merge_commit_sha: Option<String>,
    /// Polls of the current phase.
    pub polls: i32,
    /// Why it ended, when it failed.
    pub message: Option<String>,
    /// What keeps it from progressing right now, if anything (migration 0009).
    pub obstacle: Option<String>,
    /// Guards every write.
    pub version: i64,
    /// Database time of creation.
    pub created_at: NaiveDateTime,
    /// Database time of the last write.
    pub updated_at: NaiveDateTime,
}

pub(super) const COLUMNS: &str = "id, number, status, partition_key, train_position, \
    ahead_batch_id, base_sha, head_sha, rebuilds, opened_at, passed_at, merging_at, project, split_group, phase, mr_iid, mr_url, \
    merge_sha, merge_commit_sha, polls, message, obstacle, version, created_at, updated_at";

impl BatchRow {
    /// The number titles, branches and messages call the batch by: its
    /// number, or for a batch an earlier release claimed without one, its
    /// id, which that release named it by (in its MR's title and branch).
    pub fn shown_number(&self) -> i64 {
        shown_number(self.id, self.number)
    }

    /// Whether its pipeline has yet to pass: it is being opened, or its
    /// pipeline runs.
    pub fn untested(&self) -> bool {
        matches!(self.phase.as_str(), "OPENING" | "PIPELINE")
    }
}

/// [`BatchRow::shown_number`] of the batch `id` numbered `number`.
pub fn shown_number(id: i64, number: Option<i64>) -> i64 {
    number.unwrap_or(id)
}

/// The merge batch an operation is (or was last) in, as its views name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InBatch {
    /// The batch's id, for links.
    pub id: i64,
    /// Its [`BatchRow::shown_number`].
    pub number: i64,
    /// What keeps it from progressing, if anything.
    pub obstacle: Option<String>,
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// What an insert needs from either backend's query result: the id.
pub(super) trait LastInsertId {
    /// The id the insert generated.
    fn last_insert_id_of(&self) -> i64;
}

impl LastInsertId for sqlx::sqlite::SqliteQueryResult {
    fn last_insert_id_of(&self) -> i64 {
        self.last_insert_rowid()
    }
}

impl LastInsertId for sqlx::mysql::MySqlQueryResult {
    fn last_insert_id_of(&self) -> i64 {
        i64::try_from(self.last_insert_id()).unwrap_or(i64::MAX)
    }
}

/// Sets what the claim learned from its first member: the project (whose
/// numbers the batch takes `number` from) and the split group; the rows
/// affected (1, or 0 when the batch row is not there).
pub async fn describe_batch(
    tx: &mut DbTx,
    batch_id: i64,
    project: &str,
    split_group: &str,
    number: i64,
) -> Result<u64, sqlx::Error> {
    let sql = "UPDATE merge_batch SET project = ?, split_group = ?, number = ? WHERE id = ?";
    with_tx!(tx, |conn| {
        sqlx::query(sql)
            .bind(project)
            .bind(split_group)
            .bind(number)
            .bind(batch_id)
            .execute(conn)
            .await
            .map(|done| done.rows_affected())
    })
}

/// Appends membership history, one row per operation, in multi-row inserts.
pub async fn append_membership(
    tx: &mut DbTx,
    batch_id: i64,
    operation_ids: &[String],
    event: &str,
    detail: Option<&str>,
) -> Result<(), sqlx::Error> {
    for chunk in operation_ids.chunks(IN_LIST_CHUNK) {
        let sql = format!(
            "INSERT INTO merge_batch_history (batch_id, operation_id, event, detail) VALUES {}",
            vec!["(?, ?, ?, ?)"; chunk.len()].join(", ")
        );
        with_tx!(tx, |conn| {
            let mut query = sqlx::query(AssertSqlSafe(sql));
            for id in chunk {
                query = query
                    .bind(batch_id)
                    .bind(id.as_str())
                    .bind(event)
                    .bind(detail);
            }
            query.execute(&mut *conn).await.map(|_| ())
        })?;
    }
    Ok(())
}

/// The operations of a batch, in id order. Served by `ix_merge_batch_request_batch`.
pub async fn members(db: &Db, batch_id: i64) -> Result<Vec<String>, sqlx::Error> {
    let sql =
        "SELECT operation_id FROM merge_batch_request WHERE batch_id = ? ORDER BY operation_id";
    with_pool!(db, reader, |pool| {
        sqlx::query_scalar(sql).bind(batch_id).fetch_all(pool).await
    })
}

/// The members of a batch still in the merge queue's live set, in id
/// order: one an operator stopped is no longer written, checked or moved
/// with its batch.
pub async fn live_members(
    reader: impl Into<Reader<'_>>,
    batch_id: i64,
) -> Result<Vec<String>, sqlx::Error> {
    let live = super::status_list(crate::domain::IN_MERGE_QUEUE);
    let sql = format!(
        "SELECT r.operation_id FROM merge_batch_request r \
         JOIN binding b ON b.operation_id = r.operation_id \
         WHERE r.batch_id = ? AND b.status IN ({live}) ORDER BY r.operation_id"
    );
    with_reader!(reader.into(), |exec| {
        sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(batch_id)
            .fetch_all(exec)
            .await
    })
}

/// The batch an operation is in, if it is in one now.
pub async fn batch_of(
    reader: impl Into<Reader<'_>>,
    operation_id: &str,
) -> Result<Option<i64>, sqlx::Error> {
    let sql = "SELECT batch_id FROM merge_batch_request WHERE operation_id = ?";
    let found: Option<Option<i64>> = with_reader!(reader.into(), |exec| {
        sqlx::query_scalar(sql)
            .bind(operation_id)
            .fetch_optional(exec)
            .await
    })?;
    Ok(found.flatten())
}

/// One batch.
pub async fn get_batch(
    reader: impl Into<Reader<'_>>,
    batch_id: i64,
) -> Result<Option<BatchRow>, sqlx::Error> {
    let sql = format!("SELECT {COLUMNS} FROM merge_batch WHERE id = ?");
    with_reader!(reader.into(), |exec| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(batch_id)
            .fetch_optional(exec)
            .await
    })
}

/// The [`BatchRow::shown_number`] of each of `batch_ids` that exists, one
/// query per chunk (primary key).
pub async fn shown_numbers(
    db: &Db,
    batch_ids: &[i64],
) -> Result<std::collections::HashMap<i64, i64>, sqlx::Error> {
    let mut found = std::collections::HashMap::new();
    for chunk in batch_ids.chunks(IN_LIST_CHUNK) {
        let sql = format!(
            "SELECT id, number FROM merge_batch WHERE id IN ({})",
            placeholders(chunk.len())
        );
        let rows: Vec<(i64, Option<i64>)> = with_pool!(db, reader, |pool| {
            let mut query = sqlx::query_as(AssertSqlSafe(sql));
            for id in chunk {
                query = query.bind(*id);
            }
            query.fetch_all(pool).await
        })?;
        found.extend(
            rows.into_iter()
                .map(|(id, number)| (id, shown_number(id, number))),
        );
    }
    Ok(found)
}

/// Batches newest first, below `before_id` when given (primary key).
pub async fn list_batches(
    db: &Db,
    before_id: Option<i64>,
    limit: u32,
) -> Result<Vec<BatchRow>, sqlx::Error> {
    let sql = format!("SELECT {COLUMNS} FROM merge_batch WHERE id < ? ORDER BY id DESC LIMIT ?");
    with_pool!(db, reader, |pool| {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(before_id.unwrap_or(i64::MAX))
            .bind(limit)
            .fetch_all(pool)
            .await
    })
}

/// RUNNING batches whose lease is free, expired, or held by `owner` (the
/// caller's own, which it holds only during a round: one it holds between
/// rounds is one it could not give back). Served by
/// `ix_merge_batch_status_updated`.
pub async fn runnable(db: &Db, owner: &str) -> Result<Vec<i64>, sqlx::Error> {
    let now = dialect::now_ms(db.backend());
    let sql = format!(
        "SELECT id FROM merge_batch WHERE status = 'RUNNING' \
         AND (lease_owner IS NULL OR lease_until < {now} OR lease_owner = ?) ORDER BY id"
    );
    with_pool!(db, reader, |pool| {
        sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(owner)
            .fetch_all(pool)
            .await
    })
}

/// RUNNING batches started more than `older_than` ago: the timeout sweep's
/// work (polls keep `updated_at` fresh, so the start is what counts).
/// Served by `ix_merge_batch_status_updated` (status prefix).
pub async fn stuck(db: &Db, older_than: Duration) -> Result<Vec<i64>, sqlx::Error> {
    let sql = format!(
        "SELECT id FROM merge_batch WHERE status = 'RUNNING' AND created_at < {} ORDER BY id",
        dialect::now_minus_ms(db.backend())
    );
    with_pool!(db, reader, |pool| {
        sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(millis(older_than))
            .fetch_all(pool)
            .await
    })
}

/// Takes a batch's lease by compare-and-swap, like an operation's.
pub async fn acquire_batch_lease(
    db: &Db,
    batch_id: i64,
    owner: &str,
    lease: Duration,
) -> Result<bool, sqlx::Error> {
    let backend = db.backend();
    let sql = format!(
        "UPDATE merge_batch SET lease_owner = ?, lease_until = {} WHERE id = ? AND status = 'RUNNING' \
         AND (lease_owner IS NULL OR lease_until < {} OR lease_owner = ?)",
        dialect::now_plus_ms(backend),
        dialect::now_ms(backend)
    );
    let taken = with_pool!(db, writer, |pool| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(owner)
            .bind(millis(lease))
            .bind(batch_id)
            .bind(owner)
            .execute(pool)
            .await
            .map(|done| done.rows_affected() == 1)
    });
    // Racing a write that holds the batch row, InnoDB may pick this UPDATE
    // as a deadlock victim: it was rolled back whole, so the lease is not
    // taken, and the caller tries again as it would for a held lease.
    match taken {
        Err(err) if is_retryable_conflict(&err) => Ok(false),
        other => other,
    }
}

/// Gives a batch's lease back. A release picked as a deadlock victim is
/// tried again ([`retrying`]): a lease left held keeps every other holder
/// waiting until it expires.
pub async fn release_batch_lease(db: &Db, batch_id: i64, owner: &str) -> Result<(), sqlx::Error> {
    let sql = "UPDATE merge_batch SET lease_owner = NULL, lease_until = NULL WHERE id = ? AND lease_owner = ?";
    retrying(|| async {
        with_pool!(db, writer, |pool| {
            sqlx::query(sql)
                .bind(batch_id)
                .bind(owner)
                .execute(pool)
                .await
                .map(|_| ())
        })
    })
    .await
}

/// What a guarded batch write changes.
#[derive(Debug, Clone, Default)]
pub struct BatchChange<'a> {
    /// New status.
    pub status: Option<&'a str>,
    /// New phase.
    pub phase: Option<&'a str>,
    /// The MR, once opened.
    pub mr: Option<(i64, Option<&'a str>)>,
    /// The head the MR was opened with (what its pipeline tests).
    pub head: Option<&'a str>,
    /// A moment of its run to record, at the database's now.
    pub stamp: Option<Stamp>,
    /// The merged head.
    pub merge_sha: Option<&'a str>,
    /// The merge commit.
    pub merge_commit_sha: Option<&'a str>,
    /// Why.
    pub message: Option<&'a str>,
    /// Count one more poll (else polls start again from zero).
    pub polled: bool,
    /// What keeps it from progressing; every other write clears it.
    pub obstacle: Option<&'a str>,
    /// The outage clock: stopped by default, as a write follows an answer.
    pub outage: OutageClock,
}

/// A moment of a batch's run, recorded for the queue's expected times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stamp {
    /// Its MR opened: its pipeline started.
    Opened,
    /// Its pipeline passed.
    Passed,
    /// Its turn to merge came (its pipeline passed, if not recorded yet).
    Merging,
}

impl Stamp {
    fn assignment(self, now: &str) -> String {
        match self {
            Self::Opened => format!("opened_at = {now}"),
            Self::Passed => format!("passed_at = {now}"),
            Self::Merging => {
                format!("merging_at = {now}, passed_at = COALESCE(passed_at, {now})")
            }
        }
    }
}

/// Writes `change` if the batch is still at `version` (and RUNNING); the
/// affected rows: 1, or 0 when another writer got there first.
pub async fn update_batch(
    tx: &mut DbTx,
    batch_id: i64,
    version: i64,
    change: &BatchChange<'_>,
) -> Result<u64, sqlx::Error> {
    let mut sets = vec![
        "version = version + 1".to_owned(),
        format!("updated_at = {}", dialect::now_ms(tx.backend())),
        "obstacle = ?".to_owned(),
        change.outage.assignment(tx.backend()),
    ];
    if let Some(stamp) = change.stamp {
        sets.push(stamp.assignment(dialect::now_ms(tx.backend())));
    }
    sets.push(
        if change.polled {
            "polls = polls + 1"
        } else {
            "polls = 0"
        }
        .to_owned(),
    );
    for (column, present) in [
        ("status", change.status.is_some()),
        ("phase", change.phase.is_some()),
        ("mr_iid", change.mr.is_some()),
        ("mr_url", change.mr.is_some()),
        ("head_sha", change.head.is_some()),
        ("merge_sha", change.merge_sha.is_some()),
        ("merge_commit_sha", change.merge_commit_sha.is_some()),
        ("message", change.message.is_some()),
    ] {
        if present {
            sets.push(format!("{column} = ?"));
        }
    }
    let sql = format!(
        "UPDATE merge_batch SET {} WHERE id = ? AND version = ? AND status = 'RUNNING'",
        sets.join(", ")
    );
    with_tx!(tx, |conn| {
        let mut query = sqlx::query(AssertSqlSafe(sql)).bind(change.obstacle);
        if let Some(status) = change.status {
            query = query.bind(status);
        }
        if let Some(phase) = change.phase {
            query = query.bind(phase);
        }
        if let Some((iid, url)) = change.mr {
            query = query.bind(iid).bind(url);
        }
        if let Some(head) = change.head {
            query = query.bind(head);
        }
        if let Some(sha) = change.merge_sha {
            query = query.bind(sha);
        }
        if let Some(sha) = change.merge_commit_sha {
            query = query.bind(sha);
        }
        if let Some(message) = change.message {
            query = query.bind(message);
        }
        query
            .bind(batch_id)
            .bind(version)
            .execute(conn)
            .await
            .map(|done| done.rows_affected())
    })
}

/// Records the merged head on every member of a batch.
pub async fn record_merged_sha(tx: &mut DbTx, batch_id: i64, sha: &str) -> Result<(), sqlx::Error> {
    let sql = "UPDATE merge_batch_request SET merged_sha = ? WHERE batch_id = ?";
    with_tx!(tx, |conn| {
        sqlx::query(sql)
            .bind(sha)
            .bind(batch_id)
            .execute(conn)
            .await
            .map(|_| ())
    })
}

/// One membership event.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MembershipRow {
    /// The operation.
    pub operation_id: String,
    /// `CLAIMED`, `MERGED`, `RELEASED`, `SPLIT` or `FAILED`.
    pub event: String,
    /// The split group, the merged head, or a reason.
    pub detail: Option<String>,
    /// When.
    pub created_at: NaiveDateTime,
}

/// A batch's membership history, oldest first. Served by `ix_merge_batch_history_batch`.
pub async fn membership_history(db: &Db, batch_id: i64) -> Result<Vec<MembershipRow>, sqlx::Error> {
    let sql = "SELECT operation_id, event, detail, created_at FROM merge_batch_history \
               WHERE batch_id = ? ORDER BY id";
    with_pool!(db, reader, |pool| {
        sqlx::query_as(sql).bind(batch_id).fetch_all(pool).await
    })
}

/// Whether an operator froze the queue (`PUT /admin/v1/batches/freeze`).
pub async fn frozen_by_operator(db: &Db) -> Result<bool, sqlx::Error> {
    let sql = "SELECT frozen FROM merge_queue_control WHERE id = 1";
    let frozen: Option<bool> = with_pool!(db, reader, |pool| {
        sqlx::query_scalar(sql).fetch_optional(pool).await
    })?;
    Ok(frozen.unwrap_or(false))
}

/// Sets the operators' freeze switch, in the caller's transaction.
pub async fn set_frozen(
    tx: &mut DbTx,
    frozen: bool,
    reason: Option<&str>,
    operator: &str,
) -> Result<(), sqlx::Error> {
    let sql = format!(
        "UPDATE merge_queue_control SET frozen = ?, reason = ?, updated_by = ?, updated_at = {} WHERE id = 1",
        dialect::now_ms(tx.backend())
    );
    with_tx!(tx, |conn| {
        sqlx::query(AssertSqlSafe(sql))
            .bind(frozen)
            .bind(reason)
            .bind(operator)
            .execute(conn)
            .await
            .map(|_| ())
    })
}

/// The batch each of `operation_ids` is (or was last) in, one query per
/// chunk. Served by `uk_merge_batch_request_operation`.
pub async fn batches_of(
    db: &Db,
    operation_ids: &[&str],
) -> Result<std::collections::HashMap<String, InBatch>, sqlx::Error> {
    let mut found = std::collections::HashMap::new();
    for chunk in operation_ids.chunks(IN_LIST_CHUNK) {
        let sql = format!(
            "SELECT r.operation_id, r.batch_id, b.number, b.obstacle FROM merge_batch_request r \
             JOIN merge_batch b ON b.id = r.batch_id WHERE r.operation_id IN ({})",
            placeholders(chunk.len())
        );
        let rows: Vec<(String, i64, Option<i64>, Option<String>)> =
            with_pool!(db, reader, |pool| {
                let mut query = sqlx::query_as(AssertSqlSafe(sql));
                for id in chunk {
                    query = query.bind(*id);
                }
                query.fetch_all(pool).await
            })?;
        found.extend(rows.into_iter().map(|(operation, id, number, obstacle)| {
            let number = shown_number(id, number);
            (
                operation,
                InBatch {
                    id,
                    number,
                    obstacle,
                },
            )
        }));
    }
    Ok(found)
}

/// Whether an operation is a member of a running batch (which moves it;
/// nothing else may). Served by `uk_merge_batch_request_operation` and the
/// batch's primary key.
pub async fn in_running_batch(db: &Db, operation_id: &str) -> Result<bool, sqlx::Error> {
    let sql = "SELECT COUNT(*) FROM merge_batch_request r JOIN merge_batch b ON b.id = r.batch_id \
               WHERE r.operation_id = ? AND b.status = 'RUNNING'";
    let count: i64 = with_pool!(db, reader, |pool| {
        sqlx::query_scalar(sql)
            .bind(operation_id)
            .fetch_one(pool)
            .await
    })?;
    Ok(count > 0)
}
