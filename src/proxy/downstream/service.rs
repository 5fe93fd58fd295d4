//! hyper's request path (HTTP/2, and HTTP/1.1 that the fast path hands over): one request,
//! through `phase`'s steps in the order the fast path takes them too, forwarded to one endpoint
//! of one weighted backend, and its outcome recorded.
//!
//! ```text
//! handle ─> phase::arrive ─> dispatch: checks, phase::listener (client identity header),
//!           phase::route (404), phase::decide (CORS preflight, access policies 403,
//!           redirect) ─> forward (within timeouts.request): backend (500 invalid),
//!           phase::request_head ─> mirrors ─> endpoint (503 none) ─> exchange::send
//!           (502/503/504) ─> phase::response_head ─> phase::log
//!           (a rule with `retry`: the attempts loop in `exchange::retry`)
//! ```
//!
//! The snapshot is loaded once per request (`load_full`, so the request can hold it across
//! awaits): a swap mid-request never mixes two configurations, and the request finishes with
//! the backend it was routed to.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use crate::proxy::body::Inbound;
use http::uri::PathAndQuery;
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use hyper::upgrade::OnUpgrade;

use super::tunnel;
use crate::model::filter::CorsResponse;
use crate::model::host::normalize_host;
use crate::model::{AppProtocol, BackendTarget, Snapshot};
use crate::model::{Rule, WeightedBackend};
use crate::proxy::body::{self, ClientBody, FaultCell, ProxyBody};
use crate::proxy::config::Limits;
use crate::proxy::conn_info::ConnInfo;
use crate::proxy::error::{ProxyError, is_grpc};
use crate::proxy::exchange::retry::{self, Retried};
use crate::proxy::exchange::send::{exchange, pick_endpoint};
use crate::proxy::exchange::session::{SessionReq, unix_now};
use crate::proxy::exchange::{Shared, mirror};
use crate::proxy::headers;
use crate::proxy::observe::access::LogHead;
use crate::proxy::observe::forwarded::Edge;
use crate::proxy::observe::metrics::Transport;
use crate::proxy::observe::record::{Seen, request_authority};
use crate::proxy::observe::trace::RequestLine;
use crate::proxy::phase::{self, Decision, Negotiated, RouteInput, Routed};
use crate::proxy::policy::head::client_identity;
use crate::proxy::upstream::{self, InFlight, Target, UpstreamBody};
use crate::proxy::validate::{self, Invalid};

/// One request on hyper's path, answered whatever happens: pier's own answer for an error
/// (as gRPC for a gRPC call), recorded by `phase::log`.
///
/// Not an `async fn`: one keeps its arguments twice in its state (as captured, and moved to
/// locals), and this future is every request's, boxed and moved whole (its 264-byte request
/// kept once).
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn stores its arguments twice (see above)"
)]
pub fn handle(
    shared: Arc<Shared>,
    conn: Arc<ConnInfo>,
    req: Request<Inbound>,
) -> impl Future<Output = Response<ProxyBody>> + Send {
    async move {
        let started = Instant::now();
        let snapshot = shared.snapshot.load_full();
        shared.upstream.observe(snapshot.generation);
        let line = RequestLine {
            method: req.method(),
            host: request_authority(&req),
            path: req.uri().path(),
        };
        let phase::Arrival {
            edge,
            log: log_head,
        } = phase::arrive(
            &shared,
            &snapshot,
            &conn,
            || phase::map_lines(req.headers()),
            line,
            || LogHead::of(&req),
        );
        let grpc = is_grpc(req.headers());
        let mut seen = Seen::default();
        let resp = match dispatch(&shared, &snapshot, &conn, (req, &edge), &mut seen, started).await
        {
            Ok(resp) => resp,
            Err(error) => {
                phase::failed(&shared, &mut seen, &error, conn.port);
                error.response(grpc)
            }
        };
        // A streamed body (chunked, HTTP/2 without a length): the bytes read from the client by
        // the time the response head came back.
        let log_head = match (log_head, &seen.body) {
            (Some(head), Some(body)) => Some(head.with_bytes_in(body.read())),
            (head, _) => head,
        };
        phase::log(
            &shared,
            &snapshot,
            &conn,
            &edge,
            &seen,
            log_head.as_ref(),
            (resp.status(), resp.body().size_hint().exact()),
            started.elapsed(),
        );
        resp
    }
}

