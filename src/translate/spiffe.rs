//! pier's identity from the SPIFFE Workload API, as translation sees it: plain values that the
//! binary's Workload API client (`source::spiffe`) puts into [`Settings::workload_api`]; no
//! I/O here.
//!
//! ```text
//! SPIRE agent ─(Workload API stream)─> source::spiffe ─> WorkloadApi { endpoint, state }
//!   state = Waiting(why) | Ready(X509Context { SVID chain + key, bundles per trust domain })
//!       ├─> mesh::client_state: the process-wide client certificate (the default SVID), unless
//!       │   a Gateway's tls.backend.clientCertificateRef wins
//!       └─> mesh::bundle_ref: trustBundle {group: pier.dev, kind: SPIFFEWorkloadAPI,
//!           name: <trust domain>} resolves to that trust domain's streamed bundle
//! ```
//!
//! Precedence (also in the manual, docs/src/spire.md): a Gateway's
//! `spec.tls.backend.clientCertificateRef` wins over the process-wide identity; the
//! process-wide identity is `--client-cert` *or* `--spiffe-socket` (the CLI refuses both). Until the first X.509-SVID arrives, a Gateway that
//! would present it fails closed (503 for meshed routes) and its `pier.dev/BackendTLS`
//! condition says it is waiting for the Workload API and why.
//!
//! [`Settings::workload_api`]: super::Settings::workload_api

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::tls::client::{ClientIdentity, IdentityError, check_anchors};

/// The API group of pier's own trust bundle kinds.
pub const PIER_GROUP: &str = "pier.dev";
/// The `trustBundle` kind whose `name` is a SPIFFE trust domain, resolved to the bundle the
/// Workload API streams for it (`--spiffe-socket`).
pub const WORKLOAD_API_KIND: &str = "SPIFFEWorkloadAPI";

/// The Workload API pier was started with (`--spiffe-socket`), and what it has said so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadApi {
    /// Where it is (`unix:///run/spire/agent.sock`), for messages.
    pub endpoint: String,
    pub state: WorkloadApiState,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkloadApiState {
    /// No usable X.509 context yet; why (the last error, or that it is still connecting).
    Waiting(String),
    /// The latest X.509 context. Kept when the stream breaks later: the SVID stays valid until
    /// it expires, and the agent is usually back well before.
    Ready(Arc<X509Context>),
}

/// pier's default X.509-SVID and the X.509 bundles, as the Workload API sent them.
/// `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct X509Context {
    /// The SVID's SPIFFE ID (`spiffe://example.org/pier`).
    pub spiffe_id: String,
    /// The SVID's chain, leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The SVID's PKCS#8 private key.
    pub key: Vec<u8>,
    /// CA certificates by trust domain name: the SVID's own and the federated ones.
    pub bundles: BTreeMap<String, Vec<CertificateDer<'static>>>,
}

// === impl WorkloadApi ===

impl WorkloadApi {
    /// The process-wide client identity: the default SVID, with the note the Gateway's
    /// `pier.dev/BackendTLS` condition carries, or why there is none yet.
    pub fn client_identity(&self) -> Result<(ClientIdentity, String), String> {
        match &self.state {
            WorkloadApiState::Ready(ctx) => ctx
                .identity()
                .map(|id| {
                    let note = format!(
                        "client certificate is the X.509-SVID {} from the SPIFFE Workload API \
                         at {}",
                        ctx.spiffe_id, self.endpoint
                    );
                    (id, note)
                })
                .map_err(|e| {
                    format!(
                        "the X.509-SVID {} from the SPIFFE Workload API at {} is unusable: {}",
                        ctx.spiffe_id,
                        self.endpoint,
                        super::error_chain(&e)
                    )
                }),
            WorkloadApiState::Waiting(why) => Err(format!(
                "no X.509-SVID from the SPIFFE Workload API at {} yet ({why}); meshed routes \
                 answer 503 until one arrives",
                self.endpoint
            )),
        }
    }

    /// The CA certificates of `trust_domain` (a `trustBundle` reference of kind
    /// [`WORKLOAD_API_KIND`]) and a description for messages.
    pub fn bundle(
        &self,
        trust_domain: &str,
    ) -> Result<(Vec<CertificateDer<'static>>, String), String> {
        let ctx = match &self.state {
            WorkloadApiState::Ready(ctx) => ctx,
            WorkloadApiState::Waiting(why) => {
                return Err(format!(
                    "no X.509 bundle from the SPIFFE Workload API at {} yet ({why})",
                    self.endpoint
                ));
            }
        };
        // A trust domain name is lower case (SPIFFE ID spec §2.1); accept a `spiffe://` prefix.
        let name = trust_domain
            .strip_prefix("spiffe://")
            .unwrap_or(trust_domain)
            .to_ascii_lowercase();
        match ctx.bundles.get(&name) {
            Some(certs) if !certs.is_empty() => {
                let source = format!(
                    "the SPIFFE Workload API's bundle for trust domain {name} ({})",
                    self.endpoint
                );
                check_anchors(certs)
                    .map_err(|e| format!("{source}: {}", super::error_chain(&e)))?;
                Ok((certs.clone(), source))
            }
            _ => Err(format!(
                "the SPIFFE Workload API at {} has no X.509 bundle for trust domain {name:?} \
                 (it has: {})",
                self.endpoint,
                ctx.bundles.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
        }
    }
}

/// The message for a [`WORKLOAD_API_KIND`] reference when pier has no Workload API.
pub fn not_configured(trust_domain: &str) -> String {
    format!(
        "{PIER_GROUP}/{WORKLOAD_API_KIND} {trust_domain} needs pier to be started with \
         --spiffe-socket (or SPIFFE_ENDPOINT_SOCKET)"
    )
}

// === impl X509Context ===

impl X509Context {
    /// The SVID as a client identity (checks that the key matches the leaf).
    pub fn identity(&self) -> Result<ClientIdentity, IdentityError> {
        ClientIdentity::from_der(
            self.chain.clone(),
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.clone())),
        )
    }
}

impl fmt::Debug for X509Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("X509Context")
            .field("spiffe_id", &self.spiffe_id)
            .field("chain", &self.chain.len())
            .field("key", &format_args!("<redacted>"))
            .field(
                "bundles",
                &self
                    .bundles
                    .iter()
                    .map(|(td, c)| (td, c.len()))
                    .collect::<BTreeMap<_, _>>(),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests;
