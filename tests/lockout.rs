//! PIN lockout under concurrency: however many threads and processes guess at once, the store
//! answers at most `max_failures` wrong PINs, then `CKR_PIN_LOCKED` for every PIN, the right
//! one included. The attempt is reserved in the store before the PIN is derived.

mod common;

use common::*;
use cryptoki::error::RvError;
use cryptoki::session::UserType;
use cryptoki::types::AuthPin;
use std::process::Command;
use std::sync::{Arc, Barrier};

const MAX_FAILURES: u32 = 5;
/// Set in the child processes of `processes_guessing_at_once_share_one_limit`.
const CHILD_ENV: &str = "FERROHSM_LOCKOUT_CHILD";

/// A store with a low failure limit and a KDF slow enough (a few milliseconds) that
/// concurrent attempts overlap, yet fast enough for a test.
fn env() -> TestEnv {
    let env = TestEnv::new();
    std::fs::write(
        env.conf(),
        format!(
            "[store]\npath = \"store\"\n[pin]\nmax_failures = {MAX_FAILURES}\nkdf_memory_kib = 4096\nkdf_passes = 2\n"
        ),
    )
    .unwrap();
    env
}

#[derive(Default, Debug)]
struct Tally {
    incorrect: u32,
    locked: u32,
    other: Vec<String>,
}

impl Tally {
    fn add(&mut self, r: cryptoki::error::Result<()>) {
        match r {
            Ok(()) => self.other.push("CKR_OK".into()),
            Err(e) => match rv(e) {
                RvError::PinIncorrect => self.incorrect += 1,
                RvError::PinLocked => self.locked += 1,
                other => self.other.push(format!("{other}")),
            },
        }
    }
}

/// Runs `guess` on `threads` threads released at once, `rounds` times each.
fn storm(
    threads: usize,
    rounds: usize,
    guess: impl Fn(usize) -> cryptoki::error::Result<()> + Send + Sync + 'static,
) -> Tally {
    let guess = Arc::new(guess);
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (guess, start) = (guess.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                (0..rounds).map(|r| guess(i * rounds + r)).collect::<Vec<_>>()
            })
        })
        .collect();
    let mut t = Tally::default();
    for h in handles {
        for r in h.join().unwrap() {
            t.add(r);
        }
    }
    t
}

fn pin(s: &str) -> AuthPin {
    AuthPin::new(s.into())
}

#[test]
fn threads_guessing_at_once_get_at_most_max_failures_answers() {
    let _env = env();
    let p = Arc::new(load());
    let slot = new_token(&p, "storm");

    // User PIN: 32 threads, each with its own session, all wrong.
    let q = p.clone();
    let t = storm(32, 2, move |i| {
        let s = q.open_rw_session(slot).unwrap();
        s.login(UserType::User, Some(&pin(&format!("wrong-{i}"))))
    });
    assert!(t.other.is_empty(), "unexpected answers: {t:?}");
    assert_eq!(t.incorrect, MAX_FAILURES, "{t:?}");
    assert_eq!(t.locked, 64 - MAX_FAILURES, "{t:?}");
    let s = p.open_rw_session(slot).unwrap();
    assert_eq!(
        rv(s.login(UserType::User, Some(&pin(USER_PIN))).unwrap_err()),
        RvError::PinLocked,
        "the right PIN must be refused once the PIN is locked"
    );
    assert!(p.get_token_info(slot).unwrap().user_pin_locked());
    s.close().unwrap();

    // SO PIN, the same way.
    let q = p.clone();
    let t = storm(32, 1, move |i| {
        let s = q.open_rw_session(slot).unwrap();
        s.login(UserType::So, Some(&pin(&format!("wrong-so-{i}"))))
    });
    assert!(t.other.is_empty(), "unexpected answers: {t:?}");
    assert_eq!(t.incorrect, MAX_FAILURES, "{t:?}");
    let s = p.open_rw_session(slot).unwrap();
    assert_eq!(
        rv(s.login(UserType::So, Some(&pin(SO_PIN))).unwrap_err()),
        RvError::PinLocked
    );
    // Re-initialising the token checks the SO PIN too: locked.
    s.close().unwrap();
    assert_eq!(
        rv(p.init_token(slot, &pin(SO_PIN), "again").unwrap_err()),
        RvError::PinLocked
    );
}

