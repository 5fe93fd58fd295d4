//! ClientTrafficPolicy (`pier.dev/v1alpha1`) ─> the [`ClientPolicy`] of each listener, and the
//! policies' GEP-713 status (`super::attach`). Its `tls` is read by `super::tls_settings`, as
//! a listener's own `tls.options` (`pier.dev/min-version` …) are.
//!
//! ```text
//! policies ─> parse each spec (invalid: the last valid version stays in force, or none)
//!          ─> attach::Policies: targets (Gateway, listener, ListenerSet), precedence, status
//! listener ─> its effective policy's tls, else its tls.options, else pier's defaults
//! ```
//!
//! Chosen where the API is silent: an invalid spec (a TLS version or suite rustls lacks, a hop
//! count instead of trusted CIDRs) refuses the whole policy (`Accepted=False`) and its
//! listeners keep pier's defaults (TLS 1.2 and 1.3 with AEAD suites only; the flags), never
//! something weaker; a policy that was valid keeps its last valid version.

use std::sync::Arc;

use super::api::{self, ClientTrafficPolicy, ClientTrafficPolicySpec};
use super::attach::{self, Entry};
use super::resources::Resources;
use super::tls_settings::tls_profile;
use crate::model::{Carried, ClientPolicy, EscapedSlashes, ObjectRef, PortClient, Underscores};

const KIND: &str = "ClientTrafficPolicy";

/// Every ClientTrafficPolicy of `resources`, attached.
pub type Policies = attach::Policies<ClientPolicy>;

/// Reads every ClientTrafficPolicy of `resources`; an invalid one keeps the version in force
/// in `carried` (the previous snapshot's), if any.
pub fn policies(resources: &Resources, carried: &Carried) -> Policies {
    let entries = resources
        .client_traffic_policies
        .iter()
        .map(|((ns, name), p)| entry(ObjectRef::new(ns, name), p, carried))
        .collect();
    Policies::new(KIND, entries)
}

fn entry(key: ObjectRef, p: &ClientTrafficPolicy, carried: &Carried) -> Entry<ClientPolicy> {
    let targets = (p.spec.target_refs.iter())
        .map(|t| attach::target(KIND, false, &key, t))
        .collect();
    let source = key.to_string();
    let (policy, invalid) = attach::in_force(
        client_policy(&source, &p.spec),
        carried.client.get(&source),
        || ClientPolicy {
            source: source.clone(),
            tls: None,
            connection: PortClient::default(),
            http3: false,
        },
        "nothing of this policy is in force (pier's defaults apply)",
    );
    Entry {
        generation: p.metadata.generation,
        created: api::creation_time(&p.metadata),
        key,
        policy,
        invalid,
        targets,
        conditions: vec![],
    }
}

