//! The fleet backend: one PostgreSQL database shared by every host that signs with the same
//! keys. Rows only, as in SQLite: the sealed layer above made every wrap, seal and keyed hash
//! they hold, so the database (and its dumps and replicas) sees ciphertext and hashes.
//!
//! It owns: the connections of this process (`conn`: URL, password, TLS, fork rule), the
//! schema and its migrations (`schema`), the write transaction (every writer of the store,
//! on any host, takes one advisory lock, as SQLite's BEGIN IMMEDIATE serialises writers;
//! token rows are also read `FOR UPDATE`), and the change generation as this process sees it:
//! read from the database at most every `store.refresh_ms`, the bound on how stale another
//! host's change may be here. This process's own writes are seen at once.
//!
//! Faults: when the server cannot be reached, reads and writes fail with CKR_DEVICE_ERROR and
//! a log line naming the store; the generation keeps its last value, so keys already
//! prepared go on signing. Every call tries again, so service comes back with the server.

mod audit;
mod conn;
mod schema;
mod usage;

use super::{
    tag_head, AuditKey, AuditRow, Backend, Match, ObjectRow, PinRow, RowQuery, TagScan, TokenRow, Tx,
};
use crate::error::{fail_because, Error, Result};
use crate::store::{PinCounter, MAX_OBJECT_ID};
use conn::{Conn, Options, Pool};
use cryptoki_sys::*;
use parking_lot::Mutex;
use postgres::error::SqlState;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use schema::SCHEMA_VERSION;

/// The generations of every token as last read from the database.
#[derive(Default)]
struct Generations {
    /// When they were read; `None` forces a read at the next call.
    at: Option<Instant>,
    by_slot: HashMap<CK_SLOT_ID, u64>,
}

pub struct PostgresBackend {
    options: Options,
    pool: Pool,
    refresh: Duration,
    generations: Mutex<Generations>,
    /// Held by the one thread reading generations; the others use the last values meanwhile.
    refreshing: Mutex<()>,
    /// Bumped by every write of this process, so a generation read that began before it
    /// is not taken as fresh after it.
    writes: AtomicU64,
    /// Whether the last attempt to reach the server failed (one log line per outage for the
    /// generation reads, which run on the signing path).
    down: AtomicBool,
}

const TOKEN_COLUMNS: &str = "slot_id, label, serial, so_wrap, so_failures, so_attempts, so_locked, \
     user_wrap, user_failures, user_attempts, user_locked, max_failures, generation, epoch, \
     so_pending, user_pending, summary, owners";

fn token_from_row(r: &postgres::Row) -> std::result::Result<TokenRow, postgres::Error> {
    let pin = |at: usize, pending: usize| -> std::result::Result<PinRow, postgres::Error> {
        Ok(PinRow {
            wrap: r.try_get(at)?,
            counter: PinCounter {
                failures: r.try_get::<_, i32>(at + 1)? as u32,
                attempts: r.try_get::<_, i64>(at + 2)? as u64,
                locked: r.try_get(at + 3)?,
                pending: PinCounter::parse_pending(r.try_get(pending)?),
            },
        })
    };
    Ok(TokenRow {
        slot_id: r.try_get::<_, i64>(0)? as CK_SLOT_ID,
        label: r.try_get(1)?,
        serial: r.try_get(2)?,
        so: pin(3, 14)?,
        user: pin(7, 15)?,
        max_failures: r.try_get::<_, i32>(11)? as u32,
        generation: r.try_get::<_, i64>(12)? as u64,
        epoch: r.try_get::<_, i64>(13)? as u64,
        summary: r.try_get(16)?,
        owners: r.try_get(17)?,
    })
}

const OBJECT_COLUMNS: &str = "id, private, class, key_id, label, clear, sealed, version, tag";

fn object_from_row(r: &postgres::Row) -> std::result::Result<ObjectRow, postgres::Error> {
    Ok(ObjectRow {
        id: r.try_get::<_, i64>(0)? as u64,
        private: r.try_get(1)?,
        class: r.try_get::<_, Option<i64>>(2)?.map(|c| c as u64),
        key_id: r.try_get(3)?,
        label: r.try_get(4)?,
        clear: r.try_get(5)?,
        sealed: r.try_get(6)?,
        version: r.try_get::<_, i64>(7)? as u64,
        tag: r.try_get(8)?,
    })
}

