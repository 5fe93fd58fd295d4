use super::*;
use crate::model::net::{Cidr, CidrError};

fn proxies(list: &str) -> TrustedProxies {
    list.parse().unwrap()
}

/// What `Edge::each` sends, as (name, value) strings.
fn sent(edge: &Edge, scheme: &'static str, host: Option<&str>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    edge.each(scheme, host.map(str::as_bytes), |n, v| {
        out.push((
            n.as_str().to_string(),
            String::from_utf8(v.to_vec()).unwrap(),
        ));
    });
    out
}

fn get<'a>(out: &'a [(String, String)], name: &str) -> Option<&'a str> {
    out.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// Reads `lines` as from a hop at `addr`, trusted when `proxies` trusts it.
fn read(proxies: &TrustedProxies, addr: &str, lines: &[(&str, &str)]) -> Edge {
    let addr: IpAddr = addr.parse().unwrap();
    let entry = crate::proxy::headers::forwarded_for(addr);
    let hop = Hop {
        addr,
        forwarded_for: &entry,
        trusted: proxies.trusts(addr),
        keep_request_id: false,
    };
    Edge::read(proxies, hop, lines.iter().map(|(n, v)| (*n, v.as_bytes())))
}

const SPOOFED: &[(&str, &str)] = &[
    ("X-Forwarded-For", "6.6.6.6"),
    ("x-forwarded-proto", "https"),
    ("X-Forwarded-Host", "evil.example"),
    ("Forwarded", "for=6.6.6.6;proto=https"),
    ("X-Request-Id", "chosen-by-the-client"),
];

#[test]
fn cidrs_parse_and_match_by_prefix() {
    let p = proxies("10.0.0.0/8, 192.168.1.7, 2001:db8::/32,172.16.0.0/12");
    for (ip, trusted) in [
        ("10.255.1.2", true),
        ("11.0.0.1", false),
        ("192.168.1.7", true),
        ("192.168.1.8", false),
        ("2001:db8:1::9", true),
        ("2001:db9::1", false),
        ("172.31.255.255", true),
        ("172.32.0.0", false),
        // A dual-stack socket's view of an IPv4 peer.
        ("::ffff:10.1.2.3", true),
    ] {
        assert_eq!(p.trusts(ip.parse().unwrap()), trusted, "{ip}");
    }
    assert!(proxies("").is_empty());
    assert!(proxies("0.0.0.0/0").trusts("8.8.8.8".parse().unwrap()));
    assert!(!proxies("0.0.0.0/0").trusts("::1".parse().unwrap()));
    assert_eq!(
        "10.0.0.0/33".parse::<Cidr>().unwrap_err(),
        CidrError::Length
    );
    assert_eq!("10.0.0/8".parse::<Cidr>().unwrap_err(), CidrError::Address);
    assert_eq!("::/x".parse::<Cidr>().unwrap_err(), CidrError::Length);
    assert_eq!(
        "10.1.2.3/9".parse::<Cidr>().unwrap().to_string(),
        "10.1.2.3/9"
    );
}

