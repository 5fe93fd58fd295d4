//! HTTPS: certificates chosen by SNI from the snapshot, ALPN h2 and http/1.1.

use http::{Request, Version};
use http_body_util::Full;
use pier::model::CertTable;

use crate::support::client::{connect_tls, get, send_h1_on, send_h2_on};
use crate::support::pki::{Pki, san_dns_names};
use crate::support::snap::*;
use crate::support::*;

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
