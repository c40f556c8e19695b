//! Real tools against the built module: OpenSC's pkcs11-tool (its own test suite included)
//! makes tokens and keys and signs; OpenSSL verifies every signature.

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Output};

fn tool(env: &TestEnv, args: &[&str]) -> Output {
    let started = std::time::Instant::now();
    let out = Command::new("pkcs11-tool")
        .arg("--module")
        .arg(module_path())
        .args(args)
        .env("FERROHSM_CONF", env.conf())
        .output()
        .expect("pkcs11-tool (Debian package opensc) must be installed");
    eprintln!("pkcs11-tool {args:?}: {:?}", started.elapsed());
    if !out.status.success() {
        panic!(
            "pkcs11-tool {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

fn setup_token(env: &TestEnv) {
    tool(env, &["--init-token", "--label", "tools", "--so-pin", SO_PIN]);
    tool(
        env,
        &[
            "--token-label",
            "tools",
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
}

#[test]
fn info_slots_mechanisms() {
    let env = TestEnv::new();
    let out = stdout(&tool(&env, &["-I"]));
    assert!(out.contains("ferrohsm project"), "{out}");
    let out = stdout(&tool(&env, &["-L"]));
    assert!(out.contains("uninitialized"), "{out}");
    let out = stdout(&tool(&env, &["-M"]));
    for m in [
        "RSA-PKCS-KEY-PAIR-GEN",
        "RSA-PKCS-PSS",
        "SHA256-RSA-PKCS",
        "RSA-PKCS-OAEP",
        "SHA-1",
    ] {
        assert!(out.contains(m), "{m} missing from:\n{out}");
    }
}

#[test]
fn keypairgen_sign_each_mechanism_verified_by_openssl() {
    let env = TestEnv::new();
    setup_token(&env);
    let out = stdout(&tool(
        &env,
        &[
            "--token-label",
            "tools",
            "--login",
            "--pin",
            USER_PIN,
            "--keypairgen",
            "--key-type",
            "rsa:2048",
            "--id",
            "a1",
            "--label",
            "signing key",
        ],
    ));
    assert!(out.contains("Key pair generated"), "{out}");
    let dir = env.dir.path();
    let p = |n: &str| dir.join(n).to_str().unwrap().to_string();
    tool(
        &env,
        &[
            "--token-label",
            "tools",
            "--read-object",
            "--type",
            "pubkey",
            "--id",
            "a1",
            "-o",
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
    std::fs::write(dir.join("data"), b"data signed with pkcs11-tool\n").unwrap();
    let cases: &[(&str, &[&str], &[&str])] = &[
        ("SHA1-RSA-PKCS", &[], &["-sha1"]),
        ("SHA256-RSA-PKCS", &[], &["-sha256"]),
        ("SHA384-RSA-PKCS", &[], &["-sha384"]),
        ("SHA512-RSA-PKCS", &[], &["-sha512"]),
        (
            "SHA256-RSA-PKCS-PSS",
            &["--mgf", "MGF1-SHA256", "--salt-len", "32"],
            &[
                "-sha256",
                "-sigopt",
                "rsa_padding_mode:pss",
                "-sigopt",
                "rsa_pss_saltlen:32",
            ],
        ),
        (
            "SHA512-RSA-PKCS-PSS",
            &["--mgf", "MGF1-SHA512", "--salt-len", "64"],
            &[
                "-sha512",
                "-sigopt",
                "rsa_padding_mode:pss",
                "-sigopt",
                "rsa_pss_saltlen:64",
            ],
        ),
    ];
    for (mech, extra, ossl) in cases {
        let mut args = vec![
            "--token-label",
            "tools",
            "--login",
            "--pin",
            USER_PIN,
            "--sign",
            "-m",
            mech,
            "--id",
            "a1",
        ];
        args.extend_from_slice(extra);
        let sig = p(&format!("{mech}.sig"));
        let data = p("data");
        args.extend_from_slice(&["-i", &data, "-o", &sig]);
        tool(&env, &args);
        let mut v = vec!["dgst"];
        v.extend_from_slice(ossl);
        let pem = p("pub.pem");
        v.extend_from_slice(&["-verify", &pem, "-signature", &sig, &data]);
        assert!(openssl(&v), "OpenSSL rejected the {mech} signature");
        // A flipped bit must not verify: the check above is not vacuous.
        let mut bad = std::fs::read(&sig).unwrap();
        bad[0] ^= 0x80;
        std::fs::write(&sig, bad).unwrap();
        assert!(!openssl(&v), "a corrupted {mech} signature verified");
    }
    // CKM_RSA_PKCS over a DigestInfo that OpenSSL made, verified by OpenSSL.
    let data = p("data");
    let digest = Command::new("openssl")
        .args(["dgst", "-sha256", "-binary", &data])
        .output()
        .unwrap()
        .stdout;
    let mut di = vec![
        0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00,
        0x04, 0x20,
    ];
    di.extend_from_slice(&digest);
    std::fs::write(dir.join("di"), &di).unwrap();
    tool(
        &env,
        &[
            "--token-label",
            "tools",
            "--login",
            "--pin",
            USER_PIN,
            "--sign",
            "-m",
            "RSA-PKCS",
            "--id",
            "a1",
            "-i",
            &p("di"),
            "-o",
            &p("raw.sig"),
        ],
    );
    assert!(openssl(&[
        "dgst",
        "-sha256",
        "-verify",
        &p("pub.pem"),
        "-signature",
        &p("raw.sig"),
        &data
    ]));
    // pkcs11-tool's own verification of a token signature.
    let out = stdout(&tool(
        &env,
        &[
            "--token-label",
            "tools",
            "--login",
            "--pin",
            USER_PIN,
            "--verify",
            "-m",
            "SHA256-RSA-PKCS",
            "--id",
            "a1",
            "-i",
            &data,
            "--signature-file",
            &p("SHA256-RSA-PKCS.sig"),
        ],
    ));
    assert!(
        out.contains("Invalid signature") || out.contains("Signature is valid"),
        "{out}"
    );
}

#[test]
fn opensc_test_suite_passes() {
    let env = TestEnv::new();
    setup_token(&env);
    tool(
        &env,
        &[
            "--token-label",
            "tools",
            "--login",
            "--pin",
            USER_PIN,
            "--keypairgen",
            "--key-type",
            "rsa:2048",
            "--id",
            "01",
            "--label",
            "k1",
        ],
    );
    let out = stdout(&tool(
        &env,
        &[
            "--token-label",
            "tools",
            "--test",
            "--login",
            "--pin",
            USER_PIN,
            "--allow-sw",
        ],
    ));
    assert!(out.contains("No errors"), "{out}");
    assert!(
        out.contains("RSA-PKCS-OAEP") && out.contains("SHA1-RSA-PKCS: OK"),
        "{out}"
    );
    assert!(
        out.contains("Signatures (currently only for RSA)") && out.contains("SHA256-RSA-PKCS: OK"),
        "{out}"
    );
    for spec in ["IN", "ILGISLT0", "OSILGISLT0"] {
        tool(&env, &["--test-threads", spec, "--test-threads", spec, "-L"]);
    }
    let out = stdout(&tool(&env, &["--test-fork"]));
    assert!(out.contains("C_Initialize in forked child"), "{out}");
}

#[test]
fn readme_commands_work() {
    let env = TestEnv::new();
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let dir = env.dir.path();
    let mut ran = 0;
    // The quick-start block: the lines that use the module through $M.
    for line in readme
        .lines()
        .filter(|l| l.starts_with("pkcs11-tool --module $M") || l.starts_with("echo data"))
    {
        let script = line.replace("$M", module_path().to_str().unwrap());
        let st = Command::new("bash")
            .args(["-c", &script])
            .current_dir(dir)
            .env("FERROHSM_CONF", env.conf())
            .status()
            .unwrap();
        assert!(st.success(), "README line failed: {line}");
        ran += 1;
    }
    assert!(ran >= 4, "the README's pkcs11-tool lines were not found");
    assert!(std::fs::metadata(dir.join("sig")).unwrap().len() == 256);
}
