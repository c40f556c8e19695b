//! Width-w NAF recoding of public scalars, for the variable-time double-scalar multiplication
//! of the signature check (every curve): odd digits, |d| < 2^(w-1), nonzero digits at least w
//! positions apart, so a table of 2^(w-2) odd multiples serves every digit by its sign.

/// Width-w NAF of the big-endian scalar `be` into `out` (least significant digit first).
/// Variable time: for public scalars only.
pub fn wnaf(be: &[u8], w: usize, out: &mut [i8]) {
    let mut limbs = vec![0u64; be.len().div_ceil(8) + 1];
    for (i, b) in be.iter().rev().enumerate() {
        limbs[i / 8] |= u64::from(*b) << (8 * (i % 8));
    }
    let width = 1u64 << w;
    let mask = width - 1;
    let mut pos = 0;
    let mut carry = 0u64;
    while pos < out.len() {
        let (idx, bit) = (pos / 64, pos % 64);
        let buf = if bit + w <= 64 || idx + 1 >= limbs.len() {
            limbs.get(idx).copied().unwrap_or(0) >> bit
        } else {
            (limbs[idx] >> bit) | (limbs[idx + 1] << (64 - bit))
        };
        let window = carry + (buf & mask);
        if window & 1 == 0 {
            pos += 1;
            continue;
        }
        if window < width / 2 {
            carry = 0;
            out[pos] = window as i8;
        } else {
            carry = 1;
            out[pos] = (window as i64 - width as i64) as i8;
        }
        pos += w;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        getrandom::fill(&mut v).unwrap();
        v
    }

    #[test]
    fn wnaf_digits_rebuild_the_scalar() {
        for w in [5, 8] {
            for _ in 0..200 {
                let be = random(16);
                let mut out = [0i8; 16 * 8 + 1];
                wnaf(&be, w, &mut out);
                let mut acc: i128 = 0;
                for d in out.iter().rev() {
                    if *d != 0 {
                        assert!(d % 2 != 0 && (d.unsigned_abs() as u32) < (1 << (w - 1)));
                    }
                    acc = acc.wrapping_mul(2).wrapping_add(i128::from(*d));
                }
                let want = u128::from_be_bytes(be.try_into().unwrap());
                assert_eq!(acc as u128, want);
            }
        }
    }
}