/// Whether `e` means the session is gone (server restarted, network cut), not that the
/// statement was refused: such a connection is dropped and, before anything was written
/// on it, the call is tried once more on a new one.
fn lost(e: &postgres::Error) -> bool {
    match e.code() {
        None => true,
        Some(c) => {
            c.code().starts_with("08")
                || *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
        }
    }
}

/// `e` with its causes, as the log shows it (the driver's text names no password).
fn text(e: &postgres::Error) -> String {
    let mut s = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cause = c.source();
    }
    s
}

/// The search as SQL, one statement text per shape of query so each is prepared once per
/// connection: `= ANY($n)` takes any number of values and still uses the (slot_id, key_id)
/// and (slot_id, label) indexes. Parameters: slot, with private, class, ids, labels.
fn find_sql(q: &RowQuery) -> String {
    let mut sql = format!("SELECT {OBJECT_COLUMNS} FROM objects WHERE slot_id = $1 AND ($2 OR NOT private)");
    sql.push_str(if q.class.is_some() {
        " AND class = $3"
    } else {
        " AND $3::BIGINT IS NULL"
    });
    sql.push_str(if q.key_id.is_some() {
        " AND key_id = ANY($4)"
    } else {
        " AND $4::BYTEA[] IS NULL"
    });
    sql.push_str(if q.label.is_some() {
        " AND label = ANY($5)"
    } else {
        " AND $5::BYTEA[] IS NULL"
    });
    sql.push_str(" ORDER BY id");
    sql
}

impl PostgresBackend {
    /// Connects, creates or migrates the schema, and keeps the connection for the first
    /// call. The error is worded for the operator and names no password.
    pub fn open(config: &crate::config::Config) -> std::result::Result<Self, String> {
        let options = Options::new(config)?;
        let at = options.location().to_string();
        let mut c = options.connect().map_err(|e| {
            format!(
                "token store {at}: cannot connect ({}); check that the server runs and accepts \
                 this host, the user and the password (store.password_file or PGPASSWORD)",
                text(&e)
            )
        })?;
        schema::migrate(&mut c.client, &at)?;
        let b = PostgresBackend {
            options,
            pool: Pool::default(),
            refresh: Duration::from_millis(config.store.refresh_ms.into()),
            generations: Mutex::new(Generations::default()),
            refreshing: Mutex::new(()),
            writes: AtomicU64::new(0),
            down: AtomicBool::new(false),
        };
        b.pool.give(c);
        log::debug!("token store {at}: connected, schema version {SCHEMA_VERSION}");
        Ok(b)
    }

    /// A connection of this process: an idle one (`false`) or a new one (`true`).
    fn conn(&self, doing: &str) -> Result<(Conn, bool)> {
        if let Some(c) = self.pool.take() {
            return Ok((c, false));
        }
        match self.options.connect() {
            Ok(c) => {
                if self.down.swap(false, Ordering::Relaxed) {
                    log::warn!("token store {}: the database is reachable again", self.location());
                }
                Ok((c, true))
            }
            Err(e) => {
                self.down.store(true, Ordering::Relaxed);
                log::error!(
                    "token store {}: cannot {doing}: cannot connect ({}); check that the server \
                     runs and is reachable; each call tries again",
                    self.location(),
                    text(&e)
                );
                Err(Error(CKR_DEVICE_ERROR))
            }
        }
    }

