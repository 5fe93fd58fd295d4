//! Tracing: W3C trace context (`traceparent`, `tracestate`) and OpenTelemetry span export over
//! OTLP/HTTP protobuf, one policy for both request paths (`h1` and `service`, HTTP/2 included).
//!
//! ```text
//! request head ─> start (tracing off: None, one branch) ─> Span in forwarded::Edge
//!                   trace id (the parent's or new), pier's span id, sampled?
//!                                     └─> Edge::each ─> traceparent (pier's span as parent),
//!                                                       tracestate (as received) upstream
//! response head ─> finish (sampled only) ─> SpanData ─> bounded queue (full: dropped, counted)
//!                                                       └─> export task: batches ─> OTLP/HTTP
//! ```
//!
//! Tracing is on when `--otlp-endpoint` is given. Off, the client's `traceparent` and
//! `tracestate` pass upstream untouched and the request paths pay one `Option` check.
//!
//! On, pier's span is a child of a valid incoming `traceparent` (same trace ID, the client's
//! span as parent) or the root of a new trace; an invalid one is ignored (a new trace, and the
//! `tracestate` with it is dropped, as the W3C spec says). Upstream gets pier's own
//! `traceparent`, version `00`, with pier's span ID as the parent and the sampled flag as
//! pier decided.
//!
//! The sampling decision: a parent's sampled flag is honoured only from a trusted hop
//! (`--trusted-proxies`, the same policy as `X-Forwarded-For`); from anyone else pier draws at
//! `--trace-sample-ratio`, with a random number rather than from the trace ID, which the
//! client chose. Honouring any client's flag would let anyone make pier export every request.
//!
//! Export never touches the request path: a finished sampled span is offered to a bounded
//! queue (`try_send`; a full queue drops the span and counts it in
//! `pier_proxy_trace_spans_total{result="dropped"}`), and one task sends batches every second
//! or when a batch is full. On shutdown the task exports what is queued, within a bound.
//!
//! Why not the SDK's `TracerProvider` and `BatchSpanProcessor`: pier needs its span ID before
//! the span ends (to write `traceparent` upstream) for unsampled requests too, its queue's
//! drops as a Prometheus counter, and the export on the tokio runtime, where hyper's client
//! lives. So pier builds the SDK's `SpanData` itself and hands batches to the OTLP exporter.
//! The exporter posts through `opentelemetry-http`'s hyper client (hyper is in the tree
//! already): no reqwest, no second TLS stack, no gRPC.
//!
//! Endpoints are `http://` or `https://`. Over `https://` the client is hyper-rustls with a
//! config from [`tls`] (aws-lc-rs, TLS 1.2/1.3, the collector's certificate and name verified
//! against the host's roots or `--otlp-ca-file`, optionally a client certificate), and the
//! connector refuses anything but TLS: a failed handshake is a failed export
//! (`pier_proxy_trace_spans_total{result="failed"}`), never a retry in plaintext.

use std::borrow::Cow;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use http::{Method, StatusCode};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::forwarded::Edge;
use super::metrics::{ProxyMetrics, SpanResult};
use super::record::Seen;
use crate::model::PathMatch;
use crate::proxy::conn_info::ConnInfo;

pub mod context;
mod tls;

pub use self::tls::{TlsError, TlsFiles};
pub use context::{
    MAX_TRACESTATE, MAX_TRACESTATE_MEMBERS, Parent, Span, TRACEPARENT, TRACESTATE, TraceIdText,
    format_traceparent, is_trace_header, parse_traceparent,
};
use context::{Received, Record};

/// Finished spans waiting for export; when it is full, new spans are dropped (and counted).
pub const QUEUE: usize = 2048;
/// Spans per export request.
pub const BATCH: usize = 512;
/// A batch that is not full is sent after this.
pub const EXPORT_EVERY: Duration = Duration::from_secs(1);
/// Bound on one export request (connect included).
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// `--otlp-endpoint`, `--trace-sample-ratio` and the `--otlp-*` TLS files.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceConfig {
    pub endpoint: OtlpEndpoint,
    pub sample_ratio: SampleRatio,
    /// For an `https://` endpoint; with `http://`, setting any is an error at start.
    pub tls: TlsFiles,
    /// A batch that is not full is sent after this ([`EXPORT_EVERY`]; tests lengthen it to
    /// see what only the shutdown flush sends).
    pub export_every: Duration,
}

