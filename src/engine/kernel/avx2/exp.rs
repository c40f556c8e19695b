//! The exponentiations of the four-lane kernels, written once over `Arith`: the private-key
//! one (fixed 5-bit windows over the public exponent length, the entry of every lane chosen by
//! a masked scan of the whole table: constant time) and the check's, with a public exponent.
//! Two arithmetics implement `Arith`: this family's integers in radix 2^28 (`vertical.rs`)
//! and the fma family's doubles in radix 2^51 (`fma/vertical.rs`). Each of their operations
//! is a function compiled for its kernel's CPU features; one call costs nothing next to an
//! operation (hundreds to thousands of cycles).

use super::vertical::{LaneInput, PublicLane, LANES, WINDOW};
use std::arch::x86_64::*;
use zeroize::Zeroize;

/// One four-lane arithmetic at L limbs: numbers in Montgomery form below 2m, limb j of every
/// lane in vector j. Every method runs in time independent of the values.
///
/// Every method is unsafe for one reason: it needs its kernel's CPU features, which the
/// caller has checked (`Lanes::available`).
pub(crate) trait Arith<const L: usize> {
    /// A number of every lane.
    type Num: Copy + Zeroize;
    /// −m⁻¹ mod 2^w of every lane, in the form the operations take.
    type K0: Copy;
    /// The operations' working memory (zeroized on drop).
    type Scratch;
    /// The window table (zeroized on drop).
    type Table;
    /// Limb j of every lane into vector j (lanes past `lanes` repeat lane 0).
    unsafe fn load<'a>(lanes: usize, limbs: &dyn Fn(usize) -> &'a [u64]) -> Self::Num;
    unsafe fn k0(lanes: usize, get: &dyn Fn(usize) -> u64) -> Self::K0;
    /// Every lane's limbs.
    unsafe fn store(x: &Self::Num) -> [[u64; L]; LANES];
    unsafe fn one() -> Self::Num;
    unsafe fn scratch() -> Self::Scratch;
    /// a = a·b/R mod m, below 2m.
    unsafe fn amm(a: &mut Self::Num, b: &Self::Num, m: &Self::Num, k0: Self::K0, s: &mut Self::Scratch);
    /// a = a²/R mod m, below 2m.
    unsafe fn ams(a: &mut Self::Num, m: &Self::Num, k0: Self::K0, s: &mut Self::Scratch);
    /// x + y, normalised (the sum stays below R).
    unsafe fn add_norm(x: &Self::Num, y: &Self::Num) -> Self::Num;
    /// x − m where x ≥ m, else x.
    unsafe fn csub(x: &Self::Num, m: &Self::Num) -> Self::Num;
    unsafe fn table() -> Self::Table;
    unsafe fn put(t: &mut Self::Table, entry: usize, x: &Self::Num);
    /// Every lane's entry `idx` (per lane), reading every entry under a mask.
    unsafe fn select(t: &Self::Table, idx: __m256i) -> Self::Num;
    /// acc = t in the lanes where `take` is all ones (public: the check's exponent bits).
    unsafe fn take(acc: &mut Self::Num, t: &Self::Num, take: __m256i);
}

/// The working memory of a kernel's `amm` and `ams`: the accumulator columns and the doubled
/// operand. One per exponentiation, zeroized once at its end (zeroizing it in every operation
/// cost 10-15% of the operation: its stores are volatile). The columns are never cleared
/// between operations either: every operation assigns a column before it first adds to it.
pub struct Scratch<C: Zeroize, A: Zeroize, const L: usize> {
    pub(crate) cols: [[C; L]; 2],
    pub(crate) a2: [A; L],
}

impl<C: Copy + Zeroize, A: Copy + Zeroize, const L: usize> Scratch<C, A, L> {
    /// All columns `col`, the doubled operand `op` (the kernel's zero vectors).
    pub(crate) fn new(col: C, op: A) -> Self {
        Scratch {
            cols: [[col; L]; 2],
            a2: [op; L],
        }
    }
}

impl<C: Zeroize, A: Zeroize, const L: usize> Drop for Scratch<C, A, L> {
    fn drop(&mut self) {
        self.cols.zeroize();
        self.a2.zeroize();
    }
}

/// One value per lane (lanes past `lanes` repeat lane 0).
#[target_feature(enable = "avx2")]
pub(crate) fn per_lane(lanes: usize, get: &dyn Fn(usize) -> u64) -> __m256i {
    let lane = |k: usize| get(if k < lanes { k } else { 0 }) as i64;
    _mm256_set_epi64x(lane(3), lane(2), lane(1), lane(0))
}

