//! Constant-time modular inversion for odd moduli of 64·L bits by Bernstein and Yang's divsteps
//! ("Fast constant-time gcd computation and modular inversion", 2019). At 256 bits the
//! half-delta variant (δ starts at 1/2), for which 590 division steps provably suffice
//! (Wuille's safegcd-bounds): 10 batches of 62. At other sizes the paper's own divstep (δ
//! starts at 1) with its Theorem 11.2 bound, ⌊(49d + 57)/17⌋ steps for d-bit inputs (1,110 at
//! 384 bits: 18 batches). Steps after g reaches 0 change nothing. The signers invert secrets
//! with it: the nonce k modulo n and the Z coordinate of k·G modulo p (P-256 and P-384).
//!
//! Why: Fermat's a^(m-2) costs about 260 squarings and 12-40 multiplications, one after the
//! other; a squaring is latency-bound at ~19 ns on the EPYC, so 5.4 µs (p, addition chain)
//! and 9.5 µs (n, window 4) of a ~54 µs signature. A batch of 62 divsteps needs only the low
//! 64 bits of f and g and runs in registers; the 4 big-number updates per batch are
//! multiplications of 5 limbs by 62-bit factors (measured in benches/p256.rs).
//!
//! Constant time: every step is masks and shifts (no branch, no index on the value), the
//! number of steps is fixed, the sign tests are arithmetic shifts, and all arithmetic wraps
//! (so builds with overflow checks add no branch); tests/constant_time_p256.rs
//! runs it under valgrind with the secret marked undefined. The p256 crate's safegcd
//! (crypto-bigint) was refused for that test: it branches on the value.
//!
//! Numbers are kept in S signed 62-bit limbs (all but the top one in [0, 2^62), the top one
//! signed): a 62-bit factor times a limb plus another fits an i128 with room for the carries.

use zeroize::Zeroize;

/// Low 62 bits.
const M62: u64 = (1 << 62) - 1;

/// An odd modulus of L 64-bit limbs (one of its top two bits set: the step counts below are
/// bounds for 64·L bits, and hold for 2^255 - 19 too) and what inversion needs of it, made
/// at compile time; S is the number of 62-bit limbs (62·S ≥ 64·L + 2: room for the sign).
pub struct Modulus<const L: usize, const S: usize> {
    m: [i64; S],
    /// m⁻¹ mod 2^62.
    m_inv62: u64,
    /// Batches of 62 divsteps.
    batches: usize,
    /// All ones for the paper's divstep (δ from 1), 0 for the half-delta variant.
    original: u64,
}

impl<const L: usize, const S: usize> Modulus<L, S> {
    pub const fn new(m: &[u64; L]) -> Modulus<L, S> {
        assert!(62 * S >= 64 * L + 2 && m[0] & 1 == 1 && m[L - 1] >> 62 != 0);
        // Newton: each step doubles the number of correct low bits of m⁻¹ (m·m ≡ 1 mod 8).
        let mut x = m[0];
        let mut i = 0;
        while i < 5 {
            x = x.wrapping_mul(2u64.wrapping_sub(m[0].wrapping_mul(x)));
            i += 1;
        }
        let (original, steps) = if L == 4 {
            (0, 590)
        } else {
            (u64::MAX, (49 * 64 * L + 57) / 17)
        };
        Modulus {
            m: to_s62(m),
            m_inv62: x & M62,
            batches: steps.div_ceil(62),
            original,
        }
    }

    /// a⁻¹ mod m for a < m (0 for 0), constant time in a.
    pub fn invert(&self, a: &[u64; L]) -> [u64; L] {
        let mut f = self.m;
        let mut g = to_s62::<L, S>(a);
        let mut d = [0i64; S];
        let mut e = [0i64; S];
        e[0] = 1;
        // Half-delta: ζ = -(δ + 1/2), δ = 1/2. The paper's divstep: ζ = -δ, δ = 1. Both -1.
        let mut zeta: i64 = -1;
        for _ in 0..self.batches {
            let mut t;
            (zeta, t) = divsteps_62(zeta, low64(&f), low64(&g), self.original);
            self.update_de(&mut d, &mut e, &t);
            update_fg(&mut f, &mut g, &t, S);
            t.zeroize();
        }
        // g = 0 and f = ±gcd = ±1 (for a ≠ 0): d·a ≡ f (mod m).
        self.normalize(&mut d, f[S - 1] >> 63);
        let r = from_s62(&d);
        // The steps' state is a function of the secret: volatile writes the optimiser keeps.
        for x in [&mut d, &mut e, &mut f, &mut g] {
            x.zeroize();
        }
        zeta.zeroize();
        r
    }

