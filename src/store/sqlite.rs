//! The durable store: one SQLite database per store directory, shared safely by every process
//! that opens it. Every change is one transaction; secrets are sealed with the token key.

use super::crypt::{self, KdfParams, Key, Wrap};
use super::{PinCounter, PinOwner, PinState, Store, TokenRecord, MAX_OBJECT_ID};
use crate::error::{fail, fail_because, Error, Result};
use crate::token::attributes::Attributes;
use crate::token::policy;
use cryptoki_sys::*;
use hmac::{KeyInit, Mac};
use parking_lot::Mutex;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

const SCHEMA_VERSION: i64 = 2;

/// The database file in the store directory.
pub const DB_NAME: &str = "ferrohsm.db";
/// Written beside a new database; while it exists no new, empty store is created in this
/// directory, so a store deleted by mistake (`rm ferrohsm.db*`, `rm dir/*`) is reported at the
/// next start instead of being silently replaced by an empty one.
pub const MARKER_NAME: &str = ".ferrohsm-store";
const MARKER_TEXT: &str = "This directory holds a ferrohsm token store (ferrohsm.db).\n\
While this file exists, ferrohsm will not create a new, empty store here if ferrohsm.db is\n\
missing: it reports the missing store instead. Delete this file only to start over with no tokens.\n";

/// Store files this process has opened: one that disappears is never re-created here, even
/// if every file of it (the marker too) was deleted.
static OPENED: Mutex<std::collections::BTreeSet<PathBuf>> = Mutex::new(std::collections::BTreeSet::new());

