//! One request: route it over the current snapshot, apply the rule's filters, forward it to
//! one endpoint of one weighted backend, and record the outcome.
//!
//! ```text
//! handle ─> route (port, listener, rule) ─┬─> CORS preflight, redirect ──────────> response
//!           404 when nothing matches      └─> forward (within timeouts.request)
//!                                               pick backend (500 invalid) ─> filters
//!                                               ─> mirrors ─> pick endpoint (503 none)
//!                                               ─> upstream (502/503/504) ─> CORS headers,
//!                                                  response filters
//!                                               (a rule with `retry`: the attempts loop in
//!                                               `retry`, between filters and CORS headers)
//! ```
//!
//! The snapshot is loaded once per request (`load_full`, so the request can hold it across
//! awaits): a swap mid-request never mixes two configurations, and the request finishes with
//! the backend it was routed to.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use http::header::{HOST, LOCATION};
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{HeaderValue, Method, Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use rand::Rng;

use super::access::{self, LogHead};
use super::body::{self, ClientBody, FaultCell, ProxyBody};
use super::conn_info::ConnInfo;
use super::error::{ConnectReason, ProxyError, is_grpc};
use super::forwarded::Edge;
use super::headers::{self, Keep};
use super::metrics::{Reached, Transport};
use super::retry::{self, Retried};
use super::upstream::{self, InFlight, Target, UpstreamBody};
use super::validate::{self, Invalid};
use super::{Shared, mirror, trace, tunnel};
use crate::model::filter::{CorsCheck, CorsResponse, Preflight, RedirectInput};
use crate::model::host::normalize_host;
use crate::model::matcher::RequestParts;
use crate::model::session::{Session, SessionPolicy};
use crate::model::{
    AppProtocol, Backend, BackendSet, BackendTarget, BackendTls, Endpoint, Entry, Listener, Port,
    Redirect, Rule, Snapshot, UrlRewrite, WeightedBackend,
};

/// How far a request got, for metrics and the access log. Borrowed from the snapshot.
#[derive(Default)]
pub(super) struct Seen<'s> {
    /// Listener, route, backend and transport: the metric labels.
    pub reached: Reached<'s>,
    pub upstream: Option<SocketAddr>,
    /// The rule that matched, for the access log.
    pub rule: Option<&'s Rule>,
    /// The path match of the entry that matched (the span's `http.route`).
    pub path_match: Option<&'s crate::model::PathMatch>,
    /// The workload identity the upstream's certificate was checked against (per-endpoint
    /// mesh identity), for the access log.
    pub identity: Option<&'s str>,
    /// The listener's access log setting (`pier.dev/access-log`), once one is reached.
    pub access_log: Option<bool>,
    /// Why pier answered the request itself, for the access log.
    pub failure: Option<Failure>,
    /// The streamed request body's shared state: the bytes it read from the client, for the
    /// access log's `bytes_in`. `None` without a body, or when it was read whole first (a
    /// retry's buffer: its length is declared).
    pub body: Option<Arc<FaultCell>>,
}

impl<'s> Seen<'s> {
    /// The listener and rule routing reached.
    pub fn routed(&mut self, routed: &Routed<'s>) {
        self.reached.listener = Some(&routed.listener.id);
        self.reached.route = Some(&routed.entry.rule.route);
        self.rule = Some(&routed.entry.rule);
        self.path_match = Some(&routed.entry.matcher.path);
        self.access_log = routed.listener.access_log;
    }

    /// The endpoint the request is sent to.
    pub fn endpoint(&mut self, endpoint: &'s Endpoint) {
        self.upstream = Some(endpoint.addr);
        self.identity = endpoint.tls.as_ref().and_then(|t| t.identity.as_deref());
    }
}

/// A request pier failed: the error kind, and the TLS reason where there is one
/// (`identity_mismatch`, `unknown_ca`, `no_endpoint_identity`, ...).
#[derive(Clone, Copy, Debug)]
pub(super) struct Failure {
    pub kind: super::error::ErrorKind,
    pub detail: Option<&'static str>,
}

