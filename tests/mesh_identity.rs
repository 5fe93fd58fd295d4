//! Per-endpoint workload identity (`mesh.identity`, issue 20) end to end: pier in-process from
//! a manifest directory, Pods in the manifests name each endpoint's ServiceAccount, real TLS
//! workloads present the right identity, another mesh workload's identity, or a Linkerd-shaped
//! one. Certificates come from the same mesh CA, so only the identity check tells them apart.

mod support;

use support::client::Resp;
use support::mesh::*;
use support::{bounded, free_port};

const WEB: &str = "web.example";

/// Gateway `gw/edge` meshing every route, checking identities with `identity` (YAML flow map).
fn identity_spec(identity: &str) -> String {
    format!("{}    identity: {identity}\n", mesh_spec(""))
}

struct World {
    pier: Pier,
    files: Vec<(&'static str, String)>,
}

/// pier with Gateway `spec_extra`, pier's client Secret and the mesh bundle, `backends`
/// (Services, EndpointSlices, Pods) and the routes `<svc>.example` -> `app/<svc>:443`.
async fn start(pki: &MeshPki, spec_extra: &str, backends: Vec<String>, services: &[&str]) -> World {
    let port = free_port();
    let routes: Vec<String> = services.iter().map(|s| route("app", s, "", s)).collect();
    let files = vec![
        ("00-class.yaml", GATEWAY_CLASS.to_string()),
        ("10-gateway.yaml", gateway(port, spec_extra)),
        ("20-backends.yaml", backends.join("---\n")),
        ("30-routes.yaml", routes.join("---\n")),
        ("40-client.yaml", pier_client_secret(pki)),
        ("41-bundle.yaml", bundle(&[&pki.mesh_ca])),
    ];
    let pier = Pier::start(port, &files).await;
    World { pier, files }
}

fn seen(r: &Resp) -> Seen {
    assert_eq!(r.status, 200, "{}", r.text());
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("not a workload answer ({e}): {r:?}"))
}

fn backend_tls_condition(status: &serde_json::Value, route: &str) -> (String, String, String) {
    conditions(status, "HTTPRoute", "app", route)["pier.dev/BackendTLS"].clone()
}

#[tokio::test]
async fn spiffe_identity_a_workload_with_another_identity_gets_no_request() {
    let pki = MeshPki::new();
    // Both certificates chain to the mesh CA: chain-only checking would accept either.
    let web = Workload::spawn(&pki.mesh_ca.workload(WORKLOAD_ID), &pki.client_ca).await;
    let impostor = Workload::spawn(
        &pki.mesh_ca
            .workload("spiffe://cluster.local/ns/app/sa/billing"),
        &pki.client_ca,
    )
    .await;
    let backends = vec![
        service_with_pods("app", "web", &[(web.addr, Some("web-1"))]),
        // The impostor answers at an address the EndpointSlice gives to a `web` Pod (a reused
        // pod IP, a stale slice).
        service_with_pods("app", "stale", &[(impostor.addr, Some("web-2"))]),
        pod("app", "web-1", "web"),
        pod("app", "web-2", "web"),
    ];
    let w = start(
        &pki,
        &identity_spec("{scheme: SPIFFE}"),
        backends,
        &["web", "stale"],
    )
    .await;
    let pier = &w.pier;

    let s = seen(&pier.get(WEB).await);
    assert!(s.tls);
    assert_eq!(s.sni.as_deref(), Some("web.app.svc.cluster.local"));
    assert_eq!(s.client_uris, [PIER_ID]);

    for _ in 0..2 {
        let r = pier.get("stale.example").await;
        assert_eq!(r.status, 502, "{}", r.text());
    }
    bounded(impostor.wait_for_accepted(1)).await;
    assert!(
        impostor.accepted().iter().all(|a| a.tls && !a.ok),
        "{:?}",
        impostor.accepted()
    );
    assert_eq!(impostor.count(), 0, "no request reaches the wrong identity");
    pier.assert_metric(
        r#"pier_proxy_upstream_tls_handshakes_total{backend="app/stale:443",result="error",reason="identity_mismatch"}"#,
    )
    .await;

    let status = pier.status().await;
    let (ok, reason, msg) = backend_tls_condition(&status, "web");
    assert_eq!((ok.as_str(), reason.as_str()), ("True", "Ready"), "{msg}");
    assert!(
        msg.contains("SPIFFE identity checked per endpoint"),
        "{msg}"
    );
    w.pier.shutdown().await;
}

