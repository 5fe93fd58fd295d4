//! BackendTrafficPolicy (`pier.dev/v1alpha1`, issue 39) as the data plane reads it: the local
//! rate limits a rule's requests count against.
//!
//! ```text
//! translation: TrafficPolicy (one per policy) ─> RuleTraffic (per Route: the policy and one
//!              bucket table per limit rule; shared limits: one table for every target)
//! request:     RuleTraffic::take ─> every limit rule whose selectors all match takes one
//!              request from its bucket (its key: the Distinct values); over any limit: 429
//! ```
//!
//! A rule without a policy has `Rule::traffic == None` and pays one branch. The buckets
//! (`crate::ratelimit`) survive a reload while the policy's limit and selectors are the same
//! ([`super::carried::Carried`]), so editing an unrelated object never hands a client a
//! fresh burst.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderName, Method};
use serde::Serialize;

use super::matcher::{PathMatch, ValueMatch, ser_header_name};
use super::net::Cidr;
use crate::ratelimit::{Buckets, Decision, Limit};

/// Distinct keys (header values, client addresses) one limit rule keeps buckets for, at most
/// (about 40 bytes each: 4 MB at most per rule). Past it, full buckets go first, then the one
/// closest to full (`crate::ratelimit`).
pub const DISTINCT_KEYS: usize = 100_000;

/// One BackendTrafficPolicy, translated.
#[derive(Debug, Serialize)]
pub struct TrafficPolicy {
    /// `namespace/name`, for metrics and logs.
    pub source: String,
    /// `rateLimit.local.rules`, in order.
    pub local: Vec<LimitRule>,
    /// `rateLimit.global.rules`, in order (the service counts them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub global: Vec<LimitRule>,
    /// `rateLimit.global.failClosed`: a service that gives no answer refuses the request.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fail_closed: bool,
    /// Some selector reads a request header.
    #[serde(skip)]
    pub needs_headers: bool,
    /// `compressor`: the encodings responses may get (hyper's path compresses them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,
    /// `faultInjection`: delays and aborts for a share of the requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<Faults>,
    /// `loadBalancer`: how requests are spread over a backend's endpoints (`None`: pier's
    /// default, the less loaded of two random endpoints, which is `LeastRequest`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balance: Option<Balance>,
    /// `timeout.http.requestTimeout`: the request timeout of rules without their own (set on
    /// the rule at translation, `Rule::timeouts`; nothing to do per request here).
    #[serde(
        skip_serializing_if = "Option::is_none",
        with = "super::backend::opt_duration"
    )]
    pub request_timeout: Option<Duration>,
    /// `healthCheck.active`: put on the rules the policy reaches (`Rule::health`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<Arc<super::health::ActiveCheck>>,
    /// `requestBuffer.limit`: request bodies are read whole, up to this many bytes, before
    /// the request goes upstream (413 above it; `proxy::phase::request_buffer`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_buffer: Option<u64>,
    /// `healthCheck.passive`, `circuitBreaker`, `timeout.tcp`: set on the backends of the
    /// rules the policy reaches at translation (`BackendSet::with_override`).
    #[serde(skip_serializing_if = "super::backend::BackendOverride::is_none")]
    pub backends: super::backend::BackendOverride,
}

/// `loadBalancer.type` other than `LeastRequest`.
#[derive(Debug, Serialize)]
pub enum Balance {
    RoundRobin,
    Random,
    /// `ConsistentHash`: requests with the same key go to the same endpoint.
    Hash(HashOn),
}

/// What `ConsistentHash` hashes; a request without it gets pier's default pick.
#[derive(Debug, Serialize)]
pub enum HashOn {
    /// The client address pier derives (trusted proxies, PROXY protocol).
    SourceIp,
    Header(#[serde(serialize_with = "ser_header_name")] HeaderName),
    /// The cookie `name`; with `ttl`, pier makes one for a request without it (set on the
    /// response with that Max-Age).
    Cookie {
        name: String,
        #[serde(
            skip_serializing_if = "Option::is_none",
            with = "super::backend::opt_duration"
        )]
        ttl: Option<Duration>,
    },
}

/// `faultInjection`: what is injected into a share of the requests, to see how clients and
/// the system cope (a delay first, then an abort, as Envoy's fault filter).
#[derive(Debug, Serialize)]
pub struct Faults {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay: Option<FaultDelay>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abort: Option<FaultAbort>,
}

#[derive(Debug, Serialize)]
pub struct FaultDelay {
    #[serde(serialize_with = "super::backend::ms")]
    pub delay: Duration,
    pub share: Share,
}

#[derive(Debug, Serialize)]
pub struct FaultAbort {
    pub abort: Abort,
    pub share: Share,
}

/// The answer of an injected abort.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Abort {
    /// This HTTP status.
    Http(u16),
    /// A gRPC Trailers-Only answer with this status code.
    Grpc(u16),
}