impl TraceConfig {
    pub fn new(endpoint: OtlpEndpoint, sample_ratio: SampleRatio) -> Self {
        Self {
            endpoint,
            sample_ratio,
            tls: TlsFiles::default(),
            export_every: EXPORT_EVERY,
        }
    }

    /// The TLS client config for the endpoint: `None` for `http://`. Reads the files named
    /// (and, without `--otlp-ca-file`, the host's trust store): call it off the runtime.
    pub fn client_tls(&self) -> Result<Option<rustls::ClientConfig>, TlsError> {
        tls::client_config(self.endpoint.is_https(), &self.tls)
    }
}

/// Where spans go: an `http://` or `https://` URL; a URL without a path gets OTLP's
/// `/v1/traces`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpEndpoint(http::Uri);

/// The fraction of new traces pier samples, 0 to 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SampleRatio(f64);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("not an http:// or https:// URL")]
    Url,
    #[error("only http:// and https:// OTLP endpoints are supported")]
    Scheme,
    #[error("the URL has no host")]
    Host,
    #[error("not a number from 0 to 1")]
    Ratio,
}

/// The exporter side, shared by every request: the sampler, the queue, the export task.
pub struct Tracer {
    sample: Sample,
    queue: mpsc::Sender<SpanData>,
    metrics: Arc<ProxyMetrics>,
    scope: InstrumentationScope,
    stop: Mutex<Option<(oneshot::Sender<()>, JoinHandle<()>)>>,
}

#[derive(Clone, Copy, Debug)]
enum Sample {
    Never,
    Always,
    /// A uniform random `u64` below this.
    Below(u64),
}

/// The request line, as the request path has it.
pub struct RequestLine<'r> {
    pub method: &'r Method,
    /// Host or `:authority`, as sent.
    pub host: &'r str,
    /// Path without the query.
    pub path: &'r str,
}

// === impl OtlpEndpoint, SampleRatio ===

impl FromStr for OtlpEndpoint {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let uri: http::Uri = s.trim().parse().map_err(|_| ConfigError::Url)?;
        let scheme = match uri.scheme_str() {
            Some("http") => "http",
            Some("https") => "https",
            Some(_) => return Err(ConfigError::Scheme),
            None => return Err(ConfigError::Url),
        };
        let Some(authority) = uri.authority().filter(|a| !a.host().is_empty()) else {
            return Err(ConfigError::Host);
        };
        let path = match uri.path_and_query().map(|p| p.as_str()) {
            None | Some("" | "/") => "/v1/traces",
            Some(p) => p,
        };
        let uri = http::Uri::builder()
            .scheme(scheme)
            .authority(authority.clone())
            .path_and_query(path)
            .build()
            .map_err(|_| ConfigError::Url)?;
        Ok(Self(uri))
    }
}

impl OtlpEndpoint {
    pub fn is_https(&self) -> bool {
        self.0.scheme() == Some(&http::uri::Scheme::HTTPS)
    }
}

impl std::fmt::Display for OtlpEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl SampleRatio {
    pub const DEFAULT: Self = Self(0.01);

    pub fn get(self) -> f64 {
        self.0
    }
}

impl FromStr for SampleRatio {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let r: f64 = s.trim().parse().map_err(|_| ConfigError::Ratio)?;
        if !(0.0..=1.0).contains(&r) {
            // NaN fails `contains` too.
            return Err(ConfigError::Ratio);
        }
        Ok(Self(r))
    }
}

