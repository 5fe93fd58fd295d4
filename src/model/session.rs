//! Session persistence (GEP-1619, HTTPRoute `sessionPersistence`): requests that carry a
//! session token go to the endpoint that served the session's first request, as long as that
//! endpoint is still one of the rule's and is available, and the session has not timed out.
//!
//! The token is stateless, so it survives reloads, endpoint churn of *other* endpoints and
//! several pier replicas behind one load balancer: `<endpoint>~<created>~<last used>`, the
//! endpoint as hex (address bytes, then port), the times in Unix seconds. It is not a secret
//! and not signed: a client that edits it can only pick another endpoint of the same rule, or
//! stretch its own session. A token that names no endpoint of the rule, is malformed, or has
//! timed out starts a new session.
//!
//! Cookie type: `Set-Cookie: <name>=<token>; Path=/; HttpOnly` (`Secure` on HTTPS,
//! `Max-Age=<absoluteTimeout>` for `lifetimeType: Permanent`). Header type: the response
//! carries `<name>: <token>` and the client sends it back. With an idle timeout the token is
//! re-issued (a new "last used") on every request that reaches a new second.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use http::HeaderMap;
use http::header::{COOKIE, HeaderName, HeaderValue, SET_COOKIE};
use serde::Serialize;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SessionPolicy {
    pub carrier: Carrier,
    /// Cookie or header name.
    pub name: String,
    #[serde(
        skip_serializing_if = "Option::is_none",
        with = "super::backend::opt_duration"
    )]
    pub absolute: Option<Duration>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        with = "super::backend::opt_duration"
    )]
    pub idle: Option<Duration>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Carrier {
    /// `permanent`: the cookie carries `Max-Age` (the absolute timeout).
    Cookie {
        permanent: bool,
    },
    Header,
}

/// A decoded token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Session {
    pub endpoint: SocketAddr,
    pub created: u64,
    pub last: u64,
}

/// The value of the request's cookie `name` (the first, in any `Cookie` header).
pub fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    (headers.get_all(COOKIE).iter())
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (k, v) = pair.trim().split_once('=')?;
            (k == name).then_some(v)
        })
}

impl SessionPolicy {
    /// The session the request carries, if its token parses and has not timed out at `now`
    /// (Unix seconds). Whether its endpoint is still usable is the caller's to check.
    pub fn find(&self, headers: &HeaderMap, now: u64) -> Option<Session> {
        let token = match self.carrier {
            Carrier::Header => headers.get(self.name.as_str())?.to_str().ok()?.trim(),
            Carrier::Cookie { .. } => cookie(headers, &self.name)?,
        };
        Session::decode(token).filter(|s| self.live(s, now))
    }

    fn live(&self, s: &Session, now: u64) -> bool {
        let within = |start: u64, limit: Option<Duration>| {
            limit.is_none_or(|d| now.saturating_sub(start) < d.as_secs().max(1))
        };
        s.created <= now.saturating_add(60)
            && within(s.created, self.absolute)
            && within(s.last, self.idle)
    }

    /// The response header that hands out (or refreshes) `session`: `None` when the client's
    /// token is current already (`carried`: the session the request came with).
    pub fn issue(
        &self,
        session: Session,
        carried: Option<Session>,
        https: bool,
    ) -> Option<(HeaderName, HeaderValue)> {
        if carried == Some(session) {
            return None;
        }
        let token = session.encode();
        match self.carrier {
            Carrier::Header => {
                let name = HeaderName::from_bytes(self.name.as_bytes()).ok()?;
                Some((name, HeaderValue::from_str(&token).ok()?))
            }
            Carrier::Cookie { permanent } => {
                let mut v = format!("{}={token}; Path=/; HttpOnly", self.name);
                if https {
                    v.push_str("; Secure");
                }
                if let (true, Some(a)) = (permanent, self.absolute) {
                    let left = a.as_secs().saturating_sub(session.last - session.created);
                    v.push_str(&format!("; Max-Age={left}"));
                }
                Some((SET_COOKIE, HeaderValue::from_str(&v).ok()?))
            }
        }
    }

    /// The session to hand out for a request answered by `endpoint` at `now`: the carried one
    /// (its last use moved to `now` when an idle timeout needs it), or a new one.
    pub fn continue_or_start(
        &self,
        carried: Option<Session>,
        endpoint: SocketAddr,
        now: u64,
    ) -> Session {
        match carried {
            Some(s) if s.endpoint == endpoint => Session {
                last: if self.idle.is_some() {
                    now.max(s.last)
                } else {
                    s.last
                },
                ..s
            },
            _ => Session {
                endpoint,
                created: now,
                last: now,
            },
        }
    }
}

impl Session {
    pub fn encode(&self) -> String {
        let mut hex = String::with_capacity(40);
        let octets: Vec<u8> = match self.endpoint.ip() {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        };
        for b in octets.iter().chain(&self.endpoint.port().to_be_bytes()) {
            hex.push_str(&format!("{b:02x}"));
        }
        format!("{hex}~{}~{}", self.created, self.last)
    }

