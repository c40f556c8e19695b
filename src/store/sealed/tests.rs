//! The behaviour of the sealed layer, run against every backend: the same table of logins,
//! lockouts, sealing and searches must hold on each, since the security lives here once.

use super::*;
use crate::store::backend::memory::MemoryBackend;
use crate::store::backend::sqlite::SqliteBackend;
use crate::store::backend::testing::{Calls, Probe};
use crate::store::Fields;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use zeroize::Zeroizing;

const MAX: u32 = 3;
const SO: &[u8] = b"so-pin-1";
const USER: &[u8] = b"user-pin";

/// The test server of the integration tests (a private cluster, or FERROHSM_TEST_PG_URL).
#[path = "../../../tests/common/pg.rs"]
mod pg;

/// One backend under test; `dir` keeps an SQLite store's directory alive, `_server` the
/// PostgreSQL server of a postgres one.
struct Case {
    name: &'static str,
    store: Sealed,
    calls: Arc<Calls>,
    dir: Option<tempfile::TempDir>,
    _server: Option<(pg::Pg, tempfile::TempDir)>,
}

/// A PostgreSQL backend over a new database of a real server.
fn postgres() -> (
    crate::store::backend::postgres::PostgresBackend,
    (pg::Pg, tempfile::TempDir),
) {
    let server = pg::Pg::start();
    let url = server.database("sealed");
    let dir = tempfile::tempdir().unwrap();
    let conf = server.config(dir.path(), &url, MAX, 1000);
    let config = crate::config::Config::from_file(&conf).unwrap();
    let b = crate::store::backend::postgres::PostgresBackend::open(&config).unwrap();
    (b, (server, dir))
}

fn kdf() -> KdfParams {
    KdfParams {
        memory_kib: 64,
        passes: 1,
    }
}

fn cases() -> Vec<Case> {
    let (memory, mem_calls) = Probe::new(MemoryBackend::new());
    let dir = tempfile::tempdir().unwrap();
    let (sqlite, sql_calls) = Probe::new(SqliteBackend::open(dir.path()).unwrap());
    let (postgres, server) = postgres();
    let (postgres, pg_calls) = Probe::new(postgres);
    // SQLite last: tests of the file take it with `pop`.
    vec![
        Case {
            name: "memory",
            store: Sealed::new(Box::new(memory), kdf(), MAX),
            calls: mem_calls,
            dir: None,
            _server: None,
        },
        Case {
            name: "postgres",
            store: Sealed::new(Box::new(postgres), kdf(), MAX),
            calls: pg_calls,
            dir: None,
            _server: Some(server),
        },
        Case {
            name: "sqlite",
            store: Sealed::new(Box::new(sqlite), kdf(), MAX),
            calls: sql_calls,
            dir: Some(dir),
            _server: None,
        },
    ]
}

fn fields(pairs: &[(u64, &[u8])]) -> Fields {
    pairs
        .iter()
        .map(|(t, v)| (*t, Zeroizing::new(v.to_vec())))
        .collect()
}

/// A private key record as the token layer would split it.
fn private_key(id: &[u8], label: &[u8]) -> ObjectRecord {
    ObjectRecord {
        private: true,
        clear: fields(&[(CKA_CLASS, &CKO_PRIVATE_KEY.to_ne_bytes())]),
        secret: fields(&[
            (CKA_ID, id),
            (CKA_LABEL, label),
            (CKA_PRIME_1, b"prime-one-secret-0001"),
        ]),
        index: Index {
            class: Some(CKO_PRIVATE_KEY),
            id: Some(id.to_vec()),
            label: Some(label.to_vec()),
        },
    }
}

fn public_data(label: &[u8]) -> ObjectRecord {
    ObjectRecord {
        private: false,
        clear: fields(&[(CKA_CLASS, &CKO_DATA.to_ne_bytes()), (CKA_LABEL, label)]),
        secret: Fields::new(),
        index: Index {
            class: Some(CKO_DATA),
            id: None,
            label: Some(label.to_vec()),
        },
    }
}

fn value(o: &StoredObject, t: u64) -> Option<&[u8]> {
    o.fields.iter().find(|(x, _)| *x == t).map(|(_, v)| v.as_slice())
}

fn rv<T>(r: Result<T>) -> CK_RV {
    match r {
        Ok(_) => CKR_OK,
        Err(e) => e.rv(),
    }
}

fn by_label(label: &[u8]) -> Index {
    Index {
        label: Some(label.to_vec()),
        ..Index::default()
    }
}