impl std::fmt::Display for SampleRatio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl Sample {
    fn of(ratio: SampleRatio) -> Self {
        let r = ratio.get();
        if r <= 0.0 {
            Self::Never
        } else if r >= 1.0 {
            Self::Always
        } else {
            // 2^64 · r, below 2^64 since r < 1 (the cast saturates anyway).
            Self::Below((r * 18_446_744_073_709_551_616.0) as u64)
        }
    }

    fn draw(self) -> bool {
        match self {
            Self::Never => false,
            Self::Always => true,
            Self::Below(t) => rand::random::<u64>() < t,
        }
    }
}

// === start, finish ===

/// The request's trace context, when tracing is on. `trusted`: the hop is a trusted proxy,
/// whose sampled flag pier honours. `lines`: the client's header lines (read only when on).
pub fn start<'h>(
    tracer: Option<&Tracer>,
    trusted: bool,
    lines: impl Iterator<Item = (&'h str, &'h [u8])>,
    req: RequestLine<'_>,
) -> Option<Box<Span>> {
    let tracer = tracer?;
    Some(tracer.span(trusted, &Received::read(lines), req))
}

/// How a traced request ended, for its span.
pub struct End<'a, 's> {
    pub conn: &'a ConnInfo,
    pub edge: &'a Edge,
    pub seen: &'a Seen<'s>,
    pub status: StatusCode,
}

/// Exports the request's span when it was sampled (off the request path: a full queue drops
/// it).
pub fn finish(tracer: Option<&Tracer>, end: End<'_, '_>) {
    let (Some(tracer), Some(span)) = (tracer, end.edge.trace.as_ref()) else {
        return;
    };
    let Some(record) = span.record.as_ref() else {
        return;
    };
    tracer.offer(span_data(tracer, span, record, &end));
}

fn span_data(tracer: &Tracer, span: &Span, record: &Record, end: &End<'_, '_>) -> SpanData {
    let seen = end.seen;
    let route = seen.path_match.map(http_route);
    let method = known_method(&record.method);
    let name = match (&route, method) {
        (Some(r), Some(m)) => format!("{m} {r}"),
        (Some(r), None) => format!("HTTP {r}"),
        (None, Some(m)) => m.to_string(),
        (None, None) => "HTTP".to_string(),
    };
    let mut attributes = Vec::with_capacity(16);
    attributes.push(KeyValue::new(
        "http.request.method",
        method.unwrap_or("_OTHER"),
    ));
    if method.is_none() {
        attributes.push(KeyValue::new(
            "http.request.method_original",
            record.method.to_string(),
        ));
    }
    attributes.push(KeyValue::new("url.path", record.path.clone()));
    attributes.push(KeyValue::new(
        "http.response.status_code",
        i64::from(end.status.as_u16()),
    ));
    let (host, port) = split_host(&record.host);
    if !host.is_empty() {
        attributes.push(KeyValue::new("server.address", host.to_string()));
    }
    if let Some(port) = port {
        attributes.push(KeyValue::new("server.port", i64::from(port)));
    }
    attributes.push(KeyValue::new("client.address", end.edge.client.to_string()));
    attributes.push(KeyValue::new(
        "network.peer.address",
        end.conn.peer.ip().to_string(),
    ));
    attributes.push(KeyValue::new(
        "network.peer.port",
        i64::from(end.conn.peer.port()),
    ));
    if let Some(route) = route {
        attributes.push(KeyValue::new("http.route", route));
    }
    if let Some(l) = seen.reached.listener {
        attributes.push(KeyValue::new("pier.listener", l.to_string()));
    }
    if let Some(r) = seen.reached.route {
        attributes.push(KeyValue::new("pier.route", r.to_string()));
    }
    if let Some(rule) = seen.rule {
        let label = match &rule.name {
            Some(n) => n.clone(),
            None => rule.index.to_string(),
        };
        attributes.push(KeyValue::new("pier.rule", label));
    }
    if let Some(b) = seen.reached.backend {
        attributes.push(KeyValue::new("pier.backend", b.to_string()));
    }
    if let Some(u) = seen.upstream {
        attributes.push(KeyValue::new("pier.upstream.address", u.to_string()));
    }
    if let Some(id) = seen.identity.filter(|_| seen.failure.is_none()) {
        attributes.push(KeyValue::new("pier.workload_identity", id.to_string()));
    }
    if let Some(f) = seen.failure {
        attributes.push(KeyValue::new("error.type", format!("{:?}", f.kind)));
        if let Some(d) = f.detail {
            attributes.push(KeyValue::new("pier.tls_failure", d));
        }
    } else if end.status.is_server_error() {
        attributes.push(KeyValue::new("error.type", end.status.as_str().to_string()));
    }
    let status = if end.status.is_server_error() {
        Status::error("")
    } else {
        Status::Unset
    };
    SpanData {
        span_context: SpanContext::new(
            TraceId::from_bytes(span.trace_id),
            SpanId::from_bytes(span.span_id),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id: span.parent.map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: span.parent.is_some(),
        span_kind: SpanKind::Server,
        name: Cow::Owned(name),
        start_time: record.start,
        end_time: SystemTime::now(),
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: tracer.scope.clone(),
    }
}

/// `http.route`: the path match of the rule that matched (a prefix as `/prefix`, `/` for the
/// whole tree), low cardinality as the semantic conventions want.
fn http_route(m: &PathMatch) -> String {
    match m {
        PathMatch::Exact(p) => p.clone(),
        PathMatch::Prefix(p) if p.is_empty() => "/".to_string(),
        PathMatch::Prefix(p) => p.clone(),
        PathMatch::RegularExpression(r) => r.as_str().to_string(),
    }
}

/// The method as the semantic conventions name it, `None` for any other (`_OTHER`).
fn known_method(m: &Method) -> Option<&'static str> {
    Some(match *m {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::CONNECT => "CONNECT",
        Method::OPTIONS => "OPTIONS",
        Method::TRACE => "TRACE",
        Method::PATCH => "PATCH",
        _ => return None,
    })
}

