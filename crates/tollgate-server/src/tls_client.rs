//! The TLS client set-up shared by the command line's https:// servers
//! (`--ca-file`) and the waiting rooms' https:// upstreams
//! (`upstream_ca`, a client certificate): rustls with the ring provider,
//! trusting the system's roots and a CA file's certificates.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Whether `e` failed on the server's certificate (unknown issuer, wrong
/// name, expired): the set-up, not the network.
pub(crate) fn untrusted(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        // (An io::Error's source() skips the error it wraps: look inside.)
        let inner = c
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|i| i.downcast_ref::<rustls::Error>());
        if let Some(rustls::Error::InvalidCertificate(_)) =
            inner.or_else(|| c.downcast_ref::<rustls::Error>())
        {
            return true;
        }
        // Some layers hand their cause on boxed, which no downcast sees
        // through: rustls's own wording for the same error.
        if c.to_string().contains("invalid peer certificate") {
            return true;
        }
        cause = c.source();
    }
    false
}

/// A file a setting names: the setting's name and the path.
pub(crate) type Named<'a> = (&'a str, &'a Path);

/// A client configuration trusting the system's roots and, if given, the
/// PEM certificates of `ca` (the name its setting goes by, and its file),
/// presenting `client` (the names and files of a PEM chain and its key)
/// to a server that asks. A file that cannot be used is an error naming
/// its setting.
pub(crate) fn client_config(
    ca: Option<Named<'_>>,
    client: Option<(Named<'_>, Named<'_>)>,
) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    let mut pinned = Vec::new();
    // Unreadable system certificates are skipped (what is left may still
    // do, and the CA file may be all that is needed).
    let (found, _) = roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some((name, path)) = ca {
        let certs = pem_certs(name, path)?;
        for cert in &certs {
            roots
                .add(cert.clone())
                .map_err(|e| format!("{name} {}: {e}", path.display()))?;
        }
        pinned = certs;
    } else if found == 0 {
        tracing::debug!("no system root certificates found");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    // (Without a CA file, as before: a verifier over no roots at all
    // cannot be built, and then every certificate is untrusted anyway.)
    let builder = if pinned.is_empty() {
        builder.with_root_certificates(roots)
    } else {
        let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| format!("TLS: {e}"))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(CaFileVerifier { webpki, pinned }))
    };
    match client {
        None => Ok(builder.with_no_client_auth()),
        Some(((cert_name, cert_path), (key_name, key_path))) => {
            let chain = pem_certs(cert_name, cert_path)?;
            let key = PrivateKeyDer::from_pem_file(key_path)
                .map_err(|e| format!("{key_name} {}: {e}", key_path.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("{cert_name} and {key_name}: {e}"))
        }
    }
}

/// The PEM certificates of `path` (setting `name`): at least one.
fn pem_certs(name: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{name} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{name} {}: no PEM certificate in it", path.display()));
    }
    Ok(certs)
}

/// The usual checks (a chain to a trusted root, the name, the dates),
/// and one exception: a server certificate that is itself in the CA file
/// but marked a CA, as `openssl req -x509` makes them by default
/// (`CA:TRUE`), which webpki refuses as a server's (`CaUsedAsEndEntity`).
/// The user named that very certificate, so it is trusted as it is, once
/// its dates (webpki checks them before the CA mark, so a refusal for
/// the mark means the dates passed) and its names are checked; the
/// handshake's signatures are checked as for any other.
#[derive(Debug)]
struct CaFileVerifier {
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    /// The certificates of the CA file, to compare with the server's.
    pinned: Vec<rustls::pki_types::CertificateDer<'static>>,
}

impl rustls::client::danger::ServerCertVerifier for CaFileVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        intermediates: &[rustls::pki_types::CertificateDer<'_>],
        server_name: &rustls::pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        use rustls::{CertificateError, Error};
        match self
            .webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(Error::InvalidCertificate(CertificateError::Other(other)))
                if other.0.downcast_ref::<webpki::Error>() == Some(&webpki::Error::CaUsedAsEndEntity)
                    && self.pinned.iter().any(|c| c.as_ref() == end_entity.as_ref()) =>
            {
                let cert = webpki::EndEntityCert::try_from(end_entity)
                    .map_err(|_| Error::InvalidCertificate(CertificateError::BadEncoding))?;
                cert.verify_is_valid_for_subject_name(server_name)
                    .map_err(|_| Error::InvalidCertificate(CertificateError::NotValidForName))?;
                Ok(rustls::client::danger::ServerCertVerified::assertion())
            }
            answer => answer,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}
