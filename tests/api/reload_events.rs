//! Which file events reload: an edit reloads once, a broken edit is reported
//! once, and reading the file (a reload's own reads, other instances' reads,
//! `cat`) or changing its access time reloads nothing.
//!
//! The watchers run on this test's thread (a current-thread runtime), so the
//! captured log lines and the local metrics recorder see this test only.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use changegate::config::{self, LiveConfig};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tokio_util::sync::CancellationToken;

use crate::helpers::Logs;

const RELOADED: &str = "configuration reloaded";
const REJECTED: &str = "configuration reload rejected";
/// Longer than the watcher's settle time plus a reload, several times over:
/// a reload loop would show within it.
const QUIET: Duration = Duration::from_millis(1500);

/// Watchers of one configuration file, stopped when dropped.
struct Watchers {
    configs: Vec<LiveConfig>,
    stop: CancellationToken,
}

impl Watchers {
    /// `count` instances loaded from `path` and watching it.
    async fn start(path: &Path, count: usize) -> Self {
        let stop = CancellationToken::new();
        let configs: Vec<LiveConfig> = (0..count)
            .map(|_| {
                let (settings, _) = config::load(Some(path), None).unwrap();
                let live = LiveConfig::new(settings, Some(path.to_owned()), None);
                tokio::spawn(config::watch(live.clone(), stop.child_token()));
                live
            })
            .collect();
        // Give the watchers a moment to register before the first change.
        tokio::time::sleep(Duration::from_millis(300)).await;
        Self { configs, stop }
    }

    /// Waits until every instance holds `max_requests`.
    async fn wait_for(&self, max_requests: u32) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self
            .configs
            .iter()
            .any(|live| live.current().batch.max_requests != max_requests)
        {
            assert!(
                Instant::now() < deadline,
                "{max_requests} was not picked up"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Watchers {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn config_text(max_requests: u32) -> String {
    format!("[batch]\nmax_requests = {max_requests}\n")
}

/// A configuration file in a fresh directory.
fn config_file(max_requests: u32) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("changegate.toml");
    std::fs::write(&path, config_text(max_requests)).unwrap();
    (dir, path)
}

fn count(logs: &Logs, line: &str) -> usize {
    logs.lines_with(&[line]).len()
}

/// Reload failures counted since the last call (a snapshot resets counters).
/// From one snapshot (it resets what it reads): the reload failures counted
/// since the last one, and the last-reload gauge as it was last set.
fn reload_metrics(snapshotter: &Snapshotter) -> (u64, Option<f64>) {
    let (mut failures, mut successful) = (0, None);
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        match (key.key().name(), value) {
            ("changegate_config_reload_failures_total", DebugValue::Counter(count)) => {
                failures += count;
            }
            ("changegate_config_last_reload_successful", DebugValue::Gauge(value)) => {
                successful = Some(value.into_inner());
            }
            _ => {}
        }
    }
    (failures, successful)
}

#[tokio::test]
async fn reading_the_file_or_touching_its_access_time_reloads_none_of_three_watchers() {
    let (logs, _guard) = Logs::capture();
    let (_dir, path) = config_file(10);
    let watchers = Watchers::start(&path, 3).await;

    for _ in 0..3 {
        std::fs::read(&path).unwrap();
        let opened = std::fs::File::open(&path).unwrap();
        let times = std::fs::FileTimes::new().set_accessed(SystemTime::now());
        opened.set_times(times).unwrap();
        // Opened for writing and closed unwritten, as `touch` does.
        drop(std::fs::OpenOptions::new().write(true).open(&path).unwrap());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(QUIET).await;
    assert_eq!(count(&logs, RELOADED), 0, "reloaded with nothing changed");

    // The watchers are alive: one edit reloads each of them once, and their
    // reloads' reads of the shared file start no further round.
    std::fs::write(&path, config_text(20)).unwrap();
    watchers.wait_for(20).await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(count(&logs, RELOADED), 3);
}

#[tokio::test]
async fn an_edit_reloads_once_whether_written_in_place_or_renamed_over() {
    let (logs, _guard) = Logs::capture();
    let (dir, path) = config_file(10);
    let watchers = Watchers::start(&path, 1).await;

    std::fs::write(&path, config_text(20)).unwrap();
    watchers.wait_for(20).await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(count(&logs, RELOADED), 1);

    let aside = dir.path().join("changegate.toml.tmp");
    std::fs::write(&aside, config_text(30)).unwrap();
    std::fs::rename(&aside, &path).unwrap();
    watchers.wait_for(30).await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(count(&logs, RELOADED), 2);

    // Saving the same text again changes nothing.
    std::fs::write(&path, config_text(30)).unwrap();
    tokio::time::sleep(QUIET).await;
    assert_eq!(count(&logs, RELOADED), 2);
}

#[tokio::test]
async fn a_broken_edit_is_reported_and_counted_once_until_it_changes() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let (logs, _guard) = Logs::capture();
    let (_dir, path) = config_file(10);
    let watchers = Watchers::start(&path, 1).await;

    let broken = format!("{}[[[ not toml\n", config_text(20));
    std::fs::write(&path, &broken).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while count(&logs, REJECTED) == 0 {
        assert!(
            Instant::now() < deadline,
            "the broken file was not reported"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::read(&path).unwrap();
    std::fs::write(&path, &broken).unwrap();
    tokio::time::sleep(QUIET).await;
    assert_eq!(count(&logs, REJECTED), 1);
    assert_eq!(reload_metrics(&snapshotter), (1, Some(0.0)));
    assert_eq!(watchers.configs[0].current().batch.max_requests, 10);

    // Broken differently: a new report.
    std::fs::write(&path, format!("{broken}[[[\n")).unwrap();
    tokio::time::sleep(QUIET).await;
    assert_eq!(count(&logs, REJECTED), 2);
    assert_eq!(reload_metrics(&snapshotter), (1, Some(0.0)));

    std::fs::write(&path, config_text(20)).unwrap();
    watchers.wait_for(20).await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(count(&logs, RELOADED), 1);
    assert_eq!(count(&logs, REJECTED), 2);
    assert_eq!(reload_metrics(&snapshotter), (0, Some(1.0)));
}

/// Kubernetes mounts a ConfigMap as `name -> ..data/name` and updates it by
/// writing a new hidden directory, pointing `..data` at it with a rename,
/// and removing the old directory.
#[cfg(unix)]
#[tokio::test]
async fn a_configmap_data_swap_reloads_once() {
    use std::os::unix::fs::symlink;

    let (logs, _guard) = Logs::capture();
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path();
    std::fs::create_dir(mount.join("..v1")).unwrap();
    std::fs::write(mount.join("..v1/changegate.toml"), config_text(10)).unwrap();
    symlink("..v1", mount.join("..data")).unwrap();
    symlink("..data/changegate.toml", mount.join("changegate.toml")).unwrap();
    let watchers = Watchers::start(&mount.join("changegate.toml"), 1).await;

    std::fs::create_dir(mount.join("..v2")).unwrap();
    std::fs::write(mount.join("..v2/changegate.toml"), config_text(20)).unwrap();
    symlink("..v2", mount.join("..data_tmp")).unwrap();
    std::fs::rename(mount.join("..data_tmp"), mount.join("..data")).unwrap();
    std::fs::remove_dir_all(mount.join("..v1")).unwrap();
    watchers.wait_for(20).await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(count(&logs, RELOADED), 1);
}
