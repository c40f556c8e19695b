//! ECDSA signing on P-256, P-384 and P-521: the hedged RFC 6979 nonce exactly as the `ecdsa`
//! crate makes it (`sign_prehashed_rfc6979`, same inputs, same signature: tested), with k·G by
//! a constant-time fixed-base comb of our own. Owns the comb table and its scalar recoding for
//! P-384 and P-521; P-256's k·G and s = k⁻¹·(z + r·d) run on the engine's dedicated arithmetic
//! (`engine::ec::p256`, through `SignCurve`), the nonce and the encodings stay here.
//!
//! Why: signing spent most of its time in `mul_by_generator`, p256's basepoint table (it is
//! on: `precomputed-tables`): 65 (P-256) or 97 (P-384) complete projective additions of
//! entries chosen by constant-time selects over projective points. Here:
//! - the comb has width `W` = 6: 43 (P-256) / 65 (P-384) windows of 32 odd multiples
//!   (2m + 1)·2^(6j)·G, affine, so one addition per window, and mixed (one point affine);
//! - the digits come from the regular odd recoding of an odd scalar (k, or n - k when k is
//!   even: x(k·G) = x(-k·G), all ECDSA needs), so no digit is zero and no table entry is the
//!   identity; the addition is the complete a = -3 mixed formula of Renes, Costello and
//!   Batina (2015), without exceptional cases, so no branch depends on k;
//! - an entry is selected by masking every entry of the window's row of bytes (all of them
//!   read, whatever the digit), then decoded; its sign applied by a conditional select.
//!
//! Measured on the project's 2-core Xeon (IFMA), one thread, per signature: P-256 52 -> 34 µs,
//! P-384 147 -> 91 µs (widths 4 and 5 were slower). The table is made once per process on
//! first use: 200 kB on P-384, 367 kB on P-521. Zeroized: k, -k, k's bytes
//! and inverse, the selected table bytes. Not: the digits (registers), the decoded points and
//! the running sum (field elements without Zeroize), and the rfc6979 crate's generator state
//! on P-521 (which cannot give back a k already used; `engine::ec::rfc6979`, which serves
//! P-256 and P-384, zeroizes its V and its keyed HMAC state).

use crate::engine::ec::p256 as p256_engine;
use crate::engine::ec::rfc6979::Nonces;
use ecdsa::{DigestAlgorithm, EcdsaCurve, Signature};
use elliptic_curve::{
    ff::{Field, PrimeField},
    group::{Curve as _, Group as _},
    ops::Reduce,
    point::AffineCoordinates,
    scalar::IsHigh,
    subtle::{Choice, ConditionallySelectable, ConstantTimeEq},
    FieldBytes, NonZeroScalar, Scalar,
};
use hmac::EagerHash;
use primeorder::{AffinePoint, PrimeCurveParams, ProjectivePoint};
use std::sync::LazyLock;
use zeroize::{Zeroize, Zeroizing};

/// Fresh random bytes drawn with each signature for the blinding factors of its inversions
/// (`SignCurve::r_s`); drawn in the same call as the nonce's fresh input.
pub type Blind = [u8; 128];

/// Comb width: digits are odd, |d| < 2^W, 2^(W-1) table entries per window.
const W: usize = 6;

/// A curve this module signs on (all three have a = -3, which `add_mixed` assumes).
pub trait SignCurve: PrimeCurveParams + EcdsaCurve + DigestAlgorithm {
    /// x(k·G) for a nonzero k, in constant time, as big-endian bytes.
    fn mul_x(k: &NonZeroScalar<Self>) -> FieldBytes<Self>;

    /// (r, s, s⁻¹) for nonce k, private key d and z (bits2int of the hash, reduced), constant
    /// time in k and d; r or s may be zero (the caller then draws another k). One inversion
    /// serves k⁻¹ and the check's s⁻¹: with w = z + r·d and t = (k·w)⁻¹, k⁻¹ = w·t,
    /// s = k⁻¹·w, s⁻¹ = k²·t (s⁻¹ is public, as s is; w = 0 gives s = 0). `blind`: fresh
    /// random bytes a curve may blind its inversions with (P-256 does); others ignore them.
    fn r_s(
        d: &NonZeroScalar<Self>,
        zs: &Scalar<Self>,
        k: &NonZeroScalar<Self>,
        blind: &Blind,
    ) -> (Scalar<Self>, Scalar<Self>, Scalar<Self>) {
        let _ = blind;
        let r = <Scalar<Self> as Reduce<FieldBytes<Self>>>::reduce(&Self::mul_x(k));
        let k: &Scalar<Self> = k.as_ref();
        let w = Zeroizing::new(*zs + r * d.as_ref());
        let t = Zeroizing::new(Self::invert_scalar(&(*k * *w)));
        let k_inv = Zeroizing::new(*w * *t);
        let s = *k_inv * *w;
        let s_inv = k.square() * *t;
        (r, s, s_inv)
    }

