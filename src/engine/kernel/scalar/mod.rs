//! The scalar families: one Montgomery request at a time on the caller's thread, for CPUs
//! without a multi-buffer kernel and for lone requests where a partly empty batch would be
//! slower. One driver (`key.rs`: per-key constants; `exp.rs`: exponentiation, Garner, check),
//! generic over `Arith`, implemented twice: `portable.rs` (plain Rust, every CPU, every
//! two-prime key size) and `mulx.rs` (x86-64 BMI2+ADX inline assembly).

pub mod exp;
pub mod kat;
pub mod key;
pub mod limbs;
#[cfg(target_arch = "x86_64")]
pub mod mulx;
pub mod pair;
pub mod portable;
#[cfg(test)]
mod tests;

use super::{Checked, Family, KeyForm, KeySource};
use key::ScalarKey;
use std::marker::PhantomData;
use std::sync::Arc;
use zeroize::Zeroizing;

/// Montgomery arithmetic on little-endian 64-bit limbs, R = 2^(64·L), L = m.len(): inputs
/// below m, outputs fully reduced below m. Implementations run in time independent of the
/// values (the exponentiation relies on it).
pub trait Arith: 'static {
    const NAME: &'static str;
    const DESCRIPTION: &'static str;
    const VENDOR_ID: u64;
    /// Whether this CPU runs it.
    fn available() -> bool;
    /// Whether it serves primes of this many limbs (its `mul` serves any modulus up to
    /// `limbs::MAX_LIMBS`, for the public-key operation).
    fn serves_limbs(limbs: usize) -> bool;
    /// out = a·b·R⁻¹ mod m.
    fn mul(a: &[u64], b: &[u64], m: &[u64], k0: u64, out: &mut [u64]);
    /// out = a²·R⁻¹ mod m.
    fn sqr(a: &[u64], m: &[u64], k0: u64, out: &mut [u64]);
    /// The private operation without the check on the build the constant-time test runs under
    /// valgrind (`Family::private_op_for_ct`); None where that build cannot run.
    fn private_op_for_ct(key: &ScalarKey, input: &[u8]) -> Option<Zeroizing<Vec<u8>>>
    where
        Self: Sized,
    {
        Some(exp::private_op_unchecked::<Self>(key, input))
    }
    /// The check of `sig` (modulo the primes: it reads them) on the same build, its verdict
    /// as a mask (`exp::check_mask`, for `Family::check_for_ct`).
    fn check_for_ct(key: &ScalarKey, input: &[u8], sig: &[u8]) -> Option<u64>
    where
        Self: Sized,
    {
        Some(exp::check_mask::<Self>(key, input, sig))
    }
}

/// A scalar family: the driver over one arithmetic.
pub struct Scalar<A>(PhantomData<fn() -> A>);

pub const PORTABLE: Scalar<portable::Portable> = Scalar(PhantomData);
#[cfg(target_arch = "x86_64")]
pub const MULX: Scalar<mulx::Mulx> = Scalar(PhantomData);

impl<A: Arith> Scalar<A> {
    fn key<'a>(&self, form: &'a KeyForm) -> &'a ScalarKey {
        form.downcast_ref::<ScalarKey>()
            .expect("a form a scalar family prepared")
    }
}

impl<A: Arith> Family for Scalar<A> {
    fn name(&self) -> &'static str {
        A::NAME
    }

    fn description(&self) -> &'static str {
        A::DESCRIPTION
    }

    fn vendor_id(&self) -> u64 {
        A::VENDOR_ID
    }

    fn available(&self) -> bool {
        A::available()
    }

    fn serves_bits(&self, modulus_bits: usize) -> bool {
        A::serves_limbs((modulus_bits / 2).div_ceil(64))
    }

    fn max_batch(&self) -> usize {
        1
    }

    fn classes(&self) -> usize {
        1
    }

    fn prepare(&self, key: &KeySource) -> Option<(usize, Arc<KeyForm>)> {
        let c = key.components;
        // Keys stored without CRT parts get them from the validated reference form.
        let full;
        let c = if c.exponent_1.is_empty() || c.exponent_2.is_empty() || c.coefficient.is_empty() {
            full = key.reference.components();
            &full
        } else {
            c
        };
        let k = ScalarKey::new::<A>(c)?;
        Some((0, Arc::new(k)))
    }

    fn private_op_batch(&self, jobs: &[(&KeyForm, &[u8])]) -> Vec<Checked> {
        assert!(
            A::available(),
            "the scheduler runs a family only where it is available"
        );
        jobs.iter()
            .map(|(form, input)| exp::private_op::<A>(self.key(*form), input))
            .collect()
    }

    fn known_answer_test(&self) -> bool {
        kat::known_answers::<A>()
    }

    fn private_op_for_ct(&self, jobs: &[(&KeyForm, &[u8])]) -> Option<Vec<Zeroizing<Vec<u8>>>> {
        jobs.iter()
            .map(|(form, input)| A::private_op_for_ct(self.key(*form), input))
            .collect()
    }

    fn check_for_ct(&self, jobs: &[(&KeyForm, &[u8])], sigs: &[Zeroizing<Vec<u8>>]) -> Option<Vec<bool>> {
        jobs.iter()
            .zip(sigs)
            .map(|((form, input), sig)| A::check_for_ct(self.key(*form), input, sig))
            .collect::<Option<Vec<u64>>>()
            .map(|masks| masks.into_iter().map(|m| m != 0).collect())
    }
}
