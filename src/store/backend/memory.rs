//! A backend in process memory: for tests and temporary tokens (`ferrohsm-util speed`). It
//! keeps the same rows as SQLite, so the sealed layer above it behaves exactly as it does on
//! disk (logins, sealing, lockout). A transaction that fails is undone from its journal.

use super::{AuditKey, AuditRow, Backend, Match, ObjectRow, RowQuery, TagScan, TokenRow, Tx};
use crate::error::Result;
use crate::store::MAX_OBJECT_ID;
use cryptoki_sys::*;
use parking_lot::Mutex;
use std::collections::BTreeMap;

#[derive(Default)]
struct State {
    tokens: BTreeMap<CK_SLOT_ID, TokenRow>,
    /// By id; ids are unique across tokens, as in SQLite.
    objects: BTreeMap<u64, (CK_SLOT_ID, ObjectRow)>,
    last_id: u64,
    /// Audit records by token, in chain order, and audit keys (public, sealed).
    audit: BTreeMap<CK_SLOT_ID, Vec<AuditRow>>,
    audit_keys: BTreeMap<CK_SLOT_ID, (Vec<u8>, Vec<u8>)>,
}

/// What a transaction changed, to put back if it fails.
enum Undo {
    Token(CK_SLOT_ID, Option<TokenRow>),
    Object(u64, Option<(CK_SLOT_ID, ObjectRow)>),
    /// A token's audit records and key as they were.
    Audit(CK_SLOT_ID, Vec<AuditRow>, Option<AuditKey>),
}

#[derive(Default)]
pub struct MemoryBackend {
    state: Mutex<State>,
    /// Uses of limited keys by object id (`Backend::count_use`); apart from `state`, as the
    /// other backends keep them in a table of their own. Ids are never reused, so the count
    /// of a destroyed key is never read again.
    uses: Mutex<BTreeMap<u64, u64>>,
}

impl MemoryBackend {
    pub fn new() -> Self {
        Self::default()
    }
}

struct MemTx<'a> {
    state: &'a mut State,
    journal: Vec<Undo>,
    /// `import_uses` of this transaction, kept into `MemoryBackend::uses` when it commits.
    uses: Vec<(u64, u64)>,
}

impl MemTx<'_> {
    fn set_token(&mut self, slot: CK_SLOT_ID, row: Option<TokenRow>) {
        let old = match row {
            Some(r) => self.state.tokens.insert(slot, r),
            None => self.state.tokens.remove(&slot),
        };
        self.journal.push(Undo::Token(slot, old));
    }

    fn set_object(&mut self, id: u64, row: Option<(CK_SLOT_ID, ObjectRow)>) {
        let old = match row {
            Some(r) => self.state.objects.insert(id, r),
            None => self.state.objects.remove(&id),
        };
        self.journal.push(Undo::Object(id, old));
    }

    /// Journals the token's audit state before a change of it.
    fn save_audit(&mut self, slot: CK_SLOT_ID) {
        let rows = self.state.audit.get(&slot).cloned().unwrap_or_default();
        let key = self.state.audit_keys.get(&slot).cloned();
        self.journal.push(Undo::Audit(slot, rows, key));
    }

    fn rollback(self) {
        for u in self.journal.into_iter().rev() {
            match u {
                Undo::Token(slot, Some(r)) => {
                    self.state.tokens.insert(slot, r);
                }
                Undo::Token(slot, None) => {
                    self.state.tokens.remove(&slot);
                }
                Undo::Object(id, Some(r)) => {
                    self.state.objects.insert(id, r);
                }
                Undo::Object(id, None) => {
                    self.state.objects.remove(&id);
                }
                Undo::Audit(slot, rows, key) => {
                    self.state.audit.insert(slot, rows);
                    match key {
                        Some(k) => self.state.audit_keys.insert(slot, k),
                        None => self.state.audit_keys.remove(&slot),
                    };
                }
            }
        }
    }
}

