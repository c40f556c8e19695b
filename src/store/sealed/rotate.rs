//! Replacing a token's key (C_SetPIN, C_InitPIN, `ferrohsm-util rotate-key`): in one
//! transaction, a new token key; every object row checked under the old key (tag, seals,
//! lookup hashes, and all of them against the summary) and written again under the new one;
//! the summary rebuilt; the changing owner given a new key pair under its (new) PIN, the other
//! owner the new key at its point (`owners`), which the old key must vouch for. An old wrap,
//! with its old PIN, opens only the old key, under which nothing current is sealed. A process
//! that dies half-way leaves the store as it was.

use super::ledger::Summary;
use super::pin::of;
use super::{owners, Sealed, Unlocked};
use crate::error::{fail, fail_because, Result};
use crate::store::audit::event;
use crate::store::backend::{transact, TokenRow, Tx};
use crate::store::{PinOwner, CKR_CHANGED_MEANWHILE};
use cryptoki_sys::*;
use std::sync::Arc;

/// How many rows a rotation reads at a time inside its transaction.
const BATCH: usize = 256;

fn other(owner: PinOwner) -> PinOwner {
    match owner {
        PinOwner::So => PinOwner::User,
        PinOwner::User => PinOwner::So,
    }
}

impl Sealed {
    /// Replaces the token key held in `held`, giving `owner` a new wrap under `pin`; with
    /// `new_user_pin` (C_InitPIN) the user PIN's failure count starts again. This process, if
    /// logged in to the token, holds the new key afterwards.
    pub(super) fn rotate(
        &self,
        slot: CK_SLOT_ID,
        held: &Arc<Unlocked>,
        owner: PinOwner,
        pin: &[u8],
        new_user_pin: bool,
    ) -> Result<()> {
        let next = owners::Opened {
            key: super::crypt::random_key(),
            shared: held.shared.clone(),
        };
        // The KDF runs before the write transaction so other processes are not held up.
        let (wrap, pin_key) = self.wrap(&next.key, &next.shared, slot, owner, pin);
        let (row, counts) = transact(&*self.backend, |tx| {
            let mut row = self.rotatable(tx, slot, held, owner)?;
            let other = other(owner);
            if let Some(w) = of(&mut row, other).wrap.clone() {
                let delivered = owners::redeliver(&w, &next.key, &next.shared, slot, other)
                    .ok_or_else(|| self.damaged_token(slot, "the other PIN's wrap is unreadable"))?;
                of(&mut row, other).wrap = Some(delivered);
            }
            of(&mut row, owner).wrap = Some(wrap.clone());
            if new_user_pin {
                // A new PIN starts a new count; the ticket counter keeps growing.
                row.user.counter.restart();
            }
            let generation = owners::key_generation(&row) + 1;
            row.owners = Some(owners::seal(&next.key, &row, generation));
            let new = Unlocked::new(&row, next.clone());
            let counts = self.reseal_rows(tx, slot, held, &new, &mut row)?;
            tx.update_token(&row)?;
            let ev = if new_user_pin {
                event::INIT_PIN
            } else {
                event::ROTATE_KEY
            };
            self.audit_owner(tx, &row, ev, owner, Some(&next.shared))?;
            tx.bump_generation(slot)?;
            Ok((row, counts))
        })?;
        self.backend.forget_old_versions("the token key was replaced");
        self.pins.remember(slot, owner, &wrap, pin, pin_key);
        let (resealed, untagged) = counts;
        log::info!(
            "slot {slot}: the token key was replaced ({owner:?} PIN {}); {resealed} record(s) sealed again under it{}",
            if new_user_pin { "set by the SO" } else { "changed or kept" },
            if untagged > 0 {
                format!(", {untagged} unusable untagged record(s) left as they were")
            } else {
                String::new()
            }
        );
        let logged_in = self.unlocked(slot).is_some_and(|u| u.epoch == held.epoch);
        if logged_in {
            let u = Arc::new(Unlocked::new(&row, next));
            self.reread_ledger(slot, &u)?;
            self.keys.lock().insert(slot, u);
        }
        Ok(())
    }

    /// `ferrohsm-util rotate-key`: checks `owner`'s PIN and replaces the token key, the PIN
    /// unchanged (its wrap gets a new key pair and salt).
    pub fn rotate_key(&self, slot: CK_SLOT_ID, owner: PinOwner, pin: &[u8]) -> Result<()> {
        self.with_pin(slot, owner, pin, pin)
    }

