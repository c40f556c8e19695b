//! Kernel family selection through the built module: each family this CPU runs, forced with
//! FERROHSM_KERNEL (and the legacy FERROHSM_FORCE_PORTABLE alias), signs correctly (every
//! signature verified by the rsa crate) and is the family the vendor statistics count; a family
//! that does not exist, or settings that disagree, fail C_Initialize with a log line saying why.
//! One test function: the environment and the module's initialisation are process-wide.

mod common;

use common::*;
use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};

/// Signs at RSA-1024 and RSA-2048 on four threads (so batching families batch), verifying
/// every signature with the rsa crate.
fn sign_and_verify(p: &Pkcs11) {
    let slot = new_token(p, "kernels");
    sign_concurrently_verified(p, slot, &[1024, 2048], 4, 3);
}

fn try_load() -> Result<Pkcs11, cryptoki::error::Error> {
    let p = Pkcs11::new(module_path()).unwrap();
    p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))?;
    Ok(p)
}

/// The test's configuration: its store, a fast KDF, errors logged to a file of its own (the
/// module's logger keeps the target of the first C_Initialize in the process), and `engine`.
fn configure(env: &TestEnv, engine: &str) {
    std::fs::write(
        env.conf(),
        format!(
            "[store]\npath = \"store\"\n[pin]\nkdf_memory_kib = 64\nkdf_passes = 1\n[log]\nlevel = \"error\"\ntarget = \"{}\"\n[engine]\n{engine}",
            env.dir.path().join("log").display()
        ),
    )
    .unwrap();
}

/// C_Initialize with this configuration and environment must fail with CKR_GENERAL_ERROR and
/// log a line containing `want`.
fn refused(env: &TestEnv, engine: &str, want: &str) {
    configure(env, engine);
    let e = try_load()
        .map(|p| p.finalize())
        .expect_err("C_Initialize must refuse");
    assert_eq!(rv(e), cryptoki::error::RvError::GeneralError);
    let text = std::fs::read_to_string(env.dir.path().join("log")).unwrap_or_default();
    assert!(text.contains(want), "log {text:?} lacks {want:?}");
}

