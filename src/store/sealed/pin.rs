//! PINs: the check of a PIN with its attempt reserved first (`lockout::PinCounter`), the key
//! derived from it (Argon2id) that opens the owner's wrap (`owners`), the upgrade of a wrap of
//! the format before owner keys, and the cache that spares repeated logins the KDF.

use super::crypt::{self, Key, Wrap};
use super::lockout::Reservation;
use super::owners::{self, Opened};
use super::Sealed;
use crate::error::{fail, Result};
use crate::store::backend::{transact, PinRow, TokenRow};
use crate::store::PinOwner;
use cryptoki_sys::*;
use hmac::{KeyInit, Mac};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What a right PIN gave: the token key and owners' secret, the PIN-derived key, and the token
/// row as it was when the attempt was reserved (the wrap the PIN opened).
pub(super) struct Checked {
    pub opened: Opened,
    pub pin_key: Key,
    pub row: TokenRow,
}

/// The row's PIN of `owner`.
pub(super) fn of(row: &mut TokenRow, owner: PinOwner) -> &mut PinRow {
    match owner {
        PinOwner::So => &mut row.so,
        PinOwner::User => &mut row.user,
    }
}

/// A PIN-derived key this process already computed, valid while the wrap keeps its salt.
struct CachedPinKey {
    salt: Vec<u8>,
    pin_mac: Vec<u8>,
    key: Key,
}

/// PIN-derived keys by (slot, owner). A PIN is recognised by its HMAC under a secret of this
/// process, never kept itself.
pub(super) struct PinKeyCache {
    entries: Mutex<HashMap<(CK_SLOT_ID, bool), CachedPinKey>>,
    process_secret: Key,
}

impl PinKeyCache {
    pub(super) fn new() -> Self {
        PinKeyCache {
            entries: Mutex::new(HashMap::new()),
            process_secret: crypt::random_key(),
        }
    }

    fn pin_mac(&self, pin: &[u8]) -> Vec<u8> {
        let mut m = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&self.process_secret[..])
            .expect("any key length");
        m.update(pin);
        m.finalize().into_bytes().to_vec()
    }

    /// The PIN-derived key for `wrap`, from the cache when this PIN was seen before.
    fn derive(&self, slot: CK_SLOT_ID, owner: PinOwner, wrap: &Wrap, pin: &[u8]) -> Option<Key> {
        let salt = wrap.salt()?.to_vec();
        let mac = self.pin_mac(pin);
        let id = (slot, owner == PinOwner::So);
        if let Some(c) = self.entries.lock().get(&id) {
            if c.salt == salt && bool::from(subtle::ConstantTimeEq::ct_eq(&c.pin_mac[..], &mac[..])) {
                return Some(c.key.clone());
            }
        }
        let key = crypt::derive_pin_key(pin, &salt, wrap.params()?)?;
        self.entries.lock().insert(
            id,
            CachedPinKey {
                salt,
                pin_mac: mac,
                key: key.clone(),
            },
        );
        Some(key)
    }

    pub(super) fn remember(&self, slot: CK_SLOT_ID, owner: PinOwner, wrap: &[u8], pin: &[u8], key: Key) {
        if let Some(salt) = Wrap(wrap).salt() {
            let entry = CachedPinKey {
                salt: salt.to_vec(),
                pin_mac: self.pin_mac(pin),
                key,
            };
            self.entries.lock().insert((slot, owner == PinOwner::So), entry);
        }
    }

    fn forget(&self, slot: CK_SLOT_ID, owner: PinOwner) {
        self.entries.lock().remove(&(slot, owner == PinOwner::So));
    }

    pub(super) fn clear(&self) {
        self.entries.lock().clear();
    }
}

impl Sealed {
    /// The lock that makes checks of one PIN in this process take turns.
    fn pin_turn(&self, slot: CK_SLOT_ID, owner: PinOwner) -> super::PinTurn {
        self.pin_turns
            .lock()
            .entry((slot, owner == PinOwner::So))
            .or_default()
            .clone()
    }

