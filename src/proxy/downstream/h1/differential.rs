//! Differential tests of the fast path's parsers against hyper's HTTP/1.1 server.
//!
//! The request head, on
//! generated requests that mix valid ones with the known desync shapes (CL+TE, duplicate and
//! comma-joined `Content-Length`, `Transfer-Encoding` variants, obs-fold, bare LF and bare CR,
//! NUL and control bytes, absolute- and authority-form targets, HTTP/1.0, pipelining).
//!
//! For every input:
//! - when the fast path says `Ready`, hyper must parse the same bytes to a request with the same
//!   method, target and `Host`, and the same body (so the two agree on where the request ends);
//!   and the head pier writes upstream, followed by that body, must parse (by hyper, as a
//!   backend would) to exactly one request with that method, target, body, and the client's
//!   end-to-end header lines in order;
//! - when it says `Partial` or `Body`, hyper must not have a complete first request either;
//! - a prefix of the input is never `Ready` with another head or body length than the whole.
//!
//! `Fallback` inputs go to hyper in pier, so there is nothing to compare. The number of cases
//! is proptest's: `PROPTEST_CASES` (CI's sample is the default below; the long run in
//! RELIABILITY.md is `PROPTEST_CASES=1000000 cargo test --release --lib differential`).
//!
//! The chunked scanner (which finds where a relayed chunked body ends), on generated chunked
//! bodies with their mutations (sizes with leading zeros, upper-case hex, spaces, extensions,
//! trailers, bare LF, wrong data lengths, overflowing sizes), followed by a pipelined request:
//! wherever the scanner says the body ends, hyper must end it there too.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::head::*;
use crate::model::net::TrustedProxies;
use crate::proxy::conn_info::Hop;
use crate::proxy::h1wire::chunked::Chunked;
use crate::proxy::headers::HOP_BY_HOP;
use crate::proxy::observe::forwarded::Edge;

/// A request as hyper's server saw it.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    method: String,
    target: String,
    headers: Vec<(String, Vec<u8>)>,
    /// `None`: the body did not complete (the input ended, or it was malformed).
    body: Option<Vec<u8>>,
}

/// Every request hyper's HTTP/1.1 server reads from `input` (then end of input).
async fn hyper_reads(input: &[u8]) -> Vec<Seen> {
    let (mut client, server) = tokio::io::duplex(1 << 20);
    client.write_all(input).await.unwrap();
    client.shutdown().await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let svc = {
        let seen = seen.clone();
        service_fn(move |req: Request<Incoming>| {
            let seen = seen.clone();
            async move {
                let (parts, body) = req.into_parts();
                let body = body.collect().await.ok().map(|c| c.to_bytes().to_vec());
                seen.lock().unwrap().push(Seen {
                    method: parts.method.to_string(),
                    target: parts.uri.to_string(),
                    headers: parts
                        .headers
                        .iter()
                        .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec()))
                        .collect(),
                    body,
                });
                Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
            }
        })
    };
    let conn = http1::Builder::new()
        .half_close(true)
        .max_buf_size(MAX_HEAD + 16 * 1024)
        .serve_connection(TokioIo::new(server), svc);
    let drain = async {
        let mut sink = Vec::new();
        let _ = client.read_to_end(&mut sink).await;
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        tokio::join!(conn, drain)
    })
    .await;
    Arc::try_unwrap(seen).unwrap().into_inner().unwrap()
}

