//! A rolling upgrade from each earlier release (Upgrades, in
//! docs/src/how-to/backups-upgrades.md): from the release whose schema ended
//! at migration 0008, and from the previous one, whose schema ended at 0012.
//! A database as that release left it, with a request in every status it
//! had, written with its SQL and, for those with a merge request, the MR it
//! had opened in GitLab; from the 0012 release
//! also what only it could write (`since_0009.rs`). While an instance of
//! the old release keeps submitting, moving and reading requests with its
//! own SQL, `changegate migrate` applies the current migrations; none of
//! the old instance's statements may fail. Then the current service runs on
//! that database: every request in progress (those the old instance wrote
//! during the migration too) reaches its end, and every finished one stays
//! exactly as it was. Webhooks play no part: from migration 0013 on, the
//! current release seals their secrets, which an old instance cannot open
//! (Upgrades, in docs/src/how-to/backups-upgrades.md).

mod gitlab;
mod old_release;
mod since_0009;
mod statuses;

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use changegate_sim::approval::{Decision, DecisionPolicy};
use serde_json::Value;

use crate::durability::{Outside, config, free_port, outside, start};
use crate::helpers::{MySqlScratch, changegate_command, plain_client};
use gitlab::OldGitLab;
use old_release::{OldInstance, OldRelease, OldRequest, Release, UNREACHABLE, this_host};
use statuses::{EVERY_STATUS, write_in_status};

const PROJECT: &str = "config/repo";
/// The project as GitLab's API names it in a path.
const PROJECT_IN_PATH: &str = "config%2Frepo";
/// A target whose subject is not its requester, so one requester holds
/// bindings in every status.
const TARGET: &str = "team.access";
const REQUESTER: &str = "alice";

/// How far the current release must take a request of the old one.
#[derive(Debug, Clone, Copy, PartialEq)]
enum End {
    /// An apply in progress: deployed.
    Validated,
    /// A removal in progress: removed.
    Closed,
    /// Finished or waiting for an operator: exactly as it was.
    AsItWas,
}

/// A request the old release wrote.
struct Written {
    operation_id: String,
    /// What it is, for messages.
    label: &'static str,
    status: &'static str,
    end: End,
}

