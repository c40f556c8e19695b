//! Usage limits (issue 52, item 5): `FERROHSM_CKA_USAGE_LIMIT` and `FERROHSM_CKA_USAGE_COUNT`
//! of `include/ferrohsm.h`, through the built module as applications use it. The rule on
//! every path that makes or changes a key, as a table; the count read back; the refusal at
//! exactly the limit on the sign, MAC and decrypt paths; the count surviving a reopen of the
//! store and `ferrohsm-util copy-store`; and the limit holding exactly while 16 threads in each of 2 processes race for the
//! last uses, on one SQLite store and on one PostgreSQL store shared by two hosts, every
//! signature verified with the `rsa` crate. Expected codes are written here from the rules in
//! docs/security.md ("Usage limits"), not read from the module.

mod common;

use common::pg::Pg;
use common::race::start_together;
use common::*;
use cryptoki::error::RvError;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::Session;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A vendor attribute of `include/ferrohsm.h`, read from the header itself: the values the
/// documentation gives are the values the module answers to.
fn header_attribute(name: &str) -> u64 {
    let h =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include/ferrohsm.h")).unwrap();
    let line = h
        .lines()
        .find(|l| l.starts_with(&format!("#define {name} ")))
        .unwrap_or_else(|| panic!("{name} is not in include/ferrohsm.h"));
    line.split(|c: char| !c.is_ascii_alphanumeric())
        .filter_map(|w| w.strip_prefix("0x"))
        .map(|w| u64::from_str_radix(w.trim_end_matches("UL"), 16).unwrap())
        .fold(0, |a, v| a | v)
}

fn count_type() -> AttributeType {
    AttributeType::VendorDefined(header_attribute("FERROHSM_CKA_USAGE_COUNT") as _)
}

fn limit_type() -> AttributeType {
    AttributeType::VendorDefined(header_attribute("FERROHSM_CKA_USAGE_LIMIT") as _)
}

fn limit(n: u64) -> Attribute {
    Attribute::VendorDefined((limit_type(), (n as cryptoki_sys::CK_ULONG).to_ne_bytes().to_vec()))
}

fn count_attr(n: u64) -> Attribute {
    Attribute::VendorDefined((count_type(), (n as cryptoki_sys::CK_ULONG).to_ne_bytes().to_vec()))
}

/// A vendor CK_ULONG attribute of `key`; `None` when the object does not have it.
fn read_ulong(s: &Session, key: ObjectHandle, t: AttributeType) -> Option<u64> {
    match s.get_attributes(key, &[t]).unwrap().pop() {
        Some(Attribute::VendorDefined((_, v))) => Some(u64::from_ne_bytes(v.try_into().unwrap())),
        _ => None,
    }
}

fn uses(s: &Session, key: ObjectHandle) -> u64 {
    read_ulong(s, key, count_type()).expect("a key has FERROHSM_CKA_USAGE_COUNT")
}

fn aes(token: bool, more: &[Attribute]) -> Vec<Attribute> {
    let mut t = vec![
        Attribute::Class(ObjectClass::SECRET_KEY),
        Attribute::KeyType(KeyType::AES),
        Attribute::Token(token),
        Attribute::Private(true),
        Attribute::Value(vec![7; 16]),
        Attribute::Encrypt(true),
        Attribute::Decrypt(true),
        Attribute::Wrap(true),
        Attribute::Unwrap(true),
        Attribute::Derive(true),
        Attribute::Extractable(true),
        Attribute::Sensitive(false),
    ];
    t.extend_from_slice(more);
    t
}

fn rsa_pair(
    s: &Session,
    private_more: &[Attribute],
    public_more: &[Attribute],
) -> cryptoki::error::Result<(ObjectHandle, ObjectHandle)> {
    rsa_pair_id(s, b"limited", private_more, public_more)
}

