//! Fail-safe resolution of dynamic settings (SPEC §4).
//!
//! A hot-reloaded file can be missing a key or hold a typo at any moment. Each
//! rule here picks the value with the lighter consequence of a mistake, and
//! says in a warning what it did, so the service never fails *open* by accident
//! (an unknown access mode closes the service) nor fails *shut* by accident (an
//! unparsable rate limit disables limiting rather than blocking everyone).

use std::time::Duration;

use chrono::{DateTime, NaiveTime, Utc};
use chrono_tz::Tz;
use toml::Value;
use tracing_subscriber::EnvFilter;

/// A resolved value and, when the raw value was not used as written, why.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved<T> {
    /// The value the service uses.
    pub value: T,
    /// What was wrong with the raw value; `None` when it was used as written
    /// or was absent and the documented default applies.
    pub warning: Option<String>,
}

impl<T> Resolved<T> {
    pub(super) fn ok(value: T) -> Self {
        Self {
            value,
            warning: None,
        }
    }

    pub(super) fn warn(value: T, warning: impl Into<String>) -> Self {
        Self {
            value,
            warning: Some(warning.into()),
        }
    }
}

/// Who may submit requests right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessMode {
    /// Everyone with permission may submit.
    Open,
    /// Submissions are accepted only inside the access window.
    TestWindow,
    /// No submissions.
    Closed,
}

/// When, in `TEST_WINDOW` mode, submissions are accepted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AccessWindow {
    /// No window configured: in `TEST_WINDOW` nothing is admitted (a window
    /// missing by mistake must not open what it was meant to limit).
    Unset,
    /// A window that covers the whole day (`"00:00-24:00"`, or any window
    /// ending where it starts).
    AllDay,
    /// Every day from `start` (inclusive) to `end` (exclusive) in the fixed
    /// zone `tz`; `end < start` wraps past midnight.
    Daily {
        /// Opening time of day.
        start: NaiveTime,
        /// Closing time of day.
        end: NaiveTime,
        /// The fixed zone the times are read in (never the host's).
        tz: Tz,
    },
    /// The window or its time zone is invalid: treated as closed.
    Never,
}

impl AccessWindow {
    /// Whether `now` falls inside the window.
    pub fn contains(&self, now: DateTime<Utc>) -> bool {
        match *self {
            Self::AllDay => true,
            Self::Unset | Self::Never => false,
            Self::Daily { start, end, tz } => {
                let local = now.with_timezone(&tz).time();
                if start <= end {
                    start <= local && local < end
                } else {
                    local >= start || local < end
                }
            }
        }
    }
}

/// Why submissions are closed in `mode` with `window`, in words that say
/// what to set, when the configuration rather than the clock closes them.
pub fn closed_by_configuration(mode: AccessMode, window: &AccessWindow) -> Option<&'static str> {
    match (mode, window) {
        (AccessMode::TestWindow, AccessWindow::Unset) => Some(
            "access.mode is TEST_WINDOW but no access.window is set: set access.window (\"HH:MM-HH:MM\") and access.timezone, or access.mode = \"OPEN\"",
        ),
        (AccessMode::TestWindow, AccessWindow::Never) => Some(
            "access.window or access.timezone is invalid: set access.window (\"HH:MM-HH:MM\") and an IANA access.timezone",
        ),
        _ => None,
    }
}

/// Whether the access mode and window allow a submission at `now`.
pub fn access_open(mode: AccessMode, window: &AccessWindow, now: DateTime<Utc>) -> bool {
    match mode {
        AccessMode::Open => true,
        AccessMode::Closed => false,
        AccessMode::TestWindow => window.contains(now),
    }
}

/// The order in which a new request meets approval and its Merge Request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowOrder {
    /// Approval first, then the MR (the current order).
    ApprovalFirst,
    /// MR first, approval carries the MR id (the older order).
    MrFirst,
}

impl FlowOrder {
    /// The stored and configured name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ApprovalFirst => "approval_first",
            Self::MrFirst => "mr_first",
        }
    }
}

/// For decoding stored rows.
impl TryFrom<String> for FlowOrder {
    type Error = crate::domain::UnknownCode;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        match value.as_str() {
            "approval_first" => Ok(Self::ApprovalFirst),
            "mr_first" => Ok(Self::MrFirst),
            _ => Err(crate::domain::UnknownCode {
                kind: "flow order",
                value,
            }),
        }
    }
}

/// How the reviewer bots approve a Merge Request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApproveImpl {
    /// GitLab's plain approve call.
    Standard,
    /// The upstream checklist extension.
    Checklist,
}

/// Upper bound on approval retries: a typo like `30000` must not keep a
/// request retrying for days.
pub const MAX_APPROVAL_RETRIES: u32 = 10;

