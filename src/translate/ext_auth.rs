//! External authorizers as the data plane runs them ([`ExtAuth`]), from a SecurityPolicy's
//! `extAuth` (Envoy Gateway's fields: [`ext_auth`]) and from GEP-1494's `ExternalAuth`
//! HTTPRoute filter ([`external_auth_filter`]): the authorizer's Service port resolved to a
//! backend like a Route's backendRef, header names parsed, the timeout read.
//!
//! SecurityPolicy: errors name the field (`http.backendRefs[0]: ...`) and the policy fails
//! closed. One backendRef: several (Envoy Gateway weighs them) are refused for now. A
//! backendRef in another namespace needs a ReferenceGrant there from SecurityPolicies of the
//! policy's namespace to the Service (as a Secret in another namespace does). The filter's
//! backendRef resolves as the Route's backendRefs do (ReferenceGrant included).

use std::sync::Arc;

use http::HeaderName;

use super::api::{self, BackendRef};
use super::backends::{Backends, Traffic};
use super::mesh::TlsCtx;
use super::refs::security_policy_may_refer;
use crate::model::ObjectRef;
use crate::model::ext_auth::{
    AllowStatus, BodyToExtAuth, DEFAULT_TIMEOUT, ExtAuth, ExtAuthProtocol, HeaderSelection,
    OverLimit,
};

/// `spec.extAuth` of the SecurityPolicy `key`.
pub fn ext_auth(
    key: &ObjectRef,
    e: &api::ExtAuth,
    backends: &mut Backends<'_>,
) -> Result<ExtAuth, String> {
    let (refs, field, traffic) = match (&e.grpc, &e.http) {
        (Some(g), None) => (&g.backend_refs, "grpc", Traffic::Http2),
        (None, Some(h)) => (&h.backend_refs, "http", Traffic::Http),
        _ => return Err("give exactly one of grpc and http".into()),
    };
    let backend_ref = match refs.as_slice() {
        [one] => one,
        [] => return Err(format!("{field}.backendRefs is empty")),
        _ => {
            return Err(format!(
                "{field}.backendRefs: one authorizer Service is supported, {} were given",
                refs.len()
            ));
        }
    };
    let (backend, authority) = service(key, backend_ref, backends, traffic)
        .map_err(|why| format!("{field}.backendRefs[0]: {why}"))?;
    let headers = names(&e.headers_to_ext_auth)
        .map_err(|h| format!("headersToExtAuth: {h:?} is not a header name"))?;
    let protocol = match &e.http {
        Some(h) => ExtAuthProtocol::Http {
            allow: AllowStatus::Any2xx,
            path_prefix: path_prefix(h.path.as_deref()).map_err(|w| format!("http.path: {w}"))?,
            headers_to_backend: HeaderSelection::Only(
                names(&h.headers_to_backend)
                    .map_err(|h| format!("http.headersToBackend: {h:?} is not a header name"))?,
            ),
        },
        None => ExtAuthProtocol::Grpc,
    };
    // gRPC: every header when none are named (Envoy Gateway's default); HTTP: the always-sent
    // ones (Host, Authorization, Content-Length) and those named.
    let headers_to_ext_auth = match (&protocol, headers.is_empty()) {
        (ExtAuthProtocol::Grpc, true) => HeaderSelection::All,
        _ => HeaderSelection::Only(headers),
    };
    let timeout = match &e.timeout {
        None => DEFAULT_TIMEOUT,
        Some(t) => api::duration(t)
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("timeout: {t:?} is not a positive Gateway API duration"))?,
    };
    let body = e
        .body_to_ext_auth
        .as_ref()
        .map(|b| BodyToExtAuth {
            max_bytes: b.max_request_bytes as usize,
            over: OverLimit::Reject,
        })
        .filter(|b| b.max_bytes > 0);
    Ok(ExtAuth {
        source: format!("SecurityPolicy {key}"),
        backend,
        authority,
        protocol,
        headers_to_ext_auth,
        body,
        timeout,
        fail_open: e.fail_open.unwrap_or(false),
    })
}

/// The Service port a policy's backendRef names, and the authority of check requests.
fn service(
    key: &ObjectRef,
    r: &BackendRef,
    backends: &mut Backends<'_>,
    traffic: Traffic,
) -> Result<(Arc<crate::model::Backend>, String), String> {
    let group = r.group.as_deref().unwrap_or("");
    let kind = r.kind.as_deref().unwrap_or("Service");
    if !group.is_empty() || kind != "Service" {
        return Err(format!(
            "{}/{kind} is not a supported kind (only core/Service)",
            if group.is_empty() { "core" } else { group }
        ));
    }
    let ns = r.namespace.as_deref().unwrap_or(&key.namespace);
    security_policy_may_refer(backends.resources(), &key.namespace, "Service", ns, &r.name)?;
    let port = r
        .port
        .ok_or_else(|| format!("Service {ns}/{}: port is required", r.name))?;
    let port = u16::try_from(port)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("Service {ns}/{}: port {port} is out of range", r.name))?;
    let backend = backends
        .service_port(ns, &r.name, port, TlsCtx::default(), traffic)
        .map_err(|e| e.to_string())?;
    Ok((backend, format!("{}.{ns}.svc", r.name)))
}

/// Lower-case header names, or the first that is not one.
pub fn names(list: &[String]) -> Result<Vec<HeaderName>, String> {
    list.iter()
        .map(|h| HeaderName::from_bytes(h.as_bytes()).map_err(|_| h.clone()))
        .collect()
}

/// A path prefix for check requests: empty, or an absolute path without a query.
pub fn path_prefix(path: Option<&str>) -> Result<String, String> {
    let p = path.unwrap_or("");
    if p.is_empty() {
        return Ok(String::new());
    }
    let ok = p.starts_with('/')
        && p.bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'?' | b'#' | b'%' | b'\\'));
    if !ok {
        return Err(format!(
            "{p:?} must be an absolute path of visible ASCII without '?', '#', '%' or '\\\\'"
        ));
    }
    // `/auth/` + `/x` would be `/auth//x`: the prefix's own trailing slash goes.
    Ok(p.trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn a_path_prefix_is_an_absolute_path_without_its_trailing_slash() {
        assert_eq!(path_prefix(None).unwrap(), "");
        assert_eq!(path_prefix(Some("/auth/")).unwrap(), "/auth");
        assert_eq!(path_prefix(Some("/oauth2/auth")).unwrap(), "/oauth2/auth");
        assert!(path_prefix(Some("auth")).is_err());
        assert!(path_prefix(Some("/a?b")).is_err());
        assert!(path_prefix(Some("/a b")).is_err());
    }
}
