//! GRPCRoute end to end with real gRPC stacks on both sides: grpcio (gRPC's C core, Debian's
//! `python3-grpcio`) as client and server (`tests/fixtures/grpc/peer.py`), pier in-process from
//! a manifest directory in between. Unary, server-streaming and bidi calls, status and trailers
//! from the server, pier's own gRPC errors, and a meshed GRPCRoute over mTLS (ALPN h2) that
//! never falls back to plaintext.

mod support;

use serde_json::Value;
use support::grpc::GrpcServer;
use support::mesh::*;

const HOST: &str = "grpc.example";

fn code(v: &Value) -> &str {
    v["code"].as_str().unwrap()
}

/// The server's JSON answer to a Unary call.
fn unary_answer(v: &Value) -> Value {
    assert_eq!(code(v), "OK", "{v}");
    serde_json::from_str(v["responses"][0].as_str().unwrap()).unwrap()
}

fn grpc_route(ns: &str, name: &str, labels: &str, rules: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: {name}, namespace: {ns}, labels: {{{labels}}}}}
spec:
  parentRefs: [{{name: edge, namespace: gw}}]
  hostnames: [{HOST}]
  rules:
{rules}"
    )
}

/// A Service with no endpoints.
fn empty_service(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec:\n  ports: [{{name: web, port: 443}}]\n"
    )
}

async fn start(files: Vec<(&str, String)>, port: u16) -> Pier {
    let mut all = vec![("00-class.yaml", GATEWAY_CLASS.to_string())];
    all.extend(files);
    Pier::start(port, &all).await
}

#[tokio::test]
async fn unary_and_streaming_calls_pass_through_with_status_and_trailers() {
    support::init();
    let server = GrpcServer::plain("plain-1");
    let port = support::free_port();
    let rules = "    - matches: [{method: {service: pier.test.Echo}}]
      backendRefs: [{name: echo, port: 443}]
    - matches: [{method: {service: pier.test.Gone}}]
      backendRefs: [{name: nothing, port: 443}]
";
    let pier = start(
        vec![
            ("10-gateway.yaml", gateway(port, "")),
            ("01-ns.yaml", namespace("app", "")),
            (
                "20-backends.yaml",
                format!(
                    "{}---\n{}",
                    service("app", "echo", server.addr),
                    empty_service("app", "nothing")
                ),
            ),
            ("30-routes.yaml", grpc_route("app", "echo", "", rules)),
        ],
        port,
    )
    .await;

    // Unary: request bytes, metadata in, trailers out. The Service port has no appProtocol;
    // a GRPCRoute backend is spoken to in HTTP/2 anyway.
    let r = call(&pier, HOST, "Unary", "hello").await;
    let a = unary_answer(&r);
    assert_eq!(a["server"], "plain-1");
    assert_eq!(a["request"], "hello");
    assert_eq!(a["metadata"]["x-test"], "yes");
    assert_eq!(r["trailers"]["x-served-by"], "plain-1");

    // Server streaming and bidi streaming.
    let r = call(&pier, HOST, "Count", "5").await;
    assert_eq!(code(&r), "OK", "{r}");
    assert_eq!(r["responses"], serde_json::json!(["0", "1", "2", "3", "4"]));
    let r = call(&pier, HOST, "Chat", "one,two,three").await;
    assert_eq!(code(&r), "OK", "{r}");
    assert_eq!(r["responses"], serde_json::json!(["ONE", "TWO", "THREE"]));

    // The server's own error status, message and trailers reach the client.
    let r = call(&pier, HOST, "Fail", "").await;
    assert_eq!(code(&r), "FAILED_PRECONDITION", "{r}");
    assert_eq!(r["details"], "no luck");
    assert_eq!(r["trailers"]["x-why"], "because");

    // pier's own answers are gRPC statuses with a message (a bare HTTP 404/503 would reach the
    // client as "Received http2 header with status: ..."): no route for the service or the
    // host is UNIMPLEMENTED; a rule whose backend has no endpoints is UNAVAILABLE.
    let r = call_path(&pier, "pier.test.Unknown").await;
    assert_eq!(
        (code(&r), &r["details"]),
        ("UNIMPLEMENTED", &"Not Found".into())
    );
    let r = call(&pier, "other.example", "Unary", "").await;
    assert_eq!(
        (code(&r), &r["details"]),
        ("UNIMPLEMENTED", &"Not Found".into())
    );
    let r = call_path(&pier, "pier.test.Gone").await;
    assert_eq!(
        (code(&r), &r["details"]),
        ("UNAVAILABLE", &"Service Unavailable".into())
    );
    pier.shutdown().await;
}