#[test]
fn private_records_need_a_login_and_logout_forgets_the_key() {
    for c in cases() {
        let s = &c.store;
        s.init_token(0, SO, &[b' '; 32], Some(USER)).unwrap();
        assert_eq!(
            rv(s.create(0, &[private_key(b"k1", b"zsk")], &[])),
            CKR_USER_NOT_LOGGED_IN,
            "{}",
            c.name
        );
        let public = s.create(0, &[public_data(b"readme")], &[]).unwrap()[0];
        s.login(0, PinOwner::User, USER).unwrap();
        let id = s.create(0, &[private_key(b"k1", b"zsk")], &[]).unwrap()[0];
        let found = s.find(0, &by_label(b"zsk"), true).unwrap();
        assert_eq!(found.len(), 1, "{}", c.name);
        assert_eq!(value(&found[0], CKA_PRIME_1), Some(&b"prime-one-secret-0001"[..]));
        s.logout(0);
        // Without the token key the private record is neither found nor loaded...
        assert!(
            s.find(0, &by_label(b"zsk"), true).unwrap().is_empty(),
            "{}",
            c.name
        );
        assert!(s.load(0, id).unwrap().is_none(), "{}", c.name);
        assert_eq!(
            rv(s.update(
                0,
                id,
                s.load(0, id).map_or(0, |o| o.map_or(0, |o| o.version)),
                &private_key(b"k1", b"x")
            )),
            CKR_USER_NOT_LOGGED_IN
        );
        // ...the public one is.
        assert_eq!(s.find(0, &by_label(b"readme"), false).unwrap()[0].id, public);
        // A search without private records leaves them out even while logged in.
        s.login(0, PinOwner::User, USER).unwrap();
        assert!(
            s.find(0, &by_label(b"zsk"), false).unwrap().is_empty(),
            "{}",
            c.name
        );
        let loaded = s.load(0, id).unwrap().unwrap();
        assert_eq!(value(&loaded, CKA_ID), Some(&b"k1"[..]), "{}", c.name);
    }
}

#[test]
fn wrong_pins_lock_alike_on_every_backend() {
    for c in cases() {
        let s = &c.store;
        s.init_token(0, SO, &[b' '; 32], Some(USER)).unwrap();
        for _ in 0..MAX - 1 {
            assert_eq!(
                rv(s.login(0, PinOwner::User, b"nope")),
                CKR_PIN_INCORRECT,
                "{}",
                c.name
            );
        }
        assert_eq!(s.tokens().unwrap()[0].user_pin.failures, MAX - 1);
        // A success restarts the count.
        s.login(0, PinOwner::User, USER).unwrap();
        assert_eq!(s.tokens().unwrap()[0].user_pin.failures, 0);
        for _ in 0..MAX {
            assert_eq!(
                rv(s.login(0, PinOwner::User, b"nope")),
                CKR_PIN_INCORRECT,
                "{}",
                c.name
            );
        }
        assert_eq!(rv(s.login(0, PinOwner::User, USER)), CKR_PIN_LOCKED, "{}", c.name);
        assert_eq!(rv(s.set_pin(0, PinOwner::User, USER, b"other")), CKR_PIN_LOCKED);
        assert!(s.tokens().unwrap()[0].user_pin.locked, "{}", c.name);
        // A new user PIN from the SO unlocks it.
        s.login(0, PinOwner::So, SO).unwrap();
        s.init_pin(0, b"new-user-pin").unwrap();
        s.logout(0);
        s.login(0, PinOwner::User, b"new-user-pin").unwrap();
        // The SO PIN locks the same way, and re-initialisation checks it.
        for _ in 0..MAX {
            assert_eq!(
                rv(s.login(0, PinOwner::So, b"nope")),
                CKR_PIN_INCORRECT,
                "{}",
                c.name
            );
        }
        assert_eq!(
            rv(s.init_token(0, SO, &[b' '; 32], None)),
            CKR_PIN_LOCKED,
            "{}",
            c.name
        );
    }
}