    pub fn decode(token: &str) -> Option<Self> {
        let mut parts = token.split('~');
        let (addr, created, last) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || addr.len() % 2 != 0 {
            return None;
        }
        let bytes: Vec<u8> = (0..addr.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(addr.get(i..i + 2)?, 16).ok())
            .collect::<Option<_>>()?;
        let (ip, port): (IpAddr, &[u8]) = match bytes.len() {
            6 => (<[u8; 4]>::try_from(&bytes[..4]).ok()?.into(), &bytes[4..]),
            18 => (
                <[u8; 16]>::try_from(&bytes[..16]).ok()?.into(),
                &bytes[16..],
            ),
            _ => return None,
        };
        let port = u16::from_be_bytes([port[0], port[1]]);
        let (created, last) = (created.parse().ok()?, last.parse().ok()?);
        (last >= created).then_some(Self {
            endpoint: SocketAddr::new(ip, port),
            created,
            last,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cookie(name: &str, permanent: bool) -> SessionPolicy {
        SessionPolicy {
            carrier: Carrier::Cookie { permanent },
            name: name.into(),
            absolute: Some(Duration::from_secs(3600)),
            idle: Some(Duration::from_secs(60)),
        }
    }

    fn session(addr: &str, created: u64, last: u64) -> Session {
        Session {
            endpoint: addr.parse().unwrap(),
            created,
            last,
        }
    }

    #[test]
    fn tokens_round_trip_for_v4_and_v6_and_reject_garbage() {
        for s in [
            session("10.1.2.3:8080", 100, 160),
            session("[fd00::1]:443", 5, 5),
        ] {
            assert_eq!(Session::decode(&s.encode()), Some(s));
        }
        assert_eq!(session("10.1.2.3:8080", 1, 2).encode(), "0a0102031f90~1~2");
        for bad in [
            "",
            "zz~1~2",
            "0a010203~1~2",
            "0a0102031f90~2~1",
            "0a0102031f90~1",
            "0a0102031f90~1~2~3",
            "0a0102031f9~1~2",
        ] {
            assert_eq!(Session::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_cookie_is_found_among_others_and_times_out() {
        let p = cookie("sid", false);
        let token = session("10.0.0.1:80", 1000, 1030).encode();
        let mut h = HeaderMap::new();
        h.insert(
            COOKIE,
            HeaderValue::from_str(&format!("a=b; sid={token}; c=d")).unwrap(),
        );
        assert_eq!(p.find(&h, 1050), Some(session("10.0.0.1:80", 1000, 1030)));
        // Idle for 60 s: over.
        assert_eq!(p.find(&h, 1090), None);
        // A cookie named like a prefix of it is not it.
        let mut other = HeaderMap::new();
        other.insert(
            COOKIE,
            HeaderValue::from_str(&format!("sidx={token}")).unwrap(),
        );
        assert_eq!(p.find(&other, 1050), None);
        // The absolute timeout holds however often it is used.
        let busy = session("10.0.0.1:80", 1000, 4590).encode();
        h.insert(
            COOKIE,
            HeaderValue::from_str(&format!("sid={busy}")).unwrap(),
        );
        assert!(p.find(&h, 4595).is_some());
        assert!(p.find(&h, 4601).is_none());
    }

    #[test]
    fn issue_sets_a_cookie_or_header_only_when_the_token_changes() {
        let p = cookie("sid", true);
        let fresh = p.continue_or_start(None, "10.0.0.1:80".parse().unwrap(), 1000);
        let (name, value) = p.issue(fresh, None, true).unwrap();
        assert_eq!(name, SET_COOKIE);
        assert_eq!(
            value,
            "sid=0a0000010050~1000~1000; Path=/; HttpOnly; Secure; Max-Age=3600"
        );
        // The same second, the same token: nothing to send.
        let again = p.continue_or_start(Some(fresh), "10.0.0.1:80".parse().unwrap(), 1000);
        assert_eq!(p.issue(again, Some(fresh), true), None);
        // Later: the last use moves (idle timeout), the cookie is refreshed.
        let later = p.continue_or_start(Some(fresh), "10.0.0.1:80".parse().unwrap(), 1010);
        assert_eq!(later.created, 1000);
        assert_eq!(later.last, 1010);
        assert!(p.issue(later, Some(fresh), false).is_some());
        // Another endpoint (the old one went away): a new session.
        let moved = p.continue_or_start(Some(fresh), "10.0.0.2:80".parse().unwrap(), 1010);
        assert_eq!((moved.created, moved.last), (1010, 1010));

        let h = SessionPolicy {
            carrier: Carrier::Header,
            name: "x-session".into(),
            absolute: None,
            idle: None,
        };
        let (name, value) = h.issue(fresh, None, false).unwrap();
        assert_eq!(name, "x-session");
        let mut req = HeaderMap::new();
        req.insert("x-session", value);
        assert_eq!(h.find(&req, 999_999), Some(fresh));
    }
}
