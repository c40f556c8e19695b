//! PEM files to rustls values, for both ends: certificates, private keys, trust roots. TLS 1.3
//! only, with the `ring` provider the module already uses.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;
use std::path::Path;
use std::sync::Arc;

/// The crypto provider both ends use.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The versions both ends accept: TLS 1.3 alone.
pub const VERSIONS: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// Every certificate in a PEM file; an error names the file and says what was expected.
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cannot read certificates from {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{} holds no PEM certificate (\"BEGIN CERTIFICATE\")",
            path.display()
        ));
    }
    Ok(certs)
}

/// The private key in a PEM file.
pub fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| format!("cannot read a PEM private key from {}: {e}", path.display()))
}

/// A trust store of the CA certificates in a PEM file.
pub fn roots(path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for c in certificates(path)? {
        roots
            .add(c)
            .map_err(|e| format!("{}: not a usable CA certificate: {e}", path.display()))?;
    }
    Ok(roots)
}
