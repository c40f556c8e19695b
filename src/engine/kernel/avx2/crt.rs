//! RSA private-key operations on a four-lane vertical kernel: per-key constants prepared
//! once (in the kernel's radix), the two CRT halves of a signature as two lanes, Garner's
//! recombination and the serialisation in constant time, and the public-key check of every
//! result (modulo the primes, on the same kernel: `verify_batch`). Two kernels drive it
//! through `Lanes`: this family's integer kernel (radix 2^28, `vertical.rs`) and the fma
//! family's floating-point one (radix 2^51, `fma/vertical.rs`).

use super::limbs::{self, MAX_SCALAR};
use super::vertical::{CheckLane, LaneInput, LANES};
use crate::engine::{bit_len, strip_zeros, KeyComponents};
use std::marker::PhantomData;
use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

/// A four-lane vertical kernel as this layer drives it: its radix, its batch classes, its
/// check sizes, and its two exponentiations (by class: the kernels are compiled per limb
/// count).
pub trait Lanes: 'static {
    /// The family's name, description and vendor id (see `Family`).
    const NAME: &'static str;
    const DESCRIPTION: &'static str;
    const VENDOR_ID: u64;
    /// Radix of the private-key kernel.
    const W: u32;
    /// Bits R = 2^(W·L) needs above a prime's: 2 for R ≥ 4p, and the multiplier's where the
    /// kernel reduces by a multiple k·p of the prime (`exp::Arith::modulus`; the fma kernel's
    /// k has 70 bits).
    const HEADROOM: usize;
    /// Limb counts of a prime with a compiled kernel (batch classes, for RSA-1024, 2048, 3072
    /// and 4096), each with R = 2^(W·L) ≥ 4p for the primes of its class.
    const LIMB_COUNTS: [usize; 4];
    /// The known-answer digests (`kat.rs`), computed independently.
    const KAT_DIGESTS: [&'static str; 8];
    /// Whether this CPU runs the kernel.
    fn available() -> bool;
    /// Whether the calling thread can run it now (the fma kernel needs the default
    /// floating-point environment); where not, the family returns unverified results and
    /// the reference path serves the operation.
    fn ready() -> bool {
        true
    }
    /// base^exp mod m for every lane (at most `LANES`), fully reduced, at the limb count of
    /// `class`; `exp_bits` (public) bounds every lane's exponent.
    fn modexp(class: usize, lanes: &[LaneInput], exp_bits: usize) -> Vec<Vec<u64>>;
    /// s^e mod m and c mod m for every lane (`exp::check_residues`), at the limb count of
    /// `class`.
    fn check_residues(class: usize, lanes: &[CheckLane]) -> Vec<(Vec<u64>, Vec<u64>)>;
    /// For `benches/rsa_stages.rs`: TSC cycles of one multiplication, one squaring and one
    /// table scan at the limb count of `class` (minimum over `reps` timed runs), and the
    /// exponentiation's window bits there.
    #[doc(hidden)]
    fn op_cycles(class: usize, reps: usize) -> [u64; 4];
}

/// The class of a prime of this many bits, if one is compiled.
pub fn class_of<K: Lanes>(prime_bits: usize) -> Option<usize> {
    K::LIMB_COUNTS
        .iter()
        .position(|&l| l == (prime_bits + K::HEADROOM).div_ceil(K::W as usize))
}

/// Everything one CRT half needs.
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct Half {
    pub m: Vec<u64>,
    pub k0: u64,
    pub rr: Vec<u64>,
    pub rrr: Vec<u64>,
    /// d mod (m − 1) as little-endian 64-bit words.
    pub exp: Vec<u64>,
}

/// A key in one kernel's form (the type names the kernel: a form is never given to the other).
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct CrtKey<K: Lanes> {
    #[zeroize(skip)]
    pub class: usize,
    #[zeroize(skip)]
    pub limbs: usize,
    #[zeroize(skip)]
    pub prime_bits: usize,
    pub p: Half,
    pub q: Half,
    /// qInv·R mod p: Garner's product as one Montgomery multiplication.
    pub qinv_r: Vec<u64>,
    #[zeroize(skip)]
    pub e: u64,
    #[zeroize(skip)]
    pub modulus_len: usize,
    /// The public modulus, big-endian without leading zeros.
    #[zeroize(skip)]
    pub n_be: Vec<u8>,
    #[zeroize(skip)]
    kernel: PhantomData<fn() -> K>,
}

