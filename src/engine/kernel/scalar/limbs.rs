//! Numbers as little-endian 64-bit limbs and the constant-time helpers both scalar families
//! share: conversion from and to big-endian bytes, addition, subtraction, masked selection,
//! the conditional subtraction that ends every Montgomery operation, and the Montgomery
//! reduction of a double-width value. Every loop runs a fixed number of times for a given
//! limb count; carries and choices are arithmetic, never branches or indexes.

/// The most limbs an operand has: the modulus of a 16384-bit key (its check runs at 2·L).
pub const MAX_LIMBS: usize = 256;

/// An all-ones mask when `bit` is 1, zero when it is 0. Through `black_box` so the compiler
/// cannot turn the mask back into a branch.
#[inline(always)]
pub fn mask(bit: u64) -> u64 {
    core::hint::black_box(bit.wrapping_neg())
}

/// All ones when `a == b`, else zero, without comparing.
#[inline(always)]
pub fn mask_eq(a: u64, b: u64) -> u64 {
    let x = a ^ b;
    mask(((x | x.wrapping_neg()) >> 63) ^ 1)
}

/// Limbs of a big-endian byte string, into `out` (extra limbs zero; bytes beyond `out`
/// dropped: callers size `out` to the value).
pub fn from_be_bytes(b: &[u8], out: &mut [u64]) {
    out.fill(0);
    for (i, &byte) in b.iter().rev().enumerate() {
        if let Some(w) = out.get_mut(i / 8) {
            *w |= (byte as u64) << (8 * (i % 8));
        }
    }
}

/// The value as `len` big-endian bytes.
pub fn to_be_bytes(limbs: &[u64], len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    for (i, o) in out.iter_mut().rev().enumerate() {
        *o = (limbs.get(i / 8).copied().unwrap_or(0) >> (8 * (i % 8))) as u8;
    }
    out
}

/// out = a + b, returning the carry (0 or 1).
pub fn add(a: &[u64], b: &[u64], out: &mut [u64]) -> u64 {
    let mut carry = 0u64;
    for ((x, y), o) in a.iter().zip(b).zip(out.iter_mut()) {
        let s = *x as u128 + *y as u128 + carry as u128;
        *o = s as u64;
        carry = (s >> 64) as u64;
    }
    carry
}

/// out = a − b, returning the borrow (0 or 1), over the shortest of the three.
pub fn sub(a: &[u64], b: &[u64], out: &mut [u64]) -> u64 {
    let n = a.len().min(b.len()).min(out.len());
    #[cfg(target_arch = "x86_64")]
    if n > 0 {
        let borrow: u64;
        // SAFETY: reads n limbs of a and b and writes n of out, all in bounds (n is the
        // shortest length, at least 1); the loop counts n down to zero.
        unsafe {
            core::arch::asm!(
                // xor clears CF; inc and dec leave it: one sbb chain, one cycle a limb (the
                // portable loop below compiles to five dependent instructions a limb).
                "xor {i:e}, {i:e}",
                "2:",
                "mov {x}, qword ptr [{a} + 8*{i}]",
                "sbb {x}, qword ptr [{b} + 8*{i}]",
                "mov qword ptr [{o} + 8*{i}], {x}",
                "inc {i}",
                "dec {n}",
                "jnz 2b",
                "sbb {x}, {x}",
                "neg {x}",
                a = in(reg) a.as_ptr(),
                b = in(reg) b.as_ptr(),
                o = in(reg) out.as_mut_ptr(),
                n = inout(reg) n => _,
                i = out(reg) _,
                x = out(reg) borrow,
                options(nostack),
            );
        }
        return borrow;
    }
    let mut borrow = 0u64;
    for ((x, y), o) in a[..n].iter().zip(&b[..n]).zip(out[..n].iter_mut()) {
        let d = (*x as u128).wrapping_sub(*y as u128 + borrow as u128);
        *o = d as u64;
        borrow = ((d >> 64) as u64) & 1;
    }
    borrow
}

/// out = a where `m` is all ones, out unchanged where it is zero.
pub fn select(m: u64, a: &[u64], out: &mut [u64]) {
    for (o, x) in out.iter_mut().zip(a) {
        *o = (x & m) | (*o & !m);
    }
}

/// out = (t + top·R) mod m for t + top·R < 2m: t − m into out, then t back where that
/// borrowed without the top bit to pay for it (a masked copy). No scratch: it ends every
/// Montgomery operation, where a buffer of `MAX_LIMBS` to clear would cost more than the
/// subtraction.
pub fn reduce_once(t: &[u64], top: u64, m: &[u64], out: &mut [u64]) {
    let n = m.len();
    let (t, out) = (&t[..n], &mut out[..n]);
    let borrow = sub(t, m, out);
    let keep = mask((top | (borrow ^ 1)) & 1);
    select(!keep, t, out);
}

/// −m⁻¹ mod 2^64 for odd `m0` (Newton's iteration, a fixed number of steps).
pub fn mont_k0(m0: u64) -> u64 {
    let mut inv: u64 = 1;
    for _ in 0..6 {
        inv = inv.wrapping_mul(2u64.wrapping_sub(m0.wrapping_mul(inv)));
    }
    inv.wrapping_neg()
}

