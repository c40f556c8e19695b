//! The sealed layer: the security of the store, implemented once over any `Backend`. It owns
//! the token key of every token this process is logged in to, wraps it under each PIN
//! (Argon2id, `pin`), counts PIN attempts (`lockout`), seals secret values and keeps lookup
//! hashes of private ones (`objects`), authenticates every row and the token's set of rows
//! (`ledger`), and writes rows only over the version it read (`changes`). Backends only ever
//! see what it hands them.

mod audit;
mod changes;
pub mod crypt;
mod ledger;
pub mod lockout;
mod objects;
mod owners;
mod pin;
mod rotate;

use super::backend::{self, transact, Backend, PinRow, TokenRow, Tx};
use super::{
    Found, Index, ObjectRecord, PinOwner, PinState, Store, StoredObject, TokenRecord, CKR_CHANGED_MEANWHILE,
};
use crate::error::{fail, fail_because, Error, Result};
use changes::Change;
use crypt::{KdfParams, Key};
use cryptoki_sys::*;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

pub struct Sealed {
    backend: Box<dyn Backend>,
    kdf: KdfParams,
    /// The failure limit of tokens this process creates.
    max_failures: u32,
    /// Tokens this process is logged in to: key, epoch and ledger of each.
    keys: Mutex<HashMap<CK_SLOT_ID, Arc<Unlocked>>>,
    /// Logins after the first one skip the KDF (GnuTLS logs in once per object it lists).
    pins: pin::PinKeyCache,
    /// One lock per (slot, SO?) PIN: checks of one PIN in this process take turns.
    pin_turns: Mutex<HashMap<(CK_SLOT_ID, bool), PinTurn>>,
    /// How long a PIN attempt may stay undecided before waiters count it as a wrong PIN.
    attempt_timeout: Duration,
}

/// Held while this process checks one PIN (`Sealed::check_pin`).
type PinTurn = Arc<Mutex<()>>;

/// A token this process holds the key of: the key, the epoch and key generation it belongs
/// to, the owners' secret (`owners`), the keys derived from it for the records' tags, and the
/// ledger of the token's rows.
pub(super) struct Unlocked {
    epoch: u64,
    key_generation: u64,
    key: Key,
    shared: Key,
    records: ledger::RecordKeys,
    ledger: Mutex<ledger::Ledger>,
}

impl Unlocked {
    fn new(row: &TokenRow, opened: owners::Opened) -> Self {
        Unlocked {
            epoch: row.epoch,
            key_generation: owners::key_generation(row),
            records: ledger::RecordKeys::new(&opened.key),
            key: opened.key,
            shared: opened.shared,
            ledger: Mutex::new(ledger::Ledger::default()),
        }
    }

    /// Whether this key is the one `row` names (same epoch and key generation).
    fn is_current(&self, row: &TokenRow) -> bool {
        row.epoch == self.epoch && owners::key_generation(row) == self.key_generation
    }
}

/// How many times a read rereads the ledger while other writers keep changing the rows it
/// reads, before it gives up on them.
const MAX_REREADS: usize = 50;

/// `pin.attempt_timeout_s` by default: far longer than any PIN check takes.
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(60);

fn record(row: &TokenRow) -> TokenRecord {
    let mut label = [b' '; 32];
    let n = row.label.len().min(32);
    label[..n].copy_from_slice(&row.label[..n]);
    let mut serial = [b' '; 16];
    let n = row.serial.len().min(16);
    serial[..n].copy_from_slice(&row.serial.as_bytes()[..n]);
    // Attempts in flight are not failures (yet); a window full of decided failures is a lock
    // even before an attempt marks it so.
    let state = |p: &PinRow| PinState {
        failures: p.counter.decided_failures(),
        locked: p.counter.locked || (p.counter.failures >= row.max_failures && p.counter.pending.is_empty()),
    };
    TokenRecord {
        slot_id: row.slot_id,
        label,
        serial,
        user_pin_initialized: row.user.wrap.is_some(),
        so_pin: state(&row.so),
        user_pin: state(&row.user),
        max_failures: row.max_failures,
        epoch: row.epoch,
        key_generation: owners::key_generation(row),
    }
}