impl Failure {
    pub fn of(e: &ProxyError) -> Self {
        Self {
            kind: e.kind(),
            detail: e.tls_reason(),
        }
    }
}

/// The routing decision for one request.
pub(super) struct Routed<'s> {
    pub port: &'s Port,
    pub listener: &'s Listener,
    pub entry: &'s Entry,
}

/// What routing reads of a request.
pub(super) struct RouteInput<'r> {
    pub method: &'r Method,
    /// HTTP/2 `:authority`, an absolute-form authority, or the Host header, as sent.
    pub host: &'r str,
    pub path: &'r str,
    pub query: Option<&'r str>,
    pub headers: &'r http::HeaderMap,
}

pub async fn handle(
    shared: Arc<Shared>,
    conn: Arc<ConnInfo>,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let started = Instant::now();
    let snapshot = shared.snapshot.load_full();
    shared.upstream.observe(snapshot.generation);
    let mut edge = Edge::read_map(&shared.config.trusted_proxies, conn.hop(), req.headers());
    edge.trace = trace::start_map(
        shared.tracer.as_ref(),
        conn.trusted_hop,
        req.headers(),
        trace::RequestLine {
            method: req.method(),
            host: request_authority(&req),
            path: req.uri().path(),
        },
    );
    let log_head = access::may_log(&shared, &snapshot, &conn).then(|| LogHead::of(&req));
    let grpc = is_grpc(req.headers());
    let mut seen = Seen::default();
    let resp = match dispatch(&shared, &snapshot, &conn, (req, &edge), &mut seen, started).await {
        Ok(resp) => resp,
        Err(error) => {
            shared.metrics.error(error.kind(), error.side());
            seen.failure = Some(Failure::of(&error));
            tracing::debug!(%error, port = conn.port, "request failed");
            error.response(grpc)
        }
    };
    let elapsed = started.elapsed();
    shared.metrics.request_done(
        &snapshot,
        seen.reached,
        resp.status(),
        elapsed.as_secs_f64(),
    );
    if let Some(head) = log_head
        && access::wanted(&shared, &seen)
    {
        let done = access::Done {
            status: resp.status(),
            bytes_out: resp.body().size_hint().exact(),
            elapsed,
        };
        // A streamed body (chunked, HTTP/2 without a length): the bytes read from the client
        // by the time the response head came back.
        let head = match &seen.body {
            Some(body) => head.with_bytes_in(body.read()),
            None => head,
        };
        head.log(shared.config.access_log_fields, &conn, &edge, &seen, done);
    }
    trace::finish(
        shared.tracer.as_ref(),
        trace::End {
            conn: &conn,
            edge: &edge,
            seen: &seen,
            status: resp.status(),
        },
    );
    resp
}

