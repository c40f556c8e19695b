//! Who a client is: the names in its certificate (subject common name, DNS subject
//! alternative names), and a certificate verifier that logs the certificates it refuses.

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use std::sync::Arc;
use x509_parser::extensions::GeneralName;
use x509_parser::parse_x509_certificate;

/// The subject (RFC 4514) and the names a `[[client]]` identity may match.
pub struct Names {
    pub subject: String,
    pub names: Vec<String>,
}

pub fn names(der: &[u8]) -> Names {
    let Ok((_, cert)) = parse_x509_certificate(der) else {
        return Names {
            subject: "<unreadable certificate>".into(),
            names: Vec::new(),
        };
    };
    let mut names: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_string))
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            if let GeneralName::DNSName(d) = n {
                names.push(d.to_string());
            }
        }
    }
    Names {
        subject: cert.subject().to_string(),
        names,
    }
}

/// rustls' WebPKI verifier, which logs every certificate it refuses by subject and serial.
#[derive(Debug)]
pub struct NamingVerifier(pub Arc<dyn ClientCertVerifier>);

impl ClientCertVerifier for NamingVerifier {
    fn offer_client_auth(&self) -> bool {
        self.0.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.0.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.0
            .verify_client_cert(end_entity, intermediates, now)
            .inspect_err(|e| {
                let serial = parse_x509_certificate(end_entity)
                    .map(|(_, c)| c.raw_serial_as_string())
                    .unwrap_or_default();
                log::warn!(
                    "client certificate \"{}\" (serial {serial}) refused at the handshake: {e}",
                    names(end_entity).subject
                );
            })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
