//! The field of Ed25519, integers mod p = 2^255 - 19, for the signature check: five 51-bit
//! limbs in u64 (products in u128, 2^255 ≡ 19 folds the high half back), the representation
//! of ref10 and curve25519-dalek's serial backend. Every value here is public (the check
//! verifies a signature with the public key), so nothing needs to be constant time; inversion
//! is the variable-time divsteps of `engine::ec::safegcd`.
//!
//! Limbs after `mul`, `sqr`, `add`-then-`mul` stay below 2^52 + small, well inside what the
//! u128 sums allow (five products of a limb below 2^54 and a limb times 19 below 2^59).

use crate::engine::ec::safegcd::Modulus;

const MASK: u64 = (1 << 51) - 1;

/// p as four 64-bit limbs, least significant first.
pub const P: [u64; 4] = [0xffff_ffff_ffff_ffed, u64::MAX, u64::MAX, 0x7fff_ffff_ffff_ffff];
const MODULUS: Modulus<4, 5> = Modulus::new(&P);

/// A field element in five 51-bit limbs (not necessarily reduced below p).
#[derive(Clone, Copy, Debug)]
pub struct Fe(pub [u64; 5]);

impl Fe {
    pub const ZERO: Fe = Fe([0; 5]);
    pub const ONE: Fe = Fe([1, 0, 0, 0, 0]);

    pub const fn small(v: u64) -> Fe {
        Fe([v, 0, 0, 0, 0])
    }

    /// The element of 32 little-endian bytes, their top bit ignored (RFC 8032's encoding of
    /// y); values in [p, 2^255) are taken mod p, as RFC 8032's decoding does not (callers
    /// that must refuse them compare the re-encoding).
    pub fn from_bytes(b: &[u8; 32]) -> Fe {
        let w = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Fe([
            w(0) & MASK,
            (w(6) >> 3) & MASK,
            (w(12) >> 6) & MASK,
            (w(19) >> 1) & MASK,
            (w(24) >> 12) & MASK,
        ])
    }

    /// Four 64-bit limbs of the value reduced below p.
    pub fn to_limbs(self) -> [u64; 4] {
        let mut l = self.carry().0;
        // Now l < 2^255 + small: subtract p if l >= p, by adding 19 and looking at bit 255.
        let mut q = (l[0] + 19) >> 51;
        for x in &l[1..] {
            q = (x + q) >> 51;
        }
        l[0] += 19 * q;
        for i in 0..4 {
            l[i + 1] += l[i] >> 51;
            l[i] &= MASK;
        }
        l[4] &= MASK;
        [
            l[0] | l[1] << 51,
            l[1] >> 13 | l[2] << 38,
            l[2] >> 26 | l[3] << 25,
            l[3] >> 39 | l[4] << 12,
        ]
    }

    pub fn from_limbs(v: &[u64; 4]) -> Fe {
        Fe([
            v[0] & MASK,
            (v[0] >> 51 | v[1] << 13) & MASK,
            (v[1] >> 38 | v[2] << 26) & MASK,
            (v[2] >> 25 | v[3] << 39) & MASK,
            v[3] >> 12,
        ])
    }

