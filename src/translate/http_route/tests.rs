//! HTTPRoute attachment, rules and status, each test named after the rule it pins.

use super::*;
use crate::model::{PathModifier, ValueMatch};
use crate::translate::Translation;
use crate::translate::api::HttpRouteRulesBackendRefsFilters;
use crate::translate::status::RouteConditionType as C;
use crate::translate::test_support::{
    BASE, cond_of, gateway, listener, route, route_cond, run, run_with_base,
};

fn route_yaml(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
         metadata: {{name: {name}, namespace: default, generation: 5}}\nspec:\n{spec}"
    )
}

/// The rules the `default/gw` `http` listener serves (entry order), as (route, rule, path).
fn served(t: &Translation) -> Vec<(String, usize, String)> {
    t.snapshot.ports[0].listeners[0]
        .routes
        .buckets()
        .into_iter()
        .flat_map(|(_, es)| es)
        .map(|e| {
            (
                e.rule.route.name.clone(),
                e.rule.index,
                format!("{:?}", e.matcher.path),
            )
        })
        .collect()
}

fn only_rule(t: &Translation) -> Arc<Rule> {
    t.snapshot.ports[0].listeners[0]
        .routes
        .entries()
        .next()
        .unwrap()
        .rule
        .clone()
}

#[test]
fn section_name_to_missing_listener_is_no_matching_parent() {
    let t = run_with_base(&route_yaml(
        "r",
        "  parentRefs: [{name: gw, sectionName: nope}]\n  rules: [{backendRefs: [{name: svc, port: 80}]}]\n",
    ));
    let (ok, reason, msg) = route_cond(route(&t, "default", "r"), C::Accepted);
    assert!(!ok);
    assert_eq!(reason, "NoMatchingParent");
    assert!(msg.contains("nope"), "{msg}");
    assert_eq!(
        listener(gateway(&t, "default", "gw"), "http").attached_routes,
        0
    );
}

#[test]
fn port_to_missing_listener_is_no_matching_parent() {
    let t = run_with_base(&route_yaml(
        "r",
        "  parentRefs: [{name: gw, port: 8080}]\n  rules: [{backendRefs: [{name: svc, port: 80}]}]\n",
    ));
    assert_eq!(
        route_cond(route(&t, "default", "r"), C::Accepted).1,
        "NoMatchingParent"
    );
}

#[test]
fn section_name_and_port_must_both_match() {
    let t = run_with_base(&route_yaml(
        "r",
        "  parentRefs: [{name: gw, sectionName: http, port: 80}]\n  rules: [{backendRefs: [{name: svc, port: 80}]}]\n",
    ));
    assert!(route_cond(route(&t, "default", "r"), C::Accepted).0);
}

fn h(s: &str) -> HostnameMatch {
    HostnameMatch::parse(s).unwrap()
}

#[test]
fn listener_isolation_hostnames_intersect() {
    let l = h("*.example.com");
    assert_eq!(
        effective_hostnames(&[h("foo.example.com"), h("foo.other.net")], Some(&l)),
        Some(vec![h("foo.example.com")])
    );
    assert_eq!(
        effective_hostnames(&[h("*.a.example.com")], Some(&l)),
        Some(vec![h("*.a.example.com")])
    );
    assert_eq!(effective_hostnames(&[h("example.com")], Some(&l)), None);
    assert_eq!(
        effective_hostnames(&[h("*.com")], Some(&h("foo.example.com"))),
        Some(vec![h("foo.example.com")])
    );
}

#[test]
fn intersections_rank_by_the_hostname_the_route_wrote() {
    let l = h("abc.example.com");
    let ranks = |route: &[HostnameMatch], l: Option<&HostnameMatch>| {
        let eff = effective_hostnames(route, l).unwrap();
        written_ranks(route, l, &eff)
    };
    assert_eq!(ranks(&[h("abc.example.com")], Some(&l)), [HostRank::Exact]);
    assert_eq!(
        ranks(&[h("*.example.com")], Some(&l)),
        [h("*.example.com").rank()]
    );
    // Two written names meet in one intersection: the most specific counts.
    assert_eq!(
        ranks(&[h("*.com"), h("*.example.com")], Some(&l)),
        [h("*.example.com").rank()]
    );
    assert_eq!(ranks(&[], Some(&l)), [HostRank::Any]);
    // Without a listener hostname the effective names are the written ones.
    assert_eq!(
        ranks(&[h("*.example.com"), h("x.example.org")], None),
        [h("*.example.com").rank(), HostRank::Exact]
    );
    assert!(h("*.example.com").rank() > h("*.com").rank());
}

#[test]
fn route_without_hostnames_takes_the_listener_hostname_or_any() {
    let l = h("foo.example.com");
    assert_eq!(effective_hostnames(&[], Some(&l)), Some(vec![l.clone()]));
    assert_eq!(effective_hostnames(&[], None), Some(vec![]));
    assert_eq!(
        effective_hostnames(std::slice::from_ref(&l), None),
        Some(vec![l.clone()])
    );
}