/// The row of a new token; the caller sets its wraps.
fn new_row(slot: CK_SLOT_ID, label: &[u8], serial: String, max_failures: u32) -> TokenRow {
    TokenRow {
        slot_id: slot,
        label: label.to_vec(),
        serial,
        max_failures,
        ..TokenRow::default()
    }
}

impl Sealed {
    pub fn new(backend: Box<dyn Backend>, kdf: KdfParams, max_failures: u32) -> Self {
        Sealed {
            backend,
            kdf,
            max_failures,
            keys: Mutex::new(HashMap::new()),
            pins: pin::PinKeyCache::new(),
            pin_turns: Mutex::new(HashMap::new()),
            attempt_timeout: DEFAULT_ATTEMPT_TIMEOUT,
        }
    }

    /// Sets how long a PIN attempt may stay undecided (its process stopped) before the
    /// attempts waiting on it count it as a wrong PIN (`pin.attempt_timeout_s`).
    pub fn with_attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    /// Where the store lives (a path), for messages to the operator.
    pub fn location(&self) -> String {
        self.backend.location()
    }

    fn unlocked(&self, slot: CK_SLOT_ID) -> Option<Arc<Unlocked>> {
        self.keys.lock().get(&slot).cloned()
    }

    #[cfg(test)]
    fn token_key(&self, slot: CK_SLOT_ID) -> Option<Key> {
        self.unlocked(slot).map(|u| u.key.clone())
    }

    /// Inside a write transaction: the token this process holds the key of, if the key still
    /// belongs to the token in the store, with the token row read (and locked) in the
    /// transaction. After another process re-initialised the token or replaced its key
    /// (`rotate`) the old key is dropped and the write refused, so nothing is ever sealed
    /// under a key the token no longer has.
    fn current(&self, tx: &mut dyn Tx, slot: CK_SLOT_ID) -> Result<(Option<Arc<Unlocked>>, TokenRow)> {
        let Some(row) = tx.token(slot)? else {
            return fail(CKR_TOKEN_NOT_RECOGNIZED);
        };
        let Some(u) = self.unlocked(slot) else {
            return Ok((None, row));
        };
        if !u.is_current(&row) {
            self.drop_stale(slot, &u, &row);
            return fail(CKR_USER_NOT_LOGGED_IN);
        }
        Ok((Some(u), row))
    }

    /// Drops the key `u` of `slot` (if still held): `row`, the token as it is now, belongs to
    /// another epoch (re-initialised) or key generation (key replaced) since.
    fn drop_stale(&self, slot: CK_SLOT_ID, u: &Arc<Unlocked>, row: &TokenRow) {
        let mut keys = self.keys.lock();
        if keys.get(&slot).is_some_and(|held| Arc::ptr_eq(held, u)) {
            keys.remove(&slot);
            if row.epoch != u.epoch {
                log::warn!("slot {slot}: the token was re-initialised by another process; log in again");
            } else {
                log::warn!(
                    "slot {slot}: the token key was replaced by another process (a PIN change or ferrohsm-util rotate-key); this process is logged out: log in again"
                );
            }
        }
    }

    /// After a row failed under the key `u` (a tag, the summary): whether that is because the
    /// key is stale (the token row names another epoch or key generation), in which case the
    /// key is dropped. One read of the token rows, on failures only.
    pub(super) fn key_replaced(&self, slot: CK_SLOT_ID, u: &Arc<Unlocked>) -> bool {
        let Ok(tokens) = self.backend.tokens() else {
            return false;
        };
        match tokens.iter().find(|t| t.slot_id == slot) {
            Some(row) if !u.is_current(row) => {
                self.drop_stale(slot, u, row);
                true
            }
            _ => false,
        }
    }