/// A share of requests, in millionths (`percentage` × 10 000): 1 000 000 is every one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Share(pub u32);

impl Share {
    pub const ALL: u32 = 1_000_000;
}

/// `compressor[]`: the encodings pier may compress a response in, in the policy's order (its
/// preference among encodings the client weighs the same).
#[derive(Debug, Serialize)]
pub struct Compression {
    pub compressors: Box<[Compressor]>,
}

/// One `compressor[]` entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Compressor {
    pub encoding: Encoding,
    /// A response whose Content-Length is below this goes out as it is (Envoy's default: 30).
    pub min_content_length: u64,
}

/// A content coding pier compresses with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Encoding {
    Gzip,
    Brotli,
    Zstd,
}

impl Encoding {
    /// The token in `Accept-Encoding` and `Content-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Encoding::Gzip => "gzip",
            Encoding::Brotli => "br",
            Encoding::Zstd => "zstd",
        }
    }
}

/// One `rateLimit.local.rules[]` entry.
#[derive(Debug, Serialize)]
pub struct LimitRule {
    /// All must match (none: every request).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub selectors: Vec<Selector>,
    #[serde(serialize_with = "ser_limit")]
    pub limit: Limit,
    /// One bucket table for every target of the policy, instead of one per Route.
    pub shared: bool,
    /// The rule's identity for carrying its buckets across reloads: its policy, position,
    /// limit and selectors (a change to any of them starts new buckets).
    #[serde(skip)]
    pub key: String,
}

/// One `clientSelectors[]` entry: every part given must match.
#[derive(Debug, Default, Serialize)]
pub struct Selector {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<HeaderSelect>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceSelect>,
    /// The request's method is one of the non-inverted ones (if any) and none of the inverted.
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "ser_methods")]
    pub methods: Vec<(Method, bool)>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathSelect>,
}

#[derive(Debug, Serialize)]
pub enum HeaderSelect {
    /// The header has a value that matches (`invert`: it has none that does).
    Match {
        #[serde(serialize_with = "ser_header_name")]
        name: HeaderName,
        value: ValueMatch,
        invert: bool,
    },
    /// The header is present; one bucket per value.
    Distinct(#[serde(serialize_with = "ser_header_name")] HeaderName),
}

#[derive(Debug, Serialize)]
pub struct SourceSelect {
    pub cidr: Cidr,
    /// One bucket per client address in `cidr`.
    pub distinct: bool,
}

#[derive(Debug, Serialize)]
pub struct PathSelect {
    pub path: PathMatch,
    pub invert: bool,
}

/// A rule's policy and the bucket tables of its limit rules (same order), each with the key
/// it is carried by; the service that keeps its global limits.
#[derive(Debug, Serialize)]
pub struct RuleTraffic {
    pub policy: Arc<TrafficPolicy>,
    #[serde(skip)]
    pub local: Box<[(Arc<str>, Arc<Buckets>)]>,
    /// Set when the policy has global rules.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub global: Option<GlobalLimits>,
    /// [`RuleTraffic::needs_hyper`], decided when the rule is made.
    #[serde(skip)]
    hyper: bool,
}

/// Envoy's rate-limit service (`envoy.service.ratelimit.v3.RateLimitService`), as
/// `--rate-limit-service` names it.
#[derive(Debug, Serialize)]
pub struct RateLimitService {
    /// Its address, as a backend of pier's upstream pool (h2c, endpoint state carried).
    #[serde(skip)]
    pub backend: Arc<super::Backend>,
    /// `:authority` of the calls.
    pub authority: String,
    /// How long pier waits for an answer (then the request fails open, or closed).
    #[serde(serialize_with = "super::backend::ms")]
    pub timeout: Duration,
    /// The domain every descriptor pier sends is in (the service's config file has it).
    pub domain: String,
}

impl RateLimitService {
    /// The service at `addr` (one endpoint, h2c), asked within `timeout`, in `domain`.
    pub fn new(addr: std::net::SocketAddr, timeout: Duration, domain: String) -> Self {
        use super::backend::{AppProtocol, Backend, BackendId, Endpoint};
        let backend = Backend {
            id: BackendId {
                service: super::ObjectRef::new("pier.dev", "rate-limit-service"),
                port: addr.port(),
            },
            protocol: AppProtocol::H2c,
            endpoints: vec![Endpoint::new(addr)],
            tls: Default::default(),
            max_requests: None,
            max_pending: None,
            max_connections: None,
            max_retries: None,
            connect_timeout: None,
            retry_constraint: None,
            outlier: Default::default(),
            load: Default::default(),
        };
        Self {
            backend: Arc::new(backend),
            authority: addr.to_string(),
            timeout,
            domain,
        }
    }
}

/// A rule's global limits: the service, and the descriptor value of each global rule of the
/// policy for this rule's Route.
#[derive(Debug, Serialize)]
pub struct GlobalLimits {
    pub service: Arc<RateLimitService>,
    /// `<policy ns>/<name>/<rule index>` for a shared rule, with `/<route ns>/<route name>`
    /// otherwise: the value of the descriptor entry [`RULE_KEY`].
    pub values: Box<[Arc<str>]>,
}

/// The first entry of every descriptor pier sends: which rule (and Route) it counts for.
pub const RULE_KEY: &str = "pier.dev/rule";

/// The key of a descriptor entry for a Distinct header.
pub fn header_key(name: &HeaderName) -> String {
    format!("header:{}", name.as_str())
}

/// The key of a descriptor entry for a Distinct client address.
pub const CLIENT_KEY: &str = "client";

/// One descriptor: (key, value) entries, the rule's first.
pub type Descriptor = Vec<(String, String)>;

/// What a limit reads of a request.
#[derive(Clone, Copy, Debug)]
pub struct LimitRequest<'a> {
    /// The client address pier derived (trusted proxies, PROXY protocol).
    pub client: IpAddr,
    pub method: &'a Method,
    /// The normalised path.
    pub path: &'a str,
    pub headers: &'a HeaderMap,
}