#[test]
fn non_intersecting_hostnames_are_no_matching_listener_hostname() {
    let yaml = BASE.replace(
        "{name: http, protocol: HTTP, port: 80}",
        "{name: http, protocol: HTTP, port: 80, hostname: a.example.com}",
    );
    let t = run(&format!(
        "{yaml}\n---\n{}",
        route_yaml(
            "r",
            "  parentRefs: [{name: gw}]\n  hostnames: [b.example.com]\n  rules: [{backendRefs: [{name: svc, port: 80}]}]\n"
        )
    ));
    assert_eq!(
        route_cond(route(&t, "default", "r"), C::Accepted).1,
        "NoMatchingListenerHostname"
    );
    assert!(t.snapshot.ports[0].listeners[0].routes.is_empty());
}

#[test]
fn route_from_another_namespace_is_not_allowed_by_default() {
    let t = run_with_base(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
         metadata: {name: r, namespace: other}\n\
         spec:\n  parentRefs: [{name: gw, namespace: default}]\n  rules: [{}]\n",
    );
    let (ok, reason, _) = route_cond(route(&t, "other", "r"), C::Accepted);
    assert!(!ok);
    assert_eq!(reason, "NotAllowedByListeners");
}

#[test]
fn parent_refs_to_foreign_gateways_or_other_kinds_get_no_status() {
    let t = run_with_base(&route_yaml(
        "r",
        "  parentRefs: [{name: not-ours}, {kind: Service, group: \"\", name: svc}]\n  rules: [{}]\n",
    ));
    assert!(t.status.http_routes.is_empty());
}

#[test]
fn duplicate_parent_refs_get_one_status_entry_and_attach_once() {
    let t = run_with_base(&route_yaml(
        "r",
        "  parentRefs: [{name: gw}, {name: gw}, {name: gw, sectionName: http}]\n  rules: [{backendRefs: [{name: svc, port: 80}]}]\n",
    ));
    assert_eq!(route(&t, "default", "r").parents.len(), 2);
    assert_eq!(
        listener(gateway(&t, "default", "gw"), "http").attached_routes,
        1
    );
    assert_eq!(t.snapshot.ports[0].listeners[0].routes.len(), 1);
}

#[test]
fn parent_status_echoes_the_parent_ref_and_controller_name() {
    let t = run_with_base(&route_yaml(
        "r",
        "  parentRefs: [{name: gw, sectionName: http}]\n  rules: [{}]\n",
    ));
    let p = &route(&t, "default", "r").parents[0];
    assert_eq!(
        p.parent_ref,
        ParentRef {
            group: None,
            kind: None,
            namespace: None,
            name: "gw".into(),
            section_name: Some("http".into()),
            port: None
        }
    );
    assert_eq!(p.controller_name, crate::DEFAULT_CONTROLLER_NAME);
    assert!(
        p.conditions
            .iter()
            .all(|c| c.observed_generation == Some(5))
    );
}

fn backend_refs(refs: &str) -> String {
    route_yaml(
        "r",
        &format!("  parentRefs: [{{name: gw}}]\n  rules:\n  - backendRefs: {refs}\n"),
    )
}

#[test]
fn cross_namespace_backend_without_referencegrant_is_refnotpermitted() {
    let t = run_with_base(&format!(
        "{}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: api, namespace: other}}\n\
         spec: {{ports: [{{port: 80}}]}}\n",
        backend_refs("[{name: api, namespace: other, port: 80}]")
    ));
    let (ok, reason, msg) = route_cond(route(&t, "default", "r"), C::ResolvedRefs);
    assert!(!ok);
    assert_eq!(reason, "RefNotPermitted");
    assert!(msg.contains("other/api"), "{msg}");
    assert!(route_cond(route(&t, "default", "r"), C::Accepted).0);
    assert!(matches!(
        only_rule(&t).backends.backends[0].target,
        BackendTarget::Invalid
    ));
}

#[test]
fn cross_namespace_backend_with_referencegrant_resolves() {
    let t = run_with_base(&format!(
        "{}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: api, namespace: other}}\n\
         spec: {{ports: [{{port: 80}}]}}\n---\n\
         apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\n\
         metadata: {{name: g, namespace: other}}\n\
         spec:\n  from: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: default}}]\n\
         \x20 to: [{{group: \"\", kind: Service}}]\n",
        backend_refs("[{name: api, namespace: other, port: 80}]")
    ));
    assert!(route_cond(route(&t, "default", "r"), C::ResolvedRefs).0);
    assert!(matches!(
        only_rule(&t).backends.backends[0].target,
        BackendTarget::Service(_)
    ));
}

#[test]
fn backend_of_unsupported_kind_is_invalid_kind() {
    let t = run_with_base(&backend_refs(
        "[{group: example.com, kind: Bucket, name: b}]",
    ));
    assert_eq!(
        route_cond(route(&t, "default", "r"), C::ResolvedRefs).1,
        "InvalidKind"
    );
}

