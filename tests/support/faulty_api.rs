//! A fault-injecting HTTPS proxy in front of kube-apiserver: it forwards every request (one
//! upstream TLS connection per request, watch responses streamed) until told to fail, then
//! answers each request with an error status (`Fault::Status`: 500, 503 or 429 with
//! `Retry-After`) or ends every watch with a `410 Gone` ERROR event while lists pass
//! (`Fault::WatchGone`), as an API server that stays up but misbehaves does. Counts the
//! requests it receives, so a test can bound how hard a client retries.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything.
    None,
    /// Answer every request with this status (a Kubernetes `Status` body; `Retry-After: 1`
    /// with 429 and 503).
    Status(u16),
    /// Lists pass; every watch answers 200 and one ERROR event `410 Gone` ("too old resource
    /// version"), then ends: the client must list again.
    WatchGone,
}

pub struct FaultyApi {
    pub addr: SocketAddr,
    ca_pem: String,
    fault: Arc<Mutex<Fault>>,
    requests: Arc<AtomicU64>,
    /// The client connections open now (their watches included).
    conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    task: tokio::task::JoinHandle<()>,
}

type Body = BoxBody<Bytes, hyper::Error>;

struct Upstream {
    addr: SocketAddr,
    tls: TlsConnector,
}

impl FaultyApi {
    /// A proxy on 127.0.0.1 to the API server at `upstream`, whose certificate `upstream_ca`
    /// (PEM) verifies.
    pub async fn start(upstream: SocketAddr, upstream_ca: &str) -> Self {
        let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        let provider = pier::tls::provider::provider();
        let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.cert.der().clone()],
                PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap(),
            )
            .unwrap();
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(upstream_ca.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let upstream = Arc::new(Upstream {
            addr: upstream,
            tls: TlsConnector::from(Arc::new(client)),
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let fault = Arc::new(Mutex::new(Fault::None));
        let requests = Arc::new(AtomicU64::new(0));
        let conns = Arc::new(Mutex::new(Vec::<tokio::task::AbortHandle>::new()));
        let acceptor = TlsAcceptor::from(Arc::new(server));
        let task = {
            let (fault, requests, conns) = (fault.clone(), requests.clone(), conns.clone());
            tokio::spawn(async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    let (acceptor, upstream) = (acceptor.clone(), upstream.clone());
                    let (fault, requests) = (fault.clone(), requests.clone());
                    let conn = tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let svc = hyper::service::service_fn(move |req| {
                            requests.fetch_add(1, Ordering::Relaxed);
                            let f = *fault.lock().unwrap();
                            handle(f, upstream.clone(), req)
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(tls), svc)
                            .await;
                    });
                    let mut open = conns.lock().unwrap();
                    open.retain(|c| !c.is_finished());
                    open.push(conn.abort_handle());
                }
            })
        };
        Self {
            addr,
            ca_pem: cert.cert.pem(),
            fault,
            requests,
            conns,
            task,
        }
    }

    /// From now on, `fault`. A fault also cuts every open connection (watches included), as
    /// an API server that starts failing does, so that every request meets it.
    pub fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
        if fault != Fault::None {
            for c in self.conns.lock().unwrap().drain(..) {
                c.abort();
            }
        }
    }

    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// `kubeconfig` (a file of `support::apiserver`'s shape, for the API server at
    /// `server_url`) pointed at this proxy instead, written to `dir/faulty.kubeconfig`.
    pub fn kubeconfig(&self, kubeconfig: &Path, server_url: &str, dir: &Path) -> PathBuf {
        let text = std::fs::read_to_string(kubeconfig).unwrap();
        let ca = dir.join("faulty-ca.crt");
        std::fs::write(&ca, &self.ca_pem).unwrap();
        let ca_line = text
            .lines()
            .find(|l| l.trim_start().starts_with("certificate-authority:"))
            .expect("the kubeconfig names a CA file")
            .to_string();
        assert!(text.contains(server_url), "{server_url} not in {text}");
        let text = text
            .replace(server_url, &format!("https://{}", self.addr))
            .replace(
                &ca_line,
                &format!("    certificate-authority: \"{}\"", ca.display()),
            );
        let file = dir.join("faulty.kubeconfig");
        std::fs::write(&file, text).unwrap();
        file
    }
}

impl Drop for FaultyApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn status_body(code: u16, reason: &str, message: &str) -> String {
    serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    })
    .to_string()
}

fn full(status: u16, body: String, retry_after: bool) -> Response<Body> {
    let mut resp = Response::builder()
        .status(status)
        .header("content-type", "application/json");
    if retry_after {
        resp = resp.header("retry-after", "1");
    }
    resp.body(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    )
    .unwrap()
}

fn is_watch(req: &Request<Incoming>) -> bool {
    req.uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

async fn handle(
    fault: Fault,
    upstream: Arc<Upstream>,
    req: Request<Incoming>,
) -> Result<Response<Body>, hyper::Error> {
    match fault {
        Fault::Status(code) => {
            let reason = match code {
                429 => "TooManyRequests",
                503 => "ServiceUnavailable",
                _ => "InternalError",
            };
            return Ok(full(
                code,
                status_body(code, reason, "injected by the test"),
                matches!(code, 429 | 503),
            ));
        }
        Fault::WatchGone if is_watch(&req) => {
            let event = serde_json::json!({
                "type": "ERROR",
                "object": serde_json::from_str::<serde_json::Value>(&status_body(
                    410, "Expired", "too old resource version (injected by the test)"
                )).unwrap(),
            });
            return Ok(full(200, format!("{event}\n"), false));
        }
        Fault::WatchGone | Fault::None => {}
    }
    let bad_gateway = || full(502, status_body(502, "InternalError", "upstream"), false);
    let Ok(tcp) = TcpStream::connect(upstream.addr).await else {
        return Ok(bad_gateway());
    };
    let name = ServerName::IpAddress(upstream.addr.ip().into());
    let Ok(tls) = upstream.tls.connect(name, tcp).await else {
        return Ok(bad_gateway());
    };
    let Ok((mut sender, conn)) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await
    else {
        return Ok(bad_gateway());
    };
    tokio::spawn(conn);
    match sender.send_request(req).await {
        Ok(resp) => Ok(resp.map(BodyExt::boxed)),
        Err(_) => Ok(bad_gateway()),
    }
}
