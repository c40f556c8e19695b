//! `migrate-softhsm`: a SoftHSM v2 token (file backend) becomes a ferrohsm token with the same
//! label, serial, PINs and objects, written in one transaction, every private key checked by
//! a signature verified with the token's own public key object.

use clap::Args;
use cryptoki_sys::*;
use ferrohsm::cli::module::Result;
use ferrohsm::cli::pin;
use ferrohsm::engine::{PreparedKey, PublicKey};
use ferrohsm::mechanism::{key_model, rsa as rsa_mech, HashAlg};
use ferrohsm::token::attributes::Attributes;
use ferrohsm::token::policy;
use secrecy::ExposeSecret;
use softhsm_compat::{SoftHsmConf, SoftObject, SoftToken, Value};
use std::path::PathBuf;

#[derive(Args)]
pub struct Migrate {
    /// SoftHSM configuration file (default: SOFTHSM2_CONF, ~/.config/softhsm2/softhsm2.conf, /etc/softhsm/softhsm2.conf).
    #[arg(long, conflicts_with = "tokendir")]
    conf: Option<PathBuf>,
    /// SoftHSM token directory (instead of reading it from the configuration).
    #[arg(long)]
    tokendir: Option<PathBuf>,
    /// Label of the SoftHSM token to migrate.
    #[arg(long = "token", conflicts_with = "serial")]
    token: Option<String>,
    /// Serial of the SoftHSM token to migrate.
    #[arg(long)]
    serial: Option<String>,
    /// User PIN (else $FERROHSM_PIN, else a prompt); it stays the user PIN.
    #[arg(long)]
    pin: Option<String>,
    /// SO PIN (else $FERROHSM_SO_PIN, else a prompt); it stays the SO PIN.
    #[arg(long = "so-pin")]
    so_pin: Option<String>,
    /// Read, decrypt and check everything, write nothing.
    #[arg(long = "dry-run")]
    dry_run: bool,
}

/// A SoftHSM attribute value in PKCS#11's native layout; an attribute template
/// (`CKA_WRAP_TEMPLATE`, ...) in the nested form ferrohsm keeps it in.
fn native(v: &Value) -> Vec<u8> {
    match v {
        Value::Bool(b) => vec![*b as u8],
        Value::Ulong(u) => (*u as CK_ULONG).to_ne_bytes().to_vec(),
        Value::Bytes(b) => b.to_vec(),
        Value::MechSet(m) => m.iter().flat_map(|x| (*x as CK_ULONG).to_ne_bytes()).collect(),
        Value::Map(m) => {
            let nested = Attributes::from_pairs(
                m.iter()
                    .map(|a| (a.attr_type as CK_ATTRIBUTE_TYPE, native(&a.value))),
            );
            nested.to_bytes().to_vec()
        }
    }
}

/// Why a key is below the sizes ferrohsm takes (`rsa::keys::check_modulus_bits`,
/// `key_model::check_secret_len`), if it is. Such a key is migrated as it is, with a note: a
/// migration loses no key, and the operator decides (an extractable one can still be wrapped
/// out). Creating, importing or unwrapping it again is refused; HMAC and `C_DigestKey` refuse
/// a short secret, whose every MAC or digest would give it away; a small RSA key still signs.
fn below_minimum(a: &Attributes) -> Option<String> {
    match (a.class(), a.key_type()) {
        (Some(CKO_SECRET_KEY), _) => {
            let len = a.get(CKA_VALUE).map_or(0, <[u8]>::len);
            key_model::check_secret_len(len, "secret").err().map(|_| {
                format!(
                    "a secret key of {len} bytes (id {:02x?}), migrated as it is: ferrohsm takes secret keys of {} bytes or more, and refuses HMAC and C_DigestKey with this one (CKR_KEY_SIZE_RANGE); replace it with a longer key",
                    a.get(CKA_ID).unwrap_or(&[]),
                    key_model::MIN_SECRET_LEN
                )
            })
        }
        (Some(CKO_PUBLIC_KEY | CKO_PRIVATE_KEY), Some(CKK_RSA)) => {
            let n = a.get(CKA_MODULUS).unwrap_or(&[]);
            let e = a.get(CKA_PUBLIC_EXPONENT).unwrap_or(&[]);
            let bits = PublicKey::new(n, e).ok()?.modulus_bits();
            rsa_mech::keys::check_modulus_bits(bits).err().map(|_| {
                format!(
                    "an RSA key of {bits} bits (id {:02x?}), migrated as it is and still usable: ferrohsm makes, imports and unwraps RSA keys of {} bits or more; replace it",
                    a.get(CKA_ID).unwrap_or(&[]),
                    rsa_mech::RSA_MIN_BITS
                )
            })
        }
        _ => None,
    }
}

