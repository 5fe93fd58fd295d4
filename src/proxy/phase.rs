//! The request path's phases: each step of a request is done here, once, and both request
//! paths (`downstream::h1`, the HTTP/1.1 fast path, and `downstream::service`, hyper's) call
//! these functions in this order, so a route's policies, filters and records cannot differ
//! between them. A new kind of policy enters at one of these functions and nowhere else.
//!
//! ```text
//! arrive         the request's identity: client, request ID, trace context; the log head
//! listener       port and listener (listener isolation; 421 when the SNI chose another)
//! listener_filters (hyper's path, listeners with `filters`, GEP-5224) the listener's
//!                authorizers, in order, before routing (their answer, or on)
//! route          the route table's rule, recorded in the request's `Seen`
//! fault_delay    (hyper's path, rules with faultInjection.delay) the injected wait
//! decide         CORS preflight ─> an injected abort ─> access (authentication; authorization rules unless an
//!                external authorizer comes first; the decision and principal recorded in
//!                `Seen`) ─> rate limits (BackendTrafficPolicy, 429) ─> redirect, or the
//!                backendRef to forward to
//! request_buffer (rules with requestBuffer) the body's limit: 413 for a longer declared
//!                body; hyper's path reads it whole before the exchange
//! global_limits  (hyper's path, rules with global rate limits) one call to the rate-limit
//!                service (429; no answer: on, or 500 under failClosed)
//! ext_auth       (hyper's path, rules with an authorizer) the authorizers, then the
//!                authorization rules
//! request_head   request header filters, URL rewrite, hop hygiene, forwarding headers
//!    ... exchange (admission, endpoint, send, outcome): `exchange`, or h1's raw exchange
//! response_head  hop hygiene, CORS headers, response header filters
//! compress       (hyper's path, rules with a compressor) the encoding the request accepted
//!                ([`accept_encoding`], before the request goes), applied to the response
//! failed / log   pier's own answer recorded; metrics, the access log, the span
//! ```
//!
//! What a rule needs is decided at translation: a rule without an access policy has
//! `Rule::access == None`, and `access` costs it one branch; one without a rate limit has
//! `Rule::traffic == None`, one branch more. The fast path writes the request
//! head itself when `request_head` has nothing to do ([`rewrites_request`]) and the response
//! head when `response_head` has nothing to do ([`rewrites_response`]); otherwise it calls
//! them on a header map like the hyper path.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderName, StatusCode};

use crate::model::filter::CorsResponse;
use crate::model::policy::{AccessRequest, BasicVerdict};
use crate::model::traffic::{LimitRequest, RuleTraffic, Share};
use crate::model::{Listener, Port, Rule, Snapshot, WeightedBackend};
use crate::proxy::body::ProxyBody;
use crate::proxy::body::compress::Compressed;
use crate::proxy::conn_info::ConnInfo;
use crate::proxy::error::ProxyError;
use crate::proxy::exchange::Shared;
use crate::proxy::headers::{X_FORWARDED_FOR, X_FORWARDED_HOST, X_FORWARDED_PROTO};
use crate::proxy::observe::access::{self, Done, LogHead};
use crate::proxy::observe::forwarded::{Edge, FORWARDED, X_REQUEST_ID};
use crate::proxy::observe::record::{Failure, Security, Seen};
use crate::proxy::observe::trace::{self, RequestLine, TRACEPARENT, TRACESTATE};
use crate::proxy::policy::compress;
pub use crate::proxy::policy::compress::Negotiated;
use crate::proxy::policy::{access as access_policy, head, route as routing};
use crate::proxy::validate::Invalid;

mod ext_auth;

pub use crate::proxy::policy::access::{Admitted, Edit};

pub mod oidc;
pub use crate::proxy::policy::route::{Decision, RouteInput, Routed};
pub use ext_auth::{
    ExtAuthCtx, ExtAuthOutcome, ExtAuthed, Prefix, Prefixed, ext_auth, listener_filters,
    record as ext_auth_record,
};