fn rsa_pair_id(
    s: &Session,
    id: &[u8],
    private_more: &[Attribute],
    public_more: &[Attribute],
) -> cryptoki::error::Result<(ObjectHandle, ObjectHandle)> {
    let mut public = vec![
        Attribute::Token(true),
        Attribute::ModulusBits(2048.into()),
        Attribute::PublicExponent(vec![1, 0, 1]),
        Attribute::Verify(true),
        Attribute::Id(id.to_vec()),
    ];
    public.extend_from_slice(public_more);
    let mut private = vec![
        Attribute::Token(true),
        Attribute::Private(true),
        Attribute::Sign(true),
        Attribute::Decrypt(true),
        Attribute::Id(id.to_vec()),
        Attribute::Label(b"limited signer".to_vec()),
    ];
    private.extend_from_slice(private_more);
    s.generate_key_pair(&Mechanism::RsaPkcsKeyPairGen, &public, &private)
}

/// What a call came to: done, or its CK_RV.
type Outcome = Result<(), RvError>;

fn outcome<T>(r: cryptoki::error::Result<T>) -> Outcome {
    r.map(drop).map_err(rv)
}

#[test]
fn the_limit_is_set_once_and_only_lowered_on_every_path() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "usage rules");
    let s = user_session(&p, slot);
    let plain = s.create_object(&aes(true, &[])).unwrap();
    let limited = s.create_object(&aes(true, &[limit(5)])).unwrap();
    let wrapped = s.wrap_key(&Mechanism::AesKeyWrap, plain, plain).unwrap();
    let unwrap = |more: &[Attribute]| {
        let mut t = vec![
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(KeyType::AES),
            Attribute::Token(true),
            Attribute::Private(true),
        ];
        t.extend_from_slice(more);
        outcome(s.unwrap_key(&Mechanism::AesKeyWrap, plain, &wrapped, &t))
    };
    let derive = |more: &[Attribute]| {
        let data = [1u8; 16];
        let mech =
            Mechanism::AesCbcEncryptData(cryptoki::mechanism::ekdf::AesCbcDeriveParams::new([0; 16], &data));
        let mut t = vec![
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(KeyType::AES),
            Attribute::Token(true),
            Attribute::Private(true),
        ];
        t.extend_from_slice(more);
        outcome(s.derive_key(&mech, plain, &t))
    };
    let generate = |more: &[Attribute]| {
        let mut t = vec![
            Attribute::Token(true),
            Attribute::Private(true),
            Attribute::ValueLen(16.into()),
        ];
        t.extend_from_slice(more);
        outcome(s.generate_key(&Mechanism::AesKeyGen, &t))
    };
    // A fresh key without a limit for each row that sets one later.
    let fresh = || s.create_object(&aes(true, &[])).unwrap();
    let set = |key, attr: Attribute| outcome(s.update_attributes(key, &[attr]));
    let lowered = s.create_object(&aes(true, &[limit(5)])).unwrap();
    let bad_len = Attribute::VendorDefined((limit_type(), vec![1, 2, 3]));
    use RvError::*;
    let table: Vec<(&str, Outcome, Outcome)> = vec![
        (
            "create with a limit",
            outcome(s.create_object(&aes(true, &[limit(3)]))),
            Ok(()),
        ),
        (
            "create with a limit of 0",
            outcome(s.create_object(&aes(true, &[limit(0)]))),
            Err(AttributeValueInvalid),
        ),
        (
            "create with a limit not a CK_ULONG",
            outcome(s.create_object(&aes(true, std::slice::from_ref(&bad_len)))),
            Err(AttributeValueInvalid),
        ),
        (
            "create with a count",
            outcome(s.create_object(&aes(true, &[count_attr(0)]))),
            Err(AttributeReadOnly),
        ),
        (
            "create a session key with a limit",
            outcome(s.create_object(&aes(false, &[limit(3)]))),
            Err(TemplateInconsistent),
        ),
        (
            "create a data object with a limit",
            outcome(s.create_object(&[
                Attribute::Class(ObjectClass::DATA),
                Attribute::Token(true),
                Attribute::Value(vec![1]),
                limit(3),
            ])),
            Err(AttributeTypeInvalid),
        ),
        (
            "generate a secret key with a limit",
            generate(&[limit(3)]),
            Ok(()),
        ),
        (
            "generate a secret key with a count",
            generate(&[count_attr(1)]),
            Err(AttributeReadOnly),
        ),
        (
            "generate a key pair, limit on the private key",
            outcome(rsa_pair(&s, &[limit(3)], &[])),
            Ok(()),
        ),
        (
            "generate a key pair, limit on the public key",
            outcome(rsa_pair(&s, &[], &[limit(3)])),
            Err(AttributeTypeInvalid),
        ),
        ("unwrap with a limit", unwrap(&[limit(3)]), Ok(())),
        (
            "unwrap with a count",
            unwrap(&[count_attr(0)]),
            Err(AttributeReadOnly),
        ),
        ("derive with a limit", derive(&[limit(3)]), Ok(())),
        (
            "derive with a limit of 0",
            derive(&[limit(0)]),
            Err(AttributeValueInvalid),
        ),
        (
            "copy a key without a limit, setting one",
            outcome(s.copy_object(plain, &[limit(3)])),
            Ok(()),
        ),
        (
            "copy a key without a limit, setting a count",
            outcome(s.copy_object(plain, &[count_attr(0)])),
            Err(AttributeReadOnly),
        ),
        (
            "copy a key without a limit to a session key with one",
            outcome(s.copy_object(plain, &[Attribute::Token(false), limit(3)])),
            Err(TemplateInconsistent),
        ),
        (
            "copy a key with a limit",
            outcome(s.copy_object(limited, &[])),
            Err(ActionProhibited),
        ),
        (
            "copy a key with a limit, lowering it",
            outcome(s.copy_object(limited, &[limit(2)])),
            Err(ActionProhibited),
        ),
        (
            "set a limit on a key without one",
            set(fresh(), limit(10)),
            Ok(()),
        ),
        (
            "set a limit of 0 on a key without one",
            set(fresh(), limit(0)),
            Err(AttributeValueInvalid),
        ),
        (
            "set a limit not a CK_ULONG",
            set(fresh(), bad_len),
            Err(AttributeValueInvalid),
        ),
        (
            "set the count",
            set(limited, count_attr(0)),
            Err(AttributeReadOnly),
        ),
        (
            "set the count of a key without a limit",
            set(plain, count_attr(0)),
            Err(AttributeReadOnly),
        ),
        ("raise the limit", set(limited, limit(6)), Err(AttributeReadOnly)),
        ("set the limit to its value", set(limited, limit(5)), Ok(())),
        ("lower the limit", set(lowered, limit(4)), Ok(())),
        (
            "raise a lowered limit back",
            set(lowered, limit(5)),
            Err(AttributeReadOnly),
        ),
        ("lower it to 1", set(lowered, limit(1)), Ok(())),
        (
            "lower it to 0",
            set(lowered, limit(0)),
            Err(AttributeValueInvalid),
        ),
    ];
    let wrong: Vec<String> = table
        .iter()
        .filter(|(_, got, want)| got != want)
        .map(|(what, got, want)| format!("{what}: got {got:?}, want {want:?}"))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_eq!(read_ulong(&s, lowered, limit_type()), Some(1));
    assert_eq!(read_ulong(&s, limited, limit_type()), Some(5));
    // The count is an attribute of private and secret keys only.
    let (public, _) = rsa_pair(&s, &[], &[]).unwrap();
    assert_eq!(read_ulong(&s, public, count_type()), None);
    assert_eq!(uses(&s, plain), 0);
}