/// A request over a limit: what the 429 says (IETF draft-ietf-httpapi-ratelimit-headers-03, as
/// Envoy sends it).
#[derive(Clone, Debug)]
pub struct Limited {
    /// The policy whose limit it is (its `source` labels the metric).
    pub policy: Arc<TrafficPolicy>,
    pub limit: Limit,
    /// When a request would be admitted again.
    pub retry_after: Duration,
    /// When the bucket is full again.
    pub reset: Duration,
}

// === impl RuleTraffic ===

impl RuleTraffic {
    /// One request at `now`: every limit rule whose selectors match takes it from its bucket;
    /// the first one over its limit refuses it (later rules are not charged).
    pub fn take(&self, req: &LimitRequest<'_>, now: Instant) -> Result<(), Box<Limited>> {
        for (rule, (_, buckets)) in self.policy.local.iter().zip(self.local.iter()) {
            let Some(key) = rule.key_of(req, buckets) else {
                continue;
            };
            if let Decision::Refuse { retry_after, reset } = buckets.take(key, now) {
                return Err(Box::new(Limited {
                    policy: self.policy.clone(),
                    limit: rule.limit,
                    retry_after,
                    reset,
                }));
            }
        }
        Ok(())
    }
}

// === impl LimitRule ===

impl LimitRule {
    /// The bucket the request counts against, or `None` when the rule does not apply: a
    /// selector does not match, or a `Distinct` header is missing.
    fn key_of(&self, req: &LimitRequest<'_>, buckets: &Buckets) -> Option<u64> {
        if self.selectors.is_empty() {
            return Some(0);
        }
        let mut distinct = buckets.hasher();
        for s in &self.selectors {
            if !s.matches(req, &mut distinct)? {
                return None;
            }
        }
        Some(distinct.finish())
    }

    /// The descriptor a global rule sends for the request (`value`: its [`RULE_KEY`] entry),
    /// or `None` when the rule does not apply.
    pub fn descriptor(&self, req: &LimitRequest<'_>, value: &str) -> Option<Descriptor> {
        let mut entries = vec![(RULE_KEY.to_string(), value.to_string())];
        for s in &self.selectors {
            if !s.matches(req, &mut entries)? {
                return None;
            }
        }
        Some(entries)
    }

    /// The keys of the Distinct entries a descriptor of this rule has, in order (what the
    /// service's config nests under the rule's entry).
    pub fn distinct_keys(&self) -> Vec<String> {
        let mut keys = vec![];
        for s in &self.selectors {
            if s.source.as_ref().is_some_and(|c| c.distinct) {
                keys.push(CLIENT_KEY.to_string());
            }
            for h in &s.headers {
                if let HeaderSelect::Distinct(name) = h {
                    keys.push(header_key(name));
                }
            }
        }
        keys
    }
}

/// Where a selector puts the values of its Distinct parts: a bucket key, or descriptor
/// entries.
pub trait DistinctSink {
    fn client(&mut self, ip: IpAddr);
    fn header(&mut self, name: &HeaderName, value: &[u8]);
}

impl DistinctSink for crate::ratelimit::KeyHasher {
    fn client(&mut self, ip: IpAddr) {
        self.add_addr(ip);
    }

    fn header(&mut self, _: &HeaderName, value: &[u8]) {
        self.add_bytes(value);
    }
}

impl DistinctSink for Descriptor {
    fn client(&mut self, ip: IpAddr) {
        self.push((CLIENT_KEY.to_string(), ip.to_string()));
    }

