//! Requests that wait for their time (SPEC §12): `notBefore` kept across a
//! restart, refused when it is not ahead or too far ahead, withdrawn before
//! its time; and targets that land only inside their change windows, which
//! open at their local wall-clock time across a daylight-saving change.

use chrono::{DateTime, Datelike, Duration as Span, NaiveDate, SecondsFormat, TimeZone, Utc};
use serde_json::{Value, json};

use changegate_sim::gitlab::Endpoint;

use super::batched::claim_round;
use super::end_to_end::{World, WorldOptions, world, world_with};
use super::wait_for;
use crate::helpers::{each_backend, spawn_app, sqlite_db};

fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Alice applies on `target` for `subject`, not before `not_before`.
async fn apply_at(
    w: &World,
    target: &str,
    subject: &str,
    not_before: DateTime<Utc>,
) -> (u16, Value) {
    let answer = w
        .app
        .post_as(
            "alice",
            "/api/v1/applications",
            &json!({ "targetKey": target, "subjectId": subject, "reason": "later",
                     "notBefore": rfc3339(not_before) }),
        )
        .await;
    (answer.status().as_u16(), answer.json().await.unwrap())
}

async fn scheduled(w: &World, id: &str) -> Value {
    wait_for(&w.app, id, |v| v["step"]["name"] == "SCHEDULED").await
}

#[tokio::test]
async fn a_scheduled_apply_waits_for_its_time_across_a_restart_then_merges() {
    for test_db in each_backend().await {
        let w = world(&test_db.url, "").await;
        let not_before = Utc::now() + Span::seconds(4);
        let (status, answer) = apply_at(&w, "demo.feature-flags", "alice", not_before).await;
        assert_eq!(status, 202, "{answer}");
        let id = answer["operationId"].as_str().unwrap().to_owned();
        let view = scheduled(&w, &id).await;
        assert_eq!(view["notBefore"], rfc3339(not_before), "{view}");
        assert_eq!(view["scheduled"]["waitsFor"], "NOT_BEFORE", "{view}");
        assert_eq!(view["scheduled"]["until"], rfc3339(not_before), "{view}");

        w.app.stop().await.unwrap();
        let app = spawn_app(&test_db.url, &w.config).await;
        app.wait_until_ready().await;
        w.approval
            .set_callback_url(format!("{}/callbacks/approval", app.address));
        w.deploy
            .set_callback_url(format!("{}/callbacks/deploy", app.address));
        let view = wait_for(&app, &id, |v| {
            v["status"] == "VALIDATED" || v["next"] == "CONTACT_TEAM"
        })
        .await;
        assert_eq!(view["status"], "VALIDATED", "{}: {view}", test_db.name);
        let merges = w.gitlab.merge_log(w.project);
        assert_eq!(merges.len(), 1, "{merges:?}");
        assert!(
            merges[0].merged_at >= not_before,
            "{}: merged at {} before its time {not_before}",
            test_db.name,
            merges[0].merged_at
        );
        app.stop().await.unwrap();
    }
}

#[tokio::test]
async fn a_time_that_is_not_ahead_or_is_too_far_ahead_is_refused() {
    let db = sqlite_db().await;
    let w = world(&db.url, "[scheduling]\nmax_ahead = \"1h\"\n").await;
    for (at, expected) in [
        (Utc::now() - Span::minutes(1), "must be in the future"),
        (Utc::now() + Span::hours(2), "at most 1h ahead"),
    ] {
        let (status, answer) = apply_at(&w, "demo.feature-flags", "alice", at).await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["code"], "INVALID_ARGUMENT");
        let message = answer["message"].as_str().unwrap();
        assert!(
            message.contains("notBefore") && message.contains(expected),
            "{message}"
        );
    }
    assert!(w.approval.requests().is_empty(), "nothing was recorded");
}

