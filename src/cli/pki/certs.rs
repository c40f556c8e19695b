//! The certificates of `ferrohsm-util pki`, made with rcgen: the CA (ECDSA P-256, CA:true,
//! pathlen 0, keyCertSign and cRLSign), and the server and client certificates it signs
//! (ECDSA P-256, serverAuth or clientAuth). Reading an existing CA back checks that it is one
//! and that its key is the one in ca.key; every certificate issued is verified with rustls,
//! as the network service and its clients will verify it, before anything is written.

use super::names::Name;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose, PublicKeyData, SanType, SerialNumber, PKCS_ECDSA_P256_SHA256,
};
use rustls::client::danger::ServerCertVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, UnixTime};
use std::path::Path;
use std::sync::Arc;
use time::{Duration, OffsetDateTime};
use zeroize::Zeroizing;

type Result<T> = std::result::Result<T, String>;

pub const CA_DAYS: u32 = 3650;
pub const LEAF_DAYS: u32 = 365;
/// Validity starts this long before now, so a peer whose clock is a little behind takes a
/// certificate made a moment ago.
const BACKDATE: Duration = Duration::hours(1);

/// A certificate and its key, in PEM.
pub struct Made {
    pub cert_pem: String,
    pub key_pem: Zeroizing<String>,
    pub not_after: OffsetDateTime,
}

/// What a leaf certificate is for.
pub enum Leaf {
    /// Its names: the first is the common name; all are subject alternative names.
    Server(Vec<Name>),
    /// Its identity: the common name and the one DNS subject alternative name.
    Client(String),
}

fn fresh_key() -> Result<KeyPair> {
    KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(|e| format!("cannot make a key: {e}"))
}

/// 16 random bytes, positive and of fixed length (RFC 5280 allows 20): serials never repeat
/// across CAs made on different hosts, and say nothing about how many were issued.
fn serial() -> Result<SerialNumber> {
    let mut s = [0u8; 16];
    getrandom::fill(&mut s).map_err(|e| format!("no random numbers from the system: {e}"))?;
    s[0] = (s[0] & 0x7f) | 0x40;
    Ok(SerialNumber::from_slice(&s))
}

fn params(common_name: &str, days: u32) -> Result<CertificateParams> {
    let now = OffsetDateTime::now_utc();
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    p.distinguished_name = dn;
    p.not_before = now - BACKDATE;
    p.not_after = now + Duration::days(days.into());
    p.serial_number = Some(serial()?);
    Ok(p)
}

fn made(cert: rcgen::Certificate, key: &KeyPair, not_after: OffsetDateTime) -> Made {
    Made {
        cert_pem: cert.pem(),
        key_pem: Zeroizing::new(key.serialize_pem()),
        not_after,
    }
}

/// A new CA named `name`, valid for `days`.
pub fn make_ca(name: &str, days: u32) -> Result<Made> {
    if name.trim().is_empty() || name.chars().count() > 64 {
        return Err(format!(
            "CA name {name:?}: give 1 to 64 characters (a common name), such as \"signers CA\""
        ));
    }
    let key = fresh_key()?;
    let mut p = params(name, days)?;
    // No intermediate CA below it: it signs only the service's own certificates.
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = p
        .self_signed(&key)
        .map_err(|e| format!("cannot make the CA certificate: {e}"))?;
    Ok(made(cert, &key, p.not_after))
}

/// The CA of a directory, ready to sign.
pub struct Ca {
    der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
    not_after: OffsetDateTime,
}

