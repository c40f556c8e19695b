//! Numbers in radix 2^52 (the IFMA limb size), scalar Montgomery arithmetic on them, and the
//! per-prime constants the kernels need. Everything here runs in time independent of the
//! values (fixed loops, masks instead of branches). Sums use wrapping operations: bounds are
//! by construction, and the overflow checks of debug builds would be branches on secrets.

pub const MASK52: u64 = (1 << 52) - 1;

/// acc + the low 52 bits of b·c (b and c taken at their low 52 bits), wrapping: one lane of
/// `vpmadd52luq`, for the kernels' emulated builds.
#[inline]
pub fn madd52lo(acc: u64, b: u64, c: u64) -> u64 {
    acc.wrapping_add(((b & MASK52) as u128 * (c & MASK52) as u128) as u64 & MASK52)
}

/// acc + bits 52..104 of b·c, wrapping: one lane of `vpmadd52huq`.
#[inline]
pub fn madd52hi(acc: u64, b: u64, c: u64) -> u64 {
    acc.wrapping_add((((b & MASK52) as u128 * (c & MASK52) as u128) >> 52) as u64)
}

use zeroize::Zeroize;

/// Little-endian 52-bit limbs of a big-endian byte string, into `out` (extra limbs zero).
pub fn from_be_bytes(b: &[u8], out: &mut [u64]) {
    out.fill(0);
    for (i, &byte) in b.iter().rev().enumerate() {
        let bit = i * 8;
        let (limb, off) = (bit / 52, bit % 52);
        if limb < out.len() {
            out[limb] |= ((byte as u64) << off) & MASK52;
            if off > 44 && limb + 1 < out.len() {
                out[limb + 1] |= (byte as u64) >> (52 - off);
            }
        }
    }
}

/// The value of normalised 52-bit limbs as `len` big-endian bytes (high bits beyond `len`
/// are dropped: callers size `len` to the value).
pub fn to_be_bytes(limbs: &[u64], len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    for (i, o) in out.iter_mut().rev().enumerate() {
        let bit = i * 8;
        let (limb, off) = (bit / 52, bit % 52);
        let mut v = limbs.get(limb).copied().unwrap_or(0) >> off;
        if off > 44 {
            v |= limbs.get(limb + 1).copied().unwrap_or(0) << (52 - off);
        }
        *o = v as u8;
    }
    out
}

/// −m⁻¹ mod 2^52 for odd `m0` (Newton iteration, a fixed number of steps).
pub fn mont_k0(m0: u64) -> u64 {
    let mut inv: u64 = 1;
    for _ in 0..6 {
        inv = inv.wrapping_mul(2u64.wrapping_sub(m0.wrapping_mul(inv)));
    }
    inv.wrapping_neg() & MASK52
}

/// The most limbs a scalar operation here takes per operand (a 4096-bit modulus).
const MAX_LIMBS: usize = 80;

/// Scalar almost-Montgomery multiplication: a·b·R⁻¹ (mod m), R = 2^(52·L), result < 2m for
/// inputs well below R (the kernels' contract, with R ≥ 256·m). Limbs normalised.
pub fn amm(a: &[u64], b: &[u64], m: &[u64], k0: u64) -> Vec<u64> {
    let mut out = vec![0; m.len()];
    amm_into(a, b, m, k0, &mut out);
    out
}

/// `amm` into `out` (L limbs), with its accumulator on the stack and wiped afterwards.
pub fn amm_into(a: &[u64], b: &[u64], m: &[u64], k0: u64, out: &mut [u64]) {
    let l = m.len();
    assert!(l <= MAX_LIMBS && out.len() == l);
    let mut buf = [0u128; MAX_LIMBS + 1];
    let acc = &mut buf[..l + 1];
    for &ai in a.iter().take(l) {
        for j in 0..l {
            acc[j] = acc[j].wrapping_add(ai as u128 * b[j] as u128);
        }
        let q = ((acc[0] as u64 & MASK52).wrapping_mul(k0)) & MASK52;
        for j in 0..l {
            acc[j] = acc[j].wrapping_add(q as u128 * m[j] as u128);
        }
        let carry = acc[0] >> 52;
        for j in 0..l {
            acc[j] = acc[j + 1];
        }
        acc[l] = 0;
        acc[0] = acc[0].wrapping_add(carry);
    }
    // No carries between rows: a column takes two products below 2^104 per row, so even at
    // 80 limbs it stays below 2^112. One pass at the end normalises (the result is below
    // 2m < R: nothing carries out of the top limb).
    normalise_into(acc, out);
    buf.zeroize();
}