/// Signs `data` with `key` (RSA PKCS#1 v1.5, SHA-256).
fn sign(s: &Session, key: ObjectHandle, data: &[u8]) -> Result<Vec<u8>, RvError> {
    s.sign(&Mechanism::Sha256RsaPkcs, key, data).map_err(rv)
}

#[test]
fn a_limited_key_signs_exactly_its_limit_and_the_count_survives_a_reopen_and_a_copy() {
    let env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "usage sign");
    let s = user_session(&p, slot);
    let (public, private) = rsa_pair(&s, &[limit(5)], &[]).unwrap();
    assert_eq!(uses(&s, private), 0);
    for i in 1..=3u64 {
        sign(&s, private, b"one use").unwrap();
        assert_eq!(uses(&s, private), i);
    }
    // Verification with a private key object uses its public half: not a use.
    let sig = sign(&s, private, b"four").unwrap();
    s.verify(&Mechanism::Sha256RsaPkcs, public, b"four", &sig)
        .unwrap();
    assert_eq!(uses(&s, private), 4);
    drop(s);
    p.finalize().unwrap();

    let p = load();
    let s = user_session(&p, slot);
    let private = find_one(&s, ObjectClass::PRIVATE_KEY, b"limited");
    assert_eq!(uses(&s, private), 4, "the count after the store was opened again");
    sign(&s, private, b"five").unwrap();
    assert_eq!(sign(&s, private, b"six"), Err(RvError::KeyFunctionNotPermitted));
    assert_eq!(uses(&s, private), 5, "a refused use is not counted");
    // The limit can be lowered below the count: the key stays used up.
    s.update_attributes(private, &[limit(2)]).unwrap();
    assert_eq!(sign(&s, private, b"seven"), Err(RvError::KeyFunctionNotPermitted));
    // A limit set on a key that had none counts from then on.
    let (_, later) = rsa_pair_id(&s, b"later", &[], &[]).unwrap();
    sign(&s, later, b"uncounted").unwrap();
    assert_eq!(uses(&s, later), 0, "a key without a limit is not counted");
    s.update_attributes(later, &[limit(1)]).unwrap();
    sign(&s, later, b"counted").unwrap();
    assert_eq!(sign(&s, later, b"refused"), Err(RvError::KeyFunctionNotPermitted));
    drop(s);
    p.finalize().unwrap();

    // ferrohsm-util copy-store carries the counts: a copy of the store is no way around them.
    let copy = env.dir.path().join("copy");
    let (from, to) = (env.store_dir(), copy.join("store"));
    util(
        &env.conf(),
        &[
            "copy-store",
            "--from",
            from.to_str().unwrap(),
            "--to",
            to.to_str().unwrap(),
        ],
    );
    std::fs::write(
        copy.join("ferrohsm.toml"),
        "[store]\npath = \"store\"\n[pin]\nkdf_memory_kib = 64\nkdf_passes = 1\n",
    )
    .unwrap();
    std::env::set_var("FERROHSM_CONF", copy.join("ferrohsm.toml"));
    let p = load();
    let s = user_session(&p, slot);
    let private = find_one(&s, ObjectClass::PRIVATE_KEY, b"limited");
    assert_eq!(uses(&s, private), 5, "the count in the copied store");
    assert_eq!(
        sign(&s, private, b"copied"),
        Err(RvError::KeyFunctionNotPermitted)
    );
    let later = find_one(&s, ObjectClass::PRIVATE_KEY, b"later");
    assert_eq!(uses(&s, later), 1);
}