#[tokio::test]
async fn a_scheduled_request_withdrawn_before_its_time_never_reaches_gitlab() {
    for test_db in each_backend().await {
        let w = world(&test_db.url, "").await;
        let (_, answer) = apply_at(
            &w,
            "demo.feature-flags",
            "alice",
            Utc::now() + Span::hours(1),
        )
        .await;
        let id = answer["operationId"].as_str().unwrap().to_owned();
        scheduled(&w, &id).await;

        let path = format!("/api/v1/operations/{id}/withdraw");
        let stranger = w
            .app
            .post_as("mallory", &path, &json!({ "reason": "not mine" }))
            .await;
        assert_eq!(stranger.status(), 404);
        let withdrawn = w
            .app
            .post_as("alice", &path, &json!({ "reason": "plans changed" }))
            .await;
        assert_eq!(withdrawn.status(), 200);
        let view: Value = withdrawn.json().await.unwrap();
        assert_eq!(
            (view["status"].as_str(), view["step"]["name"].as_str()),
            (Some("ABANDONED"), Some("WITHDRAWN")),
            "{}: {view}",
            test_db.name
        );
        let again = w
            .app
            .post_as("alice", &path, &json!({ "reason": "twice" }))
            .await;
        assert_eq!(again.status(), 409);

        claim_round(&w).await;
        assert_eq!(
            w.gitlab.calls(Endpoint::CreateBranch),
            0,
            "{}",
            test_db.name
        );
        assert_eq!(
            super::apply(&w.app).await.len(),
            36,
            "the binding may be applied for again"
        );
    }
}

/// `at` as a window's `dtstart`: local wall-clock time, no offset.
fn local(at: DateTime<Utc>, tz: chrono_tz::Tz) -> String {
    at.with_timezone(&tz)
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string()
}

