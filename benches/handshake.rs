//! Upstream mesh mTLS handshake cost, with and without TLS session resumption: a new
//! connection from pier's client config (the one translation builds: mesh trust bundle, pier's
//! client certificate, chain-only verifier, ALPN h2 + http/1.1) to an in-process loopback
//! rustls server that requires a client certificate. ECDSA P-256 everywhere (rcgen's default).
//!
//! Each iteration is TCP connect + TLS handshake + a one-byte round trip, so the server has
//! verified pier's certificate (TLS 1.3 finishes client authentication after the client's
//! Finished) and the client has read the session tickets before the next connection.
//!
//! Decisions it informs: how much keeping the rustls session cache warm saves per new upstream
//! connection (translation builds a new `ClientConfig`, and so a new, empty session cache, on
//! every reload); and what per-endpoint identity (`PeerCheck::Identity`: the workload's SPIFFE
//! URI SAN read with x509-parser after the chain check) adds to a full handshake.

use std::net::SocketAddr;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use pier::model::AppProtocol;
use pier::tls::client::{
    ClientIdentity, ConfigSpec, PeerCheck, SanRequirement, TrustBundle, alpn_for, build_config,
};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::client::Resumption;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{HandshakeKind, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// The workload's identity (its certificate's only SAN).
const WORKLOAD_ID: &str = "spiffe://cluster.local/ns/app/sa/web";

struct Ca {
    pem: String,
    der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

fn ca(cn: &str) -> Ca {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let cert = params.self_signed(&key).expect("self-signed");
    Ca {
        pem: cert.pem(),
        der: cert.der().clone(),
        issuer: Issuer::new(params, key),
    }
}

/// A leaf with only a SPIFFE URI SAN: (DER, PEM, key PEM).
fn leaf(ca: &Ca, spiffe: &str) -> (CertificateDer<'static>, String, KeyPair) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name = DistinguishedName::new();
    params.subject_alt_names = vec![SanType::URI(spiffe.try_into().expect("URI"))];
    let cert = params.signed_by(&key, &ca.issuer).expect("leaf");
    (cert.der().clone(), cert.pem(), key)
}

/// A loopback mTLS server: per connection, handshake, read one byte, echo it, close.
async fn server(mesh: &Ca, client_ca: &Ca) -> SocketAddr {
    let (cert, _, key) = leaf(mesh, WORKLOAD_ID);
    let provider = pier::tls::provider::provider();
    let mut roots = RootCertStore::empty();
    roots.add(client_ca.der.clone()).expect("client CA");
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .expect("verifier");
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![cert],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .expect("server config");
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = tcp.set_nodelay(true);
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut b = [0u8; 1];
                if tls.read_exact(&mut b).await.is_ok() {
                    let _ = tls.write_all(&b).await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    addr
}

/// One connection; how its handshake went (full or resumed).
async fn connect_once(
    addr: SocketAddr,
    connector: &TlsConnector,
    name: &ServerName<'static>,
) -> Option<HandshakeKind> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let _ = tcp.set_nodelay(true);
    let mut tls = connector
        .connect(name.clone(), tcp)
        .await
        .expect("handshake");
    tls.write_all(b"x").await.expect("write");
    let mut b = [0u8; 1];
    tls.read_exact(&mut b).await.expect("read");
    tls.get_ref().1.handshake_kind()
}

fn bench_handshake(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mesh = ca("mesh CA");
    let client_ca = ca("pier client CA");
    let (_, client_pem, client_key) = leaf(&client_ca, "spiffe://cluster.local/ns/pier/sa/gw");
    let identity =
        ClientIdentity::from_pem(client_pem.as_bytes(), client_key.serialize_pem().as_bytes())
            .expect("identity");
    let bundle = TrustBundle::from_pem(mesh.pem.as_bytes()).expect("bundle");
    let alpn = alpn_for(AppProtocol::Http1, &[]);
    // What translation builds for a meshed backend (rustls' default resumption: an in-memory
    // cache of 256 sessions).
    let resuming = build_config(&ConfigSpec {
        roots: &bundle,
        client: Some(&identity),
        check: &PeerCheck::ChainOnly,
        alpn: &alpn,
    });
    let mut fresh = (*resuming).clone();
    fresh.resumption = Resumption::disabled();
    // Per-endpoint identity: the same, checking the workload's SPIFFE ID.
    let mut identity_fresh = (*build_config(&ConfigSpec {
        roots: &bundle,
        client: Some(&identity),
        check: &PeerCheck::Identity(SanRequirement::Uri(WORKLOAD_ID.into())),
        alpn: &alpn,
    }))
    .clone();
    identity_fresh.resumption = Resumption::disabled();
    let name = ServerName::try_from("web.app.svc.cluster.local").expect("name");
    let addr = rt.block_on(server(&mesh, &client_ca));

    let mut g = c.benchmark_group("upstream_mtls_handshake");
    for (id, config) in [
        ("resumption", resuming),
        ("no_resumption", Arc::new(fresh)),
        ("no_resumption_identity_checked", Arc::new(identity_fresh)),
    ] {
        let connector = TlsConnector::from(config);
        // Warm: the resuming config holds a ticket before measuring.
        rt.block_on(connect_once(addr, &connector, &name));
        g.bench_function(id, |b| {
            b.to_async(&rt)
                .iter(|| connect_once(addr, &connector, &name))
        });
    }
    g.finish();
}

criterion_group!(benches, bench_handshake);
criterion_main!(benches);