    /// k⁻¹ for a nonzero k, constant time: the crate's inversion unless the curve has better.
    fn invert_scalar(k: &Scalar<Self>) -> Scalar<Self> {
        Field::invert(k).unwrap_or(Scalar::<Self>::ZERO)
    }

    /// z⁻¹ for a nonzero field element (the comb's Z), constant time: likewise.
    fn invert_field(z: &Self::FieldElement) -> Self::FieldElement {
        Field::invert(z).unwrap_or(Self::FieldElement::ZERO)
    }
}

/// P-384's moduli for the engine's constant-time divsteps (`engine::ec::safegcd`), in place of
/// the crate's inversions (benches/p256.rs's P-384 rows time both; through PKCS#11 the change
/// was within the machine's noise: docs/performance.md).
mod p384_inv {
    use crate::engine::ec::safegcd::Modulus;

    /// Big-endian bytes as little-endian 64-bit limbs.
    fn limbs(b: &[u8]) -> [u64; 6] {
        core::array::from_fn(|i| u64::from_be_bytes(b[40 - 8 * i..48 - 8 * i].try_into().expect("8 bytes")))
    }

    fn bytes(l: &[u64; 6]) -> [u8; 48] {
        let mut b = [0u8; 48];
        for (i, x) in l.iter().enumerate() {
            b[40 - 8 * i..48 - 8 * i].copy_from_slice(&x.to_be_bytes());
        }
        b
    }

    /// x⁻¹ mod m for the big-endian x below m (0 for 0), constant time; the limbs zeroized.
    pub fn invert(m: &Modulus<6, 7>, x: &[u8]) -> [u8; 48] {
        use zeroize::Zeroize;
        let mut a = limbs(x);
        let mut inv = m.invert(&a);
        let out = bytes(&inv);
        a.zeroize();
        inv.zeroize();
        out
    }

    const fn be(s: &str) -> [u64; 6] {
        let b = s.as_bytes();
        let mut l = [0u64; 6];
        let mut i = 0;
        while i < 96 {
            let c = b[i];
            let v = (if c >= b'a' { c - b'a' + 10 } else { c - b'0' }) as u64;
            let pos = 95 - i;
            l[pos / 16] |= v << (4 * (pos % 16));
            i += 1;
        }
        l
    }

    pub const P: Modulus<6, 7> = Modulus::new(&be(
        "fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffeffffffff0000000000000000ffffffff",
    ));
    pub const N: Modulus<6, 7> = Modulus::new(&be(
        "ffffffffffffffffffffffffffffffffffffffffffffffffc7634d81f4372ddf581a0db248b0a77aecec196accc52973",
    ));
}

/// P-384 and P-521: the comb below over the crates' field types.
macro_rules! sign_curve {
    ($c:ty) => {
        impl SignCurve for $c {
            fn mul_x(k: &NonZeroScalar<Self>) -> FieldBytes<Self> {
                static T: LazyLock<Comb<$c>> = LazyLock::new(Comb::new);
                T.mul_x(k)
            }
        }
    };
}
sign_curve!(p521::NistP521);

/// P-384: the comb above, with k⁻¹ and Z⁻¹ by the engine's divsteps.
impl SignCurve for p384::NistP384 {
    fn mul_x(k: &NonZeroScalar<Self>) -> FieldBytes<Self> {
        static T: LazyLock<Comb<p384::NistP384>> = LazyLock::new(Comb::new);
        T.mul_x(k)
    }

    fn invert_scalar(k: &Scalar<Self>) -> Scalar<Self> {
        let mut b = k.to_repr();
        let inv = Zeroizing::new(p384_inv::invert(&p384_inv::N, &b));
        b.zeroize();
        // Below n by construction: from_repr accepts it (unwrap_or selects, no branch).
        Scalar::<Self>::from_repr((*inv).into()).unwrap_or(Scalar::<Self>::ZERO)
    }

