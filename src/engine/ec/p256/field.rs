//! Arithmetic modulo P-256's prime p = 2^256 - 2^224 + 2^192 + 2^96 - 1: Montgomery form with
//! R = 2^256 on four little-endian 64-bit limbs, every value fully reduced (below p), every
//! operation branch-free and free of value-dependent memory access (the signer runs it on
//! secret-derived values).
//!
//! Why this shape: p ≡ -1 (mod 2^64), so -p⁻¹ mod 2^64 = 1 and the quotient digit of each
//! reduction step is the low limb itself (no multiplication for it); p's limbs are
//! (2^64 - 1, 2^32 - 1, 0, 2^64 - 2^32 + 1), so adding q·p costs two 64×64 products (q·p1,
//! q·p3) instead of four. The product is computed whole (16 products; the square 10), then
//! reduced in four such steps: separated operand scanning keeps the carry chains short and
//! shared between `mul` and `sqr`. Add, sub and the final subtraction select with masks.

use crate::engine::ec::safegcd::{pow2_mod, Modulus};
use core::marker::PhantomData;
use zeroize::Zeroize;

/// p, little-endian limbs.
pub const P: [u64; 4] = [u64::MAX, 0x0000_0000_ffff_ffff, 0, 0xffff_ffff_0000_0001];

/// The multiplication and squaring of a family (`Portable` here, `Mulx` in `mulx.rs`):
/// Montgomery products of values below p, fully reduced. Everything else is shared.
pub trait Arith: Copy + Default + core::fmt::Debug + Eq + 'static {
    /// The family's name, as `ferrohsm-util speed` prints it.
    const NAME: &'static str;
    fn mul(a: &[u64; 4], b: &[u64; 4]) -> [u64; 4];
    fn sqr(a: &[u64; 4]) -> [u64; 4];
    /// (a + b) mod p. A family may replace it: the compiler turns the u128 carry chain and
    /// masked select into about twice the instructions of an add/adc/sbb/cmov sequence.
    #[inline(always)]
    fn add(a: &[u64; 4], b: &[u64; 4]) -> [u64; 4] {
        add_mod(a, b, &P)
    }
    /// (a - b) mod p.
    #[inline(always)]
    fn sub(a: &[u64; 4], b: &[u64; 4]) -> [u64; 4] {
        sub_mod(a, b, &P)
    }
}

/// Plain Rust on u128 products: every CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Portable;

impl Arith for Portable {
    const NAME: &'static str = "portable";
    #[inline(always)]
    fn mul(a: &[u64; 4], b: &[u64; 4]) -> [u64; 4] {
        reduce(mul_wide(a, b))
    }
    #[inline(always)]
    fn sqr(a: &[u64; 4]) -> [u64; 4] {
        reduce(sqr_wide(a))
    }
}

/// An element of GF(p) in Montgomery form (a·R mod p), below p, computed by family `A`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Zeroize)]
pub struct Fe<A: Arith = Portable>(pub(crate) [u64; 4], PhantomData<A>);

#[inline(always)]
fn adc(a: u64, b: u64, c: u64) -> (u64, u64) {
    let t = a as u128 + b as u128 + c as u128;
    (t as u64, (t >> 64) as u64)
}

#[inline(always)]
fn sbb(a: u64, b: u64, borrow: u64) -> (u64, u64) {
    // borrow is 0 or 1; the returned borrow likewise.
    let t = (a as u128).wrapping_sub(b as u128 + borrow as u128);
    (t as u64, (t >> 127) as u64)
}

/// a·b + c + d as (low, high): never overflows 128 bits.
#[inline(always)]
fn mac(a: u64, b: u64, c: u64, d: u64) -> (u64, u64) {
    let t = a as u128 * b as u128 + c as u128 + d as u128;
    (t as u64, (t >> 64) as u64)
}

