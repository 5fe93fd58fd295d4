//! ClientTrafficPolicy end to end: `pier run --manifests DIR` in-process.
//!
//! `tls` and listener `tls.options`: OpenSSL's clients (`curl`, `openssl s_client`) against
//! three HTTPS listeners that share one port with different TLS settings, chosen by SNI, and a
//! terminating TLS listener; a client that reaches a listener past its settings (no SNI, or
//! another name) gets 421; edits apply without a restart; GEP-713 status in `/status`.
//!
//! `connection.connectionLimit`, `clientIPDetection` and `timeout.http.idleTimeout`: a
//! listener's port with a limit of two closes the longest-waiting idle connection for a third
//! client, one without keeps all; forwarding headers believed from the policy's proxies on one
//! listener, not on another; idle HTTP/1.1 and HTTP/2 connections closed after the policy's
//! two seconds there, kept on the other; `path`: escaped slashes refused and slashes merged
//! on one listener; `headers`: names with `_` refused on one listener, dropped on another, and
//! an untrusted request ID kept there; each on both request paths. `requestReceivedTimeout`:
//! a request whose head or body (declared, chunked, HTTP/2) is not whole in time gets 408.

mod support;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use pier::run;
use serde_json::Value;
use support::web::*;
use support::*;

const STRICT: &str = "strict.example.com";
const LEGACY: &str = "legacy.example.com";
const OPEN: &str = "open.example.com";
const STREAM: &str = "stream.example.com";

