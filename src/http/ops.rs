//! Operations endpoints (SPEC §2.4): liveness, readiness, metrics.

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
    let db = state.db.get().ok_or(ApiError::NotReady)?;
    let require_synced = state.config.current().database.galera_require_synced;
    match tokio::time::timeout(READY_CHECK_TIMEOUT, db.check_ready(require_synced)).await {
        Ok(Ok(())) => Ok(Json(json!({ "status": "ready" }))),
        Ok(Err(reason)) => {
            tracing::warn!("readiness check failed: {reason}");
            Err(ApiError::NotReady)
        }
        Err(_) => {
            tracing::warn!("readiness check timed out");
            Err(ApiError::NotReady)
        }
    }
}

/// Prometheus text format.
async fn metrics(State(state): State<AppState>) -> String {
    state.metrics.render()
}
