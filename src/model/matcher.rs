//! Request matching for HTTPRoute `matches` and its precedence.
//!
//! Precedence across all rules of all Routes attached to a listener (Gateway API
//! `HTTPRouteRule`): an Exact path, then the longest Prefix, then a method match, then the most
//! header matches, then the most query matches. RegularExpression precedence is
//! implementation-specific: pier ranks it between Exact and Prefix, longer pattern first.
//! [`MatchRank`] derives `Ord` with its fields in exactly that order.
//!
//! A GRPCRoute match (translated to a path match) ranks by its own rule instead: more
//! characters of service, then of method, then more header matches ([`GrpcRank`]). An
//! HTTPRoute and a GRPCRoute never share a hostname on a listener, so the two kinds of rank
//! are not compared in practice.

use http::{HeaderMap, HeaderName, Method};
use regex::Regex;
use serde::Serialize;

/// The parts of a request that matching reads.
#[derive(Clone, Copy, Debug)]
pub struct RequestParts<'a> {
    pub method: &'a Method,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub headers: &'a HeaderMap,
}

#[derive(Clone, Debug, Serialize)]
pub struct RequestMatch {
    pub path: PathMatch,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "ser_method")]
    pub method: Option<Method>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<HeaderMatch>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub query: Vec<QueryMatch>,
    /// Set for a GRPCRoute match: its precedence replaces the path's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc: Option<GrpcRank>,
}

/// GRPCRoute precedence: characters in the matching service, then in the method.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct GrpcRank {
    pub service: usize,
    pub method: usize,
}

#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", content = "value")]
pub enum PathMatch {
    Exact(String),
    /// Stored without a trailing `/`; `/` itself is stored as the empty string.
    Prefix(String),
    RegularExpression(#[serde(serialize_with = "ser_regex")] Regex),
}

#[derive(Clone, Debug, Serialize)]
pub struct HeaderMatch {
    #[serde(serialize_with = "ser_header_name")]
    pub name: HeaderName,
    pub value: ValueMatch,
}

#[derive(Clone, Debug, Serialize)]
pub struct QueryMatch {
    pub name: String,
    pub value: ValueMatch,
}

#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", content = "value")]
pub enum ValueMatch {
    Exact(String),
    RegularExpression(#[serde(serialize_with = "ser_regex")] Regex),
}

/// Path precedence: variants in increasing order of priority.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathRank {
    Prefix(usize),
    RegularExpression(usize),
    Exact,
    Grpc(GrpcRank),
}

/// Precedence of a match; greater wins. Field order is the spec's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MatchRank {
    pub path: PathRank,
    pub method: bool,
    pub headers: usize,
    pub query: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum InvalidMatch {
    #[error("path must start with '/'")]
    PathNotAbsolute,
    #[error("invalid regular expression: {0}")]
    Regex(#[from] regex::Error),
    #[error("invalid header name: {0}")]
    HeaderName(#[from] http::header::InvalidHeaderName),
    #[error("invalid method: {0}")]
    Method(#[from] http::method::InvalidMethod),
}

// === impl RequestMatch ===

impl Default for RequestMatch {
    /// A rule without matches matches every request: PathPrefix `/`.
    fn default() -> Self {
        Self {
            path: PathMatch::Prefix(String::new()),
            method: None,
            headers: vec![],
            query: vec![],
            grpc: None,
        }
    }
}

impl RequestMatch {
    pub fn rank(&self) -> MatchRank {
        MatchRank {
            path: self.grpc.map_or_else(|| self.path.rank(), PathRank::Grpc),
            method: self.method.is_some(),
            headers: self.headers.len(),
            query: self.query.len(),
        }
    }

    pub fn matches(&self, req: &RequestParts<'_>) -> bool {
        if let Some(m) = &self.method
            && m != req.method
        {
            return false;
        }
        if !self.path.matches(req.path) {
            return false;
        }
        if !self.headers.iter().all(|h| h.matches(req.headers)) {
            return false;
        }
        if self.query.is_empty() {
            return true;
        }
        let Some(q) = req.query else { return false };
        self.query.iter().all(|m| m.matches(q))
    }
}

// === impl PathMatch ===

impl PathMatch {
    pub fn exact(p: &str) -> Result<Self, InvalidMatch> {
        if !p.starts_with('/') {
            return Err(InvalidMatch::PathNotAbsolute);
        }
        Ok(Self::Exact(p.to_string()))
    }

    /// PathPrefix matches whole path segments; a trailing `/` in the prefix is ignored.
    pub fn prefix(p: &str) -> Result<Self, InvalidMatch> {
        if !p.starts_with('/') {
            return Err(InvalidMatch::PathNotAbsolute);
        }
        Ok(Self::Prefix(p.trim_end_matches('/').to_string()))
    }

    /// Regular expressions match the whole path.
    pub fn regex(p: &str) -> Result<Self, InvalidMatch> {
        Ok(Self::RegularExpression(anchored(p)?))
    }

    pub fn rank(&self) -> PathRank {
        match self {
            Self::Exact(_) => PathRank::Exact,
            // "/" is stored as "" but counts as one character.
            Self::Prefix(p) => PathRank::Prefix(p.len().max(1)),
            Self::RegularExpression(r) => PathRank::RegularExpression(r.as_str().len()),
        }
    }

    pub fn matches(&self, path: &str) -> bool {
        match self {
            Self::Exact(p) => p == path,
            Self::Prefix(p) => prefix_matches(p, path),
            Self::RegularExpression(r) => r.is_match(path),
        }
    }
}

/// `prefix` has no trailing `/`. `/abc` matches `/abc`, `/abc/` and `/abc/def`, not `/abcd`.
pub fn prefix_matches(prefix: &str, path: &str) -> bool {
    path.starts_with(prefix) && matches!(path.as_bytes().get(prefix.len()), None | Some(b'/'))
}

fn anchored(p: &str) -> Result<Regex, regex::Error> {
    Regex::new(&format!("^(?:{p})$"))
}

// === impl HeaderMatch, QueryMatch, ValueMatch ===

impl HeaderMatch {
    /// A request with the header repeated matches when any of its values does.
    pub fn matches(&self, headers: &HeaderMap) -> bool {
        headers
            .get_all(&self.name)
            .iter()
            .any(|v| v.to_str().is_ok_and(|v| self.value.matches(v)))
    }
}

impl QueryMatch {
    /// The first occurrence of the parameter decides (percent-decoded).
    pub fn matches(&self, query: &str) -> bool {
        form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == self.name.as_str())
            .is_some_and(|(_, v)| self.value.matches(&v))
    }
}

impl ValueMatch {
    pub fn regex(p: &str) -> Result<Self, InvalidMatch> {
        Ok(Self::RegularExpression(anchored(p)?))
    }

    pub fn matches(&self, v: &str) -> bool {
        match self {
            Self::Exact(e) => e == v,
            Self::RegularExpression(r) => r.is_match(v),
        }
    }
}

fn ser_regex<S: serde::Serializer>(r: &Regex, s: S) -> Result<S::Ok, S::Error> {
    let p = r.as_str();
    s.serialize_str(
        p.strip_prefix("^(?:")
            .and_then(|p| p.strip_suffix(")$"))
            .unwrap_or(p),
    )
}

pub(super) fn ser_header_name<S: serde::Serializer>(
    n: &HeaderName,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(n.as_str())
}

fn ser_method<S: serde::Serializer>(m: &Option<Method>, s: S) -> Result<S::Ok, S::Error> {
    match m {
        Some(m) => s.serialize_str(m.as_str()),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests;
