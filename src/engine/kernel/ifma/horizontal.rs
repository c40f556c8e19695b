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
//!
//! The kernel is written once over the vertical kernels' registers (`Simd`, with `Lanes4`'s
//! two lane moves) and compiled twice, like them: on AVX-512 IFMA registers, and emulated in
//! plain integers (`Emu` at four lanes) so its tests and the emulated family's lone checks run
//! on every CPU.

use super::radix52::MASK52;
use super::vertical::{Emu, Kernel, Simd, Ymm};
use core::arch::x86_64::*;

/// Limbs per register.
const W: usize = 4;

/// Registers per operand for a limb count.
pub const fn registers(limbs: usize) -> usize {
    limbs.div_ceil(W)
}

/// `base^e mod n` for one lane, fully reduced, as `n.len()` normalised limbs. `k0` = −n⁻¹ mod
/// 2^52, `rr` = R² mod n with R = 2^(52·n.len()); `base` < n; `e` ≥ 1. The AVX-512 build
/// needs `super::vertical::available()`; the emulated one runs anywhere (tests on CPUs
/// without IFMA).
pub fn powmod_public(kernel: Kernel, base: &[u64], n: &[u64], k0: u64, rr: &[u64], e: u64) -> Vec<u64> {
    assert!(e != 0 && (kernel == Kernel::Emulated || super::vertical::available()));
    assert!(base.len() == n.len() && rr.len() == n.len());
    macro_rules! run {
        ($($r:literal)*) => {
            match (kernel, registers(n.len())) {
                $(
                    // SAFETY: the AVX-512 build runs only where the CPU has AVX-512 F, IFMA
                    // and VL (asserted above); the emulated build needs nothing.
                    (Kernel::Avx512, $r) => unsafe { avx512::powmod::<Ymm, $r>(base, n, k0, rr, e) },
                    (Kernel::Emulated, $r) => unsafe { emulated::powmod::<Quad, $r>(base, n, k0, rr, e) },
                )*
                (_, r) => panic!("no horizontal kernel for {r} registers"),
            }
        };
    }
    run!(5 10 15 20)
}

/// The vertical kernels' registers (`Simd`) at four lanes, with the two moves across lanes the
/// check needs besides. `Ymm`'s methods need AVX-512 F, IFMA and VL: callers guarantee them.
trait Lanes4: Simd {
    /// Lanes 1..4 of `low`, then lane 0 of `high`: one limb down across two registers.
    unsafe fn down(low: Self, high: Self) -> Self;
    unsafe fn first(self) -> u64;
}

impl Lanes4 for Ymm {
    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    unsafe fn down(low: Self, high: Self) -> Self {
        Ymm(_mm256_alignr_epi64::<1>(high.0, low.0))
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    unsafe fn first(self) -> u64 {
        _mm256_extract_epi64::<0>(self.0) as u64
    }
}

/// Four lanes in plain integers: the emulated build.
type Quad = Emu<W>;

impl Lanes4 for Quad {
    unsafe fn down(low: Self, high: Self) -> Self {
        Emu([low.0[1], low.0[2], low.0[3], high.0[0]])
    }
    unsafe fn first(self) -> u64 {
        self.0[0]
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
}

/// The operands every multiplication of one exponentiation shares.
struct Modulus<V, const R: usize> {
    m: [V; R],
    m0: u64,
    k0: u64,
    limbs: usize,
}

/// The kernel, generic over the register type, compiled twice: for `Ymm` with the AVX-512
/// target features, and for `Quad` without any (so the emulated build holds no AVX-512
/// instruction and runs anywhere).
macro_rules! kernel {
    ($module:ident $(, #[$attr:meta])*) => {
        mod $module {
            use super::*;

$(#[$attr])*
pub(super) unsafe fn powmod<V: Lanes4, const R: usize>(base: &[u64], n: &[u64], k0: u64, rr: &[u64], e: u64) -> Vec<u64> {
    let nl = Limbs::<R>::from(n);
    let md = Modulus {
        m: core::array::from_fn(|r| V::load(nl.0[r].as_ptr())),
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
    super::super::radix52::reduce_once(&out, n)
}

/// Almost-Montgomery multiplication a·b·R⁻¹ mod m, normalised limbs in and out (inputs below
/// 2m, output below 2m: R = 2^(52·L) ≥ 4m for every modulus the kernels take).
///
/// Step j adds a·b_j + q_j·m and drops one limb. Limb 0 is tracked in `low` alone (its lane
/// is recomputed and dropped each step), so the chain from one q to the next is scalar
/// arithmetic plus one lane read. (Computing that lane in scalar too, and adding the high
/// halves before the shift from a copy of a one limb up, shortens the chains but needs a
/// register more and ran 8% slower: the loop is bound by its IFMAs, not its latency.)
$(#[$attr])*
unsafe fn amm<V: Lanes4, const R: usize>(a: &Limbs<R>, b: &Limbs<R>, md: &Modulus<V, R>) -> Limbs<R> {
    let av: [V; R] = core::array::from_fn(|r| V::load(a.0[r].as_ptr()));
    let a0 = a.get(0);
    let zero = V::zero();
    let mut acc = [zero; R];
    let mut low: u64 = 0;
    for j in 0..md.limbs {
        let bj = b.get(j);
        let t = (a0 as u128) * (bj as u128) + low as u128;
        let q = (t as u64).wrapping_mul(md.k0) & MASK52;
        let t = t + (md.m0 as u128) * (q as u128);
        // t ≡ 0 mod 2^52: what is left carries into the next limb, high halves included.
        low = (t >> 52) as u64;
        let (bv, qv) = (V::splat(bj), V::splat(q));
        let sum: [V; R] = core::array::from_fn(|r| {
            let v = V::madd_lo(acc[r], av[r], bv);
            V::madd_lo(v, md.m[r], qv)
        });
        // One limb down: lane i of register r takes lane i + 1 (the next register's lane 0
        // for the last lane).
        acc = core::array::from_fn(|r| {
            let next = if r + 1 < R { sum[r + 1] } else { zero };
            V::down(sum[r], next)
        });
        low += acc[0].first();
        // High halves land one limb up from their low halves: after the shift, at the
        // multiplier's own index. Limb 0's are already in `low`.
        for (r, v) in acc.iter_mut().enumerate() {
            let h = V::madd_hi(*v, av[r], bv);
            *v = V::madd_hi(h, md.m[r], qv);
        }
    }
    let mut out = Limbs([[0u64; W]; R]);
    for (reg, v) in out.0.iter_mut().zip(acc) {
        v.store(reg.as_mut_ptr());
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
        }
    };
}

kernel!(avx512, #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]);
kernel!(emulated);

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

    /// Both builds against the scalar reference: the emulated one on every CPU, the AVX-512
    /// one where the CPU runs it.
    #[test]
    fn matches_the_scalar_reference_at_every_size() {
        let kernels = Kernel::on_this_cpu();
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
                    let want = reference(&base, &n, k0, &rr, e);
                    for &kernel in &kernels {
                        assert_eq!(
                            powmod_public(kernel, &base, &n, k0, &rr, e),
                            want,
                            "{kernel:?}: {limbs} limbs, base {seed}, e = {e}"
                        );
                    }
                }
            }
        }
    }
}