fn gateway(https: u16, tls: u16) -> String {
    format!(
        "{GATEWAY_CLASS}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  gatewayClassName: pier
  listeners:
    - name: strict
      hostname: {STRICT}
      protocol: HTTPS
      port: {https}
      tls: {{certificateRefs: [{{name: cert}}]}}
    - name: legacy
      hostname: {LEGACY}
      protocol: HTTPS
      port: {https}
      tls:
        certificateRefs: [{{name: cert}}]
        options:
          pier.dev/max-version: '1.2'
          pier.dev/ciphers: ECDHE-ECDSA-AES256-GCM-SHA384,ECDHE-ECDSA-CHACHA20-POLY1305
    - name: open
      hostname: {OPEN}
      protocol: HTTPS
      port: {https}
      tls: {{certificateRefs: [{{name: cert}}]}}
    - name: stream
      hostname: {STREAM}
      protocol: TLS
      port: {tls}
      tls: {{mode: Terminate, certificateRefs: [{{name: cert}}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
    - backendRefs: [{{name: a, port: 80}}]
---
apiVersion: gateway.networking.k8s.io/v1alpha3
kind: TLSRoute
metadata: {{name: stream, namespace: default}}
spec:
  parentRefs: [{{name: gw, sectionName: stream}}]
  hostnames: [{STREAM}]
  rules:
    - backendRefs: [{{name: a, port: 80}}]
"
    )
}

/// The policies: `strict` (TLS 1.3, X25519, HTTP/1.1 only) on two listeners, one on the whole
/// Gateway that the listener ones override, and `strict_min` as the strict one's minVersion.
fn policies(strict_min: &str) -> String {
    format!(
        "apiVersion: pier.dev/v1alpha1
kind: ClientTrafficPolicy
metadata: {{name: strict, namespace: default, creationTimestamp: '2026-01-01T00:00:00Z'}}
spec:
  targetRefs:
    - {{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: strict}}
    - {{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: stream}}
  tls:
    minVersion: '{strict_min}'
    ecdhCurves: [X25519]
    alpnProtocols: [http/1.1]
---
apiVersion: pier.dev/v1alpha1
kind: ClientTrafficPolicy
metadata: {{name: everywhere, namespace: default, creationTimestamp: '2026-01-01T00:00:00Z'}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]
  tls: {{minVersion: Auto, maxVersion: '1.3'}}
---
apiVersion: pier.dev/v1alpha1
kind: ClientTrafficPolicy
metadata: {{name: impossible, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: open}}]
  tls: {{ciphers: [AES128-SHA]}}
"
    )
}

struct Env {
    dir: tempfile::TempDir,
    https: u16,
    tls: u16,
    pier: run::Running,
    _echo: pier::echo::EchoServer,
}

async fn start() -> Env {
    init();
    let echo = pier::echo::spawn(SocketAddr::from(([127, 0, 0, 1], 0)), "a")
        .await
        .unwrap();
    let (https, tls) = (free_port(), free_port());
    // rcgen's default key is ECDSA P-256: the ECDHE-ECDSA suites.
    let server = rcgen::generate_simple_self_signed(vec![
        STRICT.to_string(),
        LEGACY.to_string(),
        OPEN.to_string(),
        STREAM.to_string(),
    ])
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let secret = support::mesh::tls_secret_pem(
        "default",
        "cert",
        &server.cert.pem(),
        &server.signing_key.serialize_pem(),
    );
    let files = [
        ("gw.yaml", gateway(https, tls)),
        ("policies.yaml", policies("1.3")),
        ("secret.yaml", secret),
        ("svc.yaml", service("a", echo.addr)),
        ("ca.pem", server.cert.pem()),
    ];
    let pier = run_manifests(dir.path(), &files).await;
    Env {
        dir,
        https,
        tls,
        pier,
        _echo: echo,
    }
}

/// [`start`], once the `open` listener answers.
async fn serving() -> Env {
    let env = start().await;
    eventually(Duration::from_secs(5), || async {
        env.curl(OPEN, env.https, &[], None).await.status == 200
    })
    .await;
    env
}

/// What curl got: its exit code, the HTTP status and version (`None` when no response).
#[derive(Debug)]
struct Curl {
    code: i32,
    status: u16,
    http: String,
}

impl Env {
    fn ca(&self) -> String {
        self.dir.path().join("ca.pem").display().to_string()
    }

    /// `curl https://{host}:{port}/` trusting pier's certificate, with `args` (TLS versions,
    /// ALPN) and an optional Host header.
    async fn curl(&self, host: &str, port: u16, args: &[&str], host_header: Option<&str>) -> Curl {
        let mut cmd = Command::new("curl");
        cmd.args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{http_version}",
        ])
        .args(["--max-time", "5", "--cacert", &self.ca()])
        .args(["--resolve", &format!("{host}:{port}:127.0.0.1")])
        .args(args);
        if let Some(h) = host_header {
            cmd.args(["-H", &format!("Host: {h}")]);
        }
        cmd.arg(format!("https://{host}:{port}/"));
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let mut words = text.split_whitespace();
        Curl {
            code: out.status.code().unwrap_or(-1),
            status: words.next().and_then(|s| s.parse().ok()).unwrap_or(0),
            http: words.next().unwrap_or_default().to_string(),
        }
    }

    /// `openssl s_client` to `port` with SNI `sni`: the negotiated protocol and cipher, or
    /// `None` when the handshake failed.
    async fn s_client(&self, port: u16, sni: &str, args: &[&str]) -> Option<(String, String)> {
        let mut cmd = Command::new("openssl");
        cmd.args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
            .args(["-servername", sni, "-CAfile", &self.ca(), "-brief"])
            .args(args)
            .stdin(std::process::Stdio::null());
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr).to_string();
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim_start_matches([' ', ':']).trim().to_string())
        };
        Some((field("Protocol version")?, field("Ciphersuite")?))
    }

    /// `openssl s_client` to `port` sending one `Connection: close` request and reading to
    /// the end (so the tickets that follow the handshake arrive), with `args`: all it printed.
    async fn s_client_request(&self, port: u16, sni: &str, args: &[&str]) -> String {
        let mut cmd = Command::new("openssl");
        cmd.args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
            .args(["-servername", sni, "-CAfile", &self.ca(), "-ign_eof"])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let request = format!("GET / HTTP/1.1\r\nHost: {sni}\r\nConnection: close\r\n\r\n");
        let out = tokio::task::spawn_blocking(move || {
            let mut child = cmd.spawn().unwrap();
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(request.as_bytes())
                .unwrap();
            child.wait_with_output().unwrap()
        })
        .await
        .unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    async fn status(&self) -> Value {
        support::web::get(&format!("http://{}/status", self.pier.admin_addr), &[])
            .await
            .json()
    }

    /// The conditions of a ClientTrafficPolicy's first ancestor, in `/status`.
    async fn policy_conditions(&self, name: &str) -> Vec<Value> {
        let status = self.status().await;
        let objects = status.as_array().cloned().unwrap_or_default();
        let o = objects
            .iter()
            .find(|o| o["kind"] == "ClientTrafficPolicy" && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no status for {name}: {status:#}"));
        o["status"]["ancestors"][0]["conditions"]
            .as_array()
            .cloned()
            .unwrap()
    }
}

fn condition<'c>(conditions: &'c [Value], kind: &str) -> &'c Value {
    conditions
        .iter()
        .find(|c| c["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {conditions:#?}"))
}