/// A request `admit` let through, with what its answer is made with.
struct Admitted<'s> {
    req: Request<Inbound>,
    routed: Routed<'s>,
    answer: Answer<'s>,
    /// Body bytes the authorizers read, to go upstream in front of the rest.
    prefix: Option<bytes::Bytes>,
    /// A refreshed login's cookies, for the response.
    cookies: Vec<http::HeaderValue>,
}

/// Either pier's own answer, or the request on its way to a backend.
#[expect(
    clippy::large_enum_variant,
    reason = "returned once per request and taken apart at once: a box would be an allocation per request"
)]
enum Admission<'s> {
    Answer(Response<ProxyBody>),
    Forward(Admitted<'s>),
}

/// Admission, then forwarding. Two futures one after the other, so that what admission
/// keeps across its awaits (the route input, the login, the decision: ~1 100 bytes) is not
/// part of every request's state while it waits on its backend.
async fn dispatch<'s>(
    shared: &Shared,
    snapshot: &'s Arc<Snapshot>,
    conn: &ConnInfo,
    (req, edge): (Request<Inbound>, &Edge),
    seen: &mut Seen<'s>,
    started: Instant,
) -> Result<Response<ProxyBody>, ProxyError> {
    // Moved out field by field, never borrowed: no part of it stays in this future's state.
    let (req, routed, answer, prefix, cookies) =
        match admit(shared, snapshot, conn, (req, edge), seen, started).await? {
            Admission::Answer(resp) => return Ok(resp),
            Admission::Forward(a) => (a.req, a.routed, a.answer, a.prefix, a.cookies),
        };
    // The future is built in the arm that awaits it rather than once before the match: a
    // future moved into `timeout_at` would need room for both copies in this one, and every
    // request moves it. Built by a closure, so both arms build the same call.
    let timeout = routed.entry.rule.timeouts.request;
    let forwarding = move || {
        forward(
            shared,
            snapshot,
            conn,
            routed,
            answer,
            (req, edge, prefix, started),
            seen,
        )
    };
    let forwarded = match timeout {
        // `request` runs from the request's arrival, so time spent routing counts too.
        Some(t) => tokio::time::timeout_at((started + t).into(), forwarding())
            .await
            .map_err(|_| ProxyError::RequestTimeout)?,
        None => forwarding().await,
    };
    // A refreshed login's cookies go back with the answer.
    match forwarded {
        Ok(mut resp) if !cookies.is_empty() => {
            for c in cookies {
                resp.headers_mut().append(http::header::SET_COOKIE, c);
            }
            Ok(resp)
        }
        r => r,
    }
}

