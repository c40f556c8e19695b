//! Scalar helpers in radix 2^w (w ≤ 52, one limb per u64, little-endian limbs) for what runs
//! once per key or once per signature outside the four-lane kernels (the avx2 family's
//! radix 2^28, the fma family's 2^51): conversions from and to
//! bytes, the Montgomery constants, Garner's step. Every function here runs in time that
//! depends only on lengths and the radix (no branch or index on a limb's value): they see
//! the primes, the CRT exponents and the halves of a signature. Arithmetic is `wrapping_*`
//! (the bounds are proven in comments): an overflow check is a branch on the value.

use zeroize::Zeroize;

/// Big-endian bytes into `out.len()` limbs of `w` bits. Bits beyond the limbs' capacity are
/// dropped (the caller sizes `out` for the values it admits).
pub fn from_be_bytes(bytes: &[u8], w: u32, out: &mut [u64]) {
    debug_assert!((8..=52).contains(&w));
    out.fill(0);
    // Bits gathered a byte at a time, a limb taken whenever w of them are in: fewer than w + 8
    // (below 2^60) are ever held. Positions alone decide the steps (the bytes may be a prime);
    // no division by w per byte (a third of a split's time at RSA-1024 went to it).
    let (mut acc, mut held, mut k) = (0u64, 0u32, 0usize);
    for &b in bytes.iter().rev() {
        acc |= (b as u64) << held;
        held += 8;
        if held >= w {
            if let Some(o) = out.get_mut(k) {
                *o = acc & mask(w);
            }
            acc >>= w;
            held -= w;
            k += 1;
        }
    }
    if let Some(o) = out.get_mut(k) {
        *o = acc;
    }
}

/// Normalised limbs into `len` big-endian bytes (the value must fit).
pub fn to_be_bytes(x: &[u64], w: u32, len: usize) -> Vec<u8> {
    debug_assert!((8..=52).contains(&w));
    let mut out = vec![0u8; len];
    // The converse: limbs gathered whenever fewer than 8 bits are held, a byte given each step.
    let (mut acc, mut held, mut k) = (0u64, 0u32, 0usize);
    for o in out.iter_mut().rev() {
        if held < 8 {
            acc |= x.get(k).copied().unwrap_or(0) << held;
            held += w;
            k += 1;
        }
        *o = acc as u8;
        acc >>= 8;
        held -= 8;
    }
    out
}

pub const fn mask(w: u32) -> u64 {
    (1u64 << w) - 1
}

/// −m⁻¹ mod 2^w for odd m0, by Newton's iteration (each step doubles the correct bits).
pub fn mont_k0(m0: u64, w: u32) -> u64 {
    let mut inv = m0; // correct to 3 bits: m·m ≡ 1 mod 8 for odd m
    for _ in 0..5 {
        inv = inv.wrapping_mul(2u64.wrapping_sub(m0.wrapping_mul(inv)));
    }
    inv.wrapping_neg() & mask(w)
}

/// out = a + b with carries propagated (same lengths; the sum must fit).
pub fn add_into(a: &[u64], b: &[u64], w: u32, out: &mut [u64]) {
    let mut carry = 0u64;
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        let t = x.wrapping_add(y).wrapping_add(carry);
        *o = t & mask(w);
        carry = t >> w;
    }
}

/// out = a − b; returns the borrow (1 when a < b), out then holds a − b + 2^(w·len).
pub fn sub_into(a: &[u64], b: &[u64], w: u32, out: &mut [u64]) -> u64 {
    let mut borrow = 0u64;
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        let t = x.wrapping_sub(y).wrapping_sub(borrow);
        *o = t & mask(w);
        borrow = t >> 63;
    }
    borrow
}

/// x = if bit == 1 { y } else { x }, by masks.
pub fn select_into(bit: u64, y: &[u64], x: &mut [u64]) {
    // The barrier keeps LLVM from turning the masks back into a branch or conditional move.
    let m = core::hint::black_box(bit.wrapping_neg());
    for (a, &b) in x.iter_mut().zip(y) {
        *a = (*a & !m) | (b & m);
    }
}

/// x mod m for x < 2m, in place (`scratch` as long as x).
pub fn reduce_once(x: &mut [u64], m: &[u64], w: u32, scratch: &mut [u64]) {
    let borrow = sub_into(x, m, w, scratch);
    select_into(borrow ^ 1, scratch, x);
}