fn half(prime: &[u8], exp: &[u8], limbs: usize, w: u32) -> Half {
    let mut m = vec![0u64; limbs];
    limbs::from_be_bytes(prime, w, &mut m);
    let [mut r1, rr, rrr] = limbs::powers_of_r(&m, w);
    r1.zeroize();
    // Every byte of the exponent as stored, leading zeros included (skipping them would
    // branch on its secret top bytes); one spare word for windows that straddle the top.
    let words = bit_len(prime).div_ceil(64).max(exp.len().div_ceil(8)) + 1;
    let mut e = vec![0u64; words];
    for (i, &byte) in exp.iter().rev().enumerate() {
        e[i / 8] |= (byte as u64) << (8 * (i % 8));
    }
    Half {
        k0: limbs::mont_k0(m[0], w),
        m,
        rr,
        rrr,
        exp: e,
    }
}

impl<K: Lanes> CrtKey<K> {
    /// The kernel's form of a key the reference already validated; None for keys it does not
    /// take (primes of unequal lengths, sizes without a kernel, missing CRT components).
    pub fn new(c: &KeyComponents) -> Option<CrtKey<K>> {
        let w = K::W;
        let (pb, qb) = (bit_len(&c.prime_1), bit_len(&c.prime_2));
        let e = strip_zeros(&c.public_exponent);
        if pb != qb
            || c.exponent_1.is_empty()
            || c.exponent_2.is_empty()
            || c.coefficient.is_empty()
            || e.is_empty()
            || e.len() > 8
        {
            return None;
        }
        let class = class_of::<K>(pb)?;
        let limbs = K::LIMB_COUNTS[class];
        let p = half(&c.prime_1, &c.exponent_1, limbs, w);
        let q = half(&c.prime_2, &c.exponent_2, limbs, w);
        let mut qinv = vec![0u64; limbs];
        limbs::from_be_bytes(&c.coefficient, w, &mut qinv);
        let mut qinv_r = vec![0u64; limbs];
        limbs::amm_into(&qinv, &p.rr, &p.m, p.k0, w, &mut qinv_r);
        let mut scratch = vec![0u64; limbs];
        limbs::reduce_once(&mut qinv_r, &p.m, w, &mut scratch);
        qinv.zeroize();
        scratch.zeroize();
        Some(CrtKey {
            class,
            limbs,
            prime_bits: pb,
            e: e.iter().fold(0u64, |a, &b| (a << 8) | b as u64),
            p,
            q,
            qinv_r,
            modulus_len: bit_len(&c.modulus).div_ceil(8),
            n_be: strip_zeros(&c.modulus).to_vec(),
            kernel: PhantomData,
        })
    }

    /// The input split for the kernel: the low and high L limbs (c < n < R²).
    #[doc(hidden)]
    pub fn split_input(&self, input: &[u8]) -> (Vec<u64>, Vec<u64>) {
        let mut c = vec![0u64; 2 * self.limbs];
        limbs::from_be_bytes(input, K::W, &mut c);
        let hi = c.split_off(self.limbs);
        (c, hi)
    }

