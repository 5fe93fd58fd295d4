//! Mesh mTLS end to end: pier in-process from a manifest directory (`pier run`), certificates
//! made at test time with rcgen, real TLS handshakes with in-process workloads and nginx.
//!
//! Layout of every manifest directory: `00-class.yaml` (GatewayClass), `01-namespaces.yaml`,
//! `10-gateway.yaml` (Gateway `gw/edge`), `20-backends.yaml` (Services + EndpointSlices),
//! `30-routes.yaml`, `40-client.yaml` (pier's client certificate Secret `gw/pier-client`) and
//! `41-bundle.yaml` (the mesh trust bundle). Tests rewrite single files to change one thing.
//!
//! The tests that run load and measure timings hold [`LOAD`], so they do not compete with
//! each other for the two cores.

mod support;

use std::time::{Duration, Instant};

use support::client::Resp;
use support::mesh::*;
use support::nginx::Nginx;
use support::web::eventually;
use support::{BOUND, bounded, echo, free_port};

/// Serializes the tests that measure timings under load.
static LOAD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const WEB: &str = "web.example";
const SELECT_MESH_LABEL: &str = "    selector: {matchLabels: {mesh: enabled}}\n";

/// The manifest files of one test.
struct Files {
    port: u16,
    spec_extra: String,
    namespaces: Vec<String>,
    backends: Vec<String>,
    routes: Vec<String>,
    client: Option<String>,
    bundle: Option<String>,
}

impl Files {
    /// Gateway `gw/edge` on a free port, meshed with `spec_extra`, pier's client Secret and
    /// the bundle ConfigMap `gw/mesh-ca` holding the mesh CA.
    fn new(pki: &MeshPki, spec_extra: &str) -> Self {
        Self {
            port: free_port(),
            spec_extra: spec_extra.to_string(),
            namespaces: vec![],
            backends: vec![],
            routes: vec![],
            client: Some(pier_client_secret(pki)),
            bundle: Some(bundle(&[&pki.mesh_ca])),
        }
    }

    async fn start(self) -> Pier {
        let mut files = vec![
            ("00-class.yaml", GATEWAY_CLASS.to_string()),
            ("10-gateway.yaml", gateway(self.port, &self.spec_extra)),
        ];
        let mut add = |name, docs: &[String]| {
            if !docs.is_empty() {
                files.push((name, docs.join("---\n")));
            }
        };
        add("01-namespaces.yaml", &self.namespaces);
        add("20-backends.yaml", &self.backends);
        add("30-routes.yaml", &self.routes);
        add("40-client.yaml", self.client.as_slice());
        add("41-bundle.yaml", self.bundle.as_slice());
        Pier::start(self.port, &files).await
    }
}

/// The workload's report of a request pier sent it over mTLS.
fn seen(r: &Resp) -> Seen {
    assert_eq!(r.status, 200, "{}", r.text());
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("not a workload answer ({e}): {r:?}"))
}

/// The request arrived over TLS with SNI `<svc>.<ns>.svc.cluster.local`, and the workload saw
/// pier's client certificate: its exact leaf, subject and SPIFFE ID.
fn assert_pier_identity(s: &Seen, pki: &MeshPki, sni: &str) {
    assert!(s.tls, "{s:?}");
    assert_eq!(s.sni.as_deref(), Some(sni));
    assert_eq!(
        s.client_cert_sha256.as_deref(),
        Some(pki.pier.leaf_sha256().as_str())
    );
    assert_eq!(s.client_subject.as_deref(), Some("CN=pier-gateway, O=pier"));
    assert_eq!(s.client_uris, [PIER_ID]);
}

// === which routes are meshed ===

