//! Reading `[windows.<name>]` and `[scheduling]` (SPEC §12, scheduling).
//!
//! Each key of a window is resolved on its own, so that a warning names the
//! key at fault; any invalid key makes a window that never opens
//! ([`super::windows`]), the fail-safe reading of a rule nobody can check.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{LocalResult, NaiveDateTime, TimeDelta, TimeZone};
use chrono_tz::Tz;
use rrule::{RRule, RRuleSet, Unvalidated};
use toml::Value;

use super::reader::Reader;
use super::resolve::{self, Resolved, blank, describe};
use super::windows::{Window, WindowKind, WindowRule, Windows};

/// Keys of one `[windows.<name>]`.
const WINDOW_KEYS: &[&str] = &["dtstart", "duration", "rrule", "kind"];

/// Keys of `[scheduling]`.
pub(super) const SCHEDULING_KEYS: &[&str] = &["max_ahead"];

/// `[windows]`: every window, each key resolved on its own so that a
/// warning names the key at fault. The time zone is `access.timezone`.
pub(super) fn windows(r: &mut Reader<'_>) -> Windows {
    let mut by_name = BTreeMap::new();
    let Some(Value::Table(table)) = r.at(&["windows"]) else {
        return Windows::default();
    };
    let zone = if table.is_empty() {
        None
    } else {
        let zone = resolve::time_zone(r.get("access", "timezone"));
        if let Some(warning) = zone.warning {
            r.warning(
                "access.timezone",
                format!("{warning}; no change window opens"),
            );
        }
        zone.value
    };
    for (name, value) in table {
        let key = format!("windows.{name}");
        r.check_keys(&key, value, Some(WINDOW_KEYS));
        let Some(keys) = value.as_table() else {
            continue;
        };
        let kind = r.resolved(&format!("{key}.kind"), window_kind(keys.get("kind")));
        let dtstart = r.resolved(
            &format!("{key}.dtstart"),
            first_opening(keys.get("dtstart")),
        );
        let duration = r.resolved(&format!("{key}.duration"), length(keys.get("duration")));
        let recurrence = r.resolved(&format!("{key}.rrule"), recurrence(keys.get("rrule")));
        let rule = match (kind, dtstart, duration, recurrence, zone) {
            (Some(_), Some(dtstart), Some(duration), Some(recurrence), Some(zone)) => {
                window_rule(r, &key, zone, dtstart, duration, recurrence)
            }
            _ => None,
        };
        let window = Window {
            kind: match (kind, &rule) {
                (Some(kind), Some(_)) => kind,
                _ => WindowKind::Allow,
            },
            rule,
        };
        by_name.insert(name.clone(), window);
    }
    Windows::new(by_name)
}

/// `rrule` before it meets `dtstart`.
#[derive(Debug)]
enum Recurrence {
    /// No rule: one occurrence, at `dtstart`.
    Once,
    /// The rule as written, and parsed.
    Rule(String, Box<RRule<Unvalidated>>),
}

const NEVER_OPENS: &str = "the window never opens";

/// `kind`: missing → allow; unknown → invalid.
fn window_kind(raw: Option<&Value>) -> Resolved<Option<WindowKind>> {
    if blank(raw) {
        return Resolved::ok(Some(WindowKind::Allow));
    }
    match raw
        .and_then(Value::as_str)
        .map(|s| s.trim().to_ascii_lowercase())
        .as_deref()
    {
        Some("allow") => Resolved::ok(Some(WindowKind::Allow)),
        Some("deny") => Resolved::ok(Some(WindowKind::Deny)),
        _ => Resolved::warn(
            None,
            format!(
                "unknown kind {} (allow, deny); {NEVER_OPENS}",
                raw.map(describe).unwrap_or_default()
            ),
        ),
    }
}

/// `dtstart`: a local date-time, quoted or a TOML local date-time, with
/// seconds or without; an offset is refused, the zone is `access.timezone`.
fn first_opening(raw: Option<&Value>) -> Resolved<Option<NaiveDateTime>> {
    let text = match raw {
        None => {
            return Resolved::warn(
                None,
                format!(
                    "missing: when the first occurrence opens, like \"2026-01-05T06:00:00\"; {NEVER_OPENS}"
                ),
            );
        }
        Some(Value::String(text)) => text.trim().to_owned(),
        Some(Value::Datetime(datetime)) => datetime.to_string(),
        Some(_) => String::new(),
    };
    let parsed = ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M"]
        .iter()
        .find_map(|format| NaiveDateTime::parse_from_str(&text, format).ok());
    match parsed {
        Some(local) => Resolved::ok(Some(local)),
        None => Resolved::warn(
            None,
            format!(
                "{} is not a local date-time like \"2026-01-05T06:00:00\" (no offset: it is read in access.timezone); {NEVER_OPENS}",
                raw.map(describe).unwrap_or_default()
            ),
        ),
    }
}