/// (hi·2^256 + r) - m if that is nonnegative, else r; needs hi·2^256 + r < 2m.
#[inline(always)]
pub(crate) fn sub_mod_once(r: [u64; 4], hi: u64, m: &[u64; 4]) -> [u64; 4] {
    let (s0, b) = sbb(r[0], m[0], 0);
    let (s1, b) = sbb(r[1], m[1], b);
    let (s2, b) = sbb(r[2], m[2], b);
    let (s3, b) = sbb(r[3], m[3], b);
    let (_, b) = sbb(hi, 0, b);
    // b = 1: the subtraction went below zero, keep r.
    let keep = 0u64.wrapping_sub(b);
    [
        (r[0] & keep) | (s0 & !keep),
        (r[1] & keep) | (s1 & !keep),
        (r[2] & keep) | (s2 & !keep),
        (r[3] & keep) | (s3 & !keep),
    ]
}

/// The halves of the 512-bit big-endian integer of `b` (high half first), each reduced once
/// modulo m (> 2^255, so each is then below m): a blinding factor's raw material.
pub(crate) fn wide_halves(b: &[u8; 64], m: &[u64; 4]) -> ([u64; 4], [u64; 4]) {
    let half = |h: &[u8]| sub_mod_once(limbs_from_be(h.try_into().expect("32 bytes")), 0, m);
    (half(&b[..32]), half(&b[32..]))
}

/// (a + b) mod m for a, b < m.
#[inline(always)]
pub(crate) fn add_mod(a: &[u64; 4], b: &[u64; 4], m: &[u64; 4]) -> [u64; 4] {
    let (r0, c) = adc(a[0], b[0], 0);
    let (r1, c) = adc(a[1], b[1], c);
    let (r2, c) = adc(a[2], b[2], c);
    let (r3, c) = adc(a[3], b[3], c);
    sub_mod_once([r0, r1, r2, r3], c, m)
}

/// (a - b) mod m for a, b < m.
#[inline(always)]
pub(crate) fn sub_mod(a: &[u64; 4], b: &[u64; 4], m: &[u64; 4]) -> [u64; 4] {
    let (r0, bw) = sbb(a[0], b[0], 0);
    let (r1, bw) = sbb(a[1], b[1], bw);
    let (r2, bw) = sbb(a[2], b[2], bw);
    let (r3, bw) = sbb(a[3], b[3], bw);
    let mask = 0u64.wrapping_sub(bw);
    let (r0, c) = adc(r0, m[0] & mask, 0);
    let (r1, c) = adc(r1, m[1] & mask, c);
    let (r2, c) = adc(r2, m[2] & mask, c);
    let (r3, _) = adc(r3, m[3] & mask, c);
    [r0, r1, r2, r3]
}

/// The full 512-bit product a·b, little-endian.
#[inline(always)]
pub(crate) fn mul_wide(a: &[u64; 4], b: &[u64; 4]) -> [u64; 8] {
    let mut t = [0u64; 8];
    for i in 0..4 {
        let mut c = 0;
        for j in 0..4 {
            (t[i + j], c) = mac(a[i], b[j], t[i + j], c);
        }
        t[i + 4] = c;
    }
    t
}

/// The full 512-bit square: the six cross products once, doubled, plus the four squares.
#[inline(always)]
fn sqr_wide(a: &[u64; 4]) -> [u64; 8] {
    // Cross products a_i·a_j, i < j, into t[1..7].
    let (t1, c) = mac(a[0], a[1], 0, 0);
    let (t2, c) = mac(a[0], a[2], 0, c);
    let (t3, t4) = mac(a[0], a[3], 0, c);
    let (t3, c) = mac(a[1], a[2], t3, 0);
    let (t4, t5) = mac(a[1], a[3], t4, c);
    let (t5, t6) = mac(a[2], a[3], t5, 0);
    // Doubled: shift the 7 limbs left by one bit.
    let t7 = t6 >> 63;
    let t6 = (t6 << 1) | (t5 >> 63);
    let t5 = (t5 << 1) | (t4 >> 63);
    let t4 = (t4 << 1) | (t3 >> 63);
    let t3 = (t3 << 1) | (t2 >> 63);
    let t2 = (t2 << 1) | (t1 >> 63);
    let t1 = t1 << 1;
    // Plus the squares a_i² at limbs 2i, 2i + 1.
    let (t0, c) = mac(a[0], a[0], 0, 0);
    let (t1, c) = adc(t1, c, 0);
    let (s, h) = mac(a[1], a[1], 0, 0);
    let (t2, c) = adc(t2, s, c);
    let (t3, c) = adc(t3, h, c);
    let (s, h) = mac(a[2], a[2], 0, 0);
    let (t4, c) = adc(t4, s, c);
    let (t5, c) = adc(t5, h, c);
    let (s, h) = mac(a[3], a[3], 0, 0);
    let (t6, c) = adc(t6, s, c);
    let (t7, _) = adc(t7, h, c);
    [t0, t1, t2, t3, t4, t5, t6, t7]
}

