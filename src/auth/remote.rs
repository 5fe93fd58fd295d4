//! Key sets from a `remoteJWKS.uri` (and OpenID discovery documents), as translation and the data plane see them: the last good
//! set a fetcher (`source::jwks`) got, why the last fetch failed if it did, and a handle that
//! asks the fetcher to fetch again (a token named a `kid` the set lacks). No I/O here: the
//! fetcher decides whether a request to refetch is honoured (at most one per
//! [`KID_REFETCH_EVERY`]), so a flood of forged `kid`s costs a channel send each, not a fetch.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::jwks::Jwks;
use super::oidc::Discovery;

/// How often, at most, a token with an unknown `kid` makes the fetcher fetch its set again
/// (besides the fetch every `cacheDuration`).
pub const KID_REFETCH_EVERY: Duration = Duration::from_secs(30);

/// Envoy Gateway's default `cacheDuration` (`+kubebuilder:default="300s"`).
pub const DEFAULT_CACHE_DURATION: Duration = Duration::from_secs(300);

/// What the fetcher knows of each URI, by URI: the translation input.
pub type RemoteSets = BTreeMap<String, RemoteJwks>;

/// The URIs translation wants fetched, each with how long its document is used before the
/// next fetch (the shortest `cacheDuration` of the providers that name it) and what it is.
pub type Wanted = BTreeMap<String, Want>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Want {
    pub every: Duration,
    pub kind: DocKind,
}

/// What a fetched document must be to be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DocKind {
    /// A JSON Web Key Set.
    Jwks,
    /// An OpenID Provider's discovery document (`spec.oidc`).
    Discovery,
}

/// One URI's state.
#[derive(Clone, Debug)]
pub struct RemoteJwks {
    /// The set of the last fetch that succeeded; `None` until one does.
    pub keys: Option<Arc<Jwks>>,
    /// For a discovery document: the last good one.
    pub discovery: Option<Arc<Discovery>>,
    /// Why the latest fetch failed (`None`: it succeeded). Names the URI's problem, never a
    /// key.
    pub error: Option<String>,
    /// Asks the fetcher for an early fetch.
    pub refetch: Refetch,
}

/// Where a provider's keys come from when they are fetched (in the snapshot).
#[derive(Clone, Debug, serde::Serialize)]
pub struct RemoteKeys {
    pub uri: String,
    #[serde(skip)]
    pub refetch: Refetch,
}

/// Asks a fetcher to fetch one URI again; calling it never blocks nor waits for the fetch.
#[derive(Clone)]
pub struct Refetch(Arc<dyn Fn() + Send + Sync>);

// === impl Refetch ===

impl Refetch {
    pub fn new(ask: impl Fn() + Send + Sync + 'static) -> Self {
        Self(Arc::new(ask))
    }

    /// A handle that asks nobody (tests, and sets that no fetcher follows).
    pub fn none() -> Self {
        Self::new(|| {})
    }

    pub fn request(&self) {
        (self.0)()
    }
}

impl fmt::Debug for Refetch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Refetch")
    }
}