/// Checks, the listener, routing and the rule's access policies: pier's own answer (an
/// error, a preflight, a redirect, an authorizer's or a login's), or the request to forward.
/// The policies' awaits that few routes have are boxed where they start (only such routes
/// pay for their state).
async fn admit<'s>(
    shared: &Shared,
    snapshot: &'s Arc<Snapshot>,
    conn: &ConnInfo,
    (mut req, edge): (Request<Inbound>, &Edge),
    seen: &mut Seen<'s>,
    started: Instant,
) -> Result<Admission<'s>, ProxyError> {
    // CONNECT (authority-form, no path) is not something an HTTPRoute can match.
    if req.method() == Method::CONNECT {
        return Err(ProxyError::NoRoute);
    }
    let rules = conn.request_rules(shared.config.limits.merge_slashes);
    checked(&mut req, &shared.config.limits, rules).map_err(ProxyError::Invalid)?;
    let found = {
        let host = normalize_host(request_authority(&req));
        phase::listener(snapshot, conn, &host)?
    };
    if let Some(name) = &found.1.client_cert_header {
        // Before routing, so that header matches see the verified identity, never the
        // client's own value.
        client_identity(req.headers_mut(), name, conn);
    }
    // Listener filters: before routing, so routes match the request as they left it.
    let mut read: phase::Prefix = None;
    if let Some(pre) = &found.1.pre_route {
        let sent_host = request_authority(&req).to_string();
        let ctx = phase::ExtAuthCtx::new(edge, &sent_host, found.0, conn);
        let mut outcomes = Vec::new();
        // Boxed: its authorizer calls would otherwise grow every request's future (and so
        // hyper's connection task) for listeners that have none.
        let filtered = Box::pin(phase::listener_filters(
            shared,
            pre,
            &ctx,
            &mut req,
            &mut outcomes,
        ));
        match filtered.await? {
            Ok(bytes) => read = bytes,
            Err(answer) => return Ok(Admission::Answer(answer)),
        }
    }
    let host = normalize_host(request_authority(&req));
    let input = RouteInput {
        method: req.method(),
        host: request_authority(&req),
        path: req.uri().path(),
        query: req.uri().query(),
        headers: req.headers(),
    };
    let routed = phase::route(found, &host, &input, seen)?;
    let rule = &routed.entry.rule;
    if rule.traffic.is_some() {
        phase::fault_delay(shared, rule).await;
    }
    // A CORS preflight comes without credentials: the rule's CORS filter answers it before
    // any login (and only that answer: see below).
    let preflight = rule.has_cors() && phase::oidc::is_preflight(input.method, input.headers);
    let oidc = if rule.has_oidc() {
        let login = phase::oidc::LoginRequest {
            method: input.method,
            path: input.path,
            query: input.query,
            headers: input.headers,
            host: request_authority(&req),
            https: routed.port.protocol != crate::model::Protocol::Http,
        };
        match Box::pin(phase::oidc::login(rule, &login, preflight)).await {
            None => None,
            Some(Ok(phase::oidc::Step::Respond(resp))) => return Ok(Admission::Answer(resp)),
            Some(Ok(phase::oidc::Step::Pass(passed))) => Some(passed),
            Some(Err(e)) => return Err(e),
        }
    } else {
        None
    };
    let basic = phase::verify_basic(rule, input.headers).await;
    let mut admitted = None;
    let decided = phase::decide(
        &routed,
        &input,
        (conn, edge),
        basic.as_ref(),
        &mut admitted,
        seen,
        started,
    )?;
    if preflight && rule.has_oidc() && !matches!(decided, Decision::Preflight(_)) {
        return Err(ProxyError::Unauthenticated(
            crate::proxy::error::Challenge::Bearer { invalid: false },
        ));
    }
    if rule.has_global_limits() && !matches!(decided, Decision::Preflight(_)) {
        Box::pin(phase::global_limits(shared, rule, &input, edge)).await?;
    }
    if let Some(a) = &admitted {
        phase::apply(a, req.headers_mut());
    }
    if let Some(passed) = &oidc {
        phase::oidc::apply(passed, req.headers_mut());
        phase::oidc::record(seen, passed);
    }
    // External authorizers see the request as authentication left it (claims to headers).
    let mut prefix = None;
    if rule.has_ext_auth() && !matches!(decided, Decision::Preflight(_)) {
        // The host as the client sent it (with its port), for the authorizer.
        let sent_host = request_authority(&req).to_string();
        let ctx = phase::ExtAuthCtx::new(edge, &sent_host, routed.port, conn);
        let mut outcomes: Vec<phase::ExtAuthOutcome> = Vec::new();
        let authed = Box::pin(phase::ext_auth(
            shared,
            rule,
            &ctx,
            &mut req,
            (admitted.as_ref(), read.take()),
            &mut outcomes,
        ))
        .await;
        phase::ext_auth_record(seen, rule, &outcomes, authed.as_ref().err());
        match authed? {
            phase::ExtAuthed::Answer(resp) => return Ok(Admission::Answer(resp)),
            phase::ExtAuthed::Pass(p) => prefix = p,
        }
    }
    // The body bytes the listener's filters read, when no rule authorizer took them over.
    if let Some((bytes, _)) = read {
        prefix = Some(bytes);
    }
    let (weighted, cors) = match decided {
        Decision::Preflight(resp) | Decision::Redirect(resp) => {
            return Ok(Admission::Answer(resp));
        }
        Decision::Forward(weighted, cors) => (weighted, cors),
    };
    let encoding = phase::accept_encoding(rule, req.method(), req.headers());
    let answer = Answer {
        weighted,
        cors,
        encoding,
        alt_svc: routed.listener.alt_svc.as_ref(),
    };
    Ok(Admission::Forward(Admitted {
        req,
        routed,
        answer,
        prefix,
        cookies: oidc.map(|passed| passed.set_cookies).unwrap_or_default(),
    }))
}

