//! HTTPRoute filters as data with an `apply`: RequestHeaderModifier, ResponseHeaderModifier,
//! RequestRedirect, URLRewrite, RequestMirror and CORS ([`cors`]). Each is checked and parsed
//! at translation time; applying one never fails.

mod cors;

use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use serde::Serialize;

pub use cors::{
    AllowOrigins, Allowed, Cors, CorsCheck, CorsResponse, DEFAULT_MAX_AGE, Expose, InvalidOrigin,
    OriginPattern, Preflight,
};

use super::backend::Backend;

/// The filters of a rule (or of one backendRef). At most one of each kind except mirrors, as
/// the API requires; applied in a fixed order: a CORS preflight (which pier answers), redirect
/// (which ends the request), request headers, URL rewrite, mirrors; on the way back the CORS
/// headers, then the response header modifiers (so a modifier has the last word).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Filters {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_headers: Option<HeaderModifier>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_headers: Option<HeaderModifier>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redirect: Option<Redirect>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<UrlRewrite>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mirrors: Vec<Mirror>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cors: Option<Cors>,
    /// GEP-1494 `ExternalAuth` (rule filters only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ext_auth: Option<std::sync::Arc<super::ext_auth::ExtAuth>>,
}

impl Filters {
    pub fn is_empty(&self) -> bool {
        self.request_headers.is_none()
            && self.response_headers.is_none()
            && self.redirect.is_none()
            && self.rewrite.is_none()
            && self.mirrors.is_empty()
            && self.cors.is_none()
            && self.ext_auth.is_none()
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct HeaderModifier {
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "ser_pairs")]
    pub set: Vec<(HeaderName, HeaderValue)>,
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "ser_pairs")]
    pub add: Vec<(HeaderName, HeaderValue)>,
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "ser_names")]
    pub remove: Vec<HeaderName>,
}

impl HeaderModifier {
    /// `set` replaces every value, `add` appends one, `remove` drops all (in that order).
    pub fn apply(&self, headers: &mut HeaderMap) {
        for (n, v) in &self.set {
            headers.insert(n.clone(), v.clone());
        }
        for (n, v) in &self.add {
            headers.append(n.clone(), v.clone());
        }
        for n in &self.remove {
            headers.remove(n);
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "type", content = "value")]
pub enum PathModifier {
    ReplaceFullPath(String),
    ReplacePrefixMatch(String),
}

impl PathModifier {
    /// Rewrites `path` (no query). `matched_prefix` is the rule's PathPrefix match without its
    /// trailing `/` ("" for `/`); ReplacePrefixMatch without a prefix match behaves like a
    /// full replacement (translation rejects that combination, so this is a fallback).
    pub fn apply(&self, path: &str, matched_prefix: Option<&str>) -> String {
        match self {
            Self::ReplaceFullPath(p) => p.clone(),
            Self::ReplacePrefixMatch(r) => {
                let rest = match matched_prefix {
                    Some(p) if super::matcher::prefix_matches(p, path) => &path[p.len()..],
                    _ => "",
                };
                let r = r.trim_end_matches('/');
                let out = format!("{r}{rest}");
                if out.is_empty() { "/".to_string() } else { out }
            }
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Redirect {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathModifier>,
    #[serde(serialize_with = "ser_status")]
    pub status: StatusCode,
}

/// What a redirect needs to know about the request it answers.
#[derive(Clone, Copy, Debug)]
pub struct RedirectInput<'a> {
    /// `http` or `https`: the listener's protocol.
    pub scheme: &'a str,
    /// Host without port.
    pub host: &'a str,
    pub listener_port: u16,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub matched_prefix: Option<&'a str>,
}

impl Redirect {
    /// The `Location` value. Port rules (HTTPRequestRedirectFilter `port`): an explicit port
    /// wins; else a scheme change implies that scheme's well-known port; else the listener's
    /// port. The port is left out when it is the scheme's default (80 for http, 443 for https).
    pub fn location(&self, req: &RedirectInput<'_>) -> String {
        let scheme = self.scheme.as_deref().unwrap_or(req.scheme);
        let port = match (self.port, self.scheme.as_deref()) {
            (Some(p), _) => p,
            (None, Some(s)) => well_known_port(s).unwrap_or(req.listener_port),
            (None, None) => req.listener_port,
        };
        let host = self.hostname.as_deref().unwrap_or(req.host);
        let path = match &self.path {
            Some(m) => m.apply(req.path, req.matched_prefix),
            None => req.path.to_string(),
        };
        let mut out = String::with_capacity(scheme.len() + host.len() + path.len() + 16);
        out.push_str(scheme);
        out.push_str("://");
        out.push_str(host);
        if well_known_port(scheme) != Some(port) {
            out.push(':');
            out.push_str(&port.to_string());
        }
        out.push_str(&path);
        if let Some(q) = req.query {
            out.push('?');
            out.push_str(q);
        }
        out
    }
}

fn well_known_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct UrlRewrite {
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "ser_opt_value"
    )]
    pub hostname: Option<HeaderValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathModifier>,
}

/// RequestMirror: a copy of the request goes to `backend`; its response is discarded.
/// `numerator / denominator` of requests are mirrored (percent becomes n/100).
#[derive(Clone, Debug, Serialize)]
pub struct Mirror {
    pub backend: Arc<Backend>,
    pub numerator: u32,
    pub denominator: u32,
}

impl Mirror {
    /// `roll` is uniform in `[0, denominator)`.
    pub fn selected(&self, roll: u32) -> bool {
        roll < self.numerator
    }
}

fn ser_pairs<S: serde::Serializer>(
    v: &[(HeaderName, HeaderValue)],
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(v.len()))?;
    for (n, val) in v {
        m.serialize_entry(n.as_str(), &String::from_utf8_lossy(val.as_bytes()))?;
    }
    m.end()
}