    fn invert_field(z: &Self::FieldElement) -> Self::FieldElement {
        let inv = Zeroizing::new(p384_inv::invert(&p384_inv::P, &z.to_repr()));
        Self::FieldElement::from_repr((*inv).into()).unwrap_or(Self::FieldElement::ZERO)
    }
}

/// P-256: the engine's dedicated arithmetic (`engine::ec::p256`) for k·G and s.
impl SignCurve for p256::NistP256 {
    fn mul_x(k: &NonZeroScalar<Self>) -> FieldBytes<Self> {
        let kb = Zeroizing::new(<[u8; 32]>::from(k.to_repr()));
        p256_engine::mul_g_x(&kb).into()
    }

    fn r_s(
        d: &NonZeroScalar<Self>,
        zs: &Scalar<Self>,
        k: &NonZeroScalar<Self>,
        blind: &Blind,
    ) -> (Scalar<Self>, Scalar<Self>, Scalar<Self>) {
        let db = Zeroizing::new(<[u8; 32]>::from(d.to_repr()));
        let kb = Zeroizing::new(<[u8; 32]>::from(k.to_repr()));
        let scalar = |b: [u8; 32]| Option::<Scalar<Self>>::from(Scalar::<Self>::from_repr(b.into()));
        // d and k are in [1, n - 1] (NonZeroScalar) and r, s below n: every conversion succeeds;
        // a zero r or s comes back as zero, as from the generic path.
        p256_engine::sign(&db, &zs.to_repr().into(), &kb, blind)
            .and_then(|(r, s, s_inv)| Some((scalar(r)?, scalar(s)?, scalar(s_inv)?)))
            .unwrap_or((Scalar::<Self>::ZERO, Scalar::<Self>::ZERO, Scalar::<Self>::ZERO))
    }
}

/// Odd multiples (2m + 1)·2^(W·j)·G, m < 2^(W-1), of window j, affine, as x || y bytes.
pub struct Comb<C: PrimeCurveParams> {
    /// Windows: ceil((bits + 1) / W), enough for the recoding's last digit to stay below 2^W.
    nw: usize,
    /// Bytes of a coordinate.
    len: usize,
    /// Window j's row: 2^(W-1) entries of x || y, entry m = (2m + 1)·2^(W·j)·G.
    rows: Vec<u8>,
    _c: core::marker::PhantomData<C>,
}

impl<C: SignCurve> Comb<C> {
    fn new() -> Self {
        debug_assert!(C::EQUATION_A == -C::FieldElement::from(3));
        let nbits = Scalar::<C>::NUM_BITS as usize;
        let nw = (nbits + 1).div_ceil(W);
        let half = 1usize << (W - 1);
        let mut proj = Vec::with_capacity(nw * half);
        let mut base = ProjectivePoint::<C>::GENERATOR;
        for _ in 0..nw {
            let two = base.double();
            let mut m = base;
            for _ in 0..half {
                proj.push(m);
                m += two;
            }
            for _ in 0..W {
                base = base.double();
            }
        }
        let mut aff = vec![AffinePoint::<C>::IDENTITY; proj.len()];
        ProjectivePoint::<C>::batch_normalize(&proj, &mut aff);
        let len = FieldBytes::<C>::default().len();
        let mut rows = Vec::with_capacity(aff.len() * 2 * len);
        for a in &aff {
            rows.extend_from_slice(&a.x());
            rows.extend_from_slice(&a.y());
        }
        Comb {
            nw,
            len,
            rows,
            _c: core::marker::PhantomData,
        }
    }

