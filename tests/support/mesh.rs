//! Mesh end-to-end helpers: a PKI made with rcgen at test time (pier's client CA, mesh CAs,
//! SPIFFE-only workload certificates), an mTLS workload that reports the client certificate it
//! saw, manifests for a meshed Gateway, pier started in-process from a manifest directory, and
//! a keep-alive load client that records every request's outcome.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use pier::run::{self, RunOptions};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use super::client::{Resp, collect};
use super::web::{eventually, get, write_atomic};

/// The SPIFFE ID of the workload behind the meshed Service.
pub const WORKLOAD_ID: &str = "spiffe://cluster.local/ns/app/sa/web";
/// pier's own identity, in its client certificate.
pub const PIER_ID: &str = "spiffe://cluster.local/ns/pier/sa/gateway";
/// The subject CN of pier's client certificate.
pub const PIER_CN: &str = "pier-gateway";

// === PKI ===

/// A CA made at test time (ECDSA P-256).
pub struct Ca {
    pub pem: String,
    pub der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

/// A certificate (leaf first; the issuing CA follows when `with_ca`) and its key, DER and PEM.
pub struct Cert {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    pub chain_pem: String,
    pub key_pem: String,
}

impl Cert {
    /// `dir/certs/<name>.crt` (the chain) and `.key`, as the examples' `gen-certs.sh` write them.
    pub fn from_files(dir: &Path, name: &str) -> Self {
        let read = |ext: &str| {
            std::fs::read_to_string(dir.join(format!("certs/{name}.{ext}")))
                .unwrap_or_else(|e| panic!("certs/{name}.{ext}: {e}"))
        };
        let (chain_pem, key_pem) = (read("crt"), read("key"));
        use rustls::pki_types::pem::PemObject;
        Self {
            chain: CertificateDer::pem_slice_iter(chain_pem.as_bytes())
                .map(Result::unwrap)
                .collect(),
            key: PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap(),
            chain_pem,
            key_pem,
        }
    }
}

impl Ca {
    pub fn new(cn: &str) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).unwrap();
        Self {
            pem: cert.pem(),
            der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A mesh workload certificate: no subject, only the SPIFFE URI SAN (as mesh CAs issue).
    pub fn workload(&self, spiffe: &str) -> Cert {
        self.issue(None, spiffe, false, |_| {})
    }

    /// A server certificate for DNS names (no subject), as a public CA issues.
    pub fn server(&self, names: &[&str]) -> Cert {
        let sans = names
            .iter()
            .map(|n| SanType::DnsName((*n).try_into().unwrap()))
            .collect();
        self.issue(None, "spiffe://unused", false, |p| {
            p.subject_alt_names = sans
        })
    }

    /// A workload certificate that expired in 2021.
    pub fn workload_expired(&self, spiffe: &str) -> Cert {
        self.issue(None, spiffe, false, |p| {
            p.not_before = rcgen::date_time_ymd(2020, 1, 1);
            p.not_after = rcgen::date_time_ymd(2021, 1, 1);
        })
    }

    /// pier's client certificate: subject `CN=<cn>, O=pier`, the SPIFFE URI SAN, and this CA
    /// after the leaf.
    pub fn client(&self, cn: &str, spiffe: &str) -> Cert {
        self.issue(Some(cn), spiffe, true, |_| {})
    }

    fn issue(
        &self,
        cn: Option<&str>,
        spiffe: &str,
        with_ca: bool,
        edit: impl FnOnce(&mut CertificateParams),
    ) -> Cert {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = DistinguishedName::new();
        if let Some(cn) = cn {
            params.distinguished_name.push(DnType::CommonName, cn);
            params
                .distinguished_name
                .push(DnType::OrganizationName, "pier");
        }
        params.subject_alt_names = vec![SanType::URI(spiffe.try_into().unwrap())];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        edit(&mut params);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let mut chain = vec![cert.der().clone()];
        let mut chain_pem = cert.pem();
        if with_ca {
            chain.push(self.der.clone());
            chain_pem.push_str(&self.pem);
        }
        Cert {
            chain,
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            chain_pem,
            key_pem: key.serialize_pem(),
        }
    }
}

impl Cert {
    pub fn leaf(&self) -> &CertificateDer<'static> {
        &self.chain[0]
    }

