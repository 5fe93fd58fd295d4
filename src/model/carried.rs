//! What a translation takes over from the snapshot it replaces ([`Carried`]): state that
//! outlives one configuration (endpoint load, upstream TLS session caches, rate-limit buckets,
//! the traffic policies in force). Filled by `Snapshot::carried`.

use std::sync::Arc;

use super::backend::EndpointPool;

/// What a translation takes over from the snapshot it replaces.
#[derive(Clone, Debug, Default)]
pub struct Carried {
    pub endpoints: EndpointPool,
    /// Upstream TLS configs by trust key. A config whose key is unchanged is reused rather than
    /// rebuilt, so its TLS session cache survives the reload and new connections after it
    /// resume instead of doing a full handshake. Equal keys mean equal CAs, client certificate,
    /// identity check and ALPN ([`super::backend::UpstreamTls::trust_key`]), so resuming under the reused config
    /// trusts nothing the new configuration would not.
    pub tls_configs: std::collections::HashMap<u64, Arc<rustls::ClientConfig>>,
    /// Rate-limit bucket tables by their limit rule's key (`model::traffic`): a policy whose
    /// limit and selectors are unchanged keeps counting where it was.
    pub limits: std::collections::HashMap<String, Arc<crate::ratelimit::Buckets>>,
    /// Each BackendTrafficPolicy in force, by `namespace/name`: what stays in force when a new
    /// version of it is invalid.
    pub traffic: std::collections::HashMap<String, Arc<super::traffic::TrafficPolicy>>,
    /// Each ClientTrafficPolicy in force, by `namespace/name`, likewise.
    pub client: std::collections::HashMap<String, Arc<super::tls::ClientPolicy>>,
}
