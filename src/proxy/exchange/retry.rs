//! HTTPRoute retries (GEP-1731) on the hyper request path: the request is sent again after a
//! response whose status the rule lists, a failed connect or TLS handshake, a connection reset
//! or closed before the response head (idempotent methods only), or
//! `timeouts.backendRequest`, up to the rule's `attempts`,
//! waiting `backoff` before each retry, each time to an endpoint picked afresh (not the one
//! that just failed, when the backend has another).
//!
//! ```text
//! service::forward ─ rule.retry, no upgrade, body replayable? ─> forward (here)
//!   buffer the body ─> budget.deposit ─> attempt: pick endpoint ─> exchange ─┬─> done
//!                                          ^                                 │ retryable,
//!                                          └── sleep(backoff) <─ withdraw ok ┘ attempts left
//!                                  budget spent: the last response (or error) is the answer
//!                                  (a Service's XBackendTrafficPolicy budget: 503)
//! ```
//!
//! What is retried, where GEP-1731 leaves it open:
//! - Only requests that can be sent again: no body, or one whose length is declared and at
//!   most [`MAX_RETRY_BODY`] (buffered before the first attempt, like the HTTP/1.1 fast
//!   path's request buffering). A larger or unknown-length body is streamed, once, and never
//!   retried; so are upgrades (WebSocket).
//! - Any method after a listed status, a failed connect or TLS handshake, an HTTP/2
//!   REFUSED_STREAM (the backend did not take the request: Gateway API v1.7's "SHOULD
//!   retry"), or `timeouts.backendRequest` (the upstream conformance tests require it).
//! - A connection reset or closed after the request was sent, before the response head: only
//!   for idempotent methods (RFC 9110 §9.2.2: GET, HEAD, OPTIONS, TRACE, PUT, DELETE), as
//!   nginx's `proxy_next_upstream` does. The backend may have processed the request, so a
//!   POST or PATCH is not sent twice (v1.7: "SHOULD NOT retry ... unless documented"). A
//!   pooled connection the backend closed just as it was reused is such a reset too.
//! - `timeouts.request` bounds all attempts and backoffs together (the caller's timeout).
//! - Mirrors are sent once, with the first attempt.
//!
//! Every retry must be granted by the backend's retry budget ([`budget`]), and by its
//! `circuitBreaker.maxParallelRetries` when a BackendTrafficPolicy sets one (a retrying
//! request holds one place until its answer); a refused retry leaves the last response (or
//! error) as the answer. Retries sent and refused are counted
//! per backend (`pier_proxy_upstream_retries_total`,
//! `pier_proxy_upstream_retries_refused_total`).

pub mod budget;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::proxy::body::Inbound;
use bytes::Bytes;
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{Method, Response, StatusCode};
use http_body::Body as _;
use http_body_util::BodyExt;
use rand::Rng;

use super::Shared;
use super::mirror::{self, CloneHead};
use super::send;
use crate::model::{
    AppProtocol, Backend, Endpoint, RetryPolicy, RetrySlot, Rule, Snapshot, WeightedBackend,
};
use crate::proxy::body::{self, BodyFault, ClientBody, FaultCell, ProxyBody};
use crate::proxy::error::ProxyError;
use crate::proxy::observe::metrics::RetryReason;
use crate::proxy::observe::record::Seen;
use crate::proxy::upstream::{self, InFlight, Target, UpstreamBody};

/// The largest request body buffered so that it can be sent again (the same bound as the
/// fast path's buffered bodies and mirrored bodies).
pub const MAX_RETRY_BODY: u64 = 64 * 1024;
/// A retried response's body is read to its end (in the background, so its connection can be
/// pooled) when it declares at most this length; a longer one is dropped with its connection.
const DISCARD_MAX: u64 = 16 * 1024;
/// ... within this long.
const DISCARD_TIMEOUT: Duration = Duration::from_secs(1);

/// What one request with a retry policy goes out as.
pub struct Retried<'s, 'r> {
    pub rule: &'s Rule,
    pub policy: &'s RetryPolicy,
    pub weighted: &'s WeightedBackend,
    pub backend: &'s Backend,
    /// The prepared head (filters applied) and the path to send.
    pub parts: &'r Parts,
    pub path: &'r PathAndQuery,
    /// The endpoint of the request's session (session persistence): the first attempt goes
    /// there while it is available.
    pub pinned: Option<SocketAddr>,
}

/// Whether a request body can be buffered for retries: none, or a declared length within
/// [`MAX_RETRY_BODY`].
pub fn replayable(body: &Inbound) -> bool {
    body.is_end_stream()
        || body
            .size_hint()
            .exact()
            .is_some_and(|n| n <= MAX_RETRY_BODY)
}