    pub fn leaf_sha256(&self) -> String {
        sha256_hex(self.leaf())
    }

    /// The leaf alone, PEM (a server presents only its leaf here).
    pub fn leaf_pem(&self) -> String {
        self.chain_pem
            .split_inclusive("-----END CERTIFICATE-----\n")
            .next()
            .unwrap()
            .to_string()
    }
}

pub fn sha256_hex(der: &[u8]) -> String {
    pier::tls::provider::sha256(der)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Everything one mesh test needs: pier's client CA and certificate, the mesh CA and a
/// workload certificate from it, a rogue CA (same shape, never trusted).
pub struct MeshPki {
    pub client_ca: Ca,
    pub pier: Cert,
    pub mesh_ca: Ca,
    pub workload: Cert,
    pub rogue_ca: Ca,
}

impl MeshPki {
    pub fn new() -> Self {
        super::init();
        let client_ca = Ca::new("pier client CA");
        let pier = client_ca.client(PIER_CN, PIER_ID);
        let mesh_ca = Ca::new("mesh CA");
        let workload = mesh_ca.workload(WORKLOAD_ID);
        Self {
            client_ca,
            pier,
            mesh_ca,
            workload,
            rogue_ca: Ca::new("rogue CA"),
        }
    }
}

// === the mTLS workload ===

/// What the workload saw of one request; also the JSON body of its answer.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Seen {
    pub tls: bool,
    pub sni: Option<String>,
    pub alpn: Option<String>,
    /// RFC 4514-ish, from x509-parser (`CN=pier-gateway, O=pier`).
    pub client_subject: Option<String>,
    pub client_uris: Vec<String>,
    pub client_cert_sha256: Option<String>,
    /// The client certificate's serial number (hex, `:`-separated, as x509-parser prints it).
    #[serde(default)]
    pub client_serial: Option<String>,
    /// Which of the workload's certificates served the connection (0 = the first; each
    /// [`Workload::switch`] adds one).
    pub epoch: u64,
    /// The TLS session was resumed (no full handshake, no certificate sent again).
    #[serde(default)]
    pub resumed: bool,
    pub proto: String,
    pub host: String,
    pub path: String,
}

/// One connection attempt the workload saw.
#[derive(Clone, Debug)]
pub struct Accepted {
    /// False when the TLS handshake failed (or the peer spoke plaintext to a TLS-only port).
    pub ok: bool,
    pub tls: bool,
    pub epoch: u64,
}

/// A meshed workload: TLS with a workload certificate, requiring a client certificate from
/// pier's client CA, answering every request with a JSON [`Seen`]. With `plaintext_too` the
/// same port also answers plaintext HTTP (it sniffs the first byte: 0x16 is a TLS handshake),
/// like a pod that serves both before and after it joins the mesh.
pub struct Workload {
    pub addr: SocketAddr,
    state: Arc<WorkloadState>,
    task: JoinHandle<()>,
}

struct WorkloadState {
    client_roots: Arc<RootCertStore>,
    /// (epoch, config).
    current: Mutex<(u64, Arc<rustls::ServerConfig>)>,
    plaintext_too: bool,
    seen: watch::Sender<Vec<Seen>>,
    accepted: watch::Sender<Vec<Accepted>>,
    /// Bumped to drain every open connection.
    kick: watch::Sender<u64>,
    /// Close each connection after its first response (HTTP/1.1 `Connection: close`, HTTP/2
    /// GOAWAY), as an origin without keep-alive does.
    close_each: std::sync::atomic::AtomicBool,
}