/// SoftHSM attribute values in PKCS#11's native layout.
fn convert(obj: &SoftObject, dropped: &mut Vec<String>) -> Attributes {
    let mut a = Attributes::new();
    for (t, v) in &obj.attrs {
        let t = *t as CK_ATTRIBUTE_TYPE;
        // SoftHSM writes empty wrap/unwrap templates on every key: an empty template
        // restricts nothing, the same as none.
        if matches!(v, Value::Map(m) if m.is_empty()) {
            continue;
        }
        a.set(t, native(v));
    }
    // Attributes ferrohsm does not keep for this class are reported, not carried silently.
    let foreign: Vec<CK_ATTRIBUTE_TYPE> = a
        .iter()
        .map(|(t, _)| t)
        .filter(|t| !policy::valid_for(&a, *t))
        .collect();
    for t in foreign {
        dropped.push(format!(
            "{}: attribute 0x{t:x} (not an attribute of this object class)",
            obj.file.display()
        ));
        a.remove(t);
    }
    // ferrohsm keeps every token key private (policy::check_invariants): a SoftHSM key with
    // CKA_PRIVATE false is carried as private, and said so.
    if policy::check_invariants(&a).is_err() {
        a.set_bool(CKA_PRIVATE, true);
        dropped.push(format!(
            "{}: CKA_PRIVATE false on a key (ferrohsm keeps token keys private: it is private now; log in to use it)",
            obj.file.display()
        ));
    }
    a
}

/// Signs with the migrated private key and verifies with the token's public key object of
/// the same id (or the key's own public half when the token has none).
fn check_key(private: &Attributes, all: &[Attributes]) -> std::result::Result<(), String> {
    let key = PreparedKey::new(&rsa_mech::keys::components(private))
        .map_err(|e| format!("private key unusable: {e}"))?;
    let id = private.get(CKA_ID).unwrap_or(&[]);
    let public = all
        .iter()
        .find(|o| o.class() == Some(CKO_PUBLIC_KEY) && o.get(CKA_ID) == Some(id))
        .unwrap_or(private);
    let pk = PublicKey::new(
        public.get(CKA_MODULUS).unwrap_or(&[]),
        public.get(CKA_PUBLIC_EXPONENT).unwrap_or(&[]),
    )
    .map_err(|e| format!("public key unusable: {e}"))?;
    let mech = rsa_mech::Scheme::HashPkcs(HashAlg::Sha256);
    let hash = HashAlg::Sha256.digest(b"ferrohsm migration check");
    let sig = rsa_mech::sign(&mech, &key, &hash).map_err(|e| format!("signing failed: {e}"))?;
    rsa_mech::verify(&mech, &pk, &hash, &sig)
        .map_err(|_| "the signature does not verify with the token's public key".to_string())
}

/// `check_key` for EC keys: a signature of the migrated private key verifies with the point
/// of the token's public key object of the same id (or the key's own point).
fn check_ec_key(private: &Attributes, all: &[Attributes]) -> std::result::Result<(), String> {
    use ferrohsm::mechanism::{ec, ec_params};
    let curve = ec::model::curve_of(private).map_err(|e| format!("curve: {e}"))?;
    let key = ec::PrivateKey::from_value(curve, private.get(CKA_VALUE).unwrap_or(&[]))
        .map_err(|e| format!("private key unusable: {e}"))?;
    let id = private.get(CKA_ID).unwrap_or(&[]);
    let public = all
        .iter()
        .find(|o| o.class() == Some(CKO_PUBLIC_KEY) && o.get(CKA_ID) == Some(id))
        .unwrap_or(private);
    let raw = ec_params::unwrap_point(curve, public.get(CKA_EC_POINT).unwrap_or(&[]))
        .map_err(|e| format!("public key unusable: {e}"))?;
    let pk = ec::PublicKey::from_point(curve, &raw).map_err(|e| format!("public key unusable: {e}"))?;
    let hash = HashAlg::Sha256.digest(b"ferrohsm migration check");
    let sig = key.sign(&hash).map_err(|e| format!("signing failed: {e}"))?;
    pk.verify(&hash, &sig)
        .map_err(|_| "the signature does not verify with the token's public key".to_string())
}