    /// Reserves an attempt, waiting while the failure budget is taken by attempts still in
    /// flight (in other processes or hosts): the token row (with the wrap to check), the ticket
    /// and the limit. An attempt seen in flight for `attempt_timeout` by this waiter belongs
    /// to a process that stopped before deciding it (killed, or its store went away): it is
    /// counted as a wrong PIN, as the budget already assumed, and the wait goes on without
    /// it. Measured on this process's clock, so clocks of other hosts do not matter.
    fn reserve_waiting(&self, slot: CK_SLOT_ID, owner: PinOwner) -> Result<(TokenRow, u64, u32)> {
        let mut seen: HashMap<u64, Instant> = HashMap::new();
        let mut pause = Duration::from_millis(1);
        let mut waited = false;
        loop {
            let now = Instant::now();
            let stale: Vec<u64> = seen
                .iter()
                .filter(|(_, since)| now.duration_since(**since) >= self.attempt_timeout)
                .map(|(t, _)| *t)
                .collect();
            let step = transact(&*self.backend, |tx| {
                let Some(mut row) = tx.token(slot)? else {
                    return fail(CKR_TOKEN_NOT_RECOGNIZED);
                };
                let max = row.max_failures;
                let p = of(&mut row, owner);
                if p.wrap.is_none() {
                    return fail(CKR_USER_PIN_NOT_INITIALIZED);
                }
                let mut changed = false;
                if !stale.is_empty() && p.counter.expire(&stale, max) {
                    log::warn!(
                        "slot {slot}: {} {owner:?} PIN attempt(s) were still undecided after {:?} (their process stopped?); counted as wrong PINs",
                        stale.len(),
                        self.attempt_timeout
                    );
                    changed = true;
                }
                let r = p.counter.reserve(max);
                if r.as_ref().is_ok_and(|r| matches!(r, Reservation::Granted(_))) {
                    changed = true;
                }
                // Committed even when the answer is CKR_PIN_LOCKED: an expiry stays done.
                if changed {
                    tx.update_token(&row)?;
                }
                if r.is_err() {
                    self.audit_refused(tx, &row, owner)?;
                }
                Ok((row, r, max))
            });
            let (row, r, max) = step.inspect_err(|e| {
                if matches!(e.rv(), CKR_DEVICE_ERROR | CKR_DEVICE_MEMORY) {
                    log::error!(
                        "slot {slot}: the {owner:?} PIN attempt could not be recorded in {}, so the PIN was not checked",
                        self.backend.location()
                    );
                }
            })?;
            let r = r.inspect_err(|_| {
                log::warn!(
                    "slot {slot}: the {owner:?} PIN is locked after too many wrong attempts; the PIN was not checked{}",
                    if owner == PinOwner::User { " (the SO can set a new user PIN)" } else { "" }
                );
            })?;
            match r {
                Reservation::Granted(ticket) => return Ok((row, ticket, max)),
                Reservation::Wait(pending) => {
                    if !waited {
                        log::info!(
                            "slot {slot}: {} {owner:?} PIN attempt(s) in flight hold the failure budget; waiting for them to be decided",
                            pending.len()
                        );
                        waited = true;
                    }
                    let now = Instant::now();
                    seen.retain(|t, _| pending.contains(t));
                    for t in pending {
                        seen.entry(t).or_insert(now);
                    }
                    // Backing off, with jitter so waiters in several processes do not poll
                    // in step; attempts take a KDF's time (milliseconds) to be decided.
                    let mut r = [0u8; 1];
                    let _ = getrandom::fill(&mut r);
                    std::thread::sleep(pause + pause * u32::from(r[0]) / 256);
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
            }
        }
    }

    /// A format-2 wrap for `owner` under `pin` with fresh salt and a new key pair, `token_key`
    /// delivered to it: the wrap and the PIN-derived key. Runs the KDF: call it outside write
    /// transactions, so other processes are not held up.
    pub(super) fn wrap(
        &self,
        token_key: &Key,
        shared: &Key,
        slot: CK_SLOT_ID,
        owner: PinOwner,
        pin: &[u8],
    ) -> (Vec<u8>, Key) {
        let salt = crypt::random_key();
        let salt = &salt[..16];
        let pin_key = crypt::derive_pin_key(pin, salt, self.kdf).expect("valid KDF parameters");
        let wrap = owners::new_wrap(token_key, shared, &pin_key, salt, self.kdf, slot, owner);
        (wrap, pin_key)
    }

    /// Checks `pin` against the token's wrap for `owner`; returns the token key.
    ///
    /// The attempt is reserved in the backend (one write transaction, so every process and
    /// host sees it) before the PIN is derived, and resolved after: see `PinCounter`. When the
    /// reservation cannot be written the PIN is not evaluated at all, so an unwritable store
    /// is no guessing oracle. The cached PIN key is consulted only after the reservation.
    ///
    /// Checks of one PIN in this process take turns, so a process has at most one attempt in
    /// flight per PIN and threads racing with the right PIN do not spend the failure budget of
    /// the whole fleet. When the budget is taken by attempts in flight elsewhere, this one
    /// waits for them to be decided (`reserve_waiting`).
    pub(super) fn check_pin(&self, slot: CK_SLOT_ID, owner: PinOwner, pin: &[u8]) -> Result<Checked> {
        let turn = self.pin_turn(slot, owner);
        let _turn = turn.lock();
        let (mut row, ticket, max) = self.reserve_waiting(slot, owner)?;
        let wrap = of(&mut row, owner).wrap.clone().unwrap_or_default();
        let w = Wrap(&wrap);
        let opened = self
            .pins
            .derive(slot, owner, &w, pin)
            .and_then(|k| Some((owners::open(&wrap, &k, slot, owner)?, k)));
        if opened.is_none() {
            self.pins.forget(slot, owner);
        }
        let resolved = transact(&*self.backend, |tx| {
            let Some(mut row) = tx.token(slot)? else {
                return fail(CKR_TOKEN_NOT_RECOGNIZED);
            };
            let counter = &mut of(&mut row, owner).counter;
            let was_locked = counter.locked;
            counter.resolve(ticket, opened.is_some(), max);
            let locked = counter.locked;
            tx.update_token(&row)?;
            self.audit_pin(tx, &row, owner, opened.is_some(), locked && !was_locked)?;
            Ok(locked)
        });
        let checked = |(opened, pin_key)| Checked { opened, pin_key, row };
        match (opened, resolved) {
            (Some(o), Ok(_)) => Ok(checked(o)),
            (Some(o), Err(_)) => {
                // The reservation stays in flight until waiters time it out and count it as
                // a failure: safe, and the PIN was right.
                log::warn!(
                    "slot {slot}: {owner:?} login succeeded but its attempt could not be recorded as decided; it will count as a failure"
                );
                Ok(checked(o))
            }
            (None, locked) => {
                if locked == Ok(true) {
                    log::warn!("slot {slot}: {owner:?} PIN locked after too many wrong attempts");
                }
                fail(CKR_PIN_INCORRECT)
            }
        }
    }
}

impl Sealed {
    /// After a right PIN: the owners' points of the row the PIN was checked against must be
    /// the ones its token key vouches for (`owners::verify`); else the store was altered.
    pub(super) fn check_owners(&self, slot: CK_SLOT_ID, checked: &Checked) -> Result<()> {
        if owners::verify(&checked.opened.key, &checked.row) {
            return Ok(());
        }
        log::error!(
            "token store {}: slot {slot}: the PIN owners' public keys fail authentication under the token key (one was replaced): the store was altered; restore it from a backup",
            self.backend.location()
        );
        fail(CKR_DEVICE_ERROR)
    }