/// curl's exit code for a failed TLS handshake.
const HANDSHAKE_FAILED: i32 = 35;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_listener_on_a_port_gets_its_own_tls_settings_by_sni() {
    let env = serving().await;
    let port = env.https;

    // strict: TLS 1.3 only, X25519 only, ALPN http/1.1 only.
    let r = env.curl(STRICT, port, &["--tls-max", "1.2"], None).await;
    assert_eq!(r.code, HANDSHAKE_FAILED, "TLS 1.2 refused on strict: {r:?}");
    let r = env.curl(STRICT, port, &["--http2"], None).await;
    assert_eq!(
        (r.status, r.http.as_str()),
        (200, "1.1"),
        "no h2 offered: {r:?}"
    );
    let r = env.curl(STRICT, port, &["--curves", "P-256"], None).await;
    assert_eq!(r.code, HANDSHAKE_FAILED, "P-256 refused on strict: {r:?}");
    let (proto, _) = env.s_client(port, STRICT, &[]).await.unwrap();
    assert_eq!(proto, "TLSv1.3");

    // legacy (its tls.options): TLS 1.2 only, one suite.
    let r = env.curl(LEGACY, port, &["--tlsv1.3"], None).await;
    assert_eq!(r.code, HANDSHAKE_FAILED, "TLS 1.3 refused on legacy: {r:?}");
    let (proto, cipher) = env.s_client(port, LEGACY, &[]).await.unwrap();
    assert_eq!(
        (proto.as_str(), cipher.as_str()),
        ("TLSv1.2", "ECDHE-ECDSA-AES256-GCM-SHA384")
    );
    let other_suite = ["-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256", "-tls1_2"];
    assert_eq!(env.s_client(port, LEGACY, &other_suite).await, None);

    // open: pier's defaults (its policy is invalid): both versions, h2.
    let r = env
        .curl(OPEN, port, &["--tls-max", "1.2", "--http2"], None)
        .await;
    assert_eq!((r.status, r.http.as_str()), (200, "2"), "{r:?}");
    let (proto, _) = env.s_client(port, OPEN, &[]).await.unwrap();
    assert_eq!(proto, "TLSv1.3");

    // No way around a listener's settings: a TLS 1.2 connection made for `open`, or without
    // SNI (an address), asking for `strict` by Host is misdirected.
    let r = env
        .curl(OPEN, port, &["--tls-max", "1.2"], Some(STRICT))
        .await;
    assert_eq!(r.status, 421, "{r:?}");
    let r = env
        .curl("127.0.0.1", port, &["-k", "--tls-max", "1.2"], Some(STRICT))
        .await;
    assert_eq!(r.status, 421, "no SNI: {r:?}");
    let h1 = ["-k", "--tls-max", "1.2", "--http1.1"];
    let r = env.curl("127.0.0.1", port, &h1, Some(STRICT)).await;
    assert_eq!((r.status, r.http.as_str()), (421, "1.1"), "no SNI: {r:?}");
    let r = env
        .curl("127.0.0.1", port, &["-k", "--tls-max", "1.2"], Some(OPEN))
        .await;
    assert_eq!(r.status, 200, "no SNI, a listener with the defaults: {r:?}");

    // The terminating TLS listener has the strict policy too (no ALPN on streams).
    let r = env.curl(STREAM, env.tls, &["--tls-max", "1.2"], None).await;
    assert_eq!(
        r.code, HANDSHAKE_FAILED,
        "TLS 1.2 refused on the stream: {r:?}"
    );
    let r = env.curl(STREAM, env.tls, &[], None).await;
    assert_eq!(r.status, 200, "{r:?}");

    // Status: accepted, overridden, and refused with rustls's reason.
    let strict = env.policy_conditions("strict").await;
    assert_eq!(
        condition(&strict, "Accepted")["status"],
        "True",
        "{strict:#?}"
    );
    let everywhere = env.policy_conditions("everywhere").await;
    assert_eq!(condition(&everywhere, "Accepted")["status"], "True");
    assert_eq!(condition(&everywhere, "Overridden")["status"], "True");
    let impossible = env.policy_conditions("impossible").await;
    let accepted = condition(&impossible, "Accepted");
    assert_eq!(accepted["status"], "False");
    assert_eq!(accepted["reason"], "Invalid");
    let msg = accepted["message"].as_str().unwrap();
    assert!(
        msg.contains("\"AES128-SHA\" is not a cipher suite rustls implements")
            && msg.contains("pier's defaults apply"),
        "{msg}"
    );

    // An edit applies to new connections without a restart.
    write_atomic(&env.dir.path().join("policies.yaml"), &policies("1.2"));
    eventually(Duration::from_secs(5), || async {
        env.curl(STRICT, port, &["--tls-max", "1.2"], None)
            .await
            .status
            == 200
    })
    .await;
}

