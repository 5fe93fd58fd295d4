//! Raw HTTP/1.1 connections for the fast path (`proxy::h1`): the socket itself (TCP, or
//! rustls over TCP), pooled in the same [`Entry`] as hyper's senders but in a list of their
//! own, so the fast path writes requests and reads responses in the downstream connection's
//! task (no connection task, no channel per request).
//!
//! ```text
//! Upstream::raw(target) ─┬─ entry HTTP/2 (h2c, or ALPN h2 learned) ──> Raw::Http2 (hyper path)
//!                        ├─ newest idle raw connection that is still open (probed)
//!                        └─ new connection: TCP ─> TLS? ─> ALPN h2 ? install for hyper : raw
//! RawConn::release ──> back to the entry (unless retired, or the response said close)
//! ```

use std::sync::Arc;
use std::time::Instant;

use super::connect::{Conn, Dial, Stream, offers_h2};
use super::pool::{Entry, IdleRaw, Mode, ShortKey};
use super::{Room, Target, Upstream};
use crate::model::{Backend, UpstreamTls};
use crate::proxy::error::ProxyError;
use crate::proxy::observe::metrics::{Transport, UpstreamGuard, UpstreamProtocol};

/// What [`Upstream::raw`] found for a target.
pub enum Raw {
    Conn(RawConn),
    /// The endpoint speaks HTTP/2 (h2c, or ALPN chose `h2`): the request goes through hyper.
    Http2,
}

/// A raw HTTP/1.1 connection checked out for one exchange.
pub struct RawConn {
    entry: Arc<Entry>,
    io: Stream,
    open: UpstreamGuard,
    /// Came from the pool (a failure before any response byte may be a stale connection).
    pub reused: bool,
}

// === impl Upstream ===

impl Upstream {
    /// A raw HTTP/1.1 connection to `target`: pooled, or new. Fails closed like
    /// [`Upstream::send`]: `BackendTls::Unavailable` opens nothing.
    pub async fn raw(&self, target: Target<'_>) -> Result<Raw, ProxyError> {
        let backend = target.backend;
        let tls = self.tls_for(backend, target.endpoint)?;
        let key = ShortKey {
            addr: target.endpoint.addr,
            trust_key: tls.map(|u| u.trust_key),
            protocol: backend.protocol,
        };
        let entry = self.inner.pool.entry(key, tls.map(|u| &u.server_name));
        match pooled(&entry) {
            Some(raw) => Ok(raw),
            // Boxed, as in `send`: connecting is kilobytes of future state.
            None => Box::pin(self.raw_new(backend, entry, tls)).await,
        }
    }

    /// A new raw connection in `entry` (or one that came back to it meanwhile), when
    /// [`pooled`] found none. Callers box it.
    pub(super) async fn raw_new(
        &self,
        backend: &Backend,
        entry: Arc<Entry>,
        tls: Option<&UpstreamTls>,
    ) -> Result<Raw, ProxyError> {
        let dial = &Dial {
            backend: &backend.id,
            addr: entry.key.addr,
            protocol: backend.protocol,
            tls,
            tls_config: tls.map(|t| entry.tls_config(t)),
            connect_timeout: backend.connect_timeout,
        };
        // Room under the backend's `maxConnections`, or a connection that came back meanwhile.
        let slot = loop {
            if backend.max_connections.is_none() {
                break None;
            }
            match self.room(backend, &entry, true).await? {
                Room::New(slot) => break slot,
                Room::Pooled => {
                    if let Some(idle) = entry.checkout_raw() {
                        return Ok(Raw::Conn(RawConn::pooled(entry, idle)));
                    }
                }
            }
        };
        // A TLS key that may negotiate h2 learns what it speaks from one connection at a time,
        // like hyper's shared connect: a burst of first requests then opens one HTTP/2
        // connection, not one each.
        let gate = match entry.mode() {
            Mode::Unknown if dial.tls.is_some_and(offers_h2) => {
                let gate = entry.h2_gate().lock().await;
                match entry.mode() {
                    Mode::Http2 => return Ok(Raw::Http2),
                    Mode::Http1 => None,
                    Mode::Unknown => Some(gate),
                }
            }
            _ => None,
        };
        let connector = &self.inner.connector;
        let (io, h2) = connector.connect_stream(dial).await?;
        let transport = dial
            .tls
            .map_or(Transport::Plain, |t| Transport::of_mode(t.mode));
        if h2 {
            if let Conn::Http2(tx) = connector.handshake(io, true, transport, slot).await? {
                entry.install_h2(&tx);
            }
            entry.learned(Mode::Http2);
            drop(gate);
            return Ok(Raw::Http2);
        }
        entry.learned(Mode::Http1);
        drop(gate);
        let open = self
            .inner
            .metrics
            .upstream_opened(UpstreamProtocol::Http1, transport)
            .holding(slot);
        Ok(Raw::Conn(RawConn {
            entry,
            io,
            open,
            reused: false,
        }))
    }
}

/// What `entry` has without connecting: HTTP/2 (hyper's), or its newest idle raw
/// connection that is still open.
#[inline]
pub(super) fn pooled(entry: &Arc<Entry>) -> Option<Raw> {
    match entry.mode() {
        Mode::Http2 => Some(Raw::Http2),
        Mode::Http1 => entry
            .checkout_raw()
            .map(|idle| Raw::Conn(RawConn::pooled(entry.clone(), idle))),
        Mode::Unknown => None,
    }
}

// === impl RawConn ===

impl RawConn {
    fn pooled(entry: Arc<Entry>, idle: IdleRaw) -> Self {
        Self {
            entry,
            io: idle.io,
            open: idle.open,
            reused: true,
        }
    }

    pub fn io(&mut self) -> &mut Stream {
        &mut self.io
    }

    /// The exchange ended cleanly and the connection may carry another request.
    pub fn release(self) {
        self.entry.push_raw(IdleRaw {
            io: self.io,
            open: self.open,
            since: Instant::now(),
        });
    }
}
