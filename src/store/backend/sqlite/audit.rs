//! The audit chain's tables in SQLite (`store::audit`): the records of each token in order,
//! and each token's audit key. Rows only; what they mean is the audit module's.

use crate::store::backend::{AuditKey, AuditRow};
use cryptoki_sys::CK_SLOT_ID;
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension};

/// The audit tables, created in their own migration step. `IF NOT EXISTS`: the step does the
/// same whatever number the schema gives it, so it can move when other steps land beside it.
/// WITHOUT ROWID: the records of a token are stored in chain order, read in that order.
pub(super) const SCHEMA_AUDIT: &str = "
CREATE TABLE IF NOT EXISTS audit (
    slot_id INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL,
    hash BLOB NOT NULL,
    PRIMARY KEY (slot_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS audit_keys (
    slot_id INTEGER PRIMARY KEY,
    public BLOB NOT NULL,
    sealed BLOB NOT NULL
);
";

/// A row as it is: a body someone rewrote as text (an edit of the file with SQL's string
/// functions) is still read, so that `audit verify` can say which record changed.
fn row(r: &rusqlite::Row) -> rusqlite::Result<AuditRow> {
    let bytes = |i: usize| -> rusqlite::Result<Vec<u8>> {
        Ok(match r.get_ref(i)? {
            ValueRef::Blob(b) | ValueRef::Text(b) => b.to_vec(),
            _ => Vec::new(),
        })
    };
    Ok(AuditRow {
        seq: r.get::<_, i64>(0)? as u64,
        body: bytes(1)?,
        hash: bytes(2)?,
    })
}

pub(super) fn rows(c: &Connection, slot: CK_SLOT_ID, after: u64) -> rusqlite::Result<Vec<AuditRow>> {
    c.prepare_cached("SELECT seq, body, hash FROM audit WHERE slot_id = ?1 AND seq > ?2 ORDER BY seq")?
        .query_map(params![slot as i64, after as i64], row)?
        .collect()
}

pub(super) fn head(c: &Connection, slot: CK_SLOT_ID) -> rusqlite::Result<Option<AuditRow>> {
    c.prepare_cached("SELECT seq, body, hash FROM audit WHERE slot_id = ?1 ORDER BY seq DESC LIMIT 1")?
        .query_row(params![slot as i64], row)
        .optional()
}

pub(super) fn append(c: &Connection, slot: CK_SLOT_ID, r: &AuditRow) -> rusqlite::Result<usize> {
    c.prepare_cached("INSERT INTO audit (slot_id, seq, body, hash) VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![slot as i64, r.seq as i64, r.body, r.hash])
}

pub(super) fn prune(c: &Connection, slot: CK_SLOT_ID, seq: u64) -> rusqlite::Result<usize> {
    if seq == u64::MAX {
        c.prepare_cached("DELETE FROM audit_keys WHERE slot_id = ?1")?
            .execute(params![slot as i64])?;
        return c
            .prepare_cached("DELETE FROM audit WHERE slot_id = ?1")?
            .execute(params![slot as i64]);
    }
    c.prepare_cached("DELETE FROM audit WHERE slot_id = ?1 AND seq < ?2")?
        .execute(params![slot as i64, seq as i64])
}

pub(super) fn key(c: &Connection, slot: CK_SLOT_ID) -> rusqlite::Result<Option<AuditKey>> {
    c.prepare_cached("SELECT public, sealed FROM audit_keys WHERE slot_id = ?1")?
        .query_row(params![slot as i64], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
}

pub(super) fn put_key(
    c: &Connection,
    slot: CK_SLOT_ID,
    public: &[u8],
    sealed: &[u8],
) -> rusqlite::Result<usize> {
    c.prepare_cached("INSERT OR REPLACE INTO audit_keys (slot_id, public, sealed) VALUES (?1, ?2, ?3)")?
        .execute(params![slot as i64, public, sealed])
}
