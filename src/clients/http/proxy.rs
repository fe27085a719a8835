//! Which outbound requests go through a proxy.

use std::sync::Arc;

use hyper_util::client::proxy::matcher::Matcher;

/// Which outbound requests go through a proxy: `HTTPS_PROXY`, `HTTP_PROXY`,
/// `ALL_PROXY` and `NO_PROXY`, upper or lower case, with curl's rules (the
/// matcher reqwest itself uses), except that a loopback target (`localhost`,
/// `*.localhost`, `127.0.0.0/8`, `::1`) is never proxied: a proxy cannot
/// reach this machine's loopback.
#[derive(Debug, Clone, Default)]
pub struct ProxyRules {
    http: Option<String>,
    https: Option<String>,
    matcher: Option<Arc<Matcher>>,
}

/// `NO_PROXY` entries always added to the operator's.
const LOOPBACK: &str = "localhost,.localhost,127.0.0.0/8,::1";

impl ProxyRules {
    /// The rules of this process's environment.
    pub fn from_env() -> Self {
        let var = |names: &[&str]| {
            names
                .iter()
                .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
        };
        Self::new(
            var(&["HTTP_PROXY", "http_proxy"]),
            var(&["HTTPS_PROXY", "https_proxy"]),
            var(&["ALL_PROXY", "all_proxy"]),
            var(&["NO_PROXY", "no_proxy"]),
        )
    }

    /// Rules from explicit values, as the environment would give them.
    pub fn new(
        http: Option<String>,
        https: Option<String>,
        all: Option<String>,
        no_proxy: Option<String>,
    ) -> Self {
        let http = http.or_else(|| all.clone());
        let https = https.or(all);
        if http.is_none() && https.is_none() {
            return Self::default();
        }
        let no = match no_proxy {
            Some(list) if !list.trim().is_empty() => format!("{list},{LOOPBACK}"),
            _ => LOOPBACK.to_owned(),
        };
        let mut builder = Matcher::builder().no(no);
        if let Some(proxy) = &http {
            builder = builder.http(proxy.clone());
        }
        if let Some(proxy) = &https {
            builder = builder.https(proxy.clone());
        }
        Self {
            http,
            https,
            matcher: Some(Arc::new(builder.build())),
        }
    }

    /// Whether any proxy is configured at all.
    pub fn is_active(&self) -> bool {
        self.matcher.is_some()
    }

    /// The proxy URL a request to `url` goes through, if any (with any
    /// credentials it carries).
    pub fn proxy_for(&self, url: &reqwest::Url) -> Option<&str> {
        let matcher = self.matcher.as_ref()?;
        let uri: http::Uri = url.as_str().parse().ok()?;
        matcher.intercept(&uri)?;
        match url.scheme() {
            "https" => self.https.as_deref(),
            "http" => self.http.as_deref(),
            _ => None,
        }
    }

    /// The same URL with credentials cut out, for logs.
    pub fn proxy_host_for(&self, url: &reqwest::Url) -> Option<String> {
        let proxy = reqwest::Url::parse(self.proxy_for(url)?).ok()?;
        Some(match proxy.port() {
            Some(port) => format!("{}:{port}", proxy.host_str().unwrap_or_default()),
            None => proxy.host_str().unwrap_or_default().to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> reqwest::Url {
        reqwest::Url::parse(text).expect("a URL")
    }

    fn rules(no_proxy: Option<&str>) -> ProxyRules {
        ProxyRules::new(
            Some("http://plain-proxy:3128".to_owned()),
            Some("http://user:secret@tls-proxy:3129".to_owned()),
            None,
            no_proxy.map(str::to_owned),
        )
    }

    #[test]
    fn each_scheme_takes_its_own_proxy_with_its_credentials() {
        let rules = rules(None);
        assert_eq!(
            rules.proxy_for(&url("https://gitlab.example.com/api/v4")),
            Some("http://user:secret@tls-proxy:3129")
        );
        assert_eq!(
            rules.proxy_for(&url("http://approvals.example.com/")),
            Some("http://plain-proxy:3128")
        );
        assert_eq!(
            rules
                .proxy_host_for(&url("https://gitlab.example.com/"))
                .as_deref(),
            Some("tls-proxy:3129"),
            "the host for logs carries no credentials"
        );
    }

    #[test]
    fn a_loopback_target_is_never_proxied() {
        let rules = rules(None);
        for target in [
            "https://127.0.0.1:8443/",
            "http://127.10.0.1/",
            "http://localhost:8080/",
            "https://gitlab.localhost/",
            "http://[::1]:9000/",
        ] {
            assert_eq!(rules.proxy_for(&url(target)), None, "{target}");
        }
        assert!(rules.proxy_for(&url("http://10.0.0.1/")).is_some());
    }

    #[test]
    fn no_proxy_follows_curl_domains_suffixes_and_networks() {
        let rules = rules(Some("internal.example, .corp.example,10.0.0.0/8"));
        for bypassed in [
            "https://internal.example/",
            "https://git.internal.example/",
            "https://git.corp.example/",
            "http://10.1.2.3/",
        ] {
            assert_eq!(rules.proxy_for(&url(bypassed)), None, "{bypassed}");
        }
        for proxied in ["https://notinternal.example/", "http://11.0.0.1/"] {
            assert!(rules.proxy_for(&url(proxied)).is_some(), "{proxied}");
        }
        let everything = ProxyRules::new(
            None,
            Some("http://p:1".to_owned()),
            None,
            Some("*".to_owned()),
        );
        assert_eq!(
            everything.proxy_for(&url("https://gitlab.example.com/")),
            None
        );
    }

    #[test]
    fn all_proxy_serves_a_scheme_without_its_own_and_no_variable_means_no_proxy() {
        let rules = ProxyRules::new(None, None, Some("http://all:8080".to_owned()), None);
        assert_eq!(
            rules.proxy_for(&url("https://gitlab.example.com/")),
            Some("http://all:8080")
        );
        assert_eq!(
            rules.proxy_for(&url("http://gitlab.example.com/")),
            Some("http://all:8080")
        );
        let none = ProxyRules::new(None, None, None, Some("example.com".to_owned()));
        assert!(!none.is_active());
        assert_eq!(none.proxy_for(&url("https://gitlab.example.com/")), None);
    }
}
