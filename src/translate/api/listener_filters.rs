//! A listener's `filters` (GEP-5224, GatewayListenerFilters, Gateway API v1.7 experimental),
//! which the generated Gateway and ListenerSet types (v1.5.1) do not have: run on every request
//! the listener accepts, in order, before routing. An `ExternalAuth` filter carries the same
//! payload as HTTPRoute's (GEP-1494's `HTTPExternalAuthFilter`).

use serde::{Deserialize, Serialize};

use super::HttpRouteRulesFiltersExternalAuth;

/// `listeners[].filters`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ListenerFilters {
    /// At most 16 (the CRD's bound).
    #[serde(default)]
    pub requests: Vec<ListenerFilter>,
}

/// One of `filters.requests`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ListenerFilter {
    /// `ExternalAuth` or `ExtensionRef`.
    #[serde(rename = "type")]
    pub r#type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_auth: Option<HttpRouteRulesFiltersExternalAuth>,
    /// Read to say it is not supported (pier defines no extension kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension_ref: Option<ExtensionRef>,
}

/// `extensionRef`: a LocalObjectReference.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ExtensionRef {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
}