    /// The canonical 32-byte little-endian encoding.
    pub fn to_bytes(self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, l) in self.to_limbs().iter().enumerate() {
            out[8 * i..8 * i + 8].copy_from_slice(&l.to_le_bytes());
        }
        out
    }

    /// The same value with every limb below 2^51 + 2^13 (the top limb's carry folded into the
    /// bottom one times 19): for sums kept in tables or subtracted from.
    pub fn carry(&self) -> Fe {
        let mut l = self.0;
        for i in 0..4 {
            l[i + 1] += l[i] >> 51;
            l[i] &= MASK;
        }
        l[0] += 19 * (l[4] >> 51);
        l[4] &= MASK;
        l[1] += l[0] >> 51;
        l[0] &= MASK;
        Fe(l)
    }

    pub fn add(&self, o: &Fe) -> Fe {
        let mut l = [0u64; 5];
        for (i, v) in l.iter_mut().enumerate() {
            *v = self.0[i] + o.0[i];
        }
        Fe(l)
    }

    /// self - o, as self + 16p - o (limbs of o below 2^55) then carried.
    pub fn sub(&self, o: &Fe) -> Fe {
        const P16_0: u64 = 16 * ((1 << 51) - 19);
        const P16: u64 = 16 * ((1 << 51) - 1);
        let mut l = [0u64; 5];
        for (i, v) in l.iter_mut().enumerate() {
            *v = self.0[i] + if i == 0 { P16_0 } else { P16 } - o.0[i];
        }
        Fe(l).carry()
    }

    pub fn neg(&self) -> Fe {
        Fe::ZERO.sub(self)
    }

    pub fn mul(&self, o: &Fe) -> Fe {
        let (a, b) = (&self.0, &o.0);
        let m = |x: u64, y: u64| x as u128 * y as u128;
        let (b1, b2, b3, b4) = (b[1] * 19, b[2] * 19, b[3] * 19, b[4] * 19);
        let c0 = m(a[0], b[0]) + m(a[4], b1) + m(a[3], b2) + m(a[2], b3) + m(a[1], b4);
        let c1 = m(a[1], b[0]) + m(a[0], b[1]) + m(a[4], b2) + m(a[3], b3) + m(a[2], b4);
        let c2 = m(a[2], b[0]) + m(a[1], b[1]) + m(a[0], b[2]) + m(a[4], b3) + m(a[3], b4);
        let c3 = m(a[3], b[0]) + m(a[2], b[1]) + m(a[1], b[2]) + m(a[0], b[3]) + m(a[4], b4);
        let c4 = m(a[4], b[0]) + m(a[3], b[1]) + m(a[2], b[2]) + m(a[1], b[3]) + m(a[0], b[4]);
        reduce([c0, c1, c2, c3, c4])
    }

    pub fn sqr(&self) -> Fe {
        let a = &self.0;
        let m = |x: u64, y: u64| x as u128 * y as u128;
        let (a0_2, a1_2) = (a[0] * 2, a[1] * 2);
        let (a3_19, a4_19) = (a[3] * 19, a[4] * 19);
        let c0 = m(a[0], a[0]) + m(a1_2, a4_19) + m(a[2] * 2, a3_19);
        let c1 = m(a0_2, a[1]) + m(a[2] * 2, a4_19) + m(a[3], a3_19);
        let c2 = m(a0_2, a[2]) + m(a[1], a[1]) + m(a[3] * 2, a4_19);
        let c3 = m(a0_2, a[3]) + m(a1_2, a[2]) + m(a[4], a4_19);
        let c4 = m(a0_2, a[4]) + m(a1_2, a[3]) + m(a[2], a[2]);
        reduce([c0, c1, c2, c3, c4])
    }

    /// self^e for a little-endian exponent of four limbs (public).
    pub fn pow(&self, e: &[u64; 4]) -> Fe {
        let mut r = Fe::ONE;
        for i in (0..256).rev() {
            r = r.sqr();
            if (e[i / 64] >> (i % 64)) & 1 == 1 {
                r = r.mul(self);
            }
        }
        r
    }

    /// self⁻¹ (0 for 0), in variable time: for public values only.
    pub fn invert_vartime(&self) -> Fe {
        Fe::from_limbs(&MODULUS.invert_vartime(&self.to_limbs()))
    }

    pub fn eq_vartime(&self, o: &Fe) -> bool {
        self.to_limbs() == o.to_limbs()
    }

    /// The low bit of the reduced value: RFC 8032's sign of x.
    pub fn is_odd(&self) -> bool {
        self.to_limbs()[0] & 1 == 1
    }
}

