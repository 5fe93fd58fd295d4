//! A raw HTTP/1.1 client socket: write any bytes, read responses one by one.

use pier::echo::EchoRequest;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::local;

/// One response read off a raw client socket.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Raw {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn echo(&self) -> EchoRequest {
        serde_json::from_slice(&self.body).expect("an echo body")
    }
}

/// A client connection that reads responses one by one (bytes past one stay buffered): TCP,
/// or any stream (a TLS one) through [`Client::on`].
pub struct Client<S = TcpStream> {
    pub tcp: S,
    pub buf: Vec<u8>,
}

impl Client {
    pub async fn connect(port: u16) -> Self {
        Self::on(TcpStream::connect(local(port)).await.unwrap())
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    pub fn on(stream: S) -> Self {
        Self {
            tcp: stream,
            buf: Vec::new(),
        }
    }

    pub async fn write(&mut self, bytes: &[u8]) {
        self.tcp.write_all(bytes).await.unwrap();
    }

    pub async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 8192];
        let n = self.tcp.read(&mut chunk).await.unwrap_or(0);
        self.buf.extend_from_slice(&chunk[..n]);
        n > 0
    }

    /// Reads one response (`head`: to a HEAD request, so no body).
    pub async fn response(&mut self, head: bool) -> Raw {
        let (status, headers, len) = loop {
            let mut storage = [httparse::EMPTY_HEADER; 64];
            let mut resp = httparse::Response::new(&mut storage);
            if let httparse::Status::Complete(n) = resp.parse(&self.buf).unwrap() {
                let headers: Vec<(String, String)> = resp
                    .headers
                    .iter()
                    .map(|h| {
                        let v = String::from_utf8_lossy(h.value).into_owned();
                        (h.name.to_ascii_lowercase(), v)
                    })
                    .collect();
                break (resp.code.unwrap(), headers, n);
            }
            assert!(self.fill().await, "closed before a response head");
        };
        self.buf.drain(..len);
        let get = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let body = if head {
            Vec::new()
        } else if let Some(n) = get("content-length") {
            let n: usize = n.parse().unwrap();
            while self.buf.len() < n {
                assert!(self.fill().await, "closed mid-body");
            }
            self.buf.drain(..n).collect()
        } else if get("transfer-encoding").as_deref() == Some("chunked") {
            self.chunked().await
        } else {
            while self.fill().await {}
            std::mem::take(&mut self.buf)
        };
        Raw {
            status,
            headers,
            body,
        }
    }

    /// Reads one CRLF-terminated line (without the CRLF).
    pub async fn line(&mut self) -> String {
        let end = loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                break i;
            }
            assert!(self.fill().await, "closed in a line");
        };
        let line = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        self.buf.drain(..end + 2);
        line
    }

    /// Decodes a chunked body; trailer lines are read and dropped.
    pub async fn chunked(&mut self) -> Vec<u8> {
        let mut body = Vec::new();
        loop {
            let size = usize::from_str_radix(self.line().await.trim(), 16).unwrap();
            if size == 0 {
                while !self.line().await.is_empty() {}
                return body;
            }
            while self.buf.len() < size + 2 {
                assert!(self.fill().await, "closed in a chunk");
            }
            body.extend_from_slice(&self.buf[..size]);
            assert_eq!(&self.buf[size..size + 2], b"\r\n");
            self.buf.drain(..size + 2);
        }
    }

    /// True once the proxy has closed the connection (and sent nothing more).
    pub async fn closed(&mut self) -> bool {
        !self.fill().await && self.buf.is_empty()
    }
}
