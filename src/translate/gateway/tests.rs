//! GatewayClasses, Gateways and listeners, each test named after the rule it pins.

use super::*;
use crate::translate::api::GatewayListenersAllowedRoutesNamespaces;
use crate::translate::selector::{InvalidSelector, LabelSelector};
use crate::translate::test_support::{
    BASE, gateway, listener, listener_cond, resources, run, run_with_base, self_signed, tls_secret,
};
use crate::translate::{Settings, Translation, translate};

const CLASS: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: pier, generation: 4}
spec: {controllerName: pier.dev/gateway-controller}
"#;

fn gw(name: &str, listeners: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
         metadata: {{name: {name}, namespace: default, generation: 2}}\n\
         spec:\n  gatewayClassName: pier\n  listeners:\n{listeners}"
    )
}

#[test]
fn class_with_another_controller_gets_no_status_and_its_gateways_are_out_of_scope() {
    let t = run(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: x}\n\
         spec: {controllerName: example.com/other}\n---\n\
         apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
         metadata: {name: g, namespace: default}\n\
         spec: {gatewayClassName: x, listeners: [{name: h, protocol: HTTP, port: 80}]}\n",
    );
    assert!(t.status.gateway_classes.is_empty());
    assert!(t.status.gateways.is_empty());
    assert!(t.snapshot.ports.is_empty());
}

#[test]
fn our_class_is_accepted_with_supported_version() {
    let t = run(CLASS);
    let c = &t.status.gateway_classes["pier"];
    let shown: Vec<_> = c
        .conditions
        .iter()
        .map(|c| (c.type_.to_string(), c.status, c.reason.to_string()))
        .collect();
    assert_eq!(
        shown,
        vec![
            ("Accepted".into(), true, "Accepted".into()),
            ("SupportedVersion".into(), true, "SupportedVersion".into())
        ]
    );
    assert!(
        c.conditions
            .iter()
            .all(|c| c.observed_generation == Some(4))
    );
}

#[test]
fn class_with_parameters_ref_is_invalid_parameters_and_serves_nothing() {
    let t = run(&format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{name: pier}}\n\
         spec:\n  controllerName: pier.dev/gateway-controller\n\
         \x20 parametersRef: {{group: example.com, kind: Params, name: p}}\n---\n{}",
        gw("g", "  - {name: h, protocol: HTTP, port: 80}\n")
    ));
    let c = &t.status.gateway_classes["pier"].conditions[0];
    assert!(!c.status);
    assert_eq!(c.reason.to_string(), "InvalidParameters");
    assert!(t.status.gateways.is_empty());
}

#[test]
fn settings_gateway_keeps_only_that_gateway_in_scope() {
    let yaml = format!(
        "{CLASS}---\n{}---\n{}",
        gw("a", "  - {name: h, protocol: HTTP, port: 80}\n"),
        gw("b", "  - {name: h, protocol: HTTP, port: 81}\n")
    );
    let settings = Settings {
        gateway: Some(ObjectRef::new("default", "b")),
        ..Settings::default()
    };
    let t = translate(&resources(&yaml), &settings);
    let keys: Vec<_> = t.status.gateways.keys().map(ToString::to_string).collect();
    assert_eq!(keys, vec!["default/b"]);
    assert_eq!(t.snapshot.ports[0].port, 81);
}

/// GEP-2644/2645: two TCP (or two UDP) listeners on one port cannot be told apart: both are
/// ProtocolConflict and neither is served; a TCP and a UDP listener on one number are two
/// sockets and both are served.
#[test]
fn two_tcp_or_two_udp_listeners_on_one_port_are_both_conflicted() {
    let t = run(&format!(
        "{CLASS}---\n{}",
        gw(
            "g",
            "  - {name: tcp-a, protocol: TCP, port: 9000}\n  - {name: tcp-b, protocol: TCP, port: 9000}\n\
             \x20 - {name: udp-a, protocol: UDP, port: 9001}\n  - {name: udp-b, protocol: UDP, port: 9001}\n\
             \x20 - {name: tcp, protocol: TCP, port: 9002}\n  - {name: udp, protocol: UDP, port: 9002}\n"
        )
    ));
    let g = gateway(&t, "default", "g");
    for name in ["tcp-a", "tcp-b", "udp-a", "udp-b"] {
        let c = listener_cond(listener(g, name), "Conflicted");
        assert!(c.0, "{name}: {c:?}");
        assert_eq!(c.1, "ProtocolConflict", "{name}");
        assert!(c.2.contains("nothing tells their traffic apart"), "{c:?}");
    }
    for name in ["tcp", "udp"] {
        let c = listener_cond(listener(g, name), "Conflicted");
        assert!(!c.0, "{name}: {c:?}");
    }
    assert!(t.snapshot.port(9000).is_none());
    let ports: Vec<_> = t
        .snapshot
        .ports
        .iter()
        .map(|p| p.key().to_string())
        .collect();
    assert_eq!(ports, ["*:9002", "*:9002/udp"]);
}

