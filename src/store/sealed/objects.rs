//! Objects at rest: a record's secret values sealed one by one with the token key (AES-256-GCM,
//! bound to token, object and type), its clear values kept as they are, and the index values of
//! private records replaced by keyed hashes. The blob format is the schema-2 one:
//! (type u64, length u32, value)*, little endian.

use super::crypt::{self, Key};
use super::ledger::Standing;
use super::{Sealed, Unlocked};
use crate::error::{Error, Result};
use crate::store::backend::{ObjectRow, RowQuery};
use crate::store::{Fields, Index, ObjectRecord, StoredObject, PRIVATE_CLEAR};
use cryptoki_sys::*;
use std::sync::Arc;
use zeroize::Zeroizing;

/// The tags the lookup hashes of the index columns are made under. They are the PKCS#11
/// numbers of `CKA_ID` and `CKA_LABEL` because schema-2 stores were written with them.
const ID_TAG: u64 = CKA_ID;
const LABEL_TAG: u64 = CKA_LABEL;

fn attr_aad(slot: CK_SLOT_ID, id: u64, t: u64) -> Vec<u8> {
    let mut a = b"ferrohsm attribute".to_vec();
    a.extend_from_slice(&slot.to_be_bytes());
    a.extend_from_slice(&id.to_be_bytes());
    a.extend_from_slice(&t.to_be_bytes());
    a
}

