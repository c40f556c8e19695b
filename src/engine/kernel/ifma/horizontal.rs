//! The public-key check of a lone signature: one exponentiation with its limbs spread across the
//! lanes of 256-bit registers (the "horizontal" layout), instead of one lane of the vertical
//! kernels. Public data only (signature, modulus, exponent): variable time is fine here.
//!
//! Why: a vertical kernel with a single operand at 2·L limbs leaves all but one lane idle, and
//! that one lane does every limb product; here four limb products share each instruction.
//! Not 512-bit registers: a lone request's exponentiation runs on 128-bit ones, and the
//! 512-bit form of this check, though faster alone (6.7 µs against 8 at RSA-2048), made lone
//! requests slower overall, as if a few thousand dense 512-bit IFMAs per request kept the core
//! at its lower AVX-512 clock (a single one per request changes nothing measurable).
//! Each step's multiplier q waits on the previous step, so limb 0 is kept in a scalar register
//! as in OpenSSL's AMM x1 routines: the chain per step is a few scalar operations and one lane
//! read, short enough that the IFMAs, not the chain, set the pace.

use super::radix52::MASK52;
use core::arch::x86_64::*;

/// Limbs per register.
const W: usize = 4;

/// Registers per operand for a limb count.
pub const fn registers(limbs: usize) -> usize {
    limbs.div_ceil(W)
}

/// `base^e mod n` for one lane, fully reduced, as `n.len()` normalised limbs. `k0` = −n⁻¹ mod
/// 2^52, `rr` = R² mod n with R = 2^(52·n.len()); `base` < n; `e` ≥ 1.
/// Callers check `super::vertical::available()`.
pub fn powmod_public(base: &[u64], n: &[u64], k0: u64, rr: &[u64], e: u64) -> Vec<u64> {
    assert!(super::vertical::available() && e != 0);
    assert!(base.len() == n.len() && rr.len() == n.len());
    // SAFETY: the CPU has AVX-512 F and IFMA (asserted above).
    unsafe {
        match registers(n.len()) {
            5 => powmod::<5>(base, n, k0, rr, e),
            10 => powmod::<10>(base, n, k0, rr, e),
            15 => powmod::<15>(base, n, k0, rr, e),
            20 => powmod::<20>(base, n, k0, rr, e),
            r => panic!("no horizontal kernel for {r} registers"),
        }
    }
}

/// A number as `W·R` limbs, the limbs beyond the modulus length zero.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Limbs<const R: usize>([[u64; W]; R]);

impl<const R: usize> Limbs<R> {
    fn from(x: &[u64]) -> Self {
        let mut out = Limbs([[0; W]; R]);
        for (i, &v) in x.iter().enumerate() {
            out.0[i / W][i % W] = v;
        }
        out
    }

    fn get(&self, i: usize) -> u64 {
        self.0[i / W][i % W]
    }

    fn set(&mut self, i: usize, v: u64) {
        self.0[i / W][i % W] = v;
    }

    #[target_feature(enable = "avx")]
    unsafe fn load(&self) -> [__m256i; R] {
        core::array::from_fn(|r| _mm256_load_si256(self.0[r].as_ptr() as *const _))
    }
}

/// The operands every multiplication of one exponentiation shares.
struct Modulus<const R: usize> {
    m: [__m256i; R],
    m0: u64,
    k0: u64,
    limbs: usize,
}

#[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
unsafe fn powmod<const R: usize>(base: &[u64], n: &[u64], k0: u64, rr: &[u64], e: u64) -> Vec<u64> {
    let md = Modulus {
        m: Limbs::<R>::from(n).load(),
        m0: n[0],
        k0,
        limbs: n.len(),
    };
    let x = amm(&Limbs::<R>::from(base), &Limbs::<R>::from(rr), &md);
    let mut acc = x;
    let bits = 64 - e.leading_zeros() as usize;
    for bit in (0..bits - 1).rev() {
        acc = amm(&acc, &acc, &md);
        if e >> bit & 1 == 1 {
            acc = amm(&acc, &x, &md);
        }
    }
    // Out of Montgomery form: AMM(acc, 1) ≤ n; n itself stands for 0.
    let r = amm(&acc, &Limbs::<R>::from(&[1]), &md);
    let out: Vec<u64> = (0..n.len()).map(|i| r.get(i)).collect();
    super::radix52::reduce_once(&out, n)
}

