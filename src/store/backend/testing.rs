//! Backend wrappers for tests: one that counts every call by kind and can refuse writes, and
//! one that records the token rows each committed write left behind.

use super::{Backend, Match, ObjectRow, RowQuery, TagScan, TokenRow, Tx};
use crate::error::Error;
use crate::error::{fail, Result};
use cryptoki_sys::*;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

/// Calls made through a `Probe`, shared with the test that boxed it.
#[derive(Default)]
pub struct Calls {
    pub tokens: AtomicUsize,
    pub generation: AtomicUsize,
    pub object: AtomicUsize,
    pub find: AtomicUsize,
    pub tags: AtomicUsize,
    pub write: AtomicUsize,
    /// While set, every write fails as an unwritable store's does.
    pub refuse_writes: AtomicBool,
    /// When above 0: the object rows written (`Tx::put_object`) before one fails, as a store
    /// that fills up or a process that dies in the middle of a transaction.
    pub puts_before_failure: AtomicUsize,
    /// The token rows after each committed write.
    pub committed: Mutex<Vec<Vec<TokenRow>>>,
}

impl Calls {
    /// Reads of any kind so far.
    pub fn reads(&self) -> usize {
        [
            &self.tokens,
            &self.generation,
            &self.object,
            &self.find,
            &self.tags,
        ]
        .iter()
        .map(|c| c.load(SeqCst))
        .sum()
    }

    pub fn reset(&self) {
        for c in [
            &self.tokens,
            &self.generation,
            &self.object,
            &self.find,
            &self.tags,
            &self.write,
        ] {
            c.store(0, SeqCst);
        }
        self.committed.lock().clear();
    }
}

pub struct Probe<B> {
    inner: B,
    pub calls: Arc<Calls>,
}

impl<B: Backend> Probe<B> {
    pub fn new(inner: B) -> (Self, Arc<Calls>) {
        let calls = Arc::new(Calls::default());
        (
            Probe {
                inner,
                calls: calls.clone(),
            },
            calls,
        )
    }
}

impl<B: Backend> Backend for Probe<B> {
    fn location(&self) -> String {
        self.inner.location()
    }

    fn tokens(&self) -> Result<Vec<TokenRow>> {
        self.calls.tokens.fetch_add(1, SeqCst);
        self.inner.tokens()
    }

    fn generation(&self, slot: CK_SLOT_ID) -> Result<u64> {
        self.calls.generation.fetch_add(1, SeqCst);
        self.inner.generation(slot)
    }

    fn object(&self, slot: CK_SLOT_ID, id: u64) -> Result<Option<ObjectRow>> {
        self.calls.object.fetch_add(1, SeqCst);
        self.inner.object(slot, id)
    }

    fn find(&self, slot: CK_SLOT_ID, query: &RowQuery, known: &dyn Fn(u64) -> bool) -> Result<Vec<Match>> {
        self.calls.find.fetch_add(1, SeqCst);
        self.inner.find(slot, query, known)
    }

    fn tags(&self, slot: CK_SLOT_ID) -> Result<TagScan> {
        self.calls.tags.fetch_add(1, SeqCst);
        self.inner.tags(slot)
    }

    fn count_use(&self, slot: CK_SLOT_ID, id: u64, limit: u64) -> Result<Option<u64>> {
        self.inner.count_use(slot, id, limit)
    }

    fn use_count(&self, slot: CK_SLOT_ID, id: u64) -> Result<u64> {
        self.inner.use_count(slot, id)
    }

    fn audit_rows(&self, slot: CK_SLOT_ID, after: u64) -> Result<Vec<super::AuditRow>> {
        self.inner.audit_rows(slot, after)
    }