#[test]
fn missing_service_port_or_unknown_port_is_backend_not_found() {
    for refs in [
        "[{name: nope, port: 80}]",
        "[{name: svc}]",
        "[{name: svc, port: 81}]",
    ] {
        let t = run_with_base(&backend_refs(refs));
        let (ok, reason, _) = route_cond(route(&t, "default", "r"), C::ResolvedRefs);
        assert!(!ok, "{refs}");
        assert_eq!(reason, "BackendNotFound", "{refs}");
    }
}

#[test]
fn first_bad_ref_gives_the_reason_and_the_message_names_every_one() {
    let t = run_with_base(&backend_refs(
        "[{name: nope, port: 80}, {group: x.io, kind: K, name: k}]",
    ));
    let (_, reason, msg) = route_cond(route(&t, "default", "r"), C::ResolvedRefs);
    assert_eq!(reason, "BackendNotFound");
    assert!(
        msg.contains("backendRefs[0]") && msg.contains("backendRefs[1]"),
        "{msg}"
    );
}

#[test]
fn weight_defaults_to_one_and_zero_is_kept() {
    let t = run_with_base(&backend_refs(
        "[{name: svc, port: 80}, {name: svc, port: 80, weight: 0}]",
    ));
    let weights: Vec<_> = only_rule(&t)
        .backends
        .backends
        .iter()
        .map(|b| b.weight)
        .collect();
    assert_eq!(weights, vec![1, 0]);
    assert_eq!(only_rule(&t).backends.total_weight, 1);
}

#[test]
fn weight_outside_the_api_bounds_invalidates_the_rule() {
    for w in ["-1", "1000001"] {
        let t = run_with_base(&backend_refs(&format!(
            "[{{name: svc, port: 80, weight: {w}}}]"
        )));
        let (ok, reason, msg) = route_cond(route(&t, "default", "r"), C::Accepted);
        assert!(!ok, "{w}");
        assert_eq!(reason, "UnsupportedValue");
        assert!(msg.contains("weight"), "{msg}");
    }
}

#[test]
fn backends_are_shared_across_rules() {
    let t = run_with_base(&route_yaml(
        "r",
        "  parentRefs: [{name: gw}]\n  rules:\n\
         \x20 - matches: [{path: {value: /a}}]\n    backendRefs: [{name: svc, port: 80}]\n\
         \x20 - matches: [{path: {value: /b}}]\n    backendRefs: [{name: svc, port: 80}]\n",
    ));
    let targets: Vec<_> = t.snapshot.ports[0].listeners[0]
        .routes
        .entries()
        .map(|e| match &e.rule.backends.backends[0].target {
            BackendTarget::Service(b) => b.clone(),
            BackendTarget::Invalid => panic!("invalid"),
        })
        .collect();
    assert!(Arc::ptr_eq(&targets[0], &targets[1]));
}

#[test]
fn invalid_regex_makes_the_rule_answer_500_and_keeps_the_rest_of_the_route() {
    let t = run_with_base(&route_yaml(
        "r",
        "  parentRefs: [{name: gw}]\n  rules:\n\
         \x20 - matches: [{path: {type: RegularExpression, value: \"(\"}}, {path: {value: /kept}}]\n\
         \x20   backendRefs: [{name: svc, port: 80}]\n\
         \x20 - matches: [{path: {value: /ok}}]\n    backendRefs: [{name: svc, port: 80}]\n",
    ));
    let s = route(&t, "default", "r");
    let (ok, reason, msg) = route_cond(s, C::Accepted);
    assert!(ok);
    assert_eq!(reason, "Accepted");
    assert!(
        msg.contains("rules[0]") && msg.contains("answer 500"),
        "{msg}"
    );
    let (p, reason, msg) = route_cond(s, C::PartiallyInvalid);
    assert!(p);
    assert_eq!(reason, "UnsupportedValue");
    assert!(msg.starts_with("Dropped Rule"), "{msg}");
    let served = served(&t);
    assert_eq!(served.len(), 2, "{served:?}");
    for e in t.snapshot.ports[0].listeners[0].routes.entries() {
        let valid = e.rule.index == 1;
        assert_eq!(e.rule.backends.backends.is_empty(), !valid);
    }
}

#[test]
fn every_rule_invalid_is_not_accepted() {
    let t = run_with_base(&route_yaml(
        "r",
        "  parentRefs: [{name: gw}]\n  rules:\n\
         \x20 - filters: [{type: ExtensionRef, extensionRef: {group: x, kind: y, name: z}}]\n",
    ));
    let s = route(&t, "default", "r");
    let (ok, reason, _) = route_cond(s, C::Accepted);
    assert!(!ok);
    assert_eq!(reason, "UnsupportedValue");
    assert!(
        !s.parents[0]
            .conditions
            .iter()
            .any(|c| c.type_ == C::PartiallyInvalid)
    );
    assert!(t.snapshot.ports[0].listeners[0].routes.is_empty());
}