/// Almost-Montgomery multiplication a·b·R⁻¹ mod m, normalised limbs in and out (inputs below
/// 2m, output below 2m: R = 2^(52·L) ≥ 4m for every modulus the kernels take).
///
/// Step j adds a·b_j + q_j·m and drops one limb. Limb 0 is tracked in `low` alone (its lane
/// is recomputed and dropped each step), so the chain from one q to the next is scalar
/// arithmetic plus one lane read. (Computing that lane in scalar too, and adding the high
/// halves before the shift from a copy of a one limb up, shortens the chains but needs a
/// register more and ran 8% slower: the loop is bound by its IFMAs, not its latency.)
#[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
unsafe fn amm<const R: usize>(a: &Limbs<R>, b: &Limbs<R>, md: &Modulus<R>) -> Limbs<R> {
    let av = a.load();
    let a0 = a.get(0);
    let zero = _mm256_setzero_si256();
    let mut acc = [zero; R];
    let mut low: u64 = 0;
    for j in 0..md.limbs {
        let bj = b.get(j);
        let t = (a0 as u128) * (bj as u128) + low as u128;
        let q = (t as u64).wrapping_mul(md.k0) & MASK52;
        let t = t + (md.m0 as u128) * (q as u128);
        // t ≡ 0 mod 2^52: what is left carries into the next limb, high halves included.
        low = (t >> 52) as u64;
        let (bv, qv) = (_mm256_set1_epi64x(bj as i64), _mm256_set1_epi64x(q as i64));
        let sum: [__m256i; R] = core::array::from_fn(|r| {
            let v = _mm256_madd52lo_epu64(acc[r], av[r], bv);
            _mm256_madd52lo_epu64(v, md.m[r], qv)
        });
        // One limb down: lane i of register r takes lane i + 1 (the next register's lane 0
        // for the last lane).
        acc = core::array::from_fn(|r| {
            let next = if r + 1 < R { sum[r + 1] } else { zero };
            _mm256_alignr_epi64::<1>(next, sum[r])
        });
        low += _mm256_extract_epi64::<0>(acc[0]) as u64;
        // High halves land one limb up from their low halves: after the shift, at the
        // multiplier's own index. Limb 0's are already in `low`.
        for (r, v) in acc.iter_mut().enumerate() {
            let h = _mm256_madd52hi_epu64(*v, av[r], bv);
            *v = _mm256_madd52hi_epu64(h, md.m[r], qv);
        }
    }
    let mut out = Limbs([[0u64; W]; R]);
    for (reg, v) in out.0.iter_mut().zip(acc) {
        _mm256_store_si256(reg.as_mut_ptr() as *mut _, v);
    }
    out.set(0, low);
    // Normalise: below 2m < R, so nothing carries out of the top limb.
    let mut carry = 0u64;
    for i in 0..md.limbs {
        let v = out.get(i) + carry;
        out.set(i, v & MASK52);
        carry = v >> 52;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::kernel::ifma::radix52 as r52;

    /// Square-and-multiply on the scalar reference AMM.
    fn reference(base: &[u64], n: &[u64], k0: u64, rr: &[u64], e: u64) -> Vec<u64> {
        let x = r52::amm(base, rr, n, k0);
        let mut acc = x.clone();
        for bit in (0..63 - e.leading_zeros() as usize).rev() {
            acc = r52::amm(&acc, &acc, n, k0);
            if e >> bit & 1 == 1 {
                acc = r52::amm(&acc, &x, n, k0);
            }
        }
        let mut one = vec![0u64; n.len()];
        one[0] = 1;
        r52::reduce_once(&r52::amm(&acc, &one, n, k0), n)
    }

    /// The horizontal kernel has no emulated build: on a CPU without IFMA this test is
    /// ignored (skipped in the summary), never passed without running.
    #[test]
    #[cfg_attr(
        not(ferrohsm_host_ifma),
        ignore = "no AVX-512 IFMA on the CPU that built the tests"
    )]
    fn matches_the_scalar_reference_at_every_size() {
        assert!(
            crate::engine::kernel::ifma::available(),
            "the tests were built on a CPU with AVX-512 IFMA and run on one without: rebuild them here"
        );
        for limbs in [20usize, 40, 60, 80] {
            for seed in 0..4u64 {
                // A random odd modulus just below R/256 (the kernels' bound) and bases up to
                // n − 1, including the extremes.
                let mut n = vec![0u64; limbs];
                let mut bytes = vec![0u8; limbs * 8];
                getrandom::fill(&mut bytes).unwrap();
                for (i, l) in n.iter_mut().enumerate() {
                    *l = u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap()) & MASK52;
                }
                n[0] |= 1;
                n[limbs - 1] = (n[limbs - 1] >> 8) | (1 << 43);
                let k0 = r52::mont_k0(n[0]);
                let [_, rr, _] = crate::engine::kernel::ifma::crt::powers_of_r_pub(&n);
                let mut base = n.clone();
                match seed {
                    0 => base[0] -= 1,
                    1 => base = vec![0; limbs],
                    2 => {
                        base = vec![0; limbs];
                        base[0] = 1;
                    }
                    _ => base[limbs - 1] >>= 1,
                }
                for e in [3u64, 65537, (1 << 32) + 15, u64::MAX] {
                    assert_eq!(
                        powmod_public(&base, &n, k0, &rr, e),
                        reference(&base, &n, k0, &rr, e),
                        "{limbs} limbs, base {seed}, e = {e}"
                    );
                }
            }
        }
    }
}
