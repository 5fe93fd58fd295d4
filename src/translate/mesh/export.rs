//! `pier mesh export-trust`: the other half of the trust exchange (GEP-3951). The mesh must
//! trust the CA that issued pier's client certificate; this turns pier's certificate chain into
//! a ConfigMap holding that CA bundle and the Mesh's `spec.ocg.trustBundle` pointing at it.
//! Pure: the CLI reads the chain and prints the result.

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde::Serialize;

use super::DEFAULT_BUNDLE_KEY;

/// The experimental Mesh resource (gateway-api `XMesh`, GEP-3951 / GEP-3792).
pub const MESH_API_VERSION: &str = "gateway.networking.x-k8s.io/v1alpha1";
pub const MESH_KIND: &str = "XMesh";

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("the certificate chain is not valid PEM")]
    Pem(#[source] crate::tls::pem::PemError),
    #[error("the certificate chain holds no PEM certificate")]
    Empty,
    #[error("certificate {0} of the chain is not a valid X.509 certificate")]
    BadCertificate(usize),
    #[error(
        "the chain holds no CA certificate: append the CA that issued pier's client certificate"
    )]
    NoCa,
    #[error("namespace {0:?} is not a valid Kubernetes namespace name")]
    Namespace(String),
    #[error("name {0:?} is not a valid Kubernetes object name")]
    Name(String),
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ConfigMapOut<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: Meta<'a>,
    data: std::collections::BTreeMap<&'static str, String>,
}

#[derive(Serialize)]
struct Meta<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MeshOut<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: Meta<'a>,
    spec: MeshSpecOut<'a>,
}

#[derive(Serialize)]
struct MeshSpecOut<'a> {
    ocg: OcgOut<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OcgOut<'a> {
    trust_bundle: BundleRefOut<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BundleRefOut<'a> {
    name: &'a str,
    namespace: &'a str,
    bundle_key: &'static str,
}

/// YAML for (a) ConfigMap `namespace/name` with pier's CA bundle under `ca-bundle.crt` and
/// (b) the Mesh (`XMesh` named `name`) whose `spec.ocg.trustBundle` points at it.
///
/// The bundle is every CA certificate (basicConstraints cA) in `cert_chain_pem`, in chain
/// order; a chain of one self-signed certificate exports that certificate. The Mesh is meant
/// to be merged into the mesh's own Mesh resource (its controller owns `controllerName`).
pub fn export_trust(
    cert_chain_pem: &[u8],
    namespace: &str,
    name: &str,
) -> Result<String, ExportError> {
    if !is_dns_label(namespace) {
        return Err(ExportError::Namespace(namespace.to_string()));
    }
    if !is_dns_subdomain(name) {
        return Err(ExportError::Name(name.to_string()));
    }
    let chain = CertificateDer::pem_slice_iter(cert_chain_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ExportError::Pem(e.into()))?;
    if chain.is_empty() {
        return Err(ExportError::Empty);
    }
    let mut bundle = vec![];
    let mut self_signed_leaf = false;
    for (i, cert) in chain.iter().enumerate() {
        let (is_ca, self_signed) = ca_facts(cert).ok_or(ExportError::BadCertificate(i))?;
        if is_ca {
            bundle.push(cert);
        }
        self_signed_leaf |= i == 0 && self_signed;
    }
    if bundle.is_empty() {
        match chain.as_slice() {
            [only] if self_signed_leaf => bundle.push(only),
            _ => return Err(ExportError::NoCa),
        }
    }
    let pem: String = bundle.iter().map(|c| pem_encode(c)).collect();

    let config_map = ConfigMapOut {
        api_version: "v1",
        kind: "ConfigMap",
        metadata: Meta {
            name,
            namespace: Some(namespace),
        },
        data: [(DEFAULT_BUNDLE_KEY, pem)].into_iter().collect(),
    };
    let mesh = MeshOut {
        api_version: MESH_API_VERSION,
        kind: MESH_KIND,
        metadata: Meta {
            name,
            namespace: None,
        },
        spec: MeshSpecOut {
            ocg: OcgOut {
                trust_bundle: BundleRefOut {
                    name,
                    namespace,
                    bundle_key: DEFAULT_BUNDLE_KEY,
                },
            },
        },
    };
    Ok(format!(
        "# pier's CA bundle, for the mesh to verify pier's client certificate (GEP-3951).\n\
         {}---\n\
         # The mesh's trust in pier: merge spec.ocg into the mesh's own Mesh resource\n\
         # (its controller sets spec.controllerName).\n\
         {}",
        to_yaml(&config_map),
        to_yaml(&mesh)
    ))
}

fn to_yaml<T: Serialize>(v: &T) -> String {
    serde_saphyr::to_string(v).expect("structs of strings serialize")
}

/// (basicConstraints cA, subject == issuer), `None` when the certificate does not parse.
fn ca_facts(der: &CertificateDer<'_>) -> Option<(bool, bool)> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, cert) = X509Certificate::from_der(der.as_ref()).ok()?;
    let is_ca = cert
        .basic_constraints()
        .ok()
        .flatten()
        .is_some_and(|bc| bc.value.ca);
    Some((is_ca, cert.subject() == cert.issuer()))
}

fn pem_encode(der: &CertificateDer<'_>) -> String {
    let b64 = base64(der.as_ref());
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// RFC 4648 base64 with padding.
fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// RFC 1123 label: what a namespace name must be.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain: what most object names must be.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}
