//! Hot reload: a changed file takes effect without a restart; a bad file is
//! rejected, logged and counted while the last good configuration stays live.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use changegate::app::{Application, Parts};
use changegate::config::effective::effective;
use changegate::config::resolve::AccessMode;
use changegate::config::{self, LiveConfig, ReloadOutcome, Settings};
use changegate::telemetry;
use secrecy::ExposeSecret;
use tokio_util::sync::CancellationToken;

use crate::helpers::changegate_command;

/// A port that was free a moment ago, for a service started as a process.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free port")
}

/// Replaces the file the way editors and ConfigMaps do: write aside, rename over.
fn replace(path: &std::path::Path, text: &str) {
    let aside = path.with_extension("tmp");
    std::fs::write(&aside, text).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

fn reload_failures() -> u64 {
    telemetry::metrics_handle()
        .render()
        .lines()
        .find_map(|line| line.strip_prefix("changegate_config_reload_failures_total "))
        .map_or(0, |value| value.trim().parse().unwrap())
}

#[tokio::test]
async fn an_invalid_file_on_reload_keeps_the_last_good_config_and_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("changegate.toml");
    std::fs::write(&path, "[access]\nmode = \"OPEN\"\n").unwrap();
    let (settings, _) = config::load(Some(&path), None).unwrap();
    let live = LiveConfig::new(settings, Some(path.clone()), None);
    let failures_before = reload_failures();

    std::fs::write(
        &path,
        "[access]\nmode = \"CLOSED\"\n[database]\nurl = \"ftp://x\"\n",
    )
    .unwrap();
    assert_eq!(live.reload(), ReloadOutcome::Rejected);
    assert_eq!(live.current().access.mode, AccessMode::Open);
    assert!(reload_failures() > failures_before);

    std::fs::write(&path, "[access]\nmode = \"CLOSED\"\n").unwrap();
    assert_eq!(live.reload(), ReloadOutcome::Applied);
    assert_eq!(live.current().access.mode, AccessMode::Closed);
}

#[tokio::test]
async fn a_closed_service_stays_closed_when_a_reload_loses_its_mode_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("changegate.toml");
    std::fs::write(&path, "[access]\nmode = \"CLOSED\"\n").unwrap();
    let (settings, _) = config::load(Some(&path), None).unwrap();
    let live = LiveConfig::new(settings, Some(path.clone()), None);
    // Blanked, removed, and the section cut off by a truncated write.
    for text in ["[access]\nmode = \"\"\n", "[access]\n", ""] {
        std::fs::write(&path, text).unwrap();
        live.reload();
        assert_eq!(live.current().access.mode, AccessMode::Closed, "{text:?}");
    }
    std::fs::write(&path, "[access]\nmode = \"OPEN\"\n").unwrap();
    assert_eq!(live.reload(), ReloadOutcome::Applied);
    assert_eq!(live.current().access.mode, AccessMode::Open);
}

