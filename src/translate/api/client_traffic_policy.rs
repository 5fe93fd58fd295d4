//! `ClientTrafficPolicy` (`pier.dev/v1alpha1`): how pier meets its clients on a listener,
//! attached to Gateways, listeners and ListenerSets by GEP-713 `targetRefs`. Field names are
//! Envoy Gateway's (`gateway.envoyproxy.io/v1alpha1` ClientTrafficPolicy) where the concept is
//! the same. This version reads `tls`, `connection.connectionLimit`,
//! `clientIPDetection.xForwardedFor.trustedCIDRs`, `timeout.http.idleTimeout`, `path`,
//! `headers` and `http3`; the CRD grows with each feature, so the API server never
//! stores a field pier would ignore.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::security_policy::{PolicyStatus, PolicyTargetRef};

/// `spec` of a ClientTrafficPolicy.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "pier.dev",
    version = "v1alpha1",
    kind = "ClientTrafficPolicy",
    plural = "clienttrafficpolicies",
    namespaced,
    status = "PolicyStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct ClientTrafficPolicySpec {
    /// What the policy applies to: Gateways (a listener with `sectionName`) and ListenerSets
    /// (one of its listeners with `sectionName`), in the policy's namespace.
    pub target_refs: Vec<PolicyTargetRef>,
    /// The TLS handshake of HTTPS listeners and terminating TLS listeners.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ClientTls>,
    /// Limits on the targets' client connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<ClientConnection>,
    /// Whose forwarding headers (`X-Forwarded-For`, `X-Request-Id`, trace flags) pier believes
    /// on the targets: replaces `--trusted-proxies` there.
    #[serde(
        default,
        rename = "clientIPDetection",
        skip_serializing_if = "Option::is_none"
    )]
    pub client_ip_detection: Option<ClientIpDetection>,
    /// How long the targets' client connections may idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<ClientTimeout>,
    /// How request paths are normalised before routing and forwarding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<ClientPath>,
    /// What the targets do with some request headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<ClientHeaders>,
    /// HTTP/3 over QUIC on the targets' HTTPS listeners: their port over UDP, with their
    /// certificates, advertised with `Alt-Svc` on their TCP responses (`http3: {}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http3: Option<ClientHttp3>,
}

/// `http3`: no settings of its own yet (Envoy Gateway's is empty too); its presence turns
/// HTTP/3 on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ClientHttp3 {}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientHeaders {
    /// Header names with `_` (which some backends read as `-`, so that `x_user` could pass
    /// for `x-user`): `Allow` (pier's default), `RejectRequest` (400) or `DropHeader`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub with_underscores_action: Option<String>,
    /// Keep the `X-Request-Id` a client sends even when it is not a trusted proxy (pier's
    /// default replaces it then).
    #[serde(
        default,
        rename = "preserveXRequestID",
        skip_serializing_if = "Option::is_none"
    )]
    pub preserve_x_request_id: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientPath {
    /// What to do with `%2F` and `%5C` (escaped `/` and `\`) in a path: `KeepUnchanged`
    /// (pier's default: they are not separators), `RejectRequest` (400) or
    /// `UnescapeAndForward` (decoded, then the path is normalised and routed as such).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escaped_slashes_action: Option<String>,
    /// `false` merges runs of `/` (as `--merge-slashes`), `true` keeps them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_merge_slashes: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientTimeout {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<ClientHttpTimeout>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientHttpTimeout {
    /// A client connection with no request in progress for this long is closed (HTTP/2:
    /// GOAWAY); a keep-alive HTTP/1.1 connection's next request head must have arrived by
    /// then. Replaces `--idle-timeout` (HTTP/2) and the 30 s keep-alive wait of HTTP/1.1 on
    /// the listener's port. A duration such as `15s`, `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<String>,
    /// The whole request (head and body) must have arrived within this long of its first
    /// byte, else 408 and the connection closes. A duration such as `10s`; default: no bound
    /// but the header read timeout and the body pace limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_received_timeout: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientConnection {
    /// Open client connections on the listener's port, as `--max-connections` (the smaller
    /// applies): at the limit a new client takes the place of the longest-waiting idle one,
    /// or waits to be accepted while every connection is busy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_limit: Option<ConnectionLimit>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionLimit {
    /// At least 1.
    pub value: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientIpDetection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x_forwarded_for: Option<XForwardedFor>,
    /// Envoy's client address from a custom header: pier does not read one (refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_header: Option<CustomHeader>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustomHeader {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_closed: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct XForwardedFor {
    /// The proxies (CIDRs) whose `X-Forwarded-For` entries pier believes; the client is the
    /// rightmost entry not among them. `[]`: nobody's.
    #[serde(
        default,
        rename = "trustedCIDRs",
        skip_serializing_if = "Option::is_none"
    )]
    pub trusted_cidrs: Option<Vec<String>>,
    /// Envoy's trust by hop count: pier trusts by the sender's address instead (refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_trusted_hops: Option<u32>,
}

/// TLS versions, cipher suites, key exchange groups and ALPN protocols a listener offers.
/// Unset fields keep pier's defaults (TLS 1.2 and 1.3, rustls's safe suites and groups, ALPN
/// `h2` and `http/1.1` on HTTPS).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientTls {
    /// The lowest version: `Auto` (1.2), `1.2` or `1.3`. rustls implements no older version, so
    /// `1.0` and `1.1` are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_version: Option<String>,
    /// The highest version: `Auto` (1.3), `1.2` or `1.3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_version: Option<String>,
    /// Cipher suites, by IANA/rustls name (`TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256`,
    /// `TLS13_AES_256_GCM_SHA384`) or OpenSSL name (`ECDHE-ECDSA-AES128-GCM-SHA256`). A list
    /// of TLS 1.2 suites only (as Envoy takes it) leaves TLS 1.3's suites as they are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ciphers: Vec<String>,
    /// Key exchange groups, in order of preference: `X25519`, `P-256`, `P-384`,
    /// `X25519MLKEM768` (and rustls's names `secp256r1`, `secp384r1`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ecdh_curves: Vec<String>,
    /// ALPN protocols offered on HTTPS listeners, in order of preference: `h2`, `http/1.1`,
    /// `http/1.0`. An empty list offers none (clients then speak HTTP/1.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpn_protocols: Option<Vec<String>>,
}
