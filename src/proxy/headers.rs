//! Header hygiene between hops: hop-by-hop headers (RFC 9110 §7.6.1) are removed in both
//! directions, upgrades are re-announced explicitly, and `X-Forwarded-*` are added.

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
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// Removes hop-by-hop headers: `Connection` and every header it names, `Keep-Alive`,
/// `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding` and `Upgrade`, except what `keep`
/// asks for.
pub fn strip_hop_by_hop(headers: &mut HeaderMap, keep: Keep) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    let te_trailers = keep.te_trailers
        && headers
            .get_all(header::TE)
            .iter()
            .any(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    let upgrade = if keep.upgrade {
        headers.get(header::UPGRADE).cloned()
    } else {
        None
    };
    for n in named {
        headers.remove(n);
    }
    for n in [
        header::CONNECTION,
        KEEP_ALIVE,
        PROXY_CONNECTION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
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

/// Adds the client to `X-Forwarded-For` (after any existing entries), and sets
/// `X-Forwarded-Proto` and `X-Forwarded-Host` to what the client used. pier is the edge, so
/// the two it sets replace whatever the client sent.
pub fn add_forwarded(
    headers: &mut HeaderMap,
    client: IpAddr,
    scheme: &'static str,
    host: Option<&HeaderValue>,
) {
    let mut xff = String::new();
    for v in headers.get_all(X_FORWARDED_FOR) {
        if let Ok(v) = v.to_str() {
            xff.push_str(v);
            xff.push_str(", ");
        }
    }
    xff.push_str(&client.to_string());
    if let Ok(v) = HeaderValue::from_str(&xff) {
        headers.insert(X_FORWARDED_FOR, v);
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(scheme));
    match host {
        Some(h) => {
            headers.insert(X_FORWARDED_HOST, h.clone());
        }
        None => {
            headers.remove(X_FORWARDED_HOST);
        }
    }
}

#[cfg(test)]
mod tests {
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
    fn forwarded_for_appends_the_client_and_proto_host_are_set() {
        let mut h = map(&[
            ("x-forwarded-for", "10.0.0.1"),
            ("x-forwarded-proto", "https"),
        ]);
        let host = HeaderValue::from_static("example.com:8080");
        add_forwarded(&mut h, [127, 0, 0, 1].into(), "http", Some(&host));
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, 127.0.0.1");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "example.com:8080");
    }
}
