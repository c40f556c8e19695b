//! Token management commands: show-slots, init-token, list-objects, import, delete-token,
//! set-pin, rotate-key.

use super::module::{self, explain, Result};
use super::pin;
use clap::Args;
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass};
use cryptoki::session::UserType;
use std::path::{Path, PathBuf};

/// Which token a command acts on.
#[derive(Args, Clone)]
pub struct TokenChoice {
    /// Slot number.
    #[arg(long)]
    pub(super) slot: Option<u64>,
    /// Token label.
    #[arg(long = "token")]
    pub(super) token: Option<String>,
    /// Token serial number.
    #[arg(long)]
    pub(super) serial: Option<String>,
}

impl TokenChoice {
    pub(super) fn find(&self, p: &cryptoki::context::Pkcs11) -> Result<cryptoki::slot::Slot> {
        module::find_token(p, self.slot, self.token.as_deref(), self.serial.as_deref())
    }
}

pub fn show_slots(m: Option<&Path>) -> Result<()> {
    let p = module::load(m)?;
    for s in p.get_all_slots().map_err(|e| explain("cannot list slots", e))? {
        let t = p
            .get_token_info(s)
            .map_err(|e| explain("cannot read token info", e))?;
        println!("Slot {}", s.id());
        if t.token_initialized() {
            println!("    Token label:        {}", t.label());
            println!("    Serial number:      {}", t.serial_number());
            println!("    Initialized:        yes");
            println!(
                "    User PIN init.:     {}",
                if t.user_pin_initialized() { "yes" } else { "no" }
            );
            if t.user_pin_locked() {
                println!("    User PIN:           locked");
            }
        } else {
            println!("    Token label:        ");
            println!("    Initialized:        no");
        }
    }
    Ok(())
}

#[derive(Args)]
pub struct InitToken {
    /// Initialise the token in this slot.
    #[arg(long, conflicts_with_all = ["free", "token"])]
    slot: Option<u64>,
    /// Initialise the free (uninitialised) token.
    #[arg(long, conflicts_with = "token")]
    free: bool,
    /// Re-initialise the token with this label (needs its SO PIN; drops every object).
    #[arg(long = "token")]
    token: Option<String>,
    /// Label of the new token (at most 32 characters).
    #[arg(long)]
    label: String,
    /// SO PIN (else $FERROHSM_SO_PIN, else a prompt).
    #[arg(long = "so-pin")]
    so_pin: Option<String>,
    /// User PIN (else $FERROHSM_PIN, else a prompt).
    #[arg(long)]
    pin: Option<String>,
}

pub fn init_token(m: Option<&Path>, a: InitToken) -> Result<()> {
    use secrecy::ExposeSecret;
    if a.label.len() > 32 {
        return Err(format!("the label {:?} is longer than 32 characters", a.label));
    }
    let path = module::module_path(m)?;
    let p = module::load(Some(&path))?;
    let slot = match (a.slot, a.free, &a.token) {
        (Some(n), _, _) => module::find_token(&p, Some(n), None, None)?,
        (_, _, Some(l)) => module::find_token(&p, None, Some(l), None)?,
        (None, true, None) => module::free_slot(&p)?,
        _ => return Err("say which token: --free, --slot N or --token LABEL".into()),
    };
    let so = pin::get(a.so_pin, "FERROHSM_SO_PIN", "SO PIN")?;
    let user = pin::get(a.pin, "FERROHSM_PIN", "User PIN")?;
    if let Some(f) = module::InitTokenWithPin::find(&path) {
        // One store transaction: an interrupted command leaves no token without a user PIN.
        f.call(slot, so.expose_secret(), &a.label, user.expose_secret())
            .map_err(|e| explain("cannot initialise the token", e))?;
    } else {
        eprintln!(
            "ferrohsm-util: warning: {} has no FERROHSM_InitTokenWithPIN, so the token is initialised \
             in two steps (C_InitToken, then C_InitPIN); if this command is interrupted between them, \
             run it again to set the user PIN",
            path.display()
        );
        p.init_token(slot, &so, &a.label)
            .map_err(|e| explain("cannot initialise the token", e))?;
        let s = p
            .open_rw_session(slot)
            .map_err(|e| explain("cannot open a session", e))?;
        s.login(UserType::So, Some(&so))
            .map_err(|e| explain("SO login failed", e))?;
        s.init_pin(&user)
            .map_err(|e| explain("cannot set the user PIN", e))?;
        s.logout().ok();
    }
    println!("The token has been initialized on slot {}", slot.id());
    Ok(())
}

