//! The embedded backend: one SQLite database per store directory, shared safely by every
//! process that opens it (WAL, BEGIN IMMEDIATE for writers). Rows only: the sealed layer
//! above made every wrap, seal and keyed hash they hold.

mod audit;
mod file;
mod usage;

pub use file::{DB_NAME, MARKER_NAME};

use super::{
    tag_head, AuditKey, AuditRow, Backend, Match, ObjectRow, PinRow, RowQuery, TagScan, TokenRow, Tx,
};
use crate::error::{fail, Error, Result};
use crate::store::{PinCounter, MAX_OBJECT_ID};
use cryptoki_sys::*;
use parking_lot::Mutex;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use std::path::{Path, PathBuf};

pub struct SqliteBackend {
    /// The writer; also used for reads that must see its own transaction.
    conn: Mutex<Connection>,
    /// One read connection per thread: lookups on the signing path share no lock.
    readers: thread_local::ThreadLocal<std::cell::RefCell<Option<Connection>>>,
    path: PathBuf,
    /// Device and inode of the file at `path` when it was opened.
    identity: (u64, u64),
    /// Whether the last search's matches were all held by the caller: the next one asks the
    /// index for ids first (`find`).
    ids_first: std::sync::atomic::AtomicBool,
}

const TOKEN_COLUMNS: &str = "slot_id, label, serial, so_wrap, so_failures, so_attempts, so_locked, \
     user_wrap, user_failures, user_attempts, user_locked, max_failures, generation, epoch, \
     so_pending, user_pending, summary, owners";

fn token_from_row(r: &rusqlite::Row) -> rusqlite::Result<TokenRow> {
    let pin = |at: usize, pending: usize| -> rusqlite::Result<PinRow> {
        Ok(PinRow {
            wrap: r.get(at)?,
            counter: PinCounter {
                failures: r.get(at + 1)?,
                attempts: r.get::<_, i64>(at + 2)? as u64,
                locked: r.get(at + 3)?,
                pending: PinCounter::parse_pending(&r.get::<_, String>(pending)?),
            },
        })
    };
    Ok(TokenRow {
        slot_id: r.get::<_, i64>(0)? as CK_SLOT_ID,
        label: r.get(1)?,
        serial: r.get(2)?,
        so: pin(3, 14)?,
        user: pin(7, 15)?,
        max_failures: r.get(11)?,
        generation: r.get::<_, i64>(12)? as u64,
        epoch: r.get::<_, i64>(13)? as u64,
        summary: r.get(16)?,
        owners: r.get(17)?,
    })
}

const OBJECT_COLUMNS: &str = "id, private, class, key_id, label, clear, sealed, version, tag";

fn object_from_row(r: &rusqlite::Row) -> rusqlite::Result<ObjectRow> {
    Ok(ObjectRow {
        id: r.get::<_, i64>(0)? as u64,
        private: r.get(1)?,
        class: r.get::<_, Option<i64>>(2)?.map(|c| c as u64),
        key_id: r.get(3)?,
        label: r.get(4)?,
        clear: r.get(5)?,
        sealed: r.get(6)?,
        version: r.get::<_, i64>(7)? as u64,
        tag: r.get(8)?,
    })
}

