//! The portable arithmetic: Montgomery multiplication and a dedicated squaring on 64-bit limbs
//! with 128-bit products, in plain Rust, for any limb count up to `MAX_LIMBS`. It runs on
//! every CPU (the signing path on aarch64 and wherever nothing faster runs) and serves every
//! two-prime key the engine accepts.
//!
//! Layout: finely integrated product scanning (FIPS). The result is built column by column:
//! column k sums every a[i]·b[k−i] and q[i]·m[k−i] in a three-word accumulator held in
//! registers; while k < L the column's low word then fixes q[k] = low·k0 (so that q[k]·m[0]
//! clears it), from k = L on the low word is a word of the result. Nothing is stored and
//! reloaded per product: each one is a multiplication and three additions in a carry chain.
//! The squaring sums each column's cross products a[i]·a[j], i < j, once in a second
//! accumulator, doubles it into the first and adds the square of the middle limb. The limb
//! counts of RSA-1024 to RSA-4096 primes (8 to 32) and of their moduli (the check: 16 to 64)
//! are compiled with the count as a constant, other counts take the same code on slices.

use super::limbs::{reduce_once, MAX_LIMBS};
use super::Arith;
use zeroize::Zeroize;

/// The portable family's arithmetic (see `Arith`).
pub struct Portable;

impl Arith for Portable {
    const NAME: &'static str = "portable";
    const DESCRIPTION: &'static str = "portable Rust Montgomery (64-bit limbs, one request per call)";
    const VENDOR_ID: u64 = 4;

    fn available() -> bool {
        true
    }

    fn serves_limbs(limbs: usize) -> bool {
        (1..=MAX_LIMBS / 2).contains(&limbs)
    }

    fn mul(a: &[u64], b: &[u64], m: &[u64], k0: u64, out: &mut [u64]) {
        mont_mul(a, b, m, k0, out)
    }

    fn sqr(a: &[u64], m: &[u64], k0: u64, out: &mut [u64]) {
        mont_sqr(a, m, k0, out)
    }
}

/// A column sum: 192 bits in three words (a column of L ≤ 256 limbs adds at most 2·L + 2
/// products below 2^128 and a carry, far below 2^192). Written so that LLVM emits one `mul`
/// and an add/adc/adc chain per product; wrapping operations throughout (the dev profile's
/// overflow checks would branch on the values).
#[derive(Clone, Copy, Default)]
struct Acc {
    t0: u64,
    t1: u64,
    t2: u64,
}

impl Acc {
    /// self += a·b.
    #[inline(always)]
    fn mac(&mut self, a: u64, b: u64) {
        let p = (a as u128).wrapping_mul(b as u128);
        let s = (self.t0 as u128).wrapping_add(p as u64 as u128);
        self.t0 = s as u64;
        let s = (self.t1 as u128).wrapping_add(p >> 64).wrapping_add(s >> 64);
        self.t1 = s as u64;
        self.t2 = self.t2.wrapping_add((s >> 64) as u64);
    }

    /// self += x.
    #[inline(always)]
    fn add(&mut self, x: Acc) {
        let s = (self.t0 as u128).wrapping_add(x.t0 as u128);
        self.t0 = s as u64;
        let s = (self.t1 as u128).wrapping_add(x.t1 as u128).wrapping_add(s >> 64);
        self.t1 = s as u64;
        self.t2 = self.t2.wrapping_add(x.t2).wrapping_add((s >> 64) as u64);
    }

    /// self += 2·x.
    #[inline(always)]
    fn add_double(&mut self, x: Acc) {
        let d = Acc {
            t0: x.t0 << 1,
            t1: (x.t1 << 1) | (x.t0 >> 63),
            t2: (x.t2 << 1) | (x.t1 >> 63),
        };
        self.add(d);
    }

    /// The column's low word.
    #[inline(always)]
    fn low(&self) -> u64 {
        self.t0
    }

    /// The column's low word; the rest carried into the next column.
    #[inline(always)]
    fn shift(&mut self) -> u64 {
        let w = self.t0;
        self.t0 = self.t1;
        self.t1 = self.t2;
        self.t2 = 0;
        w
    }
}

