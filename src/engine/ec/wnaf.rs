//! Width-w NAF recoding of public scalars, for the variable-time double-scalar multiplication
//! of the signature check (every curve), and the segment tables those digits index
//! (`segment_multiples`): odd digits, |d| < 2^(w-1), nonzero digits at least w
//! positions apart, so a table of 2^(w-2) odd multiples serves every digit by its sign.

/// Width-w NAF of the big-endian scalar `be` (up to 72 bytes) into `out` (least significant
/// digit first; `out` must hold zeros). Variable time: for public scalars only.
///
/// A run of zero digits is skipped at once: with c the carry of the last negative digit, the
/// value left at `pos` is the scalar's bits from `pos` plus c, and its trailing zeros are
/// that many zero digits after which the value left is again the bits from there plus c (the
/// carry ripples through the ones it passes, or there was none). Bit by bit, this recoding
/// was 3% of a P-256 signature with its check.
pub fn wnaf(be: &[u8], w: usize, out: &mut [i16]) {
    // One zero limb past the scalar: a window read at its top finds zeros.
    let mut limbs = [0u64; 10];
    assert!(
        be.len() <= 8 * (limbs.len() - 1),
        "wnaf: scalar longer than 72 bytes"
    );
    for (i, b) in be.iter().rev().enumerate() {
        limbs[i / 8] |= u64::from(*b) << (8 * (i % 8));
    }
    let width = 1u64 << w;
    let mask = width - 1;
    let mut pos = 0;
    let mut carry = 0u64;
    while pos < out.len() {
        let (idx, bit) = (pos / 64, pos % 64);
        let buf = match (limbs.get(idx), limbs.get(idx + 1)) {
            (None, _) => 0,
            (Some(&lo), Some(&hi)) if bit > 0 => (lo >> bit) | (hi << (64 - bit)),
            (Some(&lo), _) => lo >> bit,
        };
        let x = buf.wrapping_add(carry);
        if x & 1 == 0 {
            // x = 0: 64 zero digits (all zero bits, or a carry through 64 ones).
            pos += x.trailing_zeros() as usize;
            continue;
        }
        // x odd: the carry stopped at bit 0 (buf was even) or there was none.
        let window = x & mask;
        if window < width / 2 {
            carry = 0;
            out[pos] = window as i16;
        } else {
            carry = 1;
            out[pos] = (window as i64 - width as i64) as i16;
        }
        pos += w;
    }
}

/// The points of a check's segment table, in the order the checks index them: for each of
/// `seg` segments i, the `half` odd multiples 1·P_i, 3·P_i, … of P_i = 2^(l·i)·P, where a
/// public scalar's wNAF digits at positions l·i .. l·(i+1) select from segment i. Generic
/// over the point type: every curve's check builds its tables here, in its own arithmetic.
pub fn segment_multiples<P: Copy>(
    p: P,
    seg: usize,
    l: usize,
    half: usize,
    double: impl Fn(&P) -> P,
    add: impl Fn(&P, &P) -> P,
) -> Vec<P> {
    let mut out = Vec::with_capacity(seg * half);
    let mut base = p;
    for i in 0..seg {
        let two = double(&base);
        let mut m = base;
        for _ in 0..half {
            out.push(m);
            m = add(&m, &two);
        }
        if i + 1 < seg {
            for _ in 0..l {
                base = double(&base);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        getrandom::fill(&mut v).unwrap();
        v
    }

    /// Σ d_i·2^i of the digits equals the scalar, for scalars of 32, 48 and 66 bytes with
    /// runs of ones and zeros (the carry through a run, the top limb), checked on limbs: the
    /// positive digits' sum equals the scalar plus the negative digits' magnitudes.
    #[test]
    fn wnaf_digits_rebuild_long_scalars() {
        fn add_at(acc: &mut [u64; 11], v: u64, i: usize) {
            let (limb, sh) = (i / 64, i % 64);
            let wide = (v as u128) << sh;
            let mut c = 0u128;
            for (k, part) in [wide as u64, (wide >> 64) as u64].into_iter().enumerate() {
                c += acc[limb + k] as u128 + part as u128;
                acc[limb + k] = c as u64;
                c >>= 64;
            }
            let mut k = limb + 2;
            while c != 0 {
                c += acc[k] as u128;
                acc[k] = c as u64;
                c >>= 64;
                k += 1;
            }
        }
        let mut cases: Vec<Vec<u8>> = Vec::new();
        for len in [32usize, 48, 66] {
            cases.push(vec![0xff; len]);
            cases.push(vec![0x80; len]);
            let mut v = vec![0u8; len];
            v[0] = 1;
            cases.push(v);
            let mut v = vec![0xffu8; len];
            v[len / 2] = 0;
            cases.push(v);
            for _ in 0..200 {
                let mut v = random(len);
                // Runs: some bytes forced to all ones or zeros.
                for b in v.iter_mut().step_by(3) {
                    *b = if *b & 1 == 0 { 0 } else { 0xff };
                }
                cases.push(v);
                cases.push(random(len));
            }
        }
        for be in cases {
            for w in [5, 6, 8] {
                let mut out = vec![0i16; be.len() * 8 + 1];
                wnaf(&be, w, &mut out);
                let (mut pos, mut neg) = ([0u64; 11], [0u64; 11]);
                for (i, d) in out.iter().enumerate() {
                    if *d != 0 {
                        assert!(d % 2 != 0 && (d.unsigned_abs() as u32) < (1 << (w - 1)));
                        add_at(
                            if *d > 0 { &mut pos } else { &mut neg },
                            d.unsigned_abs() as u64,
                            i,
                        );
                    }
                }
                for (i, b) in be.iter().rev().enumerate() {
                    add_at(&mut neg, u64::from(*b), 8 * i);
                }
                assert_eq!(pos, neg, "w = {w}, scalar {be:02x?}");
            }
        }
    }

    #[test]
    fn wnaf_digits_rebuild_the_scalar() {
        for w in [5, 8] {
            for _ in 0..200 {
                let be = random(16);
                let mut out = [0i16; 16 * 8 + 1];
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
