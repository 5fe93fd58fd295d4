//! Active health checking (BackendTrafficPolicy `healthCheck.active`): one task per endpoint
//! address that some rule's check reaches, asking it every `interval` over the same upstream
//! pool and TLS as requests (mesh mTLS included: a meshed endpoint is never checked in
//! plaintext), and marking it down in its [`EndpointStats`] after `unhealthyThreshold`
//! failures in a row, up again after `healthyThreshold` passes.
//!
//! ```text
//! Proxy::reconcile ─> HealthChecks::wake ─> manager: the snapshot's rules with a check
//!                       ─> wanted (address ─> check, backend, endpoint; the first rule wins)
//!                       ─> start / stop / re-target one task per address
//! task: jittered wait ─> probe (HTTP | TCP | gRPC, bounded by timeout) ─> counts ─> mark
//! ```
//!
//! Checks never hammer an endpoint: one in flight per address (a task checks, then sleeps),
//! intervals jittered by up to a tenth, the first check within the first interval at random.
//! An endpoint starts healthy (its EndpointSlice already says ready); a down endpoint gets no
//! new requests while another endpoint of its backend is available; when none is, requests go
//! to the least loaded of all (a panic threshold of 0 %: wrong checks everywhere do not take
//! the whole service down). State is per address, as passive ejection is: an endpoint shared
//! by several backends is checked once, by the first rule's policy in snapshot order.
//! A task that stops (its check left the snapshot or changed) brings its endpoint back first.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use http::header::{HOST, USER_AGENT};
use http::{HeaderValue, Method, Request};
use http_body_util::{BodyExt, Limited};
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use crate::model::health::{ActiveCheck, Probe};
use crate::model::{Backend, BackendTarget, Endpoint, EndpointStats, Snapshot};
use crate::proxy::body;
use crate::proxy::exchange::unary;
use crate::proxy::observe::metrics::ProxyMetrics;
use crate::proxy::upstream::{Target, Upstream};

/// The manager looks at the snapshot at least this often (besides each reconcile).
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// An answer's body is read up to this much (the connection can then be reused).
const MAX_BODY: usize = 64 * 1024;
const GRPC_HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";
/// `HealthCheckResponse.ServingStatus.SERVING`.
const SERVING: i32 = 1;

/// The active health checks of one proxy. Cheap to clone.
#[derive(Clone)]
pub struct HealthChecks {
    inner: Arc<Inner>,
}

struct Inner {
    upstream: Upstream,
    snapshot: Arc<ArcSwap<Snapshot>>,
    metrics: Arc<ProxyMetrics>,
    wake: Notify,
    started: AtomicBool,
    closed: AtomicBool,
}

/// What one address's task checks: the backend and endpoint of the newest snapshot.
struct Subject {
    backend: Arc<Backend>,
    endpoint: Endpoint,
}

struct Running {
    check: Arc<ActiveCheck>,
    subject: Arc<ArcSwap<Subject>>,
    task: AbortHandle,
    /// Shared with the task: whether it has the endpoint marked down.
    down: Arc<AtomicBool>,
}

#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("answered {0}")]
    Unexpected(String),
    #[error("{0}")]
    Error(String),
}

// === impl HealthChecks ===

impl HealthChecks {
    pub fn new(
        upstream: Upstream,
        snapshot: Arc<ArcSwap<Snapshot>>,
        metrics: Arc<ProxyMetrics>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                upstream,
                snapshot,
                metrics,
                wake: Notify::new(),
                started: AtomicBool::new(false),
                closed: AtomicBool::new(false),
            }),
        }
    }

    /// Starts the manager (once; needs a runtime) and has it look at the snapshot now.
    pub fn wake(&self) {
        if !self.inner.started.swap(true, Ordering::AcqRel) {
            tokio::spawn(manage(self.inner.clone()));
        }
        self.inner.wake.notify_one();
    }

    /// Stops every check (shutdown).
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.wake.notify_one();
    }
}

