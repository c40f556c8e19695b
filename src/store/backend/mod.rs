//! The row-level trait every storage backend implements, and nothing more: token rows, object
//! rows with their index columns, PIN counters, the change generation, and one write
//! transaction. Rows hold only what the sealed layer (`store::sealed`) made of them: wraps,
//! sealed blobs and keyed hashes. A backend seals nothing, checks no PIN and knows no
//! PKCS#11; a new backend (PostgreSQL, say) is one more module here.

pub mod memory;
pub mod postgres;
pub mod sqlite;
#[cfg(test)]
pub(crate) mod testing;

use super::PinCounter;
use crate::error::{Error, Result};
use cryptoki_sys::*;

/// One PIN of a token: the token key wrapped under it, and its failure counter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PinRow {
    /// `None` for a user PIN not yet set; the SO PIN always has one.
    pub wrap: Option<Vec<u8>>,
    pub counter: PinCounter,
}

/// One token as a backend keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenRow {
    pub slot_id: CK_SLOT_ID,
    pub label: Vec<u8>,
    pub serial: String,
    pub so: PinRow,
    pub user: PinRow,
    pub max_failures: u32,
    /// Counts the re-initialisations of the token. A token key belongs to one epoch: a
    /// process holding the key of an earlier one must log in again (another host re-initialised
    /// the token).
    pub epoch: u64,
    /// Changes whenever an object of the token changes (`Tx::bump_generation`); written by
    /// nothing else.
    pub generation: u64,
    /// The token's authenticated summary of its object rows (`sealed::ledger`); `None` in a
    /// store written before records were authenticated, until its first login upgrades it.
    pub summary: Option<Vec<u8>>,
    /// The token key's generation and the PIN owners' public points authenticated under it
    /// (`sealed::owners`); `None` until a PIN's wrap is of the owner-key format.
    pub owners: Option<Vec<u8>>,
}

/// One object as a backend keeps it. `key_id` and `label` are the index columns: clear values
/// of public objects, keyed hashes of private ones. `clear` and `sealed` are opaque blobs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectRow {
    pub id: u64,
    pub private: bool,
    pub class: Option<u64>,
    pub key_id: Option<Vec<u8>>,
    pub label: Option<Vec<u8>>,
    pub clear: Vec<u8>,
    pub sealed: Vec<u8>,
    /// The token generation of the transaction that last wrote the row: what a
    /// compare-and-swap compares, and part of the tag.
    pub version: u64,
    /// The row's MAC under the token key (`sealed::tag`); `None` for a public object written
    /// without a login, and for every row of a store not yet upgraded.
    pub tag: Option<Vec<u8>>,
}

/// What `Backend::tags` reads in one snapshot: the token's summary and the head of the tag of
/// every tagged row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TagScan {
    pub summary: Option<Vec<u8>>,
    pub tags: Vec<(u64, TagHead)>,
}

/// The first 16 bytes of a row's tag, zero-padded: all the summary and the ledger use of it
/// (`sealed::ledger`; a row read whole is checked on its whole tag). Fixed-size, so a scan of
/// a million rows makes no allocation per row.
pub type TagHead = [u8; 16];

pub fn tag_head(tag: &[u8]) -> TagHead {
    let mut head = TagHead::default();
    let n = tag.len().min(head.len());
    head[..n].copy_from_slice(&tag[..n]);
    head
}

/// One record of a token's audit chain as a backend keeps it (`store::audit`): its number in
/// the chain, its canonical encoding and its chain hash. Bytes to the backend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditRow {
    pub seq: u64,
    pub body: Vec<u8>,
    pub hash: Vec<u8>,
}

/// A token's audit key as a backend keeps it: its public half, and its private half sealed.
pub type AuditKey = (Vec<u8>, Vec<u8>);

/// A row `Backend::find` matched: all of it, or only its id where the caller holds that
/// object unchanged already (`known`), so a backend that can match on its indexes alone need
/// not read the row's values (SQLite: a warm find reads no table page). A `Known` match may
/// be of another class than the query's: the caller matches its own copy against the search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    Known(u64),
    Row(ObjectRow),
}

impl Match {
    pub fn id(&self) -> u64 {
        match self {
            Match::Known(id) => *id,
            Match::Row(r) => r.id,
        }
    }

    /// How a matched `row` comes back: its id only when `known` accepts it.
    pub fn of(row: ObjectRow, known: &dyn Fn(u64) -> bool) -> Match {
        if known(row.id) {
            Match::Known(row.id)
        } else {
            Match::Row(row)
        }
    }
}