/// Request head: the rule's and the backendRef's request filters, the URL rewrite, hop
/// hygiene, forwarding headers and Host on the head's parts; the path and query to send.
pub use crate::proxy::policy::head::prepare_head as request_head;

/// Response head: hop hygiene, the CORS headers, the response header filters.
pub use crate::proxy::policy::head::response_head;

/// The header names [`arrive`] reads: the forwarding headers and the trace context.
static ARRIVAL_HEADERS: [HeaderName; 7] = [
    X_FORWARDED_FOR,
    X_FORWARDED_PROTO,
    X_FORWARDED_HOST,
    FORWARDED,
    X_REQUEST_ID,
    TRACEPARENT,
    TRACESTATE,
];

/// What [`arrive`] makes of a request: its forwarding identity (client, request ID, what a
/// trusted hop sent, the trace context when tracing is on) and its log head when the access
/// log may be on.
pub struct Arrival {
    pub edge: Edge,
    pub log: Option<LogHead>,
}

/// Arrive: the request's [`Arrival`]. `lines` gives the request's header lines (`(name,
/// value)`, names in any case) each time it is called; `log` makes the log head. Built in
/// place where the caller keeps it (inlined: the fast path's per-request state holds it).
#[inline(always)]
pub fn arrive<'h, I>(
    shared: &Shared,
    snapshot: &Snapshot,
    conn: &ConnInfo,
    lines: impl Fn() -> I,
    line: RequestLine<'_>,
    log: impl FnOnce() -> LogHead,
) -> Arrival
where
    I: Iterator<Item = (&'h str, &'h [u8])>,
{
    let trace = trace::start(shared.tracer.as_ref(), conn.trusted_hop, lines(), line);
    Arrival {
        log: access::may_log(shared.config.access_log, snapshot, conn).then(log),
        edge: Edge::read_traced(
            conn.trusted_proxies(&shared.config.trusted_proxies),
            conn.hop(),
            lines(),
            trace,
        ),
    }
}

/// The lines of a header map that [`arrive`] reads (the hyper path), in the map's order: one
/// pass over the request's few lines, most told apart by their length, rather than a lookup
/// (a hash of the name) for each of the seven names.
pub fn map_lines(headers: &HeaderMap) -> impl Iterator<Item = (&str, &[u8])> {
    headers
        .iter()
        .filter(|(name, _)| is_arrival_header(name))
        .map(|(name, v)| (name.as_str(), v.as_bytes()))
}

fn is_arrival_header(name: &HeaderName) -> bool {
    let name = name.as_str();
    // x-request-id 12, forwarded 9, tracestate 10, traceparent 11, x-forwarded-* 15 to 17.
    matches!(name.len(), 9..=12 | 15..=17) && ARRIVAL_HEADERS.iter().any(|h| h.as_str() == name)
}

/// Listener: the port the connection arrived on and its listener for the normalised `host`.
#[inline(always)]
pub fn listener<'s>(
    snapshot: &'s Snapshot,
    conn: &ConnInfo,
    host: &str,
) -> Result<(&'s Port, &'s Listener), ProxyError> {
    routing::listener_for(snapshot, conn, host)
}

/// Route: the listener's rule for the request (normalised `host`), recorded in `seen`.
#[inline(always)]
pub fn route<'s>(
    (port, listener): (&'s Port, &'s Listener),
    host: &str,
    input: &RouteInput<'_>,
    seen: &mut Seen<'s>,
) -> Result<Routed<'s>, ProxyError> {
    let routed = routing::route_on(port, listener, host, input)?;
    seen.routed(routed.listener, routed.entry);
    Ok(routed)
}

