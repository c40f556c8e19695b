//! Arithmetic modulo P-256's group order n: Montgomery form (R = 2^256, four 64-bit limbs,
//! fully reduced), constant time, for s = k⁻¹·(z + r·d) and the check's u1 = z·s⁻¹,
//! u2 = r·s⁻¹. n has no special form, so each reduction step computes its quotient digit with
//! n' = -n⁻¹ mod 2^64 (general word-by-word Montgomery). Inversion (of the secret k, and of
//! the public s) by the constant-time divsteps of `engine::ec::safegcd`.

use super::field::{
    add_mod, limbs_from_be, limbs_to_be, lt, mul_wide, r2_mod, r_mod, sub_mod_once, wide_halves,
};
use crate::engine::ec::safegcd::{pow2_mod, Modulus};
use zeroize::Zeroize;

/// n, little-endian limbs.
pub const N: [u64; 4] = [
    0xf3b9_cac2_fc63_2551,
    0xbce6_faad_a717_9e84,
    0xffff_ffff_ffff_ffff,
    0xffff_ffff_0000_0000,
];

/// -n⁻¹ mod 2^64, by Newton's iteration x ← x·(2 - n0·x) (each step doubles the correct bits).
const N0: u64 = {
    let mut x: u64 = 1;
    let mut i = 0;
    while i < 6 {
        x = x.wrapping_mul(2u64.wrapping_sub(N[0].wrapping_mul(x)));
        i += 1;
    }
    x.wrapping_neg()
};

const R2: [u64; 4] = r2_mod(&N);
const R3: [u64; 4] = pow2_mod(&N, 768);
const MODULUS: Modulus<4, 5> = Modulus::new(&N);

/// An integer modulo n in Montgomery form (a·R mod n), below n.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Zeroize)]
pub struct Scalar(pub(crate) [u64; 4]);

#[inline(always)]
fn mac(a: u64, b: u64, c: u64, d: u64) -> (u64, u64) {
    let t = a as u128 * b as u128 + c as u128 + d as u128;
    (t as u64, (t >> 64) as u64)
}

/// t·2^-256 mod n for t < n·2^256.
#[inline(always)]
fn reduce(t: [u64; 8]) -> [u64; 4] {
    // Low half first, one quotient digit per limb; each step leaves r < 2^256 (r + q·n <
    // 2^256 + 2^64·n, divided by 2^64), then the high half is added: below 2n.
    let mut r = [t[0], t[1], t[2], t[3]];
    for _ in 0..4 {
        let q = r[0].wrapping_mul(N0);
        let (_, c) = mac(q, N[0], r[0], 0);
        let (r0, c) = mac(q, N[1], r[1], c);
        let (r1, c) = mac(q, N[2], r[2], c);
        let (r2, c) = mac(q, N[3], r[3], c);
        r = [r0, r1, r2, c];
    }
    let mut c = 0u64;
    let mut s = [0u64; 4];
    for i in 0..4 {
        let x = r[i] as u128 + t[i + 4] as u128 + c as u128;
        s[i] = x as u64;
        c = (x >> 64) as u64;
    }
    sub_mod_once(s, c, &N)
}

impl Scalar {
    pub const ONE: Scalar = Scalar(r_mod(&N));

    /// An integer below n into Montgomery form; None if it is not below n (variable time in
    /// that answer only, which callers treat as public: a nonce that is refused is redrawn).
    pub fn from_be(b: &[u8; 32]) -> Option<Scalar> {
        let l = limbs_from_be(b);
        (lt(&l, &N) == 1).then(|| Scalar(l).mul(&Scalar(R2)))
    }

    /// An integer below n (not checked: the caller guarantees it) into Montgomery form, in
    /// constant time.
    pub fn from_be_ct(b: &[u8; 32]) -> Scalar {
        Scalar(limbs_from_be(b)).mul(&Scalar(R2))
    }

    /// A 256-bit integer reduced modulo n (ECDSA's z and r: below 2^256 < 2n), constant time.
    pub fn reduce_be(b: &[u8; 32]) -> Scalar {
        let l = sub_mod_once(limbs_from_be(b), 0, &N);
        Scalar(l).mul(&Scalar(R2))
    }

    /// Canonical big-endian bytes.
    pub fn to_be(&self) -> [u8; 32] {
        limbs_to_be(&reduce([self.0[0], self.0[1], self.0[2], self.0[3], 0, 0, 0, 0]))
    }

    #[inline(always)]
    pub fn mul(&self, b: &Scalar) -> Scalar {
        Scalar(reduce(mul_wide(&self.0, &b.0)))
    }

    #[inline(always)]
    pub fn add(&self, b: &Scalar) -> Scalar {
        Scalar(add_mod(&self.0, &b.0, &N))
    }

