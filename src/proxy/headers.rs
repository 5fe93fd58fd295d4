//! Header hygiene between hops: hop-by-hop headers (RFC 9110 §7.6.1) are removed in both
//! directions, and upgrades are re-announced explicitly. (`X-Forwarded-*` and the request ID
//! are `forwarded`'s.)

use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// What to keep of the hop-by-hop headers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Keep {
    /// Forwarding an HTTP/1.1 Upgrade: keep `Upgrade` and send `Connection: upgrade`.
    pub upgrade: bool,
    /// `TE: trailers` towards an HTTP/2 upstream (gRPC needs it; HTTP/2 allows only that
    /// value).
    pub te_trailers: bool,
}

/// Is this an HTTP/1.1 Upgrade request or 101 response: `Connection` lists `upgrade` and an
/// `Upgrade` header is present.
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE) && connection_has(headers, "upgrade")
}

fn connection_has(headers: &HeaderMap, token: &str) -> bool {
    list_items(headers, header::CONNECTION).any(|t| t.eq_ignore_ascii_case(token))
}

/// The comma-separated items of every `name` line (RFC 9110 §5.6.1), trimmed; a line that is
/// not visible ASCII is skipped.
pub fn list_items(headers: &HeaderMap, name: HeaderName) -> impl Iterator<Item = &str> + '_ {
    (headers.get_all(name).iter())
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
}

const HOP_COUNT: usize = 7;
// Positions in [`HOP_BY_HOP`].
const AT_CONNECTION: usize = 0;
const AT_TE: usize = 3;
const AT_UPGRADE: usize = 6;

/// The headers that are always hop-by-hop (besides those `Connection` names).
pub(super) const HOP_BY_HOP: [HeaderName; HOP_COUNT] = [
    header::CONNECTION,
    KEEP_ALIVE,
    PROXY_CONNECTION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.iter().any(|h| h == name)
}

/// Removes hop-by-hop headers: `Connection` and every header it names, `Keep-Alive`,
/// `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding` and `Upgrade`, except what `keep`
/// asks for.
pub fn strip_hop_by_hop(headers: &mut HeaderMap, keep: Keep) {
    // One pass over the names (no hashing) finds which of them are present; most requests
    // carry none, and most responses only `Connection: keep-alive`.
    let mut present = [false; HOP_COUNT];
    for name in headers.keys() {
        if let Some(i) = HOP_BY_HOP.iter().position(|h| h == name) {
            present[i] = true;
        }
    }
    if !present.contains(&true) {
        return;
    }
    // Other headers `Connection` names (the always-hop-by-hop ones are handled below).
    let named: Vec<HeaderName> = if present[AT_CONNECTION] {
        headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
            .filter(|n| !is_hop_by_hop(n))
            .collect()
    } else {
        Vec::new()
    };
    let te_trailers = keep.te_trailers
        && present[AT_TE]
        && headers
            .get_all(header::TE)
            .iter()
            .any(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    let upgrade = if keep.upgrade && present[AT_UPGRADE] {
        headers.get(header::UPGRADE).cloned()
    } else {
        None
    };
    for n in named {
        headers.remove(n);
    }
    for (n, _) in HOP_BY_HOP.iter().zip(present).filter(|(_, p)| *p) {
        headers.remove(n);
    }
    if te_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
    if let Some(u) = upgrade {
        headers.insert(header::UPGRADE, u);
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
}

/// The client address as an `X-Forwarded-For` entry (made once per connection).
pub fn forwarded_for(client: IpAddr) -> HeaderValue {
    let value = match client {
        // By hand: `Display` goes through `core::fmt`, ~1.7k instructions, a twentieth of a
        // `Connection: close` request's whole user-space cost (callgrind, BENCHMARKS.md).
        IpAddr::V4(v4) => {
            let mut text = [0u8; 15];
            let mut len = 0;
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    text[len] = b'.';
                    len += 1;
                }
                len += decimal(octet, &mut text[len..]);
            }
            HeaderValue::from_bytes(&text[..len])
        }
        IpAddr::V6(_) => HeaderValue::try_from(client.to_string()),
    };
    value.expect("an IP address is a valid header value")
}

