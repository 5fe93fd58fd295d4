//! `SecurityPolicy` (`pier.dev/v1alpha1`): who may come in, attached to Gateways, listeners,
//! ListenerSets, Routes and Route rules by GEP-713 `targetRefs`. Field names are Envoy
//! Gateway's (`gateway.envoyproxy.io/v1alpha1` SecurityPolicy) where the concept is the same,
//! so policies move over by changing `apiVersion`.
//!
//! The CRD is generated from these types (`kube::CustomResource`), so what the API server
//! stores is what pier decodes.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `spec` of a SecurityPolicy.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "pier.dev",
    version = "v1alpha1",
    kind = "SecurityPolicy",
    plural = "securitypolicies",
    namespaced,
    status = "PolicyStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct SecurityPolicySpec {
    /// What the policy applies to: Gateways (a listener with `sectionName`), ListenerSets,
    /// HTTPRoutes and GRPCRoutes (a named rule with `sectionName`), in the policy's namespace.
    pub target_refs: Vec<PolicyTargetRef>,
    /// Username and password (RFC 7617) checked against an htpasswd Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuth>,
    /// API keys from headers, query parameters or cookies, checked against Secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_auth: Option<ApiKeyAuth>,
    /// JSON Web Tokens verified against JWKS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwt: Option<Jwt>,
    /// Allow or deny by client address, method, headers and JWT claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    /// Ask an external authorizer (HTTP, or Envoy's ext_authz gRPC API) about each request,
    /// after authentication and before `authorization`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ext_auth: Option<ExtAuth>,
    /// A login with an OpenID Provider (authorization code flow with PKCE), kept in
    /// encrypted cookies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc: Option<Oidc>,
}

impl SecurityPolicySpec {
    /// Whether the policy names a Secret (an htpasswd file, API keys, an OIDC client or
    /// cookie secret): cluster mode watches `Opaque` Secrets only once one does.
    pub fn names_secrets(&self) -> bool {
        self.basic_auth.is_some()
            || self
                .api_key_auth
                .as_ref()
                .is_some_and(|k| !k.credential_refs.is_empty())
            || self.oidc.is_some()
    }
}

/// `spec.extAuth`: exactly one of `grpc` and `http`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExtAuth {
    /// Envoy's `envoy.service.auth.v3.Authorization/Check` over HTTP/2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc: Option<GrpcExtAuthService>,
    /// The client's request, forwarded: a 2xx allows, any other answer is the client's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpExtAuthService>,
    /// The client's headers the authorizer sees. gRPC: all when empty. HTTP: `Host`, the
    /// method, the path, `Content-Length` and `Authorization` always, and these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers_to_ext_auth: Vec<String>,
    /// Send the request body (up to a size) to the authorizer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_to_ext_auth: Option<BodyToExtAuth>,
    /// How long to wait for the authorizer's answer (a Gateway API duration; default 10s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// When the authorizer is down, slow or answers garbage: let the request through
    /// (`true`), or answer 403 (`false`, the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_open: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrpcExtAuthService {
    /// The authorizer: one Service port.
    pub backend_refs: Vec<BackendRef>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpExtAuthService {
    /// The authorizer: one Service port.
    pub backend_refs: Vec<BackendRef>,
    /// Prepended to the request's path in the check request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The headers of an allowing answer that go upstream (replacing the client's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers_to_backend: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BodyToExtAuth {
    /// The most body bytes buffered for the authorizer; a longer body gets 413 (before
    /// `failOpen` is considered).
    pub max_request_bytes: u32,
}

/// A Service port (Gateway API `BackendObjectReference`); in the policy's namespace unless
/// `namespace` is set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackendRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// A GEP-713 `LocalPolicyTargetReferenceWithSectionName`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyTargetRef {
    pub group: String,
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
}

/// A reference to a Secret (or ConfigMap), in the policy's namespace unless `namespace` is set
/// (then a ReferenceGrant must allow it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretObjectReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BasicAuth {
    /// A Secret whose key `.htpasswd` holds `user:hash` lines (bcrypt, SHA-256/512-crypt,
    /// apr1 or `{SHA}`; plaintext lines are refused).
    pub users: SecretObjectReference,
    /// Send the authenticated username upstream in this header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_username_header: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyAuth {
    /// Secrets whose data maps a client ID to its key.
    pub credential_refs: Vec<SecretObjectReference>,
    /// Where the key is read from; the first place that has one is used.
    pub extract_from: Vec<ExtractFrom>,
    /// Send the client ID of the key upstream in this header.
    #[serde(
        default,
        rename = "forwardClientIDHeader",
        skip_serializing_if = "Option::is_none"
    )]
    pub forward_client_id_header: Option<String>,
    /// Remove the key from the request before it goes upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sanitize: Option<bool>,
}