#[test]
fn a_tcp_listener_takes_tcp_routes_and_no_hostname_or_tls() {
    let t = run(&format!(
        "{CLASS}---\n{}",
        gw(
            "g",
            "  - {name: tcp, protocol: TCP, port: 9000}\n  - {name: named, protocol: TCP, port: 9001, hostname: a.example}\n"
        )
    ));
    let g = gateway(&t, "default", "g");
    let l = listener(g, "tcp");
    assert_eq!(listener_cond(l, "Accepted").1, "Accepted".to_string());
    let kinds: Vec<_> = l.supported_kinds.iter().map(|k| k.kind.as_str()).collect();
    assert_eq!(kinds, ["TCPRoute"]);
    let named = listener(g, "named");
    assert_eq!(listener_cond(named, "Accepted").1, "Invalid".to_string());
    assert_eq!(
        t.snapshot.port(9000).unwrap().protocol,
        crate::model::Protocol::Tcp
    );
    assert!(t.snapshot.port(9000).unwrap().certs.is_none());
    assert!(t.snapshot.port(9001).is_none());
}

#[test]
fn unsupported_protocol_is_not_accepted() {
    let t = run(&format!(
        "{CLASS}---\n{}",
        gw("g", "  - {name: sctp, protocol: SCTP, port: 9000}\n")
    ));
    let l = listener(gateway(&t, "default", "g"), "sctp");
    assert_eq!(
        listener_cond(l, "Accepted").1,
        "UnsupportedProtocol".to_string()
    );
    assert!(l.supported_kinds.is_empty());
    let g = gateway(&t, "default", "g");
    assert!(!g.conditions[0].status, "no valid listener: not accepted");
    assert_eq!(g.conditions[0].reason.to_string(), "ListenersNotValid");
    assert!(!g.conditions[1].status, "nothing programmed");
}

#[test]
fn https_passthrough_is_not_accepted() {
    let t = run(&format!(
        "{CLASS}---\n{}",
        gw(
            "g",
            "  - {name: tls, protocol: HTTPS, port: 443, tls: {mode: Passthrough}}\n"
        )
    ));
    let l = listener(gateway(&t, "default", "g"), "tls");
    let (ok, reason, _) = listener_cond(l, "Accepted");
    assert!(!ok);
    assert_eq!(reason, "UnsupportedProtocol");
}

#[test]
fn https_without_certificate_refs_is_accepted_but_not_programmed() {
    let t = run(&format!(
        "{CLASS}---\n{}",
        gw(
            "g",
            "  - {name: tls, protocol: HTTPS, port: 443, tls: {}}\n"
        )
    ));
    let l = listener(gateway(&t, "default", "g"), "tls");
    assert!(listener_cond(l, "Accepted").0);
    let (ok, reason, msg) = listener_cond(l, "Programmed");
    assert!(!ok);
    assert_eq!(reason, "Invalid");
    assert!(msg.contains("no certificateRefs"), "{msg}");
    assert!(t.snapshot.ports.is_empty(), "not programmed: not served");
}

fn https_gateway(cert_ref: &str) -> String {
    gw(
        "g",
        &format!(
            "  - name: tls\n    protocol: HTTPS\n    port: 443\n    hostname: foo.example.com\n\
             \x20   tls: {{certificateRefs: [{cert_ref}]}}\n"
        ),
    )
}