    /// Garner: s = m2 + q·(qInv·(m1 − m2) mod p), serialised at the modulus length, with the
    /// intermediates on the stack, wiped before returning.
    #[doc(hidden)]
    pub fn recombine(&self, m1: &[u64], m2: &[u64]) -> Zeroizing<Vec<u8>> {
        let (p, l, w) = (&self.p, self.limbs, K::W);
        let mut t = [[0u64; MAX_SCALAR]; 4];
        let [m2p, d, diff, scratch] = &mut t;
        let (m2p, d, diff, scratch) = (&mut m2p[..l], &mut d[..l], &mut diff[..l], &mut scratch[..l]);
        // m2 < q < 2p (equal bit lengths): one conditional subtraction gives m2 mod p.
        m2p.copy_from_slice(m2);
        limbs::reduce_once(m2p, &p.m, w, scratch);
        let borrow = limbs::sub_into(m1, m2p, w, d);
        // (m1 − m2) mod p: the difference, or the difference plus p where it borrowed.
        limbs::add_into(d, &p.m, w, diff);
        limbs::select_into(borrow ^ 1, d, diff);
        limbs::amm_into(diff, &self.qinv_r, &p.m, p.k0, w, m2p);
        limbs::reduce_once(m2p, &p.m, w, scratch);
        let mut wide = [[0u64; 2 * MAX_SCALAR]; 3];
        let [hq, m2w, s] = &mut wide;
        let (hq, m2w, s) = (&mut hq[..2 * l], &mut m2w[..2 * l], &mut s[..2 * l]);
        limbs::mul_into(m2p, &self.q.m, w, hq);
        m2w[..l].copy_from_slice(m2);
        limbs::add_into(hq, m2w, w, s);
        let out = Zeroizing::new(limbs::to_be_bytes(s, w, self.modulus_len));
        t.zeroize();
        wide.zeroize();
        out
    }
}

/// Private-key operations of up to two signatures (four lanes) of one class, each with
/// whether it passed the public-key check (it must not be released otherwise).
pub fn private_op_batch<K: Lanes>(jobs: &[(&CrtKey<K>, &[u8])]) -> Vec<(Zeroizing<Vec<u8>>, bool)> {
    let results = private_op_unchecked(jobs);
    let verified = verify_batch(jobs, &results);
    results.into_iter().zip(verified).collect()
}

/// The secret-dependent part of `private_op_batch`: results not yet checked. Constant time
/// in the keys and the inputs (tests/constant_time.rs runs it under valgrind).
pub fn private_op_unchecked<K: Lanes>(jobs: &[(&CrtKey<K>, &[u8])]) -> Vec<Zeroizing<Vec<u8>>> {
    assert!(!jobs.is_empty() && jobs.len() * 2 <= LANES);
    let class = jobs[0].0.class;
    assert!(jobs.iter().all(|(k, _)| k.class == class));
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
    let mut out = K::modexp(class, &lanes, exp_bits);
    let results = jobs
        .iter()
        .enumerate()
        .map(|(i, (key, _))| key.recombine(&out[2 * i], &out[2 * i + 1]))
        .collect();
    out.zeroize();
    drop(lanes);
    for (lo, hi) in splits.iter_mut() {
        lo.zeroize();
        hi.zeroize();
    }
    results
}

/// Whether big-endian `x` is below big-endian `n` (public values; n has no leading zeros).
fn below(x: &[u8], n: &[u8]) -> bool {
    let x = strip_zeros(x);
    x.len() < n.len() || (x.len() == n.len() && x < n)
}

