//! ListenerSets (GEP-1713, standard since v1.5): listeners that other teams attach to a
//! Gateway. A Gateway takes them only when its `allowedListeners.namespaces` selects the set's
//! namespace (the default, `None`, takes none). Attached sets' listeners follow the Gateway's
//! own in its merged listener list, oldest set first (then namespace/name), so conflict
//! detection gives the Gateway's listeners, then older sets, precedence. A set's listener is
//! named within its set: routes reach it with a parentRef of kind ListenerSet (a parentRef to
//! the Gateway selects only the Gateway's own listeners). `allowedRoutes` `Same` and
//! certificateRefs are relative to the set's namespace, and a cross-namespace certificate
//! needs a ReferenceGrant from `ListenerSet`.

use super::{
    GatewayListeners, GatewayState, ListenerState, NamespacePolicy, Owner, listener,
    namespace_policy,
};
use crate::model::{ListenerId, ObjectRef};
use crate::translate::api::{
    GATEWAY_GROUP, GatewayAllowedListeners, GatewayAllowedListenersNamespacesFrom, ListenerSet,
    creation_time, same_shape,
};
use crate::translate::refs::Certs;
use crate::translate::resources::Resources;
use crate::translate::status::{
    ListenerSetStatus, SetCondition, SetConditionReason, SetConditionType,
};

/// A ListenerSet whose parentRef names an in-scope Gateway.
#[derive(Debug)]
pub struct SetState {
    pub key: ObjectRef,
    pub generation: Option<i64>,
    /// Why the Gateway does not take it (it then has no listeners).
    pub not_allowed: Option<String>,
}

impl SetState {
    /// Attached to its Gateway (its listeners are in the merged list).
    pub fn attached(&self) -> bool {
        self.not_allowed.is_none()
    }

    /// Accepted and Programmed, and its listeners' statuses. `listeners` are its own.
    pub fn status(&self, listeners: &[&ListenerState], parent_accepted: bool) -> ListenerSetStatus {
        let g = self.generation;
        let cond = |t, ok, r, m: String| SetCondition::new(t, ok, r, m, g);
        let (accepted, programmed) = if let Some(why) = &self.not_allowed {
            (
                cond(
                    SetConditionType::Accepted,
                    false,
                    SetConditionReason::NotAllowed,
                    why.clone(),
                ),
                cond(
                    SetConditionType::Programmed,
                    false,
                    SetConditionReason::NotAllowed,
                    why.clone(),
                ),
            )
        } else if !parent_accepted {
            let why = "the parent Gateway is not accepted".to_string();
            (
                cond(
                    SetConditionType::Accepted,
                    false,
                    SetConditionReason::ParentNotAccepted,
                    why.clone(),
                ),
                cond(
                    SetConditionType::Programmed,
                    false,
                    SetConditionReason::ParentNotAccepted,
                    why,
                ),
            )
        } else {
            // A listener that cannot be programmed (a conflict, no usable certificate) is not
            // valid here: the set is Accepted while one listener is.
            let invalid: Vec<&str> = listeners
                .iter()
                .filter(|l| !l.programmed())
                .map(|l| l.name.as_str())
                .collect();
            let any_valid = invalid.len() < listeners.len();
            let accepted = if invalid.is_empty() {
                cond(
                    SetConditionType::Accepted,
                    true,
                    SetConditionReason::Accepted,
                    "ListenerSet is accepted".into(),
                )
            } else {
                cond(
                    SetConditionType::Accepted,
                    any_valid,
                    SetConditionReason::ListenersNotValid,
                    format!("invalid listeners: {}", invalid.join(", ")),
                )
            };
            let programmed = if any_valid {
                cond(
                    SetConditionType::Programmed,
                    true,
                    SetConditionReason::Programmed,
                    "ListenerSet is programmed".into(),
                )
            } else {
                cond(
                    SetConditionType::Programmed,
                    false,
                    SetConditionReason::ListenersNotValid,
                    "no listener is programmed".into(),
                )
            };
            (accepted, programmed)
        };
        ListenerSetStatus {
            generation: g,
            conditions: vec![accepted, programmed],
            listeners: listeners.iter().map(|l| l.status(g)).collect(),
        }
    }
}