impl SqliteBackend {
    /// Opens (or, where none can have been, creates) the store in `dir`; see `file::open`.
    pub fn open(dir: &Path) -> std::result::Result<Self, String> {
        let (conn, path, identity) = file::open(dir)?;
        Ok(SqliteBackend {
            conn: Mutex::new(conn),
            readers: thread_local::ThreadLocal::new(),
            path,
            identity,
            ids_first: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts a write transaction after checking that the store file is still the one this
    /// process opened: SQLite would go on writing into a deleted or replaced file, and the
    /// writes would be lost without an error. Reads (the signing path) are not checked.
    fn begin_write<'c>(&self, conn: &'c mut Connection) -> Result<rusqlite::Transaction<'c>> {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.write_err(e))?;
        match file::identity(&self.path) {
            Ok(id) if id == self.identity => Ok(tx),
            _ => {
                log::error!(
                    "token store {} was removed or replaced while in use; restore it and restart the application",
                    self.path.display()
                );
                Err(Error(CKR_DEVICE_ERROR))
            }
        }
    }

    /// The error of a failed read: a row SQLite cannot give back, or one that does not have
    /// the shape of its column, is a damaged store, named in the log.
    fn read_err(&self, e: rusqlite::Error) -> Error {
        log::error!(
            "token store {}: cannot read ({e}); if this persists the file is damaged: restore it from a backup",
            self.path.display()
        );
        Error(CKR_DEVICE_ERROR)
    }

    /// The error of a failed write, with a log line naming the store and what to do.
    fn write_err(&self, e: rusqlite::Error) -> Error {
        use rusqlite::ErrorCode::{DatabaseBusy, DatabaseLocked, DiskFull};
        let code = e.sqlite_error_code();
        let what = match code {
            Some(DiskFull) => "free disk space on its file system and retry",
            Some(DatabaseBusy | DatabaseLocked) => {
                "another process has held its write lock for over 30 s; find it (fuser on the file) and retry"
            }
            _ => "check that the file and its directory are writable (permissions, read-only mounts, immutable flags) and retry",
        };
        log::error!("token store {}: cannot write ({e}); {what}", self.path.display());
        Error(if code == Some(DiskFull) {
            CKR_DEVICE_MEMORY
        } else {
            CKR_DEVICE_ERROR
        })
    }

    /// Runs a read on this thread's own connection, opened on first use.
    fn read<R>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<R>) -> Result<R> {
        let cell = self.readers.get_or(|| std::cell::RefCell::new(None));
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            let c = Connection::open_with_flags(
                &self.path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(|e| self.read_err(e))?;
            c.busy_timeout(std::time::Duration::from_secs(30))
                .map_err(|e| self.read_err(e))?;
            // The bundled SQLite has STAT4, whose planner looks at bound values: a search's
            // statement was re-prepared (parsed again) for every new CKA_ID, a quarter of a
            // find by id (profiled). The plan is the same for every value; keep it.
            c.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
                .map_err(|e| self.read_err(e))?;
            // A million-key store is 4 GB: a find by id then reads an index leaf and a row
            // that are rarely in SQLite's default 2 MiB page cache; the larger cache keeps the
            // index's inner pages. The file is not memory-mapped (SQLite's default, kept):
            // mapped, a store file cut short by anyone who can write it killed the process
            // with SIGBUS at its next read (the signer itself, or ferrohsm-server;
            // tests/store_faults.rs), where a read gives an error to answer.
            c.pragma_update(None, "cache_size", -16_384i64)
                .map_err(|e| self.read_err(e))?;
            *slot = Some(c);
        }
        let Some(conn) = slot.as_ref() else {
            return fail(CKR_GENERAL_ERROR);
        };
        f(conn).map_err(|e| self.read_err(e))
    }
}

/// The search as SQL: indexed on `key_id` and `label`; `+class` keeps the planner off the
/// class, which alone selects too little to be worth an index lookup.
/// The search for `q`, selecting `columns`.
fn find_sql(slot: CK_SLOT_ID, q: &RowQuery, columns: &str) -> (String, Vec<rusqlite::types::Value>) {
    let mut sql = format!("SELECT {columns} FROM objects WHERE slot_id = ?1");
    let mut args: Vec<rusqlite::types::Value> = vec![(slot as i64).into()];
    if q.public_only {
        sql.push_str(" AND private = 0");
    }
    for (values, col) in [(&q.key_id, "key_id"), (&q.label, "label")] {
        if let Some(values) = values {
            let mut marks = Vec::new();
            for v in values {
                args.push(v.clone().into());
                marks.push(format!("?{}", args.len()));
            }
            sql.push_str(&format!(" AND {col} IN ({})", marks.join(", ")));
        }
    }
    if let Some(c) = q.class {
        args.push((c as i64).into());
        sql.push_str(&format!(" AND +class = ?{}", args.len()));
    }
    sql.push_str(" ORDER BY id");
    (sql, args)
}

impl Backend for SqliteBackend {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn probe(&self) -> Result<usize> {
        // A connection of its own, opened for this: the kept ones trust the pages they
        // cached while the WAL index says nothing changed, so a database file overwritten
        // under them would still read as it was.
        let c = Connection::open_with_flags(&self.path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|e| self.read_err(e))?;
        c.query_row("SELECT count(*) FROM tokens", [], |r| r.get::<_, i64>(0))
            .map(|n| n as usize)
            .map_err(|e| self.read_err(e))
    }

    fn tokens(&self) -> Result<Vec<TokenRow>> {
        self.read(|c| {
            let mut st = c.prepare_cached(&format!("SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY slot_id"))?;
            let rows = st.query_map([], token_from_row)?;
            rows.collect()
        })
    }

    fn generation(&self, slot: CK_SLOT_ID) -> Result<u64> {
        let g: Option<i64> = self.read(|c| {
            c.prepare_cached("SELECT generation FROM tokens WHERE slot_id = ?1")?
                .query_row(params![slot as i64], |r| r.get(0))
                .optional()
        })?;
        Ok(g.unwrap_or(0) as u64)
    }