/// Missing, or a string of only spaces.
pub(super) fn blank(raw: Option<&Value>) -> bool {
    match raw {
        None => true,
        Some(Value::String(s)) => s.trim().is_empty(),
        Some(_) => false,
    }
}

/// A raw value as a warning quotes it.
pub(super) fn describe(raw: &Value) -> String {
    match raw {
        Value::String(s) => format!("{s:?}"),
        other => format!("{other} ({})", other.type_str()),
    }
}

/// `access.mode`: missing or blank → `TEST_WINDOW` (which admits only
/// inside a configured window), except that a running `CLOSED` stays
/// `CLOSED` (`previous`: the mode in effect before a reload); anything
/// unknown → `CLOSED`. Misconfiguration never opens what was closed.
pub fn access_mode(raw: Option<&Value>, previous: Option<AccessMode>) -> Resolved<AccessMode> {
    if blank(raw) {
        if previous == Some(AccessMode::Closed) {
            return Resolved::warn(
                AccessMode::Closed,
                "missing or blank while the service is CLOSED; it stays CLOSED".to_owned(),
            );
        }
        return Resolved::ok(AccessMode::TestWindow);
    }
    let Some(Value::String(text)) = raw else {
        let raw = raw.map(describe).unwrap_or_default();
        return Resolved::warn(AccessMode::Closed, format!("{raw} is not a mode; CLOSED"));
    };
    match text.trim().to_ascii_uppercase().as_str() {
        "OPEN" => Resolved::ok(AccessMode::Open),
        "TEST_WINDOW" => Resolved::ok(AccessMode::TestWindow),
        "CLOSED" => Resolved::ok(AccessMode::Closed),
        _ => Resolved::warn(
            AccessMode::Closed,
            format!("unknown mode {text:?} (OPEN, TEST_WINDOW, CLOSED); CLOSED"),
        ),
    }
}

/// `access.window` (`"HH:MM-HH:MM"`) in `access.timezone` (IANA name, default
/// `UTC`): missing window → unset (nothing admitted in `TEST_WINDOW`); an
/// invalid window or zone → closed.
pub fn access_window(window: Option<&Value>, timezone: Option<&Value>) -> Resolved<AccessWindow> {
    if blank(window) {
        return Resolved::ok(AccessWindow::Unset);
    }
    let tz = match time_zone(timezone) {
        Resolved {
            value: Some(tz), ..
        } => tz,
        Resolved { warning, .. } => {
            return Resolved::warn(
                AccessWindow::Never,
                format!("{}; window closed", warning.unwrap_or_default()),
            );
        }
    };
    let parsed = match window {
        Some(Value::String(text)) => text.split_once('-').and_then(|(start, end)| {
            let start = NaiveTime::parse_from_str(start.trim(), "%H:%M").ok()?;
            let end = match end.trim() {
                "24:00" => NaiveTime::MIN,
                end => NaiveTime::parse_from_str(end, "%H:%M").ok()?,
            };
            Some((start, end))
        }),
        _ => None,
    };
    match parsed {
        Some((start, end)) if start == end => Resolved::ok(AccessWindow::AllDay),
        Some((start, end)) => Resolved::ok(AccessWindow::Daily { start, end, tz }),
        None => Resolved::warn(
            AccessWindow::Never,
            format!(
                "{} is not a window like \"09:00-18:00\"; window closed",
                window.map(describe).unwrap_or_default()
            ),
        ),
    }
}

/// `access.timezone`, the IANA zone the access window and the change
/// windows are read in: missing or blank → UTC (never the host's zone);
/// unknown or not a name → `None`, and what reads it stays closed.
pub fn time_zone(raw: Option<&Value>) -> Resolved<Option<Tz>> {
    if blank(raw) {
        return Resolved::ok(Some(Tz::UTC));
    }
    match raw {
        Some(Value::String(name)) => match name.trim().parse::<Tz>() {
            Ok(tz) => Resolved::ok(Some(tz)),
            Err(_) => Resolved::warn(None, format!("unknown time zone {name:?}")),
        },
        other => Resolved::warn(
            None,
            format!(
                "time zone {} is not a name",
                other.map(describe).unwrap_or_default()
            ),
        ),
    }
}

