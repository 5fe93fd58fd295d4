//! Upstream verifier and config rules, with certificates made by rcgen at test time.

use std::sync::Arc;

use rcgen::string::Ia5String;
use rcgen::{
    BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

const SPIFFE_WEB: &str = "spiffe://cluster.local/ns/app/sa/web";
const MESH_SNI: &str = "web.app.svc.cluster.local";

/// A throwaway CA.
struct Ca {
    der: CertificateDer<'static>,
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A leaf certificate: DER, PEM chain (leaf only) and key PEM.
struct Leaf {
    der: CertificateDer<'static>,
    pem: String,
    key_pem: String,
}

impl Ca {
    fn new(cn: &str) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).unwrap();
        Self {
            der: cert.der().clone(),
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    fn leaf(&self, sans: Vec<SanType>, tweak: impl FnOnce(&mut CertificateParams)) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = sans;
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        tweak(&mut params);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            der: cert.der().clone(),
            pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    fn workload(&self) -> Leaf {
        self.leaf(vec![uri(SPIFFE_WEB)], |_| {})
    }

    fn bundle(&self) -> TrustBundle {
        TrustBundle::from_pem(self.pem.as_bytes()).unwrap()
    }
}

fn uri(u: &str) -> SanType {
    SanType::URI(Ia5String::try_from(u).unwrap())
}

fn dns(d: &str) -> SanType {
    SanType::DnsName(Ia5String::try_from(d).unwrap())
}

fn verifier(ca: &Ca, check: PeerCheck) -> PeerVerifier {
    PeerVerifier {
        roots: ca.bundle().roots,
        check,
        algs: crate::tls::provider::signature_algorithms(),
    }
}

fn verify(v: &PeerVerifier, leaf: &Leaf) -> Result<(), Error> {
    let name = ServerName::try_from(MESH_SNI).unwrap();
    v.verify_server_cert(&leaf.der, &[], &name, &[], UnixTime::now())
        .map(|_| ())
}

fn mesh_alpn() -> Vec<Vec<u8>> {
    alpn_for(AppProtocol::Http1, &[])
}

// === verifier ===

#[test]
fn spiffe_only_workload_cert_is_accepted_without_dns_name() {
    let mesh = Ca::new("mesh");
    let v = verifier(&mesh, PeerCheck::ChainOnly);
    assert_eq!(verify(&v, &mesh.workload()), Ok(()));
}

#[test]
fn rogue_ca_is_unknown_issuer() {
    let mesh = Ca::new("mesh");
    let rogue = Ca::new("rogue");
    let v = verifier(&mesh, PeerCheck::ChainOnly);
    let err = verify(&v, &rogue.workload()).unwrap_err();
    assert_eq!(
        err,
        Error::InvalidCertificate(CertificateError::UnknownIssuer)
    );
    assert_eq!(classify(&err), HandshakeFailure::UnknownCa);
}

#[test]
fn expired_workload_cert_is_expired() {
    let mesh = Ca::new("mesh");
    let leaf = mesh.leaf(vec![uri(SPIFFE_WEB)], |p| {
        p.not_before = rcgen::date_time_ymd(2000, 1, 1);
        p.not_after = rcgen::date_time_ymd(2001, 1, 1);
    });
    let err = verify(&verifier(&mesh, PeerCheck::ChainOnly), &leaf).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidCertificate(CertificateError::ExpiredContext { .. })
        ),
        "{err:?}"
    );
    assert_eq!(classify(&err), HandshakeFailure::Expired);
}

#[test]
fn not_yet_valid_workload_cert_is_not_yet_valid() {
    let mesh = Ca::new("mesh");
    let leaf = mesh.leaf(vec![uri(SPIFFE_WEB)], |p| {
        p.not_before = rcgen::date_time_ymd(2400, 1, 1);
        p.not_after = rcgen::date_time_ymd(2401, 1, 1);
    });
    let err = verify(&verifier(&mesh, PeerCheck::ChainOnly), &leaf).unwrap_err();
    assert_eq!(classify(&err), HandshakeFailure::NotYetValid);
}

