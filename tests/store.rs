//! The durable store through the module: persistence, encryption at rest, two processes at
//! once, kill -9 during writes, corrupt files and bad configuration.

mod common;

use common::*;
use cryptoki::error::RvError;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass};
use cryptoki::session::UserType;
use cryptoki::types::AuthPin;
use rsa::pkcs1v15::Pkcs1v15Sign;
use rsa::sha2::{Digest, Sha256};
use rsa::traits::{PrivateKeyParts, PublicKeyParts};
use std::path::Path;
use std::process::Command;

fn import(
    s: &cryptoki::session::Session,
    k: &rsa::PrivateKey,
    id: &[u8],
    label: &[u8],
) -> cryptoki::object::ObjectHandle {
    s.create_object(&[
        Attribute::Class(ObjectClass::PRIVATE_KEY),
        Attribute::KeyType(KeyType::RSA),
        Attribute::Token(true),
        Attribute::Private(true),
        Attribute::Sign(true),
        Attribute::Id(id.to_vec()),
        Attribute::Label(label.to_vec()),
        Attribute::Modulus(be(k.n().as_ref())),
        Attribute::PublicExponent(be(k.e())),
        Attribute::PrivateExponent(be(k.d())),
        Attribute::Prime1(be(k.primes()[0].as_ref())),
        Attribute::Prime2(be(k.primes()[1].as_ref())),
    ])
    .unwrap()
}

/// Every file of the store, concatenated (database, WAL, shared memory).
fn store_bytes(dir: &Path) -> Vec<u8> {
    let mut all = vec![];
    for e in std::fs::read_dir(dir).unwrap() {
        all.extend(std::fs::read(e.unwrap().path()).unwrap());
    }
    all
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn nothing_secret_is_stored_in_clear() {
    let env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "at-rest");
    let s = user_session(&p, slot);
    let mut rng = rand_core::UnwrapErr(getrandom::SysRng);
    let k = rsa::PrivateKey::new(&mut rng, 1024).unwrap();
    import(&s, &k, b"private-id-7f3a", b"private-label-q8z2");
    // A secret key: its value is sealed (a token key cannot be made public: tests/policy.rs).
    s.create_object(&[
        Attribute::Class(ObjectClass::SECRET_KEY),
        Attribute::KeyType(KeyType::GENERIC_SECRET),
        Attribute::Token(true),
        Attribute::Value(b"generic-secret-value-0123456789".to_vec()),
    ])
    .unwrap();
    // A public object's label stays readable (it is no secret), proving the grep works.
    s.create_object(&[
        Attribute::Class(ObjectClass::DATA),
        Attribute::Token(true),
        Attribute::Private(false),
        Attribute::Label(b"public-label-k4m1".to_vec()),
    ])
    .unwrap();
    s.set_pin(
        &AuthPin::new(USER_PIN.into()),
        &AuthPin::new("user-pin-zz91".into()),
    )
    .unwrap();
    s.close().unwrap();
    p.finalize().unwrap();
    let bytes = store_bytes(&env.store_dir());
    assert!(
        contains(&bytes, b"public-label-k4m1"),
        "the grep finds clear text when it is there"
    );
    for (what, secret) in [
        ("prime 1", be(k.primes()[0].as_ref())),
        ("prime 2", be(k.primes()[1].as_ref())),
        ("private exponent", be(k.d())),
        ("CRT exponent", be(k.dp().unwrap())),
        ("private label", b"private-label-q8z2".to_vec()),
        ("private id", b"private-id-7f3a".to_vec()),
        ("secret value", b"generic-secret-value-0123456789".to_vec()),
        ("user PIN", b"user-pin-zz91".to_vec()),
        ("SO PIN", SO_PIN.as_bytes().to_vec()),
    ] {
        assert!(
            !contains(&bytes, &secret[..secret.len().min(24)]),
            "{what} found in clear in the store"
        );
    }
    // And it all comes back after a restart.
    let p = load();
    let s = p.open_rw_session(slot).unwrap();
    s.login(UserType::User, Some(&AuthPin::new("user-pin-zz91".into())))
        .unwrap();
    let h = find_one(&s, ObjectClass::PRIVATE_KEY, b"private-id-7f3a");
    let sig = s.sign(&Mechanism::Sha256RsaPkcs, h, b"after restart").unwrap();
    k.to_public_key()
        .verify(
            Pkcs1v15Sign::new::<Sha256>(),
            &Sha256::digest(b"after restart"),
            &sig,
        )
        .unwrap();
    let found = s
        .find_objects(&[Attribute::Label(b"private-label-q8z2".to_vec())])
        .unwrap();
    assert_eq!(found, vec![h]);
}

