//! Fast variable-time ECDSA verification for P-256, P-384 and P-521, the check every
//! signature passes before release (and `C_Verify`'s check). Owns the per-key table of the
//! public point, the static table of the generator, and the double-scalar multiplication
//! u1·G + u2·Q over them.
//!
//! Why: the `ecdsa` crate's `verify_prehash` builds wNAF tables for G and Q on every call and
//! runs 256 (384) doublings with complete projective formulas; it cost more than the signature
//! it checks. Measured on this project's 2-core Xeon (IFMA), one thread, per verification:
//! P-256 150 µs with `verify_prehash`, 36 µs here; P-384 485 µs and 107 µs (signing alone:
//! about 50 and 145 µs). Everything here is public (Q, G, r, s, the hash), so the arithmetic
//! may branch:
//! - each scalar is split into `SEG` segments, with tables for 2^(L·i)·Q and 2^(L·i)·G, so one
//!   verification needs only L = (bits + 1) / `SEG` doublings (33 on P-256);
//! - the tables hold odd multiples in affine form (wNAF digits, width `W_Q` and `W_G`), so
//!   additions are mixed Jacobian + affine;
//! - Jacobian coordinates with the a = -3 doubling (3M + 5S) and mixed addition (8M + 3S),
//!   their exceptional cases (equal or opposite points, infinity) handled by explicit branches;
//! - the x-coordinate is compared projectively (X == r·Z², or (r + n)·Z² when r + n < p),
//!   without an inversion.
//!
//! The table of Q (64 points: 4 KiB on P-256, 6 KiB on P-384) is made on a key's first
//! signature or verification, about three verifications' worth of time, and cached with the
//! key; the generator's (512 points: 32 and 48 KiB) once per process. Wider or more segments
//! measured no faster within noise. The result agrees with `ecdsa`'s `verify_prehash` (tests
//! below: random keys, hashes, changed signatures, high s, the x >= n branch), which stays the
//! reference.
//!
//! P-256 runs the same scheme on the engine's dedicated field (`engine::ec::p256::check`,
//! through `CheckCurve::Table`); the tests below cover both paths alike.

use crate::engine::ec::p256 as p256_engine;
use crate::engine::ec::wnaf::{segment_multiples, wnaf};
use ecdsa::{EcdsaCurve, Signature};
use elliptic_curve::{
    ff::{Field, PrimeField},
    group::{Curve as _, Group as _},
    ops::{Invert, Reduce},
    point::AffineCoordinates,
    scalar::IsHigh,
    FieldBytes, Scalar,
};
use primeorder::{AffinePoint, PrimeCurveParams, ProjectivePoint};
use std::sync::{Arc, LazyLock, OnceLock};

/// Segments each scalar is split into: L = ceil((bits + 1) / SEG) doublings per verification.
const SEG: usize = 8;
/// wNAF width of the per-key tables: 2^(W_Q - 2) odd multiples per segment.
const W_Q: usize = 5;
/// wNAF width of the generator's static table.
const W_G: usize = 8;

/// A curve this module verifies on: the per-key table it keeps and the check over it.
pub trait CheckCurve: PrimeCurveParams + EcdsaCurve {
    /// The per-key table of the public point.
    type Table: Send + Sync + 'static;
    /// The table of a public point (not the identity: `VerifyingKey` guarantees it).
    fn table(q: &AffinePoint<Self>) -> Self::Table;
    /// The check of `verify_hinted`, after its curve-independent part.
    fn verify_table(q: &Self::Table, z: &[u8], sig: &Signature<Self>, s_inv: Option<&Scalar<Self>>) -> bool;
}

/// The curves checked by the generic code below (every NIST curve here has a = -3).
pub trait GenericCurve: CheckCurve {
    /// The generator's table, made on first use.
    fn g_table() -> &'static KeyTable<Self>;
}

