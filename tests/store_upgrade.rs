//! Stores written before records were authenticated keep every key: the fixtures of
//! `tests/fixtures/store-v4` (SQLite schema 4, PostgreSQL schema 3, written by the module of
//! that format) are opened by this module, upgraded at the first login, and every object is
//! checked against what the old module recorded: public keys, signatures verified by the
//! `rsa` and `p256` crates, the HMAC key's output, an AES key's decryption, the escrowed
//! key's value after a wrap under the SO's trusted key (decrypted by OpenSSL), and the trust
//! of that key.

mod common;

use common::pg::Pg;
use common::*;
use cryptoki::context::Pkcs11;
use cryptoki::mechanism::rsa::{PkcsMgfType, PkcsOaepParams, PkcsOaepSource};
use cryptoki::mechanism::{Mechanism, MechanismType};
use cryptoki::object::{Attribute, AttributeType, ObjectClass, ObjectHandle};
use cryptoki::session::{Session, UserType};
use cryptoki::types::AuthPin;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/store-v4");
const USER: &str = "123456";
const OBJECTS: usize = 10;

/// `expected.txt` of one store: "label attribute" to value.
fn expected(objects: &str) -> HashMap<String, String> {
    std::fs::read_to_string(Path::new(FIXTURE).join(objects).join("expected.txt"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut p = l.splitn(3, ' ');
            Some((format!("{} {}", p.next()?, p.next()?), p.next()?.to_string()))
        })
        .collect()
}

fn conf(dir: &Path, store: &str) -> PathBuf {
    let conf = dir.join("ferrohsm.toml");
    std::fs::write(
        &conf,
        format!(
            "{store}[pin]\nkdf_memory_kib = 64\nkdf_passes = 1\n[log]\nlevel = \"info\"\ntarget = \"{}\"\n",
            dir.join("ferrohsm.log").display()
        ),
    )
    .unwrap();
    conf
}

fn user_login(p: &Pkcs11) -> Session {
    let slot = p
        .get_slots_with_initialized_token()
        .unwrap()
        .into_iter()
        .find(|s| p.get_token_info(*s).unwrap().label() == "fixture")
        .expect("the fixture's token");
    let s = p.open_rw_session(slot).unwrap();
    s.login(UserType::User, Some(&AuthPin::new(USER.into()))).unwrap();
    s
}

fn one(s: &Session, class: ObjectClass, label: &str) -> ObjectHandle {
    let found = s
        .find_objects(&[
            Attribute::Class(class),
            Attribute::Label(label.as_bytes().to_vec()),
        ])
        .unwrap();
    assert_eq!(found.len(), 1, "{label} {class:?}");
    found[0]
}

fn bytes(s: &Session, o: ObjectHandle, t: AttributeType) -> Vec<u8> {
    match s.get_attributes(o, &[t]).unwrap().pop() {
        Some(
            Attribute::Modulus(v)
            | Attribute::PublicExponent(v)
            | Attribute::EcPoint(v)
            | Attribute::CheckValue(v)
            | Attribute::UniqueId(v),
        ) => v,
        other => panic!("{t:?}: {other:?}"),
    }
}