/// Starts the other process of the multi-process tests: a shell running OpenSC's pkcs11-tool
/// against the same store, so the second process is a real, independent PKCS#11 application.
fn spawn_worker(env: &TestEnv, command: &str) -> std::process::Child {
    let m = module_path();
    let tool = format!("pkcs11-tool --module {} --token-label", m.display());
    let hex = |s: &str| s.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    let script = match command.split_once(' ').unwrap_or((command, "")) {
        ("generate", id) => format!("{tool} shared --login --pin {USER_PIN} --keypairgen --key-type rsa:1024 --id {} --label 'test key'", hex(id)),
        ("destroy", id) => format!(
            "{tool} shared --login --pin {USER_PIN} --delete-object --type privkey --id {0} && \
             {tool} shared --login --pin {USER_PIN} --delete-object --type pubkey --id {0}",
            hex(id)
        ),
        ("churn", _) => format!(
            "for i in $(seq 10 25); do {tool} shared --login --pin {USER_PIN} --keypairgen --key-type rsa:1024 --id $i || exit 1; \
             {tool} shared --login --pin {USER_PIN} --delete-object --type privkey --id $i || exit 1; \
             {tool} shared --login --pin {USER_PIN} --delete-object --type pubkey --id $i || exit 1; done"
        ),
        ("write-forever", _) => format!(
            "i=0; pin=pin-even; next=pin-odd!; \
             {tool} crash --login --pin $pin -O >/dev/null 2>&1 || {{ pin=pin-odd!; next=pin-even; }}; \
             while true; do i=$((i+1)); \
               {tool} crash --login --pin $pin --keypairgen --key-type rsa:1024 --id $(printf %04x%08x $i $$) >/dev/null 2>&1 || exit 1; \
               {tool} crash --login --pin $pin --change-pin --new-pin $next >/dev/null 2>&1 || exit 1; \
               t=$pin; pin=$next; next=$t; \
             done"
        ),
        (other, _) => panic!("unknown worker command {other}"),
    };
    use std::os::unix::process::CommandExt;
    Command::new("bash")
        .args(["-c", &script])
        // Its own process group, so a kill reaches the pkcs11-tool in the middle of its work.
        .process_group(0)
        .env("FERROHSM_CONF", env.conf())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn two_processes_see_each_others_changes() {
    let env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "shared");
    let s = user_session(&p, slot);
    let (pub1, priv1) = rsa_keypair(&s, 1024, b"k1", true);
    let pk1 = rsa_public(&s, pub1);
    let sig = s.sign(&Mechanism::Sha256RsaPkcs, priv1, b"cached").unwrap();
    pk1.verify(Pkcs1v15Sign::new::<Sha256>(), &Sha256::digest(b"cached"), &sig)
        .unwrap();
    // Another process adds a key: found here without a restart.
    assert!(spawn_worker(&env, "generate k2").wait().unwrap().success());
    let priv2 = find_one(&s, ObjectClass::PRIVATE_KEY, b"k2");
    let pk2 = rsa_public(&s, find_one(&s, ObjectClass::PUBLIC_KEY, b"k2"));
    let sig = s.sign(&Mechanism::Sha256RsaPkcs, priv2, b"new key").unwrap();
    pk2.verify(Pkcs1v15Sign::new::<Sha256>(), &Sha256::digest(b"new key"), &sig)
        .unwrap();
    // Another process destroys the key this one has prepared and cached: it is gone here too.
    assert!(spawn_worker(&env, "destroy k1").wait().unwrap().success());
    assert!(s
        .find_objects(&[Attribute::Id(b"k1".to_vec())])
        .unwrap()
        .is_empty());
    assert_eq!(
        rv(s.sign(&Mechanism::Sha256RsaPkcs, priv1, b"stale").unwrap_err()),
        RvError::KeyHandleInvalid
    );
    // Both at once: the other process generates and destroys while this one signs and searches.
    let mut child = spawn_worker(&env, "churn");
    let mut rounds = 0;
    while child.try_wait().unwrap().is_none() || rounds < 20 {
        let sig = s.sign(&Mechanism::Sha256RsaPkcs, priv2, b"busy").unwrap();
        pk2.verify(Pkcs1v15Sign::new::<Sha256>(), &Sha256::digest(b"busy"), &sig)
            .unwrap();
        assert_eq!(s.find_objects(&[Attribute::Id(b"k2".to_vec())]).unwrap().len(), 2);
        rounds += 1;
    }
    assert!(child.wait().unwrap().success());
    assert_eq!(
        s.find_objects(&[Attribute::Class(ObjectClass::PRIVATE_KEY)])
            .unwrap()
            .len(),
        1
    );
}

