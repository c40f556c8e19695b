//! Uses of limited keys in an SQLite store (`Backend::count_use`): their table, the schema
//! step that makes it, and the counting statement. A table of its own, not a column of the
//! object rows: counting a use changes no authenticated row, bumps no generation, and so
//! leaves every process's cache of keys as it is.

use super::SqliteBackend;
use crate::error::{fail, Result};
use cryptoki_sys::*;
use rusqlite::{params, OptionalExtension};

/// Schema version 6's step. A row per key counted at least once; it goes with its object
/// (`ON DELETE CASCADE`, keyed on the object id, which is unique across the store).
pub(super) const SCHEMA_USAGE: &str = "
CREATE TABLE key_uses (
    object_id INTEGER PRIMARY KEY REFERENCES objects(id) ON DELETE CASCADE,
    slot_id INTEGER NOT NULL,
    uses INTEGER NOT NULL
);
";

/// One more use if fewer than ?3 are counted; no row back when the limit is reached or the
/// key is not in the store.
const COUNT_SQL: &str = "INSERT INTO key_uses (object_id, slot_id, uses) \
     SELECT ?1, ?2, 1 WHERE EXISTS (SELECT 1 FROM objects WHERE id = ?1 AND slot_id = ?2) \
     ON CONFLICT (object_id) DO UPDATE SET uses = uses + 1 WHERE uses < ?3 \
     RETURNING uses";

/// `Tx::import_uses`: the count of a key copied into this store.
pub(super) const IMPORT_SQL: &str = "INSERT INTO key_uses (object_id, slot_id, uses) VALUES (?1, ?2, ?3) \
     ON CONFLICT (object_id) DO UPDATE SET uses = excluded.uses";

const READ_SQL: &str = "SELECT uses FROM key_uses WHERE object_id = ?1 AND slot_id = ?2";

impl SqliteBackend {
    /// `Backend::count_use`: BEGIN IMMEDIATE, as every writer, so processes counting at once
    /// take turns on the file's write lock and each reads the count the last one left. One
    /// synchronous commit per use of a limited key; unlimited keys never come here.
    pub(super) fn count_use_now(&self, slot: CK_SLOT_ID, id: u64, limit: u64) -> Result<Option<u64>> {
        let mut conn = self.conn.lock();
        let tx = self.begin_write(&mut conn)?;
        let run = || -> rusqlite::Result<(Option<i64>, bool)> {
            let counted = tx
                .prepare_cached(COUNT_SQL)?
                .query_row(params![id as i64, slot as i64, limit as i64], |r| r.get(0))
                .optional()?;
            let exists = counted.is_some()
                || tx
                    .prepare_cached("SELECT 1 FROM objects WHERE id = ?1 AND slot_id = ?2")?
                    .exists(params![id as i64, slot as i64])?;
            Ok((counted, exists))
        };
        let (counted, exists) = run().map_err(|e| self.write_err(e))?;
        tx.commit().map_err(|e| self.write_err(e))?;
        if !exists {
            return fail(CKR_KEY_HANDLE_INVALID);
        }
        Ok(counted.map(|n| n as u64))
    }

    /// `Backend::use_count`, on this thread's read connection.
    pub(super) fn use_count_now(&self, slot: CK_SLOT_ID, id: u64) -> Result<u64> {
        let n: Option<i64> = self.read(|c| {
            c.prepare_cached(READ_SQL)?
                .query_row(params![id as i64, slot as i64], |r| r.get(0))
                .optional()
        })?;
        Ok(n.unwrap_or(0) as u64)
    }
}