const SCHEMA_V1: &str = "
CREATE TABLE tokens (
    slot_id INTEGER PRIMARY KEY,
    label BLOB NOT NULL,
    serial TEXT NOT NULL,
    so_wrap BLOB NOT NULL,
    user_wrap BLOB,
    so_failures INTEGER NOT NULL DEFAULT 0,
    so_locked INTEGER NOT NULL DEFAULT 0,
    user_failures INTEGER NOT NULL DEFAULT 0,
    user_locked INTEGER NOT NULL DEFAULT 0,
    max_failures INTEGER NOT NULL,
    generation INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE objects (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    slot_id INTEGER NOT NULL REFERENCES tokens(slot_id) ON DELETE CASCADE,
    private INTEGER NOT NULL,
    class INTEGER,
    key_id BLOB,
    label BLOB,
    clear BLOB NOT NULL,
    sealed BLOB NOT NULL
);
CREATE INDEX objects_by_id ON objects(slot_id, key_id);
CREATE INDEX objects_by_label ON objects(slot_id, label);
";

/// Tickets of PIN attempts (`PinCounter::attempts`), so a success forgives exactly the
/// reservations taken before it.
const SCHEMA_V2: &str = "
ALTER TABLE tokens ADD COLUMN so_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tokens ADD COLUMN user_attempts INTEGER NOT NULL DEFAULT 0;
";

fn db_err(e: rusqlite::Error) -> Error {
    log::error!("token store: {e}");
    Error(CKR_DEVICE_ERROR)
}

/// A PIN's columns as `check_pin` reads them: wrap, failures, attempts, locked, limit.
type PinRow = (Option<Vec<u8>>, u32, i64, bool, u32);

/// An object as stored: clear record, sealed record, and the `CKA_ID`/`CKA_LABEL` lookup keys.
type EncodedObject = (Vec<u8>, Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>);

/// A PIN-derived key this process already computed, valid while the wrap keeps its salt.
struct CachedPinKey {
    salt: Vec<u8>,
    pin_mac: Vec<u8>,
    key: Key,
}

pub struct SqliteStore {
    /// The writer; also used for reads that must see its own transaction.
    conn: Mutex<Connection>,
    /// One read connection per thread: lookups on the signing path share no lock.
    readers: thread_local::ThreadLocal<std::cell::RefCell<Option<Connection>>>,
    path: PathBuf,
    /// Device and inode of the file at `path` when it was opened.
    identity: (u64, u64),
    kdf: KdfParams,
    max_failures: u32,
    /// Token keys of tokens this process is logged in to.
    keys: Mutex<HashMap<CK_SLOT_ID, Key>>,
    /// Logins after the first one skip the KDF (GnuTLS logs in once per object it lists).
    pin_cache: Mutex<HashMap<(CK_SLOT_ID, bool), CachedPinKey>>,
    process_secret: Key,
}

fn wrap_aad(slot: CK_SLOT_ID, owner: PinOwner) -> Vec<u8> {
    let mut a = b"ferrohsm token key".to_vec();
    a.extend_from_slice(&slot.to_be_bytes());
    a.push(matches!(owner, PinOwner::So) as u8);
    a
}

fn attr_aad(slot: CK_SLOT_ID, id: u64, t: CK_ATTRIBUTE_TYPE) -> Vec<u8> {
    let mut a = b"ferrohsm attribute".to_vec();
    a.extend_from_slice(&slot.to_be_bytes());
    a.extend_from_slice(&id.to_be_bytes());
    a.extend_from_slice(&t.to_be_bytes());
    a
}

/// Attributes stored sealed even on public objects: key material.
fn is_secret(attrs: &Attributes, t: CK_ATTRIBUTE_TYPE) -> bool {
    let mut probe = attrs.clone();
    probe.set_bool(CKA_SENSITIVE, true);
    policy::is_hidden(&probe, t)
}

impl SqliteStore {
    /// The store the configuration names (directory, KDF parameters, PIN failure limit).
    pub fn from_config(config: &crate::config::Config) -> std::result::Result<Self, String> {
        let kdf = KdfParams {
            memory_kib: config.pin.kdf_memory_kib,
            passes: config.pin.kdf_passes,
        };
        Self::open(&config.store_dir(), kdf, config.pin.max_failures)
    }

    /// Opens the store in `dir`, creating it only where no store can have been (see
    /// `may_create`). An existing `ferrohsm.db` must be a ferrohsm database: an empty, unreadable
    /// or foreign file is an error and is left as it is.
    pub fn open(dir: &Path, kdf: KdfParams, max_failures: u32) -> std::result::Result<Self, String> {
        let path = dir.join(DB_NAME);
        match std::fs::metadata(&path) {
            Ok(m) => check_existing(&path, &m)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                may_create(dir, &path)?;
                create_new(dir, &path)?;
            }
            Err(e) => return Err(format!("cannot read the token store {}: {e}", path.display())),
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
        }
        // No CREATE flag: the file exists now, and if it vanished since, nothing is made in its place.
        let conn = Connection::open_with_flags(
            &path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| format!("cannot open the token store {}: {e}", path.display()))?;
        let identity =
            identity(&path).map_err(|e| format!("cannot read the token store {}: {e}", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_secs(30))
            .map_err(|e| format!("token store {} is not usable: {e}", path.display()))?;
        check_schema(&conn, &path)?;
        let setup = || -> rusqlite::Result<()> {
            conn.pragma_update(None, "journal_mode", "WAL")?;
            conn.pragma_update(None, "synchronous", "FULL")?;
            conn.pragma_update(None, "foreign_keys", "ON")?;
            Ok(())
        };
        setup().map_err(|e| format!("token store {} is not usable: {e}", path.display()))?;
        // Stores made before the marker existed get one; a read-only store simply has none.
        let marker = dir.join(MARKER_NAME);
        if !marker.exists() {
            let _ = std::fs::write(&marker, MARKER_TEXT);
        }
        OPENED.lock().insert(path.clone());
        let store = SqliteStore {
            conn: Mutex::new(conn),
            readers: thread_local::ThreadLocal::new(),
            path,
            identity,
            kdf,
            max_failures,
            keys: Mutex::new(HashMap::new()),
            pin_cache: Mutex::new(HashMap::new()),
            process_secret: crypt::random_key(),
        };
        store.migrate()?;
        Ok(store)
    }

    fn migrate(&self) -> std::result::Result<(), String> {
        let mut conn = self.conn.lock();
        let bad = |e: rusqlite::Error| {
            format!(
                "token store {} is damaged or not a ferrohsm store: {e}",
                self.path.display()
            )
        };
        // The common case, a current schema, needs no write transaction (and no fsync):
        // signers that initialise and finalise repeatedly stay fast.
        let current: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(bad)?;
        if current == SCHEMA_VERSION {
            return Ok(());
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(bad)?;
        let version: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(bad)?;
        if version > SCHEMA_VERSION {
            return Err(format!(
                "token store {} has schema version {version}, newer than this ferrohsm ({SCHEMA_VERSION}); upgrade ferrohsm",
                self.path.display()
            ));
        }
        if version < 1 {
            tx.execute_batch(SCHEMA_V1).map_err(bad)?;
        }
        if version < 2 {
            tx.execute_batch(SCHEMA_V2).map_err(bad)?;
        }
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(bad)?;
        tx.commit().map_err(bad)
    }

    /// Starts a write transaction after checking that the store file is still the one this
    /// process opened: SQLite would go on writing into a deleted or replaced file, and the
    /// writes would be lost without an error. Reads (the signing path) are not checked.
    fn begin_write<'c>(&self, conn: &'c mut Connection) -> Result<rusqlite::Transaction<'c>> {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.write_err(e))?;
        match identity(&self.path) {
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
            .map_err(db_err)?;
            c.busy_timeout(std::time::Duration::from_secs(30))
                .map_err(db_err)?;
            *slot = Some(c);
        }
        f(slot.as_ref().expect("opened above")).map_err(db_err)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn token_key(&self, slot: CK_SLOT_ID) -> Option<Key> {
        self.keys.lock().get(&slot).cloned()
    }

    fn pin_mac(&self, pin: &[u8]) -> Vec<u8> {
        let mut m =
            <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&self.process_secret[..]).expect("key");
        m.update(pin);
        m.finalize().into_bytes().to_vec()
    }

    /// The PIN-derived key for `wrap`, from the cache when this PIN was seen before.
    fn pin_key(&self, slot: CK_SLOT_ID, owner: PinOwner, wrap: &Wrap, pin: &[u8]) -> Option<Key> {
        let salt = wrap.salt()?.to_vec();
        let mac = self.pin_mac(pin);
        let cache_key = (slot, owner == PinOwner::So);
        if let Some(c) = self.pin_cache.lock().get(&cache_key) {
            if c.salt == salt && bool::from(subtle::ConstantTimeEq::ct_eq(&c.pin_mac[..], &mac[..])) {
                return Some(c.key.clone());
            }
        }
        let key = crypt::derive_pin_key(pin, &salt, wrap.params()?)?;
        self.pin_cache.lock().insert(
            cache_key,
            CachedPinKey {
                salt,
                pin_mac: mac,
                key: key.clone(),
            },
        );
        Some(key)
    }

    fn remember_pin_key(&self, slot: CK_SLOT_ID, owner: PinOwner, wrap: &[u8], pin: &[u8], key: Key) {
        if let Some(salt) = Wrap(wrap).salt() {
            let entry = CachedPinKey {
                salt: salt.to_vec(),
                pin_mac: self.pin_mac(pin),
                key,
            };
            self.pin_cache.lock().insert((slot, owner == PinOwner::So), entry);
        }
    }

    /// Columns of `owner`'s PIN: wrap, failures, locked flag, attempt tickets.
    fn columns(owner: PinOwner) -> (&'static str, &'static str, &'static str, &'static str) {
        match owner {
            PinOwner::So => ("so_wrap", "so_failures", "so_locked", "so_attempts"),
            PinOwner::User => ("user_wrap", "user_failures", "user_locked", "user_attempts"),
        }
    }

    /// Checks `pin` against the token's wrap for `owner`; returns the token key.
    ///
    /// The attempt is reserved in the database (one IMMEDIATE transaction, so every process
    /// sees it) before the PIN is derived, and resolved after: see `PinCounter`. When the
    /// reservation cannot be written the PIN is not evaluated at all, so an unwritable store
    /// is no guessing oracle. The cached PIN key is consulted only after the reservation.
    fn check_pin(&self, slot: CK_SLOT_ID, owner: PinOwner, pin: &[u8]) -> Result<Key> {
        let (wrap_col, fail_col, lock_col, att_col) = Self::columns(owner);
        let reserve = || -> Result<(Vec<u8>, u64, u32)> {
            let mut conn = self.conn.lock();
            let tx = self.begin_write(&mut conn)?;
            let row: Option<PinRow> = tx
                .query_row(
                    &format!("SELECT {wrap_col}, {fail_col}, {att_col}, {lock_col}, max_failures FROM tokens WHERE slot_id = ?1"),
                    params![slot as i64],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
                )
                .optional()
                .map_err(db_err)?;
            let Some((wrap, failures, attempts, locked, max)) = row else {
                return fail(CKR_TOKEN_NOT_RECOGNIZED);
            };
            let Some(wrap) = wrap else {
                return fail(CKR_USER_PIN_NOT_INITIALIZED);
            };
            let mut counter = PinCounter {
                failures,
                attempts: attempts as u64,
                locked,
            };
            let ticket = counter.reserve(max).inspect_err(|_| {
                log::warn!(
                    "slot {slot}: the {owner:?} PIN is locked after too many wrong attempts; the PIN was not checked{}",
                    if owner == PinOwner::User { " (the SO can set a new user PIN)" } else { "" }
                );
            })?;
            tx.execute(
                &format!("UPDATE tokens SET {fail_col} = ?2, {att_col} = ?3 WHERE slot_id = ?1"),
                params![slot as i64, counter.failures, counter.attempts as i64],
            )
            .map_err(|e| self.write_err(e))?;
            tx.commit().map_err(|e| self.write_err(e))?;
            Ok((wrap, ticket, max))
        };
        let (wrap, ticket, max) = reserve().inspect_err(|e| {
            if matches!(e.rv(), CKR_DEVICE_ERROR | CKR_DEVICE_MEMORY) {
                log::error!(
                    "slot {slot}: the {owner:?} PIN attempt could not be recorded in {}, so the PIN was not checked",
                    self.path.display()
                );
            }
        })?;
        let w = Wrap(&wrap);
        let opened = self
            .pin_key(slot, owner, &w, pin)
            .and_then(|k| w.open(&k, &wrap_aad(slot, owner)));
        if opened.is_none() {
            self.pin_cache.lock().remove(&(slot, owner == PinOwner::So));
        }
        let resolved = (|| -> Result<bool> {
            let mut conn = self.conn.lock();
            let tx = self.begin_write(&mut conn)?;
            let (failures, attempts, locked): (u32, i64, bool) = tx
                .query_row(
                    &format!("SELECT {fail_col}, {att_col}, {lock_col} FROM tokens WHERE slot_id = ?1"),
                    params![slot as i64],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .map_err(db_err)?;
            let mut counter = PinCounter {
                failures,
                attempts: attempts as u64,
                locked,
            };
            counter.resolve(ticket, opened.is_some(), max);
            tx.execute(
                &format!("UPDATE tokens SET {fail_col} = ?2, {lock_col} = ?3 WHERE slot_id = ?1"),
                params![slot as i64, counter.failures, counter.locked],
            )
            .map_err(|e| self.write_err(e))?;
            tx.commit().map_err(|e| self.write_err(e))?;
            Ok(counter.locked)
        })();
        match (opened, resolved) {
            (Some(token_key), Ok(_)) => Ok(token_key),
            (Some(token_key), Err(_)) => {
                // The reservation stays counted as a failure: safe, and the PIN was right.
                log::warn!(
                    "slot {slot}: {owner:?} login succeeded but its attempt is still counted as a failure"
                );
                Ok(token_key)
            }
            (None, locked) => {
                if locked == Ok(true) {
                    log::warn!("slot {slot}: {owner:?} PIN locked after too many wrong attempts");
                }
                fail(CKR_PIN_INCORRECT)
            }
        }
    }

    /// Splits attributes into the clear record and the sealed record for storage.
    fn encode(&self, slot: CK_SLOT_ID, id: u64, attrs: &Attributes) -> Result<EncodedObject> {
        let private = attrs.is_private();
        let mut clear = Attributes::new();
        let mut sealed = Attributes::new();
        let mut key = None;
        for (t, v) in attrs.iter() {
            let hide = if private {
                !matches!(t, CKA_CLASS | CKA_TOKEN | CKA_PRIVATE)
            } else {
                is_secret(attrs, t)
            };
            if hide {
                if key.is_none() {
                    key = Some(self.token_key(slot).ok_or_else(|| {
                        log::info!("slot {slot}: storing private or secret material needs a user login");
                        Error(CKR_USER_NOT_LOGGED_IN)
                    })?);
                }
                let k = key.as_ref().expect("set above");
                sealed.set(t, crypt::seal(k, v, &attr_aad(slot, id, t)));
            } else {
                clear.set(t, v.to_vec());
            }
        }
        let lookup = |t: CK_ATTRIBUTE_TYPE| -> Option<Vec<u8>> {
            let v = attrs.get(t)?;
            Some(match (&key, private) {
                (Some(k), true) => crypt::lookup_hash(k, t, v),
                _ => v.to_vec(),
            })
        };
        Ok((
            clear.to_bytes().to_vec(),
            sealed.to_bytes().to_vec(),
            lookup(CKA_ID),
            lookup(CKA_LABEL),
        ))
    }

    /// Rebuilds an object's attributes; `None` when they cannot be read without a login.
    fn decode(
        &self,
        slot: CK_SLOT_ID,
        id: u64,
        private: bool,
        clear: &[u8],
        sealed: &[u8],
    ) -> Result<Option<Attributes>> {
        let damaged = |what: &str| {
            log::error!(
                "token store {}: object {id} of slot {slot}: {what}; the record is damaged or was altered",
                self.path.display()
            );
            Error(CKR_DEVICE_ERROR)
        };
        let mut attrs =
            Attributes::from_bytes(clear).ok_or_else(|| damaged("clear attributes unreadable"))?;
        let sealed = Attributes::from_bytes(sealed).ok_or_else(|| damaged("sealed attributes unreadable"))?;
        if sealed.iter().next().is_none() {
            return Ok(Some(attrs));
        }
        let Some(key) = self.token_key(slot) else {
            if private {
                return Ok(None);
            }
            // Public objects stay visible; their key material waits for a login.
            return Ok(Some(attrs));
        };
        for (t, v) in sealed.iter() {
            let plain = crypt::open(&key, v, &attr_aad(slot, id, t))
                .ok_or_else(|| damaged(&format!("attribute 0x{t:x} fails authentication")))?;
            attrs.set(t, plain.to_vec());
        }
        Ok(Some(attrs))
    }

    /// Inserts one object in `tx` and returns its id. The id is part of every seal's
    /// associated data, so sealing follows the insert.
    fn insert_object(&self, tx: &rusqlite::Transaction, slot: CK_SLOT_ID, attrs: &Attributes) -> Result<u64> {
        tx.execute(
            "INSERT INTO objects (slot_id, private, clear, sealed) VALUES (?1, ?2, x'', x'')",
            params![slot as i64, attrs.is_private()],
        )
        .map_err(db_err)?;
        let id = tx.last_insert_rowid() as u64;
        if id >= MAX_OBJECT_ID {
            return fail_because(CKR_DEVICE_MEMORY, "the token store has run out of object ids");
        }
        let (clear, sealed, key_id, label) = self.encode(slot, id, attrs)?;
        tx.execute(
            "UPDATE objects SET class = ?2, key_id = ?3, label = ?4, clear = ?5, sealed = ?6 WHERE id = ?1",
            params![
                id as i64,
                attrs.class().map(|c| c as i64),
                key_id,
                label,
                clear,
                sealed
            ],
        )
        .map_err(db_err)?;
        Ok(id)
    }

    fn bump_generation(tx: &rusqlite::Transaction, slot: CK_SLOT_ID) -> Result<()> {
        tx.execute(
            "UPDATE tokens SET generation = generation + 1 WHERE slot_id = ?1",
            params![slot as i64],
        )
        .map_err(db_err)?;
        Ok(())
    }

    /// Creates a complete token in one transaction (migration): label and serial as given,
    /// wraps for both PINs, and every object. Nothing is written when any step fails; a token
    /// with the same serial already present is refused.
    pub fn import_token(
        &self,
        label: &[u8; 32],
        serial: &str,
        so_pin: &[u8],
        user_pin: Option<&[u8]>,
        objects: &[Attributes],
    ) -> Result<CK_SLOT_ID> {
        let token_key = crypt::random_key();
        let mut conn = self.conn.lock();
        let tx = self.begin_write(&mut conn)?;
        let existing: Option<i64> = tx
            .query_row(
                "SELECT slot_id FROM tokens WHERE serial = ?1",
                params![serial],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_err)?;
        if let Some(slot) = existing {
            return fail_because(
                CKR_FUNCTION_FAILED,
                format!("a token with serial {serial} already exists in slot {slot}"),
            );
        }
        let max: Option<i64> = tx
            .query_row("SELECT MAX(slot_id) FROM tokens", [], |r| r.get(0))
            .map_err(db_err)?;
        let slot = max.map_or(0, |m| m as CK_SLOT_ID + 1);
        let (so_wrap, _) = crypt::wrap_token_key(&token_key, so_pin, self.kdf, &wrap_aad(slot, PinOwner::So));
        let user_wrap = user_pin
            .map(|p| crypt::wrap_token_key(&token_key, p, self.kdf, &wrap_aad(slot, PinOwner::User)).0);
        tx.execute(
            "INSERT INTO tokens (slot_id, label, serial, so_wrap, user_wrap, max_failures) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![slot as i64, &label[..], serial, so_wrap, user_wrap, self.max_failures],
        )
        .map_err(db_err)?;
        // Sealing needs the token key where `encode` looks for it, for this transaction only.
        self.keys.lock().insert(slot, token_key);
        let result = objects
            .iter()
            .try_for_each(|attrs| self.insert_object(&tx, slot, attrs).map(|_| ()));
        self.keys.lock().remove(&slot);
        result?;
        tx.commit().map_err(|e| self.write_err(e))?;
        Ok(slot)
    }

    /// Removes a token and all its objects (`ferrohsm-util delete-token`).
    pub fn delete_token(&self, slot: CK_SLOT_ID) -> Result<bool> {
        let mut conn = self.conn.lock();
        let tx = self.begin_write(&mut conn)?;
        let n = tx
            .execute("DELETE FROM tokens WHERE slot_id = ?1", params![slot as i64])
            .map_err(db_err)?;
        tx.commit().map_err(|e| self.write_err(e))?;
        self.keys.lock().remove(&slot);
        Ok(n > 0)
    }
}

fn identity(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)?;
    Ok((m.dev(), m.ino()))
}

