//! BackendTrafficPolicy `healthCheck.active` as the data plane runs it (`proxy::health`): what
//! to ask an endpoint, how often, and how many answers in a row change its state.
//!
//! ```text
//! translation: healthCheck.active ─> ActiveCheck on every Rule the policy reaches
//! proxy::health: per endpoint address one task: check every interval (jittered) ─> after
//!                unhealthyThreshold failures the endpoint is marked down (EndpointStats),
//!                after healthyThreshold passes it is back
//! requests:      a down endpoint is not available (as an ejected one), so no new request
//!                goes to it while another endpoint of the backend is
//! ```

use std::time::Duration;

use serde::Serialize;

/// One policy's active check.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActiveCheck {
    pub probe: Probe,
    #[serde(serialize_with = "super::backend::ms")]
    pub interval: Duration,
    #[serde(serialize_with = "super::backend::ms")]
    pub timeout: Duration,
    pub unhealthy_threshold: u32,
    pub healthy_threshold: u32,
    /// `namespace/name` of the policy, for metrics and logs.
    pub source: String,
}

/// What a check asks.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Probe {
    /// A request to `path`; healthy when the status is one of `expected`.
    Http {
        path: String,
        /// `Host`; the endpoint's address when `None`.
        #[serde(skip_serializing_if = "Option::is_none")]
        host: Option<String>,
        head: bool,
        expected: Box<[u16]>,
        /// Bytes the body must contain (`expectedResponse`).
        #[serde(skip_serializing_if = "Option::is_none")]
        body: Option<Box<[u8]>>,
    },
    /// A connection (and its TLS handshake when the backend has TLS).
    Tcp,
    /// `grpc.health.v1.Health/Check` for `service`; healthy when `SERVING`.
    Grpc { service: String },
}

impl ActiveCheck {
    /// The defaults of Envoy Gateway's API.
    pub const TIMEOUT: Duration = Duration::from_secs(1);
    pub const INTERVAL: Duration = Duration::from_secs(3);
    pub const UNHEALTHY_THRESHOLD: u32 = 3;
    pub const HEALTHY_THRESHOLD: u32 = 1;
}
