//! The PostgreSQL backend against a real server (tests/common/pg.rs): "hosts" are processes
//! with configuration files of their own pointing at one database. Every test fails, never
//! skips, when PostgreSQL is not installed.

mod common;

use common::pg::Pg;
use common::*;
use cryptoki::error::RvError;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, ObjectClass};
use cryptoki::session::UserType;
use cryptoki::types::AuthPin;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The staleness bound the tests configure (`store.refresh_ms`).
const REFRESH_MS: u32 = 300;
/// Set in child processes: the role they play.
const ROLE_ENV: &str = "FERROHSM_PG_ROLE";

fn pin(s: &str) -> AuthPin {
    AuthPin::new(s.into())
}

/// pkcs11-tool on the host whose configuration is `conf`.
fn tool(conf: &Path, args: &[&str]) -> Output {
    let out = Command::new("pkcs11-tool")
        .arg("--module")
        .arg(module_path())
        .args(args)
        .env("FERROHSM_CONF", conf)
        .output()
        .expect("pkcs11-tool (Debian package opensc) must be installed");
    assert!(
        out.status.success(),
        "pkcs11-tool {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs this test binary's test `name` as a child process with `role` and `conf`.
fn child(name: &str, role: &str, conf: &Path) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", name, "--nocapture", "--test-threads", "1"])
        .env(ROLE_ENV, role)
        .env("FERROHSM_CONF", conf);
    c
}

#[test]
fn a_key_made_by_pkcs11_tool_on_host_a_signs_on_host_b_and_is_gone_there_after_a_destroys_it() {
    let pg = Pg::start();
    let url = pg.database("hosts");
    let tmp = tempfile::tempdir().unwrap();
    let a = pg.config(&tmp.path().join("a"), &url, 10, REFRESH_MS);
    let b = pg.config(&tmp.path().join("b"), &url, 10, REFRESH_MS);
    tool(&a, &["--init-token", "--label", "fleet", "--so-pin", SO_PIN]);
    tool(
        &a,
        &[
            "--token-label",
            "fleet",
            "--login",
            "--login-type",
            "so",
            "--so-pin",
            SO_PIN,
            "--init-pin",
            "--pin",
            USER_PIN,
        ],
    );
    tool(
        &a,
        &[
            "--token-label",
            "fleet",
            "--login",
            "--pin",
            USER_PIN,
            "--keypairgen",
            "--key-type",
            "rsa:2048",
            "--id",
            "a1",
            "--label",
            "fleet-zsk",
        ],
    );
    // Host B signs with pkcs11-tool; OpenSSL verifies with the public key read on host A.
    let p = |f: &str| tmp.path().join(f).display().to_string();
    std::fs::write(tmp.path().join("data"), b"signed on host B\n").unwrap();
    tool(
        &b,
        &[
            "--token-label",
            "fleet",
            "--login",
            "--pin",
            USER_PIN,
            "--sign",
            "-m",
            "SHA256-RSA-PKCS",
            "--id",
            "a1",
            "--input-file",
            &p("data"),
            "--output-file",
            &p("sig"),
        ],
    );
    tool(
        &a,
        &[
            "--token-label",
            "fleet",
            "--read-object",
            "--type",
            "pubkey",
            "--id",
            "a1",
            "--output-file",
            &p("pub.der"),
        ],
    );
    assert!(openssl(&[
        "pkey",
        "-pubin",
        "-inform",
        "DER",
        "-in",
        &p("pub.der"),
        "-out",
        &p("pub.pem")
    ]));
    assert!(openssl(&[
        "dgst",
        "-sha256",
        "-verify",
        &p("pub.pem"),
        "-signature",
        &p("sig"),
        &p("data")
    ]));

    // Host B as a long-running signer (this process): the key is prepared and cached.
    std::env::set_var("FERROHSM_CONF", &b);
    let pk = load();
    let slot = pk.get_slots_with_initialized_token().unwrap()[0];
    let s = user_session(&pk, slot);
    let key = find_one(&s, ObjectClass::PRIVATE_KEY, &[0xa1]);
    let public = find_one(&s, ObjectClass::PUBLIC_KEY, &[0xa1]);
    let rsa_pk = rsa_public(&s, public);
    for i in 0..20 {
        use sha2::{Digest, Sha256};
        let msg = format!("message {i}");
        let sig = s.sign(&Mechanism::Sha256RsaPkcs, key, msg.as_bytes()).unwrap();
        rsa_pk
            .verify(
                rsa::pkcs1v15::Pkcs1v15Sign::new::<Sha256>(),
                &Sha256::digest(msg.as_bytes()),
                &sig,
            )
            .unwrap();
    }
    // Destroyed on host A: gone on B within the bound.
    tool(
        &a,
        &[
            "--token-label",
            "fleet",
            "--login",
            "--pin",
            USER_PIN,
            "--delete-object",
            "--type",
            "privkey",
            "--id",
            "a1",
        ],
    );
    let deleted = Instant::now();
    let (gone, last_signed) = signs_until_refused(&s, key, deleted, "the destroy");
    eprintln!("host B saw the destroy after {gone:?} (bound {REFRESH_MS} ms)");
    assert!(
        last_signed <= Duration::from_millis(REFRESH_MS as u64) + SLACK,
        "host B still signed with a call started {last_signed:?} after the destroy"
    );
    let found = s
        .find_objects(&[
            Attribute::Class(ObjectClass::PRIVATE_KEY),
            Attribute::Id(vec![0xa1]),
        ])
        .unwrap();
    assert!(found.is_empty());
    // A key made on B is seen by A at once (pkcs11-tool starts afresh).
    let (_, _) = rsa_keypair(&s, 1024, b"b2", true);
    let listed = tool(
        &a,
        &[
            "--token-label",
            "fleet",
            "--login",
            "--pin",
            USER_PIN,
            "--list-objects",
            "--type",
            "privkey",
        ],
    );
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("6232"),
        "{}",
        String::from_utf8_lossy(&listed.stdout)
    );
    // No password in any log line of either host.
    for host in ["a", "b"] {
        let log = std::fs::read_to_string(tmp.path().join(host).join("ferrohsm.log")).unwrap_or_default();
        if let Some(pw) = pg.password() {
            assert!(!log.contains(pw), "host {host} logged the password:\n{log}");
        }
    }
}