    fn write(&self, f: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> Result<()> {
        self.calls.write.fetch_add(1, SeqCst);
        if self.calls.refuse_writes.load(SeqCst) {
            return fail(CKR_DEVICE_ERROR);
        }
        let calls = self.calls.clone();
        self.inner
            .write(&mut |tx| f(&mut FailingTx { tx, calls: &calls }))?;
        let rows = self.inner.tokens()?;
        self.calls.committed.lock().push(rows);
        Ok(())
    }
}

/// A transaction that fails its nth `put_object` (`Calls::puts_before_failure`).
struct FailingTx<'a> {
    tx: &'a mut dyn Tx,
    calls: &'a Calls,
}

impl Tx for FailingTx<'_> {
    fn token(&mut self, slot: CK_SLOT_ID) -> Result<Option<TokenRow>> {
        self.tx.token(slot)
    }
    fn max_slot(&mut self) -> Result<Option<CK_SLOT_ID>> {
        self.tx.max_slot()
    }
    fn slot_of_serial(&mut self, serial: &str) -> Result<Option<CK_SLOT_ID>> {
        self.tx.slot_of_serial(serial)
    }
    fn insert_token(&mut self, row: &TokenRow) -> Result<()> {
        self.tx.insert_token(row)
    }
    fn update_token(&mut self, row: &TokenRow) -> Result<()> {
        self.tx.update_token(row)
    }
    fn delete_token(&mut self, slot: CK_SLOT_ID) -> Result<bool> {
        self.tx.delete_token(slot)
    }
    fn delete_objects(&mut self, slot: CK_SLOT_ID) -> Result<()> {
        self.tx.delete_objects(slot)
    }
    fn new_object(&mut self, slot: CK_SLOT_ID) -> Result<u64> {
        self.tx.new_object(slot)
    }
    fn object(&mut self, slot: CK_SLOT_ID, id: u64) -> Result<Option<ObjectRow>> {
        self.tx.object(slot, id)
    }
    fn objects_after(&mut self, slot: CK_SLOT_ID, after: u64, limit: usize) -> Result<Vec<ObjectRow>> {
        self.tx.objects_after(slot, after, limit)
    }
    fn put_object(&mut self, slot: CK_SLOT_ID, row: &ObjectRow) -> Result<bool> {
        let left = self.calls.puts_before_failure.load(SeqCst);
        if left == 1 {
            self.calls.puts_before_failure.store(0, SeqCst);
            return Err(Error(CKR_DEVICE_ERROR));
        }
        if left > 1 {
            self.calls.puts_before_failure.store(left - 1, SeqCst);
        }
        self.tx.put_object(slot, row)
    }
    fn import_object(&mut self, slot: CK_SLOT_ID, row: &ObjectRow) -> Result<()> {
        self.tx.import_object(slot, row)
    }
    fn import_uses(&mut self, slot: CK_SLOT_ID, id: u64, uses: u64) -> Result<()> {
        self.tx.import_uses(slot, id, uses)
    }
    fn delete_object(&mut self, slot: CK_SLOT_ID, id: u64) -> Result<bool> {
        self.tx.delete_object(slot, id)
    }
    fn bump_generation(&mut self, slot: CK_SLOT_ID) -> Result<()> {
        self.tx.bump_generation(slot)
    }
    fn audit_head(&mut self, slot: CK_SLOT_ID) -> Result<Option<super::AuditRow>> {
        self.tx.audit_head(slot)
    }
    fn audit_append(&mut self, slot: CK_SLOT_ID, row: &super::AuditRow) -> Result<()> {
        self.tx.audit_append(slot, row)
    }
    fn audit_prune(&mut self, slot: CK_SLOT_ID, seq: u64) -> Result<()> {
        self.tx.audit_prune(slot, seq)
    }
    fn audit_key(&mut self, slot: CK_SLOT_ID) -> Result<Option<super::AuditKey>> {
        self.tx.audit_key(slot)
    }
    fn put_audit_key(&mut self, slot: CK_SLOT_ID, public: &[u8], sealed: &[u8]) -> Result<()> {
        self.tx.put_audit_key(slot, public, sealed)
    }
}
