//! Helpers for translation unit tests: manifests in, translation out, conditions looked up by
//! type. Tests write YAML like users do, so they read like the fixtures.

use super::status::{
    GatewayStatus, HttpRouteStatus, ListenerStatus, RouteCondition, RouteConditionType,
};
use super::{Resources, Settings, Translation, parse_manifests, translate};
use crate::model::ObjectRef;

/// Pier's GatewayClass and Gateway `default/gw` with one HTTP listener `http` on port 80
/// (routes from the same namespace only).
pub const BASE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: pier}
spec: {controllerName: pier.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default, generation: 1}
spec:
  gatewayClassName: pier
  listeners: [{name: http, protocol: HTTP, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: svc, namespace: default}
spec: {ports: [{name: http, port: 80}]}
"#;

pub fn resources(yaml: &str) -> Resources {
    let mut r = Resources::default();
    parse_manifests(yaml, &mut r).expect("test manifests parse");
    r
}

pub fn run(yaml: &str) -> Translation {
    translate(&resources(yaml), &Settings::default())
}

/// `BASE` plus more documents.
pub fn run_with_base(more: &str) -> Translation {
    run(&format!("{BASE}\n---\n{more}"))
}

pub fn route<'t>(t: &'t Translation, ns: &str, name: &str) -> &'t HttpRouteStatus {
    t.status
        .http_routes
        .get(&ObjectRef::new(ns, name))
        .unwrap_or_else(|| panic!("no status for route {ns}/{name}"))
}

pub fn gateway<'t>(t: &'t Translation, ns: &str, name: &str) -> &'t GatewayStatus {
    t.status
        .gateways
        .get(&ObjectRef::new(ns, name))
        .unwrap_or_else(|| panic!("no status for gateway {ns}/{name}"))
}

pub fn listener<'t>(g: &'t GatewayStatus, name: &str) -> &'t ListenerStatus {
    g.listeners
        .iter()
        .find(|l| l.name == name)
        .unwrap_or_else(|| panic!("no listener {name}"))
}

/// `(status, reason, message)` of a route condition of the first parent.
pub fn route_cond(s: &HttpRouteStatus, t: RouteConditionType) -> (bool, String, String) {
    cond_of(&s.parents[0].conditions, t)
}

pub fn cond_of(cs: &[RouteCondition], t: RouteConditionType) -> (bool, String, String) {
    let c = cs
        .iter()
        .find(|c| c.type_ == t)
        .unwrap_or_else(|| panic!("no {t} condition in {cs:?}"));
    (c.status, c.reason.to_string(), c.message.clone())
}

/// `(status, reason, message)` of a listener condition, by type name.
pub fn listener_cond(l: &ListenerStatus, t: &str) -> (bool, String, String) {
    let c = l
        .conditions
        .iter()
        .find(|c| c.type_.to_string() == t)
        .unwrap_or_else(|| panic!("no {t} condition"));
    (c.status, c.reason.to_string(), c.message.clone())
}

/// A self-signed certificate and key (PEM) for `names`, made at test time.
pub fn self_signed(names: &[&str]) -> (String, String) {
    let ck =
        rcgen::generate_simple_self_signed(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .expect("rcgen");
    (ck.cert.pem(), ck.signing_key.serialize_pem())
}

/// A `kubernetes.io/tls` Secret manifest with the PEMs in stringData.
pub fn tls_secret(ns: &str, name: &str, crt: &str, key: &str) -> String {
    let indent = |s: &str| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         type: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
        indent(crt),
        indent(key)
    )
}
