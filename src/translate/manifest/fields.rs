//! Fields a manifest has that its kind does not: the path of each (`spec.rules[0].backendRef`,
//! as `kubectl --validate=strict` names it) and, when one is close, the field the author most
//! likely meant, read from the kind's JSON schema (the same generated types pier decodes into).
//!
//! Decoding (`tree::Tree::decode`) reports every map key the typed struct skipped; the schema is generated once per kind, and only when a document has an unknown field.

use std::sync::OnceLock;

use serde_json::Value;

use super::super::field_path::Step;

/// Which schema to look suggestions up in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SchemaOf {
    GatewayClass,
    Gateway,
    HttpRoute,
    GrpcRoute,
    TlsRoute,
    TcpRoute,
    UdpRoute,
    ListenerSet,
    ReferenceGrant,
    BackendTlsPolicy,
    Namespace,
    Service,
    Secret,
    ConfigMap,
    EndpointSlice,
    ClusterTrustBundle,
    SecurityPolicy,
    BackendTrafficPolicy,
    ClientTrafficPolicy,
    XBackendTrafficPolicy,
}

/// The field of the object at `path`'s parent nearest to its last key (`backendRefs` for
/// `backendRef`): at most 2 edits (1 for names of up to 4 letters) ignoring case.
pub(super) fn nearest(of: SchemaOf, path: &[Step]) -> Option<String> {
    let (Step::Key(unknown), parent) = path.split_last()? else {
        return None;
    };
    let mut at = schema(of);
    for step in parent {
        at = child(at, step)?;
    }
    let mut known = Vec::new();
    properties(at, &mut known);
    let unknown_lower = unknown.to_ascii_lowercase();
    let bound = if unknown.chars().count() <= 4 { 1 } else { 2 };
    known
        .into_iter()
        .filter(|k| k != unknown)
        .map(|k| {
            let d = strsim::osa_distance(&unknown_lower, &k.to_ascii_lowercase());
            (d, k)
        })
        .filter(|(d, _)| *d <= bound)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// The schema of the field `step` below `at` (through options, unions and array items).
fn child<'v>(at: &'v Value, step: &Step) -> Option<&'v Value> {
    match step {
        Step::Key(key) => {
            if let Some(v) = at.get("properties").and_then(|p| p.get(key)) {
                return Some(v);
            }
            if let Some(v) = at.get("additionalProperties").filter(|v| v.is_object()) {
                return Some(v);
            }
        }
        Step::Index(_) => {
            if let Some(v) = at.get("items").filter(|v| v.is_object()) {
                return Some(v);
            }
        }
    }
    ["anyOf", "oneOf", "allOf"]
        .iter()
        .filter_map(|k| at.get(*k)?.as_array())
        .flatten()
        .find_map(|alt| child(alt, step))
}

/// Every property name `at` (or one of its alternatives) has.
fn properties(at: &Value, out: &mut Vec<String>) {
    if let Some(p) = at.get("properties").and_then(Value::as_object) {
        out.extend(p.keys().cloned());
    }
    for alt in ["anyOf", "oneOf", "allOf"]
        .iter()
        .filter_map(|k| at.get(*k)?.as_array())
        .flatten()
    {
        properties(alt, out);
    }
}

/// The kind's JSON schema, every subschema inlined; made once.
fn schema(of: SchemaOf) -> &'static Value {
    // One slot per kind: the last variant's index + 1 (a new kind goes last in `SchemaOf`).
    const KINDS: usize = SchemaOf::XBackendTrafficPolicy as usize + 1;
    static SCHEMAS: [OnceLock<Value>; KINDS] = [const { OnceLock::new() }; KINDS];
    SCHEMAS[of as usize].get_or_init(|| match of {
        SchemaOf::GatewayClass => make::<super::GatewayClass>(),
        SchemaOf::Gateway => make::<super::super::api::UpstreamGateway>(),
        SchemaOf::HttpRoute => make::<super::HttpRoute>(),
        SchemaOf::GrpcRoute => make::<super::GrpcRoute>(),
        SchemaOf::TlsRoute => make::<super::TlsRoute>(),
        SchemaOf::TcpRoute => make::<super::TcpRoute>(),
        SchemaOf::UdpRoute => make::<super::UdpRoute>(),
        SchemaOf::ListenerSet => make::<super::ListenerSet>(),
        SchemaOf::ReferenceGrant => make::<super::ReferenceGrant>(),
        SchemaOf::BackendTlsPolicy => make::<super::BackendTlsPolicy>(),
        SchemaOf::Namespace => make::<super::Namespace>(),
        SchemaOf::Service => make::<super::Service>(),
        SchemaOf::Secret => make::<super::Secret>(),
        SchemaOf::ConfigMap => make::<super::ConfigMap>(),
        SchemaOf::EndpointSlice => make::<super::EndpointSlice>(),
        SchemaOf::ClusterTrustBundle => make::<super::ClusterTrustBundle>(),
        SchemaOf::SecurityPolicy => make::<super::SecurityPolicy>(),
        SchemaOf::BackendTrafficPolicy => make::<crate::translate::api::BackendTrafficPolicy>(),
        SchemaOf::ClientTrafficPolicy => make::<crate::translate::api::ClientTrafficPolicy>(),
        SchemaOf::XBackendTrafficPolicy => make::<crate::translate::api::XBackendTrafficPolicy>(),
    })
}

fn make<T: schemars::JsonSchema>() -> Value {
    schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}