/// The number of objects committed to the SQLite store `db`, read beside its writers.
fn committed_objects(db: &Path) -> i64 {
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    c.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    c.query_row("SELECT count(*) FROM objects", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn killed_writers_leave_a_readable_token() {
    let env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "crash");
    let s = p.open_rw_session(slot).unwrap();
    s.set_pin(&AuthPin::new(USER_PIN.into()), &AuthPin::new("pin-even".into()))
        .unwrap();
    s.close().unwrap();
    p.finalize().unwrap();
    let mut rng_state = 0x2545f4914f6cdd1du64;
    let mut keys = 0;
    let db = env.store_dir().join("ferrohsm.db");
    for round in 0..8 {
        let before = committed_objects(&db);
        let mut child = spawn_worker(&env, "write-forever");
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        // Killed at a random point of its writing, once it has written a key pair, however
        // long the machine takes to start it (a fixed delay could kill it before it wrote).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while committed_objects(&db) <= before {
            assert!(
                std::time::Instant::now() < deadline && child.try_wait().unwrap().is_none(),
                "round {round}: the writer wrote no key pair"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::thread::sleep(std::time::Duration::from_millis(rng_state % 400));
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
        child.wait().unwrap();
        // The token opens; one of the two PINs works; every object reads and every key signs.
        let p = load();
        let s = p.open_rw_session(slot).unwrap();
        let logged = ["pin-even", "pin-odd!"].iter().any(|pin| {
            s.login(UserType::User, Some(&AuthPin::new((*pin).into())))
                .is_ok()
        });
        let info = p.get_token_info(slot).unwrap();
        assert!(
            logged,
            "round {round}: neither the old nor the new PIN works (locked: {})",
            info.user_pin_locked()
        );
        let all = s.find_objects(&[]).unwrap();
        for h in &all {
            s.get_attributes(*h, &[AttributeType::Class, AttributeType::Label])
                .unwrap();
        }
        for h in s
            .find_objects(&[Attribute::Class(ObjectClass::PRIVATE_KEY)])
            .unwrap()
        {
            let Attribute::Id(id) = s.get_attributes(h, &[AttributeType::Id]).unwrap()[0].clone() else {
                panic!()
            };
            let pk = rsa_public(&s, find_one(&s, ObjectClass::PUBLIC_KEY, &id));
            let sig = s.sign(&Mechanism::Sha256RsaPkcs, h, b"after crash").unwrap();
            pk.verify(
                Pkcs1v15Sign::new::<Sha256>(),
                &Sha256::digest(b"after crash"),
                &sig,
            )
            .unwrap();
        }
        keys = s
            .find_objects(&[Attribute::Class(ObjectClass::PRIVATE_KEY)])
            .unwrap()
            .len();
        let public = s
            .find_objects(&[Attribute::Class(ObjectClass::PUBLIC_KEY)])
            .unwrap()
            .len();
        assert_eq!(keys, public, "round {round}: a key pair was half written");
        s.close().unwrap();
        p.finalize().unwrap();
    }
    eprintln!("{keys} keys written by killed writers");
    assert!(
        keys >= 3,
        "the killed writer made only {keys} keys: the test did not exercise writes"
    );
}

#[test]
fn a_tampered_record_fails_alone() {
    let env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "tamper");
    let s = user_session(&p, slot);
    let (_pa, a) = rsa_keypair(&s, 1024, b"a", true);
    let (_pb, b) = rsa_keypair(&s, 1024, b"b", true);
    s.close().unwrap();
    p.finalize().unwrap();
    {
        let db = rusqlite::Connection::open(env.store_dir().join("ferrohsm.db")).unwrap();
        // Move b's sealed attributes onto a: authenticated encryption binds them to b.
        let sealed_b: Vec<u8> = db
            .query_row(
                "SELECT sealed FROM objects WHERE id = ?1",
                [b.handle() as i64],
                |r| r.get(0),
            )
            .unwrap();
        db.execute(
            "UPDATE objects SET sealed = ?2 WHERE id = ?1",
            rusqlite::params![a.handle() as i64, sealed_b],
        )
        .unwrap();
    }
    let p = load();
    let s = user_session(&p, slot);
    // a is reported, b still works, and the search goes on.
    assert!(s.sign(&Mechanism::Sha256RsaPkcs, a, b"x").is_err());
    s.sign(&Mechanism::Sha256RsaPkcs, b, b"x").unwrap();
    assert_eq!(s.find_objects(&[Attribute::Id(b"b".to_vec())]).unwrap().len(), 2);
}

#[test]
fn corrupt_database_and_bad_configuration_fail_initialize_cleanly() {
    let env = TestEnv::new();
    let r = Raw::load();
    let init = || unsafe { (r.f.C_Initialize.unwrap())(std::ptr::null_mut()) };
    let fin = || unsafe { (r.f.C_Finalize.unwrap())(std::ptr::null_mut()) };
    // A damaged database file.
    std::fs::create_dir_all(env.store_dir()).unwrap();
    std::fs::write(env.store_dir().join("ferrohsm.db"), vec![0x5a; 8192]).unwrap();
    assert_eq!(init(), cryptoki_sys::CKR_GENERAL_ERROR);
    // A configuration file with a syntax error.
    std::fs::write(env.conf(), "[store]\npath = \"store\"\n[pin\nmax_failures = 3\n").unwrap();
    assert_eq!(init(), cryptoki_sys::CKR_GENERAL_ERROR);
    // An unknown key.
    std::fs::write(env.conf(), "[store]\npaht = \"x\"\n").unwrap();
    assert_eq!(init(), cryptoki_sys::CKR_GENERAL_ERROR);
    // A store path that is a file.
    std::fs::write(env.dir.path().join("file"), b"x").unwrap();
    std::fs::write(env.conf(), "[store]\npath = \"file\"\n").unwrap();
    assert_eq!(init(), cryptoki_sys::CKR_GENERAL_ERROR);
    // A missing configuration file named by FERROHSM_CONF.
    std::env::set_var("FERROHSM_CONF", env.dir.path().join("nope.toml"));
    assert_eq!(init(), cryptoki_sys::CKR_GENERAL_ERROR);
    // Fixed: it works.
    std::fs::write(
        env.conf(),
        "[store]\npath = \"good\"\n[pin]\nkdf_memory_kib = 64\nkdf_passes = 1\n",
    )
    .unwrap();
    std::env::set_var("FERROHSM_CONF", env.conf());
    assert_eq!(init(), cryptoki_sys::CKR_OK);
    assert_eq!(fin(), cryptoki_sys::CKR_OK);
}

#[test]
fn config_errors_name_file_and_line() {
    let env = TestEnv::new();
    std::fs::write(
        env.conf(),
        "[store]\npath = \"store\"\n\n[pin]\nmax_failures = \"ten\"\n",
    )
    .unwrap();
    let err = ferrohsm::config::Config::load().unwrap_err().to_string();
    assert!(err.contains(env.conf().to_str().unwrap()), "{err}");
    assert!(err.contains("line 5"), "{err}");
}

#[test]
fn log_lines_go_to_the_configured_file_without_secrets() {
    let env = TestEnv::new();
    let log = env.dir.path().join("ferrohsm.log");
    std::fs::write(
        env.conf(),
        format!(
            "[store]\npath = \"store\"\n[pin]\nkdf_memory_kib = 64\nkdf_passes = 1\n[log]\nlevel = \"info\"\ntarget = \"{}\"\n",
            log.display()
        ),
    )
    .unwrap();
    std::env::remove_var("FERROHSM_LOG");
    let p = load();
    let slot = new_token(&p, "logged");
    let s = p.open_rw_session(slot).unwrap();
    let err = s
        .login(UserType::User, Some(&AuthPin::new("wrong-pin-5s7d".into())))
        .unwrap_err();
    assert_eq!(rv(err), RvError::PinIncorrect);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("CKR_PIN_INCORRECT"), "{text}");
    assert!(
        !text.contains("wrong-pin-5s7d") && !text.contains(USER_PIN),
        "a PIN reached the log: {text}"
    );
}

