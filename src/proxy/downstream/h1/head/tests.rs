use super::*;
use crate::proxy::headers::HOP_BY_HOP;

fn request(raw: &[u8]) -> Parsed<(usize, usize, bool, String, String)> {
    let mut storage = storage();
    match parse_request(raw, &mut storage) {
        Parsed::Body(n) => Parsed::Body(n),
        Parsed::Ready(h) => Parsed::Ready((
            h.head_len,
            h.body_len,
            h.close,
            h.host.to_string(),
            h.target.to_string(),
        )),
        Parsed::Partial => Parsed::Partial,
        Parsed::Fallback => Parsed::Fallback,
        Parsed::TargetTooLong => Parsed::TargetTooLong,
    }
}

#[test]
fn a_request_line_longer_than_the_head_limit_is_a_target_too_long() {
    let line = format!("GET /{} HTTP/1.1", "x".repeat(MAX_HEAD));
    assert!(matches!(request(line.as_bytes()), Parsed::TargetTooLong));
    // A long head whose request line is whole: hyper's (431 for its header fields).
    let head = format!("GET / HTTP/1.1\r\nX-Big: {}", "x".repeat(MAX_HEAD));
    assert!(matches!(request(head.as_bytes()), Parsed::Fallback));
    // Short of the limit: more bytes are needed.
    let partial = format!("GET /{}", "x".repeat(1000));
    assert!(matches!(request(partial.as_bytes()), Parsed::Partial));
}

fn is_fallback(raw: &[u8]) -> bool {
    matches!(request(raw), Parsed::Fallback)
}

