//! ECDSA on P-256 on dedicated arithmetic: the signature's arithmetic (k·G, s = k⁻¹·(z + r·d))
//! in constant time, and the check before release (u1·G + u2·Q) in variable time. The nonce,
//! encodings and key checks stay in `engine::ec::sign` / `mechanism::ec`.
//!
//! Why: the p256 crate's arithmetic (generic 4-limb Montgomery with 8 multiply-adds per
//! reduction, field add/sub as calls, a general multiply for squares, safegcd inversions) made
//! ferrohsm sign P-256 at 0.36-0.54x SoftHSM with one client. Here:
//! - `field`: p ≡ -1 (mod 2^64) makes each reduction step's quotient the low limb itself, and
//!   adding q·p costs two products; a dedicated square (10 products); add, sub and selects
//!   inlined and branch-free.
//! - `scalar`: general Montgomery modulo n.
//! - Both invert by Bernstein–Yang divsteps (`engine::ec::safegcd`): 2.2 µs constant-time
//!   where Fermat's chains took 5.4 µs (p) and 9.5 µs (n); the p256 crate's "constant-time"
//!   safegcd was refused (valgrind sees its jump_step branch on the secret k). The signer now
//!   inverts blinded values (times a fresh random factor) by the variable-time divsteps
//!   (`sign_ct`), the check its public s likewise.
//! - `comb`: k·G with no doublings (a mixed addition per 6-bit window, every table entry read
//!   under a mask), one inversion at the end.
//! - `check`: the segment-table double-scalar multiplication of `engine::ec::check`, on
//!   this field, 16 segments; s⁻¹ by the same divsteps (faster than a variable-time safegcd).
//!
//! Measured (AMD EPYC, AVX2/BMI2/ADX, 2 cores, load 5-8 from other builds: absolute figures
//! are inflated, ratios are from one run), one client through PKCS#11, sign with its check:
//! 9,198/s (p50 68 µs) against 4,504/s (146 µs) for the p256-crate path and 10,254/s for
//! SoftHSM 2.6.1 (0.90x, was 0.44x); `ferrohsm-util speed`: verify 18,170/s against 8,343/s.
//! The portable family alone: 0.84x SoftHSM in the same session. Second pass (stage table in
//! docs/performance.md, benches/p256.rs): sign + check 64.2 -> 53.9 µs of CPU. Still open: a
//! dedicated mulx square, window 7 (37 windows of 64 entries), a faster field multiplication
//! (the chains are latency-bound at ~19.5 ns a product in both families).

pub mod check;
pub mod comb;
pub mod field;
#[cfg(target_arch = "x86_64")]
pub mod mulx;
pub mod point;
pub mod scalar;

pub use check::KeyTable;
use field::{Arith, Portable};
use scalar::Scalar;
use std::sync::atomic::{AtomicU8, Ordering};
use zeroize::Zeroize;

/// The field families, best first: `mulx` (x86-64 with BMI2 and ADX), `portable` (u128
/// products, every CPU). The choice is made per operation from `FAMILY`, so a whole signature
/// or check runs on one monomorphised copy of the arithmetic.
const AUTO: u8 = 0;
const PORTABLE: u8 = 1;
const MULX: u8 = 2;
static FAMILY: AtomicU8 = AtomicU8::new(AUTO);

/// Applies the operator's kernel choice (`FERROHSM_KERNEL`, `engine.kernel`): `portable` forces
/// the portable family, `mulx` asks for the mulx one (where the CPU runs it), anything else
/// (`auto`, the RSA-only vector families) leaves the choice to the CPU.
pub fn force(kernel: &str) {
    let f = match kernel {
        "portable" => PORTABLE,
        "mulx" => MULX,
        _ => AUTO,
    };
    FAMILY.store(f, Ordering::Relaxed);
}

/// The name of the family P-256 runs on this CPU under the current choice.
pub fn family_name() -> &'static str {
    if use_mulx() {
        "mulx"
    } else {
        Portable::NAME
    }
}