/// Whether the request passes `validate`'s checks; its path normalised. By reference: a
/// request moved in and out is two copies of its 264 bytes.
fn checked<B: http_body::Body>(
    req: &mut Request<B>,
    limits: &Limits,
    rules: validate::RequestRules,
) -> Result<(), Invalid> {
    validate::check_host(req.version(), req.headers(), req.uri().authority())?;
    validate::check_transfer_coding(req.headers())?;
    let target_len = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    validate::check_sizes(
        target_len,
        req.body().size_hint().exact(),
        limits.max_request_target,
        limits.max_request_body,
    )?;
    if validate::underscores(rules.underscores, req.headers().keys().map(|n| n.as_str()))? {
        let dropped: Vec<http::HeaderName> = (req.headers().keys())
            .filter(|n| n.as_str().contains('_'))
            .cloned()
            .collect();
        for name in dropped {
            req.headers_mut().remove(name);
        }
    }
    let normal = match validate::normalize_path(req.uri().path(), rules)? {
        Cow::Borrowed(_) => return Ok(()),
        Cow::Owned(p) => p,
    };
    let target = match req.uri().query() {
        Some(q) => format!("{normal}?{q}"),
        None => normal,
    };
    let mut parts = req.uri().clone().into_parts();
    parts.path_and_query = Some(PathAndQuery::try_from(target).map_err(|_| Invalid::BadPath)?);
    *req.uri_mut() = Uri::from_parts(parts).map_err(|_| Invalid::BadPath)?;
    Ok(())
}

/// What the response is made with: the backendRef, the CORS headers and the encoding the
/// request accepted.
struct Answer<'s> {
    weighted: &'s WeightedBackend,
    cors: Option<CorsResponse<'s>>,
    encoding: Option<Negotiated<'s>>,
    /// The listener's `Alt-Svc` (it serves HTTP/3).
    alt_svc: Option<&'s http::HeaderValue>,
}

