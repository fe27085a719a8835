//! Moving many operations at once (the members of a merge batch) with
//! set-based SQL: a locking read and an UPDATE per table, and one multi-row
//! INSERT per history and outbox, each per chunk of ids in id order; never
//! one round trip per member. The same guards as a single transition apply:
//! the lock order operation → binding, the transition table, and the
//! flip-once rule (a member whose binding is no longer in `from` is skipped,
//! not moved).

use std::collections::HashMap;

use sqlx::AssertSqlSafe;

use super::{Change, Flip, StoreError, StoreTx, count_flip, event_payload};
use crate::db::events::BINDING_STATUS_CHANGED;
use crate::db::{IN_LIST_CHUNK, dialect, placeholders};
use crate::domain::{BindingStatus, StepStatus, check_transition};
use crate::with_tx;

/// A member as locked for the move.
struct Member {
    operation_id: String,
    step_code: i32,
    version: i64,
    subject_id: String,
    target_key: String,
    status: String,
}

/// An operation row as locked.
#[derive(sqlx::FromRow)]
struct LockedOperation {
    operation_id: String,
    step_code: i32,
    version: i64,
}

/// A binding row as locked.
#[derive(sqlx::FromRow)]
struct LockedBinding {
    operation_id: String,
    subject_id: String,
    target_key: String,
    status: String,
}

/// The Merge Request to record on every moved operation.
#[derive(Debug, Clone, Copy)]
pub struct MergeRequestRef<'a> {
    /// Its iid.
    pub iid: i64,
    /// Its web address.
    pub url: Option<&'a str>,
}

/// Moves every operation of `operation_ids` whose binding is in one of
/// `from` to `change.step` (and the binding to `to`, when given), recording
/// `merge_request` on each when given. Returns the operations moved. Their
/// due time is cleared: the members of a batch are driven by their batch,
/// never one by one.
pub async fn move_members(
    tx: &mut StoreTx,
    operation_ids: &[String],
    from: &[BindingStatus],
    to: Option<BindingStatus>,
    change: Change<'_>,
    merge_request: Option<MergeRequestRef<'_>>,
) -> Result<Vec<String>, StoreError> {
    let mut moved = Vec::new();
    let mut sorted: Vec<&String> = operation_ids.iter().collect();
    sorted.sort();
    for chunk in sorted.chunks(IN_LIST_CHUNK) {
        let members = lock_chunk(tx, chunk).await?;
        let members: Vec<Member> = members
            .into_iter()
            .filter(|m| from.iter().any(|status| status.as_str() == m.status))
            .collect();
        if members.is_empty() {
            continue;
        }
        if let Some(to) = to {
            for member in &members {
                let status: BindingStatus =
                    member.status.parse().map_err(|_| StoreError::Preempted)?;
                if status != to {
                    check_transition(status, to)?;
                }
            }
        }
        let ids: Vec<&str> = members.iter().map(|m| m.operation_id.as_str()).collect();
        update_operations(tx, &ids, change, merge_request).await?;
        if let Some(to) = to {
            update_bindings(tx, &ids, from, to).await?;
        }
        append_history(tx, &members, to, change).await?;
        if let Some(to) = to {
            append_events(tx, &members, to, change.step).await?;
        }
        moved.extend(ids.iter().map(|id| (*id).to_owned()));
    }
    Ok(moved)
}

/// Locks the rows of `operation_ids` in the store's one lock order: every
/// operation row first, then every binding row, each in id order. A
/// transaction that moves several subsets of one set (a batch's merged and
/// not-landed members) locks the whole set first, so that it never takes a
/// lock out of that order.
pub async fn lock_members(tx: &mut StoreTx, operation_ids: &[String]) -> Result<(), StoreError> {
    let mut sorted: Vec<&String> = operation_ids.iter().collect();
    sorted.sort();
    for chunk in sorted.chunks(IN_LIST_CHUNK) {
        lock_chunk(tx, chunk).await?;
    }
    Ok(())
}

/// Locks one chunk of sorted ids, operations then bindings (never one JOIN:
/// the optimizer may read either table first), and pairs the rows up.
async fn lock_chunk(tx: &mut StoreTx, ids: &[&String]) -> Result<Vec<Member>, sqlx::Error> {
    let backend = tx.db().backend();
    let operations_sql = format!(
        "SELECT operation_id, step_code, version FROM operation \
         WHERE operation_id IN ({}) ORDER BY operation_id{}",
        placeholders(ids.len()),
        dialect::for_update(backend)
    );
    let operations: Vec<LockedOperation> = with_tx!(tx.db(), |conn| {
        let mut query = sqlx::query_as(AssertSqlSafe(operations_sql));
        for id in ids {
            query = query.bind(id.as_str());
        }
        query.fetch_all(conn).await
    })?;
    let bindings_sql = format!(
        "SELECT operation_id, subject_id, target_key, status FROM binding \
         WHERE operation_id IN ({}) ORDER BY operation_id{}",
        placeholders(ids.len()),
        dialect::for_update(backend)
    );
    let bindings: Vec<LockedBinding> = with_tx!(tx.db(), |conn| {
        let mut query = sqlx::query_as(AssertSqlSafe(bindings_sql));
        for id in ids {
            query = query.bind(id.as_str());
        }
        query.fetch_all(conn).await
    })?;
    // An operation without a binding (superseded by a re-apply) is not a
    // member to move.
    let mut operations: HashMap<String, LockedOperation> = operations
        .into_iter()
        .map(|operation| (operation.operation_id.clone(), operation))
        .collect();
    let members = bindings
        .into_iter()
        .filter_map(|binding| {
            let operation = operations.remove(&binding.operation_id)?;
            Some(Member {
                operation_id: binding.operation_id,
                step_code: operation.step_code,
                version: operation.version,
                subject_id: binding.subject_id,
                target_key: binding.target_key,
                status: binding.status,
            })
        })
        .collect();
    Ok(members)
}