/// Almost-Montgomery product a·b·2^(−w·L) mod m, below 2m for a, b < 2m and 2^(w·L) ≥ 4m.
/// `out` has L limbs. Columns are 128 bits wide: a column takes at most 2L products below
/// 2^(2w) and a carry, (2L + 1)·2^(2w) < 2^128 for every w ≤ 52 and L below 2^20. (This runs
/// a few times per signature, in Garner's step: the width costs nothing measurable.)
pub fn amm_into(a: &[u64], b: &[u64], m: &[u64], k0: u64, w: u32, out: &mut [u64]) {
    let l = m.len();
    assert!(w <= 52 && l < 1 << 20);
    let mut stack = [0u128; 2 * MAX_SCALAR + 1];
    let mut heap = Vec::new();
    let acc: &mut [u128] = if l <= MAX_SCALAR {
        &mut stack
    } else {
        heap.resize(2 * l + 1, 0);
        &mut heap
    };
    for i in 0..l {
        for j in 0..l {
            acc[i + j] = acc[i + j].wrapping_add(a[i] as u128 * b[j] as u128);
        }
        let q = ((acc[i] as u64 & mask(w)).wrapping_mul(k0)) & mask(w);
        for j in 0..l {
            acc[i + j] = acc[i + j].wrapping_add(q as u128 * m[j] as u128);
        }
        acc[i + 1] = acc[i + 1].wrapping_add(acc[i] >> w);
    }
    let mut carry = 0u128;
    for (j, o) in out.iter_mut().enumerate() {
        let t = acc[l + j].wrapping_add(carry);
        *o = t as u64 & mask(w);
        carry = t >> w;
    }
    acc.zeroize();
}

/// The widest operand of the scalar helpers (a prime of the largest class).
pub const MAX_SCALAR: usize = 80;

/// out = a·b (out has a.len() + b.len() limbs, normalised; 128-bit columns as in `amm_into`).
pub fn mul_into(a: &[u64], b: &[u64], w: u32, out: &mut [u64]) {
    let mut acc = [0u128; 2 * MAX_SCALAR];
    for (i, &x) in a.iter().enumerate() {
        for (j, &y) in b.iter().enumerate() {
            acc[i + j] = acc[i + j].wrapping_add(x as u128 * y as u128);
        }
    }
    let mut carry = 0u128;
    for (j, o) in out.iter_mut().enumerate() {
        let t = acc[j].wrapping_add(carry);
        *o = t as u64 & mask(w);
        carry = t >> w;
    }
    acc.zeroize();
}

/// Radix 2^w over m for `kernel::radix`.
struct Radix<'a> {
    m: &'a [u64],
    w: u32,
    k0: u64,
}

impl crate::engine::kernel::radix::Layout for Radix<'_> {
    fn pow2(&self, k: usize, out: &mut [u64]) {
        out.fill(0);
        out[k / self.w as usize] = 1 << (k % self.w as usize);
    }
    fn double(&self, x: &mut [u64]) {
        let mut d = vec![0u64; x.len()];
        let mut scratch = vec![0u64; x.len()];
        add_into(x, x, self.w, &mut d);
        reduce_once(&mut d, self.m, self.w, &mut scratch);
        x.copy_from_slice(&d);
        d.zeroize();
        scratch.zeroize();
    }
    fn mont(&self, a: &[u64], b: &[u64], out: &mut [u64]) {
        let mut scratch = vec![0u64; out.len()];
        amm_into(a, b, self.m, self.k0, self.w, out);
        reduce_once(out, self.m, self.w, &mut scratch);
        scratch.zeroize();
    }
}

/// 2^(w·L·k) mod m for k = 1, 2, 3 (`kernel::radix`: steps fixed by w, L and m's size).
/// `headroom` 2: amm_into holds for 2^(w·L) ≥ 4m.
pub fn powers_of_r(m: &[u64], w: u32) -> [Vec<u64>; 3] {
    powers_of_r_with(m, w, 2)
}