/// Montgomery reduction of a 512-bit t < p·2^256: t·2^-256 mod p, below p.
#[inline(always)]
pub(crate) fn reduce(t: [u64; 8]) -> [u64; 4] {
    // Reduce the low half alone (it stays below 2^256 at every step: (r + q·p)/2^64 <
    // 2^192 + p), then add the high half: the sum is below 2p.
    let mut r = [t[0], t[1], t[2], t[3]];
    for _ in 0..4 {
        let q = r[0];
        // r0 + q·p0 = q·2^64 exactly: limb 0 becomes zero and carries q.
        let (r1, c) = mac(q, P[1], r[1], q);
        let (r2, c) = adc(r[2], c, 0);
        let (r3, c) = mac(q, P[3], r[3], c);
        r = [r1, r2, r3, c];
    }
    let (r0, c) = adc(r[0], t[4], 0);
    let (r1, c) = adc(r[1], t[5], c);
    let (r2, c) = adc(r[2], t[6], c);
    let (r3, c) = adc(r[3], t[7], c);
    sub_mod_once([r0, r1, r2, r3], c, &P)
}

/// 2^256 mod m, for an odd m > 2^255.
pub(crate) const fn r_mod(m: &[u64; 4]) -> [u64; 4] {
    // 2^256 - m as a 256-bit number (wrapping negation).
    let mut r = [0u64; 4];
    let mut borrow = 0u64;
    let mut i = 0;
    while i < 4 {
        let t = (0u128).wrapping_sub(m[i] as u128 + borrow as u128);
        r[i] = t as u64;
        borrow = (t >> 127) as u64;
        i += 1;
    }
    r
}

/// 2^512 mod m (Montgomery's R²), by 256 modular doublings of 2^256 mod m: computed by the
/// compiler, so no constant is copied by hand.
pub(crate) const fn r2_mod(m: &[u64; 4]) -> [u64; 4] {
    let mut r = r_mod(m);
    let mut k = 0;
    while k < 256 {
        // r = 2r mod m: the doubled value has 257 bits; subtract m once if it is >= m.
        let hi = r[3] >> 63;
        let d = [
            r[0] << 1,
            (r[1] << 1) | (r[0] >> 63),
            (r[2] << 1) | (r[1] >> 63),
            (r[3] << 1) | (r[2] >> 63),
        ];
        let mut s = [0u64; 4];
        let mut borrow = 0u64;
        let mut i = 0;
        while i < 4 {
            let t = (d[i] as u128).wrapping_sub(m[i] as u128 + borrow as u128);
            s[i] = t as u64;
            borrow = (t >> 127) as u64;
            i += 1;
        }
        r = if hi == 1 || borrow == 0 { s } else { d };
        k += 1;
    }
    r
}

/// R mod p: one in Montgomery form.
const ONE: [u64; 4] = r_mod(&P);
/// R² mod p: the factor that takes a value into Montgomery form.
const R2: [u64; 4] = r2_mod(&P);
/// R³ mod p: takes the inverse of a Montgomery form back into Montgomery form.
const R3: [u64; 4] = pow2_mod(&P, 768);
const MODULUS: Modulus<4, 5> = Modulus::new(&P);

