//! One claim: the waiting requests of a partition become one batch, in one
//! short transaction (SPEC §7):
//!
//! 1. insert the batch at the next place of the partition's train, when the
//!    train has fewer than `batch.max_in_flight` batches (I1: with 1, the
//!    partition's one active batch); a duplicate key on the place means
//!    "occupied", and so does an InnoDB deadlock or lock-wait timeout on that
//!    insert, which concurrent inserts produce instead of clean duplicate-key
//!    errors: a normal answer, tried again next round;
//! 2. a plain (non-locking) read of the oldest waiting requests, created
//!    before the database's now, so enqueues never wait (I3), whose time
//!    has come (`notBefore`) and whose target's change windows are open:
//!    the group of the first of them;
//! 3. the batch's number, the next of its project's (the counter row stays
//!    locked until commit);
//! 4. the members' operations and bindings, locked in that order and moved
//!    to their batch step (the lock order of every store write);
//! 5. the guarded claim UPDATE, whose affected rows must equal the rows read
//!    (I2), else everything rolls back;
//! 6. membership history, in multi-row inserts;
//! 7. nothing to claim → roll back, so no empty batch holds the slot, and
//!    no number is used up.
//!
//! No lock is held beyond this transaction: a batch runs for minutes, its
//! slot is data (the batch's status), not a lock.

use std::collections::HashMap;

use crate::db::batch_queue::{CLAIM_SCAN, Waiting, claim, due_waiting, next_batch_number};
use crate::db::batches::{append_membership, describe_batch};
use crate::db::train::{insert_car, places_taken};
use crate::db::{Db, is_retryable_conflict, is_unique_violation, retrying};
use crate::domain::{BindingStatus, StepStatus};
use crate::store::{Change, StoreError, StoreTx, move_members};

use super::pace::Pace;
use super::split::sibling;

/// What a claim did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// A new batch with these members.
    Batch {
        /// Its id.
        id: i64,
        /// Its number among its project's batches.
        number: i64,
        /// Its operations.
        members: Vec<String>,
    },
    /// The partition's train is full, or its next place was just taken.
    SlotOccupied,
    /// Nothing was waiting.
    Empty,
    /// Another claimer took some of the rows read, or the batch row the
    /// claim inserted is not there; the claim was rolled back.
    Raced,
}

/// How big a batch may be, and how many may be in flight at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Room<'a> {
    /// At most this many members (`batch.max_requests`).
    pub members: u32,
    /// At most this many active batches in the partition's train
    /// (`batch.max_in_flight`).
    pub in_flight: u32,
    /// Whose ordinary requests may board now; the halves of a failed batch
    /// always may.
    pub ordinary: Ordinary<'a>,
}

/// Whose ordinary requests (not the halves of a failed batch) may board.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Ordinary<'a> {
    /// Anyone's: one batch at a time takes the oldest waiting requests,
    /// whichever they are, and the urgent lane is never held.
    Unpaced,
    /// As the pace of each project's train says: a project's requests
    /// board when it lets a batch board, or when they fill a batch (the
    /// pace is there to let a batch grow, and a full one cannot); a
    /// project it was not read for waits for the next round.
    Paced(&'a HashMap<String, Pace>),
}

/// Whether a target's change windows let a request land now.
pub type OpenNow<'a> = &'a (dyn Fn(&str) -> bool + Sync);

/// Claims up to `room.members` waiting requests of `partition_key` into a
/// new batch at the back of its train, of targets `open` lets land now. A
/// claim that lost a lock race is tried again whole.
pub async fn claim_batch(
    db: &Db,
    partition_key: &str,
    room: Room<'_>,
    open: OpenNow<'_>,
) -> Result<Claimed, StoreError> {
    retrying(|| claim_once(db, partition_key, room, open)).await
}