/// `duration`: a positive duration such as `"2h"`; required.
fn length(raw: Option<&Value>) -> Resolved<Option<(Duration, TimeDelta)>> {
    let parsed = raw
        .and_then(Value::as_str)
        .and_then(|text| humantime::parse_duration(text.trim()).ok())
        .filter(|duration| !duration.is_zero())
        .and_then(|duration| Some((duration, TimeDelta::from_std(duration).ok()?)));
    match (raw, parsed) {
        (_, Some(parsed)) => Resolved::ok(Some(parsed)),
        (None, None) => Resolved::warn(
            None,
            format!("missing: how long each occurrence lasts, like \"2h\"; {NEVER_OPENS}"),
        ),
        (Some(raw), None) => Resolved::warn(
            None,
            format!(
                "{} is not a positive duration like \"2h\"; {NEVER_OPENS}",
                describe(raw)
            ),
        ),
    }
}

/// `rrule`: missing or blank → once; else an RRULE value such as
/// `FREQ=WEEKLY;BYDAY=MO`, parsed by the `rrule` crate.
fn recurrence(raw: Option<&Value>) -> Resolved<Option<Recurrence>> {
    if blank(raw) {
        return Resolved::ok(Some(Recurrence::Once));
    }
    let Some(Value::String(text)) = raw else {
        return Resolved::warn(
            None,
            format!(
                "{} is not a recurrence rule like \"FREQ=WEEKLY;BYDAY=MO\"; {NEVER_OPENS}",
                raw.map(describe).unwrap_or_default()
            ),
        );
    };
    match text.trim().parse::<RRule<Unvalidated>>() {
        Ok(rule) => Resolved::ok(Some(Recurrence::Rule(
            text.trim().to_owned(),
            Box::new(rule),
        ))),
        Err(err) => Resolved::warn(None, format!("{text:?}: {err}; {NEVER_OPENS}")),
    }
}

/// The occurrences of a window whose keys each read well, or `None` with a
/// warning when together they make none.
fn window_rule(
    r: &mut Reader<'_>,
    key: &str,
    timezone: Tz,
    dtstart: NaiveDateTime,
    (duration, length): (Duration, TimeDelta),
    recurrence: Recurrence,
) -> Option<WindowRule> {
    let written = dtstart.format("%Y-%m-%dT%H:%M:%S");
    let zone = rrule::Tz::from(timezone);
    let start = match zone.from_local_datetime(&dtstart) {
        LocalResult::Single(start) => start,
        // A time the clocks show twice (when they go back): the first.
        LocalResult::Ambiguous(first, _) => first,
        LocalResult::None => {
            r.warning(
                &format!("{key}.dtstart"),
                format!(
                    "{written} does not exist in {timezone} (the clocks skip it); {NEVER_OPENS}"
                ),
            );
            return None;
        }
    };
    let (occurrences, rrule) = match recurrence {
        Recurrence::Once => (RRuleSet::new(start).rdate(start), None),
        Recurrence::Rule(text, parsed) => match (*parsed).build(start) {
            Ok(set) => (set, Some(text)),
            Err(err) => {
                r.warning(
                    &format!("{key}.rrule"),
                    format!("{text:?} from {written}: {err}; {NEVER_OPENS}"),
                );
                return None;
            }
        },
    };
    // Bounds the crate's search for an occurrence that never comes (a rule
    // such as the 30th of February).
    let occurrences = occurrences.limit();
    if (&occurrences).into_iter().next().is_none() {
        r.warning(key, format!("the rule has no occurrence; {NEVER_OPENS}"));
        return None;
    }
    Some(WindowRule::new(
        dtstart,
        duration,
        rrule,
        timezone,
        occurrences,
        length,
    ))
}

/// `[scheduling]`: requests that ask to merge later (SPEC §12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulingSettings {
    /// `max_ahead`, dynamic, default `30d`: how far ahead a request's
    /// `notBefore` may be.
    pub max_ahead: Duration,
}

pub(super) fn scheduling(r: &mut Reader<'_>) -> SchedulingSettings {
    SchedulingSettings {
        max_ahead: r.resolved(
            "scheduling.max_ahead",
            resolve::duration(
                r.get("scheduling", "max_ahead"),
                Duration::from_secs(30 * 86_400),
            ),
        ),
    }
}

#[cfg(test)]
#[path = "scheduling_tests.rs"]
mod tests;