#[tokio::test]
async fn a_target_with_a_change_window_lands_only_once_it_opens_and_waits_a_day_once_it_closed() {
    for test_db in each_backend().await {
        let opens = DateTime::from_timestamp(Utc::now().timestamp() + 3, 0).unwrap();
        let closes = opens + Span::seconds(4);
        let extra = format!(
            "[windows.soon]\ndtstart = {:?}\nduration = \"4s\"\nrrule = \"FREQ=DAILY\"\n\
             [targets.\"windowed\"]\nself_only = false\nwindows = [\"soon\"]\n",
            local(opens, chrono_tz::UTC)
        );
        let w = world(&test_db.url, &extra).await;
        let body = json!({ "targetKey": "windowed", "reason": "in the window" });
        let answer: Value = w
            .app
            .post_as("alice", "/api/v1/applications", &body)
            .await
            .json()
            .await
            .unwrap();
        let id = answer["operationId"].as_str().unwrap().to_owned();
        let view = scheduled(&w, &id).await;
        assert_eq!(view["scheduled"]["waitsFor"], "WINDOW", "{view}");
        assert_eq!(view["scheduled"]["until"], rfc3339(opens), "{view}");

        let view = wait_for(&w.app, &id, |v| {
            v["status"] == "VALIDATED" || v["next"] == "CONTACT_TEAM"
        })
        .await;
        assert_eq!(view["status"], "VALIDATED", "{}: {view}", test_db.name);
        let timeline: Value = w
            .app
            .get_as("alice", &format!("/api/v1/operations/{id}/timeline"))
            .await
            .json()
            .await
            .unwrap();
        let claimed = timeline["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|item| {
                item["message"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("in merge batch")
            })
            .expect("claimed into a batch");
        let claimed_at: DateTime<Utc> = claimed["at"].as_str().unwrap().parse().unwrap();
        assert!(
            claimed_at >= opens && claimed_at < closes,
            "{}: claimed at {claimed_at}, the window is {opens} to {closes}",
            test_db.name
        );

        // Once the window has closed, the next request waits for tomorrow's.
        while Utc::now() < closes {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let later = w
            .app
            .post_as(
                "alice",
                "/api/v1/applications",
                &json!({ "targetKey": "windowed", "subjectId": "bob", "reason": "too late" }),
            )
            .await;
        let later: Value = later.json().await.unwrap();
        let later = later["operationId"].as_str().unwrap().to_owned();
        let view = scheduled(&w, &later).await;
        assert_eq!(
            view["scheduled"]["until"],
            rfc3339(opens + Span::days(1)),
            "{}: {view}",
            test_db.name
        );
    }
}

/// The last Sunday of March of `year`: Europe's switch to summer time.
fn summer_time_starts(year: i32) -> NaiveDate {
    let last = NaiveDate::from_ymd_opt(year, 3, 31).unwrap();
    last - Span::days(i64::from(last.weekday().num_days_from_sunday()))
}

#[tokio::test]
async fn a_window_opens_at_its_local_time_on_both_sides_of_a_daylight_saving_change() {
    for test_db in each_backend().await {
        let w = world_with(
            &test_db.url,
            WorldOptions {
                access_keys: "timezone = \"Europe/Berlin\"\n".to_owned(),
                extra: "[scheduling]\nmax_ahead = \"500d\"\n\
                        [windows.mornings]\ndtstart = \"2026-01-01T06:00:00\"\nduration = \"1h\"\nrrule = \"FREQ=DAILY\"\n\
                        [targets.\"mornings\"]\nself_only = false\nwindows = [\"mornings\"]\n"
                    .to_owned(),
                ..WorldOptions::default()
            },
        )
        .await;
        let switch = summer_time_starts(Utc::now().year() + 1);
        let noon = |day: NaiveDate| Utc.from_utc_datetime(&day.and_hms_opt(12, 0, 0).unwrap());
        // 06:00 in Berlin is 05:00 UTC in winter and 04:00 UTC in summer.
        for (not_before, opens) in [
            (
                noon(switch - Span::days(2)),
                Utc.from_utc_datetime(&(switch - Span::days(1)).and_hms_opt(5, 0, 0).unwrap()),
            ),
            (
                noon(switch - Span::days(1)),
                Utc.from_utc_datetime(&switch.and_hms_opt(4, 0, 0).unwrap()),
            ),
        ] {
            let subject = format!("s{}", not_before.timestamp());
            let (status, answer) = apply_at(&w, "mornings", &subject, not_before).await;
            assert_eq!(status, 202, "{answer}");
            let id = answer["operationId"].as_str().unwrap().to_owned();
            let view = scheduled(&w, &id).await;
            assert_eq!(view["scheduled"]["waitsFor"], "WINDOW", "{view}");
            assert_eq!(
                view["scheduled"]["until"],
                rfc3339(opens),
                "{}: {view}",
                test_db.name
            );
        }
    }
}

#[tokio::test]
async fn a_scheduled_removal_waits_for_its_time_and_a_removal_cancels_a_scheduled_apply() {
    for test_db in each_backend().await {
        let w = world(&test_db.url, "").await;
        let applied = super::apply(&w.app).await;
        wait_for(&w.app, &applied, |v| v["status"] == "VALIDATED").await;

        let not_before = Utc::now() + Span::seconds(3);
        let removal = remove_at(&w, not_before).await;
        let view = scheduled(&w, &removal).await;
        assert_eq!(view["scheduled"]["until"], rfc3339(not_before), "{view}");
        let view = wait_for(&w.app, &removal, |v| {
            v["status"] == "CLOSED" || v["next"] == "CONTACT_TEAM"
        })
        .await;
        assert_eq!(view["status"], "CLOSED", "{}: {view}", test_db.name);
        let merges = w.gitlab.merge_log(w.project);
        assert!(
            merges.last().unwrap().merged_at >= not_before,
            "{}: {merges:?}",
            test_db.name
        );

        // An apply for later, then a removal before its time: it is cancelled.
        let (_, answer) = apply_at(
            &w,
            "demo.feature-flags",
            "alice",
            Utc::now() + Span::hours(1),
        )
        .await;
        let later = answer["operationId"].as_str().unwrap().to_owned();
        scheduled(&w, &later).await;
        let cancel = w
            .app
            .post_as(
                "alice",
                "/api/v1/bindings/demo.feature-flags/close",
                &json!({ "reason": "not after all" }),
            )
            .await;
        assert_eq!(cancel.status(), 202);
        let cancel: Value = cancel.json().await.unwrap();
        assert_eq!(cancel["code"], "WITHDRAWN", "{cancel}");
        assert_eq!(cancel["operationId"], later.as_str());
        let view = super::batched::view(&w, &later).await;
        assert_eq!(
            (view["status"].as_str(), view["step"]["name"].as_str()),
            (Some("ABANDONED"), Some("WITHDRAWN")),
            "{}: {view}",
            test_db.name
        );
    }
}

/// Alice asks for the removal of her `demo.feature-flags` binding at `at`.
async fn remove_at(w: &World, at: DateTime<Utc>) -> String {
    let removal: Value = w
        .app
        .post_as(
            "alice",
            "/api/v1/bindings/demo.feature-flags/close",
            &json!({ "reason": "later", "notBefore": rfc3339(at) }),
        )
        .await
        .json()
        .await
        .unwrap();
    removal["operationId"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_scheduled_removal_withdrawn_before_its_time_hands_the_binding_back() {
    for test_db in each_backend().await {
        let w = world(&test_db.url, "").await;
        let applied = super::apply(&w.app).await;
        wait_for(&w.app, &applied, |v| v["status"] == "VALIDATED").await;
        let merge_requests = w.gitlab.calls(Endpoint::CreateMergeRequest);

        let removal = remove_at(&w, Utc::now() + Span::hours(1)).await;
        scheduled(&w, &removal).await;
        let taken_over = super::batched::view(&w, &applied).await;
        assert_eq!(taken_over["supersededBy"], removal.as_str(), "{taken_over}");

        let path = format!("/api/v1/operations/{removal}/withdraw");
        let withdrawn = w
            .app
            .post_as("alice", &path, &json!({ "reason": "kept after all" }))
            .await;
        assert_eq!(withdrawn.status(), 200, "{}", test_db.name);
        let view: Value = withdrawn.json().await.unwrap();
        assert_eq!(
            (
                view["status"].as_str(),
                view["step"]["name"].as_str(),
                view["next"].as_str()
            ),
            (Some("VALIDATED"), Some("WITHDRAWN"), Some("NONE")),
            "{}: {view}",
            test_db.name
        );
        assert!(view.get("supersededBy").is_none(), "{view}");
        let message = view["message"].as_str().unwrap();
        assert!(
            message.contains("kept after all") && message.contains(&applied),
            "{message}"
        );

        // The apply holds its binding again, live, as if never taken over.
        let owner = super::batched::view(&w, &applied).await;
        assert_eq!(owner["status"], "VALIDATED", "{owner}");
        assert!(owner.get("supersededBy").is_none(), "{owner}");
        let binding =
            changegate::db::bindings::get_binding(&test_db.db, "alice", "demo.feature-flags")
                .await
                .unwrap()
                .unwrap();
        assert_eq!(
            (binding.operation_id.as_str(), binding.status.as_str()),
            (applied.as_str(), "VALIDATED")
        );

        // Once only; nothing reached GitLab; and it may be removed anew.
        let again = w
            .app
            .post_as("alice", &path, &json!({ "reason": "twice" }))
            .await;
        assert_eq!(again.status(), 409, "{}", test_db.name);
        assert_eq!(w.gitlab.calls(Endpoint::CreateMergeRequest), merge_requests);
        let anew = remove_at(&w, Utc::now() + Span::hours(1)).await;
        scheduled(&w, &anew).await;
    }
}
