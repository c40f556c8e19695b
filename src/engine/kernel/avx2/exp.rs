//! The exponentiations of the four-lane kernels, written once over `Arith`: the private-key
//! one (fixed windows over the public exponent length, 5 bits or the kernel's
//! `Arith::window`, the entry of every lane chosen by a masked scan of the whole table:
//! constant time) and the check's, with a public exponent.
//! Two arithmetics implement `Arith`: this family's integers in radix 2^28 (`vertical.rs`)
//! and the fma family's doubles in radix 2^51 (`fma/vertical.rs`). Each of their operations
//! is a function compiled for its kernel's CPU features; one call costs nothing next to an
//! operation (hundreds to thousands of cycles).

use super::vertical::{CheckLane, LaneInput, LANES, WINDOW};
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
    /// The modulus the operations reduce by, for lanes of modulus m: m itself, or a multiple
    /// of it whose Montgomery quotients cost less (the fma kernel's k0·m, whose quotient is
    /// the column's low limb). Numbers are then below twice it, and right modulo m.
    unsafe fn modulus(m: &Self::Num, k0: Self::K0) -> Self::Num;
    /// a = a/R mod m, at most m (m only where a is a multiple of m), for an a below twice
    /// `modulus(m)`: out of Montgomery form, and modulo m itself.
    unsafe fn from_form(a: &mut Self::Num, m: &Self::Num, k0: Self::K0, s: &mut Self::Scratch);
    /// a = a·b/R mod m, below 2m (m: the `modulus`).
    unsafe fn amm(a: &mut Self::Num, b: &Self::Num, m: &Self::Num, k0: Self::K0, s: &mut Self::Scratch);
    /// a = a²/R mod m, below 2m.
    unsafe fn ams(a: &mut Self::Num, m: &Self::Num, k0: Self::K0, s: &mut Self::Scratch);
    /// x + y, normalised (the sum stays below R).
    unsafe fn add_norm(x: &Self::Num, y: &Self::Num) -> Self::Num;
    /// x − m where x ≥ m, else x.
    unsafe fn csub(x: &Self::Num, m: &Self::Num) -> Self::Num;
    /// Exponent bits per window of the private exponentiation: a table of 2^w entries,
    /// scanned in full at every window.
    fn window() -> usize {
        WINDOW
    }
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
    // The lanes' slices once, then four reads a vector: a call of `limbs` per limb and lane
    // (two closures deep) cost 2-3% of the module's time at RSA-1024 in `perf`.
    let src: [&[u64]; LANES] = std::array::from_fn(|k| limbs(if k < lanes { k } else { 0 }));
    let at = |k: usize, j: usize| src[k].get(j).copied().unwrap_or(0) as i64;
    let mut out = [_mm256_setzero_si256(); L];
    for (j, o) in out.iter_mut().enumerate() {
        *o = _mm256_set_epi64x(at(3, j), at(2, j), at(1, j), at(0, j));
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

/// Bits pos..pos+w of a little-endian exponent (positions are public).
fn window_bits(exp: &[u64], pos: usize, w: usize) -> u64 {
    let (k, r) = (pos / 64, pos % 64);
    let mut v = exp.get(k).copied().unwrap_or(0) >> r;
    if r + w > 64 {
        v |= exp.get(k + 1).copied().unwrap_or(0) << (64 - r);
    }
    v & ((1 << w) - 1)
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
        let p = A::load(n, &|k| lanes[k].m);
        let k0 = A::k0(n, &|k| lanes[k].k0);
        // The operations reduce by m (p itself or a multiple): right modulo p throughout.
        let mut m = A::modulus(&p, k0);
        let rr = A::load(n, &|k| lanes[k].rr);
        let rrr = A::load(n, &|k| lanes[k].rrr);
        let mut lo = A::load(n, &|k| lanes[k].lo);
        let mut hi = A::load(n, &|k| lanes[k].hi);
        let one = A::one();
        let mut x = montgomery_form::<A, L>(&mut lo, &mut hi, &rr, &rrr, &m, k0, &mut s);
        let bits = A::window();
        let mut table = A::table();
        let mut entry = rr;
        A::amm(&mut entry, &one, &m, k0, &mut s);
        A::put(&mut table, 0, &entry);
        A::put(&mut table, 1, &x);
        // Entry 2k as the square of entry k (a squaring costs 0.75 of a multiplication),
        // 2k + 1 as entry 2k times x. The lower half is kept for the squares.
        let mut lower = vec![x; 1 << (bits - 1)];
        for t in 2..1 << bits {
            if t % 2 == 0 {
                entry = lower[t / 2];
                A::ams(&mut entry, &m, k0, &mut s);
            } else {
                A::amm(&mut entry, &x, &m, k0, &mut s);
            }
            A::put(&mut table, t, &entry);
            if let Some(slot) = lower.get_mut(t) {
                *slot = entry;
            }
        }
        lower.zeroize();
        entry.zeroize();
        let windows = exp_bits.div_ceil(bits).max(1);
        // Every lane's window w (lanes past n repeat lane 0), read straight from the lanes'
        // exponents: through `per_lane`'s closure it cost 1% of the module at RSA-1024.
        let exps: [&[u64]; LANES] = std::array::from_fn(|k| lanes[if k < n { k } else { 0 }].exp);
        let index = |w: usize| {
            let at = |k: usize| window_bits(exps[k], w * bits, bits) as i64;
            _mm256_set_epi64x(at(3), at(2), at(1), at(0))
        };
        let mut idx = index(windows - 1);
        let mut acc = A::select(&table, idx);
        for w in (0..windows - 1).rev() {
            for _ in 0..bits {
                A::ams(&mut acc, &m, k0, &mut s);
            }
            idx = index(w);
            let mut entry = A::select(&table, idx);
            A::amm(&mut acc, &entry, &m, k0, &mut s);
            entry.zeroize();
        }
        // Out of Montgomery form, modulo p: at most p, and p only for a multiple of p.
        A::from_form(&mut acc, &p, k0, &mut s);
        let mut reduced = A::csub(&acc, &p);
        let out = used_lanes(A::store(&reduced), n);
        for v in [&mut x, &mut acc, &mut reduced, &mut lo, &mut hi, &mut m] {
            v.zeroize();
        }
        idx.zeroize();
        drop(table);
        out
    }
}