#[test]
fn cross_namespace_certificate_ref_without_referencegrant_is_refnotpermitted() {
    let (crt, key) = self_signed(&["foo.example.com"]);
    let t = run(&format!(
        "{CLASS}---\n{}---\n{}",
        https_gateway("{name: tls, namespace: certs}"),
        tls_secret("certs", "tls", &crt, &key)
    ));
    let l = listener(gateway(&t, "default", "g"), "tls");
    let (ok, reason, msg) = listener_cond(l, "ResolvedRefs");
    assert!(!ok);
    assert_eq!(reason, "RefNotPermitted");
    assert!(msg.contains("certs/tls"), "{msg}");
    assert!(!listener_cond(l, "Programmed").0);
}

#[test]
fn cross_namespace_certificate_ref_with_referencegrant_is_served_by_sni() {
    let (crt, key) = self_signed(&["foo.example.com"]);
    let t = run(&format!(
        "{CLASS}---\n{}---\n{}\n---\n{}",
        https_gateway("{name: tls, namespace: certs}"),
        tls_secret("certs", "tls", &crt, &key),
        "apiVersion: gateway.networking.k8s.io/v1\nkind: ReferenceGrant\n\
         metadata: {name: g, namespace: certs}\n\
         spec:\n  from: [{group: gateway.networking.k8s.io, kind: Gateway, namespace: default}]\n\
         \x20 to: [{group: \"\", kind: Secret}]\n"
    ));
    let l = listener(gateway(&t, "default", "g"), "tls");
    assert!(listener_cond(l, "ResolvedRefs").0);
    assert!(listener_cond(l, "Programmed").0);
    let certs = t.snapshot.ports[0].certs.as_ref().unwrap();
    assert!(certs.resolve(Some("foo.example.com")).is_some());
}

#[test]
fn missing_secret_is_invalid_certificate_ref() {
    let t = run(&format!("{CLASS}---\n{}", https_gateway("{name: nope}")));
    let l = listener(gateway(&t, "default", "g"), "tls");
    let (ok, reason, _) = listener_cond(l, "ResolvedRefs");
    assert!(!ok);
    assert_eq!(reason, "InvalidCertificateRef");
    assert_eq!(listener_cond(l, "Programmed").1, "Invalid");
}

#[test]
fn invalid_route_kinds_keep_the_supported_ones() {
    let t = run(&format!(
        "{CLASS}---\n{}",
        gw(
            "g",
            "  - name: h\n    protocol: HTTP\n    port: 80\n    allowedRoutes:\n\
             \x20     kinds: [{kind: HTTPRoute}, {kind: TLSRoute}]\n"
        )
    ));
    let l = listener(gateway(&t, "default", "g"), "h");
    let (ok, reason, msg) = listener_cond(l, "ResolvedRefs");
    assert!(!ok);
    assert_eq!(reason, "InvalidRouteKinds");
    assert!(msg.contains("TLSRoute"));
    assert_eq!(
        l.supported_kinds,
        vec![RouteGroupKind::gateway_api("HTTPRoute")]
    );
    assert!(listener_cond(l, "Accepted").0);
}

#[test]
fn http_and_https_on_one_port_is_protocol_conflict_for_the_later() {
    let t = run(&format!(
        "{CLASS}---\n{}",
        gw(
            "g",
            "  - {name: a, protocol: HTTP, port: 80}\n\
             \x20 - {name: b, protocol: HTTPS, port: 80, hostname: x.example.com, tls: {}}\n"
        )
    ));
    let g = gateway(&t, "default", "g");
    assert!(!listener_cond(listener(g, "a"), "Conflicted").0);
    let (c, reason, _) = listener_cond(listener(g, "b"), "Conflicted");
    assert!(c);
    assert_eq!(reason, "ProtocolConflict");
    assert!(!listener_cond(listener(g, "b"), "Accepted").0);
    assert_eq!(t.snapshot.ports[0].listeners.len(), 1);
}

