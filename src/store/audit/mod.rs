//! The audit trail of a token: what a record says, how records are chained, and who asked.
//!
//! It owns the record's fields and their canonical encoding (`Record`, `Entry`), the chain
//! rule (`chain`: each record's hash covers the hash before it), checkpoints signed by the
//! token's audit key (`checkpoint`), the verification of an exported log (`verify`), and what
//! the token layer tells the store about the call under way (`intent`: the event's name, its
//! mechanism, the caller). Records are appended by the sealed store inside the transaction of
//! the change they describe (`store::sealed::audit`): no change without its record, and no
//! record of a change that was rolled back.
//!
//! Nothing secret enters a record: objects are named by id and a SHA-256 of their label, PINs
//! and key values never.

pub mod chain;
pub mod checkpoint;
pub mod intent;
pub mod time;
pub mod verify;

use serde::{Deserialize, Serialize};

/// The events, by the names records carry. Stable: a SIEM filters on them.
pub mod event {
    pub const LOGIN: &str = "login";
    pub const LOGOUT: &str = "logout";
    /// A wrong PIN that locked it (recorded after that attempt's `login` failure).
    pub const PIN_LOCKED: &str = "pin_locked";
    pub const INIT_TOKEN: &str = "init_token";
    pub const INIT_PIN: &str = "init_pin";
    pub const SET_PIN: &str = "set_pin";
    pub const ROTATE_KEY: &str = "rotate_key";
    pub const GENERATE_KEY: &str = "generate_key";
    pub const GENERATE_KEY_PAIR: &str = "generate_key_pair";
    /// Also a key imported from a file (`ferrohsm-util import` calls `C_CreateObject`).
    pub const CREATE_OBJECT: &str = "create_object";
    pub const COPY_OBJECT: &str = "copy_object";
    pub const DESTROY_OBJECT: &str = "destroy_object";
    pub const SET_ATTRIBUTE: &str = "set_attribute";
    pub const UNWRAP_KEY: &str = "unwrap_key";
    pub const DERIVE_KEY: &str = "derive_key";
    /// A key leaving the token, encrypted (`C_WrapKey`).
    pub const WRAP_KEY: &str = "wrap_key";
    /// The SO made the token's audit key (`ferrohsm-util audit init`).
    pub const AUDIT_KEY: &str = "audit_key";
    /// A record signed by the audit key over the chain up to it.
    pub const CHECKPOINT: &str = "checkpoint";
    /// Records before this one were removed (`audit prune`); it follows a checkpoint.
    pub const PRUNED: &str = "pruned";
}

/// One record as its hash covers it. The canonical encoding is its JSON text with the fields
/// in this order, no whitespace, absent values as `null` (serde_json's output for this
/// struct): a verifier re-encodes the fields it parsed and gets the same bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Its place in the token's chain, from 1.
    pub seq: u64,
    /// UTC, RFC 3339 with milliseconds (`time::now`): sorts as text.
    pub time: String,
    pub event: String,
    /// The token's serial number and slot.
    pub token: String,
    pub slot: u64,
    /// The object's handle (its id in the store).
    pub object: Option<u64>,
    /// Its `CKA_CLASS`.
    pub class: Option<u64>,
    /// SHA-256 of its `CKA_LABEL`, hex.
    pub label_hash: Option<String>,
    pub mechanism: Option<u64>,
    /// The attribute types a change set (`set_attribute`), never their values.
    pub attributes: Vec<u64>,
    /// `ok`, or the `CKR_` name the caller got.
    pub outcome: String,
    /// Who asked: the process, its OS user, and the network client's identity when the call
    /// came through `ferrohsm-server`.
    pub pid: u32,
    pub user: String,
    pub client: Option<String>,
    /// Event-specific: a checkpoint's signature, the audit key's public half (hex).
    pub detail: Option<String>,
}

/// A record with its place in the chain: what the store keeps and a log exports, one JSON
/// object per line with `prev` and `hash` after the record's fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    #[serde(flatten)]
    pub record: Record,
    /// The hash of the record before it (hex); zeros before the first.
    pub prev: String,
    pub hash: String,
}

/// An object as a record names it (`Store::audit`).
#[derive(Debug, Clone, Copy)]
pub struct Named<'a> {
    pub id: u64,
    pub class: Option<u64>,
    pub label: Option<&'a [u8]>,
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// SHA-256 of a label, hex: records name objects without their labels.
pub fn label_hash(label: &[u8]) -> String {
    use sha2::Digest;
    hex(&sha2::Sha256::digest(label))
}
