//! The fma family's kernel: four independent modular exponentiations side by side, one per
//! 64-bit lane of a ymm register, limb j of every lane in vector j, as in the avx2 kernel,
//! but with 51-bit limbs held as doubles and multiplied by the floating-point unit.
//!
//! Why: AVX2's integer multiply is 32×32 bits (`vpmuludq`), so the avx2 kernel's limbs are
//! 28 bits; an FMA multiplies 52-bit mantissas exactly. A 51×51-bit product takes three
//! floating-point operations and two integer additions where 28×28 takes one multiply and
//! one addition: per bit², 5/51² against 2/28², 1.33× fewer instructions. On the Xeon of
//! `docs/performance.md` the multiplication at RSA-2048 takes 1,383 TSC cycles here against
//! 1,883 in the avx2 kernel, the squaring 1,126 against 1,614.
//!
//! The product, for x, y < 2^52 with x·y < 2^103 (doubles holding integers):
//! - hi = x·y + 2^103, rounded to nearest. In [2^103, 2^104) a double's unit is 2^51, so
//!   hi = 2^103 + H·2^51 with H = round(x·y / 2^51), and its bits are those of 2^103 plus H;
//! - d = (2^103 + 3·2^51) − hi = (3 − H)·2^51, exact;
//! - lo = x·y + d = L + 3·2^51 with L = x·y − H·2^51 in [−2^50, 2^50], exact; in [2^52, 2^53)
//!   a double's unit is 1, so its bits are those of 3·2^51 plus L.
//!
//! So x·y = H·2^51 + L, and the bits of hi and lo, added as 64-bit integers into the columns,
//! carry H into column k+1 and L into column k, each with a constant bias (the bits of 2^103
//! and of 3·2^51). The biases are multiples of 2^51, so a column's low 51 bits, all the
//! Montgomery quotient needs, are exact as they stand; before a column's carry is taken, its
//! whole bias, known from how many products it received, is subtracted (`Corr`), with 2^62
//! added so that the logical shift (AVX2 has no 64-bit arithmetic one) sees a positive value.
//! Columns take at most 4L terms below 2^52: below 2^61 for every limb count here.
//!
//! Where both factors of two products in a column are below 2^51 (all but the doubled operand
//! of the squaring), `product_pair` forms them together: the second product's FMA adds to the
//! first's high half, so the pair takes seven instructions and one bias per half, where two
//! products and the additions of their halves take eight. Most columns of `amm` are two pairs
//! and most columns of `ams` hold one (its reduction terms). On an AMD EPYC Zen 3 that signed
//! 2-3% more RSA-2048 through PKCS#11 (A/B in both orders), where the instructions saved
//! (10% of `amm`'s, 5% of `ams`'s) predicted more: the operations are not bound by their
//! instruction count there (`docs/performance.md`).
//!
//! What bounds them there is the chain from one Montgomery quotient to the next: each
//! quotient's product with m_1 lands in the column of the next (the modulus's form below
//! takes that product off the floating-point unit).
//!
//! This relies on the default floating-point environment (round to nearest, exceptions
//! masked), which Rust code assumes everywhere; `default_fp_env` checks it before every
//! call, and a result computed otherwise would fail the check before release anyway. No
//! operand or result is ever subnormal (every value is an integer, 0 or at least 1), so the
//! floating-point operations take the same time for every value.
//!
//! The modulus of the exponentiation is not the prime p but m = k·p, k = −p⁻¹ mod 2^70
//! (`scaled_modulus`), so m ≡ −1 (mod 2^70):
//! - its low limb is 2^51 − 1, so −m⁻¹ ≡ 1 (mod 2^51) and every Montgomery quotient is its
//!   column's low limb as it stands, with no multiplication (`reduce`);
//! - its second limb is (c + 1)·2^19 − 1 with c < 2^32, so a quotient's products with m_0
//!   and m_1 come to −q + q·(c + 1)·2^70: the −q cancels the low limb, and in the squaring
//!   the rest is one 32×32-bit multiply and a few integer operations (`times_m1`), where a
//!   floating-point product sat on the chain from each quotient to the next.
//!
//! Numbers stay right modulo p (p divides m); R², R³ modulo p serve to enter Montgomery form,
//! and one multiplication modulo p itself, with the general quotient, leaves it at the end
//! (`Arith::from_form`). The price is one limb more than p needs (m has 70 bits more; 51
//! would have taken the limb anyway): on a Zen 3 the first step (k of 51 bits) made the
//! exponentiation 9% faster at RSA-1024 and 4-5% at 2048. The second (70 bits) serves the
//! squaring, 3.5% faster at RSA-1024 (the exponentiation 2.4%) and unchanged at 2048; the
//! multiplication keeps its products with m_1 on the floating-point unit, from the quotient
//! offset by 2^52 (`product_biased`), since the integer terms made it 2-4% slower (its FMA
//! pipes are busier, and `vpmuludq` shares one of them). docs/performance.md has the
//! figures.
//!
//! Almost-Montgomery arithmetic with R = 2^(51·L) ≥ 4m, operands below 2m, two rows of the
//! product and of the reduction per pass, the squaring with each cross product once (doubled
//! operand), fixed windows (4 bits at 12 limbs, 5 above: `window`) with a masked scan of
//! the whole table: the avx2 kernel's design (see its `vertical.rs`), in this arithmetic;
//! the exponentiation itself is the one both kernels share (`avx2/exp.rs`, through `Fma`'s
//! `exp::Arith`). No branch or address depends on a limb or an exponent bit.

use crate::engine::kernel::avx2::exp::{self, per_lane, Arith};
use crate::engine::kernel::avx2::vertical::{mul as mul32, CheckLane, LaneInput, LANES};
use std::arch::x86_64::*;
use zeroize::Zeroize;

/// Radix of the kernel.
pub const W: u32 = 51;
const MASK: u64 = (1 << W) - 1;

type D = __m256d;
type I = __m256i;

/// 2^103: where a double's unit is 2^51.
const HI_BASE: f64 = (1u128 << 103) as f64;
/// 2^103 + 3·2^51 (53 significant bits: exact).
const LO_SHIFT: f64 = ((1u128 << 103) + (3u128 << 51)) as f64;
/// The bias of a high half and of a low half in a column.
const HI_BIAS: u64 = HI_BASE.to_bits();
const LO_BIAS: u64 = ((3u64 << 51) as f64).to_bits();
/// 2^52, whose bits OR an integer below 2^52 into a double 2^52 + x.
const TWO52: f64 = (1u64 << 52) as f64;
const TWO52_BITS: u64 = TWO52.to_bits();
/// 2^−51 (exact).
const TWO_M51: f64 = 1.0 / (1u64 << 51) as f64;
/// Added before a carry's logical shift: columns are above −2^62.
const OFFSET: u64 = 1 << 62;
/// The offset as it arrives in the next column through a carry.
const OFFSET_CARRY: u64 = OFFSET >> W;
/// Columns of the widest operation (an RSA-4096 prime: 42 limbs with k·p's headroom; the
/// check runs modulo the primes too).
const MAX_COLS: usize = 2 * 42;

/// Whether this CPU runs the kernel.
pub fn available() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
}

/// Whether this thread's MXCSR is the default environment the kernel needs: round to
/// nearest, every exception masked (status flags and DAZ/FTZ do not matter: no value is ever
/// subnormal).
pub fn default_fp_env() -> bool {
    let mut v: u32 = 0;
    // SAFETY: stmxcsr stores the 32-bit MXCSR to the address given, a live local; it changes
    // no register or flag.
    unsafe {
        std::arch::asm!("stmxcsr [{p}]", p = in(reg) &mut v, options(nostack, preserves_flags));
    }
    v & 0x7f80 == 0x1f80
}

