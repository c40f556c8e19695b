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
//! Width 7 (37 windows of 64 entries, 152 kB) since the scan is AVX2 (two 256-bit ands and
//! ors an entry): k·G 13.5 -> 12.9 µs against width 6 (43 windows of 32) on the EPYC; with
//! the 64-bit scan, width 6 was the faster.

use super::field::{limbs_from_be, Arith, Fe};
use super::point::{Affine, Entry, Jac};
use super::scalar::N;
use crate::engine::percpu::PerCpu;
use p256::AffinePoint;
use std::sync::LazyLock;
use zeroize::Zeroize;

/// Comb width.
const W: usize = 7;
/// Entries per window.
const HALF: usize = 1 << (W - 1);
/// Windows: enough that the recoding's last digit stays below 2^W.
const NW: usize = 257usize.div_ceil(W);

/// The generator's table: window j, entry m at `NW`·j + m.
#[derive(Clone)]
pub struct Comb {
    entries: Vec<Entry>,
}

/// A copy per CPU (`engine::percpu`: two cores scanning one shared copy took 1.7× as long
/// per scan).
static COMB: LazyLock<PerCpu<Comb>> = LazyLock::new(|| PerCpu::new(Comb::new));

/// The table, this CPU's copy (the first made on first use: ~152 kB, about a millisecond;
/// each further CPU's copied from it on that CPU's first use).
pub fn comb() -> &'static Comb {
    COMB.get()
}

impl Comb {
    fn new() -> Comb {
        // Window j's entries are the odd multiples of 2^(W·j)·G: a segment table with
        // segments of W bits (`check::odd_multiples`, on the dedicated field).
        Comb {
            entries: super::odd_multiples_here(&AffinePoint::GENERATOR, NW, W, HALF),
        }
    }

    /// Entry `idx` of window `j`, reading all of the window's entries: with AVX2 where the
    /// CPU has it (`avx2` true), else 64-bit masks.
    #[inline(always)]
    fn select(&self, j: usize, idx: u64, avx2: bool) -> [u64; 8] {
        #[cfg(target_arch = "x86_64")]
        if avx2 {
            // SAFETY: `avx2` is true only where the CPU runs AVX2 (`mul_x` asks std).
            return unsafe { select_avx2(&self.entries[j * HALF..(j + 1) * HALF], idx) };
        }
        let _ = avx2;
        self.select_u64(j, idx)
    }

    /// `select` on 64-bit words: every CPU.
    #[inline(always)]
    fn select_u64(&self, j: usize, idx: u64) -> [u64; 8] {
        let mut sel = [0u64; 8];
        for (m, Entry(e)) in self.entries[j * HALF..(j + 1) * HALF].iter().enumerate() {
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
        self.mul::<A>(k_be).x_affine()
    }

    /// `mul_x` with Z⁻¹ by the blinded inversion (factor `b`, from fresh randomness): what the
    /// signer runs.
    pub fn mul_x_blinded<A: Arith>(&self, k_be: &[u8; 32], b: &Fe<A>) -> [u8; 32] {
        self.mul::<A>(k_be).x_affine_blinded(b)
    }

    /// ±k·G in Jacobian coordinates (the sign is k's or n - k's, whichever is odd).
    fn mul<A: Arith>(&self, k_be: &[u8; 32]) -> Jac<A> {
        let mut k = limbs_from_be(k_be);
        // n - k, and k replaced by it when k is even (n is odd, so one of them is odd).
        let mut neg = [0u64; 4];
        let mut borrow = 0u64;
        for i in 0..4 {
            let t = (N[i] as u128).wrapping_sub(k[i] as u128 + borrow as u128);
            neg[i] = t as u64;
            borrow = (t >> 127) as u64;
        }
        // The barrier keeps LLVM from branching on the parity (valgrind saw it do so once
        // `mul` became its own function).
        let even = barrier((k[0] & 1).wrapping_sub(1));
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
        #[cfg(target_arch = "x86_64")]
        let avx2 = std::is_x86_feature_detected!("avx2");
        #[cfg(not(target_arch = "x86_64"))]
        let avx2 = false;
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
            let mut e = self.select(j, abs >> 1, avx2);
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
        acc
    }
}

/// Entry `idx` of `row`, every entry read: two 256-bit loads, ands and ors per entry under a
/// mask from a vector compare of the entry's number with idx (no branch, no index on idx).
/// Measured on the EPYC: the 64-bit scan took ~26 instructions an entry, ~3.9 µs of the
/// 12.7 µs of k·G's 43 windows.
///
/// # Safety
/// The CPU must run AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn select_avx2(row: &[Entry], idx: u64) -> [u64; 8] {
    use core::arch::x86_64::*;
    let want = _mm256_set1_epi64x(idx as i64);
    let one = _mm256_set1_epi64x(1);
    let mut m = _mm256_setzero_si256();
    let (mut lo, mut hi) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    for e in row {
        let mask = _mm256_cmpeq_epi64(m, want);
        let p = e.0.as_ptr().cast::<__m256i>();
        // SAFETY: `e` is 8 u64 (64 bytes, aligned to 64): p and p + 1 cover it.
        let (a, b) = unsafe { (_mm256_load_si256(p), _mm256_load_si256(p.add(1))) };
        lo = _mm256_or_si256(lo, _mm256_and_si256(mask, a));
        hi = _mm256_or_si256(hi, _mm256_and_si256(mask, b));
        m = _mm256_add_epi64(m, one);
    }
    let mut out = [0u64; 8];
    let q = out.as_mut_ptr().cast::<__m256i>();
    // SAFETY: `out` is 64 bytes: q and q + 1 cover it.
    unsafe {
        _mm256_storeu_si256(q, lo);
        _mm256_storeu_si256(q.add(1), hi);
    }
    out
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
    use super::super::field::Portable;
    use super::*;
    use elliptic_curve::ff::{Field, PrimeField};
    use elliptic_curve::group::Group as _;
    use elliptic_curve::point::AffineCoordinates;
    use p256::ProjectivePoint;
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

    /// The table made on the dedicated field equals the p256 crate's, entry for entry.
    #[test]
    fn table_equals_the_p256_crate_s() {
        let want = super::super::check::reference_multiples(&AffinePoint::GENERATOR, NW, W, HALF);
        assert!(comb().entries == want);
    }

    /// The AVX2 scan and the 64-bit one pick the same entry for every index of a window.
    #[test]
    fn both_scans_select_the_same_entries() {
        let c = comb();
        for j in [0, NW / 2, NW - 1] {
            for idx in 0..HALF as u64 {
                let want = c.entries[j * HALF + idx as usize].0;
                assert_eq!(c.select_u64(j, idx), want);
                #[cfg(target_arch = "x86_64")]
                if std::is_x86_feature_detected!("avx2") {
                    assert_eq!(c.select(j, idx, true), want);
                }
            }
        }
    }

    #[test]
    fn portable_agrees_with_mul_by_generator() {
        agrees_with_mul_by_generator::<Portable>();
    }
}
