//! Gateways as pier reads them: the upstream kind, decoded into pier's own
//! [`Gateway`](crate::translate::api::Gateway) so that `spec.mesh` (on a mesh-patched CRD)
//! survives, with the names of the listeners that carry `filters` (GEP-5224, which the
//! generated types drop: translation refuses those listeners). A newtype, so that translation
//! stays free of kube traits. ListenerSets the same way ([`ListenerSetObject`]).

use std::borrow::Cow;

use kube::Resource;
use kube::core::{NamespaceResourceScope, ObjectMeta};
use serde::{Deserialize, Deserializer};

use crate::translate::api::{
    Gateway, GrpcRoute, HttpRoute, ListenerSet, UpstreamGateway, XBackendTrafficPolicy,
};
use crate::translate::resources::listeners_with_filters;

/// A Gateway, and the `filters` of its listeners that have them.
#[derive(Clone, Debug)]
pub struct GatewayObject(pub Gateway, pub Filtered);

/// Listener names and their `filters` (`crate::translate::resources::listeners_with_filters`).
pub type Filtered = Vec<(
    String,
    Result<crate::translate::api::ListenerFilters, String>,
)>;

impl<'de> Deserialize<'de> for GatewayObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        with_filters(d, |value, gateway: &mut Gateway| {
            gateway.spec.address_routability = address_routability(value);
        })
        .map(|(gateway, filtered)| Self(gateway, filtered))
    }
}

/// `T` decoded through JSON, with the `filters` of its listeners that have them; `more`
/// reads other fields the typed decoding drops.
fn with_filters<'de, D: Deserializer<'de>, T: serde::de::DeserializeOwned>(
    d: D,
    more: impl FnOnce(&serde_json::Value, &mut T),
) -> Result<(T, Filtered), D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    let filtered = listeners_with_filters(&value);
    let mut object = T::deserialize(&value).map_err(serde::de::Error::custom)?;
    more(&value, &mut object);
    Ok((object, filtered))
}

/// `spec.addresses[].routability` by index (`""` where unset).
fn address_routability(gateway: &serde_json::Value) -> Vec<String> {
    let addresses = gateway["spec"]["addresses"].as_array();
    addresses
        .into_iter()
        .flatten()
        .map(|a| a["routability"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// An HTTPRoute read in either shape of `sessionPersistence` (v1.6, v1.7:
/// `crate::translate::session_shape`).
#[derive(Clone, Debug)]
pub struct HttpRouteObject(pub HttpRoute);

/// A GRPCRoute, the same way.
#[derive(Clone, Debug)]
pub struct GrpcRouteObject(pub GrpcRoute);

/// Deref to the decoded object and `Resource` as its kind (`$kind`'s group, version, plural).
macro_rules! object_of {
    ($object:ident, $target:ty, $kind:ty) => {
        impl std::ops::Deref for $object {
            type Target = $target;

            fn deref(&self) -> &$target {
                &self.0
            }
        }

        impl std::ops::DerefMut for $object {
            fn deref_mut(&mut self) -> &mut $target {
                &mut self.0
            }
        }

        impl Resource for $object {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;

            fn kind(dt: &()) -> Cow<'_, str> {
                <$kind>::kind(dt)
            }

            fn group(dt: &()) -> Cow<'_, str> {
                <$kind>::group(dt)
            }

            fn version(dt: &()) -> Cow<'_, str> {
                <$kind>::version(dt)
            }

            fn plural(dt: &()) -> Cow<'_, str> {
                <$kind>::plural(dt)
            }

            fn meta(&self) -> &ObjectMeta {
                &self.0.metadata
            }

            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.0.metadata
            }
        }
    };
}

/// Routes (and XBackendTrafficPolicy) decode through JSON, `sessionPersistence` folded in
/// first by `$normalize`.
macro_rules! route_object {
    ($object:ident, $route:ident, $normalize:path) => {
        impl<'de> Deserialize<'de> for $object {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let mut value = serde_json::Value::deserialize(d)?;
                $normalize(&mut value);
                let route = $route::deserialize(value).map_err(serde::de::Error::custom)?;
                Ok(Self(route))
            }
        }

        object_of!($object, $route, $route);
    };
}

