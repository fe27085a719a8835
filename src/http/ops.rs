//! Operations endpoints (SPEC §2.4): liveness, readiness, metrics.

use std::sync::Mutex;
use std::time::Duration;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use super::error::{ApiError, ApiResult};
use crate::state::AppState;

/// Readiness must answer quickly even when the database hangs.
const READY_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// `/healthz`, `/readyz`, `/metrics`.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
}

/// The process is up. Checks no dependency, so an orchestrator never restarts
/// the service for a database outage it cannot fix.
async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// The database answers and the newest migration is applied.
async fn readyz(State(state): State<AppState>) -> ApiResult<Json<Value>> {
    let answer = match state.db.get() {
        None => Err("connecting to the database".to_owned()),
        Some(db) => {
            let require_synced = state.config.current().database.galera_require_synced;
            match tokio::time::timeout(READY_CHECK_TIMEOUT, db.check_ready(require_synced)).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(reason)) => Err(reason),
                Err(_) => Err(format!(
                    "the readiness check took longer than {READY_CHECK_TIMEOUT:?}"
                )),
            }
        }
    };
    state
        .readiness
        .note(answer.as_ref().err().map(String::as_str));
    answer
        .map(|()| Json(json!({ "status": "ready" })))
        .map_err(|_| ApiError::NotReady)
}

/// The last answer `/readyz` gave, so a change of readiness is logged once
/// (at info: starting, draining and a database outage are each reported
/// where they are known) instead of once per probe.
#[derive(Debug, Default)]
pub struct ReadinessLog {
    /// The last probe's answer: `None` before the first probe, then
    /// `Some(None)` while ready or `Some(Some(why))` while not.
    last: Mutex<Option<Option<String>>>,
}

impl ReadinessLog {
    /// Notes a probe's answer: ready (`None`) or why not.
    pub fn note(&self, not_ready: Option<&str>) {
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        let now = not_ready.map(str::to_owned);
        if last.as_ref() == Some(&now) {
            return;
        }
        match &now {
            None => tracing::info!("ready: /readyz answers 200"),
            Some(reason) => tracing::info!("not ready: /readyz answers 503: {reason}"),
        }
        *last = Some(now);
    }
}

/// Prometheus text format.
async fn metrics(State(state): State<AppState>) -> String {
    state.metrics.render()
}
