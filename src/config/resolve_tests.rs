//! One row per case of SPEC §4's fail-safe table: missing, blank, typo,
//! negative, wrong type, and the valid spellings.

use super::*;
use chrono::TimeZone;

fn s(text: &str) -> Option<Value> {
    Some(Value::String(text.to_owned()))
}

fn i(n: i64) -> Option<Value> {
    Some(Value::Integer(n))
}

fn b(on: bool) -> Option<Value> {
    Some(Value::Boolean(on))
}

fn arr(items: &[&str]) -> Option<Value> {
    Some(Value::Array(
        items
            .iter()
            .map(|c| Value::String((*c).to_owned()))
            .collect(),
    ))
}

/// Runs `resolve` over `(case, raw, expected value, expects a warning)` rows.
fn check<T: PartialEq + std::fmt::Debug>(
    resolve: impl Fn(Option<&Value>) -> Resolved<T>,
    rows: Vec<(&str, Option<Value>, T, bool)>,
) {
    for (case, raw, expected, warns) in rows {
        let got = resolve(raw.as_ref());
        assert_eq!(got.value, expected, "case {case}");
        assert_eq!(
            got.warning.is_some(),
            warns,
            "case {case}: {:?}",
            got.warning
        );
    }
}

#[test]
fn rate_limit_never_blocks_all() {
    check(
        rate_limit,
        vec![
            ("missing", None, None, false),
            ("blank", s("  "), None, false),
            ("zero", i(0), None, false),
            ("negative", i(-5), None, true),
            ("typo", s("ten"), None, true),
            ("wrong type", b(true), None, true),
            ("float", Some(Value::Float(2.5)), None, true),
            ("valid", i(10), Some(10), false),
            ("valid string", s("10"), Some(10), false),
        ],
    );
}

#[test]
fn access_mode_fails_closed() {
    check(
        |raw| access_mode(raw, None),
        vec![
            ("missing", None, AccessMode::TestWindow, false),
            ("blank", s(""), AccessMode::TestWindow, false),
            ("open", s("OPEN"), AccessMode::Open, false),
            ("lower case", s(" open "), AccessMode::Open, false),
            (
                "test window",
                s("TEST_WINDOW"),
                AccessMode::TestWindow,
                false,
            ),
            ("closed", s("CLOSED"), AccessMode::Closed, false),
            ("typo", s("OPNE"), AccessMode::Closed, true),
            ("negative", i(-1), AccessMode::Closed, true),
            ("wrong type", b(true), AccessMode::Closed, true),
        ],
    );
}

#[test]
fn a_closed_service_stays_closed_when_its_mode_line_goes_missing() {
    for raw in [None, s(""), s("  ")] {
        let kept = access_mode(raw.as_ref(), Some(AccessMode::Closed));
        assert_eq!(kept.value, AccessMode::Closed, "{raw:?}");
        assert!(kept.warning.is_some(), "logged: {raw:?}");
        // Open or windowed before: the default, which admits only inside a window.
        assert_eq!(
            access_mode(raw.as_ref(), Some(AccessMode::Open)).value,
            AccessMode::TestWindow
        );
    }
    assert_eq!(
        access_mode(s("OPEN").as_ref(), Some(AccessMode::Closed)).value,
        AccessMode::Open,
        "an explicit mode still applies"
    );
}

#[test]
fn access_window_is_read_in_the_configured_zone() {
    let shanghai = s("Asia/Shanghai");
    let resolved = access_window(s("09:00-18:00").as_ref(), shanghai.as_ref());
    assert_eq!(resolved.warning, None);
    let window = resolved.value;
    // 02:00 UTC is 10:00 in Shanghai: open there, whatever the host's zone is.
    assert!(window.contains(Utc.with_ymd_and_hms(2026, 1, 1, 2, 0, 0).unwrap()));
    // 12:00 UTC is 20:00 in Shanghai: closed.
    assert!(!window.contains(Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap()));

    let overnight = access_window(s("22:00-06:00").as_ref(), None).value;
    assert!(overnight.contains(Utc.with_ymd_and_hms(2026, 1, 1, 23, 0, 0).unwrap()));
    assert!(overnight.contains(Utc.with_ymd_and_hms(2026, 1, 1, 5, 59, 0).unwrap()));
    assert!(!overnight.contains(Utc.with_ymd_and_hms(2026, 1, 1, 6, 0, 0).unwrap()));
}