/// s^e mod n == input for every job (the public-key check of every result before release),
/// as s^e ≡ c modulo p and modulo q with s and c below n: the same statement, by the Chinese
/// remainder theorem. It runs on the kernel that signed, the two primes of every signature as
/// its lanes: half-size operations, a quarter of the products of a full-size step each. On a
/// Zen 3 the check of two RSA-2048 signatures took 93-96 k TSC cycles at full size on the mulx
/// arithmetic and takes 40-44 k so (docs/performance.md, "The check modulo the primes").
/// What it adds to the fault model: the primes are read again, so a prime damaged in memory
/// fails the check against exponents made for the right one.
pub fn verify_batch<K: Lanes>(jobs: &[(&CrtKey<K>, &[u8])], sigs: &[Zeroizing<Vec<u8>>]) -> Vec<bool> {
    let class = jobs[0].0.class;
    let mut verdict: Vec<bool> = jobs
        .iter()
        .zip(sigs)
        .map(|((k, c), s)| s.len() == k.modulus_len && below(s, &k.n_be) && below(c, &k.n_be))
        .collect();
    let mut splits: Vec<[(Vec<u64>, Vec<u64>); 2]> = jobs
        .iter()
        .zip(sigs)
        .zip(&verdict)
        .map(|(((k, c), s), &ok)| {
            let zero: &[u8] = &[];
            let (s, c) = if ok { (&s[..], *c) } else { (zero, zero) };
            [k.split_input(s), k.split_input(c)]
        })
        .collect();
    let mut lanes = Vec::with_capacity(2 * jobs.len());
    for ((key, _), [s, c]) in jobs.iter().zip(&splits) {
        for h in [&key.p, &key.q] {
            lanes.push(CheckLane {
                s: (&s.0, &s.1),
                c: (&c.0, &c.1),
                m: &h.m,
                k0: h.k0,
                rr: &h.rr,
                rrr: &h.rrr,
                e: key.e,
            });
        }
    }
    let mut residues = K::check_residues(class, &lanes);
    for (i, v) in verdict.iter_mut().enumerate() {
        let equal = |(y, z): &(Vec<u64>, Vec<u64>)| y.iter().zip(z).fold(0, |d, (a, b)| d | (a ^ b)) == 0;
        *v &= equal(&residues[2 * i]) & equal(&residues[2 * i + 1]);
    }
    drop(lanes);
    for (y, z) in residues.iter_mut() {
        y.zeroize();
        z.zeroize();
    }
    splits.zeroize();
    verdict
}

/// The CRT layer's tests, run for each kernel by `four_lane_tests!` (`avx2::tests`,
/// `fma::tests`).
#[cfg(test)]
pub(crate) mod tests {
    /// The tests every four-lane kernel runs: its known answers, signatures against the
    /// reference at every size and batch width, the keys it refuses, exponent edge cases.
    macro_rules! four_lane_tests {
        ($k:ty) => {
            #[test]
            fn kernel_gives_the_known_answers() {
                use $crate::engine::kernel::avx2::{crt::Lanes, kat};
                if !<$k>::available() {
                    eprintln!("this CPU does not run the {} kernel", <$k>::NAME);
                    return;
                }
                assert_eq!(kat::digests::<$k>(), <$k>::KAT_DIGESTS.to_vec());
            }

            #[test]
            fn kernel_matches_reference_for_every_size_and_batch_width() {
                $crate::engine::kernel::avx2::crt::tests::kernel_matches_reference_for_every_size_and_batch_width::<$k>();
            }

            #[test]
            fn the_check_refuses_every_wrong_result() {
                $crate::engine::kernel::avx2::crt::tests::the_check_refuses_every_wrong_result::<$k>();
            }

            #[test]
            fn keys_it_cannot_take_are_refused() {
                $crate::engine::kernel::avx2::crt::tests::keys_it_cannot_take_are_refused::<$k>();
            }

            #[test]
            fn exponent_edge_cases() {
                $crate::engine::kernel::avx2::crt::tests::exponent_edge_cases::<$k>();
            }
        };
    }
    pub(crate) use four_lane_tests;

    use super::*;
    use crate::engine::kernel::check_cases;
    use crate::engine::PreparedKey;

    fn key(bits: usize) -> (KeyComponents, PreparedKey) {
        let c = crate::engine::generate(bits, &[1, 0, 1]).unwrap();
        let k = PreparedKey::new(&c).unwrap();
        (c, k)
    }

    fn be_minus_1(v: &[u8]) -> Vec<u8> {
        let mut out = v.to_vec();
        for b in out.iter_mut().rev() {
            let (r, borrow) = b.overflowing_sub(1);
            *b = r;
            if !borrow {
                break;
            }
        }
        out
    }

