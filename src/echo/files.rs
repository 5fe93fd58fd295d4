//! `pier echo --tls-cert FILE --tls-key FILE [--client-ca FILE]`: a TLS (or, with a client
//! CA, mTLS) echo whose certificate and key are read again when the files change, as a mesh
//! workload's proxy takes a rotated certificate without restarting. New handshakes use the new
//! pair; open connections keep theirs. A pair that does not load (a half-written file, a key
//! that does not match) is reported and the last good one kept.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;

use crate::tls::client::{ClientIdentity, TrustBundle};

/// How often the certificate files are read for a change.
const POLL: Duration = Duration::from_secs(1);

/// The files of a TLS echo.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Clients must present a certificate this bundle verifies (read once).
    pub client_ca: Option<PathBuf>,
}

/// The current pair, swapped by the poller.
#[derive(Debug)]
struct Reloading(ArcSwap<CertifiedKey>);

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

fn load_pair(files: &TlsFiles) -> anyhow::Result<(Vec<u8>, Arc<CertifiedKey>)> {
    let (cert, key) = (read(&files.cert)?, read(&files.key)?);
    let identity = ClientIdentity::from_pem(&cert, &key)
        .with_context(|| format!("{} and {}", files.cert.display(), files.key.display()))?;
    let mut seen = cert;
    seen.extend_from_slice(&key);
    Ok((seen, identity.certified_key().clone()))
}

/// The server config of `files`, and a task (on the current runtime) that follows the
/// certificate and key files for as long as the config lives.
pub fn server_config(files: &TlsFiles) -> anyhow::Result<Arc<ServerConfig>> {
    let (mut seen, pair) = load_pair(files)?;
    let resolver = Arc::new(Reloading(ArcSwap::new(pair)));
    let provider = crate::tls::provider::provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let bundle = TrustBundle::from_pem(&read(path)?)
                .with_context(|| format!("{} holds no usable CA", path.display()))?;
            let verifier =
                WebPkiClientVerifier::builder_with_provider(bundle.roots().clone(), provider)
                    .build()?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(resolver.clone());
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let weak = Arc::downgrade(&resolver);
    let files = files.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(POLL).await;
            let Some(resolver) = weak.upgrade() else {
                return;
            };
            match load_pair(&files) {
                Ok((now, _)) if now == seen => {}
                Ok((now, pair)) => {
                    resolver.0.store(pair);
                    seen = now;
                    eprintln!("echo: certificate reloaded from {}", files.cert.display());
                }
                Err(e) => eprintln!("echo: keeping the last good certificate: {e:#}"),
            }
        }
    });
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::time::Duration;

    use rustls::pki_types::{CertificateDer, ServerName};
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpStream;

    use super::{TlsFiles, server_config};

    /// A new self-signed pair for `a.example`, written to the files.
    fn write_pair(files: &TlsFiles) -> CertificateDer<'static> {
        let c = rcgen::generate_simple_self_signed(vec!["a.example".to_string()]).unwrap();
        std::fs::write(&files.key, c.signing_key.serialize_pem()).unwrap();
        std::fs::write(&files.cert, c.cert.pem()).unwrap();
        c.cert.der().clone()
    }

    /// The certificate a handshake with the echo at `addr` gets; `trusted` are the
    /// self-signed certificates the client accepts.
    async fn served_cert(
        addr: SocketAddr,
        trusted: &[&CertificateDer<'static>],
    ) -> CertificateDer<'static> {
        let mut roots = rustls::RootCertStore::empty();
        for c in trusted {
            roots.add((*c).clone()).unwrap();
        }
        let provider = crate::tls::provider::provider();
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = TcpStream::connect(addr).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("a.example").unwrap(), tcp)
            .await
            .unwrap();
        tls.get_ref().1.peer_certificates().unwrap()[0].clone()
    }

    /// A rewritten pair is served to new handshakes within seconds; a half-written key keeps
    /// the last good pair; a plaintext client is counted.
    #[tokio::test]
    async fn the_certificate_follows_its_files_and_plaintext_is_counted() {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
            client_ca: None,
        };
        let first = write_pair(&files);
        let config = server_config(&files).unwrap();
        let echo = crate::echo::spawn_tls(SocketAddr::from(([127, 0, 0, 1], 0)), "e", config)
            .await
            .unwrap();
        assert_eq!(served_cert(echo.addr, &[&first]).await, first);

        let second = write_pair(&files);
        let both = [&first, &second];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while served_cert(echo.addr, &both).await != second {
            assert!(tokio::time::Instant::now() < deadline, "not reloaded");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        std::fs::write(
            &files.key,
            "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49",
        )
        .unwrap();
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(served_cert(echo.addr, &both).await, second);

        assert_eq!(echo.plaintext_connections(), 0);
        let mut tcp = TcpStream::connect(echo.addr).await.unwrap();
        tcp.write_all(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n")
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while echo.plaintext_connections() != 1 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "plaintext not counted"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