#[tokio::test]
async fn without_identity_checking_the_same_workloads_are_accepted_by_chain() {
    // The control for the test above: today's default (chain only) sends the request.
    let pki = MeshPki::new();
    let impostor = Workload::spawn(
        &pki.mesh_ca
            .workload("spiffe://cluster.local/ns/app/sa/billing"),
        &pki.client_ca,
    )
    .await;
    let backends = vec![
        service_with_pods("app", "stale", &[(impostor.addr, Some("web-2"))]),
        pod("app", "web-2", "web"),
    ];
    let w = start(&pki, &identity_spec("{scheme: None}"), backends, &["stale"]).await;
    assert!(seen(&w.pier.get("stale.example").await).tls);
    assert_eq!(impostor.count(), 1);
    w.pier.shutdown().await;
}

#[tokio::test]
async fn linkerd_identity_is_checked_as_a_dns_name_and_sent_as_sni() {
    let pki = MeshPki::new();
    let id = "web.app.serviceaccount.identity.linkerd.cluster.local";
    let web = Workload::spawn(&pki.mesh_ca.server(&[id]), &pki.client_ca).await;
    let other = Workload::spawn(
        &pki.mesh_ca
            .server(&["billing.app.serviceaccount.identity.linkerd.cluster.local"]),
        &pki.client_ca,
    )
    .await;
    let backends = vec![
        service_with_pods("app", "web", &[(web.addr, Some("web-1"))]),
        service_with_pods("app", "stale", &[(other.addr, Some("web-2"))]),
        pod("app", "web-1", "web"),
        pod("app", "web-2", "web"),
    ];
    let w = start(
        &pki,
        &identity_spec("{scheme: Linkerd}"),
        backends,
        &["web", "stale"],
    )
    .await;
    let s = seen(&w.pier.get(WEB).await);
    assert_eq!(
        s.sni.as_deref(),
        Some(id),
        "Linkerd expects the identity as SNI"
    );
    let r = w.pier.get("stale.example").await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(other.count(), 0);
    w.pier
        .assert_metric(r#"result="error",reason="identity_mismatch"} 1"#)
        .await;
    w.pier.shutdown().await;
}

#[tokio::test]
async fn endpoints_without_a_known_pod_fail_closed_with_status_until_the_pod_appears() {
    let pki = MeshPki::new();
    let web = Workload::spawn(&pki.mesh_ca.workload(WORKLOAD_ID), &pki.client_ca).await;
    let anonymous = Workload::spawn(&pki.mesh_ca.workload(WORKLOAD_ID), &pki.client_ca).await;
    // web-1 has no Pod in the manifests yet; the second endpoint names no Pod at all.
    let backends = vec![service_with_pods(
        "app",
        "web",
        &[(web.addr, Some("web-1")), (anonymous.addr, None)],
    )];
    let mut w = start(
        &pki,
        &identity_spec("{scheme: SPIFFE, trustDomain: cluster.local}"),
        backends,
        &["web"],
    )
    .await;
    let r = w.pier.get(WEB).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(web.accepted().len() + anonymous.accepted().len(), 0);
    let (ok, reason, msg) = backend_tls_condition(&w.pier.status().await, "web");
    assert_eq!(
        (ok.as_str(), reason.as_str()),
        ("False", "NoEndpointIdentity"),
        "{msg}"
    );
    assert!(msg.contains("Pod app/web-1 is unknown"), "{msg}");
    assert!(msg.contains("no Pod targetRef"), "{msg}");

    // The Pod appears: its endpoint is served; the one without a Pod still gets nothing.
    let generation = w.pier.generation().await;
    w.files[2]
        .1
        .push_str(&format!("---\n{}", pod("app", "web-1", "web")));
    w.pier.write("20-backends.yaml", &w.files[2].1);
    w.pier.wait_generation_above(generation).await;
    for _ in 0..4 {
        assert!(seen(&w.pier.get(WEB).await).tls);
    }
    assert_eq!(anonymous.accepted().len(), 0);
    let (ok, reason, msg) = backend_tls_condition(&w.pier.status().await, "web");
    assert_eq!(
        (ok.as_str(), reason.as_str()),
        ("False", "NoEndpointIdentity")
    );
    assert!(!msg.contains("web-1"), "{msg}");
    w.pier.shutdown().await;
}

#[tokio::test]
async fn an_invalid_identity_stanza_fails_every_meshed_route_closed() {
    let pki = MeshPki::new();
    let web = Workload::spawn(&pki.mesh_ca.workload(WORKLOAD_ID), &pki.client_ca).await;
    let backends = vec![
        service_with_pods("app", "web", &[(web.addr, Some("web-1"))]),
        pod("app", "web-1", "web"),
    ];
    let w = start(
        &pki,
        &identity_spec("{scheme: SPIFFE, trustDomain: Not A Domain}"),
        backends,
        &["web"],
    )
    .await;
    let r = w.pier.get(WEB).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(web.accepted().len(), 0);
    let status = w.pier.status().await;
    let gw = conditions(&status, "Gateway", "gw", "edge");
    let (ok, _, msg) = &gw["pier.dev/BackendTLS"];
    assert_eq!(ok, "False", "{msg}");
    assert!(msg.contains("identity.trustDomain"), "{msg}");
    w.pier.shutdown().await;
}

/// The access log names the identity an endpoint's certificate was checked against; a
/// mismatch says why instead. (`pier.dev/access-log: "true"` turns the log on for this
/// Gateway alone: pier runs without `--access-log` here.)
#[tokio::test]
async fn the_access_log_names_the_workload_identity_pier_checked() {
    let (captured, _guard) = support::logs::capture_json();
    let pki = MeshPki::new();
    let web = Workload::spawn(&pki.mesh_ca.workload(WORKLOAD_ID), &pki.client_ca).await;
    let impostor = Workload::spawn(
        &pki.mesh_ca
            .workload("spiffe://cluster.local/ns/app/sa/billing"),
        &pki.client_ca,
    )
    .await;
    let backends = [
        service_with_pods("app", "web", &[(web.addr, Some("web-1"))]),
        service_with_pods("app", "stale", &[(impostor.addr, Some("web-2"))]),
        pod("app", "web-1", "web"),
        pod("app", "web-2", "web"),
    ];
    let port = free_port();
    let gateway = gateway(port, &identity_spec("{scheme: SPIFFE}")).replace(
        "metadata: {name: edge, namespace: gw}",
        "metadata:\n  name: edge\n  namespace: gw\n  annotations: {pier.dev/access-log: \"true\"}",
    );
    let routes: Vec<String> = ["web", "stale"]
        .iter()
        .map(|s| route("app", s, "", s))
        .collect();
    let files = vec![
        ("00-class.yaml", GATEWAY_CLASS.to_string()),
        ("10-gateway.yaml", gateway),
        ("20-backends.yaml", backends.join("---\n")),
        ("30-routes.yaml", routes.join("---\n")),
        ("40-client.yaml", pier_client_secret(&pki)),
        ("41-bundle.yaml", bundle(&[&pki.mesh_ca])),
    ];
    let pier = Pier::start(port, &files).await;
    assert!(seen(&pier.get(WEB).await).tls);
    assert_eq!(pier.get("stale.example").await.status, 502);
    let lines = captured.access_lines();
    let [ok, failed] = lines.as_slice() else {
        panic!("{lines:?}")
    };
    // The SAN checked, with its kind (`URI:` SPIFFE, `DNS:` Linkerd).
    assert_eq!(
        ok["workload_identity"],
        format!("URI:{WORKLOAD_ID}"),
        "{ok}"
    );
    assert_eq!(ok["status"], 200, "{ok}");
    assert_eq!(failed["tls_failure"], "identity_mismatch", "{failed}");
    assert!(failed.get("workload_identity").is_none(), "{failed}");
    assert_eq!(failed["request_id"].as_str().map(str::len), Some(36));
}

/// `config/examples/mesh-identity` as the manual's walkthrough (docs/src/mesh.md) runs it (ports moved to free
/// ones, certificates from its own `gen-certs.sh`): the SPIFFE Gateway serves the right
/// workload and refuses the one with another identity; the Linkerd Gateway (its mesh stanza
/// from the parametersRef ConfigMap) checks the DNS identity and sends it as SNI.
#[tokio::test]
async fn the_mesh_identity_example_serves_each_scheme_end_to_end() {
    const EXAMPLE: &str = "config/examples/mesh-identity";
    let certs = tempfile::tempdir().unwrap();
    let made = std::process::Command::new(format!("{EXAMPLE}/gen-certs.sh"))
        .arg(certs.path())
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let pier_ca = Cert::from_files(certs.path(), "pier-ca").chain;
    let workload = |name: &str| {
        let cert = Cert::from_files(certs.path(), name);
        let roots = pier_ca.clone();
        async move { Workload::spawn_trusting([127, 0, 0, 1].into(), &cert, &roots, false).await }
    };
    let web = workload("web-workload").await;
    let billing = workload("billing-workload").await;
    let linkerd = workload("web-linkerd").await;

    let (spiffe_port, linkerd_port) = (free_port(), free_port());
    let read = |f: &str| std::fs::read_to_string(format!("{EXAMPLE}/{f}")).unwrap();
    let moved = |text: String, from: u16, to: u16| {
        let from = format!("port: {from}");
        assert!(text.contains(&from), "{from} not in the example");
        text.replace(&from, &format!("port: {to}"))
    };
    let gateway = moved(read("00-gateway.yaml"), 8080, spiffe_port);
    let gateway = moved(gateway, 8081, linkerd_port);
    let backends = moved(read("10-backends.yaml"), 18443, web.addr.port());
    let backends = moved(backends, 18444, billing.addr.port());
    let backends = moved(backends, 18445, linkerd.addr.port());
    let trust = std::fs::read_to_string(certs.path().join("30-trust.yaml")).unwrap();
    let files = [
        ("00-gateway.yaml", gateway),
        ("10-backends.yaml", backends),
        ("20-routes.yaml", read("20-routes.yaml")),
        ("30-trust.yaml", trust),
    ];
    let pier = Pier::start(spiffe_port, &files).await;

    // SPIFFE: the right workload answers, over mTLS with pier's client certificate.
    let s = seen(&pier.get("web.example").await);
    assert!(s.tls);
    assert_eq!(s.client_uris, ["spiffe://cluster.local/ns/pier/sa/gateway"]);
    // A valid mesh certificate of another identity, at an endpoint whose Pod is `web`.
    let r = pier.get("stale.example").await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(billing.count(), 0, "no request reaches the wrong identity");
    pier.assert_metric(
        r#"pier_proxy_upstream_tls_handshakes_total{backend="shop/stale:443",result="error",reason="identity_mismatch"}"#,
    )
    .await;
    // Linkerd: the DNS identity is checked and sent as SNI.
    let r = support::web::get(
        &format!("http://127.0.0.1:{linkerd_port}/"),
        &[("host", "web-l5d.example")],
    )
    .await;
    let s = seen(&r);
    assert!(s.tls);
    assert_eq!(
        s.sni.as_deref(),
        Some("web.shop.serviceaccount.identity.linkerd.cluster.local")
    );
    assert_eq!(web.count() + linkerd.count(), 2);
    pier.shutdown().await;
}
