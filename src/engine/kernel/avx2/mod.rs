//! The AVX2 family, for x86-64 CPUs without AVX-512 IFMA: radix-2^28 multi-buffer
//! exponentiation on four 64-bit lanes (`vertical.rs`; two signatures per call, their CRT
//! halves as lanes), CRT, Garner and the public-key check in kernel form (`crt.rs`), scalar
//! radix-2^w helpers (`limbs.rs`) and the known-answer test (`kat.rs`). This file is its side
//! of the seam.

pub mod crt;
pub mod kat;
pub mod limbs;
pub mod vertical;

use super::{Checked, Family, KeyForm, KeySource};
use std::sync::Arc;
use zeroize::Zeroizing;

/// The family object in `REGISTRY`.
pub struct Avx2;

impl Family for Avx2 {
    fn name(&self) -> &'static str {
        "avx2"
    }

    fn description(&self) -> &'static str {
        "AVX2 multi-buffer (4 lanes: 2 signatures per call)"
    }

    fn vendor_id(&self) -> u64 {
        2
    }

    fn available(&self) -> bool {
        vertical::available()
    }

    fn serves_bits(&self, modulus_bits: usize) -> bool {
        // Two primes of half the modulus each (`CrtKey::new` refuses unequal ones).
        crt::class_of(modulus_bits.div_ceil(2)).is_some()
    }

    fn max_batch(&self) -> usize {
        vertical::LANES / 2
    }

    fn classes(&self) -> usize {
        crt::LIMB_COUNTS.len()
    }

    fn prepare(&self, key: &KeySource) -> Option<(usize, Arc<KeyForm>)> {
        let k = crt::CrtKey::new(key.components)?;
        Some((k.class, Arc::new(k)))
    }

    fn private_op_batch(&self, jobs: &[(&KeyForm, &[u8])]) -> Vec<Checked> {
        match own(jobs) {
            Some(jobs) if self.available() => crt::private_op_batch(&jobs),
            // Never reached through the scheduler (it runs a family only where it is
            // available, with forms it prepared); unverified results are never released.
            _ => jobs.iter().map(|_| (Zeroizing::new(Vec::new()), false)).collect(),
        }
    }

    fn known_answer_test(&self) -> bool {
        self.available() && kat::known_answers()
    }

    fn private_op_for_ct(&self, jobs: &[(&KeyForm, &[u8])]) -> Option<Vec<Zeroizing<Vec<u8>>>> {
        // valgrind executes AVX2: the build that serves requests is the one under test.
        if !self.available() {
            return None;
        }
        own(jobs).map(|jobs| crt::private_op_unchecked(&jobs))
    }
}

/// The jobs with their keys in this family's form (None if a form is another family's).
fn own<'a>(jobs: &[(&'a KeyForm, &'a [u8])]) -> Option<Vec<(&'a crt::CrtKey, &'a [u8])>> {
    jobs.iter()
        .map(|(form, input)| Some((form.downcast_ref::<crt::CrtKey>()?, *input)))
        .collect()
}