    /// a⁻¹ mod m for a < m (0 for 0), in variable time: only for public or blinded values
    /// (`invert_blinded`). libsecp256k1's variable-time variant: the paper's divstep (δ from
    /// 1), runs of zeros in g skipped at once, up to 6 bits of g cleared per step, and the
    /// loop left as soon as g is 0.
    pub fn invert_vartime(&self, a: &[u64; L]) -> [u64; L] {
        let mut f = self.m;
        let mut g = to_s62::<L, S>(a);
        let mut d = [0i64; S];
        let mut e = [0i64; S];
        e[0] = 1;
        let mut eta: i64 = -1;
        // Limbs of f and g still in use: as they shrink, their top limbs become sign
        // extension and are folded into the limb below (libsecp256k1's `len`), so each batch
        // updates fewer limbs. Two at least: `low64` reads limbs 0 and 1.
        let mut len = S;
        // The paper's bound for 64·L bits, in batches, twice over: g reaches 0 well before.
        for _ in 0..2 * ((49 * 64 * L + 57) / 17).div_ceil(62) {
            let t;
            (eta, t) = divsteps_62_var(eta, low64(&f), low64(&g));
            self.update_de(&mut d, &mut e, &t);
            update_fg(&mut f, &mut g, &t, len);
            if g[..len].iter().all(|&l| l == 0) {
                break;
            }
            let (fn_, gn) = (f[len - 1], g[len - 1]);
            // The top limbs are 0 or -1 (sign only): fold their sign into the limb below.
            if len > 2 && (fn_ ^ (fn_ >> 63)) | (gn ^ (gn >> 63)) == 0 {
                f[len - 2] |= ((fn_ as u64) << 62) as i64;
                g[len - 2] |= ((gn as u64) << 62) as i64;
                len -= 1;
            }
        }
        self.normalize(&mut d, f[len - 1] >> 63);
        from_s62(&d)
    }

    /// [d, e] ← t·[d, e] / 2^62 (mod m), for d and e in (-2m, m); the results are in the same
    /// range (the bounds of libsecp256k1's safegcd explanation, section 4).
    #[inline(always)]
    fn update_de(&self, d: &mut [i64; S], e: &mut [i64; S], t: &[i64; 4]) {
        let [u, v, q, r] = *t;
        let m = &self.m;
        let (sd, se) = (d[S - 1] >> 63, e[S - 1] >> 63);
        // Adding m to a negative d or e, folded into the multiple of m added below.
        let mut md = (u & sd).wrapping_add(v & se);
        let mut me = (q & sd).wrapping_add(r & se);
        let mut cd = mul(u, d[0]).wrapping_add(mul(v, e[0]));
        let mut ce = mul(q, d[0]).wrapping_add(mul(r, e[0]));
        // Choose md, me so the low 62 bits of cd + md·m and ce + me·m are zero.
        md = md.wrapping_sub((self.m_inv62.wrapping_mul(cd as u64).wrapping_add(md as u64) & M62) as i64);
        me = me.wrapping_sub((self.m_inv62.wrapping_mul(ce as u64).wrapping_add(me as u64) & M62) as i64);
        cd = cd.wrapping_add(mul(m[0], md)) >> 62;
        ce = ce.wrapping_add(mul(m[0], me)) >> 62;
        for i in 1..S {
            cd = cd
                .wrapping_add(mul(u, d[i]))
                .wrapping_add(mul(v, e[i]))
                .wrapping_add(mul(m[i], md));
            ce = ce
                .wrapping_add(mul(q, d[i]))
                .wrapping_add(mul(r, e[i]))
                .wrapping_add(mul(m[i], me));
            d[i - 1] = (cd as u64 & M62) as i64;
            e[i - 1] = (ce as u64 & M62) as i64;
            cd >>= 62;
            ce >>= 62;
        }
        d[S - 1] = cd as i64;
        e[S - 1] = ce as i64;
    }