    /// The error of a failed statement, with a log line naming the store and what to do.
    fn db_err(&self, doing: &str, e: &postgres::Error) -> Error {
        let what = if lost(e) {
            "the connection to the database was lost; check the server; the next call reconnects"
        } else if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
            "another host has held the store's write lock for over 30 s; find its session in \
             pg_stat_activity and retry"
        } else if e.code() == Some(&SqlState::DISK_FULL) {
            "the database server is out of disk space; free some and retry"
        } else {
            "check the server's log; if this persists restore the database from a backup"
        };
        log::error!(
            "token store {}: cannot {doing} ({}); {what}",
            self.location(),
            text(e)
        );
        Error(if e.code() == Some(&SqlState::DISK_FULL) {
            CKR_DEVICE_MEMORY
        } else {
            CKR_DEVICE_ERROR
        })
    }

    /// Runs a read on a connection of this process; a connection found dead (the server was
    /// restarted since it was last used) is dropped and the read tried once on a new one.
    fn read<R>(&self, f: impl Fn(&mut Conn) -> std::result::Result<R, postgres::Error>) -> Result<R> {
        loop {
            let (mut c, fresh) = self.conn("read")?;
            match f(&mut c) {
                Ok(r) => {
                    self.pool.give(c);
                    return Ok(r);
                }
                Err(e) if lost(&e) && !fresh => {
                    // Every idle connection is as dead as this one.
                    drop(c);
                    self.pool.clear();
                }
                Err(e) => {
                    if lost(&e) {
                        self.down.store(true, Ordering::Relaxed);
                    }
                    return Err(self.db_err("read", &e));
                }
            }
        }
    }

    fn read_generations(&self) -> Result<HashMap<CK_SLOT_ID, u64>> {
        self.read(|c| {
            let st = c.statement("SELECT slot_id, generation FROM tokens")?;
            c.client
                .query(&st, &[])?
                .iter()
                .map(|r| {
                    Ok((
                        r.try_get::<_, i64>(0)? as CK_SLOT_ID,
                        r.try_get::<_, i64>(1)? as u64,
                    ))
                })
                .collect()
        })
    }

    /// One attempt at a write transaction. Returns the outcome and whether the failure was
    /// a dead connection found before anything was sent in the transaction (worth one more
    /// attempt on a new connection).
    fn write_once(&self, c: &mut Conn, f: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> (Result<()>, bool) {
        let mut tx = match c.client.transaction() {
            Ok(tx) => tx,
            Err(e) => return (Err(self.db_err("write", &e)), lost(&e)),
        };
        if let Err(e) = tx.execute("SELECT pg_advisory_xact_lock($1)", &[&schema::WRITE_LOCK]) {
            return (Err(self.db_err("write", &e)), lost(&e));
        }
        let mut ptx = PgTx {
            tx: &mut tx,
            backend: self,
        };
        // Dropped without commit on an error: the driver rolls back.
        if let Err(e) = f(&mut ptx) {
            return (Err(e), false);
        }
        match tx.commit() {
            Ok(()) => (Ok(()), false),
            Err(e) => (Err(self.db_err("commit", &e)), false),
        }
    }
}

impl Backend for PostgresBackend {
    fn location(&self) -> String {
        self.options.location().to_string()
    }

    fn tokens(&self) -> Result<Vec<TokenRow>> {
        self.read(|c| {
            let st = c.statement(TOKENS_SQL)?;
            c.client.query(&st, &[])?.iter().map(token_from_row).collect()
        })
    }

    fn generation(&self, slot: CK_SLOT_ID) -> Result<u64> {
        let cached = |g: &Generations| g.by_slot.get(&slot).copied().unwrap_or(0);
        {
            let g = self.generations.lock();
            if g.at.is_some_and(|at| at.elapsed() < self.refresh) {
                return Ok(cached(&g));
            }
        }
        // Older than the period: one thread reads; the others go on with the last values
        // meanwhile (the signing path never queues behind a slow or unreachable server).
        // After a write of this process (`at` is `None`) every caller waits for a read that
        // began after it: a process sees its own changes at once.
        let _reading = match self.refreshing.try_lock() {
            Some(r) => r,
            None => {
                let g = self.generations.lock();
                if g.at.is_some() {
                    return Ok(cached(&g));
                }
                drop(g);
                let r = self.refreshing.lock();
                let g = self.generations.lock();
                if g.at.is_some_and(|at| at.elapsed() < self.refresh) {
                    return Ok(cached(&g));
                }
                drop(g);
                r
            }
        };
        let writes = self.writes.load(Ordering::SeqCst);
        match self.read_generations() {
            Ok(by_slot) => {
                let mut g = self.generations.lock();
                g.by_slot = by_slot;
                // A write of this process since the read began makes the values stale.
                g.at = (self.writes.load(Ordering::SeqCst) == writes).then(Instant::now);
                Ok(cached(&g))
            }
            Err(e) => {
                let mut g = self.generations.lock();
                if g.by_slot.is_empty() {
                    return Err(e);
                }
                // Keys already prepared go on signing with what was last seen; the next
                // read is tried after one more period.
                g.at = Some(Instant::now());
                Ok(cached(&g))
            }
        }
    }

