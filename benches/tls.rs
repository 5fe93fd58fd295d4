//! Upstream TLS config cost: parsing a 100-CA trust bundle and building the mesh
//! `ClientConfig` from it (verifier, client certificate, ALPN).
//!
//! Decision it informs: whether translation can rebuild upstream configs on every reload
//! (what it does now: one build per distinct config, shared by every backend), or whether the
//! built configs must be carried across translations the way endpoint load state is.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use pier::model::AppProtocol;
use pier::tls::client::{
    ClientConfigs, ClientIdentity, ConfigSpec, PeerCheck, TrustBundle, alpn_for, build_config,
};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};

fn ca(i: usize) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("bench CA {i}"));
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let pem = params.self_signed(&key).expect("self-signed").pem();
    (pem, Issuer::new(params, key))
}

fn bench_config(c: &mut Criterion) {
    let cas: Vec<_> = (0..100).map(ca).collect();
    let bundle_pem: String = cas.iter().map(|(pem, _)| pem.as_str()).collect();
    let key = KeyPair::generate().expect("key");
    let leaf = CertificateParams::new(vec!["pier.example".to_string()])
        .expect("params")
        .signed_by(&key, &cas[0].1)
        .expect("leaf");
    let identity = ClientIdentity::from_pem(leaf.pem().as_bytes(), key.serialize_pem().as_bytes())
        .expect("identity");
    let alpn = alpn_for(AppProtocol::Http1, &[]);

    let mut g = c.benchmark_group("upstream_tls");
    g.bench_function("parse_bundle_100_cas", |b| {
        b.iter(|| TrustBundle::from_pem(black_box(bundle_pem.as_bytes())).expect("bundle"))
    });
    let bundle = TrustBundle::from_pem(bundle_pem.as_bytes()).expect("bundle");
    let spec = ConfigSpec {
        roots: &bundle,
        client: Some(&identity),
        check: &PeerCheck::ChainOnly,
        alpn: &alpn,
    };
    g.bench_function("build_config_100_cas", |b| {
        b.iter(|| build_config(black_box(&spec)))
    });
    g.bench_function("parse_and_build_100_cas", |b| {
        b.iter(|| {
            let bundle = TrustBundle::from_pem(bundle_pem.as_bytes()).expect("bundle");
            let mut configs = ClientConfigs::default();
            configs.get(&ConfigSpec {
                roots: &bundle,
                ..spec
            })
        })
    });
    g.finish();
}

criterion_group!(benches, bench_config);
criterion_main!(benches);
