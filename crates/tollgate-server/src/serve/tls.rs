//! TLS for `tollgate serve`'s listeners (`tls_cert`, `tls_key`): rustls
//! with the ring provider, HTTP/1.1. The certificate and key are read at
//! start (a bad pair stops the server, exit 64) and again on SIGHUP: a
//! good new pair serves every connection made from then on, a bad one is
//! logged and the old pair kept, so a renewal that went wrong never takes
//! the server down.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

/// How long a client may take over its TLS handshake: a few round trips
/// of a slow mobile network, with room to spare.
pub(super) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// TLS handshakes in progress at most, per listener: a connection past it
/// is closed at once (each costs ~11 KB and a descriptor until it
/// finishes or times out).
const MAX_HANDSHAKES: usize = 1024;

/// Of those, at most this many from one client address (IPv6 by its /64,
/// which one host usually has whole): idle connections from one host
/// cannot take another's turn. A handshake takes a round trip or two, so
/// even a busy NAT rarely has more than a few in progress.
pub(super) const MAX_HANDSHAKES_PER_ADDRESS: usize = 64;

/// One listener's handshakes in progress: in all, and per client address.
#[derive(Debug)]
pub(super) struct Handshakes {
    all: Arc<tokio::sync::Semaphore>,
    per_address: Mutex<HashMap<IpAddr, usize>>,
}

/// One handshake's place in its listener's [`Handshakes`]; freed on drop.
#[derive(Debug)]
pub(super) struct Handshake {
    _place: tokio::sync::OwnedSemaphorePermit,
    pool: Arc<Handshakes>,
    address: IpAddr,
}

impl Handshakes {
    pub(super) fn new() -> Arc<Handshakes> {
        Arc::new(Handshakes {
            all: Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES)),
            per_address: Mutex::default(),
        })
    }

    fn per_address(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.per_address
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A place for a handshake from `peer`, or `None` when the listener
    /// or that address has no more.
    pub(super) fn take(self: &Arc<Self>, peer: IpAddr) -> Option<Handshake> {
        let address = address_of(peer);
        let mut counts = self.per_address();
        if counts
            .get(&address)
            .is_some_and(|&n| n >= MAX_HANDSHAKES_PER_ADDRESS)
        {
            return None;
        }
        // The listener's place first: an address refused for want of one
        // leaves no entry behind (else every new address would add one).
        let place = self.all.clone().try_acquire_owned().ok()?;
        *counts.entry(address).or_default() += 1;
        Some(Handshake {
            _place: place,
            pool: self.clone(),
            address,
        })
    }
}

impl Drop for Handshake {
    fn drop(&mut self) {
        let mut counts = self.pool.per_address();
        if let Some(count) = counts.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.address);
            }
        }
    }
}

/// The address a client is counted by: an IPv4 address, an IPv6 /64 (an
/// IPv4-mapped one as IPv4).
fn address_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshakes_are_capped_per_address_and_freed_on_drop() {
        let pool = Handshakes::new();
        let one: IpAddr = [192, 0, 2, 1].into();
        let taken: Vec<_> = (0..MAX_HANDSHAKES_PER_ADDRESS)
            .map(|_| pool.take(one).expect("a place"))
            .collect();
        assert!(pool.take(one).is_none());
        // Another address, and another host of the same /64 is the same.
        assert!(pool.take([192, 0, 2, 2].into()).is_some());
        let v6: IpAddr = "2001:db8::1".parse().expect("v6");
        let _v6: Vec<_> = (0..MAX_HANDSHAKES_PER_ADDRESS)
            .map(|_| pool.take(v6).expect("a place"))
            .collect();
        assert!(pool.take("2001:db8::2".parse().expect("v6")).is_none());
        assert!(pool.take("2001:db8:0:1::1".parse().expect("v6")).is_some());
        drop(taken);
        assert!(pool.take(one).is_some());
        assert_eq!(pool.per_address().get(&one), None, "freed when the last one ends");
    }

    #[test]
    fn a_listener_has_at_most_max_handshakes() {
        let pool = Handshakes::new();
        let places: Vec<_> = (0..MAX_HANDSHAKES as u32)
            .map(|i| pool.take(IpAddr::from(i.to_be_bytes())).expect("a place"))
            .collect();
        assert!(pool.take([10, 9, 9, 9].into()).is_none());
        // Refused for want of a place, new addresses leave nothing behind.
        for i in 0..1000u32 {
            assert!(pool.take(IpAddr::from((0x0a00_0000 + i).to_be_bytes())).is_none());
        }
        assert_eq!(pool.per_address().len(), MAX_HANDSHAKES);
        drop(places);
        assert!(pool.per_address().is_empty());
        assert!(pool.take([10, 9, 9, 9].into()).is_some());
    }
}
