//! TLS for `tollgate serve`'s listeners (`tls_cert`, `tls_key`): rustls
//! with the ring provider, HTTP/1.1. The certificate and key are read at
//! start (a bad pair stops the server, exit 64) and again on SIGHUP: a
//! good new pair serves every connection made from then on, a bad one is
//! logged and the old pair kept, so a renewal that went wrong never takes
//! the server down.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

/// How long a client may take over its TLS handshake.
pub(super) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The listeners' TLS: an acceptor whose certificate can be swapped.
pub(super) struct Tls {
    pub(super) acceptor: TlsAcceptor,
    pair: Arc<Pair>,
}

/// The certificate chain and key in use, and where they are read from.
#[derive(Debug)]
struct Pair {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for Pair {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        )
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads a PEM certificate chain (the server's first) and its PEM private
/// key (PKCS #8, PKCS #1 or SEC1), and checks that they belong together.
fn load(cert: &Path, key: &Path) -> Result<CertifiedKey, String> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("tls_cert {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("tls_cert {}: no PEM certificate in it", cert.display()));
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("tls_key {}: {e}", key.display()))?;
    CertifiedKey::from_der(chain, private, &provider()).map_err(|e| {
        format!(
            "tls_cert {} and tls_key {} do not make a usable pair: {e}",
            cert.display(),
            key.display()
        )
    })
}

impl Tls {
    /// TLS with the pair at `cert` and `key`, or why not.
    pub(super) fn new(cert: &Path, key: &Path) -> Result<Tls, String> {
        let pair = Arc::new(Pair {
            cert: cert.to_owned(),
            key: key.to_owned(),
            current: RwLock::new(Arc::new(load(cert, key)?)),
        });
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_no_client_auth()
            .with_cert_resolver(pair.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            pair,
        })
    }

    /// Reads the pair again: kept if good, else logged and the old one
    /// stays.
    pub(super) fn reload(&self) {
        let pair = &self.pair;
        match load(&pair.cert, &pair.key) {
            Ok(new) => {
                *pair
                    .current
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(new);
                tracing::info!(cert = %pair.cert.display(), "reloaded the TLS certificate");
            }
            Err(e) => {
                tracing::warn!(error = %e, "SIGHUP: the new TLS certificate is not usable; keeping the one in use")
            }
        }
    }
}
