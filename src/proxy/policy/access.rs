//! The rule's access policies, evaluated purely on what the request path derived: today
//! authorization by client address, method and headers (`model::policy`). Denied: 403 (gRPC:
//! PERMISSION_DENIED); an invalid policy: 500, never a pass. Authentication (which answers
//! 401) and rate limits (429) join here.

use crate::model::policy::{AccessPolicy, AccessRequest, Action};
use crate::proxy::error::ProxyError;

/// Whether the request may come in under `policy`.
pub fn check(policy: &AccessPolicy, req: &AccessRequest<'_>) -> Result<(), ProxyError> {
    if policy.invalid.is_some() {
        return Err(ProxyError::PolicyInvalid);
    }
    let Some(authz) = &policy.authorization else {
        return Ok(());
    };
    let verdict = authz.decide(req);
    match verdict.action {
        Action::Allow => Ok(()),
        Action::Deny => {
            tracing::debug!(
                policy = %policy.source,
                rule = verdict.rule.and_then(|r| r.name.as_deref()).unwrap_or("(default)"),
                client = %req.client,
                "request denied by authorization"
            );
            Err(ProxyError::Forbidden)
        }
    }
}