fn powers_of_r_with(m: &[u64], w: u32, headroom: usize) -> [Vec<u64>; 3] {
    let layout = Radix {
        m,
        w,
        k0: mont_k0(m[0], w),
    };
    let bits = crate::engine::kernel::radix::bits(m, w);
    crate::engine::kernel::radix::powers_of_r(&layout, m.len(), w as usize * m.len(), bits, headroom)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The square-and-double path gives what 3·r doublings give, at every size class.
    #[test]
    fn powers_of_r_match_plain_doubling() {
        for (w, l, bytes) in [
            (28u32, 10, 32),
            (28, 37, 128),
            (27, 39, 128),
            (26, 80, 256),
            (28, 20, 67),
            (51, 21, 128),
            (51, 82, 512),
        ] {
            let mut b = vec![0u8; bytes];
            getrandom::fill(&mut b).unwrap();
            b[0] |= 0x80;
            *b.last_mut().unwrap() |= 1;
            let mut m = vec![0u64; l];
            from_be_bytes(&b, w, &mut m);
            assert_eq!(
                powers_of_r(&m, w),
                powers_of_r_with(&m, w, usize::MAX / 2),
                "w {w} L {l}"
            );
        }
    }

    /// The conversions against their definition bit by bit: limb k holds the number's bits
    /// k·w..(k + 1)·w, bits past the limbs (or past the bytes) dropped, at radixes 26-28 and
    /// 51-52, lengths from 1 to 70 bytes and limb counts short of the value and beyond it.
    #[test]
    fn conversions_match_their_definition_bit_by_bit() {
        for w in [26u32, 27, 28, 51, 52] {
            for len in 1..=70usize {
                let mut bytes = vec![0u8; len];
                getrandom::fill(&mut bytes).unwrap();
                let bit = |i: usize| i < 8 * len && (bytes[len - 1 - i / 8] >> (i % 8)) & 1 == 1;
                for limbs in [
                    1,
                    (8 * len).div_ceil(w as usize) / 2 + 1,
                    (8 * len).div_ceil(w as usize) + 2,
                ] {
                    let mut out = vec![0u64; limbs];
                    from_be_bytes(&bytes, w, &mut out);
                    let want: Vec<u64> = (0..limbs)
                        .map(|k| (0..w as usize).fold(0, |v, j| v | (bit(k * w as usize + j) as u64) << j))
                        .collect();
                    assert_eq!(out, want, "w {w}, {len} bytes, {limbs} limbs");
                    let back = to_be_bytes(&out, w, len);
                    let kept = limbs * w as usize;
                    for i in 0..8 * len {
                        let b = (back[len - 1 - i / 8] >> (i % 8)) & 1 == 1;
                        assert_eq!(
                            b,
                            i < kept && bit(i),
                            "w {w}, {len} bytes, {limbs} limbs, bit {i}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn helpers_agree_with_each_other() {
        for w in [26u32, 27, 28, 51, 52] {
            let l = 20;
            let mut bytes = vec![0u8; 60];
            getrandom::fill(&mut bytes).unwrap();
            bytes[0] |= 0x80;
            *bytes.last_mut().unwrap() |= 1;
            let mut m = vec![0u64; l];
            from_be_bytes(&bytes, w, &mut m);
            assert_eq!(to_be_bytes(&m, w, 60), bytes);
            assert!(m.iter().all(|&x| x <= mask(w)));
            let k0 = mont_k0(m[0], w);
            assert_eq!((k0.wrapping_mul(m[0]) + 1) & mask(w), 0);
            let [r1, rr, rrr] = powers_of_r(&m, w);
            let mut one = vec![0u64; l];
            one[0] = 1;
            let mut s = vec![0u64; l];
            // R²·1/R = R, R³/R = R², R·R/R = R (each reduced once).
            for (a, b, want) in [(&rr, &one, &r1), (&rrr, &one, &rr), (&r1, &r1, &r1)] {
                let mut t = vec![0u64; l];
                amm_into(a, b, &m, k0, w, &mut t);
                reduce_once(&mut t, &m, w, &mut s);
                assert_eq!(&t, want, "w = {w}");
            }
            // (R mod m)·1 as a full product, and the sum of a value with itself.
            let mut p = vec![0u64; 2 * l];
            mul_into(&r1, &one, w, &mut p);
            assert_eq!(&p[..l], &r1[..]);
            assert!(p[l..].iter().all(|&x| x == 0));
            let mut d = vec![0u64; l];
            add_into(&r1, &r1, w, &mut d);
            assert_eq!(sub_into(&d, &r1, w, &mut s), 0);
            assert_eq!(s, r1);
        }
    }
}