impl Workload {
    pub async fn spawn(cert: &Cert, client_ca: &Ca) -> Self {
        Self::spawn_with(cert, client_ca, false).await
    }

    pub async fn spawn_with(cert: &Cert, client_ca: &Ca, plaintext_too: bool) -> Self {
        Self::spawn_on(
            std::net::Ipv4Addr::LOCALHOST.into(),
            cert,
            client_ca,
            plaintext_too,
        )
        .await
    }

    /// As [`spawn_with`](Self::spawn_with), listening on `ip` (cluster tests need an address
    /// the API server accepts in an EndpointSlice).
    pub async fn spawn_on(
        ip: std::net::IpAddr,
        cert: &Cert,
        client_ca: &Ca,
        plaintext_too: bool,
    ) -> Self {
        Self::spawn_trusting(
            ip,
            cert,
            std::slice::from_ref(&client_ca.der),
            plaintext_too,
        )
        .await
    }

    /// A workload requiring client certificates that chain to any of `client_roots` (e.g. a
    /// SPIRE trust bundle).
    pub async fn spawn_trusting(
        ip: std::net::IpAddr,
        cert: &Cert,
        client_roots: &[CertificateDer<'static>],
        plaintext_too: bool,
    ) -> Self {
        Self::spawn_at(SocketAddr::new(ip, 0), cert, client_roots, plaintext_too).await
    }

    /// A TLS-only workload on `addr` (a fixed port, as an example's EndpointSlice names).
    pub async fn spawn_trusting_on(
        addr: SocketAddr,
        cert: &Cert,
        client_roots: &[CertificateDer<'static>],
    ) -> Self {
        Self::spawn_at(addr, cert, client_roots, false).await
    }

    async fn spawn_at(
        addr: SocketAddr,
        cert: &Cert,
        client_roots: &[CertificateDer<'static>],
        plaintext_too: bool,
    ) -> Self {
        let mut roots = RootCertStore::empty();
        for r in client_roots {
            roots.add(r.clone()).unwrap();
        }
        let client_roots = Arc::new(roots);
        let config = server_config(cert, &client_roots);
        let state = Arc::new(WorkloadState {
            client_roots,
            current: Mutex::new((0, config)),
            plaintext_too,
            seen: watch::channel(vec![]).0,
            accepted: watch::channel(vec![]).0,
            kick: watch::channel(0).0,
            close_each: false.into(),
        });
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(accept_loop(listener, state.clone()));
        Self { addr, state, task }
    }

    /// Serves `cert` on new connections from now on; with `drain`, also drains the open ones
    /// (in-flight requests finish, then they close), as a restarted pod does.
    pub fn switch(&self, cert: &Cert, drain: bool) -> u64 {
        let config = server_config(cert, &self.state.client_roots);
        let epoch = {
            let mut cur = self.state.current.lock().unwrap();
            cur.0 += 1;
            cur.1 = config;
            cur.0
        };
        if drain {
            self.state.kick.send_modify(|k| *k += 1);
        }
        epoch
    }

    /// From now on each connection closes after its first response.
    pub fn close_after_each_response(&self) {
        self.state
            .close_each
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.state.seen.borrow().clone()
    }

    pub fn count(&self) -> usize {
        self.state.seen.borrow().len()
    }

    pub fn accepted(&self) -> Vec<Accepted> {
        self.state.accepted.borrow().clone()
    }

    /// Successful TLS handshakes so far.
    pub fn handshakes(&self) -> usize {
        self.accepted().iter().filter(|a| a.ok && a.tls).count()
    }

    /// Waits until at least `n` connection attempts were seen (callers bound it).
    pub async fn wait_for_accepted(&self, n: usize) {
        let mut rx = self.state.accepted.subscribe();
        let _ = rx.wait_for(|v| v.len() >= n).await;
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn server_config(cert: &Cert, client_roots: &Arc<RootCertStore>) -> Arc<rustls::ServerConfig> {
    let provider = pier::tls::provider::provider();
    let verifier =
        WebPkiClientVerifier::builder_with_provider(client_roots.clone(), provider.clone())
            .build()
            .unwrap();
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(cert.chain.clone(), cert.key.clone_key())
        .unwrap();
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(cfg)
}

async fn accept_loop(listener: TcpListener, state: Arc<WorkloadState>) {
    let mut conns = JoinSet::new();
    while let Ok((tcp, _)) = listener.accept().await {
        conns.spawn(serve_conn(tcp, state.clone()));
        // Reap finished connection tasks.
        while conns.try_join_next().is_some() {}
    }
}

async fn serve_conn(tcp: TcpStream, state: Arc<WorkloadState>) {
    let _ = tcp.set_nodelay(true);
    let mut kick = state.kick.subscribe();
    kick.borrow_and_update();
    let mut first = [0u8; 1];
    let is_tls = matches!(tcp.peek(&mut first).await, Ok(1) if first[0] == 0x16);
    let (epoch, config) = state.current.lock().unwrap().clone();
    let record = |ok, tls| {
        state
            .accepted
            .send_modify(|v| v.push(Accepted { ok, tls, epoch }))
    };
    if !is_tls {
        record(state.plaintext_too, false);
        if state.plaintext_too {
            let base = Seen::plain(epoch);
            serve_http(TokioIo::new(tcp), base, state.clone(), kick).await;
        }
        return;
    }
    let start =
        match tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp).await
        {
            Ok(s) => s,
            Err(_) => return record(false, true),
        };
    let sni = start.client_hello().server_name().map(str::to_string);
    let tls = match start.into_stream(config).await {
        Ok(t) => t,
        Err(_) => return record(false, true),
    };
    record(true, true);
    let conn = tls.get_ref().1;
    let client = conn.peer_certificates().and_then(|c| c.first().cloned());
    let (client_subject, client_uris) = client.as_ref().map(describe).unwrap_or_default();
    let base = Seen {
        tls: true,
        sni,
        alpn: conn
            .alpn_protocol()
            .map(|p| String::from_utf8_lossy(p).into_owned()),
        client_subject,
        client_uris,
        client_cert_sha256: client.as_ref().map(|c| sha256_hex(c)),
        client_serial: client.as_ref().map(serial),
        epoch,
        resumed: conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed),
        proto: String::new(),
        host: String::new(),
        path: String::new(),
    };
    serve_http(TokioIo::new(tls), base, state, kick).await;
}

impl Seen {
    fn plain(epoch: u64) -> Self {
        Self {
            tls: false,
            sni: None,
            alpn: None,
            client_subject: None,
            client_uris: vec![],
            client_cert_sha256: None,
            client_serial: None,
            epoch,
            resumed: false,
            proto: String::new(),
            host: String::new(),
            path: String::new(),
        }
    }
}

async fn serve_http<I>(
    io: TokioIo<I>,
    base: Seen,
    state: Arc<WorkloadState>,
    mut kick: watch::Receiver<u64>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let served = Arc::new(tokio::sync::Notify::new());
    let notify = served.clone();
    let svc = service_fn(move |req: Request<Incoming>| {
        if state.close_each.load(std::sync::atomic::Ordering::Relaxed) {
            notify.notify_one();
        }
        let mut seen = base.clone();
        seen.proto = format!("{:?}", req.version());
        seen.host = req
            .headers()
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_string)
            .or_else(|| req.uri().authority().map(|a| a.to_string()))
            .unwrap_or_default();
        seen.path = req.uri().path().to_string();
        let body = serde_json::to_vec(&seen).unwrap();
        state.seen.send_modify(|v| v.push(seen));
        async move {
            Ok::<_, Infallible>(
                Response::builder()
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Full::new(Bytes::from(body)))
                    .unwrap(),
            )
        }
    });
    let builder = auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection(io, svc);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = kick.changed() => {}
        // Shutting down while the request is in flight answers it, then closes.
        _ = served.notified() => {}
    }
    // Drain: in-flight requests finish, HTTP/1.1 answers `Connection: close`, HTTP/2 sends
    // GOAWAY; then the connection closes.
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
}

