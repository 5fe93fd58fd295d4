//! pier's identity from the SPIFFE Workload API (`--spiffe-socket`, or `SPIFFE_ENDPOINT_SOCKET`):
//! a task that streams X.509-SVIDs and bundles from the agent (SPIRE's, or any Workload API)
//! and hands each update to the run loop as a [`WorkloadApi`] value, which the publisher puts
//! into `Settings.workload_api` and re-translates, the way a rotated `--client-cert` file is.
//!
//! ```text
//! agent socket ─(gRPC FetchX509SVID stream, header workload.spiffe.io: true)─> run()
//!   each message ─> X509Context { default SVID chain + key, bundles per trust domain }
//!        └─> watch::Sender<WorkloadApi> ─> run loop ─> Publisher::set_workload_api ─> snapshot
//! ```
//!
//! Failure handling:
//! - **Unreachable at start** (no socket, agent down, no registration entry for pier yet): pier
//!   starts anyway and retries with backoff (0.5 s doubling to 5 s). Until the first SVID,
//!   Gateways that would present it fail closed (meshed routes answer 503) and their
//!   `pier.dev/BackendTLS` condition names the endpoint and the last error. `run::start` waits
//!   up to [`START_GRACE`] for a first SVID before publishing, so a normal start never shows
//!   that state.
//! - **Stream lost later**: the last SVID and bundles stay in use (they are valid until they
//!   expire; SPIRE rotates at half the TTL, so an agent restart has half a TTL to come back),
//!   and the task reconnects with the same backoff.
//! - **An unusable update** (no SVID, a key that does not match): logged and ignored; the last
//!   good one stays.
//!
//! Key material never reaches a log line or a `Debug` output: updates are logged by SPIFFE ID,
//! serial number and expiry.

use std::time::Duration;

use futures::StreamExt;
use rustls_pki_types::CertificateDer;
use spiffe::WorkloadApiClient;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::translate::error_chain;
use crate::translate::spiffe::{WorkloadApi, WorkloadApiState, X509Context};

/// How long `run::start` waits for a first SVID before publishing without one.
pub const START_GRACE: Duration = Duration::from_secs(5);
/// First retry delay; doubled after each failure up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Bound on connecting and opening the stream (a socket whose server never answers).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A running Workload API client. Dropping it stops the task.
pub struct WorkloadApiSource {
    /// The latest state; starts as `Waiting`.
    pub updates: watch::Receiver<WorkloadApi>,
    task: JoinHandle<()>,
}