macro_rules! check_curve {
    ($c:ty) => {
        impl GenericCurve for $c {
            fn g_table() -> &'static KeyTable<Self> {
                static T: LazyLock<KeyTable<$c>> =
                    LazyLock::new(|| KeyTable::with_width(ProjectivePoint::GENERATOR, W_G));
                &T
            }
        }
        impl CheckCurve for $c {
            type Table = KeyTable<$c>;
            fn table(q: &AffinePoint<Self>) -> KeyTable<$c> {
                KeyTable::new(q)
            }
            fn verify_table(
                q: &KeyTable<$c>,
                z: &[u8],
                sig: &Signature<Self>,
                s_inv: Option<&Scalar<Self>>,
            ) -> bool {
                verify_generic(q, z, sig, s_inv)
            }
        }
    };
}
check_curve!(p384::NistP384);
check_curve!(p521::NistP521);

/// P-256: the engine's dedicated arithmetic (`engine::ec::p256::check`).
impl CheckCurve for p256::NistP256 {
    type Table = p256_engine::KeyTable;
    fn table(q: &AffinePoint<Self>) -> p256_engine::KeyTable {
        p256_engine::KeyTable::new(q)
    }
    fn verify_table(
        q: &p256_engine::KeyTable,
        z: &[u8],
        sig: &Signature<Self>,
        s_inv: Option<&Scalar<Self>>,
    ) -> bool {
        // bits2int's output is at most the scalar's length; a shorter value is left-padded.
        let mut zb = [0u8; 32];
        let Some(pad) = 32usize.checked_sub(z.len()) else {
            return false;
        };
        zb[pad..].copy_from_slice(z);
        let (r, s) = sig.split_scalars();
        let s_inv = s_inv.map(|h| <[u8; 32]>::from(h.to_repr()));
        p256_engine::verify(q, &zb, &r.to_repr().into(), &s.to_repr().into(), s_inv.as_ref())
    }
}

/// Odd multiples 1·P, 3·P, … (2^(w-1) - 1)·P of P_i = 2^(L·i)·P for each segment i, affine.
pub struct KeyTable<C: PrimeCurveParams> {
    /// Segment length in bits.
    l: usize,
    /// 2^(w - 2): entries per segment.
    half: usize,
    /// wNAF width.
    w: usize,
    pts: Vec<(C::FieldElement, C::FieldElement)>,
}

impl<C: PrimeCurveParams> KeyTable<C> {
    /// Bytes of a key's table: what caching a prepared key of this curve costs beyond the key.
    pub const BYTES: usize =
        SEG * (1 << (W_Q - 2)) * std::mem::size_of::<(C::FieldElement, C::FieldElement)>();
}

impl<C: GenericCurve> KeyTable<C> {
    /// The table of a public point (not the identity: `VerifyingKey` guarantees it).
    pub fn new(q: &AffinePoint<C>) -> Self {
        Self::with_width(ProjectivePoint::from(*q), W_Q)
    }

    fn with_width(p: ProjectivePoint<C>, w: usize) -> Self {
        debug_assert!(C::EQUATION_A == -C::FieldElement::from(3));
        let l = segment_len::<C>();
        let half = 1usize << (w - 2);
        let proj = segment_multiples(p, SEG, l, half, |b| b.double(), |a, b| *a + b);
        let mut aff = vec![AffinePoint::<C>::IDENTITY; proj.len()];
        ProjectivePoint::<C>::batch_normalize(&proj, &mut aff);
        let fe = |b: FieldBytes<C>| {
            Option::<C::FieldElement>::from(C::FieldElement::from_repr(b))
                .expect("affine coordinates are field elements")
        };
        let pts = aff.iter().map(|a| (fe(a.x()), fe(a.y()))).collect();
        KeyTable { l, half, w, pts }
    }
}

/// A key's table, made on its first verification and shared by the clones of the key (the
/// private key and the public key made from it): ECDH peers never pay for one.
pub struct LazyTable<C: CheckCurve>(OnceLock<Arc<C::Table>>);

impl<C: CheckCurve> LazyTable<C> {
    pub fn new() -> Self {
        LazyTable(OnceLock::new())
    }

    /// The table of `q`, which must be the point of the key this table belongs to.
    pub fn get(&self, q: &AffinePoint<C>) -> &C::Table {
        self.0.get_or_init(|| Arc::new(C::table(q)))
    }
}

impl<C: CheckCurve> Default for LazyTable<C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: CheckCurve> Clone for LazyTable<C> {
    fn clone(&self) -> Self {
        LazyTable(self.0.clone())
    }
}

