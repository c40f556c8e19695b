//! Changes of one token object racing from two processes (one SQLite store) and from two
//! hosts (two processes with their own configuration on one PostgreSQL store): no change is
//! lost and no one-way flag comes undone.
//!
//! Two writers change the same keys for `ROUNDS` rounds: one sets `CKA_LABEL` to the round's
//! number, the other `CKA_ID`, and on its first pass over each key also `CKA_SENSITIVE` true.
//! Each reads back what it just wrote: a value that is not its own means the other writer
//! wrote back an older copy of the object over it (a lost change). At the end every key holds
//! both writers' last values and stays sensitive. Before changes were written over the
//! version read, hundreds of such rounds in a thousand lost one.
//!
//! The writers are child processes (this test binary again) that say READY and start when the
//! parent writes a line to their standard input.

mod common;

use common::pg::Pg;
use common::race::{read_until, start_together};
use common::*;
use cryptoki::object::{Attribute, AttributeType, ObjectClass, ObjectHandle};
use cryptoki::session::Session;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Set in writer processes: `label` or `id`.
const WRITER_ENV: &str = "FERROHSM_CHANGE_WRITER";
/// Set in writer processes: how many rounds.
const ROUNDS_ENV: &str = "FERROHSM_CHANGE_ROUNDS";
const LABEL: &str = "changes";
/// Keys changed in turn: each round writes every one of them once.
const KEYS: usize = 4;
/// Changes each writer makes: `ROUNDS` rounds of `KEYS` keys. 10,000 by default.
fn rounds() -> usize {
    std::env::var(ROUNDS_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000 / KEYS)
}

fn session() -> Session {
    let p = load();
    let slot = p
        .get_slots_with_initialized_token()
        .unwrap()
        .into_iter()
        .find(|s| p.get_token_info(*s).unwrap().label() == LABEL)
        .expect("the token");
    // The context outlives the session: it is kept for the whole process.
    let p: &'static cryptoki::context::Pkcs11 = Box::leak(Box::new(p));
    user_session(p, slot)
}

fn keys(s: &Session) -> Vec<ObjectHandle> {
    let mut found = s
        .find_objects(&[Attribute::Class(ObjectClass::SECRET_KEY), Attribute::Token(true)])
        .unwrap();
    found.sort_by_key(|h| h.handle());
    assert_eq!(found.len(), KEYS);
    found
}

fn read(s: &Session, key: ObjectHandle, t: AttributeType) -> Vec<u8> {
    match s.get_attributes(key, &[t]).unwrap().pop() {
        Some(Attribute::Label(v) | Attribute::Id(v)) => v,
        other => panic!("{t:?}: {other:?}"),
    }
}

fn sensitive(s: &Session, key: ObjectHandle) -> bool {
    matches!(
        s.get_attributes(key, &[AttributeType::Sensitive]).unwrap()[..],
        [Attribute::Sensitive(true)]
    )
}

/// The parent's part before the race: the keys, extractable and not sensitive.
fn make_keys() {
    let s = session();
    for i in 0..KEYS {
        s.create_object(&[
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(cryptoki::object::KeyType::AES),
            Attribute::Token(true),
            Attribute::Private(true),
            Attribute::Sensitive(false),
            Attribute::Extractable(true),
            Attribute::Value(vec![i as u8; 16]),
            Attribute::Label(b"0".to_vec()),
            Attribute::Id(b"0".to_vec()),
        ])
        .unwrap();
    }
}

/// A writer's part: prints `LOST n` (changes of its own it did not read back).
fn writer(which: &str) {
    let s = session();
    let keys = keys(&s);
    println!("READY");
    std::io::stdout().flush().unwrap();
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    let mut lost = 0;
    for round in 1..=rounds() {
        let value = round.to_string().into_bytes();
        for &key in &keys {
            let (mut change, t) = match which {
                "label" => (vec![Attribute::Label(value.clone())], AttributeType::Label),
                _ => (vec![Attribute::Id(value.clone())], AttributeType::Id),
            };
            if which == "id" && round == 1 {
                change.push(Attribute::Sensitive(true));
            }
            s.update_attributes(key, &change).unwrap();
            if read(&s, key, t) != value {
                lost += 1;
            }
        }
    }
    println!("LOST {lost}");
}

/// In a child process: plays its part and says so.
fn child_part() -> bool {
    let Ok(which) = std::env::var(WRITER_ENV) else {
        return false;
    };
    match which.as_str() {
        "make" => {
            make_keys();
            println!("MADE");
        }
        w => writer(w),
    }
    true
}

fn child(test: &str, conf: &Path, which: &str) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env(WRITER_ENV, which)
        .env(ROUNDS_ENV, rounds().to_string())
        .env("FERROHSM_CONF", conf)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The race on `confs` (one per host; the writers take them in turn).
fn race(test: &str, confs: &[PathBuf]) {
    util(
        &confs[0],
        &[
            "init-token",
            "--free",
            "--label",
            LABEL,
            "--so-pin",
            SO_PIN,
            "--pin",
            USER_PIN,
        ],
    );
    let mut maker = child(test, &confs[0], "make");
    let mut out = BufReader::new(maker.stdout.take().unwrap());
    read_until(&mut out, "MADE");
    std::io::copy(&mut out, &mut std::io::sink()).unwrap();
    assert!(maker.wait().unwrap().success());
    let mut writers: Vec<_> = ["label", "id"]
        .iter()
        .enumerate()
        .map(|(i, w)| child(test, &confs[i % confs.len()], w))
        .collect();
    let mut outs = start_together(&mut writers);
    let lost: Vec<usize> = outs
        .iter_mut()
        .map(|o| read_until(o, "LOST ").parse().unwrap())
        .collect();
    for (w, o) in writers.iter_mut().zip(&mut outs) {
        std::io::copy(o, &mut std::io::sink()).unwrap();
        assert!(w.wait().unwrap().success());
    }
    assert_eq!(lost, vec![0, 0], "changes lost by the label and the id writer");
    // Both writers' last values, and the one-way flag, on every key.
    std::env::set_var("FERROHSM_CONF", &confs[0]);
    let s = session();
    let last = rounds().to_string().into_bytes();
    for key in keys(&s) {
        assert_eq!(read(&s, key, AttributeType::Label), last);
        assert_eq!(read(&s, key, AttributeType::Id), last);
        assert!(sensitive(&s, key), "CKA_SENSITIVE came undone");
    }
}

#[test]
fn changes_racing_from_two_processes_on_sqlite_are_all_kept() {
    if child_part() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let conf = tmp.path().join("ferrohsm.toml");
    std::fs::write(
        &conf,
        "[store]\npath = \"store\"\n[pin]\nkdf_memory_kib = 64\nkdf_passes = 1\n",
    )
    .unwrap();
    race(
        "changes_racing_from_two_processes_on_sqlite_are_all_kept",
        &[conf],
    );
}

#[test]
fn changes_racing_from_two_postgres_hosts_are_all_kept() {
    if child_part() {
        return;
    }
    let pg = Pg::start();
    let url = pg.database("changes");
    let tmp = tempfile::tempdir().unwrap();
    let confs: Vec<_> = (0..2)
        .map(|h| pg.config(&tmp.path().join(format!("host{h}")), &url, 10, 1000))
        .collect();
    race("changes_racing_from_two_postgres_hosts_are_all_kept", &confs);
}
