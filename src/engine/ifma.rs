//! AVX-512 IFMA kernel: up to eight independent modular exponentiations at once, lane k of
//! every 512-bit register belonging to exponentiation k ("vertical" multi-buffer layout), in
//! radix 2^52 with almost-Montgomery multiplication. Lanes may have different moduli and
//! exponents; all lanes of a call share the limb count L. Constant time: fixed windows, every
//! table entry read and selected with masks, no secret-dependent branch or index.

use super::radix52::MASK52;
use core::arch::x86_64::*;

pub const LANES: usize = 8;
/// Window width of the exponentiation: a 16-entry table.
const WINDOW: usize = 4;

/// Whether this CPU runs the kernel.
pub fn available() -> bool {
    std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512ifma")
        && std::is_x86_feature_detected!("avx512vl")
        && std::is_x86_feature_detected!("avx512bw")
}

/// One lane's work: `base^exp mod m` where base = `lo + hi·R` (each L limbs below R).
pub struct LaneInput<'a> {
    pub lo: &'a [u64],
    pub hi: &'a [u64],
    pub m: &'a [u64],
    pub k0: u64,
    /// R² mod m and R³ mod m (R = 2^(52·L)).
    pub rr: &'a [u64],
    pub rrr: &'a [u64],
    /// Exponent as little-endian 64-bit words, at least `exp_bits` bits.
    pub exp: &'a [u64],
}

/// Vertical operand: limb j of all lanes in one 64-byte row.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Row([u64; LANES]);

fn rows<'a, const L: usize>(lanes: &[LaneInput<'a>], pick: impl Fn(&LaneInput<'a>) -> &'a [u64]) -> [Row; L] {
    let mut out = [Row([0; LANES]); L];
    for (k, lane) in lanes.iter().enumerate() {
        for (j, &v) in pick(lane).iter().take(L).enumerate() {
            out[j].0[k] = v;
        }
    }
    out
}

/// Runs the lanes (at most 8) and returns `base^exp mod m` per lane, fully reduced, as L
/// normalised limbs. `exp_bits` is public (the bit length of the moduli). Unused lanes are
/// computed on zeros and ignored.
pub fn modexp<const L: usize>(lanes: &[LaneInput], exp_bits: usize) -> Vec<[u64; L]> {
    assert!(lanes.len() <= LANES && available());
    let lo = rows::<L>(lanes, |l| l.lo);
    let hi = rows::<L>(lanes, |l| l.hi);
    let mut m = rows::<L>(lanes, |l| l.m);
    let rr = rows::<L>(lanes, |l| l.rr);
    let rrr = rows::<L>(lanes, |l| l.rrr);
    let mut k0 = Row([0; LANES]);
    // Idle lanes get the modulus 1 (odd, k0 = 2^52 − 1): harmless arithmetic on zeros.
    for k in 0..LANES {
        match lanes.get(k) {
            Some(l) => k0.0[k] = l.k0,
            None => {
                m[0].0[k] = 1;
                k0.0[k] = MASK52;
            }
        }
    }
    let words = exp_bits.div_ceil(64);
    let mut exp = vec![Row([0; LANES]); words];
    for (k, lane) in lanes.iter().enumerate() {
        for (w, &v) in lane.exp.iter().take(words).enumerate() {
            exp[w].0[k] = v;
        }
    }
    let mut out = [Row([0; LANES]); L];
    // SAFETY: `available()` checked the CPU features the kernel is compiled for.
    unsafe { modexp_kernel::<L>(&lo, &hi, &m, k0, &rr, &rrr, &exp, exp_bits, &mut out) };
    (0..lanes.len())
        .map(|k| core::array::from_fn(|j| out[j].0[k]))
        .collect()
}

#[inline]
#[target_feature(enable = "avx512f,avx512ifma")]
fn load<const L: usize>(r: &[Row; L]) -> [__m512i; L] {
    // SAFETY: each Row is 64 bytes, 64-byte aligned.
    core::array::from_fn(|j| unsafe { _mm512_load_si512(r[j].0.as_ptr() as *const _) })
}

