//! Large bodies stream both ways with memory bounded per connection: when one side stops
//! reading, pier stops reading from the other (backpressure) instead of holding the body.
//! Each test sends a body of [`BODY`] bytes, stalls the reader, and checks that the writer
//! was held back after far less than the body (what sits in socket buffers and pier's relay
//! buffers); then the reader resumes and every byte arrives.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::Notify;

use crate::support::snap::*;
use crate::support::*;

/// The body each test sends: more than any socket buffer here can hold (the loopback receive
/// buffer autotunes up to `tcp_rmem`'s maximum, 32 MiB on this host kind).
const BODY: u64 = 256 << 20;
/// The most the writer may get out while the reader stalls: what the socket buffers on the way
/// hold (client send and backend receive buffers are set small; pier's own sockets autotune)
/// and pier's relay buffers. 5–8 MiB here; a proxy that buffered the body would take all of
/// [`BODY`].
const STALLED_MAX: u64 = 32 << 20;
const SMALL_SOCKET_BUFFER: u32 = 64 << 10;
const CHUNK: usize = 64 << 10;

/// The counter's value once it has not moved for half a second.
async fn settled(counter: &AtomicU64) -> u64 {
    let mut last = counter.load(Ordering::Relaxed);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = counter.load(Ordering::Relaxed);
        if now == last {
            return now;
        }
        last = now;
    }
}

/// Asserts that `writer`, whose progress `counter` counts, stops (within [`STALLED_MAX`])
/// while `reader` reads none of the body.
async fn held_back(counter: &AtomicU64, writer: &str, reader: &str) {
    let stalled = bounded(settled(counter)).await;
    assert!(
        stalled < STALLED_MAX,
        "{writer} got {} MiB of a {} MiB body out while {reader} read none",
        stalled >> 20,
        BODY >> 20
    );
}

/// Reads on until at least [`BODY`] bytes of a body of which `got` were read already have
/// arrived; how many did.
async fn read_body(io: &mut (impl AsyncReadExt + Unpin), mut got: u64) -> u64 {
    let mut chunk = vec![0u8; CHUNK];
    while got < BODY {
        let n = io.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the body ended after {got} bytes");
        got += n as u64;
    }
    got
}

/// A listener whose accepted sockets keep a small receive buffer (no autotuning).
fn small_listener() -> TcpListener {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(SMALL_SOCKET_BUFFER).unwrap();
    socket.bind(local(0)).unwrap();
    socket.listen(16).unwrap()
}

async fn connect_small(port: u16, send: bool) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    if send {
        socket.set_send_buffer_size(SMALL_SOCKET_BUFFER).unwrap();
    } else {
        socket.set_recv_buffer_size(SMALL_SOCKET_BUFFER).unwrap();
    }
    socket.connect(local(port)).await.unwrap()
}

/// Reads until the end of a head; returns what was read past it.
async fn read_head(io: &mut (impl AsyncReadExt + Unpin)) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; CHUNK];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(i + 4);
            return (String::from_utf8_lossy(&buf).into_owned(), rest);
        }
        let n = io.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed before the end of a head");
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::test]
async fn an_upload_to_a_backend_that_stops_reading_holds_the_client_back() {
    // The backend reads the request head, stalls until `go`, then reads and counts the body.
    let listener = small_listener();
    let addr = listener.local_addr().unwrap();
    let go = Arc::new(Notify::new());
    let wait = go.clone();
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let (head, early) = read_head(&mut tcp).await;
        assert!(head.starts_with("POST /upload HTTP/1.1\r\n"), "{head}");
        wait.notified().await;
        let got = read_body(&mut tcp, early.len() as u64).await;
        let answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{got}",
            got.to_string().len()
        );
        tcp.write_all(answer.as_bytes()).await.unwrap();
    });
    let p = free_port();
    let h = Harness::start(simple(p, &backend("b", &[addr]))).await;

    let (mut read, mut write) = connect_small(p, true).await.into_split();
    let sent = Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    let writer = tokio::spawn(async move {
        let head =
            format!("POST /upload HTTP/1.1\r\nHost: app.example\r\nContent-Length: {BODY}\r\n\r\n");
        write.write_all(head.as_bytes()).await.unwrap();
        let chunk = vec![b'u'; CHUNK];
        while counter.load(Ordering::Relaxed) < BODY {
            write.write_all(&chunk).await.unwrap();
            counter.fetch_add(CHUNK as u64, Ordering::Relaxed);
        }
        write
    });
    held_back(&sent, "the client", "the backend").await;
    go.notify_one();
    let _write = bounded(writer).await.unwrap();
    let (head, body) = bounded(read_head(&mut read)).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut body = body;
    while body.len() < BODY.to_string().len() {
        let mut more = [0u8; 64];
        let n = bounded(read.read(&mut more)).await.unwrap();
        assert!(n > 0);
        body.extend_from_slice(&more[..n]);
    }
    assert_eq!(
        String::from_utf8_lossy(&body),
        BODY.to_string(),
        "every byte reached the backend"
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_download_to_a_client_that_stops_reading_holds_the_backend_back() {
    // The backend answers with a long body as fast as it can be written, counting it.
    let listener = TcpListener::bind(local(0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let written = Arc::new(AtomicU64::new(0));
    let counter = written.clone();
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let (head, _) = read_head(&mut tcp).await;
        assert!(head.starts_with("GET /download HTTP/1.1\r\n"), "{head}");
        let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {BODY}\r\n\r\n");
        tcp.write_all(answer.as_bytes()).await.unwrap();
        let chunk = vec![b'd'; CHUNK];
        while counter.load(Ordering::Relaxed) < BODY {
            tcp.write_all(&chunk).await.unwrap();
            counter.fetch_add(CHUNK as u64, Ordering::Relaxed);
        }
        // Kept open until the client has it all.
        let _ = tcp.read(&mut [0u8; 1]).await;
    });
    let p = free_port();
    let h = Harness::start(simple(p, &backend("b", &[addr]))).await;

    let mut client = connect_small(p, false).await;
    client
        .write_all(b"GET /download HTTP/1.1\r\nHost: app.example\r\n\r\n")
        .await
        .unwrap();
    // The client reads nothing while the backend writes.
    held_back(&written, "the backend", "the client").await;
    let (head, early) = bounded(read_head(&mut client)).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("content-length: {BODY}")),
        "{head}"
    );
    let got = bounded(read_body(&mut client, early.len() as u64)).await;
    assert_eq!(got, BODY);
    bounded(h.proxy.shutdown(BOUND)).await;
}
