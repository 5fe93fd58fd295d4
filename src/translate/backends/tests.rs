//! Service + EndpointSlices -> backends and endpoints; per-endpoint identity.

use std::sync::LazyLock;

use super::*;
use crate::translate::test_support::resources;

static SETTINGS: LazyLock<Settings> = LazyLock::new(Settings::default);

const SERVICE: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ns}
spec:
  ports:
  - {name: http, port: 80, appProtocol: kubernetes.io/h2c}
  - {name: admin, port: 9000}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: ns, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080}, {name: admin, port: 9090}]
endpoints:
- addresses: [10.0.0.2]
- addresses: [10.0.0.1]
  conditions: {ready: true}
- addresses: [10.0.0.9]
  conditions: {ready: false}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-2, namespace: ns, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- addresses: [10.0.0.2, 10.0.0.3]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-fqdn, namespace: ns, labels: {kubernetes.io/service-name: web}}
addressType: FQDN
ports: [{name: http, port: 8080}]
endpoints:
- addresses: [web.example.com]
"#;

fn addrs(b: &Backend) -> Vec<String> {
    b.endpoints.iter().map(|e| e.addr.to_string()).collect()
}

#[test]
fn endpoint_without_ready_condition_counts_as_ready() {
    let r = resources(SERVICE);
    let b = Backends::new(&r, &SETTINGS, &EndpointPool::default())
        .service_port("ns", "web", 80, TlsCtx::default(), Traffic::Http)
        .unwrap();
    assert!(addrs(&b).contains(&"10.0.0.2:8080".to_string()));
}

#[test]
fn not_ready_endpoint_is_left_out() {
    let r = resources(SERVICE);
    let b = Backends::new(&r, &SETTINGS, &EndpointPool::default())
        .service_port("ns", "web", 80, TlsCtx::default(), Traffic::Http)
        .unwrap();
    assert!(!addrs(&b).iter().any(|a| a.starts_with("10.0.0.9")));
}

#[test]
fn endpoints_are_sorted_and_deduplicated_across_slices_fqdn_ignored() {
    let r = resources(SERVICE);
    let b = Backends::new(&r, &SETTINGS, &EndpointPool::default())
        .service_port("ns", "web", 80, TlsCtx::default(), Traffic::Http)
        .unwrap();
    assert_eq!(
        addrs(&b),
        vec!["10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"]
    );
}

#[test]
fn slice_port_is_chosen_by_the_service_port_name() {
    let r = resources(SERVICE);
    let b = Backends::new(&r, &SETTINGS, &EndpointPool::default())
        .service_port("ns", "web", 9000, TlsCtx::default(), Traffic::Http)
        .unwrap();
    // web-2 has no `admin` port: only web-1's endpoints serve it.
    assert_eq!(addrs(&b), vec!["10.0.0.1:9090", "10.0.0.2:9090"]);
    assert_eq!(b.protocol, AppProtocol::Http1);
}

