//! TEMPORARY stub on main; replaced by the proxy branch.
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::model::Snapshot;

#[derive(Clone, Debug)]
pub struct ProxyConfig {
    pub listen_host: std::net::IpAddr,
    pub connect_timeout: Duration,
    pub access_log: bool,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            listen_host: [0, 0, 0, 0].into(),
            connect_timeout: Duration::from_secs(2),
            access_log: false,
        }
    }
}

pub struct ProxyMetrics;
impl ProxyMetrics {
    pub fn register(_reg: &mut prometheus_client::registry::Registry) -> Self {
        Self
    }
}

pub struct Proxy;
impl Proxy {
    pub fn new(_s: Arc<ArcSwap<Snapshot>>, _c: ProxyConfig, _m: Arc<ProxyMetrics>) -> Self {
        Self
    }
    pub async fn reconcile(&self) -> Vec<(u16, std::io::Error)> {
        vec![]
    }
    pub fn bound_ports(&self) -> Vec<u16> {
        vec![]
    }
    pub async fn shutdown(&self, _grace: Duration) {}
}