/// base^exp mod m for every lane (at most `LANES`; missing lanes repeat lane 0, their results
/// are dropped), fully reduced. `exp_bits` (public) bounds every lane's exponent.
pub fn modexp<const L: usize>(lanes: &[LaneInput], exp_bits: usize) -> Vec<Vec<u64>> {
    assert!(available());
    // SAFETY: the CPU has AVX2 and FMA (checked above), the only requirement of these
    // functions.
    unsafe { exp::modexp::<Fma, L>(lanes, exp_bits) }
}

/// s^e mod m and c mod m of every lane, fully reduced (`exp::check_residues`).
pub fn check_residues<const L: usize>(lanes: &[CheckLane]) -> Vec<(Vec<u64>, Vec<u64>)> {
    assert!(available());
    // SAFETY: the CPU has AVX2 and FMA (checked above).
    unsafe { exp::check_residues::<Fma, L>(lanes) }
}

#[target_feature(enable = "avx2,fma")]
#[inline]
fn add(a: I, b: I) -> I {
    _mm256_add_epi64(a, b)
}

/// x·y as the bits of (hi, lo): see the top of this file.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn product(x: D, y: D) -> (I, I) {
    let (hi, lo) = halves(x, y);
    (_mm256_castpd_si256(hi), _mm256_castpd_si256(lo))
}

/// `product`'s two halves as doubles (2^103 + H·2^51 and 3·2^51 + L), for `product_pair` to
/// go on from.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn halves(x: D, y: D) -> (D, D) {
    let hi = _mm256_fmadd_pd(x, y, _mm256_set1_pd(HI_BASE));
    let d = _mm256_sub_pd(_mm256_set1_pd(LO_SHIFT), hi);
    (hi, _mm256_fmadd_pd(x, y, d))
}

/// An integer below 2^52 as a double.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn to_f64(x: I) -> D {
    let biased = _mm256_or_si256(x, _mm256_set1_epi64x(TWO52_BITS as i64));
    _mm256_sub_pd(_mm256_castsi256_pd(biased), _mm256_set1_pd(TWO52))
}

/// A double holding an integer below 2^52 as that integer.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn to_int(x: D) -> I {
    let biased = _mm256_castpd_si256(_mm256_add_pd(x, _mm256_set1_pd(TWO52)));
    _mm256_xor_si256(biased, _mm256_set1_epi64x(TWO52_BITS as i64))
}

/// q for a column `t` complete up to its reduction term, modulo a prime (`from_form`; the
/// exponentiation's modulus needs none: `reduce`): −t·m⁻¹ mod 2^51 = t·k0 mod 2^51, as a
/// double. On the integer multiplier (three 32×32-bit products: t0·k0, and t0·k1 + t1·k0
/// shifted by 32), not the product of the columns: this takes 15 cycles of latency where the
/// floating-point product and its two conversions took 23. Bits of t above 51 only add
/// multiples of 2^51.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn quotient(t: I, k0: I) -> D {
    let mask = _mm256_set1_epi64x(MASK as i64);
    // `vpmuludq` reads the low 32 bits of each lane: k0's low part as it stands.
    let low = mul32(t, k0);
    let cross = add(
        mul32(t, _mm256_srli_epi64::<32>(k0)),
        mul32(_mm256_srli_epi64::<32>(t), k0),
    );
    to_f64(_mm256_and_si256(add(low, _mm256_slli_epi64::<32>(cross)), mask))
}

/// ⌊t / 2^51⌋ of a column's true value, its bias `corr` removed. Its caller, `reduce`, takes
/// it of a column but for the term q·m_0 and adds that term's share exactly.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn carry(t: I, corr: u64) -> I {
    let shifted = _mm256_srli_epi64::<51>(_mm256_sub_epi64(t, _mm256_set1_epi64x(corr as i64)));
    _mm256_sub_epi64(shifted, _mm256_set1_epi64x(OFFSET_CARRY as i64))
}

/// Two products whose factors are all below 2^51, with one bias each for their high and low
/// halves: the bits of hi = 2^103 + (H1 + H2)·2^51 and lo = 3·2^51 + L1 + L2. The second
/// product is added to the first's high half inside its FMA: adding a multiple of 2^51 (the
/// unit there) before the rounding adds it after, so h2 holds H1 + H2 (below 2^52: still in
/// [2^103, 2^104)), h1 − h2 = −H2·2^51 is exact, and x2·y2 plus it is L2 (|L2| ≤ 2^50), whose
/// sum with lo1 lies in [2^52, 2^53], where a double's bits are those of 2^52 plus its value
/// minus 2^52 (2^53 included). Seven instructions where two products and the two additions
/// of their halves take eight, and none of them on the integer side.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn product_pair(x1: D, y1: D, x2: D, y2: D) -> (I, I) {
    let (h1, l1) = halves(x1, y1);
    let h2 = _mm256_fmadd_pd(x2, y2, h1);
    let l2 = _mm256_fmadd_pd(x2, y2, _mm256_sub_pd(h1, h2));
    (
        _mm256_castpd_si256(h2),
        _mm256_castpd_si256(_mm256_add_pd(l1, l2)),
    )
}

/// The multiplier of the scaled modulus in bits: m = k·p with k = −p⁻¹ mod 2^70, so
/// m ≡ −1 (mod 2^70): m_0 = 2^51 − 1 and m_1 = (c + 1)·2^19 − 1 with c < 2^32 (`times_m1`).
pub const SCALE_BITS: u32 = 70;

/// What the reduction needs besides m, per lane, formed once an operation: k0 (the general
/// quotient's); c = ⌊m_1 / 2^19⌋ (a scaled modulus's, below 2^32: `times_m1`); and for
/// `product_biased` m_1, 2^103 − 2^52·m_1 and 2^103 + 3·2^51 − 2^52·m_1 (multiples of 2^51
/// with at most 53 significant bits: exact).
#[derive(Clone, Copy)]
struct Reduction {
    k0: I,
    c: I,
    m1: D,
    hi_base: D,
    lo_shift: D,
}

impl Reduction {
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn new(m1: D, k0: I) -> Reduction {
        let minus = _mm256_set1_pd(-TWO52);
        Reduction {
            k0,
            c: _mm256_srli_epi64::<{ (SCALE_BITS - W) as i32 }>(to_int(m1)),
            m1,
            hi_base: _mm256_fmadd_pd(m1, minus, _mm256_set1_pd(HI_BASE)),
            lo_shift: _mm256_fmadd_pd(m1, minus, _mm256_set1_pd(LO_SHIFT)),
        }
    }
}

/// A quotient (the low limb `k` of its column, below 2^51) as the double 2^52 + q: its bits
/// are k's with 2^52's exponent, one `or` where the double q itself takes a subtraction more.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn offset_quotient(k: I) -> D {
    _mm256_castsi256_pd(_mm256_or_si256(k, _mm256_set1_epi64x(TWO52_BITS as i64)))
}

/// q·m_1 from x = 2^52 + q (`offset_quotient`), as `product(q, m_1)`'s halves, bit for bit:
/// x·m_1 + (2^103 − 2^52·m_1) is exactly q·m_1 + 2^103 before the FMA rounds it, and
/// d = (2^103 + 3·2^51 − 2^52·m_1) − hi = (3 − H)·2^51 − 2^52·m_1 is exact (below 2^104 in
/// magnitude, a multiple of 2^51), so x·m_1 + d = L + 3·2^51 as before. The quotient's
/// conversion to a double, a subtraction of 3 cycles, leaves the chain each pass waits on
/// (a quotient, its product with m_1, the next column, the next quotient).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn product_biased(x: D, t: Reduction) -> (I, I) {
    let hi = _mm256_fmadd_pd(x, t.m1, t.hi_base);
    let d = _mm256_sub_pd(t.lo_shift, hi);
    (
        _mm256_castpd_si256(hi),
        _mm256_castpd_si256(_mm256_fmadd_pd(x, t.m1, d)),
    )
}

