//! A TLS front for an echo server: terminates TLS (mTLS when the config asks for client
//! certificates) and pipes the plaintext to `origin`, recording each handshake. The echo then
//! reports what pier sent inside the tunnel (protocol, Host, `:authority`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rustls::pki_types::CertificateDer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;

/// What the front saw of one TLS connection.
#[derive(Clone, Debug)]
pub struct Handshake {
    /// False when the handshake failed.
    pub ok: bool,
    pub alpn: Option<Vec<u8>>,
    pub client_cert: Option<CertificateDer<'static>>,
}

pub struct TlsFront {
    pub addr: SocketAddr,
    handshakes: Arc<watch::Sender<Vec<Handshake>>>,
    open: Arc<Mutex<usize>>,
    task: JoinHandle<()>,
}

pub async fn spawn(config: Arc<rustls::ServerConfig>, origin: SocketAddr) -> TlsFront {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handshakes = Arc::new(watch::channel(Vec::new()).0);
    let open = Arc::new(Mutex::new(0));
    let acceptor = TlsAcceptor::from(config);
    let (log, count) = (handshakes.clone(), open.clone());
    let task = tokio::spawn(async move {
        let mut conns = JoinSet::new();
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, log, count) = (acceptor.clone(), log.clone(), count.clone());
            conns.spawn(async move {
                let mut tls = match acceptor.accept(tcp).await {
                    Ok(tls) => tls,
                    Err(_) => {
                        log.send_modify(|v| {
                            v.push(Handshake {
                                ok: false,
                                alpn: None,
                                client_cert: None,
                            })
                        });
                        return;
                    }
                };
                let conn = tls.get_ref().1;
                let seen = Handshake {
                    ok: true,
                    alpn: conn.alpn_protocol().map(<[u8]>::to_vec),
                    client_cert: conn.peer_certificates().map(|c| c[0].clone()),
                };
                log.send_modify(|v| v.push(seen));
                *count.lock().unwrap() += 1;
                if let Ok(mut up) = TcpStream::connect(origin).await {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                }
                *count.lock().unwrap() -= 1;
            });
        }
    });
    TlsFront {
        addr,
        handshakes,
        open,
        task,
    }
}

impl TlsFront {
    pub fn handshakes(&self) -> Vec<Handshake> {
        self.handshakes.borrow().clone()
    }

    /// TLS connections currently open (handshake done, not yet closed by either side).
    pub fn open(&self) -> usize {
        *self.open.lock().unwrap()
    }

    /// Waits until at least `n` handshakes were attempted (callers bound it).
    pub async fn wait_for(&self, n: usize) {
        let mut rx = self.handshakes.subscribe();
        let _ = rx.wait_for(|v| v.len() >= n).await;
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}
