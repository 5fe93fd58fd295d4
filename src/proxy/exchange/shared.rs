//! What every connection and request reads ([`Shared`]), and admission: a request is counted
//! against its endpoint (power of two choices, the in-flight gauge) and admitted under its
//! backend's maximum of requests in flight. Both request paths and retries admit here.

use std::sync::Arc;

use arc_swap::ArcSwap;
use hyper_util::server::conn::auto;

use crate::model::{Backend, Endpoint, Snapshot};
use crate::proxy::config::ProxyConfig;
use crate::proxy::error::ProxyError;
use crate::proxy::exchange::retry::budget::RetryBudgets;
use crate::proxy::observe::metrics::ProxyMetrics;
use crate::proxy::observe::trace;
use crate::proxy::streams::StreamExec;
use crate::proxy::upstream::{self, Clock, Upstream};

/// What every connection and request reads.
pub struct Shared {
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub config: ProxyConfig,
    pub metrics: Arc<ProxyMetrics>,
    pub upstream: Upstream,
    pub clock: Clock,
    pub server: auto::Builder<StreamExec>,
    /// Per-backend retry budgets; outside the snapshot, so reloads keep them.
    pub retry_budgets: RetryBudgets,
    /// Span export and trace context (`--otlp-endpoint`); `None`: tracing is off.
    pub tracer: Option<trace::Tracer>,
}

impl Shared {
    /// Counts a request (or stream) against `endpoint` of `backend` (for P2C and the
    /// in-flight gauge) until dropped.
    pub fn in_flight(
        &self,
        snapshot: &Arc<Snapshot>,
        backend: &Backend,
        endpoint: &Endpoint,
    ) -> upstream::InFlight {
        let gauge = self.metrics.in_flight_of(snapshot, &backend.id);
        upstream::InFlight::new(endpoint.stats.clone(), gauge)
    }

    /// [`Self::in_flight`] for an HTTP request, under the backend's maximum of requests in
    /// flight (the Service's `pier.dev/max-requests`, else `--max-requests-per-backend`):
    /// over it the request waits for a slot when the backend's queue has room (at most the
    /// connect timeout, as HAProxy's `timeout queue` defaults to its `timeout connect`), else
    /// [`ProxyError::BackendOverflow`] (503, counted) and nothing is sent. Both request paths
    /// and retries admit through here.
    pub async fn admit(
        &self,
        snapshot: &Arc<Snapshot>,
        backend: &Backend,
        endpoint: &Endpoint,
    ) -> Result<upstream::InFlight, ProxyError> {
        let Some(max) = backend
            .max_requests
            .or(self.config.limits.max_requests_per_backend)
        else {
            return Ok(self.in_flight(snapshot, backend, endpoint));
        };
        let queue = upstream::Queue {
            max_pending: backend
                .max_pending
                .unwrap_or(self.config.limits.max_pending_requests_per_backend),
            wait: self.config.connect_timeout,
        };
        let gauge = self.metrics.in_flight_of(snapshot, &backend.id);
        match upstream::InFlight::admit(&backend.load, max, queue, endpoint.stats.clone(), gauge)
            .await
        {
            Some(admitted) => Ok(admitted),
            None => {
                self.metrics.overflow(&backend.id);
                Err(ProxyError::BackendOverflow)
            }
        }
    }
}