/// A use that cannot be counted is not made: with the store's files immutable (as root may
/// make them; SQLite's shared-memory index left writable, as tests/store_faults.rs says why),
/// a limited key's C_SignInit is refused and no signature leaves; once the store is writable
/// again the count reads what was really spent. A key without a limit still signs, since it
/// writes nothing.
#[test]
fn a_use_that_cannot_be_counted_is_refused() {
    let env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "usage unwritable");
    let s = user_session(&p, slot);
    let (_, limited) = rsa_pair(&s, &[limit(5)], &[]).unwrap();
    let (_, free) = rsa_pair_id(&s, b"free", &[], &[]).unwrap();
    sign(&s, limited, b"counted").unwrap();
    let store = env.store_dir();
    let files: Vec<PathBuf> = std::fs::read_dir(&store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.to_string_lossy().ends_with("-shm"))
        .chain([store.clone()])
        .collect();
    let chattr = |flag: &str| {
        for f in &files {
            let ok = std::process::Command::new("chattr")
                .arg(flag)
                .arg(f)
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                ok || flag == "-i",
                "chattr {flag} {} (these tests run as root)",
                f.display()
            );
        }
    };
    chattr("+i");
    let refused = sign(&s, limited, b"not counted");
    let unlimited = sign(&s, free, b"no count to write");
    chattr("-i");
    assert_eq!(refused.unwrap_err(), RvError::DeviceError);
    assert!(unlimited.is_ok(), "{unlimited:?}");
    assert_eq!(uses(&s, limited), 1);
    drop(s);
    p.finalize().unwrap();
}

