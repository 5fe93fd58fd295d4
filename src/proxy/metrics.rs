//! Proxy metrics, registered under `pier_proxy_` in an explicit registry.
//!
//! Labels are bounded: they come from snapshot identities (gateway, listener, route, backend),
//! ports, and small enums (status class, error kind and side, connect reason). Never paths,
//! Host values or error messages.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::error::{ConnectReason, ErrorKind, ErrorSide};
use crate::model::{BackendId, ListenerId, ObjectRef};

#[derive(Debug)]
pub struct ProxyMetrics {
    requests: Family<RequestLabels, Counter>,
    duration: Family<RouteLabels, Histogram, fn() -> Histogram>,
    errors: Family<ErrorLabels, Counter>,
    connect_errors: Family<ConnectErrorLabels, Counter>,
    connections: Family<PortLabels, Gauge>,
    in_flight: Family<BackendLabels, Gauge>,
}

/// Where a request went. Empty strings for what was not reached (a 404 has no route).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RouteLabels {
    pub gateway: String,
    pub listener: String,
    pub route: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RequestLabels {
    pub gateway: String,
    pub listener: String,
    pub route: String,
    pub backend: String,
    pub status: StatusClass,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ErrorLabels {
    pub kind: ErrorKind,
    pub side: ErrorSide,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ConnectErrorLabels {
    pub backend: String,
    pub reason: ConnectReason,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PortLabels {
    pub port: u16,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct BackendLabels {
    pub backend: String,
}

/// `1xx` .. `5xx`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StatusClass(u8);

/// Decrements the active-connections gauge when dropped.
#[derive(Debug)]
pub struct ConnectionGuard(Gauge);

// === impl ProxyMetrics ===

impl ProxyMetrics {
    pub fn register(reg: &mut Registry) -> Self {
        let m = Self::default();
        let reg = reg.sub_registry_with_prefix("pier_proxy");
        reg.register(
            "requests",
            "Requests answered, by gateway, listener, route, backend and status class",
            m.requests.clone(),
        );
        reg.register(
            "request_duration_seconds",
            "Time from the request's arrival to its response headers",
            m.duration.clone(),
        );
        reg.register(
            "errors",
            "Requests that ended in a proxy error, by kind and side",
            m.errors.clone(),
        );
        reg.register(
            "upstream_connect_errors",
            "Failed connections to backend endpoints, by backend and reason",
            m.connect_errors.clone(),
        );
        reg.register(
            "downstream_connections",
            "Open client connections, by port",
            m.connections.clone(),
        );
        reg.register(
            "upstream_in_flight",
            "Requests in flight to a backend (until the response body ends)",
            m.in_flight.clone(),
        );
        m
    }

    pub fn request(&self, labels: &RequestLabels) {
        self.requests.get_or_create(labels).inc();
    }

    pub fn duration(&self, labels: &RouteLabels, seconds: f64) {
        self.duration.get_or_create(labels).observe(seconds);
    }

    pub fn error(&self, kind: ErrorKind, side: ErrorSide) {
        self.errors.get_or_create(&ErrorLabels { kind, side }).inc();
    }

    pub fn connect_error(&self, backend: &BackendId, reason: ConnectReason) {
        self.connect_errors
            .get_or_create(&ConnectErrorLabels {
                backend: backend.to_string(),
                reason,
            })
            .inc();
    }

    pub fn connection(&self, port: u16) -> ConnectionGuard {
        let g = self.connections.get_or_create_owned(&PortLabels { port });
        g.inc();
        ConnectionGuard(g)
    }

    pub fn in_flight(&self, backend: &BackendId) -> Gauge {
        self.in_flight.get_or_create_owned(&BackendLabels {
            backend: backend.to_string(),
        })
    }
}

impl Default for ProxyMetrics {
    /// Unregistered metrics (for tests and embedding without a registry).
    fn default() -> Self {
        Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            errors: Family::default(),
            connect_errors: Family::default(),
            connections: Family::default(),
            in_flight: Family::default(),
        }
    }
}

/// 1 ms to ~33 s.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

// === impl RouteLabels ===

impl RouteLabels {
    pub fn new(listener: Option<&ListenerId>, route: Option<&ObjectRef>) -> Self {
        Self {
            gateway: listener.map(|l| l.gateway.to_string()).unwrap_or_default(),
            listener: listener.map(|l| l.name.clone()).unwrap_or_default(),
            route: route.map(ToString::to_string).unwrap_or_default(),
        }
    }

    pub fn with(self, backend: Option<&BackendId>, status: http::StatusCode) -> RequestLabels {
        RequestLabels {
            gateway: self.gateway,
            listener: self.listener,
            route: self.route,
            backend: backend.map(ToString::to_string).unwrap_or_default(),
            status: StatusClass::of(status),
        }
    }
}

// === impl StatusClass ===

impl StatusClass {
    pub fn of(status: http::StatusCode) -> Self {
        Self((status.as_u16() / 100) as u8)
    }
}

impl EncodeLabelValue for StatusClass {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        write!(encoder, "{}xx", self.0)
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn metrics_encode_with_bounded_labels() {
        let mut reg = Registry::default();
        let m = ProxyMetrics::register(&mut reg);
        let listener = ListenerId {
            gateway: ObjectRef::new("ns", "gw"),
            name: "http".into(),
        };
        let route = ObjectRef::new("ns", "r");
        let backend = BackendId {
            service: ObjectRef::new("ns", "svc"),
            port: 8080,
        };
        let labels = RouteLabels::new(Some(&listener), Some(&route));
        m.duration(&labels, 0.01);
        m.request(&labels.with(Some(&backend), http::StatusCode::NOT_FOUND));
        m.error(ErrorKind::NoRoute, ErrorSide::Downstream);
        m.connect_error(&backend, ConnectReason::Refused);
        let conn = m.connection(80);
        let mut out = String::new();
        encode(&mut out, &reg).unwrap();
        assert!(out.contains(
            r#"pier_proxy_requests_total{gateway="ns/gw",listener="http",route="ns/r",backend="ns/svc:8080",status="4xx"} 1"#
        ), "{out}");
        assert!(out.contains(r#"pier_proxy_errors_total{kind="NoRoute",side="Downstream"} 1"#));
        assert!(out.contains(
            r#"pier_proxy_upstream_connect_errors_total{backend="ns/svc:8080",reason="Refused"} 1"#
        ));
        assert!(out.contains(r#"pier_proxy_downstream_connections{port="80"} 1"#));
        drop(conn);
        let mut out = String::new();
        encode(&mut out, &reg).unwrap();
        assert!(out.contains(r#"pier_proxy_downstream_connections{port="80"} 0"#));
    }
}