/// Writes `n` in decimal at the start of `out`; returns the digits written.
fn decimal(n: u8, out: &mut [u8]) -> usize {
    let digits = [n / 100, n / 10 % 10, n % 10];
    let skip = match n {
        100.. => 0,
        10.. => 1,
        _ => 2,
    };
    for (slot, d) in out.iter_mut().zip(&digits[skip..]) {
        *slot = b'0' + d;
    }
    3 - skip
}

#[cfg(test)]
mod tests {
    #[test]
    fn forwarded_for_writes_addresses_as_display_does() {
        let v4 = [
            [0, 0, 0, 0],
            [127, 0, 0, 1],
            [10, 9, 99, 100],
            [255, 255, 255, 255],
            [1, 20, 200, 9],
        ];
        for octets in v4 {
            let ip = std::net::IpAddr::from(octets);
            assert_eq!(forwarded_for(ip), ip.to_string().as_str(), "{ip}");
        }
        let v6: std::net::IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(forwarded_for(v6), "2001:db8::1");
    }

    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn hop_by_hop_headers_and_connection_listed_names_are_removed() {
        let mut h = map(&[
            ("connection", "keep-alive, x-secret"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("te", "gzip"),
            ("trailer", "x-checksum"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("x-secret", "1"),
            ("x-kept", "2"),
        ]);
        strip_hop_by_hop(&mut h, Keep::default());
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["x-kept"], "2");
    }

    #[test]
    fn upgrade_is_kept_and_reannounced_when_forwarding_an_upgrade() {
        let mut h = map(&[
            ("connection", "Upgrade, x-secret"),
            ("upgrade", "websocket"),
            ("x-secret", "1"),
        ]);
        assert!(is_upgrade(&h));
        strip_hop_by_hop(
            &mut h,
            Keep {
                upgrade: true,
                ..Keep::default()
            },
        );
        assert_eq!(h["upgrade"], "websocket");
        assert_eq!(h["connection"], "upgrade");
        assert!(h.get("x-secret").is_none());
    }

    #[test]
    fn te_trailers_survives_only_when_asked() {
        let mut h = map(&[("te", "trailers")]);
        strip_hop_by_hop(&mut h, Keep::default());
        assert!(h.get("te").is_none());
        let mut h = map(&[("te", "trailers")]);
        strip_hop_by_hop(
            &mut h,
            Keep {
                te_trailers: true,
                ..Keep::default()
            },
        );
        assert_eq!(h["te"], "trailers");
        let mut h = map(&[("te", "gzip")]);
        strip_hop_by_hop(
            &mut h,
            Keep {
                te_trailers: true,
                ..Keep::default()
            },
        );
        assert!(h.get("te").is_none());
    }

    #[test]
    fn not_an_upgrade_without_both_headers() {
        assert!(!is_upgrade(&map(&[("upgrade", "websocket")])));
        assert!(!is_upgrade(&map(&[("connection", "upgrade")])));
    }

    #[test]
    fn hop_by_hop_positions() {
        assert_eq!(HOP_BY_HOP[AT_CONNECTION], header::CONNECTION);
        assert_eq!(HOP_BY_HOP[AT_TE], header::TE);
        assert_eq!(HOP_BY_HOP[AT_UPGRADE], header::UPGRADE);
    }

    #[test]
    fn a_head_without_hop_by_hop_headers_is_left_alone() {
        let mut h = map(&[("host", "a"), ("accept", "*/*"), ("x-trace", "1")]);
        let before = h.clone();
        strip_hop_by_hop(&mut h, Keep::default());
        strip_hop_by_hop(
            &mut h,
            Keep {
                upgrade: true,
                te_trailers: true,
            },
        );
        assert_eq!(h, before);
    }
}
