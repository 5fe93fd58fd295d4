//! The external authorization phase, on hyper's path (the fast path hands rules with an
//! authorizer over): after `decide` (a CORS preflight never reaches it; authentication has
//! passed), each of the rule's authorizers in turn (its SecurityPolicy's `extAuth`, then its
//! `ExternalAuth` filter), then the policy's authorization rules on the request as the
//! authorizers left it.
//!
//! ```text
//! body wanted? ─> read up to maxRequestBytes (+1) from the client (413 over it: Reject)
//! exchange::ext_auth::check ─> Allow: header mutations onto the request
//!                           ─> Deny: the authorizer's answer (gRPC calls: status 16 / 7)
//!                           ─> no verdict: 403 (gRPC 7), or on with `failOpen`
//! policy.authorization ─> 403 when its rules deny
//! ```
//!
//! The body bytes read for the authorizer go upstream ahead of the rest ([`Prefixed`]).

use std::pin::Pin;
use std::task::{Context, Poll};

use crate::proxy::body::Inbound;
use bytes::{Bytes, BytesMut};
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;

use crate::model::Rule;
use crate::model::ext_auth::{ExtAuth, ExtAuthFailure, OverLimit, PreRoute};
use crate::model::policy::{AccessRequest, Mechanism};
use crate::proxy::body::{BoxError, ProxyBody};
use crate::proxy::conn_info::ConnInfo;
use crate::proxy::error::{ProxyError, is_grpc};
use crate::proxy::exchange::Shared;
use crate::proxy::exchange::ext_auth::{self, Asked, Verdict};
use crate::proxy::observe::forwarded::Edge;
use crate::proxy::observe::metrics::SecurityResult;
use crate::proxy::observe::record::{Security, Seen};
use crate::proxy::policy::access::{self as access_policy, Admitted};
use crate::proxy::validate::Invalid;

/// What one authorizer decided about a request: the typed outcome for decision metrics
/// (`pier_security_decisions_total{mechanism="extAuth"}`: `allowed`, `denied`, `failed`,
/// `failed_open`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtAuthOutcome {
    Allowed,
    /// The authorizer's answer went to the client, with this status.
    Denied(StatusCode),
    /// No verdict: the request failed closed.
    Failed(ExtAuthFailure),
    /// No verdict, and `failOpen` let the request through.
    FailedOpen(ExtAuthFailure),
}

/// Where the phase leaves the request.
pub enum ExtAuthed {
    /// On to the backend; the body bytes already read from the client, if any, go first.
    Pass(Option<Bytes>),
    /// The authorizer's answer for the client.
    Answer(Response<ProxyBody>),
}

/// The request's facts the authorizer may be told that the request itself does not carry.
pub struct ExtAuthCtx<'a> {
    pub edge: &'a Edge,
    /// The request's host (`:authority` or `Host`), as routed.
    pub host: &'a str,
    /// It arrived over TLS.
    pub https: bool,
    /// The URI and DNS SANs of the connection's verified client certificate.
    pub client_sans: &'a [Box<str>],
}

impl<'a> ExtAuthCtx<'a> {
    /// For a request on `port` and `conn`; `host` as the client sent it (with its port).
    pub fn new(
        edge: &'a Edge,
        host: &'a str,
        port: &crate::model::Port,
        conn: &'a ConnInfo,
    ) -> Self {
        Self {
            edge,
            host,
            https: port.protocol != crate::model::Protocol::Http,
            client_sans: conn.client_identity.as_ref().map_or(&[], |c| &c.sans),
        }
    }
}

/// The body bytes read from the client for authorizers so far, and whether the body ended
/// with them: they go upstream ahead of the rest ([`Prefixed`]).
pub type Prefix = Option<(Bytes, bool)>;

/// Runs the rule's authorizers ([`Rule::ext_auths`]) on `req`, then its policy's
/// authorization rules. `prefix` is what the listener's filters read of the body already.
/// Each authorizer's outcome lands in `outcomes` (also when the request ends in an error),
/// for the caller to count.
pub async fn ext_auth(
    shared: &Shared,
    rule: &Rule,
    ctx: &ExtAuthCtx<'_>,
    req: &mut Request<Inbound>,
    (admitted, mut prefix): (Option<&Admitted>, Prefix),
    outcomes: &mut Vec<ExtAuthOutcome>,
) -> Result<ExtAuthed, ProxyError> {
    if let Some(answer) =
        authorize(shared, rule.ext_auths(), ctx, req, &mut prefix, outcomes).await?
    {
        return Ok(ExtAuthed::Answer(answer));
    }
    if let Some(policy) = &rule.access
        && policy.ext_auth.is_some()
    {
        let empty = Admitted::default();
        let admitted = admitted.unwrap_or(&empty);
        access_policy::authorize(
            policy,
            &AccessRequest {
                client: ctx.edge.client,
                client_sans: ctx.client_sans,
                method: req.method(),
                headers: req.headers(),
                query: req.uri().query(),
                authenticated: None,
                basic: None,
            },
            admitted,
        )?;
    }
    Ok(ExtAuthed::Pass(prefix.map(|(b, _)| b)))
}