/// Parses a head written by this module back into a map (and the first line).
fn reparse(out: &[u8]) -> (String, HeaderMap) {
    let text = std::str::from_utf8(out).unwrap();
    let (first, rest) = text.split_once("\r\n").unwrap();
    assert!(rest.ends_with("\r\n\r\n") || rest == "\r\n", "{text:?}");
    let mut map = HeaderMap::new();
    for line in rest
        .trim_end_matches("\r\n")
        .split("\r\n")
        .filter(|l| !l.is_empty())
    {
        let (n, v) = line.split_once(": ").unwrap();
        map.append(
            HeaderName::from_bytes(n.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    (first.to_string(), map)
}

#[test]
fn a_simple_request_is_ready_with_its_body() {
    let raw = b"POST /a?b=1 HTTP/1.1\r\nHost: x.example:8080\r\nContent-Length: 3\r\n\r\nabcGET";
    let Parsed::Ready((head, body, close, host, target)) = request(raw) else {
        panic!("not ready")
    };
    assert_eq!(head, raw.len() - 6);
    assert_eq!(body, 3);
    assert!(!close);
    assert_eq!(host, "x.example:8080");
    assert_eq!(target, "/a?b=1");
}

#[test]
fn partial_heads_and_bodies_wait_for_more() {
    assert!(matches!(
        request(b"GET / HTTP/1.1\r\nHost: a\r\n"),
        Parsed::Partial
    ));
    let put = b"PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nab";
    assert!(matches!(request(put), Parsed::Body(n) if n == put.len() + 3));
}

#[test]
fn connection_close_is_seen() {
    let Parsed::Ready((.., close, _, _)) =
        request(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Close\r\n\r\n")
    else {
        panic!("not ready")
    };
    assert!(close);
}

#[test]
fn what_the_fast_path_does_not_handle_goes_to_hyper() {
    for raw in [
        &b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..],
        b"GET / HTTP/1.0\r\nHost: a\r\n\r\n",
        b"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
        b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
        b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999\r\n\r\n",
        b"GET /a{b} HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GARBAGE\r\n\r\n",
    ] {
        assert!(is_fallback(raw), "{:?}", String::from_utf8_lossy(raw));
    }
}

#[test]
fn a_head_larger_than_the_limit_goes_to_hyper() {
    let mut raw = b"GET / HTTP/1.1\r\nHost: a\r\nx-big: ".to_vec();
    raw.resize(MAX_HEAD + 1, b'a');
    assert!(is_fallback(&raw));
}

#[test]
fn the_upstream_request_drops_hop_by_hop_headers_and_adds_forwarded_ones() {
    let raw = b"GET /p?q HTTP/1.1\r\nHost: app.example\r\nConnection: keep-alive, x-secret\r\nX-Secret: 1\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\nProxy-Connection: x\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil\r\nAccept: */*\r\nContent-Length: 0\r\n\r\n";
    let mut storage = storage();
    let Parsed::Ready(head) = parse_request(raw, &mut storage) else {
        panic!("not ready")
    };
    let mut out = Vec::new();
    let entry = http::HeaderValue::from_static("192.0.2.7");
    let hop = crate::proxy::conn_info::Hop {
        addr: [192, 0, 2, 7].into(),
        forwarded_for: &entry,
        trusted: false,
        keep_request_id: false,
    };
    let lines = head.headers.iter().map(|h| (h.name, h.value));
    let edge = Edge::read(&Default::default(), hop, lines);
    write_request(
        &head,
        &Forwarding {
            method: "GET",
            target: "/p?q",
            host: b"app.example",
            client_host: b"app.example",
            edge: &edge,
            scheme: "http",
        },
        &mut out,
    );
    let (line, map) = reparse(&out);
    assert_eq!(line, "GET /p?q HTTP/1.1");
    for gone in [
        "connection",
        "x-secret",
        "keep-alive",
        "te",
        "proxy-connection",
    ] {
        assert!(!map.contains_key(gone), "{gone} forwarded: {map:?}");
    }
    assert_eq!(map["host"], "app.example");
    // An untrusted client: its forwarding headers are replaced, never copied.
    assert_eq!(map["x-forwarded-for"], "192.0.2.7");
    assert_eq!(map["x-forwarded-proto"], "http");
    assert_eq!(map["x-forwarded-host"], "app.example");
    assert_eq!(map["x-request-id"].as_bytes(), edge.request_id.as_bytes());
    assert_eq!(map["accept"], "*/*");
    assert_eq!(map["content-length"], "0");
    assert_eq!(map.len(), 7, "{map:?}");
}

/// Status, framing and close of a final head; `Err(None)` when partial, `Err(Some(n))` for an
/// informational head of `n` bytes.
type Summary = Result<(StatusCode, Framing, bool), Option<usize>>;

fn response(raw: &[u8], head_request: bool) -> Result<Summary, BadResponse> {
    let mut storage = storage();
    Ok(match parse_response(raw, &mut storage, head_request)? {
        Response::Partial => Err(None),
        Response::Informational(n) => Err(Some(n)),
        Response::Final(h) => Ok((h.status, h.framing, h.close)),
    })
}

#[test]
fn response_framing_follows_rfc_9112() {
    let ok = |raw: &[u8], head| response(raw, head).unwrap().unwrap();
    assert_eq!(
        ok(b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n", false),
        (StatusCode::OK, Framing::Length(13), false)
    );
    assert_eq!(
        ok(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 9\r\n\r\n",
            false
        )
        .1,
        Framing::Chunked
    );
    // Both framings: chunked wins and the connection is not reused (RFC 9112 §6.3).
    assert!(
        ok(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n",
            false
        )
        .2
    );
    assert_eq!(
        ok(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false),
        (StatusCode::OK, Framing::Eof, true)
    );
    assert_eq!(
        ok(b"HTTP/1.1 200 OK\r\n\r\n", false),
        (StatusCode::OK, Framing::Eof, true)
    );
    assert_eq!(
        ok(b"HTTP/1.1 204 No Content\r\n\r\n", false).1,
        Framing::Empty
    );
    assert_eq!(
        ok(
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
            false
        )
        .1,
        Framing::Empty
    );
    assert_eq!(
        ok(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true).1,
        Framing::Empty
    );
    assert!(
        ok(
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n",
            false
        )
        .2
    );
    assert!(ok(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", false).2);
}

#[test]
fn informational_and_bad_responses() {
    let hints = b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n";
    let mut raw = hints.to_vec();
    raw.extend_from_slice(b"HTTP/1.1 200");
    assert_eq!(response(&raw, false).unwrap(), Err(Some(hints.len())));
    assert_eq!(
        response(b"HTTP/1.1 200 OK\r\nContent-Le", false).unwrap(),
        Err(None)
    );
    for bad in [
        &b"HTTP/1.1 101 Switching Protocols\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"NOT HTTP\r\n\r\n",
    ] {
        assert!(
            response(bad, false).is_err(),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn the_downstream_response_is_reframed_and_cleaned() {
    let raw = b"HTTP/1.1 200 OK\r\nServer: o\r\nConnection: keep-alive, x-hop\r\nX-Hop: 1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\nKeep-Alive: timeout=5\r\n\r\n";
    let mut storage = storage();
    let Ok(Response::Final(head)) = parse_response(raw, &mut storage, false) else {
        panic!("not parsed")
    };
    let mut out = Vec::new();
    let tail = Tail {
        framing: head.framing,
        close: true,
        date: Some(b"Wed, 25 Nov 2026 08:00:00 GMT"),
        alt_svc: None,
    };
    write_response(&head, tail, &mut out);
    let (line, map) = reparse(&out);
    assert_eq!(line, "HTTP/1.1 200 OK");
    assert_eq!(map["server"], "o");
    assert_eq!(map["transfer-encoding"], "chunked");
    assert_eq!(map["connection"], "close");
    assert_eq!(map["date"], "Wed, 25 Nov 2026 08:00:00 GMT");
    for gone in ["x-hop", "content-length", "keep-alive"] {
        assert!(!map.contains_key(gone), "{gone} forwarded: {map:?}");
    }
    assert_eq!(map.len(), 4, "{map:?}");
}

#[test]
fn a_map_head_writes_every_value() {
    let mut map = HeaderMap::new();
    map.append("x-a", HeaderValue::from_static("1"));
    map.append("x-a", HeaderValue::from_static("2"));
    map.insert(http::header::CONTENT_LENGTH, HeaderValue::from_static("4"));
    let mut out = Vec::new();
    let tail = Tail {
        framing: Framing::Length(4),
        close: false,
        date: None,
        alt_svc: None,
    };
    write_response_map(StatusCode::NOT_FOUND, &map, tail, &mut out);
    let (line, back) = reparse(&out);
    assert_eq!(line, "HTTP/1.1 404 Not Found");
    assert_eq!(back.get_all("x-a").iter().count(), 2);
    assert_eq!(back["content-length"], "4");
}

#[test]
fn every_hop_by_hop_name_is_seen_in_any_case_and_others_are_not() {
    for h in &HOP_BY_HOP {
        let upper = h.as_str().to_ascii_uppercase();
        assert!(Name::of(h.as_str()).is_hop(), "{h}");
        assert!(Name::of(&upper).is_hop(), "{upper}");
    }
    for other in [
        "content-type",
        "date",
        "server",
        "t",
        "tf",
        "x-upgrade",
        "connections",
        "keep-alivE2",
        "content-length",
    ] {
        assert!(!Name::of(other).is_hop(), "{other}");
    }
    for (name, kind) in [
        ("Host", Name::Host),
        ("CONTENT-LENGTH", Name::ContentLength),
        ("Transfer-Encoding", Name::TransferEncoding),
        ("expect", Name::Expect),
        ("Date", Name::Date),
        ("hosts", Name::Other),
        ("content-lengtH ", Name::Other),
        ("dat", Name::Other),
    ] {
        assert_eq!(Name::of(name), kind, "{name}");
    }
    let named = [Header {
        name: "Connection",
        value: b"close, X-Private",
    }];
    assert_eq!(end_to_end("x-private", &named, true), None);
    assert_eq!(end_to_end("X-Private", &named, false), Some(Name::Other));
    assert_eq!(end_to_end("x-other", &named, true), Some(Name::Other));
    assert_eq!(end_to_end("keep-alive", &named, false), None);
}

#[test]
fn lower_eq_is_eq_ignore_ascii_case_for_names() {
    let names = [
        "te",
        "host",
        "date",
        "expect",
        "upgrade",
        "trailer",
        "connection",
        "keep-alive",
        "content-length",
        "proxy-connection",
        "transfer-encoding",
    ];
    let others = [
        "TE",
        "Te",
        "tE",
        "ts",
        "hosT",
        "h0st",
        "Content-Length",
        "CONTENT-LENGTH",
        "content_length",
        "content-lengtx",
        "xontent-length",
        "Transfer-EncodinG",
        "transfer-encodinh",
        "keep_alive",
        "Proxy-Connection",
        "proxy-connectioN",
        "proxy-connectiom",
        "x",
        "",
        "upgrade!",
    ];
    for lower in names {
        for name in names.iter().chain(&others) {
            assert_eq!(
                lower_eq(name.as_bytes(), lower.as_bytes()),
                name.eq_ignore_ascii_case(lower),
                "{name} against {lower}"
            );
        }
    }
}

/// The header lines `write_response` writes, one `line` each: what `copy_lines` must equal.
fn lines_one_by_one(headers: &[Header<'_>], keep: impl Fn(&str) -> bool) -> Vec<u8> {
    let mut out = Vec::new();
    for h in headers.iter().filter(|h| keep(h.name)) {
        line(&mut out, h.name.as_bytes(), h.value);
    }
    out
}

#[test]
fn header_lines_copied_in_runs_are_the_lines_written_one_by_one() {
    // Lines as pier writes them (copied in runs), others (re-written), and dropped ones between.
    let raw: &[u8] = b"HTTP/1.1 200 OK\r\nServer: a\r\nDate: b\r\nX-Tight:c\r\nX-Wide:   d  \r\n\
        Connection: keep-alive\r\nX-E: e\r\nX-Empty: \r\nX-F: f\r\nContent-Length: 1\r\n\
        X-Bare: g\nX-Last: h\r\n\r\n";
    let mut storage = storage();
    let Ok(Response::Final(head)) = parse_response(raw, &mut storage, false) else {
        panic!("not parsed");
    };
    let keeps: [&dyn Fn(&str) -> bool; 4] = [
        &|_| true,
        &|_| false,
        &|n| !Name::of(n).is_hop() && !Name::of(n).is_framing(),
        &|n| n.starts_with("X-"),
    ];
    for keep in keeps {
        let mut out = Vec::new();
        copy_lines(head.raw, head.headers, &mut out, keep);
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&lines_one_by_one(head.headers, keep))
        );
    }
    // And the copy did take the laid-out lines as they were.
    let mut out = Vec::new();
    copy_lines(head.raw, head.headers, &mut out, |_| true);
    assert!(out.starts_with(b"Server: a\r\nDate: b\r\nX-Tight: c\r\nX-Wide: d\r\n"));
}