    /// x(k·G) for a nonzero k, in constant time (k secret), as big-endian bytes.
    pub fn mul_x(&self, k: &NonZeroScalar<C>) -> FieldBytes<C> {
        // Odd k: x(k·G) = x(-k·G), and one of k, n - k is odd (n is odd).
        let k: &Scalar<C> = k.as_ref();
        let neg = Zeroizing::new(-*k);
        let mut kk = Zeroizing::new(*k);
        kk.conditional_assign(&neg, !k.is_odd());
        let be = Zeroizing::new(kk.to_repr());
        let bit = |pos: usize| -> u16 {
            let i = pos / 8;
            if i < be.len() {
                u16::from((be[be.len() - 1 - i] >> (pos % 8)) & 1)
            } else {
                0
            }
        };
        let half = 1usize << (W - 1);
        let row = 2 * self.len;
        let mut sel = Zeroizing::new(vec![0u8; row]);
        let mut acc: Option<(C::FieldElement, C::FieldElement, C::FieldElement)> = None;
        for j in 0..self.nw {
            // Regular recoding: d_j = (1 | bits[W·j + 1 ..= W·j + W] << 1) - 2^W, odd and
            // nonzero; the last digit is the rest, positive.
            let mut v: u16 = 1;
            for b in 0..W {
                v |= bit(W * j + 1 + b) << (b + 1);
            }
            let d: i16 = if j + 1 < self.nw {
                v as i16 - (1 << W)
            } else {
                v as i16
            };
            let sign = d >> 15;
            let abs = ((d ^ sign) - sign) as u16;
            let idx = abs >> 1;
            sel.iter_mut().for_each(|b| *b = 0);
            for m in 0..half {
                let mask = 0u8.wrapping_sub(idx.ct_eq(&(m as u16)).unwrap_u8());
                let r = &self.rows[(j * half + m) * row..(j * half + m + 1) * row];
                for (s, t) in sel.iter_mut().zip(r) {
                    *s |= t & mask;
                }
            }
            let mut xb = FieldBytes::<C>::default();
            let mut yb = FieldBytes::<C>::default();
            xb.copy_from_slice(&sel[..self.len]);
            yb.copy_from_slice(&sel[self.len..]);
            let x = fe::<C>(&xb);
            let y = fe::<C>(&yb);
            xb.zeroize();
            yb.zeroize();
            let y = C::FieldElement::conditional_select(&y, &-y, Choice::from((sign & 1) as u8));
            acc = Some(match acc {
                None => (x, y, C::FieldElement::ONE),
                Some(p) => add_mixed::<C>(p, x, y),
            });
        }
        let (x, _, z) = acc.expect("at least one window");
        // Z is never zero (k·G is not the identity); no branch on it either way.
        let zinv = C::invert_field(&z);
        (x * zinv).to_repr()
    }
}

/// A coordinate from its bytes, without a branch on them (a table entry always decodes).
fn fe<C: PrimeCurveParams>(b: &FieldBytes<C>) -> C::FieldElement {
    C::FieldElement::from_repr(*b).unwrap_or(C::FieldElement::ZERO)
}

/// Complete mixed addition for a = -3 (Renes–Costello–Batina 2015, algorithm 5), the second
/// point affine and not the identity: constant time, no exceptional cases.
fn add_mixed<C: PrimeCurveParams>(
    (x1, y1, z1): (C::FieldElement, C::FieldElement, C::FieldElement),
    x2: C::FieldElement,
    y2: C::FieldElement,
) -> (C::FieldElement, C::FieldElement, C::FieldElement) {
    let b = C::EQUATION_B;
    let xx = x1 * x2;
    let yy = y1 * y2;
    let xy_pairs = ((x1 + y1) * (x2 + y2)) - (xx + yy);
    let yz_pairs = (y2 * z1) + y1;
    let xz_pairs = (x2 * z1) + x1;
    let bz_part = xz_pairs - (b * z1);
    let bz3_part = bz_part.double() + bz_part;
    let yy_m_bzz3 = yy - bz3_part;
    let yy_p_bzz3 = yy + bz3_part;
    let z3 = z1.double() + z1;
    let bxz_part = (b * xz_pairs) - (z3 + xx);
    let bxz3_part = bxz_part.double() + bxz_part;
    let xx3_m_zz3 = xx.double() + xx - z3;
    let x = (yy_p_bzz3 * xy_pairs) - (yz_pairs * bxz3_part);
    let y = (yy_p_bzz3 * yy_m_bzz3) + (xx3_m_zz3 * bxz3_part);
    let z = (yy_m_bzz3 * yz_pairs) + (xy_pairs * xx3_m_zz3);
    (x, y, z)
}