#[derive(Args)]
pub struct ListObjects {
    #[command(flatten)]
    which: TokenChoice,
    /// User PIN, to list private objects too (else $FERROHSM_PIN; without it public objects only).
    #[arg(long)]
    pin: Option<String>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn list_objects(m: Option<&Path>, a: ListObjects) -> Result<()> {
    let p = module::load(m)?;
    let slot = a.which.find(&p)?;
    let s = p
        .open_ro_session(slot)
        .map_err(|e| explain("cannot open a session", e))?;
    if let Some(pin) = a.pin.or_else(|| std::env::var("FERROHSM_PIN").ok()) {
        s.login(UserType::User, Some(&cryptoki::types::AuthPin::new(pin.into())))
            .map_err(|e| explain("login failed", e))?;
    }
    for h in s.find_objects(&[]).map_err(|e| explain("search failed", e))? {
        let attrs = s
            .get_attributes(
                h,
                &[
                    AttributeType::Class,
                    AttributeType::KeyType,
                    AttributeType::Id,
                    AttributeType::Label,
                    AttributeType::Modulus,
                    AttributeType::EcParams,
                ],
            )
            .map_err(|e| explain("cannot read attributes", e))?;
        let (mut class, mut kind, mut id, mut label, mut bits) =
            (String::new(), String::new(), String::new(), String::new(), 0);
        let mut curve = None;
        for at in attrs {
            match at {
                Attribute::Class(c) => class = c.to_string(),
                Attribute::KeyType(k) => kind = k.to_string(),
                Attribute::Id(v) => id = hex(&v),
                Attribute::Label(v) => label = String::from_utf8_lossy(&v).into_owned(),
                Attribute::Modulus(n) => bits = crate::engine::bit_len(&n),
                Attribute::EcParams(v) => curve = crate::mechanism::ec_params::parse_ec_params(&v).ok(),
                _ => {}
            }
        }
        let size = match curve {
            Some(c) => format!(" {}", c.name()),
            None if bits > 0 => format!(" {bits} bits"),
            None => String::new(),
        };
        println!("{class}\t{kind}{size}\tid={id}\tlabel={label}");
    }
    Ok(())
}

#[derive(Args)]
pub struct Import {
    #[command(flatten)]
    which: TokenChoice,
    /// The key file: RSA in PKCS#8 or PKCS#1; P-256/P-384/P-521 in PKCS#8 or SEC1; Ed25519
    /// and Ed448 in PKCS#8; PEM or DER.
    file: PathBuf,
    /// CKA_ID in hex (an even number of digits).
    #[arg(long)]
    id: String,
    /// CKA_LABEL.
    #[arg(long)]
    label: String,
    /// User PIN (else $FERROHSM_PIN, else a prompt).
    #[arg(long)]
    pin: Option<String>,
    /// Import even if a key with this id exists.
    #[arg(long)]
    force: bool,
    /// Import the private key only.
    #[arg(long = "no-public-key")]
    no_public_key: bool,
}

/// Reads an RSA private key in any of the four usual encodings.
pub fn read_key(path: &Path) -> Result<rsa::PrivateKey> {
    use rsa::pkcs1::DecodeRsaPrivateKey;
    use rsa::pkcs8::DecodePrivateKey;
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if let Ok(text) = std::str::from_utf8(&bytes) {
        if let Ok(k) = rsa::PrivateKey::from_pkcs8_pem(text) {
            return Ok(k);
        }
        if let Ok(k) = rsa::PrivateKey::from_pkcs1_pem(text) {
            return Ok(k);
        }
    }
    rsa::PrivateKey::from_pkcs8_der(&bytes)
        .or_else(|_| rsa::PrivateKey::from_pkcs1_der(&bytes))
        .map_err(|_| {
            format!(
                "{} is not an unencrypted RSA private key in PKCS#8 or PKCS#1 (PEM or DER)",
                path.display()
            )
        })
}

fn be(v: &rsa::BoxedUint) -> Vec<u8> {
    let b = v.to_be_bytes();
    let first = b.iter().position(|&x| x != 0).unwrap_or(b.len());
    b[first..].to_vec()
}

pub fn import(m: Option<&Path>, a: Import) -> Result<()> {
    let bytes = std::fs::read(&a.file).map_err(|e| format!("cannot read {}: {e}", a.file.display()))?;
    let Some(key) = super::ec_import::read_ec_key(&bytes) else {
        let key = read_key(&a.file)?;
        let p = module::load(m)?;
        let slot = a.which.find(&p)?;
        let user = pin::get(a.pin, "FERROHSM_PIN", "User PIN")?;
        import_key(&p, slot, &user, &key, &a.id, a.label, a.force, a.no_public_key)?;
        println!("The key pair has been imported.");
        return Ok(());
    };
    let p = module::load(m)?;
    let slot = a.which.find(&p)?;
    let user = pin::get(a.pin, "FERROHSM_PIN", "User PIN")?;
    let s = user_session_for_import(&p, slot, &user, &a.id, a.force)?;
    super::ec_import::store(&s, &key, parse_hex(&a.id)?, a.label.into_bytes(), a.no_public_key)?;
    println!("The {} key pair has been imported.", key.curve);
    Ok(())
}

/// A logged-in read-write session, refusing an `id` already taken unless `force`.
fn user_session_for_import(
    p: &cryptoki::context::Pkcs11,
    slot: cryptoki::slot::Slot,
    user: &cryptoki::types::AuthPin,
    id_hex: &str,
    force: bool,
) -> Result<cryptoki::session::Session> {
    let id = parse_hex(id_hex)?;
    let s = p
        .open_rw_session(slot)
        .map_err(|e| explain("cannot open a session", e))?;
    s.login(UserType::User, Some(user))
        .map_err(|e| explain("login failed", e))?;
    let existing = s
        .find_objects(&[Attribute::Id(id)])
        .map_err(|e| explain("search failed", e))?;
    if !existing.is_empty() && !force {
        return Err(format!(
            "an object with id {id_hex} exists; use another --id or --force"
        ));
    }
    Ok(s)
}

/// Stores an RSA key pair as token objects (the public key unless `no_public_key`).
#[allow(clippy::too_many_arguments)]
pub fn import_key(
    p: &cryptoki::context::Pkcs11,
    slot: cryptoki::slot::Slot,
    user: &cryptoki::types::AuthPin,
    key: &rsa::PrivateKey,
    id_hex: &str,
    label: String,
    force: bool,
    no_public_key: bool,
) -> Result<()> {
    use rsa::traits::{PrivateKeyParts, PublicKeyParts};
    let id = parse_hex(id_hex)?;
    let s = p
        .open_rw_session(slot)
        .map_err(|e| explain("cannot open a session", e))?;
    s.login(UserType::User, Some(user))
        .map_err(|e| explain("login failed", e))?;
    let existing = s
        .find_objects(&[Attribute::Id(id.clone())])
        .map_err(|e| explain("search failed", e))?;
    if !existing.is_empty() && !force {
        return Err(format!(
            "an object with id {id_hex} exists; use another --id or --force"
        ));
    }
    let n = be(key.n().as_ref());
    let e = be(key.e());
    let label = label.into_bytes();
    let private = [
        Attribute::Class(ObjectClass::PRIVATE_KEY),
        Attribute::KeyType(KeyType::RSA),
        Attribute::Token(true),
        Attribute::Private(true),
        Attribute::Sensitive(true),
        Attribute::Extractable(false),
        Attribute::Sign(true),
        Attribute::Decrypt(true),
        Attribute::Unwrap(true),
        Attribute::Id(id.clone()),
        Attribute::Label(label.clone()),
        Attribute::Modulus(n.clone()),
        Attribute::PublicExponent(e.clone()),
        Attribute::PrivateExponent(be(key.d())),
        Attribute::Prime1(be(key.primes()[0].as_ref())),
        Attribute::Prime2(be(key.primes()[1].as_ref())),
        Attribute::Exponent1(key.dp().map(be).unwrap_or_default()),
        Attribute::Exponent2(key.dq().map(be).unwrap_or_default()),
        Attribute::Coefficient(key.crt_coefficient().as_ref().map(be).unwrap_or_default()),
    ];
    s.create_object(&private)
        .map_err(|e| explain("cannot store the private key", e))?;
    if !no_public_key {
        let public = [
            Attribute::Class(ObjectClass::PUBLIC_KEY),
            Attribute::KeyType(KeyType::RSA),
            Attribute::Token(true),
            Attribute::Private(false),
            Attribute::Verify(true),
            Attribute::Encrypt(true),
            Attribute::Wrap(true),
            Attribute::Id(id),
            Attribute::Label(label),
            Attribute::Modulus(n),
            Attribute::PublicExponent(e),
        ];
        s.create_object(&public)
            .map_err(|e| explain("cannot store the public key", e))?;
    }
    Ok(())
}

pub fn parse_hex(s: &str) -> Result<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("--id {s:?} must be an even number of hex digits"));
    }
    Ok((0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect())
}

