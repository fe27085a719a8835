//! Which URLs may receive webhooks: http or https with a host and no
//! credentials, and unless `webhooks.allow_private_targets` is set, no
//! address that is not globally reachable (a webhook must not become a way
//! to reach the service's own network). The same policy is applied to the
//! URL when an endpoint is registered, again before each delivery (an
//! endpoint registered under another setting is not delivered to), and to
//! every address a target's name resolves to, right before connecting
//! ([`GlobalOnly`]), so a name that resolves to an internal address (DNS
//! rebinding) is refused too.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Checks an endpoint URL; the error says what is wrong.
pub fn validate(text: &str, allow_private: bool) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(text.trim()).map_err(|err| format!("url is not valid: {err}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("url must be http or https".to_owned());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "url must not carry credentials (user:password@): authenticate with the signature"
                .to_owned(),
        );
    }
    let host = url
        .host_str()
        .filter(|host| !host.is_empty())
        .ok_or_else(|| "url must name a host".to_owned())?;
    if !allow_private && is_internal(host) {
        return Err(
            "url points to an address that is not globally reachable (loopback, private, \
             link-local, multicast, reserved, …); not allowed here"
                .to_owned(),
        );
    }
    Ok(url)
}

fn is_internal(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(ip) => !is_globally_reachable(ip),
        Err(_) => {
            let name = bare.trim_end_matches('.').to_ascii_lowercase();
            name == "localhost" || name.ends_with(".localhost") || name.ends_with(".internal")
        }
    }
}

