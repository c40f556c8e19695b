//! ferrohsm-softhsm2-util run the way SoftHSM's documentation and setup scripts run
//! softhsm2-util, parsing the same lines.

mod common;

use common::*;
use std::process::{Command, Output};

fn tool(env: &TestEnv, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrohsm-softhsm2-util"))
        .args(args)
        .env("FERROHSM_CONF", env.conf())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

fn stdout_ok(env: &TestEnv, args: &[&str]) -> String {
    let o = tool(env, args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn documented_setup_script() {
    let env = TestEnv::new();
    // softhsm2-util --init-token --free --label "My First Token" ...
    let out = stdout_ok(
        &env,
        &[
            "--init-token",
            "--free",
            "--label",
            "My First Token",
            "--so-pin",
            SO_PIN,
            "--pin",
            USER_PIN,
        ],
    );
    assert!(out.contains("has a free/uninitialized token."), "{out}");
    // Scripts take the slot number from the end of this line.
    let line = out
        .lines()
        .find(|l| l.starts_with("The token has been initialized and is reassigned to slot "))
        .unwrap();
    let slot: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    // The slot works with pkcs11-tool right away.
    let o = Command::new("pkcs11-tool")
        .arg("--module")
        .arg(module_path())
        .args(["--slot", &slot.to_string(), "--login", "--pin", USER_PIN, "-O"])
        .env("FERROHSM_CONF", env.conf())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Import a PKCS#8 key pair.
    let pem = env.dir.path().join("key.pem");
    assert!(openssl(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        pem.to_str().unwrap()
    ]));
    let args = [
        "--import",
        pem.to_str().unwrap(),
        "--token",
        "My First Token",
        "--label",
        "ksk",
        "--id",
        "a1b2",
        "--pin",
        USER_PIN,
    ];
    assert!(stdout_ok(&env, &args).contains("The key pair has been imported."));
    let o = tool(&env, &args);
    assert!(!o.status.success(), "a duplicate id needs --force");
    let mut forced = args.to_vec();
    forced.extend(["--force", "--no-public-key"]);
    assert!(stdout_ok(&env, &forced).contains("The key pair has been imported."));
    // show-slots lists it with label and serial.
    let slots = stdout_ok(&env, &["--show-slots"]);
    assert!(slots.starts_with("Available slots:"), "{slots}");
    assert!(
        slots.contains(&format!("Slot {slot}")) && slots.contains("Label:            My First Token"),
        "{slots}"
    );
    assert!(
        slots.contains("Initialized:      yes") && slots.contains("Serial number:"),
        "{slots}"
    );
    // Re-initialisation in place.
    let out = stdout_ok(
        &env,
        &[
            "--init-token",
            "--token",
            "My First Token",
            "--label",
            "Renamed",
            "--so-pin",
            SO_PIN,
            "--pin",
            USER_PIN,
        ],
    );
    assert!(
        out.contains(&format!("The token has been initialized on slot {slot}")),
        "{out}"
    );
    // Delete by label.
    let out = stdout_ok(&env, &["--delete-token", "--token", "Renamed"]);
    assert!(out.contains("has been deleted."), "{out}");
    assert!(!stdout_ok(&env, &["--show-slots"]).contains("Renamed"));
}

#[test]
fn errors_and_meta_options() {
    let env = TestEnv::new();
    assert!(!stdout_ok(&env, &["--version"]).trim().is_empty());
    assert!(stdout_ok(&env, &["--help"]).contains("--init-token"));
    let o = tool(
        &env,
        &["--init-token", "--free", "--so-pin", SO_PIN, "--pin", USER_PIN],
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--label"));
    let o = tool(&env, &["--delete-token"]);
    assert!(!o.status.success());
    let o = tool(&env, &[]);
    assert!(!o.status.success());
}