/// A Unary call to service `service` (not `pier.test.Echo`): the peer script's client calls
/// `/<service>/Unary` when the RPC name carries the service.
async fn call(pier: &Pier, host: &str, rpc: &str, arg: &str) -> Value {
    support::grpc::call(pier.addr(), host, rpc, arg).await
}

async fn call_path(pier: &Pier, service: &str) -> Value {
    call(pier, HOST, &format!("{service}/Unary"), "").await
}

#[tokio::test]
async fn a_meshed_grpc_route_speaks_mtls_with_h2_and_never_plaintext() {
    let pki = MeshPki::new();
    let meshed = GrpcServer::mtls("meshed-1", &pki.workload, &pki.client_ca);
    let plaintext = GrpcServer::plain("plain-only");
    let port = support::free_port();
    let rules = |svc: &str| format!("    - backendRefs: [{{name: {svc}, port: 443}}]\n");
    let mut route_files = grpc_route("app", "echo", "mesh: enabled", &rules("echo"));
    route_files.push_str("---\n");
    route_files.push_str(
        &grpc_route("app", "downgrade", "mesh: enabled", &rules("plain")).replace(
            &format!("hostnames: [{HOST}]"),
            "hostnames: [plain.example]",
        ),
    );
    let pier = start(
        vec![
            (
                "10-gateway.yaml",
                gateway(
                    port,
                    &mesh_spec("    selector: {matchLabels: {mesh: enabled}}\n"),
                ),
            ),
            ("01-ns.yaml", namespace("app", "")),
            (
                "20-backends.yaml",
                format!(
                    "{}---\n{}",
                    service("app", "echo", meshed.addr),
                    service("app", "plain", plaintext.addr)
                ),
            ),
            ("30-routes.yaml", route_files),
            ("40-client.yaml", pier_client_secret(&pki)),
            ("41-bundle.yaml", bundle(&[&pki.mesh_ca])),
        ],
        port,
    )
    .await;

    let r = call(&pier, HOST, "Unary", "over mtls").await;
    let a = unary_answer(&r);
    assert_eq!(a["server"], "meshed-1");
    // grpcio saw a TLS peer presenting pier's client certificate.
    assert_eq!(a["auth"]["transport_security_type"][0], "ssl", "{a}");
    assert!(
        a.to_string().contains(PIER_CN),
        "pier's certificate not seen: {a}"
    );
    let r = call(&pier, HOST, "Chat", "x,y").await;
    assert_eq!(r["responses"], serde_json::json!(["X", "Y"]), "{r}");

    // A meshed route whose workload speaks plaintext: the handshake fails, nothing is sent in
    // the clear, and the client gets UNAVAILABLE.
    let r = call(&pier, "plain.example", "Unary", "secret").await;
    assert_eq!(code(&r), "UNAVAILABLE", "{r}");
    pier.shutdown().await;
}

/// A BackendTrafficPolicy on a GRPCRoute's named rule, seen by grpcio: a local rate limit of
/// two calls a minute on `pier.test.Echo/Unary`, then RESOURCE_EXHAUSTED; the route's other
/// rule is not limited.
#[tokio::test]
async fn traffic_policies_on_a_grpc_route_rule() {
    support::init();
    let server = GrpcServer::plain("plain-1");
    let port = support::free_port();
    let rules = "    - name: limited
      matches: [{method: {service: pier.test.Echo, method: Unary}}]
      backendRefs: [{name: echo, port: 443}]
    - name: open
      matches: [{method: {service: pier.test.Echo}}]
      backendRefs: [{name: echo, port: 443}]
";
    let policy = "apiVersion: pier.dev/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: calls, namespace: app}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: GRPCRoute, name: echo, sectionName: limited}]
  rateLimit:
    local:
      rules: [{limit: {requests: 2, unit: Minute}}]
";
    let pier = start(
        vec![
            ("10-gateway.yaml", gateway(port, "")),
            ("01-ns.yaml", namespace("app", "")),
            ("20-backends.yaml", service("app", "echo", server.addr)),
            ("30-routes.yaml", grpc_route("app", "echo", "", rules)),
            ("40-policy.yaml", policy.to_string()),
        ],
        port,
    )
    .await;
    for i in 0..2 {
        let r = call(&pier, HOST, "Unary", "hello").await;
        assert_eq!(code(&r), "OK", "call {i}: {r}");
    }
    let r = call(&pier, HOST, "Unary", "hello").await;
    assert_eq!(code(&r), "RESOURCE_EXHAUSTED", "{r}");
    // The other rule (server streaming) is not limited.
    for _ in 0..3 {
        let r = call(&pier, HOST, "Count", "2").await;
        assert_eq!(code(&r), "OK", "{r}");
    }
}