/// Every object of the fixture, as the old module left it, through this module.
fn check_every_key(s: &Session, objects: &str) {
    let want = expected(objects);
    let w = |k: &str| unhex(want.get(k).unwrap_or_else(|| panic!("{k} in expected.txt")));
    let message = std::fs::read(Path::new(FIXTURE).join(objects).join("message.txt")).unwrap();
    let all = s.find_objects(&[]).unwrap();
    assert_eq!(all.len(), OBJECTS, "objects after the upgrade");
    // Every object keeps its unique id.
    let ids: Vec<Vec<u8>> = all
        .iter()
        .map(|o| bytes(s, *o, AttributeType::UniqueId))
        .collect();
    for (k, v) in &want {
        if k.ends_with(".CKA_UNIQUE_ID") {
            assert!(ids.contains(&v.as_bytes().to_vec()), "{k} {v} is gone");
        }
    }
    // RSA: the public key as recorded, and a signature of the private key verified by the rsa
    // crate with it (PKCS#1 v1.5 is deterministic: the old module's signature too).
    let rsa_pub = one(s, ObjectClass::PUBLIC_KEY, "rsa-zsk");
    assert_eq!(
        bytes(s, rsa_pub, AttributeType::Modulus),
        w("rsa-zsk CKA_MODULUS")
    );
    let sig = s
        .sign(
            &Mechanism::Sha256RsaPkcs,
            one(s, ObjectClass::PRIVATE_KEY, "rsa-zsk"),
            &message,
        )
        .unwrap();
    assert_eq!(sig, w("rsa-zsk sig_CKM_SHA256_RSA_PKCS"));
    // The recorded public key is the one the token gives (checked above).
    let key = rsa_public(s, rsa_pub);
    use rsa::sha2::Digest;
    key.verify(
        rsa::pkcs1v15::Pkcs1v15Sign::new::<rsa::sha2::Sha256>(),
        &rsa::sha2::Sha256::digest(&message),
        &sig,
    )
    .expect("the rsa crate verifies the upgraded key's signature");
    // EC: the point as recorded, and a signature verified by the p256 crate.
    let ec_pub = one(s, ObjectClass::PUBLIC_KEY, "ec-ksk");
    assert_eq!(bytes(s, ec_pub, AttributeType::EcPoint), w("ec-ksk CKA_EC_POINT"));
    let sig = s
        .sign(
            &Mechanism::EcdsaSha256,
            one(s, ObjectClass::PRIVATE_KEY, "ec-ksk"),
            &message,
        )
        .unwrap();
    use p256::ecdsa::signature::Verifier;
    let vk = p256::ecdsa::VerifyingKey::from_sec1_bytes(&w("ec-ksk point_uncompressed")).unwrap();
    vk.verify(&message, &p256::ecdsa::Signature::from_slice(&sig).unwrap())
        .expect("the p256 crate verifies the upgraded key's signature");
    // The HMAC key's value, through its output.
    let mac = s
        .sign(
            &Mechanism::Sha256Hmac,
            one(s, ObjectClass::SECRET_KEY, "hmac-key"),
            &message,
        )
        .unwrap();
    assert_eq!(mac, w("hmac-key CKM_SHA256_HMAC_of_message"));
    // The AES key's value, through a decryption the old module made.
    let aes = one(s, ObjectClass::SECRET_KEY, "aes-wrap");
    assert_eq!(
        bytes(s, aes, AttributeType::CheckValue),
        w("aes-wrap CKA_CHECK_VALUE")
    );
    let iv: [u8; 16] = w("aes-wrap aes_cbc_pad_iv").try_into().unwrap();
    let plain = s
        .decrypt(
            &Mechanism::AesCbcPad(iv),
            aes,
            &w("aes-wrap aes_cbc_pad_ciphertext"),
        )
        .unwrap();
    assert_eq!(plain, w("aes-wrap aes_cbc_pad_plaintext"));
    // The SO's export key is still trusted: the escrowed key leaves under it, and OpenSSL,
    // with the export key's private half, gets the value whose check value was recorded.
    let export = one(s, ObjectClass::PUBLIC_KEY, "export-trusted");
    assert!(matches!(
        s.get_attributes(export, &[AttributeType::Trusted]).unwrap()[..],
        [Attribute::Trusted(true)]
    ));
    let escrowed = one(s, ObjectClass::SECRET_KEY, "escrowed");
    let oaep = Mechanism::RsaPkcsOaep(PkcsOaepParams::new(
        MechanismType::SHA256,
        PkcsMgfType::MGF1_SHA256,
        PkcsOaepSource::empty(),
    ));
    let blob = s.wrap_key(&oaep, export, escrowed).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("blob"), &blob).unwrap();
    let out = Command::new("openssl")
        .args(["pkeyutl", "-decrypt", "-inkey"])
        .arg(Path::new(FIXTURE).join("export-trusted.key.pem"))
        .args([
            "-pkeyopt",
            "rsa_padding_mode:oaep",
            "-pkeyopt",
            "rsa_oaep_md:sha256",
            "-pkeyopt",
            "rsa_mgf1_md:sha256",
            "-in",
        ])
        .arg(dir.path().join("blob"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let value = out.stdout;
    use aes::cipher::{BlockCipherEncrypt, KeyInit};
    let mut block = [0u8; 16].into();
    aes::Aes128::new_from_slice(&value)
        .unwrap()
        .encrypt_block(&mut block);
    assert_eq!(
        block[..3],
        w("escrowed CKA_CHECK_VALUE")[..],
        "the escrowed key's value"
    );
}

/// The store of `conf`, opened twice by this module: the first login upgrades it (said in the
/// log), the second finds it upgraded; every key checks both times.
/// Upgrades the store `conf` names at a login and checks every key, twice (the second login
/// finds nothing to upgrade). `wal`: the SQLite store's write-ahead log, which the upgrade
/// leaves empty (every row was written again: the log would stay as large as the store).
fn upgrade(conf: &Path, objects: &str, wal: Option<&Path>) {
    std::env::set_var("FERROHSM_CONF", conf);
    let log = conf.parent().unwrap().join("ferrohsm.log");
    for round in 0..2 {
        let p = load();
        let s = user_login(&p);
        if let Some(wal) = wal.filter(|_| round == 0) {
            let len = std::fs::metadata(wal).map_or(0, |m| m.len());
            assert_eq!(len, 0, "the write-ahead log after the upgrade");
        }
        check_every_key(&s, objects);
        drop(s);
        p.finalize().unwrap();
        let text = std::fs::read_to_string(&log).unwrap();
        let upgrades = text.matches("upgraded to authenticated records").count();
        assert_eq!(upgrades, 1, "round {round}: {text}");
        assert!(
            text.contains(&format!("{OBJECTS} record(s) tagged\n")),
            "every record upgraded: {text}"
        );
    }
}

#[test]
fn an_sqlite_store_of_schema_4_is_upgraded_with_every_key() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    std::fs::create_dir(&store).unwrap();
    for f in std::fs::read_dir(Path::new(FIXTURE).join("sqlite")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), store.join(f.file_name())).unwrap();
    }
    let conf = conf(tmp.path(), "[store]\npath = \"store\"\n");
    upgrade(&conf, "sqlite-objects", Some(&store.join("ferrohsm.db-wal")));
    let db = rusqlite::Connection::open(store.join("ferrohsm.db")).unwrap();
    let (version, untagged): (i64, i64) = (
        db.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap(),
        db.query_row("SELECT count(*) FROM objects WHERE tag IS NULL", [], |r| r.get(0))
            .unwrap(),
    );
    assert_eq!((version, untagged), (7, 0));
}

#[test]
fn a_postgres_store_of_schema_3_is_upgraded_with_every_key() {
    let pg = Pg::start();
    let url = pg.database("upgrade");
    let restored = Command::new("psql")
        .args(["-v", "ON_ERROR_STOP=1", "-q", "-d", &url, "-f"])
        .arg(Path::new(FIXTURE).join("store-pg-v3.sql"))
        .env("PGPASSWORD", common::pg::PASSWORD)
        .output()
        .unwrap();
    assert!(
        restored.status.success(),
        "psql: {}",
        String::from_utf8_lossy(&restored.stderr)
    );
    let tmp = tempfile::tempdir().unwrap();
    let pg_conf = pg.config(tmp.path(), &url, 10, 0);
    upgrade(&pg_conf, "pg-objects", None);
}