/// An existing `ferrohsm.db` must at least look like an SQLite database before SQLite is let
/// near it: SQLite would treat an empty file as a new database and write one into it.
fn check_existing(path: &Path, m: &std::fs::Metadata) -> std::result::Result<(), String> {
    let p = path.display();
    let restore = "restore ferrohsm.db from a backup, or point store.path at the right directory; \
                   the file was left as it is";
    if !m.is_file() {
        return Err(format!("token store {p} is not a regular file; {restore}"));
    }
    if m.len() == 0 {
        return Err(format!(
            "token store {p} is empty (0 bytes), not a ferrohsm store; {restore}"
        ));
    }
    let mut header = [0u8; 16];
    std::io::Read::read_exact(
        &mut std::fs::File::open(path).map_err(|e| format!("cannot read the token store {p}: {e}"))?,
        &mut header,
    )
    .map_err(|e| format!("token store {p} is too short to be a ferrohsm store ({e}); {restore}"))?;
    if &header != b"SQLite format 3\0" {
        return Err(format!(
            "token store {p} is not an SQLite database, so not a ferrohsm store; {restore}"
        ));
    }
    Ok(())
}

/// After `check_existing`: the database has ferrohsm's tables (a schema version ferrohsm
/// wrote). New stores get their schema before they take the name `ferrohsm.db`, so a
/// database without it was not made by ferrohsm.
fn check_schema(conn: &Connection, path: &Path) -> std::result::Result<(), String> {
    let p = path.display();
    let read = || -> rusqlite::Result<(i64, i64)> {
        let version = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let tables = conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('tokens', 'objects')",
            [],
            |r| r.get(0),
        )?;
        Ok((version, tables))
    };
    let (version, tables) =
        read().map_err(|e| format!("token store {p} is damaged or not a ferrohsm store: {e}"))?;
    if version < 1 || tables != 2 {
        return Err(format!(
            "token store {p} is an SQLite database without ferrohsm's tables, not a ferrohsm store; \
             restore ferrohsm.db from a backup, or point store.path at the right directory; the file was left as it is"
        ));
    }
    Ok(())
}

