//! Appending to a token's audit chain (`store::audit`) inside the write transactions of the
//! sealed store, and the audit key's life: made by the SO, sealed under the owners' secret,
//! used for checkpoints.
//!
//! The head of the chain is read inside the transaction: writers of a store are serialised
//! (SQLite's BEGIN IMMEDIATE, PostgreSQL's advisory lock), so every process and host appends
//! after the record the last commit wrote, and the chain never forks; the table's key
//! (token, number) refuses a second record of one number should that ever fail.
//!
//! The audit key's private half is sealed (AES-256-GCM) under a key derived from the owners'
//! secret `S` (`owners`): both PINs open it, it is never in the store in clear, and it stays
//! the same through PIN changes and key rotations, so the audit key survives them without
//! being sealed again. A re-initialisation makes a new `S`: the SO makes a new audit key.

use super::crypt::{Cipher, Key};
use super::{PinOwner, Sealed};
use crate::error::{fail, fail_because, Error, Result};
use crate::store::audit::{self, chain, checkpoint, event, intent, Entry, Record};
use crate::store::backend::{transact, AuditRow, TokenRow, Tx};
use cryptoki_sys::*;
use ed25519_dalek::{SigningKey, VerifyingKey};
use hmac::{KeyInit, Mac};

/// A checkpoint follows every this many records, written by a process that holds `S`; and
/// one at every logout.
const CHECKPOINT_EVERY: u64 = 256;

/// What a record says of its object.
#[derive(Default)]
pub(super) struct Subject {
    pub id: Option<u64>,
    pub class: Option<u64>,
    pub label: Option<Vec<u8>>,
}

fn key_aad(slot: CK_SLOT_ID, public: &[u8]) -> Vec<u8> {
    let mut a = b"ferrohsm audit key".to_vec();
    a.extend_from_slice(&slot.to_be_bytes());
    a.extend_from_slice(public);
    a
}

fn sealer(shared: &Key, slot: CK_SLOT_ID) -> Cipher {
    let mut m = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&shared[..]).expect("any key length");
    m.update(b"ferrohsm audit key sealing");
    m.update(&slot.to_be_bytes());
    let mut k = Key::default();
    k.copy_from_slice(&m.finalize().into_bytes());
    Cipher::new(&k)
}

fn owner_name(owner: PinOwner) -> &'static str {
    match owner {
        PinOwner::So => "so",
        PinOwner::User => "user",
    }
}

impl Sealed {
    /// A record of `event` on this token by this caller, outcome `ok`, with the mechanism the
    /// token layer named (`intent`).
    pub(super) fn draft(&self, token: &TokenRow, event: &str, subject: Subject) -> Record {
        let intent = intent::current();
        Record {
            seq: 0,
            time: audit::time::now(),
            event: event.to_string(),
            token: token.serial.clone(),
            slot: token.slot_id,
            object: subject.id,
            class: subject.class,
            label_hash: subject.label.as_deref().map(audit::label_hash),
            mechanism: intent.as_ref().and_then(|i| i.mechanism),
            attributes: intent.map(|i| i.attributes).unwrap_or_default(),
            outcome: "ok".into(),
            pid: std::process::id(),
            user: intent::os_user(),
            client: intent::client(),
            detail: None,
        }
    }