#[test]
fn same_hostname_on_one_port_is_hostname_conflict_for_the_later_gateway() {
    let t = run(&format!(
        "{CLASS}---\n{}---\n{}",
        gw(
            "b",
            "  - {name: l, protocol: HTTP, port: 80, hostname: x.example.com}\n"
        )
        .replace(
            "generation: 2",
            "creationTimestamp: \"2024-05-01T00:00:00Z\""
        ),
        gw(
            "a",
            "  - {name: l, protocol: HTTP, port: 80, hostname: X.example.com}\n"
        )
        .replace(
            "generation: 2",
            "creationTimestamp: \"2024-06-01T00:00:00Z\""
        ),
    ));
    // `b` is older, so it keeps the hostname although `a` sorts first by name.
    let (c, reason, _) = listener_cond(listener(gateway(&t, "default", "a"), "l"), "Conflicted");
    assert!(c);
    assert_eq!(reason, "HostnameConflict");
    assert!(!listener_cond(listener(gateway(&t, "default", "b"), "l"), "Conflicted").0);
    let served: Vec<_> = t.snapshot.ports[0]
        .listeners
        .iter()
        .map(|l| l.id.to_string())
        .collect();
    assert_eq!(served, vec!["default/b/l"]);
}

#[test]
fn different_hostnames_share_a_port_without_conflict() {
    let t = run(&format!(
        "{CLASS}---\n{}",
        gw(
            "g",
            "  - {name: a, protocol: HTTP, port: 80, hostname: a.example.com}\n\
             \x20 - {name: any, protocol: HTTP, port: 80}\n\
             \x20 - {name: w, protocol: HTTP, port: 80, hostname: \"*.example.com\"}\n"
        )
    ));
    let names: Vec<_> = t.snapshot.ports[0]
        .listeners
        .iter()
        .map(|l| l.id.name.as_str())
        .collect();
    assert_eq!(names, vec!["a", "w", "any"], "most specific first");
}

#[test]
fn invalid_port_is_port_unavailable() {
    let t = run(&format!(
        "{CLASS}---\n{}",
        gw("g", "  - {name: h, protocol: HTTP, port: 70000}\n")
    ));
    let l = listener(gateway(&t, "default", "g"), "h");
    assert_eq!(listener_cond(l, "Accepted").1, "PortUnavailable");
}

#[test]
fn some_invalid_listeners_keep_the_gateway_accepted_with_listeners_not_valid() {
    let t = run(&format!(
        "{CLASS}---\n{}",
        gw(
            "g",
            "  - {name: ok, protocol: HTTP, port: 80}\n\
             \x20 - {name: sctp, protocol: SCTP, port: 53}\n"
        )
    ));
    let g = gateway(&t, "default", "g");
    assert!(g.conditions[0].status);
    assert_eq!(g.conditions[0].reason.to_string(), "ListenersNotValid");
    assert!(g.conditions[0].message.contains("sctp"));
    assert!(g.conditions[1].status);
}

#[test]
fn listener_conditions_come_in_a_fixed_order_with_observed_generation() {
    let t = run_with_base("");
    let l = listener(gateway(&t, "default", "gw"), "http");
    let types: Vec<_> = l.conditions.iter().map(|c| c.type_.to_string()).collect();
    assert_eq!(
        types,
        vec!["Accepted", "Programmed", "ResolvedRefs", "Conflicted"]
    );
    assert!(
        l.conditions
            .iter()
            .all(|c| c.observed_generation == Some(1))
    );
    let _ = BASE;
}

