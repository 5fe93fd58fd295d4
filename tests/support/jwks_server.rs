//! An HTTPS server of one JWKS document (hyper + rustls, a certificate from a test CA), for
//! `remoteJWKS`: the document can be replaced (key rotation), the server taken down (it
//! accepts and closes at once, as a crashed backend behind a load balancer does), and it
//! counts the fetches it answered. Plain HTTP on loopback too, for an in-process pier.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

use super::pki::Pki;

pub struct JwksServer {
    pub addr: SocketAddr,
    doc: Arc<Mutex<String>>,
    fetches: Arc<AtomicUsize>,
    up: Arc<AtomicBool>,
    tls: bool,
    task: tokio::task::JoinHandle<()>,
}

impl JwksServer {
    /// Serves `jwks` at `https://localhost:<port>/jwks` with a certificate of `pki`.
    pub async fn start(pki: &Pki, jwks: String) -> Self {
        let leaf = pki.issue(&["localhost"]);
        let provider = pier::tls::provider::provider();
        let tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(leaf.chain, leaf.key)
            .unwrap();
        Self::serve(Some(tokio_rustls::TlsAcceptor::from(Arc::new(tls))), jwks).await
    }

    /// Serves `jwks` at `http://127.0.0.1:<port>/jwks` (pier follows plaintext key-set URIs
    /// on loopback only): for an in-process pier, which trusts the host's store only.
    pub async fn start_plain(jwks: String) -> Self {
        Self::serve(None, jwks).await
    }

    async fn serve(acceptor: Option<tokio_rustls::TlsAcceptor>, jwks: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let doc = Arc::new(Mutex::new(jwks));
        let fetches = Arc::new(AtomicUsize::new(0));
        let up = Arc::new(AtomicBool::new(true));
        let tls = acceptor.is_some();
        let (d, f, u) = (doc.clone(), fetches.clone(), up.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                if !u.load(Ordering::SeqCst) {
                    drop(tcp);
                    continue;
                }
                let (acceptor, d, f) = (acceptor.clone(), d.clone(), f.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (d, f) = (d.clone(), f.clone());
                        async move {
                            let resp = if req.uri().path() == "/jwks" {
                                f.fetch_add(1, Ordering::SeqCst);
                                let body = d.lock().unwrap().clone();
                                http::Response::builder()
                                    .header("content-type", "application/json")
                                    .body(Full::new(Bytes::from(body)))
                            } else {
                                http::Response::builder()
                                    .status(404)
                                    .body(Full::new(Bytes::new()))
                            };
                            Ok::<_, std::convert::Infallible>(resp.unwrap())
                        }
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    match acceptor {
                        Some(acceptor) => {
                            if let Ok(tls) = acceptor.accept(tcp).await {
                                let _ = http.serve_connection(TokioIo::new(tls), svc).await;
                            }
                        }
                        None => {
                            let _ = http.serve_connection(TokioIo::new(tcp), svc).await;
                        }
                    }
                });
            }
        });
        Self {
            addr,
            doc,
            fetches,
            up,
            tls,
            task,
        }
    }

    pub fn uri(&self) -> String {
        if self.tls {
            format!("https://localhost:{}/jwks", self.addr.port())
        } else {
            format!("http://127.0.0.1:{}/jwks", self.addr.port())
        }
    }

    /// Serves `jwks` from now on.
    pub fn set(&self, jwks: String) {
        *self.doc.lock().unwrap() = jwks;
    }

    /// Takes the server down (`false`: connections are closed unanswered) or up again.
    pub fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
    }

    /// The fetches answered so far.
    pub fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

impl Drop for JwksServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
