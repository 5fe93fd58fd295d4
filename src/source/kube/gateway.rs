//! Gateways as pier reads them: the upstream kind, decoded into pier's own
//! [`Gateway`](crate::translate::api::Gateway) so that `spec.mesh` (on a mesh-patched CRD)
//! survives. A newtype, so that translation stays free of kube traits.

use std::borrow::Cow;

use kube::Resource;
use kube::core::{NamespaceResourceScope, ObjectMeta};
use serde::Deserialize;

use crate::translate::api::{Gateway, UpstreamGateway};

#[derive(Clone, Debug, Deserialize)]
#[serde(transparent)]
pub struct GatewayObject(pub Gateway);

impl std::ops::Deref for GatewayObject {
    type Target = Gateway;

    fn deref(&self) -> &Gateway {
        &self.0
    }
}

impl Resource for GatewayObject {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        UpstreamGateway::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        UpstreamGateway::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        UpstreamGateway::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        UpstreamGateway::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}
