//! The SQLite file of a store: where it may be created, how an existing one is recognised,
//! its schema and the migrations between versions. Nothing here runs after `open`.

use parking_lot::Mutex;
use rusqlite::{Connection, TransactionBehavior};
use std::path::{Path, PathBuf};

/// Version 6 adds the uses of limited keys (`super::usage::SCHEMA_USAGE`), version 7 the
/// audit trail (`super::audit::SCHEMA_AUDIT`).
pub(super) const SCHEMA_VERSION: i64 = 7;

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

pub(super) const SCHEMA_V1: &str = "
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
pub(super) const SCHEMA_V2: &str = "
ALTER TABLE tokens ADD COLUMN so_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tokens ADD COLUMN user_attempts INTEGER NOT NULL DEFAULT 0;
";

/// The epoch of a token (`TokenRow::epoch`), so other processes see a re-initialisation.
pub(super) const SCHEMA_V3: &str = "
ALTER TABLE tokens ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
";

/// PIN attempts still in flight (`PinCounter::pending`), so an attempt that finds the failure
/// budget taken by attempts not yet decided waits for them instead of being refused.
pub(super) const SCHEMA_V4: &str = "
ALTER TABLE tokens ADD COLUMN so_pending TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN user_pending TEXT NOT NULL DEFAULT '';
";

/// Authenticated records: each object row's version and tag, the token's summary of them
/// (`store::sealed::ledger`), and an index the summary's check scans without the rows' values;
/// the token key's generation and the PIN owners' points under its MAC (`owners`,
/// `store::sealed::owners`).
/// Rows of an older store keep no tag until the token's first login upgrades them.
pub(super) const SCHEMA_V5: &str = "
ALTER TABLE objects ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE objects ADD COLUMN tag BLOB;
ALTER TABLE tokens ADD COLUMN summary BLOB;
ALTER TABLE tokens ADD COLUMN owners BLOB;
CREATE INDEX objects_tags ON objects(slot_id, tag);
";

/// Brings the schema to `SCHEMA_VERSION`, in one transaction, refusing a newer one.
pub(super) fn migrate(conn: &mut Connection, path: &Path) -> std::result::Result<(), String> {
    let bad = |e: rusqlite::Error| {
        format!(
            "token store {} is damaged or not a ferrohsm store: {e}",
            path.display()
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
                path.display()
            ));
    }
    if version < 1 {
        tx.execute_batch(SCHEMA_V1).map_err(bad)?;
    }
    if version < 2 {
        tx.execute_batch(SCHEMA_V2).map_err(bad)?;
    }
    if version < 3 {
        tx.execute_batch(SCHEMA_V3).map_err(bad)?;
    }
    if version < 4 {
        tx.execute_batch(SCHEMA_V4).map_err(bad)?;
    }
    if version < 5 {
        tx.execute_batch(SCHEMA_V5).map_err(bad)?;
    }
    if version < 6 {
        tx.execute_batch(super::usage::SCHEMA_USAGE).map_err(bad)?;
    }
    if version < 7 {
        tx.execute_batch(super::audit::SCHEMA_AUDIT).map_err(bad)?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(bad)?;
    tx.commit().map_err(bad)
}

