//! The request record: how far one request got ([`Seen`]: listener, route, backend, endpoint,
//! why pier answered itself), filled in by the request path and read once at the end by the
//! metrics, the access log and the span. Borrowed from the snapshot.

use std::net::SocketAddr;
use std::sync::Arc;

use http::Request;
use http::header::HOST;

use crate::model::policy::{AccessPolicy, Authenticated, Mechanism};
use crate::model::{Endpoint, Entry, Listener, PathMatch, Rule};
use crate::proxy::body::FaultCell;
use crate::proxy::error::{Challenge, ErrorKind, ProxyError};
use crate::proxy::observe::metrics::{Reached, SecurityResult};

/// How far a request got, for metrics and the access log. Borrowed from the snapshot.
#[derive(Default)]
pub struct Seen<'s> {
    /// Listener, route, backend and transport: the metric labels.
    pub reached: Reached<'s>,
    pub upstream: Option<SocketAddr>,
    /// The rule that matched, for the access log.
    pub rule: Option<&'s Rule>,
    /// The path match of the entry that matched (the span's `http.route`).
    pub path_match: Option<&'s PathMatch>,
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
    /// What the rule's access policy decided, when it has one (boxed: a rule without one,
    /// and every connection's serving state, pays a pointer).
    pub security: Option<Box<Security<'s>>>,
}

/// An access policy's decision on a request: counted by policy, mechanism and result, and
/// the principal it let in, for the access log.
#[derive(Debug)]
pub struct Security<'s> {
    pub policy: &'s AccessPolicy,
    pub mechanism: Mechanism,
    pub result: SecurityResult,
    /// `jwt:<provider>:<sub>`, `apikey:<clientID>`, `basic:<user>`; never a credential.
    pub principal: Option<String>,
}

impl<'s> Security<'s> {
    /// A request the policy let in; `authenticated` says by which mechanism and who.
    pub fn allowed(policy: &'s AccessPolicy, authenticated: &mut Authenticated) -> Self {
        let mechanism = authenticated
            .mechanism
            .unwrap_or(if policy.authorization.is_some() {
                Mechanism::Authorization
            } else {
                Mechanism::None
            });
        Self {
            policy,
            mechanism,
            result: SecurityResult::Allowed,
            principal: authenticated.principal.take(),
        }
    }

    /// A request the policy refused with `error`.
    pub fn refused(policy: &'s AccessPolicy, error: &ProxyError) -> Self {
        let (mechanism, result) = match error {
            ProxyError::Unauthenticated(Challenge::Bearer { .. }) => {
                (Mechanism::Jwt, SecurityResult::Unauthenticated)
            }
            ProxyError::Unauthenticated(Challenge::ApiKey) => {
                (Mechanism::ApiKey, SecurityResult::Unauthenticated)
            }
            ProxyError::Unauthenticated(Challenge::Basic) => {
                (Mechanism::Basic, SecurityResult::Unauthenticated)
            }
            ProxyError::Forbidden => (Mechanism::Authorization, SecurityResult::Denied),
            ProxyError::AuthBusy => (Mechanism::Basic, SecurityResult::Busy),
            _ => (Mechanism::Policy, SecurityResult::Invalid),
        };
        Self {
            policy,
            mechanism,
            result,
            principal: None,
        }
    }
}

impl<'s> Seen<'s> {
    /// The listener and rule routing reached.
    pub fn routed(&mut self, listener: &'s Listener, entry: &'s Entry) {
        self.reached.listener = Some(&listener.id);
        self.reached.route = Some(&entry.rule.route);
        self.rule = Some(&entry.rule);
        self.path_match = Some(&entry.matcher.path);
        self.access_log = listener.access_log;
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
pub struct Failure {
    pub kind: ErrorKind,
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

/// The authority as sent (HTTP/2 `:authority`, an absolute-form URI's, else Host), port
/// included: what hyper's path routes by (`normalize_host` drops the port), logs and hands to
/// authorizers. Not `Authority::host`, which scans it twice (~400 instructions a call,
/// callgrind).
pub fn request_authority<B>(req: &Request<B>) -> &str {
    match req.uri().authority() {
        Some(a) => a.as_str(),
        None => req
            .headers()
            .get(HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_authority_wins_over_host_and_keeps_its_port() {
        let req = Request::get("http://a.example.com:8080/x")
            .header(HOST, "b.example.com")
            .body(())
            .unwrap();
        assert_eq!(request_authority(&req), "a.example.com:8080");
        let req = Request::get("/x")
            .header(HOST, "b.example.com:80")
            .body(())
            .unwrap();
        assert_eq!(request_authority(&req), "b.example.com:80");
        let req = Request::get("/x").body(()).unwrap();
        assert_eq!(request_authority(&req), "");
    }
}