pub fn run(a: Migrate) -> Result<()> {
    let tokendir = match (&a.tokendir, &a.conf) {
        (Some(d), _) => d.clone(),
        (None, Some(c)) => SoftHsmConf::load(c).map_err(|e| e.to_string())?.tokendir,
        (None, None) => {
            let c =
                SoftHsmConf::locate().ok_or("no SoftHSM configuration found: give --conf or --tokendir")?;
            SoftHsmConf::load(&c).map_err(|e| e.to_string())?.tokendir
        }
    };
    let tokens = SoftToken::all(&tokendir).map_err(|e| e.to_string())?;
    let token = tokens
        .into_iter()
        .find(|t| {
            a.token.as_deref().is_none_or(|l| t.label == l)
                && a.serial.as_deref().is_none_or(|s| t.serial == s)
        })
        .ok_or_else(|| {
            format!(
                "no SoftHSM token matches in {}; check --token/--serial",
                tokendir.display()
            )
        })?;
    let so = pin::get(a.so_pin, "FERROHSM_SO_PIN", "SoftHSM SO PIN")?;
    let user = if token.has_user_pin() {
        Some(pin::get(a.pin, "FERROHSM_PIN", "SoftHSM user PIN")?)
    } else {
        None
    };
    // The SO PIN must be right too: it becomes ferrohsm's SO PIN.
    token
        .master_key(so.expose_secret().as_bytes(), true)
        .map_err(|e| format!("SO PIN: {e}"))?;
    let master = match &user {
        Some(u) => token
            .master_key(u.expose_secret().as_bytes(), false)
            .map_err(|e| format!("user PIN: {e}"))?,
        None => token
            .master_key(so.expose_secret().as_bytes(), true)
            .map_err(|e| e.to_string())?,
    };
    let mut objects = vec![];
    let mut notes = vec![];
    for o in &token.objects {
        let o = o.as_ref().map_err(|e| e.to_string())?;
        let plain = SoftToken::decrypt(o, &master).map_err(|e| e.to_string())?;
        let attrs = convert(&plain, &mut notes);
        if let Some(why) = below_minimum(&attrs) {
            notes.push(format!("{}: {why}", o.file.display()));
        }
        // No checksum guards SoftHSM's files: an object without a class is a damaged one.
        if attrs.class().is_none() {
            return Err(format!(
                "{} has no CKA_CLASS: the file is damaged; nothing was written",
                o.file.display()
            ));
        }
        objects.push(attrs);
    }
    // EC keys get the encodings ferrohsm keeps (CKA_EC_PARAMS as the OID, CKA_EC_POINT as the
    // DER OCTET STRING, CKA_PUBLIC_KEY_INFO), their material checked as C_CreateObject does.
    for o in objects.iter_mut() {
        if matches!(o.key_type(), Some(CKK_EC | CKK_EC_EDWARDS)) {
            ferrohsm::token::object::derive_key_attributes(o).map_err(|e| {
                format!(
                    "EC key with id {:02x?}: {e}; nothing was written",
                    o.get(CKA_ID).unwrap_or(&[])
                )
            })?;
        }
    }
    let mut checked = 0;
    let mut checked_ec = 0;
    // Each private key signs and verifies once here: the long part of a large migration.
    let progress = super::progress::bar(objects.len(), "migrate-softhsm: checking");
    for o in &objects {
        progress.inc(1);
        if o.class() == Some(CKO_PRIVATE_KEY) && matches!(o.key_type(), Some(CKK_EC | CKK_EC_EDWARDS)) {
            check_ec_key(o, &objects).map_err(|e| {
                format!(
                    "private key with id {:02x?}: {e}; nothing was written",
                    o.get(CKA_ID).unwrap_or(&[])
                )
            })?;
            checked_ec += 1;
        }
        if o.class() == Some(CKO_PRIVATE_KEY) && o.key_type() == Some(CKK_RSA) {
            check_key(o, &objects).map_err(|e| {
                format!(
                    "private key with id {:02x?}: {e}; nothing was written",
                    o.get(CKA_ID).unwrap_or(&[])
                )
            })?;
            checked += 1;
        }
    }
    progress.finish_and_clear();
    for n in &notes {
        eprintln!("note: {n}");
    }
    let summary = format!(
        "{} objects ({checked} RSA private keys signed and verified{}) from SoftHSM token {:?} (serial {})",
        objects.len(),
        if checked_ec > 0 {
            format!(", {checked_ec} EC private keys signed and verified")
        } else {
            String::new()
        },
        token.label,
        token.serial
    );
    if a.dry_run {
        println!("Dry run: would migrate {summary}.");
        return Ok(());
    }
    let config = ferrohsm::config::Config::load().map_err(|e| e.to_string())?;
    let store = ferrohsm::store::open_sealed(&config)?;
    // What is secret in each object is the token layer's decision, as for any token object.
    let records: Vec<_> = objects.iter().map(ferrohsm::token::records::split).collect();
    let mut label = [b' '; 32];
    let n = token.label.len().min(32);
    label[..n].copy_from_slice(&token.label.as_bytes()[..n]);
    match store.import_token(
        &label,
        &token.serial,
        so.expose_secret().as_bytes(),
        user.as_ref().map(|u| u.expose_secret().as_bytes()),
        &records,
    ) {
        Ok(slot) => {
            println!(
                "Migrated {summary} into ferrohsm slot {slot} ({}).",
                store.location()
            );
            Ok(())
        }
        Err(_)
            if ferrohsm::store::Store::tokens(&store).is_ok_and(|ts| {
                ts.iter()
                    .any(|t| String::from_utf8_lossy(&t.serial) == token.serial)
            }) =>
        {
            println!(
                "The token with serial {} already exists in ferrohsm; nothing to do.",
                token.serial
            );
            Ok(())
        }
        Err(e) => Err(format!("migration failed, nothing was written: {e}")),
    }
}
