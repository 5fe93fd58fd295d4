//! GRPCRoutes, as HTTPRoutes. A gRPC call is an HTTP/2 POST to `/{service}/{method}`, so a
//! GRPCRoute is written into HTTPRoute form and goes through the same translation
//! (`http_route`): attachment, hostnames, header matches, filters, weighted backendRefs,
//! ReferenceGrants, mesh and BackendTLSPolicy. What differs is carried by the route's kind:
//! backends are reached over HTTP/2, ReferenceGrants must name `GRPCRoute`, listeners must allow
//! the kind, and an HTTPRoute and a GRPCRoute may not share a hostname on a listener.
//!
//! Method matches become path matches:
//!
//! ```text
//! Exact  service + method  ─> Exact             /service/method
//! Exact  service           ─> PathPrefix        /service          (segment prefix)
//! Exact  method            ─> RegularExpression /[^/]+/method
//! RegularExpression s, m   ─> RegularExpression /(?:s)/(?:m)      (a missing one is [^/]+)
//! ```
//!
//! so HTTPRoute precedence (exact path, then the longest prefix, then regex) orders them as
//! GRPCRoute asks: more characters of service, then of method. parentRefs, filters and
//! backendRefs have HTTPRoute's JSON shape under other type names and are converted through
//! it. An Exact service or method outside the API's character set (the CRD rejects it; a
//! manifest may not) makes its rule invalid rather than being matched loosely.

use regex::Regex;

use super::api::{
    GrpcRoute, GrpcRouteRules, GrpcRouteRulesMatches, GrpcRouteRulesMatchesHeaders,
    GrpcRouteRulesMatchesHeadersType, GrpcRouteRulesMatchesMethod, GrpcRouteRulesMatchesMethodType,
    GrpcRouteSpec, HttpRoute, HttpRouteRules, HttpRouteRulesMatches, HttpRouteRulesMatchesHeaders,
    HttpRouteRulesMatchesHeadersType, HttpRouteRulesMatchesPath, HttpRouteRulesMatchesPathType,
    HttpRouteSpec, same_shape,
};
use super::http_route::GrpcMatch;
use crate::model::GrpcRank;

/// A GRPCRoute in HTTPRoute form, with each match's precedence (or why it could not be
/// written in that form).
#[derive(Debug)]
pub struct AsHttpRoute {
    pub route: HttpRoute,
    pub matches: Vec<GrpcMatch>,
}

/// Converts a GRPCRoute (see the module docs).
pub fn as_http_route(route: &GrpcRoute) -> AsHttpRoute {
    let GrpcRouteSpec {
        hostnames,
        parent_refs,
        rules,
        use_default_gateways,
    } = &route.spec;
    let mut matches = vec![];
    let rules = rules.as_ref().map(|rules| {
        rules
            .iter()
            .enumerate()
            .map(|(ri, rule)| {
                let (rule, ranks) = rule_as_http(rule);
                matches.extend(
                    ranks
                        .into_iter()
                        .enumerate()
                        .map(|(index, rank)| GrpcMatch {
                            rule: ri,
                            index,
                            rank,
                        }),
                );
                rule
            })
            .collect()
    });
    // The shapes are the same; a parentRef that does not convert cannot be one.
    let parent_refs = parent_refs.as_ref().map(|refs| {
        refs.iter()
            .filter_map(|p| same_shape(p).ok())
            .collect::<Vec<_>>()
    });
    AsHttpRoute {
        route: HttpRoute {
            metadata: route.metadata.clone(),
            spec: HttpRouteSpec {
                hostnames: hostnames.clone(),
                parent_refs,
                rules,
                use_default_gateways: use_default_gateways
                    .as_ref()
                    .and_then(|u| same_shape(u).ok()),
            },
            status: None,
        },
        matches,
    }
}

/// One rule, and each match's precedence or why it cannot be expressed.
fn rule_as_http(rule: &GrpcRouteRules) -> (HttpRouteRules, Vec<Result<GrpcRank, String>>) {
    let GrpcRouteRules {
        backend_refs,
        filters,
        matches,
        name,
        session_persistence,
    } = rule;
    let mut ranks = vec![];
    let matches = matches.as_ref().map(|ms| {
        ms.iter()
            .map(|m| match match_as_http(m) {
                Ok((m, rank)) => {
                    ranks.push(Ok(rank));
                    m
                }
                Err(why) => {
                    ranks.push(Err(why));
                    HttpRouteRulesMatches::default()
                }
            })
            .collect()
    });
    // Filter and backendRef types are HTTPRoute's under other names (GRPCRoute's are a subset:
    // header modifiers, mirrors, extensionRef). One that does not convert is reported by
    // the HTTPRoute translation as an unsupported filter.
    let filters = filters.as_ref().map(|fs| {
        fs.iter()
            .map(|f| same_shape(f).unwrap_or_default())
            .collect::<Vec<_>>()
    });
    let backend_refs = backend_refs.as_ref().map(|bs| {
        bs.iter()
            .map(|b| same_shape(b).unwrap_or_default())
            .collect::<Vec<_>>()
    });
    let rule = HttpRouteRules {
        backend_refs,
        filters,
        matches,
        name: name.clone(),
        retry: None,
        // The same field as HTTPRoute's: sticky calls to one endpoint.
        session_persistence: session_persistence
            .as_ref()
            .map(|s| same_shape(s).unwrap_or_default()),
        timeouts: None,
    };
    (rule, ranks)
}

