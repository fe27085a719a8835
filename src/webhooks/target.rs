//! Which URLs may receive webhooks: http or https with a host, and unless
//! `webhooks.allow_private_targets` is set, not a loopback, private,
//! link-local or otherwise internal address (a webhook must not become a way
//! to reach the service's own network). Names are checked as written; a
//! public name that resolves to a private address is not caught here.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Checks an endpoint URL; the error says what is wrong.
pub fn validate(text: &str, allow_private: bool) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(text.trim()).map_err(|err| format!("url is not valid: {err}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("url must be http or https".to_owned());
    }
    let host = url
        .host_str()
        .filter(|host| !host.is_empty())
        .ok_or_else(|| "url must name a host".to_owned())?;
    if !allow_private && is_internal(host) {
        return Err("url points to a loopback or private address; not allowed here".to_owned());
    }
    Ok(url)
}

fn is_internal(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => internal_v4(ip),
        Ok(IpAddr::V6(ip)) => internal_v6(ip),
        Err(_) => {
            let name = bare.trim_end_matches('.').to_ascii_lowercase();
            name == "localhost" || name.ends_with(".localhost") || name.ends_with(".internal")
        }
    }
}

fn internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || (a == 100 && (64..128).contains(&b))
}

fn internal_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return internal_v4(v4);
    }
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
}

#[cfg(test)]
mod tests {
    use super::validate;

    #[test]
    fn schemes_and_hosts() {
        assert!(validate("https://hooks.example.com/x", false).is_ok());
        assert!(validate("ftp://hooks.example.com/x", false).is_err());
        assert!(validate("not a url", false).is_err());
        assert!(validate("https://", false).is_err());
    }

    #[test]
    fn internal_targets_need_the_switch() {
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
        ] {
            assert!(validate(url, false).is_err(), "{url}");
            assert!(validate(url, true).is_ok(), "{url}");
        }
        assert!(validate("http://8.8.8.8/", false).is_ok());
    }
}