/// The authority as sent (HTTP/2 `:authority`, an absolute-form URI's, else Host), port
/// included.
pub(super) fn request_authority<B>(req: &Request<B>) -> &str {
    match req.uri().authority() {
        Some(a) => a.as_str(),
        None => req
            .headers()
            .get(HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(""),
    }
}

async fn dispatch<'s>(
    shared: &Shared,
    snapshot: &'s Arc<Snapshot>,
    conn: &ConnInfo,
    (req, edge): (Request<Incoming>, &Edge),
    seen: &mut Seen<'s>,
    started: Instant,
) -> Result<Response<ProxyBody>, ProxyError> {
    // CONNECT (authority-form, no path) is not something an HTTPRoute can match.
    if req.method() == Method::CONNECT {
        return Err(ProxyError::NoRoute);
    }
    let mut req = checked(req, &shared.config.limits).map_err(ProxyError::Invalid)?;
    let header = {
        let host = normalize_host(routing_host(&req).unwrap_or(""));
        listener_for(snapshot, conn, &host)?
            .1
            .client_cert_header
            .as_ref()
    };
    if let Some(name) = header {
        // Before routing, so that header matches see the verified identity, never the
        // client's own value.
        client_identity(req.headers_mut(), name, conn);
    }
    let input = RouteInput {
        method: req.method(),
        host: routing_host(&req).unwrap_or(""),
        path: req.uri().path(),
        query: req.uri().query(),
        headers: req.headers(),
    };
    let routed = route(snapshot, conn, &input)?;
    seen.routed(&routed);
    let rule = &routed.entry.rule;
    let (weighted, cors) = match decide(&routed, &input)? {
        Decision::Respond(resp) => return Ok(resp),
        Decision::Forward(weighted, cors) => (weighted, cors),
    };
    // The future is built in each arm rather than once before the match: a future moved into
    // `timeout_at` would need room for both copies in this one, and every request moves it.
    match rule.timeouts.request {
        // `request` runs from the request's arrival, so time spent routing counts too.
        Some(t) => tokio::time::timeout_at(
            (started + t).into(),
            forward(
                shared,
                snapshot,
                conn,
                &routed,
                (weighted, cors),
                (req, edge),
                seen,
            ),
        )
        .await
        .map_err(|_| ProxyError::RequestTimeout)?,
        None => {
            forward(
                shared,
                snapshot,
                conn,
                &routed,
                (weighted, cors),
                (req, edge),
                seen,
            )
            .await
        }
    }
}

/// The request if it passes `validate`'s checks, with its path normalised.
fn checked<B: http_body::Body>(
    mut req: Request<B>,
    limits: &super::Limits,
) -> Result<Request<B>, Invalid> {
    validate::check_host(req.version(), req.headers(), req.uri().authority())?;
    validate::check_transfer_coding(req.headers())?;
    let target_len = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    validate::check_sizes(
        target_len,
        req.body().size_hint().exact(),
        limits.max_request_target,
        limits.max_request_body,
    )?;
    let normal = match validate::normalize_path(req.uri().path(), limits.merge_slashes)? {
        Cow::Borrowed(_) => return Ok(req),
        Cow::Owned(p) => p,
    };
    let target = match req.uri().query() {
        Some(q) => format!("{normal}?{q}"),
        None => normal,
    };
    let mut parts = req.uri().clone().into_parts();
    parts.path_and_query = Some(PathAndQuery::try_from(target).map_err(|_| Invalid::BadPath)?);
    *req.uri_mut() = Uri::from_parts(parts).map_err(|_| Invalid::BadPath)?;
    Ok(req)
}

/// Replaces whatever the client sent as `name` with the connection's verified client
/// certificate identity, if it has one.
pub(super) fn client_identity(
    headers: &mut http::HeaderMap,
    name: &http::HeaderName,
    conn: &ConnInfo,
) {
    headers.remove(name);
    if let Some(v) = &conn.client_identity {
        headers.insert(name.clone(), v.clone());
    }
}

/// Port, then listener isolation, then the route table, all on the normalised host.
pub(super) fn route<'s>(
    snapshot: &'s Snapshot,
    conn: &ConnInfo,
    req: &RouteInput<'_>,
) -> Result<Routed<'s>, ProxyError> {
    let host = normalize_host(req.host);
    let (port, listener) = listener_for(snapshot, conn, &host)?;
    route_on(port, listener, &host, req)
}

/// The port and the listener on it that `host` (normalised) reaches: listener isolation.
/// On TLS, the listener the SNI reached must be the same one, else the request is
/// misdirected (421, RFC 9110 §15.5.20): its connection's certificate was not chosen for it.
pub(super) fn listener_for<'s>(
    snapshot: &'s Snapshot,
    conn: &ConnInfo,
    host: &str,
) -> Result<(&'s Port, &'s Listener), ProxyError> {
    let port = snapshot.port_at(conn.key()).ok_or(ProxyError::NoListener)?;
    let listener = port.listener(host);
    if let Some(sni) = &conn.sni
        && let Some(by_sni) = port.listener(sni)
        && !listener.is_some_and(|l| std::ptr::eq(l, by_sni))
    {
        return Err(ProxyError::Misdirected);
    }
    Ok((port, listener.ok_or(ProxyError::NoListener)?))
}

