//! `GET /admin/v1/config`: the configuration in effect, secrets redacted.

use axum::Json;
use axum::extract::State;

use crate::config::effective::{EffectiveConfig, effective};
use crate::state::AppState;

/// The running configuration (after defaults, environment overrides and
/// fail-safe resolution); secrets appear as `[redacted]`.
#[utoipa::path(get, path = "/admin/v1/config", tag = "admin", operation_id = "get_config",
    responses((status = 200, description = "The effective configuration, by section", body = EffectiveConfig)))]
pub async fn get_config(State(state): State<AppState>) -> Json<EffectiveConfig> {
    Json(effective(&state.config.current()))
}