#[tokio::test]
async fn a_route_selected_by_its_labels_gets_mtls_and_an_unselected_one_plaintext() {
    let pki = MeshPki::new();
    let web = Workload::spawn(&pki.workload, &pki.client_ca).await;
    let site = echo("site").await;
    let mut f = Files::new(&pki, &mesh_spec(SELECT_MESH_LABEL));
    f.backends = vec![
        service("app", "web", web.addr),
        service("app", "site", site.addr),
    ];
    f.routes = vec![
        route("app", "web", "mesh: enabled", "web"),
        route("app", "site", "", "site"),
    ];
    let pier = f.start().await;

    for _ in 0..3 {
        let s = seen(&pier.get(WEB).await);
        assert_pier_identity(&s, &pki, "web.app.svc.cluster.local");
        assert_eq!(s.host, WEB);
        assert_eq!(s.alpn.as_deref(), Some("h2"), "pier offers h2 first");
    }
    assert_eq!(web.handshakes(), 1, "one pooled HTTP/2 connection");
    // Same Gateway, unselected route: plaintext (TLS to the echo server would have failed).
    let r = pier.get("site.example").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.echo().backend, "site");
    assert_eq!(r.echo().protocol, "HTTP/1.1");

    let status = pier.status().await;
    let web_conds = conditions(&status, "HTTPRoute", "app", "web");
    let (ok, reason, msg) = &web_conds["pier.dev/BackendTLS"];
    assert_eq!((ok.as_str(), reason.as_str()), ("True", "Ready"), "{msg}");
    assert!(msg.starts_with("meshed via Gateway gw/edge"), "{msg}");
    let site_conds = conditions(&status, "HTTPRoute", "app", "site");
    assert!(
        !site_conds.contains_key("pier.dev/BackendTLS"),
        "{site_conds:?}"
    );
    pier.assert_metric(
        r#"pier_proxy_upstream_tls_handshakes_total{backend="app/web:443",result="ok",reason="none"} 1"#,
    )
    .await;
    pier.assert_metric(
        r#"pier_proxy_upstream_connections_opened_total{protocol="http2",tls="mesh"} 1"#,
    )
    .await;
    pier.assert_metric(
        r#"pier_proxy_upstream_connections_opened_total{protocol="http1",tls="plain"} 1"#,
    )
    .await;
    // One prefix: `pier_proxy_*`, never `pier_pier_proxy_*` (the root registry adds `pier`).
    let metrics = pier.metrics().await;
    assert!(!metrics.contains("pier_pier_"), "{metrics}");
    assert!(
        metrics.contains("\npier_config_generation 1\n"),
        "{metrics}"
    );
    pier.shutdown().await;
}

#[tokio::test]
async fn routes_in_a_namespace_selected_by_its_labels_get_mtls() {
    let pki = MeshPki::new();
    let web = Workload::spawn(&pki.workload, &pki.client_ca).await;
    let site = echo("site").await;
    let mut f = Files::new(&pki, &mesh_spec(SELECT_MESH_LABEL));
    f.namespaces = vec![namespace("app", "mesh: enabled"), namespace("public", "")];
    f.backends = vec![
        service("app", "web", web.addr),
        service("public", "site", site.addr),
    ];
    // Neither route carries the label: only app's Namespace does.
    f.routes = vec![
        route("app", "web", "", "web"),
        route("public", "site", "", "site"),
    ];
    let pier = f.start().await;

    assert_pier_identity(
        &seen(&pier.get(WEB).await),
        &pki,
        "web.app.svc.cluster.local",
    );
    assert_eq!(pier.get("site.example").await.echo().backend, "site");
    assert_eq!(web.count(), 1);
    pier.shutdown().await;
}

#[tokio::test]
async fn match_expressions_select_meshed_routes() {
    let pki = MeshPki::new();
    let web = Workload::spawn(&pki.workload, &pki.client_ca).await;
    let site = echo("site").await;
    let sel = "    selector:\n      matchExpressions:\n        - {key: tier, operator: In, values: [secure, strict]}\n";
    let mut f = Files::new(&pki, &mesh_spec(sel));
    f.backends = vec![
        service("app", "web", web.addr),
        service("app", "site", site.addr),
    ];
    f.routes = vec![
        route("app", "web", "tier: strict", "web"),
        route("app", "site", "tier: open", "site"),
    ];
    let pier = f.start().await;
    assert_pier_identity(
        &seen(&pier.get(WEB).await),
        &pki,
        "web.app.svc.cluster.local",
    );
    assert_eq!(pier.get("site.example").await.echo().backend, "site");
    pier.shutdown().await;
}

#[tokio::test]
async fn without_a_selector_every_route_of_the_gateway_is_meshed() {
    let pki = MeshPki::new();
    let web = Workload::spawn(&pki.workload, &pki.client_ca).await;
    let api = Workload::spawn(
        &pki.mesh_ca.workload("spiffe://cluster.local/ns/ops/sa/api"),
        &pki.client_ca,
    )
    .await;
    let plain = echo("plain").await;
    let mut f = Files::new(&pki, &mesh_spec(""));
    f.namespaces = vec![namespace("app", ""), namespace("ops", "")];
    f.backends = vec![
        service("app", "web", web.addr),
        service("ops", "api", api.addr),
        service("ops", "plain", plain.addr),
    ];
    f.routes = vec![
        route("app", "web", "", "web"),
        route("ops", "api", "", "api"),
        route("ops", "plain", "", "plain"),
    ];
    let pier = f.start().await;
    assert_pier_identity(
        &seen(&pier.get(WEB).await),
        &pki,
        "web.app.svc.cluster.local",
    );
    assert_pier_identity(
        &seen(&pier.get("api.example").await),
        &pki,
        "api.ops.svc.cluster.local",
    );
    // A meshed route whose endpoint speaks plaintext: 502, and nothing reached it as HTTP.
    assert_eq!(pier.get("plain.example").await.status, 502);
    assert_eq!(plain.count(), 0);
    let (ok, _, msg) =
        &conditions(&pier.status().await, "Gateway", "gw", "edge")["pier.dev/BackendTLS"];
    assert_eq!(ok, "True");
    assert!(
        msg.contains("every route of this Gateway is meshed"),
        "{msg}"
    );
    pier.shutdown().await;
}

