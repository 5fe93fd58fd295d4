//! The facade for generated API types: the only module that names `gateway_api` or
//! `k8s_openapi` types directly. The rest of pier imports them from here, so an upstream rename
//! (kopium-generated names change between releases) is fixed in one place.

pub use gateway_api::backendtlspolicies::BackendTlsPolicy;
pub use gateway_api::constants::{
    GatewayClassConditionReason, GatewayClassConditionType, GatewayConditionReason,
    GatewayConditionType, ListenerConditionReason, ListenerConditionType,
};
pub use gateway_api::gatewayclasses::GatewayClass;
pub use gateway_api::gateways::Gateway;
pub use gateway_api::httproutes::HttpRoute;
pub use gateway_api::referencegrants::ReferenceGrant;
pub use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
pub use k8s_openapi::api::discovery::v1::EndpointSlice;
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
