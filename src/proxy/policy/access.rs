//! The rule's access policies, evaluated purely on what the request path derived: today
//! authorization by client address (`model::policy`). Denied: 403 (gRPC: PERMISSION_DENIED).
//! Authentication (which answers 401) and rate limits (429) join here.

use std::net::IpAddr;

use crate::model::policy::{AccessPolicy, Action};
use crate::proxy::error::ProxyError;

/// Whether `client` may come in under `policy`.
pub fn check(policy: &AccessPolicy, client: IpAddr) -> Result<(), ProxyError> {
    let Some(authz) = &policy.authorization else {
        return Ok(());
    };
    let verdict = authz.decide(client);
    match verdict.action {
        Action::Allow => Ok(()),
        Action::Deny => {
            tracing::debug!(
                policy = %policy.source,
                rule = verdict.rule.and_then(|r| r.name.as_deref()).unwrap_or("(default)"),
                %client,
                "request denied by authorization"
            );
            Err(ProxyError::Forbidden)
        }
    }
}
