//! ListenerSet end to end in manifest mode: pier in-process from a manifest directory, echo
//! backends on loopback. A ListenerSet adds a listener on a port the Gateway itself does not
//! have; routes reach it only through the set.

mod support;

use support::client::{get, send};
use support::mesh::{GATEWAY_CLASS, Pier, conditions, namespace, service};
use support::{bounded, echo, free_port, local};

fn gateway(port: u16) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: gw}}
spec:
  gatewayClassName: pier
  allowedListeners:
    namespaces: {{from: All}}
  listeners:
    - name: http
      protocol: HTTP
      port: {port}
      allowedRoutes: {{namespaces: {{from: All}}}}
"
    )
}

fn listener_set(ns: &str, name: &str, port: u16, hostname: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {{name: {name}, namespace: {ns}}}
spec:
  parentRef: {{name: edge, namespace: gw}}
  listeners:
    - name: web
      protocol: HTTP
      port: {port}
      hostname: {hostname}
"
    )
}

/// HTTPRoute `ns/name` to Service `ns/svc:443` through `parent` (a parentRef in flow style).
fn route(ns: &str, name: &str, parent: &str, svc: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: {ns}}}
spec:
  parentRefs: [{parent}]
  rules:
    - backendRefs: [{{name: {svc}, port: 443}}]
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_set_adds_a_port_that_only_its_routes_reach() {
    let on_gateway = echo("on-gateway").await;
    let on_set = echo("on-set").await;
    let (gw_port, set_port) = (free_port(), free_port());
    let files = vec![
        ("00-class.yaml", GATEWAY_CLASS.to_string()),
        (
            "01-namespaces.yaml",
            [namespace("gw", ""), namespace("team", "")].join("---\n"),
        ),
        ("10-gateway.yaml", gateway(gw_port)),
        (
            "11-set.yaml",
            listener_set("team", "web", set_port, "web.example"),
        ),
        (
            "20-backends.yaml",
            [
                service("team", "a", on_gateway.addr),
                service("team", "b", on_set.addr),
            ]
            .join("---\n"),
        ),
        (
            "30-routes.yaml",
            [
                route("team", "gw-route", "{name: edge, namespace: gw}", "a"),
                route("team", "set-route", "{kind: ListenerSet, name: web}", "b"),
            ]
            .join("---\n"),
        ),
    ];
    let pier = Pier::start(gw_port, &files).await;

    // The set's port is bound and serves only the set's routes.
    let r = bounded(send(local(set_port), get("web.example", "/"))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.backend(), "on-set");
    // Its listener has a hostname: other hosts on that port find no listener.
    let r = bounded(send(local(set_port), get("other.example", "/"))).await;
    assert_eq!(r.status, 404);
    // The Gateway's own listener serves the Gateway's route, not the set's.
    let r = bounded(send(local(gw_port), get("web.example", "/"))).await;
    assert_eq!(r.backend(), "on-gateway");

    let status = pier.status().await;
    let set = conditions(&status, "ListenerSet", "team", "web");
    assert_eq!(set["Accepted"].0, "True", "{set:?}");
    assert_eq!(set["Programmed"].0, "True", "{set:?}");
    let gw = status
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "Gateway")
        .unwrap();
    assert_eq!(gw["status"]["attachedListenerSets"], 1, "{gw:#}");
    // The Gateway reports only its own listener.
    assert_eq!(gw["status"]["listeners"].as_array().unwrap().len(), 1);

    // Taking the set away (the Gateway no longer allows ListenerSets) unbinds its port.
    let before = pier.generation().await;
    pier.write(
        "10-gateway.yaml",
        &gateway(gw_port).replace("  allowedListeners:\n    namespaces: {from: All}\n", ""),
    );
    pier.wait_generation_above(before).await;
    support::web::eventually(std::time::Duration::from_secs(5), || async {
        tokio::net::TcpStream::connect(local(set_port))
            .await
            .is_err()
    })
    .await;
    let status = pier.status().await;
    let set = conditions(&status, "ListenerSet", "team", "web");
    assert_eq!(
        (set["Accepted"].0.as_str(), set["Accepted"].1.as_str()),
        ("False", "NotAllowed")
    );
    pier.shutdown().await;
}
