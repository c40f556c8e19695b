//! Usage limits of keys (`CKA_USAGE_LIMIT`, `CKA_USAGE_COUNT`, Luna's meaning): what counts as
//! a use, the reservation of each use in the store before the key is used, the refusal once
//! the limit is reached, and the count `C_GetAttributeValue` reads. Which objects carry a
//! limit and how it may change is policy (`policy::check_usage_limit`); the count itself is
//! kept by the store (`Store::count_use`).
//!
//! A use is one operation that takes the key as itself (`use_key`): one C_SignInit (so one
//! C_Sign, or one C_SignUpdate…C_SignFinal), one C_VerifyInit with a secret key (a MAC), one
//! C_EncryptInit or C_DecryptInit, one C_WrapKey by the wrapping key, one C_UnwrapKey by the
//! unwrapping key, one C_DeriveKey by the base key. Counted at the Init, before any work, as
//! the PIN lockout reserves an attempt before the PIN is evaluated: an operation that then
//! fails, or is never finished, has still spent its use, so no interleaving of processes and
//! hosts ever gets more than the limit. A private key used for its public half (verify,
//! encrypt) is not used as itself and is not counted.
//!
//! Only keys with a limit are counted: a key without one costs a map lookup, and no store
//! access, per operation.

use super::attributes::{CKA_USAGE_COUNT, CKA_USAGE_LIMIT};
use super::object::Object;
use super::slot::Token;
use crate::error::{fail_because, Result};
use crate::mechanism::Key;
use cryptoki_sys::*;

/// The key of `obj` for one operation, as `class` says (`Object::key`), its use counted
/// first when `obj` has a limit and is used as itself. Refused with
/// `CKR_KEY_FUNCTION_NOT_PERMITTED` once the limit is reached.
pub fn use_key(token: &Token, obj: &Object, class: CK_OBJECT_CLASS) -> Result<Key> {
    if obj.attrs.class() == Some(class) {
        if let Some(limit) = obj.attrs.ulong(CKA_USAGE_LIMIT) {
            count(token, obj, limit)?;
        }
    }
    obj.key(class)
}

/// Reserves one use of `obj` in the store, or refuses it with a log line naming the key.
fn count(token: &Token, obj: &Object, limit: u64) -> Result<()> {
    let name = || name(obj);
    match token.store().count_use(token.slot_id, obj.handle, limit)? {
        Some(n) if n == limit => {
            log::warn!(
                "slot {}: {} has used the last of its {limit} allowed uses (CKA_USAGE_LIMIT); further uses are refused",
                token.slot_id,
                name()
            );
            Ok(())
        }
        Some(_) => Ok(()),
        None => {
            log::warn!(
                "slot {}: {} refused: its CKA_USAGE_LIMIT of {limit} uses is reached",
                token.slot_id,
                name()
            );
            fail_because(
                CKR_KEY_FUNCTION_NOT_PERMITTED,
                format!(
                    "{} has reached its CKA_USAGE_LIMIT of {limit} uses; use another key (a limit can only be lowered)",
                    name()
                ),
            )
        }
    }
}

/// How a log line names a key: its handle and, when it has one, its label.
fn name(obj: &Object) -> String {
    match obj.attrs.get(CKA_LABEL) {
        Some(l) if !l.is_empty() => format!("key {} \"{}\"", obj.handle, String::from_utf8_lossy(l)),
        _ => format!("key {}", obj.handle),
    }
}

/// `CKA_USAGE_COUNT` of `obj` as `C_GetAttributeValue` answers it: the uses counted, for a
/// key with a limit (0 before the first); 0 for a private or secret key without one (its uses
/// are not counted); `None` for other objects, which do not have the attribute.
pub fn count_value(token: &Token, obj: &Object) -> Result<Option<CK_ULONG>> {
    if !super::policy::valid_for(&obj.attrs, CKA_USAGE_COUNT) {
        return Ok(None);
    }
    if !obj.attrs.contains(CKA_USAGE_LIMIT) {
        return Ok(Some(0));
    }
    let n = token.store().use_count(token.slot_id, obj.handle)?;
    Ok(Some(n as CK_ULONG))
}
