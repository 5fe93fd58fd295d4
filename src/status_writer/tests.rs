use std::sync::{Arc, Mutex};

use kube::core::DeserializeGuard;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

use super::render::{self, Ctx};
use super::*;
use crate::translate::api::{
    GatewayClassConditionReason, GatewayClassConditionType, GatewayConditionReason,
    GatewayConditionType,
};
use crate::translate::status::{
    BackendTlsPolicyStatus, ClassCondition, ClassConditionReason, ClassConditionType,
    GatewayClassStatus, GatewayCondReason, GatewayCondType, GatewayCondition, GatewayStatus,
    HttpRouteStatus, ParentRef, PolicyAncestorStatus, PolicyCondition, PolicyConditionReason,
    PolicyConditionType, RouteCondition, RouteConditionReason, RouteConditionType,
    RouteParentStatus,
};

const OTHER: &str = "example.com/other-controller";
const T0: &str = "2020-01-01T00:00:00Z";
const NOW: &str = "2030-01-01T00:00:00Z";

fn ctx<'a>(now: &'a Value, version: &'a BundleVersion) -> Ctx<'a> {
    Ctx {
        controller_name: crate::DEFAULT_CONTROLLER_NAME,
        gateway: None,
        version,
        supported_features: SUPPORTED_FEATURES,
        address_routability: false,
        now,
    }
}

fn class_status(accepted: bool) -> GatewayClassStatus {
    let g = Some(3);
    GatewayClassStatus {
        generation: g,
        conditions: vec![
            ClassCondition::new(
                ClassConditionType::Class(GatewayClassConditionType::Accepted),
                accepted,
                ClassConditionReason::Class(if accepted {
                    GatewayClassConditionReason::Accepted
                } else {
                    GatewayClassConditionReason::InvalidParameters
                }),
                "m",
                g,
            ),
            ClassCondition::new(
                ClassConditionType::SupportedVersion,
                true,
                ClassConditionReason::SupportedVersion,
                "Gateway API version is supported",
                g,
            ),
        ],
    }
}

fn route_status(name: &str, accepted: bool) -> HttpRouteStatus {
    HttpRouteStatus {
        generation: Some(2),
        parents: vec![RouteParentStatus {
            parent_ref: ParentRef {
                group: None,
                kind: None,
                namespace: None,
                name: name.into(),
                section_name: None,
                port: None,
            },
            controller_name: crate::DEFAULT_CONTROLLER_NAME.into(),
            conditions: vec![RouteCondition::new(
                RouteConditionType::Accepted,
                accepted,
                if accepted {
                    RouteConditionReason::Accepted
                } else {
                    RouteConditionReason::NotAllowedByListeners
                },
                "m",
                Some(2),
            )],
        }],
    }
}

fn other_entry() -> Value {
    json!({
        "parentRef": { "name": "theirs" },
        "controllerName": OTHER,
        "conditions": [{ "type": "Accepted", "status": "True", "reason": "Accepted",
                         "message": "", "lastTransitionTime": T0 }],
    })
}

#[test]
fn class_status_says_version_and_features() {
    let now = json!(NOW);
    let v = BundleVersion::Supported("v1.5.1".into());
    let s = render::gateway_class(&class_status(true), &Value::Null, ctx(&now, &v)).unwrap();
    let c = &s["conditions"];
    assert_eq!(c[0]["type"], "Accepted");
    assert_eq!(c[0]["observedGeneration"], 3);
    assert_eq!(c[0]["lastTransitionTime"], NOW);
    assert_eq!(c[1]["type"], "SupportedVersion");
    assert_eq!(c[1]["status"], "True");
    assert_eq!(c[1]["message"], "Gateway API v1.5.1 is supported");
    let names: Vec<&str> = s["supportedFeatures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, SUPPORTED_FEATURES);

    let old = BundleVersion::Unsupported("v1.0.0".into());
    let s = render::gateway_class(&class_status(true), &Value::Null, ctx(&now, &old)).unwrap();
    assert_eq!(s["conditions"][1]["status"], "False");
    assert_eq!(s["conditions"][1]["reason"], "UnsupportedVersion");
}

#[test]
fn supported_features_are_sorted_and_unique() {
    let mut sorted = SUPPORTED_FEATURES.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted, SUPPORTED_FEATURES);
}

