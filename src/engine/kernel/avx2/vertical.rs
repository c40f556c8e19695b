//! The AVX2 vertical kernel: four independent modular exponentiations side by side, one per
//! 64-bit lane of a ymm register, limb j of every lane in vector j. Radix 2^w (w = `W` = 28)
//! so that `vpmuludq` (32×32→64 bits per lane) forms a limb product below 2^(2w) and a column
//! can take the at most 2L + 2 products it ever receives without a carry (lazy carries: one
//! carry chain per operation, at its end).
//!
//! Almost-Montgomery arithmetic: with R = 2^(w·L) ≥ 4m, operands below 2m give results below
//! 2m, so nothing is reduced inside the exponentiation. The multiplication (`amm`) does the
//! product row and the reduction row of each limb in one pass; the squaring (`ams`) computes
//! each cross product once (doubled operand) and runs the reduction in the same pass.
//!
//! Constant time: fixed 5-bit windows over the public exponent length (`exp.rs`, the
//! exponentiation both four-lane kernels share through `exp::Arith`, implemented here by
//! `Int`), the table entry of every lane chosen by a masked scan of the whole table
//! (`vpcmpeqq` + and/or), conditional subtractions by borrow masks; no branch or address
//! depends on a limb or an exponent bit.

use super::exp::{self, per_lane, transpose, untranspose, Arith};
use super::limbs::mask;
use std::arch::x86_64::*;
use zeroize::Zeroize;

/// Lanes per vector: CRT halves, so two signatures per call.
pub const LANES: usize = 4;
/// Bits per limb (the radix 2^w of the module comment).
pub const W: i32 = 28;
/// Exponent bits per window (a table of 32 entries, scanned in full at every window).
pub const WINDOW: usize = 5;

type V = __m256i;

/// Whether this CPU runs the kernel.
pub fn available() -> bool {
    is_x86_feature_detected!("avx2")
}

/// One lane of a private-key exponentiation: base = lo + hi·R (lo < R, hi < m), its modulus,
/// −m⁻¹ mod 2^w, R² and R³ mod m, and the exponent as little-endian 64-bit words.
pub struct LaneInput<'a> {
    pub lo: &'a [u64],
    pub hi: &'a [u64],
    pub m: &'a [u64],
    pub k0: u64,
    pub rr: &'a [u64],
    pub rrr: &'a [u64],
    pub exp: &'a [u64],
}

/// One lane of the check modulo a prime: a signature s and its input c, each split as
/// `LaneInput`'s base (low and high L limbs: below p·q, so the high part is below the prime),
/// the prime, −m⁻¹ mod 2^w, R² and R³ mod m, and the public exponent.
pub struct CheckLane<'a> {
    pub s: (&'a [u64], &'a [u64]),
    pub c: (&'a [u64], &'a [u64]),
    pub m: &'a [u64],
    pub k0: u64,
    pub rr: &'a [u64],
    pub rrr: &'a [u64],
    pub e: u64,
}

/// base^exp mod m for every lane (at most `LANES`; missing lanes repeat lane 0, their results
/// are dropped), fully reduced. `exp_bits` (public) bounds every lane's exponent.
pub fn modexp<const L: usize>(lanes: &[LaneInput], exp_bits: usize) -> Vec<Vec<u64>> {
    assert!(available());
    // SAFETY: the CPU has AVX2 (checked above), the only requirement of these functions.
    unsafe { exp::modexp::<Int, L>(lanes, exp_bits) }
}

/// s^e mod m and c mod m of every lane, fully reduced (`exp::check_residues`).
pub fn check_residues<const L: usize>(lanes: &[CheckLane]) -> Vec<(Vec<u64>, Vec<u64>)> {
    assert!(available());
    // SAFETY: the CPU has AVX2 (checked above), the only requirement of these functions.
    unsafe { exp::check_residues::<Int, L>(lanes) }
}