/// The checks the snapshot asks for, by endpoint address: the first rule (ports, listeners,
/// entries in order) whose check reaches an address decides it.
fn wanted(snapshot: &Snapshot) -> HashMap<SocketAddr, (Arc<ActiveCheck>, Subject)> {
    let mut out = HashMap::new();
    let rules = (snapshot.ports.iter())
        .flat_map(|p| &p.listeners)
        .flat_map(|l| l.routes.entries())
        .map(|e| &e.rule);
    for rule in rules {
        let Some(check) = &rule.health else { continue };
        for wb in &rule.backends.backends {
            let BackendTarget::Service(backend) = &wb.target else {
                continue;
            };
            for endpoint in &backend.endpoints {
                out.entry(endpoint.addr).or_insert_with(|| {
                    (
                        check.clone(),
                        Subject {
                            backend: backend.clone(),
                            endpoint: endpoint.clone(),
                        },
                    )
                });
            }
        }
    }
    out
}

async fn manage(inner: Arc<Inner>) {
    let mut running: HashMap<SocketAddr, Running> = HashMap::new();
    let mut generation = None;
    loop {
        if inner.closed.load(Ordering::Acquire) {
            for (_, r) in running.drain() {
                stop(&inner, r);
            }
            return;
        }
        let snapshot = inner.snapshot.load_full();
        if generation != Some(snapshot.generation) {
            generation = Some(snapshot.generation);
            let mut want = wanted(&snapshot);
            drop(snapshot);
            let gone: Vec<SocketAddr> = (running.iter())
                .filter(|(addr, r)| !want.get(addr).is_some_and(|(c, _)| *c == r.check))
                .map(|(addr, _)| *addr)
                .collect();
            for addr in gone {
                if let Some(r) = running.remove(&addr) {
                    stop(&inner, r);
                }
            }
            for (addr, (check, subject)) in want.drain() {
                match running.get(&addr) {
                    Some(r) => r.subject.store(Arc::new(subject)),
                    None => {
                        let subject = Arc::new(ArcSwap::from_pointee(subject));
                        let down = Arc::new(AtomicBool::new(false));
                        let task = tokio::spawn(check_loop(
                            inner.clone(),
                            check.clone(),
                            subject.clone(),
                            down.clone(),
                        ))
                        .abort_handle();
                        running.insert(
                            addr,
                            Running {
                                check,
                                subject,
                                task,
                                down,
                            },
                        );
                    }
                }
            }
        }
        let _ = tokio::time::timeout(LOOK_EVERY, inner.wake.notified()).await;
    }
}

/// Stops a task and brings its endpoint back if the task had it down.
fn stop(inner: &Inner, r: Running) {
    r.task.abort();
    if r.down.swap(false, Ordering::AcqRel) {
        let s = r.subject.load();
        s.endpoint.stats.mark_healthy();
        inner.metrics.unhealthy(&s.backend.id, -1);
    }
}

/// A random duration in `[0, d)`.
fn random_below(d: Duration) -> Duration {
    d.mul_f64(rand::random::<f64>())
}

async fn check_loop(
    inner: Arc<Inner>,
    check: Arc<ActiveCheck>,
    subject: Arc<ArcSwap<Subject>>,
    down: Arc<AtomicBool>,
) {
    // Spread the first checks of many endpoints over the first interval.
    tokio::time::sleep(random_below(check.interval)).await;
    let (mut passes, mut failures) = (0u32, 0u32);
    loop {
        let s = subject.load_full();
        let outcome =
            match tokio::time::timeout(check.timeout, probe(&inner.upstream, &s, &check)).await {
                Ok(r) => r,
                Err(_) => Err(Failure::Timeout(check.timeout)),
            };
        let result = match &outcome {
            Ok(()) => "healthy",
            Err(Failure::Unexpected(_)) => "unhealthy",
            Err(Failure::Timeout(_)) => "timeout",
            Err(Failure::Error(_)) => "error",
        };
        inner.metrics.health_check(&s.backend.id, result);
        let stats: &EndpointStats = &s.endpoint.stats;
        match outcome {
            Ok(()) => {
                failures = 0;
                passes = passes.saturating_add(1);
                if down.load(Ordering::Acquire) && passes >= check.healthy_threshold {
                    down.store(false, Ordering::Release);
                    stats.mark_healthy();
                    inner.metrics.unhealthy(&s.backend.id, -1);
                    tracing::info!(
                        backend = %s.backend.id,
                        endpoint = %s.endpoint.addr,
                        policy = %check.source,
                        "health check passes again: the endpoint is back"
                    );
                }
            }
            Err(why) => {
                passes = 0;
                failures = failures.saturating_add(1);
                if !down.load(Ordering::Acquire) && failures >= check.unhealthy_threshold {
                    down.store(true, Ordering::Release);
                    stats.mark_unhealthy();
                    inner.metrics.unhealthy(&s.backend.id, 1);
                    tracing::warn!(
                        backend = %s.backend.id,
                        endpoint = %s.endpoint.addr,
                        policy = %check.source,
                        failures,
                        error = %why,
                        "health check failed: the endpoint gets no new requests"
                    );
                } else if down.load(Ordering::Acquire) && !stats.is_unhealthy() {
                    // A passive ejection that was being decided as the check marked it wrote
                    // its own end over the mark: mark again.
                    stats.mark_unhealthy();
                }
            }
        }
        drop(s);
        let jitter = random_below(check.interval / 5);
        tokio::time::sleep(check.interval.mul_f64(0.9) + jitter).await;
    }
}

