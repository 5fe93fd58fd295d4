//! Status serialization: condition strings, object shapes, ordering.

use super::*;

#[test]
fn condition_serializes_status_as_true_false_strings() {
    let c = RouteCondition::new(
        RouteConditionType::ResolvedRefs,
        false,
        RouteConditionReason::BackendNotFound,
        "missing",
        Some(3),
    );
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "type": "ResolvedRefs", "status": "False", "reason": "BackendNotFound",
            "message": "missing", "observedGeneration": 3
        })
    );
}

#[test]
fn condition_without_generation_omits_observed_generation() {
    let c = ClassCondition::new(
        ClassConditionType::SupportedVersion,
        true,
        ClassConditionReason::SupportedVersion,
        "",
        None,
    );
    let v = serde_json::to_value(&c).unwrap();
    assert!(v.get("observedGeneration").is_none());
    assert_eq!(v["type"], "SupportedVersion");
}

#[test]
fn upstream_condition_enums_serialize_by_name() {
    let c = ListenerCondition::new(
        ListenerConditionType::Conflicted,
        true,
        ListenerReason::HostnameConflict,
        "",
        Some(1),
    );
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(v["type"], "Conflicted");
    assert_eq!(v["reason"], "HostnameConflict");
}

#[test]
fn objects_are_classes_then_gateways_then_routes_with_kinds() {
    let mut s = Statuses::default();
    s.http_routes
        .insert(ObjectRef::new("a", "r"), HttpRouteStatus::default());
    s.gateways
        .insert(ObjectRef::new("a", "g"), GatewayStatus::default());
    s.gateway_classes
        .insert("c".into(), GatewayClassStatus::default());
    let objs = s.objects();
    let kinds: Vec<_> = objs.iter().map(|o| o.kind).collect();
    assert_eq!(
        kinds,
        vec![
            StatusKind::GatewayClass,
            StatusKind::Gateway,
            StatusKind::HttpRoute
        ]
    );
    let v = serde_json::to_value(&objs[2]).unwrap();
    assert_eq!(v["kind"], "HTTPRoute");
    assert_eq!(v["apiVersion"], GATEWAY_API_VERSION);
    assert_eq!(v["metadata"]["namespace"], "a");
    assert_eq!(v["status"]["parents"], serde_json::json!([]));
    let v = serde_json::to_value(&objs[0]).unwrap();
    assert!(v["metadata"].get("namespace").is_none());
}

#[test]
fn an_object_with_unknown_fields_says_so_in_its_status() {
    use crate::translate::test_support::{cond_of, gateway, route, run_with_base};
    let t = run_with_base(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
         metadata: {name: web, namespace: default, generation: 4}\n\
         spec:\n  parentRefs: [{name: gw}]\n  rules:\n  - backendRef: [{name: svc, port: 80}]\n",
    );
    let r = route(&t, "default", "web");
    let (status, reason, message) =
        cond_of(&r.parents[0].conditions, RouteConditionType::UnknownFields);
    assert!(status);
    assert_eq!(reason, "UnknownFields");
    assert_eq!(
        message,
        "fields this kind does not have, ignored: spec.rules[0].backendRef (did you mean \
         backendRefs?)"
    );
    let v = serde_json::to_value(&r.parents[0].conditions).unwrap();
    assert!(
        v.to_string().contains(r#""type":"pier.dev/UnknownFields""#),
        "{v}"
    );
    // The Gateway has none, so says nothing of them.
    let g = gateway(&t, "default", "gw");
    assert!(
        g.conditions
            .iter()
            .all(|c| c.type_ != GatewayCondType::UnknownFields)
    );
}
