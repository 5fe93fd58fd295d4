//! The one metrics registry, built explicitly at startup (no globals) and rendered by the
//! admin server. Each subsystem registers its own families under a prefix.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Control-plane metrics: configuration generations and reloads.
#[derive(Clone, Debug, Default)]
pub struct ControlMetrics {
    pub generation: Gauge,
    pub reloads: Family<ReloadLabels, Counter>,
    pub routes: Gauge,
    pub listeners: Gauge,
    pub trust_bundle_certs: Family<GatewayLabels, Gauge>,
    pub client_cert_expiry: Family<GatewayLabels, Gauge>,
    pub client_cert_seconds_left: Family<GatewayLabels, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GatewayLabels {
    pub gateway: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    pub result: ReloadResult,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum ReloadResult {
    Ok,
    ReadError,
    ParseError,
    /// Over `--max-manifest-bytes`, `--max-manifest-file-bytes` or `--max-manifest-objects`.
    LimitExceeded,
}

impl ControlMetrics {
    pub fn register(reg: &mut Registry) -> Self {
        let m = Self::default();
        let config = reg.sub_registry_with_prefix("config");
        config.register(
            "generation",
            "Generation of the active configuration snapshot",
            m.generation.clone(),
        );
        config.register(
            "reloads",
            "Configuration reloads by result; errors keep the last good configuration",
            m.reloads.clone(),
        );
        config.register(
            "routes",
            "Route entries (hostname x match) in the active snapshot",
            m.routes.clone(),
        );
        config.register(
            "listeners",
            "Listeners in the active snapshot",
            m.listeners.clone(),
        );
        // Every result starts at 0, so the first failed reload is an increase that
        // `increase()` sees (a series that first appears at 1 has none).
        for result in [
            ReloadResult::Ok,
            ReloadResult::ReadError,
            ReloadResult::ParseError,
            ReloadResult::LimitExceeded,
        ] {
            let _ = m.reloads.get_or_create(&ReloadLabels { result });
        }
        let mesh = reg.sub_registry_with_prefix("mesh");
        mesh.register(
            "trust_bundle_certificates",
            "Certificates in a Gateway's mesh trust bundle",
            m.trust_bundle_certs.clone(),
        );
        mesh.register(
            "client_certificate_expiry_timestamp_seconds",
            "notAfter of the client certificate pier presents to meshed backends",
            m.client_cert_expiry.clone(),
        );
        mesh.register(
            "client_certificate_seconds_to_expiry",
            "Seconds until the client certificate expires (negative: expired)",
            m.client_cert_seconds_left.clone(),
        );
        m
    }

    /// Publishes the backend TLS figures of a translation; `now` is Unix seconds.
    pub fn set_tls(&self, tls: &[crate::translate::GatewayTlsSummary], now: i64) {
        self.trust_bundle_certs.clear();
        self.client_cert_expiry.clear();
        self.client_cert_seconds_left.clear();
        for t in tls {
            let labels = GatewayLabels {
                gateway: t.gateway.to_string(),
            };
            if let Some(n) = t.trust_bundle_certs {
                self.trust_bundle_certs.get_or_create(&labels).set(n as i64);
            }
            if let Some(not_after) = t.client_cert_not_after {
                self.client_cert_expiry
                    .get_or_create(&labels)
                    .set(not_after);
                self.client_cert_seconds_left
                    .get_or_create(&labels)
                    .set(not_after - now);
            }
        }
    }

    pub fn reload(&self, result: ReloadResult) {
        self.reloads.get_or_create(&ReloadLabels { result }).inc();
    }
}

/// Pod network reachability while serving (`--probe-interval`): the same probes as
/// `pier check --kubeconfig`, on a sample of each Gateway's endpoint addresses.
#[derive(Clone, Debug, Default)]
pub struct ReachabilityMetrics {
    pub probed: Family<GatewayLabels, Gauge>,
    pub unreachable: Family<GatewayLabels, Gauge>,
    pub tls_failed: Family<GatewayLabels, Gauge>,
}

impl ReachabilityMetrics {
    pub fn register(reg: &mut Registry) -> Self {
        let m = Self::default();
        let reg = reg.sub_registry_with_prefix("pod_network");
        reg.register(
            "probed_endpoints",
            "Endpoint addresses of a Gateway probed in the last round (a sample)",
            m.probed.clone(),
        );
        reg.register(
            "unreachable_endpoints",
            "Probed endpoint addresses this host could not connect to (TCP)",
            m.unreachable.clone(),
        );
        reg.register(
            "tls_failed_endpoints",
            "Probed endpoint addresses that answered but failed the TLS (mesh mTLS) handshake",
            m.tls_failed.clone(),
        );
        m
    }
}

/// A registry with pier's prefix.
pub fn registry() -> Registry {
    Registry::with_prefix("pier")
}