    /// After a right PIN whose wrap is of format 1 (a store written before owner keys): the
    /// owner's wrap becomes format 2 (a new key pair, the same salt and PIN key) and the owners'
    /// points are authenticated again, in one transaction. Nothing happens when the wrap is
    /// already format 2 or changed since it was checked (the change is newer).
    pub(super) fn upgrade_wrap(&self, slot: CK_SLOT_ID, owner: PinOwner, checked: &Checked) -> Result<()> {
        let mut checked_row = checked.row.clone();
        let Some(wrap) = of(&mut checked_row, owner).wrap.clone() else {
            return Ok(());
        };
        if owners::version(&wrap) != owners::V1 {
            return Ok(());
        }
        let w = Wrap(&wrap);
        let (Some(salt), Some(params)) = (w.salt(), w.params()) else {
            return Ok(());
        };
        let o = &checked.opened;
        let new = owners::new_wrap(&o.key, &o.shared, &checked.pin_key, salt, params, slot, owner);
        let upgraded = transact(&*self.backend, |tx| {
            let Some(mut row) = tx.token(slot)? else {
                return fail(CKR_TOKEN_NOT_RECOGNIZED);
            };
            if row.epoch != checked.row.epoch
                || of(&mut row, owner).wrap.as_ref() != Some(&wrap)
                || !owners::verify(&o.key, &row)
            {
                return Ok(false);
            }
            of(&mut row, owner).wrap = Some(new.clone());
            let generation = owners::key_generation(&row);
            row.owners = Some(owners::seal(&o.key, &row, generation));
            tx.update_token(&row)?;
            Ok(true)
        })?;
        if upgraded {
            self.backend.forget_old_versions("the PIN's wrap was upgraded");
            log::info!("slot {slot}: the {owner:?} PIN's wrap of the token key was upgraded to an owner key");
        }
        Ok(())
    }
}