#[derive(Args)]
pub struct DeleteToken {
    #[command(flatten)]
    which: TokenChoice,
    /// SO PIN of the token (else $FERROHSM_SO_PIN, else a prompt).
    #[arg(long = "so-pin")]
    so_pin: Option<String>,
}

/// Deletion is not a PKCS#11 operation: it acts on the configured store directly, after
/// checking the SO PIN.
pub fn delete_token(a: DeleteToken) -> Result<()> {
    let so = pin::get(a.so_pin, "FERROHSM_SO_PIN", "SO PIN")?;
    let (label, slot, path) = delete_from_store(
        a.which.slot,
        a.which.token.as_deref(),
        a.which.serial.as_deref(),
        Some(&so),
    )?;
    println!("The token {label:?} (slot {slot}) has been deleted from {path}.");
    Ok(())
}

/// Removes a token from the configured store, after checking its SO PIN when one is given.
/// Returns its label, slot and the store file.
pub fn delete_from_store(
    slot: Option<u64>,
    label: Option<&str>,
    serial: Option<&str>,
    so_pin: Option<&cryptoki::types::AuthPin>,
) -> Result<(String, u64, String)> {
    use crate::store::{PinOwner, Store};
    use secrecy::ExposeSecret;
    let config = crate::config::Config::load().map_err(|e| e.to_string())?;
    if config.store.backend == "memory" {
        return Err(
            "deleting tokens works on the sqlite and postgres stores; the configured store is in memory"
                .into(),
        );
    }
    let store = crate::store::open_sealed(&config)?;
    let token = stored_token(&store, slot, label, serial)?;
    if let Some(so) = so_pin {
        store
            .login(token.slot_id, PinOwner::So, so.expose_secret().as_bytes())
            .map_err(|e| format!("SO PIN not accepted: {e}"))?;
    }
    store
        .delete_token(token.slot_id)
        .map_err(|e| format!("cannot delete the token: {e}"))?;
    Ok((label_of(&token), token.slot_id, store.location()))
}