#[tokio::test]
async fn the_watched_file_is_reloaded_on_change() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("changegate.toml");
    std::fs::write(&path, "[batch]\nmax_requests = 10\n").unwrap();
    let (settings, _) = config::load(Some(&path), None).unwrap();
    let live = LiveConfig::new(settings, Some(path.clone()), None);
    let stop = CancellationToken::new();
    let watcher = tokio::spawn(config::watch(live.clone(), stop.clone()));
    // Give the watcher a moment to register before the change.
    tokio::time::sleep(Duration::from_millis(200)).await;

    replace(&path, "[batch]\nmax_requests = 42\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while live.current().batch.max_requests != 42 {
        assert!(Instant::now() < deadline, "change was not picked up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    watcher.await.unwrap().unwrap();
}

fn bot_token(settings: &Settings) -> Option<String> {
    settings
        .gitlab
        .bot_token
        .as_ref()
        .map(|token| token.expose_secret().to_owned())
}

/// Waits until `live` holds `token` as `gitlab.bot_token`.
async fn wait_for_bot_token(live: &LiveConfig, token: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while bot_token(&live.current()).as_deref() != Some(token) {
        assert!(Instant::now() < deadline, "{token:?} was not picked up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_rotated_token_file_is_picked_up_without_restart() {
    let config_dir = tempfile::tempdir().unwrap();
    // Secrets are mounted away from the configuration (`/run/secrets/...`),
    // so the secret's own directory must be watched.
    let secrets_dir = tempfile::tempdir().unwrap();
    let token = secrets_dir.path().join("gitlab-bot-token");
    std::fs::write(&token, "first-token\n").unwrap();
    let path = config_dir.path().join("changegate.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_timeout = \"2s\"\n\
             [database]\nurl = \"sqlite://{}/cg.db\"\n[gitlab]\nbot_token_file = {:?}\n",
            config_dir.path().display(),
            token.display().to_string()
        ),
    )
    .unwrap();
    let (settings, _) = config::load(Some(&path), None).unwrap();
    let live = LiveConfig::new(settings, Some(path), None);
    assert_eq!(bot_token(&live.current()).as_deref(), Some("first-token"));
    let app = Application::build_with(live.clone(), Parts::default())
        .await
        .unwrap();
    let shutdown = app.shutdown_token();
    let server = tokio::spawn(app.run_until_stopped());
    // Give the watcher a moment to register before the change.
    tokio::time::sleep(Duration::from_millis(300)).await;

    std::fs::write(&token, "rotated-token\n").unwrap();
    wait_for_bot_token(&live, "rotated-token").await;

    shutdown.cancel();
    server.await.unwrap().unwrap();
}

/// Kubernetes mounts a Secret as `name -> ..data/name` and rotates it by
/// pointing the `..data` symlink at a new directory: `name` itself is never
/// written, so no event carries its name.
#[cfg(unix)]
#[tokio::test]
async fn a_secret_rotated_the_kubernetes_way_is_picked_up() {
    use std::os::unix::fs::symlink;

    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("secrets");
    std::fs::create_dir_all(mount.join("..v1")).unwrap();
    std::fs::write(mount.join("..v1/token"), "first-token\n").unwrap();
    symlink("..v1", mount.join("..data")).unwrap();
    symlink("..data/token", mount.join("token")).unwrap();
    let path = dir.path().join("changegate.toml");
    std::fs::write(
        &path,
        format!(
            "[gitlab]\nbot_token_file = {:?}\n",
            mount.join("token").display().to_string()
        ),
    )
    .unwrap();
    let (settings, _) = config::load(Some(&path), None).unwrap();
    let live = LiveConfig::new(settings, Some(path), None);
    let stop = CancellationToken::new();
    let watcher = tokio::spawn(config::watch(live.clone(), stop.clone()));
    tokio::time::sleep(Duration::from_millis(200)).await;

    std::fs::create_dir_all(mount.join("..v2")).unwrap();
    std::fs::write(mount.join("..v2/token"), "rotated-token\n").unwrap();
    symlink("..v2", mount.join("..data_tmp")).unwrap();
    std::fs::rename(mount.join("..data_tmp"), mount.join("..data")).unwrap();
    wait_for_bot_token(&live, "rotated-token").await;

    stop.cancel();
    watcher.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_changed_ca_file_applies_only_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let ca_file = |name: &str| {
        let path = dir.path().join(format!("{name}.pem"));
        let ca = rcgen::generate_simple_self_signed(vec![format!("{name}.example")]).unwrap();
        std::fs::write(&path, ca.cert.pem()).unwrap();
        path
    };
    let (first, second) = (ca_file("first"), ca_file("second"));
    let path = dir.path().join("changegate.toml");
    let config =
        |ca: &std::path::Path| format!("[tls]\nca_file = {:?}\n", ca.display().to_string());
    std::fs::write(&path, config(&first)).unwrap();
    let (settings, _) = config::load(Some(&path), None).unwrap();
    let live = LiveConfig::new(settings, Some(path.clone()), None);

    std::fs::write(&path, config(&second)).unwrap();
    assert_eq!(live.reload(), ReloadOutcome::Applied);
    assert_eq!(live.current().tls.ca_file, Some(first));
}

/// Collects a child's stdout lines.
pub struct Logs {
    child: Child,
    lines: Arc<Mutex<String>>,
}

impl Logs {
    /// Starts collecting `child`'s stdout; the child is killed when this is dropped.
    pub fn start(mut child: Child) -> Self {
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(String::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let mut sink = sink.lock().unwrap();
                sink.push_str(&line);
                sink.push('\n');
            }
        });
        Self { child, lines }
    }

    /// Whether any line so far contains `needle`.
    pub fn contains(&self, needle: &str) -> bool {
        self.lines.lock().unwrap().contains(needle)
    }

    /// Every line so far.
    pub fn text(&self) -> String {
        self.lines.lock().unwrap().clone()
    }
}

