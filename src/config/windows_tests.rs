//! When a target requiring change windows may merge: inside and outside
//! occurrences, with deny windows, across daylight-saving changes, and how
//! far ahead the search looks.

use chrono::TimeZone;

use super::*;
use crate::config::{Problem, Settings, source};

fn load(text: &str) -> (Settings, Vec<Problem>) {
    Settings::from_table(&source::parse(text).unwrap(), None)
}

/// The windows of a file that must load without a problem.
fn windows(text: &str) -> Windows {
    let (settings, problems) = load(text);
    assert!(problems.is_empty(), "{problems:?}");
    settings.windows
}

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
}

fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| (*name).to_owned()).collect()
}

/// 06:00–08:00 UTC on weekdays, from Monday 5 January 2026.
const WEEKDAY_MORNINGS: &str = r#"
[windows.mornings]
dtstart = "2026-01-05T06:00:00"
duration = "2h"
rrule = "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR"
"#;

#[test]
fn a_weekly_window_opens_inside_an_occurrence_and_says_when_outside() {
    let windows = windows(WEEKDAY_MORNINGS);
    let mornings = names(&["mornings"]);
    let at = |instant| windows.opening(&mornings, instant);
    // Tuesday 6 January.
    assert_eq!(at(utc(2026, 1, 6, 6, 0)), Opening::Open);
    assert_eq!(at(utc(2026, 1, 6, 7, 59)), Opening::Open);
    // The end is not inside: the next opening is Wednesday's.
    assert_eq!(
        at(utc(2026, 1, 6, 8, 0)),
        Opening::OpensAt(utc(2026, 1, 7, 6, 0))
    );
    assert_eq!(
        at(utc(2026, 1, 6, 5, 59)),
        Opening::OpensAt(utc(2026, 1, 6, 6, 0))
    );
    // Friday after the window: Monday.
    assert_eq!(
        at(utc(2026, 1, 9, 9, 0)),
        Opening::OpensAt(utc(2026, 1, 12, 6, 0))
    );
    // Before the first occurrence: the first.
    assert_eq!(
        at(utc(2025, 12, 31, 12, 0)),
        Opening::OpensAt(utc(2026, 1, 5, 6, 0))
    );
    // A year later the rule still runs.
    assert_eq!(
        at(utc(2027, 1, 2, 12, 0)),
        Opening::OpensAt(utc(2027, 1, 4, 6, 0))
    );
}

#[test]
fn deny_windows_hold_merges_back_inside_their_occurrences() {
    let windows = windows(
        r#"
        [windows.days]
        dtstart = "2026-01-05T06:00:00"
        duration = "8h"
        rrule = "FREQ=DAILY"
        [windows.lunch]
        kind = "deny"
        dtstart = "2026-01-05T12:00:00"
        duration = "1h"
        rrule = "FREQ=DAILY"
        [windows.late]
        kind = "deny"
        dtstart = "2026-01-05T13:00:00"
        duration = "4h"
        rrule = "FREQ=DAILY"
        "#,
    );
    let both = names(&["days", "lunch"]);
    assert_eq!(
        windows.opening(&both, utc(2026, 2, 2, 11, 0)),
        Opening::Open
    );
    assert_eq!(
        windows.opening(&both, utc(2026, 2, 2, 12, 30)),
        Opening::OpensAt(utc(2026, 2, 2, 13, 0))
    );
    // Only deny windows: any time outside them.
    let lunch = names(&["lunch"]);
    assert_eq!(
        windows.opening(&lunch, utc(2026, 2, 2, 20, 0)),
        Opening::Open
    );
    assert_eq!(
        windows.opening(&lunch, utc(2026, 2, 2, 12, 0)),
        Opening::OpensAt(utc(2026, 2, 2, 13, 0))
    );
    // Lunch then late leave nothing of the day's window from 12:00: the
    // next opening is the next morning.
    let all = names(&["days", "lunch", "late"]);
    assert_eq!(
        windows.opening(&all, utc(2026, 2, 2, 12, 15)),
        Opening::OpensAt(utc(2026, 2, 3, 6, 0))
    );
}

#[test]
fn a_deny_window_across_two_allow_windows_opens_when_it_ends() {
    let windows = windows(
        r#"
        [windows.early]
        dtstart = "2026-02-02T01:00:00"
        duration = "4h"
        [windows.later]
        dtstart = "2026-02-02T06:00:00"
        duration = "4h"
        [windows.maintenance]
        kind = "deny"
        dtstart = "2026-02-02T04:00:00"
        duration = "4h"
        "#,
    );
    let all = names(&["early", "later", "maintenance"]);
    assert_eq!(windows.opening(&all, utc(2026, 2, 2, 3, 0)), Opening::Open);
    assert_eq!(
        windows.opening(&all, utc(2026, 2, 2, 4, 30)),
        Opening::OpensAt(utc(2026, 2, 2, 8, 0))
    );
    // One occurrence each: after the last, never again.
    assert_eq!(
        windows.opening(&all, utc(2026, 2, 2, 10, 0)),
        Opening::Never
    );
}

