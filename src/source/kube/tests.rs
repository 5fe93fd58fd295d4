use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kube::core::{DeserializeGuard, PartialObjectMeta, Status};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use tokio::sync::{mpsc, watch as channel};

use super::gateway::HttpRouteObject;
use super::watch::{self, Changes, Ctx, Notify, classify};
use super::*;

fn guard<K: serde::de::DeserializeOwned + Resource>(v: serde_json::Value) -> DeserializeGuard<K> {
    serde_json::from_value(v).expect("JSON object")
}

fn route(ns: &str, name: &str, generation: i64) -> DeserializeGuard<HttpRouteObject> {
    guard(json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": { "name": name, "namespace": ns, "generation": generation,
                      "managedFields": [{ "manager": "kubectl" }] },
        "spec": { "parentRefs": [{ "name": "gw" }] },
    }))
}

fn ctx() -> (Ctx, channel::Receiver<()>, channel::Receiver<()>) {
    let (config, config_rx) = channel::channel(());
    let (status, status_rx) = channel::channel(());
    let (pending, _) = channel::channel(WatchKind::ALL.into_iter().collect());
    let ctx = Ctx {
        config: Arc::new(config),
        status: Arc::new(status),
        pending: Arc::new(pending),
        metrics: KubeMetrics::default(),
        api_server: Arc::default(),
        refused: Arc::default(),
        unserved: Arc::default(),
    };
    (ctx, config_rx, status_rx)
}

/// Empty stores, with writers for the kinds a test fills.
struct Fixture {
    stores: Stores,
    routes: Writer<DeserializeGuard<HttpRouteObject>>,
    grants_v1beta1: Writer<DeserializeGuard<ReferenceGrantV1Beta1>>,
    namespaces: Writer<PartialObjectMeta<Namespace>>,
    classes: Writer<DeserializeGuard<GatewayClass>>,
    policies: Writer<DeserializeGuard<BackendTlsPolicy>>,
    bundles: Writer<DeserializeGuard<ClusterTrustBundle>>,
    security: Writer<DeserializeGuard<SecurityPolicy>>,
}

fn fixture() -> Fixture {
    let routes = Writer::default();
    let grants_v1beta1 = Writer::default();
    let namespaces = Writer::default();
    let classes = Writer::default();
    let policies = Writer::default();
    let bundles = Writer::default();
    let security = Writer::default();
    let stores = Stores {
        gateway_classes: classes.as_reader(),
        http_routes: routes.as_reader(),
        reference_grants_v1beta1: grants_v1beta1.as_reader(),
        namespaces: namespaces.as_reader(),
        backend_tls_policies: policies.as_reader(),
        cluster_trust_bundles: bundles.as_reader(),
        security_policies: security.as_reader(),
        ..Stores::default()
    };
    Fixture {
        stores,
        routes,
        grants_v1beta1,
        namespaces,
        classes,
        policies,
        bundles,
        security,
    }
}

