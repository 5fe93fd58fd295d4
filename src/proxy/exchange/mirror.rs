//! RequestMirror: a copy of the request goes to each selected mirror backend in a spawned
//! task; its response is read and discarded. A mirror never delays or fails the request it
//! copies.
//!
//! The copy is the request as the primary backend sees it (filters applied, same path, query
//! and headers). Bodies: a request whose `Content-Length` is at most [`MAX_MIRRORED_BODY`] is
//! copied while it streams to the primary ([`Tee`]) and the mirror is sent once the primary
//! has read all of it. Any other request (larger, chunked, unknown length) is mirrored as its
//! head with an empty body, so mirroring never buffers much. If the primary stops reading a
//! small body before its end, that mirror is skipped.

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::request::Parts;
use http::uri::PathAndQuery;
use http_body_util::BodyExt;
use rand::Rng;
use tokio::sync::oneshot;

use super::Shared;
use crate::model::Mirror;
use crate::proxy::body::{self, ProxyBody, Tee};
use crate::proxy::error::ProxyError;
use crate::proxy::observe::metrics::ProxyMetrics;
use crate::proxy::upstream::{self, Clock, InFlight, Target, Upstream};

/// Larger bodies are not mirrored (the head still is).
pub const MAX_MIRRORED_BODY: u64 = 64 * 1024;

/// Samples `mirrors`, spawns one task for those selected, and returns the body to send to the
/// primary (wrapped in a [`Tee`] when the body is mirrored too).
pub fn dispatch<'a>(
    shared: &Shared,
    mirrors: impl Iterator<Item = &'a Mirror>,
    head: &Parts,
    path: &PathAndQuery,
    body: ProxyBody,
) -> ProxyBody {
    let selected: Vec<Mirror> = {
        let mut rng = rand::rng();
        mirrors
            .filter(|m| m.denominator > 0 && m.selected(rng.random_range(0..m.denominator)))
            .cloned()
            .collect()
    };
    if selected.is_empty() {
        return body;
    }
    let length = head
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut copy_head = Parts::clone_head(head);
    let (body, copy) = match length {
        Some(0) => (body, Copied::Now(Bytes::new())),
        Some(n) if n <= MAX_MIRRORED_BODY => {
            let (tx, rx) = oneshot::channel();
            let tee = Tee::new(body, n as usize, tx);
            (body::boxed(tee), Copied::Later(rx))
        }
        _ => {
            copy_head.headers.remove(CONTENT_LENGTH);
            copy_head.headers.remove(TRANSFER_ENCODING);
            (body, Copied::Now(Bytes::new()))
        }
    };
    let task = MirrorTask {
        upstream: shared.upstream.clone(),
        metrics: shared.metrics.clone(),
        clock: shared.clock,
        timeout: shared.config.mirror_timeout,
        head: copy_head,
        path: path.clone(),
    };
    tokio::spawn(task.run(selected, copy));
    body
}

enum Copied {
    Now(Bytes),
    Later(oneshot::Receiver<Bytes>),
}

struct MirrorTask {
    upstream: Upstream,
    metrics: std::sync::Arc<ProxyMetrics>,
    clock: Clock,
    timeout: std::time::Duration,
    head: Parts,
    path: PathAndQuery,
}

impl MirrorTask {
    async fn run(self, mirrors: Vec<Mirror>, copy: Copied) {
        let body = match copy {
            Copied::Now(b) => b,
            Copied::Later(rx) => match tokio::time::timeout(self.timeout, rx).await {
                Ok(Ok(b)) => b,
                // The primary did not read the whole body: skip rather than send a torso.
                _ => return,
            },
        };
        let sends = mirrors.iter().map(|m| self.send(m, body.clone()));
        futures::future::join_all(sends).await;
    }

    async fn send(&self, mirror: &Mirror, body: Bytes) {
        let backend = &mirror.backend;
        let Some(endpoint) = super::send::pick(backend, &self.clock) else {
            return;
        };
        let head = Parts::clone_head(&self.head);
        let req = upstream::request(head, body::full(body), self.path.clone());
        let _in_flight = InFlight::new(endpoint.stats.clone(), self.metrics.in_flight(&backend.id));
        let target = Target {
            backend,
            endpoint,
            upgrade: false,
        };
        let exchange = async {
            let resp = self.upstream.send(target, req).await?;
            // Read the response to its end so the connection goes back to the pool.
            let _ = resp.into_body().collect().await;
            Ok::<_, ProxyError>(())
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::debug!(%error, backend = %backend.id, "mirror failed"),
            Err(_) => tracing::debug!(backend = %backend.id, "mirror timed out"),
        }
    }
}

/// `http::request::Parts` is not `Clone` (extensions); mirrors need only the head.
pub trait CloneHead {
    fn clone_head(&self) -> Self;
}

impl CloneHead for Parts {
    fn clone_head(&self) -> Self {
        let mut req = http::Request::new(());
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.version_mut() = self.version;
        *req.headers_mut() = self.headers.clone();
        req.into_parts().0
    }
}