#[test]
fn the_attempt_is_recorded_before_the_pin_is_derived() {
    for c in cases() {
        let s = &c.store;
        s.init_token(0, SO, &[b' '; 32], Some(USER)).unwrap();
        let user_failures = |calls: &Calls| -> Vec<u32> {
            calls
                .committed
                .lock()
                .iter()
                .map(|rows| rows[0].user.counter.failures)
                .collect()
        };
        // A right PIN: reserved (counted as a failure), then forgiven.
        c.calls.reset();
        s.login(0, PinOwner::User, USER).unwrap();
        assert_eq!(user_failures(&c.calls), vec![1, 0], "{}", c.name);
        // A wrong one: reserved, and stays counted.
        c.calls.reset();
        assert_eq!(rv(s.login(0, PinOwner::User, b"nope")), CKR_PIN_INCORRECT);
        assert_eq!(user_failures(&c.calls), vec![1, 1], "{}", c.name);
        // While no attempt can be recorded, no PIN is evaluated: right and wrong PINs get the
        // same device error, and nothing is counted.
        c.calls.refuse_writes.store(true, SeqCst);
        for pin in [USER, b"nope".as_slice(), SO] {
            for who in [PinOwner::User, PinOwner::So] {
                assert_eq!(rv(s.login(0, who, pin)), CKR_DEVICE_ERROR, "{}", c.name);
            }
        }
        assert_eq!(
            rv(s.set_pin(0, PinOwner::User, USER, b"other-pin")),
            CKR_DEVICE_ERROR
        );
        c.calls.refuse_writes.store(false, SeqCst);
        assert_eq!(s.tokens().unwrap()[0].user_pin.failures, 1, "{}", c.name);
        s.login(0, PinOwner::User, USER).unwrap();
    }
}

/// Reserves `n` user-PIN attempts of slot 0 as other processes would, leaving them undecided.
fn reserve_elsewhere(s: &Sealed, n: usize) -> Vec<u64> {
    (0..n)
        .map(|_| {
            transact(&*s.backend, |tx| {
                let mut row = tx.token(0)?.unwrap();
                let max = row.max_failures;
                let lockout::Reservation::Granted(t) = row.user.counter.reserve(max)? else {
                    panic!("the budget is full");
                };
                tx.update_token(&row)?;
                Ok(t)
            })
            .unwrap()
        })
        .collect()
}

/// Decides an attempt that `reserve_elsewhere` took, as its process would.
fn decide_elsewhere(s: &Sealed, ticket: u64, ok: bool) {
    transact(&*s.backend, |tx| {
        let mut row = tx.token(0)?.unwrap();
        let max = row.max_failures;
        row.user.counter.resolve(ticket, ok, max);
        tx.update_token(&row)
    })
    .unwrap();
}

#[test]
fn an_attempt_beyond_a_budget_in_flight_waits_for_a_decision_instead_of_being_refused() {
    for c in cases() {
        let s = &c.store;
        s.init_token(0, SO, &[b' '; 32], Some(USER)).unwrap();
        // Other processes hold the whole budget with attempts still being checked.
        let tickets = reserve_elsewhere(s, MAX as usize);
        assert_eq!(
            s.tokens().unwrap()[0].user_pin.failures,
            0,
            "in flight is not failed"
        );
        let t = std::time::Instant::now();
        std::thread::scope(|sc| {
            sc.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(300));
                // One of them was the right PIN: it forgives what came before it.
                decide_elsewhere(s, tickets[0], true);
            });
            assert_eq!(rv(s.login(0, PinOwner::User, USER)), CKR_OK, "{}", c.name);
        });
        assert!(
            t.elapsed() >= std::time::Duration::from_millis(300),
            "{}: it waited",
            c.name
        );
        let token = &s.tokens().unwrap()[0];
        assert_eq!(
            (token.user_pin.failures, token.user_pin.locked),
            (0, false),
            "{}: the success forgave every attempt before it",
            c.name
        );
        // The others, decided wrong later, came before the success: nothing counts.
        for t in &tickets[1..] {
            decide_elsewhere(s, *t, false);
        }
        assert_eq!(s.tokens().unwrap()[0].user_pin.failures, 0, "{}", c.name);
        // A wrong PIN waiting behind attempts that all turn out wrong gets CKR_PIN_LOCKED
        // and is never evaluated: the budget was spent.
        s.logout(0);
        let tickets = reserve_elsewhere(s, MAX as usize);
        std::thread::scope(|sc| {
            sc.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(100));
                for t in &tickets {
                    decide_elsewhere(s, *t, false);
                }
            });
            assert_eq!(
                rv(s.login(0, PinOwner::User, b"nope")),
                CKR_PIN_LOCKED,
                "{}",
                c.name
            );
        });
        assert!(s.tokens().unwrap()[0].user_pin.locked, "{}", c.name);
    }
}

