//! A MariaDB server of the test's own (its own data directory, socket and
//! port), killed with SIGKILL for the outage and started again on the same
//! data directory and port, so InnoDB recovers from a crash as in
//! production. The server is killed and its files removed when the handle is
//! dropped, also when the test panics.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Outage, require};

const SERVER: &str = "/usr/sbin/mariadbd";
const INSTALL_DB: &str = "mariadb-install-db";
const CLIENT: &str = "mariadb";
/// How long a start, with its crash recovery, may take.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running (or, during the outage, killed) MariaDB server.
pub struct MariaDbServer {
    dir: tempfile::TempDir,
    port: u16,
    process: Option<Child>,
}

impl MariaDbServer {
    /// Creates a data directory and starts a server on a free port with a
    /// `changegate` database that `root` may use over TCP without a password.
    pub async fn start() -> Self {
        require(
            Path::new(SERVER).exists(),
            &format!("{SERVER} is missing: install mariadb-server"),
        );
        for program in [INSTALL_DB, CLIENT] {
            require(
                Command::new(program).arg("--version").output().is_ok(),
                &format!("`{program}` cannot be run: install mariadb-server"),
            );
        }
        let dir = tempfile::Builder::new()
            .prefix("changegate-outage-mariadb.")
            .tempdir()
            .expect("a temporary directory");
        let installed = Command::new(INSTALL_DB)
            .arg("--no-defaults")
            .arg("--user=root")
            .arg(format!("--datadir={}", dir.path().join("data").display()))
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            .output()
            .expect("mariadb-install-db runs");
        assert!(
            installed.status.success(),
            "mariadb-install-db failed: {}",
            String::from_utf8_lossy(&installed.stderr)
        );
        let mut server = Self {
            port: free_port(),
            dir,
            process: None,
        };
        server.launch().await;
        server
            .admin(
                "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'; \
                 GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION; \
                 CREATE DATABASE changegate;",
            )
            .await;
        server
    }

    /// changegate's database on this server.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/changegate", self.port)
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("mariadbd.sock")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("mariadbd.log")
    }

    /// Starts the server process and waits until it answers on its socket.
    async fn launch(&mut self) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log())
            .expect("the server's log file");
        let child = Command::new(SERVER)
            .arg("--no-defaults")
            .arg("--user=root")
            .arg(format!(
                "--datadir={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!(
                "--pid-file={}",
                self.dir.path().join("mariadbd.pid").display()
            ))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg("--skip-name-resolve")
            .arg("--innodb_buffer_pool_size=64M")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the log file, twice"))
            .stderr(log)
            .spawn()
            .expect("mariadbd starts");
        self.process = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        while !self.answers().await {
            let exited = self
                .process
                .as_mut()
                .and_then(|child| child.try_wait().expect("the server's status"));
            if let Some(status) = exited {
                self.process = None;
                panic!(
                    "mariadbd stopped while starting ({status}):\n{}",
                    self.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "mariadbd did not answer within {START_TIMEOUT:?}:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Whether a real login over the socket succeeds (a ping would succeed
    /// even where the login is refused).
    async fn answers(&self) -> bool {
        tokio::process::Command::new(CLIENT)
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-uroot", "-e", "SELECT 1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .is_ok_and(|status| status.success())
    }

    async fn admin(&self, sql: &str) {
        let output = tokio::process::Command::new(CLIENT)
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-uroot", "-e", sql])
            .output()
            .await
            .expect("the mariadb client runs");
        assert!(
            output.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.process.take() {
            // SIGKILL: no shutdown, no flush, as when the host loses the process.
            child.kill().expect("mariadbd can be killed");
            child.wait().expect("mariadbd is reaped");
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(self.log()).unwrap_or_default()
    }
}

impl Outage for MariaDbServer {
    async fn begin(&mut self) {
        self.kill();
    }

    async fn end(&mut self) {
        self.launch().await;
    }
}

impl Drop for MariaDbServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port nothing listens on now, below the range Linux picks the local ports
/// of outgoing connections from (32768 up by default): the server must get
/// it back after the outage, while changegate keeps trying to connect.
fn free_port() -> u16 {
    const LOW: u16 = 20_000;
    const HIGH: u16 = 32_000;
    let start = LOW + u16::try_from(std::process::id() % u32::from(HIGH - LOW)).unwrap();
    (start..HIGH)
        .chain(LOW..start)
        .find(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .expect("a free port")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_requests_survive_mariadb_killed_for_thirty_seconds() {
    if !super::enabled("the MariaDB outage test") {
        return;
    }
    let mut server = MariaDbServer::start().await;
    let url = server.url();
    super::two_hundred_requests_through(&url, "mariadb", &mut server).await;
}