/// pier's order of suites wins over the client's (AES-128-GCM before AES-256-GCM: the
/// cheaper SHA-256 key schedule), a listener's `ciphers` order too, and each handshake, full
/// or resumed, brings one session ticket (rustls would send two).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_suite_order_wins_and_each_connection_gets_one_ticket() {
    let env = serving().await;
    let port = env.https;
    let session = env.dir.path().join("session.pem").display().to_string();
    let aes256_first = [
        "-ciphersuites",
        "TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256",
    ];
    let full = env
        .s_client_request(
            port,
            OPEN,
            &[&aes256_first[..], &["-sess_out", &session]].concat(),
        )
        .await;
    assert!(full.contains("HTTP/1.1 200"), "{full}");
    assert!(
        full.contains("New, TLSv1.3, Cipher is TLS_AES_128_GCM_SHA256"),
        "the server's order: {full}"
    );
    let tickets = |text: &str| text.matches("New Session Ticket arrived").count();
    assert_eq!(
        tickets(&full),
        1,
        "one ticket after a full handshake: {full}"
    );
    let resumed = env
        .s_client_request(
            port,
            OPEN,
            &[&aes256_first[..], &["-sess_in", &session]].concat(),
        )
        .await;
    assert!(resumed.contains("Reused, TLSv1.3"), "resumed: {resumed}");
    assert!(resumed.contains("HTTP/1.1 200"), "{resumed}");
    assert_eq!(
        tickets(&resumed),
        1,
        "one ticket after a resumed one: {resumed}"
    );
    // Only AES-256 offered: still served.
    let only = ["-ciphersuites", "TLS_AES_256_GCM_SHA384"];
    let (_, cipher) = env.s_client(port, OPEN, &only).await.unwrap();
    assert_eq!(cipher, "TLS_AES_256_GCM_SHA384");
    // TLS 1.2: AES-128-GCM before AES-256-GCM and ChaCha20 too.
    let tls12 = [
        "-tls1_2",
        "-cipher",
        "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES128-GCM-SHA256",
    ];
    let (proto, cipher) = env.s_client(port, OPEN, &tls12).await.unwrap();
    assert_eq!(
        (proto.as_str(), cipher.as_str()),
        ("TLSv1.2", "ECDHE-ECDSA-AES128-GCM-SHA256")
    );
    // A listener's `ciphers` are its order: AES-256-GCM, then ChaCha20.
    let chacha_first = [
        "-cipher",
        "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES256-GCM-SHA384",
    ];
    let (_, cipher) = env.s_client(port, LEGACY, &chacha_first).await.unwrap();
    assert_eq!(cipher, "ECDHE-ECDSA-AES256-GCM-SHA384");
    let chacha = ["-cipher", "ECDHE-ECDSA-CHACHA20-POLY1305"];
    let (_, cipher) = env.s_client(port, LEGACY, &chacha).await.unwrap();
    assert_eq!(cipher, "ECDHE-ECDSA-CHACHA20-POLY1305");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mistyped_listener_option_is_reported_and_the_defaults_stay() {
    let env = start().await;
    let gw = std::fs::read_to_string(env.dir.path().join("gw.yaml")).unwrap();
    let typo = gw.replace("pier.dev/max-version: '1.2'", "pier.dev/max-versoin: '1.2'");
    assert_ne!(gw, typo);
    write_atomic(&env.dir.path().join("gw.yaml"), &typo);
    let port = env.https;
    let message = |status: &Value| -> Option<String> {
        let gw = (status.as_array()?)
            .iter()
            .find(|o| o["kind"] == "Gateway")?
            .clone();
        let legacy = (gw["status"]["listeners"].as_array()?)
            .iter()
            .find(|l| l["name"] == "legacy")?
            .clone();
        let accepted = (legacy["conditions"].as_array()?)
            .iter()
            .find(|c| c["type"] == "Accepted")?
            .clone();
        Some(accepted["message"].as_str()?.to_string())
    };
    eventually(Duration::from_secs(5), || async {
        message(&env.status().await).is_some_and(|m| m.contains("max-versoin"))
    })
    .await;
    let m = message(&env.status().await).unwrap();
    assert!(
        m.contains("pier.dev/max-versoin is not an option pier reads")
            && m.contains("keeps pier's TLS defaults"),
        "{m}"
    );
    // pier's defaults: TLS 1.3 again.
    let (proto, _) = env.s_client(port, LEGACY, &[]).await.unwrap();
    assert_eq!(proto, "TLSv1.3");
}