/// Adds the ListenerSets that name `gw` as their parent: allowed ones with their listeners,
/// the others without (for their status).
pub(super) fn attach(
    resources: &Resources,
    certs: &mut Certs<'_>,
    gw: &mut GatewayState,
    allowed: Option<&GatewayAllowedListeners>,
) {
    let mut sets: Vec<(&ListenerSet, ObjectRef)> = resources
        .listener_sets
        .iter()
        .map(|((ns, name), s)| (s, ObjectRef::new(ns, name)))
        .filter(|(s, key)| names_gateway(s, key, &gw.key))
        .collect();
    if sets.is_empty() {
        return;
    }
    sets.sort_by(|a, b| {
        (creation_time(&a.0.metadata), &a.1).cmp(&(creation_time(&b.0.metadata), &b.1))
    });
    let policy = allowed_policy(allowed);
    for (set, key) in sets {
        let index = gw.sets.len();
        let not_allowed = match &policy {
            Err(why) => Some(why.clone()),
            Ok(p) if !p.allows(&gw.key.namespace, &key.namespace, &resources.namespaces) => {
                Some(format!(
                    "Gateway {} does not allow ListenerSets from namespace {} \
                     (spec.allowedListeners)",
                    gw.key, key.namespace
                ))
            }
            Ok(_) => None,
        };
        if not_allowed.is_none() {
            for l in &set.spec.listeners {
                // The shapes are the same (ListenerEntry is Listener); one that does not
                // convert cannot be one.
                let Ok(l) = same_shape::<_, GatewayListeners>(l) else {
                    continue;
                };
                let owner = Owner {
                    kind: "ListenerSet",
                    namespace: &key.namespace,
                    id: ListenerId {
                        gateway: gw.key.clone(),
                        set: Some(key.clone()),
                        name: l.name.clone(),
                    },
                };
                let mut state = listener(resources, certs, owner, &l);
                state.set = Some(index);
                gw.listeners.push(state);
            }
        }
        gw.sets.push(SetState {
            key,
            generation: set.metadata.generation,
            not_allowed,
        });
    }
}

/// Whether the set's parentRef is the Gateway `gateway`.
fn names_gateway(set: &ListenerSet, key: &ObjectRef, gateway: &ObjectRef) -> bool {
    let p = &set.spec.parent_ref;
    p.group.as_deref().unwrap_or(GATEWAY_GROUP) == GATEWAY_GROUP
        && p.kind.as_deref().unwrap_or("Gateway") == "Gateway"
        && p.name == gateway.name
        && p.namespace.as_deref().unwrap_or(&key.namespace) == gateway.namespace
}

/// `allowedListeners.namespaces` as a namespace policy; `Err` (why) when it takes none.
fn allowed_policy(allowed: Option<&GatewayAllowedListeners>) -> Result<NamespacePolicy, String> {
    let none = || "the parent Gateway does not allow ListenerSets (spec.allowedListeners)".into();
    let Some(ns) = allowed.and_then(|a| a.namespaces.as_ref()) else {
        return Err(none());
    };
    if matches!(
        ns.from,
        None | Some(GatewayAllowedListenersNamespacesFrom::None)
    ) {
        return Err(none());
    }
    // The same shape as allowedRoutes.namespaces (whose `from` has no `None`).
    let converted = same_shape(ns).map_err(|e| format!("spec.allowedListeners: {e}"))?;
    match namespace_policy(Some(&converted)) {
        Ok(NamespacePolicy::Nothing) => Err(none()),
        Ok(p) => Ok(p),
        Err(e) => Err(format!(
            "spec.allowedListeners selector is invalid ({e}): it selects no namespace"
        )),
    }
}