#[test]
fn an_attempt_left_undecided_by_a_stopped_process_counts_as_wrong_after_the_timeout() {
    for Case {
        name,
        store,
        _server,
        dir,
        ..
    } in cases()
    {
        let _keep = (_server, dir);
        // Far longer than a login takes even on a busy machine, so "no wait" is told apart.
        let timeout = std::time::Duration::from_secs(2);
        let s = store.with_attempt_timeout(timeout);
        s.init_token(0, SO, &[b' '; 32], Some(USER)).unwrap();
        // Fewer than the budget: a right PIN goes ahead at once and forgives them.
        reserve_elsewhere(&s, MAX as usize - 1);
        let t = std::time::Instant::now();
        s.login(0, PinOwner::User, USER).unwrap();
        assert!(t.elapsed() < timeout, "{name}: no wait while the budget has room");
        assert_eq!(s.tokens().unwrap()[0].user_pin.failures, 0, "{name}");
        // The whole budget held by attempts whose processes were killed: the next attempt
        // waits for them no longer than the timeout, then they count as wrong PINs, so the
        // PIN is locked, as it would have been had they been decided wrong.
        s.logout(0);
        reserve_elsewhere(&s, MAX as usize);
        let t = std::time::Instant::now();
        assert_eq!(rv(s.login(0, PinOwner::User, USER)), CKR_PIN_LOCKED, "{name}");
        let waited = t.elapsed();
        assert!(
            waited >= timeout && waited < timeout * 20,
            "{name}: waited {waited:?} for a timeout of {timeout:?}"
        );
        let token = &s.tokens().unwrap()[0];
        assert_eq!(
            (token.user_pin.failures, token.user_pin.locked),
            (MAX, true),
            "{name}"
        );
        // Recorded in the store: the next attempt is refused without waiting.
        let t = std::time::Instant::now();
        assert_eq!(rv(s.login(0, PinOwner::User, USER)), CKR_PIN_LOCKED, "{name}");
        assert!(t.elapsed() < timeout, "{name}");
    }
}

#[test]
fn find_is_one_backend_query_whatever_the_number_of_matches() {
    for c in cases() {
        let s = &c.store;
        s.init_token(0, SO, &[b' '; 32], Some(USER)).unwrap();
        s.login(0, PinOwner::User, USER).unwrap();
        let keys: Vec<ObjectRecord> = (0..25).map(|i| private_key(&[i], b"shared")).collect();
        s.create(0, &keys, &[]).unwrap();
        s.create(0, &[public_data(b"shared")], &[]).unwrap();
        c.calls.reset();
        let found = s.find(0, &by_label(b"shared"), true).unwrap();
        assert_eq!(found.len(), 26, "{}", c.name);
        assert_eq!(c.calls.find.load(SeqCst), 1, "{}", c.name);
        assert_eq!(c.calls.reads(), 1, "{}: no read per object", c.name);
        assert_eq!(c.calls.write.load(SeqCst), 0);
        // By id: the private key's id is found through its keyed hash.
        let id = Index {
            class: Some(CKO_PRIVATE_KEY),
            id: Some(vec![7]),
            label: None,
        };
        assert_eq!(s.find(0, &id, true).unwrap().len(), 1, "{}", c.name);
    }
}

#[test]
fn re_initialisation_drops_objects_and_the_user_pin() {
    for c in cases() {
        let s = &c.store;
        s.init_token(0, SO, b"first                           ", Some(USER))
            .unwrap();
        let serial = s.tokens().unwrap()[0].serial;
        s.login(0, PinOwner::User, USER).unwrap();
        s.create(0, &[private_key(b"k", b"l")], &[]).unwrap();
        let g = s.generation(0).unwrap();
        assert_eq!(rv(s.init_token(1, SO, &[b' '; 32], None).map(|_| ())), CKR_OK);
        assert_eq!(rv(s.init_token(5, SO, &[b' '; 32], None)), CKR_SLOT_ID_INVALID);
        let t = s
            .init_token(0, SO, b"second                          ", None)
            .unwrap();
        assert_eq!(t.serial, serial, "{}", c.name);
        assert!(!t.user_pin_initialized, "{}", c.name);
        assert!(s.generation(0).unwrap() > g, "{}", c.name);
        assert_eq!(rv(s.login(0, PinOwner::User, USER)), CKR_USER_PIN_NOT_INITIALIZED);
        s.login(0, PinOwner::So, SO).unwrap();
        assert!(
            s.find(0, &Index::default(), true).unwrap().is_empty(),
            "{}",
            c.name
        );
    }
}

/// Two processes on one store, for each backend that can be shared: (A, B).
fn shared_pairs() -> Vec<(&'static str, Sealed, Sealed, Box<dyn std::any::Any>)> {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = |d: &std::path::Path| Sealed::new(Box::new(SqliteBackend::open(d).unwrap()), kdf(), MAX);
    let (a, b) = (sqlite(dir.path()), sqlite(dir.path()));
    let (pa, server) = postgres();
    let config = crate::config::Config::from_file(&server.1.path().join("ferrohsm.toml")).unwrap();
    let pb = crate::store::backend::postgres::PostgresBackend::open(&config).unwrap();
    vec![
        ("sqlite", a, b, Box::new(dir)),
        (
            "postgres",
            Sealed::new(Box::new(pa), kdf(), MAX),
            Sealed::new(Box::new(pb), kdf(), MAX),
            Box::new(server),
        ),
    ]
}

