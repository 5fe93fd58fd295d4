//! A throwaway CA and leaf certificates, generated per test with rcgen.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;

pub struct Pki {
    ca: CertificateDer<'static>,
    ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Pki {
    pub fn new() -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        Self {
            ca: cert.der().clone(),
            ca_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A leaf for `names`, as rustls serves it.
    pub fn leaf(&self, names: &[&str]) -> Arc<CertifiedKey> {
        let (cert, key) = self.signed(names);
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = pier::tls::provider::provider();
        Arc::new(CertifiedKey::from_der(vec![cert.der().clone()], der, &provider).unwrap())
    }

    /// A client trusting this CA, offering `alpn`.
    pub fn client(&self, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.clone()).unwrap();
        let provider = pier::tls::provider::provider();
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(cfg)
    }
}

/// A certificate chain and its key, for rustls configs that take them apart.
pub struct Leaf {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl Pki {
    pub fn ca_der(&self) -> CertificateDer<'static> {
        self.ca.clone()
    }

    /// The CA certificate, PEM (a `ca.crt` value).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A leaf for `names`, valid now.
    pub fn issue(&self, names: &[&str]) -> Leaf {
        self.issue_with(names, |_| {})
    }

    /// A leaf for `names` (DNS names or IP addresses), as PEM `(certificate, key)` for
    /// servers that read files.
    pub fn issue_pem(&self, names: &[&str]) -> (String, String) {
        let (cert, key) = self.signed(names);
        (cert.pem(), key.serialize_pem())
    }

    /// A certificate for `names` with default parameters, signed by this CA, and its key.
    fn signed(&self, names: &[&str]) -> (rcgen::Certificate, KeyPair) {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        (cert, key)
    }

    /// A leaf for `names` that expired in 2021.
    pub fn issue_expired(&self, names: &[&str]) -> Leaf {
        self.issue_with(names, |p| {
            p.not_before = rcgen::date_time_ymd(2020, 1, 1);
            p.not_after = rcgen::date_time_ymd(2021, 1, 1);
        })
    }

    fn issue_with(&self, names: &[&str], edit: impl FnOnce(&mut CertificateParams)) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        edit(&mut params);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            chain: vec![cert.der().clone()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        }
    }
}

fn provider() -> Arc<CryptoProvider> {
    pier::tls::provider::provider()
}

/// An upstream client config as the mesh branch builds one: trusts `roots`, presents `client`,
/// offers `alpn`.
pub fn mtls_client(roots: &[&Pki], client: &Leaf, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let mut store = RootCertStore::empty();
    for p in roots {
        store.add(p.ca_der()).unwrap();
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_client_auth_cert(client.chain.clone(), client.key.clone_key())
        .unwrap();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(cfg)
}

/// A server that serves `server` and requires a client certificate issued by `client_ca`.
pub fn mtls_server(server: &Leaf, client_ca: &Pki, alpn: &[&[u8]]) -> Arc<rustls::ServerConfig> {
    let mut store = RootCertStore::empty();
    store.add(client_ca.ca_der()).unwrap();
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider())
        .build()
        .unwrap();
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(server.chain.clone(), server.key.clone_key())
        .unwrap();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(cfg)
}

/// The DNS names in a certificate's subjectAltName.
pub fn san_dns_names(cert: &CertificateDer<'_>) -> Vec<String> {
    let (_, x509) = x509_parser::parse_x509_certificate(cert).unwrap();
    let san = x509.subject_alternative_name().unwrap().unwrap();
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
            _ => None,
        })
        .collect()
}