/// Signs with `key` until a call is refused because the key is gone (a change made at
/// `changed` by another host): when the refusal came, and when the last call that still
/// signed had started, both after `changed`. The bound of `store.refresh_ms` is about when
/// a call starts: one that starts later than the bound after a change must see it. Timing
/// the call that fails instead would also count how long this loop slept or was descheduled
/// on a busy machine, which the bound does not promise.
fn signs_until_refused(
    s: &cryptoki::session::Session,
    key: cryptoki::object::ObjectHandle,
    changed: Instant,
    what: &str,
) -> (Duration, Duration) {
    let mut last_signed = Duration::ZERO;
    loop {
        let started = changed.elapsed();
        match s.sign(&Mechanism::Sha256RsaPkcs, key, b"after") {
            Err(e) => {
                let r = rv(e);
                assert!(
                    matches!(r, RvError::KeyHandleInvalid | RvError::ObjectHandleInvalid),
                    "{r}"
                );
                return (changed.elapsed(), last_signed);
            }
            Ok(_) => {
                last_signed = started;
                assert!(
                    changed.elapsed() < Duration::from_secs(30),
                    "host B still signs 30 s after {what}"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// The clocks' granularity: the module and this test both read the monotonic clock.
const SLACK: Duration = Duration::from_millis(5);

const MAX_FAILURES: u32 = 5;
const GUESSERS: &str = "wrong_pins_from_two_hosts_together_lock_after_max_failures_in_total";

/// A guessing process: 3 threads of 3 wrong PINs each, released at the time given.
fn guesser(start_ms: u128) {
    let p = load();
    let slot = p.get_slots_with_initialized_token().unwrap()[0];
    while std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        < start_ms
    {
        std::thread::sleep(Duration::from_millis(2));
    }
    let (mut incorrect, mut locked, mut other) = (0, 0, Vec::new());
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..3)
            .map(|t| {
                let p = &p;
                sc.spawn(move || {
                    (0..3)
                        .map(|i| {
                            let s = p.open_ro_session(slot).unwrap();
                            s.login(UserType::User, Some(&pin(&format!("wrong-{t}-{i}"))))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in hs {
            for r in h.join().unwrap() {
                match r.map_err(rv) {
                    Err(RvError::PinIncorrect) => incorrect += 1,
                    Err(RvError::PinLocked) => locked += 1,
                    other_rv => other.push(format!("{other_rv:?}")),
                }
            }
        }
    });
    println!(
        "TALLY incorrect={incorrect} locked={locked} other={}",
        other.len()
    );
    assert!(other.is_empty(), "{other:?}");
}

#[test]
fn wrong_pins_from_two_hosts_together_lock_after_max_failures_in_total() {
    if let Ok(role) = std::env::var(ROLE_ENV) {
        return guesser(role.parse().unwrap());
    }
    let pg = Pg::start();
    let url = pg.database("lockout");
    let tmp = tempfile::tempdir().unwrap();
    let a = pg.config(&tmp.path().join("a"), &url, MAX_FAILURES, REFRESH_MS);
    let b = pg.config(&tmp.path().join("b"), &url, MAX_FAILURES, REFRESH_MS);
    std::env::set_var("FERROHSM_CONF", &a);
    let p = load();
    let slot = new_token(&p, "fleet");
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 2000;
    let children: Vec<_> = [&a, &a, &b, &b]
        .iter()
        .map(|conf| {
            child(GUESSERS, &start.to_string(), conf)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let (mut incorrect, mut locked) = (0, 0);
    for c in children {
        let out = c.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "guesser failed: {text}");
        let line = text
            .lines()
            .find_map(|l| l.split_once("TALLY ").map(|(_, t)| t.to_string()))
            .unwrap_or_else(|| panic!("no tally: {text}"));
        let field = |name: &str| -> u32 {
            line.split_whitespace()
                .find_map(|f| f.strip_prefix(&format!("{name}=")))
                .unwrap()
                .parse()
                .unwrap()
        };
        incorrect += field("incorrect");
        locked += field("locked");
    }
    assert_eq!(
        incorrect, MAX_FAILURES,
        "{incorrect} wrong answers in total ({locked} locked)"
    );
    assert_eq!(incorrect + locked, 4 * 3 * 3);
    // Locked on both hosts, for the right PIN too.
    let s = p.open_rw_session(slot).unwrap();
    assert_eq!(
        rv(s.login(UserType::User, Some(&pin(USER_PIN))).unwrap_err()),
        RvError::PinLocked
    );
    let out = Command::new("pkcs11-tool")
        .arg("--module")
        .arg(module_path())
        .args([
            "--token-label",
            "fleet",
            "--login",
            "--pin",
            USER_PIN,
            "--list-objects",
        ])
        .env("FERROHSM_CONF", &b)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("CKR_PIN_LOCKED"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits for `done`, however slow the machine; fails after a minute with `what`.
fn wait_until(done: impl Fn() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "{what} within 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_server_restarted_during_a_16_thread_signing_run_breaks_nothing() {
    use rsa::pkcs1v15::Pkcs1v15Sign;
    use sha2::{Digest, Sha256};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    let pg = Pg::private();
    let url = pg.database("restart");
    let tmp = tempfile::tempdir().unwrap();
    let conf = pg.config(tmp.path(), &url, 10, REFRESH_MS);
    std::env::set_var("FERROHSM_CONF", &conf);
    let p = load();
    let slot = new_token(&p, "fleet");
    // A second token, not logged in: its login goes to the store while the server is down.
    let other = new_token(&p, "other");
    let s = user_session(&p, slot);
    let (public, private) = rsa_keypair(&s, 2048, b"k", true);
    let pk = rsa_public(&s, public);
    let stop = AtomicBool::new(false);
    let (signed, failed, signed_while_down) = (AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0));
    let down = AtomicBool::new(false);
    let warmed = AtomicUsize::new(0);
    /// Stops the signers however the scope ends: a failed assertion must not leave them
    /// running forever.
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, SeqCst);
        }
    }
    std::thread::scope(|sc| {
        let _stop = StopOnDrop(&stop);
        for t in 0..16 {
            let (p, pk, stop, signed, failed, down, signed_while_down, warmed) = (
                &p,
                &pk,
                &stop,
                &signed,
                &failed,
                &down,
                &signed_while_down,
                &warmed,
            );
            sc.spawn(move || {
                let s = p.open_ro_session(slot).unwrap();
                let mut i = 0u64;
                let mut first = true;
                while !stop.load(SeqCst) {
                    let msg = format!("{t} {i}");
                    i += 1;
                    match s.sign(&Mechanism::Sha256RsaPkcs, private, msg.as_bytes()) {
                        Ok(sig) => {
                            pk.verify(
                                Pkcs1v15Sign::new::<Sha256>(),
                                &Sha256::digest(msg.as_bytes()),
                                &sig,
                            )
                            .expect("a wrong signature");
                            signed.fetch_add(1, SeqCst);
                            if std::mem::take(&mut first) {
                                warmed.fetch_add(1, SeqCst);
                            }
                            if down.load(SeqCst) {
                                signed_while_down.fetch_add(1, SeqCst);
                            }
                        }
                        Err(e) => {
                            assert_eq!(
                                rv(e),
                                RvError::DeviceError,
                                "signing failed otherwise than with CKR_DEVICE_ERROR"
                            );
                            failed.fetch_add(1, SeqCst);
                        }
                    }
                }
            });
        }
        // Every thread has signed (its session and the key are set up) before the server
        // goes: what the test asks of an outage is that signing goes on, not that it starts.
        wait_until(
            || warmed.load(SeqCst) == 16,
            "not every thread signed before the restart",
        );
        pg.stop();
        down.store(true, SeqCst);
        // While it is down: logins and writes fail with CKR_DEVICE_ERROR; signing goes on,
        // past several refresh periods (each tries the server once).
        std::thread::sleep(Duration::from_millis(REFRESH_MS as u64 * 3));
        wait_until(
            || signed_while_down.load(SeqCst) > 0,
            "no signature while the server was down",
        );
        let w = p.open_rw_session(other).unwrap();
        assert_eq!(
            rv(w.login(UserType::User, Some(&pin(USER_PIN))).unwrap_err()),
            RvError::DeviceError
        );
        let data = [
            Attribute::Class(ObjectClass::DATA),
            Attribute::Token(true),
            Attribute::Value(b"x".to_vec()),
        ];
        assert_eq!(rv(s.create_object(&data).unwrap_err()), RvError::DeviceError);
        down.store(false, SeqCst);
        pg.start_again();
        let before = signed.load(SeqCst);
        wait_until(
            || signed.load(SeqCst) > before + 16,
            "no signature after the restart",
        );
        stop.store(true, SeqCst);
    });
    eprintln!(
        "signed {} ({} while the server was down), failed {}",
        signed.load(SeqCst),
        signed_while_down.load(SeqCst),
        failed.load(SeqCst)
    );
    assert!(
        signed_while_down.load(SeqCst) > 0,
        "no signature while the server was down"
    );
    // Recovered by itself: a login, a write and a search work again.
    let w = p.open_rw_session(other).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match w.login(UserType::User, Some(&pin(USER_PIN))) {
            Ok(()) | Err(cryptoki::error::Error::Pkcs11(RvError::UserAlreadyLoggedIn, _)) => break,
            Err(e) if Instant::now() < deadline => {
                eprintln!("login after restart: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("no recovery: {e}"),
        }
    }
    let data = [
        Attribute::Class(ObjectClass::DATA),
        Attribute::Token(true),
        Attribute::Label(b"after".to_vec()),
        Attribute::Value(b"x".to_vec()),
    ];
    w.create_object(&data).unwrap();
    assert_eq!(
        w.find_objects(&[Attribute::Label(b"after".to_vec())])
            .unwrap()
            .len(),
        1
    );
    let log = std::fs::read_to_string(tmp.path().join("ferrohsm.log")).unwrap();
    assert!(
        log.contains("cannot connect"),
        "no log line for the outage:\n{log}"
    );
    assert!(
        log.contains("reachable again"),
        "no log line for the recovery:\n{log}"
    );
    assert!(!log.contains(common::pg::PASSWORD), "the password is in the log");
}

const WRITER: &str = "a_writer_killed_mid_transaction_loses_nothing_it_reported_created";

/// Creates data objects until killed, printing the label of each one the module reported
/// created.
fn writer() {
    use std::io::Write;
    let p = load();
    let slot = p.get_slots_with_initialized_token().unwrap()[0];
    let s = user_session(&p, slot);
    for i in 0.. {
        let label = format!("obj-{i}");
        s.create_object(&[
            Attribute::Class(ObjectClass::DATA),
            Attribute::Token(true),
            Attribute::Label(label.clone().into_bytes()),
            Attribute::Value(vec![0x5a; 4096]),
        ])
        .unwrap();
        println!("CREATED {label}");
        std::io::stdout().flush().unwrap();
    }
}

#[test]
fn a_writer_killed_mid_transaction_loses_nothing_it_reported_created() {
    use std::io::BufRead;
    if std::env::var(ROLE_ENV).is_ok() {
        return writer();
    }
    let pg = Pg::start();
    let url = pg.database("kill");
    let tmp = tempfile::tempdir().unwrap();
    let conf = pg.config(tmp.path(), &url, 10, REFRESH_MS);
    std::env::set_var("FERROHSM_CONF", &conf);
    let p = load();
    let slot = new_token(&p, "fleet");
    let mut reported = Vec::new();
    for round in 0..3 {
        let mut c = child(WRITER, "writer", &conf)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = std::io::BufReader::new(c.stdout.take().unwrap());
        let target = 20 + round * 7;
        let mut n = 0;
        for line in out.lines() {
            let line = line.unwrap();
            if let Some(l) = line.split("CREATED ").nth(1) {
                reported.push(l.to_string());
                n += 1;
                if n == target {
                    // SAFETY: kill(2) on our own child's pid.
                    unsafe { libc::kill(c.id() as i32, libc::SIGKILL) };
                    break;
                }
            }
        }
        c.wait().unwrap();
    }
    let s = user_session(&p, slot);
    let found = s.find_objects(&[Attribute::Class(ObjectClass::DATA)]).unwrap();
    let mut labels = Vec::new();
    for h in found {
        let attrs = s
            .get_attributes(
                h,
                &[
                    cryptoki::object::AttributeType::Label,
                    cryptoki::object::AttributeType::Value,
                ],
            )
            .unwrap();
        for a in attrs {
            match a {
                Attribute::Label(l) => labels.push(String::from_utf8(l).unwrap()),
                // No half-written object: every value is whole.
                Attribute::Value(v) => assert_eq!(v, vec![0x5a; 4096]),
                _ => {}
            }
        }
    }
    for r in &reported {
        assert!(labels.contains(r), "{r} was reported created and is gone");
    }
    // The killed writers held no lock that outlived them.
    s.create_object(&[
        Attribute::Class(ObjectClass::DATA),
        Attribute::Token(true),
        Attribute::Value(vec![1]),
    ])
    .unwrap();
}

#[test]
fn a_dump_of_the_database_holds_no_private_label_prime_or_pin_in_clear() {
    let pg = Pg::start();
    let url = pg.database("dump");
    let tmp = tempfile::tempdir().unwrap();
    let conf = pg.config(tmp.path(), &url, 10, REFRESH_MS);
    std::env::set_var("FERROHSM_CONF", &conf);
    let (so, user) = ("so-Pin-Zq81x", "user-Pin-Kw27v");
    let p = load();
    let slot = p.get_all_slots().unwrap()[0];
    p.init_token(slot, &pin(so), "dumped").unwrap();
    let s = p.open_rw_session(slot).unwrap();
    s.login(UserType::So, Some(&pin(so))).unwrap();
    s.init_pin(&pin(user)).unwrap();
    s.logout().unwrap();
    s.login(UserType::User, Some(&pin(user))).unwrap();
    // Generated by the module, not sensitive, so the test can read the primes back.
    let label = b"private-label-Hx93";
    let (_, private) = s
        .generate_key_pair(
            &Mechanism::RsaPkcsKeyPairGen,
            &[
                Attribute::Token(true),
                Attribute::ModulusBits(2048.into()),
                Attribute::PublicExponent(vec![1, 0, 1]),
                Attribute::Verify(true),
            ],
            &[
                Attribute::Token(true),
                Attribute::Private(true),
                Attribute::Sensitive(false),
                Attribute::Extractable(true),
                Attribute::Sign(true),
                Attribute::Label(label.to_vec()),
                Attribute::Id(b"dump-id".to_vec()),
            ],
        )
        .unwrap();
    use cryptoki::object::AttributeType as T;
    let mut secrets = Vec::new();
    for a in s
        .get_attributes(private, &[T::Prime1, T::Prime2, T::PrivateExponent])
        .unwrap()
    {
        match a {
            Attribute::Prime1(v) => secrets.push(("prime 1", v)),
            Attribute::Prime2(v) => secrets.push(("prime 2", v)),
            Attribute::PrivateExponent(v) => secrets.push(("private exponent", v)),
            _ => {}
        }
    }
    assert_eq!(secrets.len(), 3, "the primes could not be read back");
    let dump = pg.dump(&url);
    let hex = |b: &[u8]| {
        b.iter()
            .map(|x| format!("{x:02x}"))
            .collect::<String>()
            .into_bytes()
    };
    let has = |needle: &[u8]| dump.windows(needle.len()).any(|w| w == needle);
    // Bytea columns dump as hex: each secret is looked for in clear and in hex.
    secrets.extend([
        ("label", label.to_vec()),
        ("id", b"dump-id".to_vec()),
        ("SO PIN", so.as_bytes().to_vec()),
        ("user PIN", user.as_bytes().to_vec()),
    ]);
    for (what, v) in secrets {
        assert!(!has(&v), "the {what} is in the dump in clear");
        assert!(!has(&hex(&v)), "the {what} is in the dump in hex");
    }
    // The dump is of the right database: the token's label (public) is in it.
    assert!(has(&hex(b"dumped")), "the dump does not hold the token");
}

/// `ferrohsm-util` built beside the module.
fn util(conf: &Path, args: &[&str]) -> Output {
    let exe = module_path().parent().unwrap().join("ferrohsm-util");
    Command::new(exe)
        .args(args)
        .env("FERROHSM_CONF", conf)
        .env_remove("FERROHSM_STORE_URL")
        .output()
        .expect("ferrohsm-util is built with the crate")
}

/// Every attribute of every object of every token of the store `conf` names, after a user
/// login with `USER_PIN` (so the copied PINs are checked too), by token label and handle.
fn everything(conf: &Path) -> Vec<String> {
    use cryptoki::object::AttributeType as T;
    std::env::set_var("FERROHSM_CONF", conf);
    let p = load();
    let mut out = Vec::new();
    for slot in p.get_slots_with_initialized_token().unwrap() {
        let info = p.get_token_info(slot).unwrap();
        let s = user_session(&p, slot);
        for h in s.find_objects(&[]).unwrap() {
            let types = [
                T::Class,
                T::Token,
                T::Private,
                T::Label,
                T::Id,
                T::KeyType,
                T::Modulus,
                T::PublicExponent,
                T::Sensitive,
                T::Extractable,
                T::Sign,
                T::Verify,
                T::Encrypt,
                T::Decrypt,
                T::Wrap,
                T::Unwrap,
                T::Value,
                T::Application,
                T::Modifiable,
                T::Local,
                T::KeyGenMechanism,
                T::NeverExtractable,
                T::AlwaysSensitive,
                T::Prime1,
                T::Prime2,
                T::PrivateExponent,
                T::StartDate,
                T::EndDate,
                T::PublicKeyInfo,
            ];
            out.push(format!(
                "{} {} {h}: {:?}",
                info.label(),
                info.serial_number(),
                s.get_attributes(h, &types).unwrap()
            ));
        }
    }
    p.finalize().unwrap();
    out.sort();
    out
}

#[test]
fn copy_store_sqlite_to_postgres_to_sqlite_loses_no_attribute() {
    use rsa::pkcs1v15::Pkcs1v15Sign;
    use sha2::{Digest, Sha256};
    let pg = Pg::start();
    let url = pg.database("copy");
    let tmp = tempfile::tempdir().unwrap();
    // Configurations: SQLite stores A and C, and the PostgreSQL store between them.
    let sqlite_conf = |name: &str| {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("ferrohsm.toml");
        std::fs::write(
            &conf,
            "[store]\npath = \"store\"\n[pin]\nkdf_memory_kib = 64\nkdf_passes = 1\n",
        )
        .unwrap();
        (conf, dir.join("store").display().to_string())
    };
    let (a, a_dir) = sqlite_conf("a");
    let (c, c_dir) = sqlite_conf("c");
    let middle = pg.config(&tmp.path().join("pg"), &url, 10, REFRESH_MS);
    std::env::set_var("FERROHSM_CONF", &a);
    let (pk_a, signed_on_a) = {
        let p = load();
        let one = new_token(&p, "first");
        let two = new_token(&p, "second");
        let s = user_session(&p, one);
        let (public, private) = rsa_keypair(&s, 2048, b"k1", true);
        let (_, _) = rsa_keypair(&s, 1024, b"k2", true);
        s.create_object(&[
            Attribute::Class(ObjectClass::DATA),
            Attribute::Token(true),
            Attribute::Private(true),
            Attribute::Label(b"private data".to_vec()),
            Attribute::Application(b"app".to_vec()),
            Attribute::Value(b"secret value".to_vec()),
        ])
        .unwrap();
        let s2 = user_session(&p, two);
        s2.create_object(&[
            Attribute::Class(ObjectClass::DATA),
            Attribute::Token(true),
            Attribute::Label(b"public data".to_vec()),
            Attribute::Value(b"clear value".to_vec()),
        ])
        .unwrap();
        let pk = rsa_public(&s, public);
        let sig = s
            .sign(&Mechanism::Sha256RsaPkcs, private, b"before the copy")
            .unwrap();
        drop((s, s2));
        p.finalize().unwrap();
        (pk, sig)
    };
    let before = everything(&a);
    assert!(before.len() >= 6, "{before:#?}");

    // A dry run writes nothing.
    let out = util(
        &middle,
        &["copy-store", "--from", &a_dir, "--to", &url, "--dry-run"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("would copy 2 token(s)"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let rows: i64 = pg
        .client(&url)
        .query_one("SELECT count(*) FROM tokens", &[])
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "the dry run wrote tokens");

    let out = util(&middle, &["copy-store", "--from", &a_dir, "--to", &url]);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Never over a store that holds tokens.
    let again = util(&middle, &["copy-store", "--from", &a_dir, "--to", &url]);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("never overwrites"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(
        everything(&middle),
        before,
        "SQLite -> PostgreSQL changed something"
    );

    let out = util(&middle, &["copy-store", "--from", &url, "--to", &c_dir]);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(everything(&c), before, "PostgreSQL -> SQLite changed something");

    // The private key, which no attribute shows, signs as before on C.
    std::env::set_var("FERROHSM_CONF", &c);
    let p = load();
    let slot = p.get_slots_with_initialized_token().unwrap()[0];
    let s = user_session(&p, slot);
    let key = find_one(&s, ObjectClass::PRIVATE_KEY, b"k1");
    let sig = s
        .sign(&Mechanism::Sha256RsaPkcs, key, b"before the copy")
        .unwrap();
    assert_eq!(
        sig, signed_on_a,
        "PKCS#1 v1.5 is deterministic: the same key signs the same"
    );
    pk_a.verify(
        Pkcs1v15Sign::new::<Sha256>(),
        &Sha256::digest(b"before the copy"),
        &sig,
    )
    .unwrap();
    // New objects on the copy get ids after the copied ones.
    let h = s
        .create_object(&[
            Attribute::Class(ObjectClass::DATA),
            Attribute::Token(true),
            Attribute::Value(vec![1]),
        ])
        .unwrap();
    assert!(
        !before.iter().any(|l| l.contains(&format!(" {h}: "))),
        "id {h} reused"
    );
}

/// Backend pids of ferrohsm's sessions on the server.
fn ferrohsm_sessions(pg: &Pg, url: &str) -> std::collections::BTreeSet<i32> {
    pg.client(url)
        .query(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'ferrohsm'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[test]
fn a_forked_child_opens_sessions_of_its_own_and_leaves_the_parents_alone() {
    use cryptoki_sys::*;
    use std::ptr::null_mut;
    let pg = Pg::start();
    let url = pg.database("fork");
    let tmp = tempfile::tempdir().unwrap();
    let conf = pg.config(tmp.path(), &url, 10, REFRESH_MS);
    std::env::set_var("FERROHSM_CONF", &conf);
    let p = load();
    let slot = new_token(&p, "fork");
    let s = user_session(&p, slot);
    let (public, private) = rsa_keypair(&s, 2048, b"forked", true);
    let parents = ferrohsm_sessions(&pg, &url);
    assert!(!parents.is_empty());
    let r = Raw::load();
    let result = tmp.path().join("child-result");
    // SAFETY: the child calls only the module's C functions and async-signal-tolerant libc
    // functions before _exit, as the existing fork test does; it never returns into the
    // test harness.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0);
        if pid == 0 {
            let code = std::panic::catch_unwind(|| {
                assert_eq!((r.f.C_Initialize.unwrap())(null_mut()), CKR_OK);
                let mut h = 0;
                let flags = CKF_SERIAL_SESSION | CKF_RW_SESSION;
                assert_eq!(
                    (r.f.C_OpenSession.unwrap())(slot.id(), flags, null_mut(), None, &mut h),
                    CKR_OK
                );
                assert_eq!(
                    (r.f.C_Login.unwrap())(h, CKU_USER, USER_PIN.as_ptr() as *mut u8, 4),
                    CKR_OK
                );
                // A write from the child: a token data object.
                let mut class = CKO_DATA;
                let mut yes: CK_BBOOL = 1;
                let mut t = [
                    CK_ATTRIBUTE {
                        type_: CKA_CLASS,
                        pValue: &mut class as *mut _ as *mut _,
                        ulValueLen: 8,
                    },
                    CK_ATTRIBUTE {
                        type_: CKA_TOKEN,
                        pValue: &mut yes as *mut _ as *mut _,
                        ulValueLen: 1,
                    },
                    CK_ATTRIBUTE {
                        type_: CKA_LABEL,
                        pValue: b"from the child".as_ptr() as *mut _,
                        ulValueLen: 14,
                    },
                ];
                let mut obj = 0;
                assert_eq!(
                    (r.f.C_CreateObject.unwrap())(h, t.as_mut_ptr(), 3, &mut obj),
                    CKR_OK
                );
                let mut m = raw_mech::<u8>(CKM_SHA256_RSA_PKCS, None);
                assert_eq!((r.f.C_SignInit.unwrap())(h, &mut m, private.handle()), CKR_OK);
                let mut sig = [0u8; 256];
                let mut len = 256;
                assert_eq!(
                    (r.f.C_Sign.unwrap())(h, b"child".as_ptr() as *mut u8, 5, sig.as_mut_ptr(), &mut len),
                    CKR_OK
                );
                std::fs::write(&result, &sig[..len as usize]).unwrap();
                assert_eq!((r.f.C_Finalize.unwrap())(null_mut()), CKR_OK);
            });
            libc::_exit(if code.is_ok() { 0 } else { 1 });
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child failed"
        );
    }
    // Every session the parent had is still open on the server: the child neither used nor
    // closed them (a Terminate on the shared socket would have ended them).
    let after = ferrohsm_sessions(&pg, &url);
    assert!(
        parents.is_subset(&after),
        "the parent's sessions {parents:?} are not all in {after:?}"
    );
    // And the parent goes on: it sees the child's object, writes, signs.
    std::thread::sleep(Duration::from_millis(REFRESH_MS as u64 + 50));
    assert_eq!(
        s.find_objects(&[Attribute::Label(b"from the child".to_vec())])
            .unwrap()
            .len(),
        1
    );
    s.create_object(&[
        Attribute::Class(ObjectClass::DATA),
        Attribute::Token(true),
        Attribute::Value(vec![2]),
    ])
    .unwrap();
    use sha2::{Digest, Sha256};
    let pk = rsa_public(&s, public);
    let sig = std::fs::read(&result).unwrap();
    pk.verify(
        rsa::pkcs1v15::Pkcs1v15Sign::new::<Sha256>(),
        &Sha256::digest(b"child"),
        &sig,
    )
    .unwrap();
    let sig = s.sign(&Mechanism::Sha256RsaPkcs, private, b"parent").unwrap();
    pk.verify(
        rsa::pkcs1v15::Pkcs1v15Sign::new::<Sha256>(),
        &Sha256::digest(b"parent"),
        &sig,
    )
    .unwrap();
    assert!(
        parents.is_subset(&ferrohsm_sessions(&pg, &url)),
        "the parent lost a session"
    );
}

/// Makes a CA and a server certificate for `localhost` in `dir` (with openssl), owned by
/// `postgres` as the server requires for its key; returns the server settings for TLS.
fn tls_files(dir: &Path) -> String {
    let p = |f: &str| dir.join(f).display().to_string();
    for args in [
        vec![
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=test CA",
            "-keyout",
            &p("ca.key"),
            "-out",
            &p("ca.pem"),
        ],
        vec![
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            &p("server.key"),
            "-out",
            &p("server.csr"),
        ],
    ] {
        assert!(openssl(&args));
    }
    std::fs::write(dir.join("san.ext"), "subjectAltName=DNS:localhost\n").unwrap();
    assert!(openssl(&[
        "x509",
        "-req",
        "-in",
        &p("server.csr"),
        "-CA",
        &p("ca.pem"),
        "-CAkey",
        &p("ca.key"),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        &p("san.ext"),
        "-out",
        &p("server.pem"),
    ]));
    // Another CA, which did not sign the server's certificate.
    assert!(openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=other CA",
        "-keyout",
        &p("other.key"),
        "-out",
        &p("other.pem"),
    ]));
    let st = Command::new("chown")
        .args(["postgres:postgres", &p("server.key"), &p("server.pem")])
        .status()
        .unwrap();
    assert!(st.success());
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.join("server.key"), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    format!(
        "-c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
        p("server.pem"),
        p("server.key")
    )
}

#[test]
fn verify_full_talks_tls_to_a_server_whose_certificate_the_root_cert_signed_and_to_no_other() {
    let certs = tempfile::tempdir().unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(certs.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let settings = tls_files(certs.path());
    let pg = Pg::private_with(|_| settings);
    let url = pg.database("tls").replace("127.0.0.1", "localhost");
    let tmp = tempfile::tempdir().unwrap();
    let tls_conf = |name: &str, ca: &str| {
        let conf = pg.config(&tmp.path().join(name), &url, 10, REFRESH_MS);
        let text = std::fs::read_to_string(&conf).unwrap().replace(
            "sslmode = \"disable\"",
            &format!(
                "sslmode = \"verify-full\"\nroot_cert = \"{}\"",
                certs.path().join(ca).display()
            ),
        );
        std::fs::write(&conf, text).unwrap();
        conf
    };
    let good = tls_conf("good", "ca.pem");
    std::env::set_var("FERROHSM_CONF", &good);
    let p = load();
    let slot = new_token(&p, "tls");
    let s = user_session(&p, slot);
    rsa_keypair(&s, 1024, b"t", true);
    // Every session of ferrohsm on the server is encrypted.
    let rows = pg
        .client(&url)
        .query(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'ferrohsm'",
            &[],
        )
        .unwrap();
    assert!(!rows.is_empty());
    assert!(
        rows.iter().all(|r| r.get::<_, bool>(0)),
        "a ferrohsm session without TLS"
    );
    drop(s);
    p.finalize().unwrap();
    // A server certificate the configured CA did not sign: C_Initialize fails, and the log
    // says why.
    let bad = tls_conf("bad", "other.pem");
    std::env::set_var("FERROHSM_CONF", &bad);
    let p = cryptoki::context::Pkcs11::new(module_path()).unwrap();
    let e = p
        .initialize(cryptoki::context::CInitializeArgs::new(
            cryptoki::context::CInitializeFlags::OS_LOCKING_OK,
        ))
        .unwrap_err();
    assert_eq!(rv(e), RvError::GeneralError);
    // The logger is the process's first (the good configuration's file).
    let log: String = ["good", "bad"]
        .iter()
        .map(|h| std::fs::read_to_string(tmp.path().join(h).join("ferrohsm.log")).unwrap_or_default())
        .collect();
    assert!(
        log.contains("cannot connect") && log.contains("postgresql://postgres@localhost"),
        "{log}"
    );
    assert!(!log.contains(common::pg::PASSWORD), "{log}");
}

/// `C_InitToken` by host A while host B (this process) is logged in and signing: within
/// `bound` B's old key stops signing, B is logged out and sees the new label, a write
/// by B under its old login is refused (nothing sealed under the discarded token key),
/// and after A sets a new user PIN B logs in with it and signs with A's new key.
fn reinit_seen_by_a_running_host(a: &Path, b: &Path, bound: Duration) {
    const NEW_PIN: &str = "4321-new";
    let login = |conf: &Path, pin: &str, more: &[&str]| {
        let mut args = vec!["--token-label", "fleet", "--login", "--pin", pin];
        args.extend_from_slice(more);
        tool(conf, &args)
    };
    tool(a, &["--init-token", "--label", "fleet", "--so-pin", SO_PIN]);
    let so = [
        "--token-label",
        "fleet",
        "--login",
        "--login-type",
        "so",
        "--so-pin",
        SO_PIN,
    ];
    tool(a, &[&so[..], &["--init-pin", "--pin", USER_PIN]].concat());
    login(
        a,
        USER_PIN,
        &["--keypairgen", "--key-type", "rsa:2048", "--id", "c1"],
    );

    std::env::set_var("FERROHSM_CONF", b);
    let pk = load();
    let slot = pk.get_slots_with_initialized_token().unwrap()[0];
    let s = user_session(&pk, slot);
    let key = find_one(&s, ObjectClass::PRIVATE_KEY, &[0xc1]);
    s.sign(&Mechanism::Sha256RsaPkcs, key, b"before").unwrap();

    // Same label, same SO PIN: only the re-initialisation itself tells the hosts apart.
    tool(a, &["--init-token", "--label", "fleet", "--so-pin", SO_PIN]);
    let reinit = Instant::now();
    let (seen, last_signed) = signs_until_refused(&s, key, reinit, "the re-init");
    eprintln!("host B saw the re-initialisation after {seen:?} (bound {bound:?})");
    assert!(
        last_signed <= bound + SLACK,
        "host B still signed with a call started {last_signed:?} after the re-init"
    );
    let info = pk.get_token_info(slot).unwrap();
    assert!(
        !info.user_pin_initialized(),
        "the re-initialised token has no user PIN yet"
    );
    assert_eq!(
        s.get_session_info().unwrap().session_state(),
        cryptoki::session::SessionState::RwPublic,
        "host B is logged out"
    );
    assert!(s
        .find_objects(&[Attribute::Class(ObjectClass::PRIVATE_KEY)])
        .unwrap()
        .is_empty());
    let private = s.create_object(&[
        Attribute::Class(ObjectClass::DATA),
        Attribute::Token(true),
        Attribute::Private(true),
        Attribute::Value(b"sealed under the old key?".to_vec()),
    ]);
    assert_eq!(rv(private.unwrap_err()), RvError::UserNotLoggedIn);
    assert_eq!(
        rv(s.login(UserType::User, Some(&pin(USER_PIN))).unwrap_err()),
        RvError::UserPinNotInitialized
    );

    tool(a, &[&so[..], &["--init-pin", "--pin", NEW_PIN]].concat());
    login(
        a,
        NEW_PIN,
        &["--keypairgen", "--key-type", "rsa:2048", "--id", "c2"],
    );
    s.login(UserType::User, Some(&pin(NEW_PIN))).unwrap();
    let key2 = find_one(&s, ObjectClass::PRIVATE_KEY, &[0xc2]);
    let public = rsa_public(&s, find_one(&s, ObjectClass::PUBLIC_KEY, &[0xc2]));
    use sha2::{Digest, Sha256};
    let sig = s.sign(&Mechanism::Sha256RsaPkcs, key2, b"new token").unwrap();
    public
        .verify(
            rsa::pkcs1v15::Pkcs1v15Sign::new::<Sha256>(),
            &Sha256::digest(b"new token"),
            &sig,
        )
        .unwrap();
    // An object B makes now opens on A: it was sealed under the new token key.
    let (_, _) = rsa_keypair(&s, 1024, &[0xc3], true);
    let listed = login(a, NEW_PIN, &["--list-objects", "--type", "privkey"]);
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("ID:         c3"),
        "{}",
        String::from_utf8_lossy(&listed.stdout)
    );
    drop(s);
    pk.finalize().unwrap();
}

#[test]
fn a_re_initialisation_on_one_postgres_host_is_seen_by_a_running_signer_on_another() {
    let pg = Pg::start();
    let url = pg.database("reinit");
    let tmp = tempfile::tempdir().unwrap();
    let a = pg.config(&tmp.path().join("a"), &url, 10, REFRESH_MS);
    let b = pg.config(&tmp.path().join("b"), &url, 10, REFRESH_MS);
    let log = tmp.path().join("a/ferrohsm.log");
    let r = std::panic::catch_unwind(|| {
        reinit_seen_by_a_running_host(&a, &b, Duration::from_millis(REFRESH_MS as u64))
    });
    eprintln!("{}", std::fs::read_to_string(log).unwrap_or_default());
    r.unwrap();
}

#[test]
fn a_re_initialisation_by_one_process_on_an_sqlite_store_is_seen_by_a_running_signer() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let conf = |host: &str| {
        let dir = tmp.path().join(host);
        std::fs::create_dir_all(&dir).unwrap();
        let c = dir.join("ferrohsm.toml");
        std::fs::write(
            &c,
            format!(
                "[store]\npath = \"{}\"\n[pin]\nkdf_memory_kib = 64\nkdf_passes = 1\n",
                store.display()
            ),
        )
        .unwrap();
        c
    };
    // SQLite has no refresh interval: the next object access reads the generation.
    reinit_seen_by_a_running_host(&conf("a"), &conf("b"), Duration::ZERO);
}

/// The failover form of `store.url` the Fleet docs give: two servers listed, the first one
/// read-only (as a standby is) and then stopped. ferrohsm writes to the one that accepts
/// writes, and a host started after the first server is gone still finds the token.
#[test]
fn a_url_listing_a_read_only_server_first_writes_to_the_one_that_accepts_writes() {
    let (standby, primary) = (Pg::private(), Pg::private());
    let name = format!("failover_{}", std::process::id());
    standby.database_named(&name);
    primary.database_named(&name);
    standby.set_read_only(true);
    let url = format!(
        "postgresql://postgres@127.0.0.1:{},127.0.0.1:{}/{name}?target_session_attrs=read-write",
        standby.port().unwrap(),
        primary.port().unwrap()
    );
    let tmp = tempfile::tempdir().unwrap();
    let conf = primary.config(tmp.path(), &url, 10, REFRESH_MS);
    tool(
        &conf,
        &["--init-token", "--label", "failover", "--so-pin", SO_PIN],
    );
    let tokens = |pg: &Pg| -> i64 {
        let url = format!("{}/{name}", pg_base(pg));
        let mut c = pg.client(&url);
        let exists: bool = c
            .query_one("SELECT to_regclass('tokens') IS NOT NULL", &[])
            .unwrap()
            .get(0);
        if !exists {
            return 0;
        }
        c.query_one("SELECT count(*) FROM tokens", &[]).unwrap().get(0)
    };
    assert_eq!(tokens(&primary), 1, "the token is on the writable server");
    assert_eq!(tokens(&standby), 0, "nothing was written to the read-only one");
    standby.stop();
    let listed = tool(&conf, &["--list-token-slots"]);
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("failover"),
        "{}",
        String::from_utf8_lossy(&listed.stdout)
    );
    let log = std::fs::read_to_string(tmp.path().join("ferrohsm.log")).unwrap_or_default();
    assert!(!log.contains(common::pg::PASSWORD), "{log}");
}

fn pg_base(pg: &Pg) -> String {
    format!("postgresql://postgres@127.0.0.1:{}", pg.port().unwrap())
}