/// 32×32→64-bit products per lane: `vpmuludq`, always. Written as the intrinsic, LLVM drops
/// its masks where it knows the high halves are zero, then loses that knowledge across
/// loop blocks and emulates a full 64-bit product (three multiplies, shifts and adds: the
/// untuned kernel ran 2-3x slower for it). The instruction itself cannot be rewritten.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) fn mul(a: V, b: V) -> V {
    let r: V;
    // SAFETY: vpmuludq reads two ymm registers and writes one; no memory, stack or flags. The
    // caller (this function's target feature) runs only where the CPU has AVX2.
    unsafe {
        std::arch::asm!(
            "vpmuludq {r}, {a}, {b}",
            r = lateout(ymm_reg) r,
            a = in(ymm_reg) a,
            b = in(ymm_reg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    r
}

#[target_feature(enable = "avx2")]
#[inline]
fn add(a: V, b: V) -> V {
    _mm256_add_epi64(a, b)
}

/// The carry chain at the end of an operation: the columns L..2L into normalised limbs (the
/// value is below R, so nothing carries out of the top). `cols` may stop one short of L: the
/// products of `amm` and `ams` reach column 2L − 2 at most, so their column 2L − 1 would be
/// only the carry into it, which is then the top limb.
#[target_feature(enable = "avx2")]
#[inline]
fn normalize<const L: usize>(cols: &[V]) -> [V; L] {
    let mask = _mm256_set1_epi64x(mask(W as u32) as i64);
    let mut out = [_mm256_setzero_si256(); L];
    let mut carry = _mm256_setzero_si256();
    for (o, &c) in out.iter_mut().zip(cols) {
        let t = add(c, carry);
        *o = _mm256_and_si256(t, mask);
        carry = _mm256_srli_epi64::<W>(t);
    }
    if cols.len() < L {
        out[L - 1] = carry;
    }
    out
}

/// The working memory of `amm` and `ams` (`exp::Scratch`): 64-bit columns and operand.
pub type Scratch<const L: usize> = exp::Scratch<V, V, L>;

/// q for the column `t` (complete up to its reduction term): −t·m⁻¹ mod 2^w.
#[target_feature(enable = "avx2")]
#[inline]
fn quotient(t: V, k0: V, mask: V) -> V {
    _mm256_and_si256(mul(_mm256_and_si256(t, mask), k0), mask)
}

/// x0·y0 + x1·y1 per lane.
#[target_feature(enable = "avx2")]
#[inline]
fn mac2(x0: V, y0: V, x1: V, y1: V) -> V {
    add(mul(x0, y0), mul(x1, y1))
}

/// Almost-Montgomery multiplication a·b/R mod m (below 2m for a, b below 2m), per lane.
///
/// Two rows per pass (rows i and i+1 of the product with their reduction rows): each column
/// in the pass takes four products for one load and one store of its accumulator. Column i is
/// complete once a_i·b_0 is in, and fixes q_i; column i+1 once a_i·b_1, q_i·m_1, a_{i+1}·b_0
/// and column i's carry are in, and fixes q_{i+1}. A column takes at most 2L products of 2w
/// bits and one carry: no overflow of 64 bits for L < 128 at w = 28 (the check of RSA-3072
/// has 110 limbs), L < 2048 at w = 26.
///
/// The pass over rows i, i+1 covers columns i..=i+L, of which the previous pass reached
/// i+L−2: its top two columns, and every column of the first pass, are assigned, not added
/// to, so the accumulator needs no clearing (2L stores, ~4% of an operation).
#[target_feature(enable = "avx2")]
#[inline]
fn amm<const L: usize>(a: &[V; L], b: &[V; L], m: &[V; L], k0: V, s: &mut Scratch<L>) -> [V; L] {
    const { assert!(L >= 4) };
    let mask = _mm256_set1_epi64x(mask(W as u32) as i64);
    let acc = s.cols.as_flattened_mut();
    amm_pass::<L, true>(a[0], a[1], b, m, k0, mask, &mut acc[..=L]);
    let mut i = 2;
    while i + 1 < L {
        amm_pass::<L, false>(a[i], a[i + 1], b, m, k0, mask, &mut acc[i..=i + L]);
        i += 2;
    }
    if L % 2 == 1 {
        // The last row alone (odd limb counts), over columns L−1..=2L−2; the pass before
        // reached 2L−3.
        let a0 = a[L - 1];
        let win = &mut acc[L - 1..2 * L - 1];
        let t = add(win[0], mul(a0, b[0]));
        let q0 = quotient(t, k0, mask);
        let t = add(t, mul(q0, m[0]));
        win[1] = add(win[1], _mm256_srli_epi64::<W>(t));
        for k in 1..L - 1 {
            win[k] = add(win[k], mac2(a0, b[k], q0, m[k]));
        }
        win[L - 1] = mac2(a0, b[L - 1], q0, m[L - 1]);
    }
    normalize::<L>(&acc[L..2 * L - 1])
}

/// One pass of `amm` over rows i, i+1 (`a0`, `a1`): `win` is columns i..=i+L. The limbs of b
/// and m loaded for column k serve column k+1's second row from a register (one load per
/// operand and column, not two: the loads, not the multiplier, bounded the loop).
#[target_feature(enable = "avx2")]
#[inline]
fn amm_pass<const L: usize, const FIRST: bool>(
    a0: V,
    a1: V,
    b: &[V; L],
    m: &[V; L],
    k0: V,
    mask: V,
    win: &mut [V],
) {
    let win = &mut win[..=L];
    let p = mul(a0, b[0]);
    let t = if FIRST { p } else { add(win[0], p) };
    let q0 = quotient(t, k0, mask);
    let t = add(t, mul(q0, m[0]));
    let u = add(
        _mm256_srli_epi64::<W>(t),
        add(mac2(a0, b[1], q0, m[1]), mul(a1, b[0])),
    );
    let u = if FIRST { u } else { add(win[1], u) };
    let q1 = quotient(u, k0, mask);
    let u = add(u, mul(q1, m[0]));
    // Column 2 takes the carry of column 1 with its products.
    let (mut bp, mut mp) = (b[2], m[2]);
    let s = add(
        _mm256_srli_epi64::<W>(u),
        add(mac2(a0, bp, q0, mp), mac2(a1, b[1], q1, m[1])),
    );
    win[2] = if FIRST { s } else { add(win[2], s) };
    for k in 3..L - 1 {
        let (bk, mk) = (b[k], m[k]);
        let s = add(mac2(a0, bk, q0, mk), mac2(a1, bp, q1, mp));
        win[k] = if FIRST { s } else { add(win[k], s) };
        (bp, mp) = (bk, mk);
    }
    // The top two columns: first reached by this pass.
    let (bk, mk) = (b[L - 1], m[L - 1]);
    win[L - 1] = add(mac2(a0, bk, q0, mk), mac2(a1, bp, q1, mp));
    win[L] = mac2(a1, bk, q1, mk);
}

/// Almost-Montgomery squaring a²/R mod m, per lane: each cross product once (by the doubled
/// operand), the squares of the limbs, and the reduction, two rows per pass as in `amm`
/// (which also says why no column is cleared).
///
/// Row i adds a_i² to column 2i and a_i·2a_j (j > i) to column i+j, its reduction q_i·m_j to
/// column i+j. Column i is complete before q_i: its square terms come from rows below i/2 (and
/// row 0's own a_0², added first); column i+1 before q_{i+1} likewise, but for row 0's a_0·2a_1.
/// In a pass over rows i, i+1 (k = column − i, from 2 to L) the square terms begin at k = i
/// (a_i²), so the columns below take only the two reduction products.
#[target_feature(enable = "avx2")]
#[inline]
fn ams<const L: usize>(a: &[V; L], m: &[V; L], k0: V, s: &mut Scratch<L>) -> [V; L] {
    const { assert!(L >= 4) };
    let mask = _mm256_set1_epi64x(mask(W as u32) as i64);
    let acc = s.cols.as_flattened_mut();
    // The doubled operand once per squaring (below 2^(w+1): still a 32-bit multiplicand).
    let a2 = &mut s.a2;
    for j in 0..L {
        a2[j] = add(a[j], a[j]);
    }
    let a2 = &*a2;
    ams_first::<L>(a, a2, m, k0, mask, &mut acc[..=L]);
    let mut i = 2;
    while i + 1 < L {
        ams_pass::<L>(i, a, a2, m, k0, mask, &mut acc[i..=i + L]);
        i += 2;
    }
    if L % 2 == 1 {
        // The last row alone: its reduction, and a_{L-1}² in column 2L−2 (first reached here).
        let a0 = a[L - 1];
        let win = &mut acc[L - 1..2 * L - 1];
        let t = win[0];
        let q0 = quotient(t, k0, mask);
        let t = add(t, mul(q0, m[0]));
        win[1] = add(win[1], _mm256_srli_epi64::<W>(t));
        for k in 1..L - 1 {
            win[k] = add(win[k], mul(q0, m[k]));
        }
        win[L - 1] = mac2(q0, m[L - 1], a0, a0);
    }
    normalize::<L>(&acc[L..2 * L - 1])
}

/// The first pass of `ams` (rows 0 and 1): every column is new, and both rows carry square
/// terms from column 0 on (a_0², a_0·2a_1, a_0·2a_2 + a_1², then a_0·2a_k + a_1·2a_{k−1}).
#[target_feature(enable = "avx2")]
#[inline]
fn ams_first<const L: usize>(a: &[V; L], a2: &[V; L], m: &[V; L], k0: V, mask: V, win: &mut [V]) {
    let win = &mut win[..=L];
    let (a0, a1) = (a[0], a[1]);
    let t = mul(a0, a0);
    let q0 = quotient(t, k0, mask);
    let t = add(t, mul(q0, m[0]));
    let u = add(_mm256_srli_epi64::<W>(t), mac2(q0, m[1], a0, a2[1]));
    let q1 = quotient(u, k0, mask);
    let u = add(u, mul(q1, m[0]));
    let (mut mp, mut ap) = (m[2], a2[2]);
    win[2] = add(
        add(_mm256_srli_epi64::<W>(u), mac2(q0, mp, q1, m[1])),
        mac2(a0, ap, a1, a1),
    );
    for k in 3..L {
        let (mk, ak) = (m[k], a2[k]);
        win[k] = add(mac2(q0, mk, q1, mp), mac2(a0, ak, a1, ap));
        (mp, ap) = (mk, ak);
    }
    win[L] = mac2(q1, mp, a1, ap);
}

/// A pass of `ams` over rows i, i+1 (i ≥ 2, even): `win` is columns i..=i+L. As in `amm_pass`,
/// the limbs of m and 2a loaded for column k serve column k+1 from a register. The top two
/// columns (L−1, L) are new to this pass; which square terms they take depends on how close
/// row i is to the top (i + 2 = L, i + 3 = L, or below), a public fact.
#[target_feature(enable = "avx2")]
#[inline]
fn ams_pass<const L: usize>(i: usize, a: &[V; L], a2: &[V; L], m: &[V; L], k0: V, mask: V, win: &mut [V]) {
    let win = &mut win[..=L];
    let (a0, a1) = (a[i], a[i + 1]);
    let t = win[0];
    let q0 = quotient(t, k0, mask);
    let t = add(t, mul(q0, m[0]));
    let u = add(add(win[1], _mm256_srli_epi64::<W>(t)), mul(q0, m[1]));
    let q1 = quotient(u, k0, mask);
    let u = add(u, mul(q1, m[0]));
    win[2] = add(win[2], _mm256_srli_epi64::<W>(u));
    // k = 2..i: the reduction only.
    let mut mp = m[1];
    for k in 2..i {
        let mk = m[k];
        win[k] = add(win[k], mac2(q0, mk, q1, mp));
        mp = mk;
    }
    // k = i: a_i² (column 2i, below the top two).
    let mk = m[i];
    win[i] = add(win[i], add(mac2(q0, mk, q1, mp), mul(a0, a0)));
    mp = mk;
    // k = i+1: a_i·2a_{i+1}.
    let mk = m[i + 1];
    let s = add(mac2(q0, mk, q1, mp), mul(a0, a2[i + 1]));
    mp = mk;
    if i + 2 == L {
        win[L - 1] = s;
        win[L] = mac2(q1, mp, a1, a1);
        return;
    }
    win[i + 1] = add(win[i + 1], s);
    // k = i+2: a_i·2a_{i+2} + a_{i+1}².
    let (mk, ak) = (m[i + 2], a2[i + 2]);
    let s = add(mac2(q0, mk, q1, mp), mac2(a0, ak, a1, a1));
    let mut ap = ak;
    mp = mk;
    if i + 3 == L {
        win[L - 1] = s;
        win[L] = mac2(q1, mp, a1, ap);
        return;
    }
    win[i + 2] = add(win[i + 2], s);
    for k in i + 3..L - 1 {
        let (mk, ak) = (m[k], a2[k]);
        win[k] = add(win[k], add(mac2(q0, mk, q1, mp), mac2(a0, ak, a1, ap)));
        (mp, ap) = (mk, ak);
    }
    let (mk, ak) = (m[L - 1], a2[L - 1]);
    win[L - 1] = add(mac2(q0, mk, q1, mp), mac2(a0, ak, a1, ap));
    win[L] = mac2(q1, mk, a1, ak);
}

/// x + y, normalised (the sum must stay below R).
#[target_feature(enable = "avx2")]
#[inline]
fn add_norm<const L: usize>(x: &[V; L], y: &[V; L]) -> [V; L] {
    let mut cols = [_mm256_setzero_si256(); L];
    for j in 0..L {
        cols[j] = add(x[j], y[j]);
    }
    normalize::<L>(&cols)
}

/// x − m where x ≥ m, else x, per lane (by the borrow of the subtraction, as a mask).
#[target_feature(enable = "avx2")]
#[inline]
fn csub<const L: usize>(x: &[V; L], m: &[V; L]) -> [V; L] {
    let mask = _mm256_set1_epi64x(mask(W as u32) as i64);
    let mut y = [_mm256_setzero_si256(); L];
    let mut borrow = _mm256_setzero_si256();
    for j in 0..L {
        let t = _mm256_sub_epi64(_mm256_sub_epi64(x[j], m[j]), borrow);
        y[j] = _mm256_and_si256(t, mask);
        borrow = _mm256_srli_epi64::<63>(t);
    }
    let keep = _mm256_sub_epi64(_mm256_setzero_si256(), borrow);
    for j in 0..L {
        y[j] = _mm256_or_si256(_mm256_and_si256(keep, x[j]), _mm256_andnot_si256(keep, y[j]));
    }
    y
}

/// The window table of `modexp`, two limbs to a 64-bit lane (limb 2j in the low half, limb
/// 2j+1 in the high half; table entries are normalised, so limbs are below 2^w ≤ 2^32). At
/// RSA-2048, 32 entries of 37 ymm were 38 KB, more than a Zen 3's 32 KB L1 data cache, and the
/// scan of the whole table at every window 10% of the exponentiation; packed, the table fits
/// and the scan makes half the loads. Zeroized on drop.
pub struct Table<const L: usize> {
    v: Vec<V>,
}

impl<const L: usize> Table<L> {
    /// Vectors per entry.
    const PER: usize = L.div_ceil(2);

    #[target_feature(enable = "avx2")]
    fn new() -> Self {
        Table {
            v: vec![_mm256_setzero_si256(); Self::PER << WINDOW],
        }
    }

    #[target_feature(enable = "avx2")]
    fn put(&mut self, t: usize, x: &[V; L]) {
        let e = &mut self.v[t * Self::PER..][..Self::PER];
        for (j, e) in e.iter_mut().enumerate() {
            let hi = if 2 * j + 1 < L {
                x[2 * j + 1]
            } else {
                _mm256_setzero_si256()
            };
            *e = _mm256_or_si256(x[2 * j], _mm256_slli_epi64::<32>(hi));
        }
    }

    /// Every lane's entry `idx` (per lane), reading every entry under a mask, in groups of up
    /// to 8 vectors held in registers through the scan.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn select(&self, idx: V) -> [V; L] {
        let mut out = [_mm256_setzero_si256(); L];
        let mut g = 0;
        while g < Self::PER {
            match Self::PER - g {
                1 => self.scan::<1>(g, idx, &mut out),
                2 => self.scan::<2>(g, idx, &mut out),
                3 => self.scan::<3>(g, idx, &mut out),
                4 => self.scan::<4>(g, idx, &mut out),
                5 => self.scan::<5>(g, idx, &mut out),
                6 => self.scan::<6>(g, idx, &mut out),
                7 => self.scan::<7>(g, idx, &mut out),
                _ => self.scan::<8>(g, idx, &mut out),
            }
            g += 8;
        }
        out
    }

    /// Packed vectors g..g+G of the selected entry, unpacked into limbs 2g..2g+2G of `out`.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn scan<const G: usize>(&self, g: usize, idx: V, out: &mut [V; L]) {
        let mut r = [_mm256_setzero_si256(); G];
        for t in 0..1 << WINDOW {
            let hit = _mm256_cmpeq_epi64(idx, _mm256_set1_epi64x(t as i64));
            let e = &self.v[t * Self::PER + g..][..G];
            for j in 0..G {
                r[j] = _mm256_or_si256(r[j], _mm256_and_si256(e[j], hit));
            }
        }
        let low = _mm256_set1_epi64x(0xffff_ffff);
        for (j, r) in r.iter().enumerate() {
            let k = 2 * (g + j);
            out[k] = _mm256_and_si256(*r, low);
            if k + 1 < L {
                out[k + 1] = _mm256_srli_epi64::<32>(*r);
            }
        }
    }
}