fn segment_len<C: PrimeCurveParams>() -> usize {
    (Scalar::<C>::NUM_BITS as usize + 1).div_ceil(SEG)
}

/// A point in Jacobian coordinates (x = X/Z², y = Y/Z³); Z = 0 is the identity.
#[derive(Clone, Copy)]
struct Jac<F> {
    x: F,
    y: F,
    z: F,
}

impl<F: Field> Jac<F> {
    fn is_identity(&self) -> bool {
        bool::from(self.z.is_zero())
    }

    /// 2·P for a = -3 (dbl-2001-b): 3M + 5S.
    fn double(&self) -> Self {
        if self.is_identity() {
            return *self;
        }
        let delta = self.z.square();
        let gamma = self.y.square();
        let beta = self.x * gamma;
        let t = (self.x - delta) * (self.x + delta);
        let alpha = t.double() + t;
        let beta4 = beta.double().double();
        let x3 = alpha.square() - beta4.double();
        let z3 = (self.y + self.z).square() - gamma - delta;
        let y3 = alpha * (beta4 - x3) - gamma.square().double().double().double();
        Jac { x: x3, y: y3, z: z3 }
    }

    /// P + (x2, y2) with the second point affine (madd-2004-hmv): 8M + 3S, five field additions
    /// fewer than madd-2007-bl's 7M + 4S (as P-256's `point`).
    fn add_affine(&self, x2: &F, y2: &F) -> Self {
        if self.is_identity() {
            return Jac {
                x: *x2,
                y: *y2,
                z: F::ONE,
            };
        }
        let z1z1 = self.z.square();
        let u2 = *x2 * z1z1;
        let s2 = *y2 * self.z * z1z1;
        let h = u2 - self.x;
        let r = s2 - self.y;
        if bool::from(h.is_zero()) {
            return if bool::from(r.is_zero()) {
                Jac {
                    x: *x2,
                    y: *y2,
                    z: F::ONE,
                }
                .double()
            } else {
                Jac {
                    x: F::ZERO,
                    y: F::ONE,
                    z: F::ZERO,
                }
            };
        }
        let hh = h.square();
        let hhh = h * hh;
        let v = self.x * hh;
        let x3 = r.square() - hhh - v.double();
        let y3 = r * (v - x3) - self.y * hhh;
        let z3 = self.z * h;
        Jac { x: x3, y: y3, z: z3 }
    }
}

/// Whether (r, s) is a valid ECDSA signature over `z` (the hash after bits2int: big-endian,
/// the scalar's length) for the public point whose table is `q`. Variable time: every input
/// is public.
pub fn verify<C: CheckCurve>(q: &C::Table, z: &[u8], sig: &Signature<C>) -> bool {
    verify_hinted(q, z, sig, None)
}

/// `verify` given s⁻¹ as the signer computed it (`engine::ec::sign::sign`): the check before
/// release uses it in place of its own inversion once one product confirms s·s_inv ≡ 1
/// (mod n). The inverse is unique, so a wrong hint (a fault, or a normalised s) is never
/// used: the check then inverts s itself, and stays as independent of the signer.
pub fn verify_hinted<C: CheckCurve>(
    q: &C::Table,
    z: &[u8],
    sig: &Signature<C>,
    s_inv: Option<&Scalar<C>>,
) -> bool {
    if C::NORMALIZE_S && bool::from(sig.split_scalars().1.is_high()) {
        return false;
    }
    C::verify_table(q, z, sig, s_inv)
}