#[test]
fn access_window_rows() {
    let utc = Tz::UTC;
    let nine = NaiveTime::from_hms_opt(9, 0, 0).unwrap();
    let six_pm = NaiveTime::from_hms_opt(18, 0, 0).unwrap();
    let daily = |tz| AccessWindow::Daily {
        start: nine,
        end: six_pm,
        tz,
    };
    type Row = (
        &'static str,
        Option<Value>,
        Option<Value>,
        AccessWindow,
        bool,
    );
    let rows: Vec<Row> = vec![
        ("missing", None, None, AccessWindow::Unset, false),
        (
            "blank",
            s(""),
            s("Asia/Shanghai"),
            AccessWindow::Unset,
            false,
        ),
        (
            "all day",
            s("00:00-24:00"),
            None,
            AccessWindow::AllDay,
            false,
        ),
        (
            "zone missing is UTC",
            s("09:00-18:00"),
            None,
            daily(utc),
            false,
        ),
        (
            "zone blank is UTC",
            s("09:00-18:00"),
            s(" "),
            daily(utc),
            false,
        ),
        ("typo", s("9am-6pm"), None, AccessWindow::Never, true),
        ("negative", i(-1), None, AccessWindow::Never, true),
        ("wrong type", b(true), None, AccessWindow::Never, true),
        (
            "zone typo",
            s("09:00-18:00"),
            s("Mars/Base"),
            AccessWindow::Never,
            true,
        ),
        (
            "zone wrong type",
            s("09:00-18:00"),
            i(8),
            AccessWindow::Never,
            true,
        ),
    ];
    for (case, window, zone, expected, warns) in rows {
        let got = access_window(window.as_ref(), zone.as_ref());
        assert_eq!(got.value, expected, "case {case}");
        assert_eq!(got.warning.is_some(), warns, "case {case}");
    }
}

#[test]
fn test_window_mode_follows_the_window() {
    let noon = Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap();
    let morning = access_window(s("08:00-11:00").as_ref(), None).value;
    assert!(access_open(AccessMode::Open, &AccessWindow::Never, noon));
    assert!(!access_open(
        AccessMode::Closed,
        &AccessWindow::AllDay,
        noon
    ));
    assert!(access_open(
        AccessMode::TestWindow,
        &AccessWindow::AllDay,
        noon
    ));
    // No window: a TEST_WINDOW that lost its window admits nobody, and says why.
    assert!(!access_open(
        AccessMode::TestWindow,
        &AccessWindow::Unset,
        noon
    ));
    assert!(
        closed_by_configuration(AccessMode::TestWindow, &AccessWindow::Unset)
            .is_some_and(|why| why.contains("access.window"))
    );
    assert_eq!(
        closed_by_configuration(AccessMode::TestWindow, &morning),
        None
    );
    assert!(!access_open(AccessMode::TestWindow, &morning, noon));
    assert!(!access_open(
        AccessMode::TestWindow,
        &AccessWindow::Never,
        noon
    ));
}

#[test]
fn authz_rule_denies_when_unsure() {
    let codes = |c: &[&str]| Some(c.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>());
    check(
        authz_rule,
        vec![
            ("missing", None, None, false),
            ("blank", s(" "), None, false),
            ("empty list", arr(&[]), None, true),
            ("blank code", arr(&["owner", " "]), None, true),
            ("negative", i(-1), None, true),
            ("wrong type", b(true), None, true),
            ("one code", s("apply"), codes(&["apply"]), false),
            (
                "codes",
                arr(&["owner", "admin"]),
                codes(&["owner", "admin"]),
                false,
            ),
        ],
    );
}

