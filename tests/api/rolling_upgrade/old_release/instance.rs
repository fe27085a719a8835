//! Instances of the old release as owners of leases. The release through
//! 0008 named its owners after a random id per run; from 0010 on, an owner
//! id is `<seat>-<life>-<role>` (the 0012 release's `src/instance.rs`), and
//! an instance started on a seat takes over at once what an earlier life on
//! that seat left, while a graceful shutdown releases what its life holds.

use sha1::Digest;

use super::Release;

/// Which of an instance's leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Workflow steps.
    Steps,
    /// The merge queue's batches.
    Queue,
}

/// One run of an instance of the old release.
#[derive(Debug, Clone)]
pub struct OldInstance {
    release: Release,
    seat: String,
    life: String,
}

impl OldInstance {
    /// A run of `release` serving on `port` of `host`.
    pub fn serving(release: Release, host: &str, port: u16) -> Self {
        let digest = sha1::Sha1::digest(format!("{host}:{port}").as_bytes());
        Self {
            release,
            seat: digest.iter().take(6).map(|b| format!("{b:02x}")).collect(),
            life: uuid::Uuid::new_v4().simple().to_string(),
        }
    }

    /// The owner id of its `role`'s leases.
    pub fn owner(&self, role: Role) -> String {
        match (self.release, role) {
            (Release::Through0008, Role::Steps) => format!("changegate-{}", self.life),
            (Release::Through0008, Role::Queue) => format!("merge-queue-{}", self.life),
            (Release::Through0012, Role::Steps) => format!("{}w", self.life_prefix()),
            (Release::Through0012, Role::Queue) => format!("{}q", self.life_prefix()),
        }
    }

    /// What every owner id of this run starts with (from 0010 on).
    pub fn life_prefix(&self) -> String {
        format!("{}-{}-", self.seat, self.life)
    }
}

/// This host's name as those releases found it (and the current one does):
/// `HOSTNAME` when set, else the kernel's, else `localhost`.
pub fn this_host() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}