#[test]
fn a_status_read_back_is_not_written_again() {
    let now = json!(NOW);
    let later = json!("2031-01-01T00:00:00Z");
    let v = BundleVersion::Unknown;
    let written = render::gateway_class(&class_status(true), &Value::Null, ctx(&now, &v)).unwrap();
    assert_eq!(
        render::gateway_class(&class_status(true), &written, ctx(&later, &v)),
        None
    );

    let route = route_status("gw", true);
    let written = render::http_route("ns", &route, &Value::Null, ctx(&now, &v)).unwrap();
    // As upstream's CRDs store it: parentRef group and kind defaulted.
    let mut stored = written.clone();
    stored["parents"][0]["parentRef"]["group"] = json!("gateway.networking.k8s.io");
    stored["parents"][0]["parentRef"]["kind"] = json!("Gateway");
    assert_eq!(
        render::http_route("ns", &route, &stored, ctx(&later, &v)),
        None
    );

    let gw = GatewayStatus {
        generation: Some(1),
        addresses: vec![],
        conditions: vec![GatewayCondition::new(
            GatewayCondType::Gateway(GatewayConditionType::Accepted),
            true,
            GatewayCondReason::Gateway(GatewayConditionReason::Accepted),
            "ok",
            Some(1),
        )],
        listeners: vec![],
        attached_listener_sets: 0,
    };
    let written = render::gateway(&gw, &Value::Null, ctx(&now, &v)).unwrap();
    let mut stored = written.clone();
    stored["addresses"] = json!([{ "value": "10.0.0.1" }]);
    assert_eq!(render::gateway(&gw, &stored, ctx(&later, &v)), None);
}

#[test]
fn transition_time_moves_only_with_the_condition_status() {
    let now = json!(NOW);
    let v = BundleVersion::Unknown;
    let mut observed =
        render::gateway_class(&class_status(true), &Value::Null, ctx(&json!(T0), &v)).unwrap();
    // Same status, new message: written, but the transition time stays.
    observed["conditions"][0]["message"] = json!("old message");
    let s = render::gateway_class(&class_status(true), &observed, ctx(&now, &v)).unwrap();
    assert_eq!(s["conditions"][0]["lastTransitionTime"], T0);
    assert_eq!(s["conditions"][1]["lastTransitionTime"], T0);
    // Accepted flips: it gets the clock's time; SupportedVersion keeps its own.
    let s = render::gateway_class(&class_status(false), &observed, ctx(&now, &v)).unwrap();
    assert_eq!(s["conditions"][0]["lastTransitionTime"], NOW);
    assert_eq!(s["conditions"][1]["lastTransitionTime"], T0);
}

#[test]
fn route_status_keeps_other_controllers_entries() {
    let now = json!(NOW);
    let v = BundleVersion::Unknown;
    let mut ours_stale = serde_json::to_value(&route_status("gone", true).parents[0]).unwrap();
    ours_stale["conditions"][0]["lastTransitionTime"] = json!(T0);
    let observed = json!({ "parents": [other_entry(), ours_stale] });
    let s = render::http_route("ns", &route_status("gw", false), &observed, ctx(&now, &v)).unwrap();
    let parents = s["parents"].as_array().unwrap();
    assert_eq!(parents.len(), 2, "{s:#}");
    assert_eq!(parents[0], other_entry(), "kept as observed, first");
    assert_eq!(parents[1]["parentRef"]["name"], "gw");
    assert_eq!(parents[1]["controllerName"], crate::DEFAULT_CONTROLLER_NAME);
    assert_eq!(
        parents[1]["conditions"][0]["reason"],
        "NotAllowedByListeners"
    );
    assert_eq!(parents[1]["conditions"][0]["lastTransitionTime"], NOW);

    // Another controller changing its own entry is none of pier's business.
    let mut mine = s.clone();
    mine["parents"][0]["conditions"][0]["status"] = json!("False");
    assert_eq!(
        render::http_route("ns", &route_status("gw", false), &mine, ctx(&now, &v)),
        None
    );
}

fn policy_status(gateway: &str, accepted: bool) -> BackendTlsPolicyStatus {
    let reason = if accepted {
        PolicyConditionReason::Accepted
    } else {
        PolicyConditionReason::Invalid
    };
    BackendTlsPolicyStatus {
        generation: Some(4),
        ancestors: vec![PolicyAncestorStatus {
            ancestor_ref: ParentRef {
                group: Some(crate::translate::api::GATEWAY_GROUP.into()),
                kind: Some("Gateway".into()),
                namespace: Some("gw-ns".into()),
                name: gateway.into(),
                section_name: None,
                port: None,
            },
            controller_name: crate::DEFAULT_CONTROLLER_NAME.into(),
            conditions: vec![PolicyCondition::new(
                PolicyConditionType::Accepted,
                accepted,
                reason,
                "m",
                Some(4),
            )],
        }],
    }
}

