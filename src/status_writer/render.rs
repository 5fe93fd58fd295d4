//! Pure: the `status` pier wants on one object, given translation's desired status and the
//! object's observed status (as JSON), or `None` when the observed one already says it.
//!
//! Comparison ignores `lastTransitionTime` and fills the defaults upstream's CRDs apply
//! (`parentRef.group`/`kind`, `supportedKinds[].group`), so a status read back never looks
//! different from the one written (which would be a patch loop). A condition whose type and
//! status are unchanged keeps its observed `lastTransitionTime`; any other gets `now`.
//!
//! HTTPRoute `status.parents` and policy (BackendTLSPolicy, SecurityPolicy) `status.ancestors`
//! are atomic lists (no
//! list-map keys in upstream's CRDs, nor in pier's: a `parentRef` object cannot be a map key),
//! so an apply replaces all of one. pier therefore writes the whole list: the observed entries
//! it does not own, unchanged and in their order, then its own. It owns an entry when
//! `controllerName` is pier's and, with `--gateway`, the `parentRef` (`ancestorRef`) names
//! that Gateway (so two pier deployments that serve different Gateways of one class keep each
//! other's entries).

use serde_json::{Map, Value, json};

use super::version::BundleVersion;
use crate::model::ObjectRef;
use crate::translate::api::GATEWAY_GROUP;
use crate::translate::status::{
    BackendTlsPolicyStatus, GatewayClassStatus, GatewayStatus, HttpRouteStatus, ListenerSetStatus,
};

/// Everything besides the two statuses.
#[derive(Clone, Copy, Debug)]
pub struct Ctx<'a> {
    pub controller_name: &'a str,
    /// `--gateway`: the only Gateway this pier serves.
    pub gateway: Option<&'a ObjectRef>,
    pub version: &'a BundleVersion,
    pub supported_features: &'a [&'a str],
    /// The installed Gateway CRD has `status.addresses[].routability` (else it is left out:
    /// the API server would prune it, and the writer would patch forever).
    pub address_routability: bool,
    /// `lastTransitionTime` for conditions that change, as the API writes it.
    pub now: &'a Value,
}

/// `status` for a GatewayClass: translation's conditions (with `SupportedVersion` from the
/// installed CRDs' bundle version) and `supportedFeatures`.
pub fn gateway_class(
    desired: &GatewayClassStatus,
    observed: &Value,
    ctx: Ctx<'_>,
) -> Option<Value> {
    let mut conditions = to_json(&desired.conditions);
    if let Some(c) = conditions
        .as_array_mut()
        .and_then(|cs| cs.iter_mut().find(|c| c["type"] == "SupportedVersion"))
    {
        ctx.version.apply(c);
    }
    let features: Vec<Value> = ctx
        .supported_features
        .iter()
        .map(|name| json!({ "name": name }))
        .collect();
    let want = json!({ "conditions": conditions, "supportedFeatures": features });
    let have = pick(observed, &["conditions", "supportedFeatures"]);
    if same(&want, &have) {
        return None;
    }
    let mut want = want;
    stamp(&mut want["conditions"], &observed["conditions"], ctx.now);
    Some(want)
}

/// `status` for a Gateway: conditions, listeners and, when pier advertises any, addresses (left
/// alone otherwise, for whoever else writes them).
pub fn gateway(desired: &GatewayStatus, observed: &Value, ctx: Ctx<'_>) -> Option<Value> {
    let mut want = json!({
        "conditions": to_json(&desired.conditions),
        "listeners": to_json(&desired.listeners),
    });
    let mut fields = vec!["conditions", "listeners"];
    // Only once ListenerSets are in play (a Gateway CRD older than v1.5 would prune it, and
    // the writer would patch forever); kept up to date, down to 0, once written.
    if desired.attached_listener_sets > 0 || !observed["attachedListenerSets"].is_null() {
        want["attachedListenerSets"] = json!(desired.attached_listener_sets);
        fields.push("attachedListenerSets");
    }
    if !desired.addresses.is_empty() {
        want["addresses"] = to_json(&desired.addresses);
        if !ctx.address_routability {
            for a in want["addresses"].as_array_mut().into_iter().flatten() {
                a.as_object_mut().map(|a| a.remove("routability"));
            }
        }
        fields.push("addresses");
    }
    let have = pick(observed, &fields);
    if same(&want, &have) {
        return None;
    }
    stamp_with_listeners(&mut want, observed, ctx.now);
    Some(want)
}