/// With `store.cache_mib = 1` (room for about 45 prepared RSA-2048 keys), 120 keys used in
/// turn, twice, are each read again and prepared again after their eviction, and sign with
/// the right key every time; a key destroyed after its eviction is gone.
#[test]
fn a_small_object_cache_still_serves_every_key() {
    let env = TestEnv::new();
    let text = std::fs::read_to_string(env.conf()).unwrap();
    std::fs::write(
        env.conf(),
        text.replacen("[store]\n", "[store]\ncache_mib = 1\n", 1),
    )
    .unwrap();
    let mut rng = rand_core::UnwrapErr(getrandom::SysRng);
    let keys: Vec<rsa::PrivateKey> = (0..3)
        .map(|_| rsa::PrivateKey::new(&mut rng, 2048).unwrap())
        .collect();
    let p = load();
    let slot = new_token(&p, "small-cache");
    let s = user_session(&p, slot);
    let handles: Vec<_> = (0..120u32)
        .map(|i| import(&s, &keys[i as usize % 3], &i.to_be_bytes(), b"cached"))
        .collect();
    let digest = Sha256::digest(b"evicted and back");
    for round in 0..2 {
        for (i, key) in handles.iter().enumerate() {
            let found = find_one(&s, ObjectClass::PRIVATE_KEY, &(i as u32).to_be_bytes());
            assert_eq!(found, *key, "round {round}, key {i}");
            let sig = s
                .sign(&Mechanism::Sha256RsaPkcs, found, b"evicted and back")
                .unwrap();
            keys[i % 3]
                .to_public_key()
                .verify(Pkcs1v15Sign::new::<Sha256>(), &digest, &sig)
                .unwrap_or_else(|e| panic!("round {round}, key {i}: {e}"));
        }
    }
    // Key 0 was used first and has long left the cache.
    s.destroy_object(handles[0]).unwrap();
    let err = rv(s
        .sign(&Mechanism::Sha256RsaPkcs, handles[0], b"gone")
        .unwrap_err());
    assert!(
        matches!(err, RvError::KeyHandleInvalid | RvError::ObjectHandleInvalid),
        "{err:?}"
    );
}