/// A column's sum `out` and the high halves `hi` with one more product's halves, its low half
/// added last (the term a quotient waits on).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn with_term(out: I, hi: &mut I, (h, l): (I, I)) -> I {
    *hi = add(*hi, h);
    add(out, l)
}

/// The terms of a quotient q (an integer below 2^51) of a scaled modulus beyond its column,
/// on the integer side: (to the next column, to the one after). With m_1 = (c + 1)·2^19 − 1,
/// q·m_0 + q·m_1·2^51 = −q + q·(c + 1)·2^70: the −q cancels the column's low limb (which is
/// q: the column's carry is then its own, with nothing added), and q·(c + 1)·2^19 is
/// (q·(c + 1) mod 2^32)·2^19 in the next column and ⌊q·(c + 1) / 2^32⌋ (below 2^51) in the
/// one after.
///
/// Why: the product q·m_1 lands in the column of the next quotient, so each pass waited on
/// a floating-point product per quotient (two FMAs and a subtraction, 11 cycles, plus the
/// conversions). The next column now takes one 32×32-bit multiply, an addition and two
/// shifts. The price is a multiplier of 70 bits instead of 51: 19 bits of the headroom each
/// class has anyway at the usual key sizes (`Fma51::HEADROOM`).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn times_m1(q: I, r: Reduction) -> (I, I) {
    let q_lo = _mm256_and_si256(q, _mm256_set1_epi64x(0xffff_ffff));
    // q_lo·(c + 1) < 2^64.
    let b = add(mul32(q, r.c), q_lo);
    let next = _mm256_srli_epi64::<13>(_mm256_slli_epi64::<32>(b));
    let q_hi = _mm256_srli_epi64::<32>(q);
    let after = add(add(_mm256_srli_epi64::<32>(b), mul32(q_hi, r.c)), q_hi);
    (next, after)
}

/// The products of one column: `singles` one by one, `pairs` two at a time (`product_pair`:
/// only where every factor is below 2^51, so not the doubled operand of `ams`); their low
/// halves with `hi`, the high halves of the column before (and any carry into this one),
/// summed; `hi` becomes their high halves. Summed in the order given, pairs after singles and
/// `hi` last: callers put the terms that depend on a quotient last, since the next quotient
/// waits for their sum. Which columns join which products is what `joined` counts.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn column<const N: usize, const P: usize>(singles: [(D, D); N], pairs: [[(D, D); 2]; P], hi: &mut I) -> I {
    const { assert!(N + P > 0) };
    let (mut hi_sum, mut lo_sum) = if N > 0 {
        product(singles[0].0, singles[0].1)
    } else {
        let [(x1, y1), (x2, y2)] = pairs[0];
        product_pair(x1, y1, x2, y2)
    };
    for &(x, y) in singles.iter().skip(1) {
        let (h, l) = product(x, y);
        lo_sum = add(lo_sum, l);
        hi_sum = add(hi_sum, h);
    }
    for &[(x1, y1), (x2, y2)] in pairs.iter().skip(if N > 0 { 0 } else { 1 }) {
        let (h, l) = product_pair(x1, y1, x2, y2);
        lo_sum = add(lo_sum, l);
        hi_sum = add(hi_sum, h);
    }
    let out = add(lo_sum, *hi);
    *hi = hi_sum;
    out
}

/// The reduction of a column `t`, complete but for its term q·m_0 (`corr`: its bias): q, and
/// the column's carry with q·m_0 added, in two parts: the carry of t alone, and
/// K = (t mod 2^51 + q·m_0) / 2^51.
///
/// `SCALED` (the operations of the exponentiation): m is k·p (`scaled_modulus`), so
/// m_0 = 2^51 − 1 and −m⁻¹ ≡ 1 (mod 2^51): q is t's low limb, and K = q·2^51 / 2^51 = q
/// (in the squaring `times_m1`'s −q cancels it, and its terms are added instead of K).
/// No multiplication, where the general quotient takes three integer multiplies and seven
/// more instructions on the chain every pass waits on; the cost is a longer modulus, one limb
/// more (docs/performance.md: at RSA-1024 on a Zen 3 the squaring 411 → 362 cycles at 12
/// limbs instead of 11, the multiplication 479 → 455).
///
/// Otherwise (`from_form`, modulo the prime itself): q = t·k0 mod 2^51 (`quotient`); one FMA
/// forms t mod 2^51 + q·m_0 (a multiple of 2^51 below 2^102 + 2^51, representable), a second
/// scales it by 2^−51 and adds 2^52, whose bits then hold K.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn reduce<const SCALED: bool>(t: I, corr: u64, m0: D, k0: I) -> (D, I, I) {
    let t_low = _mm256_and_si256(t, _mm256_set1_epi64x(MASK as i64));
    if SCALED {
        return (to_f64(t_low), carry(t, corr), t_low);
    }
    let q = quotient(t, k0);
    let sum = _mm256_fmadd_pd(q, m0, to_f64(t_low));
    let k = _mm256_fmadd_pd(sum, _mm256_set1_pd(TWO_M51), _mm256_set1_pd(TWO52));
    let k = _mm256_xor_si256(_mm256_castpd_si256(k), _mm256_set1_epi64x(TWO52_BITS as i64));
    (q, carry(t, corr), k)
}

/// k·p per lane, k = −p⁻¹ mod 2^70 (p < 2^(51·L − 72), so the product stays below
/// 2^(51·L − 2) and R ≥ 4·k·p): the modulus the operations of the exponentiation reduce by
/// (`reduce`, `times_m1`). k0 = −p⁻¹ mod 2^51 lifts to k by one Newton step. Per lane on the
/// integer multiplier, once a call; p and k0 are secret, and the steps depend on neither.
#[target_feature(enable = "avx2,fma")]
fn scaled_modulus<const L: usize>(p: &[D; L], k0: I) -> [D; L] {
    let mut limbs = untranspose::<L>(p);
    // SAFETY: __m256i and [u64; 4] have the same size, and every bit pattern is valid for both.
    let mut k0s: [u64; LANES] = unsafe { std::mem::transmute::<I, [u64; 4]>(k0) };
    for (lane, k0) in limbs.iter_mut().zip(&k0s) {
        // Wrapping arithmetic throughout: an overflow check would branch on secrets, and
        // every product here is meant modulo 2^128 or cannot overflow.
        let p_low = lane[0] as u128 | (lane[1] as u128) << W;
        // x = p⁻¹ mod 2^51, and x·(2 − p·x) = p⁻¹ mod 2^102.
        let x = (*k0 as u128).wrapping_neg();
        let x = x.wrapping_mul(2u128.wrapping_sub(p_low.wrapping_mul(x)));
        let mut k = x.wrapping_neg() & ((1u128 << SCALE_BITS) - 1);
        let (k_lo, k_hi) = (k & MASK as u128, k >> W);
        let (mut carry, mut below) = (0u128, 0u128);
        for x in lane.iter_mut() {
            // x·k_lo + below·k_hi + carry < 2^102 + 2^70 + 2^53.
            let t = (*x as u128)
                .wrapping_mul(k_lo)
                .wrapping_add(below.wrapping_mul(k_hi))
                .wrapping_add(carry);
            below = *x as u128;
            *x = t as u64 & MASK;
            carry = t >> W;
        }
        k.zeroize();
        below.zeroize();
    }
    let out = transpose::<L>(LANES, &|k| &limbs[k]);
    limbs.zeroize();
    k0s.zeroize();
    out
}

/// Pairs (i, j) in [0, l)² with i + j = c.
const fn pairs(c: usize, l: usize) -> u64 {
    if c > 2 * l - 2 {
        return 0;
    }
    let below = if c < 2 * l - 2 - c { c } else { 2 * l - 2 - c };
    below as u64 + 1
}

/// Products whose low half lands in column c: the product's rows and the reduction's in a
/// multiplication; in a squaring each cross product once (i ≤ j) and the reduction.
const fn products(c: usize, l: usize, square: bool) -> u64 {
    if square {
        pairs(c, l).div_ceil(2) + pairs(c, l)
    } else {
        2 * pairs(c, l)
    }
}

