//! HTTPRoute filters -> [`Filters`]. Written once against the rule-level generated types;
//! backendRef-level filters are converted to them first (`api::backend_filter_as_rule_filter`).

use std::sync::Arc;

use http::{HeaderName, HeaderValue, Method, StatusCode};

use super::{BackendRefError, BackendRefSpec};
use crate::model::ext_auth::{
    AllowStatus, BodyToExtAuth, DEFAULT_TIMEOUT, ExtAuth, ExtAuthProtocol, HeaderSelection,
    OverLimit,
};
use crate::model::filter::{
    AllowOrigins, Allowed, DEFAULT_MAX_AGE, Expose, InvalidOrigin, OriginPattern,
};
use crate::model::host::InvalidHostname;
use crate::model::{
    Backend, Cors, Filters, HeaderModifier, HostnameMatch, Mirror, PathModifier, Redirect,
    UrlRewrite,
};
use crate::translate::api::{
    HttpRouteRulesFilters, HttpRouteRulesFiltersCors, HttpRouteRulesFiltersRequestHeaderModifier,
    HttpRouteRulesFiltersRequestMirror, HttpRouteRulesFiltersRequestMirrorBackendRef,
    HttpRouteRulesFiltersRequestMirrorFraction, HttpRouteRulesFiltersRequestRedirect,
    HttpRouteRulesFiltersRequestRedirectPath, HttpRouteRulesFiltersRequestRedirectPathType,
    HttpRouteRulesFiltersRequestRedirectScheme, HttpRouteRulesFiltersResponseHeaderModifier,
    HttpRouteRulesFiltersType, HttpRouteRulesFiltersUrlRewrite,
    HttpRouteRulesFiltersUrlRewritePath, HttpRouteRulesFiltersUrlRewritePathType,
};
use crate::translate::api::{
    HttpRouteRulesFiltersExternalAuth, HttpRouteRulesFiltersExternalAuthBackendRef,
    HttpRouteRulesFiltersExternalAuthForwardBody, HttpRouteRulesFiltersExternalAuthGrpc,
    HttpRouteRulesFiltersExternalAuthHttp, HttpRouteRulesFiltersExternalAuthProtocol,
};
use crate::translate::ext_auth;

