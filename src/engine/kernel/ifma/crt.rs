//! RSA private-key operations on the IFMA kernel: per-key constants prepared once, two lanes
//! (p and q) per signature, Garner recombination, all in constant time.

use super::radix52 as r52;
#[cfg(target_arch = "x86_64")]
pub use super::vertical::Kernel;
use crate::engine::{strip_zeros, KeyComponents};
use zeroize::{Zeroize, ZeroizeOnDrop};

/// Limb counts with a compiled kernel: primes of 512, 1024, 1536 and 2048 bits.
pub const LIMB_COUNTS: [usize; 4] = [10, 20, 30, 40];

/// Everything one CRT half needs, in radix 2^52.
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct Half {
    pub m: Vec<u64>,
    pub k0: u64,
    pub rr: Vec<u64>,
    pub rrr: Vec<u64>,
    /// d mod (m − 1) as little-endian 64-bit words.
    pub exp: Vec<u64>,
}

/// A key in kernel form. `None` from `new` means the kernel cannot take it (unequal prime
/// sizes, or a size without a compiled limb count): the portable path serves it.
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct CrtKey {
    #[zeroize(skip)]
    pub limbs: usize,
    #[zeroize(skip)]
    pub prime_bits: usize,
    pub p: Half,
    pub q: Half,
    /// qInv·R mod p, for Garner's step as one Montgomery multiplication.
    pub qinv_r: Vec<u64>,
    /// The public key at 2·L limbs, for the check of every result before release.
    #[zeroize(skip)]
    pub n: Vec<u64>,
    #[zeroize(skip)]
    pub n_k0: u64,
    #[zeroize(skip)]
    pub n_rr: Vec<u64>,
    #[zeroize(skip)]
    pub e: u64,
    #[zeroize(skip)]
    pub modulus_len: usize,
}

/// Radix 2^52 over m for `kernel::radix`.
struct Radix<'a> {
    m: &'a [u64],
    k0: u64,
}

impl crate::engine::kernel::radix::Layout for Radix<'_> {
    fn pow2(&self, k: usize, out: &mut [u64]) {
        out.fill(0);
        out[k / 52] = 1 << (k % 52);
    }
    fn double(&self, x: &mut [u64]) {
        let mut d = vec![0u64; x.len()];
        r52::add_into(x, x, &mut d);
        r52::reduce_once_into(&d, self.m, x);
        d.zeroize();
    }
    fn mont(&self, a: &[u64], b: &[u64], out: &mut [u64]) {
        let mut t = vec![0u64; out.len()];
        r52::amm_into(a, b, self.m, self.k0, &mut t);
        r52::reduce_once_into(&t, self.m, out);
        t.zeroize();
    }
}

/// 2^(52·L·k) mod m for k = 1, 2, 3 (`kernel::radix`: steps fixed by L and m's size).
pub fn powers_of_r_pub(m: &[u64]) -> [Vec<u64>; 3] {
    powers_of_r(m)
}

/// `headroom` 8: amm holds for R ≥ 256·m (radix52.rs).
fn powers_of_r(m: &[u64]) -> [Vec<u64>; 3] {
    powers_of_r_with(m, 8)
}

fn powers_of_r_with(m: &[u64], headroom: usize) -> [Vec<u64>; 3] {
    let layout = Radix {
        m,
        k0: r52::mont_k0(m[0]),
    };
    let bits = crate::engine::kernel::radix::bits(m, 52);
    crate::engine::kernel::radix::powers_of_r(&layout, m.len(), 52 * m.len(), bits, headroom)
}

fn half(prime: &[u8], exp: &[u8], limbs: usize) -> Half {
    let mut m = vec![0u64; limbs];
    r52::from_be_bytes(strip_zeros(prime), &mut m);
    let [_, rr, rrr] = powers_of_r(&m);
    // Every byte of the exponent as stored, leading zeros included: skipping them would
    // branch on its secret top bytes.
    let words = crate::engine::bit_len(prime).div_ceil(64);
    let mut w = vec![0u64; words.max(exp.len().div_ceil(8))];
    for (i, &byte) in exp.iter().rev().enumerate() {
        w[i / 8] |= (byte as u64) << (8 * (i % 8));
    }
    Half {
        k0: r52::mont_k0(m[0]),
        m,
        rr,
        rrr,
        exp: w,
    }
}

