//! Writes of object rows: every change of a token's objects is one transaction that rereads
//! the rows it replaces and writes only over the version its caller read (a compare-and-swap,
//! so no change made meanwhile by another process or host is lost), tags what it writes, and
//! updates the token's summary in the same transaction. Also the in-place upgrade of rows
//! written before records were authenticated, and the ledger's reading.

use super::ledger::Summary;
use super::{Sealed, Unlocked};
use crate::error::{fail, fail_because, Error, Result};
use crate::store::audit::{event, intent};
use crate::store::backend::{transact, ObjectRow, TagScan, TokenRow, Tx};
use crate::store::{ObjectRecord, CKR_CHANGED_MEANWHILE};
use cryptoki_sys::*;
use std::sync::Arc;

/// One change of a token's objects.
pub(super) enum Change<'a> {
    Create(&'a ObjectRecord),
    Update {
        id: u64,
        version: u64,
        record: &'a ObjectRecord,
    },
    Destroy {
        id: u64,
        version: u64,
    },
    /// The object must still be at `version` (the source of a copy).
    Unchanged {
        id: u64,
        version: u64,
    },
}

/// The label of a record, clear or secret: what its audit record hashes.
fn label_of(record: &ObjectRecord) -> Option<Vec<u8>> {
    record
        .clear
        .iter()
        .chain(&record.secret)
        .find(|(t, _)| *t == CKA_LABEL)
        .map(|(_, v)| v.to_vec())
}

/// How many rows an upgrade reads at a time inside its transaction.
const UPGRADE_BATCH: usize = 256;

impl Sealed {
    /// The token's summary, opened with this process's key; an error (logged) when it is
    /// missing or its MAC fails.
    pub(super) fn summary_of(&self, slot: CK_SLOT_ID, u: &Unlocked, token: &TokenRow) -> Result<Summary> {
        let Some(stored) = &token.summary else {
            log::error!(
                "token store {}: slot {slot} has no summary of its records; log in again to upgrade the store",
                self.backend.location()
            );
            return fail(CKR_DEVICE_ERROR);
        };
        Summary::open(&u.records, slot, u.epoch, stored).ok_or_else(|| {
            log::error!(
                "token store {}: the summary of slot {slot}'s records fails authentication: the store was altered; restore it from a backup",
                self.backend.location()
            );
            Error(CKR_DEVICE_ERROR)
        })
    }

    /// In a transaction: the row `id` as it is now, if it is still at `version`; a tagged row
    /// changes only with the token key.
    fn expect(
        &self,
        tx: &mut dyn Tx,
        slot: CK_SLOT_ID,
        id: u64,
        version: u64,
        keyed: bool,
    ) -> Result<ObjectRow> {
        let Some(row) = tx.object(slot, id)? else {
            return fail_because(
                CKR_OBJECT_HANDLE_INVALID,
                format!("object {id} of slot {slot} no longer exists"),
            );
        };
        if (row.tag.is_some() || row.private) && !keyed {
            return fail_because(
                CKR_USER_NOT_LOGGED_IN,
                format!("object {id} is authenticated under the token key: log in to change or destroy it"),
            );
        }
        if row.version != version {
            log::debug!(
                "slot {slot}: object {id} changed since it was read (version {version}, now {})",
                row.version
            );
            return fail(CKR_CHANGED_MEANWHILE);
        }
        Ok(row)
    }

