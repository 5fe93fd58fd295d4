//! The Gateway API CustomResourceDefinitions pier reads, generated from the `gateway-api`
//! crate's types (`kube::CustomResourceExt::crd()`), so they match what pier deserializes,
//! and pier's own ([`own`]: SecurityPolicy, `pier.dev/v1alpha1`), generated the same way from
//! `crate::translate::api`.
//!
//! These are not the upstream release YAMLs: they carry only the `v1` version, no printer
//! columns, short names, defaults or CEL rules (kopium's `--schema=derived` does not keep
//! them). They are structural schemas a real kube-apiserver accepts, which is what tests and
//! small clusters need. `config/crds/` holds them as YAML (pier's own under `config/crds/pier/`);
//! `tests/crds.rs` keeps the files equal to this module's output.
//!
//! [`gateway_with_mesh`] adds a `spec.mesh` stanza to the Gateway schema, for the
//! out-of-cluster gateway proposals (GEP-3951, GEP-3792). Without it the API server prunes
//! `spec.mesh`, because CRDs under `apiextensions.k8s.io/v1` drop unknown fields.

use std::collections::BTreeMap;

use gateway_api::{
    backendtlspolicies::BackendTlsPolicy, gatewayclasses::GatewayClass, gateways::Gateway,
    grpcroutes::GrpcRoute, httproutes::HttpRoute, listenersets::ListenerSet,
    referencegrants::ReferenceGrant, tlsroutes::TlsRoute,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::CustomResourceExt;

use crate::translate::api::{
    BackendTrafficPolicy, ClientTrafficPolicy, SecurityPolicy, TcpRoute, UdpRoute,
};

/// The Gateway API release the `gateway-api` crate's types were generated from.
pub const BUNDLE_VERSION: &str = "v1.5.1";
/// The release channel of these CRDs.
pub const CHANNEL: &str = "standard";

const BUNDLE_VERSION_ANNOTATION: &str = "gateway.networking.k8s.io/bundle-version";
const CHANNEL_ANNOTATION: &str = "gateway.networking.k8s.io/channel";
/// CRDs in `*.k8s.io` groups are rejected without this annotation (KEP-1111); the value is the
/// one upstream's Gateway API CRDs carry.
const API_APPROVED_ANNOTATION: &str = "api-approved.kubernetes.io";
const API_APPROVED: &str = "https://github.com/kubernetes-sigs/gateway-api/pull/3328";

/// GatewayClass, Gateway, ListenerSet, HTTPRoute, GRPCRoute, TLSRoute, TCPRoute, UDPRoute,
/// ReferenceGrant, BackendTLSPolicy and XBackendTrafficPolicy (experimental), in that order. TCPRoute and UDPRoute `v1` (Gateway API
/// v1.7) are pier's own types (`crate::translate::api::TcpRoute`, `UdpRoute`): the crate has
/// only v1alpha2.
pub fn all() -> Vec<CustomResourceDefinition> {
    [
        GatewayClass::crd(),
        Gateway::crd(),
        ListenerSet::crd(),
        HttpRoute::crd(),
        GrpcRoute::crd(),
        TlsRoute::crd(),
        TcpRoute::crd(),
        UdpRoute::crd(),
        ReferenceGrant::crd(),
        BackendTlsPolicy::crd(),
        crate::translate::api::XBackendTrafficPolicy::crd(),
    ]
    .into_iter()
    .map(annotate)
    .collect()
}

/// pier's own CRDs (group `pier.dev`): SecurityPolicy, BackendTrafficPolicy,
/// ClientTrafficPolicy. Not in a `*.k8s.io` group, so no
/// API-approval annotation, and not part of a Gateway API bundle, so none of its annotations.
pub fn own() -> Vec<CustomResourceDefinition> {
    vec![
        SecurityPolicy::crd(),
        BackendTrafficPolicy::crd(),
        ClientTrafficPolicy::crd(),
    ]
}

/// What `pier crds` prints: [`all`], with the Gateway CRD replaced by
/// [`gateway_with_mesh`] when `mesh`, then [`own`].
pub fn bundle(mesh: bool) -> Vec<CustomResourceDefinition> {
    let mut crds = all();
    if mesh {
        let with_mesh = gateway_with_mesh();
        for crd in &mut crds {
            if crd.metadata.name == with_mesh.metadata.name {
                *crd = with_mesh.clone();
            }
        }
    }
    crds.extend(own());
    crds
}

/// The Gateway CRD with a `spec.mesh` property (see [`mesh_schema`]).
pub fn gateway_with_mesh() -> CustomResourceDefinition {
    let mut crd = annotate(Gateway::crd());
    for version in &mut crd.spec.versions {
        let spec = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|root| root.properties.as_mut())
            .and_then(|props| props.get_mut("spec"))
            .and_then(|spec| spec.properties.as_mut())
            .expect("the generated Gateway schema has spec.properties");
        spec.insert("mesh".to_string(), mesh_schema());
    }
    crd
}

