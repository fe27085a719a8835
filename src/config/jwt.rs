//! `[identity.jwt]`: how bearer tokens are verified and what they name
//! (SPEC §3, identity). Keys are static (`hs256_secret`, `rs256_public_key`)
//! or the identity provider's own, read from its JWKS, found through OIDC
//! discovery or named directly.

use std::time::Duration;

use secrecy::SecretString;
use toml::Value;

use super::reader::Reader;
use super::secrets::{self, SecretFiles};

pub(super) const JWT_KEYS: &[&str] = &[
    "hs256_secret",
    "hs256_secret_file",
    "rs256_public_key",
    "rs256_public_key_file",
    "issuer",
    "audience",
    "leeway",
    "discovery",
    "jwks_url",
    "username_claim",
    "username_prefix",
    "groups_claim",
    "unverifiable_from_trusted_proxy",
];

/// `[identity.jwt]`: keys for bearer tokens; with none set, tokens are refused.
#[derive(Debug, Clone, Default)]
pub struct JwtSettings {
    /// `hs256_secret` or `hs256_secret_file`.
    pub hs256_secret: Option<SecretString>,
    /// `rs256_public_key` or `rs256_public_key_file`: PEM.
    pub rs256_public_key: Option<String>,
    /// `issuer`: required `iss`, compared exactly, when set.
    pub issuer: Option<String>,
    /// `audience`: one value or a list; a token's `aud` must name one of
    /// them when any is set.
    pub audience: Vec<String>,
    /// `leeway`, default `5s`, at most `60s`: the clock skew allowed when
    /// checking `exp` and `nbf`.
    pub leeway: Duration,
    /// `discovery`, default `false`: read the JWKS named by
    /// `<issuer>/.well-known/openid-configuration`.
    pub discovery: bool,
    /// `jwks_url`: the provider's JWKS, named directly.
    pub jwks_url: Option<String>,
    /// `username_claim`: the claim that names the caller. Unset: `sub`,
    /// else `email`, else `employee_id`.
    pub username_claim: Option<String>,
    /// `username_prefix`, default empty: put before the canonical name a
    /// token gives, so that provider names cannot pass for other accounts.
    pub username_prefix: String,
    /// `groups_claim`: the claim (a list of strings, or one string with
    /// commas between names) that names the caller's groups. Unset: a token names no group.
    pub groups_claim: Option<String>,
    /// `unverifiable_from_trusted_proxy`: what a bearer token that does not
    /// verify means when a trusted proxy also sent identity headers.
    pub unverifiable_from_trusted_proxy: Unverifiable,
}

/// Where the provider's signing keys are read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeySource {
    /// OIDC discovery under this issuer.
    Discovery {
        /// `identity.jwt.issuer`.
        issuer: String,
    },
    /// A JWKS at this URL.
    Jwks {
        /// `identity.jwt.jwks_url`.
        url: String,
    },
}

impl JwtSettings {
    /// Where the provider's keys are read; `None` with static keys only.
    pub fn key_source(&self) -> Option<KeySource> {
        if let Some(url) = &self.jwks_url {
            return Some(KeySource::Jwks { url: url.clone() });
        }
        match (&self.issuer, self.discovery) {
            (Some(issuer), true) => Some(KeySource::Discovery {
                issuer: issuer.clone(),
            }),
            _ => None,
        }
    }
}

/// `identity.jwt.unverifiable_from_trusted_proxy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Unverifiable {
    /// The request is refused (401), as without the headers.
    #[default]
    Refuse,
    /// The token is ignored and the headers name the caller.
    Ignore,
}

pub(super) fn jwt(r: &mut Reader<'_>, files: &mut SecretFiles) -> JwtSettings {
    if let Some(value) = r.at(&["identity", "jwt"]) {
        r.check_keys("identity.jwt", value, Some(JWT_KEYS));
    }
    let at = |key| ["identity", "jwt", key];
    let settings = JwtSettings {
        hs256_secret: secrets::secret(r, files, &at("hs256_secret")),
        rs256_public_key: secrets::text(r, files, &at("rs256_public_key")),
        issuer: optional(r.string_at(&at("issuer"), "")),
        audience: audience(r),
        leeway: leeway(r),
        discovery: r.bool_at(&at("discovery"), false),
        jwks_url: optional(r.string_at(&at("jwks_url"), "")),
        username_claim: optional(r.string_at(&at("username_claim"), "")),
        username_prefix: r.string_at(&at("username_prefix"), ""),
        groups_claim: optional(r.string_at(&at("groups_claim"), "")),
        unverifiable_from_trusted_proxy: unverifiable(r),
    };
    check_key_source(r, &settings);
    settings
}

fn optional(text: String) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

fn audience(r: &mut Reader<'_>) -> Vec<String> {
    const KEY: [&str; 3] = ["identity", "jwt", "audience"];
    match r.at(&KEY) {
        Some(Value::Array(_)) => r.string_list_at(&KEY),
        _ => optional(r.string_at(&KEY, "")).into_iter().collect(),
    }
}