/// Almost-Montgomery multiplication a·b·R⁻¹ mod m on eight lanes; output < 2m, normalised.
/// The one-limb shift of each row is folded into the q·m pass so the accumulator stays in
/// registers.
#[inline]
#[target_feature(enable = "avx512f,avx512ifma")]
fn amm<const L: usize>(a: &[__m512i; L], b: &[__m512i; L], m: &[__m512i; L], k0: __m512i) -> [__m512i; L] {
    // An over-aligned local makes LLVM realign this frame, so register spills land on
    // 64-byte boundaries instead of straddling cache lines.
    let mut align = Row([0; LANES]);
    core::hint::black_box(&mut align);
    let zero = _mm512_setzero_si512();
    let mut acc = [zero; L];
    let mut top = zero;
    for ai in a.iter() {
        for j in 0..L {
            acc[j] = _mm512_madd52lo_epu64(acc[j], *ai, b[j]);
        }
        for j in 0..L - 1 {
            acc[j + 1] = _mm512_madd52hi_epu64(acc[j + 1], *ai, b[j]);
        }
        top = _mm512_madd52hi_epu64(top, *ai, b[L - 1]);
        let q = _mm512_madd52lo_epu64(zero, acc[0], k0);
        let low = _mm512_madd52lo_epu64(acc[0], q, m[0]);
        let carry = _mm512_srli_epi64::<52>(low);
        for j in 0..L - 1 {
            let t = _mm512_madd52lo_epu64(acc[j + 1], q, m[j + 1]);
            acc[j] = _mm512_madd52hi_epu64(t, q, m[j]);
        }
        acc[L - 1] = _mm512_madd52hi_epu64(top, q, m[L - 1]);
        acc[0] = _mm512_add_epi64(acc[0], carry);
        top = zero;
    }
    normalise(&mut acc);
    acc
}

#[inline]
#[target_feature(enable = "avx512f")]
fn normalise<const L: usize>(x: &mut [__m512i; L]) {
    let mask = _mm512_set1_epi64(MASK52 as i64);
    for j in 0..L - 1 {
        let c = _mm512_srli_epi64::<52>(x[j]);
        x[j] = _mm512_and_si512(x[j], mask);
        x[j + 1] = _mm512_add_epi64(x[j + 1], c);
    }
}

/// x − m if x ≥ m, else x, per lane, with masks.
#[inline]
#[target_feature(enable = "avx512f")]
fn reduce_once<const L: usize>(x: &[__m512i; L], m: &[__m512i; L]) -> [__m512i; L] {
    let mask = _mm512_set1_epi64(MASK52 as i64);
    let mut borrow = _mm512_setzero_si512();
    let mut d = [borrow; L];
    for j in 0..L {
        let t = _mm512_sub_epi64(_mm512_sub_epi64(x[j], m[j]), borrow);
        borrow = _mm512_srli_epi64::<63>(t);
        d[j] = _mm512_and_si512(t, mask);
    }
    let keep_x = _mm512_cmpneq_epi64_mask(borrow, _mm512_setzero_si512());
    core::array::from_fn(|j| _mm512_mask_mov_epi64(d[j], keep_x, x[j]))
}

#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512ifma")]
fn modexp_kernel<const L: usize>(
    lo: &[Row; L],
    hi: &[Row; L],
    m: &[Row; L],
    k0: Row,
    rr: &[Row; L],
    rrr: &[Row; L],
    exp: &[Row],
    exp_bits: usize,
    out: &mut [Row; L],
) {
    let m = load(m);
    // SAFETY: Row is 64-byte aligned.
    let k0 = unsafe { _mm512_load_si512(k0.0.as_ptr() as *const _) };
    let zero = _mm512_setzero_si512();
    let mut one = [zero; L];
    one[0] = _mm512_set1_epi64(1);
    // Montgomery form of the base: lo·R + hi·R² ≡ AMM(lo, R²) + AMM(hi, R³). Each term is
    // below 2m, so the sum is below 4m, well inside the kernel's bound (R ≥ 256·m).
    let rr = load(rr);
    let x_lo = amm(&load(lo), &rr, &m, k0);
    let x_hi = amm(&load(hi), &load(rrr), &m, k0);
    let mut base = [zero; L];
    for j in 0..L {
        base[j] = _mm512_add_epi64(x_lo[j], x_hi[j]);
    }
    normalise(&mut base);
    // R mod m (the Montgomery one) = AMM(1, R²).
    let mont_one = amm(&one, &rr, &m, k0);
    let mut table = [[zero; L]; 1 << WINDOW];
    table[0] = mont_one;
    table[1] = base;
    for t in 2..(1 << WINDOW) {
        table[t] = amm(&table[t - 1], &base, &m, k0);
    }
    let windows = exp_bits.div_ceil(WINDOW);
    let mut acc = mont_one;
    for win in (0..windows).rev() {
        if win != windows - 1 {
            for _ in 0..WINDOW {
                acc = amm(&acc, &acc, &m, k0);
            }
        }
        let bit = win * WINDOW;
        // SAFETY: Row is 64-byte aligned; `bit / 64 < exp.len()` as exp covers exp_bits.
        let word = unsafe { _mm512_load_si512(exp[bit / 64].0.as_ptr() as *const _) };
        let digit = _mm512_and_si512(
            _mm512_srlv_epi64(word, _mm512_set1_epi64((bit % 64) as i64)),
            _mm512_set1_epi64((1 << WINDOW) - 1),
        );
        // Read every entry; keep the one whose index equals the lane's digit.
        let mut sel = [zero; L];
        for (t, entry) in table.iter().enumerate() {
            let hit = _mm512_cmpeq_epi64_mask(digit, _mm512_set1_epi64(t as i64));
            for j in 0..L {
                sel[j] = _mm512_mask_mov_epi64(sel[j], hit, entry[j]);
            }
        }
        acc = amm(&acc, &sel, &m, k0);
    }
    // Out of Montgomery form: AMM(acc, 1) ≤ m, then one conditional subtraction.
    let r = reduce_once(&amm(&acc, &one, &m, k0), &m);
    for j in 0..L {
        // SAFETY: Row is 64-byte aligned.
        unsafe { _mm512_store_si512(out[j].0.as_mut_ptr() as *mut _, r[j]) };
    }
}