    fn object(&self, slot: CK_SLOT_ID, id: u64) -> Result<Option<ObjectRow>> {
        self.read(|c| {
            const SQL: &str = "SELECT id, private, class, key_id, label, clear, sealed, version, tag \
                               FROM objects WHERE id = $1 AND slot_id = $2";
            let st = c.statement(SQL)?;
            c.client
                .query_opt(&st, &[&(id as i64), &(slot as i64)])?
                .map(|r| object_from_row(&r))
                .transpose()
        })
    }

    /// One query for the whole rows, known or not: a second round trip to the server would
    /// cost more than the values it saves.
    fn find(&self, slot: CK_SLOT_ID, query: &RowQuery, known: &dyn Fn(u64) -> bool) -> Result<Vec<Match>> {
        let sql = find_sql(query);
        let with_private = !query.public_only;
        let class = query.class.map(|c| c as i64);
        self.read(|c| {
            let st = c.statement(&sql)?;
            c.client
                .query(
                    &st,
                    &[&(slot as i64), &with_private, &class, &query.key_id, &query.label],
                )?
                .iter()
                .map(|r| Ok(Match::of(object_from_row(r)?, known)))
                .collect()
        })
    }

    fn count_use(&self, slot: CK_SLOT_ID, id: u64, limit: u64) -> Result<Option<u64>> {
        self.count_use_now(slot, id, limit)
    }

    fn use_count(&self, slot: CK_SLOT_ID, id: u64) -> Result<u64> {
        self.use_count_now(slot, id)
    }