impl CrtKey {
    /// Kernel form of a key whose components the portable path already validated.
    pub fn new(c: &KeyComponents) -> Option<CrtKey> {
        let (pb, qb) = (
            crate::engine::bit_len(&c.prime_1),
            crate::engine::bit_len(&c.prime_2),
        );
        let e = strip_zeros(&c.public_exponent);
        if pb != qb
            || c.exponent_1.is_empty()
            || c.exponent_2.is_empty()
            || c.coefficient.is_empty()
            || e.len() > 8
        {
            return None;
        }
        // R = 2^(52·L) must exceed 256·p for the kernel's relaxed bounds.
        let limbs = (pb + 8).div_ceil(52);
        if !LIMB_COUNTS.contains(&limbs) {
            return None;
        }
        let p = half(&c.prime_1, &c.exponent_1, limbs);
        let q = half(&c.prime_2, &c.exponent_2, limbs);
        let mut qinv = vec![0u64; limbs];
        r52::from_be_bytes(&c.coefficient, &mut qinv);
        let qinv_r = r52::reduce_once(&r52::amm(&qinv, &p.rr, &p.m, p.k0), &p.m);
        qinv.zeroize();
        let mut n = vec![0u64; 2 * limbs];
        r52::from_be_bytes(strip_zeros(&c.modulus), &mut n);
        let [_, n_rr, _] = powers_of_r(&n);
        Some(CrtKey {
            n_k0: r52::mont_k0(n[0]),
            n,
            n_rr,
            e: e.iter().fold(0u64, |a, &b| (a << 8) | b as u64),
            limbs,
            prime_bits: pb,
            p,
            q,
            qinv_r,
            modulus_len: crate::engine::bit_len(&c.modulus).div_ceil(8),
        })
    }

    /// The input split for the kernel: low and high L limbs of c (c < n < R²).
    pub fn split_input(&self, input: &[u8]) -> (Vec<u64>, Vec<u64>) {
        let mut c = vec![0u64; 2 * self.limbs];
        r52::from_be_bytes(input, &mut c);
        let hi = c.split_off(self.limbs);
        (c, hi)
    }

    /// Garner: s = m2 + q·(qInv·(m1 − m2) mod p), serialised at the modulus length. The
    /// intermediates live on the stack and are wiped before returning.
    pub fn recombine(&self, m1: &[u64], m2: &[u64]) -> zeroize::Zeroizing<Vec<u8>> {
        const L: usize = LIMB_COUNTS[LIMB_COUNTS.len() - 1];
        let (p, l) = (&self.p, self.limbs);
        let mut t = [[0u64; L]; 4];
        let [m2p, d, diff, h] = &mut t;
        let (m2p, d, diff, h) = (&mut m2p[..l], &mut d[..l], &mut diff[..l], &mut h[..l]);
        // m2 < q < 2p (equal bit lengths), so one conditional subtraction gives m2 mod p.
        r52::reduce_once_into(m2, &p.m, m2p);
        let borrow = r52::sub_into(m1, m2p, d);
        // (m1 − m2) mod p: the difference, or the difference plus p where it borrowed.
        r52::add_into(d, &p.m, diff);
        r52::select_into(borrow ^ 1, d, diff);
        r52::amm_into(diff, &self.qinv_r, &p.m, p.k0, m2p);
        r52::reduce_once_into(m2p, &p.m, h);
        let mut w = [[0u64; 2 * L]; 3];
        let [hq, m2w, s] = &mut w;
        let (hq, m2w, s) = (&mut hq[..2 * l], &mut m2w[..2 * l], &mut s[..2 * l]);
        r52::mul_into(h, &self.q.m, hq);
        m2w[..l].copy_from_slice(m2);
        r52::add_into(hq, m2w, s);
        let out = zeroize::Zeroizing::new(r52::to_be_bytes(s, self.modulus_len));
        t.zeroize();
        w.zeroize();
        out
    }
}

/// Private-key operations of up to four signatures (eight lanes) that share a limb count,
/// on the given build of the kernel. Each result comes with whether it passed the public-key
/// check (it must not be released otherwise).
#[cfg(target_arch = "x86_64")]
pub fn private_op_batch(
    kernel: Kernel,
    jobs: &[(&CrtKey, &[u8])],
) -> Vec<(zeroize::Zeroizing<Vec<u8>>, bool)> {
    let results = private_op_unchecked(kernel, jobs);
    let verified = verify_batch(kernel, jobs, &results);
    results.into_iter().zip(verified).collect()
}