/// Whether `ip` is globally reachable, per IANA's IPv4 and IPv6
/// special-purpose address registries (RFC 6890 and its updates): every
/// block they list as not globally reachable is refused, and so is any form
/// that embeds an IPv4 address (mapped, compatible, translated, NAT64,
/// 6to4) whose IPv4 address is refused.
pub fn is_globally_reachable(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => v4_global(ip),
        IpAddr::V6(ip) => v6_global(ip),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn v4_global(ip: Ipv4Addr) -> bool {
    // 192.0.0.9 (PCP anycast) and 192.0.0.10 (TURN anycast) are globally
    // reachable inside 192.0.0.0/24, which otherwise is not.
    if ip == Ipv4Addr::new(192, 0, 0, 9) || ip == Ipv4Addr::new(192, 0, 0, 10) {
        return true;
    }
    const NOT_GLOBAL: &[([u8; 4], u32)] = &[
        ([0, 0, 0, 0], 8),       // "this network"
        ([10, 0, 0, 0], 8),      // private
        ([100, 64, 0, 0], 10),   // shared address space (carrier-grade NAT)
        ([127, 0, 0, 0], 8),     // loopback
        ([169, 254, 0, 0], 16),  // link-local
        ([172, 16, 0, 0], 12),   // private
        ([192, 0, 0, 0], 24),    // IETF protocol assignments
        ([192, 0, 2, 0], 24),    // documentation (TEST-NET-1)
        ([192, 88, 99, 0], 24),  // deprecated 6to4 relay anycast
        ([192, 168, 0, 0], 16),  // private
        ([198, 18, 0, 0], 15),   // benchmarking
        ([198, 51, 100, 0], 24), // documentation (TEST-NET-2)
        ([203, 0, 113, 0], 24),  // documentation (TEST-NET-3)
        ([224, 0, 0, 0], 4),     // multicast
        ([240, 0, 0, 0], 4),     // reserved, and the limited broadcast
    ];
    !NOT_GLOBAL
        .iter()
        .any(|(net, prefix)| in_v4(ip, *net, *prefix))
}

fn in_v6(ip: Ipv6Addr, net: Ipv6Addr, prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    (u128::from(ip) & mask) == (u128::from(net) & mask)
}

fn v6_global(ip: Ipv6Addr) -> bool {
    let bits = u128::from(ip);
    let embedded = |shift: u32| Ipv4Addr::from(((bits >> shift) & 0xffff_ffff) as u32);
    let net = |text: &str| text.parse::<Ipv6Addr>().expect("a literal network");
    // Forms that carry an IPv4 address: judged by it (and never global when
    // the form itself is not: local-use NAT64).
    if in_v6(ip, net("::ffff:0:0"), 96)          // IPv4-mapped
        || in_v6(ip, net("::ffff:0:0:0"), 96)    // IPv4-translated (SIIT)
        || in_v6(ip, net("64:ff9b::"), 96)       // NAT64 well-known prefix
        || (in_v6(ip, net("::"), 96) && bits > 1)
    // IPv4-compatible (deprecated)
    {
        return v4_global(embedded(0));
    }
    if in_v6(ip, net("2002::"), 16) {
        // 6to4: the IPv4 address follows the prefix.
        return v4_global(embedded(80));
    }
    const NOT_GLOBAL: &[(&str, u32)] = &[
        ("::", 128),         // unspecified
        ("::1", 128),        // loopback
        ("64:ff9b:1::", 48), // local-use NAT64
        ("100::", 64),       // discard-only
        ("2001::", 23),      // IETF protocol assignments (Teredo, ORCHID, …)
        ("2001:db8::", 32),  // documentation
        ("3fff::", 20),      // documentation
        ("5f00::", 16),      // segment routing SIDs
        ("fc00::", 7),       // unique local
        ("fe80::", 10),      // link-local
        ("fec0::", 10),      // site-local (deprecated)
        ("ff00::", 8),       // multicast
    ];
    !NOT_GLOBAL
        .iter()
        .any(|(network, prefix)| in_v6(ip, net(network), *prefix))
}

/// Resolves names for the webhook client and keeps only the addresses the
/// policy allows, so the check happens on the very addresses the client
/// connects to. A name that resolves only to refused addresses fails.
pub struct GlobalOnly<L> {
    lookup: Arc<L>,
}

/// A name lookup: the system's resolver in production, a fixed table in tests.
pub trait Lookup: Send + Sync + 'static {
    /// The addresses of `host`.
    fn lookup(
        &self,
        host: String,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<Vec<SocketAddr>>> + Send>>;
}

/// The system resolver (`getaddrinfo` through tokio).
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(
        &self,
        host: String,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<Vec<SocketAddr>>> + Send>>
    {
        Box::pin(async move { Ok(tokio::net::lookup_host((host.as_str(), 0)).await?.collect()) })
    }
}

impl<L: Lookup> GlobalOnly<L> {
    /// The policy over `lookup`.
    pub fn new(lookup: L) -> Self {
        Self {
            lookup: Arc::new(lookup),
        }
    }
}

impl<L: Lookup> Resolve for GlobalOnly<L> {
    fn resolve(&self, name: Name) -> Resolving {
        let lookup = self.lookup.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let all = lookup.lookup(host.clone()).await?;
            let allowed: Vec<SocketAddr> = all
                .iter()
                .copied()
                .filter(|addr| is_globally_reachable(addr.ip()))
                .collect();
            if allowed.is_empty() {
                let refused = std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!(
                        "{host} resolves only to addresses webhooks may not reach ({}); see webhooks.allow_private_targets",
                        all.iter()
                            .map(|addr| addr.ip().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
                return Err(Box::new(refused) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::net::SocketAddr;

    use reqwest::dns::{Name, Resolve};

    use super::{GlobalOnly, Lookup, validate};

    /// Names answered from a table, as a DNS server under an attacker's control would.
    struct Table(HashMap<&'static str, Vec<&'static str>>);

    impl Lookup for Table {
        fn lookup(
            &self,
            host: String,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = std::io::Result<Vec<SocketAddr>>> + Send>,
        > {
            let found: Vec<SocketAddr> = self.0[host.as_str()]
                .iter()
                .map(|ip| SocketAddr::new(ip.parse().unwrap(), 0))
                .collect();
            Box::pin(async move { Ok(found) })
        }
    }

    #[tokio::test]
    async fn a_name_is_judged_by_every_address_it_resolves_to() {
        let resolver = GlobalOnly::new(Table(HashMap::from([
            ("rebind.example", vec!["127.0.0.1"]),
            ("metadata.example", vec!["169.254.169.254", "fd00::1"]),
            ("mixed.example", vec!["10.0.0.1", "93.184.216.34"]),
        ])));
        for name in ["rebind.example", "metadata.example"] {
            let refused = resolver
                .resolve(name.parse::<Name>().unwrap())
                .await
                .err()
                .expect("refused");
            assert!(
                refused.to_string().contains("may not reach"),
                "{name}: {refused}"
            );
        }
        let kept: Vec<SocketAddr> = resolver
            .resolve("mixed.example".parse::<Name>().unwrap())
            .await
            .unwrap()
            .collect();
        assert_eq!(kept, vec!["93.184.216.34:0".parse::<SocketAddr>().unwrap()]);
    }

    #[test]
    fn schemes_and_hosts() {
        assert!(validate("https://hooks.example.com/x", false).is_ok());
        assert!(validate("ftp://hooks.example.com/x", false).is_err());
        assert!(validate("not a url", false).is_err());
        assert!(validate("https://", false).is_err());
    }

    #[test]
    fn credentials_in_the_url_are_refused() {
        for url in [
            "https://user:pass@hooks.example.com/x",
            "https://user@hooks.example.com/x",
        ] {
            let err = validate(url, true).unwrap_err();
            assert!(err.contains("credentials"), "{url}: {err}");
        }
    }

    #[test]
    fn only_globally_reachable_targets_without_the_switch() {
        for url in [
            "http://127.0.0.1:9/x",
            "http://localhost/x",
            "http://10.1.2.3/",
            "http://192.168.0.1/",
            "http://172.16.0.1/",
            "http://169.254.169.254/latest",
            "http://[::1]/",
            "http://[fd00::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://0.0.0.0/",
            "http://0.0.0.1/",
            "http://0.1.2.3/",
            "http://[::127.0.0.1]/",
            "http://[64:ff9b::127.0.0.1]/",
            "http://[2002:7f00:1::]/",
            "http://[::ffff:0:127.0.0.1]/",
            "http://[fec0::1]/",
            "http://224.0.0.1/",
            "http://[ff02::1]/",
            "http://240.0.0.1/",
            "http://198.18.0.1/",
            "http://192.0.0.1/",
            "http://100.64.0.1/",
            "http://192.0.2.1/",
            "http://[2001:db8::1]/",
            "http://[64:ff9b:1::1]/",
            "http://255.255.255.255/",
        ] {
            assert!(validate(url, false).is_err(), "{url}");
            assert!(validate(url, true).is_ok(), "{url}");
        }
        for url in [
            "http://8.8.8.8/",
            "http://[2606:4700:4700::1111]/",
            "http://[64:ff9b::808:808]/",
            "http://[2002:808:808::]/",
            "http://192.0.0.9/",
        ] {
            assert!(validate(url, false).is_ok(), "{url}");
        }
    }
}
