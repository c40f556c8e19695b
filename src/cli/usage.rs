//! `ferrohsm-util usage-limit`: shows and sets the usage limit of keys
//! (`FERROHSM_CKA_USAGE_LIMIT` of include/ferrohsm.h; docs/security.md, "Usage limits")
//! through the module, as any application would. The rules are the module's: this command
//! only asks.

use super::module::{self, explain, Result};
use super::pin;
use super::tokens::{parse_hex, TokenChoice};
use crate::attributes::{CKA_USAGE_COUNT, CKA_USAGE_LIMIT};
use clap::Args;
use cryptoki::object::{Attribute, AttributeType, ObjectClass, ObjectHandle};
use cryptoki::session::{Session, UserType};
use std::path::Path;

#[derive(Args)]
pub struct UsageLimit {
    #[command(flatten)]
    which: TokenChoice,
    /// CKA_ID of the keys, in hex.
    #[arg(long, required_unless_present = "label")]
    id: Option<String>,
    /// CKA_LABEL of the keys.
    #[arg(long)]
    label: Option<String>,
    /// The limit to set: on a key without one, or below its own (a limit is never raised).
    /// Without it, each key's count and limit are shown.
    #[arg(long)]
    set: Option<u64>,
    /// User PIN (else $FERROHSM_PIN, else a prompt).
    #[arg(long)]
    pin: Option<String>,
}

fn vendor(t: u64) -> AttributeType {
    AttributeType::VendorDefined(t as _)
}

/// A CK_ULONG vendor attribute of `key`, if it has one.
fn read(s: &Session, key: ObjectHandle, t: u64) -> Result<Option<u64>> {
    let got = s
        .get_attributes(key, &[vendor(t)])
        .map_err(|e| explain("cannot read the key's attributes", e))?;
    Ok(match got.as_slice() {
        [Attribute::VendorDefined((_, v))] => v.as_slice().try_into().ok().map(u64::from_ne_bytes),
        _ => None,
    })
}

pub fn usage_limit(m: Option<&Path>, a: UsageLimit) -> Result<()> {
    let p = module::load(m)?;
    let slot = a.which.find(&p)?;
    let user = pin::get(a.pin, "FERROHSM_PIN", "User PIN")?;
    let s = p
        .open_rw_session(slot)
        .map_err(|e| explain("cannot open a session", e))?;
    s.login(UserType::User, Some(&user))
        .map_err(|e| explain("login failed", e))?;
    let mut keys = Vec::new();
    for class in [ObjectClass::PRIVATE_KEY, ObjectClass::SECRET_KEY] {
        let mut t = vec![Attribute::Class(class)];
        if let Some(id) = &a.id {
            t.push(Attribute::Id(parse_hex(id)?));
        }
        if let Some(label) = &a.label {
            t.push(Attribute::Label(label.clone().into_bytes()));
        }
        keys.extend(s.find_objects(&t).map_err(|e| explain("search failed", e))?);
    }
    if keys.is_empty() {
        return Err("no private or secret key on the token has that id and label".into());
    }
    for key in keys {
        if let Some(n) = a.set {
            let value = (n as cryptoki_sys::CK_ULONG).to_ne_bytes().to_vec();
            s.update_attributes(key, &[Attribute::VendorDefined((vendor(CKA_USAGE_LIMIT), value))])
                .map_err(|e| {
                    explain(
                        "cannot set the limit (it is set once and then only lowered, to at least 1)",
                        e,
                    )
                })?;
        }
        let count = read(&s, key, CKA_USAGE_COUNT)?.unwrap_or(0);
        match read(&s, key, CKA_USAGE_LIMIT)? {
            Some(limit) => println!("key {}: {count} of {limit} uses", key.handle()),
            None => println!("key {}: no usage limit", key.handle()),
        }
    }
    Ok(())
}