/// Pairs of products in column c that `product_pair` joins into one bias: in every pass of
/// `amm` the columns 2..L−1 (counted from the pass's first row) join a_i·b_k with
/// a_{i+1}·b_{k−1}, and the columns 3..L−1 q_i·m_k with q_{i+1}·m_{k−1} (in column 2,
/// q_{i+1}·m_1 is single), column L its two products, and the last row alone (odd L)
/// a_{L−1}·b_k with q·m_k in columns 1..L−1; in every pass of `ams` the columns 3..L−1 join
/// their two reduction terms (its q·m_1 are integer terms: `times_m1`).
const fn joined(c: usize, l: usize, square: bool) -> u64 {
    let mut n = 0;
    let mut i = 0;
    while i + 1 < l {
        if c >= i {
            let k = c - i;
            if k == 2 && !square {
                n += 1;
            } else if k >= 3 && k < l {
                n += if square { 1 } else { 2 };
            } else if k == l && !square {
                n += 1;
            }
        }
        i += 2;
    }
    if l % 2 == 1 && !square && c >= l - 1 {
        let k = c - (l - 1);
        if k >= 1 && k < l {
            n += 1;
        }
    }
    n
}

/// Biases whose halves land in column c (low) and c+1 (high): one per product or joined
/// pair, all but q_c·m_0's, and in the squaring all but q_{c−1}·m_1's (`times_m1`).
const fn biased(c: usize, l: usize, square: bool) -> u64 {
    let unbiased = (c < l) as u64 + (square && c >= 1 && c <= l) as u64;
    products(c, l, square) - joined(c, l, square) - unbiased
}

/// Per column: what to subtract before its carry is taken. Its biases, less the offset, and
/// for columns past L (whose carries come from `normalize`, offset included) the offset their
/// carry brings in. Columns below L leave out their term q·m_0, both halves (`reduce` adds
/// it exactly, without bias), and in the squaring q·m_1 (`times_m1`).
const fn corrections(l: usize, square: bool) -> [u64; MAX_COLS] {
    let mut out = [0u64; MAX_COLS];
    let mut c = 0;
    while c < 2 * l {
        let lo = biased(c, l, square);
        let hi = if c == 0 { 0 } else { biased(c - 1, l, square) };
        let bias = lo.wrapping_mul(LO_BIAS).wrapping_add(hi.wrapping_mul(HI_BIAS));
        let from_normalize = if c > l { OFFSET_CARRY } else { 0 };
        out[c] = bias.wrapping_sub(OFFSET).wrapping_add(from_normalize);
        c += 1;
    }
    out
}

/// The corrections of `amm` (its products with m_1 on the floating-point unit, for a scaled
/// modulus or not) and `ams` (with `times_m1`) at L limbs, computed at compile time.
struct Corr<const L: usize>;

impl<const L: usize> Corr<L> {
    const AMM: [u64; MAX_COLS] = corrections(L, false);
    const AMS: [u64; MAX_COLS] = corrections(L, true);
}

/// The working memory of `amm` and `ams` (`exp::Scratch`): integer columns, the doubled
/// operand as doubles.
pub type Scratch<const L: usize> = exp::Scratch<I, D, L>;

/// Columns L..2L into normalised limbs (the value is below R: the final carry is the offset
/// alone).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn normalize<const L: usize>(cols: &[I], corr: &[u64], out: &mut [D; L]) {
    let mask = _mm256_set1_epi64x(MASK as i64);
    let mut c = _mm256_setzero_si256();
    for j in 0..L {
        // The correction first, off the carry chain, which is then one addition and one
        // shift a limb (three operations before: 1-2% of `ams` at RSA-2048 on a Zen 3).
        let col = _mm256_sub_epi64(cols[j], _mm256_set1_epi64x(corr[j] as i64));
        let t = add(col, c);
        out[j] = to_f64(_mm256_and_si256(t, mask));
        c = _mm256_srli_epi64::<51>(t);
    }
}

/// Almost-Montgomery multiplication a = a·b/R mod m (below 2m for a, b below 2m), per lane,
/// two rows per pass as in the avx2 kernel; `S`: m is a scaled modulus (`reduce`). In place:
/// a is read through the passes, and only
/// the final carry chain writes it (returning the value cost a 352-byte copy per operation at
/// RSA-1024, 2% of the module's time in `perf`).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn amm_assign<const L: usize, const S: bool>(
    a: &mut [D; L],
    b: &[D; L],
    m: &[D; L],
    k0: I,
    s: &mut Scratch<L>,
) {
    const { assert!(L >= 4 && 2 * L <= MAX_COLS) };
    let corr = &Corr::<L>::AMM;
    let acc = s.cols.as_flattened_mut();
    let r = Reduction::new(m[1], k0);
    amm_pass::<L, true, S>(a[0], a[1], b, m, r, corr, acc);
    let mut i = 2;
    while i + 1 < L {
        amm_pass::<L, false, S>(a[i], a[i + 1], b, m, r, &corr[i..], &mut acc[i..]);
        i += 2;
    }
    if L % 2 == 1 {
        amm_last::<L, S>(a[L - 1], b, m, r.k0, corr[L - 1], &mut acc[L - 1..]);
    }
    normalize::<L>(&acc[L..2 * L], &corr[L..2 * L], a);
}

/// One pass of `amm` over rows i, i+1 (`a0`, `a1`): `win` is columns i..=i+L+1, `corr` starts
/// at column i. Column k takes a0·b_k, q0·m_k, a1·b_{k−1}, q1·m_{k−1} and the high halves of
/// column k−1's products. The top two columns are new to the pass (the pass before reached
/// i+L−1), as is every column of the first.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn amm_pass<const L: usize, const FIRST: bool, const S: bool>(
    a0: D,
    a1: D,
    b: &[D; L],
    m: &[D; L],
    r: Reduction,
    corr: &[u64],
    win: &mut [I],
) {
    let win = &mut win[..=L + 1];
    let (h, l) = product(a0, b[0]);
    let t = if FIRST { l } else { add(win[0], l) };
    let (q0, c, k) = reduce::<S>(t, corr[0], m[0], r.k0);
    // K joins the high halves before the column's products, off the chain to q1.
    let mut hi = add(add(h, c), k);
    if !FIRST {
        hi = add(hi, win[1]);
    }
    // The chain each pass waits on: q0, q0·m_1 into column i+1, q1, q1·m_1 into column i+2,
    // the next pass's q0. With a scaled modulus k is q0 itself, and the products with m_1
    // start from 2^52 + q (`product_biased`), single, not joined to q0·m_2 (`product_pair`
    // adds a floating-point addition after its second product), their low halves added
    // last. On a Zen 3 either change alone moved nothing and both together made the
    // operations 3-4% faster: the chains through q0 and q1 are the same length. (`ams` takes
    // these terms on the integer side, `times_m1`; here that was 2-4% slower.)
    let u = if S {
        let out = column([(a0, b[1]), (a1, b[0])], [], &mut hi);
        with_term(out, &mut hi, product_biased(offset_quotient(k), r))
    } else {
        column([(a0, b[1]), (a1, b[0]), (q0, m[1])], [], &mut hi)
    };
    let (q1, c, k) = reduce::<S>(u, corr[1], m[0], r.k0);
    hi = add(add(hi, c), k);
    let s = if S {
        let out = column([(q0, m[2])], [[(a0, b[2]), (a1, b[1])]], &mut hi);
        with_term(out, &mut hi, product_biased(offset_quotient(k), r))
    } else {
        column([(q0, m[2]), (q1, m[1])], [[(a0, b[2]), (a1, b[1])]], &mut hi)
    };
    win[2] = if FIRST { s } else { add(win[2], s) };
    for k in 3..L {
        let s = column(
            [],
            [[(a0, b[k]), (a1, b[k - 1])], [(q0, m[k]), (q1, m[k - 1])]],
            &mut hi,
        );
        win[k] = if FIRST { s } else { add(win[k], s) };
    }
    win[L] = column([], [[(a1, b[L - 1]), (q1, m[L - 1])]], &mut hi);
    win[L + 1] = hi;
}

