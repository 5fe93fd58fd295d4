//! Whole-translation rules: route order, snapshot shape, certificates per port, purity.

use std::sync::Arc;

use http::{HeaderMap, Method};

use super::*;
use crate::model::matcher::RequestParts;
use crate::translate::test_support::{
    BASE, resources, run, run_with_base, self_signed, tls_secret,
};

fn route(name: &str, created: Option<&str>, path: &str) -> String {
    let ts = created.map_or(String::new(), |t| format!(", creationTimestamp: \"{t}\""));
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
         metadata: {{name: {name}, namespace: default{ts}}}\n\
         spec:\n  parentRefs: [{{name: gw}}]\n  rules:\n  - matches: [{{path: {{value: {path}}}}}]\n\
         \x20   backendRefs: [{{name: svc, port: 80}}]\n"
    )
}

fn winner(t: &Translation, path: &str) -> String {
    let headers = HeaderMap::new();
    let req = RequestParts {
        method: &Method::GET,
        path,
        query: None,
        headers: &headers,
    };
    let port = t.snapshot.port(80).unwrap();
    let l = port.listener("example.com").unwrap();
    l.routes
        .find("example.com", &req)
        .unwrap()
        .rule
        .route
        .name
        .clone()
}

#[test]
fn oldest_route_wins_a_tie_then_namespace_name() {
    let t = run_with_base(&format!(
        "{}---\n{}---\n{}",
        route("a-new", Some("2024-02-01T00:00:00Z"), "/x"),
        route("b-old", Some("2024-01-01T00:00:00Z"), "/x"),
        route("c-none", None, "/y"),
    ));
    assert_eq!(winner(&t, "/x"), "b-old");
    let t = run_with_base(&format!(
        "{}---\n{}",
        route("b", None, "/x"),
        route("a", None, "/x")
    ));
    assert_eq!(winner(&t, "/x"), "a");
}

#[test]
fn route_without_creation_timestamp_counts_as_oldest() {
    let t = run_with_base(&format!(
        "{}---\n{}",
        route("a-dated", Some("2020-01-01T00:00:00Z"), "/x"),
        route("z-undated", None, "/x")
    ));
    assert_eq!(winner(&t, "/x"), "z-undated");
}

#[test]
fn more_specific_match_beats_older_route() {
    let t = run_with_base(&format!(
        "{}---\n{}",
        route("old", Some("2020-01-01T00:00:00Z"), "/"),
        route("new", Some("2024-01-01T00:00:00Z"), "/x")
    ));
    assert_eq!(winner(&t, "/x/y"), "new");
    assert_eq!(winner(&t, "/xy"), "old");
}

#[test]
fn snapshot_has_generation_zero_and_ports_sorted() {
    let t = run(&BASE.replace(
        "listeners: [{name: http, protocol: HTTP, port: 80}]",
        "listeners: [{name: b, protocol: HTTP, port: 8080}, {name: a, protocol: HTTP, port: 80}]",
    ));
    assert_eq!(t.snapshot.generation, 0);
    let ports: Vec<_> = t.snapshot.ports.iter().map(|p| p.port).collect();
    assert_eq!(ports, vec![80, 8080]);
}

#[test]
fn https_port_offers_each_certificate_under_its_names_and_the_listener_hostname() {
    let (foo_crt, foo_key) = self_signed(&["foo.example.com"]);
    let (wild_crt, wild_key) = self_signed(&["*.example.com"]);
    let yaml = format!(
        "{}\n---\n{}\n---\n{}\n",
        BASE.replace(
            "listeners: [{name: http, protocol: HTTP, port: 80}]",
            "listeners:\n  - {name: wild, protocol: HTTPS, port: 443, hostname: \"*.example.com\", tls: {certificateRefs: [{name: wild}]}}\n  - {name: foo, protocol: HTTPS, port: 443, hostname: foo.example.com, tls: {certificateRefs: [{name: foo}]}}\n  - {name: alias, protocol: HTTPS, port: 443, hostname: alias.test, tls: {certificateRefs: [{name: foo}]}}",
        ),
        tls_secret("default", "foo", &foo_crt, &foo_key),
        tls_secret("default", "wild", &wild_crt, &wild_key),
    );
    let t = run(&yaml);
    let port = t.snapshot.port(443).unwrap();
    assert_eq!(port.protocol, crate::model::Protocol::Https);
    let certs = port.certs.as_ref().unwrap();
    let foo = certs.resolve(Some("foo.example.com")).unwrap();
    let bar = certs.resolve(Some("bar.example.com")).unwrap();
    let alias = certs.resolve(Some("alias.test")).unwrap();
    assert!(!Arc::ptr_eq(&foo, &bar));
    assert!(
        Arc::ptr_eq(&foo, &alias),
        "listener hostname maps to its cert"
    );
    let listeners: Vec<_> = port.listeners.iter().map(|l| l.id.name.as_str()).collect();
    assert_eq!(listeners, vec!["foo", "alias", "wild"]);
}

#[test]
fn listeners_that_are_not_programmed_are_not_in_the_snapshot() {
    let t = run(&BASE.replace(
        "listeners: [{name: http, protocol: HTTP, port: 80}]",
        "listeners: [{name: tls, protocol: HTTPS, port: 443, tls: {certificateRefs: [{name: none}]}}, {name: sctp, protocol: SCTP, port: 9}]",
    ));
    assert!(t.snapshot.ports.is_empty());
    assert_eq!(t.status.gateways.len(), 1);
}

#[test]
fn translation_is_deterministic() {
    let yaml = format!(
        "{BASE}\n---\n{}---\n{}",
        route("a", None, "/a"),
        route("b", None, "/b")
    );
    let r = resources(&yaml);
    let one = translate(&r, &Settings::default());
    let two = translate(&r, &Settings::default());
    assert_eq!(one.status, two.status);
    let dump = |t: &Translation| serde_json::to_string(&t.status.objects()).unwrap();
    assert_eq!(dump(&one), dump(&two));
}

#[test]
fn error_chain_joins_causes_on_one_line_without_repeats() {
    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Inner);
    #[derive(Debug, thiserror::Error)]
    #[error("inner\n  detail")]
    struct Inner;
    assert_eq!(error_chain(&Outer(Inner)), "outer: inner detail");
    assert_eq!(group_kind("", "Secret"), "core/Secret");
}
