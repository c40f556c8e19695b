//! Uses of limited keys in a PostgreSQL store (`Backend::count_use`): the counting statement.
//! Its table is schema version 5's step (`schema`). A table of its own, as in SQLite: counting
//! a use changes no object row and no generation, so no host's cache of keys is dropped.

use super::{lost, PostgresBackend};
use crate::error::{fail, Result};
use cryptoki_sys::*;

/// One more use if fewer than $3 are counted; no row back when the limit is reached or the key
/// is not in the store. One statement outside the store's write lock: an upsert is atomic in
/// PostgreSQL, and under READ COMMITTED a competing update waits for the row's lock and then
/// re-evaluates `uses < $3` on the row as the other left it, so hosts counting at once never
/// count past the limit.
const COUNT_SQL: &str = "INSERT INTO key_uses (object_id, slot_id, uses) \
     SELECT $1, $2, 1 WHERE EXISTS (SELECT 1 FROM objects WHERE id = $1 AND slot_id = $2) \
     ON CONFLICT (object_id) DO UPDATE SET uses = key_uses.uses + 1 WHERE key_uses.uses < $3 \
     RETURNING uses";

/// `Tx::import_uses`: the count of a key copied into this store.
pub(super) const IMPORT_SQL: &str = "INSERT INTO key_uses (object_id, slot_id, uses) VALUES ($1, $2, $3) \
     ON CONFLICT (object_id) DO UPDATE SET uses = excluded.uses";

const READ_SQL: &str = "SELECT uses FROM key_uses WHERE object_id = $1 AND slot_id = $2";

const EXISTS_SQL: &str = "SELECT 1 FROM objects WHERE id = $1 AND slot_id = $2";

impl PostgresBackend {
    /// `Backend::count_use`. A connection found dead before the statement ran is replaced
    /// once, as reads do; if it died while the statement ran, the use may have been counted:
    /// the caller gets the error and the key lost one use, never gained one.
    pub(super) fn count_use_now(&self, slot: CK_SLOT_ID, id: u64, limit: u64) -> Result<Option<u64>> {
        let args = (id as i64, slot as i64, limit as i64);
        loop {
            let (mut c, fresh) = self.conn("count a key's use")?;
            let run = |c: &mut super::Conn| -> std::result::Result<(Option<i64>, bool), postgres::Error> {
                let st = c.statement(COUNT_SQL)?;
                let counted = c
                    .client
                    .query_opt(&st, &[&args.0, &args.1, &args.2])?
                    .map(|r| r.try_get(0))
                    .transpose()?;
                let exists = counted.is_some() || {
                    let st = c.statement(EXISTS_SQL)?;
                    c.client.query_opt(&st, &[&args.0, &args.1])?.is_some()
                };
                Ok((counted, exists))
            };
            match run(&mut c) {
                Ok((counted, exists)) => {
                    self.pool.give(c);
                    if !exists {
                        return fail(CKR_KEY_HANDLE_INVALID);
                    }
                    return Ok(counted.map(|n| n as u64));
                }
                Err(e) if lost(&e) && !fresh => {
                    drop(c);
                    self.pool.clear();
                }
                Err(e) => return Err(self.db_err("count a key's use", &e)),
            }
        }
    }

    /// `Backend::use_count`.
    pub(super) fn use_count_now(&self, slot: CK_SLOT_ID, id: u64) -> Result<u64> {
        let n: Option<i64> = self.read(|c| {
            let st = c.statement(READ_SQL)?;
            c.client
                .query_opt(&st, &[&(id as i64), &(slot as i64)])?
                .map(|r| r.try_get(0))
                .transpose()
        })?;
        Ok(n.unwrap_or(0) as u64)
    }
}
