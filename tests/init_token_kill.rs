//! `ferrohsm-util init-token --pin` killed with SIGKILL at random points: every token it leaves
//! behind has a user PIN that logs in (or the token was never made).
//!
//! The kills must land while the command works on the store, whatever the machine's speed:
//! each run is watched until it has the store's database open (an observable step: the module
//! is initialised and the token is about to be written), then killed after a random part of
//! the time the rest of the command took in the fastest of several calibration runs. A run
//! that finished before its kill makes the estimate shorter.

mod common;

use common::*;
use cryptoki::session::UserType;
use cryptoki::types::AuthPin;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

fn init_token(env: &TestEnv, label: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ferrohsm-util"))
        .args([
            "--module",
            module_path().to_str().unwrap(),
            "init-token",
            "--free",
        ])
        .args(["--label", label, "--so-pin", SO_PIN, "--pin", USER_PIN])
        .env("FERROHSM_CONF", env.conf())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits until `child` holds `db` open; `false` when it exited first.
fn wait_for_store_open(child: &mut Child, db: &Path) -> bool {
    let fds = format!("/proc/{}/fd", child.id());
    loop {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        let open = std::fs::read_dir(&fds)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l == db));
        if open {
            return true;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

#[test]
fn killed_init_token_never_leaves_a_token_without_user_pin() {
    let env = TestEnv::new();
    // A KDF of some milliseconds, so a kill can land between any two steps of the command.
    std::fs::write(
        env.conf(),
        "[store]\npath = \"store\"\n[pin]\nkdf_memory_kib = 8192\nkdf_passes = 1\n",
    )
    .unwrap();
    // The first run creates the store; the database's path is what the runs are watched for.
    assert!(init_token(&env, "first").wait().unwrap().success());
    let db = env.store_dir().join("ferrohsm.db").canonicalize().unwrap();
    // Calibration: the time from the store's opening to the end of the command, the
    // shortest of several runs (a first run on cold caches or a busy machine is slow).
    let mut rest = Duration::MAX;
    for i in 0..5 {
        let mut child = init_token(&env, &format!("whole-{i}"));
        assert!(
            wait_for_store_open(&mut child, &db),
            "run {i} ended before opening the store"
        );
        let t = Instant::now();
        assert!(child.wait().unwrap().success());
        rest = rest.min(t.elapsed());
    }
    eprintln!("the command runs for {rest:?} after opening the store");
    let mut rng = 0x9e3779b97f4a7c15u64;
    let mut killed = 0;
    for round in 0..30 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let delay = rest.mul_f64((rng % 1000) as f64 / 1000.0);
        let mut child = init_token(&env, &format!("round-{round}"));
        if wait_for_store_open(&mut child, &db) {
            std::thread::sleep(delay);
        }
        if child.try_wait().unwrap().is_none() {
            killed += 1;
        } else {
            // Faster than the estimate: aim earlier from now on.
            rest = rest.mul_f64(0.75);
        }
        child.kill().ok();
        child.wait().unwrap();
    }
    assert!(
        killed >= 10,
        "only {killed} of 30 runs were still running when killed: the test did not exercise the command"
    );
    let p = load();
    let mut tokens = 0;
    for slot in p.get_all_slots().unwrap() {
        let info = p.get_token_info(slot).unwrap();
        if !info.token_initialized() {
            continue;
        }
        tokens += 1;
        assert!(
            info.user_pin_initialized(),
            "token {:?} in slot {} has no user PIN",
            info.label(),
            slot.id()
        );
        let s = p.open_ro_session(slot).unwrap();
        s.login(UserType::User, Some(&AuthPin::new(USER_PIN.into())))
            .unwrap_or_else(|e| panic!("token {:?}: the user PIN does not log in: {e}", info.label()));
        s.logout().unwrap();
    }
    eprintln!("{killed} runs killed, {tokens} tokens made");
    // The first and the calibration runs made theirs.
    assert!(tokens >= 6);
}