#[test]
fn flow_order_keeps_the_last_good_value() {
    use FlowOrder::*;
    check(
        |raw| flow_order(raw, Some(MrFirst)),
        vec![
            ("missing", None, ApprovalFirst, false),
            ("blank", s(""), ApprovalFirst, false),
            ("approval first", s("approval_first"), ApprovalFirst, false),
            ("mr first", s("MR_FIRST"), MrFirst, false),
            ("typo keeps last good", s("mr-frist"), MrFirst, true),
            ("negative keeps last good", i(-1), MrFirst, true),
            ("wrong type keeps last good", b(false), MrFirst, true),
        ],
    );
    let at_start = flow_order(s("sideways").as_ref(), None);
    assert_eq!(at_start.value, ApprovalFirst);
    assert!(at_start.warning.is_some());
}

#[test]
fn approve_impl_defaults_to_standard() {
    use ApproveImpl::*;
    check(
        approve_impl,
        vec![
            ("missing", None, Standard, false),
            ("blank", s(""), Standard, false),
            ("checklist", s("checklist"), Checklist, false),
            ("standard", s("Standard"), Standard, false),
            ("typo", s("checklsit"), Standard, true),
            ("negative", i(-1), Standard, true),
            ("wrong type", b(true), Standard, true),
        ],
    );
}

#[test]
fn approval_retries_are_bounded() {
    check(
        approval_retries,
        vec![
            ("missing", None, 3, false),
            ("blank", s(""), 3, false),
            ("valid", i(5), 5, false),
            ("zero", i(0), 0, false),
            ("negative", i(-2), 0, true),
            ("huge", i(30_000), MAX_APPROVAL_RETRIES, true),
            ("typo", s("five"), 3, true),
            ("wrong type", b(true), 3, true),
        ],
    );
}

#[test]
fn the_train_depth_is_brought_into_range() {
    check(
        train_depth,
        vec![
            ("missing", None, 4, false),
            ("valid", i(7), 7, false),
            ("one", i(1), 1, false),
            ("zero", i(0), 1, true),
            ("huge", i(64), MAX_TRAIN_DEPTH, true),
            ("typo", s("four"), 4, true),
            ("wrong type", b(true), 4, true),
        ],
    );
}

#[test]
fn webhook_silent_mode_errs_towards_silence() {
    check(
        webhook_silent,
        vec![
            ("missing", None, false, false),
            ("blank", s(""), false, false),
            ("on", b(true), true, false),
            ("off", b(false), false, false),
            ("string false", s("false"), false, false),
            ("typo", s("flase"), true, true),
            ("negative", i(-1), true, true),
            ("wrong type", i(1), true, true),
        ],
    );
}

#[test]
fn log_level_keeps_current_when_invalid() {
    check(
        |raw| log_level(raw, "warn"),
        vec![
            ("missing", None, "info".to_owned(), false),
            ("blank", s(""), "info".to_owned(), false),
            ("level", s("debug"), "debug".to_owned(), false),
            (
                "filter",
                s("info,sqlx=warn"),
                "info,sqlx=warn".to_owned(),
                false,
            ),
            ("typo", s("debgu=[[x"), "warn".to_owned(), true),
            ("negative", i(-1), "warn".to_owned(), true),
            ("wrong type", b(true), "warn".to_owned(), true),
        ],
    );
}

#[test]
fn batch_settings_fall_back_to_defaults() {
    check(
        batch_enabled,
        vec![
            ("missing", None, true, false),
            ("off", b(false), false, false),
            ("typo", s("flase"), true, true),
            ("negative", i(-1), true, true),
        ],
    );
    let five = Duration::from_secs(5);
    check(
        |raw| duration(raw, five),
        vec![
            ("missing", None, five, false),
            ("blank", s(""), five, false),
            ("valid", s("250ms"), Duration::from_millis(250), false),
            ("zero", s("0s"), five, true),
            ("typo", s("5 secs!"), five, true),
            ("negative", i(-5), five, true),
        ],
    );
    check(
        |raw| positive_count(raw, 500),
        vec![
            ("missing", None, 500, false),
            ("valid", i(50), 50, false),
            ("zero", i(0), 500, true),
            ("negative", i(-1), 500, true),
            ("wrong type", s("many"), 500, true),
        ],
    );
}