#[derive(Debug, thiserror::Error)]
pub enum InvalidFilter {
    #[error("filter type {0} is not supported")]
    Unsupported(&'static str),
    #[error("{0} filter has no {1} configuration")]
    MissingConfig(&'static str, &'static str),
    #[error("{0} may appear only once")]
    Duplicate(&'static str),
    #[error("RequestRedirect and URLRewrite cannot be used together")]
    RedirectAndRewrite,
    #[error("invalid header name {0:?}")]
    HeaderName(String, #[source] http::header::InvalidHeaderName),
    #[error("invalid value for header {0:?}")]
    HeaderValue(String, #[source] http::header::InvalidHeaderValue),
    #[error("invalid hostname {0:?}")]
    Hostname(String, #[source] InvalidHostname),
    #[error("hostname {0:?} must not be a wildcard")]
    WildcardHostname(String),
    #[error("port must be 1-65535, got {0}")]
    Port(i32),
    #[error("statusCode {0} is not one of 301, 302, 303, 307, 308")]
    StatusCode(i64),
    #[error("path type {0} needs a {0} value")]
    PathValueMissing(&'static str),
    #[error("path {0:?} must start with '/'")]
    PathNotAbsolute(String),
    #[error("ReplacePrefixMatch needs every match of the rule to be a PathPrefix match")]
    PrefixWithoutPathPrefix,
    #[error("RequestMirror percent must be 0-100, got {0}")]
    Percent(i32),
    #[error("RequestMirror fraction needs 0 <= numerator <= denominator and denominator > 0")]
    Fraction,
    #[error("RequestMirror may set percent or fraction, not both")]
    PercentAndFraction,
    #[error("cannot be read as an HTTPRoute filter")]
    Convert(#[source] serde_json::Error),
    #[error("CORS allowOrigins[{0}] {1:?}")]
    CorsOrigin(usize, String, #[source] InvalidOrigin),
    #[error("CORS {0} cannot contain '*' alongside other values")]
    CorsWildcardAlongside(&'static str),
    #[error(
        "CORS allowMethods[{0}] {1:?} is not one of GET, HEAD, POST, PUT, DELETE, CONNECT, \
         OPTIONS, TRACE, PATCH or *"
    )]
    CorsMethod(usize, String),
    #[error("CORS {0}[{1}] {2:?} is not a header name")]
    CorsHeaderName(
        &'static str,
        usize,
        String,
        #[source] http::header::InvalidHeaderName,
    ),
    #[error("CORS maxAge must be at least 1 (seconds), got {0}")]
    CorsMaxAge(i32),
    #[error("ExternalAuth is a rule filter, not a backendRef's")]
    ExternalAuthOnBackend,
    #[error("ExternalAuth {0}")]
    ExternalAuth(String),
    /// The authorizer's backendRef did not resolve (ResolvedRefs says why): the rule fails
    /// closed.
    #[error("ExternalAuth backendRef does not resolve; the rule fails closed")]
    ExternalAuthUnresolved,
}

/// What a filter list needs from its rule and route.
pub struct FilterCtx<'f> {
    /// Every match of the rule is a PathPrefix match (ReplacePrefixMatch needs one).
    pub prefix_only: bool,
    /// Resolves a mirror's backendRef.
    pub resolve: &'f mut dyn FnMut(BackendRefSpec<'_>) -> Result<Arc<Backend>, BackendRefError>,
    /// Mirrors whose backendRef did not resolve, by filter index. They are left out (nothing
    /// is mirrored); the caller reports them in ResolvedRefs.
    /// (filter index, field, why).
    pub unresolved: Vec<(usize, &'static str, BackendRefError)>,
    /// Where the filters are (`HTTPRoute ns/name rules[0]`), for an ExternalAuth's logs;
    /// `None` for a backendRef's filters, where ExternalAuth is not allowed.
    pub rule_at: Option<String>,
}

/// Translates a filter list. The error carries the index of the offending filter.
pub fn filters(
    list: &[HttpRouteRulesFilters],
    ctx: &mut FilterCtx<'_>,
) -> Result<Filters, (usize, InvalidFilter)> {
    let mut out = Filters::default();
    for (i, f) in list.iter().enumerate() {
        filter(f, i, ctx, &mut out).map_err(|e| (i, e))?;
    }
    if out.redirect.is_some() && out.rewrite.is_some() {
        return Err((
            list.len().saturating_sub(1),
            InvalidFilter::RedirectAndRewrite,
        ));
    }
    Ok(out)
}

fn filter(
    HttpRouteRulesFilters {
        cors: cors_filter,
        extension_ref: _,
        external_auth,
        request_header_modifier,
        request_mirror,
        request_redirect,
        response_header_modifier,
        r#type,
        url_rewrite,
    }: &HttpRouteRulesFilters,
    index: usize,
    ctx: &mut FilterCtx<'_>,
    out: &mut Filters,
) -> Result<(), InvalidFilter> {
    use HttpRouteRulesFiltersType as T;
    let name = type_name(r#type);
    let missing = |field| InvalidFilter::MissingConfig(name, field);
    match r#type {
        T::RequestHeaderModifier => {
            once(name, &out.request_headers)?;
            let HttpRouteRulesFiltersRequestHeaderModifier { add, remove, set } =
                request_header_modifier
                    .as_ref()
                    .ok_or_else(|| missing("requestHeaderModifier"))?;
            out.request_headers = Some(header_modifier(
                set.iter().flatten().map(|h| (&h.name, &h.value)),
                add.iter().flatten().map(|h| (&h.name, &h.value)),
                remove.as_deref().unwrap_or_default(),
            )?);
        }
        T::ResponseHeaderModifier => {
            once(name, &out.response_headers)?;
            let HttpRouteRulesFiltersResponseHeaderModifier { add, remove, set } =
                response_header_modifier
                    .as_ref()
                    .ok_or_else(|| missing("responseHeaderModifier"))?;
            out.response_headers = Some(header_modifier(
                set.iter().flatten().map(|h| (&h.name, &h.value)),
                add.iter().flatten().map(|h| (&h.name, &h.value)),
                remove.as_deref().unwrap_or_default(),
            )?);
        }
        T::RequestRedirect => {
            once(name, &out.redirect)?;
            let r = request_redirect
                .as_ref()
                .ok_or_else(|| missing("requestRedirect"))?;
            out.redirect = Some(redirect(r, ctx.prefix_only)?);
        }
        T::UrlRewrite => {
            once(name, &out.rewrite)?;
            let r = url_rewrite.as_ref().ok_or_else(|| missing("urlRewrite"))?;
            out.rewrite = Some(rewrite(r, ctx.prefix_only)?);
        }
        T::RequestMirror => {
            let m = request_mirror
                .as_ref()
                .ok_or_else(|| missing("requestMirror"))?;
            if let Some(m) = mirror(m, index, ctx)? {
                out.mirrors.push(m);
            }
        }
        T::Cors => {
            once(name, &out.cors)?;
            let c = cors_filter.as_ref().ok_or_else(|| missing("cors"))?;
            out.cors = Some(cors(c)?);
        }
        T::ExternalAuth => {
            once(name, &out.ext_auth)?;
            let f = external_auth
                .as_ref()
                .ok_or_else(|| missing("externalAuth"))?;
            out.ext_auth = Some(Arc::new(ext_auth_filter(f, index, ctx)?));
        }
        T::ExtensionRef => return Err(InvalidFilter::Unsupported(name)),
    }
    Ok(())
}

fn type_name(t: &HttpRouteRulesFiltersType) -> &'static str {
    use HttpRouteRulesFiltersType as T;
    match t {
        T::RequestHeaderModifier => "RequestHeaderModifier",
        T::ResponseHeaderModifier => "ResponseHeaderModifier",
        T::RequestMirror => "RequestMirror",
        T::RequestRedirect => "RequestRedirect",
        T::UrlRewrite => "URLRewrite",
        T::ExtensionRef => "ExtensionRef",
        T::Cors => "CORS",
        T::ExternalAuth => "ExternalAuth",
    }
}

fn once<T>(name: &'static str, slot: &Option<T>) -> Result<(), InvalidFilter> {
    match slot {
        Some(_) => Err(InvalidFilter::Duplicate(name)),
        None => Ok(()),
    }
}

fn header_modifier<'a>(
    set: impl Iterator<Item = (&'a String, &'a String)>,
    add: impl Iterator<Item = (&'a String, &'a String)>,
    remove: &[String],
) -> Result<HeaderModifier, InvalidFilter> {
    fn pair(n: &str, v: &str) -> Result<(HeaderName, HeaderValue), InvalidFilter> {
        Ok((header_name(n)?, header_value(n, v)?))
    }
    Ok(HeaderModifier {
        set: set.map(|(n, v)| pair(n, v)).collect::<Result<_, _>>()?,
        add: add.map(|(n, v)| pair(n, v)).collect::<Result<_, _>>()?,
        remove: remove
            .iter()
            .map(|n| header_name(n))
            .collect::<Result<_, _>>()?,
    })
}

fn header_name(n: &str) -> Result<HeaderName, InvalidFilter> {
    HeaderName::from_bytes(n.as_bytes()).map_err(|e| InvalidFilter::HeaderName(n.to_string(), e))
}

fn header_value(n: &str, v: &str) -> Result<HeaderValue, InvalidFilter> {
    HeaderValue::from_str(v).map_err(|e| InvalidFilter::HeaderValue(n.to_string(), e))
}

/// A precise (non-wildcard) hostname, lower-cased.
fn precise_hostname(h: &str) -> Result<String, InvalidFilter> {
    match HostnameMatch::parse(h) {
        Ok(HostnameMatch::Exact(name)) => Ok(name),
        Ok(HostnameMatch::Wildcard(_)) => Err(InvalidFilter::WildcardHostname(h.to_string())),
        Err(e) => Err(InvalidFilter::Hostname(h.to_string(), e)),
    }
}

/// The two generated path-modifier shapes (redirect and rewrite), reduced to one.
#[derive(Clone, Copy)]
enum PathKind {
    Full,
    Prefix,
}

fn path_modifier(
    kind: PathKind,
    full: Option<&String>,
    prefix: Option<&String>,
    prefix_only: bool,
) -> Result<PathModifier, InvalidFilter> {
    let (value, name) = match kind {
        PathKind::Full => (full, "ReplaceFullPath"),
        PathKind::Prefix => (prefix, "ReplacePrefixMatch"),
    };
    let value = value.ok_or(InvalidFilter::PathValueMissing(name))?;
    // An empty ReplacePrefixMatch removes the prefix (the API reference: `/foo/bar` with
    // prefix `/foo` becomes `/bar`, `/foo` becomes `/`).
    let empty_prefix = matches!(kind, PathKind::Prefix) && value.is_empty();
    if !value.starts_with('/') && !empty_prefix {
        return Err(InvalidFilter::PathNotAbsolute(value.clone()));
    }
    Ok(match kind {
        PathKind::Full => PathModifier::ReplaceFullPath(value.clone()),
        PathKind::Prefix if !prefix_only => return Err(InvalidFilter::PrefixWithoutPathPrefix),
        PathKind::Prefix => PathModifier::ReplacePrefixMatch(value.clone()),
    })
}

fn redirect(
    HttpRouteRulesFiltersRequestRedirect {
        hostname,
        path,
        port,
        scheme,
        status_code,
    }: &HttpRouteRulesFiltersRequestRedirect,
    prefix_only: bool,
) -> Result<Redirect, InvalidFilter> {
    let status = status_code.unwrap_or(302);
    if ![301, 302, 303, 307, 308].contains(&status) {
        return Err(InvalidFilter::StatusCode(status));
    }
    let status = u16::try_from(status)
        .ok()
        .and_then(|s| StatusCode::from_u16(s).ok())
        .ok_or(InvalidFilter::StatusCode(status))?;
    let port = match port {
        None => None,
        Some(p) => Some(
            u16::try_from(*p)
                .ok()
                .filter(|p| *p != 0)
                .ok_or(InvalidFilter::Port(*p))?,
        ),
    };
    let path = match path {
        None => None,
        Some(HttpRouteRulesFiltersRequestRedirectPath {
            replace_full_path,
            replace_prefix_match,
            r#type,
        }) => {
            let kind = match r#type {
                HttpRouteRulesFiltersRequestRedirectPathType::ReplaceFullPath => PathKind::Full,
                HttpRouteRulesFiltersRequestRedirectPathType::ReplacePrefixMatch => {
                    PathKind::Prefix
                }
            };
            Some(path_modifier(
                kind,
                replace_full_path.as_ref(),
                replace_prefix_match.as_ref(),
                prefix_only,
            )?)
        }
    };
    Ok(Redirect {
        scheme: scheme.as_ref().map(|s| {
            match s {
                HttpRouteRulesFiltersRequestRedirectScheme::Http => "http",
                HttpRouteRulesFiltersRequestRedirectScheme::Https => "https",
            }
            .to_string()
        }),
        hostname: hostname.as_deref().map(precise_hostname).transpose()?,
        port,
        path,
        status,
    })
}

fn rewrite(
    HttpRouteRulesFiltersUrlRewrite { hostname, path }: &HttpRouteRulesFiltersUrlRewrite,
    prefix_only: bool,
) -> Result<UrlRewrite, InvalidFilter> {
    let hostname = match hostname.as_deref() {
        None => None,
        Some(h) => {
            let h = precise_hostname(h)?;
            Some(header_value("host", &h)?)
        }
    };
    let path = match path {
        None => None,
        Some(HttpRouteRulesFiltersUrlRewritePath {
            replace_full_path,
            replace_prefix_match,
            r#type,
        }) => {
            let kind = match r#type {
                HttpRouteRulesFiltersUrlRewritePathType::ReplaceFullPath => PathKind::Full,
                HttpRouteRulesFiltersUrlRewritePathType::ReplacePrefixMatch => PathKind::Prefix,
            };
            Some(path_modifier(
                kind,
                replace_full_path.as_ref(),
                replace_prefix_match.as_ref(),
                prefix_only,
            )?)
        }
    };
    Ok(UrlRewrite { hostname, path })
}

/// RequestMirror: `percent` p mirrors p/100, `fraction` n/d (d defaults to 100); neither
/// mirrors everything. An unresolved backendRef leaves the mirror out (reported by the caller).
fn mirror(
    HttpRouteRulesFiltersRequestMirror {
        backend_ref,
        fraction,
        percent,
    }: &HttpRouteRulesFiltersRequestMirror,
    index: usize,
    ctx: &mut FilterCtx<'_>,
) -> Result<Option<Mirror>, InvalidFilter> {
    let (numerator, denominator) = match (percent, fraction) {
        (Some(_), Some(_)) => return Err(InvalidFilter::PercentAndFraction),
        (Some(p), None) => match u32::try_from(*p) {
            Ok(p) if p <= 100 => (p, 100),
            _ => return Err(InvalidFilter::Percent(*p)),
        },
        (
            None,
            Some(HttpRouteRulesFiltersRequestMirrorFraction {
                denominator,
                numerator,
            }),
        ) => {
            let n = u32::try_from(*numerator).map_err(|_| InvalidFilter::Fraction)?;
            let d =
                u32::try_from(denominator.unwrap_or(100)).map_err(|_| InvalidFilter::Fraction)?;
            if d == 0 || n > d {
                return Err(InvalidFilter::Fraction);
            }
            (n, d)
        }
        (None, None) => (100, 100),
    };
    let HttpRouteRulesFiltersRequestMirrorBackendRef {
        group,
        kind,
        name,
        namespace,
        port,
    } = backend_ref;
    let spec = BackendRefSpec {
        group: group.as_deref(),
        kind: kind.as_deref(),
        name,
        namespace: namespace.as_deref(),
        port: *port,
        h2: false,
    };
    match (ctx.resolve)(spec) {
        Ok(backend) => Ok(Some(Mirror {
            backend,
            numerator,
            denominator,
        })),
        Err(e) => {
            ctx.unresolved.push((index, "requestMirror", e));
            Ok(None)
        }
    }
}

/// GEP-1494 `ExternalAuth`: the authorizer's backendRef resolved like the rule's (HTTP/2 for
/// GRPC), header lists parsed. It fails closed (the GEP's MUST): no `failOpen`; Envoy
/// Gateway's default timeout (10s); `forwardBody.maxSize` truncates what the authorizer
/// gets (the field's own words), the backend getting the whole body.
pub(crate) fn ext_auth_filter(
    HttpRouteRulesFiltersExternalAuth {
        backend_ref,
        forward_body,
        grpc,
        http,
        protocol,
    }: &HttpRouteRulesFiltersExternalAuth,
    index: usize,
    ctx: &mut FilterCtx<'_>,
) -> Result<ExtAuth, InvalidFilter> {
    let Some(at) = ctx.rule_at.clone() else {
        return Err(InvalidFilter::ExternalAuthOnBackend);
    };
    let bad = InvalidFilter::ExternalAuth;
    let grpc_mode = match protocol {
        HttpRouteRulesFiltersExternalAuthProtocol::Grpc => {
            if http.is_some() {
                return Err(bad("protocol GRPC cannot have http settings".into()));
            }
            true
        }
        HttpRouteRulesFiltersExternalAuthProtocol::Http => {
            if grpc.is_some() {
                return Err(bad("protocol HTTP cannot have grpc settings".into()));
            }
            false
        }
    };
    let HttpRouteRulesFiltersExternalAuthBackendRef {
        group,
        kind,
        name,
        namespace,
        port,
    } = backend_ref;
    let spec = BackendRefSpec {
        group: group.as_deref(),
        kind: kind.as_deref(),
        name,
        namespace: namespace.as_deref(),
        port: *port,
        h2: grpc_mode,
    };
    let backend = match (ctx.resolve)(spec) {
        Ok(b) => b,
        Err(e) => {
            ctx.unresolved.push((index, "externalAuth.backendRef", e));
            return Err(InvalidFilter::ExternalAuthUnresolved);
        }
    };
    let names = |field: &str, list: &Option<Vec<String>>| {
        ext_auth::names(list.as_deref().unwrap_or_default())
            .map_err(|h| bad(format!("{field}: {h:?} is not a header name")))
    };
    let (protocol, headers_to_ext_auth) = if grpc_mode {
        let allowed = match grpc {
            Some(HttpRouteRulesFiltersExternalAuthGrpc { allowed_headers }) => {
                names("grpc.allowedHeaders", allowed_headers)?
            }
            None => vec![],
        };
        // Empty: every header (the GEP's words).
        let selection = if allowed.is_empty() {
            HeaderSelection::All
        } else {
            HeaderSelection::Only(allowed)
        };
        (ExtAuthProtocol::Grpc, selection)
    } else {
        let none = HttpRouteRulesFiltersExternalAuthHttp::default();
        let HttpRouteRulesFiltersExternalAuthHttp {
            allowed_headers,
            allowed_response_headers,
            path,
        } = http.as_ref().unwrap_or(&none);
        let to_backend = names("http.allowedResponseHeaders", allowed_response_headers)?;
        let protocol = ExtAuthProtocol::Http {
            allow: AllowStatus::Only200,
            path_prefix: ext_auth::path_prefix(path.as_deref())
                .map_err(|w| bad(format!("http.path: {w}")))?,
            // Empty: every header of the answer but Host (the GEP's words).
            headers_to_backend: if to_backend.is_empty() {
                HeaderSelection::All
            } else {
                HeaderSelection::Only(to_backend)
            },
        };
        let extra = names("http.allowedHeaders", allowed_headers)?;
        (protocol, HeaderSelection::Only(extra))
    };
    let body = match forward_body {
        Some(HttpRouteRulesFiltersExternalAuthForwardBody { max_size: Some(n) }) if *n < 0 => {
            return Err(bad(format!("forwardBody.maxSize {n} is negative")));
        }
        Some(HttpRouteRulesFiltersExternalAuthForwardBody {
            max_size: Some(n @ 1..),
        }) => Some(BodyToExtAuth {
            max_bytes: usize::try_from(*n)
                .map_err(|_| bad(format!("forwardBody.maxSize {n} is too large")))?,
            over: OverLimit::Truncate,
        }),
        _ => None,
    };
    let authority = format!(
        "{}.{}.svc",
        backend.id.service.name, backend.id.service.namespace
    );
    Ok(ExtAuth {
        source: format!("{at}.filters[{index}]"),
        backend,
        authority,
        protocol,
        headers_to_ext_auth,
        body,
        timeout: DEFAULT_TIMEOUT,
        fail_open: false,
    })
}

/// CORS: every value checked as the CRD would (its patterns and CEL rules are not applied to
/// manifests read from files), then parsed into response header values.
fn cors(
    HttpRouteRulesFiltersCors {
        allow_credentials,
        allow_headers,
        allow_methods,
        allow_origins,
        expose_headers,
        max_age,
    }: &HttpRouteRulesFiltersCors,
) -> Result<Cors, InvalidFilter> {
    let origins = allow_origins.as_deref().unwrap_or_default();
    let allow_origins = if wildcard_only(origins, "allowOrigins")? {
        AllowOrigins::Any
    } else {
        AllowOrigins::List(
            origins
                .iter()
                .enumerate()
                .map(|(i, o)| {
                    OriginPattern::parse(o).map_err(|e| InvalidFilter::CorsOrigin(i, o.clone(), e))
                })
                .collect::<Result<_, _>>()?,
        )
    };
    let methods = allow_methods.as_deref().unwrap_or_default();
    let allow_methods = if wildcard_only(methods, "allowMethods")? {
        Allowed::Any
    } else {
        let parsed = methods
            .iter()
            .enumerate()
            .map(|(i, m)| cors_method(m).ok_or_else(|| InvalidFilter::CorsMethod(i, m.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        Allowed::methods(&parsed)
    };
    let headers = allow_headers.as_deref().unwrap_or_default();
    let allow_headers = if wildcard_only(headers, "allowHeaders")? {
        Allowed::Any
    } else {
        Allowed::headers(&cors_header_names(
            "allowHeaders",
            headers.iter().enumerate(),
        )?)
    };
    let expose = expose_headers.as_deref().unwrap_or_default();
    let wildcard = expose.iter().any(|h| h == "*");
    let named = expose.iter().enumerate().filter(|(_, h)| *h != "*");
    let expose_headers = Expose::new(cors_header_names("exposeHeaders", named)?, wildcard);
    let max_age = match max_age {
        None => DEFAULT_MAX_AGE,
        Some(n) => u32::try_from(*n)
            .ok()
            .filter(|n| *n >= 1)
            .ok_or(InvalidFilter::CorsMaxAge(*n))?,
    };
    Ok(Cors {
        allow_origins,
        allow_methods,
        allow_headers,
        expose_headers,
        allow_credentials: allow_credentials.unwrap_or(false),
        max_age: HeaderValue::from(max_age),
    })
}

/// Whether `list` is exactly `["*"]`; `*` among other values is invalid (the CRD's CEL rule).
fn wildcard_only(list: &[String], field: &'static str) -> Result<bool, InvalidFilter> {
    match list {
        [only] if only == "*" => Ok(true),
        _ if list.iter().any(|v| v == "*") => Err(InvalidFilter::CorsWildcardAlongside(field)),
        _ => Ok(false),
    }
}

/// The API's HTTPMethod enum (method names are case-sensitive).
fn cors_method(m: &str) -> Option<Method> {
    Some(match m {
        "GET" => Method::GET,
        "HEAD" => Method::HEAD,
        "POST" => Method::POST,
        "PUT" => Method::PUT,
        "DELETE" => Method::DELETE,
        "CONNECT" => Method::CONNECT,
        "OPTIONS" => Method::OPTIONS,
        "TRACE" => Method::TRACE,
        "PATCH" => Method::PATCH,
        _ => return None,
    })
}

fn cors_header_names<'a>(
    field: &'static str,
    names: impl Iterator<Item = (usize, &'a String)>,
) -> Result<Vec<HeaderName>, InvalidFilter> {
    names
        .map(|(i, n)| {
            HeaderName::from_bytes(n.as_bytes())
                .map_err(|e| InvalidFilter::CorsHeaderName(field, i, n.clone(), e))
        })
        .collect()
}
