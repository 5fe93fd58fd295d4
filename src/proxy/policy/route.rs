//! Routing, decided purely over the snapshot: the port and listener a request reaches
//! (listener isolation, misdirected requests), the rule its route table picks, and what the
//! rule comes to ([`decide`]: a CORS preflight or a redirect answered by pier, or a
//! backendRef to forward to). Both request paths call these through `phase`.

use http::header::LOCATION;
use http::{HeaderValue, Method, Response};
use rand::Rng;

use crate::model::filter::{CorsCheck, CorsResponse, Preflight, RedirectInput};
use crate::model::host::normalize_host;
use crate::model::matcher::RequestParts;
use crate::model::session::Session;
use crate::model::{
    BackendSet, BackendTarget, Entry, Listener, Port, Redirect, Rule, Snapshot, WeightedBackend,
};
use crate::proxy::body::{self, ProxyBody};
use crate::proxy::conn_info::ConnInfo;
use crate::proxy::error::ProxyError;
use crate::proxy::exchange::session::unix_now;

/// The routing decision for one request.
#[derive(Clone, Copy)]
pub struct Routed<'s> {
    pub port: &'s Port,
    pub listener: &'s Listener,
    pub entry: &'s Entry,
}

/// What routing reads of a request.
pub struct RouteInput<'r> {
    pub method: &'r Method,
    /// HTTP/2 `:authority`, an absolute-form authority, or the Host header, as sent.
    pub host: &'r str,
    pub path: &'r str,
    pub query: Option<&'r str>,
    pub headers: &'r http::HeaderMap,
}

/// The port and the listener on it that `host` (normalised) reaches: listener isolation.
/// On TLS, the listener the SNI reached must be the same one, else the request is
/// misdirected (421, RFC 9110 §15.5.20): its connection's certificate was not chosen for it.
pub fn listener_for<'s>(
    snapshot: &'s Snapshot,
    conn: &ConnInfo,
    host: &str,
) -> Result<(&'s Port, &'s Listener), ProxyError> {
    // `let ... else` rather than `ok_or(ProxyError::..)`: an eager error value is dropped on
    // the success path, a call to ProxyError's drop glue each time where it is not inlined
    // (six per plain request, ~84 instructions, callgrind).
    let Some(port) = snapshot.port_at(conn.key()) else {
        return Err(ProxyError::NoListener);
    };
    let listener = port.listener(host);
    if let Some(sni) = &conn.sni
        && let Some(by_sni) = port.listener(sni)
        && !listener.is_some_and(|l| std::ptr::eq(l, by_sni))
    {
        return Err(ProxyError::Misdirected);
    }
    let Some(listener) = listener else {
        return Err(ProxyError::NoListener);
    };
    // Decided at translation: only ports whose listeners differ in TLS settings check.
    if port.tls_profiles && listener.tls_profile != conn.tls_profile {
        return Err(ProxyError::Misdirected);
    }
    Ok((port, listener))
}

/// The listener's route table on the normalised `host`.
pub fn route_on<'s>(
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
    let Some(entry) = listener.routes.find(host, &parts) else {
        return Err(ProxyError::NoRoute);
    };
    Ok(Routed {
        port,
        listener,
        entry,
    })
}

/// pier's answer for a RequestRedirect: its status and `Location`, built from the request.
pub fn redirect_response(
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

/// What a routed request's rule comes to. `phase::decide` runs the access policies between a
/// preflight and the rest: a request they refuse never gets a redirect or a backend.
pub enum Decision<'s> {
    /// pier answers a CORS preflight itself.
    Preflight(Response<ProxyBody>),
    /// pier answers with a redirect.
    Redirect(Response<ProxyBody>),
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
pub fn decide<'s>(routed: &Routed<'s>, input: &RouteInput<'_>) -> Result<Decision<'s>, ProxyError> {
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
            return Ok(Decision::Preflight(preflight_response(preflight)));
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
        return Ok(Decision::Redirect(resp));
    }
    let Some(weighted) = picked? else {
        return Err(ProxyError::NoBackends);
    };
    Ok(Decision::Forward(weighted, cors))
}

/// The backendRef of `rule` whose backend has the session's endpoint.
fn sticky_backend(rule: &Rule, session: Session) -> Option<&WeightedBackend> {
    rule.backends.backends.iter().find(|w| {
        w.weight > 0
            && matches!(&w.target, BackendTarget::Service(b)
                if b.endpoints.iter().any(|e| e.addr == session.endpoint))
    })
}

/// Weighted pick of a backendRef; `None` when the rule has none with weight.
pub fn pick_weighted(set: &BackendSet) -> Result<&WeightedBackend, ProxyError> {
    if set.total_weight == 0 {
        return Err(ProxyError::NoBackends);
    }
    let roll = rand::rng().random_range(0..set.total_weight);
    match set.pick(roll) {
        Some(w) => Ok(w),
        None => Err(ProxyError::NoBackends),
    }
}