/// Decide: what the rule comes to. A CORS preflight is answered first (browsers send it
/// without credentials); then an abort the rule's `faultInjection` rolls (before
/// authentication, as Envoy Gateway orders its fault filter); then the rule's access policies ([`access`]) must let the request
/// in; then its rate limits ([`limits`]) must have room for it (so a refused client is not
/// counted, as Envoy Gateway orders its filters); then a redirect is answered, or the
/// request goes to a backendRef.
///
/// `input.headers` must hold the request's headers when [`Rule::needs_headers`]; `arrived` is
/// when the request's head was read (the rate limits' clock: no second reading of it).
#[inline(always)]
pub fn decide<'s>(
    routed: &Routed<'s>,
    input: &RouteInput<'_>,
    (conn, edge): (&ConnInfo, &Edge),
    basic: Option<&BasicVerdict>,
    admitted: &mut Option<Admitted>,
    seen: &mut Seen<'s>,
    arrived: std::time::Instant,
) -> Result<Decision<'s>, ProxyError> {
    let decided = routing::decide(routed, input);
    if !matches!(decided, Ok(Decision::Preflight(_))) {
        let rule: &'s Rule = &routed.entry.rule;
        if let Some(traffic) = &rule.traffic
            && let Some(abort) = traffic
                .policy
                .faults
                .as_ref()
                .and_then(|f| f.abort.as_ref())
            && roll(abort.share)
        {
            return Err(ProxyError::Injected(abort.abort, traffic.policy.clone()));
        }
        if let Some(policy) = &rule.access {
            match access(rule, (conn, edge), input, basic) {
                Ok(mut a) => {
                    if let Some(a) = &mut a {
                        let s = Security::allowed(policy, &mut a.authenticated);
                        seen.security = Some(Box::new(s));
                    }
                    *admitted = a;
                }
                Err(e) => {
                    seen.security = Some(Box::new(Security::refused(policy, &e)));
                    return Err(e);
                }
            }
        }
        if let Some(traffic) = &rule.traffic {
            limits(traffic, input, edge, arrived)?;
        }
    }
    decided
}

/// Rate limits: one request from the bucket of each of the rule's limits whose selectors
/// match; over any: 429 ([`ProxyError::RateLimited`]).
#[inline(never)]
pub fn limits(
    traffic: &RuleTraffic,
    input: &RouteInput<'_>,
    edge: &Edge,
    now: std::time::Instant,
) -> Result<(), ProxyError> {
    let req = LimitRequest {
        client: edge.client,
        method: input.method,
        path: input.path,
        headers: input.headers,
    };
    (traffic.take(&req, now)).map_err(ProxyError::RateLimited)
}

/// Request buffer (rules with a BackendTrafficPolicy's `requestBuffer`): the most body bytes
/// the request may have, read whole before anything goes upstream; a `declared` length above
/// it is 413 at once. `None`: the rule streams bodies. The fast path holds every body it
/// forwards whole already (declared, at most 64 KiB), so it only checks the length; hyper's
/// path reads the body to its end within the limit (413 past it).
#[inline]
pub fn request_buffer(rule: &Rule, declared: Option<u64>) -> Result<Option<u64>, ProxyError> {
    let Some(limit) = rule.traffic.as_ref().and_then(|t| t.policy.request_buffer) else {
        return Ok(None);
    };
    if declared.is_some_and(|n| n > limit) {
        return Err(ProxyError::Invalid(Invalid::BodyTooLarge));
    }
    Ok(Some(limit))
}

/// Whether this request falls in `share`.
#[inline]
fn roll(share: Share) -> bool {
    share.0 >= Share::ALL || (share.0 > 0 && rand::random_range(0..Share::ALL) < share.0)
}