#[test]
fn invalid_route_hostname_is_not_accepted() {
    let t = run_with_base(&route_yaml(
        "r",
        "  parentRefs: [{name: gw}]\n  hostnames: [\"foo.*.com\"]\n  rules: [{}]\n",
    ));
    assert_eq!(
        route_cond(route(&t, "default", "r"), C::Accepted).1,
        "UnsupportedValue"
    );
}

fn rule_with(matches: &str, filters: &str) -> Translation {
    run_with_base(&route_yaml(
        "r",
        &format!(
            "  parentRefs: [{{name: gw}}]\n  rules:\n  - matches: {matches}\n    filters: {filters}\n\
             \x20   backendRefs: [{{name: svc, port: 80}}]\n"
        ),
    ))
}

fn rule_error(t: &Translation) -> Option<String> {
    let s = route(t, "default", "r");
    s.parents[0]
        .conditions
        .iter()
        .find(|c| c.type_ == C::Accepted)
        .filter(|c| c.message.contains("answer 500") || !c.status)
        .map(|c| c.message.clone())
}

#[test]
fn an_empty_replace_prefix_match_is_valid_and_removes_the_prefix() {
    let rewrite = "[{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: ''}}}]";
    let ok = rule_with("[{path: {type: PathPrefix, value: /foo}}]", rewrite);
    assert_eq!(rule_error(&ok), None);
    assert_eq!(
        only_rule(&ok).filters.rewrite.as_ref().unwrap().path,
        Some(PathModifier::ReplacePrefixMatch(String::new()))
    );
}

#[test]
fn replace_prefix_match_needs_a_path_prefix_match() {
    let rewrite = "[{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /x}}}]";
    let bad = rule_with("[{path: {type: Exact, value: /a}}]", rewrite);
    assert!(rule_error(&bad).unwrap().contains("ReplacePrefixMatch"));
    let ok = rule_with("[{path: {type: PathPrefix, value: /a}}]", rewrite);
    assert_eq!(rule_error(&ok), None);
    assert_eq!(
        only_rule(&ok).filters.rewrite.as_ref().unwrap().path,
        Some(PathModifier::ReplacePrefixMatch("/x".into()))
    );
}

#[test]
fn unsupported_and_duplicate_filters_invalidate_the_rule() {
    for filters in [
        "[{type: ExtensionRef, extensionRef: {group: g, kind: k, name: n}}]",
        "[{type: CORS, cors: {}}, {type: CORS, cors: {}}]",
        "[{type: CORS}]",
        "[{type: RequestHeaderModifier, requestHeaderModifier: {}}, {type: RequestHeaderModifier, requestHeaderModifier: {}}]",
        "[{type: RequestRedirect, requestRedirect: {scheme: https}}, {type: URLRewrite, urlRewrite: {hostname: a.example.com}}]",
        "[{type: RequestRedirect}]",
        "[{type: RequestRedirect, requestRedirect: {statusCode: 304}}]",
        "[{type: RequestRedirect, requestRedirect: {hostname: \"*.example.com\"}}]",
        "[{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: \"a b\", value: x}]}}]",
        "[{type: RequestMirror, requestMirror: {backendRef: {name: svc, port: 80}, percent: 101}}]",
        "[{type: RequestMirror, requestMirror: {backendRef: {name: svc, port: 80}, percent: 5, fraction: {numerator: 1}}}]",
    ] {
        let t = rule_with("[{path: {value: /}}]", filters);
        assert!(rule_error(&t).is_some(), "{filters} should be invalid");
    }
}

#[test]
fn cors_is_parsed_with_the_api_defaults() {
    let t = rule_with(
        "[{path: {value: /}}]",
        "[{type: CORS, cors: {allowOrigins: [\"https://www.foo.com\", \"https://*.Bar.com:8443\"], \
          allowMethods: [GET, OPTIONS], allowHeaders: [X-Header-1], exposeHeaders: [\"*\", x-h3]}}]",
    );
    assert_eq!(rule_error(&t), None);
    let r = only_rule(&t);
    let cors = r.filters.cors.as_ref().unwrap();
    assert_eq!(
        serde_json::to_value(cors).unwrap(),
        serde_json::json!({
            "allowOrigins": ["https://www.foo.com:443", "https://*.bar.com:8443"],
            "allowMethods": "GET, OPTIONS",
            "allowHeaders": "x-header-1",
            "exposeHeaders": "*, x-h3",
            "allowCredentials": false,
            "maxAge": "5",
        })
    );

    let t = rule_with(
        "[{path: {value: /}}]",
        "[{type: CORS, cors: {allowOrigins: [\"*\"], allowMethods: [\"*\"], allowHeaders: [\"*\"], \
          allowCredentials: true, maxAge: 3600}}]",
    );
    let r = only_rule(&t);
    let cors = r.filters.cors.as_ref().unwrap();
    assert_eq!(cors.allow_origins, crate::model::filter::AllowOrigins::Any);
    assert_eq!(cors.allow_methods, crate::model::filter::Allowed::Any);
    assert_eq!(cors.allow_headers, crate::model::filter::Allowed::Any);
    assert!(cors.allow_credentials);
    assert_eq!(cors.max_age, "3600");
}

