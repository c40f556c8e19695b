//! The AVX2 family, for x86-64 CPUs without AVX-512 IFMA: radix-2^28 multi-buffer
//! exponentiation on four 64-bit lanes (`vertical.rs`; two signatures per call, their CRT
//! halves as lanes), the exponentiations over any four-lane arithmetic (`exp.rs`), CRT, Garner
//! and the public-key check in kernel form (`crt.rs`), scalar radix-2^w helpers (`limbs.rs`)
//! and the known-answer test (`kat.rs`). This file is its side
//! of the seam, and `FourLanes`, the family over any four-lane kernel: the fma family
//! (`../fma`) is the same family over a floating-point kernel.

pub mod crt;
pub mod exp;
pub mod kat;
pub mod limbs;
pub mod vertical;

use super::{Checked, Family, KeyForm, KeySource};
use crt::{CrtKey, Lanes};
use std::marker::PhantomData;
use std::sync::Arc;
use zeroize::Zeroizing;

/// A four-lane family: the CRT layer (`crt.rs`) over one kernel.
pub struct FourLanes<K>(pub PhantomData<fn() -> K>);

/// The family object in `REGISTRY`.
pub const AVX2: FourLanes<Int28> = FourLanes(PhantomData);

/// Limb counts of a prime with a compiled kernel (batch classes): primes of up to 530, 1034,
/// 1538 and 2070 bits (RSA-1024, 2048, 3072, 4096), with R = 2^(28·L) ≥ 4p.
const LIMBS: [usize; 4] = [19, 37, 55, 74];

/// The integer kernel of `vertical.rs`, radix 2^28.
pub struct Int28;

impl Lanes for Int28 {
    const NAME: &'static str = "avx2";
    const DESCRIPTION: &'static str = "AVX2 multi-buffer (4 lanes: 2 signatures per call)";
    const VENDOR_ID: u64 = 2;
    const W: u32 = vertical::W as u32;
    const HEADROOM: usize = 2;
    const LIMB_COUNTS: [usize; 4] = LIMBS;
    /// Computed with Python's `pow` over the same inputs (see `kat::inputs`).
    const KAT_DIGESTS: [&'static str; 8] = [
        "ba159cfe1cff025ac8cbe3ba6f60508ed9678e81409dd190f6e3d5e54d5b0479",
        "1b21d043278e1679e19d4eb720d44ccc29c83a2f4ac322b1de7e046fddf835f6",
        "c79ec65cec66f1e63cd66e3ffab532b2c70b9d8a3fbd0250e1b417fb0144b78b",
        "415a8a1a9db51364610a1300dafe5de40d626df774e20d5e648aecdd1de1c451",
        "692d446b710f51675207931ca144201f42c5e5db8312b24397cf60fa17ed8146",
        "0d728ed8c69a93a69fa79d520c92144aae6ad118580a6cdaa970f2665166fb4f",
        "0166751b04df943d7b1d37bbd73d18dc5b1e2b7955909b7cbb256b7c9b88ca15",
        "9a485689fc9b6c9af89eb969a04a3f9b4cd02eea0aa22a40695efceecc0db5c4",
    ];

    fn available() -> bool {
        vertical::available()
    }

    fn modexp(class: usize, lanes: &[vertical::LaneInput], exp_bits: usize) -> Vec<Vec<u64>> {
        match class {
            0 => vertical::modexp::<{ LIMBS[0] }>(lanes, exp_bits),
            1 => vertical::modexp::<{ LIMBS[1] }>(lanes, exp_bits),
            2 => vertical::modexp::<{ LIMBS[2] }>(lanes, exp_bits),
            _ => vertical::modexp::<{ LIMBS[3] }>(lanes, exp_bits),
        }
    }

    fn check_residues(class: usize, lanes: &[vertical::CheckLane]) -> Vec<(Vec<u64>, Vec<u64>)> {
        match class {
            0 => vertical::check_residues::<{ LIMBS[0] }>(lanes),
            1 => vertical::check_residues::<{ LIMBS[1] }>(lanes),
            2 => vertical::check_residues::<{ LIMBS[2] }>(lanes),
            _ => vertical::check_residues::<{ LIMBS[3] }>(lanes),
        }
    }

    fn op_cycles(class: usize, reps: usize) -> [u64; 4] {
        match class {
            0 => vertical::op_cycles::<{ LIMBS[0] }>(reps),
            1 => vertical::op_cycles::<{ LIMBS[1] }>(reps),
            2 => vertical::op_cycles::<{ LIMBS[2] }>(reps),
            _ => vertical::op_cycles::<{ LIMBS[3] }>(reps),
        }
    }
}

impl<K: Lanes> Family for FourLanes<K> {
    fn name(&self) -> &'static str {
        K::NAME
    }

    fn description(&self) -> &'static str {
        K::DESCRIPTION
    }

    fn vendor_id(&self) -> u64 {
        K::VENDOR_ID
    }

    fn available(&self) -> bool {
        K::available()
    }

    fn serves_bits(&self, modulus_bits: usize) -> bool {
        // Two primes of half the modulus each (`CrtKey::new` refuses unequal ones).
        crt::class_of::<K>(modulus_bits.div_ceil(2)).is_some()
    }

    fn max_batch(&self) -> usize {
        vertical::LANES / 2
    }

    fn classes(&self) -> usize {
        K::LIMB_COUNTS.len()
    }

    fn prepare(&self, key: &KeySource) -> Option<(usize, Arc<KeyForm>)> {
        let k = CrtKey::<K>::new(key.components)?;
        Some((k.class, Arc::new(k)))
    }

    fn private_op_batch(&self, jobs: &[(&KeyForm, &[u8])]) -> Vec<Checked> {
        match own::<K>(jobs) {
            Some(jobs) if self.available() && K::ready() => crt::private_op_batch(&jobs),
            // Never reached through the scheduler (it runs a family only where it is
            // available, with forms it prepared); unverified results are never released.
            _ => jobs.iter().map(|_| (Zeroizing::new(Vec::new()), false)).collect(),
        }
    }

    fn known_answer_test(&self) -> bool {
        // On a thread where the kernel cannot run (`Lanes::ready`), the test fails rather than
        // run it: the family stays off instead of computing, or trapping, there.
        self.available() && K::ready() && kat::known_answers::<K>()
    }

    fn private_op_for_ct(&self, jobs: &[(&KeyForm, &[u8])]) -> Option<Vec<Zeroizing<Vec<u8>>>> {
        // valgrind executes AVX2 and FMA: the build that serves requests is the one under test.
        if !self.available() {
            return None;
        }
        own::<K>(jobs).map(|jobs| crt::private_op_unchecked(&jobs))
    }

    fn check_for_ct(&self, jobs: &[(&KeyForm, &[u8])], sigs: &[Zeroizing<Vec<u8>>]) -> Option<Vec<bool>> {
        if !self.available() {
            return None;
        }
        own::<K>(jobs).map(|jobs| crt::verify_batch(&jobs, sigs))
    }
}

/// The jobs with their keys in this kernel's form (None if a form is another family's).
fn own<'a, K: Lanes>(jobs: &[(&'a KeyForm, &'a [u8])]) -> Option<Vec<(&'a CrtKey<K>, &'a [u8])>> {
    jobs.iter()
        .map(|(form, input)| Some((form.downcast_ref::<CrtKey<K>>()?, *input)))
        .collect()
}

#[cfg(test)]
mod tests {
    super::crt::tests::four_lane_tests!(super::Int28);
}