/// a·b·R⁻¹ mod m, R = 2^(64·L), for a, b < m; fully reduced.
pub fn mont_mul(a: &[u64], b: &[u64], m: &[u64], k0: u64, out: &mut [u64]) {
    let n = m.len();
    assert!((1..=MAX_LIMBS).contains(&n) && a.len() == n && b.len() == n && out.len() == n);
    match n {
        8 => mul_n::<8>(a, b, m, k0, out),
        16 => mul_n::<16>(a, b, m, k0, out),
        24 => mul_n::<24>(a, b, m, k0, out),
        32 => mul_n::<32>(a, b, m, k0, out),
        48 => mul_n::<48>(a, b, m, k0, out),
        64 => mul_n::<64>(a, b, m, k0, out),
        _ => {
            let mut q = [0u64; MAX_LIMBS];
            let mut t = [0u64; MAX_LIMBS];
            let top = mul_fips(a, b, m, k0, &mut q[..n], &mut t[..n]);
            reduce_once(&t[..n], top, m, out);
            q.zeroize();
            t.zeroize();
        }
    }
}

/// a²·R⁻¹ mod m for a < m; fully reduced.
pub fn mont_sqr(a: &[u64], m: &[u64], k0: u64, out: &mut [u64]) {
    let n = m.len();
    assert!((1..=MAX_LIMBS).contains(&n) && a.len() == n && out.len() == n);
    match n {
        8 => sqr8(a, m, k0, out),
        16 => sqr16(a, m, k0, out),
        24 => sqr24(a, m, k0, out),
        32 => sqr32(a, m, k0, out),
        48 => sqr_n::<48>(a, m, k0, out),
        64 => sqr_n::<64>(a, m, k0, out),
        _ => {
            let mut q = [0u64; MAX_LIMBS];
            let mut t = [0u64; MAX_LIMBS];
            let top = sqr_fips(a, m, k0, &mut q[..n], &mut t[..n]);
            reduce_once(&t[..n], top, m, out);
            q.zeroize();
            t.zeroize();
        }
    }
}

#[inline(never)]
fn mul_n<const N: usize>(a: &[u64], b: &[u64], m: &[u64], k0: u64, out: &mut [u64]) {
    let (a, b, m): (&[u64; N], &[u64; N], &[u64; N]) = (
        a.try_into().unwrap(),
        b.try_into().unwrap(),
        m.try_into().unwrap(),
    );
    let mut q = [0u64; N];
    let mut t = [0u64; N];
    let top = mul_fips(a, b, m, k0, &mut q, &mut t);
    reduce_once(&t, top, m, out);
    q.zeroize();
    t.zeroize();
}

#[inline(never)]
fn sqr_n<const N: usize>(a: &[u64], m: &[u64], k0: u64, out: &mut [u64]) {
    let (a, m): (&[u64; N], &[u64; N]) = (a.try_into().unwrap(), m.try_into().unwrap());
    let mut q = [0u64; N];
    let mut t = [0u64; N];
    let top = sqr_fips(a, m, k0, &mut q, &mut t);
    reduce_once(&t, top, m, out);
    q.zeroize();
    t.zeroize();
}

// `sqr8`, `sqr16`, `sqr24`, `sqr32`: the product-scanning squaring (as `sqr_fips`) fully
// unrolled, every index a constant (no loop counters, no bounds checks), generated by build.rs.
include!(concat!(env!("OUT_DIR"), "/sqr_unrolled.rs"));

/// The product-scanning Montgomery multiplication: t + top·R = (a·b + q·m)/R < 2m, with q
/// (L words) built on the way. The a·b and q·m products of a column go to two accumulators
/// (two independent carry chains; one chain would also have LLVM merge their top carries
/// through setb/movzx), added at the column's end. Inlined into the fixed-size callers, where
/// L is a constant.
#[inline(always)]
fn mul_fips(a: &[u64], b: &[u64], m: &[u64], k0: u64, q: &mut [u64], t: &mut [u64]) -> u64 {
    let n = m.len();
    let mut acc = Acc::default();
    for k in 0..n {
        let mut red = Acc::default();
        for i in 0..k {
            acc.mac(a[i], b[k - i]);
            red.mac(q[i], m[k - i]);
        }
        acc.mac(a[k], b[0]);
        acc.add(red);
        let qk = acc.low().wrapping_mul(k0);
        q[k] = qk;
        acc.mac(qk, m[0]);
        acc.shift();
    }
    for k in n..2 * n - 1 {
        let mut red = Acc::default();
        for i in k + 1 - n..n {
            acc.mac(a[i], b[k - i]);
            red.mac(q[i], m[k - i]);
        }
        acc.add(red);
        t[k - n] = acc.shift();
    }
    t[n - 1] = acc.shift();
    acc.low()
}