/// Load balancing (hyper's path; the fast path leaves rules with a `loadBalancer` to it): the
/// endpoint of `backend` the rule's policy picks for this request (`RoundRobin`, `Random`,
/// `ConsistentHash` on the client address, a header or a cookie). `None`: the default pick
/// (no policy, no key in the request, or no endpoint available).
pub fn balance<'b>(
    shared: &Shared,
    rule: &Rule,
    backend: &'b crate::model::Backend,
    edge: &Edge,
    headers: &HeaderMap,
    set_cookie: &mut Option<http::HeaderValue>,
) -> Option<&'b crate::model::Endpoint> {
    use crate::model::traffic::{Balance, HashOn};
    let how = rule.traffic.as_ref()?.policy.balance.as_ref()?;
    let now = shared.clock.now_ms();
    match how {
        Balance::RoundRobin => backend.pick_in_turn(now),
        Balance::Random => backend.pick_random(now, rand::random()),
        Balance::Hash(on) => {
            let ip;
            let key: &[u8] = match on {
                HashOn::SourceIp => {
                    ip = match edge.client {
                        std::net::IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
                        std::net::IpAddr::V6(a) => a.octets(),
                    };
                    &ip
                }
                HashOn::Header(name) => headers.get(name)?.as_bytes(),
                HashOn::Cookie { name, ttl } => {
                    match (crate::model::session::cookie(headers, name), ttl) {
                        (Some(v), _) => v.as_bytes(),
                        (None, None) => return None,
                        // A new client: a random value, hashed now and kept by the client.
                        (None, Some(ttl)) => {
                            let value = format!("{:032x}", rand::random::<u128>());
                            *set_cookie = http::HeaderValue::from_str(&format!(
                                "{name}={value}; Path=/; Max-Age={}; HttpOnly",
                                ttl.as_secs()
                            ))
                            .ok();
                            return backend.pick_hashed(now, value.as_bytes());
                        }
                    }
                }
            };
            backend.pick_hashed(now, key)
        }
    }
}

/// Fault injection, delay (hyper's path; the fast path leaves rules with a delay to it): for
/// the share of requests the rule's `faultInjection.delay` names, a wait before anything else
/// happens to the request after routing (Envoy's order: the delay, then the abort).
pub async fn fault_delay(shared: &Shared, rule: &Rule) {
    let Some(traffic) = &rule.traffic else {
        return;
    };
    let Some(delay) = (traffic.policy.faults.as_ref()).and_then(|f| f.delay.as_ref()) else {
        return;
    };
    if roll(delay.share) {
        shared.metrics.fault(&traffic.policy.source, "delay");
        tokio::time::sleep(delay.delay).await;
    }
}

/// Global rate limits (hyper's path, after [`decide`]): one call to the rate-limit service
/// with the descriptors of the rule's global limits that apply (none: no call). Over a limit:
/// 429 with the service's limit and reset; no answer within its timeout: the request goes on,
/// or gets a 500 when the policy is `failClosed`. The HTTP/1.1 fast path leaves such rules to
/// hyper's path.
pub async fn global_limits(
    shared: &Shared,
    rule: &Rule,
    input: &RouteInput<'_>,
    edge: &Edge,
) -> Result<(), ProxyError> {
    use crate::proxy::exchange::rate_limit::{self, Answer};
    let Some(traffic) = &rule.traffic else {
        return Ok(());
    };
    let Some(global) = &traffic.global else {
        return Ok(());
    };
    let req = LimitRequest {
        client: edge.client,
        method: input.method,
        path: input.path,
        headers: input.headers,
    };
    let descriptors = traffic.descriptors(&req);
    if descriptors.is_empty() {
        return Ok(());
    }
    let answer = rate_limit::ask(shared, &global.service, descriptors).await;
    let result = match &answer {
        Ok(Answer::Ok) => "ok",
        Ok(Answer::OverLimit { .. }) => "overLimit",
        Err(e) => e.as_str(),
    };
    shared.metrics.rate_limit_call(result);
    match answer {
        Ok(Answer::Ok) => Ok(()),
        Ok(Answer::OverLimit { limit, reset }) => Err(ProxyError::RateLimited(Box::new(
            crate::model::traffic::Limited {
                policy: traffic.policy.clone(),
                limit,
                // A fixed window: nothing comes back before it resets.
                retry_after: reset,
                reset,
            },
        ))),
        Err(_) if traffic.policy.fail_closed => Err(ProxyError::RateLimitUnavailable),
        Err(_) => Ok(()),
    }
}