/// Reads `ca.pem` and `ca.key` of `dir`.
pub fn load_ca(dir: &Path) -> Result<Ca> {
    let (cert_path, key_path) = super::files::pair(dir, "ca");
    let init = format!("make it with `ferrohsm-util pki init-ca --dir {}`", dir.display());
    let read = |p: &Path| match std::fs::read(p) {
        Ok(b) => Ok(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "{} is missing: no CA in {}; {init}",
            p.display(),
            dir.display()
        )),
        Err(e) => Err(format!("cannot read {}: {e}", p.display())),
    };
    let cert_bytes = read(&cert_path)?;
    let der = CertificateDer::from_pem_slice(&cert_bytes)
        .map_err(|e| format!("{} holds no PEM certificate ({e}); {init}", cert_path.display()))?;
    let (_, x509) = x509_parser::parse_x509_certificate(&der).map_err(|e| {
        format!(
            "{} is not a readable certificate ({e}); {init}",
            cert_path.display()
        )
    })?;
    let is_ca = matches!(x509.basic_constraints(), Ok(Some(bc)) if bc.value.ca);
    let signs = match x509.key_usage() {
        Ok(Some(ku)) => ku.value.key_cert_sign(),
        Ok(None) => true,
        Err(_) => false,
    };
    if !is_ca || !signs {
        return Err(format!(
            "{} is not a CA certificate (it may not sign certificates); {init}",
            cert_path.display()
        ));
    }
    let key_pem = Zeroizing::new(
        String::from_utf8(read(&key_path)?)
            .map_err(|_| format!("{} is not a PEM key", key_path.display()))?,
    );
    let key = KeyPair::from_pem(&key_pem).map_err(|e| {
        format!(
            "{} is not a PEM private key rcgen reads ({e})",
            key_path.display()
        )
    })?;
    if key.subject_public_key_info() != x509.public_key().raw {
        return Err(format!(
            "{} is not the key of {}: put the two files of one CA together",
            key_path.display(),
            cert_path.display()
        ));
    }
    let not_after = OffsetDateTime::from_unix_timestamp(x509.validity().not_after.timestamp())
        .map_err(|e| format!("{}: its expiry date is out of range ({e})", cert_path.display()))?;
    if not_after <= OffsetDateTime::now_utc() {
        return Err(format!(
            "the CA of {} expired on {}: make a new one (`ferrohsm-util pki init-ca --dir {} --force`) and issue every certificate again",
            dir.display(),
            not_after.date(),
            dir.display()
        ));
    }
    let issuer = Issuer::from_ca_cert_der(&der, key)
        .map_err(|e| format!("cannot use {} as an issuer: {e}", cert_path.display()))?;
    Ok(Ca {
        der: der.into_owned(),
        issuer,
        not_after,
    })
}

/// A server or client certificate signed by `ca`, valid for `days`.
pub fn issue(ca: &Ca, leaf: &Leaf, days: u32) -> Result<Made> {
    let common_name = match leaf {
        Leaf::Server(names) => names[0].to_string(),
        Leaf::Client(identity) => identity.clone(),
    };
    let mut p = params(&common_name, days)?;
    if p.not_after > ca.not_after {
        let left = (ca.not_after - OffsetDateTime::now_utc()).whole_days();
        return Err(format!(
            "the CA expires on {}, before the {days} days asked: give --days {left} or less, or make a new CA",
            ca.not_after.date()
        ));
    }
    p.is_ca = IsCa::ExplicitNoCa;
    p.use_authority_key_identifier_extension = true;
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let ia5 = |s: &str| s.to_string().try_into().map_err(|e| format!("{s:?}: {e}"));
    match leaf {
        Leaf::Server(names) => {
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            for n in names {
                p.subject_alt_names.push(match n {
                    Name::Dns(d) => SanType::DnsName(ia5(d)?),
                    Name::Ip(ip) => SanType::IpAddress(*ip),
                });
            }
        }
        Leaf::Client(identity) => {
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            p.subject_alt_names = vec![SanType::DnsName(ia5(identity)?)];
        }
    }
    let key = fresh_key()?;
    let cert = p
        .signed_by(&key, &ca.issuer)
        .map_err(|e| format!("cannot sign the certificate: {e}"))?;
    check(ca, leaf, cert.der())?;
    Ok(made(cert, &key, p.not_after))
}

/// Verifies `der` as rustls will at the handshake: against the CA alone, for each server
/// name, or as a client certificate.
fn check(ca: &Ca, leaf: &Leaf, der: &CertificateDer<'_>) -> Result<()> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(ca.der.clone())
        .map_err(|e| format!("rustls refuses ca.pem as a trust anchor: {e}"))?;
    let roots = Arc::new(roots);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let now = UnixTime::now();
    let refused = |e: rustls::Error| {
        format!(
            "the new certificate does not verify against ca.pem ({e}); nothing was written. \
             A CA not made by `ferrohsm-util pki init-ca` may need its own tools"
        )
    };
    match leaf {
        Leaf::Server(names) => {
            let v = rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| format!("cannot set up the check: {e}"))?;
            for n in names {
                v.verify_server_cert(der, &[], &n.server_name(), &[], now)
                    .map_err(refused)?;
            }
        }
        Leaf::Client(_) => {
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| format!("cannot set up the check: {e}"))?;
            v.verify_client_cert(der, &[], now).map_err(refused)?;
        }
    }
    Ok(())
}