/// A certificate's serial number, hex.
pub fn serial(der: &CertificateDer<'_>) -> String {
    let (_, x509) = x509_parser::parse_x509_certificate(der).unwrap();
    x509.raw_serial_as_string()
}

/// The subject and URI SANs of a certificate.
pub fn describe(der: &CertificateDer<'_>) -> (Option<String>, Vec<String>) {
    let (_, x509) = x509_parser::parse_x509_certificate(der).unwrap();
    let subject = x509.subject().to_string();
    let uris = pier::tls::client::uri_sans(der).unwrap();
    (Some(subject), uris)
}

// === manifests ===

pub const GATEWAY_CLASS: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: pier}
spec: {controllerName: pier.dev/gateway-controller}
";

/// The client certificate reference of Gateway `gw/edge` (Secret `gw/pier-client`).
pub const CLIENT_REF: &str =
    "  tls:\n    backend:\n      clientCertificateRef: {name: pier-client}\n";

/// Gateway `gw/edge`, one HTTP listener on `port` taking routes from every namespace, with
/// `spec_extra` appended to its spec (two-space indented lines).
pub fn gateway(port: u16, spec_extra: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: gw}}
spec:
  gatewayClassName: pier
  listeners:
    - name: http
      protocol: HTTP
      port: {port}
      allowedRoutes: {{namespaces: {{from: All}}}}
{spec_extra}"
    )
}

