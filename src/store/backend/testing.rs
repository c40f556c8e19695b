//! Backend wrappers for tests: one that counts every call by kind and can refuse writes, and
//! one that records the token rows each committed write left behind.

use super::{Backend, ObjectRow, RowQuery, TagScan, TokenRow, Tx};
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

    fn find(&self, slot: CK_SLOT_ID, query: &RowQuery) -> Result<Vec<ObjectRow>> {
        self.calls.find.fetch_add(1, SeqCst);
        self.inner.find(slot, query)
    }

    fn tags(&self, slot: CK_SLOT_ID) -> Result<TagScan> {
        self.calls.tags.fetch_add(1, SeqCst);
        self.inner.tags(slot)
    }

    fn write(&self, f: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> Result<()> {
        self.calls.write.fetch_add(1, SeqCst);
        if self.calls.refuse_writes.load(SeqCst) {
            return fail(CKR_DEVICE_ERROR);
        }
        self.inner.write(f)?;
        let rows = self.inner.tokens()?;
        self.calls.committed.lock().push(rows);
        Ok(())
    }
}