    /// Creates a complete token in one transaction (migration): label and serial as given,
    /// wraps for both PINs, and every object. Nothing is written when any step fails; a token
    /// with the same serial already present is refused.
    pub fn import_token(
        &self,
        label: &[u8; 32],
        serial: &str,
        so_pin: &[u8],
        user_pin: Option<&[u8]>,
        objects: &[ObjectRecord],
    ) -> Result<CK_SLOT_ID> {
        let opened = owners::Opened {
            key: crypt::random_key(),
            shared: crypt::random_key(),
        };
        let token_key = opened.key.clone();
        transact(&*self.backend, |tx| {
            if let Some(slot) = tx.slot_of_serial(serial)? {
                return fail_because(
                    CKR_FUNCTION_FAILED,
                    format!("a token with serial {serial} already exists in slot {slot}"),
                );
            }
            let slot = tx.max_slot()?.map_or(0, |m| m + 1);
            let mut row = new_row(slot, label, serial.to_string(), self.max_failures);
            row.so.wrap = Some(
                self.wrap(&token_key, &opened.shared, slot, PinOwner::So, so_pin)
                    .0,
            );
            row.user.wrap =
                user_pin.map(|p| self.wrap(&token_key, &opened.shared, slot, PinOwner::User, p).0);
            row.owners = Some(owners::seal(&token_key, &row, 0));
            let u = Unlocked::new(&row, opened.clone());
            row.summary = Some(self.empty_summary(slot, &u));
            tx.insert_token(&row)?;
            // A new token starts at generation 1: its first change is version 2.
            let version = 2;
            let mut summary = ledger::Summary {
                generation: version,
                ..Default::default()
            };
            for o in objects {
                let id = tx.new_object(slot)?;
                let mut encoded = self.encode(slot, id, o, Some(&token_key))?;
                self.tag_new(slot, &u, &mut encoded, version, &mut summary);
                tx.put_object(slot, &encoded)?;
            }
            let Some(mut row) = tx.token(slot)? else {
                return fail(CKR_TOKEN_NOT_RECOGNIZED);
            };
            row.summary = Some(summary.seal(&u.records, slot, u.epoch));
            tx.update_token(&row)?;
            tx.bump_generation(slot)?;
            Ok(slot)
        })
    }

    /// Whether a row that is not the ledger's may be a newer one than the ledger knows (read
    /// it again after reading the ledger again): always before this read rescanned
    /// (`scanned_at` none), then only when it was written after that scan. A row of the scan's
    /// generation or older, read after it, that is still not the ledger's is an old copy put
    /// back, never a newer change.
    fn newer(&self, row: &backend::ObjectRow, scanned_at: Option<u64>) -> bool {
        scanned_at.is_none_or(|g| row.version > g)
    }

    /// A search by a keyed hash (a private id or label) that matched no private row may have
    /// hashed under a key another process has replaced since: then it is
    /// `CKR_USER_NOT_LOGGED_IN` (the key dropped), never an empty answer. One read of the
    /// token rows, on such misses only.
    fn check_keyed_miss(
        &self,
        slot: CK_SLOT_ID,
        query: &Index,
        u: Option<&Arc<Unlocked>>,
        rows: &[backend::Match],
        known: &dyn Fn(u64) -> Option<bool>,
    ) -> Result<()> {
        let keyed = query.id.is_some() || query.label.is_some();
        let private = |m: &backend::Match| match m {
            backend::Match::Row(r) => r.private,
            backend::Match::Known(id) => known(*id) == Some(true),
        };
        match u {
            Some(u) if keyed && !rows.iter().any(private) && self.key_replaced(slot, u) => {
                fail(CKR_USER_NOT_LOGGED_IN)
            }
            _ => Ok(()),
        }
    }