    fn header(&mut self, name: &HeaderName, value: &[u8]) {
        self.push((
            header_key(name),
            String::from_utf8_lossy(value).into_owned(),
        ));
    }
}

impl Selector {
    /// Whether the selector matches; `None` when a `Distinct` header is missing. Distinct
    /// values go into `key`.
    fn matches(&self, req: &LimitRequest<'_>, key: &mut impl DistinctSink) -> Option<bool> {
        // One pass: an inverted method that is the request's excludes it; otherwise it must
        // be among the listed ones, if any are.
        let (mut listed, mut in_listed) = (false, false);
        for (m, invert) in &self.methods {
            match (*invert, m == req.method) {
                (true, true) => return Some(false),
                (true, false) => {}
                (false, is) => (listed, in_listed) = (true, in_listed || is),
            }
        }
        if listed && !in_listed {
            return Some(false);
        }
        if let Some(p) = &self.path
            && p.path.matches(req.path) == p.invert
        {
            return Some(false);
        }
        if let Some(s) = &self.source {
            let client = req.client.to_canonical();
            if !s.cidr.contains(client) {
                return Some(false);
            }
            if s.distinct {
                key.client(client);
            }
        }
        for h in &self.headers {
            match h {
                HeaderSelect::Match {
                    name,
                    value,
                    invert,
                } => {
                    let found = (req.headers.get_all(name).iter())
                        .any(|v| v.to_str().is_ok_and(|v| value.matches(v)));
                    if found == *invert {
                        return Some(false);
                    }
                }
                HeaderSelect::Distinct(name) => {
                    key.header(name, req.headers.get(name)?.as_bytes());
                }
            }
        }
        Some(true)
    }
}

impl TrafficPolicy {
    /// Whether a rule under the policy has anything to do per request (else it carries no
    /// [`RuleTraffic`]; a request timeout is set on the rule itself).
    pub fn acts_per_request(&self) -> bool {
        !self.local.is_empty()
            || !self.global.is_empty()
            || self.compression.is_some()
            || self.faults.is_some()
            || self.balance.is_some()
            || self.request_buffer.is_some()
    }

    /// A rule's view of the policy: one bucket table per limit rule, from `tables` by the
    /// rule's key (with the Route's when not shared), made when new; `global` when the policy's
    /// global rules have a service to ask.
    pub fn for_route(
        self: &Arc<Self>,
        route: &super::ObjectRef,
        global: Option<GlobalLimits>,
        mut table: impl FnMut(&str, Limit, usize) -> Arc<Buckets>,
    ) -> RuleTraffic {
        let local = self
            .local
            .iter()
            .map(|r| {
                let distinct = !r.distinct_keys().is_empty();
                let key = if r.shared {
                    r.key.clone()
                } else {
                    format!("{}|route={route}", r.key)
                };
                let capacity = if distinct { DISTINCT_KEYS } else { 1 };
                let buckets = table(&key, r.limit, capacity);
                (Arc::from(key), buckets)
            })
            .collect();
        // Decided here, once: what the fast path leaves to hyper's (a call to the rate-limit
        // service, a body to compress, a delay to wait, an endpoint the policy picks).
        let hyper = global.is_some()
            || self.compression.is_some()
            || (self.faults.as_ref()).is_some_and(|f| f.delay.is_some())
            || self.balance.is_some();
        RuleTraffic {
            policy: self.clone(),
            local,
            global,
            hyper,
        }
    }

    /// The [`RULE_KEY`] value of global rule `index` on `route`.
    pub fn global_value(&self, index: usize, route: &super::ObjectRef) -> String {
        match self.global[index].shared {
            true => format!("{}/{index}", self.source),
            false => format!("{}/{index}/{route}", self.source),
        }
    }
}

impl RuleTraffic {
    /// What the HTTP/1.1 fast path leaves to hyper's: a call to the rate-limit service, a
    /// response body to compress, a delay to inject, or a load-balancing policy.
    #[inline]
    pub fn needs_hyper(&self) -> bool {
        self.hyper
    }

    /// The descriptors of the global rules that apply to the request (empty: no call).
    pub fn descriptors(&self, req: &LimitRequest<'_>) -> Vec<Descriptor> {
        let Some(g) = &self.global else {
            return vec![];
        };
        (self.policy.global.iter().zip(g.values.iter()))
            .filter_map(|(rule, value)| rule.descriptor(req, value))
            .collect()
    }
}

fn ser_limit<S: serde::Serializer>(l: &Limit, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{}/{}s", l.requests, l.period.as_secs()))
}

fn ser_methods<S: serde::Serializer>(m: &[(Method, bool)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(
        m.iter()
            .map(|(m, invert)| format!("{}{}", if *invert { "!" } else { "" }, m)),
    )
}

#[cfg(test)]
mod tests;
