//! Constant-time check of P-256 signing under valgrind memcheck (ctgrind method, as
//! `constant_time.rs` does for RSA): the private key d and the nonce k are marked undefined,
//! so a branch or a memory index that depends on them is reported as a use of an
//! uninitialised value. Covered for both field families (`portable`, and `mulx`, whose
//! instructions valgrind executes): the nonce's conversion, the comb's recoding, table scan,
//! additions and final inversion (k·G), the scalar inversion and s = k⁻¹·(z + r·d). Both
//! inversions are blinded (a fresh random factor): the blinded products alone are declassified
//! by the signer (`engine::ct::declassify`) before their variable-time inversion. The
//! signatures are released values: marked defined, then verified with the p256 crate.
//!
//! Run by hand: `cargo nextest run --test constant_time_p256` (needs valgrind).
#![cfg(target_arch = "x86_64")]

use ecdsa::signature::hazmat::PrehashVerifier;
use ferrohsm::engine::ec::p256::{comb, field::Portable, sign_ct};
use std::process::Command;

const ROLE: &str = "FERROHSM_CT_ROLE";

/// Valgrind's client requests (valgrind.h's amd64 "special instruction" sequence, a no-op
/// outside valgrind), as in `constant_time.rs`.
mod valgrind {
    const MAKE_MEM_UNDEFINED: u64 = (b'M' as u64) << 24 | (b'C' as u64) << 16 | 1;
    const MAKE_MEM_DEFINED: u64 = (b'M' as u64) << 24 | (b'C' as u64) << 16 | 2;

    fn request(code: u64, a1: u64, a2: u64) -> u64 {
        let args: [u64; 6] = [code, a1, a2, 0, 0, 0];
        let mut result: u64 = 0;
        // SAFETY: the sequence rotates rdi by 128 bits in all (unchanged) and exchanges rbx
        // with itself; valgrind reads `args` through rax and answers in rdx.
        unsafe {
            core::arch::asm!(
                "rol rdi, 3", "rol rdi, 13", "rol rdi, 61", "rol rdi, 51", "xchg rbx, rbx",
                inout("rdx") result,
                in("rax") args.as_ptr(),
                inout("rdi") 0u64 => _,
            );
        }
        result
    }

    pub fn undefined(b: &[u8]) {
        request(MAKE_MEM_UNDEFINED, b.as_ptr() as u64, b.len() as u64);
    }

    pub fn defined(b: &[u8]) {
        request(MAKE_MEM_DEFINED, b.as_ptr() as u64, b.len() as u64);
    }
}

/// A random scalar in [1, n - 1] (top byte below 0xff: below n).
fn scalar() -> [u8; 32] {
    loop {
        let mut b = [0u8; 32];
        getrandom::fill(&mut b).unwrap();
        b[0] &= 0x7f;
        if b != [0; 32] {
            return b;
        }
    }
}

/// Inside valgrind: sign with secrets undefined, with each family; the table is made before
/// (it depends on nothing secret).
fn payload() {
    let _ = comb::comb();
    for (name, run) in [
        (
            "portable",
            sign_ct::<Portable>
                as fn(&[u8; 32], &[u8; 32], &[u8; 32], &[u8; 128]) -> ([u8; 32], [u8; 32], [u8; 32]),
        ),
        ("mulx", sign_ct::<ferrohsm::engine::ec::p256::mulx::Mulx>),
    ] {
        for _ in 0..3 {
            let d = scalar();
            let k = scalar();
            let z = scalar();
            let key = p256::ecdsa::SigningKey::from_slice(&d).unwrap();
            // The blinding bytes are fresh randomness, not secret-derived: left defined. The
            // blinded values are declassified by the signer (`engine::ct`), nothing else.
            let mut blind = [0u8; 128];
            getrandom::fill(&mut blind).unwrap();
            valgrind::undefined(&d);
            valgrind::undefined(&k);
            let (r, s, s_inv) = run(&d, &z, &k, &blind);
            valgrind::defined(&r);
            valgrind::defined(&s);
            valgrind::defined(&s_inv);
            let sig = p256::ecdsa::Signature::from_scalars(r, s).unwrap();
            assert!(
                key.verifying_key().verify_prehash(&z, &sig).is_ok(),
                "{name}: bad signature"
            );
        }
        println!("ct payload p256 {name}: 3 signatures made and verified");
    }
}

#[test]
fn p256_signing_is_constant_time_under_valgrind() {
    if std::env::var(ROLE).as_deref() == Ok("check-p256") {
        return payload();
    }
    let out = Command::new("valgrind")
        .args([
            "--tool=memcheck",
            "--error-exitcode=99",
            "--leak-check=no",
            "--track-origins=yes",
        ])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "p256_signing_is_constant_time_under_valgrind",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, "check-p256")
        .output()
        .expect("valgrind is not installed (apt-get install valgrind; .ci/run installs it)");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stderr.contains("ERROR SUMMARY: 0 errors"),
        "valgrind found secret-dependent branches or indexes:\n{stderr}"
    );
    for name in ["portable", "mulx"] {
        assert!(
            stdout.contains(&format!("ct payload p256 {name}: 3 signatures")),
            "{stdout}\n{stderr}"
        );
    }
}