    /// Removes a token and all its objects (`ferrohsm-util delete-token`), and its audit
    /// trail: a token made later in the slot starts a chain of its own.
    pub fn delete_token(&self, slot: CK_SLOT_ID) -> Result<bool> {
        let gone = transact(&*self.backend, |tx| {
            tx.audit_prune(slot, u64::MAX)?;
            tx.delete_token(slot)
        })?;
        self.keys.lock().remove(&slot);
        Ok(gone)
    }
}

impl Store for Sealed {
    fn tokens(&self) -> Result<Vec<TokenRecord>> {
        Ok(self.backend.tokens()?.iter().map(record).collect())
    }

    fn probe(&self) -> Result<usize> {
        self.backend.probe()
    }

    fn init_token(
        &self,
        slot: CK_SLOT_ID,
        so_pin: &[u8],
        label: &[u8; 32],
        user_pin: Option<&[u8]>,
    ) -> Result<TokenRecord> {
        let exists = self.backend.tokens()?.iter().any(|t| t.slot_id == slot);
        if exists {
            self.check_pin(slot, PinOwner::So, so_pin)?;
        }
        // The KDF runs before the write transaction so other processes are not held up.
        let opened = owners::Opened {
            key: crypt::random_key(),
            shared: crypt::random_key(),
        };
        let token_key = opened.key.clone();
        let (so_wrap, so_key) = self.wrap(&token_key, &opened.shared, slot, PinOwner::So, so_pin);
        let user = user_pin.map(|p| (p, self.wrap(&token_key, &opened.shared, slot, PinOwner::User, p)));
        let user_wrap = user.as_ref().map(|(_, (w, _))| w.clone());
        let row = transact(&*self.backend, |tx| {
            let mut row = if exists {
                // Re-initialisation: same slot and serial, new token key, no objects, no user
                // PIN; the attempt tickets keep growing.
                let Some(mut row) = tx.token(slot)? else {
                    return fail(CKR_TOKEN_NOT_RECOGNIZED);
                };
                tx.delete_objects(slot)?;
                tx.bump_generation(slot)?;
                row.label = label.to_vec();
                row.epoch += 1;
                row.so.counter.restart();
                row.user.counter.restart();
                row
            } else {
                let free = tx.max_slot()?.map_or(0, |m| m + 1);
                if slot != free {
                    return fail_because(
                        CKR_SLOT_ID_INVALID,
                        format!("slot {slot} is not the free slot ({free})"),
                    );
                }
                let mut rnd = [0u8; 8];
                getrandom::fill(&mut rnd).map_err(|_| Error(CKR_FUNCTION_FAILED))?;
                let serial: String = rnd.iter().map(|b| format!("{b:02x}")).collect();
                new_row(slot, label, serial, self.max_failures)
            };
            row.so.wrap = Some(so_wrap.clone());
            row.user.wrap = user_wrap.clone();
            row.owners = Some(owners::seal(&token_key, &row, 0));
            row.summary = Some(self.empty_summary(slot, &Unlocked::new(&row, opened.clone())));
            if exists {
                tx.update_token(&row)?;
            } else {
                tx.insert_token(&row)?;
            }
            self.audit_owner(
                tx,
                &row,
                crate::store::audit::event::INIT_TOKEN,
                PinOwner::So,
                None,
            )?;
            Ok(row)
        })?;
        self.keys.lock().remove(&slot);
        self.pins.remember(slot, PinOwner::So, &so_wrap, so_pin, so_key);
        if let Some((p, (wrap, key))) = user {
            self.pins.remember(slot, PinOwner::User, &wrap, p, key);
        }
        Ok(record(&row))
    }

