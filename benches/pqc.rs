//! ML-DSA-65 and SLH-DSA-SHA2-128f on one core: the RustCrypto crates alone (the fastest
//! implementations that run here: OpenSSL is 3.0, without them, and liboqs is not packaged),
//! then the token's own path under the seam (`mechanism::pq::sign`: framing, signing, the check
//! before release). The difference is what the token adds before PKCS#11; docs/performance.md
//! sets these beside `ferrohsm-util speed --pq`. µs of this thread's CPU time per operation,
//! best of 3 rounds. cargo bench --bench pqc
use cryptoki_sys::*;
use ferrohsm::mechanism::pq::{self, Family, SignParams};
use ferrohsm::mechanism::{ml_dsa::MlDsa, slh_dsa::SlhDsa};
use ml_dsa::{Keypair, MlDsa65, SigningKey, B32};
use slh_dsa::Sha2_128f;

#[path = "common/cpu_time.rs"]
mod cpu_time;
use cpu_time::cpu;

/// µs of CPU per call of `f`, best of 3 rounds of 1 s.
fn us(mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = cpu();
        let mut n = 0u64;
        while cpu() - t < 1.0 {
            f();
            n += 1;
        }
        best = best.min((cpu() - t) * 1e6 / n as f64);
    }
    best
}

fn row(what: &str, sign: f64, verify: f64) {
    println!(
        "{what:<44} {sign:>10.1} µs {verify:>10.1} µs {:>9.1} {:>9.1}",
        1e6 / sign,
        1e6 / verify
    );
}

fn main() {
    println!(
        "{:<44} {:>13} {:>13} {:>9} {:>9}",
        "one core", "sign", "verify", "sign/s", "verify/s"
    );
    let msg = b"ferrohsm speed: a message of some length, hashed or not by the mechanism";

    let sk = SigningKey::<MlDsa65>::from_seed(&B32::from([7u8; 32]));
    let vk = sk.verifying_key();
    let sig = sk.expanded_key().sign_deterministic(msg, b"").unwrap();
    row(
        "ml-dsa crate, ML-DSA-65 (deterministic)",
        us(|| {
            std::hint::black_box(sk.expanded_key().sign_deterministic(msg, b"").unwrap());
        }),
        us(|| assert!(vk.verify_with_context(msg, b"", &sig))),
    );

    let sk = slh_dsa::SigningKey::<Sha2_128f>::slh_keygen_internal(&[1; 16], &[2; 16], &[3; 16]);
    let vk: &slh_dsa::VerifyingKey<Sha2_128f> = sk.as_ref();
    let sig = sk.try_sign_with_context(msg, b"", None).unwrap();
    row(
        "slh-dsa crate, SLH-DSA-SHA2-128f (deterministic)",
        us(|| {
            std::hint::black_box(sk.try_sign_with_context(msg, b"", None).unwrap());
        }),
        us(|| vk.try_verify_with_context(msg, b"", &sig).unwrap()),
    );

    let p = SignParams::default();
    for (name, family, set) in [
        (
            "token path, ML-DSA-65 (hedged, checked)",
            &MlDsa as &dyn Family,
            CKP_ML_DSA_65,
        ),
        (
            "token path, SLH-DSA-SHA2-128f (hedged, checked)",
            &SlhDsa,
            CKP_SLH_DSA_SHA2_128F,
        ),
    ] {
        let key = family.generate(set).unwrap();
        let public = key.public();
        let sig = pq::sign(key.as_ref(), None, &p, msg).unwrap();
        row(
            name,
            us(|| {
                std::hint::black_box(pq::sign(key.as_ref(), None, &p, msg).unwrap());
            }),
            us(|| pq::verify(public.as_ref(), None, &p, msg, &sig).unwrap()),
        );
    }
}
