//! Change windows (SPEC §12, scheduling): when a target that requires
//! windows `[windows.<name>]` may merge. Each window is an RFC 5545
//! recurrence whose occurrences open at their wall-clock time in
//! `access.timezone` and stay open for the window's duration.
//!
//! A window that cannot be read never opens (see [`super::scheduling`]): a
//! broken rule holds merges back until it is fixed, it never lets them
//! through at a time nobody chose.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};
use chrono_tz::Tz;
use rrule::{RRuleSet, RRuleSetIter};

/// How far past the time asked about [`Windows::opening`] looks, widening
/// step by step: most windows open within days, and each step reads only
/// the occurrences up to its end. The last is a little over a year, so that
/// a yearly window is found.
const HORIZONS: [TimeDelta; 4] = [
    TimeDelta::days(1),
    TimeDelta::days(8),
    TimeDelta::days(64),
    TimeDelta::days(400),
];

/// How many occurrences a search reads between two saves of its place.
const RESUME_EVERY: u32 = 64;

/// What happens inside a window's occurrences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// Merges happen only inside an occurrence (of any of a target's allow
    /// windows).
    Allow,
    /// No merge happens inside an occurrence.
    Deny,
}

impl WindowKind {
    /// The configured name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
        }
    }
}

/// One `[windows.<name>]`.
#[derive(Debug, Clone)]
pub struct Window {
    /// `kind`: `allow` (default) or `deny`. An invalid window is `allow`, so
    /// that a target requiring it never opens.
    pub kind: WindowKind,
    /// The occurrences; `None` when a key was invalid and the window never opens.
    pub rule: Option<WindowRule>,
}

/// The occurrences of a window whose keys are all valid.
#[derive(Debug, Clone)]
pub struct WindowRule {
    /// `dtstart`: when the first occurrence opens, in wall-clock time of
    /// `timezone`; later ones open at the same wall-clock time whatever the
    /// daylight-saving offset.
    pub dtstart: NaiveDateTime,
    /// `duration`: how long each occurrence stays open, in elapsed time.
    pub duration: Duration,
    /// `rrule` as written; `None`: the window occurs once, at `dtstart`.
    pub rrule: Option<String>,
    /// `access.timezone`.
    pub timezone: Tz,
    /// `dtstart` and `rrule` as the `rrule` crate iterates them.
    occurrences: RRuleSet,
    /// `duration` for date arithmetic.
    length: TimeDelta,
    /// Where a search stopped reading occurrences that had all ended, and
    /// when the last of them ended. The crate can only iterate from
    /// `dtstart`; a later search resumes here instead (a cache shared by
    /// the clones of one snapshot, rebuilt with each reload).
    resume: Arc<Mutex<Option<Place>>>,
}

/// A place in a window's occurrences: the iteration just after one, and
/// when that one ended.
type Place = (RRuleSetIter, DateTime<Utc>);

/// An occurrence: open from the first instant (inclusive) to the second.
type Span = (DateTime<Utc>, DateTime<Utc>);

impl WindowRule {
    /// A rule from its keys, read and checked; `occurrences` must be
    /// limited ([`RRuleSet::limit`]) so that a rule that stops producing
    /// occurrences ends the iteration.
    pub(super) fn new(
        dtstart: NaiveDateTime,
        duration: Duration,
        rrule: Option<String>,
        timezone: Tz,
        occurrences: RRuleSet,
        length: TimeDelta,
    ) -> Self {
        Self {
            dtstart,
            duration,
            rrule,
            timezone,
            occurrences,
            length,
            resume: Arc::default(),
        }
    }

    /// The occurrences that end after `from` and start before `until`, in order.
    fn spans(&self, from: DateTime<Utc>, until: DateTime<Utc>) -> Vec<Span> {
        // Every occurrence lasts as long, so they end in the order they
        // start: if the last one read before the saved place had ended by
        // `from`, so had all before it.
        let saved = self
            .resume
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut occurrences = match saved {
            Some((occurrences, ended)) if ended <= from => occurrences,
            _ => (&self.occurrences).into_iter(),
        };
        let mut newer_place = None;
        let mut unsaved = 0;
        let mut spans = Vec::new();
        while let Some(start) = occurrences.next() {
            let start = start.with_timezone(&Utc);
            if start >= until {
                break;
            }
            let end = start
                .checked_add_signed(self.length)
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
            if end > from {
                spans.push((start, end));
            } else {
                unsaved += 1;
                if unsaved == RESUME_EVERY {
                    unsaved = 0;
                    newer_place = Some((occurrences.clone(), end));
                }
            }
        }
        if let Some((occurrences, ended)) = newer_place {
            let mut saved = self.resume.lock().unwrap_or_else(PoisonError::into_inner);
            // Another search may have saved a later place meanwhile.
            if saved.as_ref().is_none_or(|(_, other)| *other < ended) {
                *saved = Some((occurrences, ended));
            }
        }
        spans
    }
}