async fn update_operations(
    tx: &mut StoreTx,
    ids: &[&str],
    change: Change<'_>,
    merge_request: Option<MergeRequestRef<'_>>,
) -> Result<(), sqlx::Error> {
    let backend = tx.db().backend();
    let mr = if merge_request.is_some() {
        ", mr_iid = ?, mr_url = ?"
    } else {
        ""
    };
    let sql = format!(
        "UPDATE operation SET step_code = ?, message = ?, version = version + 1, \
         updated_at = {}, due_at = NULL, attempts = 0{mr} WHERE operation_id IN ({})",
        dialect::now_ms(backend),
        placeholders(ids.len())
    );
    with_tx!(tx.db(), |conn| {
        let mut query = sqlx::query(AssertSqlSafe(sql))
            .bind(change.step.code())
            .bind(change.message);
        if let Some(mr) = merge_request {
            query = query.bind(mr.iid).bind(mr.url);
        }
        for id in ids {
            query = query.bind(*id);
        }
        query.execute(conn).await.map(|_| ())
    })
}

async fn update_bindings(
    tx: &mut StoreTx,
    ids: &[&str],
    from: &[BindingStatus],
    to: BindingStatus,
) -> Result<(), StoreError> {
    let backend = tx.db().backend();
    let sql = format!(
        "UPDATE binding SET status = ?, version = version + 1, updated_at = {} \
         WHERE operation_id IN ({}) AND status IN ({})",
        dialect::now_ms(backend),
        placeholders(ids.len()),
        placeholders(from.len())
    );
    let updated = with_tx!(tx.db(), |conn| {
        let mut query = sqlx::query(AssertSqlSafe(sql)).bind(to.as_str());
        for id in ids {
            query = query.bind(*id);
        }
        for status in from {
            query = query.bind(status.as_str());
        }
        query.execute(conn).await.map(|done| done.rows_affected())
    })?;
    // The rows are locked: anything else means the read and the write disagree.
    if updated != ids.len() as u64 {
        return Err(StoreError::Preempted);
    }
    Ok(())
}

async fn append_history(
    tx: &mut StoreTx,
    members: &[Member],
    to: Option<BindingStatus>,
    change: Change<'_>,
) -> Result<(), sqlx::Error> {
    let sql = format!(
        "INSERT INTO operation_history (operation_id, from_step, to_step, from_status, \
         to_status, operation_version, actor, message) VALUES {}",
        vec!["(?, ?, ?, ?, ?, ?, ?, ?)"; members.len()].join(", ")
    );
    with_tx!(tx.db(), |conn| {
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for member in members {
            let moved = to.filter(|to| to.as_str() != member.status);
            query = query
                .bind(member.operation_id.as_str())
                .bind(member.step_code)
                .bind(change.step.code())
                .bind(moved.map(|_| member.status.as_str()))
                .bind(moved.map(BindingStatus::as_str))
                .bind(member.version + 1)
                .bind(change.actor)
                .bind(change.message);
        }
        query.execute(conn).await.map(|_| ())
    })
}

async fn append_events(
    tx: &mut StoreTx,
    members: &[Member],
    to: BindingStatus,
    step: StepStatus,
) -> Result<(), sqlx::Error> {
    let flips: Vec<Flip> = members
        .iter()
        .filter(|member| member.status != to.as_str())
        .map(|member| Flip {
            operation_id: member.operation_id.clone(),
            subject_id: member.subject_id.clone(),
            target_key: member.target_key.clone(),
            from: member.status.parse().ok(),
            to,
        })
        .collect();
    if flips.is_empty() {
        return Ok(());
    }
    let sql = format!(
        "INSERT INTO event (event_type, operation_id, subject_id, target_key, from_status, \
         to_status, payload) VALUES {}",
        vec!["(?, ?, ?, ?, ?, ?, ?)"; flips.len()].join(", ")
    );
    let payloads: Vec<String> = flips.iter().map(|flip| event_payload(flip, step)).collect();
    with_tx!(tx.db(), |conn| {
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for (flip, payload) in flips.iter().zip(&payloads) {
            query = query
                .bind(BINDING_STATUS_CHANGED)
                .bind(flip.operation_id.as_str())
                .bind(flip.subject_id.as_str())
                .bind(flip.target_key.as_str())
                .bind(flip.from.map(BindingStatus::as_str))
                .bind(flip.to.as_str())
                .bind(payload.as_str());
        }
        query.execute(conn).await.map(|_| ())
    })?;
    for flip in &flips {
        count_flip(tx, flip);
    }
    Ok(())
}