    fn object(&self, slot: CK_SLOT_ID, id: u64) -> Result<Option<ObjectRow>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {OBJECT_COLUMNS} FROM objects WHERE id = ?1 AND slot_id = ?2"
            ))?
            .query_row(params![id as i64, slot as i64], object_from_row)
            .optional()
        })
    }

    /// A signer finds the same keys again and again: then the ids alone, from the index of
    /// CKA_ID or label (the class left to the caller's copy, `Match::Known`), are the answer,
    /// and the search reads no row (an RSA key's row fills most of a page). A search of rows
    /// not held reads them in one query; asking for the ids first would only add one. So the
    /// ids come first while searches keep finding only what the caller holds (measured:
    /// docs/performance.md, "The authenticated store: its price").
    fn find(&self, slot: CK_SLOT_ID, query: &RowQuery, known: &dyn Fn(u64) -> bool) -> Result<Vec<Match>> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.ids_first.load(Relaxed) {
            let (ids_sql, args) = find_sql(
                slot,
                &RowQuery {
                    class: None,
                    ..query.clone()
                },
                "id",
            );
            let ids = self.read(|c| {
                let mut st = c.prepare_cached(&ids_sql)?;
                let ids = st.query_map(rusqlite::params_from_iter(&args), |r| r.get::<_, i64>(0))?;
                ids.map(|id| id.map(|id| id as u64))
                    .collect::<rusqlite::Result<Vec<u64>>>()
            })?;
            if ids.iter().all(|&id| known(id)) {
                return Ok(ids.into_iter().map(Match::Known).collect());
            }
        }
        let (sql, args) = find_sql(slot, query, OBJECT_COLUMNS);
        let rows: Vec<ObjectRow> = self.read(|c| {
            let mut st = c.prepare_cached(&sql)?;
            let rows = st.query_map(rusqlite::params_from_iter(args), object_from_row)?;
            rows.collect()
        })?;
        let matches: Vec<Match> = rows.into_iter().map(|r| Match::of(r, known)).collect();
        let all_held = matches.iter().all(|m| matches!(m, Match::Known(_)));
        self.ids_first.store(all_held, Relaxed);
        Ok(matches)
    }

    fn count_use(&self, slot: CK_SLOT_ID, id: u64, limit: u64) -> Result<Option<u64>> {
        self.count_use_now(slot, id, limit)
    }

    fn use_count(&self, slot: CK_SLOT_ID, id: u64) -> Result<u64> {
        self.use_count_now(slot, id)
    }

    fn tags(&self, slot: CK_SLOT_ID) -> Result<TagScan> {
        self.read(|c| {
            // One read transaction: the summary and the tags come from the same snapshot.
            let tx = c.unchecked_transaction()?;
            let summary: Option<Vec<u8>> = tx
                .prepare_cached("SELECT summary FROM tokens WHERE slot_id = ?1")?
                .query_row(params![slot as i64], |r| r.get(0))
                .optional()?
                .flatten();
            // objects_tags covers it: the rows' values are not read.
            let tags = tx
                .prepare_cached("SELECT id, tag FROM objects WHERE slot_id = ?1 AND tag IS NOT NULL")?
                .query_map(params![slot as i64], |r| {
                    Ok((r.get::<_, i64>(0)? as u64, tag_head(r.get_ref(1)?.as_blob()?)))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            tx.finish()?;
            Ok(TagScan { summary, tags })
        })
    }

    fn write(&self, f: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> Result<()> {
        let mut conn = self.conn.lock();
        let tx = self.begin_write(&mut conn)?;
        // Dropped without commit on an error: SQLite rolls back.
        f(&mut SqliteTx {
            tx: &tx,
            backend: self,
        })?;
        tx.commit().map_err(|e| self.write_err(e))
    }

    fn audit_rows(&self, slot: CK_SLOT_ID, after: u64) -> Result<Vec<AuditRow>> {
        self.read(|c| audit::rows(c, slot, after))
    }

    fn forget_old_versions(&self, after: &str) {
        let conn = self.conn.lock();
        let busy: rusqlite::Result<i64> = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0));
        match busy {
            Ok(0) => {}
            Ok(_) => log::warn!(
                "token store {}: the write-ahead log still holds rows as they were before {after} (another process is reading); they go at the next checkpoint",
                self.path.display()
            ),
            Err(e) => log::warn!(
                "token store {}: the write-ahead log could not be truncated after {after}: {e}",
                self.path.display()
            ),
        }
    }
}