/// Sends the request, and again as the policy and the budget allow. The last attempt's
/// outcome is the answer; `seen.upstream` is its endpoint.
pub async fn forward<'s>(
    shared: &Shared,
    snapshot: &Arc<Snapshot>,
    req: Retried<'s, '_>,
    bytes: Option<Bytes>,
    seen: &mut Seen<'s>,
) -> Result<(Response<UpstreamBody>, InFlight), ProxyError> {
    let backend = req.backend;
    let constraint = backend.retry_constraint.as_ref();
    let own = constraint.map(|c| &c.budget);
    let budget = shared
        .retry_budgets
        .of(&backend.id, own, shared.clock.now_ms());
    budget.deposit(shared.clock.now_ms());
    let mut retries = 0;
    // A retrying request holds one of the backend's `maxParallelRetries` places until its
    // answer, however many retries it sends.
    let mut retrying: Option<RetrySlot> = None;
    loop {
        let body = match &bytes {
            Some(b) => body::full(b.clone()),
            None => body::empty(),
        };
        // Mirrors see the request once, with the first attempt.
        let body = if retries == 0 {
            let mirrors = req.rule.filters.mirrors.iter();
            let mirrors = mirrors.chain(&req.weighted.filters.mirrors);
            mirror::dispatch(shared, mirrors, req.parts, req.path, body)
        } else {
            body
        };
        let result = attempt(shared, snapshot, &req, body, seen).await;
        let Some(reason) = retry_reason(req.policy, &req.parts.method, &result) else {
            return result;
        };
        if retries >= req.policy.attempts {
            return result;
        }
        if retrying.is_none()
            && let Some(max) = backend.max_retries
        {
            retrying = RetrySlot::claim(&backend.load, max);
            if retrying.is_none() {
                shared.metrics.retry_refused(&backend.id);
                tracing::debug!(backend = %backend.id, "maxParallelRetries reached; the last attempt answers");
                return result;
            }
        }
        if !budget.withdraw(shared.clock.now_ms()) {
            shared.metrics.retry_refused(&backend.id);
            if constraint.is_some() {
                // XBackendTrafficPolicy: the client gets 503, not the failed attempt.
                tracing::debug!(backend = %backend.id, "retry budget spent; 503");
                if let Ok((resp, in_flight)) = result {
                    discard(resp, in_flight);
                }
                return Err(ProxyError::RetryBudgetSpent);
            }
            tracing::debug!(backend = %backend.id, "retry budget spent; the last attempt answers");
            return result;
        }
        shared.metrics.retry(&backend.id, reason);
        retries += 1;
        if let Ok((resp, in_flight)) = result {
            discard(resp, in_flight);
        }
        if !req.policy.backoff.is_zero() {
            tokio::time::sleep(req.policy.backoff).await;
        }
    }
}

/// One attempt, to an endpoint picked afresh (not the last attempt's, `seen.upstream`, when
/// there is another); `seen.upstream` becomes its endpoint.
async fn attempt<'s>(
    shared: &Shared,
    snapshot: &Arc<Snapshot>,
    req: &Retried<'s, '_>,
    body: ProxyBody,
    seen: &mut Seen<'s>,
) -> Result<(Response<UpstreamBody>, InFlight), ProxyError> {
    let backend = req.backend;
    let pinned = match seen.upstream {
        None => req
            .pinned
            .and_then(|a| backend.available_at(a, shared.clock.now_ms())),
        Some(_) => None,
    };
    let endpoint = match pinned {
        Some(e) => e,
        None => pick_endpoint(shared, backend, seen.upstream)?,
    };
    seen.endpoint(endpoint);
    let up = upstream::request(req.parts.clone_head(), body, req.path.clone());
    let target = Target {
        backend,
        endpoint,
        upgrade: false,
    };
    let in_flight = shared.admit(snapshot, backend, endpoint).await?;
    send::exchange(shared, req.rule, target, endpoint, up, in_flight).await
}

/// Why `result` is worth another attempt, if it is (see the module docs).
fn retry_reason<T>(
    policy: &RetryPolicy,
    method: &Method,
    result: &Result<(Response<T>, InFlight), ProxyError>,
) -> Option<RetryReason> {
    match result {
        Ok((resp, _)) => policy
            .retries_status(resp.status())
            // A 101 answers an upgrade, which is never retried; listed codes are 4xx/5xx.
            .then_some(RetryReason::Status)
            .filter(|_| resp.status() != StatusCode::SWITCHING_PROTOCOLS),
        Err(ProxyError::Connect { .. } | ProxyError::TlsHandshake { .. }) => {
            Some(RetryReason::Connect)
        }
        // REFUSED_STREAM: the backend did not process it (RFC 9113 §8.7), safe for any method.
        Err(ProxyError::Upstream(e)) if refused_stream(e.as_ref()) => Some(RetryReason::Connect),
        Err(ProxyError::Upstream(_)) => method.is_idempotent().then_some(RetryReason::Reset),
        Err(ProxyError::BackendTimeout) => Some(RetryReason::Timeout),
        Err(_) => None,
    }
}

/// Whether an upstream failure is an HTTP/2 stream the backend refused before processing it
/// (hyper wraps h2's error; it may be the error itself or any cause).
fn refused_stream(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        if e.downcast_ref::<h2::Error>()
            .is_some_and(|h2| h2.reason() == Some(h2::Reason::REFUSED_STREAM))
        {
            return true;
        }
        next = e.source();
    }
    false
}