#[test]
fn policy_status_writes_ancestors_and_keeps_other_controllers_entries() {
    let now = json!(NOW);
    let v = BundleVersion::Unknown;
    let theirs = json!({
        "ancestorRef": { "name": "theirs" },
        "controllerName": OTHER,
        "conditions": [{ "type": "Accepted", "status": "True", "reason": "Accepted",
                         "message": "", "lastTransitionTime": T0 }],
    });
    let observed = json!({ "ancestors": [theirs.clone()] });
    let c = ctx(&now, &v);
    let s = render::policy("app", &policy_status("edge", true), &observed, c).unwrap();
    let ancestors = s["ancestors"].as_array().unwrap();
    assert_eq!(ancestors.len(), 2, "{s:#}");
    assert_eq!(ancestors[0], theirs, "kept as observed, first");
    assert_eq!(ancestors[1]["ancestorRef"]["name"], "edge");
    assert_eq!(ancestors[1]["ancestorRef"]["namespace"], "gw-ns");
    assert_eq!(ancestors[1]["conditions"][0]["type"], "Accepted");
    assert_eq!(ancestors[1]["conditions"][0]["observedGeneration"], 4);
    assert_eq!(ancestors[1]["conditions"][0]["lastTransitionTime"], NOW);

    // Read back (the API server drops nothing pier compares): nothing to write.
    assert_eq!(
        render::policy("app", &policy_status("edge", true), &s, c),
        None
    );
    // The policy turns invalid: pier's entry changes, the other controller's stays.
    let s2 = render::policy("app", &policy_status("edge", false), &s, c).unwrap();
    assert_eq!(s2["ancestors"][0], theirs);
    assert_eq!(s2["ancestors"][1]["conditions"][0]["status"], "False");
    assert_eq!(s2["ancestors"][1]["conditions"][0]["reason"], "Invalid");
    assert_eq!(s2["ancestors"].as_array().unwrap().len(), 2);
}

#[test]
fn with_gateway_flag_pier_owns_only_that_gateways_entries() {
    let now = json!(NOW);
    let v = BundleVersion::Unknown;
    let gw = ObjectRef::new("ns", "gw");
    let c = Ctx {
        gateway: Some(&gw),
        ..ctx(&now, &v)
    };
    let entry = |ns: Option<&str>, name: &str| {
        json!({
            "parentRef": { "namespace": ns, "name": name },
            "controllerName": crate::DEFAULT_CONTROLLER_NAME,
        })
    };
    assert!(owns(&entry(None, "gw"), "ns", c));
    assert!(owns(&entry(Some("ns"), "gw"), "other", c));
    assert!(!owns(&entry(None, "gw"), "other", c));
    assert!(!owns(&entry(None, "gw2"), "ns", c));
    assert!(owns(&entry(None, "gw2"), "ns", ctx(&now, &v)));
    assert!(!owns(&other_entry(), "ns", ctx(&now, &v)));
}

#[test]
fn bundle_versions() {
    use BundleVersion::*;
    let v = |s| BundleVersion::from_annotation(Some(s));
    assert_eq!(v("v1.5.1"), Supported("v1.5.1".into()));
    assert_eq!(v("v1.2.0"), Supported("v1.2.0".into()));
    assert_eq!(v("v1.9.0-rc.1"), Supported("v1.9.0-rc.1".into()));
    assert_eq!(v("v1.1.1"), Unsupported("v1.1.1".into()));
    assert_eq!(v("v0.8.0"), Unsupported("v0.8.0".into()));
    assert_eq!(v("v2.0.0"), Unsupported("v2.0.0".into()));
    assert_eq!(v("next"), Unknown);
    assert_eq!(BundleVersion::from_annotation(None), Unknown);
    assert_eq!(v("v1.5.1").worst(v("v1.1.0")), Unsupported("v1.1.0".into()));
    assert_eq!(v("v1.5.1").worst(Unknown), Unknown);
}

#[test]
fn lease_names_are_dns_subdomains() {
    assert_eq!(
        default_name("pier.dev/gateway-controller"),
        "pier.dev-gateway-controller"
    );
    assert_eq!(default_name("Example.COM/My_Gw"), "example.com-my-gw");
    assert_eq!(default_name("///"), "pier");
}

// === the planner ===

