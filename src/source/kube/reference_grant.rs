//! ReferenceGrant is served as `v1` from Gateway API v1.5 and only as `v1beta1` before. The
//! schemas are identical, so pier asks discovery which one the cluster serves (preferring
//! `v1`), watches that one, and decodes both into the same struct. The choice is made once
//! per start; a later CRD upgrade keeps `v1beta1` served, so the watch keeps working.

use std::borrow::Cow;

use kube::api::Api;
use kube::core::{DeserializeGuard, NamespaceResourceScope, ObjectMeta};
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::{self, watcher};
use kube::{Client, Resource};
use serde::Deserialize;

use super::watch::{self, Changes, Ctx, ErrorLog, Reconnect};
use super::{Tasks, WatchError, WatchKind};
use crate::translate::api::{GATEWAY_GROUP, ReferenceGrant};

/// A ReferenceGrant read through `gateway.networking.k8s.io/v1beta1`.
#[derive(Clone, Debug, Deserialize)]
#[serde(transparent)]
pub struct ReferenceGrantV1Beta1(pub ReferenceGrant);

/// The version to watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Served {
    V1,
    V1Beta1,
}

// === impl ReferenceGrantV1Beta1 ===

impl Resource for ReferenceGrantV1Beta1 {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        ReferenceGrant::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        ReferenceGrant::group(dt)
    }

    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1beta1")
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        ReferenceGrant::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

/// Starts the task that picks the version and then watches it; returns both stores (one stays
/// empty).
pub(super) fn watch(
    tasks: &mut Tasks,
    client: Client,
    ctx: &Ctx,
) -> (
    Store<DeserializeGuard<ReferenceGrant>>,
    Store<DeserializeGuard<ReferenceGrantV1Beta1>>,
) {
    let v1 = Writer::default();
    let v1beta1 = Writer::default();
    let stores = (v1.as_reader(), v1beta1.as_reader());
    tasks.spawn(run(client, ctx.clone(), v1, v1beta1));
    stores
}

async fn run(
    client: Client,
    ctx: Ctx,
    v1: Writer<DeserializeGuard<ReferenceGrant>>,
    v1beta1: Writer<DeserializeGuard<ReferenceGrantV1Beta1>>,
) {
    let kind = WatchKind::ReferenceGrant;
    let mut backoff = Reconnect::default();
    let mut errors = ErrorLog::new(kind);
    let served = loop {
        match served(&client).await {
            Ok(Some(v)) => break v,
            Ok(None) => errors.report_reason(WatchError::NotFound, "not in API discovery", &ctx),
            Err(e) => {
                let reason = watch::classify_client(&e);
                let error = match reason {
                    super::WatchError::Unavailable => super::reach::describe(&e),
                    _ => e.to_string(),
                };
                errors.report_reason(reason, &error, &ctx)
            }
        }
        tokio::time::sleep(backoff.next().unwrap_or_default()).await;
    };
    errors.recovered(&ctx);
    tracing::debug!(?served, "watching ReferenceGrants");
    let config = watcher::Config::default;
    match served {
        Served::V1 => {
            let stream = watcher(Api::all(client), config());
            watch::reflect(kind, Changes::Any, stream, v1, ctx).await;
        }
        Served::V1Beta1 => {
            let stream = watcher(Api::all(client), config());
            watch::reflect(kind, Changes::Any, stream, v1beta1, ctx).await;
        }
    }
}

/// Which ReferenceGrant version discovery lists; `None` when neither (CRDs not installed).
async fn served(client: &Client) -> Result<Option<Served>, kube::Error> {
    let plural = ReferenceGrant::plural(&());
    for (version, served) in [("v1", Served::V1), ("v1beta1", Served::V1Beta1)] {
        match client
            .list_api_group_resources(&format!("{GATEWAY_GROUP}/{version}"))
            .await
        {
            Ok(list) if list.resources.iter().any(|r| r.name == plural) => {
                return Ok(Some(served));
            }
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}