/// Listener filters (GEP-5224): the listener's authorizers, in order, on every request it
/// accepts, before routing. `Ok(Err(answer))`: an authorizer's answer for the client;
/// `Ok(Ok(prefix))`: on to routing, with the body bytes they read.
pub async fn listener_filters(
    shared: &Shared,
    pre: &PreRoute,
    ctx: &ExtAuthCtx<'_>,
    req: &mut Request<Inbound>,
    outcomes: &mut Vec<ExtAuthOutcome>,
) -> Result<Result<Prefix, Response<ProxyBody>>, ProxyError> {
    let auths = match pre {
        PreRoute::Authorize(auths) => auths,
        // Fail closed: a filter whose authorizer does not resolve.
        PreRoute::Unresolved => return Err(ProxyError::PolicyInvalid),
    };
    let mut prefix = None;
    let exts = auths.iter().map(|a| &**a);
    match authorize(shared, exts, ctx, req, &mut prefix, outcomes).await? {
        Some(answer) => Ok(Err(answer)),
        None => Ok(Ok(prefix)),
    }
}

/// Asks `exts` in turn about `req`: `Some` is the answer of one that denied it. An allowing
/// verdict's header changes apply before the next is asked (never to `Host`: an authorizer
/// cannot move a request to another listener or route host).
async fn authorize<'e>(
    shared: &Shared,
    exts: impl Iterator<Item = &'e ExtAuth>,
    ctx: &ExtAuthCtx<'_>,
    req: &mut Request<Inbound>,
    prefix: &mut Prefix,
    outcomes: &mut Vec<ExtAuthOutcome>,
) -> Result<Option<Response<ProxyBody>>, ProxyError> {
    let grpc = is_grpc(req.headers());
    for ext in exts {
        let body = match ext.body {
            Some(limit) => {
                // Read on until this authorizer's limit (an earlier one may have wanted less).
                let more = prefix
                    .as_ref()
                    .is_none_or(|(b, ended)| !ended && b.len() <= limit.max_bytes);
                if more {
                    let start = prefix
                        .take()
                        .map(|(b, _)| BytesMut::from(b))
                        .unwrap_or_default();
                    *prefix = Some(read_prefix(req.body_mut(), start, limit.max_bytes, ext).await?);
                }
                let (bytes, ended) = prefix.as_ref().expect("read above");
                let over = !ended || bytes.len() > limit.max_bytes;
                if over && limit.over == OverLimit::Reject {
                    return Err(ProxyError::Invalid(Invalid::BodyTooLarge));
                }
                Some(&bytes[..bytes.len().min(limit.max_bytes)])
            }
            None => None,
        };
        let asked = Asked {
            method: req.method(),
            uri: req.uri(),
            host: ctx.host,
            headers: req.headers(),
            body,
            body_len: req.body().size_hint().exact().map(|n| {
                n + prefix
                    .as_ref()
                    .map_or(0, |(b, _)| u64::try_from(b.len()).unwrap_or(u64::MAX))
            }),
            client: ctx.edge.client,
            request_id: ctx.edge.request_id.as_str(),
            version: req.version(),
            https: ctx.https,
        };
        let verdict = ext_auth::check(shared, ext, &asked).await;
        match verdict {
            Ok(Verdict::Allow(mutations)) => {
                outcomes.push(ExtAuthOutcome::Allowed);
                ext_auth::apply(&mutations, req.headers_mut());
            }
            Ok(Verdict::Deny(denial)) => {
                outcomes.push(ExtAuthOutcome::Denied(denial.status));
                tracing::debug!(source = %ext.source, status = %denial.status, "request denied by the external authorizer");
                if grpc {
                    return Err(denial.grpc_error());
                }
                return Ok(Some(denial.into_response()));
            }
            Err(failure) if ext.fail_open => {
                outcomes.push(ExtAuthOutcome::FailedOpen(failure));
                tracing::warn!(source = %ext.source, %failure, "external authorizer gave no verdict; failOpen lets the request through");
            }
            Err(failure) => {
                outcomes.push(ExtAuthOutcome::Failed(failure));
                tracing::warn!(source = %ext.source, %failure, "external authorizer gave no verdict; the request fails closed");
                return Err(ProxyError::ExtAuthFailed(failure));
            }
        }
    }
    Ok(None)
}

