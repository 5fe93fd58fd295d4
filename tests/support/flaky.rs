//! A scripted HTTP/1.1 backend for retry tests: the script says what the n-th request (counted
//! from 0 across all connections) gets, and every request is recorded with when it arrived
//! and the body it carried, so tests count attempts on the backend side.
//!
//! ```ignore
//! let b = flaky::spawn(|n| if n < 2 { Answer::Status(500) } else { Answer::Ok }).await;
//! ```

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What one request gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `200 OK` with body `ok <n>` (n counted from 1).
    Ok,
    /// This status, with an empty body.
    Status(u16),
    /// This status, with a body of that many bytes.
    StatusWithBody(u16, usize),
    /// The connection is reset (RST) once the request has been read: no response byte.
    Reset,
    /// No answer: the connection is held open until the peer closes it.
    Stall,
}

/// One request as the backend saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub at: Instant,
    pub method: String,
    pub path: String,
    pub body: Vec<u8>,
}

type Script = dyn Fn(usize) -> Answer + Send + Sync;

pub struct Flaky {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

impl Flaky {
    /// Requests seen so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

impl Drop for Flaky {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A backend answering the n-th request with `script(n)`.
pub async fn spawn(script: impl Fn(usize) -> Answer + Send + Sync + 'static) -> Flaky {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let script: Arc<Script> = Arc::new(script);
    let log = seen.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(serve(stream, script.clone(), log.clone()));
        }
    });
    Flaky { addr, seen, task }
}

/// Always `answer`.
pub async fn always(answer: Answer) -> Flaky {
    spawn(move |_| answer).await
}

/// `fail` for the first `n` requests, then `Ok`.
pub async fn failing(n: usize, fail: Answer) -> Flaky {
    spawn(move |i| if i < n { fail } else { Answer::Ok }).await
}

async fn serve(mut stream: TcpStream, script: Arc<Script>, log: Arc<Mutex<Vec<Seen>>>) {
    let mut buf = Vec::new();
    loop {
        let Some((method, path, body)) = read_request(&mut stream, &mut buf).await else {
            return;
        };
        let n = {
            let mut log = log.lock().unwrap();
            log.push(Seen {
                at: Instant::now(),
                method,
                path,
                body,
            });
            log.len() - 1
        };
        let (status, len) = match script(n) {
            Answer::Ok => {
                let body = format!("ok {}", n + 1);
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nx-attempt: {}\r\n\r\n{body}",
                    body.len(),
                    n + 1
                );
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                continue;
            }
            Answer::Status(s) => (s, 0),
            Answer::StatusWithBody(s, len) => (s, len),
            Answer::Reset => {
                let _ = stream.set_zero_linger();
                return;
            }
            Answer::Stall => {
                let mut sink = [0u8; 1024];
                while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
                return;
            }
        };
        let mut out = format!(
            "HTTP/1.1 {status} Scripted\r\ncontent-length: {len}\r\nx-attempt: {}\r\n\r\n",
            n + 1
        )
        .into_bytes();
        out.resize(out.len() + len, b'x');
        if stream.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// One request, consuming it from `buf`; `None` at EOF.
async fn read_request(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> Option<(String, String, Vec<u8>)> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        if let httparse::Status::Complete(head_len) = req.parse(buf).ok()? {
            let header = |name: &str| {
                req.headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                    .and_then(|h| std::str::from_utf8(h.value).ok())
                    .map(str::trim)
            };
            let body = if header("transfer-encoding").is_some_and(|v| v.ends_with("chunked")) {
                dechunk(&buf[head_len..])
            } else {
                let length: usize = header("content-length")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                (buf.len() >= head_len + length)
                    .then(|| (buf[head_len..head_len + length].to_vec(), length))
            };
            if let Some((body, used)) = body {
                let method = req.method?.to_string();
                let path = req.path?.to_string();
                buf.drain(..head_len + used);
                return Some((method, path, body));
            }
        }
        let mut chunk = [0u8; 16 * 1024];
        match tokio::time::timeout(Duration::from_secs(30), stream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return None,
        }
    }
}

/// A whole chunked body (no trailers) and the bytes it took, or `None` if it is not all here.
fn dechunk(mut data: &[u8]) -> Option<(Vec<u8>, usize)> {
    let total = data.len();
    let mut body = Vec::new();
    loop {
        let httparse::Status::Complete((at, size)) = httparse::parse_chunk_size(data).ok()? else {
            return None;
        };
        let size = usize::try_from(size).ok()?;
        if data.len() < at + size + 2 {
            return None;
        }
        body.extend_from_slice(&data[at..at + size]);
        data = &data[at + size + 2..];
        if size == 0 {
            return Some((body, total - data.len()));
        }
    }
}