/// One check of one endpoint.
async fn probe(upstream: &Upstream, s: &Subject, check: &ActiveCheck) -> Result<(), Failure> {
    let backend = &s.backend;
    let endpoint = &s.endpoint;
    let error = |e: &dyn std::fmt::Display| Failure::Error(e.to_string());
    match &check.probe {
        Probe::Tcp => {
            let tls = upstream.tls_for(backend, endpoint).map_err(|e| error(&e))?;
            let (_stream, _open) = upstream
                .open_stream(backend, endpoint.addr, tls)
                .await
                .map_err(|e| error(&e))?;
            Ok(())
        }
        Probe::Http {
            path,
            host,
            head,
            expected,
            body: want,
        } => {
            let host = match host {
                Some(h) => HeaderValue::from_str(h).map_err(|e| error(&e))?,
                None => HeaderValue::from_str(&endpoint.addr.to_string()).map_err(|e| error(&e))?,
            };
            let method = if *head { Method::HEAD } else { Method::GET };
            let req = Request::builder()
                .method(method)
                .uri(path.as_str())
                .header(HOST, host)
                .header(USER_AGENT, "pier-health-check")
                .body(body::empty())
                .map_err(|e| error(&e))?;
            let target = Target {
                backend,
                endpoint,
                upgrade: false,
            };
            let resp = upstream.send(target, req).await.map_err(|e| error(&e))?;
            let status = resp.status();
            // Read the answer (bounded) so that the connection can serve the next check.
            let got = Limited::new(resp.into_body(), MAX_BODY).collect().await;
            if !expected.contains(&status.as_u16()) {
                return Err(Failure::Unexpected(format!("status {}", status.as_u16())));
            }
            match want {
                None => Ok(()),
                Some(want) => {
                    let got = got.map(|c| c.to_bytes()).unwrap_or_default();
                    if got.windows(want.len()).any(|w| w == &want[..]) {
                        Ok(())
                    } else {
                        Err(Failure::Unexpected(
                            "a body without the expected response".into(),
                        ))
                    }
                }
            }
        }
        Probe::Grpc { service } => {
            let message = prost::Message::encode_to_vec(&HealthCheckRequest {
                service: service.clone(),
            });
            let authority = endpoint.addr.to_string();
            let req =
                unary::request(GRPC_HEALTH_CHECK, &authority, &message).map_err(|e| error(&e))?;
            let target = Target {
                backend,
                endpoint,
                upgrade: false,
            };
            let resp = upstream.send(target, req).await.map_err(|e| error(&e))?;
            let (parts, body) = resp.into_parts();
            let collected = Limited::new(body, MAX_BODY)
                .collect()
                .await
                .map_err(|e| Failure::Error(e.to_string()))?;
            let trailers = collected.trailers().cloned();
            let bytes = collected.to_bytes();
            let Some(answer) = unary::message(&parts.headers, trailers.as_ref(), &bytes) else {
                let status = (trailers.as_ref())
                    .and_then(|t| t.get("grpc-status"))
                    .or_else(|| parts.headers.get("grpc-status"))
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("none");
                return Err(Failure::Unexpected(format!(
                    "HTTP {} grpc-status {status}",
                    parts.status.as_u16()
                )));
            };
            let answer: HealthCheckResponse =
                prost::Message::decode(answer).map_err(|e| error(&e))?;
            if answer.status == SERVING {
                Ok(())
            } else {
                Err(Failure::Unexpected(format!(
                    "serving status {}",
                    answer.status
                )))
            }
        }
    }
}

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

/// `grpc.health.v1.HealthCheckResponse`.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    status: i32,
}