/// The product-scanning Montgomery squaring: as `mul_fips` with b = a, the cross products of
/// each column summed once and doubled.
#[inline(always)]
fn sqr_fips(a: &[u64], m: &[u64], k0: u64, q: &mut [u64], t: &mut [u64]) -> u64 {
    let n = m.len();
    let mut acc = Acc::default();
    for k in 0..2 * n - 1 {
        // Pairs i < j with i + j = k, both below n.
        let lo = (k + 1).saturating_sub(n);
        let mut cross = Acc::default();
        let mut i = lo;
        while 2 * i < k {
            cross.mac(a[i], a[k - i]);
            i += 1;
        }
        acc.add_double(cross);
        if k % 2 == 0 {
            acc.mac(a[k / 2], a[k / 2]);
        }
        if k < n {
            for i in 0..k {
                acc.mac(q[i], m[k - i]);
            }
            let qk = acc.low().wrapping_mul(k0);
            q[k] = qk;
            acc.mac(qk, m[0]);
            acc.shift();
        } else {
            for i in lo..n {
                acc.mac(q[i], m[k - i]);
            }
            t[k - n] = acc.shift();
        }
    }
    t[n - 1] = acc.shift();
    acc.low()
}

#[cfg(test)]
mod tests {
    use super::super::limbs::{from_be_bytes, mont_k0, mul_wide, redc};
    use super::*;

    fn random(n: usize) -> Vec<u64> {
        let mut b = vec![0u8; 8 * n];
        getrandom::fill(&mut b).unwrap();
        let mut v = vec![0u64; n];
        from_be_bytes(&b, &mut v);
        v
    }

    /// Montgomery's definition, by independent code: the schoolbook product, then the
    /// operand-scanning reduction of limbs.rs.
    fn reference(a: &[u64], b: &[u64], m: &[u64], k0: u64) -> Vec<u64> {
        let n = m.len();
        let mut w = vec![0u64; 2 * n];
        mul_wide(a, b, &mut w);
        let mut out = vec![0u64; n];
        redc(&mut w, m, k0, &mut out);
        out
    }

    /// Every unrolled and looped limb count (1 to 66, and the largest the family serves)
    /// against the definition: edge values (0, 1, m − 1) and random values below m, for
    /// random moduli and the extremes (all ones; 2^(64·L−1) + small).
    #[test]
    fn fips_matches_the_definition_at_every_limb_count() {
        let counts: Vec<usize> = (1..=66).chain([96, MAX_LIMBS / 2, MAX_LIMBS]).collect();
        for n in counts {
            let rounds = if n > 66 { 3 } else { 12 };
            for round in 0..rounds {
                let mut m = random(n);
                m[n - 1] |= 1 << 63;
                m[0] |= 1;
                if round % 4 == 0 {
                    m.iter_mut().for_each(|x| *x = u64::MAX);
                }
                if round % 4 == 1 {
                    m.iter_mut().for_each(|x| *x = 0);
                    m[n - 1] = 1 << 63;
                    m[0] |= 0x1d;
                }
                let k0 = mont_k0(m[0]);
                let below = |mut v: Vec<u64>| {
                    v[n - 1] %= m[n - 1];
                    v
                };
                let mut m1 = m.clone();
                m1[0] -= 1;
                let mut one = vec![0u64; n];
                one[0] = 1;
                let values = [vec![0u64; n], one, m1, below(random(n)), below(random(n))];
                for x in &values {
                    for y in &values {
                        let mut got = vec![0u64; n];
                        mont_mul(x, y, &m, k0, &mut got);
                        assert_eq!(got, reference(x, y, &m, k0), "mul, {n} limbs");
                    }
                    let mut got = vec![0u64; n];
                    mont_sqr(x, &m, k0, &mut got);
                    assert_eq!(got, reference(x, x, &m, k0), "sqr, {n} limbs");
                }
            }
        }
    }
}