#[test]
fn an_untrusted_hop_gets_everything_replaced() {
    let edge = read(&TrustedProxies::default(), "203.0.113.9", SPOOFED);
    let out = sent(&edge, "http", Some("app.example:8080"));
    assert_eq!(get(&out, "x-forwarded-for"), Some("203.0.113.9"));
    assert_eq!(get(&out, "x-forwarded-proto"), Some("http"));
    assert_eq!(get(&out, "x-forwarded-host"), Some("app.example:8080"));
    assert_eq!(
        get(&out, "forwarded"),
        Some(r#"for=203.0.113.9;host="app.example:8080";proto=http"#)
    );
    let id = get(&out, "x-request-id").unwrap();
    assert_ne!(id, "chosen-by-the-client");
    assert_eq!(edge.client, "203.0.113.9".parse::<IpAddr>().unwrap());
    assert!(!edge.client_forwarded);
    assert_eq!(out.len(), 5, "{out:?}");
}

#[test]
fn a_trusted_hop_is_appended_to_and_its_values_kept() {
    let p = proxies("10.0.0.0/8");
    let edge = read(
        &p,
        "10.0.0.2",
        &[
            ("x-forwarded-for", "198.51.100.1, 10.0.0.1"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "shop.example"),
            ("forwarded", "for=198.51.100.1;proto=https"),
            ("x-request-id", "abc-123"),
        ],
    );
    let out = sent(&edge, "http", Some("internal:8080"));
    assert_eq!(
        get(&out, "x-forwarded-for"),
        Some("198.51.100.1, 10.0.0.1, 10.0.0.2")
    );
    assert_eq!(get(&out, "x-forwarded-proto"), Some("https"));
    assert_eq!(get(&out, "x-forwarded-host"), Some("shop.example"));
    assert_eq!(
        get(&out, "forwarded"),
        Some(r#"for=198.51.100.1;proto=https, for=10.0.0.2;host="internal:8080";proto=http"#)
    );
    assert_eq!(get(&out, "x-request-id"), Some("abc-123"));
    // 10.0.0.1 is a trusted proxy too: the client is the address before it.
    assert_eq!(edge.client, "198.51.100.1".parse::<IpAddr>().unwrap());
    assert!(edge.client_forwarded);
}

#[test]
fn a_trusted_hop_without_headers_gets_pier_s_own() {
    let p = proxies("10.0.0.0/8");
    let edge = read(&p, "10.0.0.2", &[]);
    let out = sent(&edge, "https", None);
    assert_eq!(get(&out, "x-forwarded-for"), Some("10.0.0.2"));
    assert_eq!(get(&out, "x-forwarded-proto"), Some("https"));
    assert_eq!(get(&out, "x-forwarded-host"), None);
    assert_eq!(get(&out, "forwarded"), None, "only when one arrived");
    assert_eq!(get(&out, "x-request-id").unwrap().len(), 36);
    assert_eq!(edge.client, "10.0.0.2".parse::<IpAddr>().unwrap());
    assert!(!edge.client_forwarded);
}

#[test]
fn the_client_is_the_rightmost_untrusted_address_of_the_chain() {
    let p = proxies("10.0.0.0/8");
    let client = |lines: &[(&str, &str)]| read(&p, "10.9.9.9", lines).client.to_string();
    // Several lines count as one list, in order.
    assert_eq!(
        client(&[
            ("x-forwarded-for", "1.1.1.1, 2.2.2.2"),
            ("x-forwarded-for", "10.0.0.1")
        ]),
        "2.2.2.2"
    );
    // With ports, IPv6, mapped IPv4.
    assert_eq!(client(&[("x-forwarded-for", "3.3.3.3:4711")]), "3.3.3.3");
    assert_eq!(
        client(&[("x-forwarded-for", "[2001:db8::7]:80, 10.1.1.1")]),
        "2001:db8::7"
    );
    assert_eq!(client(&[("x-forwarded-for", "::ffff:4.4.4.4")]), "4.4.4.4");
    // Garbage ends the walk at the last address that could be checked.
    assert_eq!(
        client(&[("x-forwarded-for", "5.5.5.5, unknown, 10.0.0.3")]),
        "10.0.0.3"
    );
    assert_eq!(client(&[("x-forwarded-for", "nonsense")]), "10.9.9.9");
    // All trusted: the left-most.
    assert_eq!(
        client(&[("x-forwarded-for", "10.0.0.5, 10.0.0.6")]),
        "10.0.0.5"
    );
}

#[test]
fn an_unusable_request_id_from_a_trusted_hop_is_replaced() {
    let p = proxies("10.0.0.0/8");
    let long = "x".repeat(MAX_REQUEST_ID + 1);
    for bad in ["", "has space", long.as_str()] {
        let edge = read(&p, "10.0.0.1", &[("x-request-id", bad)]);
        assert_ne!(edge.request_id, bad);
        assert_eq!(edge.request_id.as_bytes().len(), 36, "{bad:?}");
        assert!(matches!(edge.request_id, RequestId::Uuid(_)), "{bad:?}");
    }
}

#[test]
fn request_ids_are_version_4_uuids() {
    let a = new_request_id();
    let b = new_request_id();
    assert_ne!(a, b);
    for id in [a, b] {
        let text = id.as_str();
        let groups: Vec<&str> = text.split('-').collect();
        assert_eq!(
            groups.iter().map(|g| g.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12],
            "{text}"
        );
        assert!(text.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()));
        assert!(groups[2].starts_with('4'), "version: {text}");
        assert!(
            matches!(groups[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'),
            "variant: {text}"
        );
    }
}

#[test]
fn forwarded_elements_quote_ipv6_and_escape_the_host() {
    let v6: IpAddr = "2001:db8::1".parse().unwrap();
    assert_eq!(
        forwarded_element(v6, "https", Some(br#"a"b\c"#)),
        br#"for="[2001:db8::1]";host="a\"b\\c";proto=https"#
    );
}

#[test]
fn apply_replaces_every_line_in_a_map() {
    let mut map = HeaderMap::new();
    for (n, v) in SPOOFED {
        map.append(
            HeaderName::from_bytes(n.as_bytes()).unwrap(),
            HeaderValue::from_static(v),
        );
    }
    map.append(X_FORWARDED_FOR, HeaderValue::from_static("7.7.7.7"));
    let p = TrustedProxies::default();
    let addr: IpAddr = "127.0.0.1".parse().unwrap();
    let entry = crate::proxy::headers::forwarded_for(addr);
    let hop = Hop {
        addr,
        forwarded_for: &entry,
        trusted: false,
        keep_request_id: false,
    };
    let edge = Edge::read(&p, hop, crate::proxy::phase::map_lines(&map));
    let host = HeaderValue::from_static("h.example");
    edge.apply(&mut map, "http", Some(&host), false);
    assert_eq!(map.get_all(X_FORWARDED_FOR).iter().count(), 1);
    assert_eq!(map[X_FORWARDED_FOR], "127.0.0.1");
    assert_eq!(map[X_FORWARDED_HOST], "h.example");
    assert_eq!(
        map[FORWARDED],
        r#"for=127.0.0.1;host="h.example";proto=http"#
    );
    assert_eq!(map[X_REQUEST_ID].as_bytes(), edge.request_id.as_bytes());
}

#[test]
fn every_edge_header_is_seen_in_any_case_and_others_are_not() {
    for h in &EDGE_HEADERS {
        assert!(is_edge_header(h.as_str()), "{h}");
        assert!(is_edge_header(&h.as_str().to_ascii_uppercase()), "{h}");
    }
    for other in ["x-forwarded", "forwarde", "x-request-ids", "host", "via"] {
        assert!(!is_edge_header(other), "{other}");
    }
}

/// `apply` (the hyper path, values cloned where it can) writes what `each` (the fast path,
/// bytes) does, for hops trusted or not, with and without their own forwarding lines.
#[test]
fn apply_writes_what_each_sends() {
    let trusted = proxies("10.0.0.0/8");
    let lines: &[(&str, &str)] = &[
        ("x-forwarded-for", "198.51.100.1, 10.0.0.1"),
        ("x-forwarded-proto", "https"),
        ("x-forwarded-host", "shop.example"),
        ("forwarded", "for=198.51.100.1;proto=https"),
        ("x-request-id", "abc-123"),
    ];
    for (addr, lines, scheme, host) in [
        ("10.0.0.2", lines, "http", Some("internal:8080")),
        ("10.0.0.2", &[][..], "https", None),
        ("203.0.113.9", lines, "https", Some("a.example")),
        ("203.0.113.9", &lines[3..4], "http", None),
    ] {
        let edge = read(&trusted, addr, lines);
        let mut map = HeaderMap::new();
        for (n, v) in lines {
            map.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map.append("x-other", HeaderValue::from_static("1"));
        let client_host = host.map(|h| HeaderValue::from_str(h).unwrap());
        edge.apply(&mut map, scheme, client_host.as_ref(), false);
        let mut applied: Vec<(String, String)> = map
            .iter()
            .filter(|(n, _)| n.as_str() != "x-other")
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
            .collect();
        let mut want = sent(&edge, scheme, host);
        applied.sort();
        want.sort();
        assert_eq!(applied, want, "{addr} {lines:?}");
        assert_eq!(map["x-other"], "1");
    }
}

/// `apply` looks up only the headers that can be there: those the client sent, or any when
/// the route's filters edited the request. A spoofed `X-Forwarded-Host` with no host to send
/// in its place goes; so does a `Forwarded` a filter added when the client sent none.
#[test]
fn apply_removes_what_it_does_not_replace_where_it_can_be() {
    let untrusted = TrustedProxies::default();
    // The client sent X-Forwarded-Host; pier has no host to send (no Host, no :authority).
    let sent = [("x-forwarded-host", "evil.example")];
    let edge = read(&untrusted, "203.0.113.9", &sent);
    let mut map = HeaderMap::new();
    map.append(X_FORWARDED_HOST, HeaderValue::from_static("evil.example"));
    edge.apply(&mut map, "http", None, false);
    assert!(!map.contains_key(X_FORWARDED_HOST), "{map:?}");
    assert!(!map.contains_key(FORWARDED), "{map:?}");
    assert_eq!(map[X_FORWARDED_FOR], "203.0.113.9");

    // Nothing sent, but a filter set both: with `edited` they go.
    let edge = read(&untrusted, "203.0.113.9", &[]);
    let mut map = HeaderMap::new();
    map.insert(X_FORWARDED_HOST, HeaderValue::from_static("set-by-filter"));
    map.insert(FORWARDED, HeaderValue::from_static("for=1.2.3.4"));
    edge.apply(&mut map, "https", None, true);
    assert!(!map.contains_key(X_FORWARDED_HOST), "{map:?}");
    assert!(!map.contains_key(FORWARDED), "{map:?}");
    assert_eq!(map[X_FORWARDED_PROTO], "https");
}