fn label_of(t: &crate::store::TokenRecord) -> String {
    String::from_utf8_lossy(&t.label).trim_end().to_string()
}

/// The token of the store that the slot, label or serial names.
pub(super) fn stored_token(
    store: &crate::store::Sealed,
    slot: Option<u64>,
    label: Option<&str>,
    serial: Option<&str>,
) -> Result<crate::store::TokenRecord> {
    use crate::store::Store;
    let tokens = store
        .tokens()
        .map_err(|e| format!("cannot read the store: {e}"))?;
    let serial_of = |t: &crate::store::TokenRecord| String::from_utf8_lossy(&t.serial).trim_end().to_string();
    tokens
        .into_iter()
        .find(|t| {
            slot == Some(t.slot_id)
                || label == Some(label_of(t).as_str())
                || serial == Some(serial_of(t).as_str())
        })
        .ok_or_else(|| "no such token; run show-slots".into())
}

#[derive(Args)]
pub struct RotateKey {
    #[command(flatten)]
    which: TokenChoice,
    /// Prove with the SO PIN instead of the user PIN.
    #[arg(long)]
    so: bool,
    /// The PIN (else $FERROHSM_PIN or $FERROHSM_SO_PIN, else a prompt).
    #[arg(long)]
    pin: Option<String>,
}