fn selector(yaml: &str) -> LabelSelector {
    let ns: GatewayListenersAllowedRoutesNamespaces =
        serde_saphyr::from_str(yaml).expect("selector yaml");
    match namespace_policy(Some(&ns)).unwrap() {
        NamespacePolicy::Selector(s) => s,
        other => panic!("not a selector: {other:?}"),
    }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn selector_match_labels_and_expressions_all_must_hold() {
    let s = selector(
        "from: Selector\nselector:\n  matchLabels: {env: prod}\n  matchExpressions:\n\
         \x20 - {key: team, operator: In, values: [a, b]}\n\
         \x20 - {key: tier, operator: NotIn, values: [legacy]}\n\
         \x20 - {key: owner, operator: Exists}\n\
         \x20 - {key: deprecated, operator: DoesNotExist}\n",
    );
    let ok = labels(&[("env", "prod"), ("team", "a"), ("owner", "x")]);
    assert!(s.matches(&ok));
    let mut legacy = ok.clone();
    legacy.insert("tier".into(), "legacy".into());
    assert!(!s.matches(&legacy));
    let mut deprecated = ok.clone();
    deprecated.insert("deprecated".into(), "".into());
    assert!(!s.matches(&deprecated));
    assert!(!s.matches(&labels(&[("env", "prod"), ("team", "c"), ("owner", "x")])));
    assert!(!s.matches(&labels(&[("env", "dev"), ("team", "a"), ("owner", "x")])));
    assert!(!s.matches(&labels(&[("env", "prod"), ("team", "a")])));
}

#[test]
fn missing_namespace_object_counts_as_no_labels() {
    let allowed = AllowedRoutes {
        namespaces: NamespacePolicy::Selector(selector(
            "from: Selector\nselector:\n  matchExpressions: [{key: env, operator: NotIn, values: [dev]}]\n",
        )),
        kinds: vec![RouteKind::Http],
    };
    assert!(allowed.allows_namespace("gw-ns", "ghost", &BTreeMap::new()));
    let strict = AllowedRoutes {
        namespaces: NamespacePolicy::Selector(selector(
            "from: Selector\nselector: {matchLabels: {env: prod}}\n",
        )),
        kinds: vec![RouteKind::Http],
    };
    assert!(!strict.allows_namespace("gw-ns", "ghost", &BTreeMap::new()));
}

#[test]
fn namespaces_default_to_same_and_all_allows_any() {
    assert_eq!(namespace_policy(None).unwrap(), NamespacePolicy::Same);
    let all: GatewayListenersAllowedRoutesNamespaces = serde_saphyr::from_str("from: All").unwrap();
    assert_eq!(namespace_policy(Some(&all)).unwrap(), NamespacePolicy::All);
    let same = AllowedRoutes {
        namespaces: NamespacePolicy::Same,
        kinds: vec![RouteKind::Http],
    };
    assert!(same.allows_namespace("a", "a", &BTreeMap::new()));
    assert!(!same.allows_namespace("a", "b", &BTreeMap::new()));
}

#[test]
fn invalid_selector_selects_nothing() {
    let bad: GatewayListenersAllowedRoutesNamespaces = serde_saphyr::from_str(
        "from: Selector\nselector: {matchExpressions: [{key: a, operator: Like, values: [x]}]}",
    )
    .unwrap();
    assert_eq!(
        namespace_policy(Some(&bad)).unwrap_err(),
        InvalidSelector::Operator("Like".into())
    );
    let no_values: GatewayListenersAllowedRoutesNamespaces = serde_saphyr::from_str(
        "from: Selector\nselector: {matchExpressions: [{key: a, operator: In}]}",
    )
    .unwrap();
    assert!(namespace_policy(Some(&no_values)).is_err());
    let missing: GatewayListenersAllowedRoutesNamespaces =
        serde_saphyr::from_str("from: Selector").unwrap();
    assert_eq!(
        namespace_policy(Some(&missing)).unwrap(),
        NamespacePolicy::Nothing
    );
}

/// `status.addresses` lists what pier advertises; `spec.addresses` follows upstream's
/// `GatewayStaticAddresses` steps: an unsupported type is not Accepted, an address pier is not
/// reached at is not Programmed, a usable one is the only one reported.
#[test]
fn gateway_addresses_are_advertised_and_spec_addresses_checked() {
    let settings = Settings {
        advertise: vec!["192.0.2.10".parse().unwrap(), "192.0.2.11".parse().unwrap()],
        ..Settings::default()
    };
    let with = |addresses: &str| {
        let yaml = format!(
            "{CLASS}\n---\n{}  addresses: {addresses}\n",
            gw("g", "  - {name: http, protocol: HTTP, port: 80}\n")
        );
        translate(&resources(&yaml), &settings)
    };
    let conds = |t: &Translation| -> Vec<(String, bool, String)> {
        gateway(t, "default", "g")
            .conditions
            .iter()
            .map(|c| (c.type_.to_string(), c.status, c.reason.to_string()))
            .collect()
    };
    let values = |t: &Translation| -> Vec<String> {
        gateway(t, "default", "g")
            .addresses
            .iter()
            .map(|a| a.value.clone())
            .collect()
    };

    let t = with("[]");
    assert_eq!(values(&t), ["192.0.2.10", "192.0.2.11"]);
    assert!(conds(&t).contains(&("Programmed".into(), true, "Programmed".into())));

    let t = with(
        "[{type: Hostname, value: gw.example.com}, {type: IPAddress, value: 198.51.100.1}, \
         {type: IPAddress, value: 192.0.2.11}]",
    );
    assert!(conds(&t).contains(&("Accepted".into(), false, "UnsupportedAddress".into())));

    let t = with("[{type: IPAddress, value: 198.51.100.1}, {type: IPAddress, value: 192.0.2.11}]");
    let c = conds(&t);
    assert!(
        c.contains(&("Accepted".into(), true, "Accepted".into())),
        "{c:?}"
    );
    assert!(
        c.contains(&("Programmed".into(), false, "AddressNotUsable".into())),
        "{c:?}"
    );

    let t = with("[{type: IPAddress, value: 192.0.2.11}]");
    let c = conds(&t);
    assert!(
        c.contains(&("Programmed".into(), true, "Programmed".into())),
        "{c:?}"
    );
    assert_eq!(values(&t), ["192.0.2.11"]);
}

/// With an address pool each Gateway binds its own address, so Gateways that all listen on
/// port 80 without a hostname (as the upstream conformance suite's base Gateways do) are all
/// accepted instead of conflicting; without one they share the host and the older one wins.
#[test]
fn gateways_with_their_own_addresses_do_not_conflict() {
    let yaml = format!(
        "{CLASS}\n---\n{}\n---\n{}",
        gw("a", "  - {name: http, protocol: HTTP, port: 80}\n"),
        gw("b", "  - {name: http, protocol: HTTP, port: 80}\n"),
    );
    let shared = translate(&resources(&yaml), &Settings::default());
    let conflicted = |t: &Translation, name: &str| {
        gateway(t, "default", name).listeners[0]
            .conditions
            .iter()
            .any(|c| c.type_.to_string() == "Conflicted" && c.status)
    };
    assert!(
        conflicted(&shared, "a") != conflicted(&shared, "b"),
        "one of the two wins"
    );
    assert_eq!(shared.snapshot.ports.len(), 1);

    let settings = Settings {
        address_pool: vec!["10.244.1.1".parse().unwrap(), "10.244.1.2".parse().unwrap()],
        ..Settings::default()
    };
    let own = translate(&resources(&yaml), &settings);
    assert!(!conflicted(&own, "a") && !conflicted(&own, "b"));
    let bound: Vec<String> = own
        .snapshot
        .ports
        .iter()
        .map(|p| p.key().to_string())
        .collect();
    assert_eq!(bound.len(), 2);
    assert!(bound.contains(&"10.244.1.1:80".to_string()), "{bound:?}");
    assert!(bound.contains(&"10.244.1.2:80".to_string()), "{bound:?}");
    for name in ["a", "b"] {
        let status = gateway(&own, "default", name);
        assert_eq!(status.addresses.len(), 1, "{name}");
    }
}

#[test]
fn proxy_protocol_annotation_marks_named_listeners_and_their_ports() {
    let annotated = String::from(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
         metadata:\n  name: edge\n  namespace: default\n  creationTimestamp: \"2020-01-01T00:00:00Z\"\n\
         \x20 annotations: {pier.dev/proxy-protocol: \"a, nosuch\"}\n\
         spec:\n  gatewayClassName: pier\n  listeners:\n\
         \x20 - {name: a, protocol: HTTP, port: 80, hostname: a.example.com}\n\
         \x20 - {name: b, protocol: HTTP, port: 81}\n",
    );
    // `other` shares port 80 on pier's listen host without asking.
    let other = gw(
        "other",
        "  - {name: c, protocol: HTTP, port: 80, hostname: c.example.com}\n",
    );
    let t = run(&format!("{CLASS}---\n{annotated}---\n{other}"));
    assert!(t.snapshot.port(80).unwrap().proxy_protocol);
    assert!(!t.snapshot.port(81).unwrap().proxy_protocol);
    let edge = gateway(&t, "default", "edge");
    let (_, _, msg) = listener_cond(listener(edge, "a"), "Accepted");
    assert!(msg.contains("PROXY protocol header"), "{msg}");
    let (_, _, msg) = listener_cond(listener(edge, "b"), "Accepted");
    assert!(!msg.contains("PROXY"), "{msg}");
    let (ok, _, msg) = listener_cond(listener(gateway(&t, "default", "other"), "c"), "Accepted");
    assert!(ok);
    assert!(
        msg.contains("port 80 requires a PROXY protocol header: listener default/edge/a"),
        "{msg}"
    );

    // "true": every listener.
    let t = run(&format!(
        "{CLASS}---\n{}",
        annotated.replace("a, nosuch", "true")
    ));
    assert!(t.snapshot.port(80).unwrap().proxy_protocol);
    assert!(t.snapshot.port(81).unwrap().proxy_protocol);
    // Without the annotation: nothing.
    let t = run(&format!("{CLASS}---\n{other}"));
    assert!(!t.snapshot.port(80).unwrap().proxy_protocol);
}

#[test]
fn access_log_annotation_sets_every_listener_and_marks_ports_that_log() {
    let annotated = |value: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
             metadata:\n  name: edge\n  namespace: default\n  creationTimestamp: \"2020-01-01T00:00:00Z\"\n\
             \x20 annotations: {{pier.dev/access-log: \"{value}\"}}\n\
             spec:\n  gatewayClassName: pier\n  listeners:\n\
             \x20 - {{name: a, protocol: HTTP, port: 80, hostname: a.example.com}}\n\
             \x20 - {{name: b, protocol: HTTP, port: 81}}\n"
        )
    };
    let other = gw(
        "other",
        "  - {name: c, protocol: HTTP, port: 80, hostname: c.example.com}\n",
    );
    let log_of = |t: &Translation, port: u16, name: &str| {
        let p = t.snapshot.port(port).unwrap();
        let l = p.listeners.iter().find(|l| l.id.name == name).unwrap();
        (p.access_log_on, l.access_log)
    };
    let t = run(&format!("{CLASS}---\n{}---\n{other}", annotated("true")));
    assert_eq!(log_of(&t, 80, "a"), (true, Some(true)));
    assert_eq!(log_of(&t, 81, "b"), (true, Some(true)));
    assert_eq!(log_of(&t, 80, "c"), (true, None), "port-wide, per listener");
    let (_, _, msg) = listener_cond(listener(gateway(&t, "default", "edge"), "a"), "Accepted");
    assert!(msg.contains("requests are logged"), "{msg}");

    let t = run(&format!("{CLASS}---\n{}", annotated("False")));
    assert_eq!(log_of(&t, 80, "a"), (false, Some(false)));

    let t = run(&format!("{CLASS}---\n{}", annotated("sometimes")));
    assert_eq!(log_of(&t, 80, "a"), (false, None));
    let (_, _, msg) = listener_cond(listener(gateway(&t, "default", "edge"), "b"), "Accepted");
    assert!(msg.contains("pier.dev/access-log: \"sometimes\""), "{msg}");
}

/// GEP-5075: where the API server does not serve ClusterTrustBundles, a frontend reference to
/// one is of an unsupported kind (InvalidCACertificateKind), and a listener with no other CA
/// is not served.
#[test]
fn a_cluster_trust_bundle_reference_without_the_api_is_an_unsupported_kind() {
    let yaml =
        include_str!("../../../tests/fixtures/translate/gateway-frontend-validation.in.yaml");
    let served = translate(&resources(yaml), &Settings::default());
    let l = listener(gateway(&served, "default", "gw"), "ctb");
    assert!(listener_cond(l, "Accepted").0);
    assert!(listener_cond(l, "ResolvedRefs").0);
    let mut r = resources(yaml);
    r.trust_bundles_unserved = true;
    let t = translate(&r, &Settings::default());
    let l = listener(gateway(&t, "default", "gw"), "ctb");
    let (ok, reason, message) = listener_cond(l, "ResolvedRefs");
    assert!(!ok);
    assert_eq!(reason, "InvalidCACertificateKind");
    assert!(message.contains("does not serve"), "{message}");
    let (ok, reason, _) = listener_cond(l, "Accepted");
    assert_eq!((ok, reason.as_str()), (false, "NoValidCACertificate"));
}
