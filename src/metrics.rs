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
}

impl ControlMetrics {
    pub fn register(reg: &mut Registry) -> Self {
        let m = Self::default();
        let reg = reg.sub_registry_with_prefix("config");
        reg.register(
            "generation",
            "Generation of the active configuration snapshot",
            m.generation.clone(),
        );
        reg.register(
            "reloads",
            "Configuration reloads by result; errors keep the last good configuration",
            m.reloads.clone(),
        );
        reg.register(
            "routes",
            "Route entries (hostname x match) in the active snapshot",
            m.routes.clone(),
        );
        reg.register(
            "listeners",
            "Listeners in the active snapshot",
            m.listeners.clone(),
        );
        m
    }

    pub fn reload(&self, result: ReloadResult) {
        self.reloads.get_or_create(&ReloadLabels { result }).inc();
    }
}

/// A registry with pier's prefix.
pub fn registry() -> Registry {
    Registry::with_prefix("pier")
}