/// The last row alone (odd limb counts), over columns L−1..=2L−1; the pass before reached
/// 2L−2.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn amm_last<const L: usize, const S: bool>(a0: D, b: &[D; L], m: &[D; L], k0: I, corr: u64, win: &mut [I]) {
    let win = &mut win[..=L];
    let (h, l) = product(a0, b[0]);
    let t = add(win[0], l);
    let (q0, c, k) = reduce::<S>(t, corr, m[0], k0);
    let mut hi = add(add(h, c), k);
    for k in 1..L {
        let s = column([], [[(a0, b[k]), (q0, m[k])]], &mut hi);
        win[k] = add(win[k], s);
    }
    win[L] = hi;
}

/// Almost-Montgomery squaring a²/R mod m, per lane: each cross product once (by the doubled
/// operand, below 2^52: its products stay below 2^103), the squares of the limbs, and the
/// reduction, two rows per pass.
///
/// In a pass over rows i, i+1, column k (counted from i) takes q0·m_k and q1·m_{k−1} (those
/// with m_0 and m_1 as integer terms: `times_m1`), and from
/// the square's rows a_i·a_k (a_i² at k = i, a_i·2a_k above) and a_{i+1}·a_{k−1} (a_{i+1}² at
/// k = i+2, a_{i+1}·2a_{k−1} above): the columns below k = i take the reduction only. Columns
/// i and i+1 are complete before q_i and q_{i+1}: square terms reach column c only from rows
/// up to c/2.
///
/// In place, as `amm_assign`.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn ams_assign<const L: usize>(x: &mut [D; L], m: &[D; L], k0: I, s: &mut Scratch<L>) {
    const { assert!(L >= 4 && 2 * L <= MAX_COLS) };
    let a = &*x;
    let corr = &Corr::<L>::AMS;
    let a2 = &mut s.a2;
    for j in 0..L {
        a2[j] = _mm256_add_pd(a[j], a[j]);
    }
    let a2 = &*a2;
    let acc = s.cols.as_flattened_mut();
    let r = Reduction::new(m[1], k0);
    ams_first::<L>(a, a2, m, r, corr, acc);
    let mut i = 2;
    while i + 1 < L {
        ams_pass::<L>(i, a, a2, m, r, &corr[i..], &mut acc[i..]);
        i += 2;
    }
    if L % 2 == 1 {
        // The last row alone: its reduction, and a_{L−1}² in column 2L−2.
        let a0 = a[L - 1];
        let win = &mut acc[L - 1..=2 * L - 1];
        let (q0, c, k) = reduce::<true>(win[0], corr[L - 1], m[0], k0);
        let (next, after) = times_m1(k, r);
        win[1] = add(add(win[1], c), next);
        let mut hi = after;
        for k in 2..L - 1 {
            let s = column([(q0, m[k])], [], &mut hi);
            win[k] = add(win[k], s);
        }
        let s = column([(a0, a0), (q0, m[L - 1])], [], &mut hi);
        win[L - 1] = add(win[L - 1], s);
        win[L] = hi;
    }
    normalize::<L>(&acc[L..2 * L], &corr[L..2 * L], x);
}

/// The first pass of `ams` (rows 0 and 1): every column is new; the square's rows start at
/// column 0 (a_0²) and column 2 (a_1²).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn ams_first<const L: usize>(a: &[D; L], a2: &[D; L], m: &[D; L], r: Reduction, corr: &[u64], win: &mut [I]) {
    let win = &mut win[..=L + 1];
    let (a0, a1) = (a[0], a[1]);
    let (h, t) = product(a0, a0);
    let (q0, c, k) = reduce::<true>(t, corr[0], m[0], r.k0);
    let (next, after0) = times_m1(k, r);
    let mut hi = add(h, c);
    let u = add(column([(a0, a2[1])], [], &mut hi), next);
    let (q1, c, k) = reduce::<true>(u, corr[1], m[0], r.k0);
    let (next, after1) = times_m1(k, r);
    hi = add(add(hi, c), after0);
    win[2] = add(column([(a0, a2[2]), (a1, a1), (q0, m[2])], [], &mut hi), next);
    hi = add(hi, after1);
    for k in 3..L {
        win[k] = column(
            [(a0, a2[k]), (a1, a2[k - 1])],
            [[(q0, m[k]), (q1, m[k - 1])]],
            &mut hi,
        );
    }
    win[L] = column([(q1, m[L - 1]), (a1, a2[L - 1])], [], &mut hi);
    win[L + 1] = hi;
}

/// A pass of `ams` over rows i, i+1 (i ≥ 2, even): `win` is columns i..=i+L+1, `corr` starts
/// at column i. Which square terms the top columns take depends on how close row i is to the
/// top (i + 2 = L or below), a public fact.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn ams_pass<const L: usize>(
    i: usize,
    a: &[D; L],
    a2: &[D; L],
    m: &[D; L],
    r: Reduction,
    corr: &[u64],
    win: &mut [I],
) {
    let win = &mut win[..=L + 1];
    let (a0, a1) = (a[i], a[i + 1]);
    // The chain each pass waits on: q0, its term in column i+1, q1, its term in column i+2,
    // the next pass's q0. Those terms are integer ones (`times_m1`), added last.
    let (q0, c, k) = reduce::<true>(win[0], corr[0], m[0], r.k0);
    let (next, after0) = times_m1(k, r);
    let u = add(add(c, win[1]), next);
    let (q1, c, k) = reduce::<true>(u, corr[1], m[0], r.k0);
    let (next, after1) = times_m1(k, r);
    let mut hi = add(c, after0);
    // Columns 2..i: the reduction only; column i: a_i² too; column i+1: a_i·2a_{i+1}.
    if i > 2 {
        let s = add(column([(q0, m[2])], [], &mut hi), next);
        win[2] = add(win[2], s);
        hi = add(hi, after1);
        for k in 3..i {
            let s = column([], [[(q0, m[k]), (q1, m[k - 1])]], &mut hi);
            win[k] = add(win[k], s);
        }
        let s = column([(a0, a0)], [[(q0, m[i]), (q1, m[i - 1])]], &mut hi);
        win[i] = add(win[i], s);
    } else {
        let s = add(column([(a0, a0), (q0, m[2])], [], &mut hi), next);
        win[2] = add(win[2], s);
        hi = add(hi, after1);
    }
    let s = column([(a0, a2[i + 1])], [[(q0, m[i + 1]), (q1, m[i])]], &mut hi);
    win[i + 1] = add(win[i + 1], s);
    if i + 2 == L {
        win[L] = column([(a1, a1), (q1, m[L - 1])], [], &mut hi);
        win[L + 1] = hi;
        return;
    }
    // Column i+2: a_i·2a_{i+2} + a_{i+1}².
    let s = column(
        [(a0, a2[i + 2]), (a1, a1)],
        [[(q0, m[i + 2]), (q1, m[i + 1])]],
        &mut hi,
    );
    win[i + 2] = add(win[i + 2], s);
    for k in i + 3..L {
        let s = column(
            [(a0, a2[k]), (a1, a2[k - 1])],
            [[(q0, m[k]), (q1, m[k - 1])]],
            &mut hi,
        );
        win[k] = add(win[k], s);
    }
    win[L] = column([(a1, a2[L - 1]), (q1, m[L - 1])], [], &mut hi);
    win[L + 1] = hi;
}