/// Whether a < b (256-bit little-endian), in constant time: the final borrow of a - b.
#[inline(always)]
pub(crate) fn lt(a: &[u64; 4], b: &[u64; 4]) -> u64 {
    let (_, bw) = sbb(a[0], b[0], 0);
    let (_, bw) = sbb(a[1], b[1], bw);
    let (_, bw) = sbb(a[2], b[2], bw);
    let (_, bw) = sbb(a[3], b[3], bw);
    bw
}

/// Big-endian 32 bytes as little-endian limbs.
#[inline(always)]
pub(crate) fn limbs_from_be(b: &[u8; 32]) -> [u64; 4] {
    let w = |i: usize| u64::from_be_bytes(b[24 - 8 * i..32 - 8 * i].try_into().expect("8 bytes"));
    [w(0), w(1), w(2), w(3)]
}

/// Little-endian limbs as big-endian 32 bytes.
#[inline(always)]
pub(crate) fn limbs_to_be(l: &[u64; 4]) -> [u8; 32] {
    let mut b = [0u8; 32];
    for i in 0..4 {
        b[24 - 8 * i..32 - 8 * i].copy_from_slice(&l[i].to_be_bytes());
    }
    b
}

impl<A: Arith> Fe<A> {
    pub const ZERO: Fe<A> = Fe([0; 4], PhantomData);
    pub const ONE: Fe<A> = Fe(ONE, PhantomData);

    /// Montgomery-form limbs (below p) as an element.
    #[inline(always)]
    pub fn from_limbs(l: [u64; 4]) -> Fe<A> {
        Fe(l, PhantomData)
    }

    /// An integer below p into Montgomery form; None (in variable time: only public values
    /// are ever refused) if it is not below p.
    pub fn from_be(b: &[u8; 32]) -> Option<Fe<A>> {
        let l = limbs_from_be(b);
        (lt(&l, &P) == 1).then(|| Fe::from_limbs(l).mul(&Fe::from_limbs(R2)))
    }

    /// Canonical big-endian bytes of the integer below p.
    pub fn to_be(&self) -> [u8; 32] {
        limbs_to_be(&reduce([self.0[0], self.0[1], self.0[2], self.0[3], 0, 0, 0, 0]))
    }

    #[inline(always)]
    pub fn mul(&self, b: &Fe<A>) -> Fe<A> {
        Fe::from_limbs(A::mul(&self.0, &b.0))
    }

    #[inline(always)]
    pub fn sqr(&self) -> Fe<A> {
        Fe::from_limbs(A::sqr(&self.0))
    }

    #[inline(always)]
    pub fn add(&self, b: &Fe<A>) -> Fe<A> {
        Fe::from_limbs(A::add(&self.0, &b.0))
    }

    #[inline(always)]
    pub fn sub(&self, b: &Fe<A>) -> Fe<A> {
        Fe::from_limbs(A::sub(&self.0, &b.0))
    }

    #[inline(always)]
    pub fn dbl(&self) -> Fe<A> {
        self.add(self)
    }

    #[inline(always)]
    pub fn neg(&self) -> Fe<A> {
        Fe::ZERO.sub(self)
    }

    /// self squared n times.
    #[inline(always)]
    pub fn sqr_n(&self, n: usize) -> Fe<A> {
        let mut r = *self;
        for _ in 0..n {
            r = r.sqr();
        }
        r
    }

    /// a if mask is 0, b if mask is all ones.
    #[inline(always)]
    pub fn select(mask: u64, a: &Fe<A>, b: &Fe<A>) -> Fe<A> {
        Fe::from_limbs(core::array::from_fn(|i| (a.0[i] & !mask) | (b.0[i] & mask)))
    }

    /// All ones if self is zero, else 0, without a branch.
    #[inline(always)]
    pub fn is_zero_mask(&self) -> u64 {
        let x = self.0[0] | self.0[1] | self.0[2] | self.0[3];
        ((x | x.wrapping_neg()) >> 63).wrapping_sub(1)
    }

    /// Variable time (public values only).
    pub fn is_zero_vartime(&self) -> bool {
        self.0 == [0; 4]
    }