#[test]
fn invalid_cors_values_invalidate_the_rule_and_say_which() {
    for (cors, says) in [
        (
            "{allowOrigins: [\"*\", \"https://a.com\"]}",
            "allowOrigins cannot contain '*'",
        ),
        (
            "{allowOrigins: [www.foo.com]}",
            "allowOrigins[0] \"www.foo.com\"",
        ),
        (
            "{allowOrigins: [\"https://a.com\", \"https://a.*.com\"]}",
            "allowOrigins[1]",
        ),
        ("{allowOrigins: [\"https://a.com:70000\"]}", "1 to 65535"),
        ("{allowMethods: [get]}", "allowMethods[0] \"get\""),
        (
            "{allowMethods: [GET, \"*\"]}",
            "allowMethods cannot contain '*'",
        ),
        (
            "{allowHeaders: [\"*\", x-a]}",
            "allowHeaders cannot contain '*'",
        ),
        ("{allowHeaders: [\":method\"]}", "allowHeaders[0]"),
        ("{exposeHeaders: [x-a, \"a b\"]}", "exposeHeaders[1]"),
        ("{maxAge: 0}", "maxAge must be at least 1"),
    ] {
        let t = rule_with(
            "[{path: {value: /}}]",
            &format!("[{{type: CORS, cors: {cors}}}]"),
        );
        let msg = rule_error(&t).unwrap_or_else(|| panic!("{cors} should be invalid"));
        assert!(msg.contains(says), "{cors}: {msg}");
    }
}

#[test]
fn a_backend_ref_cors_filter_goes_to_the_weighted_backend() {
    let t = run_with_base(&backend_refs(
        "[{name: svc, port: 80, filters: [{type: CORS, cors: {allowOrigins: [\"https://a.example.com\"]}}]}]",
    ));
    let r = only_rule(&t);
    assert!(r.filters.cors.is_none());
    assert!(r.backends.backends[0].filters.cors.is_some());
    assert!(r.has_cors());
}

#[test]
fn redirect_defaults_to_302_and_keeps_parsed_fields() {
    let t = rule_with(
        "[{path: {value: /}}]",
        "[{type: RequestRedirect, requestRedirect: {scheme: https, hostname: A.example.com, port: 8443}}]",
    );
    let r = only_rule(&t);
    let redirect = r.filters.redirect.as_ref().unwrap();
    assert_eq!(redirect.status, http::StatusCode::FOUND);
    assert_eq!(redirect.scheme.as_deref(), Some("https"));
    assert_eq!(redirect.hostname.as_deref(), Some("a.example.com"));
    assert_eq!(redirect.port, Some(8443));
}

#[test]
fn header_modifier_names_are_parsed_case_insensitively() {
    let t = rule_with(
        "[{path: {value: /}}]",
        "[{type: ResponseHeaderModifier, responseHeaderModifier: {set: [{name: X-A, value: \"1\"}], add: [{name: x-b, value: \"2\"}], remove: [X-C]}}]",
    );
    let m = only_rule(&t).filters.response_headers.clone().unwrap();
    assert_eq!(m.set[0].0.as_str(), "x-a");
    assert_eq!(m.add[0].1, "2");
    assert_eq!(m.remove[0].as_str(), "x-c");
}

#[test]
fn mirror_percent_fraction_and_default() {
    let t = rule_with(
        "[{path: {value: /}}]",
        "[{type: RequestMirror, requestMirror: {backendRef: {name: svc, port: 80}, percent: 30}},\
          {type: RequestMirror, requestMirror: {backendRef: {name: svc, port: 80}, fraction: {numerator: 1, denominator: 8}}},\
          {type: RequestMirror, requestMirror: {backendRef: {name: svc, port: 80}, fraction: {numerator: 7}}},\
          {type: RequestMirror, requestMirror: {backendRef: {name: svc, port: 80}}}]",
    );
    let ratios: Vec<_> = only_rule(&t)
        .filters
        .mirrors
        .iter()
        .map(|m| (m.numerator, m.denominator))
        .collect();
    assert_eq!(ratios, vec![(30, 100), (1, 8), (7, 100), (100, 100)]);
}

#[test]
fn mirror_to_a_missing_service_is_left_out_and_reported() {
    let t = rule_with(
        "[{path: {value: /}}]",
        "[{type: RequestMirror, requestMirror: {backendRef: {name: gone, port: 80}}}]",
    );
    assert!(only_rule(&t).filters.mirrors.is_empty());
    assert!(
        !only_rule(&t).backends.backends.is_empty(),
        "rule stays valid"
    );
    let (ok, reason, msg) = route_cond(route(&t, "default", "r"), C::ResolvedRefs);
    assert!(!ok);
    assert_eq!(reason, "BackendNotFound");
    assert!(msg.contains("requestMirror"), "{msg}");
}

