//! The store when the file system fails it: full, read-only, deleted or replaced while the
//! module is loaded, and files that are not a ferrohsm store. A PIN is never evaluated when
//! its attempt cannot be recorded, a write that went nowhere never returns CKR_OK, a new
//! empty store never takes the place of a lost one, and existing keys survive.
//!
//! These tests need root (tests here run as root): they mount a small tmpfs for the full
//! disk and set the immutable attribute (`chattr +i`) for the read-only store, since root
//! ignores file permissions.

mod common;

use common::*;
use cryptoki::error::RvError;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, ObjectClass};
use cryptoki::session::UserType;
use cryptoki::types::AuthPin;
use rsa::pkcs1v15::Pkcs1v15Sign;
use rsa::sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;

const MAX_FAILURES: u32 = 3;

fn pin(s: &str) -> AuthPin {
    AuthPin::new(s.into())
}

/// A configuration with its store at `store` and the log in a file beside the configuration.
fn configure(env: &TestEnv, store: &Path) -> PathBuf {
    let log = env.dir.path().join("ferrohsm.log");
    std::fs::write(
        env.conf(),
        format!(
            "[store]\npath = \"{}\"\n[pin]\nmax_failures = {MAX_FAILURES}\nkdf_memory_kib = 64\nkdf_passes = 1\n\
             [log]\nlevel = \"info\"\ntarget = \"{}\"\n",
            store.display(),
            log.display()
        ),
    )
    .unwrap();
    std::env::remove_var("FERROHSM_LOG");
    log
}

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A tmpfs of `size` mounted at `dir` for the life of the value.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "tmpfs",
                dir.to_str().unwrap(),
            ],
        );
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Sets the immutable attribute on the store directory and every file in it; cleared again
/// when dropped, so the temporary directory can be removed even after a failed assertion.
struct Immutable(Vec<PathBuf>);

impl Immutable {
    /// Every file of the store but SQLite's shared-memory index (`-shm`), and the directory.
    /// The index is memory the processes share, mapped from that file: once the kernel has
    /// written a page of it back, the next write into the page asks the file system, which
    /// refuses an immutable file with SIGBUS. That ended this test's process at random
    /// (how many pages were written back decides it) once the audit trail's writes came in.
    /// A store made read-only under a running process this way is refused through its
    /// database and log files alone.
    fn set(dir: &Path) -> Immutable {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| !p.to_string_lossy().ends_with("-shm"))
            .collect();
        paths.push(dir.to_path_buf());
        for p in &paths {
            run("chattr", &["+i", p.to_str().unwrap()]);
        }
        Immutable(paths)
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = Command::new("chattr").arg("-i").arg(p).status();
        }
    }
}

/// A token with one RSA key pair (id "k"); returns the slot and the public key as the `rsa`
/// crate sees it.
fn token_with_key(p: &cryptoki::context::Pkcs11) -> (cryptoki::slot::Slot, rsa::PublicKey) {
    let slot = new_token(p, "faults");
    let s = user_session(p, slot);
    let (public, _) = rsa_keypair(&s, 1024, b"k", true);
    let pk = rsa_public(&s, public);
    s.logout().unwrap();
    s.close().unwrap();
    (slot, pk)
}

/// The key still signs, and the signature verifies with an independent implementation.
fn key_still_signs(p: &cryptoki::context::Pkcs11, slot: cryptoki::slot::Slot, pk: &rsa::PublicKey) {
    let s = user_session(p, slot);
    let h = find_one(&s, ObjectClass::PRIVATE_KEY, b"k");
    let sig = s.sign(&Mechanism::Sha256RsaPkcs, h, b"still here").unwrap();
    pk.verify(
        Pkcs1v15Sign::new::<Sha256>(),
        &Sha256::digest(b"still here"),
        &sig,
    )
    .unwrap();
    s.logout().unwrap();
}

/// Wrong and right PINs alike are refused without evaluation while the store cannot record
/// the attempt: neither answer is CKR_PIN_INCORRECT or CKR_OK, however often one asks.
fn no_pin_is_evaluated(p: &cryptoki::context::Pkcs11, slot: cryptoki::slot::Slot, expected: RvError) {
    let s = p.open_rw_session(slot).unwrap();
    for i in 0..3 * MAX_FAILURES {
        let r = s.login(UserType::User, Some(&pin(&format!("wrong-{i}"))));
        assert_eq!(rv(r.unwrap_err()), expected, "wrong PIN, attempt {i}");
    }
    let r = s.login(UserType::User, Some(&pin(USER_PIN)));
    assert_eq!(
        rv(r.expect_err("the right PIN logged in while its attempt could not be recorded")),
        expected
    );
    let r = s.login(UserType::So, Some(&pin(SO_PIN)));
    assert_eq!(rv(r.expect_err("the SO PIN was evaluated")), expected);
    s.close().unwrap();
}