/// The listener's route table on the normalised `host`.
pub(super) fn route_on<'s>(
    port: &'s Port,
    listener: &'s Listener,
    host: &str,
    req: &RouteInput<'_>,
) -> Result<Routed<'s>, ProxyError> {
    let parts = RequestParts {
        method: req.method,
        path: req.path,
        query: req.query,
        headers: req.headers,
    };
    let entry = listener
        .routes
        .find(host, &parts)
        .ok_or(ProxyError::NoRoute)?;
    Ok(Routed {
        port,
        listener,
        entry,
    })
}

/// HTTP/2 `:authority` (or an HTTP/1.1 absolute-form target), else the Host header.
fn routing_host<B>(req: &Request<B>) -> Option<&str> {
    match req.uri().authority() {
        Some(a) => Some(a.host()),
        None => req.headers().get(HOST).and_then(|v| v.to_str().ok()),
    }
}

/// The Host the client used, port included, for the upstream `Host` and `X-Forwarded-Host`.
fn original_host(parts: &Parts) -> Option<HeaderValue> {
    match parts.uri.authority() {
        Some(a) => HeaderValue::from_str(a.as_str()).ok(),
        None => parts.headers.get(HOST).cloned(),
    }
}

pub(super) fn redirect_response(
    redirect: &Redirect,
    routed: &Routed<'_>,
    req: &RouteInput<'_>,
) -> Result<Response<ProxyBody>, ProxyError> {
    let host = normalize_host(req.host);
    let location = redirect.location(&RedirectInput {
        scheme: routed.port.protocol.scheme(),
        host: &host,
        listener_port: routed.port.port,
        path: req.path,
        query: req.query,
        matched_prefix: routed.entry.matched_prefix(),
    });
    let location =
        HeaderValue::try_from(location).map_err(|e| ProxyError::InvalidTarget(e.into()))?;
    let mut resp = Response::new(body::empty());
    *resp.status_mut() = redirect.status;
    resp.headers_mut().insert(LOCATION, location);
    Ok(resp)
}

/// pier's answer to a CORS preflight (no body).
fn preflight_response(preflight: Preflight) -> Response<ProxyBody> {
    let mut resp = Response::new(body::empty());
    *resp.status_mut() = preflight.status;
    *resp.headers_mut() = preflight.headers;
    resp
}

/// What a routed request comes to, on either request path.
pub(super) enum Decision<'s> {
    /// pier answers itself (a CORS preflight, a redirect).
    Respond(Response<ProxyBody>),
    /// To this backendRef; the CORS headers for its response when a CORS filter applies.
    Forward(&'s WeightedBackend, Option<CorsResponse<'s>>),
}

