//! One proxied HTTP/1.1 round trip, in process: a hyper client -> pier (`run::start` on
//! generated manifests) -> a hyper origin answering 200 with a 13-byte body, plain and over
//! mesh mTLS (client certificate presented and verified, pier checks the chain to the mesh CA).
//! `direct` is the same client against the plain origin: the pier rows minus `direct` are
//! what pier adds. So data-plane regressions show without wrk (`scripts/bench-peers.sh` is
//! the load test).
//!
//! Everything runs on one current-thread runtime, so a figure is the CPU time of client, pier
//! and origin together for one request (plus loopback syscalls), not a latency under load.
//! `*_c32` keeps 32 client connections busy at once (pier then pools 32 upstream
//! connections), and reports the time per request.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use http::header::HOST;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use pier::run::{self, RunOptions};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio_rustls::TlsAcceptor;

const BODY: &[u8] = b"hello, world\n";
const SNI: &str = "echo.demo.svc.cluster.local";

type Client = SendRequest<Empty<Bytes>>;

/// A CA: its PEM and what signs with it.
struct Ca {
    pem: String,
    der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

/// A leaf certificate and its PKCS#8 key, PEM.
struct Leaf {
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    key_pem: String,
    key_der: Vec<u8>,
}

fn ca(cn: &str) -> Ca {
    let key = KeyPair::generate().expect("key");
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
    p.distinguished_name.push(DnType::CommonName, cn);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = p.self_signed(&key).expect("self-signed");
    Ca {
        pem: cert.pem(),
        der: cert.der().clone(),
        issuer: Issuer::new(p, key),
    }
}

fn leaf(ca: &Ca, dns: &[&str], uri: &str, eku: ExtendedKeyUsagePurpose) -> Leaf {
    let key = KeyPair::generate().expect("key");
    let names: Vec<String> = dns.iter().map(|s| s.to_string()).collect();
    let mut p = CertificateParams::new(names).expect("params");
    p.subject_alt_names
        .push(SanType::URI(uri.try_into().expect("uri")));
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![eku];
    let cert = p.signed_by(&key, &ca.issuer).expect("leaf");
    Leaf {
        cert_pem: cert.pem(),
        cert_der: cert.der().clone(),
        key_pem: key.serialize_pem(),
        key_der: key.serialize_der(),
    }
}

/// The origin: HTTP/1.1 keep-alive, 200 with `BODY` to everything; mTLS when `tls` is given.
async fn origin(tls: Option<TlsAcceptor>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let _ = tcp.set_nodelay(true);
            let tls = tls.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(BODY))))
                });
                let http = hyper::server::conn::http1::Builder::new();
                let _ = match tls {
                    None => http.serve_connection(TokioIo::new(tcp), svc).await,
                    Some(acceptor) => match acceptor.accept(tcp).await {
                        Ok(stream) => http.serve_connection(TokioIo::new(stream), svc).await,
                        Err(_) => return,
                    },
                };
            });
        }
    });
    addr
}

/// rustls server config of the mesh workload: its certificate from the mesh CA, and a client
/// certificate from the gateway CA required.
fn origin_tls(echo: &Leaf, gateway_ca: &Ca) -> TlsAcceptor {
    let provider = pier::tls::provider::provider();
    let mut roots = RootCertStore::empty();
    roots.add(gateway_ca.der.clone()).expect("root");
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .expect("verifier");
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(echo.key_der.clone()));
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![echo.cert_der.clone()], key)
        .expect("server config");
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsAcceptor::from(Arc::new(cfg))
}

fn indent(pem: &str) -> String {
    pem.lines().map(|l| format!("    {l}\n")).collect()
}

/// Gateway with listener `plain` (-> plain origin) and `mtls` (-> meshed route to the mTLS
/// origin), the trust bundle ConfigMap and pier's client certificate Secret.
fn manifests(dir: &Path, ports: (u16, u16), plain: SocketAddr, mtls: SocketAddr, pki: &Pki) {
    let (p_plain, p_mtls) = ports;
    let gateway = format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: pier}}
spec: {{controllerName: pier.dev/gateway-controller}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: demo}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: bench, namespace: demo}}
spec:
  gatewayClassName: pier
  listeners:
    - {{name: plain, protocol: HTTP, port: {p_plain}}}
    - {{name: mtls, protocol: HTTP, port: {p_mtls}}}
  tls:
    backend:
      clientCertificateRef: {{name: gateway-client}}
  mesh:
    trustBundle: [{{kind: ConfigMap, name: mesh-ca}}]
    selector:
      matchLabels: {{mesh: enabled}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: plain, namespace: demo}}