/// The secret-dependent part of `private_op_batch` on the given build of the kernel: results
/// not yet checked. Everything here is constant time in the key and the input (the valgrind
/// check in tests/constant_time.rs runs it with both marked undefined).
#[cfg(target_arch = "x86_64")]
pub fn private_op_unchecked(kernel: Kernel, jobs: &[(&CrtKey, &[u8])]) -> Vec<zeroize::Zeroizing<Vec<u8>>> {
    use super::vertical::{modexp, LaneInput};
    assert!(jobs.len() * 2 <= super::vertical::LANES);
    let limbs = jobs[0].0.limbs;
    assert!(jobs.iter().all(|(k, _)| k.limbs == limbs));
    let mut splits: Vec<(Vec<u64>, Vec<u64>)> = jobs.iter().map(|(k, c)| k.split_input(c)).collect();
    let mut lanes = Vec::with_capacity(jobs.len() * 2);
    for ((key, _), (lo, hi)) in jobs.iter().zip(&splits) {
        for h in [&key.p, &key.q] {
            lanes.push(LaneInput {
                lo,
                hi,
                m: &h.m,
                k0: h.k0,
                rr: &h.rr,
                rrr: &h.rrr,
                exp: &h.exp,
            });
        }
    }
    // The exponent length is public: the widest prime in the batch.
    let exp_bits = jobs.iter().map(|(k, _)| k.prime_bits).max().unwrap_or(0);
    fn run<const L: usize>(
        kernel: Kernel,
        lanes: &[LaneInput],
        exp_bits: usize,
        jobs: &[(&CrtKey, &[u8])],
    ) -> Vec<zeroize::Zeroizing<Vec<u8>>> {
        let out = modexp::<L>(kernel, lanes, exp_bits);
        jobs.iter()
            .enumerate()
            .map(|(i, (key, _))| key.recombine(&out[2 * i], &out[2 * i + 1]))
            .collect()
    }
    let results = match limbs {
        10 => run::<10>(kernel, &lanes, exp_bits, jobs),
        20 => run::<20>(kernel, &lanes, exp_bits, jobs),
        30 => run::<30>(kernel, &lanes, exp_bits, jobs),
        40 => run::<40>(kernel, &lanes, exp_bits, jobs),
        _ => unreachable!("CrtKey::new admits only compiled limb counts"),
    };
    for (lo, hi) in splits.iter_mut() {
        lo.zeroize();
        hi.zeroize();
    }
    results
}