/// `status` for a ListenerSet: conditions and listeners, as for a Gateway.
pub fn listener_set(desired: &ListenerSetStatus, observed: &Value, ctx: Ctx<'_>) -> Option<Value> {
    let mut want = json!({
        "conditions": to_json(&desired.conditions),
        "listeners": to_json(&desired.listeners),
    });
    let have = pick(observed, &["conditions", "listeners"]);
    if same(&want, &have) {
        return None;
    }
    stamp_with_listeners(&mut want, observed, ctx.now);
    Some(want)
}

/// `lastTransitionTime` for the conditions of the object and of each of its listeners.
fn stamp_with_listeners(want: &mut Value, observed: &Value, now: &Value) {
    stamp(&mut want["conditions"], &observed["conditions"], now);
    let observed_listeners = observed["listeners"].as_array();
    if let Some(listeners) = want["listeners"].as_array_mut() {
        for l in listeners {
            let before = observed_listeners
                .and_then(|ls| ls.iter().find(|o| o["name"] == l["name"]))
                .map_or(&Value::Null, |o| &o["conditions"]);
            stamp(&mut l["conditions"], before, now);
        }
    }
}

/// A status list shared by controllers: HTTPRoute `status.parents` (keyed by `parentRef`) and
/// policy `status.ancestors` (keyed by `ancestorRef`). Both are atomic lists of entries that
/// carry a `controllerName`.
#[derive(Clone, Copy, Debug)]
struct SharedList {
    field: &'static str,
    reference: &'static str,
}

const PARENTS: SharedList = SharedList {
    field: "parents",
    reference: "parentRef",
};

const ANCESTORS: SharedList = SharedList {
    field: "ancestors",
    reference: "ancestorRef",
};

/// `status` for an HTTPRoute in namespace `route_ns`: the entries of other controllers (and of
/// other pier deployments) as observed, then pier's, in `spec.parentRefs` order.
pub fn http_route(
    route_ns: &str,
    desired: &HttpRouteStatus,
    observed: &Value,
    ctx: Ctx<'_>,
) -> Option<Value> {
    merge(PARENTS, route_ns, to_json(&desired.parents), observed, ctx)
}

/// `status` for a GEP-713 policy (BackendTLSPolicy, SecurityPolicy) in namespace
/// `policy_ns`: one `ancestors` entry per Gateway pier applied it under, after the entries of
/// other controllers (as for Route parents).
pub fn policy(
    policy_ns: &str,
    desired: &BackendTlsPolicyStatus,
    observed: &Value,
    ctx: Ctx<'_>,
) -> Option<Value> {
    merge(
        ANCESTORS,
        policy_ns,
        to_json(&desired.ancestors),
        observed,
        ctx,
    )
}

/// The whole shared list: observed entries pier does not own, unchanged and in order, then
/// `want` (pier's). `None` when pier's observed entries already say `want`.
fn merge(list: SharedList, ns: &str, want: Value, observed: &Value, ctx: Ctx<'_>) -> Option<Value> {
    let observed = observed[list.field]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let (ours, others): (Vec<&Value>, Vec<&Value>) =
        observed.iter().partition(|e| owns_in(list, e, ns, ctx));
    let have = Value::Array(ours.iter().map(|e| (*e).clone()).collect());
    if same(&want, &have) {
        return None;
    }
    let mut want = want;
    if let Some(entries) = want.as_array_mut() {
        for e in entries {
            let key = reference(list, e);
            let before = ours
                .iter()
                .find(|o| reference(list, o) == key)
                .map_or(&Value::Null, |o| &o["conditions"]);
            stamp(&mut e["conditions"], before, ctx.now);
        }
    }
    let mut entries: Vec<Value> = others.into_iter().cloned().collect();
    entries.extend(want.as_array().into_iter().flatten().cloned());
    Some(json!({ list.field: entries }))
}

