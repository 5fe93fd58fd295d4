//! Client certificate listeners (GEP-91, Gateway `spec.tls.frontend`) end to end: `pier run
//! --manifests DIR` in-process, a real rustls client with a valid certificate, none, and one
//! from another CA, on an `AllowValidOnly` port and an `AllowInsecureFallback` port; a CA
//! ConfigMap rotation while a connection stays open; and a TLS session made on another port
//! that must not resume past the validation.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use pier::run;
use rustls::pki_types::{CertificateDer, ServerName};
use support::client::{Resp, collect, get};
use support::pki::{Leaf, Pki};
use support::web::*;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

const HOST: &str = "app.example.com";

struct Env {
    dir: tempfile::TempDir,
    /// `AllowValidOnly` (the Gateway's `default`).
    strict: u16,
    /// `AllowInsecureFallback` (`perPort`).
    fallback: u16,
    /// No client validation (a second Gateway; same certificate).
    open: u16,
    server_ca: CertificateDer<'static>,
    pier: run::Running,
    _echo: pier::echo::EchoServer,
    _echo_b: pier::echo::EchoServer,
}

fn indent(s: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    s.lines().map(|l| format!("{pad}{l}\n")).collect()
}

fn ca_config_map(name: &str, pem: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: default}}\n\
         data:\n  ca.crt: |\n{}",
        indent(pem, 4)
    )
}

fn manifests(strict: u16, fallback: u16, open: u16) -> String {
    format!(
        "{GATEWAY_CLASS}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: gw
  namespace: default
  annotations: {{pier.dev/client-certificate-header: x-client-cert}}
spec:
  gatewayClassName: pier
  tls:
    frontend:
      default:
        validation:
          caCertificateRefs: [{{group: '', kind: ConfigMap, name: client-ca}}]
      perPort:
        - port: {fallback}
          tls:
            validation:
              mode: AllowInsecureFallback
              caCertificateRefs: [{{group: '', kind: ConfigMap, name: client-ca}}]
  listeners:
    - name: strict
      protocol: HTTPS
      port: {strict}
      tls: {{certificateRefs: [{{name: cert}}]}}
    - name: fallback
      protocol: HTTPS
      port: {fallback}
      tls: {{certificateRefs: [{{name: cert}}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: open, namespace: default}}
spec:
  gatewayClassName: pier
  listeners:
    - name: open
      protocol: HTTPS
      port: {open}
      tls: {{certificateRefs: [{{name: cert}}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r, namespace: default}}
spec:
  parentRefs: [{{name: gw}}, {{name: open}}]
  rules:
    - backendRefs: [{{name: a, port: 80}}]
    # Routing on the identity: only a verified certificate reaches b.
    - matches:
        - path: {{type: PathPrefix, value: /verified}}
          headers: [{{type: RegularExpression, name: x-client-cert, value: 'Subject=.*'}}]
      backendRefs: [{{name: b, port: 80}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: partners, namespace: default}}
spec:
  parentRefs: [{{name: gw}}, {{name: open}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: /partners}}}}]
      backendRefs: [{{name: a, port: 80}}]
---
# Only a client whose certificate verified and names partner.example.
apiVersion: pier.dev/v1alpha1
kind: SecurityPolicy
metadata: {{name: partners, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: partners}}]
  authorization:
    defaultAction: Deny
    rules:
      - action: Allow
        principal: {{clientSANs: [partner.example, 'spiffe://example.org/partner']}}
"
    )
}