    /// Applies `changes` in one transaction: new ids in order, and the ledger updated after
    /// the commit with what this process wrote.
    pub(super) fn write_changes(&self, slot: CK_SLOT_ID, changes: &[Change]) -> Result<Vec<u64>> {
        let mut wrote: Vec<(u64, Option<Vec<u8>>)> = Vec::new();
        let mut unlocked = None;
        let ids = transact(&*self.backend, |tx| {
            wrote.clear();
            let (u, mut token) = self.current(tx, slot)?;
            let mut summary = match &u {
                Some(u) => Some(self.summary_of(slot, u, &token)?),
                None => None,
            };
            let version = token.generation + 1;
            let key = u.as_ref().map(|u| &u.key);
            let mut ids = Vec::new();
            let mut records = Vec::new();
            let put = |tx: &mut dyn Tx, id: u64, record: &ObjectRecord, summary: &mut Option<Summary>| {
                let mut row = self.encode(slot, id, record, key)?;
                row.version = version;
                if let (Some(u), Some(s)) = (&u, summary.as_mut()) {
                    let tag = u.records.tag(slot, &row);
                    s.add(&u.records, id, &tag);
                    row.tag = Some(tag);
                }
                if !tx.put_object(slot, &row)? {
                    return fail_because(
                        CKR_OBJECT_HANDLE_INVALID,
                        format!("object {id} of slot {slot} no longer exists"),
                    );
                }
                Ok(row.tag)
            };
            for c in changes {
                match c {
                    Change::Create(record) => {
                        // The id is part of every seal and of the tag, so sealing follows it.
                        let id = tx.new_object(slot)?;
                        let tag = put(tx, id, record, &mut summary)?;
                        ids.push(id);
                        wrote.push((id, tag));
                        records.push(self.audit_change(
                            &token,
                            event::CREATE_OBJECT,
                            id,
                            record.index.class,
                            label_of(record),
                        ));
                    }
                    Change::Update {
                        id,
                        version: v,
                        record,
                    } => {
                        let old = self.expect(tx, slot, *id, *v, u.is_some())?;
                        if let (Some(u), Some(s), Some(t)) = (&u, summary.as_mut(), &old.tag) {
                            s.remove(&u.records, *id, t);
                        }
                        let tag = put(tx, *id, record, &mut summary)?;
                        wrote.push((*id, tag));
                        records.push(self.audit_change(
                            &token,
                            event::SET_ATTRIBUTE,
                            *id,
                            record.index.class,
                            label_of(record),
                        ));
                    }
                    Change::Destroy { id, version: v } => {
                        let old = self.expect(tx, slot, *id, *v, u.is_some())?;
                        if let (Some(u), Some(s), Some(t)) = (&u, summary.as_mut(), &old.tag) {
                            s.remove(&u.records, *id, t);
                        }
                        if !tx.delete_object(slot, *id)? {
                            return fail(CKR_OBJECT_HANDLE_INVALID);
                        }
                        wrote.push((*id, None));
                        let label = intent::current().and_then(|i| i.label);
                        records.push(self.audit_change(&token, event::DESTROY_OBJECT, *id, old.class, label));
                    }
                    Change::Unchanged { id, version: v } => {
                        self.expect(tx, slot, *id, *v, true)?;
                    }
                }
            }
            if let (Some(u), Some(mut s)) = (&u, summary) {
                s.generation = version;
                token.summary = Some(s.seal(&u.records, slot, u.epoch));
                tx.update_token(&token)?;
            }
            tx.bump_generation(slot)?;
            let shared = u.as_ref().map(|u| u.shared.clone());
            self.append_audit(tx, &token, records, shared.as_ref(), false)?;
            unlocked = u;
            Ok(ids)
        })?;
        if let Some(u) = unlocked {
            let mut ledger = u.ledger.lock();
            for (id, tag) in &wrote {
                ledger.wrote(*id, tag.as_deref());
            }
        }
        Ok(ids)
    }

    /// The audit record of one object change: the event the token layer named, else
    /// `default`.
    fn audit_change(
        &self,
        token: &TokenRow,
        default: &'static str,
        id: u64,
        class: Option<u64>,
        label: Option<Vec<u8>>,
    ) -> crate::store::audit::Record {
        let subject = super::audit::Subject {
            id: Some(id),
            class,
            label,
        };
        self.draft(token, Self::event_or(default), subject)
    }

    /// The summary of a token with no objects yet, under `token_key` (`init_token`).
    pub(super) fn empty_summary(&self, slot: CK_SLOT_ID, u: &Unlocked) -> Vec<u8> {
        Summary::default().seal(&u.records, slot, u.epoch)
    }

    /// Tags `row` as object of a new token (`import_token`): version and tag set, and its
    /// entry added to `summary`.
    pub(super) fn tag_new(
        &self,
        slot: CK_SLOT_ID,
        u: &Unlocked,
        row: &mut ObjectRow,
        version: u64,
        summary: &mut Summary,
    ) {
        row.version = version;
        let tag = u.records.tag(slot, row);
        summary.add(&u.records, row.id, &tag);
        row.tag = Some(tag);
    }

