//! Pods as pier reads them: only what per-endpoint mesh identity needs (namespace, name and
//! ServiceAccount). Decoded into a slim type, so a watch of every Pod in a large cluster keeps
//! a few hundred bytes per Pod, not the whole object (labels, annotations, owner references,
//! containers and status are never allocated).

use std::borrow::Cow;

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::core::{NamespaceResourceScope, ObjectMeta};
use serde::{Deserialize, Deserializer};

use crate::translate::api::{PodIdentity, PodSpecIdentity};

#[derive(Clone, Debug, Deserialize)]
pub struct PodObject {
    #[serde(deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<PodSpecIdentity>,
}

/// The metadata fields the store and translation use; everything else is skipped unread.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
}

fn slim_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = SlimMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        ..ObjectMeta::default()
    })
}

impl PodObject {
    pub fn identity(&self) -> PodIdentity {
        self.spec.clone().unwrap_or_default().identity()
    }
}

impl Resource for PodObject {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Pod::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        Pod::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        Pod::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        Pod::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_the_service_account_and_the_names() {
        let json = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
                "labels": {"app": "web"}, "annotations": {"a": "b"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": "y"}]
            },
            "spec": {"serviceAccountName": "web-sa", "containers": [{"name": "c", "image": "i"}]},
            "status": {"podIP": "10.0.0.1"}
        });
        let p: PodObject = serde_json::from_value(json).unwrap();
        assert_eq!(p.metadata.name.as_deref(), Some("web-1"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(p.metadata.resource_version.as_deref(), Some("7"));
        assert!(p.metadata.labels.is_none() && p.metadata.annotations.is_none());
        assert!(p.metadata.owner_references.is_none());
        assert_eq!(p.identity().service_account, "web-sa");
        let bare: PodObject = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "namespace": "b"}
        }))
        .unwrap();
        assert_eq!(bare.identity().service_account, "default");
    }
}
