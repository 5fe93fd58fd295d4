//! Client certificate validation rules of HTTPS ports, with certificates made by rcgen.

use rcgen::string::Ia5String;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType};

use super::*;
use crate::model::{Port, Protocol};

const PORT: PortKey = PortKey {
    address: None,
    port: 8443,
    udp: false,
};

struct Ca {
    der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    fn new() -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let der = params.self_signed(&key).unwrap().der().clone();
        Self {
            der,
            issuer: Issuer::new(params, key),
        }
    }

    fn leaf(&self, cn: &str, sans: Vec<SanType>) -> CertificateDer<'static> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = sans;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.signed_by(&key, &self.issuer).unwrap().der().clone()
    }

    fn auth(&self, mode: ClientAuthMode) -> ClientAuth {
        client_auth(&TrustBundle::from_certs([self.der.clone()]).unwrap(), mode).unwrap()
    }
}

fn snapshot(auth: Option<ClientAuth>) -> Snapshot {
    Snapshot {
        generation: 1,
        ports: vec![Port {
            address: None,
            port: PORT.port,
            protocol: Protocol::Https,
            proxy_protocol: false,
            listeners: vec![],
            certs: None,
            client_auth: auth,
            access_log_on: false,
            tls_profiles: false,
            client: None,
            quic: None,
        }],
    }
}

fn now() -> UnixTime {
    UnixTime::now()
}

#[test]
fn valid_only_is_mandatory_and_refuses_another_ca() {
    let (ca, other) = (Ca::new(), Ca::new());
    let shared = Arc::new(ArcSwap::from_pointee(snapshot(Some(
        ca.auth(ClientAuthMode::AllowValidOnly),
    ))));
    let v = SnapshotClientVerifier::new(shared, PORT);
    assert!(v.offer_client_auth() && v.client_auth_mandatory());
    assert!(
        v.verify_client_cert(&ca.leaf("a", vec![]), &[], now())
            .is_ok()
    );
    let foreign = other.leaf("a", vec![]);
    assert!(v.verify_client_cert(&foreign, &[], now()).is_err());
}

#[test]
fn insecure_fallback_accepts_any_certificate_but_only_a_valid_one_verifies() {
    let (ca, other) = (Ca::new(), Ca::new());
    let auth = ca.auth(ClientAuthMode::AllowInsecureFallback);
    let shared = Arc::new(ArcSwap::from_pointee(snapshot(Some(auth.clone()))));
    let v = SnapshotClientVerifier::new(shared, PORT);
    assert!(v.offer_client_auth() && !v.client_auth_mandatory());
    let foreign = other.leaf("a", vec![]);
    assert!(v.verify_client_cert(&foreign, &[], now()).is_ok());
    assert!(!verifies(&auth, &[foreign], now()));
    assert!(verifies(&auth, &[ca.leaf("a", vec![])], now()));
    assert!(!verifies(&auth, &[], now()));
}

#[test]
fn a_port_without_validation_does_not_ask() {
    let shared = Arc::new(ArcSwap::from_pointee(snapshot(None)));
    let v = SnapshotClientVerifier::new(shared, PORT);
    assert!(!v.offer_client_auth() && !v.client_auth_mandatory());
}

#[test]
fn the_new_bundle_applies_from_the_next_snapshot() {
    let (old, new) = (Ca::new(), Ca::new());
    let shared = Arc::new(ArcSwap::from_pointee(snapshot(Some(
        old.auth(ClientAuthMode::AllowValidOnly),
    ))));
    let v = SnapshotClientVerifier::new(shared.clone(), PORT);
    let old_leaf = old.leaf("a", vec![]);
    assert!(v.verify_client_cert(&old_leaf, &[], now()).is_ok());
    shared.store(Arc::new(snapshot(Some(
        new.auth(ClientAuthMode::AllowValidOnly),
    ))));
    assert!(v.verify_client_cert(&old_leaf, &[], now()).is_err());
    let new_leaf = new.leaf("a", vec![]);
    assert!(v.verify_client_cert(&new_leaf, &[], now()).is_ok());
}

#[test]
fn a_session_opens_only_under_the_policy_it_was_sealed_under() {
    let (ca, other) = (Ca::new(), Ca::new());
    let shared = Arc::new(ArcSwap::from_pointee(snapshot(None)));
    let tag = PolicyTag {
        snapshot: shared.clone(),
        port: PORT,
        carries: Carries::Http,
        profile: [0; 8],
    };
    let unvalidated = tag.seal(b"session");
    assert_eq!(
        tag.open(unvalidated.clone()).as_deref(),
        Some(&b"session"[..])
    );
    shared.store(Arc::new(snapshot(Some(
        ca.auth(ClientAuthMode::AllowValidOnly),
    ))));
    assert_eq!(tag.open(unvalidated), None, "made without validation");
    let sealed = tag.seal(b"session");
    assert!(tag.open(sealed.clone()).is_some());
    // The same CA under another mode, or another CA: another policy.
    shared.store(Arc::new(snapshot(Some(
        ca.auth(ClientAuthMode::AllowInsecureFallback),
    ))));
    assert_eq!(tag.open(sealed.clone()), None);
    shared.store(Arc::new(snapshot(Some(
        other.auth(ClientAuthMode::AllowValidOnly),
    ))));
    assert_eq!(tag.open(sealed), None);
    assert_eq!(tag.open(vec![0; 3]), None, "shorter than a tag");
}

#[test]
fn a_session_opens_only_under_the_tls_settings_it_was_sealed_under() {
    let shared = Arc::new(ArcSwap::from_pointee(snapshot(None)));
    let tag = |profile: &TlsProfile| PolicyTag {
        snapshot: shared.clone(),
        port: PORT,
        carries: Carries::Http,
        profile: profile_digest(profile),
    };
    let only13 = TlsProfile {
        tls12: false,
        ..TlsProfile::DEFAULT
    };
    let (default, strict) = (tag(&TlsProfile::DEFAULT), tag(&only13));
    assert_eq!(default.profile, [0; 8], "pier's default seals as before");
    let sealed = default.seal(b"session");
    assert_eq!(strict.open(sealed.clone()), None);
    assert!(default.open(sealed).is_some());
    let sealed = strict.seal(b"session");
    assert_eq!(default.open(sealed.clone()), None);
    assert!(tag(&only13).open(sealed).is_some());
}

#[test]
fn identity_header_is_the_subject_then_the_sans_in_order() {
    let ca = Ca::new();
    let sans = vec![
        SanType::DnsName(Ia5String::try_from("alice.example").unwrap()),
        SanType::URI(Ia5String::try_from("spiffe://example.org/alice").unwrap()),
    ];
    let v = client_identity(&ca.leaf("alice", sans)).unwrap();
    assert_eq!(
        v.header.to_str().unwrap(),
        "Subject=\"CN=alice\";DNS=alice.example;URI=spiffe://example.org/alice"
    );
    assert_eq!(
        &*v.sans,
        &[
            Box::from("alice.example"),
            Box::from("spiffe://example.org/alice")
        ]
    );
    assert_eq!(client_identity(&CertificateDer::from(vec![1, 2, 3])), None);
}
