//! `remoteJWKS {uri, cacheDuration}`: which URIs the fetcher (`source::jwks`) is to follow,
//! and a provider's keys from what it fetched (`Settings::remote_jwks`, an input like a
//! Secret). A provider whose set was never fetched gets an empty set: every token it sees is
//! refused (401, as Envoy Gateway answers), and the policy's ancestors say why
//! ([`REMOTE_JWKS_CONDITION`](super::super::status::REMOTE_JWKS_CONDITION)).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use super::super::api::{self, SecurityPolicy};
use super::super::resources::Resources;
use super::super::status::{PolicyCondition, PolicyConditionReason, PolicyConditionType};
use crate::auth::jwks::Jwks;
use crate::auth::remote::{
    DEFAULT_CACHE_DURATION, DocKind, Refetch, RemoteKeys, RemoteSets, Want, Wanted,
};

/// The shortest `cacheDuration` pier takes: a set fetched more often is a load on the
/// provider for nothing.
pub const MIN_CACHE_DURATION: Duration = Duration::from_secs(1);

/// What one provider's remote set came to, for the policy's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteNote {
    /// `providers[i] (name) uri`.
    pub what: String,
    pub state: FetchState,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchState {
    Fetched,
    /// The latest fetch failed; the keys of an earlier one are in use.
    FailedKept(String),
    /// No fetch has succeeded yet (the latest error, if there was one).
    NoKeys(Option<String>),
}

/// Every valid `remoteJWKS` of every SecurityPolicy, with the shortest `cacheDuration` that
/// names it. Invalid ones are left out (their policy's status says why).
pub fn wanted(resources: &Resources) -> Wanted {
    let mut out = Wanted::new();
    let remotes = resources
        .security_policies
        .values()
        .flat_map(|p: &SecurityPolicy| p.spec.jwt.iter())
        .flat_map(|j| &j.providers)
        .filter_map(|p| p.remote_jwks.as_ref());
    for r in remotes {
        let (Ok(()), Ok(every)) = (check_uri(&r.uri), cache_duration(r)) else {
            continue;
        };
        out.entry(r.uri.clone())
            .and_modify(|w: &mut Want| w.every = w.every.min(every))
            .or_insert(Want {
                every,
                kind: DocKind::Jwks,
            });
    }
    out
}

/// The provider's keys from the fetched sets, and what to say about them.
pub fn keys(
    r: &api::RemoteJwks,
    fetched: &RemoteSets,
) -> Result<(Arc<Jwks>, RemoteKeys, FetchState), String> {
    check_uri(&r.uri)?;
    cache_duration(r)?;
    let (keys, refetch, state) = match fetched.get(&r.uri) {
        None => (None, Refetch::none(), FetchState::NoKeys(None)),
        Some(f) => {
            let state = match (&f.keys, &f.error) {
                (Some(_), None) => FetchState::Fetched,
                (Some(_), Some(e)) => FetchState::FailedKept(e.clone()),
                (None, e) => FetchState::NoKeys(e.clone()),
            };
            (f.keys.clone(), f.refetch.clone(), state)
        }
    };
    let remote = RemoteKeys {
        uri: r.uri.clone(),
        refetch,
    };
    Ok((
        keys.unwrap_or_else(|| Arc::new(Jwks::empty())),
        remote,
        state,
    ))
}

/// `https://`, or `http://` to a loopback address (a key set in plaintext over a network could
/// be replaced by anyone on the path).
pub fn check_uri(uri: &str) -> Result<(), String> {
    let parsed: http::Uri = uri
        .parse()
        .map_err(|_| format!("remoteJWKS.uri: {uri:?} is not a URI"))?;
    let host = parsed
        .host()
        .ok_or_else(|| format!("remoteJWKS.uri: {uri:?} has no host"))?;
    match parsed.scheme_str() {
        Some("https") => Ok(()),
        Some("http") if is_loopback(host) => Ok(()),
        Some("http") => Err(format!(
            "remoteJWKS.uri: {uri:?}: http:// only to a loopback address (127.0.0.0/8, ::1, \
             localhost); use https://"
        )),
        _ => Err(format!("remoteJWKS.uri: {uri:?} is not an https:// URI")),
    }
}

fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|a| a.is_loopback())
}

fn cache_duration(r: &api::RemoteJwks) -> Result<Duration, String> {
    let Some(text) = r.cache_duration.as_deref() else {
        return Ok(DEFAULT_CACHE_DURATION);
    };
    let d = api::duration(text).ok_or_else(|| {
        format!("remoteJWKS.cacheDuration: {text:?} is not a duration (like 300s or 5m)")
    })?;
    if d < MIN_CACHE_DURATION {
        return Err(format!(
            "remoteJWKS.cacheDuration: {text} is under the minimum of {}s",
            MIN_CACHE_DURATION.as_secs()
        ));
    }
    Ok(d)
}

/// The [`REMOTE_JWKS_CONDITION`] of a policy with `remoteJWKS` providers (`None` without):
/// True when every set is fetched and the latest fetch of each succeeded.
pub fn condition(notes: &[RemoteNote], generation: Option<i64>) -> Option<PolicyCondition> {
    if notes.is_empty() {
        return None;
    }
    let mut problems = Vec::new();
    let mut reason = PolicyConditionReason::Fetched;
    for n in notes {
        match &n.state {
            FetchState::Fetched => {}
            FetchState::FailedKept(e) => {
                reason = PolicyConditionReason::FetchFailed;
                problems.push(format!(
                    "{}: the latest fetch failed ({e}); the keys of the last good fetch stay \
                     in use",
                    n.what
                ));
            }
            FetchState::NoKeys(e) => {
                if e.is_some() {
                    reason = PolicyConditionReason::FetchFailed;
                } else if reason == PolicyConditionReason::Fetched {
                    reason = PolicyConditionReason::Pending;
                }
                let why = e.as_deref().map_or("not fetched yet".to_string(), |e| {
                    format!("no fetch has succeeded ({e})")
                });
                problems.push(format!(
                    "{}: {why}; its tokens are refused (401) until one does",
                    n.what
                ));
            }
        }
    }
    let ok = problems.is_empty();
    let message = if ok {
        "every remoteJWKS key set is fetched".to_string()
    } else {
        problems.join("; ")
    };
    Some(PolicyCondition::new(
        PolicyConditionType::RemoteJwks,
        ok,
        reason,
        message,
        generation,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_anywhere_http_only_to_loopback() {
        assert!(check_uri("https://idp.example.com/jwks").is_ok());
        assert!(check_uri("http://127.0.0.1:8080/jwks").is_ok());
        assert!(check_uri("http://[::1]:8080/jwks").is_ok());
        assert!(check_uri("http://localhost/jwks").is_ok());
        let e = check_uri("http://idp.example.com/jwks").unwrap_err();
        assert!(e.contains("loopback"), "{e}");
        assert!(check_uri("ftp://127.0.0.1/jwks").is_err());
        assert!(check_uri("/jwks").is_err());
    }

    #[test]
    fn cache_duration_defaults_to_five_minutes_and_has_a_floor() {
        let r = |d: Option<&str>| api::RemoteJwks {
            uri: "https://a/".into(),
            cache_duration: d.map(str::to_string),
        };
        assert_eq!(cache_duration(&r(None)), Ok(Duration::from_secs(300)));
        assert_eq!(cache_duration(&r(Some("2m"))), Ok(Duration::from_secs(120)));
        assert!(cache_duration(&r(Some("500ms"))).is_err());
        assert!(cache_duration(&r(Some("soon"))).is_err());
    }

    #[test]
    fn a_set_never_fetched_has_no_keys() {
        let r = api::RemoteJwks {
            uri: "https://a/".into(),
            cache_duration: None,
        };
        let (keys, remote, state) = keys(&r, &RemoteSets::new()).unwrap();
        assert!(keys.is_empty());
        assert_eq!(remote.uri, "https://a/");
        assert_eq!(state, FetchState::NoKeys(None));
    }
}