struct Fixture {
    stores: Stores,
    routes: Writer<DeserializeGuard<crate::source::kube::HttpRouteObject>>,
}

fn fixture() -> Fixture {
    let routes = Writer::default();
    let stores = Stores {
        http_routes: routes.as_reader(),
        ..Stores::default()
    };
    Fixture { stores, routes }
}

fn stored_route(
    rv: &str,
    status: Option<Value>,
) -> DeserializeGuard<crate::source::kube::HttpRouteObject> {
    serde_json::from_value(json!({
        "metadata": { "name": "r", "namespace": "ns", "resourceVersion": rv, "generation": 2 },
        "spec": { "parentRefs": [{ "name": "gw" }] },
        "status": status,
    }))
    .unwrap()
}

fn planner() -> Planner {
    Planner::new(Settings::default())
}

fn desired() -> Arc<Statuses> {
    let mut s = Statuses::default();
    s.http_routes
        .insert(ObjectRef::new("ns", "r"), route_status("gw", true));
    // A route pier wants to write but that is not in the store: skipped.
    s.http_routes
        .insert(ObjectRef::new("ns", "missing"), route_status("gw", true));
    Arc::new(s)
}

#[test]
fn planner_skips_what_is_queued_applied_or_in_sync() {
    let mut f = fixture();
    let tracker = Mutex::new(Tracker::default());
    let now = json!(NOW);
    let desired = desired();
    let mut p = planner();
    f.routes
        .apply_watcher_event(&Event::Apply(stored_route("1", None)));

    let jobs = p.plan(&desired, &f.stores, &tracker, &now);
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let job = &jobs[0];
    assert_eq!(job.key, JobKey::HttpRoute(ObjectRef::new("ns", "r")));
    assert_eq!(job.resource_version.as_deref(), Some("1"));

    // Queued: not planned twice, and not planned for a new desired status that renders the
    // same (a new translation of an unchanged route).
    tracker
        .lock()
        .unwrap()
        .pending
        .insert(job.key.clone(), job.sent());
    assert!(p.plan(&desired, &f.stores, &tracker, &now).is_empty());
    let desired_again = self::desired();
    assert!(p.plan(&desired_again, &f.stores, &tracker, &now).is_empty());
    let desired = desired_again;

    // Applied (rv 1 -> 2) but the store still says 1: not sent again.
    let sent = tracker.lock().unwrap().pending.remove(&job.key).unwrap();
    tracker.lock().unwrap().applied.insert(
        job.key.clone(),
        Applied {
            sent,
            after: Some("2".into()),
            rejected: false,
        },
    );
    assert!(p.plan(&desired, &f.stores, &tracker, &now).is_empty());

    // Someone else overwrote it (rv 3): planned again.
    f.routes.apply_watcher_event(&Event::Apply(stored_route(
        "3",
        Some(json!({ "parents": [] })),
    )));
    assert_eq!(p.plan(&desired, &f.stores, &tracker, &now).len(), 1);

    // The store has what pier wants: in sync, and remembered as such for this desired status.
    f.routes
        .apply_watcher_event(&Event::Apply(stored_route("4", Some(job.status.clone()))));
    assert!(p.plan(&desired, &f.stores, &tracker, &now).is_empty());
    assert_eq!(
        p.memo.synced.get(&job.key).map(String::as_str),
        Some("4"),
        "found in sync"
    );
}

#[test]
fn gateway_addresses_are_written_when_pier_advertises_some() {
    let now = json!(NOW);
    let v = BundleVersion::Unknown;
    let gw = GatewayStatus {
        generation: Some(1),
        addresses: vec![crate::translate::addresses::StatusAddress {
            type_: "IPAddress",
            value: "192.0.2.10".into(),
            routability: "",
        }],
        conditions: vec![],
        listeners: vec![],
        attached_listener_sets: 0,
    };
    let written = render::gateway(&gw, &Value::Null, ctx(&now, &v)).unwrap();
    assert_eq!(
        written["addresses"],
        json!([{ "type": "IPAddress", "value": "192.0.2.10" }])
    );
    // Read back unchanged: nothing to write.
    assert_eq!(render::gateway(&gw, &written, ctx(&now, &v)), None);
    // Someone else's address is replaced by pier's.
    let mut stored = written.clone();
    stored["addresses"] = json!([{ "type": "IPAddress", "value": "10.0.0.1" }]);
    assert!(render::gateway(&gw, &stored, ctx(&now, &v)).is_some());
    // A Gateway CRD with `routability` (v1.7 experimental): every address says it.
    let with = Ctx {
        address_routability: true,
        ..ctx(&now, &v)
    };
    let written = render::gateway(&gw, &Value::Null, with).unwrap();
    assert_eq!(
        written["addresses"],
        json!([{ "type": "IPAddress", "value": "192.0.2.10", "routability": "" }])
    );
    assert_eq!(render::gateway(&gw, &written, with), None);
}

