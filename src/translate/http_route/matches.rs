//! HTTPRoute `matches` -> [`RequestMatch`]: path, method, headers, query parameters.

use http::{HeaderName, Method};

use crate::model::matcher::InvalidMatch;
use crate::model::{HeaderMatch, PathMatch, QueryMatch, RequestMatch, ValueMatch};
use crate::translate::api::{
    HttpRouteRulesMatches, HttpRouteRulesMatchesHeaders, HttpRouteRulesMatchesHeadersType,
    HttpRouteRulesMatchesMethod, HttpRouteRulesMatchesPath, HttpRouteRulesMatchesPathType,
    HttpRouteRulesMatchesQueryParams, HttpRouteRulesMatchesQueryParamsType,
};

#[derive(Debug, thiserror::Error)]
pub enum InvalidMatchSpec {
    #[error("path")]
    Path(#[source] InvalidMatch),
    #[error("path {0:?} must not contain '//', '/./', '/../', '%2f', '%2F' or '#'")]
    PathNotNormalized(String),
    #[error("headers[{0}]")]
    Header(usize, #[source] InvalidMatch),
    #[error("queryParams[{0}]: name is empty")]
    EmptyQueryName(usize),
    #[error("queryParams[{0}]")]
    Query(usize, #[source] InvalidMatch),
}

/// One HTTPRouteMatch. Absent path = PathPrefix `/`. When a header (case-insensitive) or
/// query parameter (case-sensitive) name repeats, only the first entry counts, as the spec
/// says.
pub fn request_match(
    HttpRouteRulesMatches {
        headers,
        method,
        path,
        query_params,
    }: &HttpRouteRulesMatches,
) -> Result<RequestMatch, InvalidMatchSpec> {
    let path = match path {
        None => PathMatch::Prefix(String::new()),
        Some(p) => path_match(p)?,
    };
    let mut header_matches: Vec<HeaderMatch> = vec![];
    for (i, h) in headers.iter().flatten().enumerate() {
        let m = header_match(h).map_err(|e| InvalidMatchSpec::Header(i, e))?;
        if !header_matches.iter().any(|x| x.name == m.name) {
            header_matches.push(m);
        }
    }
    let mut query: Vec<QueryMatch> = vec![];
    for (i, q) in query_params.iter().flatten().enumerate() {
        let m = query_match(i, q)?;
        if !query.iter().any(|x| x.name == m.name) {
            query.push(m);
        }
    }
    Ok(RequestMatch {
        path,
        method: method.as_ref().map(http_method),
        headers: header_matches,
        query,
        grpc: None,
    })
}

fn path_match(
    HttpRouteRulesMatchesPath { r#type, value }: &HttpRouteRulesMatchesPath,
) -> Result<PathMatch, InvalidMatchSpec> {
    let value = value.as_deref().unwrap_or("/");
    let t = r#type
        .as_ref()
        .unwrap_or(&HttpRouteRulesMatchesPathType::PathPrefix);
    match t {
        HttpRouteRulesMatchesPathType::Exact => {
            check_normalized(value)?;
            PathMatch::exact(value).map_err(InvalidMatchSpec::Path)
        }
        HttpRouteRulesMatchesPathType::PathPrefix => {
            check_normalized(value)?;
            PathMatch::prefix(value).map_err(InvalidMatchSpec::Path)
        }
        HttpRouteRulesMatchesPathType::RegularExpression => {
            PathMatch::regex(value).map_err(InvalidMatchSpec::Path)
        }
    }
}

/// The CRD's CEL rules for Exact and PathPrefix values; a file source has no API server to
/// enforce them, so translation does.
fn check_normalized(p: &str) -> Result<(), InvalidMatchSpec> {
    let bad = ["//", "/./", "/../", "%2f", "%2F", "#"]
        .iter()
        .any(|s| p.contains(s))
        || p.ends_with("/..")
        || p.ends_with("/.");
    if bad {
        return Err(InvalidMatchSpec::PathNotNormalized(p.to_string()));
    }
    Ok(())
}

fn header_match(
    HttpRouteRulesMatchesHeaders {
        name,
        r#type,
        value,
    }: &HttpRouteRulesMatchesHeaders,
) -> Result<HeaderMatch, InvalidMatch> {
    // `from_bytes` lower-cases, so matching is case-insensitive in the name.
    let name = HeaderName::from_bytes(name.as_bytes())?;
    let value = match r#type {
        None | Some(HttpRouteRulesMatchesHeadersType::Exact) => ValueMatch::Exact(value.clone()),
        Some(HttpRouteRulesMatchesHeadersType::RegularExpression) => ValueMatch::regex(value)?,
    };
    Ok(HeaderMatch { name, value })
}

fn query_match(
    i: usize,
    HttpRouteRulesMatchesQueryParams {
        name,
        r#type,
        value,
    }: &HttpRouteRulesMatchesQueryParams,
) -> Result<QueryMatch, InvalidMatchSpec> {
    if name.is_empty() {
        return Err(InvalidMatchSpec::EmptyQueryName(i));
    }
    let value = match r#type {
        None | Some(HttpRouteRulesMatchesQueryParamsType::Exact) => {
            ValueMatch::Exact(value.clone())
        }
        Some(HttpRouteRulesMatchesQueryParamsType::RegularExpression) => {
            ValueMatch::regex(value).map_err(|e| InvalidMatchSpec::Query(i, e))?
        }
    };
    Ok(QueryMatch {
        name: name.clone(),
        value,
    })
}

fn http_method(m: &HttpRouteRulesMatchesMethod) -> Method {
    use HttpRouteRulesMatchesMethod as M;
    match m {
        M::Get => Method::GET,
        M::Head => Method::HEAD,
        M::Post => Method::POST,
        M::Put => Method::PUT,
        M::Delete => Method::DELETE,
        M::Connect => Method::CONNECT,
        M::Options => Method::OPTIONS,
        M::Trace => Method::TRACE,
        M::Patch => Method::PATCH,
    }
}
