//! A W3C WebDriver client over hyper, just what the OIDC login test needs (a session, open a
//! URL, find an element, type, click, read the URL, the page and the cookies), driving
//! Debian's `chromedriver` with a headless `chromium`. A few dozen lines of JSON over HTTP
//! rather than a crate: the protocol is small and stable, and fantoccini would bring its own
//! HTTP and TLS stack for what one loopback connection does.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use serde_json::{Value, json};

use super::client::send_h1_on;
use super::web::{Child, eventually, try_get};

/// The key of an element reference in W3C WebDriver answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// `chromedriver` and one browser session; both end when dropped.
pub struct Browser {
    port: u16,
    session: String,
    _driver: Child,
}

impl Browser {
    /// Starts `chromedriver` (`PIER_CHROMEDRIVER`, else `/usr/bin/chromedriver`) and a
    /// headless `chromium` (`PIER_CHROMIUM`, else `/usr/bin/chromium`) with a fresh profile
    /// in `profile`.
    pub async fn start(profile: &Path) -> Browser {
        let driver = std::env::var("PIER_CHROMEDRIVER").unwrap_or("/usr/bin/chromedriver".into());
        let chromium = std::env::var("PIER_CHROMIUM").unwrap_or("/usr/bin/chromium".into());
        for bin in [&driver, &chromium] {
            assert!(
                Path::new(bin).is_file(),
                "{bin} not found: install Debian's chromium and chromium-driver (scripts/test \
                 does), or set PIER_CHROMIUM / PIER_CHROMEDRIVER"
            );
        }
        let port = super::free_port();
        let child = Child(
            Command::new(&driver)
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("chromedriver starts"),
        );
        eventually(Duration::from_secs(20), || async move {
            try_get(&format!("http://127.0.0.1:{port}/status"), &[])
                .await
                .is_some_and(|r| r.json()["value"]["ready"] == true)
        })
        .await;
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", "--no-first-run",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
        }}});
        let r = call(port, "POST", "/session", Some(caps)).await;
        let session = r["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {r}"))
            .to_string();
        Browser {
            port,
            session,
            _driver: child,
        }
    }

    async fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        let r = call(self.port, method, &path, body).await;
        if r["value"].get("error").is_some() {
            panic!("WebDriver {method} {path}: {r}");
        }
        r["value"].clone()
    }

    pub async fn open(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({"url": url}))).await;
    }

    pub async fn url(&self) -> String {
        self.cmd("GET", "/url", None)
            .await
            .as_str()
            .unwrap()
            .to_string()
    }

    pub async fn source(&self) -> String {
        self.cmd("GET", "/source", None)
            .await
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Waits (at most 10 s) for an element matching the CSS `selector`.
    pub async fn find(&self, selector: &str) -> String {
        let start = Instant::now();
        loop {
            let path = format!("/session/{}/element", self.session);
            let body = json!({"using": "css selector", "value": selector});
            let r = call(self.port, "POST", &path, Some(body)).await;
            if let Some(id) = r["value"][ELEMENT].as_str() {
                return id.to_string();
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no element {selector} on {} ({r}): {}",
                self.url().await,
                self.source().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn type_into(&self, selector: &str, text: &str) {
        let id = self.find(selector).await;
        self.cmd(
            "POST",
            &format!("/element/{id}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    pub async fn click(&self, selector: &str) {
        let id = self.find(selector).await;
        self.cmd("POST", &format!("/element/{id}/click"), Some(json!({})))
            .await;
    }

    /// The cookies the browser holds for the current page: `(name, value)`.
    pub async fn cookies(&self) -> Vec<(String, String)> {
        let v = self.cmd("GET", "/cookie", None).await;
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap().to_string(),
                    c["value"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// Waits (at most 10 s) until the URL satisfies `ok`.
    pub async fn wait_url(&self, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let url = self.url().await;
            if ok(&url) {
                return url;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "stuck at {url}: {}",
                self.source().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Closing the session ends chromium; chromedriver is killed by its Child.
        let (port, session) = (self.port, self.session.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let _ = tokio::time::timeout(
                    Duration::from_secs(5),
                    call(port, "DELETE", &format!("/session/{session}"), None),
                )
                .await;
            });
        })
        .join();
    }
}

async fn call(port: u16, method: &str, path: &str, body: Option<Value>) -> Value {
    let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", format!("127.0.0.1:{port}"))
        .header("content-type", "application/json")
        .body(Full::new(body))
        .unwrap();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("chromedriver is listening");
    let r = tokio::time::timeout(Duration::from_secs(30), send_h1_on(tcp, req))
        .await
        .expect("WebDriver call timed out");
    serde_json::from_slice(&r.body).unwrap_or(Value::Null)
}