/// The request body, read whole within `max` bytes (past it: [`BodyFault::TooLarge`], 413),
/// under the same pace limits as a streamed one; `None` when there is none. For retries
/// (bounded by [`replayable`]) and a BackendTrafficPolicy's `requestBuffer`.
pub async fn buffer(
    shared: &Shared,
    backend: &Backend,
    body: Inbound,
    max: Option<u64>,
    until: Option<tokio::time::Instant>,
) -> Result<Option<Bytes>, ProxyError> {
    if body.is_end_stream() {
        return Ok(None);
    }
    let fault = Arc::<FaultCell>::default();
    let pace = match backend.protocol {
        AppProtocol::H2c => None,
        _ => shared.config.limits.body_pace,
    };
    // Trailers are not kept: a body read whole goes out with a declared length, and
    // HTTP/1.1 cannot send trailers with one.
    let max = match (max, shared.config.limits.max_request_body) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    match ClientBody::new(body, fault.clone(), pace, max)
        .until(until)
        .collect()
        .await
    {
        Ok(collected) => Ok(Some(collected.to_bytes())),
        Err(_) => Err(ProxyError::ClientBody(
            fault.get().unwrap_or(BodyFault::Malformed),
        )),
    }
}

/// An endpoint for the next attempt: picked afresh, and not the one the last attempt went to
/// when the backend has another.
fn pick_endpoint<'b>(
    shared: &Shared,
    backend: &'b Backend,
    last: Option<SocketAddr>,
) -> Result<&'b Endpoint, ProxyError> {
    let Some(last) = last else {
        return send::pick_endpoint(shared, backend);
    };
    let now = shared.clock.now_ms();
    let mut rng = rand::rng();
    match backend.pick_avoiding(now, rng.random(), rng.random(), last) {
        Some(e) => Ok(e),
        None => Err(ProxyError::NoEndpoints),
    }
}

/// Drops a response that is being retried. A short body is read to its end in the background
/// first, so that its connection goes back to the pool rather than being closed.
fn discard(resp: Response<UpstreamBody>, in_flight: InFlight) {
    let body = resp.into_body();
    if body.is_end_stream() || body.size_hint().exact().is_none_or(|n| n > DISCARD_MAX) {
        return;
    }
    tokio::spawn(async move {
        let _in_flight = in_flight;
        let _ = tokio::time::timeout(DISCARD_TIMEOUT, body.collect()).await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::error::{ConnectReason, TlsFailure};

    type Outcome = Result<(Response<()>, InFlight), ProxyError>;

    fn reason(method: Method, result: &Outcome) -> Option<RetryReason> {
        let policy = RetryPolicy {
            codes: vec![503],
            attempts: 2,
            backoff: Duration::ZERO,
        };
        retry_reason(&policy, &method, result)
    }

    fn boxed(s: &str) -> crate::proxy::error::BoxError {
        s.to_owned().into()
    }

    #[test]
    fn what_the_backend_never_took_is_retried_for_any_method() {
        let refused: Outcome = Err(ProxyError::Connect {
            reason: ConnectReason::Refused,
            source: boxed("refused"),
        });
        let untrusted: Outcome = Err(ProxyError::TlsHandshake {
            reason: TlsFailure::UnknownCa,
            source: boxed("unknown ca"),
        });
        for m in [Method::GET, Method::POST, Method::PATCH] {
            assert_eq!(reason(m.clone(), &refused), Some(RetryReason::Connect));
            assert_eq!(reason(m, &untrusted), Some(RetryReason::Connect));
        }
    }

    #[test]
    fn a_reset_after_sending_is_retried_only_for_idempotent_methods() {
        let reset: Outcome = Err(ProxyError::Upstream(boxed("reset")));
        for m in [
            Method::GET,
            Method::HEAD,
            Method::PUT,
            Method::DELETE,
            Method::OPTIONS,
        ] {
            assert_eq!(reason(m, &reset), Some(RetryReason::Reset));
        }
        for m in [Method::POST, Method::PATCH, Method::CONNECT] {
            assert_eq!(reason(m, &reset), None);
        }
        // An HTTP/2 stream the backend refused unprocessed: any method.
        let refused: Outcome = Err(ProxyError::Upstream(Box::new(h2::Error::from(
            h2::Reason::REFUSED_STREAM,
        ))));
        assert_eq!(reason(Method::POST, &refused), Some(RetryReason::Connect));
        let cancelled: Outcome = Err(ProxyError::Upstream(Box::new(h2::Error::from(
            h2::Reason::CANCEL,
        ))));
        assert_eq!(reason(Method::POST, &cancelled), None);
        let timeout: Outcome = Err(ProxyError::BackendTimeout);
        assert_eq!(reason(Method::POST, &timeout), Some(RetryReason::Timeout));
        assert_eq!(reason(Method::GET, &Err(ProxyError::NoEndpoints)), None);
    }
}