#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error(
        "{0:?} is not a Workload API address (unix:///path, unix:/path, tcp://IP:PORT or a path)"
    )]
    Invalid(String, #[source] spiffe::transport::EndpointError),
    #[error("cannot make {0:?} an absolute path")]
    Path(String, #[source] std::io::Error),
}

/// Why a stream ended.
#[derive(Debug, thiserror::Error)]
enum StreamError {
    #[error(transparent)]
    Api(#[from] spiffe::WorkloadApiError),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// Why an X.509 context from the Workload API cannot be used.
#[derive(Debug, thiserror::Error)]
enum ContextError {
    #[error("the Workload API sent no X.509-SVID")]
    NoSvid,
    #[error("the X.509-SVID {0} is unusable")]
    Identity(String, #[source] crate::tls::client::IdentityError),
}

// === impl WorkloadApiSource ===

impl WorkloadApiSource {
    /// Starts streaming from `endpoint` (from [`parse_endpoint`]). Must run in a tokio runtime.
    pub fn start(endpoint: String) -> Self {
        let (tx, updates) = watch::channel(WorkloadApi {
            endpoint: endpoint.clone(),
            state: WorkloadApiState::Waiting("connecting".into()),
        });
        let task = tokio::spawn(run(endpoint, tx));
        Self { updates, task }
    }

    /// Waits up to `bound` for the first SVID; the state at the end either way.
    pub async fn first(&mut self, bound: Duration) -> WorkloadApi {
        let ready = |w: &WorkloadApi| matches!(w.state, WorkloadApiState::Ready(_));
        let _ = tokio::time::timeout(bound, self.updates.wait_for(ready)).await;
        self.updates.borrow_and_update().clone()
    }

    /// The next state. Never returns if the task is gone (it only ends when aborted).
    pub async fn changed(&mut self) -> WorkloadApi {
        if self.updates.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
        self.updates.borrow_and_update().clone()
    }
}

impl Drop for WorkloadApiSource {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `--spiffe-socket` / `SPIFFE_ENDPOINT_SOCKET` as the Workload API client takes it: a
/// `unix:` or `tcp:` URI as given, a plain path as `unix://<absolute path>`.
pub fn parse_endpoint(arg: &str) -> Result<String, EndpointError> {
    let uri = if arg.starts_with("unix:") || arg.starts_with("tcp:") {
        arg.to_string()
    } else {
        let abs = std::path::absolute(arg).map_err(|e| EndpointError::Path(arg.into(), e))?;
        format!("unix://{}", abs.display())
    };
    spiffe::transport::Endpoint::parse(&uri).map_err(|e| EndpointError::Invalid(arg.into(), e))?;
    Ok(uri)
}

async fn run(endpoint: String, tx: watch::Sender<WorkloadApi>) {
    let mut backoff = MIN_BACKOFF;
    loop {
        let why = match stream(&endpoint, &tx, &mut backoff).await {
            Ok(()) => "the Workload API closed the stream".to_string(),
            Err(e) => error_chain(&e),
        };
        tx.send_if_modified(|w| match &mut w.state {
            // Keep serving the last SVID; only a pier still waiting reports the new reason.
            WorkloadApiState::Ready(_) => false,
            WorkloadApiState::Waiting(old) if *old == why => false,
            WorkloadApiState::Waiting(old) => {
                *old = why.clone();
                true
            }
        });
        if matches!(tx.borrow().state, WorkloadApiState::Ready(_)) {
            tracing::warn!(endpoint = %endpoint, error = %why, retry_in = ?backoff, "SPIFFE Workload API stream lost; keeping the last X.509-SVID");
        } else {
            tracing::warn!(endpoint = %endpoint, error = %why, retry_in = ?backoff, "no X.509-SVID from the SPIFFE Workload API yet; meshed routes answer 503");
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One connection: publishes every usable update until the stream ends or fails.
async fn stream(
    endpoint: &str,
    tx: &watch::Sender<WorkloadApi>,
    backoff: &mut Duration,
) -> Result<(), StreamError> {
    let open = async {
        let client = WorkloadApiClient::connect_to(endpoint).await?;
        client.stream_x509_contexts().await
    };
    let mut updates = tokio::time::timeout(CONNECT_TIMEOUT, open)
        .await
        .map_err(|_| StreamError::Timeout(CONNECT_TIMEOUT))??;
    while let Some(update) = updates.next().await {
        let ctx = match convert(&update?) {
            Ok(ctx) => ctx,
            Err(e) => {
                tracing::error!(endpoint = %endpoint, error = %error_chain(&e), "ignoring an unusable X.509 update from the SPIFFE Workload API");
                continue;
            }
        };
        *backoff = MIN_BACKOFF;
        let (serial, not_after) = leaf_facts(&ctx.chain[0]);
        tracing::info!(
            endpoint = %endpoint,
            spiffe_id = %ctx.spiffe_id,
            serial = %serial,
            not_after = %not_after,
            trust_domains = ?ctx.bundles.keys().collect::<Vec<_>>(),
            "X.509-SVID and bundles from the SPIFFE Workload API"
        );
        tx.send_if_modified(|w| match &w.state {
            WorkloadApiState::Ready(old) if **old == ctx => false,
            _ => {
                w.state = WorkloadApiState::Ready(std::sync::Arc::new(ctx));
                true
            }
        });
    }
    Ok(())
}

/// The default SVID (the first, as the Workload API spec says) and every bundle, checked to
/// make a usable client identity.
fn convert(ctx: &spiffe::X509Context) -> Result<X509Context, ContextError> {
    let svid = ctx.default_svid().ok_or(ContextError::NoSvid)?;
    let spiffe_id = svid.spiffe_id().to_string();
    let out = X509Context {
        chain: svid
            .cert_chain()
            .iter()
            .map(|c| CertificateDer::from(c.as_bytes().to_vec()))
            .collect(),
        key: svid.private_key().as_bytes().to_vec(),
        bundles: ctx
            .bundle_set()
            .iter()
            .map(|(td, b)| {
                let certs = b
                    .authorities()
                    .iter()
                    .map(|c| CertificateDer::from(c.as_bytes().to_vec()))
                    .collect();
                (td.to_string(), certs)
            })
            .collect(),
        spiffe_id,
    };
    out.identity()
        .map_err(|e| ContextError::Identity(out.spiffe_id.clone(), e))?;
    Ok(out)
}

/// The leaf's serial number (hex) and notAfter, for the log.
fn leaf_facts(leaf: &CertificateDer<'_>) -> (String, String) {
    match x509_parser::parse_x509_certificate(leaf) {
        Ok((_, c)) => (c.raw_serial_as_string(), c.validity().not_after.to_string()),
        Err(_) => ("?".into(), "?".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_argument_forms() {
        assert_eq!(
            parse_endpoint("unix:///run/spire/agent.sock").unwrap(),
            "unix:///run/spire/agent.sock"
        );
        assert_eq!(
            parse_endpoint("/run/spire/agent.sock").unwrap(),
            "unix:///run/spire/agent.sock"
        );
        let rel = parse_endpoint("agent.sock").unwrap();
        assert!(
            rel.starts_with("unix:///") && rel.ends_with("/agent.sock"),
            "{rel}"
        );
        assert!(parse_endpoint("tcp://127.0.0.1:8081").is_ok());
        assert!(parse_endpoint("unix://host/agent.sock").is_err());
        assert!(parse_endpoint("tcp://localhost").is_err());
    }
}