/// Montgomery reduction of a double-width `w` (2·L limbs, w < m·R): out = w·R⁻¹ mod m, fully
/// reduced. `w` is used as scratch.
pub fn redc(w: &mut [u64], m: &[u64], k0: u64, out: &mut [u64]) {
    let n = m.len();
    assert!(w.len() == 2 * n && out.len() == n);
    let mut extra = 0u64;
    for i in 0..n {
        let q = w[i].wrapping_mul(k0);
        let mut c = 0u64;
        for (j, mj) in m.iter().enumerate() {
            let s = q as u128 * *mj as u128 + w[i + j] as u128 + c as u128;
            w[i + j] = s as u64;
            c = (s >> 64) as u64;
        }
        let s = w[i + n] as u128 + c as u128 + extra as u128;
        w[i + n] = s as u64;
        extra = (s >> 64) as u64;
    }
    reduce_once(&w[n..], extra, m, out);
}

/// out (2·L limbs) = a·b, schoolbook (public lengths, no reduction).
pub fn mul_wide(a: &[u64], b: &[u64], out: &mut [u64]) {
    let n = a.len();
    assert!(b.len() == n && out.len() == 2 * n);
    out.fill(0);
    for (i, ai) in a.iter().enumerate() {
        let mut c = 0u64;
        for (j, bj) in b.iter().enumerate() {
            let s = *ai as u128 * *bj as u128 + out[i + j] as u128 + c as u128;
            out[i + j] = s as u64;
            c = (s >> 64) as u64;
        }
        out[i + n] = c;
    }
}

/// x = 2x mod m for x < m (a doubling and one conditional subtraction).
pub fn double_mod(x: &mut [u64], m: &[u64]) {
    let n = m.len();
    let mut t = [0u64; MAX_LIMBS];
    let t = &mut t[..n];
    let top = add(x, x, t);
    reduce_once(t, top, m, x);
    t.fill(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_and_masks() {
        let b: Vec<u8> = (1..=19).collect();
        let mut l = [0u64; 3];
        from_be_bytes(&b, &mut l);
        assert_eq!(to_be_bytes(&l, 19), b);
        assert_eq!(to_be_bytes(&l, 24)[5..], b[..]);
        assert_eq!(mask_eq(5, 5), u64::MAX);
        assert_eq!(mask_eq(5, 4), 0);
        assert_eq!(mask_eq(0, 1 << 63), 0);
        assert_eq!(
            mont_k0(0xffff_ffff_ffff_fff1).wrapping_mul(0xffff_ffff_ffff_fff1),
            u64::MAX
        );
    }

    /// a − b mod 2^(64·n) and its borrow, one limb at a time through i128: the oracle.
    fn sub_ref(a: &[u64], b: &[u64]) -> (Vec<u64>, bool) {
        let mut borrow = 0i128;
        let out = a
            .iter()
            .zip(b)
            .map(|(&x, &y)| {
                let d = x as i128 - y as i128 - borrow;
                borrow = (d < 0) as i128;
                d.rem_euclid(1 << 64) as u64
            })
            .collect();
        (out, borrow == 1)
    }

    fn random(n: usize) -> Vec<u64> {
        let mut b = vec![0u8; 8 * n];
        getrandom::fill(&mut b).unwrap();
        b.chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// `sub` and `reduce_once` (on x86-64 an assembly `sbb` chain) against the oracle at every
    /// length from 1 to 17 limbs: limbs of all ones, zeros, equal operands, a borrow rippling
    /// through every limb, random values; `sub` over operands of unequal lengths writes the
    /// shortest; `reduce_once` at 0, m − 1, m, 2m − 1 (with its top bit) and a random value
    /// below m. (With the chain's `sbb` turned into `sub`, this test fails.)
    #[test]
    fn subtraction_and_reduce_once_match_the_oracle() {
        for n in 1..=17 {
            let ones = vec![u64::MAX; n];
            let zeros = vec![0u64; n];
            let mut one = zeros.clone();
            one[0] = 1;
            let cases = [
                (ones.clone(), zeros.clone()),
                (zeros.clone(), ones.clone()),
                (zeros.clone(), one.clone()),
                (ones.clone(), ones.clone()),
                (random(n), random(n)),
                (random(n), random(n)),
            ];
            for (a, b) in &cases {
                let mut out = vec![0u64; n];
                let borrow = sub(a, b, &mut out);
                assert_eq!((out, borrow == 1), sub_ref(a, b), "{n} limbs");
            }
            let (a, b) = (random(n + 1), random(n));
            let mut out = vec![7u64; n + 2];
            let borrow = sub(&a, &b, &mut out);
            assert_eq!((out[..n].to_vec(), borrow == 1), sub_ref(&a[..n], &b));
            assert_eq!(out[n..], [7, 7], "past the shortest, nothing written");
            // m odd with its top bit set; t + top·R below 2m.
            let mut m = random(n);
            m[0] |= 1;
            m[n - 1] |= 1 << 63;
            let (m_minus_1, _) = sub_ref(&m, &one);
            // 2m − 1 = m + (m − 1): n limbs and a top bit (m's top bit is set).
            let mut two_m_minus_1 = vec![0u64; n];
            let top = add(&m, &m_minus_1, &mut two_m_minus_1);
            let mut below_m = random(n);
            below_m[n - 1] >>= 1;
            let values = [
                (zeros.clone(), 0),
                (m_minus_1, 0),
                (m.clone(), 0),
                (two_m_minus_1, top),
                (below_m, 0),
            ];
            for (t, top) in values {
                let mut out = vec![0u64; n];
                reduce_once(&t, top, &m, &mut out);
                // The oracle: t + top·R − m where that does not go below zero, else t.
                let (d, borrow) = sub_ref(&t, &m);
                let want = if top == 1 || !borrow { d } else { t.clone() };
                assert_eq!(out, want, "reduce_once at {n} limbs");
            }
        }
    }
}