/// ECDSA over `z` (bits2int of `hash`, the scalar's length) with the hedged RFC 6979 nonce of
/// `hash` and `ad`, as `ecdsa::hazmat::sign_prehashed_rfc6979` computes it, k·G by the comb.
/// The nonce's generator takes the caller's hash itself (RFC 6979's h1 = bits2octets(H)): given
/// z, it would apply bits2int a second time, which on P-521 (66 bytes, 521 bits) shifts out
/// the low 7 bits of a SHA-512 hash, so two hashes differing only there would share k
/// whenever `ad` repeated.
///
/// Returns the signature and s⁻¹, which the check before release may use in place of its own
/// inversion (`engine::ec::check::verify_hinted`, which first confirms s·s⁻¹ ≡ 1).
/// `blind`: fresh random bytes for the blinded inversions (`SignCurve::r_s`).
pub fn sign<C: SignCurve>(
    d: &NonZeroScalar<C>,
    z: &[u8],
    hash: &[u8],
    ad: &[u8],
    blind: &Blind,
) -> (Signature<C>, Scalar<C>)
where
    C::Digest: EagerHash,
{
    let x = Zeroizing::new(d.to_repr());
    let order = C::ORDER;
    // An empty hash is bits2int'ed to zero: the generator gets z's zeros (it wants bytes).
    let h = if hash.is_empty() { z } else { hash };
    let len = FieldBytes::<C>::default().len();
    // The leftmost len bytes of b (left-padded with zeros) reduced mod n.
    let reduced = |b: &[u8]| {
        let mut fb = FieldBytes::<C>::default();
        fb[len.saturating_sub(b.len())..].copy_from_slice(&b[..b.len().min(len)]);
        <Scalar<C> as Reduce<FieldBytes<C>>>::reduce(&fb)
    };
    let zs = reduced(z);
    // The nonce generator: ours where n has 8·len bits (P-256, P-384), bits2octets(h) being
    // `reduced(h)`; the crate's for P-521.
    let mut kgen = if <Scalar<C> as elliptic_curve::ff::PrimeField>::NUM_BITS as usize == 8 * len {
        NonceGen::Ours(Nonces::<C::Digest>::new(&x, &reduced(h).to_repr(), ad))
    } else {
        NonceGen::Crate(rfc6979::KGenerator::<C::Digest, C::Uint>::new(&x, h, ad, &order))
    };
    loop {
        let mut kb = Zeroizing::new(FieldBytes::<C>::default());
        match &mut kgen {
            NonceGen::Ours(n) => n.next(&mut kb),
            NonceGen::Crate(g) => g.fill_next_k(&mut kb),
        }
        let Some(k) = Option::<NonZeroScalar<C>>::from(NonZeroScalar::<C>::from_repr(*kb)) else {
            continue;
        };
        let k = Zeroizing::new(k);
        let (r, s, mut s_inv) = C::r_s(d, &zs, &k, blind);
        #[cfg(test)]
        let (r, s) = fault::apply::<C>(r, s, d, &zs, &k);
        if let Ok(mut sig) = Signature::<C>::from_scalars(r, s) {
            if C::NORMALIZE_S && bool::from(s.is_high()) {
                // (n - s)⁻¹ = -s⁻¹.
                sig = sig.normalize_s();
                s_inv = -s_inv;
            }
            return (sig, s_inv);
        }
    }
}

/// RFC 6979's generator: `engine::ec::rfc6979` where it applies, else the crate's.
enum NonceGen<'a, D: EagerHash, U> {
    Ours(Nonces<D>),
    Crate(rfc6979::KGenerator<'a, D, U>),
}

/// Fault injection for the tests (compiled only into unit tests): what a glitch in the signer
/// would produce, one bit flipped in k after R was computed, in R, in s, or in d, as the
/// signature that comes out. The check before release must stop every one of them
/// (`mechanism::ec`'s fault table).
#[cfg(test)]
pub mod fault {
    use super::*;
    use std::cell::Cell;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Fault {
        /// s computed with k ^ 1 (k changed after r = x(k·G)).
        NonceAfterR,
        /// r ^ 1 released (s computed with the right r).
        R,
        /// s ^ 1.
        S,
        /// s computed with d ^ 1.
        Key,
    }

    thread_local! {
        /// The fault the next signature on this thread suffers; cleared once applied.
        pub static NEXT: Cell<Option<Fault>> = const { Cell::new(None) };
    }

    fn flip<C: SignCurve>(v: &Scalar<C>) -> Scalar<C> {
        let mut b = v.to_repr();
        let last = b.len() - 1;
        b[last] ^= 1;
        <Scalar<C> as Reduce<FieldBytes<C>>>::reduce(&b)
    }

