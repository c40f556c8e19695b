//! ferrohsm-util, every command and its error paths, run as operators run it.

mod common;

use common::*;
use std::process::{Command, Output};

fn util(env: &TestEnv, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrohsm-util"))
        .args(args)
        .env("FERROHSM_CONF", env.conf())
        .env_remove("FERROHSM_PIN")
        .env_remove("FERROHSM_SO_PIN")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

fn ok(env: &TestEnv, args: &[&str]) -> String {
    let o = util(env, args);
    assert!(
        o.status.success(),
        "ferrohsm-util {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Fails with exit code 1 and one line on stderr containing `expect`.
fn fails(env: &TestEnv, args: &[&str], expect: &str) {
    let o = util(env, args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(1),
        "ferrohsm-util {args:?} should fail: {err}"
    );
    let line = err
        .lines()
        .find(|l| l.starts_with("ferrohsm-util:"))
        .unwrap_or_else(|| panic!("no error line in {err}"));
    assert!(
        line.contains(expect),
        "{args:?}: {line:?} does not mention {expect:?}"
    );
}

#[test]
fn token_lifecycle() {
    let env = TestEnv::new();
    let out = ok(
        &env,
        &[
            "init-token",
            "--free",
            "--label",
            "ops",
            "--so-pin",
            SO_PIN,
            "--pin",
            USER_PIN,
        ],
    );
    assert!(out.contains("initialized on slot 0"), "{out}");
    let out = ok(&env, &["show-slots"]);
    assert!(
        out.contains("Slot 0") && out.contains("Token label:        ops") && out.contains("Slot 1"),
        "{out}"
    );
    // Re-initialisation by label needs the SO PIN.
    fails(
        &env,
        &[
            "init-token",
            "--token",
            "ops",
            "--label",
            "ops2",
            "--so-pin",
            "wrong-pin",
            "--pin",
            USER_PIN,
        ],
        "wrong PIN",
    );
    ok(
        &env,
        &[
            "init-token",
            "--token",
            "ops",
            "--label",
            "ops2",
            "--so-pin",
            SO_PIN,
            "--pin",
            USER_PIN,
        ],
    );
    assert!(ok(&env, &["show-slots"]).contains("ops2"));
    fails(
        &env,
        &[
            "init-token",
            "--label",
            "x",
            "--so-pin",
            SO_PIN,
            "--pin",
            USER_PIN,
        ],
        "--free",
    );
    fails(
        &env,
        &[
            "init-token",
            "--free",
            "--label",
            &"x".repeat(33),
            "--so-pin",
            SO_PIN,
            "--pin",
            USER_PIN,
        ],
        "32 characters",
    );
    fails(
        &env,
        &[
            "init-token",
            "--free",
            "--label",
            "short",
            "--so-pin",
            "123",
            "--pin",
            USER_PIN,
        ],
        "4 to 255",
    );
    // PINs: user and SO, from flags and from the environment.
    ok(
        &env,
        &[
            "set-pin",
            "--token",
            "ops2",
            "--pin",
            USER_PIN,
            "--new-pin",
            "5678",
        ],
    );
    fails(
        &env,
        &[
            "set-pin",
            "--token",
            "ops2",
            "--pin",
            USER_PIN,
            "--new-pin",
            "9999",
        ],
        "wrong PIN",
    );
    let o = Command::new(env!("CARGO_BIN_EXE_ferrohsm-util"))
        .args(["set-pin", "--token", "ops2", "--so", "--new-pin", "new-so-pin"])
        .env("FERROHSM_CONF", env.conf())
        .env("FERROHSM_SO_PIN", SO_PIN)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Deletion needs the (new) SO PIN.
    fails(
        &env,
        &["delete-token", "--token", "ops2", "--so-pin", SO_PIN],
        "SO PIN not accepted",
    );
    let out = ok(
        &env,
        &["delete-token", "--token", "ops2", "--so-pin", "new-so-pin"],
    );
    assert!(out.contains("deleted"), "{out}");
    assert!(!ok(&env, &["show-slots"]).contains("ops2"));
    fails(
        &env,
        &["delete-token", "--token", "ops2", "--so-pin", SO_PIN],
        "no such token",
    );
    fails(&env, &["list-objects", "--token", "nope"], "no token is labelled");
}

#[test]
fn import_every_encoding_and_refuse_duplicates() {
    let env = TestEnv::new();
    ok(
        &env,
        &[
            "init-token",
            "--free",
            "--label",
            "keys",
            "--so-pin",
            SO_PIN,
            "--pin",
            USER_PIN,
        ],
    );
    let dir = env.dir.path();
    let pem8 = dir.join("k8.pem");
    assert!(openssl(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        pem8.to_str().unwrap()
    ]));
    let der8 = dir.join("k8.der");
    assert!(openssl(&[
        "pkey",
        "-in",
        pem8.to_str().unwrap(),
        "-outform",
        "DER",
        "-out",
        der8.to_str().unwrap()
    ]));
    let pem1 = dir.join("k1.pem");
    assert!(openssl(&[
        "rsa",
        "-in",
        pem8.to_str().unwrap(),
        "-traditional",
        "-out",
        pem1.to_str().unwrap()
    ]));
    let der1 = dir.join("k1.der");
    assert!(openssl(&[
        "rsa",
        "-in",
        pem8.to_str().unwrap(),
        "-outform",
        "DER",
        "-traditional",
        "-out",
        der1.to_str().unwrap()
    ]));
    for (i, f) in [&pem8, &der8, &pem1, &der1].iter().enumerate() {
        let id = format!("0{i}");
        let out = ok(
            &env,
            &[
                "import",
                "--token",
                "keys",
                "--id",
                &id,
                "--label",
                &format!("key{i}"),
                "--pin",
                USER_PIN,
                f.to_str().unwrap(),
            ],
        );
        assert!(out.contains("The key pair has been imported."), "{out}");
    }
    fails(
        &env,
        &[
            "import",
            "--token",
            "keys",
            "--id",
            "00",
            "--label",
            "again",
            "--pin",
            USER_PIN,
            pem8.to_str().unwrap(),
        ],
        "--force",
    );
    ok(
        &env,
        &[
            "import",
            "--token",
            "keys",
            "--id",
            "00",
            "--label",
            "again",
            "--pin",
            USER_PIN,
            "--force",
            "--no-public-key",
            pem8.to_str().unwrap(),
        ],
    );
    fails(
        &env,
        &[
            "import",
            "--token",
            "keys",
            "--id",
            "abc",
            "--label",
            "x",
            "--pin",
            USER_PIN,
            pem8.to_str().unwrap(),
        ],
        "even number of hex digits",
    );
    std::fs::write(dir.join("junk"), b"not a key").unwrap();
    fails(
        &env,
        &[
            "import",
            "--token",
            "keys",
            "--id",
            "09",
            "--label",
            "x",
            "--pin",
            USER_PIN,
            dir.join("junk").to_str().unwrap(),
        ],
        "not an unencrypted RSA private key",
    );
    fails(
        &env,
        &[
            "import",
            "--token",
            "keys",
            "--id",
            "09",
            "--label",
            "x",
            "--pin",
            "bad-pin",
            pem8.to_str().unwrap(),
        ],
        "wrong PIN",
    );
    // Listing: without a PIN only public keys; with it everything.
    let public = ok(&env, &["list-objects", "--token", "keys"]);
    assert_eq!(public.lines().count(), 4, "{public}");
    assert!(
        public.contains("2048 bits") && public.contains("id=03") && public.contains("label=key3"),
        "{public}"
    );
    let all = ok(&env, &["list-objects", "--token", "keys", "--pin", USER_PIN]);
    assert_eq!(all.lines().count(), 9, "{all}");
    // The imported key signs through the module, and OpenSSL verifies with its own public key.
    let p = load();
    let slot = p.get_slots_with_initialized_token().unwrap()[0];
    let s = user_session(&p, slot);
    let key = find_one(&s, cryptoki::object::ObjectClass::PRIVATE_KEY, &[0x02]);
    let sig = s
        .sign(&cryptoki::mechanism::Mechanism::Sha256RsaPkcs, key, b"imported")
        .unwrap();
    std::fs::write(dir.join("msg"), b"imported").unwrap();
    std::fs::write(dir.join("sig"), &sig).unwrap();
    assert!(openssl(&[
        "dgst",
        "-sha256",
        "-prverify",
        pem1.to_str().unwrap(),
        "-signature",
        dir.join("sig").to_str().unwrap(),
        dir.join("msg").to_str().unwrap()
    ]));
}

#[test]
fn help_for_every_command() {
    let env = TestEnv::new();
    for cmd in [
        "show-slots",
        "init-token",
        "list-objects",
        "import",
        "delete-token",
        "set-pin",
        "speed",
    ] {
        let out = ok(&env, &[cmd, "--help"]);
        assert!(out.contains("Usage: ferrohsm-util"), "{cmd}: {out}");
    }
    let o = util(&env, &["no-such-command"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn missing_pin_without_a_terminal_is_a_clear_error() {
    let env = TestEnv::new();
    fails(
        &env,
        &["init-token", "--free", "--label", "t", "--pin", USER_PIN],
        "FERROHSM_SO_PIN",
    );
}

#[test]
fn speed_prints_a_table() {
    let env = TestEnv::new();
    let out = ok(
        &env,
        &["speed", "--sizes", "1024", "--seconds", "0.2", "--threads", "2"],
    );
    let row = out
        .lines()
        .find(|l| l.starts_with("rsa  1024 bits"))
        .unwrap_or_else(|| panic!("{out}"));
    let fields: Vec<&str> = row.split_whitespace().collect();
    let sign_per_s: f64 = fields[5].parse().unwrap();
    let verify_per_s: f64 = fields[6].parse().unwrap();
    assert!(sign_per_s > 0.0 && verify_per_s > sign_per_s, "{row}");
    assert!(
        out.contains("sign/s per core") && out.contains("single thread"),
        "{out}"
    );
    assert!(out.contains("kernel ") && out.contains("CPU: "), "{out}");
    // The user's store was not touched.
    assert!(!env.store_dir().exists());
    // Side by side with openssl speed: a ratio column.
    let out = ok(
        &env,
        &[
            "speed",
            "--sizes",
            "1024",
            "--seconds",
            "0.2",
            "--threads",
            "2",
            "--compare-openssl",
        ],
    );
    let row = out.lines().find(|l| l.starts_with("rsa  1024 bits")).unwrap();
    let ratio: f64 = row
        .split_whitespace()
        .last()
        .unwrap()
        .trim_end_matches('x')
        .parse()
        .unwrap();
    assert!(ratio > 0.0, "{row}");
    // Machine-readable.
    let json = ok(
        &env,
        &[
            "speed",
            "--sizes",
            "1024",
            "--seconds",
            "0.2",
            "--threads",
            "2",
            "--json",
        ],
    );
    assert!(
        json.starts_with("{\"cpu\":") && json.contains("\"bits\":1024") && json.contains("\"sign_per_s\":"),
        "{json}"
    );
}

/// `--kernel all` measures every family this CPU runs, each through the module with that family
/// forced, and says which family served (from the module's statistics); a wrong name is a clear
/// error.
/// Long-running commands show a progress bar on a terminal and nothing in a pipe: speed's
/// stderr in a pipe holds only its header line, and under a pseudo-terminal (util-linux
/// `script`) the bar with its step appears.
#[test]
fn progress_shows_on_a_terminal_and_not_in_a_pipe() {
    let env = TestEnv::new();
    let args = [
        "speed",
        "--sizes",
        "1024",
        "--seconds",
        "0.3",
        "--threads",
        "2",
        "--curves",
        "",
    ];
    let piped = util(&env, &args);
    assert!(piped.status.success());
    let err = String::from_utf8_lossy(&piped.stderr);
    assert!(
        !err.contains('\r') && !err.contains("RSA-1024"),
        "progress in a pipe: {err:?}"
    );
    assert!(err.lines().all(|l| l.starts_with("CPU: ")), "{err:?}");
    let line = std::iter::once(env!("CARGO_BIN_EXE_ferrohsm-util"))
        .chain(args)
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let tty = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env("FERROHSM_CONF", env.conf())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script (util-linux) runs the command under a pseudo-terminal");
    let screen = String::from_utf8_lossy(&tty.stdout);
    assert!(tty.status.success(), "{screen}");
    assert!(
        screen.contains("speed [") && screen.contains("RSA-1024"),
        "no bar on a terminal: {screen:?}"
    );
    // The table is printed after the bar is cleared.
    assert!(screen.contains("rsa  1024 bits"), "{screen:?}");
}

#[test]
fn speed_measures_every_kernel_family_side_by_side() {
    let env = TestEnv::new();
    let args = ["--sizes", "1024", "--seconds", "0.3", "--threads", "2"];
    let out = ok(&env, &[&["speed", "--kernel", "all"], &args[..]].concat());
    let mut families = vec!["portable", "reference"];
    if std::is_x86_feature_detected!("bmi2") && std::is_x86_feature_detected!("adx") {
        families.push("mulx");
    }
    if std::is_x86_feature_detected!("avx512ifma") && std::is_x86_feature_detected!("avx512vl") {
        families.push("ifma");
    }
    if std::is_x86_feature_detected!("avx2") {
        families.push("avx2");
    }
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        families.push("fma");
    }
    for f in &families {
        let section = out
            .split(&format!("kernel {f}:\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("no {f} section: {out}"));
        let row = section.lines().find(|l| l.starts_with("rsa  1024 bits")).unwrap();
        let sign_per_s: f64 = row.split_whitespace().nth(5).unwrap().parse().unwrap();
        assert!(sign_per_s > 0.0, "{row}");
        // The family that served, as the module counted it.
        let per_core = section.lines().find(|l| l.contains("sign/s per core")).unwrap();
        assert!(per_core.ends_with(&format!("kernel {f}")), "{per_core}");
    }
    if families.len() > 1 {
        let table = out.split("sign/s by kernel").nth(1).expect("side-by-side table");
        let row = table.lines().find(|l| l.starts_with("rsa  1024 bits")).unwrap();
        let rates: Vec<f64> = row
            .split_whitespace()
            .skip(3)
            .map(|x| x.parse().unwrap())
            .collect();
        assert!(
            rates.len() == families.len() && rates.iter().all(|&r| r > 0.0),
            "{row}"
        );
    }
    let out = ok(&env, &[&["speed", "--kernel", "portable"], &args[..]].concat());
    assert!(
        out.contains("kernel portable:") && !out.contains("kernel ifma:"),
        "{out}"
    );
    fails(
        &env,
        &[&["speed", "--kernel", "nonsense"], &args[..]].concat(),
        "\"nonsense\" is not a kernel of this module; this CPU runs: auto, all, ",
    );
    // A list is measured as one entry, served by its members only.
    let out = ok(
        &env,
        &[&["speed", "--kernel", "portable,reference"], &args[..]].concat(),
    );
    let section = out
        .split("kernel portable,reference:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no list section: {out}"));
    let per_core = section.lines().find(|l| l.contains("sign/s per core")).unwrap();
    assert!(per_core.ends_with("kernel portable"), "{per_core}");
    fails(
        &env,
        &[&["speed", "--kernel", "portable,nonsense"], &args[..]].concat(),
        "\"nonsense\" is not a kernel of this module",
    );
}

/// A token "bench" in ferrohsm and in SoftHSM (its own configuration, returned), same PINs.
fn bench_tokens(env: &TestEnv) -> std::path::PathBuf {
    ok(
        env,
        &[
            "init-token",
            "--free",
            "--label",
            "bench",
            "--so-pin",
            SO_PIN,
            "--pin",
            USER_PIN,
        ],
    );
    let sh_dir = env.dir.path().join("softhsm");
    std::fs::create_dir_all(&sh_dir).unwrap();
    let sh_conf = env.dir.path().join("softhsm2.conf");
    std::fs::write(
        &sh_conf,
        format!(
            "directories.tokendir = {}\nobjectstore.backend = file\n",
            sh_dir.display()
        ),
    )
    .unwrap();
    let st = Command::new("softhsm2-util")
        .args([
            "--init-token",
            "--free",
            "--label",
            "bench",
            "--so-pin",
            SO_PIN,
            "--pin",
            USER_PIN,
        ])
        .env("SOFTHSM2_CONF", &sh_conf)
        .output()
        .expect("softhsm2-util (Debian package softhsm2) must be installed");
    assert!(st.status.success());
    sh_conf
}

/// `bench --json` over ferrohsm and SoftHSM with these extra arguments: one line per module,
/// each with a positive rate.
fn bench_both(env: &TestEnv, sh_conf: &std::path::Path, extra: &[&str]) -> Vec<String> {
    let o = Command::new(env!("CARGO_BIN_EXE_ferrohsm-util"))
        .args([
            "bench",
            "--module",
            module_path().to_str().unwrap(),
            "--module",
            "/usr/lib/softhsm/libsofthsm2.so",
        ])
        .args([
            "--token",
            "bench",
            "--pin",
            USER_PIN,
            "--threads",
            "2",
            "--seconds",
            "0.3",
            "--json",
        ])
        .args(extra)
        .env("FERROHSM_CONF", env.conf())
        .env("SOFTHSM2_CONF", sh_conf)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<String> = out.lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 2, "{out}");
    for l in &lines {
        let rate: f64 = l
            .split("\"sign_per_s\":")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(rate > 0.0, "{l}");
        assert!(l.contains("\"p99_ms\":") && l.contains("\"ratio\":"), "{l}");
    }
    assert!(lines[0].contains("\"ratio\":1.00"), "{}", lines[0]);
    lines
}

#[test]
fn bench_compares_modules_including_softhsm() {
    let env = TestEnv::new();
    let sh_conf = bench_tokens(&env);
    let lines = bench_both(&env, &sh_conf, &["--key-size", "1024"]);
    assert!(lines[0].contains("\"key\":\"RSA-1024\""), "{}", lines[0]);
}

/// `bench --plot`: every module measured at every thread count (a JSON line each), and an SVG
/// with one line per module (a point per thread count) and the `openssl speed -multi` line.
#[test]
fn bench_plot_draws_every_module_at_every_thread_count() {
    let env = TestEnv::new();
    let sh_conf = bench_tokens(&env);
    let svg = env.dir.path().join("bench.svg");
    let run = |threads: &str| {
        Command::new(env!("CARGO_BIN_EXE_ferrohsm-util"))
            .args(["bench", "--module", module_path().to_str().unwrap()])
            .args(["--module", "/usr/lib/softhsm/libsofthsm2.so", "--token", "bench"])
            .args([
                "--pin",
                USER_PIN,
                "--key-size",
                "1024",
                "--seconds",
                "0.4",
                "--rounds",
                "1",
            ])
            .args([
                "--json",
                "--plot",
                svg.to_str().unwrap(),
                "--plot-threads",
                threads,
            ])
            .env("FERROHSM_CONF", env.conf())
            .env("SOFTHSM2_CONF", &sh_conf)
            .output()
            .unwrap()
    };
    let o = run("1,2,4");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 6, "{out}");
    for (i, t) in [1, 1, 2, 2, 4, 4].iter().enumerate() {
        assert!(lines[i].contains(&format!("\"threads\":{t},")), "{}", lines[i]);
        let module = if i % 2 == 0 {
            "libferrohsm.so"
        } else {
            "libsofthsm2.so"
        };
        assert!(lines[i].contains(module), "{}", lines[i]);
    }
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.starts_with("<svg"), "{drawn}");
    for legend in [
        "libferrohsm.so",
        "libsofthsm2.so",
        "openssl speed -multi",
        "RSA-1024",
    ] {
        assert!(drawn.contains(legend), "{legend} missing from the plot");
    }
    assert!(
        err.contains("openssl speed -multi") && err.contains("sign/s"),
        "{err}"
    );
    // A line per module through its three points, and the openssl line through two.
    let lines: Vec<usize> = drawn
        .split("<polyline")
        .skip(1)
        .map(|p| p.split("points=\"").nth(1).unwrap().split('"').next().unwrap())
        .map(|points| points.split_whitespace().count())
        .collect();
    assert_eq!(lines.iter().filter(|&&n| n == 3).count(), 2, "{lines:?}");
    assert!(lines.contains(&2), "{lines:?}");
    let o = run("0,2");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("thread counts must be 1 or more"));
}

/// The EC mechanisms of `bench`: an ECDSA P-256, P-384 and Ed25519 key made in each module,
/// signatures counted in both; an unknown mechanism is refused before any module is loaded.
#[test]
fn bench_ec_mechanisms_in_ferrohsm_and_softhsm() {
    let env = TestEnv::new();
    let sh_conf = bench_tokens(&env);
    for (mechanism, key, bits) in [
        ("ecdsa-p256", "ECDSA-P256", 256),
        ("ecdsa-p384", "ECDSA-P384", 384),
        ("eddsa-ed25519", "Ed25519", 253),
    ] {
        let lines = bench_both(&env, &sh_conf, &["--mechanism", mechanism]);
        for l in &lines {
            assert!(
                l.contains(&format!(
                    "\"mechanism\":\"{mechanism}\",\"key\":\"{key}\",\"key_size\":{bits},"
                )),
                "{l}"
            );
        }
    }
    fails(
        &env,
        &[
            "bench",
            "--module",
            "/nonexistent.so",
            "--token",
            "bench",
            "--pin",
            USER_PIN,
            "--mechanism",
            "ecdsa-p999",
        ],
        "unknown mechanism \"ecdsa-p999\"",
    );
}

/// EC keys in every encoding `import` reads (PKCS#8 and SEC1, PEM and DER; Ed25519 in
/// PKCS#8), made by OpenSSL; each imported key signs through the module and OpenSSL verifies
/// the signature with the public key of the file it came from. `list-objects` names the curve.
#[test]
fn import_ec_keys_sign_verified_with_the_original_public_key() {
    use cryptoki::mechanism::eddsa::{EddsaParams, EddsaSignatureScheme};
    use cryptoki::mechanism::Mechanism;
    use cryptoki::object::ObjectClass;
    let env = TestEnv::new();
    ok(
        &env,
        &[
            "init-token",
            "--free",
            "--label",
            "ec",
            "--so-pin",
            SO_PIN,
            "--pin",
            USER_PIN,
        ],
    );
    let dir = env.dir.path();
    let path = |n: &str| dir.join(n).to_str().unwrap().to_string();
    assert!(openssl(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        &path("p256.pem")
    ]));
    assert!(openssl(&[
        "ec",
        "-in",
        &path("p256.pem"),
        "-outform",
        "DER",
        "-out",
        &path("p256.sec1.der")
    ]));
    assert!(openssl(&[
        "ec",
        "-in",
        &path("p256.pem"),
        "-out",
        &path("p256.sec1.pem")
    ]));
    assert!(openssl(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-521",
        "-outform",
        "DER",
        "-out",
        &path("p521.der")
    ]));
    assert!(openssl(&[
        "genpkey",
        "-algorithm",
        "ed25519",
        "-out",
        &path("ed.pem")
    ]));
    let files = [
        ("01", "p256.pem"),
        ("02", "p256.sec1.der"),
        ("03", "p256.sec1.pem"),
        ("04", "p521.der"),
        ("05", "ed.pem"),
    ];
    for (id, f) in files {
        let out = ok(
            &env,
            &[
                "import",
                "--token",
                "ec",
                "--id",
                id,
                "--label",
                f,
                "--pin",
                USER_PIN,
                &path(f),
            ],
        );
        assert!(out.contains("key pair has been imported"), "{out}");
    }
    let list = ok(&env, &["list-objects", "--token", "ec", "--pin", USER_PIN]);
    for want in [
        "CKK_EC prime256v1\tid=01",
        "CKK_EC secp521r1\tid=04",
        "CKK_EC_EDWARDS edwards25519\tid=05",
    ] {
        assert!(list.contains(want), "{want} in\n{list}");
    }
    std::fs::write(dir.join("data"), b"imported EC key\n").unwrap();
    let p = load();
    let slot = *p
        .get_slots_with_token()
        .unwrap()
        .iter()
        .find(|s| p.get_token_info(**s).unwrap().label() == "ec")
        .unwrap();
    let s = user_session(&p, slot);
    for (id, f) in files {
        let key = find_one(&s, ObjectClass::PRIVATE_KEY, &[id.parse::<u8>().unwrap()]);
        let inform = if f.ends_with(".der") { "DER" } else { "PEM" };
        assert!(openssl(&[
            "pkey",
            "-inform",
            inform,
            "-in",
            &path(f),
            "-pubout",
            "-out",
            &path("pub.pem")
        ]));
        let data = std::fs::read(dir.join("data")).unwrap();
        let ok = if f == "ed.pem" {
            let mech = Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Pure));
            std::fs::write(dir.join("sig"), s.sign(&mech, key, &data).unwrap()).unwrap();
            openssl(&[
                "pkeyutl",
                "-verify",
                "-pubin",
                "-inkey",
                &path("pub.pem"),
                "-rawin",
                "-in",
                &path("data"),
                "-sigfile",
                &path("sig"),
            ])
        } else {
            let sig = s.sign(&Mechanism::EcdsaSha256, key, &data).unwrap();
            std::fs::write(dir.join("sig"), ecdsa_der(&sig)).unwrap();
            openssl(&[
                "dgst",
                "-sha256",
                "-verify",
                &path("pub.pem"),
                "-signature",
                &path("sig"),
                &path("data"),
            ])
        };
        assert!(ok, "{f}: OpenSSL verifies with the file's own public key");
    }
}