fn use_mulx() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        FAMILY.load(Ordering::Relaxed) != PORTABLE && mulx::available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Runs `$f::<family>($args)` on the family chosen for this CPU (`$f` a function's name or
/// path).
macro_rules! dispatch {
    ($($f:ident)::+($($arg:expr),*)) => {{
        #[cfg(target_arch = "x86_64")]
        {
            if use_mulx() {
                $($f)::+::<mulx::Mulx>($($arg),*)
            } else {
                $($f)::+::<Portable>($($arg),*)
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            $($f)::+::<Portable>($($arg),*)
        }
    }};
}

/// `check::odd_multiples` on the family chosen for this CPU (the limbs are the same in every
/// family): the check's tables and the comb's.
pub(crate) fn odd_multiples_here(
    q: &p256::AffinePoint,
    seg: usize,
    l: usize,
    half: usize,
) -> Vec<point::Entry> {
    dispatch!(check::odd_multiples(q, seg, l, half))
}

/// x(k·G) for big-endian k in [1, n - 1], constant time.
pub fn mul_g_x(k: &[u8; 32]) -> [u8; 32] {
    let comb = comb::comb();
    dispatch!(mul_g_x_with(comb, k))
}

fn mul_g_x_with<A: Arith>(comb: &comb::Comb, k: &[u8; 32]) -> [u8; 32] {
    comb.mul_x::<A>(k)
}

/// Whether (r, s) is a valid signature of `z` for the key of table `q` (`check::verify`).
/// `s_inv` is the signer's s⁻¹ (`sign`'s third value), used only if s·s_inv ≡ 1 (mod n).
pub fn verify(q: &KeyTable, z: &[u8; 32], r: &[u8; 32], s: &[u8; 32], s_inv: Option<&[u8; 32]>) -> bool {
    dispatch!(verify_with(q, z, r, s, s_inv))
}

fn verify_with<A: Arith>(
    q: &KeyTable,
    z: &[u8; 32],
    r: &[u8; 32],
    s: &[u8; 32],
    s_inv: Option<&[u8; 32]>,
) -> bool {
    check::verify::<A>(q, z, r, s, s_inv)
}

/// (r, s, s⁻¹) of the ECDSA signature of `z` (bits2int of the hash, left-padded to 32 bytes)
/// with private key `d` and nonce `k`, both big-endian in [1, n - 1]; None when r or s is zero
/// (the caller draws another nonce). Constant time in d and k. s⁻¹ is public (s is) and comes
/// from the one inversion the signature needs: the check may use it (`verify`). `blind`:
/// 128 fresh random bytes for the blinding factors of the two inversions (`sign_ct`).
pub fn sign(
    d: &[u8; 32],
    z: &[u8; 32],
    k: &[u8; 32],
    blind: &[u8; 128],
) -> Option<([u8; 32], [u8; 32], [u8; 32])> {
    let (r, s, s_inv) = dispatch!(sign_ct(d, z, k, blind));
    // r and s are the public signature: these branches leak nothing.
    if r == [0; 32] || s == [0; 32] {
        return None;
    }
    Some((r, s, s_inv))
}

/// `sign` without the test for zero, with family `A`: no branch and no memory index depends
/// on d or k (the constant-time test runs this under valgrind). d and k must be in
/// [1, n - 1]: they are not checked here (a check would branch on them).
///
/// One inversion serves k⁻¹ and s⁻¹ (the check's, which it would otherwise compute itself):
/// with w = z + r·d and t = (k·w)⁻¹, k⁻¹ = w·t, s = k⁻¹·w and s⁻¹ = k·w⁻¹ = k²·t. Five
/// products (about 0.1 µs) replace an inversion (2.6 µs on the Zen 2). w = 0 gives t = 0 and
/// s = 0, which `sign` refuses.
///
/// Both inversions (Z of k·G modulo p, k·w modulo n) are blinded: the value times a fresh
/// random factor from `blind` (uniformly random whatever the secret) is inverted in variable
/// time and multiplied by the factor again (`Fe::invert_blinded`): 2 × 1.6 µs of constant-time
/// divsteps become about 0.65 + 1.0 µs. The blinded values are declassified for valgrind.
pub fn sign_ct<A: Arith>(
    d: &[u8; 32],
    z: &[u8; 32],
    k: &[u8; 32],
    blind: &[u8; 128],
) -> ([u8; 32], [u8; 32], [u8; 32]) {
    let (bp, bn) = blind.split_at(64);
    let mut bp = field::Fe::<A>::blinding(bp.try_into().expect("64 bytes"));
    let mut bn = Scalar::blinding(bn.try_into().expect("64 bytes"));
    let mut kk = Scalar::from_be_ct(k);
    let mut dd = Scalar::from_be_ct(d);
    // r = x(k·G) mod n: x < p < 2n, so one conditional subtraction.
    let r = Scalar::reduce_be(&comb::comb().mul_x_blinded::<A>(k, &bp));
    let mut w = Scalar::reduce_be(z).add(&r.mul(&dd));
    let mut t = kk.mul(&w).invert_blinded(&bn);
    let mut k_inv = w.mul(&t);
    let s = k_inv.mul(&w);
    let s_inv = kk.mul(&kk).mul(&t);
    kk.zeroize();
    dd.zeroize();
    w.zeroize();
    t.zeroize();
    k_inv.zeroize();
    bp.zeroize();
    bn.zeroize();
    (r.to_be(), s.to_be(), s_inv.to_be())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ecdsa::signature::hazmat::PrehashVerifier;

    /// Signatures from random keys, hashes and nonces verify with the p256 crate and with
    /// the check, and fail both when s or the hash changes.
    #[test]
    fn signatures_verify_with_p256_crate() {
        let rnd = || {
            let mut b = [0u8; 32];
            getrandom::fill(&mut b).unwrap();
            b
        };
        for _ in 0..40 {
            let Ok(key) = p256::ecdsa::SigningKey::from_slice(&rnd()) else {
                continue;
            };
            let vk = *key.verifying_key();
            let table = check::KeyTable::new(vk.as_affine());
            let d: [u8; 32] = key.to_bytes().into();
            let z = rnd();
            let mut blind = [0u8; 128];
            getrandom::fill(&mut blind).unwrap();
            let Some((r, s, s_inv)) = sign(&d, &z, &rnd(), &blind) else {
                continue;
            };
            // s⁻¹ as the p256 crate computes it.
            let want = <p256::Scalar as elliptic_curve::ff::PrimeField>::from_repr(s.into())
                .unwrap()
                .invert()
                .unwrap();
            assert_eq!(want.to_bytes().as_slice(), s_inv.as_slice());
            let sig = p256::ecdsa::Signature::from_scalars(r, s).unwrap();
            assert!(vk.verify_prehash(&z, &sig).is_ok());
            assert!(verify(&table, &z, &r, &s, None));
            assert!(verify(&table, &z, &r, &s, Some(&s_inv)));
            assert!(check::verify::<Portable>(&table, &z, &r, &s, Some(&s_inv)));
            // A wrong hint is not trusted: the check inverts s itself.
            let mut bad = s_inv;
            bad[31] ^= 1;
            assert!(verify(&table, &z, &r, &s, Some(&bad)));
            let mut z2 = z;
            z2[31] ^= 1;
            assert!(vk.verify_prehash(&z2, &sig).is_err());
            assert!(!verify(&table, &z2, &r, &s, Some(&s_inv)));
            let mut s2 = s;
            s2[31] ^= 4;
            assert!(!verify(&table, &z, &r, &s2, Some(&s_inv)));
            // Nor with the hint that matches the changed s: the check is a full one.
            let s2_inv = Scalar::from_be(&s2).unwrap().invert().to_be();
            assert!(!verify(&table, &z, &r, &s2, Some(&s2_inv)));
        }
    }
}