    /// d·sign mod m in [0, m), for d in (-2m, m) and sign 0 (+1) or -1 (-1), without a branch.
    fn normalize(&self, d: &mut [i64; S], sign: i64) {
        let add_m = |d: &mut [i64; S]| {
            let neg = d[S - 1] >> 63;
            for (l, m) in d.iter_mut().zip(self.m) {
                *l = l.wrapping_add(m & neg);
            }
            carry(d);
        };
        add_m(d);
        for l in d.iter_mut() {
            *l = (*l ^ sign).wrapping_sub(sign);
        }
        carry(d);
        add_m(d);
    }
}

/// Every limb but the top one back into [0, 2^62), its carry into the next limb.
#[inline(always)]
fn carry<const S: usize>(d: &mut [i64; S]) {
    for i in 0..S - 1 {
        d[i + 1] = d[i + 1].wrapping_add(d[i] >> 62);
        d[i] &= M62 as i64;
    }
}

/// 62 divsteps on the low 64 bits of f (odd) and g: the new ζ and the matrix [u, v, q, r]
/// with u·f + v·g = f'·2^62 and q·f + r·g = g'·2^62, every entry of magnitude at most 2^62.
/// `original` all ones: the paper's divstep (ζ = -δ: ζ ← -ζ - 1 on a swap), else the
/// half-delta one (ζ ← -ζ - 2).
#[inline(always)]
fn divsteps_62(mut zeta: i64, f0: u64, g0: u64, original: u64) -> (i64, [i64; 4]) {
    // Signed values kept as u64 (two's complement) so the shifts are defined.
    let (mut u, mut v, mut q, mut r) = (1u64, 0u64, 0u64, 1u64);
    let (mut f, mut g) = (f0, g0);
    for _ in 0..62 {
        // One step: if ζ < 0 and g is odd, (f, g) ← (g, (g - f)/2) and ζ ← -ζ - 2 (half
        // delta) or -ζ - 1 (the paper's); else g ← (g + (g mod 2)·f)/2 and ζ ← ζ - 1.
        let c1 = (zeta >> 63) as u64; // ζ < 0
        let c2 = (g & 1).wrapping_neg(); // g odd
        let x = (f ^ c1).wrapping_sub(c1);
        let y = (u ^ c1).wrapping_sub(c1);
        let z = (v ^ c1).wrapping_sub(c1);
        g = g.wrapping_add(x & c2);
        q = q.wrapping_add(y & c2);
        r = r.wrapping_add(z & c2);
        let c3 = c1 & c2;
        zeta = (zeta ^ c3 as i64)
            .wrapping_sub(1)
            .wrapping_sub((c3 & original) as i64);
        f = f.wrapping_add(g & c3);
        u = u.wrapping_add(q & c3);
        v = v.wrapping_add(r & c3);
        g >>= 1;
        u <<= 1;
        v <<= 1;
    }
    (zeta, [u as i64, v as i64, q as i64, r as i64])
}

