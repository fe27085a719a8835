//! What changegate reads from a `mysql://` (or `mariadb://`) URL, checked
//! when the configuration loads. sqlx ignores query parameters it does not
//! know, so a misspelt `ssl_mode=VERIFY_IDENTITY` would silently connect
//! without verifying the server; here it is a start-up error instead.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use sqlx::ConnectOptions;
use sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};
use url::Url;

/// The query parameters sqlx 0.9 reads (`MySqlConnectOptions::parse_from_url`)
/// other than the TLS ones, which are checked one by one.
const OTHER_PARAMETERS: &[&str] = &[
    "charset",
    "collation",
    "statement-cache-capacity",
    "socket",
    "timezone",
    "time-zone",
];

/// A checked MySQL URL.
#[derive(Debug, Clone)]
pub struct MySqlUrl {
    /// What sqlx connects with.
    pub options: MySqlConnectOptions,
    /// Each certificate or key file parameter with its path, to be read at connect time.
    pub files: Vec<(&'static str, PathBuf)>,
    /// Settings that work but probably do not do what was meant.
    pub warnings: Vec<String>,
    url: Url,
}

impl MySqlUrl {
    /// Checks `text`; the error is one line saying what to change.
    pub fn parse(text: &str) -> Result<Self, String> {
        let url = Url::parse(text).map_err(|err| format!("not a URL: {err}"))?;
        let database = url.path().trim_start_matches('/');
        if database.is_empty() {
            return Err(
                "names no database: use mysql://USER:PASSWORD@HOST/DATABASE?PARAMETERS".to_owned(),
            );
        }
        let mut mode = MySqlSslMode::Preferred;
        let mut files = Vec::new();
        for (key, value) in url.query_pairs() {
            let canonical = match &*key {
                "sslmode" | "ssl-mode" => {
                    mode = MySqlSslMode::from_str(&value).map_err(|_| {
                        format!(
                            "ssl-mode {value:?} is not DISABLED, PREFERRED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY"
                        )
                    })?;
                    continue;
                }
                "sslca" | "ssl-ca" => "ssl-ca",
                "sslcert" | "ssl-cert" => "ssl-cert",
                "sslkey" | "ssl-key" => "ssl-key",
                other if OTHER_PARAMETERS.contains(&other) => continue,
                unknown => {
                    return Err(format!(
                        "unknown parameter {unknown:?} (known: ssl-mode, ssl-ca, ssl-cert, ssl-key, \
                         charset, collation, statement-cache-capacity, socket, timezone)"
                    ));
                }
            };
            files.push((canonical, PathBuf::from(&*value)));
        }
        let file = |name: &str| {
            files
                .iter()
                .find(|(parameter, _)| *parameter == name)
                .map(|(_, path)| path)
        };
        if file("ssl-cert").is_some() != file("ssl-key").is_some() {
            return Err("ssl-cert and ssl-key go together: give both or neither".to_owned());
        }
        let verifies = matches!(mode, MySqlSslMode::VerifyCa | MySqlSslMode::VerifyIdentity);
        let mut warnings = Vec::new();
        if let Some(ca) = file("ssl-ca").filter(|_| !verifies) {
            warnings.push(format!(
                "ssl-ca={} is not used with ssl-mode={}: the server's certificate is \
                 checked only with ssl-mode=VERIFY_CA or VERIFY_IDENTITY",
                ca.display(),
                mode_name(mode)
            ));
        }
        let options = MySqlConnectOptions::from_url(&url)
            .map_err(|err| err.to_string())?
            .log_slow_statements(
                super::open::SLOW_STATEMENT_LEVEL,
                super::open::SLOW_STATEMENT,
            );
        Ok(Self {
            options,
            files,
            warnings,
            url,
        })
    }

    /// The `ssl-ca` file, if the URL names one.
    pub fn ssl_ca(&self) -> Option<&Path> {
        self.files
            .iter()
            .find(|(parameter, _)| *parameter == "ssl-ca")
            .map(|(_, path)| path.as_path())
    }