struct SqliteTx<'a> {
    tx: &'a rusqlite::Transaction<'a>,
    backend: &'a SqliteBackend,
}

impl SqliteTx<'_> {
    /// A change: its error names the store and what to do (a full disk is CKR_DEVICE_MEMORY).
    fn change(&self, sql: &str, args: impl rusqlite::Params) -> Result<usize> {
        self.tx
            .prepare_cached(sql)
            .and_then(|mut st| st.execute(args))
            .map_err(|e| self.backend.write_err(e))
    }
}

impl Tx for SqliteTx<'_> {
    fn token(&mut self, slot: CK_SLOT_ID) -> Result<Option<TokenRow>> {
        // BEGIN IMMEDIATE already holds the write lock: the row cannot change under us.
        self.tx
            .query_row(
                &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE slot_id = ?1"),
                params![slot as i64],
                token_from_row,
            )
            .optional()
            .map_err(|e| self.backend.read_err(e))
    }

    fn max_slot(&mut self) -> Result<Option<CK_SLOT_ID>> {
        let max: Option<i64> = self
            .tx
            .query_row("SELECT MAX(slot_id) FROM tokens", [], |r| r.get(0))
            .map_err(|e| self.backend.read_err(e))?;
        Ok(max.map(|m| m as CK_SLOT_ID))
    }

    fn slot_of_serial(&mut self, serial: &str) -> Result<Option<CK_SLOT_ID>> {
        let slot: Option<i64> = self
            .tx
            .query_row(
                "SELECT slot_id FROM tokens WHERE serial = ?1",
                params![serial],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.backend.read_err(e))?;
        Ok(slot.map(|s| s as CK_SLOT_ID))
    }

    fn insert_token(&mut self, t: &TokenRow) -> Result<()> {
        self.change(
            "INSERT INTO tokens (slot_id, label, serial, so_wrap, so_failures, so_attempts, so_locked, \
             user_wrap, user_failures, user_attempts, user_locked, max_failures, epoch, so_pending, user_pending, summary, owners) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
            params![
                t.slot_id as i64,
                t.label,
                t.serial,
                t.so.wrap,
                t.so.counter.failures,
                t.so.counter.attempts as i64,
                t.so.counter.locked,
                t.user.wrap,
                t.user.counter.failures,
                t.user.counter.attempts as i64,
                t.user.counter.locked,
                t.max_failures,
                t.epoch as i64,
                t.so.counter.pending_text(),
                t.user.counter.pending_text(),
                t.summary,
                t.owners
            ],
        )
        .map(|_| ())
    }

    fn update_token(&mut self, t: &TokenRow) -> Result<()> {
        self.change(
            "UPDATE tokens SET label = ?2, serial = ?3, so_wrap = ?4, so_failures = ?5, so_attempts = ?6, \
             so_locked = ?7, user_wrap = ?8, user_failures = ?9, user_attempts = ?10, user_locked = ?11, \
             max_failures = ?12, epoch = ?13, so_pending = ?14, user_pending = ?15, summary = ?16, owners = ?17 WHERE slot_id = ?1",
            params![
                t.slot_id as i64,
                t.label,
                t.serial,
                t.so.wrap,
                t.so.counter.failures,
                t.so.counter.attempts as i64,
                t.so.counter.locked,
                t.user.wrap,
                t.user.counter.failures,
                t.user.counter.attempts as i64,
                t.user.counter.locked,
                t.max_failures,
                t.epoch as i64,
                t.so.counter.pending_text(),
                t.user.counter.pending_text(),
                t.summary,
                t.owners
            ],
        )
        .map(|_| ())
    }

    fn delete_token(&mut self, slot: CK_SLOT_ID) -> Result<bool> {
        // Objects go with it (ON DELETE CASCADE).
        Ok(self.change("DELETE FROM tokens WHERE slot_id = ?1", params![slot as i64])? > 0)
    }

    fn delete_objects(&mut self, slot: CK_SLOT_ID) -> Result<()> {
        self.change("DELETE FROM objects WHERE slot_id = ?1", params![slot as i64])
            .map(|_| ())
    }

    fn new_object(&mut self, slot: CK_SLOT_ID) -> Result<u64> {
        self.change(
            "INSERT INTO objects (slot_id, private, clear, sealed) VALUES (?1, 1, x'', x'')",
            params![slot as i64],
        )?;
        let id = self.tx.last_insert_rowid() as u64;
        if id >= MAX_OBJECT_ID {
            return crate::error::fail_because(
                CKR_DEVICE_MEMORY,
                "the token store has run out of object ids",
            );
        }
        Ok(id)
    }

    fn object(&mut self, slot: CK_SLOT_ID, id: u64) -> Result<Option<ObjectRow>> {
        self.tx
            .prepare_cached(&format!(
                "SELECT {OBJECT_COLUMNS} FROM objects WHERE id = ?1 AND slot_id = ?2"
            ))
            .and_then(|mut st| {
                st.query_row(params![id as i64, slot as i64], object_from_row)
                    .optional()
            })
            .map_err(|e| self.backend.read_err(e))
    }

    fn objects_after(&mut self, slot: CK_SLOT_ID, after: u64, limit: usize) -> Result<Vec<ObjectRow>> {
        self.tx
            .prepare_cached(&format!(
                // NOT INDEXED: a walk along the rowid (the id). The planner took the slot's
                // index and sorted every remaining row for each batch: the 100,000-key upgrade
                // took 40-49 s that way, 13.7 s this way (docs/performance.md).
                "SELECT {OBJECT_COLUMNS} FROM objects NOT INDEXED WHERE slot_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3"
            ))
            .and_then(|mut st| {
                st.query_map(params![slot as i64, after as i64, limit as i64], object_from_row)?
                    .collect()
            })
            .map_err(|e| self.backend.read_err(e))
    }

    fn put_object(&mut self, slot: CK_SLOT_ID, o: &ObjectRow) -> Result<bool> {
        let n = self.change(
            "UPDATE objects SET private = ?3, class = ?4, key_id = ?5, label = ?6, clear = ?7, sealed = ?8, \
             version = ?9, tag = ?10 WHERE id = ?1 AND slot_id = ?2",
            params![
                o.id as i64,
                slot as i64,
                o.private,
                o.class.map(|c| c as i64),
                o.key_id,
                o.label,
                o.clear,
                o.sealed,
                o.version as i64,
                o.tag
            ],
        )?;
        Ok(n > 0)
    }

    fn import_object(&mut self, slot: CK_SLOT_ID, o: &ObjectRow) -> Result<()> {
        // AUTOINCREMENT keeps later ids above this one.
        self.change(
            "INSERT INTO objects (id, slot_id, private, class, key_id, label, clear, sealed, version, tag) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                o.id as i64,
                slot as i64,
                o.private,
                o.class.map(|c| c as i64),
                o.key_id,
                o.label,
                o.clear,
                o.sealed,
                o.version as i64,
                o.tag
            ],
        )
        .map(|_| ())
    }

    fn import_uses(&mut self, slot: CK_SLOT_ID, id: u64, uses: u64) -> Result<()> {
        self.change(usage::IMPORT_SQL, params![id as i64, slot as i64, uses as i64])
            .map(|_| ())
    }

    fn delete_object(&mut self, slot: CK_SLOT_ID, id: u64) -> Result<bool> {
        let n = self.change(
            "DELETE FROM objects WHERE id = ?1 AND slot_id = ?2",
            params![id as i64, slot as i64],
        )?;
        Ok(n > 0)
    }

    fn bump_generation(&mut self, slot: CK_SLOT_ID) -> Result<()> {
        self.change(
            "UPDATE tokens SET generation = generation + 1 WHERE slot_id = ?1",
            params![slot as i64],
        )
        .map(|_| ())
    }

    fn audit_head(&mut self, slot: CK_SLOT_ID) -> Result<Option<AuditRow>> {
        audit::head(self.tx, slot).map_err(|e| self.backend.read_err(e))
    }

    fn audit_append(&mut self, slot: CK_SLOT_ID, row: &AuditRow) -> Result<()> {
        audit::append(self.tx, slot, row)
            .map(drop)
            .map_err(|e| self.backend.write_err(e))
    }

    fn audit_prune(&mut self, slot: CK_SLOT_ID, seq: u64) -> Result<()> {
        audit::prune(self.tx, slot, seq)
            .map(drop)
            .map_err(|e| self.backend.write_err(e))
    }

    fn audit_key(&mut self, slot: CK_SLOT_ID) -> Result<Option<AuditKey>> {
        audit::key(self.tx, slot).map_err(|e| self.backend.read_err(e))
    }

    fn put_audit_key(&mut self, slot: CK_SLOT_ID, public: &[u8], sealed: &[u8]) -> Result<()> {
        audit::put_key(self.tx, slot, public, sealed)
            .map(drop)
            .map_err(|e| self.backend.write_err(e))
    }
}

#[cfg(test)]
mod tests;
