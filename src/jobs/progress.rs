//! The progress gauges alerting rules read: requests in each unfinished
//! status and step (`changegate_operations_in_progress{status, step}`), the
//! age of the oldest in each status
//! (`changegate_operation_oldest_age_seconds{status}`) and the enabled
//! webhook endpoints by breaker state (`changegate_webhook_endpoints{breaker}`),
//! refreshed from the database by every instance. Each instance reports the
//! whole database, so across instances take `max()` (not `sum()`): "nothing
//! stuck for over an hour" is
//! `max(changegate_operation_oldest_age_seconds{status!="MERGED"}) > 3600`.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context;

use super::Outcome;
use crate::db::Db;
use crate::db::progress::{InProgress, endpoints_by_breaker, in_progress};
use crate::domain::StepStatus;

/// The breaker states an endpoint can be in, each reported every round.
const BREAKER_STATES: [&str; 3] = ["closed", "open", "half_open"];

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
        let breakers = endpoints_by_breaker(db)
            .await
            .context("counting webhook endpoints by breaker state")?;
        for state in BREAKER_STATES {
            let endpoints = breakers
                .iter()
                .find(|(of, _)| of == state)
                .map_or(0, |(_, count)| *count);
            metrics::gauge!("changegate_webhook_endpoints", "breaker" => state)
                .set(endpoints as f64);
        }
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

/// Describes the progress gauges.
pub fn describe_metrics() {
    metrics::describe_gauge!(
        "changegate_operations_in_progress",
        "Unfinished requests by binding status and step, read from the database (every instance reports the whole database: aggregate with max)."
    );
    metrics::describe_gauge!(
        "changegate_operation_oldest_age_seconds",
        "How long the oldest unfinished request of each status has been in it (aggregate with max)."
    );
    metrics::describe_gauge!(
        "changegate_webhook_endpoints",
        "Enabled webhook endpoints by circuit breaker state: closed, open, half_open (aggregate with max)."
    );
}
