//! The P-256 signature check on the dedicated field: u1·G + u2·Q in variable time (every input
//! is public), over a static table of G and a per-key table of Q, the same scheme as the
//! generic `engine::ec::check` (which stays for P-384 and P-521), with more segments:
//! - each scalar is split into `SEG` segments with tables of odd multiples of 2^(L·i)·P, so a
//!   check needs L = 9 doublings;
//! - wNAF digits (width `W_G` = 10 for G, `W_Q` = 8 for Q), affine entries, mixed additions;
//! - the exceptional cases (identity, equal points) by branches;
//! - x(R) mod n = r compared projectively (X = r·Z², or (r + n)·Z² when r + n < p).

use super::field::{limbs_from_be, limbs_to_be, lt, Arith, Fe, P};
use super::point::{Affine, Entry, Jac};
use super::scalar::{Scalar, N};
use crate::engine::ec::wnaf::{segment_multiples, wnaf};
use elliptic_curve::point::AffineCoordinates;
use p256::AffinePoint;
use std::sync::LazyLock;

/// Segments per scalar: 16 halved the doublings of 8 (17 against 33, about 3 µs of a 25 µs
/// check measured on the EPYC) for tables twice the size; 32 halves them again (9), 1.045x a
/// whole signature through PKCS#11 on the Xeon, for 128 KiB tables (the key cache counts
/// them: `KeyTable::BYTES`).
const SEG: usize = 32;
/// Doublings per check: bits per segment (257 bits: wNAF may carry one past the top).
const L: usize = 257usize.div_ceil(SEG);
/// wNAF width of the per-key tables (64 entries per segment: 2048 points, 128 KiB per key,
/// made once when the key is first used): about 29 additions for u2·Q instead of 37 at width
/// 6 (check 23.1 -> 21.0 µs on the EPYC).
const W_Q: usize = 8;
/// wNAF width of the generator's table (256 per segment: 8192 points, 512 KiB, once per
/// process): about 23 additions for u1·G instead of 29 at width 8, 1.04x a whole signature
/// through PKCS#11 on the Xeon (2 MiB L2; on the Zen 2's 512 KiB L2 with 16 segments it was
/// 1.02x, within noise).
const W_G: usize = 10;
// wNAF digits are i16: width 15 at most.
const _: () = assert!(W_Q <= 15 && W_G <= 15);

/// Odd multiples 1·P, 3·P, … (2^(w-1) - 1)·P of P_i = 2^(L·i)·P for each segment i, affine.
pub struct KeyTable {
    /// 2^(w - 2): entries per segment.
    half: usize,
    /// wNAF width.
    w: usize,
    /// x and y limbs in Montgomery form (the same in every family).
    pts: Vec<Entry>,
}

static G_TABLE: LazyLock<KeyTable> = LazyLock::new(|| KeyTable::of_point(&AffinePoint::GENERATOR, W_G));

impl KeyTable {
    /// Bytes of a key's table (two coordinates of four limbs a point): what caching a
    /// prepared P-256 key costs beyond the key itself.
    pub const BYTES: usize = SEG * (1 << (W_Q - 2)) * std::mem::size_of::<Entry>();

    /// Bytes the table's points take.
    #[cfg(test)]
    pub(crate) fn bytes_held(&self) -> usize {
        self.pts.len() * std::mem::size_of::<Entry>()
    }

    /// The table of a public point (not the identity).
    pub fn new(q: &AffinePoint) -> KeyTable {
        KeyTable::of_point(q, W_Q)
    }

    /// Built on the family this CPU runs (`super::odd_multiples_here`).
    fn of_point(q: &AffinePoint, w: usize) -> KeyTable {
        let half = 1usize << (w - 2);
        KeyTable {
            half,
            w,
            pts: super::odd_multiples_here(q, SEG, L, half),
        }
    }
}