/// `rate_limit.<bucket>` (requests per window): blank or 0 → no limit;
/// negative or unparsable → no limit, with a warning. Never "block all".
pub fn rate_limit(raw: Option<&Value>) -> Resolved<Option<u32>> {
    if blank(raw) {
        return Resolved::ok(None);
    }
    let number = match raw {
        Some(Value::Integer(n)) => Some(*n),
        Some(Value::String(s)) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    match number {
        Some(0) => Resolved::ok(None),
        Some(n) if n > 0 => Resolved::ok(Some(u32::try_from(n).unwrap_or(u32::MAX))),
        _ => Resolved::warn(
            None,
            format!(
                "{} is not a positive limit; not limiting",
                raw.map(describe).unwrap_or_default()
            ),
        ),
    }
}

/// `authz.rules.<route>` (a list of rule codes, any of which grants access):
/// missing, empty or malformed → `None`, which denies every request to the route.
pub fn authz_rule(raw: Option<&Value>) -> Resolved<Option<Vec<String>>> {
    if blank(raw) {
        return Resolved::ok(None);
    }
    let codes: Option<Vec<String>> = match raw {
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(code) if !code.trim().is_empty() => Some(code.trim().to_owned()),
                _ => None,
            })
            .collect(),
        Some(Value::String(code)) => Some(vec![code.trim().to_owned()]),
        _ => None,
    };
    match codes {
        Some(codes) if !codes.is_empty() => Resolved::ok(Some(codes)),
        _ => Resolved::warn(
            None,
            format!(
                "{} is not a list of rule codes; route denied",
                raw.map(describe).unwrap_or_default()
            ),
        ),
    }
}

/// `workflow.flow_order`: missing → `approval_first`; unknown → the last good
/// value (or `approval_first` at start-up), because switching order by accident
/// would route new requests through a flow nobody meant to run.
pub fn flow_order(raw: Option<&Value>, last_good: Option<FlowOrder>) -> Resolved<FlowOrder> {
    if blank(raw) {
        return Resolved::ok(FlowOrder::ApprovalFirst);
    }
    let text = raw.and_then(Value::as_str).map(str::trim);
    match text.map(str::to_ascii_lowercase).as_deref() {
        Some("approval_first") => Resolved::ok(FlowOrder::ApprovalFirst),
        Some("mr_first") => Resolved::ok(FlowOrder::MrFirst),
        _ => {
            let kept = last_good.unwrap_or(FlowOrder::ApprovalFirst);
            Resolved::warn(
                kept,
                format!(
                    "unknown flow order {} (approval_first, mr_first); keeping {kept:?}",
                    raw.map(describe).unwrap_or_default()
                ),
            )
        }
    }
}

/// `gitlab.approve_impl`: missing or unknown → `standard`.
pub fn approve_impl(raw: Option<&Value>) -> Resolved<ApproveImpl> {
    if blank(raw) {
        return Resolved::ok(ApproveImpl::Standard);
    }
    match raw
        .and_then(Value::as_str)
        .map(|s| s.trim().to_ascii_lowercase())
        .as_deref()
    {
        Some("standard") => Resolved::ok(ApproveImpl::Standard),
        Some("checklist") => Resolved::ok(ApproveImpl::Checklist),
        _ => Resolved::warn(
            ApproveImpl::Standard,
            format!(
                "unknown approve implementation {} (standard, checklist); standard",
                raw.map(describe).unwrap_or_default()
            ),
        ),
    }
}