    /// self⁻¹ (0 for 0), constant time: divsteps on a·R give (a·R)⁻¹, times R³ gives a⁻¹·R.
    pub fn invert(&self) -> Scalar {
        let mut raw = Scalar(MODULUS.invert(&self.0));
        let r = raw.mul(&Scalar(R3));
        raw.zeroize();
        r
    }

    /// self⁻¹ (0 for 0) in variable time: public values only (s in the check).
    pub fn invert_vartime(&self) -> Scalar {
        Scalar(MODULUS.invert_vartime(&self.0)).mul(&Scalar(R3))
    }

    /// A blinding factor modulo n from 64 fresh random bytes, as `Fe::blinding`.
    pub fn blinding(b: &[u8; 64]) -> Scalar {
        let (hi, lo) = wide_halves(b, &N);
        let v = Scalar(lo).add(&Scalar(hi).mul(&Scalar(R2)));
        if v.is_zero_vartime() {
            Scalar::ONE
        } else {
            v
        }
    }

    /// self⁻¹ (0 for 0) for a secret self: the variable-time inversion of self·b, times b,
    /// as `Fe::invert_blinded`.
    pub fn invert_blinded(&self, b: &Scalar) -> Scalar {
        let mut c = self.mul(b);
        crate::engine::ct::declassify(&c);
        let r = c.invert_vartime().mul(b);
        c.zeroize();
        r
    }

    /// Whether zero (variable time: for public values).
    pub fn is_zero_vartime(&self) -> bool {
        self.0 == [0; 4]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use elliptic_curve::ff::PrimeField;
    use elliptic_curve::ops::Reduce;
    type Ref = p256::Scalar;

    fn samples() -> Vec<[u8; 32]> {
        let minus = |k: u64| {
            let mut m = N;
            m[0] -= k;
            limbs_to_be(&m)
        };
        let mut v = vec![
            [0u8; 32],
            minus(1),
            minus(2),
            limbs_to_be(&[1, 0, 0, 0]),
            limbs_to_be(&[2, 0, 0, 0]),
        ];
        v.push(limbs_to_be(&[0, 0, 0, 1 << 63]));
        v.push(limbs_to_be(&[u64::MAX, u64::MAX, u64::MAX, 0]));
        for _ in 0..200 {
            let mut b = [0u8; 32];
            getrandom::fill(&mut b).unwrap();
            v.push(b);
        }
        v.retain(|b| lt(&limbs_from_be(b), &N) == 1);
        v
    }

    fn theirs(b: &[u8; 32]) -> Ref {
        Ref::from_repr((*b).into()).unwrap()
    }

    #[test]
    fn agrees_with_p256_crate() {
        assert_eq!(N0, 0xccd1_c8aa_ee00_bc4f);
        let s = samples();
        for (a, b) in s[..30]
            .iter()
            .flat_map(|a| s[..30].iter().map(move |b| (a, b)))
            .chain(s.iter().zip(s.iter().rev()))
        {
            let (x, y) = (Scalar::from_be(a).unwrap(), Scalar::from_be(b).unwrap());
            assert_eq!(&x.to_be(), a);
            assert_eq!(
                x.mul(&y).to_be().as_slice(),
                (theirs(a) * theirs(b)).to_repr().as_slice()
            );
            assert_eq!(
                x.add(&y).to_be().as_slice(),
                (theirs(a) + theirs(b)).to_repr().as_slice()
            );
        }
        for a in &s {
            let x = Scalar::from_be(a).unwrap();
            let inv = Option::<Ref>::from(theirs(a).invert()).unwrap_or(Ref::ZERO);
            assert_eq!(x.invert().to_be().as_slice(), inv.to_repr().as_slice());
            assert_eq!(x.invert_vartime().to_be().as_slice(), inv.to_repr().as_slice());
            let mut wide = [0u8; 64];
            getrandom::fill(&mut wide).unwrap();
            for b in [wide, [0; 64], [0xff; 64]] {
                let got = x.invert_blinded(&Scalar::blinding(&b));
                assert_eq!(got.to_be().as_slice(), inv.to_repr().as_slice());
            }
        }
        // Reduction of any 256-bit value (n, n + 1, 2^256 - 1 among them).
        let mut wide = vec![
            limbs_to_be(&N),
            limbs_to_be(&[N[0] + 1, N[1], N[2], N[3]]),
            [0xff; 32],
        ];
        wide.extend(samples().iter().take(50));
        for b in wide {
            let want = <Ref as Reduce<p256::FieldBytes>>::reduce(&b.into());
            assert_eq!(
                Scalar::reduce_be(&b).to_be().as_slice(),
                want.to_repr().as_slice()
            );
        }
        assert!(Scalar::from_be(&limbs_to_be(&N)).is_none());
        assert_eq!(Scalar::ONE.to_be(), limbs_to_be(&[1, 0, 0, 0]));
    }
}