#[test]
fn required_uri_san_must_match() {
    let mesh = Ca::new("mesh");
    let other = SanRequirement::uri("spiffe://cluster.local/ns/app/sa/db").unwrap();
    let v = verifier(&mesh, PeerCheck::sans_or_chain(vec![other]));
    let err = verify(&v, &mesh.workload()).unwrap_err();
    assert_eq!(
        err,
        Error::InvalidCertificate(CertificateError::NotValidForName)
    );
    assert_eq!(classify(&err), HandshakeFailure::SanMismatch);

    let ok = SanRequirement::uri(SPIFFE_WEB).unwrap();
    let v = verifier(&mesh, PeerCheck::sans_or_chain(vec![other_dns(), ok]));
    assert_eq!(verify(&v, &mesh.workload()), Ok(()));
}

fn other_dns() -> SanRequirement {
    SanRequirement::dns("db.example.com").unwrap()
}

#[test]
fn required_dns_san_matches_a_wildcard_certificate() {
    let ca = Ca::new("ca");
    let leaf = ca.leaf(vec![dns("*.example.com")], |_| {});
    let want = SanRequirement::dns("API.example.com").unwrap();
    assert_eq!(
        verify(&verifier(&ca, PeerCheck::sans_or_chain(vec![want])), &leaf),
        Ok(())
    );
    let want = SanRequirement::dns("example.org").unwrap();
    assert_eq!(
        classify(&verify(&verifier(&ca, PeerCheck::sans_or_chain(vec![want])), &leaf).unwrap_err()),
        HandshakeFailure::SanMismatch
    );
}

#[test]
fn hostname_check_uses_the_configured_name() {
    let ca = Ca::new("ca");
    let leaf = ca.leaf(vec![dns("api.example.com")], |_| {});
    let name = |n: &str| PeerCheck::Name(ServerName::try_from(n.to_string()).unwrap());
    assert_eq!(
        verify(&verifier(&ca, name("api.example.com")), &leaf),
        Ok(())
    );
    let err = verify(&verifier(&ca, name("web.example.com")), &leaf).unwrap_err();
    assert_eq!(classify(&err), HandshakeFailure::SanMismatch);
}

#[test]
fn server_auth_key_usage_is_required_when_present() {
    let mesh = Ca::new("mesh");
    let leaf = mesh.leaf(vec![uri(SPIFFE_WEB)], |p| {
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    });
    let err = verify(&verifier(&mesh, PeerCheck::ChainOnly), &leaf).unwrap_err();
    assert_eq!(classify(&err), HandshakeFailure::BadCertificate, "{err:?}");
}

#[test]
fn classify_maps_alerts_and_alpn() {
    assert_eq!(
        classify(&Error::AlertReceived(
            rustls::AlertDescription::CertificateRequired
        )),
        HandshakeFailure::PeerRejected
    );
    assert_eq!(
        classify(&Error::NoApplicationProtocol),
        HandshakeFailure::AlpnMismatch
    );
    assert_eq!(
        classify(&Error::InvalidCertificate(
            CertificateError::ApplicationVerificationFailure
        )),
        HandshakeFailure::SanMismatch
    );
    assert_eq!(
        classify(&Error::InvalidCertificate(CertificateError::BadSignature)),
        HandshakeFailure::BadCertificate
    );
    assert_eq!(classify(&Error::DecryptError), HandshakeFailure::Other);
    let io = std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        Error::InvalidCertificate(CertificateError::UnknownIssuer),
    );
    assert_eq!(classify_io(&io), Some(HandshakeFailure::UnknownCa));
    assert_eq!(
        classify_io(&std::io::ErrorKind::ConnectionReset.into()),
        None
    );
}

// === bundles, identities, keys ===

#[test]
fn bundle_union_is_order_independent_and_deduplicated() {
    let a = Ca::new("a");
    let b = Ca::new("b");
    let ab = TrustBundle::from_pem(format!("{}{}{}", a.pem, b.pem, a.pem).as_bytes()).unwrap();
    let ba = TrustBundle::from_certs([b.der.clone(), a.der.clone()]).unwrap();
    assert_eq!(ab.len(), 2);
    assert_eq!(ab.digest, ba.digest);
    assert_ne!(ab.digest, a.bundle().digest);
}