/// When a target may merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// Now.
    Open,
    /// Not now; first at this instant.
    OpensAt(DateTime<Utc>),
    /// Not within the next 400 days (or never: an unknown or invalid window).
    Never,
}

/// The change windows, `[windows.<name>]`, by name.
#[derive(Debug, Clone, Default)]
pub struct Windows {
    by_name: BTreeMap<String, Window>,
}

impl Windows {
    /// The windows read from the file.
    pub(super) fn new(by_name: BTreeMap<String, Window>) -> Self {
        Self { by_name }
    }

    /// The window called `name`.
    pub fn get(&self, name: &str) -> Option<&Window> {
        self.by_name.get(name)
    }

    /// Every window with its name, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Window)> {
        self.by_name
            .iter()
            .map(|(name, window)| (name.as_str(), window))
    }

    /// Whether a target requiring the windows `names` may merge at `at`,
    /// else when it next may: inside an occurrence of one of its allow
    /// windows (any time when it names none) and outside every occurrence
    /// of its deny windows. A name no window has means never: the target
    /// waits until the configuration is fixed.
    pub fn opening(&self, names: &[String], at: DateTime<Utc>) -> Opening {
        if names.is_empty() {
            return Opening::Open;
        }
        let mut required = Vec::with_capacity(names.len());
        for name in names {
            match self.by_name.get(name) {
                Some(window) => required.push(window),
                None => return Opening::Never,
            }
        }
        for horizon in HORIZONS {
            let until = at
                .checked_add_signed(horizon)
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
            // Whether a time before `until` is open depends only on the
            // occurrences that start before it: an answer is final.
            if let found @ (Opening::Open | Opening::OpensAt(_)) =
                opening_before(&required, at, until)
            {
                return found;
            }
        }
        Opening::Never
    }
}

/// [`Windows::opening`] looking no further than `until`.
fn opening_before(required: &[&Window], at: DateTime<Utc>, until: DateTime<Utc>) -> Opening {
    // `None` until an allow window is named: with none, any time is allowed.
    let mut allowed: Option<Vec<Span>> = None;
    let mut denied = Vec::new();
    for window in required {
        let spans = window
            .rule
            .as_ref()
            .map(|rule| rule.spans(at, until))
            .unwrap_or_default();
        match window.kind {
            WindowKind::Allow => allowed.get_or_insert_with(Vec::new).extend(spans),
            WindowKind::Deny => denied.extend(spans),
        }
    }
    let allowed = allowed.map_or_else(|| vec![(at, until)], merged);
    first_open(&allowed, &merged(denied), at, until)
}

/// `spans` sorted, overlapping and touching ones joined.
fn merged(mut spans: Vec<Span>) -> Vec<Span> {
    spans.sort_unstable();
    let mut joined: Vec<Span> = Vec::with_capacity(spans.len());
    for (start, end) in spans {
        match joined.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => joined.push((start, end)),
        }
    }
    joined
}

/// The first instant from `at` (before `until`) inside an allowed span and
/// outside every denied one; both lists sorted and joined by [`merged`].
fn first_open(
    allowed: &[Span],
    denied: &[Span],
    at: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Opening {
    let mut denied = denied.iter().peekable();
    // Nothing before `earliest` is open: it only moves forward.
    let mut earliest = at;
    for &(start, end) in allowed {
        let mut candidate = start.max(earliest);
        while let Some(&&(deny_start, deny_end)) = denied.peek() {
            if deny_end <= candidate {
                denied.next();
            } else if deny_start <= candidate {
                candidate = deny_end;
            } else {
                break;
            }
        }
        if candidate >= until {
            break;
        }
        if candidate < end {
            return if candidate == at {
                Opening::Open
            } else {
                Opening::OpensAt(candidate)
            };
        }
        earliest = candidate;
    }
    Opening::Never
}

#[cfg(test)]
#[path = "windows_tests.rs"]
mod tests;