/// A rule with a RequestRedirect needs no backendRef; otherwise one is picked by weight first,
/// because its own filters replace the rule's. Then, in order: a CORS preflight is answered
/// (by the backendRef's CORS filter, else the rule's), a RequestRedirect answers (the rule's,
/// else the backendRef's, with the CORS headers), and anything else is forwarded. A rule
/// without a usable backendRef still answers preflights: they never reach a backend.
///
/// `input.headers` must hold the request's headers when [`Rule::has_cors`].
pub(super) fn decide<'s>(
    routed: &Routed<'s>,
    input: &RouteInput<'_>,
) -> Result<Decision<'s>, ProxyError> {
    let rule: &'s Rule = &routed.entry.rule;
    // A live session stays with the backendRef of its endpoint (the endpoint itself is
    // checked when it is picked). The fast path hands session rules to hyper: only the hyper
    // path's `input.headers` hold the request's cookies.
    let sticky = rule
        .session
        .as_ref()
        .and_then(|p| sticky_backend(rule, p.find(input.headers, unix_now())?));
    let picked = match (&rule.filters.redirect, sticky) {
        (Some(_), _) => Ok(None),
        (None, Some(w)) => Ok(Some(w)),
        (None, None) => pick_weighted(&rule.backends).map(Some),
    };
    let weighted = picked.as_ref().ok().copied().flatten();
    let cors = weighted
        .and_then(|w| w.filters.cors.as_ref())
        .or(rule.filters.cors.as_ref())
        .map(|policy| policy.check(input.method, input.headers));
    let cors = match cors {
        Some(CorsCheck::Preflight(preflight)) => {
            return Ok(Decision::Respond(preflight_response(preflight)));
        }
        Some(CorsCheck::Actual(cors)) => Some(cors),
        None => None,
    };
    let redirect = rule
        .filters
        .redirect
        .as_ref()
        .or_else(|| weighted.and_then(|w| w.filters.redirect.as_ref()));
    if let Some(redirect) = redirect {
        let mut resp = redirect_response(redirect, routed, input)?;
        if let Some(cors) = &cors {
            cors.apply(resp.headers_mut());
        }
        return Ok(Decision::Respond(resp));
    }
    let weighted = picked?.ok_or(ProxyError::NoBackends)?;
    Ok(Decision::Forward(weighted, cors))
}

async fn forward<'s>(
    shared: &Shared,
    snapshot: &Arc<Snapshot>,
    conn: &ConnInfo,
    routed: &Routed<'s>,
    (weighted, cors): (&'s WeightedBackend, Option<CorsResponse<'s>>),
    (req, edge): (Request<Incoming>, &Edge),
    seen: &mut Seen<'s>,
) -> Result<Response<ProxyBody>, ProxyError> {
    let rule = &*routed.entry.rule;
    let BackendTarget::Service(backend) = &weighted.target else {
        return Err(ProxyError::InvalidBackend);
    };
    seen.reached.backend = Some(&backend.id);
    seen.reached.tls = Transport::of(&backend.tls);
    let (mut parts, body) = req.into_parts();
    let upgrade = parts.version == Version::HTTP_11
        && headers::is_upgrade(&parts.headers)
        && backend.protocol != AppProtocol::H2c;
    let on_upgrade = if upgrade {
        parts.extensions.remove::<OnUpgrade>()
    } else {
        None
    };
    let path = prepare_head(edge, routed, weighted, backend, &mut parts, upgrade)?;
    let https = routed.port.protocol != crate::model::Protocol::Http;
    let session = rule.session.as_ref().map(|p| {
        let now = unix_now();
        SessionReq {
            policy: p,
            now,
            carried: p.find(&parts.headers, now),
            https,
        }
    });
    if let Some(policy) = rule.retries()
        && !upgrade
        && retry::replayable(&body)
    {
        let req = Retried {
            rule,
            policy,
            weighted,
            backend,
            parts: &parts,
            path: &path,
            pinned: session.as_ref().and_then(|s| s.carried).map(|c| c.endpoint),
        };
        // Boxed: the retry loop's state is only paid for by requests that may retry.
        let (resp, in_flight) = Box::pin(retry::forward(shared, snapshot, req, body, seen)).await?;
        let mut resp = finish_response(resp, rule, weighted, cors.as_ref(), in_flight);
        // The first attempt goes to the session's endpoint; the one that answered (after any
        // retries) carries the session on.
        if let (Some(s), Some(addr)) = (&session, seen.upstream) {
            s.answer(&mut resp, addr);
        }
        return Ok(resp);
    }
    // A body that fails is the client's fault (400, 408), not the backend's: `fault` says so.
    let fault = (!upgrade && !body.is_end_stream()).then(Arc::<FaultCell>::default);
    seen.body = fault.clone();
    let body = match &fault {
        Some(fault) => {
            // A slow body to an HTTP/1.1 upstream holds a whole connection: bound its pace.
            let pace = match backend.protocol {
                AppProtocol::H2c => None,
                _ => shared.config.limits.body_pace,
            };
            let max = shared.config.limits.max_request_body;
            body::boxed(ClientBody::new(body, fault.clone(), pace, max))
        }
        None => body::boxed(body),
    };
    let body = if upgrade {
        body
    } else {
        let mirrors = rule.filters.mirrors.iter().chain(&weighted.filters.mirrors);
        mirror::dispatch(shared, mirrors, &parts, &path, body)
    };
    let pinned = session
        .as_ref()
        .and_then(|s| s.carried)
        .and_then(|c| backend.available_at(c.endpoint, shared.clock.now_ms()));
    let endpoint = match pinned {
        Some(e) => e,
        None => pick_endpoint(shared, backend)?,
    };
    seen.endpoint(endpoint);
    let up = upstream::request(parts, body, path);
    let target = Target {
        backend,
        endpoint,
        upgrade,
    };
    let in_flight = shared.admit(snapshot, backend, endpoint).await?;
    let (mut resp, in_flight) = exchange(shared, rule, target, endpoint, up, in_flight)
        .await
        .map_err(|e| match fault.as_ref().and_then(|f| f.get()) {
            Some(f) => ProxyError::ClientBody(f),
            None => e,
        })?;
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS
        && let Some(down) = on_upgrade
    {
        tunnel::spawn(down, hyper::upgrade::on(&mut resp), conn.drain.clone());
    }
    let mut resp = finish_response(resp, rule, weighted, cors.as_ref(), in_flight);
    if let Some(s) = &session {
        s.answer(&mut resp, endpoint.addr);
    }
    Ok(resp)
}

