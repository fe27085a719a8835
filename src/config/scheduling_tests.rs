//! The `[windows.<name>]`, `targets.<key>` and `[scheduling]` keys: how
//! each is read, what a mistake resolves to (a window that never opens,
//! with a warning naming the key), and how the configuration view shows
//! them.

use chrono::{DateTime, NaiveDate, TimeZone, Utc};

use super::*;
use crate::config::{Opening, Problem, Settings, Severity, source};

fn load(text: &str) -> (Settings, Vec<Problem>) {
    Settings::from_table(&source::parse(text).unwrap(), None)
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
fn a_window_is_read_with_its_kind_start_duration_rule_and_zone() {
    let (settings, problems) = load(&format!(
        "[access]\ntimezone = \"Europe/Berlin\"\n{WEEKDAY_MORNINGS}\n[windows.freeze]\nkind = \"Deny\"\ndtstart = 2026-12-24T00:00:00\nduration = \"3d\"\n"
    ));
    assert!(problems.is_empty(), "{problems:?}");
    let windows = settings.windows;
    let mornings = windows.get("mornings").unwrap();
    assert_eq!(mornings.kind, WindowKind::Allow);
    let rule = mornings.rule.as_ref().unwrap();
    assert_eq!(
        rule.dtstart,
        NaiveDate::from_ymd_opt(2026, 1, 5)
            .unwrap()
            .and_hms_opt(6, 0, 0)
            .unwrap()
    );
    assert_eq!(rule.duration, Duration::from_secs(2 * 3600));
    assert_eq!(
        rule.rrule.as_deref(),
        Some("FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR")
    );
    assert_eq!(rule.timezone, Tz::Europe__Berlin);

    // A TOML local date-time works as well as a string, and no rule is one occurrence.
    let freeze = windows.get("freeze").unwrap();
    assert_eq!(freeze.kind, WindowKind::Deny);
    let rule = freeze.rule.as_ref().unwrap();
    assert_eq!(rule.rrule, None);
    assert_eq!(rule.duration, Duration::from_secs(3 * 86_400));
    assert_eq!(
        windows.iter().map(|(name, _)| name).collect::<Vec<_>>(),
        ["freeze", "mornings"]
    );
}

#[test]
fn a_window_that_cannot_be_read_never_opens_and_the_warning_names_the_key() {
    let cases = [
        ("rrule = \"FREQ=FORTNIGHTLY\"", "windows.w.rrule"),
        ("rrule = \"FREQ=DAILY;BYHOUR=25\"", "windows.w.rrule"),
        ("rrule = 7", "windows.w.rrule"),
        ("kind = \"maybe\"", "windows.w.kind"),
        (
            "dtstart = \"2026-01-05T06:00:00+01:00\"",
            "windows.w.dtstart",
        ),
        ("dtstart = \"next monday\"", "windows.w.dtstart"),
        ("duration = \"soon\"", "windows.w.duration"),
        ("duration = \"0s\"", "windows.w.duration"),
        // The clocks in Berlin go from 02:00 to 03:00 on 29 March 2026.
        ("dtstart = \"2026-03-29T02:30:00\"", "windows.w.dtstart"),
        // UNTIL must be UTC when the start has a zone (RFC 5545).
        (
            "rrule = \"FREQ=DAILY;UNTIL=20260301T000000\"",
            "windows.w.rrule",
        ),
        (
            "rrule = \"FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30\"",
            "windows.w",
        ),
    ];
    for (line, key) in cases {
        // The line comes last, so it replaces the valid value before it.
        let mut keys = vec![
            "kind = \"deny\"",
            "dtstart = \"2026-01-05T06:00:00\"",
            "duration = \"2h\"",
            "rrule = \"FREQ=DAILY\"",
        ];
        let name = line.split(' ').next().unwrap();
        keys.retain(|k| !k.starts_with(name));
        keys.push(line);
        let text = format!(
            "[access]\ntimezone = \"Europe/Berlin\"\n[windows.w]\n{}\n",
            keys.join("\n")
        );
        let (settings, problems) = load(&text);
        let keys: Vec<(&str, Severity)> = problems
            .iter()
            .map(|p| (p.key.as_str(), p.severity))
            .collect();
        assert_eq!(keys, [(key, Severity::Warning)], "{line}: {problems:?}");
        assert!(
            problems[0].message.ends_with("the window never opens"),
            "{problems:?}"
        );
        let window = settings.windows.get("w").unwrap();
        assert!(window.rule.is_none(), "{line}");
        // A broken deny window becomes an allow window that never opens.
        assert_eq!(window.kind, WindowKind::Allow, "{line}");
        assert_eq!(
            settings
                .windows
                .opening(&names(&["w"]), utc(2026, 1, 6, 6, 30)),
            Opening::Never,
            "{line}"
        );
    }
}

#[test]
fn missing_keys_and_an_unknown_zone_are_warnings_unknown_keys_errors() {
    let (settings, problems) = load("[windows.w]\nrrule = \"FREQ=DAILY\"\n");
    let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["windows.w.dtstart", "windows.w.duration"]);
    assert!(problems.iter().all(|p| p.severity == Severity::Warning));
    assert!(settings.windows.get("w").unwrap().rule.is_none());

    let (settings, problems) = load(&format!(
        "[access]\ntimezone = \"Mars/Base\"\n{WEEKDAY_MORNINGS}"
    ));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].key, "access.timezone");
    assert!(problems[0].message.contains("no change window opens"));
    assert!(settings.windows.get("mornings").unwrap().rule.is_none());

    let (_, problems) = load(&format!("{WEEKDAY_MORNINGS}colour = \"blue\"\n"));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(
        (problems[0].key.as_str(), problems[0].severity),
        ("windows.mornings.colour", Severity::Error)
    );
}

