//! `BackendTrafficPolicy` (`pier.dev/v1alpha1`): how traffic to a route's backends is shaped,
//! attached to Gateways, listeners, ListenerSets, Routes and Route rules by GEP-713
//! `targetRefs`. Field names are Envoy Gateway's (`gateway.envoyproxy.io/v1alpha1`
//! BackendTrafficPolicy) where the concept is the same, so policies move over by changing
//! `apiVersion`. This version reads `rateLimit.local`, `rateLimit.global`, `compressor`,
//! `faultInjection`, `timeout`, `loadBalancer`, `healthCheck`, `circuitBreaker` and `requestBuffer`; the
//! CRD grows with each feature, so the API server never stores a field pier would ignore.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::security_policy::{PolicyStatus, PolicyTargetRef};

/// `spec` of a BackendTrafficPolicy.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "pier.dev",
    version = "v1alpha1",
    kind = "BackendTrafficPolicy",
    plural = "backendtrafficpolicies",
    namespaced,
    status = "PolicyStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct BackendTrafficPolicySpec {
    /// What the policy applies to: Gateways (a listener with `sectionName`), ListenerSets,
    /// HTTPRoutes and GRPCRoutes (a named rule with `sectionName`), in the policy's namespace.
    pub target_refs: Vec<PolicyTargetRef>,
    /// Requests per unit of time, per client or for all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// Response compression: the encodings pier may compress a response in, in order of
    /// preference among those the client weighs the same.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compressor: Vec<Compressor>,
    /// Envoy Gateway's older name for `compressor` (deprecated there), read the same way;
    /// give one of the two.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compression: Vec<Compressor>,
    /// Delays and aborts injected into a share of the requests (resilience testing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_injection: Option<FaultInjection>,
    /// Timeouts of the targets' requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Timeout>,
    /// How requests are spread over a backend's endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<LoadBalancer>,
    /// Checks that take an endpoint out of the targets' backends before a client meets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
    /// Limits on the requests in flight to the targets' backends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit_breaker: Option<CircuitBreaker>,
    /// Request bodies are read whole before the request goes upstream, up to `limit` (413
    /// above it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_buffer: Option<RequestBuffer>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestBuffer {
    /// The largest body read whole: bytes, or a quantity (`64Ki`, `4Mi`), at most 64Mi. A
    /// request with a longer body is answered 413 and nothing reaches the backend.
    pub limit: k8s_openapi::apimachinery::pkg::api::resource::Quantity,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CircuitBreaker {
    /// Requests in flight to a backend (all its endpoints, every route's requests counted)
    /// past which a request waits for a slot; default pier's `--max-requests-per-backend`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel_requests: Option<u32>,
    /// Requests that may wait for a slot; past it, 503 at once. Default pier's
    /// `--max-pending-requests-per-backend`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pending_requests: Option<u32>,
    /// Connections open to a backend's endpoints (idle ones included) past which a request
    /// that needs a new one closes an idle one of the backend's, or waits like a pending
    /// request; default: no bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    /// Retries in flight to a backend at once; past it a failed attempt is the answer
    /// (default: only the retry budget bounds retries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel_retries: Option<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheck {
    /// pier asks each endpoint on its own, every `interval`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<ActiveHealthCheck>,
    /// pier watches the answers requests get and leaves an endpoint out for a while after
    /// failures in a row (outlier detection; without it, pier's `--outlier-*` defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passive: Option<PassiveHealthCheck>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PassiveHealthCheck {
    /// 5xx answers (and failed exchanges) in a row that eject an endpoint; 0 never ejects on
    /// answers. Default 5 when `consecutiveGatewayErrors` is not given either.
    #[serde(
        rename = "consecutive5XxErrors",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub consecutive_5xx_errors: Option<u32>,
    /// Only 502, 503 and 504 (and failed exchanges) in a row count; give this or
    /// `consecutive5XxErrors`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_gateway_errors: Option<u32>,
    /// The first ejection's length (default 30s); each ejection in a row lasts this much
    /// longer, up to 5 minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_ejection_time: Option<String>,
    /// Ejected endpoints come back at the first sweep, every `interval`, after their
    /// ejection has run out (default: as soon as it has).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// The most of a backend's endpoints ejected at once, in percent (one may always be);
    /// default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ejection_percent: Option<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActiveHealthCheck {
    /// `HTTP` (a request, healthy on an expected status), `TCP` (a connection, and its TLS
    /// handshake where the backend has TLS) or `GRPC` (gRPC's `grpc.health.v1.Health/Check`).
    #[serde(rename = "type")]
    pub type_: String,
    /// How long one check may take (a Gateway API duration; default 1s): longer is a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Time between the checks of one endpoint (default 3s), jittered by up to a tenth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// Failed checks in a row that take a healthy endpoint out (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_threshold: Option<u32>,
    /// Passed checks in a row that bring an unhealthy endpoint back (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_threshold: Option<u32>,
    /// `type: HTTP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpHealthCheck>,
    /// `type: GRPC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc: Option<GrpcHealthCheck>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpHealthCheck {
    /// The path asked for (starts with `/`).
    pub path: String,
    /// The `Host` of the check (default: the endpoint's address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// `GET` (default) or `HEAD`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The statuses that mean healthy, 100 to 599 (default: 200).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expected_statuses: Vec<i32>,
    /// Bytes the answer's body must contain (within its first 64 KiB) besides the status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_response: Option<HealthCheckPayload>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckPayload {
    /// `Text` (`text`) or `Binary` (`binary`, base64).
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrpcHealthCheck {
    /// The service asked about (`HealthCheckRequest.service`; default empty: the server as
    /// a whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancer {
    /// `LeastRequest` (pier's default: the less loaded of two random endpoints),
    /// `RoundRobin`, `Random` or `ConsistentHash`.
    #[serde(rename = "type")]
    pub type_: String,
    /// What `ConsistentHash` hashes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistent_hash: Option<ConsistentHash>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsistentHash {
    /// `SourceIP`, `Header` or `Cookie`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `Header`: the header whose value is hashed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<NamedHash>,
    /// `Cookie`: the cookie whose value is hashed. A request without it gets the default
    /// pick, unless `ttl` is given: then pier makes the cookie.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie: Option<CookieHash>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CookieHash {
    pub name: String,
    /// When given, a request without the cookie gets a new random value, hashed as if it had
    /// come with it, and the response sets the cookie for this long (a Gateway API duration):
    /// the client's next requests go to the same endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NamedHash {
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Timeout {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpTimeout>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpTimeout>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TcpTimeout {
    /// How long a new connection to an endpoint (TCP and TLS handshake) may take (a Gateway
    /// API duration, default pier's `--connect-timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_timeout: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpTimeout {
    /// From the request's arrival to the response's head (a Gateway API duration, `10s`),
    /// for rules whose HTTPRoute sets no `timeouts.request` of its own: 504 past it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FaultInjection {
    /// Requests wait this long before pier goes on with them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<FaultInjectionDelay>,
    /// Requests get this answer instead of reaching a backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort: Option<FaultInjectionAbort>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FaultInjectionDelay {
    /// A Gateway API duration (`500ms`, `2s`), at most an hour.
    pub fixed_delay: String,
    /// The share of requests delayed, 0 to 100 (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage: Option<f32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FaultInjectionAbort {
    /// The HTTP status to answer, 200 to 599; or give `grpcStatus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<i32>,
    /// The gRPC status code to answer (0 to 16), in a Trailers-Only answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_status: Option<i32>,
    /// The share of requests aborted, 0 to 100 (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage: Option<f32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Compressor {
    /// `Gzip`, `Brotli` or `Zstd`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Settings of the `Gzip` encoder (none yet: level 5), as Envoy Gateway's empty object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gzip: Option<EmptySettings>,
    /// Settings of the `Brotli` encoder (none yet: quality 4, a 512 KiB window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brotli: Option<EmptySettings>,
    /// Settings of the `Zstd` encoder (none yet: level 3, a 512 KiB window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zstd: Option<EmptySettings>,
    /// Responses whose Content-Length is below this go out uncompressed: bytes, or a quantity
    /// (`1Ki`, `2k`). Default 30 (Envoy's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_content_length: Option<k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
}

/// An encoder's settings object; pier has none to set yet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EmptySettings {}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RateLimit {
    /// Limits each pier instance keeps on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalRateLimit>,
    /// Limits kept by Envoy's rate-limit service (`--rate-limit-service`), shared by every
    /// pier instance that asks it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global: Option<GlobalRateLimit>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GlobalRateLimit {
    /// As `local.rules`; the service counts.
    pub rules: Vec<RateLimitRule>,
    /// When the service is down, slow or answers garbage: refuse the request (500) instead of
    /// letting it through (the default, as Envoy's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_closed: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalRateLimit {
    /// Every rule whose selectors match a request counts it; over any of their limits: 429.
    pub rules: Vec<RateLimitRule>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitRule {
    /// Which requests the rule counts: all selectors must match (none: every request).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_selectors: Vec<RateLimitSelectCondition>,
    pub limit: RateLimitValue,
    /// One bucket for every target of the policy (`true`), or one per Route (default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitSelectCondition {
    /// Every header listed must match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<HeaderMatch>,
    /// The client address pier derives (trusted proxies, PROXY protocol).
    #[serde(
        default,
        rename = "sourceCIDR",
        skip_serializing_if = "Option::is_none"
    )]
    pub source_cidr: Option<SourceMatch>,
    /// The request's method is one of these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<MethodMatch>,
    /// The request's path matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathMatch>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeaderMatch {
    pub name: String,
    /// `Exact` (default), `RegularExpression`, or `Distinct`: one bucket per value.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// The value (`Exact`), or the pattern (`RegularExpression`); none for `Distinct`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Matches when the header does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invert: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceMatch {
    /// `Exact` (default): one bucket for the whole CIDR; `Distinct`: one per client address.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// A CIDR (`10.0.0.0/8`, `2001:db8::/32`); `0.0.0.0/0` and `::/0` for any.
    pub value: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MethodMatch {
    pub value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invert: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PathMatch {
    /// `Exact`, `PathPrefix` (default) or `RegularExpression`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    pub value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invert: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitValue {
    /// At least 1.
    pub requests: u64,
    /// `Second`, `Minute`, `Hour` or `Day`.
    pub unit: String,
}