    fn tags(&self, slot: CK_SLOT_ID) -> Result<TagScan> {
        self.read(|c| {
            // One snapshot for both reads: REPEATABLE READ.
            let mut tx = c
                .client
                .build_transaction()
                .isolation_level(postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()?;
            let summary: Option<Vec<u8>> = tx
                .query_opt("SELECT summary FROM tokens WHERE slot_id = $1", &[&(slot as i64)])?
                .and_then(|r| r.get(0));
            let tags = tx
                .query(
                    "SELECT id, tag FROM objects WHERE slot_id = $1 AND tag IS NOT NULL",
                    &[&(slot as i64)],
                )?
                .iter()
                .map(|r| Ok((r.try_get::<_, i64>(0)? as u64, tag_head(r.try_get(1)?))))
                .collect::<std::result::Result<Vec<_>, postgres::Error>>()?;
            tx.commit()?;
            Ok(TagScan { summary, tags })
        })
    }

    fn audit_rows(&self, slot: CK_SLOT_ID, after: u64) -> Result<Vec<AuditRow>> {
        self.read(|c| audit::rows(c, slot, after))
    }

    fn write(&self, f: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> Result<()> {
        loop {
            let (mut c, fresh) = self.conn("write")?;
            let (result, retry) = self.write_once(&mut c, f);
            if result.is_ok() {
                self.writes.fetch_add(1, Ordering::SeqCst);
                self.generations.lock().at = None;
            }
            if c.client.is_closed() || (result.is_err() && retry) {
                drop(c);
                self.pool.clear();
                if retry && !fresh {
                    continue;
                }
            } else {
                self.pool.give(c);
            }
            return result;
        }
    }
}

/// Every token row, in slot order (`TOKEN_COLUMNS`).
const TOKENS_SQL: &str = "SELECT slot_id, label, serial, so_wrap, so_failures, so_attempts, so_locked, \
     user_wrap, user_failures, user_attempts, user_locked, max_failures, generation, epoch, \
     so_pending, user_pending, summary, owners FROM tokens ORDER BY slot_id";

struct PgTx<'a, 'c> {
    tx: &'a mut postgres::Transaction<'c>,
    backend: &'a PostgresBackend,
}

impl PgTx<'_, '_> {
    fn change(&mut self, sql: &str, args: &[&(dyn postgres::types::ToSql + Sync)]) -> Result<u64> {
        self.tx
            .execute(sql, args)
            .map_err(|e| self.backend.db_err("write", &e))
    }

    fn query_opt(
        &mut self,
        sql: &str,
        args: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Option<postgres::Row>> {
        self.tx
            .query_opt(sql, args)
            .map_err(|e| self.backend.db_err("read", &e))
    }

    fn token_args(t: &TokenRow) -> [Box<dyn postgres::types::ToSql + Sync>; 17] {
        [
            Box::new(t.slot_id as i64),
            Box::new(t.label.clone()),
            Box::new(t.serial.clone()),
            Box::new(t.so.wrap.clone().unwrap_or_default()),
            Box::new(t.so.counter.failures as i32),
            Box::new(t.so.counter.attempts as i64),
            Box::new(t.so.counter.locked),
            Box::new(t.user.wrap.clone()),
            Box::new(t.user.counter.failures as i32),
            Box::new(t.user.counter.attempts as i64),
            Box::new(t.user.counter.locked),
            Box::new(t.max_failures as i32),
            Box::new(t.epoch as i64),
            Box::new(t.so.counter.pending_text()),
            Box::new(t.user.counter.pending_text()),
            Box::new(t.summary.clone()),
            Box::new(t.owners.clone()),
        ]
    }
}

impl Tx for PgTx<'_, '_> {
    fn token(&mut self, slot: CK_SLOT_ID) -> Result<Option<TokenRow>> {
        // The advisory lock already serialises writers; FOR UPDATE also keeps the row from
        // any other session that writes it directly.
        let row = self.query_opt(
            &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE slot_id = $1 FOR UPDATE"),
            &[&(slot as i64)],
        )?;
        row.map(|r| token_from_row(&r))
            .transpose()
            .map_err(|e| self.backend.db_err("read", &e))
    }

    fn max_slot(&mut self) -> Result<Option<CK_SLOT_ID>> {
        let row = self.query_opt("SELECT max(slot_id) FROM tokens", &[])?;
        Ok(row
            .and_then(|r| r.get::<_, Option<i64>>(0))
            .map(|m| m as CK_SLOT_ID))
    }

    fn slot_of_serial(&mut self, serial: &str) -> Result<Option<CK_SLOT_ID>> {
        let row = self.query_opt("SELECT slot_id FROM tokens WHERE serial = $1", &[&serial])?;
        Ok(row.map(|r| r.get::<_, i64>(0) as CK_SLOT_ID))
    }

    fn insert_token(&mut self, t: &TokenRow) -> Result<()> {
        let a = Self::token_args(t);
        let args: Vec<&(dyn postgres::types::ToSql + Sync)> = a.iter().map(|b| &**b).collect();
        self.change(
            "INSERT INTO tokens (slot_id, label, serial, so_wrap, so_failures, so_attempts, so_locked, \
             user_wrap, user_failures, user_attempts, user_locked, max_failures, epoch, so_pending, user_pending, summary, owners) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
            &args,
        )
        .map(|_| ())
    }

    fn update_token(&mut self, t: &TokenRow) -> Result<()> {
        let a = Self::token_args(t);
        let args: Vec<&(dyn postgres::types::ToSql + Sync)> = a.iter().map(|b| &**b).collect();
        self.change(
            "UPDATE tokens SET label = $2, serial = $3, so_wrap = $4, so_failures = $5, so_attempts = $6, \
             so_locked = $7, user_wrap = $8, user_failures = $9, user_attempts = $10, user_locked = $11, \
             max_failures = $12, epoch = $13, so_pending = $14, user_pending = $15, summary = $16, owners = $17 WHERE slot_id = $1",
            &args,
        )
        .map(|_| ())
    }

    fn delete_token(&mut self, slot: CK_SLOT_ID) -> Result<bool> {
        // Objects go with it (ON DELETE CASCADE).
        Ok(self.change("DELETE FROM tokens WHERE slot_id = $1", &[&(slot as i64)])? > 0)
    }

    fn delete_objects(&mut self, slot: CK_SLOT_ID) -> Result<()> {
        self.change("DELETE FROM objects WHERE slot_id = $1", &[&(slot as i64)])
            .map(|_| ())
    }

    fn new_object(&mut self, slot: CK_SLOT_ID) -> Result<u64> {
        let row = self.query_opt(
            "INSERT INTO objects (slot_id, private, clear, sealed) VALUES ($1, TRUE, '', '') RETURNING id",
            &[&(slot as i64)],
        )?;
        let Some(id) = row.map(|r| r.get::<_, i64>(0) as u64) else {
            return fail_because(
                CKR_DEVICE_ERROR,
                "the token store returned no id for a new object",
            );
        };
        if id >= MAX_OBJECT_ID {
            return fail_because(CKR_DEVICE_MEMORY, "the token store has run out of object ids");
        }
        Ok(id)
    }

    fn object(&mut self, slot: CK_SLOT_ID, id: u64) -> Result<Option<ObjectRow>> {
        let row = self.query_opt(
            &format!("SELECT {OBJECT_COLUMNS} FROM objects WHERE id = $1 AND slot_id = $2 FOR UPDATE"),
            &[&(id as i64), &(slot as i64)],
        )?;
        row.map(|r| object_from_row(&r))
            .transpose()
            .map_err(|e| self.backend.db_err("read", &e))
    }

    fn objects_after(&mut self, slot: CK_SLOT_ID, after: u64, limit: usize) -> Result<Vec<ObjectRow>> {
        let rows = self
            .tx
            .query(
                &format!(
                    "SELECT {OBJECT_COLUMNS} FROM objects WHERE slot_id = $1 AND id > $2 ORDER BY id LIMIT $3"
                ),
                &[&(slot as i64), &(after as i64), &(limit as i64)],
            )
            .map_err(|e| self.backend.db_err("read", &e))?;
        rows.iter()
            .map(object_from_row)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| self.backend.db_err("read", &e))
    }

    fn put_object(&mut self, slot: CK_SLOT_ID, o: &ObjectRow) -> Result<bool> {
        let n = self.change(
            "UPDATE objects SET private = $3, class = $4, key_id = $5, label = $6, clear = $7, sealed = $8, \
             version = $9, tag = $10 WHERE id = $1 AND slot_id = $2",
            &[
                &(o.id as i64),
                &(slot as i64),
                &o.private,
                &o.class.map(|c| c as i64),
                &o.key_id,
                &o.label,
                &o.clear,
                &o.sealed,
                &(o.version as i64),
                &o.tag,
            ],
        )?;
        Ok(n > 0)
    }

    fn import_object(&mut self, slot: CK_SLOT_ID, o: &ObjectRow) -> Result<()> {
        self.change(
            "INSERT INTO objects (id, slot_id, private, class, key_id, label, clear, sealed, version, tag) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            &[
                &(o.id as i64),
                &(slot as i64),
                &o.private,
                &o.class.map(|c| c as i64),
                &o.key_id,
                &o.label,
                &o.clear,
                &o.sealed,
                &(o.version as i64),
                &o.tag,
            ],
        )?;
        // New ids come after every imported one.
        self.change(
            "SELECT setval(pg_get_serial_sequence('objects', 'id'), (SELECT max(id) FROM objects))",
            &[],
        )
        .map(|_| ())
    }

    fn import_uses(&mut self, slot: CK_SLOT_ID, id: u64, uses: u64) -> Result<()> {
        self.change(usage::IMPORT_SQL, &[&(id as i64), &(slot as i64), &(uses as i64)])
            .map(|_| ())
    }

    fn delete_object(&mut self, slot: CK_SLOT_ID, id: u64) -> Result<bool> {
        let n = self.change(
            "DELETE FROM objects WHERE id = $1 AND slot_id = $2",
            &[&(id as i64), &(slot as i64)],
        )?;
        Ok(n > 0)
    }

    fn bump_generation(&mut self, slot: CK_SLOT_ID) -> Result<()> {
        self.change(
            "UPDATE tokens SET generation = generation + 1 WHERE slot_id = $1",
            &[&(slot as i64)],
        )
        .map(|_| ())
    }

    fn audit_head(&mut self, slot: CK_SLOT_ID) -> Result<Option<AuditRow>> {
        audit::head(self.tx, slot).map_err(|e| self.backend.db_err("read", &e))
    }

    fn audit_append(&mut self, slot: CK_SLOT_ID, row: &AuditRow) -> Result<()> {
        audit::append(self.tx, slot, row)
            .map(drop)
            .map_err(|e| self.backend.db_err("write", &e))
    }

    fn audit_prune(&mut self, slot: CK_SLOT_ID, seq: u64) -> Result<()> {
        audit::prune(self.tx, slot, seq)
            .map(drop)
            .map_err(|e| self.backend.db_err("write", &e))
    }

    fn audit_key(&mut self, slot: CK_SLOT_ID) -> Result<Option<AuditKey>> {
        audit::key(self.tx, slot).map_err(|e| self.backend.db_err("read", &e))
    }

    fn put_audit_key(&mut self, slot: CK_SLOT_ID, public: &[u8], sealed: &[u8]) -> Result<()> {
        audit::put_key(self.tx, slot, public, sealed)
            .map(drop)
            .map_err(|e| self.backend.db_err("write", &e))
    }
}