#[test]
fn bundle_without_certificates_or_with_garbage_is_rejected() {
    assert!(matches!(
        TrustBundle::from_pem(b"no pem here"),
        Err(BundleError::Empty)
    ));
    let broken = "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n";
    assert!(matches!(
        TrustBundle::from_pem(broken.as_bytes()),
        Err(BundleError::Pem(_))
    ));
    let not_x509 = "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n";
    assert!(matches!(
        TrustBundle::from_pem(not_x509.as_bytes()),
        Err(BundleError::BadCertificate(0))
    ));
}

#[test]
fn client_identity_rejects_a_key_of_another_certificate_without_showing_it() {
    let ca = Ca::new("pier");
    let a = ca.leaf(vec![uri("spiffe://cluster.local/ns/pier/sa/gw")], |_| {});
    let b = ca.leaf(vec![uri("spiffe://cluster.local/ns/pier/sa/gw")], |_| {});
    assert!(ClientIdentity::from_pem(a.pem.as_bytes(), a.key_pem.as_bytes()).is_ok());
    let err = ClientIdentity::from_pem(a.pem.as_bytes(), b.key_pem.as_bytes()).unwrap_err();
    assert!(matches!(err, IdentityError::KeyMismatch));
    let err = ClientIdentity::from_pem(a.pem.as_bytes(), b"garbage").unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("PRIVATE"), "{shown}");
    let ok = ClientIdentity::from_pem(a.pem.as_bytes(), a.key_pem.as_bytes()).unwrap();
    assert!(!format!("{ok:?}").contains("PRIVATE"));
}

#[test]
fn trust_key_covers_bundle_client_sans_and_alpn() {
    let mesh = Ca::new("mesh");
    let other = Ca::new("other");
    let pier = mesh.leaf(vec![uri("spiffe://cluster.local/ns/pier/sa/gw")], |_| {});
    let id = ClientIdentity::from_pem(pier.pem.as_bytes(), pier.key_pem.as_bytes()).unwrap();
    let (b1, b2) = (mesh.bundle(), other.bundle());
    let chain = PeerCheck::ChainOnly;
    let sans = PeerCheck::sans_or_chain(vec![SanRequirement::uri(SPIFFE_WEB).unwrap()]);
    let alpn = mesh_alpn();
    let spec = |roots, client, check| ConfigSpec {
        roots,
        client,
        check,
        alpn: &alpn,
    };
    let base = spec(&b1, Some(&id), &chain).trust_key();
    let again = mesh.bundle();
    assert_eq!(base, spec(&again, Some(&id), &chain).trust_key());
    assert_ne!(base, spec(&b2, Some(&id), &chain).trust_key());
    assert_ne!(base, spec(&b1, None, &chain).trust_key());
    assert_ne!(base, spec(&b1, Some(&id), &sans).trust_key());
    let h1 = alpn_for(AppProtocol::WebSocket, &[]);
    let other_alpn = ConfigSpec {
        alpn: &h1,
        ..spec(&b1, Some(&id), &chain)
    };
    assert_ne!(base, other_alpn.trust_key());
}