impl Tx for MemTx<'_> {
    fn token(&mut self, slot: CK_SLOT_ID) -> Result<Option<TokenRow>> {
        Ok(self.state.tokens.get(&slot).cloned())
    }

    fn max_slot(&mut self) -> Result<Option<CK_SLOT_ID>> {
        Ok(self.state.tokens.keys().next_back().copied())
    }

    fn slot_of_serial(&mut self, serial: &str) -> Result<Option<CK_SLOT_ID>> {
        Ok(self
            .state
            .tokens
            .values()
            .find(|t| t.serial == serial)
            .map(|t| t.slot_id))
    }

    fn insert_token(&mut self, row: &TokenRow) -> Result<()> {
        if self.state.tokens.contains_key(&row.slot_id) {
            log::error!("token store in memory: slot {} is taken", row.slot_id);
            return crate::error::fail(CKR_DEVICE_ERROR);
        }
        // A new token starts at generation 1, as in SQLite.
        let row = TokenRow {
            generation: 1,
            ..row.clone()
        };
        self.set_token(row.slot_id, Some(row));
        Ok(())
    }

    fn update_token(&mut self, row: &TokenRow) -> Result<()> {
        if let Some(old) = self.state.tokens.get(&row.slot_id) {
            let row = TokenRow {
                generation: old.generation,
                ..row.clone()
            };
            self.set_token(row.slot_id, Some(row));
        }
        Ok(())
    }

    fn delete_token(&mut self, slot: CK_SLOT_ID) -> Result<bool> {
        if !self.state.tokens.contains_key(&slot) {
            return Ok(false);
        }
        self.delete_objects(slot)?;
        self.set_token(slot, None);
        Ok(true)
    }

    fn delete_objects(&mut self, slot: CK_SLOT_ID) -> Result<()> {
        let ids: Vec<u64> = self
            .state
            .objects
            .iter()
            .filter(|(_, (s, _))| *s == slot)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.set_object(id, None);
        }
        Ok(())
    }

    fn new_object(&mut self, slot: CK_SLOT_ID) -> Result<u64> {
        // Like AUTOINCREMENT: above every id ever handed out, even by a failed transaction.
        self.state.last_id += 1;
        let id = self.state.last_id;
        if id >= MAX_OBJECT_ID {
            return crate::error::fail_because(CKR_DEVICE_MEMORY, "the store has run out of object ids");
        }
        let row = ObjectRow {
            id,
            private: true,
            ..ObjectRow::default()
        };
        self.set_object(id, Some((slot, row)));
        Ok(id)
    }

    fn object(&mut self, slot: CK_SLOT_ID, id: u64) -> Result<Option<ObjectRow>> {
        Ok(self
            .state
            .objects
            .get(&id)
            .filter(|(s, _)| *s == slot)
            .map(|(_, r)| r.clone()))
    }

    fn objects_after(&mut self, slot: CK_SLOT_ID, after: u64, limit: usize) -> Result<Vec<ObjectRow>> {
        Ok(self
            .state
            .objects
            .range(after.saturating_add(1)..)
            .filter(|(_, (s, _))| *s == slot)
            .take(limit)
            .map(|(_, (_, r))| r.clone())
            .collect())
    }

    fn put_object(&mut self, slot: CK_SLOT_ID, row: &ObjectRow) -> Result<bool> {
        match self.state.objects.get(&row.id) {
            Some((s, _)) if *s == slot => {
                self.set_object(row.id, Some((slot, row.clone())));
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn import_uses(&mut self, slot: CK_SLOT_ID, id: u64, uses: u64) -> Result<()> {
        if self.state.objects.get(&id).is_none_or(|(s, _)| *s != slot) {
            return crate::error::fail(CKR_KEY_HANDLE_INVALID);
        }
        self.uses.push((id, uses));
        Ok(())
    }

    fn import_object(&mut self, slot: CK_SLOT_ID, row: &ObjectRow) -> Result<()> {
        if self.state.objects.contains_key(&row.id) {
            return crate::error::fail_because(
                CKR_FUNCTION_FAILED,
                format!("object id {} is already in use", row.id),
            );
        }
        self.state.last_id = self.state.last_id.max(row.id);
        self.set_object(row.id, Some((slot, row.clone())));
        Ok(())
    }

    fn delete_object(&mut self, slot: CK_SLOT_ID, id: u64) -> Result<bool> {
        match self.state.objects.get(&id) {
            Some((s, _)) if *s == slot => {
                self.set_object(id, None);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn bump_generation(&mut self, slot: CK_SLOT_ID) -> Result<()> {
        if let Some(mut row) = self.state.tokens.get(&slot).cloned() {
            row.generation += 1;
            self.set_token(slot, Some(row));
        }
        Ok(())
    }

    fn audit_head(&mut self, slot: CK_SLOT_ID) -> Result<Option<AuditRow>> {
        Ok(self.state.audit.get(&slot).and_then(|r| r.last().cloned()))
    }

    fn audit_append(&mut self, slot: CK_SLOT_ID, row: &AuditRow) -> Result<()> {
        self.save_audit(slot);
        let rows = self.state.audit.entry(slot).or_default();
        if rows.last().is_some_and(|l| l.seq >= row.seq) {
            return crate::error::fail_because(CKR_FUNCTION_FAILED, "audit record number in use");
        }
        rows.push(row.clone());
        Ok(())
    }

    fn audit_prune(&mut self, slot: CK_SLOT_ID, seq: u64) -> Result<()> {
        self.save_audit(slot);
        if let Some(rows) = self.state.audit.get_mut(&slot) {
            rows.retain(|r| r.seq >= seq);
        }
        if seq == u64::MAX {
            self.state.audit_keys.remove(&slot);
        }
        Ok(())
    }

    fn audit_key(&mut self, slot: CK_SLOT_ID) -> Result<Option<AuditKey>> {
        Ok(self.state.audit_keys.get(&slot).cloned())
    }

    fn put_audit_key(&mut self, slot: CK_SLOT_ID, public: &[u8], sealed: &[u8]) -> Result<()> {
        self.save_audit(slot);
        self.state
            .audit_keys
            .insert(slot, (public.to_vec(), sealed.to_vec()));
        Ok(())
    }
}

impl Backend for MemoryBackend {
    fn location(&self) -> String {
        "in memory".into()
    }

    fn tokens(&self) -> Result<Vec<TokenRow>> {
        Ok(self.state.lock().tokens.values().cloned().collect())
    }

    fn generation(&self, slot: CK_SLOT_ID) -> Result<u64> {
        Ok(self.state.lock().tokens.get(&slot).map_or(0, |t| t.generation))
    }

    fn object(&self, slot: CK_SLOT_ID, id: u64) -> Result<Option<ObjectRow>> {
        Ok(self
            .state
            .lock()
            .objects
            .get(&id)
            .filter(|(s, _)| *s == slot)
            .map(|(_, r)| r.clone()))
    }

    fn find(&self, slot: CK_SLOT_ID, query: &RowQuery, known: &dyn Fn(u64) -> bool) -> Result<Vec<Match>> {
        Ok(self
            .state
            .lock()
            .objects
            .values()
            .filter(|(s, r)| *s == slot && query.matches(r))
            .map(|(_, r)| Match::of(r.clone(), known))
            .collect())
    }

    fn count_use(&self, slot: CK_SLOT_ID, id: u64, limit: u64) -> Result<Option<u64>> {
        // The state's lock first: the key cannot be destroyed while its use is counted.
        let state = self.state.lock();
        if state.objects.get(&id).is_none_or(|(s, _)| *s != slot) {
            return crate::error::fail(CKR_KEY_HANDLE_INVALID);
        }
        let mut uses = self.uses.lock();
        let n = uses.entry(id).or_default();
        if *n >= limit {
            return Ok(None);
        }
        *n += 1;
        Ok(Some(*n))
    }

    fn use_count(&self, _slot: CK_SLOT_ID, id: u64) -> Result<u64> {
        Ok(self.uses.lock().get(&id).copied().unwrap_or(0))
    }

    fn tags(&self, slot: CK_SLOT_ID) -> Result<TagScan> {
        let state = self.state.lock();
        Ok(TagScan {
            summary: state.tokens.get(&slot).and_then(|t| t.summary.clone()),
            tags: state
                .objects
                .values()
                .filter(|(s, _)| *s == slot)
                .filter_map(|(_, r)| r.tag.as_deref().map(|t| (r.id, super::tag_head(t))))
                .collect(),
        })
    }

    fn audit_rows(&self, slot: CK_SLOT_ID, after: u64) -> Result<Vec<AuditRow>> {
        let state = self.state.lock();
        let rows = state.audit.get(&slot).map(Vec::as_slice).unwrap_or_default();
        Ok(rows.iter().filter(|r| r.seq > after).cloned().collect())
    }

    fn write(&self, f: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> Result<()> {
        let mut state = self.state.lock();
        let mut tx = MemTx {
            state: &mut state,
            journal: Vec::new(),
            uses: Vec::new(),
        };
        match f(&mut tx) {
            Ok(()) => {
                self.uses.lock().extend(tx.uses);
                Ok(())
            }
            Err(e) => {
                tx.rollback();
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::backend::transact;

    #[test]
    fn a_failed_transaction_leaves_nothing_behind() {
        let b = MemoryBackend::new();
        let token = TokenRow {
            slot_id: 0,
            serial: "s".into(),
            ..TokenRow::default()
        };
        transact(&b, |tx| tx.insert_token(&token)).unwrap();
        let kept = transact(&b, |tx| tx.new_object(0)).unwrap();
        let r: Result<()> = transact(&b, |tx| {
            let id = tx.new_object(0)?;
            tx.put_object(
                0,
                &ObjectRow {
                    id,
                    ..ObjectRow::default()
                },
            )?;
            tx.delete_object(0, kept)?;
            tx.bump_generation(0)?;
            crate::error::fail(CKR_DEVICE_ERROR)
        });
        assert!(r.is_err());
        assert!(b.object(0, kept).unwrap().is_some());
        assert_eq!(b.rows(0, &RowQuery::default()).unwrap().len(), 1);
        assert_eq!(b.generation(0).unwrap(), 1);
        // Ids are not reused, even those of a failed transaction.
        assert_eq!(transact(&b, |tx| tx.new_object(0)).unwrap(), kept + 2);
    }
}