/// `spec.mesh` with a GEP-3951 single bundle ref (ConfigMap `gw/mesh-ca`, key
/// `ca-bundle.crt`) and `selector` lines (four-space indented, may be empty), plus the client
/// certificate reference.
pub fn mesh_spec(selector: &str) -> String {
    format!(
        "{CLIENT_REF}  mesh:\n    trustBundle: {{name: mesh-ca, bundleKey: ca-bundle.crt}}\n{selector}"
    )
}

pub fn namespace(name: &str, labels: &str) -> String {
    format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}, labels: {{{labels}}}}}\n")
}

/// Service `ns/name` port 443 with one ready endpoint at `addr` (EndpointSlice `name-1`).
pub fn service(ns: &str, name: &str, addr: SocketAddr) -> String {
    service_with_pods(ns, name, &[(addr, None)])
}

/// Service `ns/name` port 443 with one EndpointSlice per endpoint (`name-1`, `name-2`, ...);
/// each endpoint names a Pod (`targetRef`) unless `None`.
pub fn service_with_pods(ns: &str, name: &str, endpoints: &[(SocketAddr, Option<&str>)]) -> String {
    let mut out = format!(
        "apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {ns}}}
spec:
  ports: [{{name: web, port: 443}}]
"
    );
    for (i, (addr, pod)) in (1..).zip(endpoints) {
        let target = pod
            .map(|p| format!("    targetRef: {{kind: Pod, name: {p}, namespace: {ns}}}\n"))
            .unwrap_or_default();
        out.push_str(&format!(
            "---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-{i}
  namespace: {ns}
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{name: web, port: {port}}}]
endpoints:
  - addresses: [\"{ip}\"]
    conditions: {{ready: true}}
{target}",
            port = addr.port(),
            ip = addr.ip()
        ));
    }
    out
}

/// HTTPRoute `ns/name` for hostname `<name>.example` (every path) to Service `ns/svc:443`,
/// attached to `gw/edge`, with `labels` (`k: v, ...`).
pub fn route(ns: &str, name: &str, labels: &str, svc: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: {ns}, labels: {{{labels}}}}}
spec:
  parentRefs: [{{name: edge, namespace: gw}}]
  hostnames: [{name}.example]
  rules:
    - backendRefs: [{{name: {svc}, port: 443}}]
