//! A key in scalar form: the per-key constants both scalar families use, prepared once in
//! constant time (limbs of p, q, dP, dQ; k0 and R², R³ for each prime; qInv·R mod p; the
//! public modulus and exponent for the check). Secrets are zeroized on drop.

use super::limbs::{double_mod, from_be_bytes, mont_k0};
use super::Arith;
use crate::engine::{bit_len, strip_zeros, KeyComponents};
use zeroize::{Zeroize, ZeroizeOnDrop};

/// A modulus with its Montgomery constants, R = 2^(64·L).
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct Modulus {
    pub m: Vec<u64>,
    pub k0: u64,
    /// R mod m: one in Montgomery form.
    pub r: Vec<u64>,
    pub rr: Vec<u64>,
}

/// Radix 2^64 over m for `kernel::radix`.
struct Radix<'a> {
    m: &'a [u64],
    k0: u64,
}

impl crate::engine::kernel::radix::Layout for Radix<'_> {
    fn pow2(&self, k: usize, out: &mut [u64]) {
        out.fill(0);
        out[k / 64] = 1 << (k % 64);
    }
    fn double(&self, x: &mut [u64]) {
        double_mod(x, self.m);
    }
    fn mont(&self, a: &[u64], b: &[u64], out: &mut [u64]) {
        super::portable::mont_mul(a, b, self.m, self.k0, out);
    }
}

impl Modulus {
    /// The constants of an odd `m` (limbs): R mod m and R² mod m (`kernel::radix`, steps
    /// fixed by the limb count and m's size class).
    pub fn new(m: Vec<u64>) -> Modulus {
        let (modulus, mut rrr) = Modulus::with_r3(m);
        rrr.zeroize();
        modulus
    }

    /// As `new`, and R³ mod m, which `kernel::radix` finds on the way (a CRT half needs it).
    fn with_r3(m: Vec<u64>) -> (Modulus, Vec<u64>) {
        let k0 = mont_k0(m[0]);
        let layout = Radix { m: &m, k0 };
        let bits = crate::engine::kernel::radix::bits(&m, 64);
        // mont_mul is exact for any odd m below R: no headroom needed.
        let [r, rr, rrr] = crate::engine::kernel::radix::powers_of_r(&layout, m.len(), 64 * m.len(), bits, 0);
        (Modulus { k0, m, r, rr }, rrr)
    }

    /// As `new`, by 2·64·L doublings (the check of `new`).
    #[cfg(test)]
    fn by_doubling(m: Vec<u64>) -> Modulus {
        let layout = Radix {
            m: &m,
            k0: mont_k0(m[0]),
        };
        let [r, rr, _] =
            crate::engine::kernel::radix::powers_of_r(&layout, m.len(), 64 * m.len(), 64 * m.len(), 1);
        Modulus {
            k0: mont_k0(m[0]),
            m,
            r,
            rr,
        }
    }
}

#[cfg(test)]
#[test]
fn montgomery_constants_match_plain_doubling() {
    for (limbs, bytes) in [
        (2usize, 16usize),
        (8, 64),
        (16, 128),
        (16, 125),
        (32, 256),
        (64, 512),
    ] {
        let mut b = vec![0u8; bytes];
        getrandom::fill(&mut b).unwrap();
        b[0] |= 0x80;
        *b.last_mut().unwrap() |= 1;
        let mut m = vec![0u64; limbs];
        from_be_bytes(&b, &mut m);
        let ((fast, rrr), slow) = (Modulus::with_r3(m.clone()), Modulus::by_doubling(m));
        assert!(fast.r == slow.r && fast.rr == slow.rr, "{limbs} limbs");
        // R³ = mont(R², R²), the way a CRT half found it before.
        let mut want = vec![0u64; limbs];
        super::portable::mont_mul(&slow.rr, &slow.rr, &slow.m, slow.k0, &mut want);
        assert!(rrr == want, "R³ at {limbs} limbs");
    }
}

/// One CRT half: its prime and the private exponent modulo prime − 1.
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct Half {
    pub m: Modulus,
    /// R³ mod m: takes an input reduced by one Montgomery reduction into Montgomery form.
    pub rrr: Vec<u64>,
    /// The exponent as limbs, one zero limb beyond the prime's length (windows read across).
    pub exp: Vec<u64>,
}

#[derive(Zeroize, ZeroizeOnDrop)]
pub struct ScalarKey {
    #[zeroize(skip)]
    pub limbs: usize,
    /// Bits of each prime: the exponents' public length.
    #[zeroize(skip)]
    pub prime_bits: usize,
    pub p: Half,
    pub q: Half,
    /// qInv·R mod p, for Garner's step as one Montgomery multiplication.
    pub qinv_r: Vec<u64>,
    /// The public modulus at 2·L limbs: the check of every result wants s and the input
    /// below it.
    #[zeroize(skip)]
    pub n: Vec<u64>,
    #[zeroize(skip)]
    pub e: u64,
    #[zeroize(skip)]
    pub modulus_len: usize,
}

pub fn half(prime: &[u8], exp: &[u8], limbs: usize) -> Half {
    let mut p = vec![0u64; limbs];
    from_be_bytes(prime, &mut p);
    let (m, rrr) = Modulus::with_r3(p);
    // Every byte of the exponent as stored, leading zeros included: trimming them would
    // branch on its secret top bytes.
    let mut e = vec![0u64; (limbs + 1).max(exp.len().div_ceil(8))];
    from_be_bytes(exp, &mut e);
    Half { m, rrr, exp: e }
}

impl ScalarKey {
    /// Scalar form of a key the reference path validated (CRT parts complete). None when it
    /// does not fit: primes of unequal lengths (Garner's single subtraction needs q < 2p), a
    /// public exponent over 64 bits, or a limb count the arithmetic does not serve.
    pub fn new<A: Arith>(c: &KeyComponents) -> Option<ScalarKey> {
        let (pb, qb) = (bit_len(&c.prime_1), bit_len(&c.prime_2));
        let e = strip_zeros(&c.public_exponent);
        if pb != qb
            || pb < 64
            || c.exponent_1.is_empty()
            || c.exponent_2.is_empty()
            || c.coefficient.is_empty()
            || e.is_empty()
            || e.len() > 8
        {
            return None;
        }
        let limbs = pb.div_ceil(64);
        if !A::serves_limbs(limbs) {
            return None;
        }
        let p = half(&c.prime_1, &c.exponent_1, limbs);
        let q = half(&c.prime_2, &c.exponent_2, limbs);
        let mut qinv = vec![0u64; limbs];
        from_be_bytes(&c.coefficient, &mut qinv);
        let mut qinv_r = vec![0u64; limbs];
        A::mul(&qinv, &p.m.rr, &p.m.m, p.m.k0, &mut qinv_r);
        qinv.zeroize();
        let mut n = vec![0u64; 2 * limbs];
        from_be_bytes(strip_zeros(&c.modulus), &mut n);
        Some(ScalarKey {
            n,
            e: e.iter().fold(0u64, |a, &b| (a << 8) | b as u64),
            limbs,
            prime_bits: pb,
            p,
            q,
            qinv_r,
            modulus_len: bit_len(&c.modulus).div_ceil(8),
        })
    }
}
