//! A writer of the store file who holds no PIN, against the module as applications load it:
//! the edits the review of issue 50 made work (a trusted export key's modulus replaced,
//! `CKA_TRUSTED` set on a public key, a private key's sealed policy attributes replaced by
//! clear ones, a row put back to its older copy) are refused, the object is not used, and
//! the token says why in its log. Each row of the table edits a fresh store's SQLite file
//! while no process has it open, then a new module instance logs in as the user and tries
//! what the edit was for.

mod common;

use common::*;
use cryptoki::mechanism::rsa::{PkcsMgfType, PkcsOaepParams, PkcsOaepSource};
use cryptoki::mechanism::{Mechanism, MechanismType};
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::{Session, UserType};
use cryptoki::types::AuthPin;
use rsa::sha2::Sha256;
use rsa::traits::PublicKeyParts;

const CKA_CLASS: u64 = 0x0;
const CKA_LABEL: u64 = 0x3;
const CKA_TRUSTED: u64 = 0x86;
const CKA_MODULUS: u64 = 0x120;
const CKA_SENSITIVE: u64 = 0x103;
const CKA_EXTRACTABLE: u64 = 0x162;

/// The clear attributes of a row, as the store writes them: (type u64, length u32, value)*,
/// little endian.
fn parse(mut b: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let t = u64::from_le_bytes(b[..8].try_into().unwrap());
        let n = u32::from_le_bytes(b[8..12].try_into().unwrap()) as usize;
        out.push((t, b[12..12 + n].to_vec()));
        b = &b[12 + n..];
    }
    out
}