#[test]
fn backend_ref_filters_go_to_the_weighted_backend() {
    let t = run_with_base(&backend_refs(
        "[{name: svc, port: 80, filters: [{type: RequestHeaderModifier, requestHeaderModifier: {add: [{name: x-b, value: \"1\"}]}}]}]",
    ));
    let r = only_rule(&t);
    assert!(r.filters.is_empty());
    assert!(r.backends.backends[0].filters.request_headers.is_some());
}

#[test]
fn backend_filter_conversion_keeps_every_filter_kind() {
    let yaml = r#"
- type: RequestHeaderModifier
  requestHeaderModifier: {set: [{name: a, value: b}], add: [{name: c, value: d}], remove: [e]}
- type: ResponseHeaderModifier
  responseHeaderModifier: {set: [{name: a, value: b}]}
- type: RequestMirror
  requestMirror: {backendRef: {name: m, namespace: n, port: 80}, fraction: {numerator: 1, denominator: 2}}
- type: RequestRedirect
  requestRedirect: {scheme: https, hostname: h.example.com, port: 8443, statusCode: 301, path: {type: ReplacePrefixMatch, replacePrefixMatch: /p}}
- type: URLRewrite
  urlRewrite: {hostname: h.example.com, path: {type: ReplaceFullPath, replaceFullPath: /f}}
- type: ExtensionRef
  extensionRef: {group: g, kind: k, name: n}
- type: CORS
  cors: {allowOrigins: ["https://a.example.com"], maxAge: 5}
"#;
    let backend: Vec<HttpRouteRulesBackendRefsFilters> = serde_saphyr::from_str(yaml).unwrap();
    let rule: Vec<HttpRouteRulesFilters> = serde_saphyr::from_str(yaml).unwrap();
    let converted: Vec<HttpRouteRulesFilters> = backend
        .iter()
        .map(|f| backend_filter_as_rule_filter(f).unwrap())
        .collect();
    assert_eq!(converted, rule);
}

#[test]
fn duplicate_header_and_query_matches_keep_the_first() {
    let t = rule_with(
        "[{path: {value: /}, headers: [{name: X-A, value: \"1\"}, {name: x-a, value: \"2\"}], queryParams: [{name: q, value: \"1\"}, {name: q, value: \"2\"}, {name: Q, value: \"3\"}]}]",
        "[]",
    );
    let e = t.snapshot.ports[0].listeners[0]
        .routes
        .entries()
        .next()
        .unwrap();
    assert_eq!(e.matcher.headers.len(), 1);
    assert_eq!(e.matcher.headers[0].name.as_str(), "x-a");
    assert!(matches!(&e.matcher.headers[0].value, ValueMatch::Exact(v) if v == "1"));
    let q: Vec<_> = e.matcher.query.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(q, vec!["q", "Q"], "query names are case-sensitive");
}

#[test]
fn method_and_path_types_are_parsed() {
    let t = rule_with(
        "[{method: PATCH, path: {type: Exact, value: /e}}, {path: {type: RegularExpression, value: \"/r/[a-z]+\"}}, {}]",
        "[]",
    );
    let mut paths: Vec<String> = served(&t).into_iter().map(|(_, _, p)| p).collect();
    paths.sort();
    assert_eq!(paths.len(), 3);
    let e = t.snapshot.ports[0].listeners[0]
        .routes
        .entries()
        .find(|e| e.matcher.method.is_some())
        .unwrap();
    assert_eq!(e.matcher.method, Some(http::Method::PATCH));
    assert!(
        paths.iter().any(|p| p.contains("Prefix(\"\")")),
        "{paths:?}"
    );
}

#[test]
fn unnormalized_paths_are_invalid() {
    for p in [
        "/a//b", "/a/./b", "/a/../b", "/a%2fb", "/a#b", "/a/..", "relative",
    ] {
        let t = rule_with(
            &format!("[{{path: {{type: PathPrefix, value: \"{p}\"}}}}]"),
            "[]",
        );
        assert!(rule_error(&t).is_some(), "{p} should be invalid");
    }
}

#[test]
fn rule_without_matches_matches_every_path() {
    let t = run_with_base(&route_yaml("r", "  parentRefs: [{name: gw}]\n"));
    assert_eq!(served(&t), vec![("r".into(), 0, "Prefix(\"\")".into())]);
    assert!(
        only_rule(&t).backends.backends.is_empty(),
        "no backends: 500"
    );
}

#[test]
fn timeouts_parse_and_zero_means_none() {
    let d = |s: &str| duration("request", Some(s)).unwrap();
    assert_eq!(d("10s"), Some(Duration::from_secs(10)));
    assert_eq!(d("1h30m"), Some(Duration::from_secs(5400)));
    assert_eq!(d("250ms"), Some(Duration::from_millis(250)));
    assert_eq!(d("0s"), None);
    assert!(duration("request", Some("10")).is_err());
    assert!(duration("request", Some("-1s")).is_err());
    assert!(duration("request", Some("1.5s")).is_err());
}