/// Limb j of every lane into vector j, as 64-bit integers (lanes past `lanes` repeat lane 0;
/// limbs past a lane's end are 0).
#[target_feature(enable = "avx2")]
pub(crate) fn transpose<'a, const L: usize>(
    lanes: usize,
    limbs: &dyn Fn(usize) -> &'a [u64],
) -> [__m256i; L] {
    let mut out = [_mm256_setzero_si256(); L];
    for (j, o) in out.iter_mut().enumerate() {
        *o = per_lane(lanes, &|k| limbs(k).get(j).copied().unwrap_or(0));
    }
    out
}

/// Every lane's limbs from integer vectors (the inverse of `transpose`).
#[target_feature(enable = "avx2")]
pub(crate) fn untranspose<const L: usize>(x: &[__m256i; L]) -> [[u64; L]; LANES] {
    let mut out = [[0u64; L]; LANES];
    for (j, v) in x.iter().enumerate() {
        // SAFETY: __m256i and [u64; 4] have the same size, and every bit pattern is valid
        // for both.
        let limbs: [u64; 4] = unsafe { std::mem::transmute::<__m256i, [u64; 4]>(*v) };
        for (k, o) in out.iter_mut().enumerate() {
            o[j] = limbs[k];
        }
    }
    out
}

/// The lanes in use (the first `lanes`) of a result, the whole array wiped: the private
/// exponentiation's are the CRT halves of signatures.
fn used_lanes<const L: usize>(mut out: [[u64; L]; LANES], lanes: usize) -> Vec<Vec<u64>> {
    let used = out[..lanes].iter().map(|x| x.to_vec()).collect();
    out.zeroize();
    used
}

/// Bits pos..pos+WINDOW of a little-endian exponent (positions are public).
fn window_bits(exp: &[u64], pos: usize) -> u64 {
    let (k, r) = (pos / 64, pos % 64);
    let mut v = exp.get(k).copied().unwrap_or(0) >> r;
    if r + WINDOW > 64 {
        v |= exp.get(k + 1).copied().unwrap_or(0) << (64 - r);
    }
    v & ((1 << WINDOW) - 1)
}

/// base^exp mod m for every lane (1..=LANES lanes; missing lanes repeat lane 0, their
/// results are dropped), fully reduced; `exp_bits` (public) bounds every lane's exponent.
///
/// # Safety
/// The CPU runs `A`'s kernel and AVX2.
pub(crate) unsafe fn modexp<A: Arith<L>, const L: usize>(
    lanes: &[LaneInput],
    exp_bits: usize,
) -> Vec<Vec<u64>> {
    assert!(!lanes.is_empty() && lanes.len() <= LANES);
    // SAFETY (every call below): the caller checked the CPU's features.
    unsafe {
        let mut s = A::scratch();
        let n = lanes.len();
        let m = A::load(n, &|k| lanes[k].m);
        let k0 = A::k0(n, &|k| lanes[k].k0);
        let rr = A::load(n, &|k| lanes[k].rr);
        let rrr = A::load(n, &|k| lanes[k].rrr);
        let mut lo = A::load(n, &|k| lanes[k].lo);
        let mut hi = A::load(n, &|k| lanes[k].hi);
        let one = A::one();
        // Montgomery form of the base: lo·R + hi·R² = base·R, each term below 2m; the sum
        // once reduced by 2m is below 2m.
        let m2 = A::add_norm(&m, &m);
        A::amm(&mut lo, &rr, &m, k0, &mut s);
        A::amm(&mut hi, &rrr, &m, k0, &mut s);
        let mut x = A::csub(&A::add_norm(&lo, &hi), &m2);
        let mut table = A::table();
        let mut entry = rr;
        A::amm(&mut entry, &one, &m, k0, &mut s);
        A::put(&mut table, 0, &entry);
        A::put(&mut table, 1, &x);
        entry = x;
        for t in 2..1 << WINDOW {
            A::amm(&mut entry, &x, &m, k0, &mut s);
            A::put(&mut table, t, &entry);
        }
        entry.zeroize();
        let windows = exp_bits.div_ceil(WINDOW).max(1);
        let index = |w: usize| per_lane(n, &|k| window_bits(lanes[k].exp, w * WINDOW));
        let mut idx = index(windows - 1);
        let mut acc = A::select(&table, idx);
        for w in (0..windows - 1).rev() {
            for _ in 0..WINDOW {
                A::ams(&mut acc, &m, k0, &mut s);
            }
            idx = index(w);
            let mut entry = A::select(&table, idx);
            A::amm(&mut acc, &entry, &m, k0, &mut s);
            entry.zeroize();
        }
        // Out of Montgomery form: at most m, and m only for a multiple of m.
        A::amm(&mut acc, &one, &m, k0, &mut s);
        let mut reduced = A::csub(&acc, &m);
        let out = used_lanes(A::store(&reduced), n);
        for v in [&mut x, &mut acc, &mut reduced, &mut lo, &mut hi] {
            v.zeroize();
        }
        idx.zeroize();
        drop(table);
        out
    }
}