    /// self⁻¹ (0 for 0), constant time: Bernstein–Yang divsteps (`engine::ec::safegcd`) on
    /// the Montgomery form a·R give (a·R)⁻¹, and one multiplication by R³ makes it a⁻¹·R.
    pub fn invert(&self) -> Fe<A> {
        let mut raw = Fe::<A>::from_limbs(MODULUS.invert(&self.0));
        let r = raw.mul(&Fe::from_limbs(R3));
        raw.zeroize();
        r
    }
}

impl<A: Arith> Fe<A> {
    /// self⁻¹ (0 for 0) in variable time: public values only.
    pub fn invert_vartime(&self) -> Fe<A> {
        Fe::<A>::from_limbs(MODULUS.invert_vartime(&self.0)).mul(&Fe::from_limbs(R3))
    }

    /// A blinding factor from 64 fresh random bytes: their integer modulo p (statistically
    /// uniform: 512 bits reduced), one where that is zero (probability 2^-256).
    pub fn blinding(b: &[u8; 64]) -> Fe<A> {
        let (hi, lo) = wide_halves(b, &P);
        // hi·2^256 + lo: Montgomery's product of hi and R² is hi·R = hi·2^256 (mod p).
        let v = Fe::<A>::from_limbs(lo).add(&Fe::from_limbs(hi).mul(&Fe::from_limbs(R2)));
        if v.is_zero_vartime() {
            Fe::ONE
        } else {
            v
        }
    }

