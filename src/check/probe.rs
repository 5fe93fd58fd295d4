//! Pod network reachability: a bounded sample of the endpoint addresses a Gateway's routes send
//! traffic to, taken from the translated [`Snapshot`] (so the addresses, ports and the TLS each
//! needs are exactly what the data plane would use), and a probe of each from this machine: a
//! TCP connect, then for TLS backends (meshed routes, BackendTLSPolicy) a handshake with the
//! very `ClientConfig` the proxy would use (pier's client certificate, the mesh trust bundle).
//!
//! Used by `pier check --kubeconfig` once, and by `pier run` every `--probe-interval` for the
//! `pier_pod_network_*` metrics ([`crate::run`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

use crate::model::{
    Backend, BackendId, BackendTarget, BackendTls, ObjectRef, Snapshot, TlsMode, TlsUnavailable,
    UpstreamTls,
};

/// One endpoint address to probe and why: the backend and a route that sends to it.
#[derive(Clone, Debug)]
pub struct Target {
    pub addr: SocketAddr,
    pub backend: BackendId,
    pub route: ObjectRef,
    pub tls: Option<Arc<UpstreamTls>>,
    /// TLS is required but unusable (the mesh checks say why); probed with TCP only.
    pub tls_unavailable: Option<TlsUnavailable>,
}

/// After a TLS 1.3 handshake, how long to wait for the workload to reject pier's client
/// certificate (it does so after the client's Finished, with an alert on the first read).
const REJECT_WAIT: Duration = Duration::from_millis(500);

/// Up to `max` distinct endpoint addresses of the routes of `gateway`, taken round-robin over
/// its backends (so every backend is sampled before any gets a second), and how many distinct
/// addresses there are in all.
pub fn sample(snapshot: &Snapshot, gateway: &ObjectRef, max: usize) -> (Vec<Target>, usize) {
    let mut per_backend: Vec<Vec<Target>> = vec![];
    let mut seen = std::collections::BTreeSet::new();
    let mut add = |b: &Backend, route: &ObjectRef| {
        let mut list = vec![];
        for e in &b.endpoints {
            let tls = match &b.tls {
                BackendTls::Tls(t) => Some(t.clone()),
                BackendTls::PerEndpoint(_) => e.tls.clone(),
                _ => None,
            };
            let key = (e.addr, tls.as_ref().map(|t| t.trust_key));
            if seen.insert(key) {
                list.push(Target {
                    addr: e.addr,
                    backend: b.id.clone(),
                    route: route.clone(),
                    tls,
                    tls_unavailable: match &b.tls {
                        BackendTls::Unavailable(why) => Some(*why),
                        _ => None,
                    },
                });
            }
        }
        if !list.is_empty() {
            per_backend.push(list);
        }
    };
    for entry in snapshot
        .ports
        .iter()
        .flat_map(|p| &p.listeners)
        .filter(|l| &l.id.gateway == gateway)
        .flat_map(|l| l.routes.entries())
    {
        let rule = &entry.rule;
        for m in &rule.filters.mirrors {
            add(&m.backend, &rule.route);
        }
        for wb in &rule.backends.backends {
            if let BackendTarget::Service(b) = &wb.target {
                add(b, &rule.route);
            }
            for m in &wb.filters.mirrors {
                add(&m.backend, &rule.route);
            }
        }
    }
    let total = per_backend.iter().map(Vec::len).sum();
    let mut out = vec![];
    let mut round = 0;
    while out.len() < max.min(total) {
        for list in &per_backend {
            if let Some(t) = list.get(round)
                && out.len() < max
            {
                out.push(t.clone());
            }
        }
        round += 1;
    }
    (out, total)
}

/// The Gateways that have a listener in `snapshot`.
pub fn gateways(snapshot: &Snapshot) -> std::collections::BTreeSet<ObjectRef> {
    snapshot
        .ports
        .iter()
        .flat_map(|p| &p.listeners)
        .map(|l| l.id.gateway.clone())
        .collect()
}

/// What a probe found.
#[derive(Debug)]
pub enum Outcome {
    /// Connected (and, for TLS, handshook and was not rejected); a description.
    Reached(String),
    /// Nothing answered: refused, unreachable, timed out.
    Unreachable(String),
    /// TCP connected but TLS failed.
    TlsFailed(String),
}

/// Probes one target within `timeout` (connect and handshake together).
pub async fn probe(t: &Target, timeout: Duration) -> Outcome {
    let start = Instant::now();
    let tcp = match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(t.addr)).await {
        Err(_) => {
            return Outcome::Unreachable(format!("no answer within {} s", timeout.as_secs_f32()));
        }
        Ok(Err(e)) => return Outcome::Unreachable(io_reason(&e)),
        Ok(Ok(s)) => s,
    };
    let connected = start.elapsed();
    let Some(tls) = &t.tls else {
        let note = match t.tls_unavailable {
            Some(why) => format!(
                " (TLS is required but unusable: {}; see the mesh checks)",
                why.as_str()
            ),
            None => String::new(),
        };
        return Outcome::Reached(format!("TCP connect in {} ms{note}", connected.as_millis()));
    };
    let kind = match tls.mode {
        TlsMode::Mesh => "mesh mTLS",
        TlsMode::Policy => "BackendTLSPolicy TLS",
    };
    let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
    let left = timeout.saturating_sub(start.elapsed());
    let mut stream =
        match tokio::time::timeout(left, connector.connect(tls.server_name.clone(), tcp)).await {
            Err(_) => {
                return Outcome::TlsFailed(format!(
                    "TCP connected, but the {kind} handshake did not finish within {} s",
                    timeout.as_secs_f32()
                ));
            }
            Ok(Err(e)) => {
                return Outcome::TlsFailed(format!("{kind} handshake failed: {}", tls_reason(&e)));
            }
            Ok(Ok(s)) => s,
        };
    let handshake = start.elapsed();
    let alpn = stream
        .get_ref()
        .1
        .alpn_protocol()
        .map(|p| String::from_utf8_lossy(p).into_owned());
    // TLS 1.3: the server checks pier's certificate after the handshake; a rejection arrives
    // as an alert on the first read. Silence (the workload waits for a request) is acceptance.
    let mut byte = [0u8; 1];
    match tokio::time::timeout(REJECT_WAIT, stream.read(&mut byte)).await {
        Ok(Err(e)) => {
            return Outcome::TlsFailed(format!(
                "the workload rejected pier's client certificate after the {kind} handshake: {}",
                tls_reason(&e)
            ));
        }
        Ok(Ok(0)) => {
            return Outcome::TlsFailed(format!(
                "the workload closed the connection right after the {kind} handshake (it may \
                 not trust pier's client certificate)"
            ));
        }
        _ => {}
    }
    let alpn = alpn.map(|a| format!(", ALPN {a}")).unwrap_or_default();
    Outcome::Reached(format!(
        "{kind} handshake in {} ms{alpn}",
        handshake.as_millis()
    ))
}

fn io_reason(e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused => "connection refused (nothing listens there)".to_string(),
        K::HostUnreachable | K::NetworkUnreachable => format!("no route to the address ({e})"),
        _ => e.to_string(),
    }
}

fn tls_reason(e: &std::io::Error) -> String {
    match crate::tls::client::classify_io(e) {
        Some(f) => format!("{} ({e})", f.as_str()),
        None => e.to_string(),
    }
}