async fn forward<'s>(
    shared: &Shared,
    snapshot: &Arc<Snapshot>,
    conn: &ConnInfo,
    routed: Routed<'s>,
    answer: Answer<'s>,
    (req, edge, mut prefix, started): (Request<Inbound>, &Edge, Option<bytes::Bytes>, Instant),
    seen: &mut Seen<'s>,
) -> Result<Response<ProxyBody>, ProxyError> {
    let rule = &*routed.entry.rule;
    let weighted = answer.weighted;
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
    let path = phase::request_head(edge, &routed, weighted, backend, &mut parts, upgrade)?;
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
    // The rule's load-balancing policy's pick, unless a session already names the endpoint.
    let mut lb_cookie = None;
    let balanced = match session.as_ref().and_then(|s| s.carried) {
        Some(_) => None,
        None => phase::balance(shared, rule, backend, edge, &parts.headers, &mut lb_cookie),
    };
    // A policy's `requestBuffer`: the body read whole (within its limit) before anything
    // goes upstream; a part read for an external authorizer first is put back in front.
    // The port's `requestReceivedTimeout`: the body must have arrived by then (408).
    let until = (conn.request_received_timeout()).map(|t| tokio::time::Instant::from(started + t));
    let body = match phase::request_buffer(rule, body.size_hint().exact())? {
        Some(limit) if !upgrade => {
            // Boxed: only such rules pay for the read's state.
            let read = retry::buffer(shared, backend, body, Some(limit), until);
            let rest = Box::pin(read).await?;
            ReqBody::Whole(match (prefix.take(), rest) {
                (Some(p), Some(r)) => Some([p, r].concat().into()),
                (p, r) => p.or(r),
            })
        }
        _ => ReqBody::Streamed(body),
    };
    // A body the authorizers read to its end is whole, and replayable like any short one.
    let body = match (body, prefix.take()) {
        (ReqBody::Streamed(rest), Some(read)) if rest.is_end_stream() && !upgrade => {
            ReqBody::Whole(Some(read).filter(|b| !b.is_empty()))
        }
        (body, read) => {
            prefix = read;
            body
        }
    };
    // A body partly read for an external authorizer is not replayed (not kept whole).
    if let Some(policy) = rule.retries()
        && !upgrade
        && prefix.is_none()
        && body.replayable()
    {
        let bytes = match body {
            ReqBody::Whole(bytes) => bytes,
            ReqBody::Streamed(body) => {
                Box::pin(retry::buffer(shared, backend, body, None, until)).await?
            }
        };
        let req = Retried {
            rule,
            policy,
            weighted,
            backend,
            parts: &parts,
            path: &path,
            pinned: (session.as_ref().and_then(|s| s.carried).map(|c| c.endpoint))
                .or(balanced.map(|e| e.addr)),
        };
        // Boxed: the retry loop's state is only paid for by requests that may retry.
        let (resp, in_flight) =
            Box::pin(retry::forward(shared, snapshot, req, bytes, seen)).await?;
        let mut resp = finish_response(shared, resp, rule, &answer, in_flight);
        // The first attempt goes to the session's endpoint; the one that answered (after any
        // retries) carries the session on.
        if let (Some(s), Some(addr)) = (&session, seen.upstream) {
            s.answer(&mut resp, addr);
        }
        if let Some(c) = lb_cookie {
            resp.headers_mut().append(http::header::SET_COOKIE, c);
        }
        return Ok(resp);
    }
    let (body, fault) = match body {
        ReqBody::Whole(bytes) => (bytes.map_or_else(body::empty, body::full), None),
        ReqBody::Streamed(body) => {
            let client = (body, prefix, until);
            streamed(shared, backend, client, upgrade, seen)
        }
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
    let endpoint = match pinned.or(balanced) {
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
    let mut resp = finish_response(shared, resp, rule, &answer, in_flight);
    if let Some(s) = &session {
        s.answer(&mut resp, endpoint.addr);
    }
    if let Some(c) = lb_cookie {
        resp.headers_mut().append(http::header::SET_COOKIE, c);
    }
    Ok(resp)
}

/// What [`forward`] sends: the client's body as it comes, or read whole first (a policy's
/// `requestBuffer`; `None`: there was none).
enum ReqBody {
    Streamed(Inbound),
    Whole(Option<bytes::Bytes>),
}

impl ReqBody {
    /// Whether the request can be sent again (retries): read whole, or short enough to be.
    fn replayable(&self) -> bool {
        match self {
            ReqBody::Streamed(body) => retry::replayable(body),
            ReqBody::Whole(_) => true,
        }
    }
}

/// The client's body as it streams upstream: under the pace and size limits, with the part an
/// external authorizer read put back in front. A body that fails is the client's fault (400,
/// 408), not the backend's: the returned cell (also in `seen.body`) says so.
fn streamed(
    shared: &Shared,
    backend: &crate::model::Backend,
    (body, prefix, until): (Inbound, Option<bytes::Bytes>, Option<tokio::time::Instant>),
    upgrade: bool,
    seen: &mut Seen<'_>,
) -> (ProxyBody, Option<Arc<FaultCell>>) {
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
            body::boxed(ClientBody::new(body, fault.clone(), pace, max).until(until))
        }
        None => body::boxed(body),
    };
    let body = match prefix {
        Some(p) => body::boxed(phase::Prefixed::new(p, body)),
        None => body,
    };
    (body, fault)
}

fn finish_response(
    shared: &Shared,
    resp: Response<UpstreamBody>,
    rule: &Rule,
    answer: &Answer<'_>,
    in_flight: InFlight,
) -> Response<ProxyBody> {
    let (mut parts, body) = resp.into_parts();
    let upgrade = parts.status == StatusCode::SWITCHING_PROTOCOLS;
    let cors = answer.cors.as_ref();
    phase::response_head(&mut parts.headers, rule, answer.weighted, cors, upgrade);
    // A listener that serves HTTP/3 says so on the responses it forwards.
    if let Some(v) = answer.alt_svc {
        parts.headers.append(http::header::ALT_SVC, v.clone());
    }
    // The downstream connection decides its own version.
    parts.version = Version::default();
    let body = body::boxed(body.with_in_flight(in_flight));
    let body = match &answer.encoding {
        Some(n) => phase::compress(shared, n, &mut parts, body),
        None => body,
    };
    Response::from_parts(parts, body)
}