/// a − b over equal-length limbs; returns the difference and a borrow of 0 or 1.
pub fn sub(a: &[u64], b: &[u64]) -> (Vec<u64>, u64) {
    let mut out = vec![0; a.len()];
    let borrow = sub_into(a, b, &mut out);
    (out, borrow)
}

/// `sub` into `out`; returns the borrow.
pub fn sub_into(a: &[u64], b: &[u64], out: &mut [u64]) -> u64 {
    let mut borrow = 0u64;
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        let t = x.wrapping_sub(y).wrapping_sub(borrow);
        borrow = t >> 63;
        *o = t & MASK52;
    }
    borrow
}

/// a + b over equal-length limbs (the caller knows the sum fits).
pub fn add(a: &[u64], b: &[u64]) -> Vec<u64> {
    let mut out = vec![0; a.len()];
    add_into(a, b, &mut out);
    out
}

/// `add` into `out`.
pub fn add_into(a: &[u64], b: &[u64], out: &mut [u64]) {
    let mut carry = 0u64;
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        let t = x.wrapping_add(y).wrapping_add(carry);
        carry = t >> 52;
        *o = t & MASK52;
    }
}

/// `out` becomes `a` where `pick_a` is 1 and stays as it is where it is 0, with a mask.
pub fn select_into(pick_a: u64, a: &[u64], out: &mut [u64]) {
    // The barrier keeps LLVM from turning the masks back into a conditional move on a secret.
    let mask = core::hint::black_box(pick_a.wrapping_neg());
    for (o, &x) in out.iter_mut().zip(a) {
        *o = (x & mask) | (*o & !mask);
    }
}

/// x mod m for x < 2m, constant time.
pub fn reduce_once(x: &[u64], m: &[u64]) -> Vec<u64> {
    let mut out = vec![0; x.len()];
    reduce_once_into(x, m, &mut out);
    out
}

/// `reduce_once` into `out`.
pub fn reduce_once_into(x: &[u64], m: &[u64], out: &mut [u64]) {
    let borrow = sub_into(x, m, out);
    select_into(borrow, x, out);
}

/// Full product of a (la limbs) and b (lb limbs) into `out` (la + lb limbs, normalised), with
/// its accumulator on the stack and wiped afterwards.
pub fn mul_into(a: &[u64], b: &[u64], out: &mut [u64]) {
    assert!(a.len() + b.len() <= MAX_LIMBS && out.len() == a.len() + b.len());
    let mut buf = [0u128; MAX_LIMBS + 1];
    let acc = &mut buf[..a.len() + b.len() + 1];
    for (i, &x) in a.iter().enumerate() {
        for (j, &y) in b.iter().enumerate() {
            acc[i + j] = acc[i + j].wrapping_add(x as u128 * y as u128);
        }
        // Bound the columns: at most 2^104 · len before this carry pass.
        let c = acc[i] >> 52;
        acc[i] &= MASK52 as u128;
        acc[i + 1] = acc[i + 1].wrapping_add(c);
    }
    normalise_into(acc, out);
    buf.zeroize();
}

/// The columns `acc` as `out.len()` normalised limbs, each column's bits above 52 carried up.
fn normalise_into(acc: &[u128], out: &mut [u64]) {
    let mut carry = 0u128;
    for (o, &x) in out.iter_mut().zip(acc) {
        let t = x.wrapping_add(carry);
        *o = t as u64 & MASK52;
        carry = t >> 52;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_conversions_roundtrip() {
        let bytes: Vec<u8> = (1..=129u8).collect();
        let mut limbs = vec![0u64; 20];
        from_be_bytes(&bytes, &mut limbs);
        assert!(limbs.iter().all(|&l| l <= MASK52));
        assert_eq!(to_be_bytes(&limbs, 129), bytes);
    }

    #[test]
    fn k0_inverts() {
        for m0 in [1u64, 3, 0x000f_ffff_ffff_ffff, 0x1234_5678_9abc_def1 & MASK52 | 1] {
            let k0 = mont_k0(m0);
            assert_eq!((m0.wrapping_mul(k0)) & MASK52, MASK52, "m0 = {m0:x}");
        }
    }
}
