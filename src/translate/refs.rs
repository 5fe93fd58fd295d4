//! References to other objects: ReferenceGrant checks and Secret -> server certificates. The
//! rules for "exists", "is allowed" and "is usable" are written once, here; Service ports ->
//! backends is `backends.rs`, which builds on them.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::api::{CORE_GROUP, Secret};
use super::resources::Resources;
use crate::model::{ListenerId, ObjectRef};

/// The Secret type a listener certificate must have.
pub const TLS_SECRET_TYPE: &str = "kubernetes.io/tls";

/// The referring side of a cross-namespace reference (ReferenceGrant `from`).
#[derive(Clone, Copy, Debug)]
pub struct RefFrom<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
}

/// The referred-to object (ReferenceGrant `to`, plus the namespace the grant must live in).
#[derive(Clone, Copy, Debug)]
pub struct RefTo<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

/// A usable server certificate and the names it should be offered for.
#[derive(Clone, Debug)]
pub struct ServerCert {
    /// DNS names from the certificate's subjectAltName (or its CN when it has none),
    /// lower-cased, in certificate order.
    pub names: Vec<String>,
    pub key: Arc<CertifiedKey>,
}

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("Secret {0} not found")]
    NotFound(ObjectRef),
    #[error("Secret {0} is not of type kubernetes.io/tls")]
    WrongType(ObjectRef),
    #[error("Secret {0} has no {1}")]
    MissingKey(ObjectRef, &'static str),
    #[error("Secret {0}: tls.crt holds no PEM certificate")]
    NoCertificate(ObjectRef),
    #[error("Secret {0}: tls.crt is not valid PEM")]
    CertificatePem(ObjectRef, #[source] crate::tls::pem::PemError),
    #[error("Secret {0}: tls.crt is not a valid X.509 certificate")]
    CertificateDer(ObjectRef),
    #[error("Secret {0}: tls.key is not a valid PEM private key")]
    KeyPem(ObjectRef, #[source] crate::tls::pem::PemError),
    #[error("Secret {0}: tls.key is not a supported private key")]
    KeyUnsupported(ObjectRef, #[source] rustls::Error),
    #[error("Secret {0}: tls.key does not match the certificate")]
    KeyMismatch(ObjectRef),
}

impl CertError {
    /// Whether the Secret exists but holds no usable certificate and key (a bad rotation), as
    /// opposed to being gone.
    pub fn is_invalid_secret(&self) -> bool {
        !matches!(self, Self::NotFound(_))
    }
}

/// Loads listener certificates, once per Secret: listeners that share a Secret share the
/// `Arc<CertifiedKey>`.
pub struct Certs<'a> {
    resources: &'a Resources,
    cache: BTreeMap<ObjectRef, ServerCert>,
    /// The previous translation's certificates, for Secrets that went bad since.
    last_good: &'a ListenerCerts,
}

/// The usable certificate behind every listener certificateRef, by listener and Secret. A
/// translation returns it; the publisher hands it to the next translation, which serves the
/// last good certificate of a listener whose Secret went bad (a bad rotation must not take
/// HTTPS down). It is an input value, so translation stays pure. `Debug` shows only the keys.
#[derive(Clone, Default)]
pub struct ListenerCerts(BTreeMap<(ListenerId, ObjectRef), ServerCert>);

/// A certificateRef whose Secret is invalid, served with its last good certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptCert {
    pub listener: ListenerId,
    pub secret: ObjectRef,
    /// Why the Secret is unusable (names the Secret, never its content).
    pub error: String,
}

// === ReferenceGrant ===

/// Whether a ReferenceGrant in the target's namespace allows `from` to refer to `to`.
/// Same-namespace references need no grant; callers check that first.
pub fn reference_granted(resources: &Resources, from: RefFrom<'_>, to: RefTo<'_>) -> bool {
    let start = (to.namespace.to_string(), String::new());
    resources
        .reference_grants
        .range(start..)
        .take_while(|((ns, _), _)| ns == to.namespace)
        .any(|(_, grant)| {
            grant.spec.from.iter().any(|f| {
                f.group == from.group && f.kind == from.kind && f.namespace == from.namespace
            }) && grant.spec.to.iter().any(|t| {
                t.group == to.group
                    && t.kind == to.kind
                    && t.name.as_deref().is_none_or(|n| n == to.name)
            })
        })
}

/// A SecurityPolicy of namespace `policy_ns` naming the core-group `kind` `ns/name` (a Secret,
/// an authorizer's Service): in its own namespace, or under a ReferenceGrant in `ns`; the
/// refusal says which grant is missing.
pub fn security_policy_may_refer(
    resources: &Resources,
    policy_ns: &str,
    kind: &str,
    ns: &str,
    name: &str,
) -> Result<(), String> {
    let granted = || {
        reference_granted(
            resources,
            RefFrom {
                group: super::spiffe::PIER_GROUP,
                kind: "SecurityPolicy",
                namespace: policy_ns,
            },
            RefTo {
                group: "",
                kind,
                namespace: ns,
                name,
            },
        )
    };
    if ns == policy_ns || granted() {
        Ok(())
    } else {
        Err(format!(
            "{kind} {ns}/{name} is in another namespace and no ReferenceGrant in {ns} lets \
             SecurityPolicies of {policy_ns} refer to it"
        ))
    }
}

/// Whether a backendRef/certificateRef group names the core API group. The API spells it "";
/// "core" is accepted too because people write it.
pub fn is_core_group(group: Option<&str>) -> bool {
    matches!(group, None | Some(CORE_GROUP) | Some("core"))
}

// === Secret -> certificate ===

impl<'a> Certs<'a> {
    pub fn new(resources: &'a Resources, last_good: &'a ListenerCerts) -> Self {
        Self {
            resources,
            cache: BTreeMap::new(),
            last_good,
        }
    }

    /// The certificate `listener` served from `secret` in the previous translation.
    pub fn last_good(&self, listener: &ListenerId, secret: &ObjectRef) -> Option<ServerCert> {
        self.last_good
            .0
            .get(&(listener.clone(), secret.clone()))
            .cloned()
    }

    pub fn get(&mut self, secret: &ObjectRef) -> Result<ServerCert, CertError> {
        if let Some(c) = self.cache.get(secret) {
            return Ok(c.clone());
        }
        let c = server_cert(self.resources, secret)?;
        self.cache.insert(secret.clone(), c.clone());
        Ok(c)
    }
}

/// Loads a listener certificate from a `kubernetes.io/tls` Secret: the chain from `tls.crt`,
/// the key from `tls.key`, checked to match. Errors name the Secret, never its content.
pub fn server_cert(resources: &Resources, secret: &ObjectRef) -> Result<ServerCert, CertError> {
    let s = resources
        .secrets
        .get(&(secret.namespace.clone(), secret.name.clone()))
        .ok_or_else(|| CertError::NotFound(secret.clone()))?;
    load_tls_secret(s, secret)
}

fn load_tls_secret(s: &Secret, id: &ObjectRef) -> Result<ServerCert, CertError> {
    if s.type_.as_deref() != Some(TLS_SECRET_TYPE) {
        return Err(CertError::WrongType(id.clone()));
    }
    let data = |key: &'static str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| b.0.as_slice())
            .filter(|b| !b.is_empty())
            .ok_or_else(|| CertError::MissingKey(id.clone(), key))
    };
    let chain = CertificateDer::pem_slice_iter(data("tls.crt")?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CertError::CertificatePem(id.clone(), e.into()))?;
    let leaf = chain
        .first()
        .ok_or_else(|| CertError::NoCertificate(id.clone()))?;
    let names = dns_names(leaf).ok_or_else(|| CertError::CertificateDer(id.clone()))?;
    let der = PrivateKeyDer::from_pem_slice(data("tls.key")?)
        .map_err(|e| CertError::KeyPem(id.clone(), e.into()))?;
    let signing = crate::tls::provider::signing_key(&der)
        .map_err(|e| CertError::KeyUnsupported(id.clone(), e))?;
    let key = CertifiedKey::new(chain, signing);
    match key.keys_match() {
        // `Unknown`: the key type cannot report its public key; rustls itself accepts that.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(_) => return Err(CertError::KeyMismatch(id.clone())),
    }
    Ok(ServerCert {
        names,
        key: Arc::new(key),
    })
}

