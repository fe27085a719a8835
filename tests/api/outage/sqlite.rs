//! The SQLite outage: the directory of changegate's database file turns
//! read-only for 30 s under load (see [`SwitchableDir`] for how).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::read_only_dir::SwitchableDir;
use super::{OUTAGE_VAR, Outage, enabled, require, two_hundred_requests_through};

impl Outage for SwitchableDir {
    async fn begin(&mut self) {
        self.set_read_only(true);
    }

    async fn end(&mut self) {
        self.set_read_only(false);
    }
}

fn running_as_root() -> bool {
    // /proc/self belongs to the process's effective user.
    std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_requests_survive_the_sqlite_directory_read_only_for_thirty_seconds() {
    if !enabled("the SQLite outage test") {
        return;
    }
    require(
        running_as_root(),
        "the tests do not run as root: mounting needs root",
    );
    require(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: load the fuse module",
    );
    let mut dir = SwitchableDir::mount().unwrap_or_else(|err| {
        panic!("{OUTAGE_VAR} is set but a FUSE filesystem cannot be mounted: {err}")
    });
    let url = format!("sqlite://{}", dir.path().join("changegate.db").display());
    two_hundred_requests_through(&url, "sqlite", &mut dir).await;
}
