//! HTTPS: certificates chosen by SNI from the snapshot, ALPN h2 and http/1.1.

use http::{Request, Version};
use http_body_util::Full;
use pier::model::CertTable;
use pier::proxy::ProxyConfig;

use crate::support::client::{connect_tls, get, send_h1_on, send_h2_on};
use crate::support::pki::{Pki, san_dns_names};
use crate::support::raw::Client;
use crate::support::snap::*;
use crate::support::*;

/// pier with `config` serving `a.example.com` over HTTPS (a leaf of `pki`) on a free port, to
/// echo backend `a`: (harness, port, the backend).
async fn https_to_a(pki: &Pki, config: ProxyConfig) -> (Harness, u16, pier::echo::EchoServer) {
    let mut certs = CertTable::default();
    certs.add(&["a.example.com".into()], pki.leaf(&["a.example.com"]));
    let a = echo("a").await;
    let p = free_port();
    let h = Harness::start_with(simple_https(p, certs, &backend("a", &[a.addr])), config).await;
    (h, p, a)
}

#[tokio::test]
async fn https_serves_the_certificate_for_the_sni_and_speaks_both_alpns() {
    init();
    let pki = Pki::new();
    let mut certs = CertTable::default();
    certs.add(&["a.example.com".into()], pki.leaf(&["a.example.com"]));
    certs.add(&["*.b.example.com".into()], pki.leaf(&["*.b.example.com"]));
    let a = echo("a").await;
    let p = free_port();
    let h = Harness::start(simple_https(p, certs, &backend("a", &[a.addr]))).await;

    // SNI a.example.com, HTTP/1.1.
    let tls = bounded(connect_tls(
        local(p),
        "a.example.com",
        pki.client(&[b"http/1.1"]),
    ))
    .await;
    let (_, conn) = tls.get_ref();
    let leaf = &conn.peer_certificates().unwrap()[0];
    assert_eq!(san_dns_names(leaf), ["a.example.com"]);
    assert_eq!(conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    let resp = bounded(send_h1_on(tls, get("a.example.com", "/x"))).await;
    assert_eq!(resp.status, 200);
    let seen = resp.echo();
    assert_eq!(seen.headers["x-forwarded-proto"], ["https"]);

    // SNI under the wildcard, HTTP/2 by ALPN.
    let tls = bounded(connect_tls(
        local(p),
        "c.b.example.com",
        pki.client(&[b"h2", b"http/1.1"]),
    ))
    .await;
    let (_, conn) = tls.get_ref();
    let leaf = &conn.peer_certificates().unwrap()[0];
    assert_eq!(san_dns_names(leaf), ["*.b.example.com"]);
    assert_eq!(conn.alpn_protocol(), Some(&b"h2"[..]));
    let req = Request::get("https://c.b.example.com/y")
        .body(Full::default())
        .unwrap();
    let resp = bounded(send_h2_on(tls, req)).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.version, Version::HTTP_2);
    assert_eq!(resp.echo().host, "c.b.example.com");
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn certificates_follow_the_snapshot_without_rebinding() {
    init();
    let pki = Pki::new();
    let a = echo("a").await;
    let p = free_port();
    let r = rule("ns/r").to(&backend("a", &[a.addr])).build();
    let with_cert = |names: &[&str]| {
        let mut certs = CertTable::default();
        certs.add(&["a.example.com".into()], pki.leaf(names));
        snapshot(vec![https_port(
            p,
            vec![listener("https", None).route(&[], prefix("/"), &r).build()],
            certs,
        )])
    };
    let h = Harness::start(with_cert(&["a.example.com"])).await;
    let tls = bounded(connect_tls(local(p), "a.example.com", pki.client(&[]))).await;
    let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    assert_eq!(san_dns_names(&leaf), ["a.example.com"]);

    h.swap(with_cert(&["a.example.com", "renewed.example.com"]));
    let tls = bounded(connect_tls(local(p), "a.example.com", pki.client(&[]))).await;
    let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    assert_eq!(
        san_dns_names(&leaf),
        ["a.example.com", "renewed.example.com"]
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

/// GEP-3567 / `GatewayHTTPSListenerDetectMisdirectedRequests`: on one HTTPS port, a request
/// whose Host selects another listener than its TLS server name did is answered 421, on
/// HTTP/1.1 (the fast path) and HTTP/2 (hyper) alike; the cases are upstream's.
#[tokio::test]
async fn a_host_for_another_listener_than_the_sni_is_misdirected() {
    init();
    let pki = Pki::new();
    let mut certs = CertTable::default();
    let names = [
        "example.org",
        "second-example.org",
        "unknown-example.org",
        "*.wildcard.org",
    ];
    let all: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    certs.add(&all, pki.leaf(&names));
    let (v1, v2, v3) = (echo("v1").await, echo("v2").await, echo("v3").await);
    let p = free_port();
    let r1 = rule("ns/r1").to(&backend("v1", &[v1.addr])).build();
    let r2 = rule("ns/r2").to(&backend("v2", &[v2.addr])).build();
    let r3 = rule("ns/r3").to(&backend("v3", &[v3.addr])).build();
    let h = Harness::start(snapshot(vec![https_port(
        p,
        vec![
            listener("https", None)
                .route(&["example.org"], prefix("/"), &r1)
                .build(),
            listener("https-with-hostname", Some("second-example.org"))
                .route(&[], prefix("/"), &r2)
                .build(),
            listener("https-with-wildcard-hostname", Some("*.wildcard.org"))
                .route(&[], prefix("/"), &r3)
                .build(),
            listener(
                "https-with-hostname-matching-wildcard",
                Some("fourth-example.wildcard.org"),
            )
            .route(&[], prefix("/"), &r1)
            .build(),
        ],
        certs,
    )]))
    .await;
    for (sni, host, status, backend) in [
        ("example.org", "example.org", 200, "v1"),
        ("example.org", "second-example.org", 421, ""),
        ("example.org", "unknown-example.org", 404, ""),
        ("second-example.org", "second-example.org", 200, "v2"),
        ("second-example.org", "example.org", 421, ""),
        ("second-example.org", "unknown-example.org", 421, ""),
        (
            "third-example.wildcard.org",
            "fith-example.wildcard.org",
            200,
            "v3",
        ),
        (
            "third-example.wildcard.org",
            "fourth-example.wildcard.org",
            421,
            "",
        ),
        ("third-example.wildcard.org", "unknown-example.org", 421, ""),
        (
            "fourth-example.wildcard.org",
            "fourth-example.wildcard.org",
            200,
            "v1",
        ),
        (
            "fourth-example.wildcard.org",
            "fith-example.wildcard.org",
            421,
            "",
        ),
        ("unknown-example.org", "example.org", 200, "v1"),
        ("unknown-example.org", "unknown-example.org", 404, ""),
    ] {
        let h1 = bounded(connect_tls(local(p), sni, pki.client(&[b"http/1.1"]))).await;
        let r1 = bounded(send_h1_on(h1, get(host, "/x"))).await;
        let h2 = bounded(connect_tls(local(p), sni, pki.client(&[b"h2"]))).await;
        let req = Request::get(format!("https://{host}/x"))
            .body(Full::default())
            .unwrap();
        let r2 = bounded(send_h2_on(h2, req)).await;
        for resp in [r1, r2] {
            assert_eq!(resp.status, status, "SNI {sni}, Host {host}");
            if status == 200 {
                assert_eq!(resp.backend(), backend, "SNI {sni}, Host {host}");
            }
        }
    }
    bounded(h.proxy.shutdown(BOUND)).await;
}

/// Over TLS the fast path gives back its buffers between requests and waits for the client's
/// next bytes without one. Two requests in one TLS record, the first exactly one read buffer
/// long and answered by pier itself (404, no read-ahead while waiting on a backend), so rustls
/// still holds the second when the first is done; then two more after pauses: each is
/// answered on the same connection.
#[tokio::test]
async fn an_idle_tls_keep_alive_connection_serves_pipelined_and_later_requests() {
    init();
    let pki = Pki::new();
    let mut certs = CertTable::default();
    certs.add(&["a.example.com".into()], pki.leaf(&["a.example.com"]));
    let a = echo("a").await;
    let p = free_port();
    let r = rule("ns/r").to(&backend("a", &[a.addr])).build();
    let listener = listener("https", None)
        .route(&[], prefix("/app"), &r)
        .build();
    let h = Harness::start(snapshot(vec![https_port(p, vec![listener], certs)])).await;
    let tls = bounded(connect_tls(
        local(p),
        "a.example.com",
        pki.client(&[b"http/1.1"]),
    ))
    .await;
    let mut c = Client::on(tls);

    let head = "GET /nothing HTTP/1.1\r\nHost: a.example.com\r\nX-Pad: \r\n\r\n";
    let first = head.replace(
        "X-Pad: ",
        &format!("X-Pad: {}", "p".repeat(8192 - head.len())),
    );
    assert_eq!(first.len(), 8192);
    let second = "GET /app/second HTTP/1.1\r\nHost: a.example.com\r\n\r\n";
    c.write(format!("{first}{second}").as_bytes()).await;
    assert_eq!(bounded(c.response(false)).await.status, 404);
    let resp = bounded(c.response(false)).await;
    assert_eq!(
        (resp.status, resp.echo().path.as_str()),
        (200, "/app/second")
    );
    for path in ["/app/after-a-pause", "/app/and-another"] {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        c.write(format!("GET {path} HTTP/1.1\r\nHost: a.example.com\r\n\r\n").as_bytes())
            .await;
        let resp = bounded(c.response(false)).await;
        assert_eq!((resp.status, resp.echo().path.as_str()), (200, path));
    }
    assert_eq!(a.connections(), 1);
    bounded(h.proxy.shutdown(BOUND)).await;
}

/// Listeners offer the post-quantum hybrid X25519MLKEM768 (aws-lc-rs) and prefer it: a client
/// that sends key shares for it and for X25519, as browsers do, gets the hybrid; a client with
/// X25519 alone (OpenSSL 3.0, curl) gets X25519 without a retry.
#[tokio::test]
async fn listeners_prefer_the_post_quantum_hybrid_key_exchange() {
    use rustls::NamedGroup;
    init();
    let pki = Pki::new();
    let (h, p, _a) = https_to_a(&pki, config()).await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pki.ca_der()).unwrap();
    let client = |groups: &[NamedGroup]| {
        let mut provider = rustls::crypto::CryptoProvider::clone(&pier::tls::provider::provider());
        provider.kx_groups.retain(|g| groups.contains(&g.name()));
        provider
            .kx_groups
            .sort_by_key(|g| groups.iter().position(|n| *n == g.name()));
        std::sync::Arc::new(
            rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(provider))
                .with_protocol_versions(&[&rustls::version::TLS13])
                .unwrap()
                .with_root_certificates(roots.clone())
                .with_no_client_auth(),
        )
    };
    for (offered, negotiated) in [
        (
            &[NamedGroup::X25519MLKEM768, NamedGroup::X25519][..],
            NamedGroup::X25519MLKEM768,
        ),
        (&[NamedGroup::X25519][..], NamedGroup::X25519),
    ] {
        let tls = bounded(connect_tls(local(p), "a.example.com", client(offered))).await;
        let group = tls.get_ref().1.negotiated_key_exchange_group().unwrap();
        assert_eq!(group.name(), negotiated, "offered {offered:?}");
        let resp = bounded(send_h1_on(tls, get("a.example.com", "/"))).await;
        assert_eq!(resp.status, 200);
    }
    bounded(h.proxy.shutdown(BOUND)).await;
}

/// A client that keeps its session resumes on its next connection (no certificate, no
/// signature); `--no-tls-session-resumption` makes every connection a full handshake, for
/// operators whose policy forbids tickets and for measuring full handshakes.
#[tokio::test]
async fn sessions_resume_unless_resumption_is_turned_off() {
    use rustls::HandshakeKind::{Full, Resumed};
    init();
    let pki = Pki::new();
    for (resumption, second) in [(true, Resumed), (false, Full)] {
        let config = ProxyConfig {
            tls_session_resumption: resumption,
            ..config()
        };
        let (h, p, _a) = https_to_a(&pki, config).await;
        let client = pki.client(&[b"http/1.1"]);
        let mut kinds = Vec::new();
        for _ in 0..2 {
            let tls = bounded(connect_tls(local(p), "a.example.com", client.clone())).await;
            // TLS 1.3 tickets arrive after the handshake: a request makes the client read them.
            let kind = tls.get_ref().1.handshake_kind().unwrap();
            let resp = bounded(send_h1_on(tls, get("a.example.com", "/"))).await;
            assert_eq!(resp.status, 200);
            kinds.push(kind);
        }
        assert_eq!(kinds, [Full, second], "resumption {resumption}");
        bounded(h.proxy.shutdown(BOUND)).await;
    }
}