// === where the trust bundle comes from ===

/// A Gateway meshed by `spec_extra`, with `bundle` as the trust manifests: route app/web to the
/// workload succeeds over mTLS, and the Gateway's status names `source`.
async fn meshed_with_bundle(
    spec_extra: &str,
    bundle: impl FnOnce(&MeshPki) -> String,
    source: &str,
) {
    let pki = MeshPki::new();
    let web = Workload::spawn(&pki.workload, &pki.client_ca).await;
    let mut f = Files::new(&pki, spec_extra);
    f.backends = vec![service("app", "web", web.addr)];
    f.routes = vec![route("app", "web", "", "web")];
    f.bundle = Some(bundle(&pki));
    let pier = f.start().await;
    let r = pier.get(WEB).await;
    let status = pier.status().await;
    let (ok, reason, msg) = &conditions(&status, "Gateway", "gw", "edge")["pier.dev/BackendTLS"];
    assert_eq!((ok.as_str(), reason.as_str()), ("True", "Ready"), "{msg}");
    assert!(msg.contains(source), "{source:?} not in {msg}");
    assert_pier_identity(&seen(&r), &pki, "web.app.svc.cluster.local");
    pier.shutdown().await;
}

#[tokio::test]
async fn trust_bundle_from_a_config_map_gep_3951_shape_with_bundle_key() {
    meshed_with_bundle(
        &format!(
            "{CLIENT_REF}  mesh:\n    trustBundle: {{name: mesh-roots, bundleKey: roots.pem}}\n"
        ),
        |pki| config_map("gw", "mesh-roots", "roots.pem", &pki.mesh_ca.pem),
        "trusting 1 CA certificate(s) from ConfigMap gw/mesh-roots key roots.pem",
    )
    .await;
}

#[tokio::test]
async fn trust_bundle_from_a_secret_gep_3792_list() {
    meshed_with_bundle(
        &format!(
            "{CLIENT_REF}  mesh:\n    trustBundle:\n      - {{kind: Secret, name: mesh-ca}}\n"
        ),
        |pki| opaque_secret("gw", "mesh-ca", "ca.crt", &pki.mesh_ca.pem),
        "from Secret gw/mesh-ca key ca.crt",
    )
    .await;
}

#[tokio::test]
async fn trust_bundle_from_a_cluster_trust_bundle_gep_3792_list() {
    meshed_with_bundle(
        &format!(
            "{CLIENT_REF}  mesh:\n    trustBundle:\n      - {{group: certificates.k8s.io, kind: ClusterTrustBundle, name: mesh-roots}}\n"
        ),
        |pki| cluster_trust_bundle("mesh-roots", &pki.mesh_ca.pem),
        "from ClusterTrustBundle mesh-roots",
    )
    .await;
}

#[tokio::test]
async fn trust_bundles_of_several_kinds_are_united() {
    // The workload's CA is only in the ClusterTrustBundle; the Secret holds another CA.
    meshed_with_bundle(
        &format!(
            "{CLIENT_REF}  mesh:\n    trustBundle:\n      - {{kind: Secret, name: old-ca}}\n      - {{group: certificates.k8s.io, kind: ClusterTrustBundle, name: mesh-roots}}\n"
        ),
        |pki| {
            [
                opaque_secret("gw", "old-ca", "ca.crt", &pki.rogue_ca.pem),
                cluster_trust_bundle("mesh-roots", &pki.mesh_ca.pem),
            ]
            .join("---\n")
        },
        "trusting 2 CA certificate(s) from Secret gw/old-ca key ca.crt, ClusterTrustBundle mesh-roots",
    )
    .await;
}

#[tokio::test]
async fn mesh_stanza_from_the_infrastructure_parameters_ref_config_map() {
    let stanza = "trustBundle:\n  - {kind: ConfigMap, name: mesh-ca}\nselector: {matchLabels: {mesh: enabled}}\n";
    meshed_with_bundle(
        &format!(
            "{CLIENT_REF}  infrastructure:\n    parametersRef: {{group: \"\", kind: ConfigMap, name: pier-params}}\n"
        ),
        |pki| {
            [
                config_map("gw", "pier-params", "mesh", stanza),
                bundle(&[&pki.mesh_ca]),
                namespace("app", "mesh: enabled"),
            ]
            .join("---\n")
        },
        "mesh configuration from ConfigMap gw/pier-params (infrastructure.parametersRef)",
    )
    .await;
}

