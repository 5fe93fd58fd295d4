//! The data plane's view of the world: one immutable [`Snapshot`] and the pure functions that
//! pick a listener, a route rule and a backend for a request.
//!
//! ```text
//! translate() ──> Snapshot ──> ArcSwap ──> proxy (load once per request, read only)
//! ```
//!
//! Everything here is parsed at translation time (header names, regexes, methods, durations),
//! so a request never parses configuration. No I/O: this module imports no kube, tokio, hyper
//! or `std::fs`.

pub mod backend;
pub mod carried;
pub mod ext_auth;
pub mod filter;
pub mod health;
pub mod host;
pub mod matcher;
pub mod net;
pub mod oidc;
pub mod policy;
pub mod retry;
pub mod route;
pub mod session;
pub mod snapshot;
pub mod tls;
pub mod traffic;

use std::fmt;

use serde::Serialize;

pub use backend::{
    AppProtocol, Backend, BackendId, BackendLoad, BackendTls, CONSECUTIVE_FAILURES, ConnectionSlot,
    EJECTION, Endpoint, EndpointIdentities, EndpointPool, EndpointStats, MAX_EJECTION, Outlier,
    OutlierOverride, RetrySlot, Timeouts, TlsMode, TlsUnavailable, UnresolvedIdentity, UpstreamTls,
};
pub use carried::Carried;
pub use filter::{Cors, Filters, HeaderModifier, Mirror, PathModifier, Redirect, UrlRewrite};
pub use host::{HostRank, HostnameMatch};
pub use matcher::{
    GrpcRank, HeaderMatch, MatchRank, PathMatch, QueryMatch, RequestMatch, ValueMatch,
};
pub use policy::AccessPolicy;
pub use retry::RetryPolicy;
pub use route::{BackendSet, BackendTarget, Entry, RouteTable, Rule, WeightedBackend};
pub use session::{Carrier, Session, SessionPolicy};
pub use snapshot::{Listener, ListenerId, Port, PortKey, Protocol, Quic, Snapshot};
pub use tls::{
    CertTable, ClientAuth, ClientAuthMode, ClientPolicy, EscapedSlashes, PortClient, TlsProfile,
    Underscores,
};

/// A namespaced object's identity, as used in metric labels and logs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ObjectRef {
    pub namespace: String,
    pub name: String,
}

impl ObjectRef {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}