    /// Checks `owner`'s `old` PIN and rotates, its wrap made under `new`. When another process
    /// replaced the key between the check and the rotation's transaction, the PIN is checked
    /// again (against the new wrap) and the rotation made again.
    pub(super) fn with_pin(&self, slot: CK_SLOT_ID, owner: PinOwner, old: &[u8], new: &[u8]) -> Result<()> {
        for _ in 0..super::MAX_REREADS {
            let checked = self.check_pin(slot, owner, old)?;
            self.check_owners(slot, &checked)?;
            let held = Arc::new(Unlocked::new(&checked.row, checked.opened));
            match self.rotate(slot, &held, owner, new, false) {
                Err(e) if e.rv() == CKR_CHANGED_MEANWHILE => continue,
                r => return r,
            }
        }
        fail_because(
            CKR_FUNCTION_FAILED,
            format!("slot {slot}: other processes kept replacing the token key; try again"),
        )
    }

    /// In the rotation's transaction: the token row, if `held` is still its key and vouches
    /// for the owners' points, and the other owner can be reached.
    fn rotatable(
        &self,
        tx: &mut dyn Tx,
        slot: CK_SLOT_ID,
        held: &Arc<Unlocked>,
        owner: PinOwner,
    ) -> Result<TokenRow> {
        let Some(mut row) = tx.token(slot)? else {
            return fail(CKR_TOKEN_NOT_RECOGNIZED);
        };
        if !held.is_current(&row) {
            // `with_pin` checks the PIN again; a login's key is gone (`init_pin`).
            self.drop_stale(slot, held, &row);
            log::debug!("slot {slot}: the token key was replaced or the token re-initialised meanwhile");
            return fail(CKR_CHANGED_MEANWHILE);
        }
        // Else a writer of the store puts its own point in and receives the new key.
        if !owners::verify(&held.key, &row) {
            return Err(self.damaged_token(
                slot,
                "the PIN owners' public keys fail authentication under the token key (one was replaced); the key was not replaced",
            ));
        }
        let other = other(owner);
        let unreachable = of(&mut row, other)
            .wrap
            .as_deref()
            .is_some_and(|w| owners::version(w) == owners::V1);
        if unreachable {
            let who = if other == PinOwner::So { "SO" } else { "user" };
            return fail_because(
                CKR_FUNCTION_FAILED,
                format!(
                    "slot {slot}: the {who} has not logged in since the store was upgraded, so the new token key cannot be given to the {who} PIN; log in as {who} once, then try again"
                ),
            );
        }
        Ok(row)
    }

    /// Every object row of the token, checked under `old` and written again under `new`; the
    /// rows checked must add up to the token's summary (none removed or put back). Sets
    /// `row.summary` under the new key; returns the rows resealed and the untagged ones left.
    fn reseal_rows(
        &self,
        tx: &mut dyn Tx,
        slot: CK_SLOT_ID,
        old: &Unlocked,
        new: &Unlocked,
        row: &mut TokenRow,
    ) -> Result<(usize, usize)> {
        let stored = self.summary_of(slot, old, row)?;
        let version = row.generation + 1;
        let mut seen = Summary::default();
        let mut summary = Summary {
            generation: version,
            ..Summary::default()
        };
        let (mut resealed, mut untagged) = (0, 0);
        let mut after = 0;
        loop {
            let rows = tx.objects_after(slot, after, BATCH)?;
            let Some(last) = rows.last() else { break };
            after = last.id;
            for r in rows {
                let Some(tag) = &r.tag else {
                    // Public and sealing nothing (no key involved), or refused when the store
                    // was upgraded and never used: left as it is.
                    untagged += usize::from(r.private || !r.sealed.is_empty());
                    continue;
                };
                if !old.records.verify(slot, &r) {
                    return Err(self.damaged(
                        slot,
                        r.id,
                        "its tag does not match its contents; the token key was not replaced",
                    ));
                }
                seen.add(&old.records, r.id, tag);
                let mut again = self.reseal(slot, &r, &old.key, &new.key)?;
                self.tag_new(slot, new, &mut again, version, &mut summary);
                tx.put_object(slot, &again)?;
                resealed += 1;
            }
        }
        if (seen.count, seen.sum) != (stored.count, stored.sum) {
            return Err(self.damaged_token(
                slot,
                "its records do not add up to its summary (one was removed or put back to an older copy); the token key was not replaced",
            ));
        }
        row.summary = Some(summary.seal(&new.records, slot, new.epoch));
        Ok((resealed, untagged))
    }

    /// The error of a token row that cannot be trusted, with the log line naming it.
    fn damaged_token(&self, slot: CK_SLOT_ID, what: &str) -> crate::error::Error {
        log::error!(
            "token store {}: slot {slot}: {what}; restore the store from a backup",
            self.backend.location()
        );
        crate::error::Error(CKR_DEVICE_ERROR)
    }
}