/// A request under a session persistence policy.
struct SessionReq<'s> {
    policy: &'s SessionPolicy,
    /// Unix seconds.
    now: u64,
    /// The live session the request carries, if any.
    carried: Option<Session>,
    https: bool,
}

impl SessionReq<'_> {
    /// Hands out (or refreshes) the session for the endpoint that answered.
    fn answer<B>(&self, resp: &mut Response<B>, endpoint: SocketAddr) {
        let session = self
            .policy
            .continue_or_start(self.carried, endpoint, self.now);
        if let Some((name, value)) = self.policy.issue(session, self.carried, self.https) {
            resp.headers_mut().append(name, value);
        }
    }
}

/// The backendRef of `rule` whose backend has the session's endpoint.
fn sticky_backend(rule: &Rule, session: Session) -> Option<&WeightedBackend> {
    rule.backends.backends.iter().find(|w| {
        w.weight > 0
            && matches!(&w.target, BackendTarget::Service(b)
                if b.endpoints.iter().any(|e| e.addr == session.endpoint))
    })
}

/// Wall-clock Unix seconds (session tokens carry them; everything else uses the monotonic
/// clock).
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One endpoint of `backend` by power of two choices (`NoEndpoints`: 503).
pub(super) fn pick_endpoint<'b>(
    shared: &Shared,
    backend: &'b Backend,
) -> Result<&'b Endpoint, ProxyError> {
    let mut rng = rand::rng();
    backend
        .pick(|| shared.clock.now_ms(), rng.random(), rng.random())
        .ok_or(ProxyError::NoEndpoints)
}

/// One attempt against one endpoint, within `timeouts.backendRequest`. `in_flight` comes back
/// with the response, to keep the request counted until the response body is done.
pub(super) async fn exchange(
    shared: &Shared,
    rule: &Rule,
    target: Target<'_>,
    endpoint: &Endpoint,
    req: Request<ProxyBody>,
    in_flight: InFlight,
) -> Result<(Response<UpstreamBody>, InFlight), ProxyError> {
    let backend = target.backend;
    // Built in each arm, as in `dispatch`.
    let result = match rule.timeouts.backend_request {
        Some(t) => tokio::time::timeout(t, shared.upstream.send(target, req))
            .await
            .map_err(|_| ProxyError::BackendTimeout)?,
        None => shared.upstream.send(target, req).await,
    };
    outcome(
        shared,
        backend,
        endpoint,
        result.as_ref().map(|r| r.status()),
    );
    Ok((result?, in_flight))
}

