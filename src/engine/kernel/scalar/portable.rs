//! The portable arithmetic: Montgomery multiplication and a dedicated squaring on 64-bit limbs
//! with 128-bit products, in plain Rust, for any limb count up to `MAX_LIMBS`. It runs on
//! every CPU (the signing path on aarch64 and wherever nothing faster runs) and serves every
//! two-prime key the engine accepts.

use super::limbs::{redc, reduce_once, MAX_LIMBS};
use super::Arith;

/// The portable family's arithmetic (see `Arith`).
pub struct Portable;

impl Arith for Portable {
    const NAME: &'static str = "portable";
    const DESCRIPTION: &'static str = "portable Rust Montgomery (64-bit limbs, one request per call)";
    const VENDOR_ID: u64 = 4;

    fn available() -> bool {
        true
    }

    fn serves_limbs(limbs: usize) -> bool {
        (1..=MAX_LIMBS / 2).contains(&limbs)
    }

    fn mul(a: &[u64], b: &[u64], m: &[u64], k0: u64, out: &mut [u64]) {
        mont_mul(a, b, m, k0, out)
    }

    fn sqr(a: &[u64], m: &[u64], k0: u64, out: &mut [u64]) {
        mont_sqr(a, m, k0, out)
    }
}

/// a·b·R⁻¹ mod m, R = 2^(64·L), for a, b < m; fully reduced. One pass per limb of a: the
/// product row and the reduction row share the loop (coarsely integrated operand scanning),
/// so each accumulator limb is loaded and stored once per row.
pub fn mont_mul(a: &[u64], b: &[u64], m: &[u64], k0: u64, out: &mut [u64]) {
    let n = m.len();
    assert!((1..=MAX_LIMBS).contains(&n) && a.len() == n && b.len() == n && out.len() == n);
    let mut t = [0u64; MAX_LIMBS + 1];
    let t = &mut t[..n + 1];
    for &ai in a {
        let ai = ai as u128;
        let s = ai * b[0] as u128 + t[0] as u128;
        let q = (s as u64).wrapping_mul(k0);
        let r = q as u128 * m[0] as u128 + (s as u64) as u128;
        let (mut c1, mut c2) = ((s >> 64) as u64, (r >> 64) as u64);
        for j in 1..n {
            let s = ai * b[j] as u128 + t[j] as u128 + c1 as u128;
            let r = q as u128 * m[j] as u128 + (s as u64) as u128 + c2 as u128;
            t[j - 1] = r as u64;
            c1 = (s >> 64) as u64;
            c2 = (r >> 64) as u64;
        }
        // t < 2m < 2R before the row, so the row's top is at most 65 bits.
        let s = t[n] as u128 + c1 as u128 + c2 as u128;
        t[n - 1] = s as u64;
        t[n] = (s >> 64) as u64;
    }
    reduce_once(&t[..n], t[n], m, out);
    t.fill(0);
}

/// a²·R⁻¹ mod m for a < m: every cross product once, doubled, plus the squares of the limbs,
/// then one Montgomery reduction (about 3/4 of `mont_mul`'s products).
pub fn mont_sqr(a: &[u64], m: &[u64], k0: u64, out: &mut [u64]) {
    let n = m.len();
    assert!(n >= 1 && 2 * n <= MAX_LIMBS && a.len() == n && out.len() == n);
    let mut w = [0u64; MAX_LIMBS];
    let w = &mut w[..2 * n];
    for i in 0..n {
        let ai = a[i] as u128;
        let mut c = 0u64;
        for j in i + 1..n {
            let s = ai * a[j] as u128 + w[i + j] as u128 + c as u128;
            w[i + j] = s as u64;
            c = (s >> 64) as u64;
        }
        w[i + n] = c;
    }
    // Double the cross products and add the squares in one carry chain.
    let mut top = 0u64;
    let mut c = 0u64;
    for i in 0..n {
        let sq = a[i] as u128 * a[i] as u128;
        let (lo, hi) = (w[2 * i], w[2 * i + 1]);
        let lo2 = (lo << 1) | top;
        let hi2 = (hi << 1) | (lo >> 63);
        top = hi >> 63;
        let s = lo2 as u128 + (sq as u64) as u128 + c as u128;
        w[2 * i] = s as u64;
        let s2 = hi2 as u128 + (sq >> 64) + (s >> 64);
        w[2 * i + 1] = s2 as u64;
        c = (s2 >> 64) as u64;
    }
    redc(w, m, k0, out);
    w.fill(0);
}