/// A new store is created only where none can have been: `ferrohsm.db` is missing, and so
/// are its journal files and the marker (`MARKER_NAME`) every store directory gets, and this
/// process never had a store open at this path. Other files (a log file, a configuration
/// file) do not matter. The directory itself may be new or may exist.
fn may_create(dir: &Path, path: &Path) -> std::result::Result<(), String> {
    let p = path.display();
    if OPENED.lock().contains(path) {
        return Err(format!(
            "token store {p} was open in this process and has disappeared; restore it and restart the application"
        ));
    }
    let marker = dir.join(MARKER_NAME);
    if marker.exists() {
        return Err(format!(
            "token store {p} is missing, but {} says this directory held one; restore ferrohsm.db \
             from a backup, or delete {} to start over with a new, empty store",
            marker.display(),
            marker.display()
        ));
    }
    for suffix in ["-wal", "-journal"] {
        let left = dir.join(format!("{DB_NAME}{suffix}"));
        if left.exists() {
            return Err(format!(
                "token store {p} is missing but {} is left from it; restore ferrohsm.db from a backup \
                 (the journal may hold its latest changes), or remove the journal to start over",
                left.display()
            ));
        }
    }
    Ok(())
}

/// Creates the database under a temporary name with its schema, then links it into place:
/// `ferrohsm.db` only ever names a complete ferrohsm database, and an existing one is never
/// replaced (two processes creating at once both end up with the same store).
fn create_new(dir: &Path, path: &Path) -> std::result::Result<(), String> {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        format!("cannot create the token store {}: {what}: {e}", path.display())
    };
    let new_dir = !dir.exists();
    std::fs::create_dir_all(dir).map_err(|e| fail("cannot create the directory", &e))?;
    #[cfg(unix)]
    if new_dir {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    let tmp = dir.join(format!("{DB_NAME}.new-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let build = || -> rusqlite::Result<()> {
        let mut c = Connection::open(&tmp)?;
        let tx = c.transaction()?;
        tx.execute_batch(SCHEMA_V1)?;
        tx.execute_batch(SCHEMA_V2)?;
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        tx.commit()?;
        c.pragma_update(None, "journal_mode", "WAL")?;
        c.close().map_err(|(_, e)| e)
    };
    let linked = build()
        .map_err(|e| fail("cannot write the new database", &e))
        .and_then(|()| {
            std::fs::File::open(&tmp)
                .and_then(|f| f.sync_all())
                .map_err(|e| fail("sync", &e))
        })
        .and_then(|()| match std::fs::hard_link(&tmp, path) {
            Ok(()) => Ok(()),
            // Another process created it meanwhile: use theirs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(fail("cannot link the new database into place", &e)),
        });
    let _ = std::fs::remove_file(&tmp);
    linked?;
    std::fs::write(dir.join(MARKER_NAME), MARKER_TEXT)
        .map_err(|e| fail("cannot write the marker file", &e))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    log::info!("created a new token store {}", path.display());
    Ok(())
}

fn record_from_row(r: &rusqlite::Row) -> rusqlite::Result<TokenRecord> {
    let label: Vec<u8> = r.get(1)?;
    let serial: String = r.get(2)?;
    let mut l = [b' '; 32];
    let n = label.len().min(32);
    l[..n].copy_from_slice(&label[..n]);
    let mut s = [b' '; 16];
    let n = serial.len().min(16);
    s[..n].copy_from_slice(&serial.as_bytes()[..n]);
    Ok(TokenRecord {
        slot_id: r.get::<_, i64>(0)? as CK_SLOT_ID,
        label: l,
        serial: s,
        user_pin_initialized: r.get::<_, Option<Vec<u8>>>(3)?.is_some(),
        so_pin: PinState {
            failures: r.get(4)?,
            locked: r.get(5)?,
        },
        user_pin: PinState {
            failures: r.get(6)?,
            locked: r.get(7)?,
        },
        max_failures: r.get(8)?,
    })
}

const RECORD_COLUMNS: &str =
    "slot_id, label, serial, user_wrap, so_failures, so_locked, user_failures, user_locked, max_failures";

impl Store for SqliteStore {
    fn tokens(&self) -> Result<Vec<TokenRecord>> {
        self.read(|c| {
            let mut st =
                c.prepare_cached(&format!("SELECT {RECORD_COLUMNS} FROM tokens ORDER BY slot_id"))?;
            let rows = st.query_map([], record_from_row)?;
            rows.collect()
        })
    }

    fn init_token(
        &self,
        slot: CK_SLOT_ID,
        so_pin: &[u8],
        label: &[u8; 32],
        user_pin: Option<&[u8]>,
    ) -> Result<TokenRecord> {
        let exists = self.tokens()?.into_iter().any(|t| t.slot_id == slot);
        if exists {
            self.check_pin(slot, PinOwner::So, so_pin)?;
        }
        // The KDF runs before the write transaction so other processes are not held up.
        let token_key = crypt::random_key();
        let (so_wrap, pin_key) =
            crypt::wrap_token_key(&token_key, so_pin, self.kdf, &wrap_aad(slot, PinOwner::So));
        let user = user_pin.map(|p| {
            let (wrap, key) = crypt::wrap_token_key(&token_key, p, self.kdf, &wrap_aad(slot, PinOwner::User));
            (p, wrap, key)
        });
        let user_wrap = user.as_ref().map(|(_, w, _)| w.clone());
        let mut conn = self.conn.lock();
        let tx = self.begin_write(&mut conn)?;
        if exists {
            // Re-initialisation: same slot and serial, new token key, no objects, no user PIN.
            tx.execute("DELETE FROM objects WHERE slot_id = ?1", params![slot as i64])
                .map_err(db_err)?;
            tx.execute(
                "UPDATE tokens SET label = ?2, so_wrap = ?3, user_wrap = ?4, so_failures = 0, so_locked = 0, \
                 user_failures = 0, user_locked = 0, generation = generation + 1 WHERE slot_id = ?1",
                params![slot as i64, &label[..], so_wrap, user_wrap],
            )
            .map_err(db_err)?;
        } else {
            let max: Option<i64> = tx
                .query_row("SELECT MAX(slot_id) FROM tokens", [], |r| r.get(0))
                .map_err(db_err)?;
            let free = max.map_or(0, |m| m as CK_SLOT_ID + 1);
            if slot != free {
                return fail_because(
                    CKR_SLOT_ID_INVALID,
                    format!("slot {slot} is not the free slot ({free})"),
                );
            }
            let mut rnd = [0u8; 8];
            getrandom::fill(&mut rnd).map_err(|_| Error(CKR_FUNCTION_FAILED))?;
            let serial: String = rnd.iter().map(|b| format!("{b:02x}")).collect();
            tx.execute(
                "INSERT INTO tokens (slot_id, label, serial, so_wrap, user_wrap, max_failures) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![slot as i64, &label[..], serial, so_wrap, user_wrap, self.max_failures],
            )
            .map_err(db_err)?;
        }
        let record = tx
            .query_row(
                &format!("SELECT {RECORD_COLUMNS} FROM tokens WHERE slot_id = ?1"),
                params![slot as i64],
                record_from_row,
            )
            .map_err(db_err)?;
        tx.commit().map_err(|e| self.write_err(e))?;
        drop(conn);
        self.keys.lock().remove(&slot);
        self.remember_pin_key(slot, PinOwner::So, &so_wrap, so_pin, pin_key);
        if let Some((p, wrap, key)) = user {
            self.remember_pin_key(slot, PinOwner::User, &wrap, p, key);
        }
        Ok(record)
    }

    fn login(&self, slot: CK_SLOT_ID, who: PinOwner, pin: &[u8]) -> Result<()> {
        let key = self.check_pin(slot, who, pin)?;
        self.keys.lock().insert(slot, key);
        Ok(())
    }

    fn logout(&self, slot: CK_SLOT_ID) {
        self.keys.lock().remove(&slot);
    }

    fn init_pin(&self, slot: CK_SLOT_ID, pin: &[u8]) -> Result<()> {
        let token_key = self.token_key(slot).ok_or(Error(CKR_USER_NOT_LOGGED_IN))?;
        let (wrap, pin_key) =
            crypt::wrap_token_key(&token_key, pin, self.kdf, &wrap_aad(slot, PinOwner::User));
        let mut conn = self.conn.lock();
        let tx = self.begin_write(&mut conn)?;
        tx.execute(
            "UPDATE tokens SET user_wrap = ?2, user_failures = 0, user_locked = 0 WHERE slot_id = ?1",
            params![slot as i64, wrap],
        )
        .map_err(db_err)?;
        tx.commit().map_err(|e| self.write_err(e))?;
        drop(conn);
        self.remember_pin_key(slot, PinOwner::User, &wrap, pin, pin_key);
        Ok(())
    }

    fn set_pin(&self, slot: CK_SLOT_ID, who: PinOwner, old: &[u8], new: &[u8]) -> Result<()> {
        let token_key = self.check_pin(slot, who, old)?;
        // Re-wrap only: objects stay sealed under the same token key.
        let (wrap, pin_key) = crypt::wrap_token_key(&token_key, new, self.kdf, &wrap_aad(slot, who));
        let (wrap_col, _, _, _) = Self::columns(who);
        let mut conn = self.conn.lock();
        let tx = self.begin_write(&mut conn)?;
        tx.execute(
            &format!("UPDATE tokens SET {wrap_col} = ?2 WHERE slot_id = ?1"),
            params![slot as i64, wrap],
        )
        .map_err(db_err)?;
        tx.commit().map_err(|e| self.write_err(e))?;
        drop(conn);
        self.remember_pin_key(slot, who, &wrap, new, pin_key);
        Ok(())
    }

    fn find(
        &self,
        slot: CK_SLOT_ID,
        template: &[(CK_ATTRIBUTE_TYPE, Vec<u8>)],
        with_private: bool,
    ) -> Result<Vec<u64>> {
        let key = if with_private { self.token_key(slot) } else { None };
        let (sql, args) = find_query(slot, template, key.as_ref());
        let rows: Vec<(i64, bool, Vec<u8>, Vec<u8>)> = self.read(|c| {
            let mut st = c.prepare_cached(&sql)?;
            let it = st.query_map(rusqlite::params_from_iter(args), |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?;
            it.collect()
        })?;
        let mut out = Vec::new();
        for (id, private, clear, sealed) in rows {
            // A damaged record is reported (in decode) and skipped; the search goes on.
            if let Ok(Some(attrs)) = self.decode(slot, id as u64, private, &clear, &sealed) {
                if attrs.matches(template) {
                    out.push(id as u64);
                }
            }
        }
        Ok(out)
    }

    fn load(&self, slot: CK_SLOT_ID, id: u64) -> Result<Option<Attributes>> {
        let row: Option<(bool, Vec<u8>, Vec<u8>)> = self.read(|c| {
            c.prepare_cached("SELECT private, clear, sealed FROM objects WHERE id = ?1 AND slot_id = ?2")?
                .query_row(params![id as i64, slot as i64], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()
        })?;
        match row {
            Some((private, clear, sealed)) => self.decode(slot, id, private, &clear, &sealed),
            None => Ok(None),
        }
    }

    fn create(&self, slot: CK_SLOT_ID, objects: &[&Attributes]) -> Result<Vec<u64>> {
        let mut conn = self.conn.lock();
        let tx = self.begin_write(&mut conn)?;
        let ids = objects
            .iter()
            .map(|attrs| self.insert_object(&tx, slot, attrs))
            .collect::<Result<Vec<u64>>>()?;
        Self::bump_generation(&tx, slot)?;
        tx.commit().map_err(|e| self.write_err(e))?;
        Ok(ids)
    }

    fn update(&self, slot: CK_SLOT_ID, id: u64, attrs: &Attributes) -> Result<()> {
        let (clear, sealed, key_id, label) = self.encode(slot, id, attrs)?;
        let mut conn = self.conn.lock();
        let tx = self.begin_write(&mut conn)?;
        let n = tx
            .execute(
                "UPDATE objects SET private = ?3, class = ?4, key_id = ?5, label = ?6, clear = ?7, sealed = ?8 \
                 WHERE id = ?1 AND slot_id = ?2",
                params![id as i64, slot as i64, attrs.is_private(), attrs.class().map(|c| c as i64), key_id, label, clear, sealed],
            )
            .map_err(db_err)?;
        if n == 0 {
            return fail(CKR_OBJECT_HANDLE_INVALID);
        }
        Self::bump_generation(&tx, slot)?;
        tx.commit().map_err(|e| self.write_err(e))
    }

    fn destroy(&self, slot: CK_SLOT_ID, id: u64) -> Result<()> {
        let mut conn = self.conn.lock();
        let tx = self.begin_write(&mut conn)?;
        let n = tx
            .execute(
                "DELETE FROM objects WHERE id = ?1 AND slot_id = ?2",
                params![id as i64, slot as i64],
            )
            .map_err(db_err)?;
        if n == 0 {
            return fail(CKR_OBJECT_HANDLE_INVALID);
        }
        Self::bump_generation(&tx, slot)?;
        tx.commit().map_err(|e| self.write_err(e))
    }

    fn generation(&self, slot: CK_SLOT_ID) -> Result<u64> {
        let g: Option<i64> = self.read(|c| {
            c.prepare_cached("SELECT generation FROM tokens WHERE slot_id = ?1")?
                .query_row(params![slot as i64], |r| r.get(0))
                .optional()
        })?;
        Ok(g.unwrap_or(0) as u64)
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        self.keys.lock().clear();
        self.pin_cache.lock().clear();
    }
}

/// The search of `C_FindObjects` as SQL: indexed on `CKA_ID` and `CKA_LABEL` (clear values for
/// public objects, keyed hashes for private ones); the full template is checked afterwards.
fn find_query(
    slot: CK_SLOT_ID,
    template: &[(CK_ATTRIBUTE_TYPE, Vec<u8>)],
    key: Option<&Key>,
) -> (String, Vec<rusqlite::types::Value>) {
    let get = |t: CK_ATTRIBUTE_TYPE| template.iter().find(|(x, _)| *x == t).map(|(_, v)| v.clone());
    let mut sql = String::from("SELECT id, private, clear, sealed FROM objects WHERE slot_id = ?1");
    let mut args: Vec<rusqlite::types::Value> = vec![(slot as i64).into()];
    if key.is_none() {
        sql.push_str(" AND private = 0");
    }
    for (t, col) in [(CKA_ID, "key_id"), (CKA_LABEL, "label")] {
        if let Some(v) = get(t) {
            let hashed = key
                .map(|k| crypt::lookup_hash(k, t, &v))
                .unwrap_or_else(|| v.clone());
            args.push(v.into());
            args.push(hashed.into());
            sql.push_str(&format!(" AND {col} IN (?{}, ?{})", args.len() - 1, args.len()));
        }
    }
    if let Some(c) = get(CKA_CLASS)
        .and_then(|v| v.try_into().ok())
        .map(CK_ULONG::from_ne_bytes)
    {
        args.push((c as i64).into());
        // `+class`: the class alone selects too little to be worth an index lookup.
        sql.push_str(&format!(" AND +class = ?{}", args.len()));
    }
    sql.push_str(" ORDER BY id");
    (sql, args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(store: &SqliteStore, template: &[(CK_ATTRIBUTE_TYPE, Vec<u8>)]) -> String {
        let key = crypt::random_key();
        let (sql, args) = find_query(0, template, Some(&key));
        let conn = store.conn.lock();
        let mut st = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows = st
            .query_map(rusqlite::params_from_iter(args), |r| r.get::<_, String>(3))
            .unwrap();
        rows.map(|r| r.unwrap()).collect::<Vec<_>>().join("; ")
    }

    #[test]
    fn a_schema_1_store_keeps_its_counters_and_gains_attempt_tickets() {
        let dir = tempfile::tempdir().unwrap();
        {
            let c = Connection::open(dir.path().join(DB_NAME)).unwrap();
            c.execute_batch(SCHEMA_V1).unwrap();
            c.pragma_update(None, "user_version", 1).unwrap();
            c.execute(
                "INSERT INTO tokens (slot_id, label, serial, so_wrap, user_failures, max_failures) \
                 VALUES (0, x'', '00', x'00', 2, 3)",
                [],
            )
            .unwrap();
        }
        let kdf = KdfParams {
            memory_kib: 64,
            passes: 1,
        };
        let store = SqliteStore::open(dir.path(), kdf, 3).unwrap();
        let t = &store.tokens().unwrap()[0];
        assert_eq!(t.user_pin.failures, 2);
        let attempts: i64 = store
            .conn
            .lock()
            .query_row("SELECT user_attempts FROM tokens", [], |r| r.get(0))
            .unwrap();
        assert_eq!(attempts, 0);
        assert!(dir.path().join(MARKER_NAME).exists());
    }

    #[test]
    fn searches_by_id_and_label_use_an_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(
            dir.path(),
            KdfParams {
                memory_kib: 64,
                passes: 1,
            },
            10,
        )
        .unwrap();
        let class = (CKA_CLASS, CKO_PRIVATE_KEY.to_ne_bytes().to_vec());
        let by_id = plan(&store, &[class.clone(), (CKA_ID, b"id".to_vec())]);
        assert!(by_id.contains("USING INDEX objects_by_id"), "{by_id}");
        let by_label = plan(&store, &[class, (CKA_LABEL, b"zsk".to_vec())]);
        assert!(by_label.contains("USING INDEX objects_by_label"), "{by_label}");
    }
}
