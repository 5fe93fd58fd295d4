//! Listener filters (GEP-5224, GatewayListenerFilters, Gateway API v1.7 experimental): a
//! Gateway's or ListenerSet's `listeners[].filters.requests`, run on every request the
//! listener accepts, in order, before routing. pier runs `ExternalAuth` filters (the same
//! authorizers as HTTPRoute's GEP-1494 filter, `proxy::phase::listener_filters`); it defines no
//! `ExtensionRef` kinds.
//!
//! ```text
//! Resources.listener_filters ─> per listener (HTTP/HTTPS only, at most 16, each valid)
//!   ExternalAuth ─> ExtAuth (backendRef resolved as a Route's, ReferenceGrant `from` the
//!                   Gateway or ListenerSet)          ─> PreRoute::Authorize
//!   backendRef unresolved ─> ResolvedRefs=False      ─> PreRoute::Unresolved (500s)
//!   ExtensionRef, another type ─> Accepted=False UnsupportedValue (not served)
//!   invalid (type without its field, bad values) ─> Accepted=False InvalidListenerFilter
//! ```
//!
//! A listener that is refused is not served at all: served without its filters, it would let
//! in what they keep out. What can be refused without resolving anything
//! (`ListenerFilters::refusal`) is
//! refused where listeners are made, before conflicts are settled (a refused listener takes no
//! port or hostname from another); an `ExternalAuth` whose settings turn out invalid (a header
//! name, a path) only here, before the Routes attach.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::api::{GATEWAY_GROUP, ListenerFilter, ListenerFilters};
use super::backends::{Backends, Traffic};
use super::gateway::{GatewayState, ListenerState};
use super::http_route::filters::{FilterCtx, InvalidFilter, ext_auth_filter};
use super::http_route::{BackendRefError, BackendRefSpec, resolve_service};
use super::mesh::TlsCtx;
use super::refs::RefFrom;
use super::resources::{ListenerRef, Resources};
use super::status::ListenerReason;
use crate::model::ext_auth::PreRoute;

/// Translates the filters of every listener that has them into its `pre_route`, or refuses
/// the listener.
pub fn apply(resources: &Resources, gateways: &mut [GatewayState], backends: &mut Backends<'_>) {
    if resources.listener_filters.is_empty() {
        return;
    }
    let no_labels = BTreeMap::new();
    for gw in gateways.iter_mut() {
        for li in 0..gw.listeners.len() {
            let id = gw.listener_id(&gw.listeners[li]);
            let (kind, object) = match &id.set {
                Some(set) => ("ListenerSet", set),
                None => ("Gateway", &id.gateway),
            };
            let at = ListenerRef {
                kind,
                object: (object.namespace.clone(), object.name.clone()),
                listener: id.name.clone(),
            };
            let Some(filters) = resources.listener_filters.get(&at) else {
                continue;
            };
            let namespace_labels = resources
                .namespaces
                .get(&object.namespace)
                .and_then(|n| n.metadata.labels.as_ref())
                .unwrap_or(&no_labels);
            let tls = TlsCtx::for_route(&gw.key, &gw.tls, &no_labels, namespace_labels);
            let owner = Owner {
                kind,
                name: format!("{kind} {object} listener {}", id.name),
            };
            let l = &mut gw.listeners[li];
            listener(resources, backends, tls, &owner, filters, l);
        }
    }
}

/// Who a listener's filters belong to.
struct Owner {
    /// `Gateway` or `ListenerSet` (ReferenceGrant `from`).
    kind: &'static str,
    /// `Gateway ns/name listener http`, for logs.
    name: String,
}

fn listener(
    resources: &Resources,
    backends: &mut Backends<'_>,
    tls: TlsCtx<'_>,
    owner: &Owner,
    filters: &Result<ListenerFilters, String>,
    l: &mut ListenerState,
) {
    if l.not_accepted.is_some() {
        return;
    }
    // Refused listeners were refused by `gateway::listener` already
    // (`ListenerFilters::refusal`).
    let Ok(filters) = filters else { return };
    if filters.requests.is_empty() {
        return;
    }
    let refuse = |l: &mut ListenerState, reason, why: String| {
        l.not_accepted = Some((reason, why));
    };
    let from = RefFrom {
        group: GATEWAY_GROUP,
        kind: owner.kind,
        namespace: &l.namespace,
    };
    let mut resolve = |spec: BackendRefSpec<'_>| {
        let traffic = if spec.h2 {
            Traffic::Http2
        } else {
            Traffic::Http
        };
        resolve_service(resources, backends, from, spec, tls, traffic)
    };
    let mut auths = Vec::with_capacity(filters.requests.len());
    let mut unresolved = Vec::new();
    for (i, f) in filters.requests.iter().enumerate() {
        let at = format!("filters.requests[{i}]");
        match one(f, i, owner, &mut resolve) {
            Ok(ext) => auths.push(Arc::new(ext)),
            Err(One::Unresolved(e)) => unresolved.push((at, e)),
            Err(One::Refused(reason, why)) => {
                let why = format!("{at}: {why}; the listener is not served without it");
                return refuse(l, reason, why);
            }
        }
    }
    if unresolved.is_empty() {
        l.pre_route = Some(Arc::new(PreRoute::Authorize(auths.into())));
        return;
    }
    for (at, e) in unresolved {
        let reason = match e {
            BackendRefError::RefNotPermitted(_) => ListenerReason::RefNotPermitted,
            _ => ListenerReason::InvalidListenerFilterRef,
        };
        let why =
            format!("{at}.externalAuth.backendRef: {e}; requests on the listener fail closed");
        l.ref_problems.push((reason, why));
    }
    l.pre_route = Some(Arc::new(PreRoute::Unresolved));
}

enum One {
    Unresolved(BackendRefError),
    Refused(ListenerReason, String),
}

fn one(
    f: &ListenerFilter,
    index: usize,
    owner: &Owner,
    resolve: &mut dyn FnMut(
        BackendRefSpec<'_>,
    ) -> Result<Arc<crate::model::Backend>, BackendRefError>,
) -> Result<crate::model::ext_auth::ExtAuth, One> {
    let invalid = |why: String| One::Refused(ListenerReason::InvalidListenerFilter, why);
    // `ListenerFilters::refusal` let only ExternalAuth filters with their settings through.
    let Some(e) = f
        .external_auth
        .as_ref()
        .filter(|_| f.r#type == "ExternalAuth")
    else {
        return Err(invalid(
            "not an ExternalAuth filter with its settings".into(),
        ));
    };
    let mut ctx = FilterCtx {
        prefix_only: false,
        resolve,
        unresolved: vec![],
        rule_at: Some(owner.name.clone()),
    };
    match ext_auth_filter(e, index, &mut ctx) {
        Ok(mut ext) => {
            ext.source = format!("{}.filters.requests[{index}]", owner.name);
            Ok(ext)
        }
        Err(InvalidFilter::ExternalAuthUnresolved) => {
            let (_, _, e) = ctx.unresolved.pop().expect("noted by the filter");
            Err(One::Unresolved(e))
        }
        Err(e) => Err(invalid(e.to_string())),
    }
}