/// Three HTTP listeners: `limited` with a ClientTrafficPolicy (two connections, loopback's
/// forwarding headers believed, idle 2 s, path and header rules), `open` without, `headers`
/// with header rules only.
fn plain_manifests(limited: u16, open: u16, headers: u16) -> String {
    format!(
        "{GATEWAY_CLASS}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: plain, namespace: default}}
spec:
  gatewayClassName: pier
  listeners:
    - {{name: limited, protocol: HTTP, port: {limited}}}
    - {{name: open, protocol: HTTP, port: {open}}}
    - {{name: headers, protocol: HTTP, port: {headers}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: default}}
spec:
  parentRefs: [{{name: plain}}]
  rules:
    - backendRefs: [{{name: a, port: 80}}]
---
apiVersion: pier.dev/v1alpha1
kind: ClientTrafficPolicy
metadata: {{name: limited, namespace: default}}
spec:
  targetRefs:
    - {{group: gateway.networking.k8s.io, kind: Gateway, name: plain, sectionName: limited}}
  connection:
    connectionLimit: {{value: 2}}
  clientIPDetection:
    xForwardedFor:
      trustedCIDRs: [127.0.0.0/8]
  timeout:
    http: {{idleTimeout: 2s}}
  path: {{escapedSlashesAction: RejectRequest, disableMergeSlashes: false}}
  headers: {{withUnderscoresAction: RejectRequest}}
---
apiVersion: pier.dev/v1alpha1
kind: ClientTrafficPolicy
metadata: {{name: headers, namespace: default}}
spec:
  targetRefs:
    - {{group: gateway.networking.k8s.io, kind: Gateway, name: plain, sectionName: headers}}
  headers: {{withUnderscoresAction: DropHeader, preserveXRequestID: true}}
"
    )
}