    /// Every size, one and two signatures per call, mixed keys, edge inputs: the kernel's
    /// signatures equal the reference's and pass the check.
    pub(crate) fn kernel_matches_reference_for_every_size_and_batch_width<K: Lanes>() {
        if !K::available() {
            eprintln!("this CPU does not run the {} kernel", K::NAME);
            return;
        }
        for bits in [1024usize, 2048, 3072, 4096] {
            let keys: Vec<_> = (0..2).map(|_| key(bits)).collect();
            let crt: Vec<CrtKey<K>> = keys.iter().map(|(c, _)| CrtKey::new(c).unwrap()).collect();
            assert_eq!(
                crt[0].class,
                K::LIMB_COUNTS
                    .iter()
                    .position(|&l| l * K::W as usize >= bits / 2 + K::HEADROOM)
                    .unwrap()
            );
            let k = bits / 8;
            let pad = |v: &[u8]| {
                let mut out = vec![0u8; k - v.len()];
                out.extend_from_slice(v);
                out
            };
            let c0 = &keys[0].0;
            let mut inputs: Vec<Vec<u8>> = vec![
                vec![0; k],
                pad(&[1]),
                be_minus_1(&c0.modulus),
                pad(&c0.prime_1),
                pad(&c0.prime_2),
                pad(&be_minus_1(&c0.prime_1)),
            ];
            for _ in 0..4 {
                let mut v = vec![0u8; k];
                getrandom::fill(&mut v).unwrap();
                v[0] &= 0x7f;
                inputs.push(v);
            }
            let mut compared = 0;
            for width in 1..=LANES / 2 {
                for chunk in inputs.chunks(width) {
                    // Mixed keys in one batch.
                    let jobs: Vec<(&CrtKey<K>, &[u8])> = chunk
                        .iter()
                        .enumerate()
                        .map(|(i, c)| (&crt[i % 2], c.as_slice()))
                        .collect();
                    let got = private_op_batch(&jobs);
                    for (i, c) in chunk.iter().enumerate() {
                        let reference = keys[i % 2].1.inner.private_op_checked(c, k);
                        // Inputs ≥ n (possible for the second key) are refused upstream.
                        if let Ok(r) = reference {
                            assert_eq!(&got[i].0[..], &r[..], "RSA-{bits}, width {width}, input {i}");
                            assert!(got[i].1, "RSA-{bits}: a correct result failed the check");
                            compared += 1;
                        }
                    }
                }
            }
            assert!(compared >= 16, "RSA-{bits}: only {compared} results compared");
        }
    }

    /// The check's verdicts on the table of right and wrong results (`kernel::check_cases`),
    /// each equal to the rsa crate's: alone and beside a right result of another key, in both
    /// places.
    pub(crate) fn the_check_refuses_every_wrong_result<K: Lanes>() {
        if !K::available() {
            eprintln!("this CPU does not run the {} kernel", K::NAME);
            return;
        }
        for bits in [1024usize, 2048] {
            let keys: Vec<_> = (0..2).map(|_| key(bits)).collect();
            let crt: Vec<CrtKey<K>> = keys.iter().map(|(c, _)| CrtKey::new(c).unwrap()).collect();
            let k = bits / 8;
            let mut input = vec![0x6bu8; k];
            input[0] = 0x01;
            let sig = private_op_unchecked(&[(&crt[0], input.as_slice())])
                .remove(0)
                .to_vec();
            let cases = check_cases::cases(&keys[0].0, &keys[0].1, &sig, &input);
            let other_input = vec![0x22u8; k];
            let other = private_op_unchecked(&[(&crt[1], other_input.as_slice())]).remove(0);
            for case in &cases {
                let (name, c, valid) = (case.name, &case.input, case.valid);
                let s = Zeroizing::new(case.sig.clone());
                let alone = verify_batch(&[(&crt[0], c.as_slice())], std::slice::from_ref(&s));
                assert_eq!(alone, [valid], "RSA-{bits}, {name}, alone");
                let first = verify_batch(
                    &[(&crt[0], c.as_slice()), (&crt[1], other_input.as_slice())],
                    &[s.clone(), other.clone()],
                );
                assert_eq!(first, [valid, true], "RSA-{bits}, {name}, first of two");
                let second = verify_batch(
                    &[(&crt[1], other_input.as_slice()), (&crt[0], c.as_slice())],
                    &[other.clone(), s.clone()],
                );
                assert_eq!(second, [true, valid], "RSA-{bits}, {name}, second of two");
            }
        }
    }