/// Header lines a proxy does not pass on as they came: hop-by-hop, framing, and those pier
/// writes itself (`Host`, the forwarding headers, a request ID).
fn end_to_end(headers: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
    let named: Vec<String> = headers
        .iter()
        .filter(|(n, _)| n == "connection")
        .flat_map(|(_, v)| {
            v.split(|b| *b == b',')
                .map(|t| String::from_utf8_lossy(t.trim_ascii()).to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .collect();
    headers
        .iter()
        .filter(|(n, _)| {
            !(HOP_BY_HOP.iter().any(|h| h.as_str() == n)
                || named.contains(n)
                || matches!(
                    n.as_str(),
                    "host"
                        | "content-length"
                        | "x-forwarded-for"
                        | "x-forwarded-proto"
                        | "x-forwarded-host"
                        | "forwarded"
                        | "x-request-id"
                ))
        })
        .cloned()
        .collect()
}

/// The edge policy for a client at 192.0.2.1 (not a trusted proxy: its forwarding headers are
/// replaced, never copied).
fn edge(head: &RequestHead<'_>) -> Edge {
    let entry = http::HeaderValue::from_static("192.0.2.1");
    let hop = Hop {
        addr: [192, 0, 2, 1].into(),
        forwarded_for: &entry,
        trusted: false,
        keep_request_id: false,
    };
    let lines = head.headers.iter().map(|h| (h.name, h.value));
    Edge::read(&TrustedProxies::default(), hop, lines)
}

fn forwarding<'a>(head: &'a RequestHead<'a>, edge: &'a Edge) -> Forwarding<'a> {
    Forwarding {
        method: head.method_str,
        target: head.target,
        host: head.host.as_bytes(),
        client_host: head.host.as_bytes(),
        edge,
        scheme: "http",
    }
}

/// What the fast path made of an input, owned.
#[derive(Debug, PartialEq)]
enum Verdict {
    Partial,
    Body(usize),
    Ready {
        head_len: usize,
        body_len: usize,
        method: String,
        target: String,
        host: String,
        /// The head pier writes upstream, then the body.
        upstream: Vec<u8>,
    },
    Fallback,
}

fn fast_path(input: &[u8]) -> Verdict {
    let mut storage = storage();
    match parse_request(input, &mut storage) {
        Parsed::Partial => Verdict::Partial,
        Parsed::Body(n) => Verdict::Body(n),
        // pier answers 414 itself: nothing of hyper's to compare.
        Parsed::Fallback | Parsed::TargetTooLong => Verdict::Fallback,
        Parsed::Ready(head) => {
            let mut upstream = Vec::new();
            let edge = edge(&head);
            write_request(&head, &forwarding(&head, &edge), &mut upstream);
            upstream.extend_from_slice(&input[head.head_len..head.head_len + head.body_len]);
            Verdict::Ready {
                head_len: head.head_len,
                body_len: head.body_len,
                method: head.method_str.to_string(),
                target: head.target.to_string(),
                host: head.host.to_string(),
                upstream,
            }
        }
    }
}

/// Checks one input; `Err` describes a disagreement.
async fn check(input: &[u8]) -> Result<&'static str, String> {
    let verdict = fast_path(input);
    let hyper = hyper_reads(input).await;
    let complete_first = hyper.first().filter(|s| s.body.is_some());
    let kind = match &verdict {
        Verdict::Fallback => return Ok("fallback"),
        Verdict::Partial | Verdict::Body(_) => {
            if let Some(s) = complete_first {
                return Err(format!(
                    "fast path waits for more ({verdict:?}) but hyper read a whole request: {s:?}"
                ));
            }
            "incomplete"
        }
        Verdict::Ready {
            head_len,
            body_len,
            method,
            target,
            host,
            upstream,
        } => {
            let Some(first) = complete_first else {
                return Err(format!(
                    "fast path accepted what hyper did not read as a request: {hyper:?}"
                ));
            };
            let body = &input[*head_len..head_len + body_len];
            if first.method != *method
                || first.target != *target
                || first.body.as_deref() != Some(body)
            {
                return Err(format!(
                    "fast path: {method} {target} body {body:?}; hyper: {first:?}"
                ));
            }
            let hosts: Vec<&[u8]> = first
                .headers
                .iter()
                .filter(|(n, _)| n == "host")
                .map(|(_, v)| v.as_slice())
                .collect();
            if hosts != [host.as_bytes()] {
                return Err(format!("fast path Host {host:?}; hyper: {hosts:?}"));
            }
            // The backend's view of what pier sends.
            let backend = hyper_reads(upstream).await;
            match backend.as_slice() {
                [one]
                    if one.method == *method
                        && one.target == *target
                        && one.body.as_deref() == Some(body)
                        && end_to_end(&one.headers) == end_to_end(&first.headers) => {}
                _ => {
                    return Err(format!(
                        "upstream {:?} read by the backend as {backend:?}; client's: {first:?}",
                        String::from_utf8_lossy(upstream)
                    ));
                }
            }
            "ready"
        }
    };
    // A prefix is never ready with another verdict than the whole input.
    for cut in [1, input.len() / 2, input.len().saturating_sub(1)] {
        if cut == 0 || cut >= input.len() {
            continue;
        }
        if let ready @ Verdict::Ready { .. } = fast_path(&input[..cut]) {
            let (
                Verdict::Ready {
                    head_len: a,
                    body_len: b,
                    ..
                },
                Verdict::Ready {
                    head_len: c,
                    body_len: d,
                    ..
                },
            ) = (&ready, &verdict)
            else {
                return Err(format!(
                    "prefix of {cut} bytes is {ready:?}, whole is {verdict:?}"
                ));
            };
            if (a, b) != (c, d) {
                return Err(format!(
                    "prefix of {cut} bytes is {ready:?}, whole is {verdict:?}"
                ));
            }
        }
    }
    Ok(kind)
}

