//! Group commit of new requests: submissions that arrive while others are
//! being written are recorded together, in one transaction with one
//! multi-row INSERT per table.
//!
//! SQLite has a single writer connection, so transactions take turns: a
//! request written alone holds the writer for its own `BEGIN`, five INSERTs
//! and `COMMIT`. Written as a group, many requests share one turn. On MySQL
//! (not a Galera node: [`Db::script_pool`]) a group is one [`script`] (one
//! round trip), and the database parses, locks and commits once per group
//! instead of once per request.
//!
//! Only the common case is grouped: a first request for a relation, not
//! refused as busy. Anything else, and any group whose transaction fails
//! (a key or relation taken concurrently, a deadlock), is recorded one by one
//! by [`submit`], which gives each request its own exact answer; a failed
//! group has written nothing, so nothing is recorded twice.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};

use super::first::FirstApplies;
use super::submit::{NewRequest, Submitted, submit};
use super::{StoreError, StoreTx, count_committed_flip, count_flip};
use crate::db::bindings::get_bindings;
use crate::db::{Backend, Db, retrying, script};
use crate::domain::OperationKind;

/// The most requests written in one transaction.
const MAX_GROUP: usize = 32;
/// Groups written at once on SQLite: its one writer connection takes them in
/// turn, so one is written while the next one forms.
const SQLITE_WRITERS: usize = 2;
/// Groups written at once on MySQL, which runs transactions side by side.
/// More made groups smaller without more throughput: with 8, accepted
/// submissions per second fell by a fifth in `benches/api_load.rs`.
const MYSQL_WRITERS: usize = 4;

/// Takes submissions and records them, in groups when they arrive together.
#[derive(Clone)]
pub struct SubmissionQueue {
    sender: mpsc::Sender<Pending>,
}

struct Pending {
    db: Db,
    request: NewRequest,
    reply: oneshot::Sender<Result<Submitted, StoreError>>,
}

impl SubmissionQueue {
    /// Starts the writer. It stops when the last handle is dropped, after
    /// the submissions queued.
    pub fn start() -> Self {
        let (sender, receiver) = mpsc::channel(MAX_GROUP * MYSQL_WRITERS);
        tokio::spawn(collect(receiver));
        Self { sender }
    }

    /// Records `request`, in a group, with the same outcome as [`submit`].
    ///
    /// In `benches/api_load.rs`, grouping took SQLite from about 1,400 to
    /// 3,100–4,400 accepted submissions per second, and MariaDB from about
    /// 2,000 (each request one script) to 3,000–3,800.
    pub async fn submit(&self, db: &Db, request: NewRequest) -> Result<Submitted, StoreError> {
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            db: db.clone(),
            request,
            reply,
        };
        if let Err(mpsc::error::SendError(pending)) = self.sender.send(pending).await {
            return submit(&pending.db, &pending.request).await;
        }
        // The writer drops a reply only if its task died mid-group; the
        // group's transaction then rolled back, so nothing was recorded.
        answer
            .await
            .unwrap_or_else(|_| Err(StoreError::Db(sqlx::Error::WorkerCrashed)))
    }
}

/// Forms groups: the first waiting submission and whatever else arrived
/// while a writer was busy, so groups grow with load and a lone request is
/// written at once.
async fn collect(mut receiver: mpsc::Receiver<Pending>) {
    let sqlite_writers = Arc::new(Semaphore::new(SQLITE_WRITERS));
    let mysql_writers = Arc::new(Semaphore::new(MYSQL_WRITERS));
    while let Some(first) = receiver.recv().await {
        let writers = match first.db.backend() {
            Backend::Sqlite => &sqlite_writers,
            Backend::MySql => &mysql_writers,
        };
        let Ok(writer) = writers.clone().acquire_owned().await else {
            return;
        };
        let mut group = vec![first];
        while group.len() < MAX_GROUP
            && let Ok(next) = receiver.try_recv()
        {
            group.push(next);
        }
        tokio::spawn(async move {
            write_group(group).await;
            drop(writer);
        });
    }
}