// === fail closed ===

#[tokio::test]
async fn a_meshed_endpoint_speaking_plaintext_gets_only_a_client_hello() {
    let pki = MeshPki::new();
    let silent = bounded(pier::echo::spawn_recording(support::local(0)))
        .await
        .unwrap();
    let plain = echo("plain").await;
    let mut f = Files::new(&pki, &mesh_spec(""));
    f.backends = vec![
        service("app", "silent", silent.addr),
        service("app", "plain", plain.addr),
    ];
    f.routes = vec![
        route("app", "silent", "", "silent"),
        route("app", "plain", "", "plain"),
    ];
    let pier = f.start().await;

    // A listener that never answers: the handshake times out (pier's connect timeout, 2 s).
    let r = bounded(pier.get("silent.example")).await;
    assert_eq!(r.status, 502, "{}", r.text());
    let bytes = silent.received();
    assert_eq!(
        bytes.first(),
        Some(&0x16),
        "a TLS handshake record: {bytes:?}"
    );
    assert_eq!(bytes.get(5), Some(&0x01), "a ClientHello");
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        !text.contains("HTTP/") && !text.contains("GET") && !text.contains("silent.example"),
        "no HTTP request was sent: {text:?}"
    );
    // A plaintext HTTP server answers the ClientHello with an HTTP error: 502, not TLS.
    assert_eq!(pier.get("plain.example").await.status, 502);
    assert_eq!(
        plain.count(),
        0,
        "no HTTP request reached the plaintext server"
    );

    pier.assert_metric(
        r#"pier_proxy_upstream_tls_handshakes_total{backend="app/silent:443",result="error",reason="timeout"} 1"#,
    )
    .await;
    pier.assert_metric(
        r#"pier_proxy_upstream_tls_handshakes_total{backend="app/plain:443",result="error",reason="not_tls"} 1"#,
    )
    .await;
    pier.shutdown().await;
}

