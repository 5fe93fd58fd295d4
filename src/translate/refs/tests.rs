//! References: ReferenceGrant, Secret -> certificate.

use super::*;
use crate::translate::test_support::{resources, self_signed, tls_secret};

const GRANT: &str = r#"
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: g, namespace: backend}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: app}]
  to: [{group: "", kind: Service, name: api}]
"#;

fn from_app() -> RefFrom<'static> {
    RefFrom {
        group: "gateway.networking.k8s.io",
        kind: "HTTPRoute",
        namespace: "app",
    }
}

fn to_service<'a>(ns: &'a str, name: &'a str) -> RefTo<'a> {
    RefTo {
        group: "",
        kind: "Service",
        namespace: ns,
        name,
    }
}

#[test]
fn reference_grant_allows_matching_from_and_to() {
    let r = resources(GRANT);
    assert!(reference_granted(
        &r,
        from_app(),
        to_service("backend", "api")
    ));
}

#[test]
fn reference_grant_with_a_name_allows_only_that_name() {
    let r = resources(GRANT);
    assert!(!reference_granted(
        &r,
        from_app(),
        to_service("backend", "db")
    ));
}

#[test]
fn reference_grant_in_another_namespace_grants_nothing() {
    let r = resources(GRANT);
    assert!(!reference_granted(
        &r,
        from_app(),
        to_service("other", "api")
    ));
}

#[test]
fn reference_grant_for_another_kind_or_namespace_grants_nothing() {
    let r = resources(GRANT);
    let gateway = RefFrom {
        kind: "Gateway",
        ..from_app()
    };
    assert!(!reference_granted(
        &r,
        gateway,
        to_service("backend", "api")
    ));
    let elsewhere = RefFrom {
        namespace: "elsewhere",
        ..from_app()
    };
    assert!(!reference_granted(
        &r,
        elsewhere,
        to_service("backend", "api")
    ));
}

#[test]
fn tls_secret_loads_with_its_san_names() {
    let (crt, key) = self_signed(&["Foo.example.com", "*.bar.example.com"]);
    let r = resources(&tls_secret("ns", "tls", &crt, &key));
    let c = server_cert(&r, &ObjectRef::new("ns", "tls")).unwrap();
    assert_eq!(c.names, vec!["foo.example.com", "*.bar.example.com"]);
}

#[test]
fn tls_secret_with_a_key_of_another_certificate_is_key_mismatch() {
    let (crt, _) = self_signed(&["a.example.com"]);
    let (_, other_key) = self_signed(&["b.example.com"]);
    let r = resources(&tls_secret("ns", "tls", &crt, &other_key));
    let e = server_cert(&r, &ObjectRef::new("ns", "tls")).unwrap_err();
    assert!(matches!(e, CertError::KeyMismatch(_)), "{e}");
}

#[test]
fn secret_of_another_type_is_rejected() {
    let r = resources(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: ns}\ntype: Opaque\n",
    );
    let e = server_cert(&r, &ObjectRef::new("ns", "s")).unwrap_err();
    assert!(matches!(e, CertError::WrongType(_)));
}

#[test]
fn tls_secret_without_a_key_or_with_garbage_is_rejected() {
    let r = resources(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: ns}\n\
         type: kubernetes.io/tls\nstringData: {tls.crt: nothing here}\n",
    );
    let e = server_cert(&r, &ObjectRef::new("ns", "s")).unwrap_err();
    assert!(matches!(e, CertError::NoCertificate(_)), "{e}");
    let (crt, _) = self_signed(&["a.example.com"]);
    let r = resources(&tls_secret("ns", "s", &crt, "not a key"));
    let e = server_cert(&r, &ObjectRef::new("ns", "s")).unwrap_err();
    assert!(matches!(e, CertError::KeyPem(..)), "{e}");
    assert!(matches!(
        server_cert(&r, &ObjectRef::new("ns", "missing")).unwrap_err(),
        CertError::NotFound(_)
    ));
}

#[test]
fn certificate_errors_never_include_key_material() {
    let (crt, key) = self_signed(&["a.example.com"]);
    let (_, other) = self_signed(&["b.example.com"]);
    let r = resources(&tls_secret("ns", "s", &crt, &other));
    let e = server_cert(&r, &ObjectRef::new("ns", "s")).unwrap_err();
    let msg = crate::translate::error_chain(&e);
    assert!(!msg.contains("PRIVATE KEY") && !msg.contains(&key[30..60]));
}
