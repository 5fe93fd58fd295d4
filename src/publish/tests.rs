use std::sync::Arc;

use super::{Publisher, Shared};
use crate::metrics::ControlMetrics;
use crate::model::ObjectRef;
use crate::translate::test_support::{
    BASE, listener, listener_cond, resources, self_signed, tls_secret,
};
use crate::translate::{Resources, Settings};

/// A Gateway `default/g` with an HTTPS listener on 443 whose certificate is Secret `cert`
/// (the GatewayClass comes from [`BASE`]).
const HTTPS_GATEWAY: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: g, namespace: default}
spec:
  gatewayClassName: pier
  listeners:
    - name: tls
      protocol: HTTPS
      port: 443
      hostname: foo.example.com
      tls: {certificateRefs: [{name: cert}]}
";

fn gateway_only() -> Resources {
    resources(&format!("{BASE}---\n{HTTPS_GATEWAY}"))
}

fn with_secret(crt: &str, key: &str) -> Resources {
    resources(&format!(
        "{BASE}---\n{HTTPS_GATEWAY}---\n{}",
        tls_secret("default", "cert", crt, key)
    ))
}

fn publisher() -> (Arc<Shared>, Publisher) {
    let shared = Arc::new(Shared::default());
    let metrics = ControlMetrics::register(&mut crate::metrics::registry());
    let p = Publisher::new(shared.clone(), Settings::default(), metrics);
    (shared, p)
}

fn served(shared: &Shared) -> Option<Arc<rustls::sign::CertifiedKey>> {
    let snapshot = shared.snapshot.load_full();
    let port = snapshot.ports.iter().find(|p| p.port == 443)?;
    port.certs.as_ref()?.resolve(Some("foo.example.com"))
}

fn tls_listener_cond(shared: &Shared, t: &str) -> (bool, String, String) {
    let statuses = shared.statuses.borrow().clone();
    let g = &statuses.gateways[&ObjectRef::new("default", "g")];
    listener_cond(listener(g, "tls"), t)
}

const GARBAGE_CERT: &str =
    "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n";

#[tokio::test]
async fn a_corrupted_listener_secret_keeps_the_last_good_certificate() {
    let (crt, key) = self_signed(&["foo.example.com"]);
    let (shared, mut p) = publisher();
    p.publish(with_secret(&crt, &key)).await;
    let good = served(&shared).expect("the good certificate is served");
    assert!(tls_listener_cond(&shared, "ResolvedRefs").0);

    // The Secret goes bad: the listener keeps serving the certificate it had, and says so.
    p.publish(with_secret(GARBAGE_CERT, &key)).await;
    let kept = served(&shared).expect("the last good certificate is still served");
    assert!(Arc::ptr_eq(&good, &kept));
    let (ok, reason, msg) = tls_listener_cond(&shared, "ResolvedRefs");
    assert!(!ok);
    assert_eq!(reason, "InvalidCertificateRef");
    assert!(msg.contains("default/cert"), "{msg}");
    assert!(msg.contains("last good certificate"), "{msg}");
    assert!(tls_listener_cond(&shared, "Programmed").0);

    // It stays kept across further reloads while the Secret is still bad.
    p.publish(with_secret(GARBAGE_CERT, &key)).await;
    assert!(Arc::ptr_eq(&good, &served(&shared).unwrap()));

    // A good Secret again replaces it.
    let (crt2, key2) = self_signed(&["foo.example.com"]);
    p.publish(with_secret(&crt2, &key2)).await;
    let new = served(&shared).unwrap();
    assert!(!Arc::ptr_eq(&good, &new));
    assert!(tls_listener_cond(&shared, "ResolvedRefs").0);
}

#[tokio::test]
async fn a_bad_listener_secret_at_start_has_no_last_good_certificate() {
    let (_, key) = self_signed(&["foo.example.com"]);
    let (shared, mut p) = publisher();
    p.publish(with_secret(GARBAGE_CERT, &key)).await;
    assert!(served(&shared).is_none());
    let (ok, reason, msg) = tls_listener_cond(&shared, "ResolvedRefs");
    assert!(!ok);
    assert_eq!(reason, "InvalidCertificateRef");
    assert!(!msg.contains("last good"), "{msg}");
    assert!(!tls_listener_cond(&shared, "Programmed").0);
}

#[tokio::test]
async fn a_deleted_listener_secret_is_not_kept() {
    let (crt, key) = self_signed(&["foo.example.com"]);
    let (shared, mut p) = publisher();
    p.publish(with_secret(&crt, &key)).await;
    assert!(served(&shared).is_some());
    p.publish(gateway_only()).await;
    assert!(served(&shared).is_none());
}