/// Whether (r, s) is a valid ECDSA signature over `z` (bits2int of the hash, left-padded to 32
/// bytes) for the public point whose table is `q`. Variable time. Computed by family `A`.
/// `s_inv`, the signer's s⁻¹ (`super::sign`), spares the check its inversion once one product
/// confirms s·s_inv ≡ 1 (mod n): the inverse is unique, so a faulty hint is never used, and
/// the check stays as independent of the signer as with its own inversion.
pub fn verify<A: Arith>(
    q: &KeyTable,
    z: &[u8; 32],
    r: &[u8; 32],
    s: &[u8; 32],
    s_inv: Option<&[u8; 32]>,
) -> bool {
    let (Some(rs), Some(ss)) = (Scalar::from_be(r), Scalar::from_be(s)) else {
        return false;
    };
    if rs.is_zero_vartime() || ss.is_zero_vartime() {
        return false;
    }
    // s is public: the variable-time divsteps (`engine::ec::safegcd`).
    let s_inv = s_inv
        .and_then(Scalar::from_be)
        .filter(|h| h.mul(&ss) == Scalar::ONE)
        .unwrap_or_else(|| ss.invert_vartime());
    let u1 = Scalar::reduce_be(z).mul(&s_inv);
    let u2 = rs.mul(&s_inv);
    let sum = lincomb::<A>(&G_TABLE, &u1.to_be(), q, &u2.to_be());
    if sum.is_identity_vartime() {
        return false;
    }
    let zz = sum.z.sqr();
    // r < n < p: a field element as it is.
    let r_fe = Fe::<A>::from_be(r).expect("r < n < p");
    if r_fe.mul(&zz) == sum.x {
        return true;
    }
    // x(R) in [n, p): x(R) = r + n, possible only when r + n < p.
    let rl = limbs_from_be(r);
    let mut rn = [0u64; 4];
    let mut c = 0u128;
    for i in 0..4 {
        c += rl[i] as u128 + N[i] as u128;
        rn[i] = c as u64;
        c >>= 64;
    }
    if c != 0 || lt(&rn, &P) == 0 {
        return false;
    }
    Fe::<A>::from_be(&limbs_to_be(&rn)).is_some_and(|x| x.mul(&zz) == sum.x)
}

/// Additions of a check at most: wNAF digits are nonzero at least w positions apart.
const MAX_ADDS: usize = (SEG * L).div_ceil(W_Q) + (SEG * L).div_ceil(W_G);
/// How many additions ahead the check asks for its next table entries: far enough that an
/// entry missing from L1 arrives before its addition (one addition is ~100 ns).
const PREFETCH: usize = 4;

/// u1·G + u2·Q by interleaved wNAF over the segment tables. The digits are known before the
/// first addition, so the entries are listed first and each one fetched `PREFETCH` additions
/// before it is added: under load, the wait for the entry's cache line was the check's
/// costliest instruction (`perf annotate`, 16 clients).
fn lincomb<A: Arith>(g: &KeyTable, u1: &[u8; 32], q: &KeyTable, u2: &[u8; 32]) -> Jac<A> {
    let mut dg = [0i16; SEG * L];
    let mut dq = [0i16; SEG * L];
    wnaf(u1, g.w, &mut dg);
    wnaf(u2, q.w, &mut dq);
    // (bit position, entry, negate), in the order of the additions. Every digit is written
    // and only a nonzero one kept (n advances by d != 0): a branch per digit on random
    // digits mispredicted often enough to cost ~5% of the check (benches/p256.rs, one
    // signature checked again and again against 256 in turn).
    let mut adds: [(u8, &Entry, bool); MAX_ADDS + 1] = [(0, &g.pts[0], false); MAX_ADDS + 1];
    let mut n = 0;
    for t in (0..L).rev() {
        for i in 0..SEG {
            for (tab, d) in [(g, dg[i * L + t]), (q, dq[i * L + t])] {
                let e = &tab.pts[i * tab.half + (d.unsigned_abs() as usize >> 1)];
                adds[n] = (t as u8, e, d < 0);
                n += usize::from(d != 0);
            }
        }
    }
    for &(_, e, _) in &adds[..n.min(PREFETCH)] {
        prefetch(e);
    }
    let mut acc = Jac::IDENTITY;
    let mut t = L;
    for j in 0..n {
        let (te, e, neg) = adds[j];
        while t > te as usize {
            acc = acc.double_vartime();
            t -= 1;
        }
        if j + PREFETCH < n {
            prefetch(adds[j + PREFETCH].1);
        }
        acc = acc.add_affine_vartime(&e.affine_vartime(neg));
    }
    while t > 0 {
        acc = acc.double_vartime();
        t -= 1;
    }
    acc
}

