//! The AVX-512 IFMA family: radix 2^52 multi-buffer exponentiation on 8, 4 or 2 lanes by
//! batch fill (`vertical.rs`), the check of a lone signature across the lanes
//! (`horizontal.rs`), CRT and Garner in kernel form (`crt.rs`), scalar radix-2^52 helpers
//! (`radix52.rs`) and the known-answer test (`kat.rs`). This file is its side of the seam.

pub mod crt;
pub mod horizontal;
pub mod kat;
pub mod radix52;
pub mod vertical;

pub use vertical::{available, modexp, powmod_public, Kernel, LANES};

use super::{Checked, Family, KeyForm, KeySource};
use std::sync::Arc;
use zeroize::Zeroizing;

/// The family object in `REGISTRY`.
pub struct Ifma;

impl Family for Ifma {
    fn name(&self) -> &'static str {
        "ifma"
    }

    fn description(&self) -> &'static str {
        "AVX-512 IFMA (2/4/8 lanes by batch)"
    }

    fn vendor_id(&self) -> u64 {
        1
    }

    fn available(&self) -> bool {
        vertical::available()
    }

    fn serves_bits(&self, modulus_bits: usize) -> bool {
        // Two equal primes of half the modulus each; the limb count of a prime must be
        // compiled (see `CrtKey::new`).
        crt::LIMB_COUNTS.contains(&(modulus_bits / 2 + 8).div_ceil(52))
    }

    fn max_batch(&self) -> usize {
        LANES / 2
    }

    fn classes(&self) -> usize {
        crt::LIMB_COUNTS.len()
    }

    fn prepare(&self, key: &KeySource) -> Option<(usize, Arc<KeyForm>)> {
        let k = crt::CrtKey::new(key.components)?;
        let class = crt::LIMB_COUNTS.iter().position(|&l| l == k.limbs)?;
        Some((class, Arc::new(k)))
    }

    fn private_op_batch(&self, jobs: &[(&KeyForm, &[u8])]) -> Vec<Checked> {
        assert!(
            self.available(),
            "the scheduler runs a family only where it is available"
        );
        crt::private_op_batch(Kernel::Avx512, &own(jobs))
    }

    fn known_answer_test(&self) -> bool {
        kat::ifma_known_answers()
    }

    fn private_op_for_ct(&self, jobs: &[(&KeyForm, &[u8])]) -> Option<Vec<Zeroizing<Vec<u8>>>> {
        // valgrind cannot execute AVX-512: the emulated build runs the same generic code
        // (windows, masked selects, loops) with each IFMA instruction replaced by branch-free
        // integer code, and the instructions themselves take time independent of operands.
        Some(crt::private_op_unchecked(Kernel::Emulated, &own(jobs)))
    }
}

/// The jobs with their keys in this family's form.
fn own<'a>(jobs: &[(&'a KeyForm, &'a [u8])]) -> Vec<(&'a crt::CrtKey, &'a [u8])> {
    jobs.iter()
        .map(|(form, input)| {
            let key = form
                .downcast_ref::<crt::CrtKey>()
                .expect("a form the IFMA family prepared");
            (key, *input)
        })
        .collect()
}
