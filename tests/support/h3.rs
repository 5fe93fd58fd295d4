//! An HTTP/3 client for tests: quinn and h3 (the client side of the crates pier serves with),
//! on rustls with pier's provider. One connection carries many requests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, Request, Version};
use rustls::pki_types::CertificateDer;

use super::client::Resp;

type Send = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// A client TLS config for HTTP/3: TLS 1.3, ALPN `h3`, trusting `roots`, with `client` as
/// its certificate if given.
pub fn tls(
    roots: &[CertificateDer<'static>],
    client: Option<&super::pki::Leaf>,
) -> Arc<rustls::ClientConfig> {
    let mut store = rustls::RootCertStore::empty();
    for r in roots {
        store.add(r.clone()).unwrap();
    }
    let provider = pier::tls::provider::provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(store);
    let mut cfg = match client {
        Some(leaf) => builder
            .with_client_auth_cert(leaf.chain.clone(), leaf.key.clone_key())
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    cfg.alpn_protocols = vec![b"h3".to_vec()];
    Arc::new(cfg)
}

/// One HTTP/3 connection.
pub struct H3 {
    send: Send,
    endpoint: quinn::Endpoint,
    pub conn: quinn::Connection,
    driver: tokio::task::JoinHandle<h3::error::ConnectionError>,
}

impl H3 {
    /// Connects to `addr` for `server_name` (the SNI), within 10 s.
    pub async fn connect(
        addr: SocketAddr,
        server_name: &str,
        tls: Arc<rustls::ClientConfig>,
    ) -> Result<Self, String> {
        let crypto =
            quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(|e| e.to_string())?;
        let config = quinn::ClientConfig::new(Arc::new(crypto));
        let bind: SocketAddr = if addr.is_ipv4() {
            "127.0.0.1:0".parse().unwrap()
        } else {
            "[::1]:0".parse().unwrap()
        };
        let endpoint = quinn::Endpoint::client(bind).map_err(|e| e.to_string())?;
        let connecting = endpoint
            .connect_with(config, addr, server_name)
            .map_err(|e| e.to_string())?;
        let conn = tokio::time::timeout(Duration::from_secs(10), connecting)
            .await
            .map_err(|_| "QUIC handshake timed out".to_string())?
            .map_err(|e| e.to_string())?;
        let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
            .await
            .map_err(|e| e.to_string())?;
        let driver =
            tokio::spawn(async move { std::future::poll_fn(|cx| driver.poll_close(cx)).await });
        Ok(Self {
            send,
            endpoint,
            conn,
            driver,
        })
    }

    /// Sends `req` with `body` (and its end), reads the whole response, within 20 s.
    pub async fn send(&mut self, req: Request<()>, body: Bytes) -> Result<Resp, String> {
        let send = &mut self.send;
        let exchange = async move {
            let mut stream = send.send_request(req).await.map_err(|e| e.to_string())?;
            if !body.is_empty() {
                stream.send_data(body).await.map_err(|e| e.to_string())?;
            }
            stream.finish().await.map_err(|e| e.to_string())?;
            let resp = stream.recv_response().await.map_err(|e| e.to_string())?;
            let mut data = BytesMut::new();
            while let Some(mut chunk) = stream.recv_data().await.map_err(|e| e.to_string())? {
                data.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
            }
            let trailers = stream.recv_trailers().await.map_err(|e| e.to_string())?;
            Ok::<_, String>((resp, data.freeze(), trailers))
        };
        let (resp, body, trailers) = tokio::time::timeout(Duration::from_secs(20), exchange)
            .await
            .map_err(|_| "HTTP/3 request timed out".to_string())??;
        let (parts, ()) = resp.into_parts();
        let mut headers = parts.headers;
        // Trailers, when any, after the head's fields (gRPC's status is one).
        for (k, v) in trailers.unwrap_or_else(HeaderMap::new).iter() {
            headers.append(k, v.clone());
        }
        Ok(Resp {
            status: parts.status,
            version: Version::HTTP_3,
            headers,
            body,
        })
    }

    /// `GET https://<host><path>` with `headers`.
    pub async fn get(
        &mut self,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<Resp, String> {
        let mut req = Request::get(format!("https://{host}{path}"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.send(req.body(()).unwrap(), Bytes::new()).await
    }

    /// Moves the connection to `socket` (a new local address: connection migration).
    pub fn rebind(&self, socket: std::net::UdpSocket) {
        self.endpoint.rebind(socket).unwrap();
    }

    /// The client's local UDP port.
    pub fn local_port(&self) -> u16 {
        self.endpoint.local_addr().unwrap().port()
    }

    /// Closes the connection (H3_NO_ERROR) and waits for the close to go out.
    pub async fn close(self) {
        self.conn.close(quinn::VarInt::from_u32(0x100), b"");
        self.driver.abort();
        let _ = tokio::time::timeout(Duration::from_secs(1), self.endpoint.wait_idle()).await;
    }
}

/// One `GET` on a new connection.
pub async fn get(
    addr: SocketAddr,
    host: &str,
    path: &str,
    tls: Arc<rustls::ClientConfig>,
) -> Result<Resp, String> {
    let mut c = H3::connect(addr, host, tls).await?;
    let resp = c.get(host, path, &[]).await;
    c.close().await;
    resp
}