async fn write_group(group: Vec<Pending>) {
    metrics::histogram!("changegate_submission_group_size").record(group.len() as f64);
    if group.len() == 1 {
        return one_by_one(group).await;
    }
    let db = group[0].db.clone();
    let (together, alone) = match split(&db, group).await {
        Ok(split) => split,
        Err(group) => return one_by_one(group).await,
    };
    if together.len() > 1 {
        let requests: Vec<&NewRequest> = together.iter().map(|pending| &pending.request).collect();
        match record_together(&db, &requests).await {
            Ok(submitted) => {
                for (pending, submitted) in together.into_iter().zip(submitted) {
                    let _ = pending.reply.send(Ok(submitted));
                }
            }
            Err(err) => {
                tracing::debug!("group of {} recorded one by one: {err}", requests.len());
                one_by_one(together).await;
            }
        }
    } else {
        one_by_one(together).await;
    }
    // After the group, so that a duplicate of a grouped request finds it.
    one_by_one(alone).await;
}

async fn one_by_one(group: Vec<Pending>) {
    for pending in group {
        let outcome = submit(&pending.db, &pending.request).await;
        let _ = pending.reply.send(outcome);
    }
}

/// Splits a group into the requests that can be written together (first
/// requests for relations that have no row, each relation, key and
/// operation id once) and the rest. `Err` gives the group back when the
/// relations cannot be read.
async fn split(db: &Db, group: Vec<Pending>) -> Result<(Vec<Pending>, Vec<Pending>), Vec<Pending>> {
    let relations: Vec<(&str, &str)> = group
        .iter()
        .map(|pending| {
            (
                pending.request.subject_id.as_str(),
                pending.request.target_key.as_str(),
            )
        })
        .collect();
    let existing: HashSet<(String, String)> = match get_bindings(db, &relations).await {
        Ok(rows) => rows
            .into_iter()
            .map(|row| (row.subject_id, row.target_key))
            .collect(),
        Err(err) => {
            tracing::debug!("reading a group's relations failed: {err}");
            return Err(group);
        }
    };
    let mut relations = HashSet::new();
    let mut keys = HashSet::new();
    let mut operations = HashSet::new();
    let (together, alone) = group.into_iter().partition(|pending| {
        let request = &pending.request;
        let relation = (request.subject_id.clone(), request.target_key.clone());
        request.kind == OperationKind::Apply
            && !request.busy
            && !existing.contains(&relation)
            && relations.insert(relation)
            && operations.insert(request.operation_id)
            && request
                .idempotency
                .as_ref()
                .is_none_or(|claim| keys.insert((request.requested_by.clone(), claim.key.clone())))
    });
    Ok((together, alone))
}

/// Records first requests for relations without a row, all or none, as
/// [`submit`] records each: as one script where the database takes them. A
/// group that lost a lock race is written again whole, before falling back
/// to one by one.
async fn record_together(db: &Db, requests: &[&NewRequest]) -> Result<Vec<Submitted>, StoreError> {
    retrying(|| record_together_once(db, requests)).await
}

async fn record_together_once(
    db: &Db,
    requests: &[&NewRequest],
) -> Result<Vec<Submitted>, StoreError> {
    let rows = FirstApplies::new(requests);
    let statements: Vec<_> = rows
        .statements(db.backend(), requests)
        .into_iter()
        .map(|(_, statement)| statement)
        .collect();
    if let Some(pool) = db.script_pool() {
        script::run_transaction(pool, &statements)
            .await
            .map_err(|failure| StoreError::Db(failure.error))?;
        for flip in &rows.flips {
            count_committed_flip(flip.from, flip.to);
        }
        return Ok(rows.submitted());
    }
    let mut tx = StoreTx::begin(db).await?;
    let outcome = async {
        for statement in statements {
            statement.execute(tx.db()).await?;
        }
        for flip in &rows.flips {
            count_flip(&mut tx, flip);
        }
        Ok(rows.submitted())
    }
    .await;
    tx.finish(outcome).await
}