/// Password verifications (bcrypt, SHA-crypt) running at once, at most: one per hashing
/// thread (`auth::hashers`: one per core, at the lowest CPU priority), so a flood of wrong
/// passwords takes those threads and what CPU the proxy's own threads leave them.
fn hashing() -> &'static tokio::sync::Semaphore {
    static HASHING: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    HASHING.get_or_init(|| tokio::sync::Semaphore::new(crate::auth::hashers::threads()))
}

/// How long a request waits for a turn to have its password verified before it gets a 503.
const HASHING_WAIT: Duration = Duration::from_millis(500);

/// Basic auth, before [`decide`]: the verdict on the request's `Authorization: Basic`, for a
/// rule whose policy has basic auth (`None` otherwise). Passwords verified in the last
/// minute come from a cache (no hash); others are hashed on pier's low-priority hashing
/// threads (`auth::hashers`), at most one per core at once, a request waiting at most [`HASHING_WAIT`] for its turn (then `Busy`:
/// 503). The HTTP/1.1 fast path leaves such rules to hyper's path.
pub async fn verify_basic(rule: &Rule, headers: &HeaderMap) -> Option<BasicVerdict> {
    let b = rule.access.as_ref()?.basic.as_ref()?;
    let Some((user, password)) = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| crate::auth::htpasswd::basic_credentials(v.as_bytes()))
    else {
        return Some(BasicVerdict::Missing);
    };
    let now = std::time::Instant::now();
    if b.verified.contains(&user, &password, now) {
        return Some(BasicVerdict::User(user));
    }
    let Ok(Ok(_permit)) = tokio::time::timeout(HASHING_WAIT, hashing().acquire()).await else {
        return Some(BasicVerdict::Busy);
    };
    let users = b.users.clone();
    let verified = b.verified.clone();
    let verdict = crate::auth::hashers::run(move || {
        if users.verify(&user, &password) {
            verified.insert(&user, &password, now);
            BasicVerdict::User(user)
        } else {
            BasicVerdict::Refused
        }
    })
    .await
    .unwrap_or(BasicVerdict::Busy);
    Some(verdict)
}

/// Access: whether the rule's access policies let the request in (missing or bad
/// credentials: 401; denied: 403; an invalid policy: 500), and what it brings along (who,
/// and header changes: [`apply`] them before [`request_head`]). A rule without any pays this
/// one branch. `input.headers` must hold the request's headers when [`Rule::needs_headers`].
#[inline(always)]
pub fn access(
    rule: &Rule,
    (conn, edge): (&ConnInfo, &Edge),
    input: &RouteInput<'_>,
    basic: Option<&BasicVerdict>,
) -> Result<Option<Admitted>, ProxyError> {
    match &rule.access {
        None => Ok(None),
        Some(policy) => access_policy::check(
            policy,
            &AccessRequest {
                client: edge.client,
                client_sans: conn.client_identity.as_ref().map_or(&[], |c| &c.sans),
                method: input.method,
                headers: input.headers,
                query: input.query,
                authenticated: None,
                basic,
            },
        )
        .map(Some),
    }
}

/// The header changes access asked for (claims to headers, a client ID, a key removed).
pub fn apply(admitted: &Admitted, headers: &mut HeaderMap) {
    for e in &admitted.edits {
        match e {
            Edit::Set(name, value) => {
                headers.insert(name.clone(), value.clone());
            }
            Edit::Remove(name) => {
                headers.remove(name);
            }
        }
    }
}

/// Whether [`request_head`] has header filters to apply (else the fast path writes the
/// client's lines with the forwarding headers itself).
#[inline(always)]
pub fn rewrites_request(rule: &Rule, weighted: &WeightedBackend) -> bool {
    rule.filters.request_headers.is_some() || weighted.filters.request_headers.is_some()
}