/// Review of 2026-12-07: a PIN change wrote the new wrap of the token key and left the old one
/// in the store's files (the database page it replaced, the write-ahead log), where the old
/// PIN still opened it, and with it every key, those made later too. Each change, the user's
/// and the SO's, and the SO's reset of the user PIN: afterwards no file of the store holds the
/// old wrap, and the new one is there (so the scan can see a wrap).
#[test]
fn a_changed_pin_leaves_no_old_wrap_in_the_store() {
    let env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "rewrap");
    let db = env.store_dir().join("ferrohsm.db");
    let wraps = || -> (Vec<u8>, Vec<u8>) {
        let c =
            rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        c.query_row(
            "SELECT so_wrap, user_wrap FROM tokens WHERE user_wrap IS NOT NULL",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    };
    let pin = |s: &str| AuthPin::new(s.into());
    // (change, whose wrap it replaces: true for the SO's)
    let changes: [(&str, bool); 3] = [
        ("user C_SetPIN", false),
        ("SO C_InitPIN", false),
        ("SO C_SetPIN", true),
    ];
    let mut user_pin = USER_PIN.to_string();
    let mut so_pin = SO_PIN.to_string();
    for (change, so_wrap) in changes {
        let (old_so, old_user) = wraps();
        let s = p.open_rw_session(slot).unwrap();
        match change {
            "user C_SetPIN" => {
                s.login(UserType::User, Some(&pin(&user_pin))).unwrap();
                s.set_pin(&pin(&user_pin), &pin("4321")).unwrap();
                user_pin = "4321".into();
            }
            "SO C_InitPIN" => {
                s.login(UserType::So, Some(&pin(&so_pin))).unwrap();
                s.init_pin(&pin("5678")).unwrap();
                user_pin = "5678".into();
            }
            _ => {
                s.login(UserType::So, Some(&pin(&so_pin))).unwrap();
                s.set_pin(&pin(&so_pin), &pin("87654321")).unwrap();
                so_pin = "87654321".into();
            }
        }
        s.logout().unwrap();
        s.close().unwrap();
        let (new_so, new_user) = wraps();
        let (old, new) = if so_wrap {
            (old_so, new_so)
        } else {
            (old_user, new_user)
        };
        assert_ne!(old, new, "{change}");
        let files = store_bytes(&env.store_dir());
        assert!(
            contains(&files, &new),
            "{change}: the new wrap is not in the files"
        );
        assert!(
            !contains(&files, &old),
            "{change}: the old wrap is still in the store's files"
        );
    }
    // The new PINs open the token.
    let s = p.open_rw_session(slot).unwrap();
    s.login(UserType::User, Some(&pin(&user_pin))).unwrap();
    s.logout().unwrap();
    s.login(UserType::So, Some(&pin(&so_pin))).unwrap();
}