/// One lane of a public-key operation: `base^e mod n` (public data, variable time is fine).
pub struct PublicLane<'a> {
    pub base: &'a [u64],
    pub n: &'a [u64],
    pub k0: u64,
    pub rr: &'a [u64],
    pub e: u64,
}

/// Public-exponent exponentiation on up to eight lanes (signature checks), square and
/// multiply over the bits of the widest exponent, lanes without a given bit keep their value.
pub fn powmod_public<const L: usize>(lanes: &[PublicLane]) -> Vec<[u64; L]> {
    assert!(lanes.len() <= LANES && available());
    let mut base = [Row([0; LANES]); L];
    let mut n = [Row([0; LANES]); L];
    let mut rr = [Row([0; LANES]); L];
    let mut k0 = Row([MASK52; LANES]);
    let mut e = Row([0; LANES]);
    for k in 0..LANES {
        n[0].0[k] = 1;
    }
    for (k, lane) in lanes.iter().enumerate() {
        for j in 0..L {
            base[j].0[k] = lane.base.get(j).copied().unwrap_or(0);
            n[j].0[k] = lane.n[j];
            rr[j].0[k] = lane.rr[j];
        }
        k0.0[k] = lane.k0;
        e.0[k] = lane.e;
    }
    let any = lanes.iter().fold(0, |a, l| a | l.e);
    let mut out = [Row([0; LANES]); L];
    // SAFETY: `available()` checked the CPU features.
    unsafe { powmod_public_kernel::<L>(&base, &n, k0, &rr, e, any, &mut out) };
    (0..lanes.len()).map(|k| core::array::from_fn(|j| out[j].0[k])).collect()
}

#[target_feature(enable = "avx512f,avx512ifma")]
fn powmod_public_kernel<const L: usize>(
    base: &[Row; L],
    n: &[Row; L],
    k0: Row,
    rr: &[Row; L],
    e: Row,
    any: u64,
    out: &mut [Row; L],
) {
    let n = load(n);
    // SAFETY: Row is 64-byte aligned.
    let (k0, e) = unsafe {
        (
            _mm512_load_si512(k0.0.as_ptr() as *const _),
            _mm512_load_si512(e.0.as_ptr() as *const _),
        )
    };
    let zero = _mm512_setzero_si512();
    let x = amm(&load(base), &load(rr), &n, k0);
    let mut acc = x;
    let bits = 64 - any.leading_zeros() as usize;
    for bit in (0..bits.saturating_sub(1)).rev() {
        acc = amm(&acc, &acc, &n, k0);
        // Exponents are public: skip the multiplication when no lane has this bit.
        if any >> bit & 1 == 0 {
            continue;
        }
        let with_x = amm(&acc, &x, &n, k0);
        let set = _mm512_test_epi64_mask(_mm512_srlv_epi64(e, _mm512_set1_epi64(bit as i64)), _mm512_set1_epi64(1));
        for j in 0..L {
            acc[j] = _mm512_mask_mov_epi64(acc[j], set, with_x[j]);
        }
    }
    let mut one = [zero; L];
    one[0] = _mm512_set1_epi64(1);
    let r = reduce_once(&amm(&acc, &one, &n, k0), &n);
    for j in 0..L {
        // SAFETY: Row is 64-byte aligned.
        unsafe { _mm512_store_si512(out[j].0.as_mut_ptr() as *mut _, r[j]) };
    }
}