// === generators ===

/// A valid path: a few segments of plain characters.
fn path() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "a", "b", "api", "v1", "x.y", "%41", "~u", "a-b", "?q=1&r=2",
        ]),
        0..4,
    )
    .prop_map(|parts| format!("/{}", parts.join("/")))
}

/// End-to-end or hop-by-hop header lines a well-behaved client sends.
fn benign_header() -> impl Strategy<Value = (&'static str, &'static str)> {
    prop::sample::select(vec![
        ("Accept", "*/*"),
        ("User-Agent", "curl/8.5"),
        ("X-Custom", "v"),
        ("x-custom", "w, x"),
        ("Cookie", "a=b; c=d"),
        ("Connection", "keep-alive"),
        ("Connection", "close"),
        ("Connection", "X-Custom"),
        ("X-Forwarded-For", "198.51.100.7"),
        ("TE", "trailers"),
        ("Keep-Alive", "timeout=5"),
        ("Accept-Encoding", ""),
    ])
}

/// What a hostile or broken client changes in a valid request.
#[derive(Debug, Clone)]
enum Mutation {
    /// An extra header line, from pools favouring the framing headers.
    Header(String, &'static str, String),
    Method(&'static str),
    Target(&'static str),
    Version(&'static str),
    /// Every line ending becomes this.
    LineEnding(&'static str),
    /// A byte at a position (modulo the length) becomes another.
    Byte(usize, u8),
    /// The input ends after this many bytes (modulo the length).
    Truncate(usize),
    /// A second request follows at once.
    Pipeline,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let name = prop::sample::select(vec![
        "Host",
        "Host",
        "Content-Length",
        "Content-Length",
        "Transfer-Encoding",
        "Connection",
        "X-Forwarded-For",
        "Upgrade",
        "Expect",
        "TE",
        "Trailer",
        "Proxy-Connection",
        "Forwarded",
        "X-Request-Id",
        "content-length",
        "HOST",
        "Content-Length ",
        " Host",
        "Transfer_Encoding",
        "X\0Y",
        "",
    ]);
    let value = prop::sample::select(vec![
        "h.example",
        "h.example:8080",
        "",
        " ",
        "u:p@h.example",
        "h.example, i.example",
        "0",
        "3",
        "5",
        "10",
        "+3",
        "03",
        "3, 3",
        "3,4",
        "-1",
        "0x3",
        "99999999999999999999",
        "chunked",
        " chunked",
        "chunked, identity",
        "gzip, chunked",
        "identity",
        "CHUNKED",
        "close",
        "keep-alive",
        "upgrade",
        "close, X-Custom",
        "X-Custom",
        "te",
        "100-continue",
        "websocket",
        "1.2.3.4",
        "a\r\n b",
        "a\0b",
        "a\rb",
        "a\x01b",
        "trailers",
        "\u{e9}",
    ]);
    let sep = prop::sample::select(vec![": ", ":", " : ", ":\t", "\t: "]);
    prop_oneof![
        6 => (name, sep, value).prop_map(|(n, s, v)| Mutation::Header(n.to_string(), s, v.to_string())),
        1 => prop::sample::select(vec!["CONNECT", "get", "G\tET", "GET ", "", "M-SEARCH", "GET\0"])
            .prop_map(Mutation::Method),
        2 => prop::sample::select(vec![
            "http://h.example/a", "h.example:443", "*", "a", "//h/a", "/a b", "/a\tb", "/\"",
            "/{x}", "/a|b", "/\u{e9}", "/\0", "/\x7f", "/a#f", "/..", "/%zz", "/a/../b",
        ])
        .prop_map(Mutation::Target),
        1 => prop::sample::select(vec!["HTTP/1.0", "HTTP/1.2", "HTTP/2.0", "http/1.1", "HTTP/1.1 ", "HTTP/1"])
            .prop_map(Mutation::Version),
        1 => prop::sample::select(vec!["\n", "\r"]).prop_map(Mutation::LineEnding),
        2 => (any::<usize>(), prop::sample::select(vec![b'\0', b'\r', b'\n', b' ', b':', b'\x7f', 0xe9]))
            .prop_map(|(i, b)| Mutation::Byte(i, b)),
        2 => any::<usize>().prop_map(Mutation::Truncate),
        2 => Just(Mutation::Pipeline),
    ]
}

/// A valid request (method, path, HTTP/1.1, Host, benign headers, a body with its
/// `Content-Length`), then up to three mutations.
fn request_bytes() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(vec![
            "GET", "POST", "PUT", "HEAD", "DELETE", "OPTIONS", "PATCH",
        ]),
        path(),
        prop::collection::vec(benign_header(), 0..4),
        prop::collection::vec(any::<u8>(), 0..12),
        any::<bool>(),
        prop::collection::vec(mutation(), 0..4),
    )
        .prop_map(|(method, path, headers, body, length, mutations)| {
            let mut method = method.to_string();
            let mut target = path;
            let mut version = "HTTP/1.1";
            let mut eol = "\r\n";
            let mut extra = Vec::new();
            let (mut byte, mut truncate, mut pipeline) = (None, None, false);
            for m in mutations {
                match m {
                    Mutation::Header(n, s, v) => extra.push(format!("{n}{s}{v}")),
                    Mutation::Method(m) => method = m.to_string(),
                    Mutation::Target(t) => target = t.to_string(),
                    Mutation::Version(v) => version = v,
                    Mutation::LineEnding(e) => eol = e,
                    Mutation::Byte(i, b) => byte = Some((i, b)),
                    Mutation::Truncate(i) => truncate = Some(i),
                    Mutation::Pipeline => pipeline = true,
                }
            }
            let mut out = format!("{method} {target} {version}{eol}Host: h.example{eol}");
            for (n, v) in headers {
                out.push_str(&format!("{n}: {v}{eol}"));
            }
            if length || !body.is_empty() {
                out.push_str(&format!("Content-Length: {}{eol}", body.len()));
            }
            for line in extra {
                out.push_str(&line);
                out.push_str(eol);
            }
            out.push_str(eol);
            let mut out = out.into_bytes();
            out.extend_from_slice(&body);
            if pipeline {
                out.extend_from_slice(b"GET /smuggled HTTP/1.1\r\nHost: h.example\r\n\r\n");
            }
            if let Some((i, b)) = byte {
                let i = i % out.len();
                out[i] = b;
            }
            if let Some(i) = truncate {
                out.truncate(i % out.len());
            }
            out
        })
}

/// The CI sample; `PROPTEST_CASES` overrides it.
const CASES: u32 = 3000;

/// Runs `check` on `PROPTEST_CASES` (default [`CASES`]) inputs from `strategy` on one
/// current-thread runtime; fails on the first disagreement (with the input, as `show` prints
/// it), else returns how many inputs got each verdict.
fn run_cases<S: Strategy>(
    what: &str,
    strategy: S,
    check: impl AsyncFn(&S::Value) -> Result<&'static str, String>,
    show: impl Fn(&S::Value) -> String,
) -> (u32, std::collections::BTreeMap<&'static str, u64>) {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let counts = Mutex::new(std::collections::BTreeMap::new());
    let result = runner.run(&strategy, |input| match rt.block_on(check(&input)) {
        Ok(kind) => {
            *counts.lock().unwrap().entry(kind).or_default() += 1;
            Ok(())
        }
        Err(e) => Err(TestCaseError::fail(format!("{e}\n{}", show(&input)))),
    });
    let counts = counts.into_inner().unwrap();
    eprintln!("{cases} {what}: {counts:?}");
    result.unwrap();
    (cases, counts)
}

#[test]
fn the_fast_path_agrees_with_hyper_on_every_request_it_accepts() {
    let (cases, counts) = run_cases(
        "requests",
        request_bytes(),
        async |input: &Vec<u8>| check(input).await,
        |input| format!("input: {:?}", String::from_utf8_lossy(input)),
    );
    // The generator must reach each verdict, or the test proves little.
    for kind in ["ready", "fallback", "incomplete"] {
        assert!(
            counts.get(kind).copied().unwrap_or(0) * 50 >= u64::from(cases),
            "{kind} is under 2% of cases: {counts:?}"
        );
    }
}

/// The known desync shapes, each checked the same way (a fixed corpus beside the generated one).
#[test]
fn the_desync_corpus_agrees_with_hyper() {
    let corpus: &[&[u8]] = &[
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3, 3\r\n\r\nabc",
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +3\r\n\r\nabc",
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length : 3\r\n\r\nabc",
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nX: a\r\n chunked\r\nContent-Length: 3\r\n\r\nabc",
        b"POST / HTTP/1.1\nHost: h\nContent-Length: 3\n\nabc",
        b"POST / HTTP/1.1\rHost: h\rContent-Length: 3\r\r\nabc",
        b"GET / HTTP/1.1\r\nHost: h\r\nX: a\0b\r\n\r\n",
        b"GET http://h/a HTTP/1.1\r\nHost: h\r\n\r\n",
        b"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: h\r\nHost: i\r\n\r\n",
        b"POST / HTTP/1.0\r\nHost: h\r\n\r\nabc",
        b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcGET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close, Content-Length\r\nContent-Length: 3\r\n\r\nabc",
    ];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for input in corpus {
        if let Err(e) = rt.block_on(check(input)) {
            panic!("{e}\ninput: {:?}", String::from_utf8_lossy(input));
        }
    }
}

// === the chunked scanner ===

/// One chunk's size line and data, as a client or server might write them.
fn chunk() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(any::<u8>(), 1..20),
        prop::sample::select(vec!["", "0", "00"]),
        any::<bool>(),
        prop::sample::select(vec!["", ";a=b", ";a", "; a=\"b c\"", " ", "\t;x"]),
    )
        .prop_map(|(data, zeros, upper, ext)| {
            let size = if upper {
                format!("{zeros}{:X}", data.len())
            } else {
                format!("{zeros}{:x}", data.len())
            };
            let mut out = format!("{size}{ext}\r\n").into_bytes();
            out.extend_from_slice(&data);
            out.extend_from_slice(b"\r\n");
            out
        })
}

/// What breaks a chunked body.
#[derive(Debug, Clone)]
enum ChunkMutation {
    /// A byte at a position (modulo the length) becomes another.
    Byte(usize, u8),
    /// A byte at a position is removed.
    Remove(usize),
    /// Bytes inserted at a position.
    Insert(usize, &'static str),
}

fn chunked_body() -> impl Strategy<Value = Vec<u8>> {
    let mutation = prop_oneof![
        (
            any::<usize>(),
            prop::sample::select(vec![b'\r', b'\n', b'0', b'f', b'g', b' ', b';', 0])
        )
            .prop_map(|(i, b)| ChunkMutation::Byte(i, b)),
        any::<usize>().prop_map(ChunkMutation::Remove),
        (
            any::<usize>(),
            prop::sample::select(vec![
                "\r\n",
                "\n",
                "0\r\n\r\n",
                "ffffffffffffffffff\r\n",
                "-1\r\n",
                "0x1\r\n",
                " ",
                "1\r\nx\r\n",
            ])
        )
            .prop_map(|(i, s)| ChunkMutation::Insert(i, s)),
    ];
    (
        prop::collection::vec(chunk(), 0..4),
        prop::sample::select(vec!["", "X-Trailer: v\r\n", "A: 1\r\nB: 2\r\n"]),
        prop::collection::vec(mutation, 0..3),
    )
        .prop_map(|(chunks, trailers, mutations)| {
            let mut out: Vec<u8> = chunks.concat();
            out.extend_from_slice(b"0\r\n");
            out.extend_from_slice(trailers.as_bytes());
            out.extend_from_slice(b"\r\n");
            for m in mutations {
                match m {
                    ChunkMutation::Byte(i, b) => {
                        let i = i % out.len();
                        out[i] = b;
                    }
                    ChunkMutation::Remove(i) => {
                        out.remove(i % out.len());
                    }
                    ChunkMutation::Insert(i, s) => {
                        let i = i % (out.len() + 1);
                        out.splice(i..i, s.bytes());
                    }
                }
            }
            out
        })
}

const NEXT: &[u8] = b"GET /next HTTP/1.1\r\nHost: h\r\n\r\n";

/// Checks one chunked body, fed to the scanner in two pieces split at `split`.
async fn check_chunked(body: &[u8], split: usize) -> Result<&'static str, String> {
    let mut input = body.to_vec();
    input.extend_from_slice(NEXT);
    // pier's scanner: where the body ends, if it does.
    let mut scanner = Chunked::default();
    let split = split % (input.len() + 1);
    let end = match scanner.feed(&input[..split]) {
        Err(_) => None,
        Ok(n) if scanner.is_done() => Some(n),
        Ok(n) => match scanner.feed(&input[split..]) {
            Ok(m) if scanner.is_done() => Some(n + m),
            _ => None,
        },
    };
    let mut request = b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    request.extend_from_slice(&input);
    let seen = hyper_reads(&request).await;
    let hyper_next = matches!(
        seen.as_slice(),
        [first, next] if first.body.is_some() && next.method == "GET" && next.target == "/next"
    );
    match end {
        // The scanner ends the body where it ended: the next request follows.
        Some(n) if n == body.len() => {
            if !hyper_next {
                return Err(format!("the scanner ends the body at {n}, hyper: {seen:?}"));
            }
            Ok("same end")
        }
        // It ends elsewhere: hyper must not read the same next request (but a server skips
        // empty lines before a request line, RFC 9112 §2.2).
        Some(n) => {
            let blank = n < body.len() && body[n..].iter().all(|b| matches!(b, b'\r' | b'\n'));
            if hyper_next && !blank {
                return Err(format!(
                    "the scanner ends the body at {n}, hyper at {}",
                    body.len()
                ));
            }
            Ok("early end")
        }
        // Refused or unfinished: pier never relays past it; stricter than hyper is safe.
        None => Ok(if hyper_next { "stricter" } else { "refused" }),
    }
}

#[test]
fn the_chunked_scanner_ends_bodies_where_hyper_does() {
    let (cases, counts) = run_cases(
        "chunked bodies",
        (chunked_body(), any::<usize>()),
        async |(body, split): &(Vec<u8>, usize)| check_chunked(body, *split).await,
        |(body, _)| format!("body: {:?}", String::from_utf8_lossy(body)),
    );
    for kind in ["same end", "refused"] {
        assert!(
            counts.get(kind).copied().unwrap_or(0) * 20 >= u64::from(cases),
            "{kind} is under 5% of cases: {counts:?}"
        );
    }
}
