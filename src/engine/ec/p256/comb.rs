//! k·G on P-256 in constant time (k is the secret nonce): a fixed-base comb over a table made
//! once per process, no doublings, one mixed addition per window, one inversion at the end.
//!
//! - Width `W`: `NW` = ceil(257 / W) windows of 2^(W-1) affine odd multiples
//!   (2m + 1)·2^(W·j)·G, in Montgomery form as 8 limbs (x then y).
//! - Digits: the regular odd recoding of an odd scalar (k, or n - k when k is even, as
//!   x(k·G) = x(-k·G) is all ECDSA needs): every digit odd and nonzero, |d| < 2^W, so no entry
//!   is the identity and no digit needs a special case.
//! - Lookup: every entry of the window is read and and-ed with a mask that is all ones for the
//!   wanted index; the sign is applied by a masked select of y and -y.
//! - Addition: the incomplete madd formula without a branch. It can only fail when the running
//!   sum S equals ±T, the entry added: before the last window |S| < 2^(W·j) <= |T| and
//!   |S ± T| < 2^(W·(j+1)) <= 2^255 < n, so S ≢ ±T (mod n); at the last window both the sum
//!   and the double are computed and the flag of the formula selects (S = -T would mean
//!   k ≡ 0, which the caller excludes, and gives the identity anyway).
//!
//! Measured (see mod.rs) W = 6 against 7: the larger table halves nothing that matters
//! (43 against 37 additions) while doubling the bytes scanned per window.

use super::field::{limbs_from_be, Arith, Fe, Portable};
use super::point::{Affine, Jac};
use super::scalar::N;
use elliptic_curve::group::{Curve as _, Group as _};
use elliptic_curve::point::AffineCoordinates;
use p256::{AffinePoint, ProjectivePoint};
use std::sync::LazyLock;
use zeroize::Zeroize;

/// Comb width.
const W: usize = 6;
/// Entries per window.
const HALF: usize = 1 << (W - 1);
/// Windows: enough that the recoding's last digit stays below 2^W.
const NW: usize = 257usize.div_ceil(W);

/// The generator's table: window j, entry m at `NW`·j + m.
pub struct Comb {
    entries: Vec<[u64; 8]>,
}

static COMB: LazyLock<Comb> = LazyLock::new(Comb::new);

/// The process-wide table (made on first use: ~88 kB, a few milliseconds).
pub fn comb() -> &'static Comb {
    &COMB
}

impl Comb {
    fn new() -> Comb {
        // Made with the p256 crate's arithmetic: an independent implementation, used once.
        let mut proj = Vec::with_capacity(NW * HALF);
        let mut base = ProjectivePoint::GENERATOR;
        for _ in 0..NW {
            let two = base.double();
            let mut m = base;
            for _ in 0..HALF {
                proj.push(m);
                m += two;
            }
            for _ in 0..W {
                base = base.double();
            }
        }
        let mut aff = vec![AffinePoint::IDENTITY; proj.len()];
        ProjectivePoint::batch_normalize(&proj, &mut aff);
        let entries = aff
            .iter()
            .map(|a| {
                let x = Fe::<Portable>::from_be(&a.x().into()).expect("a coordinate");
                let y = Fe::<Portable>::from_be(&a.y().into()).expect("a coordinate");
                let mut e = [0u64; 8];
                e[..4].copy_from_slice(&x.0);
                e[4..].copy_from_slice(&y.0);
                e
            })
            .collect();
        Comb { entries }
    }

    /// Entry `idx` of window `j`, reading all of the window's entries.
    #[inline(always)]
    fn select(&self, j: usize, idx: u64) -> [u64; 8] {
        let mut sel = [0u64; 8];
        for (m, e) in self.entries[j * HALF..(j + 1) * HALF].iter().enumerate() {
            let x = idx ^ m as u64;
            // All ones when x = 0, else 0. The barrier keeps LLVM from turning it back into a
            // compare and conditional move on the secret index (valgrind saw it do so).
            let mask = barrier(((x | x.wrapping_neg()) >> 63).wrapping_sub(1));
            for i in 0..8 {
                sel[i] |= e[i] & mask;
            }
        }
        sel
    }