impl<const L: usize> Drop for Table<L> {
    fn drop(&mut self) {
        self.v.zeroize();
    }
}

#[target_feature(enable = "avx2")]
fn one<const L: usize>() -> [V; L] {
    let mut one = [_mm256_setzero_si256(); L];
    one[0] = _mm256_set1_epi64x(1);
    one
}

/// This kernel as `exp::Arith`: radix 2^28 integers.
pub struct Int;

impl<const L: usize> Arith<L> for Int {
    type Num = [V; L];
    type K0 = V;
    type Scratch = Scratch<L>;
    type Table = Table<L>;

    #[target_feature(enable = "avx2")]
    unsafe fn load<'a>(lanes: usize, limbs: &dyn Fn(usize) -> &'a [u64]) -> [V; L] {
        transpose::<L>(lanes, limbs)
    }

    #[target_feature(enable = "avx2")]
    unsafe fn k0(lanes: usize, get: &dyn Fn(usize) -> u64) -> V {
        per_lane(lanes, get)
    }

    #[target_feature(enable = "avx2")]
    unsafe fn store(x: &[V; L]) -> [[u64; L]; LANES] {
        untranspose::<L>(x)
    }

    #[target_feature(enable = "avx2")]
    unsafe fn one() -> [V; L] {
        one::<L>()
    }

    #[target_feature(enable = "avx2")]
    unsafe fn scratch() -> Scratch<L> {
        Scratch::new(_mm256_setzero_si256(), _mm256_setzero_si256())
    }

    #[target_feature(enable = "avx2")]
    unsafe fn modulus(m: &[V; L], _k0: V) -> [V; L] {
        *m
    }

    #[target_feature(enable = "avx2")]
    unsafe fn from_form(a: &mut [V; L], m: &[V; L], k0: V, s: &mut Scratch<L>) {
        *a = amm::<L>(a, &one::<L>(), m, k0, s);
    }

    #[target_feature(enable = "avx2")]
    unsafe fn amm(a: &mut [V; L], b: &[V; L], m: &[V; L], k0: V, s: &mut Scratch<L>) {
        *a = amm::<L>(a, b, m, k0, s);
    }

    #[target_feature(enable = "avx2")]
    unsafe fn ams(a: &mut [V; L], m: &[V; L], k0: V, s: &mut Scratch<L>) {
        *a = ams::<L>(a, m, k0, s);
    }

    #[target_feature(enable = "avx2")]
    unsafe fn add_norm(x: &[V; L], y: &[V; L]) -> [V; L] {
        add_norm::<L>(x, y)
    }

    #[target_feature(enable = "avx2")]
    unsafe fn csub(x: &[V; L], m: &[V; L]) -> [V; L] {
        csub::<L>(x, m)
    }

    #[target_feature(enable = "avx2")]
    unsafe fn table() -> Table<L> {
        Table::new()
    }

    #[target_feature(enable = "avx2")]
    unsafe fn put(t: &mut Table<L>, entry: usize, x: &[V; L]) {
        t.put(entry, x)
    }

    #[target_feature(enable = "avx2")]
    unsafe fn select(t: &Table<L>, idx: V) -> [V; L] {
        t.select(idx)
    }

    #[target_feature(enable = "avx2")]
    unsafe fn take(acc: &mut [V; L], t: &[V; L], take: V) {
        for j in 0..L {
            acc[j] = _mm256_or_si256(_mm256_and_si256(take, t[j]), _mm256_andnot_si256(take, acc[j]));
        }
    }
}

/// For `benches/rsa_stages.rs`: TSC cycles of one `amm`, one `ams` and one table `select` at
/// L limbs (`exp::op_cycles`).
#[doc(hidden)]
pub fn op_cycles<const L: usize>(reps: usize) -> [u64; 4] {
    assert!(available());
    // SAFETY: the CPU has AVX2 (asserted above).
    unsafe { exp::op_cycles::<Int, L>(W as u32, reps) }
}
