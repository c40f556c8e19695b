//! Constant-time check of the private-key path under valgrind memcheck (ctgrind method): the
//! secret key parts are marked undefined, so any branch or memory index that depends on them
//! is reported as a use of an uninitialised value. Covered, for every kernel family in the
//! registry (`Family::private_op_for_ct`; the reference, the rsa crate, excepted): key
//! preparation, input reduction, the modular exponentiation with its table selection, Garner
//! recombination, output serialisation, and the check where it reads the secrets
//! (`Family::check_for_ct`: the four-lane and scalar families check modulo the primes).
//! Where valgrind cannot execute a family's instructions (AVX-512) the family runs its
//! emulated build: the same generic code with each such instruction replaced by branch-free
//! integer code.
//!
//! Run by hand: `cargo nextest run --test constant_time` (needs valgrind).

use ferrohsm::engine::kernel::{self, KeyForm, KeySource};
use ferrohsm::engine::portable::PortableKey;
use ferrohsm::engine::{generate, KeyComponents};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

const ROLE: &str = "FERROHSM_CT_ROLE";
const KEYS: &str = "FERROHSM_CT_KEYS";

/// Valgrind client requests (valgrind.h's amd64 "special instruction" sequence: a no-op when
/// not under valgrind). Hand-written because the crates that wrap them generate bindings with
/// libclang at build time, for three requests.
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

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn write_keys(path: &Path, keys: &[KeyComponents]) {
    let mut text = String::new();
    for c in keys {
        for part in [
            &c.modulus[..],
            &c.public_exponent,
            &c.private_exponent,
            &c.prime_1,
            &c.prime_2,
            &c.exponent_1,
            &c.exponent_2,
            &c.coefficient,
        ] {
            text.push_str(&hex(part));
            text.push(' ');
        }
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

fn read_keys(path: &str) -> Vec<KeyComponents> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| {
            let p: Vec<Vec<u8>> = line.split_whitespace().map(unhex).collect();
            KeyComponents {
                modulus: p[0].clone(),
                public_exponent: p[1].clone(),
                private_exponent: p[2].clone().into(),
                prime_1: p[3].clone().into(),
                prime_2: p[4].clone().into(),
                exponent_1: p[5].clone().into(),
                exponent_2: p[6].clone().into(),
                coefficient: p[7].clone().into(),
            }
        })
        .collect()
}

/// Marks every secret byte undefined. The primes' top bytes stay defined: they give the
/// primes' bit length, which the modulus already tells.
fn mark_secret(c: &KeyComponents) {
    valgrind::undefined(&c.private_exponent);
    valgrind::undefined(&c.prime_1[1..]);
    valgrind::undefined(&c.prime_2[1..]);
    valgrind::undefined(&c.exponent_1);
    valgrind::undefined(&c.exponent_2);
    valgrind::undefined(&c.coefficient);
}

/// Inside valgrind: for every kernel family that has a constant-time build, prepare each key
/// and sign with it, alone and in mixed-key batches, with the secrets undefined. The signatures
/// are released values: they are marked defined and checked against the public key with the
/// rsa crate. One line per family says how far it got.
fn payload(keys: &[KeyComponents]) {
    // The reference form (the rsa crate's validation) is made before the secrets are marked:
    // it is not under test here, and a family may only share it, never branch on it.
    let references: Vec<Arc<PortableKey>> = keys
        .iter()
        .map(|c| Arc::new(PortableKey::new(c).unwrap()))
        .collect();
    for c in keys {
        mark_secret(c);
    }
    let inputs: Vec<Vec<u8>> = keys
        .iter()
        .map(|c| {
            let mut m = c.modulus.clone();
            m[0] >>= 1; // below n
            m
        })
        .collect();
    for family in kernel::REGISTRY {
        let forms: Vec<(usize, Arc<KeyForm>)> = keys
            .iter()
            .zip(&references)
            .map(|(c, r)| {
                let source = KeySource {
                    components: c,
                    reference: r,
                    modulus_bits: c.modulus.len() * 8,
                };
                family
                    .prepare(&source)
                    .expect("every test key has a size every family takes")
            })
            .collect();
        // Every key alone, then two keys of one class in one batch where the family batches:
        // lanes with different moduli and exponents.
        let mut batches: Vec<Vec<usize>> = (0..keys.len()).map(|i| vec![i]).collect();
        if family.max_batch() > 1 {
            for i in 0..keys.len() {
                for j in i + 1..keys.len() {
                    if forms[i].0 == forms[j].0 {
                        batches.push(vec![i, j]);
                    }
                }
            }
        }
        let (mut signed, mut checked) = (0, 0);
        for batch in &batches {
            let jobs: Vec<(&KeyForm, &[u8])> = batch
                .iter()
                .map(|&i| (&*forms[i].1, inputs[i].as_slice()))
                .collect();
            let Some(sigs) = family.private_op_for_ct(&jobs) else {
                break;
            };
            for (&i, sig) in batch.iter().zip(&sigs) {
                valgrind::defined(sig);
                let c = &keys[i];
                let public = rsa::PublicKey::new(
                    rsa::BoxedUint::from_be_slice(&c.modulus, c.modulus.len() as u32 * 8).unwrap(),
                    rsa::BoxedUint::from_be_slice(&c.public_exponent, 64).unwrap(),
                )
                .unwrap();
                let s = rsa::BoxedUint::from_be_slice(sig, c.modulus.len() as u32 * 8).unwrap();
                let back = rsa::hazmat::rsa_encrypt(&public, &s).unwrap();
                let want = rsa::BoxedUint::from_be_slice(&inputs[i], c.modulus.len() as u32 * 8).unwrap();
                assert!(back == want, "{}: signature {i} does not verify", family.name());
                signed += 1;
            }
            // The check, where it reads the secrets (modulo the primes): only its verdicts,
            // declassified here, may depend on them.
            if let Some(verdicts) = family.check_for_ct(&jobs, &sigs) {
                let verdicts: Vec<u8> = verdicts.into_iter().map(u8::from).collect();
                valgrind::defined(&verdicts);
                assert!(
                    verdicts.iter().all(|&v| v == 1),
                    "{}: a right signature failed the check",
                    family.name()
                );
                checked += verdicts.len();
            }
        }
        if signed == 0 {
            println!("ct payload {}: no constant-time build", family.name());
        } else {
            println!(
                "ct payload {}: {} keys prepared, {signed} signatures made and verified, {checked} \
                 checked modulo the primes",
                family.name(),
                keys.len()
            );
        }
    }
}