/// Whether pier owns a `status.parents` entry of a Route in `route_ns`.
pub fn owns(entry: &Value, route_ns: &str, ctx: Ctx<'_>) -> bool {
    owns_in(PARENTS, entry, route_ns, ctx)
}

/// Pier owns an entry when `controllerName` is pier's and, with `--gateway`, the entry's
/// reference names that Gateway (defaults: the object's namespace, kind Gateway).
fn owns_in(list: SharedList, entry: &Value, ns: &str, ctx: Ctx<'_>) -> bool {
    if entry["controllerName"].as_str() != Some(ctx.controller_name) {
        return false;
    }
    let Some(gateway) = ctx.gateway else {
        return true;
    };
    let p = reference(list, entry);
    p["group"] == GATEWAY_GROUP
        && p["kind"] == "Gateway"
        && p["namespace"].as_str().unwrap_or(ns) == gateway.namespace
        && p["name"].as_str() == Some(gateway.name.as_str())
}

/// An entry's `parentRef` / `ancestorRef`, normalized (defaults filled in).
fn reference(list: SharedList, entry: &Value) -> Value {
    normalize(&json!({ list.reference: &entry[list.reference] }))[list.reference].clone()
}

/// Equal once `lastTransitionTime`, nulls and API defaults are out of the way.
pub fn same(a: &Value, b: &Value) -> bool {
    normalize(a) == normalize(b)
}

/// The comparison form: no `lastTransitionTime`, no nulls, and the defaults of upstream's CRDs
/// filled in.
pub fn normalize(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                if k == "lastTransitionTime" || v.is_null() {
                    continue;
                }
                out.insert(k.clone(), normalize(v));
            }
            for r in ["parentRef", "ancestorRef"] {
                if let Some(Value::Object(p)) = out.get_mut(r) {
                    default(p, "group", GATEWAY_GROUP);
                    default(p, "kind", "Gateway");
                }
            }
            if let Some(Value::Array(kinds)) = out.get_mut("supportedKinds") {
                for k in kinds.iter_mut().filter_map(Value::as_object_mut) {
                    default(k, "group", GATEWAY_GROUP);
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(normalize).collect()),
        other => other.clone(),
    }
}

fn default(m: &mut Map<String, Value>, key: &str, value: &str) {
    m.entry(key)
        .or_insert_with(|| Value::String(value.to_string()));
}

/// Sets `lastTransitionTime` on each condition of `conditions`: the observed one when a
/// condition of the same type had the same status, else `now`.
pub fn stamp(conditions: &mut Value, observed: &Value, now: &Value) {
    let observed = observed.as_array().map_or(&[][..], Vec::as_slice);
    for c in conditions.as_array_mut().into_iter().flatten() {
        let kept = observed
            .iter()
            .find(|o| o["type"] == c["type"] && o["status"] == c["status"])
            .and_then(|o| o.get("lastTransitionTime"))
            .filter(|t| t.is_string());
        c["lastTransitionTime"] = kept.unwrap_or(now).clone();
    }
}

/// The named fields of an observed status (absent ones are null).
fn pick(observed: &Value, fields: &[&str]) -> Value {
    let mut out = Map::new();
    for f in fields {
        out.insert((*f).to_string(), observed[*f].clone());
    }
    Value::Object(out)
}

fn to_json<T: serde::Serialize + ?Sized>(v: &T) -> Value {
    serde_json::to_value(v).expect("status types serialize to JSON")
}