    fn login(&self, slot: CK_SLOT_ID, who: PinOwner, pin: &[u8]) -> Result<()> {
        let checked = self.check_pin(slot, who, pin)?;
        self.check_owners(slot, &checked)?;
        self.upgrade_wrap(slot, who, &checked)?;
        if let Some(u) = self.unlocked(slot).filter(|u| u.is_current(&checked.row)) {
            // Logged in already (a context-specific login): the ledger stays.
            if bool::from(subtle::ConstantTimeEq::ct_eq(&u.key[..], &checked.opened.key[..])) {
                return Ok(());
            }
        }
        let u = Arc::new(Unlocked::new(&checked.row, checked.opened));
        // A store written before records were authenticated is upgraded at its first login;
        // then the ledger must add up to the token's summary, or nothing is used.
        let mut scan = self.backend.tags(slot)?;
        if scan.summary.is_none() {
            self.upgrade(slot, &u)?;
            scan = self.backend.tags(slot)?;
        }
        if !self.check_ledger(slot, &u, scan) {
            return fail(CKR_DEVICE_ERROR);
        }
        self.keys.lock().insert(slot, u);
        Ok(())
    }

    fn logout(&self, slot: CK_SLOT_ID) {
        let held = self.keys.lock().remove(&slot);
        if let Some(u) = held {
            // With a checkpoint: each session of work ends signed.
            let ev = crate::store::audit::event::LOGOUT;
            if self
                .audit_alone_with(slot, ev, audit::Subject::default(), Some(&u.shared), true)
                .is_err()
            {
                log::error!("slot {slot}: the logout could not be recorded in the audit trail (the log above says why)");
            }
        }
    }

    fn audit(&self, slot: CK_SLOT_ID, object: Option<crate::store::audit::Named>) -> Result<()> {
        let subject = object.map_or_else(audit::Subject::default, |o| audit::Subject {
            id: Some(o.id),
            class: o.class,
            label: o.label.map(<[u8]>::to_vec),
        });
        let ev = Self::event_or(crate::store::audit::event::WRAP_KEY);
        self.audit_alone(slot, ev, subject, false)
    }

    fn held_key(&self, slot: CK_SLOT_ID) -> Option<(u64, u64)> {
        self.unlocked(slot).map(|u| (u.epoch, u.key_generation))
    }

    /// The SO (logged in) sets the user PIN, and the token key is replaced with it (`rotate`):
    /// the SO sets a user PIN because the old one is forgotten, locked or known to someone who
    /// should not have it, and a wrap of the old user PIN copied before (a backup, a replica)
    /// would otherwise still open the current key. Only a rotation makes that copy useless.
    fn init_pin(&self, slot: CK_SLOT_ID, pin: &[u8]) -> Result<()> {
        let held = self.unlocked(slot).ok_or(Error(CKR_USER_NOT_LOGGED_IN))?;
        self.rotate(slot, &held, PinOwner::User, pin, true)
            .map_err(|e| match e.rv() {
                // The SO's key was replaced or the token re-initialised since the login.
                CKR_CHANGED_MEANWHILE => Error(CKR_USER_NOT_LOGGED_IN),
                _ => e,
            })
    }

    /// Changes a PIN and replaces the token key (`rotate`): the old PIN with any copy of its
    /// old wrap opens only the old key, under which nothing current is sealed.
    fn set_pin(&self, slot: CK_SLOT_ID, who: PinOwner, old: &[u8], new: &[u8]) -> Result<()> {
        self.with_pin(slot, who, old, new)
    }