/// The old instance at work until `stop` is set, and one round after: each
/// round submits a request, takes and gives back its lease as a worker
/// did, renews the step lease it holds throughout (`held`), and runs every
/// read. Then it shuts down as its release did. Returns the requests it
/// submitted.
async fn keep_the_old_release_working(
    old: Arc<OldRelease>,
    instance: OldInstance,
    mut operation_ids: Vec<String>,
    held: Option<String>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Vec<String>> {
    let mut submitted = Vec::new();
    loop {
        let last = stop.load(Ordering::SeqCst);
        let operation_id = uuid::Uuid::new_v4().to_string();
        let subject = format!("svc-during-{}", submitted.len());
        old.submit(&OldRequest {
            operation_id: &operation_id,
            subject_id: &subject,
            target_key: TARGET,
            requested_by: REQUESTER,
        })
        .await?;
        old.take_and_release_lease(&operation_id, &instance).await?;
        if let Some(held) = &held {
            old.renew_lease(held, &instance, since_0009::LIVE_LEASE_MS)
                .await?;
        }
        operation_ids.push(operation_id.clone());
        submitted.push(operation_id);
        old.read_everything(&operation_ids, REQUESTER, &instance)
            .await?;
        if last {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The release through 0008 left its leases to run out; from 0010 on, a
    // graceful shutdown gives them back.
    if old.release() == Release::Through0012 {
        old.shut_down(&instance).await?;
    }
    Ok(submitted)
}

/// `changegate migrate` of the current release, as a rolling upgrade runs it.
async fn migrate(url: &str, dir: &std::path::Path) {
    let mut command = changegate_command();
    command
        .arg("migrate")
        .current_dir(dir)
        .env("CHANGEGATE_DATABASE_URL", url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The requester's view of operation `id`.
async fn view(client: &reqwest::Client, address: &str, id: &str) -> Value {
    client
        .get(format!("{address}/api/v1/operations/{id}"))
        .header("x-auth-request-user", REQUESTER)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Waits until each request reached its end, approving whatever the
/// approval system has been asked meanwhile.
async fn wait_for_the_ends(
    client: &reqwest::Client,
    address: &str,
    outside: &Outside,
    expected: &[(String, End)],
) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        for approval in outside.approval.approvals() {
            if approval.decisions.is_empty() {
                outside
                    .approval
                    .decide(approval.operation_id, Decision::Approved)
                    .await
                    .unwrap();
            }
        }
        let mut views = Vec::new();
        for (id, _) in expected {
            views.push(view(client, address, id).await);
        }
        let unfinished: Vec<String> = expected
            .iter()
            .zip(&views)
            .filter(|((_, end), view)| match end {
                End::Validated => view["status"] != "VALIDATED",
                End::Closed => view["status"] != "CLOSED",
                End::AsItWas => false,
            })
            .map(|(_, view)| {
                format!(
                    "{} {} {}",
                    view["status"], view["step"]["name"], view["message"]
                )
            })
            .collect();
        if unfinished.is_empty() {
            return views;
        }
        assert!(
            Instant::now() < deadline,
            "{} not finished: {unfinished:?}",
            unfinished.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn upgrade_while_the_old_release_runs(url: &str, backend: &str, release: Release) {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let outside = outside(DecisionPolicy::Manual).await;
    let gitlab = OldGitLab {
        client: plain_client().build().unwrap(),
        outside: &outside,
    };
    // Where the service will listen. The deploy pipeline reports the
    // merges of the old release there, and retries until it answers.
    let port = free_port();
    let address = format!("http://127.0.0.1:{port}");
    outside
        .approval
        .set_callback_url(format!("{address}/callbacks/approval"));
    outside
        .deploy
        .set_callback_url(format!("{address}/callbacks/deploy"));
    let old = Arc::new(OldRelease::create(url, release).await.unwrap());
    // The instance that keeps running runs on another host; from 0010 on,
    // leases are named by seat, and the one that died served on the seat
    // the current release's instance takes.
    let live = OldInstance::serving(release, "previous-release-host", 8080);
    let mut written = Vec::new();
    let mut held = None;
    // Written first: their merge batch is claimed while nothing else waits
    // in the queue, and theirs is the first merge the deploy pipeline sees
    // (it loses that one's callback).
    if release == Release::Through0012 {
        let dead = OldInstance::serving(release, &this_host(), port);
        let left = since_0009::write(&old, &gitlab, &live, &dead).await;
        written.extend(left.written);
        held = Some(left.held);
    }
    for (status, end) in EVERY_STATUS {
        written.push(Written {
            operation_id: write_in_status(&old, &gitlab, status).await,
            label: status,
            status,
            end,
        });
    }
    let mut before = Vec::new();
    for request in &written {
        before.push(old.page(&request.operation_id).await.unwrap());
    }

    let stop = Arc::new(AtomicBool::new(false));
    let ids = written.iter().map(|w| w.operation_id.clone()).collect();
    let old_instance = tokio::spawn(keep_the_old_release_working(
        Arc::clone(&old),
        live,
        ids,
        held.clone(),
        Arc::clone(&stop),
    ));
    migrate(url, dir.path()).await;

    let config = config(url, port, &outside, "approval_first", true);
    let config_path = dir.path().join("changegate.toml");
    std::fs::write(&config_path, config).unwrap();
    let client = plain_client()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    // The old instance goes on while the first new one starts and takes up
    // its work, as it does until it is replaced.
    let service = start(&config_path, &address, &client).await;
    if let Some(held) = &held {
        // The step the old instance still runs is not taken from it, and
        // what keeps it is read from the column the old release wrote.
        let view = view(&client, &address, held).await;
        assert_eq!(view["status"], "MR_CREATED", "{backend}: {view}");
        assert_eq!(view["message"], UNREACHABLE, "{backend}: {view}");
    }
    stop.store(true, Ordering::SeqCst);
    let during = old_instance
        .await
        .unwrap()
        .unwrap_or_else(|err| panic!("{backend}: the previous release failed: {err:#}"));

    let mut expected: Vec<(String, End)> = written
        .iter()
        .map(|w| (w.operation_id.clone(), w.end))
        .collect();
    expected.extend(during.iter().map(|id| (id.clone(), End::Validated)));
    let views = wait_for_the_ends(&client, &address, &outside, &expected).await;
    drop(service);

    // Views show what the requester sees; the old release's own read shows
    // that not even the version or the time of the last write moved, and
    // that no obstacle or outage clock outlives the request's progress.
    for ((request, page), view) in written.iter().zip(&before).zip(&views) {
        let after = old.page(&request.operation_id).await.unwrap();
        assert_eq!(
            (
                &after.operation.obstacle,
                after.operation.unreachable_since,
                &after.batch_obstacle
            ),
            (&None, None, &None),
            "{backend}: the {} request",
            request.label
        );
        if request.end != End::AsItWas {
            continue;
        }
        assert_eq!(
            view["status"], request.status,
            "{backend}: the {} request: {view}",
            request.label
        );
        assert_eq!(
            (
                &after.binding_status,
                after.operation.step_code,
                after.operation.version,
                after.operation.updated_at
            ),
            (
                &page.binding_status,
                page.operation.step_code,
                page.operation.version,
                page.operation.updated_at
            ),
            "{backend}: the {} request changed",
            request.label
        );
    }
    assert!(!during.is_empty());
    eprintln!(
        "{backend}, from {}: {} requests written before the upgrade and {} during it, all through in {:?}",
        release.name(),
        written.len(),
        during.len(),
        started.elapsed()
    );
}

async fn on_each_backend(release: Release) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("cg.db").display());
    upgrade_while_the_old_release_runs(&url, "sqlite", release).await;
    if let Some(scratch) = MySqlScratch::create().await {
        upgrade_while_the_old_release_runs(&scratch.url(), "mysql", release).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_of_the_release_through_0008_upgrades_while_it_runs_and_every_request_continues()
{
    on_each_backend(Release::Through0008).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_of_the_previous_release_upgrades_while_it_runs_and_every_request_continues() {
    on_each_backend(Release::Through0012).await;
}