spec:
  parentRefs: [{{name: bench, sectionName: plain}}]
  rules: [{{backendRefs: [{{name: origin, port: 80}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: echo, namespace: demo, labels: {{mesh: enabled}}}}
spec:
  parentRefs: [{{name: bench, sectionName: mtls}}]
  rules: [{{backendRefs: [{{name: echo, port: 443}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: origin, namespace: demo}}
spec: {{ports: [{{name: http, port: 80}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: origin-1, namespace: demo, labels: {{kubernetes.io/service-name: origin}}}}
addressType: IPv4
ports: [{{name: http, port: {}, protocol: TCP}}]
endpoints: [{{addresses: ["127.0.0.1"], conditions: {{ready: true}}}}]
---
apiVersion: v1
kind: Service
metadata: {{name: echo, namespace: demo}}
spec: {{ports: [{{name: https, port: 443}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: echo-1, namespace: demo, labels: {{kubernetes.io/service-name: echo}}}}
addressType: IPv4
ports: [{{name: https, port: {}, protocol: TCP}}]
endpoints: [{{addresses: ["127.0.0.1"], conditions: {{ready: true}}}}]
"#,
        plain.port(),
        mtls.port()
    );
    let trust = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: mesh-ca, namespace: demo}}\n\
         data:\n  ca-bundle.crt: |\n{}---\n\
         apiVersion: v1\nkind: Secret\nmetadata: {{name: gateway-client, namespace: demo}}\n\
         type: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
        indent(&pki.mesh_ca.pem),
        indent(&pki.client.cert_pem),
        indent(&pki.client.key_pem)
    );
    std::fs::write(dir.join("gateway.yaml"), gateway).expect("write");
    std::fs::write(dir.join("trust.yaml"), trust).expect("write");
}

struct Pki {
    mesh_ca: Ca,
    gateway_ca: Ca,
    echo: Leaf,
    client: Leaf,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

async fn client(addr: SocketAddr) -> Client {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    let (tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    tx
}

async fn round_trip(tx: &mut Client, host: &HeaderValue) {
    tx.ready().await.expect("ready");
    let req = Request::get("/")
        .header(HOST, host.clone())
        .body(Empty::new())
        .expect("request");
    let resp = tx.send_request(req).await.expect("response");
    assert_eq!(resp.status(), StatusCode::OK);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&body[..], BODY);
}

/// The environment every bench shares: origins, pier, and where to send requests.
struct Env {
    direct: SocketAddr,
    plain: SocketAddr,
    mtls: SocketAddr,
    _pier: run::Running,
    _dir: tempfile::TempDir,
}

async fn env() -> Env {
    let mesh_ca = ca("mesh CA");
    let gateway_ca = ca("gateway CA");
    let echo = leaf(
        &mesh_ca,
        &[SNI],
        "spiffe://cluster.local/ns/demo/sa/echo",
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let client_cert = leaf(
        &gateway_ca,
        &[],
        "spiffe://cluster.local/ns/gateway/sa/gateway",
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let pki = Pki {
        mesh_ca,
        gateway_ca,
        echo,
        client: client_cert,
    };
    let direct = origin(None).await;
    let tls = origin(Some(origin_tls(&pki.echo, &pki.gateway_ca))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let ports = (free_port(), free_port());
    manifests(dir.path(), ports, direct, tls, &pki);
    let pier = run::start(RunOptions {
        listen_host: [127, 0, 0, 1].into(),
        admin: SocketAddr::from(([127, 0, 0, 1], 0)),
        ..RunOptions::new(run::Source::Manifests(dir.path().to_path_buf()))
    })
    .await
    .expect("pier starts");
    let env = Env {
        direct,
        plain: SocketAddr::from(([127, 0, 0, 1], ports.0)),
        mtls: SocketAddr::from(([127, 0, 0, 1], ports.1)),
        _pier: pier,
        _dir: dir,
    };
    // Both routes answer before anything is measured (the mTLS one through a verified handshake).
    let host = HeaderValue::from_static("bench.example");
    for addr in [env.direct, env.plain, env.mtls] {
        round_trip(&mut client(addr).await, &host).await;
    }
    env
}

/// `iters` requests spread over `conns` keep-alive connections, all in flight together.
fn run_concurrent(rt: &Runtime, conns: &mut [Client], iters: u64) -> Duration {
    let host = HeaderValue::from_static("bench.example");
    rt.block_on(async {
        let n = conns.len() as u64;
        let per = iters.div_ceil(n);
        let started = Instant::now();
        futures::future::join_all(conns.iter_mut().map(|tx| {
            let host = host.clone();
            async move {
                for _ in 0..per {
                    round_trip(tx, &host).await;
                }
            }
        }))
        .await;
        started.elapsed().mul_f64(iters as f64 / (per * n) as f64)
    })
}

fn bench_proxy(c: &mut Criterion) {
    pier::tls::provider::install_default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let env = rt.block_on(env());
    let mut g = c.benchmark_group("proxy");
    g.measurement_time(Duration::from_secs(3));
    for (name, addr) in [
        ("direct", env.direct),
        ("plain", env.plain),
        ("mtls", env.mtls),
    ] {
        let mut one = vec![rt.block_on(client(addr))];
        g.bench_function(name, |b| {
            b.iter_custom(|iters| run_concurrent(&rt, &mut one, iters))
        });
        let mut many = rt.block_on(futures::future::join_all((0..32).map(|_| client(addr))));
        g.bench_function(format!("{name}_c32"), |b| {
            b.iter_custom(|iters| run_concurrent(&rt, &mut many, iters))
        });
    }
    g.finish();
}

criterion_group!(benches, bench_proxy);
criterion_main!(benches);