pub(super) fn identity(path: &Path) -> std::io::Result<(u64, u64)> {
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

/// The modes a store's directory and files are kept at. A store belongs to one user (0700,
/// 0600) unless its directory has the set-group-ID bit: that is a store shared by the
/// directory's group (the Debian package's `/var/lib/ferrohsm`, root:ferrohsm 2770, used by
/// daemons running as different users), whose files are kept group read/write (0660) and whose
/// directory mode is the administrator's. SQLite creates the `-wal` and `-shm` files with the
/// database file's mode whatever the umask, and the set-group-ID directory gives every file
/// its group, so files any member's process creates stay usable by the others.
#[derive(Clone, Copy)]
struct Modes {
    dir: Option<u32>,
    file: u32,
}

impl Modes {
    fn of(dir: &Path) -> Modes {
        use std::os::unix::fs::PermissionsExt;
        let shared = std::fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o2000 != 0);
        if shared {
            Modes {
                dir: None,
                file: 0o660,
            }
        } else {
            Modes {
                dir: Some(0o700),
                file: 0o600,
            }
        }
    }
}

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Creates the database under a temporary name with its schema, then links it into place:
/// `ferrohsm.db` only ever names a complete ferrohsm database, and an existing one is never
/// replaced (two processes creating at once both end up with the same store).
fn create_new(dir: &Path, path: &Path, modes: Modes) -> std::result::Result<(), String> {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        format!("cannot create the token store {}: {what}: {e}", path.display())
    };
    let new_dir = !dir.exists();
    std::fs::create_dir_all(dir).map_err(|e| fail("cannot create the directory", &e))?;
    // A directory made here is private (`modes` said so: it did not exist), even inside a
    // shared one whose set-group-ID bit it inherits: sharing is the administrator's choice.
    if new_dir {
        let _ = set_mode(dir, 0o700);
    }
    let tmp = dir.join(format!("{DB_NAME}.new-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let build = || -> rusqlite::Result<()> {
        let mut c = Connection::open(&tmp)?;
        let tx = c.transaction()?;
        tx.execute_batch(SCHEMA_V1)?;
        tx.execute_batch(SCHEMA_V2)?;
        tx.execute_batch(SCHEMA_V3)?;
        tx.execute_batch(SCHEMA_V4)?;
        tx.execute_batch(SCHEMA_V5)?;
        tx.execute_batch(super::usage::SCHEMA_USAGE)?;
        tx.execute_batch(super::audit::SCHEMA_AUDIT)?;
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
        // The final mode before the name: another user of a shared store never meets a
        // ferrohsm.db it cannot open.
        .and_then(|()| set_mode(&tmp, modes.file).map_err(|e| fail("chmod", &e)))
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

/// Opens the store in `dir`, creating it only where no store can have been (see
/// `may_create`). An existing `ferrohsm.db` must be a ferrohsm database: an empty, unreadable
/// or foreign file is an error and is left as it is. Returns the writer connection (schema
/// current), the file's path and its identity (device, inode).
pub(super) fn open(dir: &Path) -> std::result::Result<(Connection, PathBuf, (u64, u64)), String> {
    let path = dir.join(DB_NAME);
    match std::fs::metadata(&path) {
        Ok(m) => check_existing(&path, &m)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            may_create(dir, &path)?;
            create_new(dir, &path, Modes::of(dir))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(format!(
                "cannot read the token store {}: {e}; this user may not use it: run as the store's \
                 owner, or, for a shared store (a set-group-ID directory such as the package's \
                 /var/lib/ferrohsm), add the user to the directory's group (adduser USER ferrohsm) \
                 and start the program again",
                path.display()
            ))
        }
        Err(e) => return Err(format!("cannot read the token store {}: {e}", path.display())),
    }
    // Only the owner can chmod: other users of a shared store skip this silently.
    let modes = Modes::of(dir);
    if let Some(m) = modes.dir {
        let _ = set_mode(dir, m);
    }
    for suffix in ["", "-wal", "-shm"] {
        let _ = set_mode(&dir.join(format!("{DB_NAME}{suffix}")), modes.file);
    }
    // No CREATE flag: the file exists now, and if it vanished since, nothing is made in its place.
    let mut conn = Connection::open_with_flags(
        &path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| format!("cannot open the token store {}: {e}", path.display()))?;
    let id = identity(&path).map_err(|e| format!("cannot read the token store {}: {e}", path.display()))?;
    conn.busy_timeout(std::time::Duration::from_secs(30))
        .map_err(|e| format!("token store {} is not usable: {e}", path.display()))?;
    check_schema(&conn, &path)?;
    let setup = || -> rusqlite::Result<()> {
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // Space a change frees is zeroed, not left holding the old bytes: a PIN's old wrap
        // among them (`Backend::forget_old_versions`).
        conn.pragma_update(None, "secure_delete", "ON")?;
        Ok(())
    };
    setup().map_err(|e| format!("token store {} is not usable: {e}", path.display()))?;
    // Stores made before the marker existed get one; a read-only store simply has none.
    let marker = dir.join(MARKER_NAME);
    if !marker.exists() {
        let _ = std::fs::write(&marker, MARKER_TEXT);
    }
    OPENED.lock().insert(path.clone());
    migrate(&mut conn, &path)?;
    Ok((conn, path, id))
}