/// Whether the server closes `tcp` within `wait` (EOF or reset), whatever it sends first.
async fn closed_within(tcp: &mut TcpStream, wait: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

/// A keep-alive HTTP/1.1 connection that has had one answer, and an HTTP/2 (h2c prior
/// knowledge) connection that sent its preface and settings, both then idle.
async fn idle_connections(port: u16) -> (TcpStream, TcpStream) {
    use tokio::io::AsyncWriteExt;
    let mut h1 = TcpStream::connect(local(port)).await.unwrap();
    h1.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 65536];
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("\"backend\"") {
        let n = h1.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before the answer");
        seen.extend_from_slice(&buf[..n]);
    }
    let mut h2 = TcpStream::connect(local(port)).await.unwrap();
    h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    (h1, h2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_limits_and_trusted_proxies_per_listener() {
    init();
    let echo = pier::echo::spawn(SocketAddr::from(([127, 0, 0, 1], 0)), "a")
        .await
        .unwrap();
    let (limited, open, headers) = (free_port(), free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("gw.yaml", plain_manifests(limited, open, headers)),
        ("svc.yaml", service("a", echo.addr)),
    ];
    let _pier = run_manifests(dir.path(), &files).await;
    let forwarded = [
        ("x-forwarded-for", "203.0.113.7"),
        ("x-request-id", "abc-123"),
    ];
    let seen = |port: u16| async move {
        let r = get(&format!("http://127.0.0.1:{port}/"), &forwarded).await;
        assert_eq!(r.status, 200);
        let e = r.echo();
        let header = |n: &str| e.headers.get(n).cloned().unwrap_or_default();
        (header("x-forwarded-for"), header("x-request-id"))
    };
    eventually(Duration::from_secs(5), || async {
        try_get(&format!("http://127.0.0.1:{limited}/"), &[])
            .await
            .is_some_and(|r| r.status == 200)
    })
    .await;

    // clientIPDetection: loopback is a trusted proxy on `limited` only.
    let (xff, id) = seen(limited).await;
    assert_eq!(xff, ["203.0.113.7, 127.0.0.1"]);
    assert_eq!(id, ["abc-123"]);
    let (xff, id) = seen(open).await;
    assert_eq!(xff, ["127.0.0.1"], "--trusted-proxies is empty");
    assert_ne!(id, ["abc-123"]);

    // path: on `limited` an escaped slash is refused and runs of slashes merged, on the fast
    // path (HTTP/1.1) and hyper's (h2c); on `open` both reach the backend as sent.
    for port in [limited, open] {
        let h1 = get(&format!("http://127.0.0.1:{port}/a%2Fb"), &[]).await;
        let h2 = get_h2(port, "/a%2Fb", &[]).await;
        let want = if port == limited { 400 } else { 200 };
        assert_eq!(
            (h1.status.as_u16(), h2.status.as_u16()),
            (want, want),
            "port {port}"
        );
        let h1 = get(&format!("http://127.0.0.1:{port}//x//y"), &[]).await;
        let h2 = get_h2(port, "//x//y", &[]).await;
        let want = if port == limited { "/x/y" } else { "//x//y" };
        assert_eq!((h1.echo().path, h2.echo().path), (want.into(), want.into()));
    }

    // headers: a name with `_` is refused on `limited`, dropped on `headers`, passed on `open`;
    // `headers` keeps an untrusted client's request ID. Both request paths.
    let sent = [("x_user", "admin"), ("x-request-id", "abc-123")];
    for port in [limited, headers, open] {
        let h1 = get(&format!("http://127.0.0.1:{port}/"), &sent).await;
        let h2 = get_h2(port, "/", &sent).await;
        for r in [h1, h2] {
            if port == limited {
                assert_eq!(r.status, 400);
                continue;
            }
            assert_eq!(r.status, 200);
            let e = r.echo();
            let user = e.headers.get("x_user").cloned();
            let id = e.headers.get("x-request-id").cloned().unwrap_or_default();
            if port == headers {
                assert_eq!((user, id), (None, vec!["abc-123".to_string()]));
            } else {
                assert_eq!(user, Some(vec!["admin".to_string()]));
                assert_ne!(id, ["abc-123"], "untrusted: pier's own request ID");
            }
        }
    }

    // connectionLimit 2: a third client makes room by closing the longest-waiting one.
    let mut first = TcpStream::connect(local(limited)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut second = TcpStream::connect(local(limited)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!closed_within(&mut first, Duration::from_millis(200)).await);
    let r = get(&format!("http://127.0.0.1:{limited}/"), &[]).await;
    assert_eq!(r.status, 200);
    // Well before the idle timeout (2 s) could have closed it.
    assert!(
        closed_within(&mut first, Duration::from_millis(500)).await,
        "the longest-waiting connection is closed at the limit"
    );
    assert!(!closed_within(&mut second, Duration::from_millis(200)).await);

    // timeout.http.idleTimeout 2s on `limited`: idle HTTP/1.1 and HTTP/2 connections close
    // after it; on `open` they stay (30 s and --idle-timeout's 60 s).
    let (mut h1, mut h2) = idle_connections(limited).await;
    let (mut h1_open, mut h2_open) = idle_connections(open).await;
    assert!(
        closed_within(&mut h1, Duration::from_secs(4)).await,
        "HTTP/1.1 idle"
    );
    assert!(
        closed_within(&mut h2, Duration::from_secs(4)).await,
        "HTTP/2 idle"
    );
    assert!(!closed_within(&mut h1_open, Duration::from_millis(500)).await);
    assert!(!closed_within(&mut h2_open, Duration::from_millis(500)).await);
    drop((first, second));

    // No policy on `open`: three idle clients and a request, nobody closed.
    let mut idle = vec![];
    for _ in 0..3 {
        idle.push(TcpStream::connect(local(open)).await.unwrap());
    }
    assert_eq!(
        get(&format!("http://127.0.0.1:{open}/"), &[]).await.status,
        200
    );
    for tcp in &mut idle {
        assert!(!closed_within(tcp, Duration::from_millis(100)).await);
    }
}

/// What the server sends on `tcp` until it closes it (or `wait` passes): its bytes, and
/// whether it closed.
async fn answer_within(tcp: &mut TcpStream, wait: Duration) -> (String, bool) {
    let mut buf = [0u8; 4096];
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&seen).into(), true),
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&seen).into(), false),
        }
    }
}

