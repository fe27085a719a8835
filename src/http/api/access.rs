//! `GET /api/v1/access`: whether submissions are open, and when.

use axum::Json;
use axum::extract::State;
use chrono::Utc;
use serde_json::{Value, json};

use crate::config::resolve::{AccessMode, AccessWindow, access_open, closed_by_configuration};
use crate::http::extract::AuthUser;
use crate::state::AppState;

/// The current access mode and window.
#[utoipa::path(get, path = "/api/v1/access", tag = "requests",
    responses((status = 200, description = "`{mode, open, window?, problem?}`: `problem` says which keys to set when the configuration keeps submissions closed", body = Object)))]
pub async fn get_access(State(state): State<AppState>, _caller: AuthUser) -> Json<Value> {
    let settings = state.config.current();
    let access = &settings.access;
    let mode = match access.mode {
        AccessMode::Open => "OPEN",
        AccessMode::TestWindow => "TEST_WINDOW",
        AccessMode::Closed => "CLOSED",
    };
    let window = match access.window {
        AccessWindow::Unset => Value::Null,
        AccessWindow::AllDay => json!({ "allDay": true }),
        AccessWindow::Never => json!({ "valid": false }),
        AccessWindow::Daily { start, end, tz } => json!({
            "start": start.format("%H:%M").to_string(),
            "end": end.format("%H:%M").to_string(),
            "timezone": tz.name(),
        }),
    };
    let mut answer = json!({
        "mode": mode,
        "open": access_open(access.mode, &access.window, Utc::now()),
        "window": window,
    });
    if let Some(why) = closed_by_configuration(access.mode, &access.window) {
        answer["problem"] = json!(why);
    }
    Json(answer)
}
