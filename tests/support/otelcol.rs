//! A real OpenTelemetry Collector (`scripts/otelcol.sh`: the OTLP receiver and the file
//! exporter) as the OTLP/HTTP endpoint for the tracing tests. It writes what it receives as
//! OTLP JSON lines, which [`Collector::spans`] reads back.
//!
//! [`Collector::start_tls`] serves the receiver over TLS (its `tls` setting) with a given
//! certificate, optionally requiring client certificates from a CA.
//!
//! The binary comes from `PIER_OTELCOL`, else from the cache `scripts/otelcol.sh build` fills;
//! missing, the test fails (never skips). The process dies with the thread that started it
//! and on drop.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::apiserver::Proc;

pub struct Collector {
    proc: Proc,
    /// `http://127.0.0.1:<port>` (`https://` with TLS): what `--otlp-endpoint` takes.
    pub endpoint: String,
    file: PathBuf,
    /// Last, so it is removed after the process is gone.
    _dir: tempfile::TempDir,
}

/// One received span, with its resource's attributes.
#[derive(Clone, Debug)]
pub struct Span {
    pub span: Value,
    pub resource: Value,
}

fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("PIER_OTELCOL") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("PIER_OTELCOL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(&std::env::var_os("HOME").expect("HOME is set")).join(".cache/pier/otelcol")
        });
    let version = std::env::var("PIER_OTELCOL_VERSION").unwrap_or_else(|_| {
        super::pinned_version(include_str!("../../scripts/otelcol.sh"), "OTELCOL_VERSION")
    });
    let bin = cache.join(format!("v{version}/otelcol"));
    assert!(
        bin.is_file(),
        "{} not found: run `scripts/otelcol.sh build`, or set PIER_OTELCOL",
        bin.display()
    );
    bin
}

/// The receiver's TLS: its certificate and key (PEM), and for mTLS the CA (PEM) client
/// certificates must chain to.
pub struct ServerTls<'a> {
    pub cert_pem: &'a str,
    pub key_pem: &'a str,
    pub client_ca_pem: Option<&'a str>,
}

impl Collector {
    /// Starts the collector and waits until its OTLP/HTTP port accepts connections. Call from
    /// the test's own task.
    pub async fn start() -> Self {
        Self::start_with(None).await
    }

    /// [`Collector::start`] with the OTLP/HTTP receiver on TLS.
    pub async fn start_tls(tls: ServerTls<'_>) -> Self {
        Self::start_with(Some(tls)).await
    }

    async fn start_with(tls: Option<ServerTls<'_>>) -> Self {
        let bin = binary();
        let dir = tempfile::Builder::new()
            .prefix("pier-otelcol-")
            .tempdir()
            .unwrap();
        let port = super::free_port();
        let file = dir.path().join("spans.jsonl");
        let config = dir.path().join("config.yaml");
        let mut tls_yaml = String::new();
        if let Some(tls) = &tls {
            let write = |name: &str, pem: &str| {
                let path = dir.path().join(name);
                std::fs::write(&path, pem).unwrap();
                path.display().to_string()
            };
            tls_yaml = format!(
                "
        tls:
          cert_file: {}
          key_file: {}",
                write("server.crt", tls.cert_pem),
                write("server.key", tls.key_pem)
            );
            if let Some(ca) = tls.client_ca_pem {
                tls_yaml += &format!("\n          client_ca_file: {}", write("client-ca.crt", ca));
            }
        }
        std::fs::write(
            &config,
            format!(
                "receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{port}{tls_yaml}
exporters:
  file:
    path: {file}
    flush_interval: 50ms
service:
  telemetry:
    metrics: {{level: none}}
    logs: {{level: info}}
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
",
                file = file.display()
            ),
        )
        .unwrap();
        let mut proc = Proc::spawn(
            "otelcol",
            &bin,
            &[format!("--config={}", config.display())],
            dir.path().join("otelcol.log"),
        );
        let addr = super::local(port);
        let deadline = std::time::Instant::now() + super::BOUND;
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            proc.assert_running();
            assert!(
                std::time::Instant::now() < deadline,
                "otelcol did not listen on {addr}; log:\n{}",
                proc.tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self {
            proc,
            endpoint: format!("{}://{addr}", if tls.is_some() { "https" } else { "http" }),
            file,
            _dir: dir,
        }
    }

    /// Every span received so far (what the file exporter has flushed).
    pub fn spans(&self) -> Vec<Span> {
        let Ok(text) = std::fs::read_to_string(&self.file) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        // A line being written may be incomplete: only whole lines count.
        for line in text.lines().filter(|l| l.ends_with('}')) {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            for rs in v["resourceSpans"].as_array().into_iter().flatten() {
                for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                    for span in ss["spans"].as_array().into_iter().flatten() {
                        out.push(Span {
                            span: span.clone(),
                            resource: rs["resource"].clone(),
                        });
                    }
                }
            }
        }
        out
    }

    /// Waits (bounded) until at least `n` spans have arrived; returns them all.
    pub async fn wait_spans(&mut self, n: usize) -> Vec<Span> {
        let deadline = std::time::Instant::now() + super::BOUND;
        loop {
            let spans = self.spans();
            if spans.len() >= n {
                return spans;
            }
            self.proc.assert_running();
            assert!(
                std::time::Instant::now() < deadline,
                "{} of {n} spans arrived; collector log:\n{}",
                spans.len(),
                self.proc.tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Span {
    /// A string, integer or boolean attribute's value as text; `None` when absent.
    pub fn attr(&self, key: &str) -> Option<String> {
        attr_of(&self.span["attributes"], key)
    }

    pub fn resource_attr(&self, key: &str) -> Option<String> {
        attr_of(&self.resource["attributes"], key)
    }

    pub fn str(&self, field: &str) -> String {
        self.span[field].as_str().unwrap_or_default().to_string()
    }
}

fn attr_of(attrs: &Value, key: &str) -> Option<String> {
    let kv = attrs.as_array()?.iter().find(|kv| kv["key"] == key)?;
    let v = &kv["value"];
    if let Some(s) = v["stringValue"].as_str() {
        return Some(s.to_string());
    }
    // OTLP JSON writes 64-bit integers as strings.
    if let Some(i) = v["intValue"].as_str() {
        return Some(i.to_string());
    }
    v["intValue"]
        .as_i64()
        .map(|i| i.to_string())
        .or_else(|| v["boolValue"].as_bool().map(|b| b.to_string()))
}