/// Five 128-bit column sums to limbs below 2^51 (the top carry times 19 into the bottom).
fn reduce(c: [u128; 5]) -> Fe {
    let mut l = [0u64; 5];
    let mut carry = 0u128;
    for i in 0..5 {
        let v = c[i] + carry;
        l[i] = v as u64 & MASK;
        carry = v >> 51;
    }
    // carry < 2^66: times 19 still fits a u128, and l[0] + it carries once more.
    let v = l[0] as u128 + carry * 19;
    l[0] = v as u64 & MASK;
    l[1] += (v >> 51) as u64;
    Fe(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random field elements and edges (0, 1, p - 1, values near 2^255), as 4 limbs.
    fn samples() -> Vec<[u64; 4]> {
        let mut v = vec![
            [0, 0, 0, 0],
            [1, 0, 0, 0],
            [P[0] - 1, P[1], P[2], P[3]],
            [18, 0, 0, 1 << 62],
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200 {
            let mut l = [0u64; 4];
            for w in &mut l {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *w = x;
            }
            l[3] &= 0x7fff_ffff_ffff_ffff;
            if l[3] == P[3] && l[2] == u64::MAX && l[1] == u64::MAX && l[0] >= P[0] {
                continue;
            }
            v.push(l);
        }
        v
    }

    /// A reference independent of the 51-bit limbs: 4×64 schoolbook products, 2^256 ≡ 38
    /// folded twice, then p subtracted while the value is at least p.
    fn reduce_ref(mut w: [u64; 8]) -> [u64; 4] {
        for _ in 0..2 {
            let mut lo = [0u64; 4];
            let mut c = 0u128;
            for i in 0..4 {
                c += w[i] as u128 + 38 * w[i + 4] as u128;
                lo[i] = c as u64;
                c >>= 64;
            }
            w = [lo[0], lo[1], lo[2], lo[3], c as u64, 0, 0, 0];
        }
        let mut v = [w[0], w[1], w[2], w[3]];
        while !lt(&v, &P) {
            let mut b = 0i128;
            for i in 0..4 {
                b += v[i] as i128 - P[i] as i128;
                v[i] = b as u64;
                b >>= 64;
            }
        }
        v
    }

    fn lt(a: &[u64; 4], b: &[u64; 4]) -> bool {
        (0..4).rev().find(|&i| a[i] != b[i]).is_some_and(|i| a[i] < b[i])
    }

    fn mul_ref(a: &[u64; 4], b: &[u64; 4]) -> [u64; 4] {
        let mut w = [0u64; 8];
        for i in 0..4 {
            let mut c = 0u128;
            for j in 0..4 {
                c += w[i + j] as u128 + a[i] as u128 * b[j] as u128;
                w[i + j] = c as u64;
                c >>= 64;
            }
            w[i + 4] = c as u64;
        }
        reduce_ref(w)
    }

    /// a + b, or a + p - b for `sub`, reduced.
    fn add_ref(a: &[u64; 4], b: &[u64; 4], sub: bool) -> [u64; 4] {
        let mut w = [0u64; 8];
        let mut c = 0i128;
        for i in 0..4 {
            c += a[i] as i128
                + if sub {
                    P[i] as i128 - b[i] as i128
                } else {
                    b[i] as i128
                };
            w[i] = c as u64;
            c >>= 64;
        }
        w[4] = c as u64;
        reduce_ref(w)
    }

    #[test]
    fn arithmetic_matches_a_reference_mod_p() {
        let s = samples();
        for (i, a) in s.iter().enumerate() {
            let b = &s[(i * 7 + 3) % s.len()];
            let (fa, fb) = (Fe::from_limbs(a), Fe::from_limbs(b));
            assert_eq!(fa.mul(&fb).to_limbs(), mul_ref(a, b));
            assert_eq!(fa.sqr().to_limbs(), mul_ref(a, a));
            assert_eq!(fa.add(&fb).to_limbs(), add_ref(a, b, false));
            assert_eq!(fa.sub(&fb).to_limbs(), add_ref(a, b, true));
            // Sums fed to a product, as the point formulas do.
            let sum = add_ref(a, b, false);
            assert_eq!(
                fa.add(&fb).mul(&fa.add(&fa)).to_limbs(),
                mul_ref(&sum, &add_ref(a, a, false))
            );
            let inv = fa.invert_vartime();
            if *a == [0; 4] {
                assert_eq!(inv.to_limbs(), [0; 4]);
            } else {
                assert_eq!(inv.mul(&fa).to_limbs(), [1, 0, 0, 0]);
            }
            assert_eq!(Fe::from_bytes(&fa.to_bytes()).to_limbs(), fa.to_limbs());
        }
    }

    #[test]
    fn encodings_reduce_values_from_p_to_2_255() {
        // p + 5 encodes 5 once reduced; the top bit is not part of the value.
        let mut b = [0xffu8; 32];
        b[0] = 0xed + 5;
        b[31] = 0x7f;
        assert_eq!(Fe::from_bytes(&b).to_limbs(), [5, 0, 0, 0]);
        b[31] = 0xff;
        assert_eq!(Fe::from_bytes(&b).to_limbs(), [5, 0, 0, 0]);
    }
}