/// A process still holding the token key of a token another process re-initialised may not
/// seal anything under it: every write that seals is refused and the old key dropped, even
/// before the token layer notices the new epoch.
#[test]
fn a_key_from_before_a_re_initialisation_elsewhere_seals_nothing() {
    for (name, a, b, _keep) in shared_pairs() {
        a.init_token(0, SO, &[b'a'; 32], Some(USER)).unwrap();
        b.login(0, PinOwner::User, USER).unwrap();
        let old = b.create(0, &[private_key(b"old", b"old")], &[]).unwrap()[0];
        b.logout(0);
        b.login(0, PinOwner::So, SO).unwrap();
        a.init_token(0, SO, &[b'a'; 32], None).unwrap();
        assert_eq!(
            rv(b.init_pin(0, b"user-pin-2")),
            CKR_USER_NOT_LOGGED_IN,
            "{name}: init_pin"
        );
        assert!(b.token_key(0).is_none(), "{name}: the old key is dropped");
        // Logged in again as the user with the old key: create and update refused alike.
        a.login(0, PinOwner::So, SO).unwrap();
        a.init_pin(0, USER).unwrap();
        b.login(0, PinOwner::User, USER).unwrap();
        a.logout(0);
        a.init_token(0, SO, &[b'a'; 32], Some(USER)).unwrap();
        assert_eq!(
            rv(b.create(0, &[private_key(b"k", b"l")], &[])),
            CKR_USER_NOT_LOGGED_IN,
            "{name}: create"
        );
        b.login(0, PinOwner::User, USER).unwrap();
        let id = b.create(0, &[private_key(b"k", b"l")], &[]).unwrap()[0];
        a.init_token(0, SO, &[b'a'; 32], Some(USER)).unwrap();
        assert_eq!(
            rv(b.update(0, id, 0, &private_key(b"k", b"m"))),
            CKR_USER_NOT_LOGGED_IN,
            "{name}: update"
        );
        assert_eq!(
            rv(b.set_pin(0, PinOwner::User, USER, b"other-pin")),
            CKR_OK,
            "{name}: set_pin checks the PIN afresh"
        );
        // Whatever is in the store opens under the current key: nothing damaged.
        a.login(0, PinOwner::User, b"other-pin").unwrap();
        assert!(a.find(0, &Index::default(), true).unwrap().is_empty(), "{name}");
        assert!(a.load(0, old).unwrap().is_none(), "{name}");
    }
}