route_object!(
    HttpRouteObject,
    HttpRoute,
    crate::translate::session_shape::normalize
);
route_object!(
    GrpcRouteObject,
    GrpcRoute,
    crate::translate::session_shape::normalize
);
route_object!(
    XBackendTrafficPolicyObject,
    XBackendTrafficPolicy,
    crate::translate::session_shape::normalize_policy
);

/// An XBackendTrafficPolicy read in either shape of `sessionPersistence`.
#[derive(Clone, Debug)]
pub struct XBackendTrafficPolicyObject(pub XBackendTrafficPolicy);

/// A ListenerSet, and the `filters` of its listeners that have them.
#[derive(Clone, Debug)]
pub struct ListenerSetObject(pub ListenerSet, pub Filtered);

impl<'de> Deserialize<'de> for ListenerSetObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        with_filters(d, |_, _| {}).map(|(set, filtered)| Self(set, filtered))
    }
}

object_of!(ListenerSetObject, ListenerSet, ListenerSet);
object_of!(GatewayObject, Gateway, UpstreamGateway);

#[cfg(test)]
mod tests {
    use super::*;

    /// What the API server sends for a Gateway and a ListenerSet with v1.7's experimental
    /// CRDs: the listeners' `filters` are read, though the typed objects drop the field; a
    /// filter that does not decode is kept as its error (the listener is refused).
    #[test]
    fn listener_filters_are_read_before_the_typed_decoding_drops_them() {
        let listeners = serde_json::json!([
            { "name": "authed", "protocol": "HTTP", "port": 80,
              "filters": { "requests": [{ "type": "ExternalAuth", "externalAuth": {
                  "protocol": "HTTP", "backendRef": { "name": "authz", "port": 9000 } } }] } },
            { "name": "open", "protocol": "HTTP", "port": 81 },
            { "name": "bad", "protocol": "HTTP", "port": 82,
              "filters": { "requests": [{ "type": 7 }] } },
        ]);
        let gw: GatewayObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": { "name": "g", "namespace": "n" },
            "spec": { "gatewayClassName": "pier", "listeners": listeners },
        }))
        .unwrap();
        let names: Vec<&str> = gw.1.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["authed", "bad"]);
        let authed = gw.1[0].1.as_ref().unwrap();
        let ext = authed.requests[0].external_auth.as_ref().unwrap();
        assert_eq!(ext.backend_ref.name, "authz");
        assert!(gw.1[1].1.as_ref().unwrap_err().contains("invalid type"));
        assert_eq!(gw.spec.base.listeners.len(), 3);
        let set: ListenerSetObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
            "metadata": { "name": "s", "namespace": "n" },
            "spec": { "parentRef": { "name": "g" }, "listeners": listeners },
        }))
        .unwrap();
        assert_eq!(set.1.len(), 2);
        assert_eq!(set.1[0].1, gw.1[0].1);
        // GEP-5093's `routability`, by address index, also dropped by the typed decoding.
        let gw: GatewayObject = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "g", "namespace": "n" },
            "spec": { "gatewayClassName": "pier", "listeners": [],
                      "addresses": [{ "value": "192.0.2.1" },
                                    { "value": "192.0.2.2", "routability": "Cluster" }] },
        }))
        .unwrap();
        assert_eq!(gw.spec.address_routability, ["", "Cluster"]);
        // An XBackendTrafficPolicy's v1.7 `sessionPersistence` shape, folded in before the
        // typed decoding (which has v1.6's fields).
        let p: XBackendTrafficPolicyObject = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "p", "namespace": "n" },
            "spec": { "targetRefs": [{ "group": "", "kind": "Service", "name": "s" }],
                      "sessionPersistence": { "type": "Header", "header": { "name": "X-S" } } },
        }))
        .unwrap();
        let sp = p.spec.session_persistence.as_ref().unwrap();
        assert_eq!(sp.session_name.as_deref(), Some("X-S"));
        // A decoding error still says what is wrong.
        let bad = serde_json::from_value::<GatewayObject>(serde_json::json!({
            "metadata": { "name": "g" }, "spec": { "listeners": "none" },
        }));
        assert!(bad.unwrap_err().to_string().contains("invalid type"));
    }
}