/// `verify` over the crates' field types.
fn verify_generic<C: GenericCurve>(
    q: &KeyTable<C>,
    z: &[u8],
    sig: &Signature<C>,
    s_inv: Option<&Scalar<C>>,
) -> bool {
    let (r, s) = sig.split_scalars();
    let mut zb = FieldBytes::<C>::default();
    // bits2int's output is at most the scalar's length; a shorter value is left-padded.
    let Some(pad) = zb.len().checked_sub(z.len()) else {
        return false;
    };
    zb[pad..].copy_from_slice(z);
    let z = <Scalar<C> as Reduce<FieldBytes<C>>>::reduce(&zb);
    let s_inv = match s_inv {
        Some(h) if *h * *s == Scalar::<C>::ONE => *h,
        _ => *s.invert_vartime(),
    };
    let u1 = z * s_inv;
    let u2 = *r * s_inv;
    let sum = lincomb(C::g_table(), &u1, q, &u2);
    if sum.is_identity() {
        return false;
    }
    // x(R) mod n == r, with x(R) = X/Z² in [0, p) and p < 2n: X == r·Z², or X == (r + n)·Z²
    // when r + n < p.
    let zz = sum.z.square();
    let r_repr = r.to_repr();
    let Some(r_fe) = Option::<C::FieldElement>::from(C::FieldElement::from_repr(r_repr)) else {
        return false;
    };
    if r_fe * zz == sum.x {
        return true;
    }
    // n as a field element: (n - 1) + 1, and p - n as -n.
    let n_minus_1 = -Scalar::<C>::ONE;
    let Some(n_fe) = Option::<C::FieldElement>::from(C::FieldElement::from_repr(n_minus_1.to_repr())) else {
        return false;
    };
    let n_fe = n_fe + C::FieldElement::ONE;
    let p_minus_n = (-n_fe).to_repr();
    r_repr.as_slice() < p_minus_n.as_slice() && (r_fe + n_fe) * zz == sum.x
}