/// A policy's spec as its listeners get it, or why pier cannot do what it asks.
fn client_policy(source: &str, spec: &ClientTrafficPolicySpec) -> Result<ClientPolicy, String> {
    let tls = match &spec.tls {
        Some(tls) => Some(Arc::new(tls_profile(tls)?)),
        None => None,
    };
    let connection_limit = match spec
        .connection
        .as_ref()
        .and_then(|c| c.connection_limit.as_ref())
    {
        None => None,
        Some(l) => match u32::try_from(l.value) {
            Ok(v) if v >= 1 => Some(v),
            _ => {
                return Err(format!(
                    "connection.connectionLimit.value: {} is not a number of connections (1 or more)",
                    l.value
                ));
            }
        },
    };
    let trusted_proxies = match &spec.client_ip_detection {
        None => None,
        Some(d) => {
            if d.custom_header.is_some() {
                return Err(
                    "clientIPDetection.customHeader: pier takes the client address from \
                     the connection (or a PROXY protocol header) and X-Forwarded-For, not from \
                     a custom header"
                        .into(),
                );
            }
            let Some(xff) = &d.x_forwarded_for else {
                return Err("clientIPDetection: give xForwardedFor.trustedCIDRs".into());
            };
            if xff.num_trusted_hops.is_some() {
                return Err(
                    "clientIPDetection.xForwardedFor.numTrustedHops: pier believes \
                     forwarding headers by the address of the proxy that sent them; give \
                     trustedCIDRs instead"
                        .into(),
                );
            }
            let Some(cidrs) = &xff.trusted_cidrs else {
                return Err("clientIPDetection.xForwardedFor: give trustedCIDRs".into());
            };
            let mut nets = Vec::with_capacity(cidrs.len());
            for c in cidrs {
                match c.parse::<crate::model::net::Cidr>() {
                    Ok(n) => nets.push(n),
                    Err(e) => {
                        return Err(format!(
                            "clientIPDetection.xForwardedFor.trustedCIDRs: {c:?}: {e}"
                        ));
                    }
                }
            }
            Some(crate::model::net::TrustedProxies::new(nets))
        }
    };
    let idle_timeout = match (spec.timeout.as_ref())
        .and_then(|t| t.http.as_ref()?.idle_timeout.as_deref())
    {
        None => None,
        Some(s) => match api::duration(s) {
            Some(d) if !d.is_zero() => Some(d),
            _ => {
                return Err(format!(
                    "timeout.http.idleTimeout: {s:?} is not a duration above zero (such as 15s, 5m)"
                ));
            }
        },
    };
    let request_received = match (spec.timeout.as_ref())
        .and_then(|t| t.http.as_ref()?.request_received_timeout.as_deref())
    {
        None => None,
        Some(s) => match api::duration(s) {
            Some(d) if !d.is_zero() && d <= std::time::Duration::from_secs(3600) => Some(d),
            _ => {
                return Err(format!(
                    "timeout.http.requestReceivedTimeout: {s:?} is not a duration from 1ms to 1h \
                     (such as 10s)"
                ));
            }
        },
    };
    let path = spec.path.as_ref();
    let escaped_slashes = match path.and_then(|p| p.escaped_slashes_action.as_deref()) {
        None => None,
        Some("KeepUnchanged") => Some(EscapedSlashes::KeepUnchanged),
        Some("RejectRequest") => Some(EscapedSlashes::RejectRequest),
        Some("UnescapeAndForward") => Some(EscapedSlashes::UnescapeAndForward),
        Some("UnescapeAndRedirect") => {
            return Err(
                "path.escapedSlashesAction: UnescapeAndRedirect is not in this version \
                 (KeepUnchanged, RejectRequest, UnescapeAndForward)"
                    .into(),
            );
        }
        Some(other) => {
            return Err(format!(
                "path.escapedSlashesAction: {other:?} is not KeepUnchanged, RejectRequest or \
                 UnescapeAndForward"
            ));
        }
    };
    let headers = spec.headers.as_ref();
    let underscores = match headers.and_then(|h| h.with_underscores_action.as_deref()) {
        None => None,
        Some("Allow") => Some(Underscores::Allow),
        Some("RejectRequest") => Some(Underscores::RejectRequest),
        Some("DropHeader") => Some(Underscores::DropHeader),
        Some(other) => {
            return Err(format!(
                "headers.withUnderscoresAction: {other:?} is not Allow, RejectRequest or DropHeader"
            ));
        }
    };
    Ok(ClientPolicy {
        source: source.to_string(),
        tls,
        connection: PortClient {
            connection_limit,
            trusted_proxies: trusted_proxies.map(Arc::new),
            idle_timeout,
            request_received,
            merge_slashes: path.and_then(|p| p.disable_merge_slashes).map(|d| !d),
            escaped_slashes,
            underscores,
            preserve_request_id: headers.and_then(|h| h.preserve_x_request_id) == Some(true),
        },
        http3: spec.http3.is_some(),
    })
}

#[cfg(test)]
mod tests;
