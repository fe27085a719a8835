//! `GET /api/v1/access`: whether submissions are open, and when.

use axum::Json;
use axum::extract::State;
use chrono::Utc;
use serde::Serialize;

use crate::config::resolve::{AccessMode, AccessWindow, access_open, closed_by_configuration};
use crate::http::extract::AuthUser;
use crate::state::AppState;

/// Whether submissions are open, and when.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AccessView {
    mode: Mode,
    /// Whether a submission would be admitted now.
    open: bool,
    /// The access window; null when none is configured (in `TEST_WINDOW`
    /// mode that admits nothing).
    window: Option<WindowView>,
    /// Which keys to set when the configuration keeps submissions closed;
    /// absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<&'static str>,
}

/// The access mode (`access.mode`).
#[derive(Debug, Clone, Copy, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[schema(as = AccessMode)]
enum Mode {
    /// Everyone with permission may submit.
    Open,
    /// Submissions are admitted only inside the access window.
    TestWindow,
    /// No submissions.
    Closed,
}

impl From<AccessMode> for Mode {
    fn from(mode: AccessMode) -> Self {
        match mode {
            AccessMode::Open => Self::Open,
            AccessMode::TestWindow => Self::TestWindow,
            AccessMode::Closed => Self::Closed,
        }
    }
}

/// The access window, in one of three shapes.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
#[schema(as = AccessWindow)]
enum WindowView {
    AllDay(AllDayWindow),
    Invalid(InvalidWindow),
    Daily(DailyWindow),
}

/// A window covering the whole day.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllDayWindow {
    /// Always `true`.
    all_day: bool,
}

/// A window or time zone that could not be read: treated as closed.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct InvalidWindow {
    /// Always `false`.
    valid: bool,
}

/// Every day from `start` (inclusive) to `end` (exclusive) in `timezone`;
/// an `end` before `start` wraps past midnight.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DailyWindow {
    #[schema(examples("09:00"))]
    start: String,
    #[schema(examples("17:30"))]
    end: String,
    /// An IANA time zone.
    #[schema(examples("Europe/Berlin"))]
    timezone: String,
}

/// The current access mode and window.
#[utoipa::path(get, path = "/api/v1/access", tag = "requests",
    responses((status = 200, description = "The access mode, whether submissions are open, and the window", body = AccessView)))]
pub async fn get_access(State(state): State<AppState>, _caller: AuthUser) -> Json<AccessView> {
    let settings = state.config.current();
    let access = &settings.access;
    let window = match access.window {
        AccessWindow::Unset => None,
        AccessWindow::AllDay => Some(WindowView::AllDay(AllDayWindow { all_day: true })),
        AccessWindow::Never => Some(WindowView::Invalid(InvalidWindow { valid: false })),
        AccessWindow::Daily { start, end, tz } => Some(WindowView::Daily(DailyWindow {
            start: start.format("%H:%M").to_string(),
            end: end.format("%H:%M").to_string(),
            timezone: tz.name().to_owned(),
        })),
    };
    Json(AccessView {
        mode: access.mode.into(),
        open: access_open(access.mode, &access.window, Utc::now()),
        window,
        problem: closed_by_configuration(access.mode, &access.window),
    })
}
