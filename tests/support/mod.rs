//! Helpers shared by the integration tests: free loopback ports, manifest directories,
//! a plain HTTP client, pier started in-process.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

pub fn init() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let _ = tracing_subscriber::fmt()
        .with_env_filter("pier=debug")
        .with_test_writer()
        .try_init();
}

/// A loopback port that was free a moment ago (pier's listener ports come from manifests).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn client() -> Client<HttpConnector, Empty<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The `backend` an echo server reports.
    pub fn backend(&self) -> String {
        self.json()["backend"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

pub async fn get(url: &str, headers: &[(&str, &str)]) -> Reply {
    let mut req = http::Request::get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = tokio::time::timeout(
        Duration::from_secs(10),
        client().request(req.body(Empty::new()).unwrap()),
    )
    .await
    .expect("request timed out")
    .expect("request failed");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// Polls `f` until it returns true, at most `limit`; returns the time it took.
pub async fn eventually<F, Fut>(limit: Duration, mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if f().await {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "condition not met within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Writes a file atomically (temp file + rename), as editors and config tools do.
pub fn write_atomic(path: &Path, text: &str) {
    let dir = path.parent().unwrap();
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

pub const GATEWAY_CLASS: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: pier}
spec: {controllerName: pier.dev/gateway-controller}
";

/// A Gateway `default/gw` with one HTTP listener on `port`.
pub fn gateway(port: u16) -> String {
    format!(
        "{GATEWAY_CLASS}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  gatewayClassName: pier
  listeners:
    - {{name: http, protocol: HTTP, port: {port}}}
"
    )
}

/// A Service `default/<name>` port 80 with one ready endpoint at `addr`.
pub fn service(name: &str, addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec:
  ports: [{{name: http, port: 80}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-1
  namespace: default
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{name: http, port: {port}}}]
endpoints:
  - addresses: [\"{ip}\"]
",
        port = addr.port(),
        ip = addr.ip()
    )
}

/// An HTTPRoute `default/<name>` sending `prefix` to Service `backend`.
pub fn route(name: &str, prefix: &str, backend: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: {prefix}}}}}]
      backendRefs: [{{name: {backend}, port: 80}}]
"
    )
}