"
    )
}

fn indent(text: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    text.lines().map(|l| format!("{pad}{l}\n")).collect()
}

/// A ConfigMap `ns/name` with `key` holding `value` (a block scalar).
pub fn config_map(ns: &str, name: &str, key: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         data:\n  {key}: |\n{}",
        indent(value, 4)
    )
}

/// An Opaque Secret `ns/name` with `key` in stringData.
pub fn opaque_secret(ns: &str, name: &str, key: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         type: Opaque\nstringData:\n  {key}: |\n{}",
        indent(value, 4)
    )
}

/// A `kubernetes.io/tls` Secret `ns/name` (stringData).
pub fn tls_secret(ns: &str, name: &str, cert: &Cert) -> String {
    tls_secret_pem(ns, name, &cert.chain_pem, &cert.key_pem)
}

/// A `kubernetes.io/tls` Secret `ns/name` with a PEM chain and key (stringData).
pub fn tls_secret_pem(ns: &str, name: &str, chain_pem: &str, key_pem: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         type: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
        indent(chain_pem, 4),
        indent(key_pem, 4)
    )
}

pub fn cluster_trust_bundle(name: &str, pem: &str) -> String {
    format!(
        "apiVersion: certificates.k8s.io/v1beta1\nkind: ClusterTrustBundle\n\
         metadata: {{name: {name}}}\nspec:\n  trustBundle: |\n{}",
        indent(pem, 4)
    )
}

/// pier's client certificate Secret `gw/pier-client`.
pub fn pier_client_secret(pki: &MeshPki) -> String {
    tls_secret("gw", "pier-client", &pki.pier)
}

/// The GEP-3951 bundle ConfigMap `gw/mesh-ca` (key `ca-bundle.crt`) with these CAs, in order.
pub fn bundle(cas: &[&Ca]) -> String {
    let pem: String = cas.iter().map(|c| c.pem.as_str()).collect();
    config_map("gw", "mesh-ca", "ca-bundle.crt", &pem)
}

/// Pod `ns/name` running as ServiceAccount `service_account` (all per-endpoint identity
/// reads of a Pod).
pub fn pod(ns: &str, name: &str, service_account: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec: {{serviceAccountName: {service_account}, containers: [{{name: app, image: app}}]}}\n"
    )
}

// === pier ===

/// pier running in-process from a manifest directory, its listener on `port`.
/// Starts pier on Gateway `gw/edge` at `port`, meshing every route (no selector), with
/// `backends` and `routes` (YAML documents) and pier's client Secret and the mesh bundle of
/// `pki`.
pub async fn start_meshed(port: u16, pki: &MeshPki, backends: String, routes: String) -> Pier {
    let files = [
        ("00-class.yaml", GATEWAY_CLASS.to_string()),
        ("10-gateway.yaml", gateway(port, &mesh_spec(""))),
        ("20-backends.yaml", backends),
        ("30-routes.yaml", routes),
        ("40-client.yaml", pier_client_secret(pki)),
        ("41-bundle.yaml", bundle(&[&pki.mesh_ca])),
    ];
    Pier::start(port, &files).await
}

pub struct Pier {
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub running: run::Running,
}

impl Pier {
    /// Writes `files` (name, YAML) into a new directory and starts pier on it; the Gateway
    /// must listen on `port`.
    pub async fn start(port: u16, files: &[(&str, String)]) -> Self {
        Self::start_with(port, files, pier::proxy::Limits::default()).await
    }

