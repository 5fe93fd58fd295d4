//! The request and response heads as the rule makes them: request header filters, URL
//! rewrites, hop-by-hop hygiene, forwarding headers and Host on the way up; hop hygiene, CORS
//! headers and response header filters on the way down. Pure functions over a head.

use http::header::HOST;
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{HeaderValue, Uri};

use super::route::Routed;
use crate::model::filter::CorsResponse;
use crate::model::{AppProtocol, Backend, BackendTls, Rule, UrlRewrite, WeightedBackend};
use crate::proxy::conn_info::ConnInfo;
use crate::proxy::error::ProxyError;
use crate::proxy::headers::{self, Keep};
use crate::proxy::observe::forwarded::Edge;

/// Replaces whatever the client sent as `name` with the connection's verified client
/// certificate identity, if it has one.
pub fn client_identity(headers: &mut http::HeaderMap, name: &http::HeaderName, conn: &ConnInfo) {
    headers.remove(name);
    if let Some(v) = &conn.client_identity {
        headers.insert(name.clone(), v.header.clone());
    }
}

/// The Host the client used, port included, for the upstream `Host` and `X-Forwarded-Host`.
fn original_host(parts: &Parts) -> Option<HeaderValue> {
    match parts.uri.authority() {
        Some(a) => HeaderValue::from_str(a.as_str()).ok(),
        None => parts.headers.get(HOST).cloned(),
    }
}

/// Applies request filters (rule, then backendRef) and hop hygiene to the head. Returns the
/// path and query to send.
pub fn prepare_head(
    edge: &Edge,
    routed: &Routed<'_>,
    weighted: &WeightedBackend,
    backend: &Backend,
    parts: &mut Parts,
    upgrade: bool,
) -> Result<PathAndQuery, ProxyError> {
    let rule = &routed.entry.rule;
    let client_host = original_host(parts);
    let mut edited = false;
    for m in [
        &rule.filters.request_headers,
        &weighted.filters.request_headers,
    ]
    .into_iter()
    .flatten()
    {
        m.apply(&mut parts.headers);
        edited = true;
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
    edge.apply(&mut parts.headers, scheme, client_host.as_ref(), edited);
    match rewrite.and_then(|r| r.hostname.clone()).or(client_host) {
        Some(host) => parts.headers.insert(HOST, host),
        None => parts.headers.remove(HOST),
    };
    Ok(path)
}

/// The URLRewrite in force: a backendRef's replaces the rule's rather than composing with it.
pub fn rewrite_of<'a>(rule: &'a Rule, weighted: &'a WeightedBackend) -> Option<&'a UrlRewrite> {
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
pub fn rewritten_target(
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

/// Hop hygiene, the CORS headers, and the response header modifiers (rule, then backendRef:
/// after CORS, so a modifier has the last word) on a response head.
pub fn response_head(
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
pub fn response_modifiers<'a>(
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
}