/// The first rule of a route whose rules are one with `retry: {retry}` and a plain one (so
/// the route attaches whatever becomes of the first), and the route's Accepted message.
fn retry_rule(retry: &str) -> (Arc<Rule>, String) {
    let t = run_with_base(&route_yaml(
        "r",
        &format!(
            "  parentRefs: [{{name: gw}}]\n  rules:\n\
             \x20 - matches: [{{path: {{value: /retry}}}}]\n    retry: {retry}\n\
             \x20   backendRefs: [{{name: svc, port: 80}}]\n\
             \x20 - matches: [{{path: {{value: /plain}}}}]\n\
             \x20   backendRefs: [{{name: svc, port: 80}}]\n"
        ),
    ));
    let msg = route_cond(route(&t, "default", "r"), C::Accepted).2;
    let rule = t.snapshot.ports[0].listeners[0]
        .routes
        .entries()
        .find(|e| e.rule.index == 0)
        .unwrap()
        .rule
        .clone();
    (rule, msg)
}

#[test]
fn retry_is_parsed_with_sorted_codes_attempts_and_backoff() {
    let (rule, msg) = retry_rule("{codes: [503, 500, 503], attempts: 3, backoff: 1s500ms}");
    assert_eq!(
        rule.retry,
        Some(RetryPolicy::new(
            vec![500, 503],
            3,
            Duration::from_millis(1500)
        )),
        "{msg}"
    );
    assert!(!rule.backends.backends.is_empty(), "the rule is served");
    // 4xx codes are allowed (the spec calls them inadvisable, not invalid).
    let (rule, _) = retry_rule("{codes: [400, 599]}");
    assert_eq!(rule.retry.as_ref().unwrap().codes, [400, 599]);
}

#[test]
fn retry_defaults_one_attempt_and_25ms_and_zero_means_none_or_at_once() {
    let (rule, _) = retry_rule("{}");
    assert_eq!(
        rule.retry,
        Some(RetryPolicy::new(
            vec![],
            DEFAULT_RETRY_ATTEMPTS,
            DEFAULT_RETRY_BACKOFF
        ))
    );
    assert_eq!(DEFAULT_RETRY_ATTEMPTS, 1);
    assert_eq!(DEFAULT_RETRY_BACKOFF, Duration::from_millis(25));
    let (rule, _) = retry_rule("{attempts: 0, backoff: 0s, codes: [500]}");
    let retry = rule.retry.as_ref().unwrap();
    assert_eq!((retry.attempts, retry.backoff), (0, Duration::ZERO));
    // Absurdly many attempts saturate: the budget and timeouts bound them.
    let (rule, _) = retry_rule("{attempts: 99999999999}");
    assert_eq!(rule.retry.as_ref().unwrap().attempts, u32::MAX);
}

#[test]
fn invalid_retry_values_invalidate_the_rule_and_say_which() {
    for (retry, why) in [
        (
            "{codes: [500, 302]}",
            "retry: codes[1]: 302 is not a status code in 400-599",
        ),
        (
            "{codes: [600]}",
            "retry: codes[0]: 600 is not a status code in 400-599",
        ),
        (
            "{codes: [-500]}",
            "retry: codes[0]: -500 is not a status code in 400-599",
        ),
        ("{attempts: -1}", "retry: attempts: -1 is negative"),
        (
            "{backoff: 100 ms}",
            "retry: backoff: \"100 ms\" is not a Gateway API duration",
        ),
        (
            "{backoff: 1.5s}",
            "retry: backoff: \"1.5s\" is not a Gateway API duration",
        ),
    ] {
        let (rule, msg) = retry_rule(retry);
        assert!(msg.contains(&format!("rules[0]: {why}")), "{retry}: {msg}");
        // Invalid: answers 500 (no backends), and carries no policy.
        assert!(rule.backends.backends.is_empty(), "{retry}");
        assert_eq!(rule.retry, None, "{retry}");
    }
}

#[test]
fn backend_request_longer_than_request_is_invalid() {
    let t = run_with_base(&route_yaml(
        "r",
        "  parentRefs: [{name: gw}]\n  rules:\n  - timeouts: {request: 1s, backendRequest: 2s}\n    backendRefs: [{name: svc, port: 80}]\n",
    ));
    assert!(
        cond_of(
            &route(&t, "default", "r").parents[0].conditions,
            C::Accepted
        )
        .2
        .contains("backendRequest")
    );
    let t = run_with_base(&route_yaml(
        "r",
        "  parentRefs: [{name: gw}]\n  rules:\n  - timeouts: {request: 0s, backendRequest: 2s}\n    backendRefs: [{name: svc, port: 80}]\n",
    ));
    assert_eq!(
        only_rule(&t).timeouts,
        Timeouts {
            request: None,
            backend_request: Some(Duration::from_secs(2))
        }
    );
}