impl Drop for Logs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn changing_log_level_in_the_file_changes_what_is_logged_without_restart() {
    const REQUEST_LOG: &str = "finished processing request";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("changegate.toml");
    let port = free_port();
    let base = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\n[database]\nurl = \"sqlite://{}/cg.db\"\n",
        dir.path().display()
    );
    std::fs::write(&path, format!("{base}[log]\nlevel = \"warn\"\n")).unwrap();
    let child = changegate_command()
        .args(["serve", "--config"])
        .arg(&path)
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let logs = Logs::start(child);
    let client = crate::helpers::plain_client().build().unwrap();
    let health = format!("http://127.0.0.1:{port}/healthz");

    let deadline = Instant::now() + Duration::from_secs(10);
    while client.get(&health).send().await.is_err() {
        assert!(Instant::now() < deadline, "service never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client.get(&health).send().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !logs.contains(REQUEST_LOG),
        "debug lines logged at level warn"
    );

    replace(&path, &format!("{base}[log]\nlevel = \"debug\"\n"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !logs.contains(REQUEST_LOG) {
        assert!(Instant::now() < deadline, "level change never took effect");
        client.get(&health).send().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    replace(
        &path,
        &format!("{base}[log]\nlevel = \"debug\"\n[[[ not toml\n"),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !logs.contains("configuration reload rejected") {
        assert!(Instant::now() < deadline, "invalid file was not reported");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let metrics = client
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("changegate_config_reload_failures_total 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_reload_cannot_change_whether_webhooks_may_reach_private_targets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("changegate.toml");
    std::fs::write(&path, "[webhooks]\nallow_private_targets = false\n").unwrap();
    let (settings, _) = config::load(Some(&path), None).unwrap();
    let live = LiveConfig::new(settings, Some(path.clone()), None);
    std::fs::write(
        &path,
        "[webhooks]\nallow_private_targets = true\n[batch]\nmax_requests = 7\n",
    )
    .unwrap();
    assert_eq!(live.reload(), ReloadOutcome::Applied);
    assert!(
        !live.current().webhooks.allow_private_targets,
        "kept until a restart"
    );
    assert_eq!(live.current().batch.max_requests, 7, "the rest applies");
}

#[tokio::test]
async fn the_configuration_shown_after_a_reload_is_the_one_in_effect() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("changegate.toml");
    std::fs::write(&path, "[reconcile]\ninterval = \"1m\"\n").unwrap();
    let (settings, _) = config::load(Some(&path), None).unwrap();
    let live = LiveConfig::new(settings, Some(path.clone()), None);
    std::fs::write(
        &path,
        "[reconcile]\ninterval = \"5m\"\n[batch]\nmax_requests = 7\n",
    )
    .unwrap();
    assert_eq!(live.reload(), ReloadOutcome::Applied);

    let shown = serde_json::to_value(effective(&live.current())).unwrap();
    assert_eq!(
        shown["reconcile"]["interval"], "60s",
        "the job's interval is set at start-up: the running one is shown"
    );
    assert_eq!(shown["batch"]["maxRequests"], 7, "a dynamic key changes");
    let static_keys = shown["staticKeys"].as_array().unwrap();
    assert!(
        static_keys.contains(&"reconcile.interval".into()),
        "{static_keys:?}"
    );
    assert!(static_keys.contains(&"server".into()), "{static_keys:?}");
    assert!(
        !static_keys.contains(&"batch.max_requests".into()),
        "{static_keys:?}"
    );
}