/// base^e mod n for every lane (public values: the check of every result before release).
///
/// # Safety
/// The CPU runs `A`'s kernel and AVX2.
pub(crate) unsafe fn powmod_public<A: Arith<L>, const L: usize>(lanes: &[PublicLane]) -> Vec<Vec<u64>> {
    assert!(!lanes.is_empty() && lanes.len() <= LANES);
    // SAFETY (every call below): the caller checked the CPU's features.
    unsafe {
        let mut s = A::scratch();
        let count = lanes.len();
        let n = A::load(count, &|k| lanes[k].n);
        let k0 = A::k0(count, &|k| lanes[k].k0);
        let rr = A::load(count, &|k| lanes[k].rr);
        let mut x = A::load(count, &|k| lanes[k].base);
        let one = A::one();
        A::amm(&mut x, &rr, &n, k0, &mut s);
        let mut acc = rr;
        A::amm(&mut acc, &one, &n, k0, &mut s);
        // The longest exponent sets the count; a lane takes the product where its bit is set.
        let bits = 64 - lanes.iter().map(|l| l.e).max().unwrap_or(0).leading_zeros() as usize;
        for b in (0..bits).rev() {
            A::ams(&mut acc, &n, k0, &mut s);
            // The exponents are public: where no lane has the bit (65537's fifteen zeros), the
            // product is skipped; where some lanes have it, they take it under a mask.
            let set = lanes.iter().filter(|l| (l.e >> b) & 1 == 1).count();
            if set == 0 {
                continue;
            }
            let mut t = acc;
            A::amm(&mut t, &x, &n, k0, &mut s);
            if set == lanes.len() {
                acc = t;
                continue;
            }
            let bit = per_lane(count, &|k| (lanes[k].e >> b) & 1);
            A::take(&mut acc, &t, _mm256_sub_epi64(_mm256_setzero_si256(), bit));
        }
        A::amm(&mut acc, &one, &n, k0, &mut s);
        used_lanes(A::store(&A::csub(&acc, &n)), count)
    }
}

/// For `benches/rsa_stages.rs`: TSC cycles of one multiplication, one squaring and one table
/// scan at L limbs of `w` bits (the minimum over `reps` timed runs of 64 each), on a made-up
/// modulus.
///
/// # Safety
/// The CPU runs `A`'s kernel and AVX2.
pub(crate) unsafe fn op_cycles<A: Arith<L>, const L: usize>(w: u32, reps: usize) -> [u64; 3] {
    let mask = (1u64 << w) - 1;
    let mut mm = [0u64; L];
    for (j, v) in mm.iter_mut().enumerate() {
        *v = (0x0bad_cafe_u64.wrapping_mul(j as u64 + 7) ^ 0x5a5a_5a5a) & mask;
    }
    mm[0] |= 1;
    mm[L - 1] = (1 << (w - 3)) | 1;
    let mut xx = mm;
    xx[0] = 12345;
    let time = |f: &mut dyn FnMut()| {
        let mut best = u64::MAX;
        for _ in 0..reps {
            // SAFETY: rdtsc has no preconditions.
            let t = unsafe { _rdtsc() };
            for _ in 0..64 {
                f();
            }
            // SAFETY: as above.
            best = best.min((unsafe { _rdtsc() } - t) / 64);
        }
        best
    };
    // SAFETY (every call below): the caller checked the CPU's features.
    unsafe {
        let mut s = A::scratch();
        let m = A::load(1, &|_| &mm[..]);
        let k0 = A::k0(1, &|_| super::limbs::mont_k0(mm[0], w));
        let x = A::load(1, &|_| &xx[..]);
        let mut table = A::table();
        for t in 0..1 << WINDOW {
            A::put(&mut table, t, &x);
        }
        let mut y = x;
        let a = time(&mut || A::amm(&mut y, &x, &m, k0, &mut s));
        let b = time(&mut || A::ams(&mut y, &m, k0, &mut s));
        let idx = _mm256_set1_epi64x(3);
        // An opaque index every time: the scan cannot be hoisted out of the loop.
        let c = time(&mut || {
            std::hint::black_box(A::select(&table, std::hint::black_box(idx)));
        });
        std::hint::black_box(A::store(&y));
        [a, b, c]
    }
}