#[test]
fn rule_names_are_kept_and_a_repeated_name_makes_the_later_rule_invalid() {
    let t = run_with_base(&route_yaml(
        "r",
        "  parentRefs: [{name: gw}]\n  rules:\n\
         \x20 - name: first\n    matches: [{path: {type: PathPrefix, value: /a}}]\n\
         \x20   backendRefs: [{name: svc, port: 80}]\n\
         \x20 - name: first\n    matches: [{path: {type: PathPrefix, value: /b}}]\n\
         \x20   backendRefs: [{name: svc, port: 80}]\n",
    ));
    let s = route(&t, "default", "r");
    let (ok, _, msg) = route_cond(s, C::Accepted);
    assert!(ok);
    assert!(
        msg.contains("rules[1]") && msg.contains("\"first\""),
        "{msg}"
    );
    let entries: Vec<_> = t.snapshot.ports[0].listeners[0].routes.entries().collect();
    let a = entries.iter().find(|e| e.rule.index == 0).unwrap();
    assert_eq!(a.rule.name.as_deref(), Some("first"));
    assert!(!a.rule.backends.backends.is_empty());
    // The repeat answers 500 (no backends) rather than routing.
    let b = entries.iter().find(|e| e.rule.index == 1).unwrap();
    assert!(b.rule.backends.backends.is_empty());
}

#[test]
fn session_persistence_is_translated_and_bad_values_make_the_rule_invalid() {
    use crate::model::session::{Carrier, SessionPolicy};
    let rule_of = |sp: &str| {
        let t = run_with_base(&route_yaml(
            "r",
            &format!(
                "  parentRefs: [{{name: gw}}]\n  rules:\n\
                 \x20 - sessionPersistence: {sp}\n\
                 \x20   backendRefs: [{{name: svc, port: 80}}]\n"
            ),
        ));
        let accepted = route_cond(route(&t, "default", "r"), C::Accepted);
        let session = t.snapshot.ports[0].listeners[0]
            .routes
            .entries()
            .next()
            .and_then(|e| e.rule.session.clone());
        (session, accepted)
    };
    let (session, accepted) = rule_of(
        "{sessionName: Sid, absoluteTimeout: 1h, idleTimeout: 10m, \
         cookieConfig: {lifetimeType: Permanent}}",
    );
    assert!(accepted.0, "{accepted:?}");
    assert_eq!(
        session,
        Some(SessionPolicy {
            carrier: Carrier::Cookie { permanent: true },
            name: "Sid".into(),
            absolute: Some(Duration::from_secs(3600)),
            idle: Some(Duration::from_secs(600)),
        })
    );
    // Header type, lower-cased; no timeouts.
    let (session, _) = rule_of("{type: Header, sessionName: X-Session}");
    let session = session.unwrap();
    assert_eq!(
        (session.carrier, session.name.as_str()),
        (Carrier::Header, "x-session")
    );
    // No name: one per route and rule.
    let (session, _) = rule_of("{}");
    let name = session.unwrap().name;
    assert!(
        name.starts_with("pier-session-") && name.len() == 21,
        "{name}"
    );
    // Gateway API v1.7's shape: the name and lifetime under `cookie`, or the name under
    // `header` (src/translate/session_shape.rs).
    let (session, accepted) = rule_of(
        "{type: Cookie, absoluteTimeout: 1h, cookie: {name: Shop, path: /, lifetimeType: Permanent}}",
    );
    assert!(accepted.0, "{accepted:?}");
    let session = session.unwrap();
    assert_eq!(
        (session.carrier, session.name.as_str()),
        (Carrier::Cookie { permanent: true }, "Shop")
    );
    let (session, _) = rule_of("{type: Header, header: {name: X-Cart}}");
    assert_eq!(session.unwrap().name, "x-cart");
    for bad in [
        "{idleTimeout: soon}",
        "{sessionName: \"a b\"}",
        "{cookieConfig: {lifetimeType: Permanent}}",
        "{cookie: {lifetimeType: Permanent}}",
    ] {
        let (session, (ok, reason, msg)) = rule_of(bad);
        assert!(session.is_none(), "{bad}");
        assert!(!ok, "{bad}");
        assert_eq!(reason, "UnsupportedValue");
        assert!(msg.contains("sessionPersistence"), "{bad}: {msg}");
    }
}

#[test]
fn experimental_fields_pier_does_not_implement_are_reported_not_ignored() {
    // useDefaultGateways: All is a route-wide request pier cannot honour.
    let t = run_with_base(&route_yaml(
        "dflt",
        "  parentRefs: [{name: gw}]\n  useDefaultGateways: All\n\
         \x20 rules: [{backendRefs: [{name: svc, port: 80}]}]\n",
    ));
    let (ok, reason, msg) = route_cond(route(&t, "default", "dflt"), C::Accepted);
    assert!(!ok);
    assert_eq!(reason, "UnsupportedValue");
    assert!(msg.contains("useDefaultGateways"), "{msg}");
}