/// Records in `seen` what the authorizers decided (`outcomes`) and how the phase ended
/// (`error`), over what `decide` recorded for authentication.
pub fn record<'s>(
    seen: &mut Seen<'s>,
    rule: &'s Rule,
    outcomes: &[ExtAuthOutcome],
    error: Option<&ProxyError>,
) {
    let Some(policy) = &rule.access else {
        // An `ExternalAuth` filter without a SecurityPolicy: no policy to count under.
        return;
    };
    let result = match (error, outcomes.last()) {
        (_, Some(ExtAuthOutcome::Denied(_))) => SecurityResult::Denied,
        (_, Some(ExtAuthOutcome::Failed(_))) => SecurityResult::Failed,
        // The authorizers let it in (or failed open), the authorization rules did not.
        (Some(e @ ProxyError::Forbidden), _) => {
            seen.security = Some(Box::new(Security::refused(policy, e)));
            return;
        }
        // Refused before an authorizer was asked (a body over `maxRequestBytes`: 413).
        (Some(_), _) => SecurityResult::Denied,
        (None, Some(ExtAuthOutcome::FailedOpen(_))) => SecurityResult::FailedOpen,
        (None, _) => {
            // Let in: by authentication if a mechanism authenticated, else by the authorizer.
            if let Some(s) = &mut seen.security
                && matches!(s.mechanism, Mechanism::None | Mechanism::Authorization)
            {
                s.mechanism = Mechanism::ExtAuth;
            }
            return;
        }
    };
    let principal = seen.security.as_mut().and_then(|s| s.principal.take());
    seen.security = Some(Box::new(Security {
        policy,
        mechanism: Mechanism::ExtAuth,
        result,
        principal: principal.filter(|_| result == SecurityResult::FailedOpen),
    }));
}

/// Reads on from `buf` (what was read before) to the body's first `max + 1` bytes at least
/// (whole frames: a frame may bring more), within the authorizer's timeout: the bytes, and
/// whether the body ended with them.
async fn read_prefix(
    body: &mut Inbound,
    mut buf: BytesMut,
    max: usize,
    ext: &ExtAuth,
) -> Result<(Bytes, bool), ProxyError> {
    let read = async {
        while buf.len() <= max {
            match body.frame().await {
                None => return Ok(true),
                Some(Ok(frame)) => {
                    // Trailers sent before the body ends are dropped (gRPC clients send none).
                    if let Ok(data) = frame.into_data() {
                        buf.extend_from_slice(&data);
                    }
                }
                Some(Err(_)) => {
                    return Err(ProxyError::ClientBody(
                        crate::proxy::body::BodyFault::Malformed,
                    ));
                }
            }
        }
        Ok(body.is_end_stream())
    };
    let complete = tokio::time::timeout(ext.timeout, read)
        .await
        .map_err(|_| ProxyError::ClientBody(crate::proxy::body::BodyFault::TooSlow))??;
    Ok((buf.freeze(), complete))
}

/// A body whose first bytes were read already: those, then the rest.
pub struct Prefixed {
    prefix: Option<Bytes>,
    rest: ProxyBody,
}

impl Prefixed {
    pub fn new(prefix: Bytes, rest: ProxyBody) -> Self {
        Self {
            prefix: (!prefix.is_empty()).then_some(prefix),
            rest,
        }
    }
}

impl Body for Prefixed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(p) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(p))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = self.rest.size_hint();
        let n = self.prefix.as_ref().map_or(0, |p| p.len() as u64);
        // Upper first: a lower bound above the upper one panics.
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper + n);
        }
        hint.set_lower(hint.lower() + n);
        hint
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::{BodyExt, Full};

    use super::*;
    use crate::proxy::body;

    #[tokio::test]
    async fn a_prefixed_body_is_the_prefix_then_the_rest_with_its_length() {
        let rest = body::boxed(Full::new(Bytes::from_static(b" world")));
        let p = Prefixed::new(Bytes::from_static(b"hello"), rest);
        assert_eq!(p.size_hint().exact(), Some(11));
        let all = p.collect().await.unwrap().to_bytes();
        assert_eq!(all, "hello world");
    }
}
