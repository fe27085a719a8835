//! Releasing leases by owner: what this run of an instance holds when it
//! shuts down, and what an earlier run on the same seat (host and port) left
//! behind when it died, so its work is taken over at once instead of after
//! the leases run out. Owner ids start with the seat and the run
//! (`<seat>-<life>-<role>`), so both are prefix matches on the lease_owner
//! indexes (migration 0010).

use sqlx::AssertSqlSafe;

use super::{Db, dialect};
use crate::with_pool;

/// Which owners' leases to release: those starting with `prefix`, except
/// those starting with `keep` (the current run, when releasing an earlier one's).
#[derive(Debug, Clone)]
pub struct Owners<'a> {
    /// `<seat>-` or `<seat>-<life>-`.
    pub prefix: &'a str,
    /// `<seat>-<life>-` of the run that must keep its leases, if any.
    pub keep: Option<&'a str>,
}

/// What was released, per kind of lease.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Released {
    /// Operation step leases.
    pub operations: u64,
    /// Merge batch leases.
    pub batches: u64,
    /// Webhook delivery claims, back in the queue with a new version (the
    /// old owner's late answer matches nothing).
    pub deliveries: u64,
    /// Background job leases (`job_lease`): a retention run cut off by the
    /// shutdown is resumed by another instance at once.
    pub jobs: u64,
}

impl Released {
    /// Whether anything was released.
    pub fn any(&self) -> bool {
        self.operations + self.batches + self.deliveries + self.jobs > 0
    }
}

/// Releases every lease `owners` match.
pub async fn release(db: &Db, owners: &Owners<'_>) -> Result<Released, sqlx::Error> {
    let now = dialect::now_ms(db.backend());
    Ok(Released {
        operations: update(
            db,
            "UPDATE operation SET lease_owner = NULL, lease_until = NULL WHERE",
            owners,
        )
        .await?,
        batches: update(
            db,
            "UPDATE merge_batch SET lease_owner = NULL, lease_until = NULL WHERE",
            owners,
        )
        .await?,
        deliveries: update(
            db,
            &format!(
                "UPDATE webhook_delivery SET status = 'queued', version = version + 1, \
                 lease_owner = NULL, lease_until = NULL, updated_at = {now} \
                 WHERE status = 'sending' AND"
            ),
            owners,
        )
        .await?,
        jobs: update(
            db,
            "UPDATE job_lease SET lease_owner = NULL, lease_until = NULL WHERE",
            owners,
        )
        .await?,
    })
}

/// `update_where` (an UPDATE up to its `WHERE`, or to an `AND` after its
/// own conditions) for the rows whose lease `owners` match.
async fn update(db: &Db, update_where: &str, owners: &Owners<'_>) -> Result<u64, sqlx::Error> {
    let sql = match owners.keep {
        Some(_) => format!("{update_where} lease_owner LIKE ? AND lease_owner NOT LIKE ?"),
        None => format!("{update_where} lease_owner LIKE ?"),
    };
    with_pool!(db, writer, |pool| {
        let mut query = sqlx::query(AssertSqlSafe(sql)).bind(format!("{}%", owners.prefix));
        if let Some(keep) = owners.keep {
            query = query.bind(format!("{keep}%"));
        }
        query.execute(pool).await.map(|done| done.rows_affected())
    })
}