/// Montgomery form of lo + hi·R in every lane (lo < R, hi < m): lo·R + hi·R², each term
/// below 2m, the sum reduced by 2m once, below 2m. `lo` and `hi` are overwritten. With m a
/// multiple of the lane's prime (`Arith::modulus`), R² and R³ modulo the prime serve as well:
/// the result is right modulo the prime, and below 2m.
///
/// # Safety
/// The CPU runs `A`'s kernel and AVX2.
unsafe fn montgomery_form<A: Arith<L>, const L: usize>(
    lo: &mut A::Num,
    hi: &mut A::Num,
    rr: &A::Num,
    rrr: &A::Num,
    m: &A::Num,
    k0: A::K0,
    s: &mut A::Scratch,
) -> A::Num {
    // SAFETY: the caller checked the CPU's features.
    unsafe {
        A::amm(lo, rr, m, k0, s);
        A::amm(hi, rrr, m, k0, s);
        A::csub(&A::add_norm(lo, hi), &A::add_norm(m, m))
    }
}

/// s^e mod m and c mod m of every lane, both fully reduced, so equal exactly where
/// s^e ≡ c (mod m): the check of a signature s of an input c modulo each prime of its key
/// (`crt::verify_batch`). The prime is secret, so this runs in time independent of it, as the
/// private exponentiation does; s, c and e are public, and e's bits choose the products.
///
/// # Safety
/// The CPU runs `A`'s kernel and AVX2.
pub(crate) unsafe fn check_residues<A: Arith<L>, const L: usize>(
    lanes: &[CheckLane],
) -> Vec<(Vec<u64>, Vec<u64>)> {
    assert!(!lanes.is_empty() && lanes.len() <= LANES);
    // SAFETY (every call below): the caller checked the CPU's features.
    unsafe {
        let mut s = A::scratch();
        let n = lanes.len();
        let p = A::load(n, &|k| lanes[k].m);
        let k0 = A::k0(n, &|k| lanes[k].k0);
        let mut m = A::modulus(&p, k0);
        let rr = A::load(n, &|k| lanes[k].rr);
        let rrr = A::load(n, &|k| lanes[k].rrr);
        let [mut lo, mut hi] = [A::load(n, &|k| lanes[k].s.0), A::load(n, &|k| lanes[k].s.1)];
        let mut x = montgomery_form::<A, L>(&mut lo, &mut hi, &rr, &rrr, &m, k0, &mut s);
        // c's Montgomery form again, not the one the signing exponentiation made of the same
        // input: a fault there would then reach both sides of the comparison and pass. The
        // same two registers (the first pair, overwritten, is wiped with the second).
        (lo, hi) = (A::load(n, &|k| lanes[k].c.0), A::load(n, &|k| lanes[k].c.1));
        let mut c = montgomery_form::<A, L>(&mut lo, &mut hi, &rr, &rrr, &m, k0, &mut s);
        // x^e by squarings from the top bit down; a lane takes the product where its bit is
        // set (under a mask where some lanes have it and others not).
        let mut acc = x;
        let top = lanes.iter().map(|l| l.e).max().unwrap_or(1).max(1);
        let bits = 64 - top.leading_zeros() as usize;
        // Lanes whose exponent is shorter than the longest start from R (one in Montgomery
        // form) and take x at their own top bit.
        let mut one_r = rr;
        if lanes.iter().any(|l| (l.e >> (bits - 1)) & 1 == 0) {
            A::amm(&mut one_r, &A::one(), &m, k0, &mut s);
            let short = per_lane(n, &|k| (((lanes[k].e >> (bits - 1)) & 1) ^ 1).wrapping_neg());
            A::take(&mut acc, &one_r, short);
        }
        for b in (0..bits - 1).rev() {
            A::ams(&mut acc, &m, k0, &mut s);
            let set = lanes.iter().filter(|l| (l.e >> b) & 1 == 1).count();
            if set == 0 {
                continue;
            }
            let mut t = acc;
            A::amm(&mut t, &x, &m, k0, &mut s);
            if set == lanes.len() {
                acc = t;
            } else {
                let bit = per_lane(n, &|k| ((lanes[k].e >> b) & 1).wrapping_neg());
                A::take(&mut acc, &t, bit);
            }
            t.zeroize();
        }
        // Both out of Montgomery form modulo p (m may be a multiple of p), fully reduced.
        A::from_form(&mut acc, &p, k0, &mut s);
        A::from_form(&mut c, &p, k0, &mut s);
        let [mut y, mut z] = [A::csub(&acc, &p), A::csub(&c, &p)];
        let out = used_lanes(A::store(&y), n)
            .into_iter()
            .zip(used_lanes(A::store(&z), n))
            .collect();
        for v in [
            &mut lo, &mut hi, &mut acc, &mut one_r, &mut x, &mut c, &mut y, &mut z, &mut m,
        ] {
            v.zeroize();
        }
        out
    }
}

/// For `benches/rsa_stages.rs`: TSC cycles of one multiplication, one squaring and one table
/// scan at L limbs of `w` bits (the minimum over `reps` timed runs of 64 each), on a made-up
/// modulus, and the window bits (`Arith::window`).
///
/// # Safety
/// The CPU runs `A`'s kernel and AVX2.
pub(crate) unsafe fn op_cycles<A: Arith<L>, const L: usize>(w: u32, reps: usize) -> [u64; 4] {
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
        for t in 0..1 << A::window() {
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
        [a, b, c, A::window() as u64]
    }
}
