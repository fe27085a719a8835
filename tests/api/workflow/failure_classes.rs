//! Every failure of a GitLab call ends somewhere definite: what waiting
//! cannot cure (a refused token, a missing project) fails the request at
//! once with a code that says why, logged once and counted; a GitLab that
//! cannot be reached is waited for, saying so, until
//! `workflow.unreachable_deadline`; a batch GitLab never lets finish fails
//! its members after `batch.max_attempts`, leaving no MR open and no branch.

use changegate_sim::gitlab::GitLabSimOptions;

use super::end_to_end::{World, WorldOptions, world_with};
use super::*;
use crate::helpers::{Logs, each_backend};

fn unbatched() -> WorldOptions {
    WorldOptions {
        batch_keys: "enabled = false".to_owned(),
        ..WorldOptions::default()
    }
}

async fn metric(w: &World, name: &str, labels: &[&str]) -> f64 {
    let metrics = w
        .app
        .client
        .get(format!("{}/metrics", w.app.address))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    metrics
        .lines()
        .find(|line| line.starts_with(name) && labels.iter().all(|l| line.contains(l)))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} with {labels:?}: {metrics}"))
}

#[tokio::test(flavor = "current_thread")]
async fn a_revoked_bot_token_fails_at_once_is_logged_once_and_a_retry_after_the_fix_merges() {
    let (logs, _guard) = Logs::capture();
    let db = crate::helpers::sqlite_db().await;
    let w = world_with(&db.url, unbatched()).await;
    w.gitlab.revoke_token("bot-token");

    let first = apply(&w.app).await;
    let view = wait_for(&w.app, &first, |v| v["next"] != "WAIT").await;
    assert_eq!(
        (
            view["status"].as_str(),
            view["step"]["name"].as_str(),
            view["next"].as_str()
        ),
        (
            Some("CREATE_FAILED"),
            Some("GITLAB_ACCESS_DENIED"),
            Some("CONTACT_TEAM")
        ),
        "{view}"
    );
    assert!(
        view["message"]
            .as_str()
            .is_some_and(|m| m.contains("401 Unauthorized")),
        "{view}"
    );
    let second = apply_as(&w.app, "bob").await;
    let view = wait_for_as(&w.app, "bob", &second, |v| v["next"] != "WAIT").await;
    assert_eq!(view["step"]["name"], "GITLAB_ACCESS_DENIED", "{view}");
    let warnings = logs.lines_with(&["WARN", "access_denied"]);
    assert_eq!(warnings.len(), 1, "one warning for both: {warnings:#?}");
    assert!(
        warnings[0].contains("GitLab refuses changegate"),
        "{}",
        warnings[0]
    );
    let counted = metric(
        &w,
        "changegate_outbound_failures_total",
        &["system=\"gitlab\"", "reason=\"access_denied\""],
    )
    .await;
    assert!(counted >= 2.0, "each failure is counted: {counted}");

    // The team gives the bot its token back and retries.
    w.gitlab.add_user("change-bot", "bot-token");
    let retried = w
        .app
        .post_as(
            "admin",
            &format!("/admin/v1/operations/{first}/retry"),
            &serde_json::json!({}),
        )
        .await;
    assert_eq!(retried.status(), 200);
    let view = wait_for(&w.app, &first, |v| {
        v["status"] == "VALIDATED" || v["next"] == "CONTACT_TEAM"
    })
    .await;
    assert_eq!(view["status"], "VALIDATED", "{view}");
    let recovered = logs.lines_with(&["INFO", "accepts changegate's calls again"]);
    assert_eq!(recovered.len(), 1, "{recovered:#?}");
}

#[tokio::test]
async fn a_deleted_project_fails_at_once_as_not_found() {
    let db = crate::helpers::sqlite_db().await;
    let w = world_with(&db.url, unbatched()).await;
    w.gitlab.delete_project(w.project);
    let id = apply(&w.app).await;
    let view = wait_for(&w.app, &id, |v| v["next"] != "WAIT").await;
    assert_eq!(
        (
            view["status"].as_str(),
            view["step"]["name"].as_str(),
            view["next"].as_str()
        ),
        (
            Some("CREATE_FAILED"),
            Some("GITLAB_PROJECT_NOT_FOUND"),
            Some("CONTACT_TEAM")
        ),
        "{view}"
    );
}

