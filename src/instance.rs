//! Who this instance is, as the owner of leases: a *seat* (the host name
//! and the port it serves on, hashed) and a *life* (this run). No two live
//! instances share a seat, since they could not bind the same port on one
//! host, so leases of the same seat but another life were left by an
//! earlier run that died, and are taken over at once on start-up; on a
//! graceful shutdown, a run releases what it holds.

use sha1::Digest;

/// This run's identity.
#[derive(Debug, Clone)]
pub struct Instance {
    seat: String,
    life: String,
}

impl Instance {
    /// The instance serving on `port` of this host, in a new life.
    pub fn serving_on(port: u16) -> Self {
        Self::new(&host_name(), port)
    }

    fn new(host: &str, port: u16) -> Self {
        let digest = sha1::Sha1::digest(format!("{host}:{port}").as_bytes());
        let seat: String = digest
            .iter()
            .take(6)
            .map(|byte| format!("{byte:02x}"))
            .collect();
        Self {
            seat,
            life: uuid::Uuid::new_v4().simple().to_string(),
        }
    }

    /// The lease owner id of this run's `role` (`w` workflow steps, `q` the
    /// merge queue, `h` webhook deliveries): at most 48 characters.
    pub fn owner(&self, role: &str) -> String {
        format!("{}{role}", self.life_prefix())
    }

    /// What every owner id of this seat starts with.
    pub fn seat_prefix(&self) -> String {
        format!("{}-", self.seat)
    }

    /// What every owner id of this run starts with.
    pub fn life_prefix(&self) -> String {
        format!("{}-{}-", self.seat, self.life)
    }
}

/// The host's name: `HOSTNAME` when set (as in containers), else the
/// kernel's, else `localhost`.
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::Instance;

    #[test]
    fn runs_on_one_seat_share_its_prefix_and_differ_in_life() {
        let (first, second) = (Instance::new("host-a", 8080), Instance::new("host-a", 8080));
        let other_port = Instance::new("host-a", 8081);
        assert_eq!(first.seat_prefix(), second.seat_prefix());
        assert_ne!(first.life_prefix(), second.life_prefix());
        assert_ne!(first.seat_prefix(), other_port.seat_prefix());
        let owner = first.owner("w");
        assert!(owner.starts_with(&first.life_prefix()), "{owner}");
        assert!(owner.starts_with(&first.seat_prefix()));
        assert!(!owner.starts_with(&second.life_prefix()));
        assert!(owner.len() <= 64, "fits lease_owner: {owner}");
        assert!(!owner.contains(['%', '_']), "no LIKE wildcard: {owner}");
    }
}
