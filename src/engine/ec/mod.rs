//! Elliptic-curve arithmetic of the engine: what computes with private EC keys and what
//! checks every EC signature before release. `sign` (k·G by a constant-time comb, s, the
//! hedged nonce) and `check` (u1·G + u2·Q over cached tables) serve every Weierstrass curve;
//! P-384 and P-521 run them on the RustCrypto crates' field types, P-256 on `p256`, its
//! dedicated field, scalar, points, comb and check. `safegcd` is the constant-time inversion
//! (Bernstein–Yang divsteps) for P-256 and P-384; `wnaf` the public-scalar recoding every
//! check uses. `ed25519` is the Ed25519 check on a field and tables of its own (signing stays
//! with curve25519-dalek). `mechanism::ec` keeps the encodings, parameters and key objects and drives these.

pub mod check;
pub mod ed25519;
pub mod p256;
pub mod rfc6979;
pub mod safegcd;
pub mod sign;
pub mod wnaf;

/// Which arithmetic each curve runs on this CPU under the operator's choice, as
/// `(curve, family)`: what `FERROHSM_GetCurveFamilies` and `ferrohsm-util speed` report.
/// P-256 has its own families (`p256::force` applies `FERROHSM_KERNEL`); Ed25519 runs on
/// curve25519-dalek, whose backend the crate picks at run time from the CPU (`ed25519_backend`);
/// P-384, P-521 and Ed448 run on the RustCrypto crates' fields.
pub fn families() -> [(&'static str, &'static str); 5] {
    [
        ("p256", p256::family_name()),
        ("p384", "rustcrypto"),
        ("p521", "rustcrypto"),
        ("ed25519", ed25519_backend()),
        ("ed448", "rustcrypto"),
    ]
}

/// curve25519-dalek's backend on this CPU: the AVX-512 IFMA one where the build compiled it in
/// (`.cargo/config.toml` sets `curve25519_dalek_backend = "avx512"`) and the CPU has IFMA and
/// VL, else AVX2 where the CPU has it, else the serial one: the crate's own run-time rule
/// (`backend::get_selected_backend`, not public), restated here to be reported.
pub fn ed25519_backend() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if cfg!(curve25519_dalek_backend = "avx512")
            && std::arch::is_x86_feature_detected!("avx512ifma")
            && std::arch::is_x86_feature_detected!("avx512vl")
        {
            return "avx512ifma";
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            return "avx2";
        }
    }
    "serial"
}
