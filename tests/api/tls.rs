//! MySQL over TLS against a server that accepts nothing else (CI starts one
//! in `.ci/mariadb-tls.sh`): a URL that turns TLS off, or that verifies the
//! server without the CA that signed its certificate, fails with one line
//! saying what to put in `database.url`, from `changegate migrate` (which
//! exits) and from a running service (which warns once and stays not ready).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::helpers::changegate_command;

/// The TLS-only server, e.g. `mysql://root:PASSWORD@127.0.0.1:3307/`.
const TLS_URL_VAR: &str = "CHANGEGATE_TEST_MYSQL_TLS_URL";
/// The CA that signed that server's certificate (a PEM file).
const TLS_CA_VAR: &str = "CHANGEGATE_TEST_MYSQL_TLS_CA";
/// When set (CI sets it), a missing [`TLS_URL_VAR`] fails these tests.
const REQUIRE_TLS_VAR: &str = "CHANGEGATE_TEST_REQUIRE_MYSQL_TLS";

const TLS_REQUIRED: &str =
    "the MySQL server requires TLS: add ssl-mode=VERIFY_IDENTITY (and ssl-ca=PATH) to database.url";
const NOT_TRUSTED: &str = "the MySQL server's certificate is not trusted: set ssl-ca=PATH in database.url (the CA that signed it)";

struct TlsServer {
    server: url::Url,
    ca: String,
}

impl TlsServer {
    fn from_env() -> Option<Self> {
        let (Ok(server), Ok(ca)) = (std::env::var(TLS_URL_VAR), std::env::var(TLS_CA_VAR)) else {
            assert!(
                std::env::var_os(REQUIRE_TLS_VAR).is_none(),
                "{REQUIRE_TLS_VAR} is set but {TLS_URL_VAR} or {TLS_CA_VAR} is not"
            );
            eprintln!("skipped: {TLS_URL_VAR} and {TLS_CA_VAR} name no TLS-only MySQL server");
            return None;
        };
        let server = url::Url::parse(&server)
            .unwrap_or_else(|err| panic!("{TLS_URL_VAR} is not a URL: {err}"));
        Some(Self { server, ca })
    }

    /// The server's URL with a database that need not exist (every failure
    /// here comes before the database is chosen) and `query`.
    fn url(&self, query: &str) -> String {
        let mut url = self.server.clone();
        url.set_path("changegate_tls");
        url.set_query(Some(query));
        url.into()
    }
}

fn migrate(database_url: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    changegate_command()
        .arg("migrate")
        .current_dir(dir.path())
        .env("CHANGEGATE_DATABASE_URL", database_url)
        .output()
        .expect("changegate runs")
}

fn assert_fails_with(output: &Output, message: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "migrate succeeded: {stderr}");
    assert_eq!(stderr.trim(), format!("error: {message}"));
}

#[test]
fn migrate_without_tls_says_the_server_requires_it() {
    let Some(tls) = TlsServer::from_env() else {
        return;
    };
    assert_fails_with(&migrate(&tls.url("ssl-mode=DISABLED")), TLS_REQUIRED);
}

#[test]
fn a_wrong_password_without_tls_is_not_taken_for_a_tls_requirement() {
    // MariaDB refuses both with 1045: the same login over TLS tells them apart.
    let Some(tls) = TlsServer::from_env() else {
        return;
    };
    let mut url = url::Url::parse(&tls.url("ssl-mode=DISABLED")).unwrap();
    url.set_password(Some("not-the-password")).unwrap();
    let output = migrate(url.as_str());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("cannot connect to the database:") && stderr.contains("Access denied"),
        "{stderr}"
    );
}

#[test]
fn migrate_verifying_without_the_ca_says_the_certificate_is_not_trusted() {
    let Some(tls) = TlsServer::from_env() else {
        return;
    };
    assert_fails_with(&migrate(&tls.url("ssl-mode=VERIFY_IDENTITY")), NOT_TRUSTED);
}

#[test]
fn migrate_verifying_with_another_ca_names_that_ca() {
    let Some(tls) = TlsServer::from_env() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let other_ca = dir.path().join("other-ca.pem");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let key = rcgen::KeyPair::generate().unwrap();
    std::fs::write(&other_ca, params.self_signed(&key).unwrap().pem()).unwrap();
    let other_ca = other_ca.display().to_string();
    assert_fails_with(
        &migrate(&tls.url(&format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={other_ca}"))),
        &format!(
            "the MySQL server's certificate is not trusted: it is not signed by the CA in \
             ssl-ca={other_ca}: set ssl-ca to the CA that signed it"
        ),
    );
}

#[test]
fn with_its_ca_the_server_is_verified_and_reached() {
    let Some(tls) = TlsServer::from_env() else {
        return;
    };
    let output = migrate(&tls.url(&format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", tls.ca)));
    // Past TLS and the login: only the database is missing.
    assert_fails_with(
        &output,
        "cannot connect to the database: error returned from database: 1049 (42000): Unknown database 'changegate_tls'",
    );
}

/// `/readyz`'s status, or `None` while nothing listens on `port`.
fn readyz(port: u16) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .write_all(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split(' ').nth(1)?.parse().ok()
}

#[test]
fn a_service_without_tls_warns_once_and_stays_not_ready() {
    let Some(tls) = TlsServer::from_env() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let port = crate::reload::free_port();
    let mut child = changegate_command()
        .arg("serve")
        .current_dir(dir.path())
        .env("CHANGEGATE_LISTEN", format!("127.0.0.1:{port}"))
        .env("CHANGEGATE_DATABASE_URL", tls.url("ssl-mode=DISABLED"))
        .env("CHANGEGATE__DATABASE__RETRY_MAX_INTERVAL", "100ms")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = readyz(port) {
            break status;
        }
        assert!(Instant::now() < deadline, "service never listened");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status, 503);
    // Several more attempts, each failing the same way.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(readyz(port), Some(503));

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "did not stop after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let warnings: Vec<&str> = stdout
        .lines()
        .filter(|line| line.contains(" WARN "))
        .collect();
    assert_eq!(warnings.len(), 1, "{stdout}");
    assert!(
        warnings[0].ends_with(&format!(
            "database not ready, retrying in the background: {TLS_REQUIRED}"
        )),
        "{stdout}"
    );
}
