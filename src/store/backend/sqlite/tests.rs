//! Tests of what only the SQLite backend has: schema migration and the query plan.

use super::file::{SCHEMA_V1, SCHEMA_VERSION};
use super::*;

fn plan(b: &SqliteBackend, q: &RowQuery, columns: &str) -> String {
    let (sql, args) = find_sql(0, q, columns);
    let conn = b.conn.lock();
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
    let b = SqliteBackend::open(dir.path()).unwrap();
    let t = &b.tokens().unwrap()[0];
    assert_eq!(t.user.counter.failures, 2);
    assert_eq!(t.user.counter.attempts, 0);
    assert_eq!(t.max_failures, 3);
    let version: i64 = b
        .conn
        .lock()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    assert!(dir.path().join(MARKER_NAME).exists());
}

#[test]
fn searches_by_id_and_label_use_an_index() {
    let dir = tempfile::tempdir().unwrap();
    let b = SqliteBackend::open(dir.path()).unwrap();
    let two = |v: &[u8]| Some(vec![v.to_vec(), vec![7u8; 32]]);
    let by_id = plan(
        &b,
        &RowQuery {
            class: Some(CKO_PRIVATE_KEY),
            key_id: two(b"id"),
            ..RowQuery::default()
        },
        OBJECT_COLUMNS,
    );
    assert!(by_id.contains("USING INDEX objects_by_id"), "{by_id}");
    let by_label = plan(
        &b,
        &RowQuery {
            class: Some(CKO_PRIVATE_KEY),
            label: two(b"zsk"),
            ..RowQuery::default()
        },
        OBJECT_COLUMNS,
    );
    assert!(by_label.contains("USING INDEX objects_by_label"), "{by_label}");
    // The first step of a find, the ids alone, reads the index and no row.
    for (q, index) in [
        (
            RowQuery {
                key_id: two(b"id"),
                ..RowQuery::default()
            },
            "objects_by_id",
        ),
        (
            RowQuery {
                label: two(b"zsk"),
                ..RowQuery::default()
            },
            "objects_by_label",
        ),
    ] {
        let ids = plan(&b, &q, "id");
        assert!(ids.contains(&format!("USING COVERING INDEX {index}")), "{ids}");
    }
}

/// A find answers from the index alone when the caller holds every match (once searches keep
/// finding only what it holds), and reads the rows when it does not; the class the caller
/// asks for is checked on the rows it reads.
#[test]
fn a_find_reads_rows_only_for_the_matches_the_caller_does_not_hold() {
    let dir = tempfile::tempdir().unwrap();
    let b = SqliteBackend::open(dir.path()).unwrap();
    let mut ids = vec![];
    crate::store::backend::transact(&b, |tx| {
        tx.insert_token(&TokenRow {
            so: PinRow {
                wrap: Some(vec![0]),
                ..PinRow::default()
            },
            ..TokenRow::default()
        })?;
        for class in [CKO_PRIVATE_KEY, CKO_PUBLIC_KEY] {
            let id = tx.new_object(0)?;
            let row = ObjectRow {
                id,
                class: Some(class),
                key_id: Some(b"k".to_vec()),
                clear: vec![1; 3000],
                ..ObjectRow::default()
            };
            tx.put_object(0, &row)?;
            ids.push(id);
        }
        Ok(())
    })
    .unwrap();
    let q = RowQuery {
        class: Some(CKO_PRIVATE_KEY),
        key_id: Some(vec![b"k".to_vec()]),
        ..RowQuery::default()
    };
    let shape = |known: &dyn Fn(u64) -> bool| -> Vec<(u64, bool)> {
        b.find(0, &q, known)
            .unwrap()
            .iter()
            .map(|m| (m.id(), matches!(m, Match::Row(_))))
            .collect()
    };
    // Neither held: the rows, of the class asked for only.
    assert_eq!(shape(&|_| false), vec![(ids[0], true)]);
    // Both held: the first search after one that read rows reads them again; once a search
    // found only what the caller holds, the next ones answer from the index: both ids (the
    // class is the caller's to check).
    assert_eq!(shape(&|_| true), vec![(ids[0], false)]);
    assert_eq!(shape(&|_| true), vec![(ids[0], false), (ids[1], false)]);
    assert_eq!(shape(&|_| true), vec![(ids[0], false), (ids[1], false)]);
    // The public key held, the private key not: the private key's row.
    assert_eq!(shape(&|id| id == ids[1]), vec![(ids[0], true)]);
    assert_eq!(shape(&|id| id == ids[1]), vec![(ids[0], true)]);
    let Match::Row(row) = &b.find(0, &q, &|_| false).unwrap()[0] else {
        unreachable!()
    };
    assert_eq!(row.clear, vec![1; 3000]);
}

/// Mode bits of a path, set-group-ID included.
fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn a_store_belongs_to_its_user_unless_its_directory_is_set_group_id() {
    use std::os::unix::fs::PermissionsExt;
    let files = |dir: &Path| ["", "-wal", "-shm"].map(|s| dir.join(format!("{DB_NAME}{s}")));
    // A private store: the directory and every file of it are the owner's alone, even when
    // they were made group-readable.
    let private = tempfile::tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o750)).unwrap();
    let b = SqliteBackend::open(private.path()).unwrap();
    assert_eq!(mode(private.path()), 0o700);
    for f in files(private.path()) {
        assert_eq!(mode(&f), 0o600, "{}", f.display());
    }
    drop(b);
    // A shared store (set-group-ID directory, as the Debian package makes /var/lib/ferrohsm):
    // the directory keeps its mode and the database, its WAL and its shared-memory file are
    // group read/write, so daemons of other users in the group can open and write them.
    let shared = tempfile::tempdir().unwrap();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o2770)).unwrap();
    let b = SqliteBackend::open(shared.path()).unwrap();
    assert_eq!(mode(shared.path()), 0o2770);
    for f in files(shared.path()) {
        assert_eq!(mode(&f), 0o660, "{}", f.display());
    }
    drop(b);
    // A private store moved into sharing (chmod g+s on its directory) becomes group read/write
    // at its next open.
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o2770)).unwrap();
    let _b = SqliteBackend::open(private.path()).unwrap();
    assert_eq!(mode(private.path()), 0o2770);
    assert_eq!(mode(&private.path().join(DB_NAME)), 0o660);
}