    fn search(
        &self,
        slot: CK_SLOT_ID,
        query: &Index,
        with_private: bool,
        known: &dyn Fn(u64) -> Option<bool>,
    ) -> Result<Vec<Found>> {
        let u = self.unlocked(slot);
        let key = if with_private {
            u.as_ref().map(|u| u.key.clone())
        } else {
            None
        };
        let row_query = objects::row_query(query, key.as_ref());
        let held = |id: u64| known(id).is_some();
        let mut rows = self.backend.find(slot, &row_query, &held)?;
        self.check_keyed_miss(slot, query, u.as_ref().filter(|_| with_private), &rows, known)?;
        let mut out = Vec::with_capacity(rows.len());
        // Rows another process changed since the ledger was read miss it: the ledger is read
        // again and the search made again (`Sealed::newer`). A damaged record is reported
        // (in `read`) and left out; the search goes on.
        let mut scanned_at = None;
        for _ in 0..MAX_REREADS {
            let mut differs = false;
            out.clear();
            for m in &rows {
                let r = match m {
                    backend::Match::Known(id) => {
                        out.push(Found::Known(*id));
                        continue;
                    }
                    backend::Match::Row(r) => r,
                };
                match self.read(slot, r, u.as_ref()) {
                    Ok(objects::Read::Object(o)) => out.push(Found::Read(o)),
                    Ok(objects::Read::Differs) if self.newer(r, scanned_at) => differs = true,
                    Ok(objects::Read::Differs) => {
                        let _ = self.damaged(slot, r.id, "it is not the token's current record");
                    }
                    Err(e) if e.rv() == CKR_USER_NOT_LOGGED_IN => return Err(e),
                    Ok(objects::Read::Hidden) | Err(_) => {}
                }
            }
            let Some(u) = u.as_ref().filter(|_| differs) else {
                return Ok(out);
            };
            if !self.reread_ledger(slot, u)? {
                break;
            }
            scanned_at = Some(u.ledger.lock().generation);
            rows = self.backend.find(slot, &row_query, &held)?;
        }
        log::error!(
            "token store {}: slot {slot}: records that do not match the token's ledger were left out of a search",
            self.backend.location()
        );
        Ok(out)
    }

    fn load(&self, slot: CK_SLOT_ID, id: u64) -> Result<Option<StoredObject>> {
        let u = self.unlocked(slot);
        let mut scanned_at = None;
        for _ in 0..MAX_REREADS {
            let Some(row) = self.backend.object(slot, id)? else {
                return Ok(None);
            };
            match self.read(slot, &row, u.as_ref())? {
                objects::Read::Object(o) => return Ok(Some(o)),
                objects::Read::Hidden => return Ok(None),
                objects::Read::Differs => {}
            }
            let Some(u) = u.as_ref() else { break };
            if !self.newer(&row, scanned_at) || !self.reread_ledger(slot, u)? {
                break;
            }
            scanned_at = Some(u.ledger.lock().generation);
        }
        Err(self.damaged(slot, id, "it is not the token's current record"))
    }

    fn create(
        &self,
        slot: CK_SLOT_ID,
        objects: &[ObjectRecord],
        unchanged: &[(u64, u64)],
    ) -> Result<Vec<u64>> {
        let changes: Vec<Change> = unchanged
            .iter()
            .map(|&(id, version)| Change::Unchanged { id, version })
            .chain(objects.iter().map(Change::Create))
            .collect();
        self.write_changes(slot, &changes)
    }

    fn update(&self, slot: CK_SLOT_ID, id: u64, version: u64, record: &ObjectRecord) -> Result<()> {
        self.write_changes(slot, &[Change::Update { id, version, record }])
            .map(drop)
    }

    fn destroy(&self, slot: CK_SLOT_ID, id: u64, version: u64) -> Result<()> {
        self.write_changes(slot, &[Change::Destroy { id, version }])
            .map(drop)
    }

    fn generation(&self, slot: CK_SLOT_ID) -> Result<u64> {
        self.backend.generation(slot)
    }

    fn count_use(&self, slot: CK_SLOT_ID, id: u64, limit: u64) -> Result<Option<u64>> {
        self.backend.count_use(slot, id, limit)
    }

    fn use_count(&self, slot: CK_SLOT_ID, id: u64) -> Result<u64> {
        self.backend.use_count(slot, id)
    }
}

impl Drop for Sealed {
    fn drop(&mut self) {
        self.keys.lock().clear();
        self.pins.clear();
    }
}

#[cfg(test)]
mod tests;