    /// Whether the connection is made without TLS whatever the server offers.
    pub fn tls_disabled(&self) -> bool {
        matches!(self.options.get_ssl_mode(), MySqlSslMode::Disabled)
    }

    /// The same login over TLS (any certificate) and without a database:
    /// whether the account gets in when the connection is encrypted.
    pub fn encrypted_login(&self) -> Result<MySqlConnectOptions, sqlx::Error> {
        let mut url = self.url.clone();
        url.set_path("");
        Ok(MySqlConnectOptions::from_url(&url)?.ssl_mode(MySqlSslMode::Required))
    }
}

/// A mode as the URL writes it.
fn mode_name(mode: MySqlSslMode) -> &'static str {
    match mode {
        MySqlSslMode::Disabled => "DISABLED",
        MySqlSslMode::Preferred => "PREFERRED",
        MySqlSslMode::Required => "REQUIRED",
        MySqlSslMode::VerifyCa => "VERIFY_CA",
        MySqlSslMode::VerifyIdentity => "VERIFY_IDENTITY",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> String {
        MySqlUrl::parse(text).expect_err(text)
    }

    #[test]
    fn tls_parameters_reach_sqlx_and_are_not_part_of_the_database_name() {
        let url = MySqlUrl::parse(
            "mysql://app:p%40ss@db.internal:3306/changegate?ssl-mode=verify_identity&ssl-ca=/etc/ssl/corp%20ca.pem",
        )
        .unwrap();
        assert_eq!(url.options.get_database(), Some("changegate"));
        assert_eq!(url.options.get_host(), "db.internal");
        assert_eq!(url.options.get_username(), "app");
        assert!(matches!(
            url.options.get_ssl_mode(),
            MySqlSslMode::VerifyIdentity
        ));
        assert_eq!(url.ssl_ca(), Some(Path::new("/etc/ssl/corp ca.pem")));
        assert!(url.warnings.is_empty(), "{:?}", url.warnings);
    }

    #[test]
    fn without_parameters_the_mode_is_preferred() {
        let url = MySqlUrl::parse("mariadb://root@127.0.0.1/x").unwrap();
        assert!(matches!(
            url.options.get_ssl_mode(),
            MySqlSslMode::Preferred
        ));
        assert!(!url.tls_disabled());
        assert!(url.files.is_empty());
    }

    #[test]
    fn mistakes_are_named() {
        assert!(error("mysql://h/db?ssl-mode=ON").contains("ssl-mode \"ON\" is not DISABLED"));
        assert!(error("mysql://h/db?ssl_mode=REQUIRED").contains("unknown parameter \"ssl_mode\""));
        assert!(error("mysql://h/db?ssl-cert=/c.pem").contains("ssl-cert and ssl-key go together"));
        assert!(error("mysql://h/?ssl-mode=REQUIRED").contains("names no database"));
        assert!(error("mysql://h?ssl-mode=REQUIRED").contains("names no database"));
        assert!(error("mysql://h/db?statement-cache-capacity=many").contains("configuration"));
    }

    #[test]
    fn a_ca_that_is_never_checked_is_a_warning() {
        let url = MySqlUrl::parse("mysql://h/db?ssl-mode=REQUIRED&ssl-ca=/ca.pem").unwrap();
        assert_eq!(url.warnings.len(), 1);
        assert!(url.warnings[0].contains("ssl-ca=/ca.pem is not used with ssl-mode=REQUIRED"));
    }

    #[test]
    fn the_encrypted_login_keeps_the_account_and_drops_the_database() {
        let url =
            MySqlUrl::parse("mysql://app:pw@h:3307/db?ssl-mode=DISABLED&charset=utf8mb4").unwrap();
        assert!(url.tls_disabled());
        let login = url.encrypted_login().unwrap();
        assert_eq!(login.get_database(), None);
        assert_eq!(login.get_port(), 3307);
        assert_eq!(login.get_username(), "app");
        assert!(matches!(login.get_ssl_mode(), MySqlSslMode::Required));
    }
}
