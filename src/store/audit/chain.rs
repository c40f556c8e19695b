//! The chain rule: a record's hash is SHA-256 over a domain string, the hash of the record
//! before it (32 zero bytes before the first), and the record's canonical encoding. Removing,
//! inserting, changing or reordering a record changes every hash after it; a signed
//! checkpoint (`checkpoint`) pins the hash at its place, so a writer of the store who redoes
//! the hashes after a change still cannot make them agree with a signature.

use super::{hex, Entry, Record};
use sha2::{Digest, Sha256};

const DOMAIN: &[u8] = b"ferrohsm audit record 1\n";

pub const ZERO: [u8; 32] = [0; 32];

/// The canonical encoding (`Record`'s field order, serde_json's compact form).
pub fn encode(r: &Record) -> Vec<u8> {
    serde_json::to_vec(r).expect("a record is plain data")
}

/// The hash of `body` (a canonical encoding) following `prev`.
pub fn hash(prev: &[u8], body: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(DOMAIN);
    h.update(prev);
    h.update(body);
    h.finalize().into()
}

/// `record` appended after a record whose hash is `prev`.
pub fn link(prev: &[u8], record: Record) -> Entry {
    let h = hash(prev, &encode(&record));
    Entry {
        record,
        prev: hex(prev),
        hash: hex(&h),
    }
}
