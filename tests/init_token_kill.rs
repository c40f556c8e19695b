//! `ferrohsm-util init-token --pin` killed with SIGKILL at random points: every token it leaves
//! behind has a user PIN that logs in (or the token was never made).

mod common;

use common::*;
use cryptoki::session::UserType;
use cryptoki::types::AuthPin;
use std::process::Command;
use std::time::Instant;

fn init_token(env: &TestEnv, label: &str) -> std::process::Child {
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

#[test]
fn killed_init_token_never_leaves_a_token_without_user_pin() {
    let env = TestEnv::new();
    // A KDF of some milliseconds, so a kill can land between any two steps of the command.
    std::fs::write(
        env.conf(),
        "[store]\npath = \"store\"\n[pin]\nkdf_memory_kib = 8192\nkdf_passes = 1\n",
    )
    .unwrap();
    // One complete run tells how long the command takes here.
    let t = Instant::now();
    assert!(init_token(&env, "whole").wait().unwrap().success());
    let whole = t.elapsed();
    let mut rng = 0x9e3779b97f4a7c15u64;
    let mut killed = 0;
    for round in 0..30 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let delay = whole.mul_f64((rng % 1000) as f64 / 1000.0 * 1.1);
        let mut child = init_token(&env, &format!("round-{round}"));
        std::thread::sleep(delay);
        if child.try_wait().unwrap().is_none() {
            killed += 1;
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
    assert!(tokens >= 1);
}