async fn start(client_ca: &Pki) -> Env {
    init();
    let echo = pier::echo::spawn(SocketAddr::from(([127, 0, 0, 1], 0)), "a")
        .await
        .unwrap();
    let echo_b = pier::echo::spawn(SocketAddr::from(([127, 0, 0, 1], 0)), "b")
        .await
        .unwrap();
    let (strict, fallback, open) = (free_port(), free_port(), free_port());
    let server = rcgen::generate_simple_self_signed(vec![HOST.to_string()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let secret = support::mesh::tls_secret_pem(
        "default",
        "cert",
        &server.cert.pem(),
        &server.signing_key.serialize_pem(),
    );
    let files = [
        ("gw.yaml", manifests(strict, fallback, open)),
        ("secret.yaml", secret),
        (
            "svc.yaml",
            format!(
                "{}---\n{}",
                service("a", echo.addr),
                service("b", echo_b.addr)
            ),
        ),
        ("ca.yaml", ca_config_map("client-ca", client_ca.ca_pem())),
    ];
    let pier = run_manifests(dir.path(), &files).await;
    Env {
        dir,
        strict,
        fallback,
        open,
        server_ca: server.cert.der().clone(),
        pier,
        _echo: echo,
        _echo_b: echo_b,
    }
}

impl Env {
    /// Waits until the strict port serves a client presenting `cert`.
    async fn wait_served(&self, cert: &Leaf) {
        eventually(Duration::from_secs(5), || {
            served(self.strict, self.client(Some(cert)))
        })
        .await;
    }

    /// A client trusting pier's certificate, presenting `cert` (or none).
    fn client(&self, cert: Option<&Leaf>) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.server_ca.clone()).unwrap();
        let provider = pier::tls::provider::provider();
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let cfg = match cert {
            Some(l) => builder
                .with_client_auth_cert(l.chain.clone(), l.key.clone_key())
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        Arc::new(cfg)
    }

    fn rotate_ca(&self, pem: &str) {
        write_atomic(
            &self.dir.path().join("ca.yaml"),
            &ca_config_map("client-ca", pem),
        );
    }

    /// `pier_proxy_downstream_tls_handshakes_total` for one port, result and reason.
    async fn handshakes(&self, port: u16, result: &str, reason: &str) -> f64 {
        let text = support::web::get(&format!("http://{}/metrics", self.pier.admin_addr), &[])
            .await
            .text();
        support::cluster::sample(
            &text,
            &format!(
                r#"pier_proxy_downstream_tls_handshakes_total{{port="{port}",result="{result}",reason="{reason}"}}"#
            ),
        )
    }

    async fn status(&self) -> serde_json::Value {
        get_json(&format!("http://{}/status", self.pier.admin_addr)).await
    }
}

async fn get_json(url: &str) -> serde_json::Value {
    support::web::get(url, &[]).await.json()
}

/// An open HTTP/1.1 connection over TLS.
struct Conn(http1::SendRequest<http_body_util::Full<bytes::Bytes>>);

impl Conn {
    async fn open(port: u16, cfg: Arc<rustls::ClientConfig>) -> Result<Self, String> {
        let tcp = TcpStream::connect(local(port))
            .await
            .map_err(|e| e.to_string())?;
        let name = ServerName::try_from(HOST.to_string()).unwrap();
        let tls = TlsConnector::from(cfg)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        let (tx, conn) = http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        Ok(Self(tx))
    }

    async fn get(&mut self) -> Result<Resp, String> {
        self.get_path("/").await
    }

    async fn get_path(&mut self, path: &str) -> Result<Resp, String> {
        let mut req = get(HOST, path);
        // A client cannot claim an identity: pier replaces this.
        req.headers_mut().insert(
            "x-client-cert",
            http::HeaderValue::from_static("Subject=\"CN=forged\""),
        );
        let resp = self
            .0
            .send_request(req)
            .await
            .map_err(|e| format!("request: {e}"))?;
        Ok(collect(resp).await)
    }
}

/// One request on a fresh connection: the response, or why there is none. (With TLS 1.3 the
/// client finishes its handshake before the server has checked its certificate; a refusal
/// then shows as the request failing.)
async fn request(port: u16, cfg: Arc<rustls::ClientConfig>) -> Result<Resp, String> {
    request_path(port, cfg, "/").await
}

async fn request_path(
    port: u16,
    cfg: Arc<rustls::ClientConfig>,
    path: &str,
) -> Result<Resp, String> {
    bounded(async {
        let mut c = Conn::open(port, cfg).await?;
        c.get_path(path).await
    })
    .await
}

async fn served(port: u16, cfg: Arc<rustls::ClientConfig>) -> bool {
    request(port, cfg)
        .await
        .is_ok_and(|r| r.status == 200 && r.backend() == "a")
}

fn listener_condition<'a>(
    status: &'a serde_json::Value,
    gateway: &str,
    listener: &str,
    type_: &str,
) -> &'a serde_json::Value {
    let gw = status
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "Gateway" && o["metadata"]["name"] == gateway)
        .unwrap_or_else(|| panic!("no status for Gateway {gateway}: {status}"));
    let l = gw["status"]["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == listener)
        .unwrap();
    l["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap()
}

#[tokio::test]
async fn valid_only_requires_a_certificate_of_the_ca_and_fallback_lets_anyone_in() {
    let ca = Pki::new();
    let other = Pki::new();
    let env = start(&ca).await;
    let valid = ca.issue(&["client.example"]);
    let foreign = other.issue(&["client.example"]);

    env.wait_served(&valid).await;
    let no_cert = request(env.strict, env.client(None)).await;
    assert!(no_cert.is_err(), "no certificate was let in: {no_cert:?}");
    let wrong_ca = request(env.strict, env.client(Some(&foreign))).await;
    assert!(wrong_ca.is_err(), "another CA's certificate: {wrong_ca:?}");

    for cert in [Some(&valid), None, Some(&foreign)] {
        assert!(
            served(env.fallback, env.client(cert)).await,
            "AllowInsecureFallback refused a client (certificate: {})",
            cert.is_some()
        );
    }
    // The Gateway without validation does not ask.
    assert!(served(env.open, env.client(None)).await);

    let status = env.status().await;
    let gw = status
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "Gateway" && o["metadata"]["name"] == "gw")
        .unwrap();
    let insecure = gw["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "InsecureFrontendValidationMode")
        .expect("InsecureFrontendValidationMode condition");
    assert_eq!(insecure["status"], "True");
    assert_eq!(insecure["reason"], "ConfigurationChanged");
    for l in ["strict", "fallback"] {
        assert_eq!(
            listener_condition(&status, "gw", l, "ResolvedRefs")["status"],
            "True"
        );
    }
    env.pier.shutdown().await;
}

#[tokio::test]
async fn a_ca_rotation_applies_to_new_handshakes_and_keeps_open_connections() {
    let old = Pki::new();
    let new = Pki::new();
    let env = start(&old).await;
    let old_cert = old.issue(&["client.example"]);
    let new_cert = new.issue(&["client.example"]);
    env.wait_served(&old_cert).await;
    let mut open = Conn::open(env.strict, env.client(Some(&old_cert)))
        .await
        .unwrap();
    assert_eq!(open.get().await.unwrap().backend(), "a");

    env.rotate_ca(new.ca_pem());
    env.wait_served(&new_cert).await;
    let refused = request(env.strict, env.client(Some(&old_cert))).await;
    assert!(refused.is_err(), "the old CA still verifies: {refused:?}");
    // The connection made under the old CA is not cut.
    assert_eq!(open.get().await.unwrap().backend(), "a");

    // A ConfigMap without a CA: the listener is not accepted (upstream's rule) and serves
    // nothing. pier does not keep the last good bundle here as it keeps a listener's last good
    // certificate: the status must say the validation is gone, and the port closes (its
    // connections drain as any retired port's do).
    std::fs::write(
        env.dir.path().join("ca.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: client-ca, namespace: default}\n\
         data: {other: x}\n",
    )
    .unwrap();
    eventually(Duration::from_secs(5), || async {
        let status = env.status().await;
        listener_condition(&status, "gw", "strict", "Accepted")["reason"] == "NoValidCACertificate"
    })
    .await;
    let status = env.status().await;
    let resolved = listener_condition(&status, "gw", "strict", "ResolvedRefs");
    assert_eq!(resolved["status"], "False");
    assert_eq!(resolved["reason"], "InvalidCACertificateRef");
    assert!(
        request(env.strict, env.client(Some(&new_cert)))
            .await
            .is_err()
    );
    env.pier.shutdown().await;
}

/// rustls resumes any session whose ticket decrypts, without verifying a client certificate,
/// and pier shares one ticketer across ports: sessions carry the port's validation policy.
#[tokio::test]
async fn a_session_from_a_port_without_validation_does_not_resume_past_it() {
    let ca = Pki::new();
    let env = start(&ca).await;
    let valid = ca.issue(&["client.example"]);
    env.wait_served(&valid).await;
    // One config (one session cache, one SNI) for both ports.
    let anonymous = env.client(None);
    for port in [env.open, env.fallback] {
        assert!(served(port, anonymous.clone()).await);
        let resumed = request(env.strict, anonymous.clone()).await;
        assert!(resumed.is_err(), "resumed past validation: {resumed:?}");
    }
    env.pier.shutdown().await;
}

/// `pier.dev/client-certificate-header`: the verified identity, never the client's own value,
/// and nothing for an unverified certificate on an `AllowInsecureFallback` port.
#[tokio::test]
async fn the_identity_header_carries_only_a_verified_certificate() {
    let ca = Pki::new();
    let other = Pki::new();
    let env = start(&ca).await;
    let valid = ca.issue(&["client.example"]);
    let foreign = other.issue(&["client.example"]);
    env.wait_served(&valid).await;
    let header = |r: Resp| r.echo().headers.get("x-client-cert").cloned();
    let verified = Some(vec![
        "Subject=\"CN=rcgen self signed cert\";DNS=client.example".to_string(),
    ]);
    for port in [env.strict, env.fallback] {
        let r = request(port, env.client(Some(&valid))).await.unwrap();
        assert_eq!(header(r), verified, "port {port}");
    }
    for cert in [None, Some(&foreign)] {
        let r = request(env.fallback, env.client(cert)).await.unwrap();
        assert_eq!(header(r), None);
    }
    // Another Gateway's listener, without the annotation, passes the header on untouched.
    let r = request(env.open, env.client(None)).await.unwrap();
    assert_eq!(header(r), Some(vec!["Subject=\"CN=forged\"".to_string()]));

    // HTTPRoute header matches see the verified identity, never the client's claim.
    for (port, cert, want) in [
        (env.strict, Some(&valid), "b"),
        (env.fallback, Some(&valid), "b"),
        (env.fallback, None, "a"),
        (env.fallback, Some(&foreign), "a"),
    ] {
        let r = request_path(port, env.client(cert), "/verified").await;
        assert_eq!(r.unwrap().backend(), want, "port {port}");
    }
    env.pier.shutdown().await;
}

/// `pier_proxy_downstream_tls_handshakes_total{port,result,reason}`: each refused client counted
/// on its port by why (no certificate, another CA's, an expired one; plaintext; a client that
/// closes mid-handshake), a verified client as `ok`, and an `AllowInsecureFallback` port's
/// unverified client as `ok` too (the handshake let it in).
#[tokio::test]
async fn client_handshakes_are_counted_by_port_result_and_reason() {
    let ca = Pki::new();
    let other = Pki::new();
    let env = start(&ca).await;
    let valid = ca.issue(&["client.example"]);
    let foreign = other.issue(&["client.example"]);
    let expired = ca.issue_expired(&["client.example"]);
    env.wait_served(&valid).await;
    let (strict, fallback) = (env.strict, env.fallback);
    // The waiting above may have counted anything: compare with what is counted now.
    let mut want = Vec::new();
    for (port, result, reason, more) in [
        (strict, "ok", "none", 1.0),
        (strict, "error", "no_client_certificate", 1.0),
        (strict, "error", "unknown_ca", 1.0),
        (strict, "error", "expired", 1.0),
        (strict, "error", "protocol", 1.0),
        (strict, "error", "closed", 1.0),
        (fallback, "ok", "none", 1.0),
        (fallback, "error", "unknown_ca", 0.0),
    ] {
        let before = env.handshakes(port, result, reason).await;
        want.push((port, result, reason, before + more));
    }

    let no_cert = request(strict, env.client(None)).await;
    assert!(no_cert.is_err(), "no certificate was let in: {no_cert:?}");
    let wrong_ca = request(strict, env.client(Some(&foreign))).await;
    assert!(wrong_ca.is_err(), "another CA's certificate: {wrong_ca:?}");
    let old = request(strict, env.client(Some(&expired))).await;
    assert!(old.is_err(), "an expired certificate: {old:?}");
    assert_eq!(
        request(strict, env.client(Some(&valid)))
            .await
            .unwrap()
            .status,
        200
    );
    assert!(served(fallback, env.client(Some(&foreign))).await);
    // Plaintext HTTP to the TLS port, then a client that connects and leaves.
    let mut plain = TcpStream::connect(local(strict)).await.unwrap();
    plain
        .write_all(b"GET / HTTP/1.1\r\nhost: app.example.com\r\n\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let _ = bounded(plain.read_to_end(&mut rest)).await;
    drop(TcpStream::connect(local(strict)).await.unwrap());

    // The server counts once it has read the client's certificate (TLS 1.3: after the client
    // has finished its side), so the client may see the refusal first.
    let counted = || async {
        let mut got = Vec::new();
        for (port, result, reason, _) in &want {
            got.push((
                *port,
                *result,
                *reason,
                env.handshakes(*port, result, reason).await,
            ));
        }
        got
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut got = counted().await;
    while got != want && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        got = counted().await;
    }
    assert_eq!(got, want);
    env.pier.shutdown().await;
}

/// A SecurityPolicy principal by client certificate (`clientSANs`): only a certificate that
/// verified against the frontend CAs and names the SAN gets in; the same SAN on a
/// certificate the fallback port accepted without verifying it, another SAN, no certificate
/// or a Gateway that asks for none: 403.
#[tokio::test]
async fn a_policy_lets_in_only_verified_certificates_with_its_san() {
    let ca = Pki::new();
    let other = Pki::new();
    let env = start(&ca).await;
    let partner = ca.issue(&["partner.example"]);
    let client = ca.issue(&["client.example"]);
    let forged = other.issue(&["partner.example"]);
    env.wait_served(&partner).await;
    let status = |port: u16, cert: Option<&Leaf>| {
        let cfg = env.client(cert);
        async move {
            request_path(port, cfg, "/partners/x")
                .await
                .map(|r| r.status.as_u16())
        }
    };
    assert_eq!(status(env.strict, Some(&partner)).await, Ok(200));
    assert_eq!(status(env.fallback, Some(&partner)).await, Ok(200));
    assert_eq!(status(env.strict, Some(&client)).await, Ok(403));
    assert_eq!(status(env.fallback, Some(&forged)).await, Ok(403));
    assert_eq!(status(env.fallback, None).await, Ok(403));
    assert_eq!(status(env.open, Some(&partner)).await, Ok(403));
    env.pier.shutdown().await;
}
