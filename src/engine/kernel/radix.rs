//! What the key preparation of every limb layout shares: the Montgomery constants R, R² and
//! R³ mod m (R = 2^r, r the layout's bits per operand) from three operations of the layout,
//! in a number of steps fixed by public sizes.
//!
//! Doubling 1 three times r times with a conditional subtraction took 3·r steps of O(L)
//! each; at RSA-2048 that was 34% of a key's preparation and most of `C_Initialize` (the
//! kernels' known-answer tests prepare keys). Here R mod m takes r − bits(m) + 1 doublings
//! from 2^(bits(m)−1) < m, and R² comes from R by square-and-double on the exponent r in
//! Montgomery form (mont(2^a·R, 2^b·R) = 2^(a+b)·R): about log2(r) squarings. The steps
//! depend on r and bits(m) only; bits(m) is the key size class, not a secret.

use zeroize::Zeroize;

/// The operations of one limb layout over m, each on fully reduced values (< m).
pub trait Layout {
    /// out = 2^k for k < bits(m).
    fn pow2(&self, k: usize, out: &mut [u64]);
    /// x = 2x mod m.
    fn double(&self, x: &mut [u64]);
    /// out = a·b·R⁻¹ mod m.
    fn mont(&self, a: &[u64], b: &[u64], out: &mut [u64]);
}

/// [R, R², R³] mod m, m of `m_bits` bits in `limbs` limbs, R = 2^r_bits. `headroom`: how
/// many bits R must exceed m by for `Layout::mont` to hold; below that, plain doubling.
pub fn powers_of_r(
    l: &impl Layout,
    limbs: usize,
    r_bits: usize,
    m_bits: usize,
    headroom: usize,
) -> [Vec<u64>; 3] {
    let mut r1 = vec![0u64; limbs];
    if r_bits < m_bits + headroom || m_bits < 2 {
        // Narrow layouts (test sizes): 3·r doublings from 1.
        r1[0] = 1;
        let mut out: [Vec<u64>; 3] = Default::default();
        for o in out.iter_mut() {
            for _ in 0..r_bits {
                l.double(&mut r1);
            }
            *o = r1.clone();
        }
        r1.zeroize();
        return out;
    }
    l.pow2(m_bits - 1, &mut r1);
    for _ in m_bits - 1..r_bits {
        l.double(&mut r1);
    }
    // y = 2^e·R with e running through the bits of r_bits from the top.
    let mut y = r1.clone();
    let mut t = vec![0u64; limbs];
    for bit in (0..usize::BITS - r_bits.leading_zeros()).rev() {
        l.mont(&y, &y, &mut t);
        std::mem::swap(&mut y, &mut t);
        if (r_bits >> bit) & 1 == 1 {
            l.double(&mut y);
        }
    }
    let mut r3 = vec![0u64; limbs];
    l.mont(&y, &y, &mut r3);
    t.zeroize();
    [r1, y, r3]
}

/// The bit length of little-endian limbs of `w` bits (the size class of a modulus).
pub fn bits(m: &[u64], w: u32) -> usize {
    m.iter()
        .rposition(|&x| x != 0)
        .map_or(0, |i| i * w as usize + (64 - m[i].leading_zeros() as usize))
}
