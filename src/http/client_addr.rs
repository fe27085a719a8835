//! The client's address: the socket peer, or, when the peer is a trusted
//! proxy, the right-most `X-Forwarded-For` hop that is not a trusted proxy.
//! The left-most hop is whatever the client wrote and cannot be believed.

use std::net::{IpAddr, SocketAddr};

use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, HeaderName, Request};
use ipnet::IpNet;

/// The forwarding header.
const FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The address of the client that made `request`, as far as it can be trusted.
pub fn client_addr(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    let hops: Vec<&str> = headers
        .get_all(&FORWARDED_FOR)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .collect();
    for hop in hops.into_iter().rev() {
        match hop.parse::<IpAddr>() {
            Ok(ip) if is_trusted(&ip) => {}
            Ok(ip) => return ip,
            // Left of a hop our proxies did not write, nothing can be believed.
            Err(_) => break,
        }
    }
    peer
}

/// The socket peer of a request served with connect info; the unspecified
/// address otherwise, which is never a trusted proxy (so a router served
/// without connect info trusts nobody's identity headers).
pub fn peer_of<B>(request: &Request<B>) -> IpAddr {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::from([0, 0, 0, 0]), |info| info.0.ip())
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn trusted() -> Vec<IpNet> {
        vec![
            "10.0.0.0/8".parse().unwrap(),
            "127.0.0.1/32".parse().unwrap(),
        ]
    }

    fn xff(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(FORWARDED_FOR, HeaderValue::from_str(value).unwrap());
        headers
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        let forged = xff("1.2.3.4");
        assert_eq!(
            client_addr(ip("203.0.113.5"), &forged, &trusted()),
            ip("203.0.113.5")
        );
    }

    #[test]
    fn through_trusted_proxies_the_right_most_untrusted_hop_is_the_client() {
        // The client forged "1.2.3.4"; our proxies appended the real hops.
        let headers = xff("1.2.3.4, 198.51.100.7, 10.0.0.2");
        assert_eq!(
            client_addr(ip("10.0.0.1"), &headers, &trusted()),
            ip("198.51.100.7")
        );
    }

    #[test]
    fn only_trusted_hops_or_none_fall_back_to_the_peer() {
        assert_eq!(
            client_addr(ip("10.0.0.1"), &xff("10.0.0.9"), &trusted()),
            ip("10.0.0.1")
        );
        assert_eq!(
            client_addr(ip("10.0.0.1"), &HeaderMap::new(), &trusted()),
            ip("10.0.0.1")
        );
        let garbled = xff("1.2.3.4, garbage, 10.0.0.2");
        assert_eq!(
            client_addr(ip("10.0.0.1"), &garbled, &trusted()),
            ip("10.0.0.1")
        );
    }
}