async fn claim_once(
    db: &Db,
    partition_key: &str,
    room: Room<'_>,
    open: OpenNow<'_>,
) -> Result<Claimed, StoreError> {
    let mut tx = StoreTx::begin(db).await?;
    match claim_in(&mut tx, partition_key, room, open).await {
        Ok(Claimed::Batch {
            id,
            number,
            members,
        }) => {
            tx.commit().await?;
            tracing::info!(
                batch = id,
                number,
                members = members.len(),
                "merge batch claimed"
            );
            super::metrics::record_claimed(members.len());
            Ok(Claimed::Batch {
                id,
                number,
                members,
            })
        }
        Ok(other) => {
            tx.rollback().await?;
            Ok(other)
        }
        Err(err) => {
            tx.rollback().await?;
            Err(err)
        }
    }
}

/// [`claim_batch`] inside the caller's transaction; the caller commits only
/// a [`Claimed::Batch`] and rolls back everything else.
pub async fn claim_in(
    tx: &mut StoreTx,
    partition_key: &str,
    room: Room<'_>,
    open: OpenNow<'_>,
) -> Result<Claimed, StoreError> {
    let (active, last) = places_taken(tx.db(), partition_key).await?;
    if active >= i64::from(room.in_flight.max(1)) {
        return Ok(Claimed::SlotOccupied);
    }
    let batch_id = match insert_car(tx.db(), partition_key, last + 1).await {
        Ok(id) => id,
        Err(err) if is_unique_violation(&err) || is_retryable_conflict(&err) => {
            return Ok(Claimed::SlotOccupied);
        }
        Err(err) => return Err(err.into()),
    };
    let due: Vec<Waiting> = due_waiting(tx.db(), partition_key, CLAIM_SCAN)
        .await?
        .into_iter()
        .filter(|waiting| open(&waiting.target_key))
        .collect();
    let Some(first) = first_to_board(&due, active, room).cloned() else {
        return Ok(Claimed::Empty);
    };
    let waiting: Vec<Waiting> = due
        .into_iter()
        .filter(|w| w.project == first.project && w.split_group == first.split_group)
        .take(room.members.max(1) as usize)
        .collect();
    let ids: Vec<i64> = waiting.iter().map(|w| w.id).collect();
    let members: Vec<String> = waiting.into_iter().map(|w| w.operation_id).collect();
    // Numbered per GitLab project, not per partition: a batch's members are
    // all of one project (the group above), its MR and branch live in that
    // project's repository, and the partition is "" for every project
    // unless `batch.partition_by_project` is on, which a reload may switch.
    // The slot is taken before the project is known (from the first waiting
    // request), so `insert_batch` leaves it blank and `describe_batch` sets
    // it with the number, in this transaction. No other transaction locks a
    // counter row, and claims take it before their members, so it adds no
    // lock cycle.
    let number = next_batch_number(tx.db(), &first.project).await?;
    // Described before any member points at it: a batch row that is not
    // there (a database that lost this transaction's first write, as a
    // Galera node did once) is never given members.
    let described = describe_batch(
        tx.db(),
        batch_id,
        &first.project,
        &first.split_group,
        number,
    )
    .await?;
    if described != 1 {
        tracing::error!(
            batch = batch_id,
            "the merge batch this claim inserted is not there; the claim is rolled back"
        );
        return Ok(Claimed::Raced);
    }
    // The members' operations and bindings are locked (by the move) before
    // their waiting rows (by the claim), as a single transition that takes
    // a request out of the waiting set locks them.
    let message = format!("in merge batch #{number}");
    let change = Change {
        step: StepStatus::MrCreating,
        message: Some(&message),
        actor: "merge-queue",
    };
    move_members(
        tx,
        &members,
        &[BindingStatus::MrCreating],
        None,
        change,
        None,
    )
    .await?;
    if claim(tx.db(), batch_id, &ids).await? != ids.len() as u64 {
        return Ok(Claimed::Raced);
    }
    append_membership(tx.db(), batch_id, &members, "CLAIMED", None).await?;
    Ok(Claimed::Batch {
        id: batch_id,
        number,
        members,
    })
}