    /// self⁻¹ (0 for 0) for a secret self, by the variable-time inversion of self·b for a
    /// fresh blinding factor b (`blinding`), then times b. self·b is uniformly random whatever
    /// self is (b is, and self ≠ 0; 0 stays 0), so the inversion's time tells nothing of self:
    /// 0.65 µs where the constant-time divsteps take 1.6 µs (benches/p256.rs, Xeon).
    pub fn invert_blinded(&self, b: &Fe<A>) -> Fe<A> {
        let mut c = self.mul(b);
        crate::engine::ct::declassify(&c);
        let r = c.invert_vartime().mul(b);
        c.zeroize();
        r
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use elliptic_curve::ff::PrimeField;
    type Ref = <p256::NistP256 as primeorder::FieldArithmetic>::FieldElement;

    fn random_bytes() -> [u8; 32] {
        let mut b = [0u8; 32];
        getrandom::fill(&mut b).unwrap();
        b
    }

    /// p - 1, p - 2, 0, 1, 2, 2^255, 2^256 - 2^224 (near p's top), and values with long
    /// runs of ones and zeros, then random values: the edges of the carry chains.
    fn samples() -> Vec<[u8; 32]> {
        let p = limbs_to_be(&P);
        let minus = |k: u64| limbs_to_be(&sub_mod(&[0; 4], &[k, 0, 0, 0], &P));
        let mut v = vec![[0u8; 32], minus(1), minus(2), p];
        for k in [1u64, 2, 3, u64::MAX] {
            v.push(limbs_to_be(&[k, 0, 0, 0]));
        }
        v.push(limbs_to_be(&[0, 0, 0, 1 << 63]));
        v.push(limbs_to_be(&[0, 0, 0, 0xffff_ffff_0000_0000]));
        v.push(limbs_to_be(&[u64::MAX, u64::MAX, u64::MAX, 0]));
        v.push(limbs_to_be(&[0, u64::MAX, 0, 0xffff_ffff_0000_0000]));
        v.push(limbs_to_be(&P.map(|x| x >> 1)));
        for _ in 0..300 {
            let mut b = random_bytes();
            // Some random values below p with a high top word.
            if b[0] & 1 == 0 {
                b[..4].copy_from_slice(&[0xff, 0xff, 0xff, 0xfe]);
            }
            v.push(b);
        }
        v.retain(|b| lt(&limbs_from_be(b), &P) == 1);
        v
    }

    fn ours<A: Arith>(b: &[u8; 32]) -> Fe<A> {
        Fe::from_be(b).unwrap()
    }

    fn theirs(b: &[u8; 32]) -> Ref {
        Ref::from_repr((*b).into()).unwrap()
    }

    fn same<A: Arith>(a: Fe<A>, b: Ref) {
        assert_eq!(a.to_be().as_slice(), b.to_repr().as_slice());
    }

    #[test]
    fn constants() {
        assert_eq!(Fe::<Portable>::ONE.to_be(), limbs_to_be(&[1, 0, 0, 0]));
        assert_eq!(limbs_to_be(&P).as_slice(), &hex_p()[..]);
        assert!(Fe::<Portable>::from_be(&limbs_to_be(&P)).is_none());
        assert!(Fe::<Portable>::from_be(&[0xff; 32]).is_none());
    }

    fn hex_p() -> Vec<u8> {
        let s = "ffffffff00000001000000000000000000000000ffffffffffffffffffffffff";
        (0..32)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
            .collect()
    }

    /// Every operation of family `A` equals the p256 crate's on all pairs of the samples'
    /// first 40 and on the random rest, and round-trips through bytes.
    pub(crate) fn agrees_with_p256_crate<A: Arith>() {
        let s = samples();
        let pairs = s[..40]
            .iter()
            .flat_map(|a| s[..40].iter().map(move |b| (a, b)))
            .chain(s.iter().zip(s.iter().rev()));
        for (a, b) in pairs {
            let (x, y) = (ours::<A>(a), ours::<A>(b));
            let (rx, ry) = (theirs(a), theirs(b));
            assert_eq!(&x.to_be(), a);
            same(x.mul(&y), rx * ry);
            same(x.add(&y), rx + ry);
            same(x.sub(&y), rx - ry);
            same(x.sqr(), rx.square());
            same(x.neg(), -rx);
            same(x.dbl(), rx.double());
        }
        for a in &s {
            let x = ours::<A>(a);
            let inv = Option::<Ref>::from(theirs(a).invert()).unwrap_or(Ref::ZERO);
            same(x.invert(), inv);
            same(x.invert_vartime(), inv);
            let mut wide = [0u8; 64];
            getrandom::fill(&mut wide).unwrap();
            same(x.invert_blinded(&Fe::blinding(&wide)), inv);
            same(x.invert_blinded(&Fe::blinding(&[0; 64])), inv);
            same(x.invert_blinded(&Fe::blinding(&[0xff; 64])), inv);
            if !x.is_zero_vartime() {
                assert_eq!(x.mul(&x.invert()), Fe::ONE);
            }
            assert_eq!(x.is_zero_mask() == u64::MAX, x.is_zero_vartime());
            assert_eq!(Fe::select(0, &x, &Fe::ONE), x);
            assert_eq!(Fe::select(u64::MAX, &x, &Fe::ONE), Fe::ONE);
        }
    }

    /// A blinding factor is its 64 bytes' integer modulo p (one for zero).
    #[test]
    fn blinding_is_the_wide_integer_mod_p() {
        // The 256-bit halves reduced by one subtraction of p (both below 2p), combined with
        // the p256 crate's arithmetic: hi·2^256 + lo.
        let half = |h: &[u8]| {
            let mut l = limbs_from_be(h.try_into().unwrap());
            if lt(&l, &P) == 0 {
                l = sub_mod(&l, &P, &[0; 4]);
            }
            theirs(&limbs_to_be(&l))
        };
        let two256 = theirs(&limbs_to_be(&r_mod(&P)));
        let mut rnd = [0u8; 64];
        getrandom::fill(&mut rnd).unwrap();
        let mut top = [0xffu8; 64];
        top[32..].copy_from_slice(&limbs_to_be(&P));
        for b in [[0u8; 64], [0xff; 64], [1; 64], rnd, top] {
            let want = half(&b[..32]) * two256 + half(&b[32..]);
            let got = Fe::<Portable>::blinding(&b);
            // The factor is used as a Montgomery form: its limbs are the integer.
            let limbs = limbs_to_be(&got.0);
            if want == Ref::ZERO {
                assert_eq!(got, Fe::ONE);
            } else {
                assert_eq!(limbs.as_slice(), want.to_repr().as_slice());
            }
        }
    }

    #[test]
    fn portable_agrees_with_p256_crate() {
        agrees_with_p256_crate::<Portable>();
    }
}