    pub(crate) fn keys_it_cannot_take_are_refused<K: Lanes>() {
        let (mut c, _) = key(1024);
        // Unequal prime lengths.
        let mut shorter = c.clone();
        shorter.prime_2 = Zeroizing::new(c.prime_2[1..].to_vec());
        assert!(CrtKey::<K>::new(&shorter).is_none());
        // A size without a kernel (primes of 600 bits).
        assert!(
            class_of::<K>(600).is_none() && class_of::<K>(512).is_some() && class_of::<K>(2048).is_some()
        );
        // Missing CRT components.
        c.coefficient = Zeroizing::new(vec![]);
        assert!(CrtKey::<K>::new(&c).is_none());
    }

    /// Exponent edge cases on the raw kernel with a prime modulus: x^0 = 1, x^1 = x,
    /// x^(p−1) = 1 (Fermat, a full-width exponent), x^(p−2)·x = 1, 0^e = 0, on 1..4 lanes.
    pub(crate) fn exponent_edge_cases<K: Lanes>() {
        if !K::available() {
            return;
        }
        fn at<K: Lanes>(class: usize, bits: usize) {
            let (c, _) = key(bits);
            let (l, w) = (K::LIMB_COUNTS[class], K::W);
            let mut m = vec![0u64; l];
            limbs::from_be_bytes(&c.prime_1, w, &mut m);
            let k0 = limbs::mont_k0(m[0], w);
            let [r1, rr, rrr] = limbs::powers_of_r(&m, w);
            let pbits = bit_len(&c.prime_1);
            let words = |b: &[u8]| {
                let mut w = vec![0u64; b.len().div_ceil(8) + 1];
                for (i, &byte) in b.iter().rev().enumerate() {
                    w[i / 8] |= (byte as u64) << (8 * (i % 8));
                }
                w
            };
            let p_minus_1 = words(&be_minus_1(&c.prime_1));
            let p_minus_2 = words(&be_minus_1(&be_minus_1(&c.prime_1)));
            let mut x = r1.clone(); // R mod p: below p, not special
            x[0] ^= 1 << 5;
            let zero = vec![0u64; l];
            let mut one = vec![0u64; l];
            one[0] = 1;
            // (base, exponent, expected: None for the inverse, checked by multiplying back)
            type Case<'a> = (&'a [u64], Vec<u64>, Option<&'a [u64]>);
            let cases: Vec<Case> = vec![
                (&x, vec![0], Some(&one)),
                (&x, vec![1], Some(&x)),
                (&x, p_minus_1.clone(), Some(&one)),
                (&x, p_minus_2, None),
                (&zero, p_minus_1, Some(&zero)),
                (&zero, vec![0], Some(&one)),
            ];
            for lanes in 1..=LANES {
                for case in cases.chunks(lanes) {
                    let input: Vec<LaneInput> = case
                        .iter()
                        .map(|(b, e, _)| LaneInput {
                            lo: b,
                            hi: &zero,
                            m: &m,
                            k0,
                            rr: &rr,
                            rrr: &rrr,
                            exp: e,
                        })
                        .collect();
                    let out = K::modexp(class, &input, pbits);
                    for ((_, e, want), r) in case.iter().zip(&out) {
                        match want {
                            Some(w) => {
                                assert_eq!(&r[..], *w, "{l} limbs, {lanes} lanes, exponent {:x}", e[0])
                            }
                            None => {
                                // x·x^(p−2)/R, times R²/R: 1.
                                let (mut t, mut u, mut s) = (vec![0u64; l], vec![0u64; l], vec![0u64; l]);
                                limbs::amm_into(r, &x, &m, k0, w, &mut t);
                                limbs::amm_into(&t, &rr, &m, k0, w, &mut u);
                                limbs::reduce_once(&mut u, &m, w, &mut s);
                                assert_eq!(u, one, "x·x^(p−2) at {l} limbs, {lanes} lanes");
                            }
                        }
                    }
                }
            }
        }
        for (class, bits) in [1024, 2048, 3072, 4096].into_iter().enumerate() {
            at::<K>(class, bits);
        }
    }
}