#[test]
fn attached_listener_sets_is_written_once_sets_attach_and_kept_down_to_zero() {
    let now = json!(NOW);
    let v = BundleVersion::Unknown;
    let mut gw = GatewayStatus {
        generation: Some(1),
        ..GatewayStatus::default()
    };
    // No sets ever: the field is not written (an older Gateway CRD would prune it).
    let written = render::gateway(&gw, &Value::Null, ctx(&now, &v)).unwrap();
    assert!(written.get("attachedListenerSets").is_none(), "{written}");
    gw.attached_listener_sets = 2;
    let written = render::gateway(&gw, &Value::Null, ctx(&now, &v)).unwrap();
    assert_eq!(written["attachedListenerSets"], 2);
    assert_eq!(render::gateway(&gw, &written, ctx(&now, &v)), None);
    // The sets went away: 0 replaces the stale count.
    gw.attached_listener_sets = 0;
    let again = render::gateway(&gw, &written, ctx(&now, &v)).unwrap();
    assert_eq!(again["attachedListenerSets"], 0);
}

/// SecurityPolicy `status.ancestors` are merged like BackendTLSPolicy's: another controller's
/// entries (and pier's for a Gateway another pier serves) are kept as observed.
#[test]
fn security_policy_status_keeps_other_controllers_ancestors() {
    let now = json!(NOW);
    let v = BundleVersion::Unknown;
    let theirs = json!({
        "ancestorRef": { "group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "theirs" },
        "controllerName": OTHER,
        "conditions": [{ "type": "Accepted", "status": "False", "reason": "Invalid",
                         "message": "theirs", "lastTransitionTime": T0 }],
    });
    let stale_ours = json!({
        "ancestorRef": { "name": "old-gateway", "namespace": "gw-ns" },
        "controllerName": crate::DEFAULT_CONTROLLER_NAME,
        "conditions": [{ "type": "Accepted", "status": "True", "reason": "Accepted",
                         "message": "", "lastTransitionTime": T0 }],
    });
    let observed = json!({ "ancestors": [theirs.clone(), stale_ours] });
    let c = ctx(&now, &v);
    let want = policy_status("edge", true);
    let s = render::policy("app", &want, &observed, c).unwrap();
    let ancestors = s["ancestors"].as_array().unwrap();
    assert_eq!(
        ancestors.len(),
        2,
        "pier's stale entry goes, theirs stays: {s:#}"
    );
    assert_eq!(ancestors[0], theirs);
    assert_eq!(ancestors[1]["ancestorRef"]["name"], "edge");
    assert_eq!(
        ancestors[1]["controllerName"],
        crate::DEFAULT_CONTROLLER_NAME
    );
    assert_eq!(ancestors[1]["conditions"][0]["lastTransitionTime"], NOW);
    assert_eq!(render::policy("app", &want, &s, c), None);

    // With --gateway, pier's entries for other Gateways belong to another pier: kept.
    let gw = ObjectRef::new("gw-ns", "edge");
    let only_edge = Ctx {
        gateway: Some(&gw),
        ..c
    };
    let other_pier = json!({
        "ancestorRef": { "name": "west", "namespace": "gw-ns" },
        "controllerName": crate::DEFAULT_CONTROLLER_NAME,
        "conditions": [],
    });
    let observed = json!({ "ancestors": [other_pier.clone()] });
    let s = render::policy("app", &want, &observed, only_edge).unwrap();
    assert_eq!(s["ancestors"][0], other_pier);
    assert_eq!(s["ancestors"][1]["ancestorRef"]["name"], "edge");
}

#[test]
fn security_policy_jobs_patch_pier_dev_with_the_merged_resource_version() {
    let policies = Writer::<DeserializeGuard<crate::translate::api::SecurityPolicy>>::default();
    let stores = Stores {
        security_policies: policies.as_reader(),
        ..Stores::default()
    };
    let mut policies = policies;
    policies.apply_watcher_event(&Event::Apply(
        serde_json::from_value(json!({
            "apiVersion": "pier.dev/v1alpha1",
            "kind": "SecurityPolicy",
            "metadata": { "name": "auth", "namespace": "app", "resourceVersion": "7",
                          "generation": 4 },
            "spec": { "targetRefs": [{ "group": "gateway.networking.k8s.io",
                                       "kind": "HTTPRoute", "name": "web" }] },
        }))
        .unwrap(),
    ));
    let mut desired = Statuses::default();
    desired
        .security_policies
        .insert(ObjectRef::new("app", "auth"), policy_status("edge", true));
    // Not in the store (deleted, or its CRD is gone): nothing to write.
    desired
        .security_policies
        .insert(ObjectRef::new("app", "gone"), policy_status("edge", true));
    let desired = Arc::new(desired);
    let tracker = Mutex::new(Tracker::default());
    let now = json!(NOW);
    let mut p = planner();
    let jobs = p.plan(&desired, &stores, &tracker, &now);
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let job = &jobs[0];
    assert_eq!(
        job.key,
        JobKey::SecurityPolicy(ObjectRef::new("app", "auth"))
    );
    assert_eq!(job.resource_version.as_deref(), Some("7"));
    assert_eq!(job.status["ancestors"][0]["ancestorRef"]["name"], "edge");
    let ar = job.key.api_resource();
    assert_eq!(
        (
            ar.group.as_str(),
            ar.version.as_str(),
            ar.api_version.as_str()
        ),
        ("pier.dev", "v1alpha1", "pier.dev/v1alpha1")
    );
    assert_eq!(
        (ar.kind.as_str(), ar.plural.as_str()),
        ("SecurityPolicy", "securitypolicies")
    );
    assert_eq!(job.key.object(), (Some("app"), "auth"));

    // Once the store holds what pier wrote, nothing more.
    policies.apply_watcher_event(&Event::Apply(
        serde_json::from_value(json!({
            "apiVersion": "pier.dev/v1alpha1",
            "kind": "SecurityPolicy",
            "metadata": { "name": "auth", "namespace": "app", "resourceVersion": "8",
                          "generation": 4 },
            "spec": { "targetRefs": [{ "group": "gateway.networking.k8s.io",
                                       "kind": "HTTPRoute", "name": "web" }] },
            "status": job.status,
        }))
        .unwrap(),
    ));
    assert!(p.plan(&desired, &stores, &tracker, &now).is_empty());
}

#[test]
fn security_policy_patches_are_counted_as_their_kind() {
    let mut reg = prometheus_client::registry::Registry::default();
    let m = StatusMetrics::register(&mut reg);
    m.count(PatchKind::SecurityPolicy, PatchResult::Ok);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
    assert!(
        text.contains("status_patches_total{kind=\"SecurityPolicy\",result=\"Ok\"} 1"),
        "{text}"
    );
}

#[test]
fn cluster_trust_bundle_is_claimed_only_where_the_api_is_served() {
    let with = supported_features(true, true);
    assert!(with.contains(&"ClusterTrustBundle"));
    assert!(with.contains(&"GatewayAddressRoutability"));
    let mut sorted = with.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, with);
    assert_eq!(supported_features(false, false), SUPPORTED_FEATURES);
}