/// Replaces the token key without changing a PIN: every object is sealed again under a new
/// key, so an old copy of a wrap (a backup, a replica), with a PIN that leaked, opens nothing
/// current. Either owner may do it (a PIN is the proof); the other keeps its PIN. Not a
/// PKCS#11 operation: it acts on the configured store directly, as delete-token does.
pub fn rotate_key(a: RotateKey) -> Result<()> {
    use secrecy::ExposeSecret;
    let (owner, pin) = pin::of_owner(a.pin, a.so)?;
    let config = crate::config::Config::load().map_err(|e| e.to_string())?;
    if config.store.backend == "memory" {
        return Err(
            "rotate-key works on the sqlite and postgres stores; the configured store is in memory".into(),
        );
    }
    let store = crate::store::open_sealed(&config)?;
    let w = &a.which;
    let token = stored_token(&store, w.slot, w.token.as_deref(), w.serial.as_deref())?;
    store
        .rotate_key(token.slot_id, owner, pin.expose_secret().as_bytes())
        .map_err(|e| format!("the token key was not replaced: {e} (the log above says why)"))?;
    println!(
        "The token key of {:?} (slot {}) has been replaced; processes logged in to it must log in again.",
        label_of(&token),
        token.slot_id
    );
    Ok(())
}

#[derive(Args)]
pub struct SetPin {
    #[command(flatten)]
    which: TokenChoice,
    /// Change the SO PIN instead of the user PIN.
    #[arg(long)]
    so: bool,
    /// The current PIN (else $FERROHSM_PIN or $FERROHSM_SO_PIN, else a prompt).
    #[arg(long)]
    pin: Option<String>,
    /// The new PIN (else $FERROHSM_NEW_PIN, else a prompt).
    #[arg(long = "new-pin")]
    new_pin: Option<String>,
}

pub fn set_pin(m: Option<&Path>, a: SetPin) -> Result<()> {
    let p = module::load(m)?;
    let slot = a.which.find(&p)?;
    let (var, prompt) = if a.so {
        ("FERROHSM_SO_PIN", "Current SO PIN")
    } else {
        ("FERROHSM_PIN", "Current user PIN")
    };
    let old = pin::get(a.pin, var, prompt)?;
    let new = pin::get(a.new_pin, "FERROHSM_NEW_PIN", "New PIN")?;
    let s = p
        .open_rw_session(slot)
        .map_err(|e| explain("cannot open a session", e))?;
    if a.so {
        s.login(UserType::So, Some(&old))
            .map_err(|e| explain("SO login failed", e))?;
    }
    s.set_pin(&old, &new)
        .map_err(|e| explain("cannot change the PIN", e))?;
    println!("The {} PIN has been changed.", if a.so { "SO" } else { "user" });
    Ok(())
}