/// `divsteps_62` with the paper's divstep in variable time (libsecp256k1's
/// `modinv64_divsteps_62_var`): η = -δ; a run of zeros at g's bottom is that many steps at
/// once; with g odd, one multiple of f clears up to 4 (η ≥ 0) or 6 (after a swap) low bits
/// of g, w = -g/f modulo 2^k from f's inverse modulo 2^k (f·(f² - 2) is -f⁻¹ mod 64; f + ((f +
/// 1) & 4)·2 is f⁻¹ mod 16), k bounded by the steps left and by η + 1.
fn divsteps_62_var(mut eta: i64, f0: u64, g0: u64) -> (i64, [i64; 4]) {
    let (mut u, mut v, mut q, mut r) = (1u64, 0u64, 0u64, 1u64);
    let (mut f, mut g) = (f0, g0);
    let mut i: u32 = 62;
    loop {
        let zeros = (g | (u64::MAX << i)).trailing_zeros();
        g >>= zeros;
        u <<= zeros;
        v <<= zeros;
        eta -= zeros as i64;
        i -= zeros;
        if i == 0 {
            break;
        }
        let w = if eta < 0 {
            eta = -eta;
            (f, g) = (g, f.wrapping_neg());
            (u, q) = (q, u.wrapping_neg());
            (v, r) = (r, v.wrapping_neg());
            let limit = (eta as u64 + 1).min(i as u64);
            let m = (u64::MAX >> (64 - limit)) & 63;
            f.wrapping_mul(g).wrapping_mul(f.wrapping_mul(f).wrapping_sub(2)) & m
        } else {
            let limit = (eta as u64 + 1).min(i as u64);
            let m = (u64::MAX >> (64 - limit)) & 15;
            let inv = f.wrapping_add((f.wrapping_add(1) & 4) << 1);
            inv.wrapping_neg().wrapping_mul(g) & m
        };
        g = g.wrapping_add(f.wrapping_mul(w));
        q = q.wrapping_add(u.wrapping_mul(w));
        r = r.wrapping_add(v.wrapping_mul(w));
    }
    (eta, [u as i64, v as i64, q as i64, r as i64])
}

/// [f, g] ← t·[f, g] / 2^62 (exact: t was made so) on the low `len` limbs of f and g, whose
/// limb `len - 1` holds the sign and everything above. The constant-time inversion passes
/// `S` (a constant: no branch or index depends on the values); `invert_vartime` passes the
/// limbs still in use.
#[inline(always)]
fn update_fg<const S: usize>(f: &mut [i64; S], g: &mut [i64; S], t: &[i64; 4], len: usize) {
    let [u, v, q, r] = *t;
    let mut cf = mul(u, f[0]).wrapping_add(mul(v, g[0])) >> 62;
    let mut cg = mul(q, f[0]).wrapping_add(mul(r, g[0])) >> 62;
    for i in 1..len {
        cf = cf.wrapping_add(mul(u, f[i])).wrapping_add(mul(v, g[i]));
        cg = cg.wrapping_add(mul(q, f[i])).wrapping_add(mul(r, g[i]));
        f[i - 1] = (cf as u64 & M62) as i64;
        g[i - 1] = (cg as u64 & M62) as i64;
        cf >>= 62;
        cg >>= 62;
    }
    f[len - 1] = cf as i64;
    g[len - 1] = cg as i64;
}

/// a·b as i128 (it cannot overflow; wrapping so that builds with overflow checks do not
/// branch on secret values).
#[inline(always)]
fn mul(a: i64, b: i64) -> i128 {
    (a as i128).wrapping_mul(b as i128)
}

/// The low 64 bits of a value in limbs.
#[inline(always)]
fn low64<const S: usize>(a: &[i64; S]) -> u64 {
    a[0] as u64 | (a[1] as u64) << 62
}

/// 64-bit limbs as 62-bit ones.
const fn to_s62<const L: usize, const S: usize>(a: &[u64; L]) -> [i64; S] {
    let mut r = [0i64; S];
    let mut i = 0;
    while i < S {
        let (w, sh) = (62 * i / 64, 62 * i % 64);
        let mut v = 0;
        if w < L {
            v = a[w] >> sh;
            // Past bit 2 of a word, the limb's top bits come from the next one.
            if sh > 2 && w + 1 < L {
                v |= a[w + 1] << (64 - sh);
            }
        }
        r[i] = (v & M62) as i64;
        i += 1;
    }
    r
}

/// A value in [0, 2^(64·L)) with every limb but the top in [0, 2^62), as 64-bit limbs.
fn from_s62<const L: usize, const S: usize>(l: &[i64; S]) -> [u64; L] {
    let mut r = [0u64; L];
    for (i, &x) in l.iter().enumerate() {
        let (v, w, sh) = (x as u64, 62 * i / 64, 62 * i % 64);
        if w < L {
            r[w] |= v << sh;
            if sh > 2 && w + 1 < L {
                r[w + 1] |= v >> (64 - sh);
            }
        }
    }
    r
}

