//! The installed Gateway API version, for GatewayClass `SupportedVersion`.
//!
//! Every Gateway API CRD carries `gateway.networking.k8s.io/bundle-version`. pier reads it from
//! the CRDs it writes status to (GatewayClass, Gateway, HTTPRoute), which takes `get` on those
//! three `customresourcedefinitions` by name (`resourceNames` in `config/rbac/`; nothing else
//! in `apiextensions.k8s.io`). When pier cannot tell (no permission, no annotation, an
//! unparsable value) it assumes the version is supported and says so in the message.
//!
//! Supported: v1.2.0 and later within v1. v1.2 is the oldest bundle whose standard channel
//! has every field pier reads (HTTPRoute `timeouts`, `parentRefs[].port`); older CRDs prune them
//! silently. Newer v1 bundles are supported because standard-channel changes within a version
//! are compatible (implementers guide, "Version Compatibility").

use kube::Client;
use kube::api::Api;
use serde_json::{Value, json};

use crate::translate::api::GATEWAY_GROUP;

pub const BUNDLE_VERSION_ANNOTATION: &str = "gateway.networking.k8s.io/bundle-version";
/// The oldest supported bundle version (major, minor).
pub const MIN_SUPPORTED: (u64, u64) = (1, 2);
/// The CRDs whose version is checked: the kinds pier writes status to.
pub const CHECKED: [&str; 3] = ["gatewayclasses", "gateways", "httproutes"];

/// What pier knows about the installed Gateway API version.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BundleVersion {
    /// Could not be read; assumed supported.
    #[default]
    Unknown,
    Supported(String),
    Unsupported(String),
}

// === impl BundleVersion ===

impl BundleVersion {
    /// From one annotation value.
    pub fn from_annotation(value: Option<&str>) -> Self {
        let Some(v) = value else {
            return Self::Unknown;
        };
        match parse(v) {
            Some((major, minor)) if major == MIN_SUPPORTED.0 && minor >= MIN_SUPPORTED.1 => {
                Self::Supported(v.to_string())
            }
            Some(_) => Self::Unsupported(v.to_string()),
            None => Self::Unknown,
        }
    }

    /// The worse of two (unsupported beats unknown beats supported).
    pub fn worst(self, other: Self) -> Self {
        match (self, other) {
            (u @ Self::Unsupported(_), _) | (_, u @ Self::Unsupported(_)) => u,
            (Self::Unknown, _) | (_, Self::Unknown) => Self::Unknown,
            (s, _) => s,
        }
    }

    /// Rewrites translation's `SupportedVersion` condition (JSON) to say what is known.
    pub fn apply(&self, condition: &mut Value) {
        let built_for = crate::crds::BUNDLE_VERSION;
        let (status, reason, message) = match self {
            Self::Unknown => (
                "True",
                "SupportedVersion",
                format!(
                    "the installed Gateway API version could not be read; assumed supported \
                     (pier is built for {built_for})"
                ),
            ),
            Self::Supported(v) => (
                "True",
                "SupportedVersion",
                format!("Gateway API {v} is supported"),
            ),
            Self::Unsupported(v) => (
                "False",
                "UnsupportedVersion",
                format!(
                    "Gateway API {v} is not supported: pier needs v{}.{}.0 or later within v1 \
                     (it is built for {built_for})",
                    MIN_SUPPORTED.0, MIN_SUPPORTED.1
                ),
            ),
        };
        condition["status"] = json!(status);
        condition["reason"] = json!(reason);
        condition["message"] = json!(message);
    }
}

/// `v1.5.1`, `1.3.0-rc.1` -> (major, minor).
fn parse(v: &str) -> Option<(u64, u64)> {
    let v = v.strip_prefix('v').unwrap_or(v);
    let mut parts = v.split(['.', '-', '+']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Reads the bundle version of the [`CHECKED`] CRDs, and whether the Gateway CRD's
/// `status.addresses` have `routability` (GEP-5093: Gateway API v1.7's experimental channel).
/// `Err` when the API server cannot be asked (403 included: the caller logs it once and
/// assumes supported).
pub async fn fetch(client: &Client) -> Result<(BundleVersion, bool), kube::Error> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut version: Option<BundleVersion> = None;
    let mut routability = false;
    for plural in CHECKED {
        let crd = api.get(&format!("{plural}.{GATEWAY_GROUP}")).await?;
        if plural == "gateways" {
            routability = has_address_routability(&crd);
        }
        let found = BundleVersion::from_annotation(
            crd.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(BUNDLE_VERSION_ANNOTATION))
                .map(String::as_str),
        );
        version = Some(match version {
            None => found,
            Some(v) => v.worst(found),
        });
    }
    Ok((version.unwrap_or_default(), routability))
}

/// The Gateway CRD's served `v1` has `status.addresses[].routability`.
pub fn has_address_routability(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> bool {
    crd.spec.versions.iter().filter(|v| v.name == "v1" && v.served).any(|v| {
        let schema = v.schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref());
        let address = schema
            .and_then(|s| s.properties.as_ref()?.get("status"))
            .and_then(|s| s.properties.as_ref()?.get("addresses"))
            .and_then(|a| match a.items.as_ref()? {
                k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(s) => Some(&**s),
                _ => None,
            });
        address
            .and_then(|a| a.properties.as_ref())
            .is_some_and(|p| p.contains_key("routability"))
    })
}