#[test]
fn mac_and_decrypt_uses_are_counted_and_refused_at_the_limit() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "usage mac");
    let s = user_session(&p, slot);
    let mac_key = s
        .create_object(&[
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(KeyType::GENERIC_SECRET),
            Attribute::Token(true),
            Attribute::Private(true),
            Attribute::Value(vec![3; 32]),
            Attribute::Sign(true),
            Attribute::Verify(true),
            limit(3),
        ])
        .unwrap();
    let mac = s.sign(&Mechanism::Sha256Hmac, mac_key, b"m").unwrap();
    // A MAC verification uses the secret key itself: counted.
    s.verify(&Mechanism::Sha256Hmac, mac_key, b"m", &mac).unwrap();
    s.sign(&Mechanism::Sha256Hmac, mac_key, b"m").unwrap();
    assert_eq!(uses(&s, mac_key), 3);
    assert_eq!(
        s.sign(&Mechanism::Sha256Hmac, mac_key, b"m").map_err(rv),
        Err(RvError::KeyFunctionNotPermitted)
    );
    assert_eq!(
        s.verify(&Mechanism::Sha256Hmac, mac_key, b"m", &mac).map_err(rv),
        Err(RvError::KeyFunctionNotPermitted)
    );

    let aes_key = s.create_object(&aes(true, &[limit(2)])).unwrap();
    let iv = [9u8; 16];
    let ct = s.encrypt(&Mechanism::AesCbcPad(iv), aes_key, b"secret").unwrap();
    assert_eq!(
        s.decrypt(&Mechanism::AesCbcPad(iv), aes_key, &ct).unwrap(),
        b"secret"
    );
    assert_eq!(
        s.decrypt(&Mechanism::AesCbcPad(iv), aes_key, &ct).map_err(rv),
        Err(RvError::KeyFunctionNotPermitted)
    );
    assert_eq!(uses(&s, aes_key), 2);
}

/// Set in racer processes: the test's label.
const RACER_ENV: &str = "FERROHSM_USAGE_RACER";
const THREADS: usize = 16;
const PROCESSES: usize = 2;
const LIMIT: u64 = 64;
/// Uses spent before the race: the racers compete for the last `LIMIT - SPENT`.
const SPENT: u64 = 40;
const LABEL: &str = "usage race";

fn racer_session(p: &'static cryptoki::context::Pkcs11) -> Session {
    let slot = p
        .get_slots_with_initialized_token()
        .unwrap()
        .into_iter()
        .find(|s| p.get_token_info(*s).unwrap().label() == LABEL)
        .expect("the token");
    user_session(p, slot)
}

