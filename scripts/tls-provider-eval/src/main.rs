//! Server-side cost of a full TLS 1.3 handshake with rustls, ring against aws-lc-rs (X25519,
//! and X25519MLKEM768 with aws-lc-rs), for ECDSA P-256 and RSA-2048 certificates. Client and
//! server in one thread, in memory; only the server's calls are timed; rounds alternate the
//! providers. Full handshakes (the client keeps no session) and resumed ones (stateless
//! tickets, PSK with (EC)DHE). Argument: the number of rounds (300 handshakes each).
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::crypto::{CryptoProvider, SupportedKxGroup};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConnection, ServerConnection};

const PER_ROUND: usize = 300;

fn pair(rsa: bool) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
    let key = if rsa {
        rcgen::KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048).unwrap()
    } else {
        rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap()
    };
    let cert = rcgen::CertificateParams::new(vec!["edge.bench".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    (cert.der().clone(), PrivateKeyDer::try_from(key.serialize_der()).unwrap())
}

/// Server time of one full handshake between `client` and `server`.
fn handshake(client: &Arc<rustls::ClientConfig>, server: &Arc<rustls::ServerConfig>) -> Duration {
    let name = ServerName::try_from("edge.bench").unwrap();
    let mut c = ClientConnection::new(client.clone(), name).unwrap();
    let mut s = ServerConnection::new(server.clone()).unwrap();
    let mut spent = Duration::ZERO;
    while c.is_handshaking() || s.is_handshaking() {
        let mut to_server = Vec::new();
        while c.wants_write() {
            c.write_tls(&mut to_server).unwrap();
        }
        assert!(!to_server.is_empty(), "handshake stuck");
        let t = Instant::now();
        let mut r = &to_server[..];
        while !r.is_empty() {
            s.read_tls(&mut r).unwrap();
        }
        s.process_new_packets().unwrap();
        let mut to_client = Vec::new();
        while s.wants_write() {
            s.write_tls(&mut to_client).unwrap();
        }
        spent += t.elapsed();
        let mut r = &to_client[..];
        while !r.is_empty() {
            c.read_tls(&mut r).unwrap();
        }
        c.process_new_packets().unwrap();
    }
    spent
}

fn main() {
    let rounds: usize = std::env::args().nth(1).map_or(10, |a| a.parse().unwrap());
    let aws = rustls::crypto::aws_lc_rs::kx_group::X25519;
    let hybrid = rustls::crypto::aws_lc_rs::kx_group::X25519MLKEM768;
    let providers: Vec<(&str, CryptoProvider, Option<&'static dyn SupportedKxGroup>)> = vec![
        ("ring, X25519", rustls::crypto::ring::default_provider(), None),
        ("aws-lc-rs, X25519", rustls::crypto::aws_lc_rs::default_provider(), Some(aws)),
        ("aws-lc-rs, X25519MLKEM768", rustls::crypto::aws_lc_rs::default_provider(), Some(hybrid)),
    ];
    for rsa in [false, true] {
        let (cert, key) = pair(rsa);
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.clone()).unwrap();
        // A client that keeps its sessions resumes every handshake after the first one (PSK,
        // no certificate and no signature); `full` turns resumption off on the client. The
        // server issues stateless tickets with the provider's ticketer, as pier does.
        for resumed in [false, true] {
            let configs: Vec<_> = providers
                .iter()
                .map(|(_, p, group)| {
                    let mut p = p.clone();
                    if let Some(g) = group {
                        p.kx_groups = vec![*g];
                    }
                    let ticketer = if group.is_some() {
                        rustls::crypto::aws_lc_rs::Ticketer::new().unwrap()
                    } else {
                        rustls::crypto::ring::Ticketer::new().unwrap()
                    };
                    let p = Arc::new(p);
                    let mut server = rustls::ServerConfig::builder_with_provider(p.clone())
                        .with_protocol_versions(&[&rustls::version::TLS13])
                        .unwrap()
                        .with_no_client_auth()
                        .with_single_cert(vec![cert.clone()], key.clone_key())
                        .unwrap();
                    server.ticketer = ticketer;
                    let mut client = rustls::ClientConfig::builder_with_provider(p)
                        .with_protocol_versions(&[&rustls::version::TLS13])
                        .unwrap()
                        .with_root_certificates(roots.clone())
                        .with_no_client_auth();
                    if !resumed {
                        client.resumption = rustls::client::Resumption::disabled();
                    }
                    let (client, server) = (Arc::new(client), Arc::new(server));
                    handshake(&client, &server); // the first ticket
                    (client, server)
                })
                .collect();
            let mut samples = vec![Vec::new(); providers.len()];
            for _ in 0..rounds {
                for (i, (client, server)) in configs.iter().enumerate() {
                    let total: Duration =
                        (0..PER_ROUND).map(|_| handshake(client, server)).sum();
                    samples[i].push(total.as_secs_f64() * 1e6 / PER_ROUND as f64);
                }
            }
            for ((name, _, _), mut v) in providers.iter().zip(samples) {
                v.sort_by(f64::total_cmp);
                println!(
                    "{} {name}: server µs per {} handshake: median {:.1} [{:.1}–{:.1}] ({rounds} rounds of {PER_ROUND})",
                    if rsa { "RSA-2048" } else { "ECDSA P-256" },
                    if resumed { "resumed" } else { "full" },
                    v[v.len() / 2],
                    v[0],
                    v[v.len() - 1],
                );
            }
        }
    }
}