#[test]
fn set_pin_old_pin_checks_share_the_limit() {
    let _env = env();
    let p = Arc::new(load());
    let slot = new_token(&p, "setpin");
    let q = p.clone();
    // C_SetPIN without a login changes the user PIN after checking the old one.
    let t = storm(24, 2, move |i| {
        let s = q.open_rw_session(slot).unwrap();
        s.set_pin(&pin(&format!("wrong-{i}")), &pin("new-pin-1"))
    });
    assert!(t.other.is_empty(), "unexpected answers: {t:?}");
    assert_eq!(t.incorrect, MAX_FAILURES, "{t:?}");
    let s = p.open_rw_session(slot).unwrap();
    assert_eq!(
        rv(s.set_pin(&pin(USER_PIN), &pin("new-pin-2")).unwrap_err()),
        RvError::PinLocked
    );
    assert_eq!(
        rv(s.login(UserType::User, Some(&pin(USER_PIN))).unwrap_err()),
        RvError::PinLocked
    );
    // The SO unlocks it with a new user PIN.
    s.login(UserType::So, Some(&pin(SO_PIN))).unwrap();
    s.init_pin(&pin("fresh-pin")).unwrap();
    s.logout().unwrap();
    s.login(UserType::User, Some(&pin("fresh-pin"))).unwrap();
}

#[test]
fn a_success_forgives_only_the_failures_before_it() {
    let _env = env();
    let p = load();
    let slot = new_token(&p, "serial");
    let s = p.open_rw_session(slot).unwrap();
    for i in 0..MAX_FAILURES - 1 {
        assert_eq!(
            rv(s.login(UserType::User, Some(&pin(&format!("bad-{i}"))))
                .unwrap_err()),
            RvError::PinIncorrect
        );
    }
    s.login(UserType::User, Some(&pin(USER_PIN))).unwrap();
    s.logout().unwrap();
    // The count restarted: MAX_FAILURES more wrong answers, then locked.
    for i in 0..MAX_FAILURES {
        assert_eq!(
            rv(s.login(UserType::User, Some(&pin(&format!("bad-{i}"))))
                .unwrap_err()),
            RvError::PinIncorrect,
            "attempt {i}"
        );
    }
    assert_eq!(
        rv(s.login(UserType::User, Some(&pin(USER_PIN))).unwrap_err()),
        RvError::PinLocked
    );
}

/// The child side of `processes_guessing_at_once_share_one_limit` (the same test, started
/// again with the start time in the environment): waits for the start time, then guesses
/// wrong PINs on four threads and prints its tally.
fn child_main(start_ms: &str) {
    let start_ms: u128 = start_ms.parse().unwrap();
    let p = Arc::new(load());
    let slot = p
        .get_all_slots()
        .unwrap()
        .into_iter()
        .find(|s| p.get_token_info(*s).unwrap().label() == "shared")
        .unwrap();
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    };
    while now() < start_ms {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let q = p.clone();
    let t = storm(4, 3, move |i| {
        let s = q.open_rw_session(slot).unwrap();
        s.login(
            UserType::User,
            Some(&pin(&format!("wrong-{}-{i}", std::process::id()))),
        )
    });
    println!(
        "TALLY incorrect={} locked={} other={}",
        t.incorrect,
        t.locked,
        t.other.len()
    );
}

#[test]
fn processes_guessing_at_once_share_one_limit() {
    if let Ok(start_ms) = std::env::var(CHILD_ENV) {
        return child_main(&start_ms);
    }
    let env = env();
    let p = load();
    let slot = new_token(&p, "shared");
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 1500;
    let children: Vec<_> = (0..6)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "processes_guessing_at_once_share_one_limit",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env(CHILD_ENV, start.to_string())
                .env("FERROHSM_CONF", env.conf())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let (mut incorrect, mut locked) = (0, 0);
    for c in children {
        let out = c.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child failed: {text}");
        // libtest prints the test name on the same line.
        let line = text
            .lines()
            .find_map(|l| l.split_once("TALLY ").map(|(_, t)| t))
            .unwrap_or_else(|| panic!("no tally from the child: {text}"));
        let field = |name: &str| -> u32 {
            line.split_whitespace()
                .find_map(|f| f.strip_prefix(&format!("{name}=")))
                .unwrap()
                .parse()
                .unwrap()
        };
        assert_eq!(field("other"), 0, "{line}");
        incorrect += field("incorrect");
        locked += field("locked");
    }
    assert_eq!(
        incorrect, MAX_FAILURES,
        "6 processes got {incorrect} CKR_PIN_INCORRECT answers in total ({locked} locked)"
    );
    assert_eq!(incorrect + locked, 6 * 4 * 3);
    let s = p.open_rw_session(slot).unwrap();
    assert_eq!(
        rv(s.login(UserType::User, Some(&pin(USER_PIN))).unwrap_err()),
        RvError::PinLocked
    );
}
