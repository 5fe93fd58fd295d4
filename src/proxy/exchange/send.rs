//! One attempt at one endpoint, for every request path (the fast path's raw exchange
//! excepted, which reports to [`outcome`] too): the endpoint pick by power of two choices,
//! the send within `timeouts.backendRequest`, and passive outlier detection on its outcome.

use http::{Request, Response, StatusCode};
use rand::Rng;

use super::Shared;
use crate::model::{Backend, Endpoint, Outlier, Rule};
use crate::proxy::body::ProxyBody;
use crate::proxy::error::{ConnectReason, ProxyError};
use crate::proxy::upstream::{Clock, InFlight, Target, UpstreamBody};

/// One endpoint of `backend` by power of two choices (`NoEndpoints`: 503). Every request
/// path picks here (h1, hyper, retries, TLS streams).
#[inline(always)]
pub fn pick_endpoint<'b>(
    shared: &Shared,
    backend: &'b Backend,
) -> Result<&'b Endpoint, ProxyError> {
    // Not `ok_or`: see `policy::route::listener_for`.
    match pick(backend, &shared.clock) {
        Some(e) => Ok(e),
        None => Err(ProxyError::NoEndpoints),
    }
}

/// [`pick_endpoint`] on `clock` (mirrors, which run outside the request, hold a clock of
/// their own).
#[inline(always)]
pub fn pick<'b>(backend: &'b Backend, clock: &Clock) -> Option<&'b Endpoint> {
    let mut rng = rand::rng();
    backend.pick(|| clock.now_ms(), rng.random(), rng.random())
}

/// One attempt against one endpoint, within `timeouts.backendRequest`. `in_flight` comes back
/// with the response, to keep the request counted until the response body is done.
pub async fn exchange(
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
/// failed TLS handshake, 502/503/504 from the endpoint, or any 5xx under a policy's
/// `consecutive5XxErrors`) counts towards the backend's
/// [`Outlier`](crate::model::Outlier) threshold (its Service's, else `--outlier-*`); anything
/// else resets the count. Slow answers and the
/// application's own errors are not reasons to eject.
#[inline]
pub fn outcome(
    shared: &Shared,
    backend: &Backend,
    endpoint: &Endpoint,
    result: Result<StatusCode, &ProxyError>,
) {
    let now = || shared.clock.now_ms();
    let defaults = &shared.config.limits.outlier;
    // Past this match the exchange failed: it counts towards an ejection.
    match result {
        Ok(status) => {
            let any_5xx = backend.outlier.any_5xx.unwrap_or(defaults.any_5xx);
            if !Outlier::fails(any_5xx, status.as_u16()) {
                // Most answers: the endpoint's counts to reset, no settings to read.
                endpoint.passed();
                return;
            }
        }
        Err(ProxyError::Connect { reason, .. }) => {
            shared.metrics.connect_error(&backend.id, *reason);
            if matches!(reason, ConnectReason::Refused | ConnectReason::Timeout) {
                let outlier = backend.outlier.over(*defaults);
                if backend.eject(endpoint, now(), &outlier) {
                    tracing::debug!(backend = %backend.id, endpoint = %endpoint.addr, ?reason, "endpoint ejected: connect failed");
                }
                return;
            }
        }
        Err(ProxyError::TlsHandshake { .. } | ProxyError::Upstream(_)) => {}
        // Timeouts, and failures that are the client's or pier's, say nothing of the endpoint.
        Err(_) => return,
    }
    let outlier = backend.outlier.over(*defaults);
    if backend.record(endpoint, true, now, &outlier) {
        tracing::warn!(backend = %backend.id, endpoint = %endpoint.addr, "endpoint ejected after consecutive failures");
    }
}