/// A racer's part: 16 threads sign until refused; prints `SIG <message> <signature>` (hex)
/// for each signature and `DONE` at the end.
fn racer() {
    let p: &'static cryptoki::context::Pkcs11 = Box::leak(Box::new(load()));
    let sessions: Vec<Session> = (0..THREADS).map(|_| racer_session(p)).collect();
    let key = find_one(&sessions[0], ObjectClass::PRIVATE_KEY, b"limited");
    println!("READY");
    std::io::stdout().flush().unwrap();
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    let signed: Vec<(String, Vec<u8>)> = std::thread::scope(|sc| {
        let threads: Vec<_> = sessions
            .into_iter()
            .enumerate()
            .map(|(t, s)| {
                sc.spawn(move || {
                    let mut mine = Vec::new();
                    for i in 0.. {
                        let msg = format!("{} {t} {i}", std::process::id());
                        match sign(&s, key, msg.as_bytes()) {
                            Ok(sig) => mine.push((msg, sig)),
                            Err(RvError::KeyFunctionNotPermitted) => break,
                            Err(e) => panic!("thread {t}: {e:?}"),
                        }
                    }
                    mine
                })
            })
            .collect();
        threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
    });
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    for (msg, sig) in signed {
        println!("SIG {} {}", hex(msg.as_bytes()), hex(&sig));
    }
    println!("DONE");
}

fn child(test: &str, conf: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env(RACER_ENV, "1")
        .env("FERROHSM_CONF", conf)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The race on `confs` (one per host; the racers take them in turn): exactly `LIMIT - SPENT`
/// signatures in all, each one valid.
fn race(test: &str, confs: &[PathBuf]) {
    use rsa::pkcs1v15::Pkcs1v15Sign;
    use sha2::{Digest, Sha256};
    std::env::set_var("FERROHSM_CONF", &confs[0]);
    let p = load();
    let slot = new_token(&p, LABEL);
    let s = user_session(&p, slot);
    let (public, private) = rsa_pair(&s, &[limit(LIMIT)], &[]).unwrap();
    let pk = rsa_public(&s, public);
    for i in 0..SPENT {
        sign(&s, private, &i.to_be_bytes()).unwrap();
    }
    let mut racers: Vec<_> = (0..PROCESSES)
        .map(|i| child(test, &confs[i % confs.len()]))
        .collect();
    let mut outs = start_together(&mut racers);
    let mut signatures = 0;
    for (r, o) in racers.iter_mut().zip(&mut outs) {
        for line in o.lines() {
            let line = line.unwrap();
            if let Some(rest) = line.split_once("SIG ").map(|(_, r)| r) {
                let (msg, sig) = rest.split_once(' ').unwrap();
                pk.verify(
                    Pkcs1v15Sign::new::<Sha256>(),
                    &Sha256::digest(unhex(msg)),
                    &unhex(sig),
                )
                .expect("a racer's signature verifies with the rsa crate");
                signatures += 1;
            }
        }
        assert!(r.wait().unwrap().success());
    }
    assert_eq!(signatures, LIMIT - SPENT, "signatures made by the racers in all");
    assert_eq!(uses(&s, private), LIMIT);
    assert_eq!(sign(&s, private, b"after"), Err(RvError::KeyFunctionNotPermitted));
}

#[test]
fn the_usage_limit_holds_exactly_under_16_threads_x_2_processes_racing_for_the_last_uses() {
    if std::env::var(RACER_ENV).is_ok() {
        return racer();
    }
    let env = TestEnv::new();
    race(
        "the_usage_limit_holds_exactly_under_16_threads_x_2_processes_racing_for_the_last_uses",
        &[env.conf()],
    );
}

#[test]
fn the_usage_limit_holds_exactly_under_16_threads_x_2_postgres_hosts_racing_for_the_last_uses() {
    if std::env::var(RACER_ENV).is_ok() {
        return racer();
    }
    let pg = Pg::start();
    let url = pg.database("usage");
    let tmp = tempfile::tempdir().unwrap();
    let confs: Vec<_> = (0..2)
        .map(|h| pg.config(&tmp.path().join(format!("host{h}")), &url, 10, 0))
        .collect();
    race(
        "the_usage_limit_holds_exactly_under_16_threads_x_2_postgres_hosts_racing_for_the_last_uses",
        &confs,
    );
    // The refusal is in the log, naming the key.
    let log = std::fs::read_to_string(tmp.path().join("host0/ferrohsm.log")).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("\"limited signer\" refused: its CKA_USAGE_LIMIT of 64 uses is reached")),
        "{log}"
    );
}
