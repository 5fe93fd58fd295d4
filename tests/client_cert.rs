//! pier's own client identity from `--client-cert`/`--client-key`: loaded at start, watched,
//! reloaded, never replaced by a bad file; exported for the mesh with `pier mesh export-trust`.

mod support;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use pier::run::{self, ClientCertFiles, RunOptions};
use rcgen::{CertificateParams, KeyPair};
use support::web::*;
use support::*;

/// A self-signed client certificate expiring on 1 January of `year`: (cert PEM, key PEM).
fn client_cert(year: i32) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["pier.edge.example".to_string()]).unwrap();
    params.not_after = rcgen::date_time_ymd(year, 1, 1);
    (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
}

fn expiry_metric(metrics: &str) -> Option<i64> {
    metrics
        .lines()
        .find(|l| l.starts_with("pier_mesh_client_certificate_expiry_timestamp_seconds{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn client_certificate_is_loaded_watched_and_a_bad_rotation_keeps_the_last_good_one() {
    init();
    let dir = tempfile::tempdir().unwrap();
    let tls = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gw.yaml"), gateway(free_port())).unwrap();
    let (cert, key) = client_cert(2031);
    std::fs::write(tls.path().join("tls.crt"), &cert).unwrap();
    std::fs::write(tls.path().join("tls.key"), &key).unwrap();
    let pier = run::start(RunOptions {
        source: run::Source::Manifests(dir.path().to_path_buf()),
        listen_host: [127, 0, 0, 1].into(),
        admin: SocketAddr::from(([127, 0, 0, 1], 0)),
        admin_socket: None,
        translate: Default::default(),
        access_log: false,
        access_log_fields: Default::default(),
        reuse_port: false,
        tls_session_resumption: true,
        trusted_proxies: Default::default(),
        limits: Default::default(),
        tracing: None,
        admin_token_file: None,
        client_cert: Some(ClientCertFiles {
            cert: tls.path().join("tls.crt"),
            key: tls.path().join("tls.key"),
        }),
        spiffe_endpoint: None,
        manifest_limits: Default::default(),
        probe_interval: None,
        ready_requires_listener: false,
    })
    .await
    .unwrap();
    let metrics = format!("http://{}/metrics", pier.admin_addr);
    let expiry_2031 = 1_924_992_000; // 2031-01-01T00:00:00Z
    assert_eq!(
        expiry_metric(&get(&metrics, &[]).await.text()),
        Some(expiry_2031)
    );

    // A rotation (new key and certificate, written atomically) takes effect.
    let (cert, key) = client_cert(2032);
    write_atomic(&tls.path().join("tls.key"), &key);
    write_atomic(&tls.path().join("tls.crt"), &cert);
    let expiry_2032 = 1_956_528_000;
    eventually(Duration::from_secs(5), || async {
        expiry_metric(&get(&metrics, &[]).await.text()) == Some(expiry_2032)
    })
    .await;

    // A broken certificate is refused; the last good identity stays.
    write_atomic(&tls.path().join("tls.crt"), "not a certificate");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        expiry_metric(&get(&metrics, &[]).await.text()),
        Some(expiry_2032)
    );
    pier.shutdown().await;
}

#[tokio::test]
async fn startup_fails_on_an_unusable_client_certificate() {
    init();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gw.yaml"), gateway(free_port())).unwrap();
    std::fs::write(dir.path().join("bad.crt"), "nope").unwrap();
    std::fs::write(dir.path().join("bad.key"), "nope").unwrap();
    let err = run::start(RunOptions {
        source: run::Source::Manifests(dir.path().to_path_buf()),
        listen_host: [127, 0, 0, 1].into(),
        admin: SocketAddr::from(([127, 0, 0, 1], 0)),
        admin_socket: None,
        translate: Default::default(),
        access_log: false,
        access_log_fields: Default::default(),
        reuse_port: false,
        tls_session_resumption: true,
        trusted_proxies: Default::default(),
        limits: Default::default(),
        tracing: None,
        admin_token_file: None,
        client_cert: Some(ClientCertFiles {
            cert: dir.path().join("bad.crt"),
            key: dir.path().join("bad.key"),
        }),
        spiffe_endpoint: None,
        manifest_limits: Default::default(),
        probe_interval: None,
        ready_requires_listener: false,
    })
    .await
    .err()
    .expect("must fail");
    assert!(format!("{err:#}").contains("bad.crt"), "{err:#}");
}

#[test]
fn export_trust_prints_the_configmap_and_mesh_for_the_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, _) = client_cert(2031);
    std::fs::write(dir.path().join("tls.crt"), &cert).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_pier"))
        .args([
            "mesh",
            "export-trust",
            "--namespace",
            "istio-system",
            "--name",
            "pier-trust",
            "--client-cert",
        ])
        .arg(dir.path().join("tls.crt"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8_lossy(&out.stdout);
    assert!(yaml.contains("kind: ConfigMap"), "{yaml}");
    assert!(yaml.contains("trustBundle"), "{yaml}");
    assert!(yaml.contains("pier-trust"), "{yaml}");
    // The self-signed certificate itself is the bundle.
    let body: String = cert.lines().filter(|l| !l.starts_with("-----")).collect();
    let first = &body[..40];
    assert!(yaml.replace([' ', '\n'], "").contains(first), "{yaml}");
}