#[test]
fn unnamed_service_port_matches_an_unnamed_slice_port() {
    let r = resources(
        r#"
apiVersion: v1
kind: Service
metadata: {name: one, namespace: ns}
spec: {ports: [{port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: one-1, namespace: ns, labels: {kubernetes.io/service-name: one}}
addressType: IPv6
ports: [{name: "", port: 8080}]
endpoints: [{addresses: ["fd00::1"]}]
"#,
    );
    let b = Backends::new(&r, &SETTINGS, &EndpointPool::default())
        .service_port("ns", "one", 80, TlsCtx::default(), Traffic::Http)
        .unwrap();
    assert_eq!(addrs(&b), vec!["[fd00::1]:8080"]);
}

#[test]
fn one_backend_per_service_port_is_shared() {
    let r = resources(SERVICE);
    let pool = EndpointPool::default();
    let mut backends = Backends::new(&r, &SETTINGS, &pool);
    let a = backends
        .service_port("ns", "web", 80, TlsCtx::default(), Traffic::Http)
        .unwrap();
    let b = backends
        .service_port("ns", "web", 80, TlsCtx::default(), Traffic::Http)
        .unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(a.protocol, AppProtocol::H2c);
}

#[test]
fn missing_service_or_port_is_an_error() {
    let r = resources(SERVICE);
    let pool = EndpointPool::default();
    let mut backends = Backends::new(&r, &SETTINGS, &pool);
    assert_eq!(
        backends
            .service_port("ns", "nope", 80, TlsCtx::default(), Traffic::Http)
            .unwrap_err(),
        BackendError::ServiceNotFound(ObjectRef::new("ns", "nope"))
    );
    assert_eq!(
        backends
            .service_port("ns", "web", 81, TlsCtx::default(), Traffic::Http)
            .unwrap_err(),
        BackendError::PortNotFound(ObjectRef::new("ns", "web"), 81)
    );
}

#[test]
fn app_protocol_follows_kubernetes_io_names() {
    assert_eq!(app_protocol(Some("kubernetes.io/h2c")), AppProtocol::H2c);
    assert_eq!(
        app_protocol(Some("kubernetes.io/ws")),
        AppProtocol::WebSocket
    );
    assert_eq!(
        app_protocol(Some("kubernetes.io/wss")),
        AppProtocol::WebSocket
    );
    assert_eq!(app_protocol(Some("http")), AppProtocol::Http1);
    assert_eq!(app_protocol(None), AppProtocol::Http1);
}

#[test]
fn endpoint_load_state_carries_over_from_the_previous_snapshot() {
    let r = resources(SERVICE);
    let first = Backends::new(&r, &SETTINGS, &EndpointPool::default())
        .service_port("ns", "web", 80, TlsCtx::default(), Traffic::Http)
        .unwrap();
    first.endpoints[0]
        .stats
        .in_flight
        .store(7, std::sync::atomic::Ordering::Relaxed);
    let mut pool = EndpointPool::default();
    first.endpoints.iter().for_each(|e| pool.insert(e));
    let second = Backends::new(&r, &SETTINGS, &pool)
        .service_port("ns", "web", 80, TlsCtx::default(), Traffic::Http)
        .unwrap();
    assert_eq!(second.endpoints[0].load(), 7);
    assert!(Arc::ptr_eq(
        &first.endpoints[0].stats,
        &second.endpoints[0].stats
    ));
}

#[test]
fn the_max_requests_annotation_sets_the_backends_limit_and_its_load_carries_over() {
    let annotated = |value: &str| {
        resources(&SERVICE.replacen(
            "metadata: {name: web, namespace: ns}",
            &format!("metadata: {{name: web, namespace: ns, annotations: {{pier.dev/max-requests: {value:?}}}}}"),
            1,
        ))
    };
    let limit = |r: &Resources| {
        Backends::new(r, &SETTINGS, &EndpointPool::default())
            .service_port("ns", "web", 80, TlsCtx::default(), Traffic::Http)
            .unwrap()
            .max_requests
    };
    assert_eq!(limit(&annotated("100")), Some(100));
    assert_eq!(limit(&annotated(" 7 ")), Some(7));
    // Not a positive integer: ignored (pier's default applies).
    for bad in ["0", "-1", "ten", ""] {
        assert_eq!(limit(&annotated(bad)), None, "{bad:?}");
    }
    assert_eq!(limit(&resources(SERVICE)), None);

    // The queue's room: 0 is a value (none wait, over pier's default), not "unset".
    let pending = |value: &str| {
        let r = resources(&SERVICE.replacen(
            "metadata: {name: web, namespace: ns}",
            &format!("metadata: {{name: web, namespace: ns, annotations: {{pier.dev/max-pending-requests: {value:?}}}}}"),
            1,
        ));
        Backends::new(&r, &SETTINGS, &EndpointPool::default())
            .service_port("ns", "web", 80, TlsCtx::default(), Traffic::Http)
            .unwrap()
            .max_pending
    };
    assert_eq!(pending("50"), Some(50));
    assert_eq!(pending("0"), Some(0));
    assert_eq!(pending("many"), None);

    // Both ports' variants of one Service port share one load, and the next snapshot keeps it.
    let r = annotated("100");
    let first = Backends::new(&r, &SETTINGS, &EndpointPool::default())
        .service_port("ns", "web", 80, TlsCtx::default(), Traffic::Http)
        .unwrap();
    let mut pool = EndpointPool::default();
    pool.insert_backend(&first);
    let mut backends = Backends::new(&r, &SETTINGS, &pool);
    let second = backends
        .service_port("ns", "web", 80, TlsCtx::default(), Traffic::Http)
        .unwrap();
    let as_grpc = backends
        .service_port("ns", "web", 80, TlsCtx::default(), Traffic::Http2)
        .unwrap();
    assert!(Arc::ptr_eq(&first.load, &second.load));
    assert!(Arc::ptr_eq(&second.load, &as_grpc.load));
    let other_port = backends
        .service_port("ns", "web", 9000, TlsCtx::default(), Traffic::Http)
        .unwrap();
    assert!(!Arc::ptr_eq(&second.load, &other_port.load));
}

#[test]
fn the_outlier_annotations_override_pier_defaults_field_by_field() {
    use crate::model::{Outlier, OutlierOverride};
    use std::time::Duration;
    let annotated = |annotations: &str| {
        resources(&SERVICE.replacen(
            "metadata: {name: web, namespace: ns}",
            &format!("metadata: {{name: web, namespace: ns, annotations: {{{annotations}}}}}"),
            1,
        ))
    };
    let outlier = |r: &Resources| {
        Backends::new(r, &SETTINGS, &EndpointPool::default())
            .service_port("ns", "web", 80, TlsCtx::default(), Traffic::Http)
            .unwrap()
            .outlier
    };
    let both = outlier(&annotated(
        "pier.dev/outlier-consecutive-failures: '0', pier.dev/outlier-ejection: 1m30s",
    ));
    assert_eq!(
        both,
        OutlierOverride {
            consecutive_failures: Some(0),
            ejection: Some(Duration::from_secs(90)),
            ..Default::default()
        }
    );
    let defaults = Outlier::default();
    let only_ejection = outlier(&annotated("pier.dev/outlier-ejection: 250ms"));
    assert_eq!(
        only_ejection.over(defaults),
        Outlier {
            ejection: Duration::from_millis(250),
            ..defaults
        }
    );
    // What does not parse (or a zero ejection) is ignored: pier's default applies.
    for bad in [
        "pier.dev/outlier-consecutive-failures: 'five'",
        "pier.dev/outlier-consecutive-failures: '-1'",
        "pier.dev/outlier-ejection: '30'",
        "pier.dev/outlier-ejection: 0s",
    ] {
        assert!(outlier(&annotated(bad)).is_none(), "{bad}");
    }
    assert!(outlier(&resources(SERVICE)).is_none());
}
