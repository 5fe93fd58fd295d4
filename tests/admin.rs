//! The admin server's guard (a bearer token) and what it, the logs and the status never show:
//! private keys. pier runs in-process on manifests in a temp directory; this test binary's
//! logs go to a buffer so they can be searched for the key material pier loaded.

mod support;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};

use pier::run::{self, RunOptions};
use support::web::*;
use support::*;

/// Everything this test binary logs (at debug for pier).
fn logs() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let writer = Buf(buf.clone());
        let _ = tracing_subscriber::fmt()
            .with_env_filter("debug")
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .try_init();
        buf
    })
}

#[derive(Clone)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn options(dir: &std::path::Path) -> RunOptions {
    RunOptions {
        listen_host: [127, 0, 0, 1].into(),
        admin: SocketAddr::from(([127, 0, 0, 1], 0)),
        ..RunOptions::new(run::Source::Manifests(dir.to_path_buf()))
    }
}

#[tokio::test]
async fn an_admin_token_guards_everything_but_the_probes() {
    init();
    logs();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gateway.yaml"), gateway(free_port())).unwrap();
    let token_file = dir.path().join(".token");
    std::fs::write(&token_file, "s3cr3t-t0ken\n").unwrap();
    let token = pier::admin::AdminToken::read(&token_file).unwrap();
    assert_eq!(format!("{token:?}"), "AdminToken(<redacted>)");
    let pier = run::start(RunOptions {
        admin_token: Some(token),
        ..options(dir.path())
    })
    .await
    .unwrap();
    let url = |p: &str| format!("http://{}{p}", pier.admin_addr);
    for path in ["/metrics", "/config", "/status"] {
        assert_eq!(get(&url(path), &[]).await.status, 401, "{path}");
        let wrong = [("authorization", "Bearer s3cr3t-t0keX")];
        assert_eq!(get(&url(path), &wrong).await.status, 401, "{path}");
        let right = [("authorization", "Bearer s3cr3t-t0ken")];
        assert_eq!(get(&url(path), &right).await.status, 200, "{path}");
    }
    for probe in ["/healthz", "/readyz"] {
        assert_eq!(get(&url(probe), &[]).await.status, 200, "{probe}");
    }
    assert!(
        !String::from_utf8_lossy(&logs().lock().unwrap()).contains("s3cr3t-t0ken"),
        "the token was logged"
    );
    pier.shutdown().await;
}

/// `GET path` over the Unix socket at `sock`, with `extra` header lines: the status code.
async fn get_unix(sock: &std::path::Path, path: &str, extra: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::UnixStream::connect(sock).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: pier\r\n{extra}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = vec![];
    bounded(s.read_to_end(&mut out)).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    text.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn the_admin_api_on_a_unix_socket_is_owner_and_group_only_and_keeps_the_token() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    init();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gateway.yaml"), gateway(free_port())).unwrap();
    let sock = dir.path().join("admin.sock");
    // A socket left by an earlier run is replaced; a regular file is never deleted.
    let stale = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    drop(stale);
    let token_file = dir.path().join(".token");
    std::fs::write(&token_file, "t0ken\n").unwrap();
    let pier = run::start(RunOptions {
        admin_socket: Some(sock.clone()),
        admin_token: Some(pier::admin::AdminToken::read(&token_file).unwrap()),
        ..options(dir.path())
    })
    .await
    .unwrap();
    let meta = std::fs::symlink_metadata(&sock).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    assert_eq!(get_unix(&sock, "/readyz", "").await, 200);
    assert_eq!(get_unix(&sock, "/config", "").await, 401);
    let auth = "Authorization: Bearer t0ken\r\n";
    assert_eq!(get_unix(&sock, "/config", auth).await, 200);
    // The TCP admin address still answers.
    let url = format!("http://{}/readyz", pier.admin_addr);
    assert_eq!(get(&url, &[]).await.status, 200);
    pier.shutdown().await;
    assert!(!sock.exists(), "the socket file is removed at shutdown");

    // Something else at the path: pier refuses to start, and leaves it alone.
    std::fs::write(&sock, "not a socket").unwrap();
    let err = run::start(RunOptions {
        admin_socket: Some(sock.clone()),
        ..options(dir.path())
    })
    .await
    .err()
    .expect("a regular file is not replaced");
    assert!(format!("{err:#}").contains("not a socket"), "{err:#}");
    assert_eq!(std::fs::read_to_string(&sock).unwrap(), "not a socket");
}

/// A `kubernetes.io/tls` Secret `default/<name>` from PEM text.
fn tls_secret(name: &str, cert_pem: &str, key_pem: &str) -> String {
    let indent = |s: &str| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: default}}\n\
         type: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
        indent(cert_pem),
        indent(key_pem)
    )
}

#[tokio::test]
async fn private_keys_never_appear_in_config_status_or_logs() {
    init();
    logs();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["gw.example.com".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let key_pem = key.serialize_pem();
    // A line from the middle of the key: what a leak of any part of it would contain.
    let secret_line = key_pem.lines().nth(2).unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    std::fs::write(
        dir.path().join("gateway.yaml"),
        format!(
            "{}---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
             metadata: {{name: tls, namespace: default}}\nspec:\n  gatewayClassName: pier\n  \
             listeners:\n  - name: https\n    protocol: HTTPS\n    port: {port}\n    \
             tls: {{certificateRefs: [{{name: good}}, {{name: broken}}]}}\n",
            gateway(free_port())
        ),
    )
    .unwrap();
    // One good Secret, and one whose certificate does not match its key (an error that
    // pier reports: the message must not carry the key).
    let other = rcgen::KeyPair::generate().unwrap();
    std::fs::write(
        dir.path().join("secrets.yaml"),
        format!(
            "{}---\n{}",
            tls_secret("good", &cert.pem(), &key_pem),
            tls_secret("broken", &cert.pem(), &other.serialize_pem())
        ),
    )
    .unwrap();
    let pier = run::start(options(dir.path())).await.unwrap();
    let url = |p: &str| format!("http://{}{p}", pier.admin_addr);
    let config = get(&url("/config"), &[]).await.text();
    let status = get(&url("/status"), &[]).await.text();
    assert!(config.contains("\"port\""), "{config}");
    assert!(
        status.contains("broken"),
        "the broken Secret is reported: {status}"
    );
    let other_line = other.serialize_pem().lines().nth(2).unwrap().to_string();
    let logged = String::from_utf8_lossy(&logs().lock().unwrap()).into_owned();
    assert!(
        logged.contains("listening"),
        "the logs were captured: {logged}"
    );
    for (what, text) in [
        ("/config", &config),
        ("/status", &status),
        ("logs", &logged),
    ] {
        assert!(!text.contains(&secret_line), "key material in {what}");
        assert!(!text.contains(&other_line), "key material in {what}");
        assert!(!text.contains("PRIVATE KEY"), "a key in {what}");
    }
    pier.shutdown().await;
}
