//! A rule's `sessionPersistence` (GEP-1619) as the data plane runs it: read the same way from
//! an HTTPRoute or GRPCRoute rule and from an XBackendTrafficPolicy (v1.6's fields; v1.7's
//! shape is folded into them first, `super::session_shape`).

use super::api::duration as api_duration;
use super::api::{
    HttpRouteRulesSessionPersistence, HttpRouteRulesSessionPersistenceCookieConfigLifetimeType,
    HttpRouteRulesSessionPersistenceType,
};
use crate::model::ObjectRef;
use crate::model::session::{Carrier, SessionPolicy};

/// Why a rule's `sessionPersistence` cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InvalidSession {
    #[error("{0}: {1:?} is not a Gateway API duration (like 10s, 500ms, 1h30m)")]
    Timeout(&'static str, String),
    #[error("sessionName {0:?} is not a valid {1} name")]
    Name(String, &'static str),
    #[error("cookieConfig.lifetimeType Permanent needs absoluteTimeout (the cookie's Max-Age)")]
    PermanentWithoutTimeout,
}

/// GEP-1619. Type defaults to Cookie, lifetime to Session. Without `sessionName` the name is
/// `pier-session-` and 8 hex digits of a hash of the route and rule, so two rules on one host
/// do not take each other's sessions.
pub fn rule_session(
    HttpRouteRulesSessionPersistence {
        absolute_timeout,
        cookie_config,
        idle_timeout,
        session_name,
        r#type,
    }: &HttpRouteRulesSessionPersistence,
    route: &ObjectRef,
    index: usize,
) -> Result<SessionPolicy, InvalidSession> {
    let timeout = |field, v: &Option<String>| match v {
        None => Ok(None),
        Some(s) => api_duration(s)
            .filter(|d| !d.is_zero())
            .map(Some)
            .ok_or_else(|| InvalidSession::Timeout(field, s.clone())),
    };
    let absolute = timeout("absoluteTimeout", absolute_timeout)?;
    let idle = timeout("idleTimeout", idle_timeout)?;
    let carrier = match r#type {
        Some(HttpRouteRulesSessionPersistenceType::Header) => Carrier::Header,
        None | Some(HttpRouteRulesSessionPersistenceType::Cookie) => {
            let permanent = matches!(
                cookie_config
                    .as_ref()
                    .and_then(|c| c.lifetime_type.as_ref()),
                Some(HttpRouteRulesSessionPersistenceCookieConfigLifetimeType::Permanent)
            );
            if permanent && absolute.is_none() {
                return Err(InvalidSession::PermanentWithoutTimeout);
            }
            Carrier::Cookie { permanent }
        }
    };
    let name = match session_name {
        Some(n) => n.clone(),
        None => {
            let digest = crate::tls::provider::sha256(format!("{route}/{index}").as_bytes());
            let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
            format!("pier-session-{hex}")
        }
    };
    // A token (RFC 9110 §5.6.2) is what both a cookie name and a header name must be.
    let token = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !token {
        let what = match carrier {
            Carrier::Header => "header",
            Carrier::Cookie { .. } => "cookie",
        };
        return Err(InvalidSession::Name(name, what));
    }
    Ok(SessionPolicy {
        carrier,
        name: match carrier {
            // Header names are case-insensitive; http's `HeaderName` is lower case.
            Carrier::Header => name.to_ascii_lowercase(),
            Carrier::Cookie { .. } => name,
        },
        absolute,
        idle,
    })
}