fn leeway(r: &mut Reader<'_>) -> Duration {
    const DEFAULT: Duration = Duration::from_secs(5);
    const MAX: Duration = Duration::from_secs(60);
    let Some(raw) = r.at(&["identity", "jwt", "leeway"]) else {
        return DEFAULT;
    };
    match raw
        .as_str()
        .map(|text| humantime::parse_duration(text.trim()))
    {
        Some(Ok(leeway)) if leeway <= MAX => leeway,
        _ => {
            r.error(
                "identity.jwt.leeway",
                "must be a duration of at most \"60s\", like \"5s\"",
            );
            DEFAULT
        }
    }
}

fn unverifiable(r: &mut Reader<'_>) -> Unverifiable {
    const KEY: &str = "identity.jwt.unverifiable_from_trusted_proxy";
    match r
        .string_at(
            &["identity", "jwt", "unverifiable_from_trusted_proxy"],
            "refuse",
        )
        .as_str()
    {
        "refuse" => Unverifiable::Refuse,
        "ignore" => Unverifiable::Ignore,
        other => {
            r.error(KEY, format!("{other:?} is not \"refuse\" or \"ignore\""));
            Unverifiable::Refuse
        }
    }
}

/// Discovery needs the issuer it discovers under, and names one JWKS: a
/// second one beside it would leave which keys count to chance.
fn check_key_source(r: &mut Reader<'_>, jwt: &JwtSettings) {
    if jwt.discovery && jwt.issuer.is_none() {
        r.error(
            "identity.jwt.discovery",
            "needs identity.jwt.issuer, the URL discovery reads under",
        );
    }
    if jwt.discovery && jwt.jwks_url.is_some() {
        r.error(
            "identity.jwt.jwks_url",
            "give either identity.jwt.discovery or identity.jwt.jwks_url, not both",
        );
    }
    let urls = [
        ("identity.jwt.jwks_url", jwt.jwks_url.as_deref()),
        (
            "identity.jwt.issuer",
            jwt.issuer.as_deref().filter(|_| jwt.discovery),
        ),
    ];
    for (key, url) in urls {
        let Some(url) = url else { continue };
        match reqwest::Url::parse(url) {
            Ok(parsed) if matches!(parsed.scheme(), "https" | "http") => {}
            _ => r.error(key, format!("{url:?} is not an http(s) URL")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Settings, Severity, source};

    fn load(text: &str) -> (Settings, Vec<String>) {
        let (settings, problems) = Settings::from_table(&source::parse(text).unwrap(), None);
        let errors = problems
            .iter()
            .filter(|p| p.severity == Severity::Error)
            .map(|p| p.key.clone())
            .collect();
        (settings, errors)
    }

    #[test]
    fn discovery_needs_an_issuer_and_excludes_a_jwks_url() {
        let (_, errors) = load("[identity.jwt]\ndiscovery = true\n");
        assert_eq!(errors, ["identity.jwt.discovery"]);
        let (_, errors) = load(
            "[identity.jwt]\ndiscovery = true\nissuer = \"https://sso.example.com\"\n\
             jwks_url = \"https://sso.example.com/keys\"\n",
        );
        assert_eq!(errors, ["identity.jwt.jwks_url"]);
        let (_, errors) = load("[identity.jwt]\njwks_url = \"file:///etc/keys\"\n");
        assert_eq!(errors, ["identity.jwt.jwks_url"]);
    }

    #[test]
    fn the_key_source_is_discovery_under_the_issuer_or_the_jwks_named() {
        let (settings, errors) =
            load("[identity.jwt]\ndiscovery = true\nissuer = \"https://sso.example.com/realm\"\n");
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            settings.identity.jwt.key_source(),
            Some(KeySource::Discovery {
                issuer: "https://sso.example.com/realm".to_owned()
            })
        );
        let (settings, _) = load("[identity.jwt]\njwks_url = \"https://sso.example.com/keys\"\n");
        assert_eq!(
            settings.identity.jwt.key_source(),
            Some(KeySource::Jwks {
                url: "https://sso.example.com/keys".to_owned()
            })
        );
        let (settings, _) = load("[identity.jwt]\nissuer = \"https://sso.example.com\"\n");
        assert_eq!(settings.identity.jwt.key_source(), None);
    }

    #[test]
    fn the_audience_is_one_value_or_a_list() {
        let (settings, _) = load("[identity.jwt]\naudience = \"changegate\"\n");
        assert_eq!(settings.identity.jwt.audience, ["changegate"]);
        let (settings, _) = load("[identity.jwt]\naudience = [\"changegate\", \"api\"]\n");
        assert_eq!(settings.identity.jwt.audience, ["changegate", "api"]);
        let (settings, _) = load("");
        assert!(settings.identity.jwt.audience.is_empty());
    }

    #[test]
    fn an_unknown_answer_for_unverifiable_tokens_is_an_error_and_refuses() {
        let (settings, errors) =
            load("[identity.jwt]\nunverifiable_from_trusted_proxy = \"allow\"\n");
        assert_eq!(errors, ["identity.jwt.unverifiable_from_trusted_proxy"]);
        assert_eq!(
            settings.identity.jwt.unverifiable_from_trusted_proxy,
            Unverifiable::Refuse
        );
        let (settings, _) = load("[identity.jwt]\nunverifiable_from_trusted_proxy = \"ignore\"\n");
        assert_eq!(
            settings.identity.jwt.unverifiable_from_trusted_proxy,
            Unverifiable::Ignore
        );
    }
}