/// `approval.retries`: missing → 3; negative → 0; above
/// [`MAX_APPROVAL_RETRIES`] → the maximum; not a number → 3.
pub fn approval_retries(raw: Option<&Value>) -> Resolved<u32> {
    const DEFAULT: u32 = 3;
    if blank(raw) {
        return Resolved::ok(DEFAULT);
    }
    let number = match raw {
        Some(Value::Integer(n)) => Some(*n),
        Some(Value::String(s)) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    match number {
        Some(n) if n < 0 => Resolved::warn(0, format!("{n} is negative; 0 retries")),
        Some(n) if n > i64::from(MAX_APPROVAL_RETRIES) => Resolved::warn(
            MAX_APPROVAL_RETRIES,
            format!("{n} is above the maximum; {MAX_APPROVAL_RETRIES} retries"),
        ),
        Some(n) => Resolved::ok(u32::try_from(n).unwrap_or(DEFAULT)),
        None => Resolved::warn(
            DEFAULT,
            format!(
                "{} is not a number; {DEFAULT} retries",
                raw.map(describe).unwrap_or_default()
            ),
        ),
    }
}

/// `webhooks.silent`: missing → off (deliver). Anything but a boolean → **on**:
/// a silenced delivery is recorded and can be redelivered by hand, while a
/// delivery sent by mistake cannot be taken back.
pub fn webhook_silent(raw: Option<&Value>) -> Resolved<bool> {
    if blank(raw) {
        return Resolved::ok(false);
    }
    match raw {
        Some(Value::Boolean(on)) => Resolved::ok(*on),
        Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("true") => Resolved::ok(true),
        Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("false") => Resolved::ok(false),
        _ => Resolved::warn(
            true,
            format!(
                "{} is not true/false; silent mode on",
                raw.map(describe).unwrap_or_default()
            ),
        ),
    }
}

/// `log.level` (a level or a `tracing` filter such as `info,sqlx=warn`):
/// missing → `info`; invalid → keep `current`.
pub fn log_level(raw: Option<&Value>, current: &str) -> Resolved<String> {
    if blank(raw) {
        return Resolved::ok("info".to_owned());
    }
    match raw {
        Some(Value::String(filter)) if EnvFilter::try_new(filter.trim()).is_ok() => {
            Resolved::ok(filter.trim().to_owned())
        }
        _ => Resolved::warn(
            current.to_owned(),
            format!(
                "{} is not a log level or filter; keeping {current:?}",
                raw.map(describe).unwrap_or_default()
            ),
        ),
    }
}

/// `batch.enabled`: missing → on; not a boolean → on (batching is the normal path).
pub fn batch_enabled(raw: Option<&Value>) -> Resolved<bool> {
    match raw {
        None => Resolved::ok(true),
        Some(Value::Boolean(on)) => Resolved::ok(*on),
        Some(other) => Resolved::warn(true, format!("{} is not true/false; on", describe(other))),
    }
}

/// The batch freeze switch: missing → off; not a boolean → on (frozen
/// stops new rounds and fails nothing, the lighter mistake).
pub fn freeze(raw: Option<&Value>) -> Resolved<bool> {
    match raw {
        None => Resolved::ok(false),
        Some(Value::Boolean(on)) => Resolved::ok(*on),
        Some(other) => Resolved::warn(
            true,
            format!("{} is not true/false; frozen", describe(other)),
        ),
    }
}

/// A plain switch: missing → `default`; not a boolean → `default`.
pub fn flag(raw: Option<&Value>, default: bool) -> Resolved<bool> {
    match raw {
        None => Resolved::ok(default),
        Some(Value::Boolean(on)) => Resolved::ok(*on),
        Some(other) => Resolved::warn(default, format!("{} is not true/false", describe(other))),
    }
}

/// A positive duration such as `"5s"`: missing → `default`; invalid → `default`.
pub fn duration(raw: Option<&Value>, default: Duration) -> Resolved<Duration> {
    if blank(raw) {
        return Resolved::ok(default);
    }
    match raw
        .and_then(Value::as_str)
        .map(|s| humantime::parse_duration(s.trim()))
    {
        Some(Ok(value)) if !value.is_zero() => Resolved::ok(value),
        _ => Resolved::warn(
            default,
            format!(
                "{} is not a duration like \"5s\"; {}",
                raw.map(describe).unwrap_or_default(),
                humantime::format_duration(default)
            ),
        ),
    }
}

/// A positive count: missing → `default`; zero, negative or not a number → `default`.
pub fn positive_count(raw: Option<&Value>, default: u32) -> Resolved<u32> {
    match raw {
        None => Resolved::ok(default),
        Some(Value::Integer(n)) if *n > 0 => Resolved::ok(u32::try_from(*n).unwrap_or(u32::MAX)),
        Some(other) => Resolved::warn(
            default,
            format!("{} is not a positive number; {default}", describe(other)),
        ),
    }
}

/// The deepest merge train `batch.max_in_flight` may ask for: GitLab's own
/// merge trains run at most 20 pipelines at once
/// (doc/ci/pipelines/merge_trains.md).
pub const MAX_TRAIN_DEPTH: u32 = 20;

/// `batch.max_in_flight`: how many batches of one partition may be in
/// flight at once, each tested on top of the ones ahead (default 4, 1–20).
/// Out of range is brought into range, and anything else is the default:
/// a typo slows the queue or speeds it up, it never stops it.
pub fn train_depth(raw: Option<&Value>) -> Resolved<u32> {
    const DEFAULT: u32 = 4;
    match raw {
        None => Resolved::ok(DEFAULT),
        Some(Value::Integer(n)) if *n < 1 => {
            Resolved::warn(1, format!("{n} is below 1; 1 batch in flight"))
        }
        Some(Value::Integer(n)) if *n > i64::from(MAX_TRAIN_DEPTH) => Resolved::warn(
            MAX_TRAIN_DEPTH,
            format!("{n} is above the maximum; {MAX_TRAIN_DEPTH} batches in flight"),
        ),
        Some(Value::Integer(n)) => Resolved::ok(u32::try_from(*n).unwrap_or(DEFAULT)),
        Some(other) => Resolved::warn(
            DEFAULT,
            format!(
                "{} is not a number; {DEFAULT} batches in flight",
                describe(other)
            ),
        ),
    }
}

#[cfg(test)]
#[path = "resolve_tests.rs"]
mod tests;
