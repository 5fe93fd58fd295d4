//! HTTP/2 downstream (h2c prior knowledge), h2c upstream, and Upgrade passthrough.

use futures::{SinkExt, StreamExt};
use http::{Request, Version};
use http_body_util::Full;
use pier::model::AppProtocol;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

use crate::support::client::{get, send, send_h2};
use crate::support::snap::*;
use crate::support::*;

#[tokio::test]
async fn h2c_prior_knowledge_downstream_reaches_an_http1_backend() {
    let a = echo("a").await;
    let p = free_port();
    let h = Harness::start(simple(p, &backend("a", &[a.addr]))).await;
    let req = Request::get("http://h2.example.com/x?y=1")
        .body(Full::default())
        .unwrap();
    let resp = bounded(send_h2(local(p), req)).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.version, Version::HTTP_2);
    let seen = resp.echo();
    assert_eq!(seen.protocol, "HTTP/1.1");
    assert_eq!(seen.host, "h2.example.com", "Host comes from :authority");
    assert_eq!(seen.query.as_deref(), Some("y=1"));
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn h2c_backends_are_spoken_to_in_http2() {
    let a = echo("a").await;
    let p = free_port();
    let b = backend_with("a", AppProtocol::H2c, &[a.addr]);
    let h = Harness::start(simple(p, &b)).await;
    for _ in 0..3 {
        let seen = bounded(send(local(p), get("grpc.example.com", "/svc/Method")))
            .await
            .echo();
        assert_eq!(seen.protocol, "HTTP/2.0");
        assert_eq!(seen.host, "grpc.example.com");
        assert_eq!(seen.path, "/svc/Method");
    }
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn websocket_upgrade_is_passed_through() {
    let a = echo("a").await;
    let p = free_port();
    let b = backend_with("a", AppProtocol::WebSocket, &[a.addr]);
    let h = Harness::start(simple(p, &b)).await;
    let tcp = bounded(TcpStream::connect(local(p))).await.unwrap();
    let (mut ws, resp) = bounded(tokio_tungstenite::client_async(
        "ws://ws.example.com/chat",
        tcp,
    ))
    .await
    .unwrap();
    assert_eq!(resp.status(), 101);
    for text in ["hello", "again"] {
        bounded(ws.send(Message::text(text))).await.unwrap();
        let echoed = bounded(ws.next()).await.unwrap().unwrap();
        assert_eq!(echoed, Message::text(text));
    }
    bounded(ws.close(None)).await.unwrap();
    // The tunnel lives until both sides have closed (shutdown would wait for it).
    drop(ws);
    let upgrade = &a.requests()[0];
    assert_eq!(upgrade.headers["upgrade"], ["websocket"]);
    assert_eq!(upgrade.host, "ws.example.com");
    bounded(h.proxy.shutdown(BOUND)).await;
}