#[test]
fn equal_specs_share_one_config() {
    let mesh = Ca::new("mesh");
    let bundle = mesh.bundle();
    let alpn = mesh_alpn();
    let spec = ConfigSpec {
        roots: &bundle,
        client: None,
        check: &PeerCheck::ChainOnly,
        alpn: &alpn,
    };
    let mut configs = ClientConfigs::default();
    let (a, ka) = configs.get(&spec);
    let (b, kb) = configs.get(&spec);
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(ka, kb);
    assert_eq!(configs.len(), 1);
    assert_eq!(a.alpn_protocols, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
}

#[test]
fn alpn_follows_app_protocol_then_mesh_extras() {
    let ocg = b"ocg.gateway.networking.k8s.io/v1".to_vec();
    assert_eq!(
        alpn_for(AppProtocol::Http1, std::slice::from_ref(&ocg)),
        vec![b"h2".to_vec(), b"http/1.1".to_vec(), ocg.clone()]
    );
    assert_eq!(
        alpn_for(AppProtocol::WebSocket, &[b"http/1.1".to_vec()]),
        vec![b"http/1.1".to_vec()]
    );
    assert_eq!(alpn_for(AppProtocol::H2c, &[]), vec![b"h2".to_vec()]);
}

#[test]
fn san_requirements_are_validated() {
    assert!(SanRequirement::uri(SPIFFE_WEB).is_ok());
    assert!(SanRequirement::uri("urn:example:a").is_ok());
    assert!(SanRequirement::uri("not a uri").is_err());
    assert!(SanRequirement::uri("/path/only").is_err());
    assert!(SanRequirement::dns("bad name!").is_err());
    assert_eq!(
        SanRequirement::dns("A.Example.com"),
        Ok(SanRequirement::Dns("a.example.com".into()))
    );
}

#[test]
fn well_known_roots_load() {
    assert!(TrustBundle::well_known().len() > 50);
}

// === a real handshake ===

/// A backend requiring client certificates from `client_ca`, serving `leaf`, offering `h2`.
fn mesh_server(client_ca: &Ca, leaf: &Leaf) -> Arc<rustls::ServerConfig> {
    let provider = crate::tls::provider::provider();
    let mut roots = RootCertStore::empty();
    roots.add(client_ca.der.clone()).unwrap();
    let client_verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(client_verifier)
        .with_single_cert(vec![leaf.der.clone()], key)
        .unwrap();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(cfg)
}

/// Accepts one connection; returns the client's leaf and the ALPN, then echoes one line.
async fn serve_once(
    listener: tokio::net::TcpListener,
    cfg: Arc<rustls::ServerConfig>,
) -> Result<(Vec<u8>, Option<Vec<u8>>), std::io::Error> {
    let (tcp, _) = listener.accept().await?;
    let mut tls = tokio_rustls::TlsAcceptor::from(cfg).accept(tcp).await?;
    let (_, conn) = tls.get_ref();
    let peer = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.as_ref().to_vec())
        .unwrap_or_default();
    let alpn = conn.alpn_protocol().map(<[u8]>::to_vec);
    let mut buf = [0; 5];
    tls.read_exact(&mut buf).await?;
    tls.write_all(&buf).await?;
    tls.shutdown().await?;
    Ok((peer, alpn))
}

async fn client_roundtrip(
    addr: std::net::SocketAddr,
    cfg: Arc<ClientConfig>,
) -> Result<Vec<u8>, std::io::Error> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::try_from(MESH_SNI).unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(name, tcp)
        .await?;
    tls.write_all(b"hello").await?;
    let mut out = vec![];
    tls.read_to_end(&mut out).await?;
    Ok(out)
}

#[tokio::test]
async fn mesh_handshake_presents_client_cert_and_accepts_spiffe_only_server() {
    let mesh = Ca::new("mesh");
    let pier_ca = Ca::new("pier");
    let workload = mesh.workload();
    let pier = pier_ca.leaf(
        vec![uri("spiffe://cluster.local/ns/pier/sa/gateway")],
        |_| {},
    );
    let id = ClientIdentity::from_pem(pier.pem.as_bytes(), pier.key_pem.as_bytes()).unwrap();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(serve_once(listener, mesh_server(&pier_ca, &workload)));

    let bundle = mesh.bundle();
    let alpn = mesh_alpn();
    let cfg = build_config(&ConfigSpec {
        roots: &bundle,
        client: Some(&id),
        check: &PeerCheck::ChainOnly,
        alpn: &alpn,
    });
    let echoed = client_roundtrip(addr, cfg).await.unwrap();
    assert_eq!(echoed, b"hello");
    let (peer, negotiated) = server.await.unwrap().unwrap();
    assert_eq!(
        peer,
        pier.der.as_ref(),
        "the server saw pier's client certificate"
    );
    assert_eq!(negotiated.as_deref(), Some(&b"h2"[..]));
}