/// s^e mod n == input for every job, on the kernel at 2·L limbs.
#[cfg(target_arch = "x86_64")]
pub fn verify_batch(
    kernel: Kernel,
    jobs: &[(&CrtKey, &[u8])],
    sigs: &[zeroize::Zeroizing<Vec<u8>>],
) -> Vec<bool> {
    use super::vertical::{powmod_public, PublicLane};
    let limbs = 2 * jobs[0].0.limbs;
    let bases: Vec<Vec<u64>> = sigs
        .iter()
        .map(|s| {
            let mut v = vec![0u64; limbs];
            r52::from_be_bytes(s, &mut v);
            v
        })
        .collect();
    // A lone signature: its limbs across the lanes (one vertical lane would do every limb
    // product alone, at 4.5% of a lone RSA-2048 request).
    if jobs.len() == 1 {
        let k = jobs[0].0;
        let r = super::horizontal::powmod_public(kernel, &bases[0], &k.n, k.n_k0, &k.n_rr, k.e);
        return vec![r52::to_be_bytes(&r, k.modulus_len) == *jobs[0].1];
    }
    let lanes: Vec<PublicLane> = jobs
        .iter()
        .zip(&bases)
        .map(|((k, _), b)| PublicLane {
            base: b,
            n: &k.n,
            k0: k.n_k0,
            rr: &k.n_rr,
            e: k.e,
        })
        .collect();
    let back: Vec<Vec<u64>> = match limbs {
        20 => powmod_public::<20>(kernel, &lanes)
            .into_iter()
            .map(|x| x.to_vec())
            .collect(),
        40 => powmod_public::<40>(kernel, &lanes)
            .into_iter()
            .map(|x| x.to_vec())
            .collect(),
        60 => powmod_public::<60>(kernel, &lanes)
            .into_iter()
            .map(|x| x.to_vec())
            .collect(),
        80 => powmod_public::<80>(kernel, &lanes)
            .into_iter()
            .map(|x| x.to_vec())
            .collect(),
        _ => unreachable!("CrtKey::new admits only compiled limb counts"),
    };
    jobs.iter()
        .zip(back)
        .map(|((k, input), r)| r52::to_be_bytes(&r, k.modulus_len) == *input)
        .collect()
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::engine::PreparedKey;

    fn key(bits: usize) -> (KeyComponents, PreparedKey) {
        let c = crate::engine::generate(bits, &[1, 0, 1]).unwrap();
        let k = PreparedKey::new(&c).unwrap();
        (c, k)
    }

    #[test]
    fn kernel_matches_reference_for_every_size_and_batch_width() {
        for kernel in Kernel::on_this_cpu() {
            compare_with_reference(kernel);
        }
    }

    fn compare_with_reference(kernel: Kernel) {
        for bits in [1024usize, 2048, 3072, 4096] {
            let keys: Vec<_> = (0..2).map(|_| key(bits)).collect();
            let crt: Vec<CrtKey> = keys.iter().map(|(c, _)| CrtKey::new(c).unwrap()).collect();
            let k = bits / 8;
            let n = &keys[0].0.modulus;
            let mut n_minus_1 = n.clone();
            *n_minus_1.last_mut().unwrap() -= 1;
            let mut p_plus = vec![0u8; k - keys[0].0.prime_1.len()];
            p_plus.extend_from_slice(&keys[0].0.prime_1);
            let mut inputs: Vec<Vec<u8>> = vec![
                vec![0; k],
                {
                    let mut v = vec![0; k];
                    v[k - 1] = 1;
                    v
                },
                n_minus_1,
                p_plus,
            ];
            for _ in 0..4 {
                let mut v = vec![0u8; k];
                getrandom::fill(&mut v).unwrap();
                v[0] &= 0x7f;
                inputs.push(v);
            }
            let mut compared = 0;
            for width in 1..=4 {
                for chunk in inputs.chunks(width) {
                    // Mixed keys in one batch.
                    let jobs: Vec<(&CrtKey, &[u8])> = chunk
                        .iter()
                        .enumerate()
                        .map(|(i, c)| (&crt[i % 2], c.as_slice()))
                        .collect();
                    let got = private_op_batch(kernel, &jobs);
                    for (i, c) in chunk.iter().enumerate() {
                        let reference = keys[i % 2].1.inner.private_op_checked(c, k);
                        // Inputs ≥ n (possible for the second key) are refused upstream.
                        if let Ok(r) = reference {
                            assert_eq!(
                                &got[i].0[..],
                                &r[..],
                                "{kernel:?} RSA-{bits}, width {width}, input {i}"
                            );
                            assert!(got[i].1, "RSA-{bits}: a correct result failed the kernel's check");
                            compared += 1;
                        }
                    }
                }
            }
            assert!(compared >= 28, "RSA-{bits}: only {compared} results compared");
            // A wrong result never passes the check.
            let input = &inputs[5];
            let job = [(&crt[0], input.as_slice())];
            let mut sig = private_op_unchecked(kernel, &job).remove(0);
            sig[k / 2] ^= 4;
            assert_eq!(verify_batch(kernel, &job, &[sig]), vec![false]);
        }
    }
}

#[cfg(test)]
mod radix_tests {
    /// The square-and-double path gives what 3·r doublings give, at every size class.
    #[test]
    fn powers_of_r_match_plain_doubling() {
        for (l, bytes) in [(10usize, 64usize), (20, 128), (30, 192), (40, 256), (20, 120)] {
            let mut b = vec![0u8; bytes];
            getrandom::fill(&mut b).unwrap();
            b[0] |= 0x80;
            *b.last_mut().unwrap() |= 1;
            let mut m = vec![0u64; l];
            super::r52::from_be_bytes(&b, &mut m);
            assert_eq!(
                super::powers_of_r(&m),
                super::powers_of_r_with(&m, usize::MAX / 2),
                "L {l}"
            );
        }
    }
}
