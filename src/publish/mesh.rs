//! Each Gateway's mesh state as `/config` shows it, computed when a translation is published
//! (kept next to the snapshot): whether mesh is on, the trust bundle, pier's client
//! certificate's identity and expiry (never key material), and what `pier.dev/BackendTLS`
//! says is wrong.

use serde::Serialize;

use crate::translate::{GatewayTlsSummary, Statuses};

/// A Gateway's backend TLS (mesh mTLS and pier's client certificate).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MeshSummary {
    /// `namespace/name`.
    pub gateway: String,
    /// The Gateway has a mesh configuration (`spec.mesh` or its parametersRef).
    pub enabled: bool,
    /// Whether a usable mesh trust bundle is loaded.
    pub trust_bundle_loaded: bool,
    /// CA certificates in the trust bundle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trust_bundle_certificates: Option<usize>,
    /// The client certificate pier presents to backends; absent when there is none usable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<ClientCertSummary>,
    /// What the Gateway's `pier.dev/BackendTLS` condition says is wrong.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientCertSummary {
    /// The subject and the URI SAN (a SPIFFE ID) of the leaf.
    pub identity: String,
    /// `notAfter` of the leaf, UTC.
    pub expires: String,
    pub expired: bool,
    #[serde(skip)]
    pub not_after: i64,
}

/// The mesh state of each Gateway in a translation (kept with the snapshot; `expired` is set
/// when `/config` is read).
pub fn mesh(tls: &[GatewayTlsSummary], status: &Statuses) -> Vec<MeshSummary> {
    use crate::translate::status::BACKEND_TLS_CONDITION;
    tls.iter()
        .map(|t| {
            let problem = status.gateways.get(&t.gateway).and_then(|g| {
                g.conditions
                    .iter()
                    .find(|c| !c.status && c.type_.to_string() == BACKEND_TLS_CONDITION)
                    .map(|c| c.message.clone())
            });
            let client_certificate = t.client_chain.first().and_then(|leaf| {
                let f = crate::check::certs::facts(leaf)?;
                Some(ClientCertSummary {
                    identity: f.name,
                    expires: crate::check::certs::date(f.not_after),
                    expired: false,
                    not_after: f.not_after,
                })
            });
            MeshSummary {
                gateway: t.gateway.to_string(),
                enabled: t.mesh,
                trust_bundle_loaded: t.trust_bundle_certs.is_some(),
                trust_bundle_certificates: t.trust_bundle_certs,
                client_certificate,
                problem,
            }
        })
        .collect()
}