/// `spec.mesh`, covering both proposals:
///
/// - GEP-3951: `trustBundle: {name, namespace, bundleKey}` (a ConfigMap) and `labelSelector`.
/// - GEP-3792: `trustBundle: [{group, kind, name, namespace}]` and `selector`.
///
/// The proposals disagree on the type of `trustBundle` (object vs. list), and a structural
/// schema cannot say "object or list" (no `type` inside `anyOf`/`oneOf`). So `trustBundle`
/// alone keeps whatever it is given (`x-kubernetes-preserve-unknown-fields`) and pier
/// validates it when translating; the rest of `mesh` is typed, so other fields are pruned.
pub fn mesh_schema() -> JSONSchemaProps {
    let selector = |gep: &str| {
        serde_json::json!({
            "description": format!("{gep}: selects the meshed Routes and namespaces (a label selector)."),
            "type": "object",
            "x-kubernetes-map-type": "atomic",
            "properties": {
                "matchLabels": {
                    "type": "object",
                    "additionalProperties": { "type": "string" }
                },
                "matchExpressions": {
                    "type": "array",
                    "x-kubernetes-list-type": "atomic",
                    "items": {
                        "type": "object",
                        "required": ["key", "operator"],
                        "properties": {
                            "key": { "type": "string" },
                            "operator": { "type": "string" },
                            "values": {
                                "type": "array",
                                "x-kubernetes-list-type": "atomic",
                                "items": { "type": "string" }
                            }
                        }
                    }
                }
            }
        })
    };
    let schema = serde_json::json!({
        "description": "Mesh configures how this out-of-cluster Gateway joins a service mesh. \
            Not part of Gateway API v1.5.1: this is pier's union of GEP-3951 and GEP-3792.",
        "type": "object",
        "properties": {
            "trustBundle": {
                "description": "The CA certificates the gateway trusts for meshed peers. \
                    GEP-3951: an object {name, namespace, bundleKey} naming a ConfigMap \
                    (bundleKey defaults to ca-bundle.crt). GEP-3792: a list of object \
                    references {group, kind, name, namespace}. Its shape is checked by pier, \
                    not by this schema, because the two proposals give it different types.",
                "x-kubernetes-preserve-unknown-fields": true
            },
            "labelSelector": selector("GEP-3951"),
            "selector": selector("GEP-3792"),
            "identity": {
                "description": "pier's extension: the workload identity each meshed endpoint \
                    must present, made from its Pod's ServiceAccount. scheme SPIFFE expects \
                    spiffe://<trustDomain>/ns/<namespace>/sa/<serviceAccount> (Istio, SPIRE); \
                    Linkerd expects <serviceAccount>.<namespace>.serviceaccount.identity.linkerd.<trustDomain> \
                    (also sent as SNI); None checks the chain only (the default when absent).",
                "type": "object",
                "required": ["scheme"],
                "properties": {
                    "scheme": { "type": "string", "enum": ["SPIFFE", "Linkerd", "None"] },
                    "trustDomain": {
                        "description": "The mesh's trust domain; defaults to pier's --cluster-domain.",
                        "type": "string",
                        "maxLength": 253
                    }
                }
            }
        }
    });
    serde_json::from_value(schema).expect("the mesh schema is a valid JSONSchemaProps")
}

