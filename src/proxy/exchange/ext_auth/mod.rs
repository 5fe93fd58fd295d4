//! External authorization: asking a rule's authorizer ([`ExtAuth`]) about one request, over
//! pier's own upstream pool, and reading its answer.
//!
//! ```text
//! check ─> pick_endpoint (P2C, ejections) ─> http::ask | grpc::ask ─> Upstream::send
//!            (within ext.timeout: connect, send, the whole answer) ─> send::outcome
//!       <─ Verdict::Allow(header mutations) | Verdict::Deny(the answer for the client)
//!       <─ Failure (no endpoint, unreachable, timed out, garbage): the caller fails closed
//! ```
//!
//! Why pier's upstream pool and not a client of its own: the authorizer is a Service port
//! resolved like any backendRef (endpoints, BackendTLSPolicy, ejection of dead endpoints), and
//! the pool already keeps HTTP/1.1 connections warm and multiplexes h2c, which is what gRPC
//! needs; a second client would be a second connection pool, TLS setup and outlier logic to
//! keep in step. The parsers of the answers ([`http::verdict`], [`grpc::verdict`]) are pure
//! functions of bytes, property-tested in `tests`.

pub mod grpc;
pub mod http;
pub mod proto;
#[cfg(test)]
mod tests;

use std::net::IpAddr;

use ::http::header::{self, HeaderName};
use ::http::{HeaderMap, HeaderValue, Method, Response, StatusCode, Uri, Version};
use bytes::Bytes;
use http_body_util::BodyExt;

use super::Shared;
use super::send::{outcome, pick_endpoint};
use crate::model::ext_auth::{ExtAuth, MAX_ANSWER_BYTES};
use crate::proxy::body::{self, ProxyBody};
use crate::proxy::error::ProxyError;
use crate::proxy::h1wire::BadResponse;
use crate::proxy::upstream::{Target, UpstreamBody};

/// What the authorizer is told about a request.
#[derive(Clone, Copy, Debug)]
pub struct Asked<'r> {
    pub method: &'r Method,
    pub uri: &'r Uri,
    /// The request's host (`:authority` or `Host`).
    pub host: &'r str,
    pub headers: &'r HeaderMap,
    /// The body, as much as the authorizer gets (`None`: none).
    pub body: Option<&'r [u8]>,
    /// The request's own body length, when known.
    pub body_len: Option<u64>,
    pub client: IpAddr,
    pub request_id: &'r str,
    pub version: Version,
    pub https: bool,
}

/// What the authorizer decided.
#[derive(Debug)]
pub enum Verdict {
    /// Let the request through, with these changes to its headers.
    Allow(Vec<Mutation>),
    /// Answer the client with this instead.
    Deny(Denial),
}

/// An authorizer's refusal, as the client gets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// A change to the upstream request's headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    /// Replace every value.
    Set(HeaderName, HeaderValue),
    /// Add a value.
    Append(HeaderName, HeaderValue),
    /// Only when the request has none.
    AddIfAbsent(HeaderName, HeaderValue),
    /// Only when the request has one.
    OverwriteIfExists(HeaderName, HeaderValue),
    Remove(HeaderName),
}

pub use crate::model::ext_auth::ExtAuthFailure as Failure;