/// Passive outlier detection, for both request paths: what one exchange with `endpoint` came
/// to. A refused or silent connect ejects at once (nothing listens); a failed exchange (reset,
/// failed TLS handshake, 502/503/504 from the endpoint) counts towards the backend's
/// [`Outlier`](crate::model::Outlier) threshold (its Service's, else `--outlier-*`); anything
/// else resets the count. Slow answers and the
/// application's own errors are not reasons to eject.
pub(super) fn outcome(
    shared: &Shared,
    backend: &Backend,
    endpoint: &Endpoint,
    result: Result<StatusCode, &ProxyError>,
) {
    let now = || shared.clock.now_ms();
    let outlier = backend.outlier.over(shared.config.limits.outlier);
    let failed = match result {
        Ok(status) => matches!(status.as_u16(), 502..=504),
        Err(ProxyError::Connect { reason, .. }) => {
            shared.metrics.connect_error(&backend.id, *reason);
            if matches!(reason, ConnectReason::Refused | ConnectReason::Timeout) {
                if endpoint.eject(now(), &outlier) {
                    tracing::debug!(backend = %backend.id, endpoint = %endpoint.addr, ?reason, "endpoint ejected: connect failed");
                }
                return;
            }
            true
        }
        Err(ProxyError::TlsHandshake { .. } | ProxyError::Upstream(_)) => true,
        // Timeouts, and failures that are the client's or pier's, say nothing of the endpoint.
        Err(_) => return,
    };
    if endpoint.record(failed, now, &outlier) {
        tracing::warn!(backend = %backend.id, endpoint = %endpoint.addr, "endpoint ejected after consecutive failures");
    }
}

/// Weighted pick of a backendRef; `None` when the rule has none with weight.
pub(super) fn pick_weighted(set: &BackendSet) -> Result<&WeightedBackend, ProxyError> {
    if set.total_weight == 0 {
        return Err(ProxyError::NoBackends);
    }
    let roll = rand::rng().random_range(0..set.total_weight);
    set.pick(roll).ok_or(ProxyError::NoBackends)
}

/// Applies request filters (rule, then backendRef) and hop hygiene to the head. Returns the
/// path and query to send.
pub(super) fn prepare_head(
    edge: &Edge,
    routed: &Routed<'_>,
    weighted: &WeightedBackend,
    backend: &Backend,
    parts: &mut Parts,
    upgrade: bool,
) -> Result<PathAndQuery, ProxyError> {
    let rule = &routed.entry.rule;
    let client_host = original_host(parts);
    for m in [
        &rule.filters.request_headers,
        &weighted.filters.request_headers,
    ]
    .into_iter()
    .flatten()
    {
        m.apply(&mut parts.headers);
    }
    let rewrite = rewrite_of(rule, weighted);
    let path = rewritten_path(&parts.uri, rewrite, routed.entry.matched_prefix())?;
    // `TE: trailers` matters to HTTP/2 (gRPC); a TLS backend may negotiate HTTP/2 by ALPN, and
    // the value is valid in HTTP/1.1 too.
    let http2_possible =
        backend.protocol == AppProtocol::H2c || matches!(backend.tls, BackendTls::Tls(_));
    let keep = Keep {
        upgrade,
        te_trailers: http2_possible,
    };
    headers::strip_hop_by_hop(&mut parts.headers, keep);
    let scheme = routed.port.protocol.scheme();
    edge.apply(&mut parts.headers, scheme, client_host.as_ref());
    match rewrite.and_then(|r| r.hostname.clone()).or(client_host) {
        Some(host) => parts.headers.insert(HOST, host),
        None => parts.headers.remove(HOST),
    };
    Ok(path)
}

/// The URLRewrite in force: a backendRef's replaces the rule's rather than composing with it.
pub(super) fn rewrite_of<'a>(
    rule: &'a Rule,
    weighted: &'a WeightedBackend,
) -> Option<&'a UrlRewrite> {
    weighted
        .filters
        .rewrite
        .as_ref()
        .or(rule.filters.rewrite.as_ref())
}