#[test]
fn a_target_names_its_windows_and_whether_a_revert_needs_approval() {
    let (settings, problems) = load(&format!(
        "{WEEKDAY_MORNINGS}\n[targets.a]\nwindows = [\"mornings\"]\nrevert_requires_approval = false\n[targets.b]\n"
    ));
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(settings.targets["a"].windows, ["mornings"]);
    assert!(!settings.targets["a"].revert_requires_approval);
    assert!(settings.targets["b"].windows.is_empty());
    assert!(settings.targets["b"].revert_requires_approval);

    let (settings, problems) = load(&format!(
        "{WEEKDAY_MORNINGS}\n[targets.a]\nwindows = [\"mornings\", \"evenings\"]\nrevert_requires_approval = \"no\"\n"
    ));
    let keys: Vec<(&str, Severity)> = problems
        .iter()
        .map(|p| (p.key.as_str(), p.severity))
        .collect();
    assert_eq!(
        keys,
        [
            ("targets.a.windows", Severity::Warning),
            ("targets.a.revert_requires_approval", Severity::Warning)
        ]
    );
    assert!(problems[0].message.contains("\"evenings\""));
    let target = &settings.targets["a"];
    // Not a boolean: the safer choice, approvals.
    assert!(target.revert_requires_approval);
    assert_eq!(
        settings
            .windows
            .opening(&target.windows, utc(2026, 1, 6, 7, 0)),
        Opening::Never
    );
}

#[test]
fn scheduling_max_ahead_defaults_to_thirty_days_and_must_be_positive() {
    let (settings, problems) = load("");
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        settings.scheduling.max_ahead,
        Duration::from_secs(30 * 86_400)
    );
    let (settings, _) = load("[scheduling]\nmax_ahead = \"7d\"\n");
    assert_eq!(
        settings.scheduling.max_ahead,
        Duration::from_secs(7 * 86_400)
    );
    let (settings, problems) = load("[scheduling]\nmax_ahead = \"0s\"\n");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(
        (problems[0].key.as_str(), problems[0].severity),
        ("scheduling.max_ahead", Severity::Warning)
    );
    assert_eq!(
        settings.scheduling.max_ahead,
        Duration::from_secs(30 * 86_400)
    );
}

#[test]
fn the_effective_configuration_shows_windows_targets_and_scheduling() {
    let (settings, _) = load(&format!(
        "[access]\ntimezone = \"Europe/Berlin\"\n{WEEKDAY_MORNINGS}\n[windows.broken]\nduration = \"2h\"\n[targets.a]\nwindows = [\"mornings\"]\n[scheduling]\nmax_ahead = \"2d\"\n"
    ));
    let shown = serde_json::to_value(crate::config::effective::effective(&settings)).unwrap();
    assert_eq!(
        shown["windows"]["mornings"],
        serde_json::json!({
            "kind": "allow",
            "dtstart": "2026-01-05T06:00:00",
            "duration": "7200s",
            "rrule": "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR",
            "timezone": "Europe/Berlin",
        })
    );
    assert_eq!(shown["windows"]["broken"], "invalid (never opens)");
    assert_eq!(
        shown["targets"]["a"]["windows"],
        serde_json::json!(["mornings"])
    );
    assert_eq!(shown["targets"]["a"]["revertRequiresApproval"], true);
    assert_eq!(shown["scheduling"]["maxAhead"], "172800s");
}