fn generate_fails(p: &cryptoki::context::Pkcs11, slot: cryptoki::slot::Slot, expected: RvError) {
    // A public token object needs no login: the write itself must fail.
    let s = p.open_rw_session(slot).unwrap();
    let r = s.create_object(&[
        Attribute::Class(ObjectClass::DATA),
        Attribute::Token(true),
        Attribute::Label(b"went nowhere".to_vec()),
    ]);
    assert_eq!(
        rv(r.expect_err("a write that went nowhere returned CKR_OK")),
        expected
    );
    s.close().unwrap();
}

#[test]
fn full_disk_refuses_pins_without_evaluating_them() {
    let env = TestEnv::new();
    let store = env.dir.path().join("small");
    let _fs = Tmpfs::mount(&store, "4m");
    let log = configure(&env, &store);
    let p = load();
    let (slot, pk) = token_with_key(&p);
    // Fill the file system to the last byte.
    {
        use std::io::Write;
        let mut f = std::fs::File::create(store.join("filler")).unwrap();
        let chunk = vec![0x55u8; 4096];
        while f.write_all(&chunk).is_ok() {}
        while f.write_all(&[0x55]).is_ok() {}
    }
    no_pin_is_evaluated(&p, slot, RvError::DeviceMemory);
    generate_fails(&p, slot, RvError::DeviceMemory);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(&store.join("ferrohsm.db").display().to_string())
            && text.contains("free disk space")
            && text.contains("so the PIN was not checked"),
        "no log line naming the store and what to do: {text}"
    );
    // Space again: nothing was counted, nothing lost.
    std::fs::remove_file(store.join("filler")).unwrap();
    let s = p.open_rw_session(slot).unwrap();
    for _ in 0..MAX_FAILURES - 1 {
        assert_eq!(
            rv(s.login(UserType::User, Some(&pin("wrong"))).unwrap_err()),
            RvError::PinIncorrect
        );
    }
    s.close().unwrap();
    key_still_signs(&p, slot, &pk);
    p.finalize().unwrap();
    let p = load();
    key_still_signs(&p, slot, &pk);
}

#[test]
fn read_only_store_refuses_pins_without_evaluating_them() {
    let env = TestEnv::new();
    let store = env.dir.path().join("ro");
    let log = configure(&env, &store);
    let p = load();
    let (slot, pk) = token_with_key(&p);
    // Read-only while loaded: the open files cannot be written either.
    {
        let _ro = Immutable::set(&store);
        no_pin_is_evaluated(&p, slot, RvError::DeviceError);
        generate_fails(&p, slot, RvError::DeviceError);
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(&store.join("ferrohsm.db").display().to_string())
            && text.contains("writable")
            && text.contains("so the PIN was not checked"),
        "no log line naming the store and what to do: {text}"
    );
    key_still_signs(&p, slot, &pk);
    p.finalize().unwrap();
    // Read-only before C_Initialize: a module that starts still evaluates no PIN.
    {
        let _ro = Immutable::set(&store);
        let p = cryptoki::context::Pkcs11::new(module_path()).unwrap();
        let started = p.initialize(cryptoki::context::CInitializeArgs::new(
            cryptoki::context::CInitializeFlags::OS_LOCKING_OK,
        ));
        match started {
            Ok(()) => {
                eprintln!("the module started on the read-only store");
                no_pin_is_evaluated(&p, slot, RvError::DeviceError);
                generate_fails(&p, slot, RvError::DeviceError);
                p.finalize().unwrap();
            }
            Err(e) => {
                eprintln!("the module refused to start on the read-only store");
                assert_eq!(rv(e), RvError::GeneralError)
            }
        }
    }
    let p = load();
    key_still_signs(&p, slot, &pk);
    // Nothing was counted while read-only.
    let s = p.open_rw_session(slot).unwrap();
    for _ in 0..MAX_FAILURES - 1 {
        assert_eq!(
            rv(s.login(UserType::User, Some(&pin("wrong"))).unwrap_err()),
            RvError::PinIncorrect
        );
    }
    s.login(UserType::User, Some(&pin(USER_PIN))).unwrap();
}

/// Moves everything in the WAL into the database file, so the file alone is the whole store.
fn checkpoint(store: &Path) {
    let c = rusqlite::Connection::open(store.join("ferrohsm.db")).unwrap();
    c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn ferrohsm_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ferrohsm.db"))
        .collect();
    names.sort();
    names
}