/// The path and query to send: the client's own (shared, not copied) unless a URLRewrite
/// changes the path.
fn rewritten_path(
    uri: &Uri,
    rewrite: Option<&UrlRewrite>,
    matched_prefix: Option<&str>,
) -> Result<PathAndQuery, ProxyError> {
    match rewritten_target(uri.path(), uri.query(), rewrite, matched_prefix) {
        None => Ok(uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"))),
        Some(Ok(target)) => Ok(target),
        Some(Err(e)) => Err(e),
    }
}

/// The path and query a URLRewrite makes of `path` and `query`; `None` when it does not
/// change the path.
pub(super) fn rewritten_target(
    path: &str,
    query: Option<&str>,
    rewrite: Option<&UrlRewrite>,
    matched_prefix: Option<&str>,
) -> Option<Result<PathAndQuery, ProxyError>> {
    let modifier = rewrite.and_then(|r| r.path.as_ref())?;
    let path = modifier.apply(path, matched_prefix);
    let target = match query {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    Some(PathAndQuery::try_from(target).map_err(|e| ProxyError::InvalidTarget(e.into())))
}

fn finish_response(
    resp: Response<UpstreamBody>,
    rule: &Rule,
    weighted: &WeightedBackend,
    cors: Option<&CorsResponse<'_>>,
    in_flight: InFlight,
) -> Response<ProxyBody> {
    let (mut parts, body) = resp.into_parts();
    let upgrade = parts.status == StatusCode::SWITCHING_PROTOCOLS;
    response_head(&mut parts.headers, rule, weighted, cors, upgrade);
    // The downstream connection decides its own version.
    parts.version = Version::default();
    Response::from_parts(parts, body::boxed(body.with_in_flight(in_flight)))
}

/// Hop hygiene, the CORS headers, and the response header modifiers (rule, then backendRef:
/// after CORS, so a modifier has the last word) on a response head.
pub(super) fn response_head(
    headers: &mut http::HeaderMap,
    rule: &Rule,
    weighted: &WeightedBackend,
    cors: Option<&CorsResponse<'_>>,
    upgrade: bool,
) {
    let keep = Keep {
        upgrade,
        te_trailers: false,
    };
    headers::strip_hop_by_hop(headers, keep);
    if let Some(cors) = cors {
        cors.apply(headers);
    }
    for m in response_modifiers(rule, weighted) {
        m.apply(headers);
    }
}

/// The response header modifiers of a rule and the backendRef picked, in order.
pub(super) fn response_modifiers<'a>(
    rule: &'a Rule,
    weighted: &'a WeightedBackend,
) -> impl Iterator<Item = &'a crate::model::HeaderModifier> {
    [
        &rule.filters.response_headers,
        &weighted.filters.response_headers,
    ]
    .into_iter()
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PathModifier;

    #[test]
    fn rewrite_keeps_the_query() {
        let uri: Uri = "/api/v1/x?a=1&b=2".parse().unwrap();
        let rw = UrlRewrite {
            hostname: None,
            path: Some(PathModifier::ReplacePrefixMatch("/v2".into())),
        };
        assert_eq!(
            rewritten_path(&uri, Some(&rw), Some("/api/v1")).unwrap(),
            "/v2/x?a=1&b=2"
        );
        assert_eq!(
            rewritten_path(&uri, None, None).unwrap(),
            "/api/v1/x?a=1&b=2"
        );
    }

    #[test]
    fn routing_host_prefers_the_authority() {
        let req = Request::get("http://a.example.com:8080/x")
            .header(HOST, "b.example.com")
            .body(())
            .unwrap();
        assert_eq!(routing_host(&req), Some("a.example.com"));
        let req = Request::get("/x")
            .header(HOST, "b.example.com:80")
            .body(())
            .unwrap();
        assert_eq!(routing_host(&req), Some("b.example.com:80"));
    }
}