/// r || s as DER ECDSA-Sig-Value.
fn ecdsa_der(sig: &[u8]) -> Vec<u8> {
    let int = |v: &[u8]| {
        let first = v.iter().position(|&b| b != 0).unwrap_or(v.len() - 1);
        let mut body = v[first..].to_vec();
        if body[0] & 0x80 != 0 {
            body.insert(0, 0);
        }
        [vec![0x02, body.len() as u8], body].concat()
    };
    let (r, s) = sig.split_at(sig.len() / 2);
    let body = [int(r), int(s)].concat();
    let len = if body.len() >= 0x80 {
        vec![0x81, body.len() as u8]
    } else {
        vec![body.len() as u8]
    };
    [vec![0x30], len, body].concat()
}

#[test]
fn speed_prints_an_ecdsa_and_eddsa_table() {
    let env = TestEnv::new();
    let out = ok(
        &env,
        &[
            "speed",
            "--sizes",
            "1024",
            "--seconds",
            "0.1",
            "--threads",
            "2",
            "--curves",
            "p256,ed25519",
        ],
    );
    // Each row ends with the arithmetic family the curve ran on, which FERROHSM_KERNEL forces
    // for P-256 (the same run with `portable`, below).
    let families = [("mulx", "portable"), ("avx512ifma", "avx2")];
    for (label, (fast, other)) in [" 256 bits ecdsa (nistp256)", " 253 bits EdDSA (Ed25519)"]
        .into_iter()
        .zip(families)
    {
        let row = out
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("{label} in\n{out}"));
        let f: Vec<&str> = row.split_whitespace().collect();
        let (sign, verify): (f64, f64) = (f[f.len() - 3].parse().unwrap(), f[f.len() - 2].parse().unwrap());
        assert!(sign > 0.0 && verify > 0.0, "{row}");
        let family = f[f.len() - 1];
        assert!([fast, other, "serial"].contains(&family), "{row}");
    }
    let portable = Command::new(env!("CARGO_BIN_EXE_ferrohsm-util"))
        .args([
            "speed",
            "--sizes",
            "1024",
            "--seconds",
            "0.1",
            "--threads",
            "1",
            "--curves",
            "p256",
        ])
        .env("FERROHSM_CONF", env.conf())
        .env("FERROHSM_KERNEL", "portable")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        portable.status.success(),
        "{}",
        String::from_utf8_lossy(&portable.stderr)
    );
    let text = String::from_utf8_lossy(&portable.stdout);
    let row = text
        .lines()
        .find(|l| l.starts_with(" 256 bits ecdsa (nistp256)"))
        .unwrap_or_else(|| panic!("P-256 row in\n{text}"));
    assert!(row.ends_with(" portable"), "{row}");
    assert!(!out.contains("nistp384"), "only the curves asked for: {out}");
    fails(&env, &["speed", "--curves", "p999"], "unknown curve");
}