fn annotate(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let annotations = crd.metadata.annotations.get_or_insert_with(BTreeMap::new);
    // The `x-k8s.io` group's kinds exist only in the experimental channel.
    let experimental = crd.spec.group == crate::translate::api::X_GATEWAY_GROUP;
    for (k, v) in [
        (API_APPROVED_ANNOTATION, API_APPROVED),
        (BUNDLE_VERSION_ANNOTATION, BUNDLE_VERSION),
        (
            CHANNEL_ANNOTATION,
            if experimental {
                "experimental"
            } else {
                CHANNEL
            },
        ),
    ] {
        annotations.insert(k.to_string(), v.to_string());
    }
    crd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_are_the_eleven_gateway_api_kinds_pier_reads() {
        let names: Vec<_> = all()
            .into_iter()
            .map(|c| c.metadata.name.unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "gatewayclasses.gateway.networking.k8s.io",
                "gateways.gateway.networking.k8s.io",
                "listenersets.gateway.networking.k8s.io",
                "httproutes.gateway.networking.k8s.io",
                "grpcroutes.gateway.networking.k8s.io",
                "tlsroutes.gateway.networking.k8s.io",
                "tcproutes.gateway.networking.k8s.io",
                "udproutes.gateway.networking.k8s.io",
                "referencegrants.gateway.networking.k8s.io",
                "backendtlspolicies.gateway.networking.k8s.io",
                "xbackendtrafficpolicies.gateway.networking.x-k8s.io",
            ]
        );
    }

    #[test]
    fn every_crd_carries_the_bundle_annotations() {
        for crd in all().into_iter().chain([gateway_with_mesh()]) {
            let a = crd.metadata.annotations.unwrap();
            assert_eq!(a[BUNDLE_VERSION_ANNOTATION], BUNDLE_VERSION);
            let channel = if crd.spec.group == crate::translate::api::X_GATEWAY_GROUP {
                "experimental"
            } else {
                CHANNEL
            };
            assert_eq!(a[CHANNEL_ANNOTATION], channel);
            assert!(a.contains_key(API_APPROVED_ANNOTATION));
        }
    }

    #[test]
    fn own_crds_are_pier_dev_and_namespaced() {
        let own = own();
        let names: Vec<_> = own.iter().map(|c| c.metadata.name.clone()).collect();
        assert_eq!(
            names,
            [
                Some("securitypolicies.pier.dev".to_string()),
                Some("backendtrafficpolicies.pier.dev".to_string()),
                Some("clienttrafficpolicies.pier.dev".to_string())
            ]
        );
        let crd = &own[0];
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.kind, "SecurityPolicy");
        let versions: Vec<_> = crd.spec.versions.iter().map(|v| &v.name).collect();
        assert_eq!(versions, ["v1alpha1"]);
        let v = &crd.spec.versions[0];
        assert!(v.served && v.storage);
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "status is a subresource (pier patches it)"
        );
        assert_eq!(crd.metadata.annotations, None);
    }

    #[test]
    fn mesh_bundle_swaps_only_the_gateway_crd() {
        let plain = bundle(false);
        let mesh = bundle(true);
        assert_eq!(plain, [all(), own()].concat());
        assert_eq!(plain.len(), mesh.len());
        for (p, m) in plain.iter().zip(&mesh) {
            if p.spec.names.kind == "Gateway" {
                assert_eq!(m, &gateway_with_mesh());
            } else {
                assert_eq!(p, m);
            }
        }
    }

    #[test]
    fn mesh_variant_differs_only_by_spec_mesh() {
        let plain = serde_json::to_value(Gateway::crd()).unwrap();
        let mut mesh = serde_json::to_value(gateway_with_mesh()).unwrap();
        let spec_props = &mut mesh["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
            ["spec"]["properties"];
        assert!(spec_props["mesh"]["properties"]["trustBundle"].is_object());
        spec_props.as_object_mut().unwrap().remove("mesh");
        mesh["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("annotations");
        assert_eq!(plain, mesh);
    }
}