/// The waiting request whose group boards next: in a train of one, the
/// oldest. In a deeper train the halves of failed batches are never held,
/// and ordinary requests go first only when they may board now (see
/// [`Ordinary`]) and the train still has a place for every waiting half
/// behind them: the next level of a bisection is then built on their batch,
/// and they need not wait for its last level.
fn first_to_board<'w>(due: &'w [Waiting], active: i64, room: Room<'_>) -> Option<&'w Waiting> {
    if room.in_flight <= 1 {
        return due.first();
    }
    let mut halves: Vec<&str> = due
        .iter()
        .map(|waiting| waiting.split_group.as_str())
        .filter(|group| !group.is_empty())
        .collect();
    halves.sort_unstable();
    halves.dedup();
    let places_left = i64::from(room.in_flight) - active;
    let boards = may_board(due, room);
    let ordinary = due
        .iter()
        .find(|waiting| waiting.split_group.is_empty() && boards(&waiting.project));
    match ordinary {
        Some(ordinary) if (halves.len() as i64) < places_left => Some(ordinary),
        _ => first_half(due),
    }
}

/// The half of a failed batch that boards next: the first one waiting, or
/// when its sibling waits too, half `a` of the two. Half `a` holds the
/// members the failed pipeline's test report named (see
/// [`super::split::halves`]), so it is the one expected to fail, and what
/// boards after the pair is built on half `b`.
fn first_half(due: &[Waiting]) -> Option<&Waiting> {
    let first = due.iter().find(|waiting| !waiting.split_group.is_empty())?;
    let half_a = sibling(&first.split_group).filter(|group| group.ends_with('a'));
    half_a
        .and_then(|group| due.iter().find(|waiting| waiting.split_group == group))
        .or(Some(first))
}

/// Whether the ordinary requests of a project may board now, of those `due`.
fn may_board<'r>(due: &[Waiting], room: Room<'r>) -> impl Fn(&str) -> bool + 'r {
    let mut waiting: HashMap<String, usize> = HashMap::new();
    for ordinary in due.iter().filter(|waiting| waiting.split_group.is_empty()) {
        *waiting.entry(ordinary.project.clone()).or_default() += 1;
    }
    let full = room.members.max(1) as usize;
    move |project| match room.ordinary {
        Ordinary::Unpaced => true,
        Ordinary::Paced(paces) => match paces.get(project) {
            Some(Pace::Boards) => true,
            Some(Pace::Waits(_)) => waiting.get(project).is_some_and(|count| *count >= full),
            None => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::split::in_boarding_order;

    fn waiting(id: i64, group: &str) -> Waiting {
        Waiting {
            id,
            operation_id: format!("op{id}"),
            project: "config/repo".to_owned(),
            split_group: group.to_owned(),
            target_key: "team.access".to_owned(),
        }
    }

    #[test]
    fn halves_board_in_the_order_the_estimate_plays_them() {
        let groups = ["7b", "7a", "7b", "3a/9b", "3a/9a", "7a", "12a", "12b"];
        let mut due: Vec<Waiting> = (0..)
            .zip(groups)
            .map(|(id, group)| waiting(id, group))
            .collect();
        let mut boarded = Vec::new();
        while let Some(next) = first_half(&due) {
            let group = next.split_group.clone();
            due.retain(|waiting| waiting.split_group != group);
            boarded.push(group);
        }
        let mut played: Vec<&str> = Vec::new();
        for group in groups {
            if !played.contains(&group) {
                played.push(group);
            }
        }
        in_boarding_order(&mut played, |group| group);
        assert_eq!(boarded, played);
        assert_eq!(boarded, ["7a", "7b", "3a/9a", "3a/9b", "12a", "12b"]);
    }
}