/// Whether [`response_head`] has more to do than hop hygiene (else the fast path copies the
/// upstream's lines itself).
#[inline(always)]
pub fn rewrites_response(
    rule: &Rule,
    weighted: &WeightedBackend,
    cors: Option<&CorsResponse<'_>>,
) -> bool {
    cors.is_some() || head::response_modifiers(rule, weighted).next().is_some()
}

/// Compression, request side (hyper's path; the fast path leaves rules with a compressor to
/// it): the encoding the rule's `compressor` and the request's `Accept-Encoding` allow its
/// response. `None`: the rule compresses nothing.
#[inline]
pub fn accept_encoding<'s>(
    rule: &'s Rule,
    method: &http::Method,
    headers: &HeaderMap,
) -> Option<Negotiated<'s>> {
    let compression = rule.traffic.as_ref()?.policy.compression.as_ref()?;
    Some(compress::negotiate(compression, method, headers))
}

/// Compression, response side (after [`response_head`], so a response header filter's
/// `Cache-Control: no-transform` counts): a response that may be compressed gets `Vary:
/// Accept-Encoding`, and, when the client accepted an encoding, the compressed head and a
/// body compressed as it streams (`body::compress`).
pub fn compress(
    shared: &Shared,
    negotiated: &Negotiated<'_>,
    parts: &mut http::response::Parts,
    body: ProxyBody,
) -> ProxyBody {
    let min = match negotiated.chosen {
        Some(c) => c.min_content_length,
        None => (negotiated.compression.compressors.iter())
            .map(|c| c.min_content_length)
            .min()
            .unwrap_or(0),
    };
    if !compress::eligible(parts.status, &parts.headers, min) {
        return body;
    }
    compress::vary(&mut parts.headers);
    let Some(chosen) = negotiated.chosen else {
        return body;
    };
    let token = chosen.encoding.token();
    match Compressed::new(body, chosen.encoding, shared.metrics.compressing(token)) {
        Ok(compressed) => {
            compress::compressed_head(&mut parts.headers, chosen.encoding);
            crate::proxy::body::boxed(compressed)
        }
        // The encoder could not start (zstd's allocation): the body goes as it is.
        Err((error, body)) => {
            tracing::warn!(%error, encoding = token, "cannot start a response encoder");
            body
        }
    }
}

/// Failed: pier answers the request itself with `error`; counted, and recorded for the log.
pub fn failed(shared: &Shared, seen: &mut Seen<'_>, error: &ProxyError, port: u16) {
    shared.metrics.error(error.kind(), error.side());
    if let ProxyError::RateLimited(l) = error {
        shared.metrics.rate_limited(&l.policy.source);
    }
    if let ProxyError::Injected(_, policy) = error {
        shared.metrics.fault(&policy.source, "abort");
    }
    seen.failure = Some(Failure::of(error));
    tracing::debug!(%error, port, "request failed");
}

/// Log: once the response head is known, the request's metrics, its access log line (when
/// its listener or `--access-log` wants one) and its span (when sampled).
#[allow(clippy::too_many_arguments)]
pub fn log(
    shared: &Shared,
    snapshot: &Arc<Snapshot>,
    conn: &ConnInfo,
    edge: &Edge,
    seen: &Seen<'_>,
    head: Option<&LogHead>,
    (status, bytes_out): (StatusCode, Option<u64>),
    elapsed: Duration,
) {
    shared
        .metrics
        .request_done(snapshot, seen.reached, status, elapsed.as_secs_f64());
    if let Some(security) = &seen.security {
        let s = security;
        (shared.metrics).security_decision(snapshot, s.policy, s.mechanism, s.result);
    }
    if let Some(head) = head
        && access::wanted(shared.config.access_log, seen)
    {
        let done = Done {
            status,
            bytes_out,
            elapsed,
        };
        head.log(shared.config.access_log_fields, conn, edge, seen, done);
    }
    trace::finish(
        shared.tracer.as_ref(),
        trace::End {
            conn,
            edge,
            seen,
            status,
        },
    );
}