/// GEP-5093's field is looked for where v1.7's experimental Gateway CRD has it: the served
/// v1's `status.addresses[].routability`.
#[test]
fn a_gateway_crd_with_status_address_routability_is_recognised() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd = |address: Value, served: bool| -> CustomResourceDefinition {
        serde_json::from_value(json!({
            "metadata": { "name": "gateways.gateway.networking.k8s.io" },
            "spec": {
                "group": "gateway.networking.k8s.io",
                "names": { "kind": "Gateway", "plural": "gateways" },
                "scope": "Namespaced",
                "versions": [{
                    "name": "v1", "served": served, "storage": true,
                    "schema": { "openAPIV3Schema": { "type": "object", "properties": {
                        "status": { "type": "object", "properties": {
                            "addresses": { "type": "array", "items": address }
                        }}
                    }}}
                }]
            }
        }))
        .unwrap()
    };
    let with = json!({ "type": "object", "properties": {
        "type": { "type": "string" }, "value": { "type": "string" },
        "routability": { "type": "string" } } });
    let without = json!({ "type": "object", "properties": {
        "type": { "type": "string" }, "value": { "type": "string" } } });
    assert!(version::has_address_routability(&crd(with.clone(), true)));
    assert!(!version::has_address_routability(&crd(with, false)));
    assert!(!version::has_address_routability(&crd(without, true)));
}
