//! The `remoteJWKS` fetcher (and OIDC discovery documents'): follows the URIs translation wants (`translate::remote_jwks_wanted`,
//! sent by the publisher after each publish) and hands what it fetched to the run loop as a
//! [`RemoteSets`] value, which the publisher puts into `Settings.remote_jwks` and re-translates,
//! the way a changed Secret is. The data plane never mutates a key set: it reads the snapshot's,
//! and at most *asks* for an early fetch ([`Refetch`]) when a token names an unknown `kid`.
//!
//! ```text
//! Publisher ─(watch: Wanted = uri -> cacheDuration)─> manage() ─ one follow() task per URI
//!   follow: fetch ─> parse ─> watch::Sender<RemoteSets> ─> run loop ─> Publisher ─> snapshot
//!           wait cacheDuration (30 s at most while failing), or a Refetch request honoured
//!           at most once per KID_REFETCH_EVERY
//! ```
//!
//! Failure handling:
//! - A fetch that fails (unreachable, timeout, non-2xx, not a key set) keeps the last good set;
//!   the error goes into the set's state (the SecurityPolicy's `pier.dev/RemoteJWKS`
//!   condition), `pier_jwks_fetches_total{uri,trigger,result}` counts it, and the log says it
//!   at WARN when a URI starts failing and at INFO when it recovers (once each, not per retry).
//! - A set never fetched leaves its providers without keys: their tokens are refused (401).
//! - Only a changed document (SHA-256 of the body) or a changed error makes a republish.
//!
//! HTTPS uses the host's trust store (rustls-native-certs: the system bundle, or
//! `SSL_CERT_FILE`/`SSL_CERT_DIR`), as the OTLP exporter does; `http://` is only followed for
//! loopback addresses (translation refuses other plaintext URIs). Redirects are not followed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, watch};
use tokio::task::{AbortHandle, JoinHandle, JoinSet};

use crate::auth::jwks::{Jwks, JwksError, MAX_JWKS_LEN};
use crate::auth::oidc::{Discovery, DiscoveryError};
use crate::auth::remote::{
    DocKind, KID_REFETCH_EVERY, Refetch, RemoteJwks, RemoteSets, Want, Wanted,
};
use crate::translate::error_chain;

/// Bound on one fetch: connect, TLS, answer and body.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// While a URI fails, it is tried again this often (or every `cacheDuration` when shorter).
const FAILING_RETRY: Duration = Duration::from_secs(30);

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// `pier_jwks_*`.
#[derive(Clone, Debug, Default)]
pub struct JwksMetrics {
    /// `pier_jwks_fetches_total{uri,trigger,result}`.
    pub fetches: Family<FetchLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FetchLabels {
    /// From the configuration (bounded by it), never from a request.
    pub uri: String,
    pub trigger: Trigger,
    pub result: FetchResult,
}

/// Why a fetch was made.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Trigger {
    /// The first fetch, or `cacheDuration` (or the retry delay) passed.
    Schedule,
    /// A token named a `kid` the set lacks.
    UnknownKid,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum FetchResult {
    Ok,
    Unreachable,
    Timeout,
    /// A non-2xx answer.
    Status,
    /// Too large, or not a usable key set.
    Invalid,
}

/// The running fetcher. Dropping it stops every fetch.
pub struct JwksSource {
    updates: watch::Receiver<Arc<RemoteSets>>,
    task: JoinHandle<()>,
}

#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error("cannot reach it: {0}")]
    Unreachable(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("it answered HTTP {0}")]
    Status(http::StatusCode),
    #[error("reading its answer failed: {0}")]
    Body(String),
    #[error(transparent)]
    Invalid(#[from] JwksError),
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
}

/// A document as parsed.
enum Doc {
    Jwks(Jwks),
    Discovery(Discovery),
}

// === impl JwksMetrics ===

impl JwksMetrics {
    pub fn register(reg: &mut Registry) -> Self {
        let m = Self::default();
        let reg = reg.sub_registry_with_prefix("jwks");
        reg.register(
            "fetches",
            "remoteJWKS fetches, by URI, what triggered them and how they ended",
            m.fetches.clone(),
        );
        m
    }
}

// === impl JwksSource ===

impl JwksSource {
    /// Starts following the URIs `wanted` names (on the current runtime).
    pub fn start(wanted: watch::Receiver<Wanted>, metrics: JwksMetrics) -> Self {
        let (tx, updates) = watch::channel(Arc::new(RemoteSets::new()));
        let task = tokio::spawn(manage(wanted, tx, client(), metrics));
        Self { updates, task }
    }