/// `timeout.http.requestReceivedTimeout` (800 ms on `slow`): a request whose head, declared
/// body (HTTP/1.1's fast path), chunked body (hyper's path) or HTTP/2 body is not whole in
/// time gets 408 and its connection closes; one that is whole in time is answered; on `open`,
/// without the policy, the same slow request waits on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_not_received_in_time_gets_408() {
    use tokio::io::AsyncWriteExt;
    init();
    let echo = pier::echo::spawn(SocketAddr::from(([127, 0, 0, 1], 0)), "a")
        .await
        .unwrap();
    let (slow, open) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let gateway = format!(
        "{GATEWAY_CLASS}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: plain, namespace: default}}
spec:
  gatewayClassName: pier
  listeners:
    - {{name: slow, protocol: HTTP, port: {slow}}}
    - {{name: open, protocol: HTTP, port: {open}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: default}}
spec:
  parentRefs: [{{name: plain}}]
  rules:
    - backendRefs: [{{name: a, port: 80}}]
---
apiVersion: pier.dev/v1alpha1
kind: ClientTrafficPolicy
metadata: {{name: slow, namespace: default}}
spec:
  targetRefs:
    - {{group: gateway.networking.k8s.io, kind: Gateway, name: plain, sectionName: slow}}
  timeout:
    http: {{requestReceivedTimeout: 800ms}}
"
    );
    let files = [("gw.yaml", gateway), ("svc.yaml", service("a", echo.addr))];
    let _pier = run_manifests(dir.path(), &files).await;
    // HTTP/2: 10 bytes of a body that then stalls (a client that reads its answer while it
    // uploads; curl's `-T -` reads nothing until its input ends).
    let tcp = TcpStream::connect(local(slow)).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let (mut tx, rx) = futures::channel::mpsc::channel::<
        Result<http_body::Frame<bytes::Bytes>, std::convert::Infallible>,
    >(1);
    let req = http::Request::post(format!("http://127.0.0.1:{slow}/"))
        .body(http_body_util::StreamBody::new(rx))
        .unwrap();
    let started = std::time::Instant::now();
    let answer = tokio::spawn(async move { send.send_request(req).await });
    futures::SinkExt::send(
        &mut tx,
        Ok(http_body::Frame::data(bytes::Bytes::from_static(
            b"0123456789",
        ))),
    )
    .await
    .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(3), answer)
        .await
        .expect("an answer while the body stalls")
        .unwrap()
        .unwrap();
    assert_eq!(resp.status(), 408, "HTTP/2");
    assert!(
        started.elapsed() >= Duration::from_millis(750),
        "{:?}",
        started.elapsed()
    );
    drop(tx);
    let partial: [&[u8]; 3] = [
        b"GET / HTTP/1.1\r\nHost: x\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345",
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n12345\r\n",
    ];
    for bytes in partial {
        let what = String::from_utf8_lossy(bytes)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
            + if bytes.ends_with(b"\r\n") {
                " (head or chunk)"
            } else {
                " (body)"
            };
        let started = std::time::Instant::now();
        let mut tcp = TcpStream::connect(local(slow)).await.unwrap();
        tcp.write_all(bytes).await.unwrap();
        let (answer, closed) = answer_within(&mut tcp, Duration::from_secs(5)).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{what}: {answer:?}");
        assert!(closed, "{what}");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(750) && took < Duration::from_secs(3),
            "{what}: {took:?}"
        );
        // Without the policy the same request is still waited for.
        let mut tcp = TcpStream::connect(local(open)).await.unwrap();
        tcp.write_all(bytes).await.unwrap();
        let (answer, closed) = answer_within(&mut tcp, Duration::from_millis(1500)).await;
        assert!(answer.is_empty() && !closed, "{what} on open: {answer:?}");
    }
    // Whole in time, in several pieces: answered.
    let mut tcp = TcpStream::connect(local(slow)).await.unwrap();
    tcp.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    tcp.write_all(b"cd").await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tcp.read(&mut buf).await.unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
}
