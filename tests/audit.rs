//! The audit trail (issue 52): every security-relevant event leaves its record, written with
//! the change; an exported log verifies offline with the audit key's public half, and each
//! kind of tampering (with the exported log, or with the store's file) is found and located;
//! two processes appending at once keep one chain.

mod common;

use common::*;
use cryptoki::mechanism::elliptic_curve::{EcKdf, Ecdh1DeriveParams};
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::{Session, UserType};
use cryptoki::types::AuthPin;
use ferrohsm::store::audit::{chain, checkpoint, Entry};
use std::path::{Path, PathBuf};
use std::process::Command;

const P256_OID: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const LABEL: &str = "audited";
/// Set in the children of `two_processes_append_to_one_chain`: how many objects to make.
const CHILD_ENV: &str = "FERROHSM_AUDIT_CHILD";

/// A store of its own with a PIN that locks after 3 wrong attempts.
fn env() -> TestEnv {
    let t = TestEnv::new();
    std::fs::write(
        t.conf(),
        "[store]\npath = \"store\"\n[pin]\nmax_failures = 3\nkdf_memory_kib = 64\nkdf_passes = 1\n",
    )
    .unwrap();
    t
}

/// `ferrohsm-util audit ARGS` on the test's store; its output, whether it succeeded.
fn audit(conf: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrohsm-util"))
        .arg("--module")
        .arg(module_path())
        .arg("audit")
        .args(args)
        .env("FERROHSM_CONF", conf)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn export(conf: &Path) -> Vec<Entry> {
    let (ok, text) = audit(conf, &["export", "--token", LABEL]);
    assert!(ok, "{text}");
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn pin(p: &str) -> AuthPin {
    AuthPin::new(p.into())
}

fn aes_key(s: &Session, label: &str, extra: &[Attribute]) -> ObjectHandle {
    let mut t = vec![
        Attribute::Token(true),
        Attribute::ValueLen(32.into()),
        Attribute::Label(label.as_bytes().to_vec()),
    ];
    t.extend_from_slice(extra);
    s.generate_key(&Mechanism::AesKeyGen, &t).unwrap()
}

/// Drives one of each event through PKCS#11, in order; the events expected, with whether
/// their record names a mechanism and an object.
fn every_event(p: &cryptoki::context::Pkcs11) -> Vec<(&'static str, &'static str, bool, bool)> {
    let slot = new_token(p, LABEL);
    let s = p.open_rw_session(slot).unwrap();
    assert_eq!(
        rv(s.login(UserType::User, Some(&pin("0000"))).unwrap_err()),
        cryptoki::error::RvError::PinIncorrect
    );
    s.login(UserType::User, Some(&pin(USER_PIN))).unwrap();
    let public = [
        Attribute::Token(true),
        Attribute::EcParams(P256_OID.to_vec()),
        Attribute::Label(b"ec".to_vec()),
    ];
    let private = [
        Attribute::Token(true),
        Attribute::Private(true),
        Attribute::Derive(true),
        Attribute::Label(b"ec".to_vec()),
    ];
    let (ec_pub, ec_priv) = s
        .generate_key_pair(&Mechanism::EccKeyPairGen, &public, &private)
        .unwrap();
    let kek = aes_key(&s, "kek", &[Attribute::Wrap(true), Attribute::Unwrap(true)]);
    let data = s
        .create_object(&[
            Attribute::Class(ObjectClass::DATA),
            Attribute::Token(true),
            Attribute::Label(b"note".to_vec()),
            Attribute::Value(b"hello".to_vec()),
        ])
        .unwrap();
    let copy = s
        .copy_object(data, &[Attribute::Label(b"note 2".to_vec())])
        .unwrap();
    s.update_attributes(copy, &[Attribute::Label(b"note 3".to_vec())])
        .unwrap();
    let secret = aes_key(&s, "exportable", &[Attribute::Extractable(true)]);
    let wrapped = s.wrap_key(&Mechanism::AesKeyWrapPad, kek, secret).unwrap();
    let template = [
        Attribute::Token(true),
        Attribute::Class(ObjectClass::SECRET_KEY),
        Attribute::KeyType(KeyType::AES),
    ];
    s.unwrap_key(&Mechanism::AesKeyWrapPad, kek, &wrapped, &template)
        .unwrap();
    let Attribute::EcPoint(point) = s.get_attributes(ec_pub, &[AttributeType::EcPoint]).unwrap()[0].clone()
    else {
        panic!("no CKA_EC_POINT")
    };
    let derived = [
        Attribute::Token(true),
        Attribute::Class(ObjectClass::SECRET_KEY),
        Attribute::KeyType(KeyType::GENERIC_SECRET),
    ];
    let ecdh = Mechanism::Ecdh1Derive(Ecdh1DeriveParams::new(EcKdf::null(), &point));
    s.derive_key(&ecdh, ec_priv, &derived).unwrap();
    s.destroy_object(copy).unwrap();
    s.set_pin(&pin(USER_PIN), &pin(USER_PIN)).unwrap();
    s.logout().unwrap();
    for _ in 0..3 {
        let _ = s.login(UserType::User, Some(&pin("0000")));
    }
    assert_eq!(
        rv(s.login(UserType::User, Some(&pin(USER_PIN))).unwrap_err()),
        cryptoki::error::RvError::PinLocked
    );
    vec![
        // (event, outcome, names a mechanism, names an object)
        ("init_token", "ok", false, false),
        ("login", "ok", false, false),
        ("init_pin", "ok", false, false),
        ("logout", "ok", false, false),
        ("login", "CKR_PIN_INCORRECT", false, false),
        ("login", "ok", false, false),
        ("generate_key_pair", "ok", true, true),
        ("generate_key", "ok", true, true),
        ("create_object", "ok", false, true),
        ("copy_object", "ok", false, true),
        ("set_attribute", "ok", false, true),
        ("wrap_key", "ok", true, true),
        ("unwrap_key", "ok", true, true),
        ("derive_key", "ok", true, true),
        ("destroy_object", "ok", false, true),
        ("set_pin", "ok", false, false),
        ("logout", "ok", false, false),
        ("pin_locked", "CKR_PIN_LOCKED", false, false),
        ("login", "CKR_PIN_LOCKED", false, false),
    ]
}

#[test]
fn every_event_leaves_its_record() {
    let t = env();
    let p = load();
    let expected = every_event(&p);
    let log = export(&t.conf());
    let mut rest = log.iter();
    for (event, outcome, mechanism, object) in expected {
        let r = rest
            .by_ref()
            .map(|e| &e.record)
            .find(|r| r.event == event && r.outcome == outcome)
            .unwrap_or_else(|| panic!("no {event} record ({outcome}) in order in {log:#?}"));
        assert_eq!(r.mechanism.is_some(), mechanism, "{r:?}");
        assert_eq!(r.object.is_some(), object, "{r:?}");
        assert_eq!(r.pid, std::process::id());
        assert!(!r.user.is_empty());
        if object {
            // The label is named by its hash only.
            let h = r.label_hash.as_deref().expect("a label hash");
            assert_eq!(h.len(), 64);
        }
    }
    let set = log.iter().find(|e| e.record.event == "set_attribute").unwrap();
    assert_eq!(set.record.attributes, vec![3], "CKA_LABEL changed");
    // Generating a pair records both keys; the store holds no label in clear.
    assert_eq!(
        log.iter()
            .filter(|e| e.record.event == "generate_key_pair")
            .count(),
        2
    );
    let text: String = log.iter().map(|e| serde_json::to_string(e).unwrap()).collect();
    assert!(!text.contains("exportable") && !text.contains(USER_PIN));
    // Numbered from 1, each after the one before.
    for (i, e) in log.iter().enumerate() {
        assert_eq!(e.record.seq, i as u64 + 1);
    }
    p.finalize().unwrap();
}

/// A token with records, an audit key and checkpoints; the exported log's lines and the
/// public key's file.
fn signed_log(t: &TestEnv) -> (Vec<String>, PathBuf) {
    signed_log_at(&t.conf(), t.dir.path())
}

/// `signed_log` on the store `conf` names (the process's own configuration), the key in `dir`.
fn signed_log_at(conf: &Path, dir: &Path) -> (Vec<String>, PathBuf) {
    let p = load();
    let slot = new_token(&p, LABEL);
    let key = dir.join("audit.pem");
    let (ok, text) = audit(
        conf,
        &[
            "init",
            "--token",
            LABEL,
            "--public-key",
            key.to_str().unwrap(),
            "--pin",
            SO_PIN,
        ],
    );
    assert!(ok, "{text}");
    let s = user_session(&p, slot);
    for i in 0..4 {
        aes_key(&s, &format!("k{i}"), &[]);
    }
    s.logout().unwrap();
    let s = user_session(&p, slot);
    aes_key(&s, "after", &[]);
    s.logout().unwrap();
    p.finalize().unwrap();
    let (ok, text) = audit(conf, &["export", "--token", LABEL]);
    assert!(ok, "{text}");
    (text.lines().map(str::to_string).collect(), key)
}

fn verify(t: &TestEnv, key: &Path, lines: &[String]) -> (bool, String) {
    verify_in(t.dir.path(), key, lines)
}

fn verify_in(dir: &Path, key: &Path, lines: &[String]) -> (bool, String) {
    let log = dir.join("log.jsonl");
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    audit(
        Path::new("/nonexistent"),
        &[
            "verify",
            "--public-key",
            key.to_str().unwrap(),
            log.to_str().unwrap(),
        ],
    )
}

fn entry(line: &str) -> Entry {
    serde_json::from_str(line).unwrap()
}

/// `lines` with record `i` (0-based) changed by `f`, and the hashes after it recomputed as a
/// writer of the store could.
fn rechained(lines: &[String], i: usize, f: impl FnOnce(&mut Entry)) -> Vec<String> {
    let mut entries: Vec<Entry> = lines.iter().map(|l| entry(l)).collect();
    f(&mut entries[i]);
    let mut prev = ferrohsm::store::audit::unhex(&entries[i].prev).unwrap();
    for e in &mut entries[i..] {
        let linked = chain::link(&prev, e.record.clone());
        prev = ferrohsm::store::audit::unhex(&linked.hash).unwrap();
        *e = linked;
    }
    entries
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect()
}

#[test]
fn tampering_is_found_and_located() {
    let t = env();
    let (lines, key) = signed_log(&t);
    let (ok, text) = verify(&t, &key, &lines);
    assert!(ok, "{text}");
    let checkpoints: Vec<u64> = lines
        .iter()
        .map(|l| entry(l))
        .filter(|e| e.record.event == "checkpoint")
        .map(|e| e.record.seq)
        .collect();
    assert!(
        checkpoints.len() >= 3,
        "audit init and two logouts sign: {checkpoints:?}"
    );
    let k = 5; // record 6, 0-based 5: a key generated, not a checkpoint
    assert_ne!(entry(&lines[k]).record.event, "checkpoint");
    let signer = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);

    let mut deleted = lines.clone();
    deleted.remove(k);
    let mut inserted = lines.clone();
    inserted.insert(k, lines[k].clone());
    let mut edited = lines.clone();
    edited[k] = edited[k].replace("\"outcome\":\"ok\"", "\"outcome\":\"CKR_OK\"");
    let mut reordered = lines.clone();
    reordered.swap(k, k + 1);
    let truncated = lines[2..].to_vec();
    let forged = rechained(&lines, k, |e| e.record.event = "create_object".into());
    let first_checkpoint_after = *checkpoints.iter().find(|&&c| c > k as u64 + 1).unwrap();
    let mut forged_checkpoint = lines.clone();
    let c = checkpoints[1] as usize - 1;
    forged_checkpoint[c] = {
        let mut e = entry(&lines[c]);
        let prev = ferrohsm::store::audit::unhex(&e.prev).unwrap();
        let r = &mut e.record;
        r.detail = Some(ferrohsm::store::audit::hex(&checkpoint::sign(
            &signer, &r.token, r.seq, &r.time, &prev,
        )));
        serde_json::to_string(&chain::link(&prev, e.record)).unwrap()
    };
    let seq = k as u64 + 1;
    let cases: Vec<(&str, Vec<String>, u64, &str)> = vec![
        ("delete", deleted, seq, "missing"),
        ("insert", inserted, seq + 1, "again or out of order"),
        ("edit", edited, seq, "altered"),
        ("reorder", reordered, seq, "missing"),
        ("truncate", truncated, 3, "are missing"),
        ("edit, hashes redone", forged, first_checkpoint_after, "signature"),
        ("forged checkpoint", forged_checkpoint, c as u64 + 1, "signature"),
    ];
    for (what, log, at, why) in cases {
        let (ok, text) = verify(&t, &key, &log);
        assert!(!ok, "{what}: verified:\n{text}");
        assert!(
            text.contains(&format!("breaks at record {at} ")) && text.contains(why),
            "{what}: expected a break at {at} ({why}):\n{text}"
        );
    }
}

#[test]
fn tampering_with_the_store_file_is_found() {
    let t = env();
    let (lines, key) = signed_log(&t);
    let db = t.store_dir().join("ferrohsm.db");
    let c = rusqlite::Connection::open(&db).unwrap();
    c.execute("DELETE FROM audit WHERE seq = 4", []).unwrap();
    drop(c);
    let (ok, text) = audit(&t.conf(), &["export", "--token", LABEL]);
    assert!(ok, "{text}");
    let after: Vec<String> = text.lines().map(str::to_string).collect();
    assert_eq!(after.len(), lines.len() - 1);
    let (ok, text) = verify(&t, &key, &after);
    assert!(!ok && text.contains("breaks at record 4 "), "{text}");
    // An edited body in place.
    let c = rusqlite::Connection::open(&db).unwrap();
    c.execute(
        "UPDATE audit SET body = replace(body, '\"outcome\":\"ok\"', '\"outcome\":\"no\"') WHERE seq = 6",
        [],
    )
    .unwrap();
    drop(c);
    let (_, text) = audit(&t.conf(), &["export", "--token", LABEL]);
    let mut after: Vec<String> = text.lines().map(str::to_string).collect();
    after.insert(3, lines[3].clone());
    let (ok, text) = verify(&t, &key, &after);
    assert!(
        !ok && text.contains("breaks at record 6 ") && text.contains("altered"),
        "{text}"
    );
}

#[test]
fn show_filters_and_prune_keeps_the_chain_verifiable() {
    let t = env();
    let (lines, key) = signed_log(&t);
    let (ok, text) = audit(&t.conf(), &["show", "--token", LABEL, "--event", "generate_key"]);
    assert!(ok, "{text}");
    assert_eq!(text.lines().count(), 5, "{text}");
    let (ok, text) = audit(&t.conf(), &["show", "--token", LABEL, "--key", "k2"]);
    assert!(ok && text.lines().count() == 1, "{text}");
    let (ok, text) = audit(
        &t.conf(),
        &[
            "show",
            "--token",
            LABEL,
            "--since",
            "1970-01-01",
            "--until",
            "2000-01-01",
        ],
    );
    assert!(ok && text.is_empty(), "{text}");
    let (ok, text) = audit(&t.conf(), &["show", "--token", LABEL, "--since", "yesterday"]);
    assert!(!ok && text.contains("not a time"), "{text}");
    // Everything before now: cut at the last checkpoint.
    let (ok, text) = audit(
        &t.conf(),
        &[
            "prune",
            "--token",
            LABEL,
            "--before",
            "2999-01-01",
            "--pin",
            SO_PIN,
        ],
    );
    assert!(ok, "{text}");
    let (ok, text) = audit(&t.conf(), &["export", "--token", LABEL]);
    assert!(ok, "{text}");
    let after: Vec<String> = text.lines().map(str::to_string).collect();
    assert!(after.len() < lines.len());
    assert_eq!(entry(&after[0]).record.event, "checkpoint");
    let (ok, text) = verify(&t, &key, &after);
    assert!(ok, "{text}");
    // Without the checkpoint at the cut, the records before are missing.
    let (ok, text) = verify(&t, &key, &after[1..]);
    assert!(!ok && text.contains("are missing"), "{text}");
}

/// In a child: makes and destroys `n` public token objects.
fn child(n: usize) {
    let p = load();
    let slot = p
        .get_slots_with_token()
        .unwrap()
        .into_iter()
        .find(|s| p.get_token_info(*s).unwrap().label() == LABEL)
        .unwrap();
    let s = p.open_rw_session(slot).unwrap();
    for i in 0..n {
        let o = s
            .create_object(&[
                Attribute::Class(ObjectClass::DATA),
                Attribute::Token(true),
                Attribute::Label(format!("{}-{i}", std::process::id()).into_bytes()),
            ])
            .unwrap();
        s.destroy_object(o).unwrap();
    }
    p.finalize().unwrap();
}

#[test]
fn two_processes_append_to_one_chain() {
    if let Ok(n) = std::env::var(CHILD_ENV) {
        child(n.parse().unwrap());
        return;
    }
    let t = env();
    let (lines, key) = signed_log(&t);
    let test = "two_processes_append_to_one_chain";
    race(test, [&t.conf(), &t.conf()], t.dir.path(), &key, lines.len());
}

/// Two processes started at once, each making `N` objects and destroying them on the store
/// `confs` name (one each); the chain then holds every record once and verifies.
fn race(test: &str, confs: [&Path; 2], dir: &Path, key: &Path, before: usize) {
    const N: usize = 40;
    let children: Vec<_> = confs
        .iter()
        .map(|conf| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", test, "--nocapture", "--test-threads", "1"])
                .env(CHILD_ENV, N.to_string())
                .env("FERROHSM_CONF", conf)
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let log = export(confs[0]);
    assert_eq!(log.len(), before + 2 * 2 * N);
    let pids: std::collections::BTreeSet<u32> = log[before..].iter().map(|e| e.record.pid).collect();
    assert_eq!(pids.len(), 2);
    let lines: Vec<String> = log.iter().map(|e| serde_json::to_string(e).unwrap()).collect();
    let (ok, text) = verify_in(dir, key, &lines);
    assert!(ok, "{text}");
}

#[test]
fn two_postgres_hosts_append_to_one_chain() {
    if let Ok(n) = std::env::var(CHILD_ENV) {
        child(n.parse().unwrap());
        return;
    }
    let pg = common::pg::Pg::start();
    let url = pg.database("audit");
    let tmp = tempfile::tempdir().unwrap();
    let a = pg.config(&tmp.path().join("a"), &url, 10, 100);
    let b = pg.config(&tmp.path().join("b"), &url, 10, 100);
    std::env::set_var("FERROHSM_CONF", &a);
    let (lines, key) = signed_log_at(&a, tmp.path());
    let test = "two_postgres_hosts_append_to_one_chain";
    race(test, [&a, &b], tmp.path(), &key, lines.len());
}

#[test]
fn records_of_calls_through_the_server_name_the_client() {
    let w = common::remote::World::new();
    let store = w.env.conf();
    w.client("signer");
    let p = load();
    let alpha = common::remote::slot_of(&p, "alpha").expect("alpha is served");
    let s = user_session(&p, alpha);
    aes_key(&s, "remote", &[]);
    p.finalize().unwrap();
    let (ok, text) = audit(&store, &["export", "--token", "alpha"]);
    assert!(ok, "{text}");
    let made: Vec<Entry> = text
        .lines()
        .map(|l| serde_json::from_str::<Entry>(l).unwrap())
        .filter(|e| e.record.event == "generate_key")
        .collect();
    assert_eq!(made.len(), 1, "{text}");
    let r = &made[0].record;
    // Written by the server's process, on behalf of the client its certificate names.
    assert_ne!(r.pid, std::process::id());
    assert!(r.client.as_deref().is_some_and(|c| c.contains("signer")), "{r:?}");
}

#[test]
fn a_writer_killed_mid_write_leaves_a_valid_chain_and_no_change_without_its_record() {
    if let Ok(n) = std::env::var(CHILD_ENV) {
        child(n.parse().unwrap());
        return;
    }
    let t = env();
    let (_, key) = signed_log(&t);
    let mut writer = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_writer_killed_mid_write_leaves_a_valid_chain_and_no_change_without_its_record",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, "100000")
        .env("FERROHSM_CONF", t.conf())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(400));
    writer.kill().unwrap();
    let _ = writer.wait();
    let log = export(&t.conf());
    let lines: Vec<String> = log.iter().map(|e| serde_json::to_string(e).unwrap()).collect();
    let (ok, text) = verify(&t, &key, &lines);
    assert!(ok, "{text}");
    assert!(
        log.iter().any(|e| e.record.event == "destroy_object"),
        "the writer wrote nothing"
    );
    // Every object left has the record of its creation and none of its destruction.
    let p = load();
    let s = p.open_ro_session(p.get_slots_with_token().unwrap()[0]).unwrap();
    for o in s.find_objects(&[Attribute::Class(ObjectClass::DATA)]).unwrap() {
        let id = o.handle();
        let events: Vec<&str> = log
            .iter()
            .filter(|e| e.record.object == Some(id))
            .map(|e| e.record.event.as_str())
            .collect();
        assert_eq!(events, ["create_object"], "object {id}");
    }
}
