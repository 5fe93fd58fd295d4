//! `/config`: the active configuration as a person reads it (with `jq`), in the words of the
//! Gateway API: listeners with their routes as written (`PathPrefix /`, backendRefs), the
//! backends with their ready endpoints, and each Gateway's mesh state. Never key material: TLS
//! shows certificate names, and the client certificate its identity and expiry.
//! `/config?full` is the snapshot as the data plane runs it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::Serialize;

use crate::model::{
    BackendTarget, BackendTls, Entry, Listener, PathMatch, Port, Protocol, RequestMatch, Snapshot,
    TlsMode, ValueMatch,
};
use crate::publish::Unserved;
use crate::publish::mesh::MeshSummary;

/// The `/config` document.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Increases by one with every published change.
    pub generation: u64,
    pub listeners: Vec<ListenerSummary>,
    /// Why no listener is served, when none is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serving_nothing: Option<String>,
    /// Listeners of Gateways in scope that are not served, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_served: Vec<crate::publish::UnservedListener>,
    /// Every Service port routed or mirrored to.
    pub backends: Vec<BackendSummary>,
    /// Backend TLS per Gateway in scope.
    pub mesh: Vec<MeshSummary>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerSummary {
    /// `namespace/name`.
    pub gateway: String,
    /// The ListenerSet the listener comes from (`namespace/name`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listener_set: Option<String>,
    pub name: String,
    /// The address the port is bound on: the Gateway's own, or `--listen-host`.
    pub address: IpAddr,
    pub port: u16,
    pub protocol: Protocol,
    /// Absent: any host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSummary>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub proxy_protocol: bool,
    pub routes: Vec<RouteSummary>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsSummary {
    /// `Terminate` or `Passthrough`.
    pub mode: &'static str,
    /// The names the port's certificates are served under (the certificates' and the
    /// listeners' hostnames); never the certificates or keys.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<String>,
    /// Client certificate validation (Gateway `spec.tls.frontend`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_certificates: Option<FrontendSummary>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FrontendSummary {
    pub mode: crate::model::ClientAuthMode,
    pub ca_certificates: usize,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteSummary {
    /// `HTTPRoute`, `GRPCRoute` or `TLSRoute`.
    pub kind: &'static str,
    /// `namespace/name`.
    pub name: String,
    /// The hostnames it is served for on this listener (the Route's and the listener's in
    /// common); absent: any host.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hostnames: Vec<String>,
    pub rules: Vec<RuleSummary>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleSummary {
    /// The rule's index in `spec.rules`.
    pub rule: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// As written: `PathPrefix /`, `Exact /login, method POST`, `service echo.Echo method
    /// Say`. Absent for a TLSRoute (it routes by hostname only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub matches: Vec<String>,
    /// Empty: the rule answers 500 (no backendRef, or the rule is invalid: `/status` says why).
    pub backend_refs: Vec<BackendRefSummary>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendRefSummary {
    /// `namespace/name` of the Service; absent when the reference did not resolve (its share
    /// of the traffic gets a 500; `/status` says why).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    pub weight: u32,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unresolved: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendSummary {
    /// `namespace/name` of the Service.
    pub name: String,
    pub port: u16,
    /// Endpoints pier sends to (ready in their EndpointSlices).
    pub ready_endpoints: usize,
    /// How pier connects: `plaintext`, `mesh mTLS`, `BackendTLSPolicy TLS`, or `TLS required
    /// but unavailable (<reason>)` (requests get a 503).
    pub tls: String,
}

// === building ===

/// The summary of `snapshot`; `listen_host` is where ports without a Gateway address bind,
/// `now` Unix seconds.
pub fn summary(
    snapshot: &Snapshot,
    unserved: &Unserved,
    mesh: &[MeshSummary],
    listen_host: IpAddr,
    now: i64,
) -> Summary {
    let listeners = snapshot
        .ports
        .iter()
        .flat_map(|p| p.listeners.iter().map(move |l| listener(p, l, listen_host)))
        .collect();
    let mut backends = BTreeMap::new();
    snapshot.for_each_backend(|b| {
        backends
            .entry(b.id.clone())
            .or_insert_with(|| BackendSummary {
                name: b.id.service.to_string(),
                port: b.id.port,
                ready_endpoints: b.endpoints.len(),
                tls: String::new(),
            })
            .add_tls(&b.tls);
    });
    Summary {
        generation: snapshot.generation,
        listeners,
        serving_nothing: snapshot
            .ports
            .is_empty()
            .then(|| unserved.nothing.clone())
            .flatten(),
        not_served: unserved.listeners.clone(),
        backends: backends.into_values().collect(),
        mesh: mesh
            .iter()
            .map(|m| {
                let mut m = m.clone();
                if let Some(c) = &mut m.client_certificate {
                    c.expired = now > c.not_after;
                }
                m
            })
            .collect(),
    }
}

impl BackendSummary {
    /// A backend reached in more than one way (meshed under one Gateway, plain under another)
    /// lists each.
    fn add_tls(&mut self, tls: &BackendTls) {
        let how = match tls {
            BackendTls::Plain => "plaintext".to_string(),
            BackendTls::Tls(t) => match t.mode {
                TlsMode::Mesh => "mesh mTLS".to_string(),
                TlsMode::Policy => "BackendTLSPolicy TLS".to_string(),
            },
            BackendTls::PerEndpoint(ids) => {
                format!("mesh mTLS, each endpoint's own {} identity", ids.scheme)
            }
            BackendTls::Unavailable(why) => {
                format!("TLS required but unavailable ({})", why.as_str())
            }
        };
        if self.tls.split("; ").any(|t| t == how) {
            return;
        }
        if !self.tls.is_empty() {
            self.tls.push_str("; ");
        }
        self.tls.push_str(&how);
    }
}

fn listener(port: &Port, l: &Listener, listen_host: IpAddr) -> ListenerSummary {
    let tls = match port.protocol {
        Protocol::Http | Protocol::Tcp | Protocol::Udp => None,
        Protocol::Tls if l.passthrough => Some(TlsSummary {
            mode: "Passthrough",
            certificates: vec![],
            client_certificates: None,
        }),
        Protocol::Https | Protocol::Tls => Some(TlsSummary {
            mode: "Terminate",
            certificates: port.certs.as_ref().map(|c| c.names()).unwrap_or_default(),
            client_certificates: port.client_auth.as_ref().map(|a| FrontendSummary {
                mode: a.mode,
                ca_certificates: a.cas,
            }),
        }),
    };
    ListenerSummary {
        gateway: l.id.gateway.to_string(),
        listener_set: l.id.set.as_ref().map(ToString::to_string),
        name: l.id.name.clone(),
        address: port.address.unwrap_or(listen_host),
        port: port.port,
        protocol: port.protocol,
        hostname: l.hostname.as_ref().map(ToString::to_string),
        tls,
        proxy_protocol: port.proxy_protocol,
        routes: routes(l),
    }
}

/// The Routes of a listener's table, by kind and `namespace/name`, each rule once.
fn routes(l: &Listener) -> Vec<RouteSummary> {
    #[derive(Default)]
    struct Acc {
        any_host: bool,
        hostnames: BTreeSet<String>,
        rules: BTreeMap<usize, RuleSummary>,
    }
    let mut by_route: BTreeMap<(String, &'static str), Acc> = BTreeMap::new();
    for (host, entries) in l.routes.buckets() {
        for e in entries {
            let acc = by_route
                .entry((e.rule.route.to_string(), e.rule.kind))
                .or_default();
            match &host {
                Some(h) => {
                    acc.hostnames.insert(h.to_string());
                }
                None => acc.any_host = true,
            }
            let rule = acc.rules.entry(e.rule.index).or_insert_with(|| rule(e));
            if e.rule.kind != "TLSRoute" {
                let m = describe(&e.matcher, e.rule.kind);
                if !rule.matches.contains(&m) {
                    rule.matches.push(m);
                }
            }
        }
    }
    by_route
        .into_iter()
        .map(|((name, kind), acc)| RouteSummary {
            kind,
            name,
            hostnames: if acc.any_host {
                vec![]
            } else {
                acc.hostnames.into_iter().collect()
            },
            rules: acc.rules.into_values().collect(),
        })
        .collect()
}

fn rule(e: &Entry) -> RuleSummary {
    RuleSummary {
        rule: e.rule.index,
        name: e.rule.name.clone(),
        matches: vec![],
        backend_refs: e
            .rule
            .backends
            .backends
            .iter()
            .map(|wb| match &wb.target {
                BackendTarget::Service(b) => BackendRefSummary {
                    name: Some(b.id.service.to_string()),
                    port: Some(b.id.port),
                    weight: wb.weight,
                    unresolved: false,
                },
                BackendTarget::Invalid => BackendRefSummary {
                    name: None,
                    port: None,
                    weight: wb.weight,
                    unresolved: true,
                },
            })
            .collect(),
    }
}

/// A match as the Route wrote it: `PathPrefix /api, method GET, header x-env=canary, query
/// v=2` (`~` for a regular expression); a GRPCRoute's as `service S method M`.
pub fn describe(m: &RequestMatch, kind: &str) -> String {
    let mut parts = vec![];
    let grpc = if kind == "GRPCRoute" {
        grpc_method(&m.path)
    } else {
        None
    };
    parts.push(grpc.unwrap_or_else(|| match &m.path {
        PathMatch::Exact(p) => format!("Exact {p}"),
        PathMatch::Prefix(p) if p.is_empty() => "PathPrefix /".to_string(),
        PathMatch::Prefix(p) => format!("PathPrefix {p}"),
        PathMatch::RegularExpression(r) => format!("RegularExpression {}", r.as_str()),
    }));
    if let Some(method) = &m.method {
        parts.push(format!("method {method}"));
    }
    let value = |v: &ValueMatch| match v {
        ValueMatch::Exact(s) => format!("={s}"),
        ValueMatch::RegularExpression(r) => format!("~{}", r.as_str()),
    };
    for h in &m.headers {
        parts.push(format!("header {}{}", h.name, value(&h.value)));
    }
    for q in &m.query {
        parts.push(format!("query {}{}", q.name, value(&q.value)));
    }
    parts.join(", ")
}

/// A GRPCRoute method match from the path it was translated to (`translate::grpc_route`):
/// `/S/M` exact, `/S` prefix, or every method.
fn grpc_method(path: &PathMatch) -> Option<String> {
    match path {
        PathMatch::Prefix(p) if p.is_empty() => Some("any service and method".to_string()),
        PathMatch::Prefix(p) => Some(format!("service {}", p.strip_prefix('/')?)),
        PathMatch::Exact(p) => {
            let (service, method) = p.strip_prefix('/')?.split_once('/')?;
            Some(format!("service {service} method {method}"))
        }
        PathMatch::RegularExpression(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{HeaderMatch, QueryMatch};

    #[test]
    fn matches_read_as_written() {
        let root = RequestMatch::default();
        assert_eq!(describe(&root, "HTTPRoute"), "PathPrefix /");
        let m = RequestMatch {
            path: PathMatch::prefix("/api/").unwrap(),
            method: Some(http::Method::POST),
            headers: vec![HeaderMatch {
                name: http::HeaderName::from_static("x-env"),
                value: ValueMatch::Exact("canary".into()),
            }],
            query: vec![QueryMatch {
                name: "v".into(),
                value: ValueMatch::RegularExpression(regex::Regex::new("^[0-9]+$").unwrap()),
            }],
            grpc: None,
        };
        assert_eq!(
            describe(&m, "HTTPRoute"),
            "PathPrefix /api, method POST, header x-env=canary, query v~^[0-9]+$"
        );
        let exact = RequestMatch {
            path: PathMatch::Exact("/echo.Echo/Say".into()),
            ..RequestMatch::default()
        };
        assert_eq!(describe(&exact, "HTTPRoute"), "Exact /echo.Echo/Say");
        assert_eq!(
            describe(&exact, "GRPCRoute"),
            "service echo.Echo method Say"
        );
        assert_eq!(describe(&root, "GRPCRoute"), "any service and method");
    }
}