fn match_as_http(m: &GrpcRouteRulesMatches) -> Result<(HttpRouteRulesMatches, GrpcRank), String> {
    let GrpcRouteRulesMatches { headers, method } = m;
    let (path, rank) = match method {
        Some(m) => method_as_path(m)?,
        None => (None, GrpcRank::default()),
    };
    let headers = headers.as_ref().map(|hs| {
        hs.iter()
            .map(
                |GrpcRouteRulesMatchesHeaders {
                     name,
                     r#type,
                     value,
                 }| HttpRouteRulesMatchesHeaders {
                    name: name.clone(),
                    r#type: r#type.as_ref().map(|t| match t {
                        GrpcRouteRulesMatchesHeadersType::Exact => {
                            HttpRouteRulesMatchesHeadersType::Exact
                        }
                        GrpcRouteRulesMatchesHeadersType::RegularExpression => {
                            HttpRouteRulesMatchesHeadersType::RegularExpression
                        }
                    }),
                    value: value.clone(),
                },
            )
            .collect()
    });
    // No method match: every gRPC call (PathPrefix "/", the HTTPRoute default).
    let path = path.unwrap_or_else(|| path_match(HttpRouteRulesMatchesPathType::PathPrefix, "/"));
    let m = HttpRouteRulesMatches {
        headers,
        method: None,
        path: Some(path),
        query_params: None,
    };
    Ok((m, rank))
}

/// The path match for a method match (`None` when it names neither service nor method), and
/// its precedence: the characters of service and method (of their patterns for
/// RegularExpression).
fn method_as_path(
    m: &GrpcRouteRulesMatchesMethod,
) -> Result<(Option<HttpRouteRulesMatchesPath>, GrpcRank), String> {
    let GrpcRouteRulesMatchesMethod {
        method,
        service,
        r#type,
    } = m;
    let service = service.as_deref().filter(|s| !s.is_empty());
    let method = method.as_deref().filter(|s| !s.is_empty());
    let rank = GrpcRank {
        service: service.map_or(0, str::len),
        method: method.map_or(0, str::len),
    };
    use HttpRouteRulesMatchesPathType as P;
    let path = match r#type {
        None | Some(GrpcRouteRulesMatchesMethodType::Exact) => {
            if let Some(s) = service
                && !valid_service(s)
            {
                return Err(format!("service {s:?} is not a valid gRPC service name"));
            }
            if let Some(m) = method
                && !valid_ident(m)
            {
                return Err(format!("method {m:?} is not a valid gRPC method name"));
            }
            match (service, method) {
                (Some(s), Some(m)) => Some(path_match(P::Exact, &format!("/{s}/{m}"))),
                (Some(s), None) => Some(path_match(P::PathPrefix, &format!("/{s}"))),
                (None, Some(m)) => Some(path_match(
                    P::RegularExpression,
                    &format!("/[^/]+/{}", regex::escape(m)),
                )),
                (None, None) => None,
            }
        }
        Some(GrpcRouteRulesMatchesMethodType::RegularExpression) => {
            for (what, re) in [("service", service), ("method", method)] {
                if let Some(re) = re {
                    Regex::new(re).map_err(|e| {
                        format!("{what} {re:?} is not a valid regular expression: {e}")
                    })?;
                }
            }
            match (service, method) {
                (None, None) => None,
                (s, m) => Some(path_match(
                    P::RegularExpression,
                    &format!("/(?:{})/(?:{})", s.unwrap_or("[^/]+"), m.unwrap_or("[^/]+")),
                )),
            }
        }
    };
    Ok((path, rank))
}

fn path_match(t: HttpRouteRulesMatchesPathType, value: &str) -> HttpRouteRulesMatchesPath {
    HttpRouteRulesMatchesPath {
        r#type: Some(t),
        value: Some(value.to_string()),
    }
}

/// `^(?i)\.?[a-z_][a-z_0-9]*(\.[a-z_][a-z_0-9]*)*$`, as the API validates an Exact service.
fn valid_service(s: &str) -> bool {
    let s = s.strip_prefix('.').unwrap_or(s);
    s.split('.').all(valid_ident)
}

/// `^[A-Za-z_][A-Za-z_0-9]*$`: an Exact method as the API validates it, and each dotted part
/// of a service.
fn valid_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests;