/// `host[:port]` or `[v6]:port` into host and port.
fn split_host(host: &str) -> (&str, Option<u16>) {
    if let Some(rest) = host.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((h, p)) => (h, p.strip_prefix(':').and_then(|p| p.parse().ok())),
            None => (host, None),
        };
    }
    match host.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => match p.parse() {
            Ok(port) => (h, Some(port)),
            Err(_) => (host, None),
        },
        _ => (host, None),
    }
}

/// The OTLP/HTTP protobuf exporter over `client`.
fn exporter(
    client: impl opentelemetry_http::HttpClient + 'static,
    endpoint: String,
) -> anyhow::Result<opentelemetry_otlp::SpanExporter> {
    use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
    Ok(opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint)
        .with_timeout(EXPORT_TIMEOUT)
        .build()?)
}

// === impl Tracer ===

impl Tracer {
    /// Builds the OTLP/HTTP exporter and starts the export task (on the current runtime).
    /// `tls`: [`TraceConfig::client_tls`], required for an `https://` endpoint.
    pub fn start(
        config: &TraceConfig,
        tls: Option<rustls::ClientConfig>,
        metrics: Arc<ProxyMetrics>,
    ) -> anyhow::Result<Self> {
        use opentelemetry_http::hyper::HyperClient;
        let endpoint = config.endpoint.to_string();
        let mut exporter = match (config.endpoint.is_https(), tls) {
            (false, None) => exporter(
                HyperClient::with_default_connector(EXPORT_TIMEOUT, None),
                endpoint,
            )?,
            (true, Some(tls)) => {
                // `https_only`: the connector refuses an `http` URI rather than send it in
                // plaintext.
                let connector = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(tls)
                    .https_only()
                    .enable_all_versions()
                    .build();
                exporter(HyperClient::new(connector, EXPORT_TIMEOUT, None), endpoint)?
            }
            (true, None) => anyhow::bail!("an https:// OTLP endpoint needs a TLS configuration"),
            (false, Some(_)) => anyhow::bail!("TLS settings need an https:// OTLP endpoint"),
        };
        exporter.set_resource(
            &opentelemetry_sdk::Resource::builder_empty()
                .with_service_name("pier")
                .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
                .build(),
        );
        let (queue, spans) = mpsc::channel(QUEUE);
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(export_loop(
            exporter,
            (spans, config.export_every),
            stopped,
            metrics.clone(),
        ));
        Ok(Self {
            sample: Sample::of(config.sample_ratio),
            queue,
            metrics,
            scope: InstrumentationScope::builder("pier")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            stop: Mutex::new(Some((stop, task))),
        })
    }