#[test]
fn deleted_store_is_reported_not_replaced() {
    let env = TestEnv::new();
    let store = env.dir.path().join("vanishing");
    let log = configure(&env, &store);
    let p = load();
    let (slot, pk) = token_with_key(&p);
    let backup = env.dir.path().join("backup");
    checkpoint(&store);
    copy_dir(&store, &backup);
    // An application logged in and about to generate a key when the store is deleted.
    let s = user_session(&p, slot);
    for name in ferrohsm_files(&store) {
        std::fs::remove_file(store.join(name)).unwrap();
    }
    let r = s.generate_key_pair(
        &Mechanism::RsaPkcsKeyPairGen,
        &[
            Attribute::Token(true),
            Attribute::ModulusBits(1024.into()),
            Attribute::PublicExponent(vec![1, 0, 1]),
            Attribute::Verify(true),
        ],
        &[
            Attribute::Token(true),
            Attribute::Private(true),
            Attribute::Sign(true),
        ],
    );
    assert_eq!(
        rv(r.expect_err("key generation into a deleted store returned CKR_OK")),
        RvError::DeviceError
    );
    s.logout().unwrap();
    assert_eq!(
        rv(s.login(UserType::User, Some(&pin(USER_PIN))).unwrap_err()),
        RvError::DeviceError
    );
    generate_fails(&p, slot, RvError::DeviceError);
    assert_eq!(
        rv(s.login(UserType::User, Some(&pin("wrong"))).unwrap_err()),
        RvError::DeviceError
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("was removed or replaced while in use; restore it and restart the application"),
        "{text}"
    );
    drop(s);
    p.finalize().unwrap();
    // The next start in this process fails and creates nothing.
    let r = Raw::load();
    // SAFETY: C_Initialize with NULL arguments is always valid.
    assert_eq!(
        unsafe { (r.f.C_Initialize.unwrap())(std::ptr::null_mut()) },
        cryptoki_sys::CKR_GENERAL_ERROR
    );
    assert_eq!(ferrohsm_files(&store), Vec::<String>::new());
    // Nor does another process: the marker file says a store lived here.
    let out = Command::new(env!("CARGO_BIN_EXE_ferrohsm-util"))
        .args(["--module", module_path().to_str().unwrap(), "show-slots"])
        .env("FERROHSM_CONF", env.conf())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(ferrohsm_files(&store), Vec::<String>::new());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("restore ferrohsm.db from a backup"), "{text}");
    // Restored: every key is back.
    copy_dir(&backup, &store);
    let p = load();
    key_still_signs(&p, slot, &pk);
}

#[test]
fn replaced_store_is_detected_before_writes_and_logins() {
    let env = TestEnv::new();
    let store = env.dir.path().join("replaced");
    configure(&env, &store);
    let p = load();
    let (slot, pk) = token_with_key(&p);
    // Another file takes the name (a restore from backup under the running application).
    let db = store.join("ferrohsm.db");
    checkpoint(&store);
    std::fs::copy(&db, store.join("copy")).unwrap();
    std::fs::rename(store.join("copy"), &db).unwrap();
    generate_fails(&p, slot, RvError::DeviceError);
    no_pin_is_evaluated(&p, slot, RvError::DeviceError);
    p.finalize().unwrap();
    // After a restart the replacement is the store.
    let p = load();
    key_still_signs(&p, slot, &pk);
}

/// The store file cut short in place while the module has it open (another process, a disk
/// full mid-copy): reads and writes answer errors, the process lives (a memory-mapped read
/// past the new end was SIGBUS, which ends it), and a new session and login are refused
/// rather than answered from what was cached.
#[test]
fn a_store_file_cut_short_under_the_module_is_an_error_not_a_crash() {
    let env = TestEnv::new();
    let store = env.dir.path().join("cut");
    configure(&env, &store);
    let p = load();
    let (slot, _) = token_with_key(&p);
    // Enough objects that the file has many pages, then the file cut to its first page.
    let s = user_session(&p, slot);
    for i in 0..64u32 {
        s.create_object(&[
            Attribute::Class(ObjectClass::DATA),
            Attribute::Token(true),
            Attribute::Label(format!("filler {i}").into_bytes()),
            Attribute::Value(vec![i as u8; 2048]),
        ])
        .unwrap();
    }
    s.logout().unwrap();
    s.close().unwrap();
    checkpoint(&store);
    let db = std::fs::OpenOptions::new()
        .write(true)
        .open(store.join("ferrohsm.db"))
        .unwrap();
    db.set_len(4096).unwrap();
    drop(db);
    generate_fails(&p, slot, RvError::DeviceError);
    // Whatever reads answer (pages may be cached), every one answers.
    let s = p.open_rw_session(slot).unwrap();
    let _ = s.login(UserType::User, Some(&pin(USER_PIN)));
    let _ = s.find_objects(&[Attribute::Class(ObjectClass::DATA)]);
    let _ = p.get_token_info(slot);
    drop(s);
    p.finalize().unwrap();
}