    pub(super) fn apply<C: SignCurve>(
        r: Scalar<C>,
        s: Scalar<C>,
        d: &NonZeroScalar<C>,
        zs: &Scalar<C>,
        k: &NonZeroScalar<C>,
    ) -> (Scalar<C>, Scalar<C>) {
        match NEXT.with(|f| f.take()) {
            None => (r, s),
            Some(Fault::NonceAfterR) => {
                let k2 = flip::<C>(k.as_ref());
                (
                    r,
                    elliptic_curve::Field::invert(&k2).unwrap() * (*zs + r * d.as_ref()),
                )
            }
            Some(Fault::R) => (flip::<C>(&r), s),
            Some(Fault::S) => (r, flip::<C>(&s)),
            Some(Fault::Key) => {
                let d2 = flip::<C>(d.as_ref());
                (
                    r,
                    elliptic_curve::Field::invert(k.as_ref()).unwrap() * (*zs + r * d2),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ecdsa::hazmat::sign_prehashed_rfc6979;

    /// P-384's divsteps inversions equal the crate's, modulo n and p: edges and random values.
    #[test]
    fn p384_inversions_agree_with_the_crate() {
        type C = p384::NistP384;
        type Fp = <C as primeorder::FieldArithmetic>::FieldElement;
        let mut scalars = vec![Scalar::<C>::ONE, -Scalar::<C>::ONE, Scalar::<C>::from(2u64)];
        let mut fields = vec![Fp::ONE, -Fp::ONE, Fp::from(2u64), Fp::from(3u64)];
        for _ in 0..2000 {
            let mut b = FieldBytes::<C>::default();
            getrandom::fill(&mut b).unwrap();
            scalars.push(<Scalar<C> as Reduce<FieldBytes<C>>>::reduce(&b));
            b[0] &= 0x7f;
            fields.push(Fp::from_repr(b).unwrap());
        }
        for k in scalars {
            let want = Option::<Scalar<C>>::from(k.invert()).unwrap_or(Scalar::<C>::ZERO);
            assert_eq!(C::invert_scalar(&k), want);
        }
        for z in fields {
            let want = Option::<Fp>::from(Field::invert(&z)).unwrap_or(Fp::ZERO);
            assert_eq!(C::invert_field(&z), want);
        }
    }

    fn random(n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        getrandom::fill(&mut v).unwrap();
        v
    }

    /// The comb's x(k·G) equals p256/p384/p521's `mul_by_generator` for random scalars of both
    /// parities and the edges 1, 2, 3, n - 1, n - 2, 2^(bits - 1) and below; and `sign` makes
    /// the very signature `ecdsa`'s `sign_prehashed_rfc6979` makes from the same key, hash and
    /// added data (hashes with leading zero bytes among them).
    macro_rules! agrees_with_ecdsa {
        ($name:ident, $curve:ty) => {
            #[test]
            fn $name() {
                type S = Scalar<$curve>;
                let len = FieldBytes::<$curve>::default().len();
                let scalar = || loop {
                    let mut v = random(len);
                    if len == 66 {
                        v[0] &= 1;
                    }
                    let mut b = FieldBytes::<$curve>::default();
                    b.copy_from_slice(&v);
                    if let Some(s) = Option::<NonZeroScalar<$curve>>::from(NonZeroScalar::from_repr(b)) {
                        break s;
                    }
                };
                let mut edges: Vec<S> = vec![
                    S::ONE,
                    S::from(2u64),
                    S::from(3u64),
                    -S::ONE,
                    -S::from(2u64),
                ];
                let mut top = S::ONE;
                for _ in 0..S::NUM_BITS - 1 {
                    top = top.double();
                }
                edges.push(top);
                edges.push(top - S::ONE);
                edges.push(top + S::ONE);
                edges.extend((0..60).map(|_| *scalar().as_ref()));
                for k in edges {
                    let nz = Option::<NonZeroScalar<$curve>>::from(NonZeroScalar::new(k)).unwrap();
                    let want = ProjectivePoint::<$curve>::mul_by_generator(&k)
                        .to_affine()
                        .x();
                    assert_eq!(<$curve as SignCurve>::mul_x(&nz), want);
                }
                for round in 0..40 {
                    let d = scalar();
                    let z = random(if round % 4 == 0 { len - 5 } else { len });
                    let mut zfull = vec![0u8; len - z.len()];
                    zfull.extend_from_slice(&z);
                    if len == 66 {
                        zfull[0] &= 1;
                    }
                    let ad = random(len);
                    // Blinding bytes: random, and the edges (all zero: the factor 1; all
                    // ones: both halves above the moduli). The signature must not depend on them.
                    let mut blind: Blind = random(128).try_into().unwrap();
                    match round {
                        0 => blind = [0; 128],
                        1 => blind = [0xff; 128],
                        _ => {}
                    }
                    let (ours, s_inv) = sign::<$curve>(&d, &zfull, &zfull, &ad, &blind);
                    let (theirs, _) = sign_prehashed_rfc6979::<$curve, <$curve as DigestAlgorithm>::Digest>(
                        &d, &zfull, &ad,
                    );
                    assert_eq!(ours, theirs);
                    // The s⁻¹ that comes with it, by the crate's inversion.
                    assert_eq!(s_inv, ours.s().invert().unwrap());
                }
            }
        };
    }

    /// Hashes longer and shorter than the scalar (SHA-512 and SHA-1 lengths on P-256, SHA-512
    /// on P-384), as `mechanism::ec` passes them (z = bits2int of the hash, the hash itself):
    /// the same signatures as the ecdsa crate's from the hash, so the nonce generator's
    /// bits2octets agrees with the crate's on them.
    #[test]
    fn hashes_of_other_lengths_sign_like_the_ecdsa_crate() {
        use crate::mechanism::ec_params::{bits2int, Curve as EcCurve};
        macro_rules! case {
            ($curve:ty, $which:expr, $len:expr, $hlens:expr) => {
                for hlen in $hlens {
                    let d = loop {
                        let mut b = FieldBytes::<$curve>::default();
                        b.copy_from_slice(&random($len));
                        if let Some(s) = Option::<NonZeroScalar<$curve>>::from(NonZeroScalar::from_repr(b)) {
                            break s;
                        }
                    };
                    let (hash, ad) = (random(hlen), random($len));
                    let z = bits2int(&hash, $which);
                    let (ours, _) = sign::<$curve>(&d, &z, &hash, &ad, &[9; 128]);
                    let (theirs, _) =
                        sign_prehashed_rfc6979::<$curve, <$curve as DigestAlgorithm>::Digest>(&d, &hash, &ad);
                    assert_eq!(ours, theirs, "hash of {hlen} bytes");
                }
            };
        }
        for _ in 0..10 {
            case!(p256::NistP256, EcCurve::P256, 32, [64usize, 20, 48]);
            case!(p384::NistP384, EcCurve::P384, 48, [64usize, 32]);
        }
    }

    /// P-521 with SHA-512: two hashes that differ only in their last bit, signed with the same
    /// added data, get different nonces (r), as RFC 6979 makes h1 from the whole hash.
    #[test]
    fn p521_nonce_takes_every_bit_of_the_hash() {
        type C = p521::NistP521;
        let d = loop {
            let mut v = random(66);
            v[0] &= 1;
            let mut b = FieldBytes::<C>::default();
            b.copy_from_slice(&v);
            if let Some(s) = Option::<NonZeroScalar<C>>::from(NonZeroScalar::from_repr(b)) {
                break s;
            }
        };
        let ad = random(66);
        let h1 = random(64);
        let mut h2 = h1.clone();
        h2[63] ^= 1;
        let z = |h: &[u8]| crate::mechanism::ec_params::bits2int(h, crate::mechanism::ec_params::Curve::P521);
        let (s1, _) = sign::<C>(&d, &z(&h1), &h1, &ad, &[7; 128]);
        let (s2, _) = sign::<C>(&d, &z(&h2), &h2, &ad, &[7; 128]);
        assert_ne!(s1.r(), s2.r());
        // The same hash and added data give the same signature (the nonce is deterministic).
        assert_eq!(sign::<C>(&d, &z(&h1), &h1, &ad, &[7; 128]).0, s1);
    }

    agrees_with_ecdsa!(p256_agrees_with_ecdsa, p256::NistP256);
    agrees_with_ecdsa!(p384_agrees_with_ecdsa, p384::NistP384);
    agrees_with_ecdsa!(p521_agrees_with_ecdsa, p521::NistP521);
}