/// Issue 50, item 5: a PIN change replaces the token key and seals every object again. The
/// old user wrap written back into the file (a backup's copy), with the old PIN, opens only
/// the old key: the login is refused and no object opens; the new PIN still reads them.
#[test]
fn an_old_wrap_put_back_after_a_pin_change_opens_nothing() {
    let env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "rotated");
    let db = env.store_dir().join("ferrohsm.db");
    let user_wrap = |set: Option<&[u8]>| -> Vec<u8> {
        let c = rusqlite::Connection::open(&db).unwrap();
        if let Some(w) = set {
            c.execute(
                "UPDATE tokens SET user_wrap = ?1 WHERE user_wrap IS NOT NULL",
                [w],
            )
            .unwrap();
        }
        c.query_row(
            "SELECT user_wrap FROM tokens WHERE user_wrap IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    let s = user_session(&p, slot);
    s.create_object(&[
        Attribute::Class(ObjectClass::DATA),
        Attribute::Token(true),
        Attribute::Private(true),
        Attribute::Label(b"secret-data".to_vec()),
        Attribute::Value(b"the value".to_vec()),
    ])
    .unwrap();
    let old = user_wrap(None);
    s.set_pin(&AuthPin::new(USER_PIN.into()), &AuthPin::new("4321".into()))
        .unwrap();
    s.logout().unwrap();
    s.close().unwrap();
    let new = user_wrap(Some(&old));
    let s = p.open_rw_session(slot).unwrap();
    let login = s.login(UserType::User, Some(&AuthPin::new(USER_PIN.into())));
    assert!(
        login.is_err(),
        "the old PIN with the old wrap logged in: {login:?}"
    );
    let find = |s: &cryptoki::session::Session| {
        s.find_objects(&[Attribute::Label(b"secret-data".to_vec())])
            .unwrap()
            .len()
    };
    assert_eq!(find(&s), 0);
    user_wrap(Some(&new));
    s.login(UserType::User, Some(&AuthPin::new("4321".into())))
        .unwrap();
    assert_eq!(find(&s), 1);
}