/// 2^e mod m for an odd m > 2^255 and e ≥ 256, at compile time (the constants that move an
/// inverse into Montgomery form).
pub const fn pow2_mod(m: &[u64; 4], e: usize) -> [u64; 4] {
    // 2^256 mod m = 2^256 - m (m > 2^255), then e - 256 modular doublings.
    let mut r = [0u64; 4];
    let mut borrow = 0u64;
    let mut i = 0;
    while i < 4 {
        let t = 0u128.wrapping_sub(m[i] as u128 + borrow as u128);
        r[i] = t as u64;
        borrow = (t >> 127) as u64;
        i += 1;
    }
    let mut k = 256;
    while k < e {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ec::p256::field::{limbs_from_be, limbs_to_be, lt, P};
    use crate::engine::ec::p256::scalar::N;
    use elliptic_curve::ff::PrimeField;
    type Fp = <p256::NistP256 as primeorder::FieldArithmetic>::FieldElement;

    /// The p256 crate's inverse (0 for 0) of a below m, for m = p or n.
    fn reference(m: &[u64; 4], a: &[u64; 4]) -> [u64; 4] {
        let b = limbs_to_be(a);
        let r: [u8; 32] = if *m == P {
            let x = Fp::from_repr(b.into()).unwrap();
            Option::<Fp>::from(x.invert())
                .unwrap_or(Fp::ZERO)
                .to_repr()
                .into()
        } else {
            let x = p256::Scalar::from_repr(b.into()).unwrap();
            Option::<p256::Scalar>::from(x.invert())
                .unwrap_or(p256::Scalar::ZERO)
                .to_repr()
                .into()
        };
        limbs_from_be(&r)
    }

    /// Which inputs take the most divsteps has no closed form: random values, short ones,
    /// powers of two, m - small and long runs of ones, each against the p256 crate.
    #[test]
    fn inverts_modulo_p_and_n_like_the_p256_crate() {
        for m in [P, N] {
            let md = Modulus::<4, 5>::new(&m);
            let mut vals: Vec<[u64; 4]> = vec![[0; 4], [1, 0, 0, 0], [2, 0, 0, 0], [3, 0, 0, 0]];
            for s in 0..256 {
                let mut v = [0u64; 4];
                v[s / 64] = 1 << (s % 64);
                vals.push(v);
            }
            for k in 1..40u64 {
                vals.push([m[0] - k, m[1], m[2], m[3]]);
                vals.push([u64::MAX >> k, u64::MAX, u64::MAX >> (k % 3), m[3] >> 1]);
            }
            for _ in 0..20_000 {
                let mut b = [0u8; 32];
                getrandom::fill(&mut b).unwrap();
                let mut v = limbs_from_be(&b);
                // Short values too: the top 0-3 limbs cleared.
                let keep = 4 - usize::from(b[0] % 4);
                v[keep..].fill(0);
                vals.push(v);
            }
            for v in vals.into_iter().filter(|v| lt(v, &m) == 1) {
                let want = reference(&m, &v);
                assert_eq!(md.invert(&v), want, "{v:x?}");
                assert_eq!(md.invert_vartime(&v), want, "vartime {v:x?}");
            }
        }
    }

    #[test]
    fn pow2_mod_doubles_from_r() {
        for m in [P, N] {
            // 2^256 mod m, then each doubling agrees with a modular addition.
            let r = pow2_mod(&m, 256);
            assert_eq!(r, crate::engine::ec::p256::field::r_mod(&m));
            assert_eq!(pow2_mod(&m, 512), crate::engine::ec::p256::field::r2_mod(&m));
            let r3 = pow2_mod(&m, 768);
            let r2 = pow2_mod(&m, 512);
            // R³·R⁻¹ = R² in Montgomery multiplication (mod p; n has its own).
            if m == P {
                use crate::engine::ec::p256::field::{Fe, Portable};
                let x = Fe::<Portable>::from_limbs(r3).mul(&Fe::from_limbs([1, 0, 0, 0]));
                assert_eq!(x.0, r2);
            }
        }
    }
}