/// Every file of an SQLite store, concatenated (database, WAL, shared memory).
fn store_bytes(dir: &std::path::Path) -> Vec<u8> {
    let mut all = vec![];
    for e in std::fs::read_dir(dir).unwrap() {
        all.extend(std::fs::read(e.unwrap().path()).unwrap_or_default());
    }
    all
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn a_private_label_and_id_are_not_in_the_sqlite_file() {
    let c = cases().pop().unwrap();
    let s = &c.store;
    s.init_token(0, SO, &[b' '; 32], Some(USER)).unwrap();
    s.login(0, PinOwner::User, USER).unwrap();
    s.create(0, &[private_key(b"private-id-9c1e", b"private-label-b7d2")], &[])
        .unwrap();
    s.create(0, &[public_data(b"public-label-x5q0")], &[]).unwrap();
    let bytes = store_bytes(c.dir.as_ref().unwrap().path());
    assert!(
        contains(&bytes, b"public-label-x5q0"),
        "the grep finds clear text"
    );
    for secret in [
        &b"private-id-9c1e"[..],
        b"private-label-b7d2",
        b"prime-one-secret",
    ] {
        assert!(
            !contains(&bytes, secret),
            "{} in clear in the store",
            String::from_utf8_lossy(secret)
        );
    }
    // And a new process (a new sealed layer over the same file) finds it after a login.
    drop(c.store);
    let again = Sealed::new(
        Box::new(SqliteBackend::open(c.dir.as_ref().unwrap().path()).unwrap()),
        kdf(),
        MAX,
    );
    assert!(again
        .find(0, &by_label(b"private-label-b7d2"), true)
        .unwrap()
        .is_empty());
    again.login(0, PinOwner::User, USER).unwrap();
    assert_eq!(
        again
            .find(0, &by_label(b"private-label-b7d2"), true)
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn a_damaged_record_is_left_out_of_searches_and_reported_on_load() {
    for c in cases() {
        let s = &c.store;
        s.init_token(0, SO, &[b' '; 32], Some(USER)).unwrap();
        s.login(0, PinOwner::User, USER).unwrap();
        let ids = s
            .create(0, &[private_key(b"a", b"same"), private_key(b"b", b"same")], &[])
            .unwrap();
        // Move b's sealed values onto a: the seals name b's id, so a fails authentication.
        let b_row = s.backend.object(0, ids[1]).unwrap().unwrap();
        transact(&*s.backend, |tx| {
            let mut a_row = b_row.clone();
            a_row.id = ids[0];
            tx.put_object(0, &a_row).map(|_| ())
        })
        .unwrap();
        assert_eq!(rv(s.load(0, ids[0])), CKR_DEVICE_ERROR, "{}", c.name);
        let found = s.find(0, &by_label(b"same"), true).unwrap();
        assert_eq!(
            found.iter().map(|o| o.id).collect::<Vec<_>>(),
            vec![ids[1]],
            "{}",
            c.name
        );
    }
}

#[test]
fn threads_guessing_at_once_get_at_most_max_failures_answers() {
    for c in cases() {
        let s = &c.store;
        s.init_token(0, SO, &[b' '; 32], Some(USER)).unwrap();
        let answers: Vec<CK_RV> = std::thread::scope(|scope| {
            let guesses: Vec<_> = (0..8)
                .map(|i| scope.spawn(move || rv(s.login(0, PinOwner::User, format!("wrong-{i}").as_bytes()))))
                .collect();
            guesses.into_iter().map(|g| g.join().unwrap()).collect()
        });
        let evaluated = answers.iter().filter(|&&r| r == CKR_PIN_INCORRECT).count();
        let refused = answers.iter().filter(|&&r| r == CKR_PIN_LOCKED).count();
        assert_eq!(evaluated, MAX as usize, "{}: {answers:?}", c.name);
        assert_eq!(refused, 8 - MAX as usize, "{}: {answers:?}", c.name);
        assert_eq!(rv(s.login(0, PinOwner::User, USER)), CKR_PIN_LOCKED, "{}", c.name);
    }
}

/// `search` hands back records the caller holds unchanged as ids, without opening them, and
/// opens the rest; a record altered in the file is caught as soon as it is opened again.
#[test]
fn a_search_opens_only_the_records_the_caller_does_not_hold() {
    let c = cases().pop().unwrap();
    let s = &c.store;
    s.init_token(0, SO, &[b' '; 32], Some(USER)).unwrap();
    s.login(0, PinOwner::User, USER).unwrap();
    let ids = s
        .create(
            0,
            &[
                private_key(b"a", b"same"),
                private_key(b"b", b"same"),
                private_key(b"c", b"same"),
            ],
            &[],
        )
        .unwrap();
    // Alter the second record's last seal (its tag) in the file, as an attacker could.
    let db = rusqlite::Connection::open(c.dir.as_ref().unwrap().path().join("ferrohsm.db")).unwrap();
    let mut sealed: Vec<u8> = db
        .query_row("SELECT sealed FROM objects WHERE id = ?1", [ids[1] as i64], |r| {
            r.get(0)
        })
        .unwrap();
    *sealed.last_mut().unwrap() ^= 1;
    db.execute(
        "UPDATE objects SET sealed = ?1 WHERE id = ?2",
        rusqlite::params![sealed, ids[1] as i64],
    )
    .unwrap();
    let known = |id: u64| (id == ids[1]).then_some(true);
    let found = s.search(0, &by_label(b"same"), true, &known).unwrap();
    let shape: Vec<(u64, bool)> = found
        .iter()
        .map(|f| match f {
            Found::Known(id) => (*id, false),
            Found::Read(o) => (o.id, true),
        })
        .collect();
    assert_eq!(shape, vec![(ids[0], true), (ids[1], false), (ids[2], true)]);
    // Opened, the altered record fails authentication and is left out of the search.
    let opened: Vec<u64> = s
        .find(0, &by_label(b"same"), true)
        .unwrap()
        .iter()
        .map(|o| o.id)
        .collect();
    assert_eq!(opened, vec![ids[0], ids[2]]);
}

/// What a writer of the store without a PIN does to a row (`tamper_table`).
type Tamper = fn(&mut backend::ObjectRow, &backend::ObjectRow);

/// Each edit of one row, as a writer of the store file or database without a PIN makes it:
/// a tagged row so edited is never used (not loaded, left out of searches, logged), on every
/// backend, private and public rows alike. `old` is the row before its last change, for
/// rollbacks.
#[test]
fn every_edit_of_an_authenticated_row_is_refused() {
    let table: &[(&str, Tamper)] = &[
        ("class column", |r, _| r.class = Some(r.class.unwrap_or(0) ^ 1)),
        ("class column cleared", |r, _| r.class = None),
        ("key_id column", |r, _| r.key_id = Some(b"other".to_vec())),
        ("label column", |r, _| r.label = Some(b"other".to_vec())),
        ("private flag", |r, _| r.private = !r.private),
        ("version", |r, _| r.version += 1),
        ("a clear value added", |r, _| {
            let mut f = super::objects::from_bytes(&r.clear).unwrap();
            f.push((CKA_SENSITIVE, Zeroizing::new(vec![0])));
            r.clear = super::objects::to_bytes(f.iter().map(|(t, v)| (*t, v.as_slice()))).to_vec();
        }),
        ("a clear value dropped", |r, _| {
            let f = super::objects::from_bytes(&r.clear).unwrap();
            r.clear = super::objects::to_bytes(f.iter().skip(1).map(|(t, v)| (*t, v.as_slice()))).to_vec();
        }),
        (
            "a sealed value dropped (one added where there is none)",
            |r, _| {
                let mut f = super::objects::from_bytes(&r.sealed).unwrap();
                if f.is_empty() {
                    f.push((CKA_VALUE, Zeroizing::new(vec![0; 28])));
                } else {
                    f.remove(0);
                }
                r.sealed = super::objects::to_bytes(f.iter().map(|(t, v)| (*t, v.as_slice()))).to_vec();
            },
        ),
        ("the tag flipped", |r, _| r.tag.as_mut().unwrap()[0] ^= 1),
        ("the tag stripped", |r, _| r.tag = None),
        ("rolled back to its older copy", |r, old| *r = old.clone()),
        ("rolled back, its tag stripped", |r, old| {
            *r = old.clone();
            r.tag = None;
        }),
    ];
    for c in cases() {
        let s = &c.store;
        for (what, tamper) in table {
            for private in [true, false] {
                s.init_token(0, SO, &[b' '; 32], Some(USER)).unwrap();
                s.login(0, PinOwner::User, USER).unwrap();
                let record = if private {
                    private_key(b"k", b"target")
                } else {
                    public_data(b"target")
                };
                let other = s.create(0, &[public_data(b"bystander")], &[]).unwrap()[0];
                let id = s.create(0, std::slice::from_ref(&record), &[]).unwrap()[0];
                let old = s.backend.object(0, id).unwrap().unwrap();
                s.update(0, id, old.version, &record).unwrap();
                let mut row = s.backend.object(0, id).unwrap().unwrap();
                tamper(&mut row, &old);
                transact(&*s.backend, |tx| tx.put_object(0, &row).map(drop)).unwrap();
                let name = format!(
                    "{}: {what} ({})",
                    c.name,
                    if private { "private" } else { "public" }
                );
                assert_eq!(rv(s.load(0, id)), CKR_DEVICE_ERROR, "{name}: load");
                assert!(
                    s.find(0, &by_label(b"target"), true).unwrap().is_empty(),
                    "{name}: find"
                );
                // A fresh login (another process) does not take it either.
                s.logout(0);
                match rv(s.login(0, PinOwner::User, USER)) {
                    // The set of rows no longer adds up: nothing is used.
                    CKR_DEVICE_ERROR => {}
                    CKR_OK => {
                        assert_eq!(rv(s.load(0, id)), CKR_DEVICE_ERROR, "{name}: load after login");
                        assert!(s.load(0, other).unwrap().is_some(), "{name}: the bystander");
                    }
                    r => panic!("{name}: login gave 0x{r:x}"),
                }
                s.logout(0);
            }
        }
    }
}

/// The token's summary edited, or a row removed or added with a forged tag: the set of rows
/// no longer adds up, and a login (every process's first look) refuses the token's objects.
#[test]
fn a_removed_row_or_an_edited_summary_breaks_the_login() {
    type Edit = fn(&dyn backend::Backend, u64);
    let table: &[(&str, Edit)] = &[
        ("a row deleted", |b, id| {
            transact(b, |tx| tx.delete_object(0, id).map(drop)).unwrap();
        }),
        ("the summary flipped", |b, _| {
            transact(b, |tx| {
                let mut t = tx.token(0)?.unwrap();
                t.summary.as_mut().unwrap()[5] ^= 1;
                tx.update_token(&t)
            })
            .unwrap();
        }),
        ("the summary removed", |b, _| {
            transact(b, |tx| {
                let mut t = tx.token(0)?.unwrap();
                t.summary = None;
                tx.update_token(&t)
            })
            .unwrap();
        }),
        ("a copy of a row added under a new id", |b, id| {
            let row = b.object(0, id).unwrap().unwrap();
            transact(b, |tx| {
                let new = tx.new_object(0)?;
                tx.put_object(
                    0,
                    &backend::ObjectRow {
                        id: new,
                        ..row.clone()
                    },
                )
                .map(drop)
            })
            .unwrap();
        }),
    ];
    for c in cases() {
        let s = &c.store;
        for (what, tamper) in table {
            s.init_token(0, SO, &[b' '; 32], Some(USER)).unwrap();
            s.login(0, PinOwner::User, USER).unwrap();
            let id = s
                .create(0, &[private_key(b"k", b"target"), public_data(b"p")], &[])
                .unwrap()[0];
            s.logout(0);
            tamper(&*s.backend, id);
            let r = rv(s.login(0, PinOwner::User, USER));
            // A removed summary reads as a store to upgrade: the upgrade refuses rows that
            // carry tags (they were written under a summary), and the count is short.
            assert_eq!(r, CKR_DEVICE_ERROR, "{}: {what}", c.name);
        }
    }
}

/// A public object written without a login has no tag: it is used, but grants no right
/// (`authenticated` false), and a process without the key changes no authenticated row.
#[test]
fn objects_written_without_a_login_are_unauthenticated() {
    for c in cases() {
        let s = &c.store;
        s.init_token(0, SO, &[b' '; 32], Some(USER)).unwrap();
        let loose = s.create(0, &[public_data(b"loose")], &[]).unwrap()[0];
        s.login(0, PinOwner::User, USER).unwrap();
        let tagged = s.create(0, &[public_data(b"tagged")], &[]).unwrap()[0];
        let read = |id| s.load(0, id).unwrap().unwrap();
        assert!(!read(loose).authenticated, "{}", c.name);
        assert!(read(tagged).authenticated, "{}", c.name);
        s.logout(0);
        // Without a login nothing is authenticated, and a tagged row cannot be changed.
        assert!(!read(tagged).authenticated, "{}", c.name);
        let v = read(tagged).version;
        assert_eq!(
            rv(s.update(0, tagged, v, &public_data(b"x"))),
            CKR_USER_NOT_LOGGED_IN,
            "{}",
            c.name
        );
        assert_eq!(rv(s.destroy(0, tagged, v)), CKR_USER_NOT_LOGGED_IN, "{}", c.name);
        // An untagged one can, as PKCS#11 lets a public session.
        let v = read(loose).version;
        s.update(0, loose, v, &public_data(b"loose")).unwrap();
        // A stale version is refused: the caller reads again.
        assert_eq!(
            rv(s.update(0, loose, v, &public_data(b"loose"))),
            crate::store::CKR_CHANGED_MEANWHILE,
            "{}",
            c.name
        );
    }
}

mod rotation;

/// A store written before records were authenticated (no tags, no summary) is upgraded at the
/// first login in one transaction: an upgrade that fails half-way (a row write refused, as a
/// full disk or a killed process) leaves every row as it was and the store usable, and the
/// next login upgrades it.
#[test]
fn an_upgrade_failing_half_way_leaves_the_store_as_it_was() {
    for c in cases() {
        let s = &c.store;
        s.init_token(0, SO, &[b' '; 32], Some(USER)).unwrap();
        s.login(0, PinOwner::User, USER).unwrap();
        let records: Vec<ObjectRecord> = (0..6u8).map(|i| private_key(&[i], b"old")).collect();
        s.create(0, &records, &[]).unwrap();
        s.create(0, &[public_data(b"old")], &[]).unwrap();
        s.logout(0);
        // The rows as the earlier format wrote them: no tags, no summary.
        transact(&*s.backend, |tx| {
            for mut row in tx.objects_after(0, 0, 100)? {
                row.tag = None;
                row.version = 0;
                tx.put_object(0, &row)?;
            }
            let mut t = tx.token(0)?.unwrap();
            t.summary = None;
            tx.update_token(&t)
        })
        .unwrap();
        let untagged = || s.backend.tags(0).unwrap();
        c.calls.puts_before_failure.store(3, SeqCst);
        assert_eq!(
            rv(s.login(0, PinOwner::User, USER)),
            CKR_DEVICE_ERROR,
            "{}",
            c.name
        );
        c.calls.puts_before_failure.store(0, SeqCst);
        let scan = untagged();
        assert!(
            scan.tags.is_empty() && scan.summary.is_none(),
            "{}: the failed upgrade left a trace",
            c.name
        );
        s.login(0, PinOwner::User, USER).unwrap();
        let all = s.find(0, &by_label(b"old"), true).unwrap();
        assert_eq!(all.len(), 7, "{}", c.name);
        assert!(all.iter().all(|o| o.authenticated), "{}", c.name);
        assert_eq!(untagged().tags.len(), 7, "{}", c.name);
    }
}