/// u1·G + u2·Q by interleaved wNAF over the segment tables.
fn lincomb<C: GenericCurve>(
    g: &KeyTable<C>,
    u1: &Scalar<C>,
    q: &KeyTable<C>,
    u2: &Scalar<C>,
) -> Jac<C::FieldElement> {
    let l = g.l;
    let n = SEG * l;
    let mut dg = vec![0i16; n];
    let mut dq = vec![0i16; n];
    wnaf(u1.to_repr().as_slice(), g.w, &mut dg);
    wnaf(u2.to_repr().as_slice(), q.w, &mut dq);
    let mut acc = Jac {
        x: C::FieldElement::ZERO,
        y: C::FieldElement::ONE,
        z: C::FieldElement::ZERO,
    };
    for t in (0..l).rev() {
        acc = acc.double();
        for i in 0..SEG {
            for (tab, d) in [(g, dg[i * l + t]), (q, dq[i * l + t])] {
                if d != 0 {
                    let (x, y) = &tab.pts[i * tab.half + (d.unsigned_abs() as usize >> 1)];
                    acc = if d > 0 {
                        acc.add_affine(x, y)
                    } else {
                        acc.add_affine(x, &-*y)
                    };
                }
            }
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use ecdsa::signature::hazmat::{PrehashVerifier, RandomizedPrehashSigner};

    /// The sizes the key cache charges for a table are the tables' sizes.
    #[test]
    fn table_sizes_are_what_the_cache_counts() {
        let g384 = ProjectivePoint::<p384::NistP384>::GENERATOR.to_affine();
        let t = KeyTable::<p384::NistP384>::new(&g384);
        assert_eq!(
            t.pts.len() * std::mem::size_of_val(&t.pts[0]),
            KeyTable::<p384::NistP384>::BYTES
        );
        let g256 = ProjectivePoint::<p256::NistP256>::GENERATOR.to_affine();
        let t = crate::engine::ec::p256::KeyTable::new(&g256);
        assert_eq!(t.bytes_held(), crate::engine::ec::p256::KeyTable::BYTES);
        assert_eq!(crate::engine::ec::p256::KeyTable::BYTES, 128 * 1024);
    }
    use elliptic_curve::point::DecompressPoint;
    use elliptic_curve::subtle::Choice;

    fn random(n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        getrandom::fill(&mut v).unwrap();
        v
    }

    /// A changed copy of a signature: `which` 0 changes r, 1 changes s, by one bit.
    fn flip(sig: &[u8], which: usize, bit: usize) -> Vec<u8> {
        let mut v = sig.to_vec();
        let half = v.len() / 2;
        let i = which * half + (bit / 8) % half;
        v[i] ^= 1 << (bit % 8);
        v
    }

    /// Random keys, hashes and signatures: the fast check and `ecdsa`'s `verify_prehash`
    /// agree on the signatures, on each one changed (r, s, the hash, the key), on (r, n - s),
    /// and on random (r, s) pairs; the genuine ones pass and the changed ones fail.
    macro_rules! agrees_with_ecdsa {
        ($name:ident, $c:ident, $curve:ty) => {
            #[test]
            fn $name() {
                type Sig = $c::ecdsa::Signature;
                let len = <FieldBytes<$curve>>::default().len();
                let key = || loop {
                    let mut v = random(len);
                    if len == 66 {
                        v[0] &= 1;
                    }
                    if let Ok(k) = $c::ecdsa::SigningKey::from_slice(&v) {
                        break k;
                    }
                };
                let other = key();
                let other_table = <$curve as CheckCurve>::table(other.verifying_key().as_affine());
                for _ in 0..12 {
                    let k = key();
                    let vk = *k.verifying_key();
                    let table = <$curve as CheckCurve>::table(vk.as_affine());
                    for round in 0..12 {
                        // bits2int output: the scalar's length (shorter ones are left-padded).
                        let z = random(if round == 0 { len - 3 } else { len });
                        let mut zfull = vec![0u8; len - z.len()];
                        zfull.extend_from_slice(&z);
                        if len == 66 {
                            zfull[0] &= 1;
                        }
                        let z = &zfull[len - z.len()..];
                        let sig: Sig = k
                            .sign_prehash_with_rng(&mut getrandom::SysRng, &zfull)
                            .unwrap();
                        let reference = |t: &<$curve as CheckCurve>::Table,
                                         vk: &$c::ecdsa::VerifyingKey,
                                         z: &[u8],
                                         s: &[u8]| {
                            let Ok(s) = Sig::from_slice(s) else {
                                return None;
                            };
                            let fast = verify::<$curve>(t, z, &s);
                            let slow = vk.verify_prehash(z, &s).is_ok();
                            assert_eq!(fast, slow, "fast and reference disagree");
                            // With s⁻¹ given (the check before release): the right one, a
                            // wrong one and zero all give the same answer.
                            let inv = Field::invert(s.s().as_ref()).unwrap();
                            for hint in [inv, inv + Scalar::<$curve>::ONE, Scalar::<$curve>::ZERO] {
                                assert_eq!(verify_hinted::<$curve>(t, z, &s, Some(&hint)), slow);
                            }
                            Some(fast)
                        };
                        let bytes = sig.to_bytes();
                        assert_eq!(reference(&table, &vk, z, &bytes), Some(true));
                        assert_eq!(reference(&table, &vk, &zfull, &bytes), Some(true));
                        // Changed r, s (one bit each, somewhere), hash, key.
                        let bit = usize::from(round as u8) * 37 + 5;
                        for which in 0..2 {
                            let bad = flip(&bytes, which, bit);
                            assert_ne!(reference(&table, &vk, z, &bad), Some(true));
                        }
                        let mut bad_z = zfull.clone();
                        bad_z[len - 1] ^= 1;
                        assert_eq!(reference(&table, &vk, &bad_z, &bytes), Some(false));
                        assert_eq!(
                            reference(&other_table, other.verifying_key(), z, &bytes),
                            Some(false)
                        );
                        // High s: (r, n - s) is valid too (no low-s rule on these curves).
                        let (r, s) = sig.split_scalars();
                        let high = Sig::from_scalars(*r, -*s).unwrap();
                        assert_eq!(reference(&table, &vk, z, &high.to_bytes()), Some(true));
                        // A random (r, s).
                        let mut junk = random(2 * len);
                        if len == 66 {
                            junk[0] &= 1;
                            junk[66] &= 1;
                        }
                        assert_ne!(reference(&table, &vk, z, &junk), Some(true));
                    }
                }
            }
        };
    }

    agrees_with_ecdsa!(p256_agrees_with_ecdsa, p256, p256::NistP256);
    agrees_with_ecdsa!(p384_agrees_with_ecdsa, p384, p384::NistP384);
    agrees_with_ecdsa!(p521_agrees_with_ecdsa, p521, p521::NistP521);

    /// The rare branch x(R) >= n (r = x(R) - n): with Q = R itself, (r, r) over z = 0 gives
    /// u1 = 0, u2 = 1, so u1·G + u2·Q = R. Both checks accept it, and refuse (r, r) over z = 1.
    macro_rules! x_above_n {
        ($name:ident, $c:ident, $curve:ty) => {
            #[test]
            fn $name() {
                type Fe = <$curve as primeorder::FieldArithmetic>::FieldElement;
                let n_minus_1 = -Scalar::<$curve>::ONE;
                let n = Fe::from_repr(n_minus_1.to_repr()).unwrap() + Fe::ONE;
                let mut x = n + Fe::ONE;
                let point = loop {
                    let p = AffinePoint::<$curve>::decompress(&x.to_repr(), Choice::from(0));
                    if let Some(p) = Option::<AffinePoint<$curve>>::from(p) {
                        break p;
                    }
                    x += Fe::ONE;
                };
                let vk = $c::ecdsa::VerifyingKey::from_affine(point).unwrap();
                let table = <$curve as CheckCurve>::table(&point);
                // r = x - n, below n as an integer.
                let r_fe = x - n;
                let r = Option::<Scalar<$curve>>::from(Scalar::<$curve>::from_repr(r_fe.to_repr())).unwrap();
                let sig = $c::ecdsa::Signature::from_scalars(r, r).unwrap();
                let len = <FieldBytes<$curve>>::default().len();
                let z0 = vec![0u8; len];
                let mut z1 = z0.clone();
                z1[len - 1] = 1;
                assert!(vk.verify_prehash(&z0, &sig).is_ok());
                assert!(verify::<$curve>(&table, &z0, &sig));
                assert!(vk.verify_prehash(&z1, &sig).is_err());
                assert!(!verify::<$curve>(&table, &z1, &sig));
            }
        };
    }

    x_above_n!(p256_x_above_n, p256, p256::NistP256);
    x_above_n!(p384_x_above_n, p384, p384::NistP384);
    x_above_n!(p521_x_above_n, p521, p521::NistP521);

    /// The exceptional cases of the Jacobian formulas (a point added to itself or to its
    /// opposite, sums through infinity): with Q = G (d = 1) and z = r, u1 = u2, so the G and Q
    /// tables offer the same points at every step; with Q = -G (d = n - 1) and z = 2r,
    /// u1 = 2k and u2 = k, so the sums meet opposite points. Genuine signatures made for
    /// those keys must pass both checks, and the same with s changed must fail both.
    macro_rules! equal_and_opposite_points {
        ($name:ident, $c:ident, $curve:ty) => {
            #[test]
            fn $name() {
                type S = Scalar<$curve>;
                let len = <FieldBytes<$curve>>::default().len();
                let g = ProjectivePoint::<$curve>::GENERATOR.to_affine();
                for (neg, z_times) in [(false, 1u64), (true, 2u64)] {
                    let q = if neg { -g } else { g };
                    let vk = $c::ecdsa::VerifyingKey::from_affine(q).unwrap();
                    let table = <$curve as CheckCurve>::table(&q);
                    for _ in 0..24 {
                        let mut kb = random(len);
                        if len == 66 {
                            kb[0] &= 1;
                        }
                        let k = <S as Reduce<FieldBytes<$curve>>>::reduce(
                            &FieldBytes::<$curve>::try_from(&kb[..]).unwrap(),
                        );
                        let rx = ProjectivePoint::<$curve>::mul_by_generator(&k)
                            .to_affine()
                            .x();
                        let r = <S as Reduce<FieldBytes<$curve>>>::reduce(&rx);
                        let z = r * S::from(z_times);
                        let d = if neg { -S::ONE } else { S::ONE };
                        let s = Option::<S>::from(k.invert()).unwrap() * (z + r * d);
                        let zb = z.to_repr();
                        for (sv, want) in [(s, true), (s + S::ONE, false)] {
                            let sig = $c::ecdsa::Signature::from_scalars(r, sv).unwrap();
                            assert_eq!(vk.verify_prehash(&zb, &sig).is_ok(), want);
                            assert_eq!(verify::<$curve>(&table, &zb, &sig), want);
                        }
                    }
                }
            }
        };
    }

    equal_and_opposite_points!(p256_equal_and_opposite_points, p256, p256::NistP256);
    equal_and_opposite_points!(p384_equal_and_opposite_points, p384, p384::NistP384);
    equal_and_opposite_points!(p521_equal_and_opposite_points, p521, p521::NistP521);
}
