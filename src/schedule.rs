//! When a request may land (SPEC §12): not before its requester's time
//! (`notBefore`), and only inside its target's change windows. An approved
//! apply waits in the merge queue (its round's claim asks); a close waits at
//! its first step.

use chrono::{DateTime, NaiveDateTime, SecondsFormat, Utc};

use crate::config::Opening;
use crate::config::Settings;

/// What keeps a request from landing now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Nothing: it may land now.
    Free,
    /// Its requester's time is ahead.
    NotBefore(DateTime<Utc>),
    /// Its target's change windows are closed now; they next open then.
    Window(DateTime<Utc>),
    /// Its target's change windows never open (within a year), or name a
    /// window the configuration does not define.
    NoWindow,
}

impl Hold {
    /// When it may land, if ever.
    pub fn until(self) -> Option<DateTime<Utc>> {
        match self {
            Self::NotBefore(at) | Self::Window(at) => Some(at),
            Self::Free | Self::NoWindow => None,
        }
    }

    /// The words on its timeline and page.
    pub fn describe(self) -> String {
        match self {
            Self::Free => "may land now".to_owned(),
            Self::NotBefore(at) => format!("scheduled: waits until {} (notBefore)", rfc3339(at)),
            Self::Window(at) => format!(
                "waits for its target's next change window, which opens at {}",
                rfc3339(at)
            ),
            Self::NoWindow => "waits for a change window of its target, and none opens within a \
                 year (see the target's `windows`)"
                .to_owned(),
        }
    }
}

/// What holds a request for `target_key` with `not_before` at `now`: its
/// own time first, then the target's windows from that time on.
pub fn hold(
    settings: &Settings,
    target_key: &str,
    not_before: Option<NaiveDateTime>,
    now: DateTime<Utc>,
) -> Hold {
    let own = not_before.map(|at| at.and_utc()).filter(|at| *at > now);
    let from = own.unwrap_or(now);
    let names = settings
        .targets
        .get(target_key)
        .map(|target| target.windows.as_slice())
        .unwrap_or_default();
    match settings.windows.opening(names, from) {
        Opening::Open => own.map_or(Hold::Free, Hold::NotBefore),
        Opening::OpensAt(at) => Hold::Window(at),
        Opening::Never => Hold::NoWindow,
    }
}

/// Whether `target_key`'s windows let a request land at `now` (the claim's
/// test; its own time the claim reads from the database).
pub fn windows_open(settings: &Settings, target_key: &str, now: DateTime<Utc>) -> bool {
    hold(settings, target_key, None, now) == Hold::Free
}

fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}