    /// The sets after their next change (waits forever once the fetcher has stopped).
    pub async fn changed(&mut self) -> Arc<RemoteSets> {
        if self.updates.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
        self.updates.borrow_and_update().clone()
    }

    /// Waits until each URI of `wanted` has had its first fetch (good or bad), at most
    /// `grace`, and returns the sets: a start publishes with the keys rather than refusing
    /// every token until the first fetch lands.
    pub async fn settled(&mut self, wanted: &Wanted, grace: Duration) -> Arc<RemoteSets> {
        let done = |sets: &Arc<RemoteSets>| {
            wanted.keys().all(|uri| {
                sets.get(uri)
                    .is_some_and(|s| s.keys.is_some() || s.discovery.is_some() || s.error.is_some())
            })
        };
        let _ = tokio::time::timeout(grace, self.updates.wait_for(done)).await;
        self.updates.borrow_and_update().clone()
    }
}

impl Drop for JwksSource {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An HTTPS (and loopback HTTP) client trusting the host's store.
fn client() -> HttpsClient {
    let tls = crate::tls::client::host_trust("remoteJWKS");
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .build();
    // No idle connections: a fetch every few minutes gains nothing from one, and each fetch
    // then sees the server as it is now.
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build(connector)
}

/// Starts and stops one [`follow`] task per wanted URI (restarted when its `cacheDuration`
/// changes; its last good keys stay).
async fn manage(
    mut wanted: watch::Receiver<Wanted>,
    tx: watch::Sender<Arc<RemoteSets>>,
    client: HttpsClient,
    metrics: JwksMetrics,
) {
    let mut tasks = JoinSet::new();
    let mut running: BTreeMap<String, (Want, AbortHandle)> = BTreeMap::new();
    loop {
        let want = wanted.borrow_and_update().clone();
        running.retain(|uri, (w, task)| {
            let keep = want.get(uri) == Some(w);
            if !keep {
                task.abort();
            }
            keep
        });
        tx.send_if_modified(|sets| {
            let before = sets.len();
            Arc::make_mut(sets).retain(|uri, _| want.contains_key(uri));
            sets.len() != before
        });
        for (uri, w) in &want {
            if running.contains_key(uri) {
                continue;
            }
            let (nudge, nudges) = mpsc::channel(1);
            let refetch = Refetch::new(move || {
                // Full: a request is pending already.
                let _ = nudge.try_send(());
            });
            let task = tasks.spawn(follow(
                Follow {
                    uri: uri.clone(),
                    every: w.every,
                    kind: w.kind,
                    client: client.clone(),
                    metrics: metrics.clone(),
                    refetch,
                },
                tx.clone(),
                nudges,
            ));
            running.insert(uri.clone(), (*w, task));
        }
        tokio::select! {
            r = wanted.changed() => if r.is_err() { break },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
}

struct Follow {
    uri: String,
    every: Duration,
    kind: DocKind,
    client: HttpsClient,
    metrics: JwksMetrics,
    refetch: Refetch,
}

/// Fetches one URI every `cacheDuration`, and early when asked (at most once per
/// [`KID_REFETCH_EVERY`]), publishing each change of its state.
async fn follow(f: Follow, tx: watch::Sender<Arc<RemoteSets>>, mut nudges: mpsc::Receiver<()>) {
    let uri = f.uri.as_str();
    let mut trigger = Trigger::Schedule;
    let mut last_kid_fetch: Option<Instant> = None;
    let mut failing = false;
    let mut last_digest: Option<Vec<u8>> = None;
    loop {
        let outcome = match fetch(&f.client, uri).await {
            Ok(body) => match f.kind {
                DocKind::Jwks => Jwks::parse(&body)
                    .map(|keys| (body, Doc::Jwks(keys)))
                    .map_err(FetchError::from),
                DocKind::Discovery => Discovery::parse(&body)
                    .map(|d| (body, Doc::Discovery(d)))
                    .map_err(FetchError::from),
            },
            Err(e) => Err(e),
        };
        let result = match &outcome {
            Ok(_) => FetchResult::Ok,
            Err(FetchError::Unreachable(_) | FetchError::Body(_)) => FetchResult::Unreachable,
            Err(FetchError::Timeout(_)) => FetchResult::Timeout,
            Err(FetchError::Status(_)) => FetchResult::Status,
            Err(FetchError::Invalid(_) | FetchError::Discovery(_)) => FetchResult::Invalid,
        };
        f.metrics
            .fetches
            .get_or_create(&FetchLabels {
                uri: f.uri.clone(),
                trigger,
                result,
            })
            .inc();
        match outcome {
            Ok((body, doc)) => {
                if failing {
                    tracing::info!(uri, "remoteJWKS fetch recovered");
                    failing = false;
                }
                let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &body);
                let new = last_digest.as_deref() != Some(digest.as_ref());
                if new {
                    last_digest = Some(digest.as_ref().to_vec());
                    if let Doc::Jwks(keys) = &doc {
                        for s in keys.skipped() {
                            tracing::debug!(uri, index = s.index, kid = ?s.kid, reason = s.reason, "remoteJWKS: a key was skipped");
                        }
                        tracing::debug!(uri, keys = keys.len(), "remoteJWKS: a new key set");
                    }
                }
                let doc = new.then_some(doc);
                update(&tx, &f, |s| {
                    let recovered = s.error.take().is_some();
                    match doc {
                        Some(Doc::Jwks(k)) => s.keys = Some(Arc::new(k)),
                        Some(Doc::Discovery(d)) => s.discovery = Some(Arc::new(d)),
                        None => return recovered,
                    }
                    true
                });
            }
            Err(e) => {
                let why = error_chain(&e);
                let kept = tx
                    .borrow()
                    .get(uri)
                    .is_some_and(|s| s.keys.is_some() || s.discovery.is_some());
                if !failing {
                    let then = if kept {
                        "the keys of the last good fetch stay in use"
                    } else {
                        "no keys yet: tokens of its providers are refused"
                    };
                    tracing::warn!(uri, error = %why, "remoteJWKS fetch failed; {then}");
                    failing = true;
                } else {
                    tracing::debug!(uri, error = %why, "remoteJWKS fetch failed again");
                }
                update(&tx, &f, |s| {
                    let changed = s.error.as_deref() != Some(why.as_str());
                    s.error = Some(why);
                    changed
                });
            }
        }
        let wait = if failing {
            f.every.min(FAILING_RETRY)
        } else {
            f.every
        };
        let sleep = tokio::time::sleep(wait);
        let mut sleep = std::pin::pin!(sleep);
        trigger = loop {
            tokio::select! {
                () = &mut sleep => break Trigger::Schedule,
                Some(()) = nudges.recv() => {
                    if last_kid_fetch.is_none_or(|t| t.elapsed() >= KID_REFETCH_EVERY) {
                        last_kid_fetch = Some(Instant::now());
                        break Trigger::UnknownKid;
                    }
                }
            }
        };
    }
}

/// Applies `change` to the URI's state (created on first use), publishing when it says it
/// changed something (or the URI's refetch handle is new).
fn update(
    tx: &watch::Sender<Arc<RemoteSets>>,
    f: &Follow,
    change: impl FnOnce(&mut RemoteJwks) -> bool,
) {
    tx.send_if_modified(|sets| {
        let sets = Arc::make_mut(sets);
        let mut fresh = false;
        let state = sets.entry(f.uri.clone()).or_insert_with(|| {
            fresh = true;
            RemoteJwks {
                keys: None,
                discovery: None,
                error: None,
                refetch: f.refetch.clone(),
            }
        });
        // A task restarted (new cacheDuration) brings a new handle.
        state.refetch = f.refetch.clone();
        change(state) || fresh
    });
}

async fn fetch(client: &HttpsClient, uri: &str) -> Result<Bytes, FetchError> {
    let request = http::Request::get(uri)
        .header(http::header::ACCEPT, "application/json")
        .body(Empty::new())
        .map_err(|e| FetchError::Unreachable(e.to_string()))?;
    let work = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| FetchError::Unreachable(error_chain(&e)))?;
        if !response.status().is_success() {
            return Err(FetchError::Status(response.status()));
        }
        let body = Limited::new(response.into_body(), MAX_JWKS_LEN)
            .collect()
            .await
            .map_err(|e| FetchError::Body(e.to_string()))?;
        Ok(body.to_bytes())
    };
    tokio::time::timeout(FETCH_TIMEOUT, work)
        .await
        .map_err(|_| FetchError::Timeout(FETCH_TIMEOUT))?
}