pub(super) fn to_bytes<'a>(fields: impl IntoIterator<Item = (u64, &'a [u8])>) -> Zeroizing<Vec<u8>> {
    let mut out = Zeroizing::new(Vec::new());
    for (t, v) in fields {
        out.extend_from_slice(&t.to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
    }
    out
}

pub(super) fn from_bytes(mut b: &[u8]) -> Option<Fields> {
    let mut out = Fields::new();
    while !b.is_empty() {
        let t = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
        let len = u32::from_le_bytes(b.get(8..12)?.try_into().ok()?) as usize;
        let v = b.get(12..12usize.checked_add(len)?)?;
        out.push((t, Zeroizing::new(v.to_vec())));
        b = &b[12 + len..];
    }
    Some(out)
}

/// The backend search for `query`: index values in clear for public records, and, with the
/// token key, keyed hashes for private ones.
pub(super) fn row_query(query: &Index, key: Option<&Key>) -> RowQuery {
    let values = |tag: u64, v: &Option<Vec<u8>>| {
        v.as_ref().map(|v| {
            let hashed = key.map_or_else(|| v.clone(), |k| crypt::lookup_hash(k, tag, v));
            vec![v.clone(), hashed]
        })
    };
    RowQuery {
        public_only: key.is_none(),
        class: query.class,
        key_id: values(ID_TAG, &query.id),
        label: values(LABEL_TAG, &query.label),
    }
}

impl Sealed {
    /// The row of `record` as object `id`. A private record, or one with secret values, needs
    /// the token key (a login).
    pub(super) fn encode(
        &self,
        slot: CK_SLOT_ID,
        id: u64,
        record: &ObjectRecord,
        key: Option<&Key>,
    ) -> Result<ObjectRow> {
        let needs_key = record.private || !record.secret.is_empty();
        let key = match key {
            Some(k) => Some(k),
            None if needs_key => {
                log::info!("slot {slot}: storing private or secret material needs a user login");
                return Err(Error(CKR_USER_NOT_LOGGED_IN));
            }
            None => None,
        };
        let sealed: Vec<(u64, Vec<u8>)> = match key {
            Some(k) if !record.secret.is_empty() => {
                let cipher = crypt::Cipher::new(k);
                record
                    .secret
                    .iter()
                    .map(|(t, v)| (*t, cipher.seal(v, &attr_aad(slot, id, *t))))
                    .collect()
            }
            _ => vec![],
        };
        let lookup = |tag: u64, v: &Option<Vec<u8>>| -> Option<Vec<u8>> {
            let v = v.as_ref()?;
            Some(match (key, record.private) {
                (Some(k), true) => crypt::lookup_hash(k, tag, v),
                _ => v.clone(),
            })
        };
        Ok(ObjectRow {
            id,
            private: record.private,
            class: record.index.class,
            key_id: lookup(ID_TAG, &record.index.id),
            label: lookup(LABEL_TAG, &record.index.label),
            clear: to_bytes(record.clear.iter().map(|(t, v)| (*t, v.as_slice()))).to_vec(),
            sealed: to_bytes(sealed.iter().map(|(t, v)| (*t, v.as_slice()))).to_vec(),
            version: 0,
            tag: None,
        })
    }

    /// `row` (tagged, its tag checked under `old`) with its sealed values and the lookup hashes
    /// of a private record made again under the key `new`; version and tag are the caller's.
    /// An error (logged) when a value does not open or a hash is not its value's.
    pub(super) fn reseal(
        &self,
        slot: CK_SLOT_ID,
        row: &ObjectRow,
        old: &Key,
        new: &Key,
    ) -> Result<ObjectRow> {
        let id = row.id;
        let sealed =
            from_bytes(&row.sealed).ok_or_else(|| self.damaged(slot, id, "sealed attributes unreadable"))?;
        let (from, to) = (crypt::Cipher::new(old), crypt::Cipher::new(new));
        let mut opened = Fields::new();
        let mut resealed = Vec::with_capacity(sealed.len());
        for (t, v) in sealed {
            let aad = attr_aad(slot, id, t);
            let plain = from
                .open(&v, &aad)
                .ok_or_else(|| self.damaged(slot, id, &format!("attribute 0x{t:x} fails authentication")))?;
            resealed.push((t, to.seal(&plain, &aad)));
            opened.push((t, plain));
        }
        // A private record's index columns are keyed hashes of values it keeps sealed.
        let rehash = |tag: u64, column: &Option<Vec<u8>>| -> Result<Option<Vec<u8>>> {
            let Some(hash) = column.as_ref().filter(|_| row.private) else {
                return Ok(column.clone());
            };
            match opened.iter().find(|(t, _)| *t == tag) {
                Some((_, v)) if crypt::lookup_hash(old, tag, v) == *hash => {
                    Ok(Some(crypt::lookup_hash(new, tag, v)))
                }
                _ => Err(self.damaged(
                    slot,
                    id,
                    &format!("its index hash of 0x{tag:x} is not its value's"),
                )),
            }
        };
        Ok(ObjectRow {
            key_id: rehash(ID_TAG, &row.key_id)?,
            label: rehash(LABEL_TAG, &row.label)?,
            sealed: to_bytes(resealed.iter().map(|(t, v)| (*t, v.as_slice()))).to_vec(),
            tag: None,
            ..row.clone()
        })
    }

    /// The error of a row that cannot be used, with the log line naming it.
    pub(super) fn damaged(&self, slot: CK_SLOT_ID, id: u64, what: &str) -> Error {
        log::error!(
            "token store {}: object {id} of slot {slot}: {what}; the record is damaged or was altered, and is not used",
            self.backend.location()
        );
        Error(CKR_DEVICE_ERROR)
    }

    /// Opens a row: `None` when it is private and `key` is missing; an error (logged) when it
    /// is damaged or was altered. Checks the record's shape (each attribute once; a private
    /// record keeps only `PRIVATE_CLEAR` in clear) and opens its sealed values; the tag is
    /// the caller's (`read`). `authenticated` is what the caller established.
    pub(super) fn decode(
        &self,
        slot: CK_SLOT_ID,
        row: &ObjectRow,
        key: Option<&Key>,
        authenticated: bool,
    ) -> Result<Option<StoredObject>> {
        let id = row.id;
        let mut fields =
            from_bytes(&row.clear).ok_or_else(|| self.damaged(slot, id, "clear attributes unreadable"))?;
        let sealed =
            from_bytes(&row.sealed).ok_or_else(|| self.damaged(slot, id, "sealed attributes unreadable"))?;
        if let Some((t, _)) = row
            .private
            .then(|| fields.iter().find(|(t, _)| !PRIVATE_CLEAR.contains(t)))
            .flatten()
        {
            return Err(self.damaged(
                slot,
                id,
                &format!("private record holds attribute 0x{t:x} in clear"),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        if let Some((t, _)) = fields.iter().chain(&sealed).find(|(t, _)| !seen.insert(*t)) {
            return Err(self.damaged(slot, id, &format!("attribute 0x{t:x} is stored twice")));
        }
        let object = |fields| StoredObject {
            id,
            private: row.private,
            fields,
            version: row.version,
            authenticated,
        };
        if sealed.is_empty() {
            return Ok(Some(object(fields)));
        }
        let Some(key) = key else {
            if row.private {
                return Ok(None);
            }
            // Public objects stay visible; their secret values wait for a login.
            return Ok(Some(object(fields)));
        };
        let cipher = crypt::Cipher::new(key);
        for (t, v) in sealed {
            let plain = cipher
                .open(&v, &attr_aad(slot, id, t))
                .ok_or_else(|| self.damaged(slot, id, &format!("attribute 0x{t:x} fails authentication")))?;
            fields.push((t, plain));
        }
        Ok(Some(object(fields)))
    }

    /// A row read from the store, as this process may use it. With the token key (`u`): the
    /// tag must verify (else an error, logged), and the row must be the ledger's
    /// (`Read::Differs` otherwise, for the caller to read the ledger again); an untagged row
    /// is used only when it is public and holds nothing sealed, as an unauthenticated object.
    /// Without the key: private rows are hidden, public ones read unchecked.
    /// A tag that fails under a key another process has replaced since (`Sealed::key_replaced`)
    /// is `CKR_USER_NOT_LOGGED_IN`, the key dropped: the row is newer than the key, not damaged.
    pub(super) fn read(&self, slot: CK_SLOT_ID, row: &ObjectRow, u: Option<&Arc<Unlocked>>) -> Result<Read> {
        let Some(u) = u else {
            return Ok(match self.decode(slot, row, None, false)? {
                Some(o) => Read::Object(o),
                None => Read::Hidden,
            });
        };
        if row.tag.is_some() && !u.records.verify(slot, row) {
            if self.key_replaced(slot, u) {
                return Err(Error(CKR_USER_NOT_LOGGED_IN));
            }
            return Err(self.damaged(slot, row.id, "its tag does not match its contents"));
        }
        let authenticated = match u.ledger.lock().standing(row) {
            Standing::Current => true,
            Standing::Differs => return Ok(Read::Differs),
            Standing::Unauthenticated if row.private || !row.sealed.is_empty() => {
                return Err(self.damaged(slot, row.id, "it has no tag"));
            }
            Standing::Unauthenticated => false,
        };
        Ok(match self.decode(slot, row, Some(&u.key), authenticated)? {
            Some(o) => Read::Object(o),
            None => Read::Hidden,
        })
    }
}

/// What `Sealed::read` made of a row.
pub(super) enum Read {
    Object(StoredObject),
    /// Private, and this process holds no key.
    Hidden,
    /// Not the row the ledger holds for its id.
    Differs,
}
