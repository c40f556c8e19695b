//! The vendor header compiled into a C program (`cc ... -ldl`) that uses the module's vendor
//! functions by symbol and through the "Vendor ferrohsm" interface.

mod common;

use common::*;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

#[test]
fn c_program_uses_the_vendor_api() {
    let env = TestEnv::new();
    // A token so slot 0 is valid for the self-test.
    let p = load();
    new_token(&p, "vendor");
    p.finalize().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = env.dir.path().join("vendor");
    let cc = Command::new("cc")
        .args(["-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(root.join("tests/c/vendor.c"))
        .arg("-I")
        .arg(root.join("include"))
        .arg("-ldl")
        .output()
        .expect("a C compiler (cc) must be installed");
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    let run = Command::new(&exe)
        .arg(module_path())
        .env("FERROHSM_CONF", env.conf())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let v: HashMap<&str, &str> = out.lines().filter_map(|l| l.split_once(' ')).collect();
    assert_eq!(v["interface"], "Vendor ferrohsm");
    assert_eq!(v["version"], "1.3");
    assert_eq!(v["selftest_rv"], "0");
    assert_eq!(v["selftest_passed"], "1");
    assert_eq!(
        v["selftest_bad_slot_rv"],
        cryptoki_sys::CKR_SLOT_ID_INVALID.to_string()
    );
    assert_eq!(v["speed_rv"], "0");
    let rate: f64 = v["speed_sign_per_s"].parse().unwrap();
    assert!(rate > 0.0, "{out}");
    assert_eq!(
        v["speed_bad_size_rv"],
        cryptoki_sys::CKR_KEY_SIZE_RANGE.to_string()
    );
    assert_eq!(v["stats_rv"], "0");
    let ops: u64 = v["operations"].parse().unwrap();
    assert!(ops > 0, "{out}");
    assert_eq!(v["init_rv"], "0");
    assert_eq!(v["init_null_rv"], cryptoki_sys::CKR_ARGUMENTS_BAD.to_string());
    assert_eq!(v["init_wrong_so_rv"], cryptoki_sys::CKR_PIN_INCORRECT.to_string());
    {
        use cryptoki::session::UserType;
        use cryptoki::types::AuthPin;
        let p = load();
        let slot = p.get_all_slots().unwrap()[1];
        let info = p.get_token_info(slot).unwrap();
        assert_eq!(info.label(), "from C");
        assert!(info.user_pin_initialized());
        let s = p.open_ro_session(slot).unwrap();
        s.login(UserType::User, Some(&AuthPin::new("user-pin-c".into())))
            .unwrap();
    }
    let batches: Vec<u64> = v["batches"].split(' ').map(|x| x.parse().unwrap()).collect();
    let kernel: u64 = v["kernel"].parse().unwrap();
    if kernel == 1 {
        // Speed threads on the IFMA kernel: the operations went through kernel batches.
        let sigs: u64 = batches.iter().enumerate().map(|(i, n)| n * (i as u64 + 1)).sum();
        assert!(
            sigs > 0 && sigs == ops,
            "every operation is one batch slot: {out}"
        );
        let fill: f64 = v["mean_batch_fill"].parse().unwrap();
        assert!((1.0..=4.0).contains(&fill), "{out}");
    }
    assert_eq!(v["null_rv"], cryptoki_sys::CKR_ARGUMENTS_BAD.to_string());
    // Per family (1.2): the two-call convention, then one line per family.
    assert_eq!(v["kstats_count_rv"], "0");
    let count: usize = v["kstats_count"].parse().unwrap();
    assert!(count >= 1, "{out}");
    assert_eq!(
        v["kstats_small_rv"],
        cryptoki_sys::CKR_BUFFER_TOO_SMALL.to_string()
    );
    assert_eq!(v["kstats_small_count"], count.to_string());
    assert_eq!(v["kstats_rv"], "0");
    assert_eq!(
        v["kstats_null_count_rv"],
        cryptoki_sys::CKR_ARGUMENTS_BAD.to_string()
    );
    let families: Vec<(&str, Vec<&str>)> = v
        .iter()
        .filter_map(|(k, l)| Some((k.strip_prefix("family_")?, l.split(' ').collect())))
        .collect();
    assert_eq!(families.len(), count, "{out}");
    let reference = &families
        .iter()
        .find(|(n, _)| *n == "reference")
        .expect("the reference family")
        .1;
    // id 0, available, passed its known-answer test, one signature per call.
    assert_eq!(&reference[..4], &["0", "1", "1", "1"], "{out}");
    let portable = &families
        .iter()
        .find(|(n, _)| *n == "portable")
        .expect("the portable family")
        .1;
    assert_eq!(&portable[..4], &["4", "1", "1", "1"], "{out}");
    // Every size is served by exactly one family; every operation counted by one of them.
    for size in 0..4 {
        let serving = families
            .iter()
            .filter(|(_, f)| f[4].as_bytes()[size] == b'1')
            .count();
        assert_eq!(serving, 1, "size {size}: {out}");
    }
    let slots: u64 = families.iter().map(|(_, f)| f[5].parse::<u64>().unwrap()).sum();
    assert_eq!(slots, ops, "{out}");
    // Per curve (1.3): the two-call convention, then what each curve runs on this CPU.
    assert_eq!(v["curves_count_rv"], "0");
    assert_eq!(v["curves_count"], "5", "{out}");
    assert_eq!(
        v["curves_small_rv"],
        cryptoki_sys::CKR_BUFFER_TOO_SMALL.to_string()
    );
    assert_eq!(v["curves_small_count"], "5");
    assert_eq!(v["curves_rv"], "0");
    assert_eq!(
        v["curves_null_count_rv"],
        cryptoki_sys::CKR_ARGUMENTS_BAD.to_string()
    );
    let mulx = std::arch::is_x86_feature_detected!("bmi2") && std::arch::is_x86_feature_detected!("adx");
    let p256 = if mulx { "mulx" } else { "portable" };
    assert_eq!(v["curve_p256"], p256, "{out}");
    let ed25519 = if std::arch::is_x86_feature_detected!("avx512ifma")
        && std::arch::is_x86_feature_detected!("avx512vl")
    {
        "avx512ifma"
    } else if std::arch::is_x86_feature_detected!("avx2") {
        "avx2"
    } else {
        "serial"
    };
    assert_eq!(v["curve_ed25519"], ed25519, "{out}");
    for c in ["p384", "p521", "ed448"] {
        assert_eq!(v[format!("curve_{c}").as_str()], "rustcrypto", "{out}");
    }
}

/// `FERROHSM_KERNEL=portable` moves P-256 to its portable arithmetic, as it moves RSA to the
/// portable kernel, and the vendor API reports it (tests/ec.rs signs on both families).
#[test]
fn ferrohsm_kernel_forces_the_p256_family() {
    let env = TestEnv::new();
    let p = load();
    new_token(&p, "vendor");
    p.finalize().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = env.dir.path().join("vendor");
    let cc = Command::new("cc")
        .args(["-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(root.join("tests/c/vendor.c"))
        .arg("-I")
        .arg(root.join("include"))
        .arg("-ldl")
        .output()
        .expect("a C compiler (cc) must be installed");
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    let run = Command::new(&exe)
        .arg(module_path())
        .env("FERROHSM_CONF", env.conf())
        .env("FERROHSM_KERNEL", "portable")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    let v: HashMap<&str, &str> = out.lines().filter_map(|l| l.split_once(' ')).collect();
    assert_eq!(v.get("curve_p256"), Some(&"portable"), "{out}");
}
