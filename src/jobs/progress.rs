//! The progress gauges alerting rules read: requests in each unfinished
//! status and step (`changegate_operations_in_progress{status, step}`) and
//! the age of the oldest in each status
//! (`changegate_operation_oldest_age_seconds{status}`), refreshed from the
//! database by every instance. Each instance reports the whole database, so
//! across instances take `max()` (not `sum()`): "nothing stuck for over an
//! hour" is `max(changegate_operation_oldest_age_seconds{status!="MERGED"}) > 3600`.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context;

use super::Outcome;
use crate::db::Db;
use crate::db::progress::{InProgress, in_progress};
use crate::domain::StepStatus;

/// The label sets reported last round, so one that emptied reads 0 instead
/// of keeping its last value.
#[derive(Debug, Default)]
pub struct ProgressGauges {
    reported_steps: BTreeSet<(String, String)>,
    reported_statuses: BTreeSet<String>,
}

impl ProgressGauges {
    /// One refresh; the rows it read.
    pub async fn run_once(&mut self, db: &Db) -> anyhow::Result<Vec<InProgress>> {
        let rows = in_progress(db)
            .await
            .context("counting requests in progress")?;
        let mut steps = BTreeMap::new();
        let mut oldest: BTreeMap<String, i64> = BTreeMap::new();
        for row in &rows {
            let step = StepStatus::from_code(row.step_code)
                .map_or_else(|_| row.step_code.to_string(), |s| s.name().to_owned());
            *steps.entry((row.status.clone(), step)).or_insert(0) += row.requests;
            let age = oldest.entry(row.status.clone()).or_insert(0);
            *age = (*age).max(row.oldest_ms);
        }
        for key in self
            .reported_steps
            .difference(&steps.keys().cloned().collect())
        {
            gauge_in_progress(key, 0);
        }
        for status in self
            .reported_statuses
            .difference(&oldest.keys().cloned().collect())
        {
            metrics::gauge!("changegate_operation_oldest_age_seconds", "status" => status.clone())
                .set(0.0);
        }
        for (key, requests) in &steps {
            gauge_in_progress(key, *requests);
        }
        for (status, age_ms) in &oldest {
            metrics::gauge!("changegate_operation_oldest_age_seconds", "status" => status.clone())
                .set(*age_ms as f64 / 1000.0);
        }
        self.reported_steps = steps.into_keys().collect();
        self.reported_statuses = oldest.into_keys().collect();
        Ok(rows)
    }

    /// [`Self::run_once`] as a job round.
    pub async fn round(&mut self, db: &Db) -> anyhow::Result<Outcome> {
        let rows = self.run_once(db).await?;
        Ok(Outcome::Worked {
            done: rows.len() as u64,
            full: false,
        })
    }
}

fn gauge_in_progress((status, step): &(String, String), requests: i64) {
    metrics::gauge!(
        "changegate_operations_in_progress",
        "status" => status.clone(),
        "step" => step.clone()
    )
    .set(requests as f64);
}