    /// Upgrades a token whose rows were written before records were authenticated: in one
    /// transaction, every row that opens under the token key and has the shape the module
    /// writes is tagged, and the summary written. A row that fails is logged and left
    /// untagged: it is not used (private) or not trusted (public). A process that dies
    /// half-way leaves the store as it was. Nothing happens when the token has a summary.
    pub(super) fn upgrade(&self, slot: CK_SLOT_ID, u: &Unlocked) -> Result<()> {
        let (tagged, refused) = transact(&*self.backend, |tx| {
            let Some(mut token) = tx.token(slot)? else {
                return fail(CKR_TOKEN_NOT_RECOGNIZED);
            };
            if token.summary.is_some() || token.epoch != u.epoch {
                return Ok((0, 0));
            }
            let version = token.generation + 1;
            let mut summary = Summary {
                generation: version,
                ..Summary::default()
            };
            let (mut tagged, mut refused) = (0usize, 0usize);
            let mut after = 0;
            loop {
                let rows = tx.objects_after(slot, after, UPGRADE_BATCH)?;
                let Some(last) = rows.last() else { break };
                after = last.id;
                for mut row in rows {
                    if row.tag.is_some() || self.decode(slot, &row, Some(&u.key), false).is_err() {
                        refused += 1;
                        continue;
                    }
                    self.tag_new(slot, u, &mut row, version, &mut summary);
                    tx.put_object(slot, &row)?;
                    tagged += 1;
                }
            }
            token.summary = Some(summary.seal(&u.records, slot, u.epoch));
            tx.update_token(&token)?;
            tx.bump_generation(slot)?;
            Ok((tagged, refused))
        })?;
        if tagged > 0 {
            // Every row was written again: without this the log stays as large as the store.
            self.backend.forget_old_versions("the upgrade");
        }
        if tagged + refused > 0 {
            log::info!(
                "token store {}: slot {slot} upgraded to authenticated records: {tagged} record(s) tagged{}",
                self.backend.location(),
                if refused > 0 {
                    format!(", {refused} refused (logged above) and left unused")
                } else {
                    String::new()
                }
            );
        }
        Ok(())
    }

    /// Reads the ledger again in full (one index scan) and checks it against the token's
    /// summary; whether it adds up. When it does not, the ledger is broken (every tagged row
    /// is refused) and an error says so.
    /// A summary that does not open because another process replaced the key meanwhile is
    /// `CKR_USER_NOT_LOGGED_IN` (`Sealed::key_replaced`), not a broken ledger.
    pub(super) fn reread_ledger(&self, slot: CK_SLOT_ID, u: &Arc<Unlocked>) -> Result<bool> {
        let scan = self.backend.tags(slot)?;
        let opens = scan
            .summary
            .as_deref()
            .is_some_and(|s| Summary::open(&u.records, slot, u.epoch, s).is_some());
        if !opens && self.key_replaced(slot, u) {
            return fail(CKR_USER_NOT_LOGGED_IN);
        }
        Ok(self.check_ledger(slot, u, scan))
    }

    /// `reread_ledger` on a scan already made.
    pub(super) fn check_ledger(&self, slot: CK_SLOT_ID, u: &Unlocked, scan: TagScan) -> bool {
        let summary = scan
            .summary
            .as_deref()
            .and_then(|s| super::ledger::Summary::open(&u.records, slot, u.epoch, s));
        let mut ledger = u.ledger.lock();
        let adds_up = ledger.rebuild(&u.records, summary, &scan);
        if !adds_up {
            let why = match (&scan.summary, summary) {
                (None, _) => "the token has no summary of its records".to_string(),
                (Some(_), None) => "the token's summary fails authentication".to_string(),
                (Some(_), Some(s)) => format!(
                    "{} record(s) with tags do not add up to the token's summary of {} (a record was removed, had its tag stripped, or was put back to an older copy of itself)",
                    ledger.len(),
                    s.count
                ),
            };
            log::error!(
                "token store {}: slot {slot}: {why}; the token's records are not used until the store is restored from a backup",
                self.backend.location()
            );
        }
        adds_up
    }
}