#[tokio::test]
async fn a_token_revoked_while_the_pipeline_runs_fails_instead_of_waiting_for_ever() {
    let db = crate::helpers::sqlite_db().await;
    let w = world_with(
        &db.url,
        WorldOptions {
            gitlab: GitLabSimOptions {
                pipeline_steps_per_poll: 0,
                ..GitLabSimOptions::default()
            },
            ..unbatched()
        },
    )
    .await;
    let id = apply(&w.app).await;
    wait_for(&w.app, &id, |v| v["status"] == "MR_CREATED").await;
    w.gitlab.revoke_token("bot-token");
    let view = wait_for(&w.app, &id, |v| v["next"] != "WAIT").await;
    assert_eq!(
        (view["status"].as_str(), view["step"]["name"].as_str()),
        (Some("CREATE_FAILED"), Some("GITLAB_ACCESS_DENIED")),
        "{view}"
    );
}

/// A port nothing listens on, so connections to it are refused, held by a
/// socket bound to it but not listening: while the socket lives, no other
/// test's server can take the port (a port merely freed again could be).
fn closed_port() -> (tokio::net::TcpSocket, String) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    (socket, format!("http://127.0.0.1:{port}"))
}

#[tokio::test]
async fn an_unreachable_gitlab_is_waited_for_until_the_unreachable_deadline_then_fails() {
    for test_db in each_backend().await {
        for batched in [false, true] {
            let (_held, gitlab_url) = closed_port();
            let w = world_with(
                &test_db.url,
                WorldOptions {
                    gitlab_url: Some(gitlab_url),
                    batch_keys: if batched {
                        "interval = \"200ms\"".to_owned()
                    } else {
                        "enabled = false".to_owned()
                    },
                    extra: "[workflow]\nunreachable_deadline = \"3s\"\n".to_owned(),
                    ..WorldOptions::default()
                },
            )
            .await;
            // One database for both worlds: each its own requester.
            let who = if batched { "bob" } else { "alice" };
            let id = apply_as(&w.app, who).await;
            let waiting = wait_for_as(&w.app, who, &id, |v| {
                v["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("refused the connection"))
                    || v["next"] != "WAIT"
            })
            .await;
            let case = format!("{} batched={batched}", test_db.name);
            assert_eq!(waiting["next"], "WAIT", "{case}: {waiting}");
            assert_eq!(
                waiting["message"],
                "GitLab refused the connection; changegate keeps trying: please tell the team",
                "{case}"
            );
            let started = Instant::now();
            let view = wait_for_as(&w.app, who, &id, |v| v["next"] != "WAIT").await;
            assert_eq!(
                (
                    view["status"].as_str(),
                    view["step"]["name"].as_str(),
                    view["next"].as_str()
                ),
                (
                    Some("CREATE_FAILED"),
                    Some("GITLAB_UNREACHABLE"),
                    Some("CONTACT_TEAM")
                ),
                "{case}: {view}"
            );
            assert!(
                view["message"].as_str().is_some_and(
                    |m| m.starts_with("GitLab refused the connection for longer than 3s")
                ),
                "{case}: {view}"
            );
            assert!(
                started.elapsed() > Duration::from_secs(1),
                "{case}: it waited for the deadline, not failing at the first refusal"
            );
        }
    }
}

#[tokio::test]
async fn a_batch_that_never_finishes_fails_its_members_after_max_attempts_and_leaves_nothing_open()
{
    for test_db in each_backend().await {
        let w = world_with(
            &test_db.url,
            WorldOptions {
                // Pipelines never finish: every batch runs past its timeout.
                gitlab: GitLabSimOptions {
                    pipeline_steps_per_poll: 0,
                    ..GitLabSimOptions::default()
                },
                batch_keys: "interval = \"200ms\"\ntimeout = \"1s\"\nmax_attempts = 2".to_owned(),
                ..WorldOptions::default()
            },
        )
        .await;
        let id = apply(&w.app).await;
        let view = wait_for(&w.app, &id, |v| v["next"] != "WAIT").await;
        assert_eq!(
            (
                view["status"].as_str(),
                view["step"]["name"].as_str(),
                view["next"].as_str()
            ),
            (
                Some("CREATE_FAILED"),
                Some("HANDLE_BATCH_EXHAUSTED"),
                Some("CONTACT_TEAM")
            ),
            "{}: {view}",
            test_db.name
        );
        for (iid, batch) in [(1, 1), (2, 2)] {
            let mr = w
                .gitlab
                .merge_request(w.project, iid)
                .unwrap_or_else(|| panic!("{}: batch MR !{iid} was opened", test_db.name));
            assert_eq!(
                format!("{:?}", mr.state),
                "Closed",
                "{}: {mr:?}",
                test_db.name
            );
            assert_eq!(
                w.gitlab
                    .branch_head(w.project, &format!("changegate/merge-batch-{batch}")),
                None,
                "{}: the branch of batch #{batch} is deleted",
                test_db.name
            );
        }
        assert!(
            w.gitlab.merge_request(w.project, 3).is_none(),
            "{}: no third batch",
            test_db.name
        );
    }
}