    fn span(&self, trusted: bool, received: &Received<'_>, req: RequestLine<'_>) -> Box<Span> {
        let parent = received.parent();
        let sampled = match parent {
            Some(p) if trusted => p.sampled(),
            _ => self.sample.draw(),
        };
        let trace_id = parent.map_or_else(new_trace_id, |p| p.trace_id);
        let span_id = new_span_id();
        Box::new(Span {
            trace_id,
            span_id,
            parent: parent.map(|p| p.span_id),
            traceparent: format_traceparent(&trace_id, &span_id, sampled),
            tracestate: parent.and_then(|_| received.state()),
            record: sampled.then(|| Record {
                start: SystemTime::now(),
                method: req.method.clone(),
                path: req.path.to_string(),
                host: req.host.to_string(),
            }),
        })
    }

    fn offer(&self, span: SpanData) {
        if self.queue.try_send(span).is_err() {
            self.metrics.spans(SpanResult::Dropped, 1);
        }
    }

    /// Exports what is queued (within `grace`) and stops the export task. Later spans are
    /// dropped.
    pub async fn shutdown(&self, grace: Duration) {
        let stop = self
            .stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some((stop, mut task)) = stop else {
            return;
        };
        let _ = stop.send(());
        if tokio::time::timeout(grace, &mut task).await.is_err() {
            tracing::warn!("span export did not finish within the shutdown grace; spans lost");
            task.abort();
        }
    }
}

fn new_trace_id() -> [u8; 16] {
    loop {
        let id: u128 = rand::random();
        if id != 0 {
            return id.to_be_bytes();
        }
    }
}

fn new_span_id() -> [u8; 8] {
    loop {
        let id: u64 = rand::random();
        if id != 0 {
            return id.to_be_bytes();
        }
    }
}

async fn export_loop(
    exporter: opentelemetry_otlp::SpanExporter,
    (mut spans, every): (mpsc::Receiver<SpanData>, Duration),
    mut stop: oneshot::Receiver<()>,
    metrics: Arc<ProxyMetrics>,
) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let room = BATCH - batch.len();
        tokio::select! {
            n = spans.recv_many(&mut batch, room) => {
                if n == 0 {
                    break;
                }
                if batch.len() < BATCH {
                    continue;
                }
            }
            _ = tick.tick() => {
                if batch.is_empty() {
                    continue;
                }
            }
            _ = &mut stop => break,
        }
        export(&exporter, &mut batch, &metrics).await;
    }
    spans.close();
    while let Ok(span) = spans.try_recv() {
        batch.push(span);
        if batch.len() == BATCH {
            export(&exporter, &mut batch, &metrics).await;
        }
    }
    export(&exporter, &mut batch, &metrics).await;
}

async fn export(
    exporter: &opentelemetry_otlp::SpanExporter,
    batch: &mut Vec<SpanData>,
    metrics: &ProxyMetrics,
) {
    if batch.is_empty() {
        return;
    }
    let spans = std::mem::replace(batch, Vec::with_capacity(BATCH));
    let n = spans.len() as u64;
    match exporter.export(spans).await {
        Ok(()) => metrics.spans(SpanResult::Exported, n),
        Err(error) => {
            metrics.spans(SpanResult::Failed, n);
            tracing::warn!(%error, spans = n, "span export failed");
        }
    }
}

#[cfg(test)]
mod tests;