fn unparse(f: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (t, v) in f {
        out.extend_from_slice(&t.to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
    }
    out
}

fn set(f: &mut Vec<(u64, Vec<u8>)>, t: u64, v: Vec<u8>) {
    f.retain(|(x, _)| *x != t);
    f.push((t, v));
}

/// The store file, opened as an attacker would.
struct Db(rusqlite::Connection);

impl Db {
    fn open(env: &TestEnv) -> Db {
        Db(rusqlite::Connection::open(env.store_dir().join("ferrohsm.db")).unwrap())
    }

    /// The id of the row whose clear CKA_LABEL is `label` (public rows keep it in clear).
    fn public_row(&self, label: &[u8]) -> i64 {
        let mut st = self
            .0
            .prepare("SELECT id, clear FROM objects WHERE private = 0")
            .unwrap();
        let rows: Vec<(i64, Vec<u8>)> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        rows.into_iter()
            .find(|(_, c)| parse(c).iter().any(|(t, v)| *t == CKA_LABEL && v == label))
            .map(|(id, _)| id)
            .expect("the row")
    }

    /// The row of the last secret key made: the locked key (`setup`).
    fn locked_row(&self) -> i64 {
        self.0
            .query_row(
                "SELECT id FROM objects WHERE private = 1 AND class = 4 ORDER BY id DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .unwrap()
    }

    fn clear(&self, id: i64) -> Vec<(u64, Vec<u8>)> {
        parse(
            &self
                .0
                .query_row("SELECT clear FROM objects WHERE id = ?1", [id], |r| {
                    r.get::<_, Vec<u8>>(0)
                })
                .unwrap(),
        )
    }

    fn set_clear(&self, id: i64, f: &[(u64, Vec<u8>)]) {
        self.0
            .execute(
                "UPDATE objects SET clear = ?2 WHERE id = ?1",
                rusqlite::params![id, unparse(f)],
            )
            .unwrap();
    }
}

/// The token as the table's rows start it: the SO's trusted export key (RSA public key), a
/// public key of the user's without trust, a `CKA_WRAP_WITH_TRUSTED` AES key and a sensitive,
/// non-extractable AES key.
struct Setup {
    env: TestEnv,
    attacker: rsa::PrivateKey,
}

const SO_EXPORT: &[u8] = b"so-export";
const USER_PUBLIC: &[u8] = b"user-public";
const ESCROWED: &[u8] = b"escrowed";
const LOCKED: &[u8] = b"locked";

fn public_key_template(key: &rsa::PrivateKey, label: &[u8], trusted: bool) -> Vec<Attribute> {
    let mut t = vec![
        Attribute::Class(ObjectClass::PUBLIC_KEY),
        Attribute::KeyType(KeyType::RSA),
        Attribute::Token(true),
        Attribute::Private(false),
        Attribute::Wrap(true),
        Attribute::Encrypt(true),
        Attribute::Modulus(be(key.n().as_ref())),
        Attribute::PublicExponent(be(key.e())),
        Attribute::Label(label.to_vec()),
    ];
    if trusted {
        t.push(Attribute::Trusted(true));
    }
    t
}

fn setup() -> Setup {
    let env = TestEnv::new();
    // The token's log, read by the table.
    std::fs::write(
        env.conf(),
        format!(
            "[store]\npath = \"store\"\n[pin]\nkdf_memory_kib = 64\nkdf_passes = 1\n[log]\nlevel = \"info\"\ntarget = \"{}\"\n",
            env.dir.path().join("ferrohsm.log").display()
        ),
    )
    .unwrap();
    let mut rng = rand_core::UnwrapErr(getrandom::SysRng);
    let export = rsa::PrivateKey::new(&mut rng, 1024).unwrap();
    let attacker = rsa::PrivateKey::new(&mut rng, 1024).unwrap();
    let p = load();
    let slot = new_token(&p, "tamper");
    {
        let so = p.open_rw_session(slot).unwrap();
        so.login(UserType::So, Some(&AuthPin::new(SO_PIN.into())))
            .unwrap();
        so.create_object(&public_key_template(&export, SO_EXPORT, true))
            .unwrap();
        so.logout().unwrap();
    }
    let s = user_session(&p, slot);
    s.create_object(&public_key_template(&attacker, USER_PUBLIC, false))
        .unwrap();
    for (label, escrowed) in [(ESCROWED, true), (LOCKED, false)] {
        s.create_object(&[
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(KeyType::AES),
            Attribute::Token(true),
            Attribute::Private(true),
            Attribute::Sensitive(true),
            Attribute::Extractable(escrowed),
            Attribute::WrapWithTrusted(escrowed),
            Attribute::Value(vec![0x5a; 32]),
            Attribute::Label(label.to_vec()),
        ])
        .unwrap();
    }
    // Before any edit the export works: the SO's key is trusted.
    assert!(wrap(&s, SO_EXPORT, ESCROWED).is_ok());
    assert!(wrap(&s, USER_PUBLIC, ESCROWED).is_err());
    drop(s);
    p.finalize().unwrap();
    Setup { env, attacker }
}

fn find(s: &Session, label: &[u8]) -> Option<ObjectHandle> {
    s.find_objects(&[Attribute::Label(label.to_vec())]).unwrap().pop()
}

fn oaep() -> Mechanism<'static> {
    Mechanism::RsaPkcsOaep(PkcsOaepParams::new(
        MechanismType::SHA256,
        PkcsMgfType::MGF1_SHA256,
        PkcsOaepSource::empty(),
    ))
}

fn wrap(s: &Session, wrapper: &[u8], key: &[u8]) -> Result<Vec<u8>, String> {
    let w = find(s, wrapper).ok_or("wrapping key not found")?;
    let k = find(s, key).ok_or("key not found")?;
    s.wrap_key(&oaep(), w, k).map_err(|e| format!("{e}"))
}

/// What the attacker set out to do, tried after the edit; whether it worked.
type Attempt = fn(&Session, &rsa::PrivateKey) -> bool;

/// The escrowed key wrapped under any public key, for the attacker, who decrypts it.
fn escrowed_key_reaches_the_attacker(s: &Session, attacker: &rsa::PrivateKey) -> bool {
    let Some(k) = find(s, ESCROWED) else { return false };
    s.find_objects(&[Attribute::Class(ObjectClass::PUBLIC_KEY)])
        .unwrap()
        .into_iter()
        .any(|w| {
            s.wrap_key(&oaep(), w, k)
                .is_ok_and(|blob| attacker.decrypt(rsa::Oaep::<Sha256>::new(), &blob).is_ok())
        })
}

/// The locked key's value read.
fn locked_key_read(s: &Session, _: &rsa::PrivateKey) -> bool {
    find(s, LOCKED).is_some_and(|k| {
        s.get_attributes(k, &[AttributeType::Value])
            .is_ok_and(|a| matches!(&a[..], [Attribute::Value(v)] if v == &vec![0x5a; 32]))
    })
}

#[test]
fn edits_of_the_store_file_give_an_attacker_nothing() {
    type Edit = fn(&Db, &rsa::PrivateKey);
    let table: &[(&str, Edit, Attempt)] = &[
        (
            "the trusted export key's modulus replaced by the attacker's",
            |db, a| {
                let id = db.public_row(SO_EXPORT);
                let mut f = db.clear(id);
                set(&mut f, CKA_MODULUS, be(a.n().as_ref()));
                db.set_clear(id, &f);
            },
            escrowed_key_reaches_the_attacker,
        ),
        (
            "CKA_TRUSTED set on the attacker's public key",
            |db, _| {
                let id = db.public_row(USER_PUBLIC);
                let mut f = db.clear(id);
                set(&mut f, CKA_TRUSTED, vec![1]);
                db.set_clear(id, &f);
            },
            escrowed_key_reaches_the_attacker,
        ),
        (
            "a trusted public key of the attacker's added as a new row without a tag",
            |db, a| {
                let id = db.public_row(USER_PUBLIC);
                let mut f = db.clear(id);
                set(&mut f, CKA_TRUSTED, vec![1]);
                set(&mut f, CKA_MODULUS, be(a.n().as_ref()));
                set(&mut f, CKA_LABEL, b"attacker-export".to_vec());
                db.0.execute(
                    "INSERT INTO objects (slot_id, private, class, label, clear, sealed) VALUES (0, 0, 2, ?1, ?2, x'')",
                    rusqlite::params![b"attacker-export".to_vec(), unparse(&f)],
                )
                .unwrap();
            },
            escrowed_key_reaches_the_attacker,
        ),
        (
            "clear CKA_SENSITIVE false and CKA_EXTRACTABLE true added to the locked key's row",
            |db, _| {
                let id = db.locked_row();
                let mut f = db.clear(id);
                set(&mut f, CKA_SENSITIVE, vec![0]);
                set(&mut f, CKA_EXTRACTABLE, vec![1]);
                db.set_clear(id, &f);
            },
            locked_key_read,
        ),
        (
            "the locked key's class made CKO_DATA (a data object's value is readable)",
            |db, _| {
                let id = db.locked_row();
                let mut f = db.clear(id);
                set(&mut f, CKA_CLASS, 0u64.to_ne_bytes().to_vec());
                db.set_clear(id, &f);
                db.0.execute("UPDATE objects SET class = 0 WHERE id = ?1", [id])
                    .unwrap();
            },
            |s, _| {
                s.find_objects(&[Attribute::Class(ObjectClass::DATA)])
                    .unwrap()
                    .into_iter()
                    .any(|o| {
                        s.get_attributes(o, &[AttributeType::Value])
                            .is_ok_and(|a| !a.is_empty())
                    })
            },
        ),
    ];
    for (what, edit, attempt) in table {
        let setup = setup();
        edit(&Db::open(&setup.env), &setup.attacker);
        let p = load();
        let slot = p
            .get_slots_with_initialized_token()
            .unwrap()
            .into_iter()
            .find(|s| p.get_token_info(*s).unwrap().label() == "tamper")
            .unwrap();
        let s = p.open_rw_session(slot).unwrap();
        let login = s.login(UserType::User, Some(&AuthPin::new(USER_PIN.into())));
        // Either the login itself refuses a token whose rows no longer add up, or the
        // edited object is not used.
        if login.is_ok() {
            assert!(!attempt(&s, &setup.attacker), "{what}: the attack worked");
        }
        let log = std::fs::read_to_string(setup.env.dir.path().join("ferrohsm.log")).unwrap_or_default();
        drop(s);
        p.finalize().unwrap();
        assert!(
            log.contains("was altered") || log.contains("do not add up") || login.is_ok(),
            "{what}: no log line says why: {log}"
        );
    }
}