    /// x(k·G) as big-endian bytes, for big-endian k in [1, n - 1], in constant time, computed
    /// by family `A`.
    pub fn mul_x<A: Arith>(&self, k_be: &[u8; 32]) -> [u8; 32] {
        let mut k = limbs_from_be(k_be);
        // n - k, and k replaced by it when k is even (n is odd, so one of them is odd).
        let mut neg = [0u64; 4];
        let mut borrow = 0u64;
        for i in 0..4 {
            let t = (N[i] as u128).wrapping_sub(k[i] as u128 + borrow as u128);
            neg[i] = t as u64;
            borrow = (t >> 127) as u64;
        }
        let even = (k[0] & 1).wrapping_sub(1);
        for i in 0..4 {
            k[i] = (k[i] & !even) | (neg[i] & even);
        }
        neg.zeroize();
        // Bits W·j + 1 ..= W·j + W of k (positions past 255 read as zero).
        let bits = |j: usize| -> u64 {
            let pos = W * j + 1;
            let (limb, sh) = (pos / 64, pos % 64);
            let lo = k.get(limb).map_or(0, |l| l >> sh);
            let hi = if sh + W > 64 {
                k.get(limb + 1).map_or(0, |l| l << (64 - sh))
            } else {
                0
            };
            (lo | hi) & ((1 << W) - 1)
        };
        let mut acc = Jac::<A>::IDENTITY;
        for j in 0..NW {
            // d = 1 + 2·bits - 2^W (last window: 1 + 2·bits), as sign and magnitude.
            let v = 1 + 2 * bits(j);
            let (neg_mask, abs) = if j + 1 < NW {
                // v - 2^W is negative exactly when v < 2^W, i.e. the top bit of v is clear.
                let neg_mask = (v >> W).wrapping_sub(1);
                let diff = v.wrapping_sub(1 << W);
                let abs = (diff & !neg_mask) | (diff.wrapping_neg() & neg_mask);
                (neg_mask, abs)
            } else {
                (0, v)
            };
            let mut e = self.select(j, abs >> 1);
            let x = Fe::<A>::from_limbs([e[0], e[1], e[2], e[3]]);
            let y = Fe::<A>::from_limbs([e[4], e[5], e[6], e[7]]);
            e.zeroize();
            let pt = Affine {
                x,
                y: Fe::select(neg_mask, &y, &y.neg()),
            };
            if j == 0 {
                acc = Jac::from_affine(&pt);
            } else if j + 1 < NW {
                acc = acc.add_affine_ct(&pt).0;
            } else {
                let (sum, same) = acc.add_affine_ct(&pt);
                acc = Jac::select(same, &sum, &acc.double());
            }
        }
        k.zeroize();
        acc.x_affine()
    }
}

/// `v`, opaque to the optimiser.
#[inline(always)]
fn barrier(mut v: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: an empty instruction sequence that claims to change `v` in its register: no
    // memory access, no stack, no flags.
    unsafe {
        core::arch::asm!("/* {0} */", inout(reg) v, options(pure, nomem, nostack, preserves_flags));
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        v = core::hint::black_box(v);
    }
    v
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use elliptic_curve::ff::{Field, PrimeField};
    use p256::Scalar;

    /// x(k·G) by family `A` equals the p256 crate's for the edges (1, 2, 3, n - 1, n - 2,
    /// 2^255 and around, scalars whose last window's sum meets its own entry) and random
    /// scalars of both parities.
    pub(crate) fn agrees_with_mul_by_generator<A: Arith>() {
        let mut ks: Vec<Scalar> = vec![
            Scalar::ONE,
            Scalar::from(2u64),
            Scalar::from(3u64),
            -Scalar::ONE,
            -Scalar::from(2u64),
        ];
        let mut top = Scalar::ONE;
        for _ in 0..255 {
            top = top.double();
        }
        ks.extend([top, top - Scalar::ONE, top + Scalar::ONE]);
        // k = 2T for T = d·2^(W·(NW-1)): with d = 15, k = 15·2^253 - n is odd, its last digit
        // is 15, and the running sum before the last addition is T itself, the case the
        // select mends (removing the select fails this test).
        let mut t = Scalar::ONE;
        for _ in 0..W * (NW - 1) {
            t = t.double();
        }
        for d in [1u64, 3, 5, 15] {
            let tt = t * Scalar::from(d);
            ks.extend([tt.double(), -tt.double(), tt, tt + Scalar::ONE]);
        }
        for _ in 0..200 {
            let mut b = [0u8; 32];
            getrandom::fill(&mut b).unwrap();
            ks.push(<Scalar as elliptic_curve::ops::Reduce<p256::FieldBytes>>::reduce(
                &b.into(),
            ));
        }
        for k in ks {
            if bool::from(k.is_zero()) {
                continue;
            }
            let want: [u8; 32] = ProjectivePoint::mul_by_generator(&k).to_affine().x().into();
            assert_eq!(comb().mul_x::<A>(&k.to_repr().into()), want);
        }
    }

    #[test]
    fn portable_agrees_with_mul_by_generator() {
        agrees_with_mul_by_generator::<Portable>();
    }
}
