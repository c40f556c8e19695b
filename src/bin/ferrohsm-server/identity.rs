//! Who a client is: the names in its certificate (subject common name, DNS subject
//! alternative names), and a certificate verifier that logs the certificates it refuses.

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use std::sync::Arc;
use x509_cert::der::Decode;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::Certificate;

/// The subject (RFC 4514) and the names a `[[client]]` identity may match.
pub struct Names {
    pub subject: String,
    pub names: Vec<String>,
}

pub fn names(der: &[u8]) -> Names {
    let Ok(cert) = Certificate::from_der(der) else {
        return Names {
            subject: "<unreadable certificate>".into(),
            names: Vec::new(),
        };
    };
    let tbs = &cert.tbs_certificate;
    let mut names = Vec::new();
    for rdn in tbs.subject.0.iter() {
        for atv in rdn.0.iter() {
            if let Some(cn) = atv.to_string().strip_prefix("CN=") {
                names.push(cn.to_string());
            }
        }
    }
    for ext in tbs.extensions.iter().flatten() {
        if ext.extn_id.to_string() == "2.5.29.17" {
            if let Ok(san) = SubjectAltName::from_der(ext.extn_value.as_bytes()) {
                for n in san.0 {
                    if let GeneralName::DnsName(d) = n {
                        names.push(d.to_string());
                    }
                }
            }
        }
    }
    Names {
        subject: tbs.subject.to_string(),
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
                let serial = Certificate::from_der(end_entity)
                    .map(|c| c.tbs_certificate.serial_number.to_string())
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