/// DNS subjectAltNames of a certificate, or its common name when it has none. `None` when the
/// certificate does not parse.
fn dns_names(cert: &CertificateDer<'_>) -> Option<Vec<String>> {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let (_, cert) = X509Certificate::from_der(cert.as_ref()).ok()?;
    let mut names: Vec<String> = match cert.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::DNSName(d) => Some(d.to_ascii_lowercase()),
                _ => None,
            })
            .collect(),
        Ok(None) => vec![],
        Err(_) => return None,
    };
    if names.is_empty() {
        names.extend(
            cert.subject()
                .iter_common_name()
                .filter_map(|cn| cn.as_str().ok())
                .map(str::to_ascii_lowercase),
        );
    }
    let mut seen = std::collections::BTreeSet::new();
    names.retain(|n| seen.insert(n.clone()));
    Some(names)
}

// === impl ListenerCerts ===

impl ListenerCerts {
    pub fn insert(&mut self, listener: ListenerId, secret: ObjectRef, cert: ServerCert) {
        self.0.insert((listener, secret), cert);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Only the listener and Secret names; certificates and keys never leave the process.
impl std::fmt::Debug for ListenerCerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.keys().map(|(l, s)| format!("{l}: {s}")))
            .finish()
    }
}

#[cfg(test)]
mod tests;