/// Non-negative integer columns (below 2^62) into normalised limbs.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn carry_chain<const L: usize>(cols: &[I; L]) -> [D; L] {
    let mask = _mm256_set1_epi64x(MASK as i64);
    let mut out = [_mm256_setzero_pd(); L];
    let mut c = _mm256_setzero_si256();
    for j in 0..L {
        let t = add(cols[j], c);
        out[j] = to_f64(_mm256_and_si256(t, mask));
        c = _mm256_srli_epi64::<51>(t);
    }
    out
}

/// x + y, normalised (the sum must stay below R).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn add_norm<const L: usize>(x: &[D; L], y: &[D; L]) -> [D; L] {
    let mut cols = [_mm256_setzero_si256(); L];
    for j in 0..L {
        cols[j] = add(to_int(x[j]), to_int(y[j]));
    }
    carry_chain::<L>(&cols)
}

/// x − m where x ≥ m, else x, per lane (by the borrow of the subtraction, as a mask).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn csub<const L: usize>(x: &[D; L], m: &[D; L]) -> [D; L] {
    let mask = _mm256_set1_epi64x(MASK as i64);
    let mut y = [_mm256_setzero_si256(); L];
    let mut borrow = _mm256_setzero_si256();
    for j in 0..L {
        let t = _mm256_sub_epi64(_mm256_sub_epi64(to_int(x[j]), to_int(m[j])), borrow);
        y[j] = _mm256_and_si256(t, mask);
        borrow = _mm256_srli_epi64::<63>(t);
    }
    let keep = _mm256_castsi256_pd(_mm256_sub_epi64(_mm256_setzero_si256(), borrow));
    let mut out = [_mm256_setzero_pd(); L];
    for j in 0..L {
        out[j] = _mm256_blendv_pd(to_f64(y[j]), x[j], keep);
    }
    out
}

/// Exponent bits per window at L limbs: 4 at 12 (RSA-1024), whose table scan is a larger
/// part of the exponentiation; 5 above. At 12 limbs a scan of half the entries, 25 more of
/// them, and a table of 16 entries fewer outweigh 17 more multiplications in all: −0.6 to
/// −0.9% of the exponentiation on a Zen 3 (`rsa_stages`, alternated in one process). At 22
/// limbs the same count would cost more than it saves (the multiplications grow with L²,
/// the scan with L).
const fn window(l: usize) -> usize {
    if l <= 12 {
        4
    } else {
        5
    }
}

/// The window table of the exponentiation: 2^`window(L)` entries of L vectors, zeroized on
/// drop. Its own, not the avx2 kernel's (which packs two limbs below 2^32 to a lane): a table
/// shared through integer vectors cost this scan 1.8× (488 against 265 cycles at RSA-1024,
/// `rsa_stages`).
pub struct Table<const L: usize> {
    v: Vec<D>,
}

impl<const L: usize> Table<L> {
    #[target_feature(enable = "avx2,fma")]
    fn new() -> Self {
        Table {
            v: vec![_mm256_setzero_pd(); L << window(L)],
        }
    }

    fn put(&mut self, t: usize, x: &[D; L]) {
        self.v[t * L..][..L].copy_from_slice(x);
    }

    /// Every lane's entry `idx` (per lane), reading every entry under a mask, in groups of
    /// vectors held in registers through the scan (as the avx2 kernel's). Up to 12 limbs,
    /// one group (12 accumulators, the mask and an entry: 14 of the 16 registers): at 12
    /// limbs with 16 entries that made the exponentiation 1.8% faster than groups of 6 and
    /// 6 on a Zen 3 (`rsa_stages`, alternated in one process). Above, groups of up to 8 of
    /// balanced sizes: at 22 limbs (RSA-2048) groups of 8, 8 and 6 took 570-579 TSC cycles a
    /// scan on a Zen 3 and 8, 7 and 7 take 412-446 (1.2% of the exponentiation); two of 11
    /// gained nothing there (±0.3%), nor clearly at 32 limbs.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn select(&self, idx: I) -> [D; L] {
        let mut out = [_mm256_setzero_pd(); L];
        let groups = if L <= 12 { 1 } else { L.div_ceil(8) };
        let mut g = 0;
        for i in 0..groups {
            let size = (L - g).div_ceil(groups - i);
            match size {
                1 => self.scan::<1>(g, idx, &mut out),
                2 => self.scan::<2>(g, idx, &mut out),
                3 => self.scan::<3>(g, idx, &mut out),
                4 => self.scan::<4>(g, idx, &mut out),
                5 => self.scan::<5>(g, idx, &mut out),
                6 => self.scan::<6>(g, idx, &mut out),
                7 => self.scan::<7>(g, idx, &mut out),
                8 => self.scan::<8>(g, idx, &mut out),
                9 => self.scan::<9>(g, idx, &mut out),
                10 => self.scan::<10>(g, idx, &mut out),
                11 => self.scan::<11>(g, idx, &mut out),
                12 => self.scan::<12>(g, idx, &mut out),
                _ => unreachable!("groups of 1 to 12 vectors"),
            }
            g += size;
        }
        out
    }

    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn scan<const G: usize>(&self, g: usize, idx: I, out: &mut [D; L]) {
        let mut r = [_mm256_setzero_pd(); G];
        for t in 0..1 << window(L) {
            let hit = _mm256_castsi256_pd(_mm256_cmpeq_epi64(idx, _mm256_set1_epi64x(t as i64)));
            let e = &self.v[t * L + g..][..G];
            for j in 0..G {
                r[j] = _mm256_or_pd(r[j], _mm256_and_pd(e[j], hit));
            }
        }
        out[g..g + G].copy_from_slice(&r);
    }
}

impl<const L: usize> Drop for Table<L> {
    fn drop(&mut self) {
        self.v.zeroize();
    }
}

/// Limb j of every lane into vector j, as doubles (limbs below 2^51: exact; `exp::transpose`).
#[target_feature(enable = "avx2,fma")]
fn transpose<'a, const L: usize>(lanes: usize, limbs: &dyn Fn(usize) -> &'a [u64]) -> [D; L] {
    let v = exp::transpose::<L>(lanes, limbs);
    // A loop, not `map`: its closure was a call per vector.
    let mut out = [_mm256_setzero_pd(); L];
    for j in 0..L {
        out[j] = to_f64(v[j]);
    }
    out
}

/// Every lane's limbs (`exp::untranspose`).
#[target_feature(enable = "avx2,fma")]
fn untranspose<const L: usize>(x: &[D; L]) -> [[u64; L]; LANES] {
    let mut v = [_mm256_setzero_si256(); L];
    for j in 0..L {
        v[j] = to_int(x[j]);
    }
    exp::untranspose(&v)
}

#[target_feature(enable = "avx2,fma")]
fn one<const L: usize>() -> [D; L] {
    let mut one = [_mm256_setzero_pd(); L];
    one[0] = _mm256_set1_pd(1.0);
    one
}

/// This kernel as `exp::Arith`.
pub struct Fma;

impl<const L: usize> Arith<L> for Fma {
    type Num = [D; L];
    type K0 = I;
    type Scratch = Scratch<L>;
    type Table = Table<L>;