/// Asks `ext` about `asked`: the verdict, or why there is none (connect, send and the whole
/// answer within `ext.timeout`).
pub async fn check(shared: &Shared, ext: &ExtAuth, asked: &Asked<'_>) -> Result<Verdict, Failure> {
    let backend = &*ext.backend;
    let endpoint = pick_endpoint(shared, backend).map_err(|_| Failure::NoEndpoints)?;
    let target = Target {
        backend,
        endpoint,
        upgrade: false,
    };
    let req = match &ext.protocol {
        crate::model::ext_auth::ExtAuthProtocol::Http { path_prefix, .. } => {
            http::request(ext, path_prefix, asked)
        }
        crate::model::ext_auth::ExtAuthProtocol::Grpc => grpc::request(ext, asked),
    }
    .map_err(|_| Failure::Garbage)?;
    let exchange = async {
        let sent = shared.upstream.send(target, req).await;
        outcome(shared, backend, endpoint, sent.as_ref().map(|r| r.status()));
        let resp = sent.map_err(|e| match e {
            ProxyError::NoEndpoints | ProxyError::TlsUnavailable(_) => Failure::NoEndpoints,
            // Bytes that are not HTTP (hyper's parse errors, or the raw HTTP/1.1 path's).
            ProxyError::Upstream(e)
                if e.is::<BadResponse>()
                    || e.downcast_ref::<hyper::Error>()
                        .is_some_and(hyper::Error::is_parse) =>
            {
                Failure::Garbage
            }
            _ => Failure::Unreachable,
        })?;
        read(resp).await
    };
    let (head, body, trailers) = tokio::time::timeout(ext.timeout, exchange)
        .await
        .map_err(|_| Failure::Timeout)??;
    match &ext.protocol {
        crate::model::ext_auth::ExtAuthProtocol::Http {
            headers_to_backend,
            allow,
            ..
        } => Ok(http::verdict(
            head.status,
            &head.headers,
            body,
            (*allow, headers_to_backend),
        )),
        crate::model::ext_auth::ExtAuthProtocol::Grpc => {
            grpc::verdict(&head.headers, trailers.as_ref(), &body)
        }
    }
}

/// The whole answer: head, body (at most [`MAX_ANSWER_BYTES`]) and trailers.
async fn read(
    resp: Response<UpstreamBody>,
) -> Result<(::http::response::Parts, Bytes, Option<HeaderMap>), Failure> {
    let (head, body) = resp.into_parts();
    let limited = http_body_util::Limited::new(body, MAX_ANSWER_BYTES);
    let collected = limited.collect().await.map_err(|e| {
        if e.is::<http_body_util::LengthLimitError>() {
            Failure::Garbage
        } else {
            Failure::Unreachable
        }
    })?;
    let trailers = collected.trailers().cloned();
    Ok((head, collected.to_bytes(), trailers))
}

/// Headers that never cross between the client, the authorizer and the backend: they frame
/// or route a message on its own connection.
fn is_framing(name: &HeaderName) -> bool {
    matches!(
        *name,
        header::CONNECTION
            | header::TE
            | header::TRAILER
            | header::TRANSFER_ENCODING
            | header::UPGRADE
            | header::CONTENT_LENGTH
            | header::HOST
    ) || name == "keep-alive"
        || name == "proxy-connection"
}

/// Applies an allowing verdict's changes to the upstream request's headers.
pub fn apply(mutations: &[Mutation], headers: &mut HeaderMap) {
    for m in mutations {
        match m {
            Mutation::Set(n, v) => {
                headers.insert(n.clone(), v.clone());
            }
            Mutation::Append(n, v) => {
                headers.append(n.clone(), v.clone());
            }
            Mutation::AddIfAbsent(n, v) => {
                if !headers.contains_key(n) {
                    headers.insert(n.clone(), v.clone());
                }
            }
            Mutation::OverwriteIfExists(n, v) => {
                if headers.contains_key(n) {
                    headers.insert(n.clone(), v.clone());
                }
            }
            Mutation::Remove(n) => {
                headers.remove(n);
            }
        }
    }
}

// === impl Denial ===

impl Denial {
    /// The client's answer: the authorizer's status, headers (framing ones dropped) and body.
    pub fn into_response(self) -> Response<ProxyBody> {
        let mut resp = Response::new(body::full(self.body));
        *resp.status_mut() = self.status;
        *resp.headers_mut() = self.headers;
        resp
    }

    /// The error a gRPC client gets instead (its status in `grpc-status`): 401 is
    /// UNAUTHENTICATED, anything else PERMISSION_DENIED.
    pub fn grpc_error(&self) -> ProxyError {
        if self.status == StatusCode::UNAUTHORIZED {
            ProxyError::Unauthenticated(crate::proxy::error::Challenge::Bearer { invalid: true })
        } else {
            ProxyError::Forbidden
        }
    }
}