#[test]
fn resources_hold_decoded_objects_by_key() {
    let mut f = fixture();
    f.routes
        .apply_watcher_event(&Event::Apply(route("b", "r2", 1)));
    f.routes
        .apply_watcher_event(&Event::Apply(route("a", "r1", 1)));
    // `hostnames` must be a list: this one does not decode and is left out.
    f.routes.apply_watcher_event(&Event::Apply(guard(json!({
        "metadata": { "name": "bad", "namespace": "a" },
        "spec": { "hostnames": "not-a-list" },
    }))));
    f.grants_v1beta1.apply_watcher_event(&Event::Apply(guard(json!({
        "metadata": { "name": "g", "namespace": "backend" },
        "spec": {
            "from": [{ "group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "a" }],
            "to": [{ "group": "", "kind": "Service" }],
        },
    }))));
    f.namespaces.apply_watcher_event(&Event::Apply(
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": { "name": "a", "labels": { "team": "x" } },
        }))
        .unwrap(),
    ));
    f.classes.apply_watcher_event(&Event::Apply(guard(json!({
        "metadata": { "name": "pier" },
        "spec": { "controllerName": crate::DEFAULT_CONTROLLER_NAME },
    }))));

    f.policies.apply_watcher_event(&Event::Apply(guard(json!({
        "metadata": { "name": "p", "namespace": "a" },
        "spec": {
            "targetRefs": [{ "group": "", "kind": "Service", "name": "s" }],
            "validation": { "hostname": "s.example", "wellKnownCACertificates": "System" },
        },
    }))));
    f.bundles.apply_watcher_event(&Event::Apply(guard(json!({
        "metadata": { "name": "mesh.example:roots" },
        "spec": { "signerName": "mesh.example/roots", "trustBundle": "" },
    }))));

    f.security.apply_watcher_event(&Event::Apply(guard(json!({
        "apiVersion": "pier.dev/v1alpha1",
        "kind": "SecurityPolicy",
        "metadata": { "name": "auth", "namespace": "a" },
        "spec": {
            "targetRefs": [{ "group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "r1" }],
            "basicAuth": { "users": { "name": "htpasswd" } },
        },
    }))));
    // `targetRefs` is required: this one does not decode and is left out.
    f.security.apply_watcher_event(&Event::Apply(guard(json!({
        "metadata": { "name": "bad", "namespace": "a" },
        "spec": { "basicAuth": { "users": { "name": "htpasswd" } } },
    }))));

    let r = f.stores.resources();
    let security: Vec<_> = r.security_policies.keys().cloned().collect();
    assert_eq!(security, [("a".to_string(), "auth".to_string())]);
    let auth = &r.security_policies[&("a".to_string(), "auth".to_string())];
    assert_eq!(auth.spec.target_refs[0].name, "r1");
    assert_eq!(
        auth.spec.basic_auth.as_ref().unwrap().users.name,
        "htpasswd"
    );
    assert_eq!(
        r.backend_tls_policies.keys().cloned().collect::<Vec<_>>(),
        [("a".to_string(), "p".to_string())]
    );
    assert!(r.cluster_trust_bundles.contains_key("mesh.example:roots"));
    let keys: Vec<_> = r.http_routes.keys().cloned().collect();
    assert_eq!(keys, [("a".into(), "r1".into()), ("b".into(), "r2".into())]);
    assert_eq!(
        r.reference_grants.keys().cloned().collect::<Vec<_>>(),
        [("backend".to_string(), "g".to_string())]
    );
    assert_eq!(
        r.namespaces["a"].metadata.labels.as_ref().unwrap()["team"],
        "x"
    );
    assert!(r.gateway_classes.contains_key("pier"));
    assert!(r.gateways.is_empty() && r.secrets.is_empty());
}

#[test]
fn status_only_updates_do_not_change_the_configuration() {
    let old = route("a", "r", 1);
    let mut status_only = route("a", "r", 1);
    status_only.0.as_mut().unwrap().status = serde_json::from_value(json!({ "parents": [] })).ok();
    assert_eq!(
        Changes::Spec.classify(Some(&old), &status_only),
        Notify::Status
    );
    assert_eq!(
        Changes::Any.classify(Some(&old), &status_only),
        Notify::Config
    );
    assert_eq!(
        Changes::Spec.classify(Some(&old), &route("a", "r", 2)),
        Notify::Config
    );
    let mut labelled = route("a", "r", 1);
    labelled.0.as_mut().unwrap().metadata.labels = Some([("k".into(), "v".into())].into());
    assert_eq!(
        Changes::Spec.classify(Some(&old), &labelled),
        Notify::Config
    );
    assert_eq!(Changes::Spec.classify(None, &old), Notify::Config);
}

#[test]
fn reconnect_backoff_doubles_up_to_its_cap_and_resets() {
    let mut b = Reconnect::new(Duration::from_millis(100), Duration::from_millis(400));
    let within = |d: Duration, base: u64| {
        d >= Duration::from_millis(base * 8 / 10) && d <= Duration::from_millis(base * 12 / 10)
    };
    for base in [100, 200, 400, 400] {
        let d = b.next().unwrap();
        assert!(within(d, base), "{d:?} vs {base} ms");
    }
    b.reset();
    assert!(within(b.next().unwrap(), 100));
}

#[test]
fn watch_errors_are_classified_by_what_pier_does_about_them() {
    let api = |code| {
        watcher::Error::InitialListFailed(kube::Error::Api(
            Status::failure("x", "y").with_code(code).boxed(),
        ))
    };
    assert_eq!(classify(&api(404)), WatchError::NotFound);
    assert_eq!(classify(&api(403)), WatchError::Forbidden);
    assert_eq!(classify(&api(401)), WatchError::Forbidden);
    assert_eq!(classify(&api(503)), WatchError::Unavailable);
    assert_eq!(classify(&api(422)), WatchError::Other);
    assert_eq!(
        classify(&watcher::Error::WatchError(
            Status::failure("gone", "Expired").with_code(410).boxed()
        )),
        WatchError::Expired
    );
    assert_eq!(
        classify(&watcher::Error::WatchFailed(
            kube::Error::LinesCodecMaxLineLengthExceeded
        )),
        WatchError::Unavailable
    );
}

/// A Pod watch refused by RBAC is recorded for translation (and re-translates), until a list
/// goes through.
#[tokio::test(start_paused = true)]
async fn a_refused_pod_watch_is_known_until_it_lists() {
    let (ctx, mut config, _status) = ctx();
    let stores = Stores {
        refused: ctx.refused.clone(),
        ..Stores::default()
    };
    let forbidden = watcher::Error::InitialListFailed(kube::Error::Api(
        Status::failure("pods is forbidden", "Forbidden")
            .with_code(403)
            .boxed(),
    ));
    let run = |events: Vec<watcher::Result<Event<DeserializeGuard<PodObject>>>>| {
        watch::reflect(
            WatchKind::Pod,
            Changes::Immutable,
            futures::stream::iter(events),
            Writer::default(),
            ctx.clone(),
        )
    };
    run(vec![Ok(Event::Init), Err(forbidden)]).await;
    assert!(stores.resources().pods_refused);
    assert!(config.has_changed().unwrap());
    config.mark_unchanged();
    run(vec![Ok(Event::Init), Ok(Event::InitDone)]).await;
    assert!(!stores.resources().pods_refused);
    assert!(config.has_changed().unwrap());
}

/// The driver, fed a scripted stream: the latch drops on the first InitDone, managedFields are
/// gone, undecodable objects are counted, and each event says the right thing.
#[tokio::test]
async fn reflect_releases_the_latch_and_notifies() {
    let (ctx, mut config, mut status) = ctx();
    let mut pending = ctx.pending.subscribe();
    let writer = Writer::<DeserializeGuard<HttpRouteObject>>::default();
    let store = writer.as_reader();
    let mut with_status = route("a", "r1", 1);
    with_status.0.as_mut().unwrap().status = serde_json::from_value(json!({ "parents": [] })).ok();
    let events: Vec<watcher::Result<Event<DeserializeGuard<HttpRouteObject>>>> = vec![
        Ok(Event::Init),
        Ok(Event::InitApply(route("a", "r1", 1))),
        Ok(Event::InitApply(guard(json!({
            "metadata": { "name": "bad", "namespace": "a" },
            "spec": { "hostnames": 7 },
        })))),
        Ok(Event::InitDone),
    ];
    watch::reflect(
        WatchKind::HttpRoute,
        Changes::Spec,
        futures::stream::iter(events),
        writer,
        ctx.clone(),
    )
    .await;
    assert!(!pending.borrow_and_update().contains(&WatchKind::HttpRoute));
    assert!(config.has_changed().unwrap());
    config.mark_unchanged();
    assert_eq!(store.len(), 2);
    let r1 = store
        .get(&kube::runtime::reflector::ObjectRef::new("r1").within("a"))
        .unwrap();
    assert!(r1.0.as_ref().unwrap().metadata.managed_fields.is_none());
    let undecodable = ctx
        .metrics
        .undecodable
        .get_or_create(&KindLabels {
            kind: WatchKind::HttpRoute,
        })
        .get();
    assert_eq!(undecodable, 1);

    // A status-only update of a stored object wakes the status writer only.
    status.mark_unchanged();
    let mut writer = Writer::<DeserializeGuard<HttpRouteObject>>::default();
    writer.apply_watcher_event(&Event::Apply(route("a", "r1", 1)));
    let store = writer.as_reader();
    watch::reflect(
        WatchKind::HttpRoute,
        Changes::Spec,
        futures::stream::iter(vec![Ok(Event::Apply(with_status))]),
        writer,
        ctx.clone(),
    )
    .await;
    assert!(status.has_changed().unwrap());
    assert!(!config.has_changed().unwrap());
    let r1 = store
        .get(&kube::runtime::reflector::ObjectRef::new("r1").within("a"))
        .unwrap();
    assert!(r1.0.as_ref().unwrap().status.is_some());
}

/// `410 Gone` relists at once after a quiet spell, but a 410 that comes back right after the
/// relist backs off, growing, though every list in between succeeds (a server or proxy that
/// expires every watch must not be listed in a loop).
#[tokio::test(start_paused = true)]
async fn a_watch_expired_again_and_again_backs_off() {
    let (ctx, _config, _status) = ctx();
    let gone = || {
        Err(watcher::Error::WatchError(
            Status::failure("too old resource version", "Expired")
                .with_code(410)
                .boxed(),
        ))
    };
    // Where the driver is when each item is taken: one timestamp per item.
    let start = tokio::time::Instant::now();
    let taken = Arc::new(std::sync::Mutex::new(Vec::new()));
    let cycle = |_| {
        vec![
            Ok(Event::Init),
            Ok(Event::InitApply(route("a", "r1", 1))),
            Ok(Event::InitDone),
            gone(),
        ]
    };
    let items: Vec<watcher::Result<Event<DeserializeGuard<HttpRouteObject>>>> =
        (0..6).flat_map(cycle).collect();
    let stream = {
        let taken = taken.clone();
        futures::StreamExt::inspect(futures::stream::iter(items), move |_| {
            taken.lock().unwrap().push(start.elapsed())
        })
    };
    watch::reflect(
        WatchKind::HttpRoute,
        Changes::Spec,
        stream,
        Writer::default(),
        ctx,
    )
    .await;
    let taken = taken.lock().unwrap();
    // The relist that each 410 starts (its `Init`), after the 410.
    let waits: Vec<Duration> = (1..6).map(|c| taken[c * 4] - taken[c * 4 - 1]).collect();
    assert_eq!(waits[0], Duration::ZERO, "the first 410 relists at once");
    for w in waits.windows(2).skip(1) {
        assert!(w[0] > Duration::ZERO && w[1] >= w[0], "{waits:?}");
    }
    assert!(
        waits[4] >= Duration::from_secs(2),
        "the fifth 410 in a row waits longer: {waits:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn changes_wait_for_every_kind_then_coalesce() {
    let (config_tx, config_rx) = channel::channel(());
    let kinds: BTreeSet<WatchKind> = [WatchKind::Gateway, WatchKind::Service].into();
    let (pending_tx, pending_rx) = channel::channel(kinds);
    let (tx, mut rx) = mpsc::channel(1);
    tokio::spawn(coalesce(config_rx, pending_rx, tx));

    config_tx.send_replace(());
    pending_tx.send_modify(|p| {
        p.remove(&WatchKind::Gateway);
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(rx.try_recv().is_err(), "not before every kind has listed");

    pending_tx.send_modify(|p| {
        p.remove(&WatchKind::Service);
    });
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(rx.try_recv().is_ok(), "the first publish comes at once");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        rx.try_recv().is_err(),
        "changes before ready are in the first one"
    );

    // A change every 50 ms for a second is never quiet for QUIET: MAX_DELAY caps the wait, so
    // it gives a rebuild about every 500 ms, not none (uncapped) and not one per change.
    let start = tokio::time::Instant::now();
    let mut rebuilds = vec![];
    for _ in 0..20 {
        config_tx.send_replace(());
        tokio::time::sleep(Duration::from_millis(50)).await;
        while rx.try_recv().is_ok() {
            rebuilds.push(start.elapsed());
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    while rx.try_recv().is_ok() {
        rebuilds.push(start.elapsed());
    }
    assert!((2..=3).contains(&rebuilds.len()), "{rebuilds:?}");
    assert!(
        rebuilds[0] <= MAX_DELAY + Duration::from_millis(50),
        "{rebuilds:?}"
    );
}

/// A 404 (CRD not installed, API not enabled) counts as an empty list for an optional kind,
/// and keeps a required kind unready.
#[tokio::test(start_paused = true)]
async fn an_unserved_optional_kind_does_not_block_readiness() {
    let not_found = || -> watcher::Result<Event<DeserializeGuard<BackendTlsPolicy>>> {
        Err(watcher::Error::InitialListFailed(kube::Error::Api(
            Status::failure(
                "the server could not find the requested resource",
                "NotFound",
            )
            .with_code(404)
            .boxed(),
        )))
    };
    for (kind, released) in [
        (WatchKind::BackendTlsPolicy, true),
        (WatchKind::ClusterTrustBundle, true),
        (WatchKind::SecurityPolicy, true),
        (WatchKind::HttpRoute, false),
    ] {
        let (ctx, _config, _status) = ctx();
        let pending = ctx.pending.subscribe();
        let events = vec![Ok(Event::Init), not_found(), Ok(Event::Init), not_found()];
        watch::reflect(
            kind,
            Changes::Spec,
            futures::stream::iter(events),
            Writer::default(),
            ctx.clone(),
        )
        .await;
        assert_eq!(!pending.borrow().contains(&kind), released, "{kind}");
        let errors = ctx
            .metrics
            .errors
            .get_or_create(&ErrorLabels {
                kind,
                reason: WatchError::NotFound,
            })
            .get();
        assert_eq!(errors, 2, "{kind}: still counted, and retried");
    }
}

/// SecurityPolicy is optional when its CRD is missing (there can be no policy), but not when
/// pier may not read it (403): serving routes without the access rules someone wrote would
/// fail open, so pier stays unready.
#[tokio::test(start_paused = true)]
async fn a_refused_security_policy_watch_blocks_readiness() {
    let forbidden = || -> watcher::Result<Event<DeserializeGuard<SecurityPolicy>>> {
        Err(watcher::Error::InitialListFailed(kube::Error::Api(
            Status::failure("securitypolicies.pier.dev is forbidden", "Forbidden")
                .with_code(403)
                .boxed(),
        )))
    };
    let kind = WatchKind::SecurityPolicy;
    let (ctx, _config, _status) = ctx();
    let pending = ctx.pending.subscribe();
    let events = vec![Ok(Event::Init), forbidden(), Ok(Event::Init), forbidden()];
    watch::reflect(
        kind,
        Changes::Spec,
        futures::stream::iter(events),
        Writer::default(),
        ctx.clone(),
    )
    .await;
    assert!(pending.borrow().contains(&kind));
    assert!(ctx.refused.contains(kind));
}

/// Every watch finds the API server unreachable at once: one log line for all of them (per
/// minute), again only after it answered in between.
#[test]
fn an_unreachable_api_server_is_logged_once_for_every_kind() {
    let log = super::watch::ApiServerLog::new("https://192.0.2.1:6443/");
    let logged = (0..15)
        .filter(|_| log.unreachable("connect refused", false))
        .count();
    assert_eq!(logged, 1);
    log.reachable();
    assert!(log.unreachable("connect refused", true));
    assert!(!log.unreachable("connect refused", true));
}

/// A ClusterTrustBundle watch the API server answers 404 (the beta API off) is recorded for
/// translation and the GatewayClass's features (and re-translates), until a list goes through.
#[tokio::test(start_paused = true)]
async fn an_unserved_cluster_trust_bundle_api_is_known_until_it_lists() {
    let (ctx, mut config, _status) = ctx();
    let stores = Stores {
        unserved: ctx.unserved.clone(),
        ..Stores::default()
    };
    let not_found = watcher::Error::InitialListFailed(kube::Error::Api(
        Status::failure(
            "the server could not find the requested resource",
            "NotFound",
        )
        .with_code(404)
        .boxed(),
    ));
    let run = |events: Vec<watcher::Result<Event<DeserializeGuard<ClusterTrustBundle>>>>| {
        watch::reflect(
            WatchKind::ClusterTrustBundle,
            Changes::Immutable,
            futures::stream::iter(events),
            Writer::default(),
            ctx.clone(),
        )
    };
    assert!(!stores.resources().trust_bundles_unserved);
    run(vec![Ok(Event::Init), Err(not_found)]).await;
    assert!(stores.resources().trust_bundles_unserved);
    assert!(!stores.resources().pods_refused);
    assert!(config.has_changed().unwrap());
    config.mark_unchanged();
    run(vec![Ok(Event::Init), Ok(Event::InitDone)]).await;
    assert!(!stores.resources().trust_bundles_unserved);
    assert!(config.has_changed().unwrap());
}