    #[target_feature(enable = "avx2,fma")]
    unsafe fn load<'a>(lanes: usize, limbs: &dyn Fn(usize) -> &'a [u64]) -> [D; L] {
        transpose::<L>(lanes, limbs)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn k0(lanes: usize, get: &dyn Fn(usize) -> u64) -> I {
        per_lane(lanes, get)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn store(x: &[D; L]) -> [[u64; L]; LANES] {
        untranspose::<L>(x)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn one() -> [D; L] {
        one::<L>()
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn scratch() -> Scratch<L> {
        Scratch::new(_mm256_setzero_si256(), _mm256_setzero_pd())
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn modulus(p: &[D; L], k0: I) -> [D; L] {
        scaled_modulus::<L>(p, k0)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn from_form(a: &mut [D; L], p: &[D; L], k0: I, s: &mut Scratch<L>) {
        amm_assign::<L, false>(a, &one::<L>(), p, k0, s)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn amm(a: &mut [D; L], b: &[D; L], m: &[D; L], k0: I, s: &mut Scratch<L>) {
        amm_assign::<L, true>(a, b, m, k0, s)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn ams(a: &mut [D; L], m: &[D; L], k0: I, s: &mut Scratch<L>) {
        ams_assign::<L>(a, m, k0, s)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn add_norm(x: &[D; L], y: &[D; L]) -> [D; L] {
        add_norm::<L>(x, y)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn csub(x: &[D; L], m: &[D; L]) -> [D; L] {
        csub::<L>(x, m)
    }

    fn window() -> usize {
        window(L)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn table() -> Table<L> {
        Table::new()
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn put(t: &mut Table<L>, entry: usize, x: &[D; L]) {
        t.put(entry, x)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn select(t: &Table<L>, idx: I) -> [D; L] {
        t.select(idx)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn take(acc: &mut [D; L], t: &[D; L], take: I) {
        let take = _mm256_castsi256_pd(take);
        for j in 0..L {
            acc[j] = _mm256_blendv_pd(acc[j], t[j], take);
        }
    }
}

/// For `benches/rsa_stages.rs`: TSC cycles of one `amm`, one `ams` and one table `select` at
/// L limbs (`exp::op_cycles`).
#[doc(hidden)]
pub fn op_cycles<const L: usize>(reps: usize) -> [u64; 4] {
    assert!(available());
    // SAFETY: the CPU has AVX2 and FMA (asserted above).
    unsafe { exp::op_cycles::<Fma, L>(W, reps) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::kernel::avx2::limbs;

    /// Random limbs below 2^w with the top limb limited so the value stays below `top`.
    fn random_below(l: usize, top_bits: u32) -> Vec<u64> {
        let mut v = vec![0u64; l];
        let mut bytes = vec![0u8; 8 * l];
        getrandom::fill(&mut bytes).unwrap();
        for (j, x) in v.iter_mut().enumerate() {
            *x = u64::from_le_bytes(bytes[8 * j..8 * j + 8].try_into().unwrap()) & MASK;
        }
        v[l - 1] &= (1 << top_bits) - 1;
        v
    }

    /// A random odd modulus for the operations at L limbs: of 51·L − 3 bits (R ≥ 4m with a
    /// bit to spare), or, `scaled`, k·p for a p of 51·L − 72 bits and k = −p⁻¹ mod 2^70
    /// (`scaled_modulus`: the modulus of the exponentiation, ≡ −1 mod 2^70), computed here
    /// with the scalar limbs' own inverse, not with the code under test.
    fn random_modulus(l: usize, scaled: bool) -> Vec<u64> {
        if !scaled {
            let top = W - 3;
            let mut m = random_below(l, top);
            m[l - 1] |= 1 << (top - 1);
            m[0] |= 1;
            return m;
        }
        // 51·L − 72 bits: the top limb zero, the one below it of 30 bits.
        let mut p = random_below(l, 0);
        p[l - 2] &= (1 << 30) - 1;
        p[l - 2] |= 1 << 29;
        p[0] |= 1;
        // −p⁻¹ mod 2^70 bit by bit: k such that p·k ≡ −1.
        let p_low = p[0] as u128 | (p[1] as u128) << W;
        let mut k = 0u128;
        for bit in 0..SCALE_BITS {
            if (p_low.wrapping_mul(k).wrapping_add(1) >> bit) & 1 == 1 {
                k |= 1 << bit;
            }
        }
        let mut m = vec![0u64; l];
        let mut carry = 0u128;
        for j in 0..l {
            let below = if j > 0 { p[j - 1] as u128 } else { 0 };
            let t = p[j] as u128 * (k & MASK as u128) + below * (k >> W) + carry;
            m[j] = t as u64 & MASK;
            carry = t >> W;
        }
        let ones = (1 << (SCALE_BITS - W)) - 1;
        assert_eq!((carry, m[0], m[1] & ones), (0, MASK, ones));
        m
    }

    /// `amm` and `ams` against the scalar 128-bit-column Montgomery product (`limbs::amm_into`),
    /// both reduced once, on four lanes of random moduli and operands up to 2m − 1, and on the
    /// extremes (every limb at its largest, zero, m − 1, 2m − 1): both operations of the
    /// exponentiation on scaled moduli (`reduce::<true>`), the multiplication also on moduli
    /// of any low limb (`reduce::<false>`, `from_form`).
    fn ops_match_scalar<const L: usize>() {
        for round in 0..400 {
            let scaled = round % 2 == 0;
            let mut lanes = vec![];
            for k in 0..LANES {
                let m = random_modulus(L, scaled);
                let m2_minus_1 = {
                    let (mut d, mut s) = (vec![0u64; L], vec![0u64; L]);
                    limbs::add_into(&m, &m, W, &mut d);
                    let mut one = vec![0u64; L];
                    one[0] = 1;
                    limbs::sub_into(&d, &one, W, &mut s);
                    s
                };
                let pick = |r: usize| -> Vec<u64> {
                    match (round / 2 + r + k) % 7 {
                        0 => m2_minus_1.clone(),
                        1 => vec![0u64; L],
                        2 => {
                            let mut v = m.clone();
                            v[0] -= 1;
                            v
                        }
                        _ => {
                            // Below m: a random value one bit shorter.
                            let mut v = random_below(L, W);
                            let top = (L - 1..L).chain((0..L - 1).rev()).find(|&j| m[j] != 0).unwrap();
                            v[top] &= (1u64 << (64 - m[top].leading_zeros() - 1)) - 1;
                            for x in v.iter_mut().skip(top + 1) {
                                *x = 0;
                            }
                            v
                        }
                    }
                };
                lanes.push((pick(0), pick(3), m));
            }
            // SAFETY (of the calls below): the test runs only where the CPU has AVX2 and FMA.
            unsafe { check_lanes::<L>(&lanes, scaled) };
        }
    }

    #[target_feature(enable = "avx2,fma")]
    fn check_lanes<const L: usize>(lanes: &[(Vec<u64>, Vec<u64>, Vec<u64>)], scaled: bool) {
        let mut s = Scratch::<L>::new(_mm256_setzero_si256(), _mm256_setzero_pd());
        let a = transpose::<L>(4, &|k| &lanes[k].0);
        let b = transpose::<L>(4, &|k| &lanes[k].1);
        let m = transpose::<L>(4, &|k| &lanes[k].2);
        let k0s: Vec<u64> = lanes.iter().map(|l| limbs::mont_k0(l.2[0], W)).collect();
        let k0 = per_lane(4, &|k| k0s[k]);
        let mut prod = a;
        let mut sq = a;
        if scaled {
            amm_assign::<L, true>(&mut prod, &b, &m, k0, &mut s);
            ams_assign::<L>(&mut sq, &m, k0, &mut s);
        } else {
            amm_assign::<L, false>(&mut prod, &b, &m, k0, &mut s);
        }
        let (prod, sq) = (untranspose::<L>(&prod), untranspose::<L>(&sq));
        for (k, (x, y, n)) in lanes.iter().enumerate() {
            let mut ops = vec![(&prod[k], y, "amm")];
            if scaled {
                ops.push((&sq[k], x, "ams"));
            }
            for (got, y, what) in ops {
                let (mut want, mut scratch) = (vec![0u64; L], vec![0u64; L]);
                limbs::amm_into(x, y, n, k0s[k], W, &mut want);
                // Both below 2m: equal once each is reduced by m.
                let mut got = got.to_vec();
                assert!(
                    got.iter().all(|&v| v <= MASK),
                    "{what} at {L} limbs: a limb above 2^51"
                );
                limbs::reduce_once(&mut got, n, W, &mut scratch);
                limbs::reduce_once(&mut want, n, W, &mut scratch);
                assert_eq!(got, want, "{what} at {L} limbs, lane {k}, scaled {scaled}");
            }
        }
    }

    #[test]
    fn multiplication_and_squaring_match_the_scalar_product() {
        if !available() {
            eprintln!("no AVX2 and FMA on this CPU");
            return;
        }
        // Every limb count compiled (the classes, all even), and an odd one: the code is
        // generic over L and takes the odd case's other ending.
        ops_match_scalar::<12>();
        ops_match_scalar::<21>();
        ops_match_scalar::<22>();
        ops_match_scalar::<32>();
        ops_match_scalar::<42>();
    }

    /// `product_pair` against i128 arithmetic: hi's bits less 2^103's are H1 + H2 and lo's less
    /// 3·2^51's are L1 + L2, with (H1 + H2)·2^51 + L1 + L2 = x1·y1 + x2·y2, at the extremes (the
    /// largest factors; ties, rounded to even either way, so that L1 + L2 reaches ±2^51 and lo
    /// 2^52 or 2^53; zeros) and on random factors below 2^51.
    #[test]
    fn a_pair_of_products_is_exact_at_its_extremes() {
        if !available() {
            eprintln!("no AVX2 and FMA on this CPU");
            return;
        }
        let top = MASK;
        let half = 1u64 << 50;
        // (2^50)·y is a tie for odd y: it rounds down (L = +2^50) when (y − 1)/2 is even.
        let mut cases: Vec<[u64; 4]> = vec![
            [top, top, top, top],
            [half, 1, half, 1],
            [half, top - 2, half, top - 2],
            [half, top, half, top],
            [half, top, half, top - 2],
            [half, 3, half, 5],
            [0, 0, 0, 0],
            [top, top, 0, 0],
            [0, 0, top, top],
            [1, 1, half, top],
        ];
        for _ in 0..4000 {
            let r = random_below(4, 51);
            cases.push([r[0], r[1], r[2], r[3]]);
        }
        for group in cases.chunks(LANES) {
            let lane = |i: usize| -> [f64; 4] { std::array::from_fn(|k| group[k % group.len()][i] as f64) };
            let (x1, y1, x2, y2) = (lane(0), lane(1), lane(2), lane(3));
            let (mut hi, mut lo) = ([0u64; 4], [0u64; 4]);
            // SAFETY: the CPU has AVX2 and FMA (checked above); the loads and stores are of
            // four-element local arrays.
            unsafe {
                let v = |a: &[f64; 4]| _mm256_loadu_pd(a.as_ptr());
                let (h, l) = product_pair(v(&x1), v(&y1), v(&x2), v(&y2));
                _mm256_storeu_si256(hi.as_mut_ptr().cast(), h);
                _mm256_storeu_si256(lo.as_mut_ptr().cast(), l);
            }
            for k in 0..group.len() {
                let [a, b, c, d] = group[k].map(|v| v as i128);
                let h = hi[k] as i128 - HI_BIAS as i128;
                let l = lo[k] as i128 - LO_BIAS as i128;
                assert!((0..1 << 52).contains(&h), "{:?}: H1 + H2 = {h}", group[k]);
                assert!(
                    (-(1 << 51)..=1 << 51).contains(&l),
                    "{:?}: L1 + L2 = {l}",
                    group[k]
                );
                assert_eq!((h << 51) + l, a * b + c * d, "{:?}", group[k]);
            }
        }
    }

    /// q·m_1 from the offset quotient 2^52 + q gives `product(q, m_1)`'s halves bit for bit,
    /// and those halves are q·m_1 exactly: at the extremes of q and m_1 (0, 1, 2^50 for the
    /// ties that round either way, 2^51 − 1) and on 4,000 random pairs.
    #[test]
    fn the_offset_quotient_gives_the_same_product() {
        if !available() {
            eprintln!("no AVX2 and FMA on this CPU");
            return;
        }
        let edges = [0, 1, 3, 1 << 50, (1 << 50) + 1, MASK - 2, MASK];
        let mut cases: Vec<[u64; 2]> = edges.iter().flat_map(|&q| edges.map(|m| [q, m])).collect();
        for _ in 0..4000 {
            let r = random_below(2, 51);
            cases.push([r[0], r[1]]);
        }
        for group in cases.chunks(LANES) {
            let lane = |i: usize| -> [u64; 4] { std::array::from_fn(|k| group[k % group.len()][i]) };
            let (q, m1) = (lane(0), lane(1));
            let mut got = [[0u64; 4]; 4];
            // SAFETY: the CPU has AVX2 and FMA (checked above); the loads and stores are of
            // four-element local arrays.
            unsafe {
                let qi = _mm256_loadu_si256(q.as_ptr().cast());
                let md = to_f64(_mm256_loadu_si256(m1.as_ptr().cast()));
                let (h, l) = product_biased(offset_quotient(qi), Reduction::new(md, _mm256_setzero_si256()));
                let (h0, l0) = product(to_f64(qi), md);
                for (g, v) in got.iter_mut().zip([h, l, h0, l0]) {
                    _mm256_storeu_si256(g.as_mut_ptr().cast(), v);
                }
            }
            for k in 0..group.len() {
                let [hi, lo, hi0, lo0] = got.map(|g| g[k]);
                assert_eq!((hi, lo), (hi0, lo0), "{:?}", group[k]);
                let h = hi as i128 - HI_BIAS as i128;
                let l = lo as i128 - LO_BIAS as i128;
                assert_eq!(
                    (h << 51) + l,
                    group[k][0] as i128 * group[k][1] as i128,
                    "{:?}",
                    group[k]
                );
            }
        }
    }

    /// `times_m1` against u128 arithmetic: for m_1 = (c + 1)·2^19 − 1, its two terms are
    /// q·(c + 1)·2^19 split at 2^51, the first below 2^51, at the extremes of q and c (0, 1,
    /// 2^32 − 1, 2^32 and 2^50 around q's halves, 2^51 − 1) and on 4,000 random pairs.
    #[test]
    fn the_quotients_terms_of_m1_are_exact() {
        if !available() {
            eprintln!("no AVX2 and FMA on this CPU");
            return;
        }
        let qs = [0, 1, (1 << 32) - 1, 1 << 32, (1 << 50) + 1, MASK];
        let cs = [0, 1, (1 << 31) + 1, (1 << 32) - 1];
        let mut cases: Vec<[u64; 2]> = qs.iter().flat_map(|&q| cs.map(|c| [q, c])).collect();
        for _ in 0..4000 {
            let r = random_below(2, 51);
            cases.push([r[0], r[1] >> 19]);
        }
        for group in cases.chunks(LANES) {
            let lane = |i: usize| -> [u64; 4] { std::array::from_fn(|k| group[k % group.len()][i]) };
            let (q, c) = (lane(0), lane(1));
            // m_1 = (c + 1)·2^19 − 1, as the kernel reads it.
            let m1 = c.map(|c| (((c + 1) << 19) - 1) as f64);
            let (mut next, mut after) = ([0u64; 4], [0u64; 4]);
            // SAFETY: the CPU has AVX2 and FMA (checked above); the loads and stores are of
            // four-element local arrays.
            unsafe {
                let r = Reduction::new(_mm256_loadu_pd(m1.as_ptr()), _mm256_setzero_si256());
                let (n, a) = times_m1(_mm256_loadu_si256(q.as_ptr().cast()), r);
                _mm256_storeu_si256(next.as_mut_ptr().cast(), n);
                _mm256_storeu_si256(after.as_mut_ptr().cast(), a);
            }
            for k in 0..group.len() {
                let [q, c] = group[k].map(|v| v as u128);
                assert!(next[k] <= MASK, "{:?}", group[k]);
                assert_eq!(
                    next[k] as u128 + ((after[k] as u128) << W),
                    (q * (c + 1)) << 19,
                    "{:?}",
                    group[k]
                );
            }
        }
    }

    #[test]
    fn the_floating_point_environment_is_the_default_one() {
        assert!(default_fp_env());
    }
}