/// A search over the index columns: a row matches when every named column holds one of the
/// values given for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowQuery {
    /// Leave out rows with `private` set.
    pub public_only: bool,
    pub class: Option<u64>,
    pub key_id: Option<Vec<Vec<u8>>>,
    pub label: Option<Vec<Vec<u8>>>,
}

impl RowQuery {
    /// Whether `row` matches; backends that cannot do it in a query language use this.
    pub fn matches(&self, row: &ObjectRow) -> bool {
        let any = |want: &Option<Vec<Vec<u8>>>, have: &Option<Vec<u8>>| match want {
            None => true,
            Some(values) => have.as_ref().is_some_and(|h| values.iter().any(|v| v == h)),
        };
        !(self.public_only && row.private)
            && self.class.is_none_or(|c| row.class == Some(c))
            && any(&self.key_id, &row.key_id)
            && any(&self.label, &row.label)
    }
}

/// A storage backend. Reads outside a transaction may run concurrently with anything (the
/// signing path reads without a lock); every change goes through `write`.
pub trait Backend: Send + Sync {
    /// Where the store lives, for log lines the operator acts on (a path, a URL without
    /// password).
    fn location(&self) -> String;
    /// Every token, in slot order.
    fn tokens(&self) -> Result<Vec<TokenRow>>;
    /// How many tokens there are, read from the store itself, not from a cache of pages
    /// (`Store::probe`).
    fn probe(&self) -> Result<usize> {
        self.tokens().map(|t| t.len())
    }
    /// The generation of a token; 0 when there is none.
    fn generation(&self, slot: CK_SLOT_ID) -> Result<u64>;
    fn object(&self, slot: CK_SLOT_ID, id: u64) -> Result<Option<ObjectRow>>;
    /// The objects of a token matching `query`, in id order, those `known` accepts as
    /// `Match::Known` (a backend may still return their rows). The matches come from one
    /// snapshot: one query, or an index-only query first when that alone can answer it.
    fn find(&self, slot: CK_SLOT_ID, query: &RowQuery, known: &dyn Fn(u64) -> bool) -> Result<Vec<Match>>;
    /// The whole rows matching `query`, in id order (`find` with nothing known).
    fn rows(&self, slot: CK_SLOT_ID, query: &RowQuery) -> Result<Vec<ObjectRow>> {
        Ok(self
            .find(slot, query, &|_| false)?
            .into_iter()
            .filter_map(|m| match m {
                Match::Row(r) => Some(r),
                Match::Known(_) => None,
            })
            .collect())
    }
    /// The token's summary and the (id, tag) of each of its tagged rows, read in one snapshot
    /// (a read transaction), so the two agree whatever other writers do meanwhile; an index
    /// scan, without the rows' values.
    fn tags(&self, slot: CK_SLOT_ID) -> Result<TagScan>;
    /// Counts one use of the limited key `id` of `slot` if fewer than `limit` are counted, in
    /// the backend's own table of uses (`sqlite/usage.rs`, `postgres/usage.rs`; the token's
    /// side is `token::usage`): one atomic change, taken before the
    /// key is used, serialised with every process and host as a write is. The count after it;
    /// `Ok(None)` when `limit` uses are counted already (nothing counted). A key no longer in
    /// the store is `CKR_KEY_HANDLE_INVALID`.
    fn count_use(&self, slot: CK_SLOT_ID, id: u64, limit: u64) -> Result<Option<u64>>;
    /// The uses counted of the key `id` of `slot`: 0 for one never counted.
    fn use_count(&self, slot: CK_SLOT_ID, id: u64) -> Result<u64>;
    /// Runs `f` as one transaction: everything it wrote is committed when it returns `Ok`,
    /// nothing when it returns an error (which `write` returns). Writers are serialised with
    /// every other writer of the store, in any process or host (SQLite: BEGIN IMMEDIATE;
    /// PostgreSQL: one advisory lock for the store, and row locks taken by `Tx::token`). A backend may run `f`
    /// again after a serialisation failure, so `f` must not keep effects of an earlier run.
    fn write(&self, f: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> Result<()>;
    /// Drops what the store keeps of rows as they were before the last change (`after` names
    /// that change for the log): after a PIN's wrap of the token key changed, the old wrap,
    /// left in the files, would open the token key (every key, those made later too) for
    /// whoever learns the old PIN and reads them; after a change of every row (an upgrade, a
    /// new token key), the log would stay as large as the store.
    /// SQLite: the write-ahead log checkpointed into the database and truncated, with
    /// `secure_delete` zeroing the space changes free. Best effort: a reader of another
    /// process still in an old snapshot keeps the log; the file system's and the disk's own
    /// copies are beyond it; PostgreSQL keeps old row versions until its next vacuum.
    fn forget_old_versions(&self, after: &str) {
        let _ = after;
    }
    /// The audit records of a token with numbers above `after`, in order (`store::audit`).
    fn audit_rows(&self, slot: CK_SLOT_ID, after: u64) -> Result<Vec<AuditRow>>;
}

/// The operations of one write transaction.
pub trait Tx {
    /// A token row, locked against other writers until the transaction ends
    /// (`SELECT … FOR UPDATE`), so a read-modify-write of its counters is atomic.
    fn token(&mut self, slot: CK_SLOT_ID) -> Result<Option<TokenRow>>;
    /// The highest slot in use.
    fn max_slot(&mut self) -> Result<Option<CK_SLOT_ID>>;
    /// The slot of the token with `serial`.
    fn slot_of_serial(&mut self, serial: &str) -> Result<Option<CK_SLOT_ID>>;
    fn insert_token(&mut self, row: &TokenRow) -> Result<()>;
    /// Writes every column of the token but its generation.
    fn update_token(&mut self, row: &TokenRow) -> Result<()>;
    /// Removes a token and all its objects; whether it existed.
    fn delete_token(&mut self, slot: CK_SLOT_ID) -> Result<bool>;
    fn delete_objects(&mut self, slot: CK_SLOT_ID) -> Result<()>;
    /// Allocates the id of a new object of `slot` (unique across the store, never reused) and
    /// holds an empty private row for it until `put_object` fills it in this transaction.
    /// Ids come first because every seal of the object names its id.
    fn new_object(&mut self, slot: CK_SLOT_ID) -> Result<u64>;
    /// One object row, read in this transaction (what a compare-and-swap compares).
    fn object(&mut self, slot: CK_SLOT_ID, id: u64) -> Result<Option<ObjectRow>>;
    /// Up to `limit` rows of `slot` with ids above `after`, in id order (a store's upgrade
    /// walks its rows in batches inside one transaction).
    fn objects_after(&mut self, slot: CK_SLOT_ID, after: u64, limit: usize) -> Result<Vec<ObjectRow>>;
    /// Writes an existing row (`row.id`); whether there was one in `slot`.
    fn put_object(&mut self, slot: CK_SLOT_ID, row: &ObjectRow) -> Result<bool>;
    /// Writes a row with the id it has (`ferrohsm-util copy-store`: seals name their object's
    /// id, so a copied row keeps it); ids allocated later come after it.
    fn import_object(&mut self, slot: CK_SLOT_ID, row: &ObjectRow) -> Result<()>;
    /// Sets the uses counted of the key `id`, imported with `import_object` in this
    /// transaction (`copy-store`: a copied limited key keeps its count, `Backend::count_use`).
    fn import_uses(&mut self, slot: CK_SLOT_ID, id: u64, uses: u64) -> Result<()>;
    /// Whether there was one.
    fn delete_object(&mut self, slot: CK_SLOT_ID, id: u64) -> Result<bool>;
    fn bump_generation(&mut self, slot: CK_SLOT_ID) -> Result<()>;
    /// The last record of the token's audit chain, read in this transaction (writers are
    /// serialised, so the record appended after it is the only one to name it).
    fn audit_head(&mut self, slot: CK_SLOT_ID) -> Result<Option<AuditRow>>;
    fn audit_append(&mut self, slot: CK_SLOT_ID, row: &AuditRow) -> Result<()>;
    /// Removes the records numbered below `seq` (`audit prune`); with `u64::MAX`, the whole
    /// trail and the audit key (the token is deleted).
    fn audit_prune(&mut self, slot: CK_SLOT_ID, seq: u64) -> Result<()>;
    /// The token's audit key: its public half and its private half sealed (`store::audit`).
    fn audit_key(&mut self, slot: CK_SLOT_ID) -> Result<Option<AuditKey>>;
    fn put_audit_key(&mut self, slot: CK_SLOT_ID, public: &[u8], sealed: &[u8]) -> Result<()>;
}

/// `Backend::write` with a result: runs `f` in one transaction and returns what its last run
/// returned.
pub fn transact<R>(b: &dyn Backend, mut f: impl FnMut(&mut dyn Tx) -> Result<R>) -> Result<R> {
    let mut out = None;
    b.write(&mut |tx| {
        out = Some(f(tx)?);
        Ok(())
    })?;
    out.ok_or_else(|| {
        log::error!(
            "token store {}: a transaction committed without running",
            b.location()
        );
        Error(CKR_GENERAL_ERROR)
    })
}