    /// The event the token layer says is under way, else `default`.
    pub(super) fn event_or(default: &'static str) -> &'static str {
        intent::current().map_or(default, |i| i.event)
    }

    /// In a transaction: appends `records` after the chain's head, then a checkpoint when one
    /// is due (`force`, or a multiple of `CHECKPOINT_EVERY` reached) and `shared` (this
    /// process's `S`) opens the token's audit key.
    pub(super) fn append_audit(
        &self,
        tx: &mut dyn Tx,
        token: &TokenRow,
        records: Vec<Record>,
        shared: Option<&Key>,
        force: bool,
    ) -> Result<()> {
        let slot = token.slot_id;
        let head = tx.audit_head(slot)?;
        let (mut seq, mut prev) = match head {
            Some(h) => (h.seq, h.hash),
            None => (0, chain::ZERO.to_vec()),
        };
        let mut due = force;
        for mut r in records {
            seq += 1;
            r.seq = seq;
            prev = self.put_entry(tx, slot, chain::link(&prev, r))?;
            due |= seq.is_multiple_of(CHECKPOINT_EVERY);
        }
        let Some(shared) = shared.filter(|_| due) else {
            return Ok(());
        };
        let Some(signer) = self.audit_signer(tx, slot, shared)? else {
            return Ok(());
        };
        let mut r = self.draft(token, event::CHECKPOINT, Subject::default());
        // It vouches for the chain, not for the call that happened to write it.
        r.mechanism = None;
        r.attributes.clear();
        r.seq = seq + 1;
        r.detail = Some(audit::hex(&checkpoint::sign(
            &signer, &r.token, r.seq, &r.time, &prev,
        )));
        self.put_entry(tx, slot, chain::link(&prev, r)).map(drop)
    }

    /// Writes one linked entry; its hash, for the next.
    fn put_entry(&self, tx: &mut dyn Tx, slot: CK_SLOT_ID, e: Entry) -> Result<Vec<u8>> {
        let hash = audit::unhex(&e.hash).unwrap_or_default();
        let body = serde_json::to_vec(&e).map_err(|_| Error(CKR_GENERAL_ERROR))?;
        tx.audit_append(
            slot,
            &AuditRow {
                seq: e.record.seq,
                body,
                hash: hash.clone(),
            },
        )?;
        Ok(hash)
    }

    /// The token's audit key, opened with `shared`; `None` when the SO has made none.
    fn audit_signer(&self, tx: &mut dyn Tx, slot: CK_SLOT_ID, shared: &Key) -> Result<Option<SigningKey>> {
        let Some((public, sealed)) = tx.audit_key(slot)? else {
            return Ok(None);
        };
        let seed = sealer(shared, slot).open(&sealed, &key_aad(slot, &public));
        let key = seed
            .as_deref()
            .and_then(|s| <[u8; 32]>::try_from(s.as_slice()).ok())
            .map(|s| SigningKey::from_bytes(&s))
            .filter(|k| k.verifying_key().as_bytes() == public.as_slice());
        match key {
            Some(k) => Ok(Some(k)),
            None => {
                log::error!(
                    "token store {}: slot {slot}: the audit key does not open under this token's owners' secret (the token was re-initialised, or the store altered); the SO makes a new one with `ferrohsm-util audit init --replace`",
                    self.backend.location()
                );
                Ok(None)
            }
        }
    }

    /// One record in a transaction of its own (a logout, a key wrapped): nothing in the store
    /// changes but the chain.
    pub(super) fn audit_alone(
        &self,
        slot: CK_SLOT_ID,
        event: &str,
        subject: Subject,
        force: bool,
    ) -> Result<()> {
        let shared = self.unlocked(slot).map(|u| u.shared.clone());
        self.audit_alone_with(slot, event, subject, shared.as_ref(), force)
    }

    pub(super) fn audit_alone_with(
        &self,
        slot: CK_SLOT_ID,
        event: &str,
        subject: Subject,
        shared: Option<&Key>,
        force: bool,
    ) -> Result<()> {
        let mut subject = Some(subject);
        transact(&*self.backend, |tx| {
            let Some(token) = tx.token(slot)? else {
                return fail(CKR_TOKEN_NOT_RECOGNIZED);
            };
            let r = self.draft(&token, event, subject.take().unwrap_or_default());
            self.append_audit(tx, &token, vec![r], shared, force)
        })
    }

    /// In the transaction that decides a PIN attempt: a failure of the event under way
    /// (`login`, `set_pin`, ...), and `pin_locked` when it locked the PIN; a successful login.
    pub(super) fn audit_pin(
        &self,
        tx: &mut dyn Tx,
        token: &TokenRow,
        owner: PinOwner,
        ok: bool,
        locked: bool,
    ) -> Result<()> {
        let ev = Self::event_or(event::LOGIN);
        if ok && ev != event::LOGIN {
            // Recorded by the change it allows (a PIN change, a rotation).
            return Ok(());
        }
        let mut r = self.draft(token, ev, Subject::default());
        r.detail = Some(owner_name(owner).into());
        let mut records = vec![];
        if !ok {
            r.outcome = "CKR_PIN_INCORRECT".into();
            if locked {
                let mut l = r.clone();
                l.event = event::PIN_LOCKED.into();
                l.outcome = "CKR_PIN_LOCKED".into();
                records.push(r);
                r = l;
            }
        }
        records.push(r);
        self.append_audit(tx, token, records, None, false)
    }

    /// In the transaction that found the PIN locked: the attempt, refused unchecked.
    pub(super) fn audit_refused(&self, tx: &mut dyn Tx, token: &TokenRow, owner: PinOwner) -> Result<()> {
        let mut r = self.draft(token, Self::event_or(event::LOGIN), Subject::default());
        r.detail = Some(owner_name(owner).into());
        r.outcome = "CKR_PIN_LOCKED".into();
        self.append_audit(tx, token, vec![r], None, false)
    }

    /// The record of a PIN owner's change (`init_token`, `init_pin`, `set_pin`,
    /// `rotate_key`), in its transaction.
    pub(super) fn audit_owner(
        &self,
        tx: &mut dyn Tx,
        token: &TokenRow,
        default: &'static str,
        owner: PinOwner,
        shared: Option<&Key>,
    ) -> Result<()> {
        let mut r = self.draft(token, Self::event_or(default), Subject::default());
        r.detail = Some(owner_name(owner).into());
        self.append_audit(tx, token, vec![r], shared, false)
    }

    /// The token's audit log as the store holds it, from record `after + 1`.
    pub fn audit_log(&self, slot: CK_SLOT_ID, after: u64) -> Result<Vec<Vec<u8>>> {
        Ok(self
            .backend
            .audit_rows(slot, after)?
            .into_iter()
            .map(|r| r.body)
            .collect())
    }

    /// `ferrohsm-util audit init`: the SO makes the token's audit key; its public half is
    /// returned for the file the verifier gets. A second key replaces the first only with
    /// `replace` (after a re-initialisation, whose new owners' secret cannot open the old).
    pub fn audit_init(&self, slot: CK_SLOT_ID, so_pin: &[u8], replace: bool) -> Result<VerifyingKey> {
        let checked = self.check_pin(slot, PinOwner::So, so_pin)?;
        self.check_owners(slot, &checked)?;
        let shared = checked.opened.shared.clone();
        let seed = super::crypt::random_key();
        let signer = SigningKey::from_bytes(&seed);
        let public = signer.verifying_key();
        transact(&*self.backend, |tx| {
            let Some(token) = tx.token(slot)? else {
                return fail(CKR_TOKEN_NOT_RECOGNIZED);
            };
            if tx.audit_key(slot)?.is_some() && !replace {
                return fail_because(
                    CKR_FUNCTION_FAILED,
                    format!("slot {slot} has an audit key already: verify with its public key file, or make a new one with --replace"),
                );
            }
            let sealed = sealer(&shared, slot).seal(&seed[..], &key_aad(slot, public.as_bytes()));
            tx.put_audit_key(slot, public.as_bytes(), &sealed)?;
            let mut r = self.draft(&token, event::AUDIT_KEY, Subject::default());
            r.detail = Some(audit::hex(public.as_bytes()));
            self.append_audit(tx, &token, vec![r], Some(&shared), true)
        })?;
        Ok(public)
    }

    /// `ferrohsm-util audit checkpoint`: a signed checkpoint now, by either PIN owner.
    pub fn audit_checkpoint(&self, slot: CK_SLOT_ID, owner: PinOwner, pin: &[u8]) -> Result<()> {
        let checked = self.check_pin(slot, owner, pin)?;
        self.check_owners(slot, &checked)?;
        let shared = checked.opened.shared.clone();
        transact(&*self.backend, |tx| {
            let Some(token) = tx.token(slot)? else {
                return fail(CKR_TOKEN_NOT_RECOGNIZED);
            };
            if tx.audit_key(slot)?.is_none() {
                return fail_because(
                    CKR_FUNCTION_FAILED,
                    format!("slot {slot} has no audit key: the SO makes one with `ferrohsm-util audit init`"),
                );
            }
            self.append_audit(tx, &token, vec![], Some(&shared), true)
        })
    }

    /// `ferrohsm-util audit prune`: removes the records older than `before` (a time as records
    /// write it, or a prefix of one), by the SO. The cut is made at the newest checkpoint
    /// older than `before`, which stays as the first record: a pruned log still verifies.
    /// Returns the number of the first record kept.
    pub fn audit_prune(&self, slot: CK_SLOT_ID, so_pin: &[u8], before: &str) -> Result<u64> {
        let checked = self.check_pin(slot, PinOwner::So, so_pin)?;
        self.check_owners(slot, &checked)?;
        let shared = checked.opened.shared.clone();
        let cut = self
            .backend
            .audit_rows(slot, 0)?
            .iter()
            .filter_map(|r| serde_json::from_slice::<Entry>(&r.body).ok())
            .filter(|e| e.record.event == event::CHECKPOINT && e.record.time.as_str() < before)
            .map(|e| e.record.seq)
            .max();
        let Some(cut) = cut else {
            return fail_because(
                CKR_FUNCTION_FAILED,
                format!("slot {slot}: no signed checkpoint older than {before} to cut at; nothing was removed (run `ferrohsm-util audit checkpoint`, and prune after that checkpoint's time)"),
            );
        };
        transact(&*self.backend, |tx| {
            let Some(token) = tx.token(slot)? else {
                return fail(CKR_TOKEN_NOT_RECOGNIZED);
            };
            tx.audit_prune(slot, cut)?;
            let mut r = self.draft(&token, event::PRUNED, Subject::default());
            r.detail = Some(format!("records before {cut} removed"));
            self.append_audit(tx, &token, vec![r], Some(&shared), true)
        })?;
        Ok(cut)
    }
}
