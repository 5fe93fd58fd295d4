//! TLS towards an `https://` OTLP endpoint: the rustls `ClientConfig` the exporter's connector
//! uses, built once at start from `--otlp-ca-file`, `--otlp-client-cert`/`--otlp-client-key`
//! and the host's trust store. Reads files: call it off the runtime (`spawn_blocking`).
//!
//! ```text
//! --otlp-ca-file PEM ──────────────┐ (else the host's roots: /etc/ssl/certs, SSL_CERT_FILE/DIR)
//! --otlp-client-cert/-key (mTLS) ──┼─> ClientConfig (aws-lc-rs, TLS 1.2/1.3, name checked)
//!                                  └─> hyper-rustls, https only, ALPN h2 + http/1.1
//! ```
//!
//! Fails closed: an `https://` endpoint always gets its certificate and name verified, there is
//! no "insecure" switch and no fallback to plaintext; a TLS flag with an `http://` endpoint is
//! an error rather than silently unused. Why the host's store rather than Mozilla's roots as
//! static data (`TrustBundle::well_known`, what BackendTLSPolicy uses): the collector is the
//! operator's, reached from the VM pier runs on, so it is trusted the way the VM's other
//! clients trust it (`update-ca-certificates` included); a private CA needs no rebuild of pier.

use std::path::{Path, PathBuf};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _};
use rustls::{ClientConfig, RootCertStore};

use crate::tls::client::{BundleError, ClientIdentity, IdentityError, TrustBundle};

/// The TLS files of `--otlp-*` flags; all unset: the host's roots, no client certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// `--otlp-ca-file`: trust only these CAs (PEM), not the host's roots.
    pub ca_file: Option<PathBuf>,
    /// `--otlp-client-cert` and `--otlp-client-key` (PEM): a client certificate for mTLS.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("--otlp-ca-file and --otlp-client-cert/--otlp-client-key need an https:// endpoint")]
    NotHttps,
    #[error("cannot read {}", .0.display())]
    Read(PathBuf, #[source] std::io::Error),
    #[error("{}: no usable CA certificate", .0.display())]
    Ca(PathBuf, #[source] BundleError),
    #[error("{} and {}: not a usable client certificate and key", .0.display(), .1.display())]
    Identity(PathBuf, PathBuf, #[source] IdentityError),
    #[error(
        "no trusted root certificates on this host (looked in /etc/ssl/certs and \
         SSL_CERT_FILE/SSL_CERT_DIR); give --otlp-ca-file"
    )]
    NoSystemRoots,
    #[error("cannot build the TLS client configuration")]
    Rustls(#[source] rustls::Error),
}

/// The client config for `https` (`None` for `http`, where any TLS file is an error).
pub fn client_config(https: bool, files: &TlsFiles) -> Result<Option<ClientConfig>, TlsError> {
    if !https {
        return match files {
            TlsFiles {
                ca_file: None,
                client_cert: None,
            } => Ok(None),
            _ => Err(TlsError::NotHttps),
        };
    }
    let roots = match &files.ca_file {
        Some(path) => {
            let pem = read(path)?;
            let bundle = TrustBundle::from_pem(&pem).map_err(|e| TlsError::Ca(path.clone(), e))?;
            RootCertStore::clone(bundle.roots())
        }
        None => system_roots()?,
    };
    let provider = crate::tls::provider::provider();
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Rustls)?
        .with_root_certificates(roots);
    let config = match &files.client_cert {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let (chain, key_der) = identity(cert, key)?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(TlsError::Rustls)?
        }
    };
    Ok(Some(config))
}

/// The host's trust store; certificates that do not parse are skipped (a distribution's
/// bundle may carry one rustls cannot use), an empty store is an error.
fn system_roots() -> Result<RootCertStore, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::debug!(error = %e, "tracing: a system trust store entry was not read");
    }
    let mut roots = RootCertStore::empty();
    let (added, ignored) = roots.add_parsable_certificates(found.certs);
    if ignored > 0 {
        tracing::debug!(
            added,
            ignored,
            "tracing: system root certificates rustls cannot use were skipped"
        );
    }
    if roots.is_empty() {
        return Err(TlsError::NoSystemRoots);
    }
    Ok(roots)
}

/// A client chain and its key, checked to belong together (the key itself never appears in
/// an error or a log).
fn identity(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let cert_pem = read(cert)?;
    let key_pem = read(key)?;
    let bad = |e| TlsError::Identity(cert.to_path_buf(), key.to_path_buf(), e);
    let checked = ClientIdentity::from_pem(&cert_pem, &key_pem).map_err(bad)?;
    let key_der = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| bad(IdentityError::KeyPem(e.into())))?;
    Ok((checked.chain().to_vec(), key_der))
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::Read(path.to_path_buf(), e))
}