/// C_Initialize on a store file that is not a ferrohsm database: CKR_GENERAL_ERROR, a log line
/// naming the file, and the file exactly as it was.
fn refused_at_initialize(contents: &[u8], expected_in_log: &str) {
    let env = TestEnv::new();
    let store = env.dir.path().join("bogus");
    let log = configure(&env, &store);
    std::fs::create_dir_all(&store).unwrap();
    let db = store.join("ferrohsm.db");
    std::fs::write(&db, contents).unwrap();
    let before = std::fs::metadata(&db).unwrap();
    let r = Raw::load();
    // SAFETY: C_Initialize with NULL arguments is always valid.
    assert_eq!(
        unsafe { (r.f.C_Initialize.unwrap())(std::ptr::null_mut()) },
        cryptoki_sys::CKR_GENERAL_ERROR
    );
    assert_eq!(
        std::fs::read(&db).unwrap(),
        contents,
        "the store file was changed"
    );
    let after = std::fs::metadata(&db).unwrap();
    assert_eq!(
        (before.modified().unwrap(), before.len()),
        (after.modified().unwrap(), after.len())
    );
    assert_eq!(ferrohsm_files(&store), vec!["ferrohsm.db".to_string()]);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(&db.display().to_string()) && text.contains(expected_in_log),
        "{text}"
    );
}

#[test]
fn empty_store_file_fails_initialize_and_is_left_alone() {
    refused_at_initialize(b"", "is empty (0 bytes)");
}

#[test]
fn garbage_store_file_fails_initialize_and_is_left_alone() {
    let garbage: Vec<u8> = (0..8192u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    refused_at_initialize(&garbage, "not an SQLite database");
}

#[test]
fn foreign_sqlite_database_fails_initialize_and_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.db");
    {
        let c = rusqlite::Connection::open(&other).unwrap();
        c.execute_batch("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO photos (name) VALUES ('cat');")
            .unwrap();
    }
    refused_at_initialize(&std::fs::read(&other).unwrap(), "without ferrohsm's tables");
}

#[test]
fn a_new_store_is_made_beside_other_files_but_never_over_a_lost_one() {
    let env = TestEnv::new();
    let store = env.dir.path().join("fresh");
    // The directory exists and holds the log file: still a new store.
    std::fs::create_dir_all(&store).unwrap();
    let log = store.join("ferrohsm.log");
    std::fs::write(
        env.conf(),
        format!(
            "[store]\npath = \"fresh\"\n[pin]\nkdf_memory_kib = 64\nkdf_passes = 1\n[log]\nlevel = \"info\"\ntarget = \"{}\"\n",
            log.display()
        ),
    )
    .unwrap();
    let p = load();
    new_token(&p, "fresh");
    p.finalize().unwrap();
    assert!(store.join(".ferrohsm-store").exists());
    // A WAL file left without its database: refused, nothing created.
    std::fs::remove_file(store.join("ferrohsm.db")).unwrap();
    std::fs::remove_file(store.join(".ferrohsm-store")).unwrap();
    std::fs::write(store.join("ferrohsm.db-wal"), b"left over").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ferrohsm-util"))
        .args(["--module", module_path().to_str().unwrap(), "show-slots"])
        .env("FERROHSM_CONF", env.conf())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(!store.join("ferrohsm.db").exists());
}

#[test]
fn unreadable_store_path_fails_initialize() {
    // Root reads files whatever their mode, so "unreadable" here is a directory in its place.
    let env = TestEnv::new();
    let store = env.dir.path().join("odd");
    let log = configure(&env, &store);
    std::fs::create_dir_all(store.join("ferrohsm.db")).unwrap();
    let r = Raw::load();
    // SAFETY: C_Initialize with NULL arguments is always valid.
    assert_eq!(
        unsafe { (r.f.C_Initialize.unwrap())(std::ptr::null_mut()) },
        cryptoki_sys::CKR_GENERAL_ERROR
    );
    assert!(store.join("ferrohsm.db").is_dir());
    assert_eq!(std::fs::read_dir(store.join("ferrohsm.db")).unwrap().count(), 0);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("is not a regular file"), "{text}");
}