/// Route app/web (no selector: meshed) to a workload serving `cert`: 502 with `reason`, the
/// workload's handshake failed and it got no request.
async fn workload_is_refused(cert: impl FnOnce(&MeshPki) -> Cert, reason: &str) {
    let pki = MeshPki::new();
    let web = Workload::spawn(&cert(&pki), &pki.client_ca).await;
    let mut f = Files::new(&pki, &mesh_spec(""));
    f.backends = vec![service("app", "web", web.addr)];
    f.routes = vec![route("app", "web", "", "web")];
    let pier = f.start().await;
    for _ in 0..2 {
        let r = pier.get(WEB).await;
        assert_eq!(r.status, 502, "{}", r.text());
    }
    bounded(web.wait_for_accepted(2)).await;
    assert!(
        web.accepted().iter().all(|a| a.tls && !a.ok),
        "{:?}",
        web.accepted()
    );
    assert_eq!(web.count(), 0);
    pier.assert_metric(&format!(
        r#"pier_proxy_upstream_tls_handshakes_total{{backend="app/web:443",result="error",reason="{reason}"}} 2"#
    ))
    .await;
    pier.assert_metric(r#"kind="TlsHandshake",side="Upstream"} 2"#)
        .await;
    pier.shutdown().await;
}

#[tokio::test]
async fn a_workload_certificate_from_a_rogue_ca_is_502_unknown_ca() {
    workload_is_refused(|pki| pki.rogue_ca.workload(WORKLOAD_ID), "unknown_ca").await;
}

#[tokio::test]
async fn an_expired_workload_certificate_is_502_expired() {
    workload_is_refused(|pki| pki.mesh_ca.workload_expired(WORKLOAD_ID), "expired").await;
}

/// Route app/web meshed, with what `edit` leaves out missing: 503 before any connection, the
/// Gateway and Route status say why; restoring it serves over mTLS.
async fn missing_fails_closed(
    edit: impl FnOnce(&mut Files),
    restore: (&str, String),
    gateway_reasons: [(&str, &str, &str); 2],
    route_reason: &str,
    metric_reason: &str,
    pki: MeshPki,
) {
    let web = Workload::spawn(&pki.workload, &pki.client_ca).await;
    let mut f = Files::new(&pki, &mesh_spec(""));
    f.backends = vec![service("app", "web", web.addr)];
    f.routes = vec![route("app", "web", "", "web")];
    edit(&mut f);
    let pier = f.start().await;
    for _ in 0..2 {
        let r = pier.get(WEB).await;
        assert_eq!(r.status, 503, "{}", r.text());
    }
    assert!(
        web.accepted().is_empty(),
        "nothing was opened: {:?}",
        web.accepted()
    );

    let status = pier.status().await;
    let gw = conditions(&status, "Gateway", "gw", "edge");
    for (ty, reason, text) in gateway_reasons {
        let (ok, r, msg) = &gw[ty];
        assert_eq!((ok.as_str(), r.as_str()), ("False", reason), "{ty}: {msg}");
        assert!(msg.contains(text), "{ty}: {text:?} not in {msg}");
    }
    let rt = conditions(&status, "HTTPRoute", "app", "web");
    let (ok, r, msg) = &rt["pier.dev/BackendTLS"];
    assert_eq!((ok.as_str(), r.as_str()), ("False", route_reason), "{msg}");
    assert!(msg.contains("app/web:443"), "{msg}");
    assert!(msg.contains("answer 503"), "{msg}");
    // The Route itself is still accepted: only its TLS backends are unavailable.
    assert_eq!(rt["Accepted"].0, "True");
    pier.assert_metric(&format!(
        r#"pier_proxy_upstream_tls_unavailable_total{{backend="app/web:443",reason="{metric_reason}"}} 2"#
    ))
    .await;
    pier.assert_metric(r#"kind="TlsUnavailable",side="Internal"} 2"#)
        .await;

    pier.write(restore.0, &restore.1);
    eventually(Duration::from_secs(5), || async {
        pier.get(WEB).await.status == 200
    })
    .await;
    assert_pier_identity(
        &seen(&pier.get(WEB).await),
        &pki,
        "web.app.svc.cluster.local",
    );
    let gw = conditions(&pier.status().await, "Gateway", "gw", "edge");
    assert_eq!(gw["pier.dev/BackendTLS"].0, "True", "{gw:?}");
    pier.shutdown().await;
}

#[tokio::test]
async fn a_missing_trust_bundle_is_503_with_status_until_it_appears() {
    let pki = MeshPki::new();
    let restore = ("41-bundle.yaml", bundle(&[&pki.mesh_ca]));
    missing_fails_closed(
        |f| f.bundle = None,
        restore,
        [
            (
                "ResolvedRefs",
                "InvalidTrustBundleRef",
                "ConfigMap gw/mesh-ca not found",
            ),
            (
                "pier.dev/BackendTLS",
                "NoTrustBundle",
                "no usable mesh trust bundle",
            ),
        ],
        "NoTrustBundle",
        "no_trust_bundle",
        pki,
    )
    .await;
}

#[tokio::test]
async fn a_missing_client_certificate_secret_is_503_with_status_until_it_appears() {
    let pki = MeshPki::new();
    let restore = ("40-client.yaml", pier_client_secret(&pki));
    missing_fails_closed(
        |f| f.client = None,
        restore,
        [
            (
                "ResolvedRefs",
                "InvalidClientCertificateRef",
                "Secret gw/pier-client not found",
            ),
            (
                "pier.dev/BackendTLS",
                "NoClientCertificate",
                "Secret gw/pier-client not found",
            ),
        ],
        "NoClientCertificate",
        "no_client_certificate",
        pki,
    )
    .await;
}

// === a third-party mTLS peer ===

#[tokio::test]
async fn nginx_as_the_meshed_workload_verifies_piers_client_certificate() {
    let pki = MeshPki::new();
    let nginx = Nginx::mtls(
        &pki.workload.leaf_pem(),
        &pki.workload.key_pem,
        &pki.client_ca.pem,
    )
    .await;
    let mut f = Files::new(&pki, &mesh_spec(""));
    f.backends = vec![service("app", "web", nginx.addr)];
    f.routes = vec![route("app", "web", "", "web")];
    let pier = f.start().await;
    let r = pier.get(WEB).await;
    let body = r.text();
    assert_eq!(r.status, 200, "{body}\n{}", nginx.error_log());
    assert!(body.contains("verify=SUCCESS"), "{body}");
    // nginx prints the DN in RFC 2253 order.
    assert!(body.contains("dn=O=pier,CN=pier-gateway"), "{body}");
    assert!(
        body.contains("proto=HTTP/1.1"),
        "ALPN picked http/1.1: {body}"
    );
    assert!(body.contains("host=web.example"), "{body}");
    pier.assert_metric(
        r#"pier_proxy_upstream_tls_handshakes_total{backend="app/web:443",result="ok",reason="none"} 1"#,
    )
    .await;
    pier.shutdown().await;
}

/// A workload that closes after every response makes pier open a connection per request;
/// each one after the first resumes pier's TLS session (a ticket from the last handshake)
/// instead of a full handshake, and the workload still sees pier's certificate (the session
/// carries it).
#[tokio::test]
async fn new_connections_to_a_workload_resume_the_tls_session() {
    let pki = MeshPki::new();
    let web = Workload::spawn(&pki.workload, &pki.client_ca).await;
    web.close_after_each_response();
    let mut f = Files::new(&pki, &mesh_spec(""));
    f.backends = vec![service("app", "web", web.addr)];
    f.routes = vec![route("app", "web", "", "web")];
    let pier = f.start().await;
    let mut resumed = vec![];
    for _ in 0..6 {
        let s = seen(&pier.get(WEB).await);
        assert_pier_identity(&s, &pki, "web.app.svc.cluster.local");
        resumed.push(s.resumed);
    }
    assert_eq!(web.handshakes(), 6, "one connection per request");
    assert_eq!(resumed, [false, true, true, true, true, true]);
    pier.assert_metric(
        r#"pier_proxy_upstream_tls_handshakes_total{backend="app/web:443",result="ok",reason="none"} 6"#,
    )
    .await;
    pier.shutdown().await;
}

/// Three endpoints that close after every response, picked in turn by the balancer: pier
/// keeps a session per endpoint, so a new connection resumes with the endpoint it goes to.
/// (One session cache per server name would offer endpoint A's ticket to B, which refuses it.)
#[tokio::test]
async fn each_endpoint_resumes_its_own_tls_session() {
    let pki = MeshPki::new();
    let mut workloads = vec![];
    for _ in 0..3 {
        let w = Workload::spawn(&pki.workload, &pki.client_ca).await;
        w.close_after_each_response();
        workloads.push(w);
    }
    let endpoints: Vec<_> = workloads.iter().map(|w| (w.addr, None)).collect();
    let mut f = Files::new(&pki, &mesh_spec(""));
    f.backends = vec![service_with_pods("app", "web", &endpoints)];
    f.routes = vec![route("app", "web", "", "web")];
    let pier = f.start().await;
    for _ in 0..30 {
        assert_pier_identity(
            &seen(&pier.get(WEB).await),
            &pki,
            "web.app.svc.cluster.local",
        );
    }
    // Before sessions were kept per endpoint: 23 of 30 were full handshakes.
    let mut total = 0;
    for w in &workloads {
        let seen = w.requests();
        assert_eq!(w.handshakes(), seen.len(), "one connection per request");
        let full = seen.iter().filter(|s| !s.resumed).count();
        assert!(full <= 1, "{full} full handshakes of {}", seen.len());
        total += seen.len();
    }
    assert_eq!(total, 30);
    pier.shutdown().await;
}

// === rotation under load ===

/// pier with route app/web meshed (no selector) to `web`, trusting `cas`.
async fn loaded_world(pki: &MeshPki, web: &Workload, cas: &[&Ca]) -> Pier {
    let mut f = Files::new(pki, &mesh_spec(""));
    f.backends = vec![service("app", "web", web.addr)];
    f.routes = vec![route("app", "web", "", "web")];
    f.bundle = Some(bundle(cas));
    let pier = f.start().await;
    assert_eq!(pier.get(WEB).await.status, 200);
    pier
}

/// Rewrites the bundle and waits until pier published it; returns when the write happened.
async fn rewrite_bundle(pier: &Pier, text: &str) -> (Instant, Instant) {
    let g = pier.generation().await;
    let written = Instant::now();
    pier.write("41-bundle.yaml", text);
    let published = pier.wait_generation_above(g).await;
    (written, published)
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_to_a_bundle_with_the_same_ca_drops_no_request() {
    let _serial = LOAD.lock().await;
    let pki = MeshPki::new();
    let unrelated = Ca::new("unrelated CA");
    let web = Workload::spawn(&pki.workload, &pki.client_ca).await;
    let pier = loaded_world(&pki, &web, &[&pki.mesh_ca]).await;
    let load = Load::start(pier.addr(), WEB, 2);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = web.handshakes();

    // (a) The same bundle rewritten: same trust, so the pooled connection is kept.
    let same = format!("# rewritten by a config tool\n{}", bundle(&[&pki.mesh_ca]));
    rewrite_bundle(&pier, &same).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_same = web.handshakes();
    // (b) An extra unrelated CA, listed first: new trust, new connections, still verified.
    rewrite_bundle(&pier, &bundle(&[&unrelated, &pki.mesh_ca])).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_extra = web.handshakes();
    // (c) The same two CAs in the other order: the same trust as (b).
    rewrite_bundle(&pier, &bundle(&[&pki.mesh_ca, &unrelated])).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_reorder = web.handshakes();
    let report = load.stop().await;

    eprintln!(
        "same-CA rotation: {} requests, {} failed, statuses {:?}; workload handshakes {before} -> \
         {after_same} (same bundle) -> {after_extra} (extra CA) -> {after_reorder} (reordered)",
        report.total(),
        report.failures().len(),
        report.statuses()
    );
    assert!(report.total() > 200, "the load ran: {}", report.total());
    assert!(report.failures().is_empty(), "{:?}", report.statuses());
    assert_eq!(
        after_same, before,
        "an identical bundle keeps the pooled connection"
    );
    assert!(
        after_extra > after_same,
        "a changed bundle makes new connections"
    );
    assert_eq!(
        after_reorder, after_extra,
        "the order of CAs does not matter"
    );
    assert!(
        report
            .0
            .iter()
            .all(|o| o.seen.as_ref().is_some_and(|s| s.tls))
    );
    pier.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_to_a_new_ca_with_an_overlapping_bundle_fails_at_most_in_the_switch() {
    let _serial = LOAD.lock().await;
    let pki = MeshPki::new();
    let new_ca = Ca::new("mesh CA 2");
    let new_cert = new_ca.workload(WORKLOAD_ID);
    let web = Workload::spawn(&pki.workload, &pki.client_ca).await;
    let pier = loaded_world(&pki, &web, &[&pki.mesh_ca]).await;
    let load = Load::start(pier.addr(), WEB, 2);
    tokio::time::sleep(Duration::from_millis(500)).await;

    // 1. Trust both CAs.
    let t0 = Instant::now();
    rewrite_bundle(&pier, &bundle(&[&pki.mesh_ca, &new_ca])).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    // 2. The workload restarts with a certificate from the new CA (its connections drain).
    let t1 = Instant::now();
    let epoch = web.switch(&new_cert, true);
    tokio::time::sleep(Duration::from_secs(1)).await;
    // 3. Drop the old CA.
    let t2 = Instant::now();
    rewrite_bundle(&pier, &bundle(&[&new_ca])).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let t3 = Instant::now();
    let report = load.stop().await;

    // By when they ended: a request on the wire when the workload drains fails in the switch
    // window even if it started just before.
    let failed = |a, b| {
        report
            .failures()
            .into_iter()
            .filter(|o| o.end >= a && o.end < b)
            .count()
    };
    let (overlap, switch, drop_old) = (failed(t0, t1), failed(t1, t2), failed(t2, t3 + BOUND));
    eprintln!(
        "new-CA rotation with overlap: {} requests; failed: {overlap} while adding the new CA, \
         {switch} in the workload's switch window, {drop_old} after dropping the old CA; \
         statuses {:?}",
        report.total(),
        report.statuses()
    );
    if overlap + switch + drop_old > 0 {
        eprintln!("{}", pier.error_metrics().await);
    }
    assert_eq!(
        report.failures().len(),
        overlap + switch + drop_old,
        "none before"
    );
    assert_eq!(overlap, 0);
    assert_eq!(drop_old, 0);
    // The drain is the only source of failures: pier does not retry a request the workload's
    // HTTP/2 GOAWAY refused (`GoAway(NO_ERROR, Remote)`, unprocessed by RFC 9113 §6.8, so
    // safe to retry), so a request crossing the GOAWAY answers 502: a few at most, as each
    // client has one request in flight.
    assert!(switch <= 4, "{switch} failed in the switch window");
    let tail: Vec<_> = report.started_between(t2 + Duration::from_millis(500), t3);
    assert!(!tail.is_empty());
    assert!(
        tail.iter()
            .all(|o| o.seen.as_ref().is_some_and(|s| s.epoch == epoch)),
        "served with the new certificate at the end"
    );
    pier.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_to_a_new_ca_without_overlap_fails_only_until_the_bundle_follows() {
    let _serial = LOAD.lock().await;
    let pki = MeshPki::new();
    let new_ca = Ca::new("mesh CA 3");
    let web = Workload::spawn(&pki.workload, &pki.client_ca).await;
    let pier = loaded_world(&pki, &web, &[&pki.mesh_ca]).await;
    let load = Load::start(pier.addr(), WEB, 2);
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The workload switches first, to a CA pier does not trust yet.
    let switched = Instant::now();
    web.switch(&new_ca.workload(WORKLOAD_ID), true);
    eventually(Duration::from_secs(3), || async {
        pier.metrics().await.contains(r#"reason="unknown_ca"}"#)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (written, published) = rewrite_bundle(&pier, &bundle(&[&new_ca])).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let report = load.stop().await;

    let failures = report.failures();
    let last = failures
        .iter()
        .map(|o| o.end)
        .max()
        .expect("the switch made requests fail");
    eprintln!(
        "new-CA rotation without overlap: {} requests, {} failed ({:?}); switch window {} ms \
         (workload switch -> last failure), bundle written {} ms after the switch, published \
         {} ms after the write, last failure {} ms after publication",
        report.total(),
        failures.len(),
        report.statuses(),
        ms(last - switched),
        ms(written - switched),
        ms(published - written),
        last.saturating_duration_since(published).as_millis()
    );
    // Requests in flight at the switch may fail in the drain: they count in the window.
    let early: Vec<_> = failures.iter().filter(|o| o.end < switched).collect();
    if !early.is_empty() {
        eprintln!("failed before the switch: {early:?}");
    }
    assert!(early.is_empty());
    assert!(
        failures.iter().all(|o| o.status == Some(502)),
        "{:?}",
        report.statuses()
    );
    // Nothing fails once the new bundle is published (what was in flight then aside).
    assert!(
        last < published + Duration::from_millis(250),
        "a failure {} ms after publication",
        ms(last - published)
    );
    assert!(
        report
            .started_between(published + Duration::from_millis(250), Instant::now())
            .iter()
            .all(|o| o.ok())
    );
    pier.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_ca_from_the_bundle_fails_closed_within_a_second() {
    let _serial = LOAD.lock().await;
    let pki = MeshPki::new();
    let unrelated = Ca::new("unrelated CA");
    let web = Workload::spawn(&pki.workload, &pki.client_ca).await;
    let pier = loaded_world(&pki, &web, &[&pki.mesh_ca]).await;
    let load = Load::start(pier.addr(), WEB, 2);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (written, published) = rewrite_bundle(&pier, &bundle(&[&unrelated])).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let reached = web.count();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let report = load.stop().await;
    assert_eq!(
        web.count(),
        reached,
        "no request reached the workload after the swap"
    );

    let last_ok = report
        .0
        .iter()
        .filter(|o| o.ok())
        .max_by_key(|o| o.end)
        .unwrap();
    let first_fail = report
        .failures()
        .into_iter()
        .next()
        .expect("requests failed");
    let closed = last_ok.end.max(first_fail.start);
    eprintln!(
        "CA removed: {} requests ({:?}); bundle published {} ms after the write; failing closed \
         {} ms after the write ({} ms after publication); last success ended {} ms after the write",
        report.total(),
        report.statuses(),
        ms(published - written),
        ms(closed - written),
        closed.saturating_duration_since(published).as_millis(),
        ms(last_ok.end.saturating_duration_since(written)),
    );
    assert!(first_fail.start >= written);
    // From the first failure on, every request fails: closed, not flapping. "On" is measured
    // from the end of that failure: pier had swapped before it answered, so anything sent later
    // is read under the new bundle. (A request sent a moment *before* the failing one's end can
    // still have been read first by pier, under the old bundle: two clients race there.)
    assert!(
        report
            .0
            .iter()
            .filter(|o| o.start > first_fail.end)
            .all(|o| !o.ok()),
        "a request succeeded after the first failure"
    );
    assert!(
        closed - written < Duration::from_secs(1),
        "{} ms",
        ms(closed - written)
    );
    assert!(report.failures().iter().all(|o| o.status == Some(502)));
    let m = pier.metrics().await;
    assert!(
        m.contains(r#"backend="app/web:443",result="error",reason="unknown_ca"}"#),
        "{m}"
    );
    pier.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_label_flip_moves_a_route_to_mtls_within_a_second() {
    let _serial = LOAD.lock().await;
    let pki = MeshPki::new();
    // A pod that answers plaintext and mTLS on one port, as it does while joining the mesh.
    let web = Workload::spawn_with(&pki.workload, &pki.client_ca, true).await;
    let mut f = Files::new(&pki, &mesh_spec(SELECT_MESH_LABEL));
    f.namespaces = vec![namespace("app", "")];
    f.backends = vec![service("app", "web", web.addr)];
    f.routes = vec![route("app", "web", "", "web")];
    let pier = f.start().await;
    assert!(!seen(&pier.get(WEB).await).tls, "not meshed yet");

    let load = Load::start(pier.addr(), WEB, 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let g = pier.generation().await;
    let written = Instant::now();
    pier.write("01-namespaces.yaml", &namespace("app", "mesh: enabled"));
    let published = pier.wait_generation_above(g).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let report = load.stop().await;

    let first_tls = report
        .0
        .iter()
        .find(|o| o.seen.as_ref().is_some_and(|s| s.tls))
        .expect("the route moved to mTLS");
    eprintln!(
        "namespace label flip: {} requests ({:?}); config published {} ms after the write; first \
         mTLS response {} ms after the write",
        report.total(),
        report.statuses(),
        ms(published - written),
        ms(first_tls.end - written)
    );
    assert!(report.failures().is_empty(), "{:?}", report.statuses());
    assert!(first_tls.end - written < Duration::from_secs(1));
    // Once meshed, every request is.
    let after: Vec<_> = report
        .0
        .iter()
        .filter(|o| o.start >= first_tls.end)
        .collect();
    assert!(!after.is_empty());
    for o in after {
        assert_pier_identity(o.seen.as_ref().unwrap(), &pki, "web.app.svc.cluster.local");
    }
    pier.shutdown().await;
}