#[test]
fn forced_families_sign_and_unknown_ones_are_refused() {
    let env = TestEnv::new();
    configure(&env, "");
    std::env::remove_var("FERROHSM_KERNEL");
    std::env::remove_var("FERROHSM_FORCE_PORTABLE");

    // Auto: which families exist and which this CPU runs, from the module itself.
    let p = load();
    let families = kernel_stats();
    p.finalize().unwrap();
    let runnable: Vec<String> = families
        .iter()
        .filter(|f| f.available == 1)
        .map(|f| f.name())
        .collect();
    assert!(runnable.contains(&"portable".to_string()), "{runnable:?}");
    if std::is_x86_feature_detected!("avx512ifma") && std::is_x86_feature_detected!("avx512vl") {
        assert!(runnable.contains(&"ifma".to_string()), "{runnable:?}");
    }

    // Each family forced in turn (and the legacy alias): it serves every reported size it
    // serves at all, it signs, and only it counts the signatures.
    let mut cases: Vec<(String, (&str, String))> = runnable
        .iter()
        .map(|n| (n.clone(), ("FERROHSM_KERNEL", n.clone())))
        .collect();
    cases.push(("portable".into(), ("FERROHSM_FORCE_PORTABLE", "1".into())));
    for (family, (var, value)) in cases {
        std::env::set_var(var, &value);
        let p = load();
        let before = kernel_stats();
        sign_and_verify(&p);
        let after = kernel_stats();
        p.finalize().unwrap();
        std::env::remove_var(var);
        for (b, a) in before.iter().zip(&after) {
            let signed = a.signatures() - b.signatures();
            if a.name() == family {
                assert_eq!(signed, 24, "{var}={value}: {family} made every signature");
                assert_eq!(a.serves[0..2], [1, 1], "{var}={value}");
                assert_eq!(a.self_test_passed, 1);
            } else {
                assert_eq!(signed, 0, "{var}={value}: {} signed", a.name());
                assert_eq!(a.serves, [0; 4], "{var}={value}: {} serves", a.name());
            }
        }
    }

    // Refusals, each with its reason in the log: an unknown name from the environment or the
    // file, and two settings of one source that disagree.
    std::env::set_var("FERROHSM_KERNEL", "nonsense");
    refused(
        &env,
        "",
        "FERROHSM_KERNEL: unknown RSA kernel \"nonsense\"; known: auto,",
    );
    std::env::remove_var("FERROHSM_KERNEL");
    refused(
        &env,
        "kernel = \"nonsense\"\n",
        "engine.kernel must be one of [\"auto\", ",
    );
    if runnable.iter().any(|n| n != "portable") {
        let other = runnable.iter().find(|n| *n != "portable").unwrap();
        refused(
            &env,
            &format!("kernel = \"{other}\"\nforce_portable = true\n"),
            "disagree",
        );
    }
    // The file's choice is honoured too; the environment overrides it.
    configure(&env, "kernel = \"portable\"\n");
    let p = load();
    let portable = kernel_stats()
        .into_iter()
        .find(|f| f.name() == "portable")
        .unwrap();
    assert_eq!(portable.serves, [1; 4]);
    p.finalize().unwrap();
    std::env::set_var("FERROHSM_KERNEL", "auto");
    let p = load();
    let stats = kernel_stats();
    p.finalize().unwrap();
    std::env::remove_var("FERROHSM_KERNEL");
    let first_runnable = stats.iter().find(|f| f.available == 1).unwrap();
    assert_eq!(
        first_runnable.serves[1], 1,
        "auto picks the preferred family for RSA-2048"
    );
    lone_signer_gets_the_family_the_fill_policy_names(&env, &first_runnable.name(), &runnable);

    // A list limits the choice to its members, in registry order with the fill policy: on an
    // IFMA machine `avx2,mulx` is what a CPU without IFMA chooses from.
    std::env::set_var("FERROHSM_KERNEL", "portable,nonsense");
    refused(&env, "", "unknown RSA kernel \"nonsense\"");
    std::env::remove_var("FERROHSM_KERNEL");
    refused(
        &env,
        "kernel = \"portable, avx9\"\n",
        "engine.kernel must be one of",
    );
    let batching = runnable.iter().find(|n| {
        families
            .iter()
            .any(|f| f.name() == **n && f.max_batch > 1 && n.as_str() != "ifma")
    });
    let list = match batching {
        Some(b) if runnable.iter().any(|n| n == "mulx") => vec![b.clone(), "mulx".to_string()],
        _ => vec!["portable".to_string(), "reference".to_string()],
    };
    configure(&env, &format!("kernel = \"{}\"\n", list.join(", ")));
    let p = load();
    let stats = kernel_stats();
    p.finalize().unwrap();
    for f in &stats {
        let member = list.contains(&f.name());
        assert_eq!(
            f.serves[1] == 1,
            f.name() == list[0],
            "kernel = {list:?}: {} serves RSA-2048",
            f.name()
        );
        if !member {
            assert_eq!(f.serves, [0; 4], "kernel = {list:?}: {} is not allowed", f.name());
        }
    }
    lone_signer_gets_the_family_the_fill_policy_names_with(
        &env,
        &format!("kernel = \"{}\"\n", list.join(", ")),
        &list[0],
        &list,
    );
    // Concurrent signers: only members sign.
    let p = load();
    let before = kernel_stats();
    let slot = new_token(&p, "list");
    sign_concurrently_verified(&p, slot, &[1024, 2048], 8, 4);
    let after = kernel_stats();
    p.finalize().unwrap();
    let mut total = 0;
    for (b, a) in before.iter().zip(&after) {
        let signed = a.signatures() - b.signatures();
        total += signed;
        if !list.contains(&a.name()) {
            assert_eq!(signed, 0, "kernel = {list:?}: {} signed", a.name());
        }
    }
    assert_eq!(total, 64, "kernel = {list:?}: every signature counted");
}

/// A single-threaded signer (ldns-signzone, kzonesign) makes batches of one: they run on the
/// family `FILL_POLICY` names for one signature of the preferred multi-buffer family where it
/// wins (e.g. mulx beside a 4-lane AVX2 kernel), else on the preferred family itself.
fn lone_signer_gets_the_family_the_fill_policy_names(env: &TestEnv, preferred: &str, runnable: &[String]) {
    lone_signer_gets_the_family_the_fill_policy_names_with(env, "", preferred, runnable)
}

/// The same, with `engine` in the configuration (the families it allows in `runnable`).
fn lone_signer_gets_the_family_the_fill_policy_names_with(
    env: &TestEnv,
    engine: &str,
    preferred: &str,
    runnable: &[String],
) {
    configure(env, engine);
    let expected = ferrohsm::engine::kernel::fill_rule(preferred, 1, 2048)
        .map(|r| r.instead.to_string())
        .filter(|f| runnable.contains(f))
        .unwrap_or_else(|| preferred.to_string());
    let p = load();
    let before = kernel_stats();
    let slot = new_token(&p, "lone");
    sign_concurrently_verified(&p, slot, &[2048], 1, 6);
    let after = kernel_stats();
    p.finalize().unwrap();
    for (b, a) in before.iter().zip(&after) {
        let signed = a.signatures() - b.signatures();
        // c_ulong is u64 on the Unix ABIs the module supports.
        #[allow(clippy::useless_conversion)]
        let lone = u64::from(a.batches[0] - b.batches[0]);
        if a.name() == expected {
            assert_eq!(
                (signed, lone),
                (6, 6),
                "a lone RSA-2048 signer runs on {expected}"
            );
        } else {
            assert_eq!(
                signed,
                0,
                "{} signed for a lone signer ({expected} expected; engine {engine:?}, preferred {preferred})",
                a.name()
            );
        }
    }
}