/// Asks for `e`'s cache line ahead of its use.
#[inline(always)]
fn prefetch(e: &Entry) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it never faults and changes no state the program sees;
    // `e` is a valid reference anyway. SSE is part of x86-64.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>((e as *const Entry).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = e;
}

/// The points of a segment table (`wnaf::segment_multiples`: for each of `seg` segments i,
/// the `half` odd multiples of 2^(l·i)·P) as affine entries, computed on the dedicated field:
/// Jacobian multiples (m·P_i + 2·P_i for odd m, never equal or opposite points for m below
/// n/2; each segment's base by doublings), then one batch normalisation, Montgomery's trick
/// with one variable-time inversion (the point is public). The check's tables and the comb's.
/// A key's table took 1.34 ms on the p256 crate's arithmetic on its first signature; 0.62 ms.
pub(super) fn odd_multiples<A: Arith>(q: &AffinePoint, seg: usize, l: usize, half: usize) -> Vec<Entry> {
    let fe =
        |b: p256::FieldBytes| Fe::<A>::from_be(&b.into()).expect("affine coordinates are field elements");
    let p = Affine {
        x: fe(q.x()),
        y: fe(q.y()),
    };
    let jac = segment_multiples(
        Jac::from_affine(&p),
        seg,
        l,
        half,
        |b| b.double(),
        |a, b| a.add_ct(b),
    );
    // prefix[i] = Z_0 · … · Z_(i-1); inv = (Z_0 · … · Z_i)⁻¹ from the top down.
    let mut prefix = Vec::with_capacity(jac.len());
    let mut acc = Fe::<A>::ONE;
    for j in &jac {
        prefix.push(acc);
        acc = acc.mul(&j.z);
    }
    let mut inv = acc.invert_vartime();
    let mut pts = vec![Entry([0; 8]); jac.len()];
    for i in (0..jac.len()).rev() {
        let zi = inv.mul(&prefix[i]);
        inv = inv.mul(&jac[i].z);
        let zi2 = zi.sqr();
        pts[i] = Entry::new(&Affine {
            x: jac[i].x.mul(&zi2),
            y: jac[i].y.mul(&zi2).mul(&zi),
        });
    }
    pts
}

/// The same segment table made with the p256 crate's arithmetic (what `odd_multiples` is
/// tested against, for the check's tables and the comb's).
#[cfg(test)]
pub(super) fn reference_multiples(q: &AffinePoint, seg: usize, l: usize, half: usize) -> Vec<Entry> {
    use super::field::Portable;
    use elliptic_curve::group::{Curve as _, Group as _};
    use p256::ProjectivePoint;
    let proj = segment_multiples(
        ProjectivePoint::from(*q),
        seg,
        l,
        half,
        |b| b.double(),
        |a, b| *a + b,
    );
    let mut aff = vec![AffinePoint::IDENTITY; proj.len()];
    ProjectivePoint::batch_normalize(&proj, &mut aff);
    let fe = |b: p256::FieldBytes| {
        Fe::<Portable>::from_be(&b.into()).expect("affine coordinates are field elements")
    };
    aff.iter()
        .map(|a| {
            Entry::new(&Affine {
                x: fe(a.x()),
                y: fe(a.y()),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::field::Portable;
    use super::*;

    /// Tables built on each family equal the p256 crate's, for the generator at both widths
    /// and for random points.
    #[test]
    fn built_tables_equal_the_p256_crate_s() {
        let mut points = vec![AffinePoint::GENERATOR];
        for _ in 0..3 {
            let mut b = [0u8; 32];
            getrandom::fill(&mut b).unwrap();
            b[0] &= 0x7f;
            let k = p256::SecretKey::from_slice(&b).unwrap();
            points.push(*k.public_key().as_affine());
        }
        for (i, q) in points.iter().enumerate() {
            for w in [W_Q, if i == 0 { W_G } else { 4 }] {
                let half = 1usize << (w - 2);
                let want = reference_multiples(q, SEG, L, half);
                assert!(odd_multiples::<Portable>(q, SEG, L, half) == want);
                #[cfg(target_arch = "x86_64")]
                if super::super::mulx::available() {
                    assert!(odd_multiples::<super::super::mulx::Mulx>(q, SEG, L, half) == want);
                }
            }
        }
    }
}