#[tokio::test]
async fn backend_refusing_a_config_without_client_cert_is_peer_rejected() {
    let mesh = Ca::new("mesh");
    let pier_ca = Ca::new("pier");
    let workload = mesh.workload();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(serve_once(listener, mesh_server(&pier_ca, &workload)));

    let bundle = mesh.bundle();
    let alpn = mesh_alpn();
    let cfg = build_config(&ConfigSpec {
        roots: &bundle,
        client: None,
        check: &PeerCheck::ChainOnly,
        alpn: &alpn,
    });
    let err = client_roundtrip(addr, cfg).await.unwrap_err();
    assert_eq!(
        classify_io(&err),
        Some(HandshakeFailure::PeerRejected),
        "{err:?}"
    );
    assert!(server.await.unwrap().is_err());
}

#[tokio::test]
async fn handshake_against_rogue_workload_fails_as_unknown_ca() {
    let mesh = Ca::new("mesh");
    let rogue = Ca::new("rogue");
    let pier_ca = Ca::new("pier");
    let pier = pier_ca.leaf(
        vec![uri("spiffe://cluster.local/ns/pier/sa/gateway")],
        |_| {},
    );
    let id = ClientIdentity::from_pem(pier.pem.as_bytes(), pier.key_pem.as_bytes()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(serve_once(
        listener,
        mesh_server(&pier_ca, &rogue.workload()),
    ));

    let bundle = mesh.bundle();
    let alpn = mesh_alpn();
    let cfg = build_config(&ConfigSpec {
        roots: &bundle,
        client: Some(&id),
        check: &PeerCheck::ChainOnly,
        alpn: &alpn,
    });
    let err = client_roundtrip(addr, cfg).await.unwrap_err();
    assert_eq!(classify_io(&err), Some(HandshakeFailure::UnknownCa));
    assert!(server.await.unwrap().is_err());
}

// === robustness: mutated PEM ===

/// Mutated PEM bundles and identities (a trust bundle of two CAs, a workload chain and its
/// key; bytes replaced, removed, base64 lines dropped or repeated, truncated) are parsed or
/// refused with an error, never a panic; an unchanged input still parses.
#[test]
fn mutated_pem_is_parsed_or_refused_never_a_panic() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let ca = Ca::new("mesh CA");
    let other = Ca::new("other CA");
    let leaf = ca.workload();
    let bundle = format!("{}{}", ca.pem, other.pem);
    assert_eq!(parse_pem_certs(bundle.as_bytes()).unwrap().len(), 2);
    assert!(ClientIdentity::from_pem(leaf.pem.as_bytes(), leaf.key_pem.as_bytes()).is_ok());
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let strategy = (
        prop::collection::vec((0u8..4, any::<usize>(), any::<u8>()), 1..5),
        prop::option::of(any::<usize>()),
        any::<bool>(),
    );
    let mutate = |text: &str, edits: &[(u8, usize, u8)], cut: Option<usize>| {
        let mut lines: Vec<Vec<u8>> = text.lines().map(|l| l.as_bytes().to_vec()).collect();
        for &(op, i, b) in edits {
            let n = lines.len();
            let l = i % n;
            match op {
                0 if !lines[l].is_empty() => {
                    let j = (i / n) % lines[l].len();
                    lines[l][j] = b;
                }
                1 => {
                    lines.remove(l);
                    if lines.is_empty() {
                        lines.push(vec![]);
                    }
                }
                2 => {
                    let copy = lines[l].clone();
                    lines.insert(l, copy);
                }
                _ => {
                    let keep = (i / n) % (lines[l].len() + 1);
                    lines[l].truncate(keep);
                }
            }
        }
        let mut out = lines.join(&b'\n');
        if let Some(c) = cut {
            out.truncate(c % (out.len() + 1));
        }
        out
    };
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&strategy, |(edits, cut, key_too)| {
            let _ = parse_pem_certs(&mutate(&bundle, &edits, cut));
            let cert = mutate(&leaf.pem, &edits, cut);
            let key = if key_too {
                mutate(&leaf.key_pem, &edits, cut)
            } else {
                leaf.key_pem.clone().into_bytes()
            };
            let _ = ClientIdentity::from_pem(&cert, &key);
            Ok(())
        })
        .unwrap();
}
