//! `UDPRoute` (`gateway.networking.k8s.io/v1`, GEP-2645: standard channel since Gateway API
//! v1.7; `v1alpha2` before). The gateway-api crate pier uses (0.22, Gateway API v1.5.1) has only
//! the v1alpha2 type, which v1.7's standard CRD does not serve; the v1 spec has the same fields
//! (`parentRefs`, exactly one rule of 1-16 weighted `backendRefs`, an optional rule `name`), so
//! this type reuses the crate's field types under the v1 version.

use gateway_api::experimental::udproutes::{UdpRouteParentRefs, UdpRouteRules, UdpRouteStatus};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `spec` of a UDPRoute.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "UDPRoute",
    root = "UdpRoute",
    plural = "udproutes",
    namespaced,
    status = "UdpRouteStatus",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct UdpRouteSpec {
    /// The Gateways, listeners (`sectionName`) and ports (`port`) the route attaches to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_refs: Option<Vec<UdpRouteParentRefs>>,
    /// Exactly one rule: the weighted backends a client's datagrams are sent to.
    #[schemars(length(min = 1, max = 1))]
    pub rules: Vec<UdpRouteRules>,
}