fn ser_names<S: serde::Serializer>(v: &[HeaderName], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|n| n.as_str()))
}

fn ser_opt_value<S: serde::Serializer>(v: &Option<HeaderValue>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_str(&String::from_utf8_lossy(v.as_bytes())),
        None => s.serialize_none(),
    }
}

fn ser_status<S: serde::Serializer>(v: &StatusCode, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u16(v.as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input<'a>(path: &'a str, prefix: Option<&'a str>) -> RedirectInput<'a> {
        RedirectInput {
            scheme: "http",
            host: "example.com",
            listener_port: 8080,
            path,
            query: None,
            matched_prefix: prefix,
        }
    }

    fn redirect() -> Redirect {
        Redirect {
            scheme: None,
            hostname: None,
            port: None,
            path: None,
            status: StatusCode::FOUND,
        }
    }

    #[test]
    fn header_modifier_sets_adds_and_removes() {
        let m = HeaderModifier {
            set: vec![(
                HeaderName::from_static("x-set"),
                HeaderValue::from_static("s"),
            )],
            add: vec![(
                HeaderName::from_static("x-add"),
                HeaderValue::from_static("a"),
            )],
            remove: vec![HeaderName::from_static("x-rm")],
        };
        let mut h = HeaderMap::new();
        h.append("x-set", HeaderValue::from_static("old1"));
        h.append("x-set", HeaderValue::from_static("old2"));
        h.insert("x-add", HeaderValue::from_static("existing"));
        h.insert("x-rm", HeaderValue::from_static("gone"));
        m.apply(&mut h);
        assert_eq!(h.get_all("x-set").iter().collect::<Vec<_>>(), vec!["s"]);
        assert_eq!(
            h.get_all("x-add").iter().collect::<Vec<_>>(),
            vec!["existing", "a"]
        );
        assert!(h.get("x-rm").is_none());
    }

    #[test]
    fn replace_prefix_match_keeps_the_rest_of_the_path() {
        let m = PathModifier::ReplacePrefixMatch("/one".into());
        assert_eq!(m.apply("/prefix/one/two", Some("/prefix/one")), "/one/two");
        assert_eq!(m.apply("/prefix/one/", Some("/prefix/one")), "/one/");
        assert_eq!(m.apply("/prefix/one", Some("/prefix/one")), "/one");
    }

    #[test]
    fn an_empty_replace_prefix_match_removes_the_prefix() {
        let m = PathModifier::ReplacePrefixMatch(String::new());
        assert_eq!(m.apply("/foo/bar", Some("/foo")), "/bar");
        assert_eq!(m.apply("/foo", Some("/foo")), "/");
        assert_eq!(m.apply("/foo/", Some("/foo")), "/");
    }

    #[test]
    fn replace_prefix_match_with_root_strips_the_prefix() {
        let m = PathModifier::ReplacePrefixMatch("/".into());
        assert_eq!(
            m.apply("/strip-prefix/three", Some("/strip-prefix")),
            "/three"
        );
        assert_eq!(m.apply("/strip-prefix", Some("/strip-prefix")), "/");
    }

    #[test]
    fn replace_prefix_match_of_root_prefixes_the_path() {
        let m = PathModifier::ReplacePrefixMatch("/new".into());
        assert_eq!(m.apply("/a/b", Some("")), "/new/a/b");
    }

    #[test]
    fn replace_full_path_drops_the_old_path() {
        assert_eq!(
            PathModifier::ReplaceFullPath("/full".into()).apply("/a/b", Some("/a")),
            "/full"
        );
    }

    #[test]
    fn redirect_without_scheme_uses_listener_port() {
        let r = Redirect {
            hostname: Some("other.example".into()),
            ..redirect()
        };
        assert_eq!(
            r.location(&input("/p", None)),
            "http://other.example:8080/p"
        );
    }

    #[test]
    fn redirect_scheme_change_implies_well_known_port_and_omits_it() {
        let r = Redirect {
            scheme: Some("https".into()),
            ..redirect()
        };
        assert_eq!(r.location(&input("/p", None)), "https://example.com/p");
    }

    #[test]
    fn redirect_explicit_port_is_kept_unless_default_for_scheme() {
        let r = Redirect {
            port: Some(8443),
            scheme: Some("https".into()),
            ..redirect()
        };
        assert_eq!(r.location(&input("/p", None)), "https://example.com:8443/p");
        let r = Redirect {
            port: Some(80),
            ..redirect()
        };
        assert_eq!(r.location(&input("/p", None)), "http://example.com/p");
    }

    #[test]
    fn redirect_keeps_query_and_rewrites_prefix() {
        let r = Redirect {
            path: Some(PathModifier::ReplacePrefixMatch("/new".into())),
            ..redirect()
        };
        let mut i = input("/old/x", Some("/old"));
        i.query = Some("a=1");
        assert_eq!(r.location(&i), "http://example.com:8080/new/x?a=1");
    }

    #[test]
    fn mirror_fraction_selects_numerator_of_denominator() {
        let hits = (0..100)
            .filter(|r| {
                (Mirror {
                    backend: Arc::new(Backend::test("m")),
                    numerator: 25,
                    denominator: 100,
                })
                .selected(*r)
            })
            .count();
        assert_eq!(hits, 25);
    }
}