/// Where a credential is read from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExtractFrom {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cookies: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Jwt {
    /// A request without a token passes (one with a bad token does not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
    pub providers: Vec<JwtProvider>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JwtProvider {
    pub name: String,
    /// The `iss` claim must equal this, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The `aud` claim must name one of these, when set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audiences: Vec<String>,
    #[serde(
        default,
        rename = "remoteJWKS",
        skip_serializing_if = "Option::is_none"
    )]
    pub remote_jwks: Option<RemoteJwks>,
    #[serde(default, rename = "localJWKS", skip_serializing_if = "Option::is_none")]
    pub local_jwks: Option<LocalJwks>,
    /// Claims copied into request headers (`a.b` for nested claims).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claim_to_headers: Vec<ClaimToHeader>,
    /// Where the token is read from (default: `Authorization: Bearer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extract_from: Option<JwtExtractor>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemoteJwks {
    pub uri: String,
    /// How long fetched keys are used before they are fetched again (default 5m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_duration: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalJwks {
    /// `Inline` or `ValueRef`.
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
    /// A ConfigMap in the policy's namespace whose key `jwks` holds the set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_ref: Option<LocalObjectReference>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalObjectReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimToHeader {
    pub header: String,
    pub claim: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JwtExtractor {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<JwtHeaderExtractor>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cookies: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JwtHeaderExtractor {
    pub name: String,
    /// The value starts with this (`Bearer `), which is removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_prefix: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Authorization {
    /// `Allow` or `Deny` (default `Deny`): what happens when no rule matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_action: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<AuthorizationRule>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizationRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `Allow` or `Deny`.
    pub action: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<Operation>,
    pub principal: Principal,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Operation {
    /// HTTP methods the rule is about (any, when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Principal {
    #[serde(default, rename = "clientCIDRs", skip_serializing_if = "Vec::is_empty")]
    pub client_cidrs: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwt: Option<JwtPrincipal>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<HeaderPrincipal>,
    /// pier's own: the connection's client certificate verified against the listener's
    /// frontend CAs (Gateway `spec.tls.frontend`) and has one of these URI or DNS
    /// subjectAltNames (exact match), e.g. `spiffe://example.org/ns/shop/sa/checkout`.
    #[serde(default, rename = "clientSANs", skip_serializing_if = "Vec::is_empty")]
    pub client_sans: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JwtPrincipal {
    /// The JWT provider (of this policy's `jwt.providers`) that verified the token.
    pub provider: String,
    /// Every one of these must be in the token's `scope` (or `scp`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// Every claim listed must have one of its values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<JwtClaim>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JwtClaim {
    /// `a.b` for nested claims.
    pub name: String,
    pub values: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeaderPrincipal {
    pub name: String,
    /// The header must have one of these values.
    pub values: Vec<String>,
}

/// GEP-713 policy status: one entry per ancestor (the Gateway a target hangs off), the same
/// shape as BackendTLSPolicy's.
pub type PolicyStatus = gateway_api::backendtlspolicies::BackendTlsPolicyStatus;

// === spec.oidc: a login with an OpenID Provider (authorization code flow with PKCE), in
// Envoy Gateway's field names, plus pier's `cookieSecret`. ===

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Oidc {
    pub provider: OidcProvider,
    /// The client ID registered with the provider.
    #[serde(rename = "clientID")]
    pub client_id: String,
    /// A Secret whose key `client-secret` holds the client secret.
    pub client_secret: SecretObjectReference,
    /// Where the provider sends the browser back (`https://host/oauth2/callback`), or a path
    /// alone (pier's: on the scheme and host of the request); default `/oauth2/callback`. The
    /// path must reach a rule the policy applies to.
    #[serde(
        default,
        rename = "redirectURL",
        skip_serializing_if = "Option::is_none"
    )]
    pub redirect_url: Option<String>,
    /// A request to this path clears the login (default `/logout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logout_path: Option<String>,
    /// Scopes asked for besides `openid` (always asked for).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// The cookies' `Domain`: the login also holds on its subdomains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie_domain: Option<String>,
    /// Send the access token upstream as `Authorization: Bearer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_access_token: Option<bool>,
    /// Refresh an expired access token with the refresh token instead of logging in again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<bool>,
    /// pier's own field: a Secret whose key `cookie-secret` (at least 32 bytes) is the key
    /// login cookies are encrypted with. pier instances with the same key share logins
    /// (several behind one load balancer). Default: a key derived from the client secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie_secret: Option<SecretObjectReference>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OidcProvider {
    /// The provider's issuer; its discovery document (`/.well-known/openid-configuration`)
    /// gives the endpoints not set here and the key set.
    pub issuer: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization_endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint: Option<String>,
}