    /// [`Pier::start`] with these proxy limits.
    pub async fn start_with(
        port: u16,
        files: &[(&str, String)],
        limits: pier::proxy::Limits,
    ) -> Self {
        super::init();
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        let running = run::start(RunOptions {
            listen_host: [127, 0, 0, 1].into(),
            admin: SocketAddr::from(([127, 0, 0, 1], 0)),
            limits,
            ..RunOptions::new(run::Source::Manifests(dir.path().to_path_buf()))
        })
        .await
        .unwrap();
        let pier = Self { dir, port, running };
        eventually(Duration::from_secs(5), || async {
            get(&pier.admin_url("/readyz"), &[]).await.status == 200
        })
        .await;
        pier
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.running.admin_addr)
    }

    /// `GET /` with `Host: host` on a fresh connection.
    pub async fn get(&self, host: &str) -> Resp {
        get(
            &format!("http://127.0.0.1:{}/", self.port),
            &[("host", host)],
        )
        .await
    }

    /// Replaces (or creates) manifest file `name` by rename, as config tools do.
    pub fn write(&self, name: &str, text: &str) {
        write_atomic(&self.dir.path().join(name), text);
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub async fn generation(&self) -> u64 {
        get(&self.admin_url("/config"), &[]).await.json()["generation"]
            .as_u64()
            .unwrap()
    }

    /// Waits until `/config` shows a generation above `previous`; returns when it did.
    pub async fn wait_generation_above(&self, previous: u64) -> Instant {
        eventually(Duration::from_secs(5), || async {
            self.generation().await > previous
        })
        .await;
        Instant::now()
    }

    pub async fn status(&self) -> serde_json::Value {
        get(&self.admin_url("/status"), &[]).await.json()
    }

    pub async fn metrics(&self) -> String {
        get(&self.admin_url("/metrics"), &[]).await.text()
    }

    /// The error and TLS handshake counters, for test output.
    pub async fn error_metrics(&self) -> String {
        self.metrics()
            .await
            .lines()
            .filter(|l| {
                !l.starts_with('#')
                    && (l.starts_with("pier_proxy_errors")
                        || l.starts_with("pier_proxy_upstream_connect_errors")
                        || l.starts_with("pier_proxy_upstream_tls"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A metric line starting with `line` (a full name), or containing it (a fragment).
    pub async fn assert_metric(&self, line: &str) {
        let m = self.metrics().await;
        let found = if line.starts_with("pier_") {
            m.lines().any(|l| l.starts_with(line))
        } else {
            m.contains(line)
        };
        assert!(found, "{line} missing in\n{m}");
    }

    pub async fn shutdown(self) {
        super::bounded(self.running.shutdown()).await;
    }
}

/// The conditions of the object of `kind` `ns/name` in `/status`, by type: (status, reason,
/// message). Route conditions are those of its first parent.
pub fn conditions(
    status: &serde_json::Value,
    kind: &str,
    ns: &str,
    name: &str,
) -> BTreeMap<String, (String, String, String)> {
    let objects = status.as_array().expect("/status is a list of objects");
    let obj = objects
        .iter()
        .find(|o| {
            o["kind"] == kind
                && o["metadata"]["namespace"].as_str() == Some(ns)
                && o["metadata"]["name"] == name
        })
        .unwrap_or_else(|| panic!("no {kind} {ns}/{name} in {status:#}"));
    let conds = match kind {
        "HTTPRoute" | "GRPCRoute" | "TLSRoute" | "TCPRoute" | "UDPRoute" => {
            &obj["status"]["parents"][0]["conditions"]
        }
        _ => &obj["status"]["conditions"],
    };
    conds
        .as_array()
        .unwrap_or_else(|| panic!("no conditions in {obj:#}"))
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("type"), (s("status"), s("reason"), s("message")))
        })
        .collect()
}

// === load ===

/// One request of a [`Load`].
#[derive(Clone, Debug)]
pub struct Outcome {
    pub start: Instant,
    pub end: Instant,
    /// `None`: the connection failed.
    pub status: Option<u16>,
    /// The workload's report, for 200s from a [`Workload`].
    pub seen: Option<Seen>,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.status == Some(200)
    }
}

/// Clients sending `GET /load` with `Host: host` back to back over keep-alive connections (a
/// new connection only after an error), each recording every outcome.
pub struct Load {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<Vec<Outcome>>>,
}

/// Pause between a client's requests: continuous, without starving pier of the two cores.
const PACE: Duration = Duration::from_millis(2);

impl Load {
    pub fn start(addr: SocketAddr, host: &str, clients: usize) -> Self {
        let stop = watch::channel(false).0;
        let tasks = (0..clients)
            .map(|_| tokio::spawn(client_loop(addr, host.to_string(), stop.subscribe())))
            .collect();
        Self { stop, tasks }
    }

    /// Stops the clients and returns every outcome, by start time.
    pub async fn stop(self) -> Report {
        let _ = self.stop.send(true);
        let mut all = vec![];
        for t in self.tasks {
            all.extend(super::bounded(t).await.unwrap());
        }
        all.sort_by_key(|o| o.start);
        Report(all)
    }
}

async fn client_loop(addr: SocketAddr, host: String, stop: watch::Receiver<bool>) -> Vec<Outcome> {
    let mut out = vec![];
    let mut conn: Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>> = None;
    while !*stop.borrow() {
        let start = Instant::now();
        let sender = match conn.as_mut() {
            Some(s) if !s.is_closed() => s,
            _ => match TcpStream::connect(addr).await {
                Ok(tcp) => {
                    let _ = tcp.set_nodelay(true);
                    match hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await {
                        Ok((tx, c)) => {
                            tokio::spawn(c);
                            conn.insert(tx)
                        }
                        Err(_) => {
                            out.push(Outcome::failed(start));
                            continue;
                        }
                    }
                }
                Err(_) => {
                    out.push(Outcome::failed(start));
                    tokio::time::sleep(PACE).await;
                    continue;
                }
            },
        };
        let req = Request::get("/load")
            .header(http::header::HOST, &host)
            .body(Full::<Bytes>::default())
            .unwrap();
        let sent = tokio::time::timeout(Duration::from_secs(10), async {
            let _ = sender.ready().await;
            match sender.send_request(req).await {
                Ok(resp) => Some(collect(resp).await),
                Err(_) => None,
            }
        })
        .await
        .ok()
        .flatten();
        let end = Instant::now();
        match sent {
            Some(resp) => {
                let seen = (resp.status == 200)
                    .then(|| serde_json::from_slice::<Seen>(&resp.body).ok())
                    .flatten();
                out.push(Outcome {
                    start,
                    end,
                    status: Some(resp.status.as_u16()),
                    seen,
                });
            }
            None => {
                conn = None;
                out.push(Outcome::failed(start));
            }
        }
        tokio::time::sleep(PACE).await;
    }
    out
}

impl Outcome {
    fn failed(start: Instant) -> Self {
        Self {
            start,
            end: Instant::now(),
            status: None,
            seen: None,
        }
    }
}

/// Every outcome of a [`Load`], by start time.
pub struct Report(pub Vec<Outcome>);

impl Report {
    pub fn total(&self) -> usize {
        self.0.len()
    }

    pub fn failures(&self) -> Vec<&Outcome> {
        self.0.iter().filter(|o| !o.ok()).collect()
    }

    /// Outcomes that started in `[from, to)`.
    pub fn started_between(&self, from: Instant, to: Instant) -> Vec<&Outcome> {
        self.0
            .iter()
            .filter(|o| o.start >= from && o.start < to)
            .collect()
    }

    /// Count of each status (`"conn"` for connection failures).
    pub fn statuses(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for o in &self.0 {
            let k = o.status.map_or("conn".to_string(), |s| s.to_string());
            *m.entry(k).or_default() += 1;
        }
        m
    }
}