/// A deliberate leak: branches on a secret byte. Shows that the marking works and valgrind
/// reports what the real check looks for.
fn leaky_payload(keys: &[KeyComponents]) {
    mark_secret(&keys[0]);
    if keys[0].exponent_1[3] > 0x7f {
        println!("ct payload: leaky branch taken (high)");
    } else {
        println!("ct payload: leaky branch taken (low)");
    }
}

fn run_under_valgrind(role: &str, keys: &Path) -> (bool, String, String) {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("valgrind")
        .args([
            "--tool=memcheck",
            "--error-exitcode=99",
            "--leak-check=no",
            "--track-origins=yes",
            "--num-callers=30",
        ])
        .arg(&exe)
        .args([
            "--exact",
            "private_key_path_is_constant_time_under_valgrind",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .env(KEYS, keys)
        .output()
        .expect("valgrind is not installed (apt-get install valgrind; .ci/run installs it)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn private_key_path_is_constant_time_under_valgrind() {
    match std::env::var(ROLE).as_deref() {
        Ok("check") => return payload(&read_keys(&std::env::var(KEYS).unwrap())),
        Ok("leak") => return leaky_payload(&read_keys(&std::env::var(KEYS).unwrap())),
        _ => {}
    }
    // Keys are made here, outside valgrind (prime search there takes minutes): two of 1024
    // bits and two of 2048 (CRT halves of 10 and 20 limbs; larger sizes run the same code).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys");
    let keys: Vec<KeyComponents> = [1024, 1024, 2048, 2048]
        .iter()
        .map(|&bits| generate(bits, &[1, 0, 1]).unwrap())
        .collect();
    write_keys(&path, &keys);

    let (ok, stdout, stderr) = run_under_valgrind("check", &path);
    assert!(
        ok && stderr.contains("ERROR SUMMARY: 0 errors"),
        "valgrind found secret-dependent branches or indexes:\n{stderr}"
    );
    // Every family but the reference (the rsa crate) proves itself here.
    for (i, family) in kernel::REGISTRY.iter().enumerate() {
        let line = if i == kernel::REFERENCE {
            format!("ct payload {}: no constant-time build", family.name())
        } else {
            format!("ct payload {}: 4 keys prepared, ", family.name())
        };
        assert!(
            stdout.contains(&line),
            "the payload did not run to the end for {}:\n{stdout}\n{stderr}",
            family.name()
        );
        // The four-lane and scalar families check modulo the primes: every signature's check
        // ran too (the four-lane ones sign 4 keys alone and 2 pairs; mulx runs under valgrind
        // whatever the CPU).
        let four_lanes = ["avx2", "fma"].contains(&family.name()) && family.available();
        if four_lanes || ["mulx", "portable"].contains(&family.name()) {
            let n = if four_lanes { 8 } else { 4 };
            let line = format!(
                "ct payload {}: 4 keys prepared, {n} signatures made and verified, {n} checked",
                family.name()
            );
            assert!(stdout.contains(&line), "{line}\n{stdout}");
        }
    }

    let (ok, stdout, stderr) = run_under_valgrind("leak", &path);
    assert!(stdout.contains("leaky branch taken"), "{stdout}\n{stderr}");
    assert!(
        !ok && stderr.contains("Conditional jump or move depends on uninitialised value"),
        "valgrind did not see a branch on a marked secret: the check is blind\n{stderr}"
    );
}
