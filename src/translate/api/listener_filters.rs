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

/// Why a listener's filters make it unservable, as far as that can be told without resolving
/// anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `InvalidListenerFilter`.
    Invalid,
    /// `UnsupportedValue`.
    Unsupported,
}

/// The most filters a listener may have (the CRD's bound).
pub const MAX_LISTENER_FILTERS: usize = 16;

impl ListenerFilters {
    /// Why a listener with these filters is not served, as far as that can be told without
    /// resolving anything: asked where listeners are made (`translate::gateway`), so that a
    /// refused listener takes no part in conflicts. `protocol` as the listener gives it.
    pub fn refusal(filters: &Result<Self, String>, protocol: &str) -> Option<(Refusal, String)> {
        let invalid = |why: String| Some((Refusal::Invalid, why));
        let filters = match filters {
            Ok(f) => f,
            Err(e) => {
                return invalid(format!(
                    "filters: {e}; the listener is not served without them"
                ));
            }
        };
        if filters.requests.is_empty() {
            return None;
        }
        if !matches!(protocol, "HTTP" | "HTTPS") {
            return invalid("filters apply to HTTP and HTTPS listeners only".into());
        }
        if filters.requests.len() > MAX_LISTENER_FILTERS {
            let n = filters.requests.len();
            return invalid(format!(
                "filters.requests: {n} filters, at most {MAX_LISTENER_FILTERS}"
            ));
        }
        for (i, f) in filters.requests.iter().enumerate() {
            let why = match f.r#type.as_str() {
                "ExternalAuth" if f.extension_ref.is_some() => (
                    Refusal::Invalid,
                    "type ExternalAuth cannot have extensionRef",
                ),
                "ExternalAuth" if f.external_auth.is_none() => {
                    (Refusal::Invalid, "type ExternalAuth needs externalAuth")
                }
                "ExternalAuth" => continue,
                "ExtensionRef" => (
                    Refusal::Unsupported,
                    "ExtensionRef listener filters are not supported (pier defines no extension \
                     kinds)",
                ),
                _ => (
                    Refusal::Unsupported,
                    "this filter type is not supported (pier runs ExternalAuth)",
                ),
            };
            return Some((
                why.0,
                format!(
                    "filters.requests[{i}]: {}; the listener is not served without it",
                    why.1
                ),
            ));
        }
        None
    }
}