/// 06:00–07:00 Berlin time every day: 05:00 UTC in winter, 04:00 UTC in summer.
fn berlin_mornings() -> Windows {
    windows(
        r#"
        [access]
        timezone = "Europe/Berlin"
        [windows.mornings]
        dtstart = "2026-03-20T06:00:00"
        duration = "1h"
        rrule = "FREQ=DAILY"
        "#,
    )
}

#[test]
fn a_window_opens_at_its_wall_clock_time_when_the_clocks_go_forward() {
    let windows = berlin_mornings();
    let mornings = names(&["mornings"]);
    // Saturday 28 March, CET (UTC+1).
    assert_eq!(
        windows.opening(&mornings, utc(2026, 3, 28, 5, 30)),
        Opening::Open
    );
    // Sunday 29 March the clocks go forward at 02:00: 06:00 is 04:00 UTC.
    assert_eq!(
        windows.opening(&mornings, utc(2026, 3, 28, 7, 0)),
        Opening::OpensAt(utc(2026, 3, 29, 4, 0))
    );
    assert_eq!(
        windows.opening(&mornings, utc(2026, 3, 29, 4, 30)),
        Opening::Open
    );
    // 05:30 UTC is 07:30 summer time: closed until Monday.
    assert_eq!(
        windows.opening(&mornings, utc(2026, 3, 29, 5, 30)),
        Opening::OpensAt(utc(2026, 3, 30, 4, 0))
    );
}

#[test]
fn a_window_opens_at_its_wall_clock_time_when_the_clocks_go_back() {
    let windows = berlin_mornings();
    let mornings = names(&["mornings"]);
    // Saturday 24 October, CEST (UTC+2).
    assert_eq!(
        windows.opening(&mornings, utc(2026, 10, 24, 4, 30)),
        Opening::Open
    );
    // Sunday 25 October the clocks go back at 03:00: 06:00 is 05:00 UTC.
    assert_eq!(
        windows.opening(&mornings, utc(2026, 10, 24, 5, 0)),
        Opening::OpensAt(utc(2026, 10, 25, 5, 0))
    );
    // 04:30 UTC was inside the window the day before; now it is 05:30.
    assert_eq!(
        windows.opening(&mornings, utc(2026, 10, 25, 4, 30)),
        Opening::OpensAt(utc(2026, 10, 25, 5, 0))
    );
    assert_eq!(
        windows.opening(&mornings, utc(2026, 10, 25, 5, 59)),
        Opening::Open
    );
}

#[test]
fn no_names_is_open_an_unknown_name_never() {
    let windows = windows(WEEKDAY_MORNINGS);
    // Sunday: outside the window, but nothing is required.
    assert_eq!(windows.opening(&[], utc(2026, 1, 11, 12, 0)), Opening::Open);
    // Inside the known window, but the other name is unknown.
    assert_eq!(
        windows.opening(&names(&["mornings", "mornign"]), utc(2026, 1, 6, 7, 0)),
        Opening::Never
    );
}

#[test]
fn the_search_ends_four_hundred_days_ahead() {
    let windows = windows(
        r#"
        [windows.new-year]
        dtstart = "2026-01-01T00:00:00"
        duration = "1d"
        rrule = "FREQ=YEARLY"
        [windows.far]
        dtstart = "2028-01-01T00:00:00"
        duration = "1h"
        "#,
    );
    assert_eq!(
        windows.opening(&names(&["new-year"]), utc(2026, 1, 2, 0, 0)),
        Opening::OpensAt(utc(2027, 1, 1, 0, 0))
    );
    assert_eq!(
        windows.opening(&names(&["far"]), utc(2026, 1, 2, 0, 0)),
        Opening::Never
    );
    assert_eq!(
        windows.opening(&names(&["far"]), utc(2027, 6, 1, 0, 0)),
        Opening::OpensAt(utc(2028, 1, 1, 0, 0))
    );
}

#[test]
fn a_search_resumes_where_the_last_stopped_and_an_earlier_one_starts_over() {
    // A thousand daily occurrences, the last on 26 September 2026.
    let windows = windows(
        r#"
        [windows.daily]
        dtstart = "2024-01-01T06:00:00"
        duration = "1h"
        rrule = "FREQ=DAILY;COUNT=1000"
        "#,
    );
    let daily = names(&["daily"]);
    assert_eq!(
        windows.opening(&daily, utc(2026, 6, 1, 7, 0)),
        Opening::OpensAt(utc(2026, 6, 2, 6, 0))
    );
    // Earlier than where the last search saved its place.
    assert_eq!(
        windows.opening(&daily, utc(2025, 1, 1, 6, 30)),
        Opening::Open
    );
    // Later again: the count still ends the rule where it did.
    assert_eq!(
        windows.opening(&daily, utc(2026, 9, 26, 6, 30)),
        Opening::Open
    );
    assert_eq!(
        windows.opening(&daily, utc(2026, 9, 26, 7, 0)),
        Opening::Never
    );
}
