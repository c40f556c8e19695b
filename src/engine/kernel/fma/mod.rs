//! The fma family, for x86-64 CPUs with AVX2 and FMA but without AVX-512 IFMA (AMD Zen 1-3,
//! Intel from Haswell on): the avx2 family's four-lane design (`avx2::FourLanes`: two
//! signatures per call, their CRT halves as lanes; the CRT layer, the check, the known-answer
//! test) over a kernel that multiplies 51-bit limbs with the floating-point unit
//! (`vertical.rs`). This file is its side of the seam.

pub mod vertical;

use super::avx2::crt::Lanes;
use super::avx2::vertical::{CheckLane, LaneInput};
use super::avx2::FourLanes;
use std::marker::PhantomData;

/// The family object in `REGISTRY`.
pub const FMA: FourLanes<Fma51> = FourLanes(PhantomData);

/// Limb counts of a prime with a compiled kernel (batch classes): primes of 510 to 559,
/// 1,020 to 1,069, 1,530 to 1,579 and 2,040 to 2,089 bits (RSA-1024, 2048, 3072, 4096), with
/// R = 2^(51·L) ≥ 4·k0·p: the operations reduce by k0·p (`vertical::reduce`), one limb
/// longer than the prime needs.
const LIMBS: [usize; 4] = [12, 22, 32, 42];

/// The floating-point kernel of `vertical.rs`, radix 2^51.
pub struct Fma51;

impl Lanes for Fma51 {
    const NAME: &'static str = "fma";
    const DESCRIPTION: &'static str = "AVX2 FMA multi-buffer, 51-bit limbs (4 lanes: 2 signatures per call)";
    const VENDOR_ID: u64 = 5;
    const W: u32 = vertical::W;
    const HEADROOM: usize = 2 + vertical::W as usize;
    const LIMB_COUNTS: [usize; 4] = LIMBS;
    /// Computed with Python's `pow` over the inputs of `avx2::kat::inputs` at these limb
    /// counts and radix.
    const KAT_DIGESTS: [&'static str; 8] = [
        "43d024ee009d4d58b7ceceb834a0144eb44ce33b378c3c46f5e4fec41ce4da76",
        "7424497b5572ae0257c05e11d03ced133cf31f6ddc1fd0725745dfb0f6b6da1d",
        "41bac32fc1ef995c976e8139c49790bbdf1980bc02626d03a37369574ef78c1c",
        "96188d23d3483b4f26fae451d21b132e9d1e3e49f6bdbc588a1f82e4f2641602",
        "67e375010af6ae45642ba6af47e8e11af157bdbc97366336fae0b7ee5c28b0e4",
        "13d79f188c247b07aa5fd2adcc2322f03a3fb1219f36771f9ac6a39cec93f52e",
        "7939627e359e45d6517118168c3e7646960302b09e192b7cd40c9a5741123c32",
        "645e12bd7feed154e298cc778f203598bcb10e7e56d4426dfcbb0cc95a594b86",
    ];

    fn available() -> bool {
        vertical::available()
    }

    fn ready() -> bool {
        let ready = vertical::default_fp_env();
        if !ready {
            log::warn!(
                "the calling thread changed the floating-point environment (MXCSR rounding or \
                 exception masks); the fma RSA kernel needs the default one, so this operation \
                 runs on the reference path"
            );
        }
        ready
    }

    fn modexp(class: usize, lanes: &[LaneInput], exp_bits: usize) -> Vec<Vec<u64>> {
        match class {
            0 => vertical::modexp::<{ LIMBS[0] }>(lanes, exp_bits),
            1 => vertical::modexp::<{ LIMBS[1] }>(lanes, exp_bits),
            2 => vertical::modexp::<{ LIMBS[2] }>(lanes, exp_bits),
            _ => vertical::modexp::<{ LIMBS[3] }>(lanes, exp_bits),
        }
    }

    fn op_cycles(class: usize, reps: usize) -> [u64; 3] {
        match class {
            0 => vertical::op_cycles::<{ LIMBS[0] }>(reps),
            1 => vertical::op_cycles::<{ LIMBS[1] }>(reps),
            2 => vertical::op_cycles::<{ LIMBS[2] }>(reps),
            _ => vertical::op_cycles::<{ LIMBS[3] }>(reps),
        }
    }

    fn check_residues(class: usize, lanes: &[CheckLane]) -> Vec<(Vec<u64>, Vec<u64>)> {
        match class {
            0 => vertical::check_residues::<{ LIMBS[0] }>(lanes),
            1 => vertical::check_residues::<{ LIMBS[1] }>(lanes),
            2 => vertical::check_residues::<{ LIMBS[2] }>(lanes),
            _ => vertical::check_residues::<{ LIMBS[3] }>(lanes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::avx2::crt;
    use super::super::{Family, KeyForm};
    use super::{vertical, Fma51, Lanes, FMA};

    crt::tests::four_lane_tests!(super::Fma51);

    /// Sets this thread's MXCSR, returning the old value.
    fn set_mxcsr(v: u32) -> u32 {
        let mut old: u32 = 0;
        // SAFETY: stmxcsr stores MXCSR to a live local; ldmxcsr loads a valid value (reserved
        // bits zero) from one. The test restores the old value before any floating-point code
        // of its own runs.
        unsafe {
            std::arch::asm!("stmxcsr [{p}]", p = in(reg) &mut old, options(nostack, preserves_flags));
            std::arch::asm!("ldmxcsr [{p}]", p = in(reg) &v, options(nostack, preserves_flags));
        }
        old
    }

    /// A calling thread that changed the floating-point environment (here: rounding toward
    /// zero, or the inexact exception unmasked, which would trap in the kernel) gets no result
    /// from this family, unverified results the engine recomputes on the reference, never a
    /// wrong signature or a trap, and its known-answer test fails instead of running (the
    /// family then stays off); in the default environment the same calls sign and pass.
    #[test]
    fn a_changed_floating_point_environment_is_refused_not_miscomputed() {
        if !Fma51::available() {
            eprintln!("no AVX2 and FMA on this CPU");
            return;
        }
        let c = crate::engine::generate(1024, &[1, 0, 1]).unwrap();
        let key = crt::CrtKey::<Fma51>::new(&c).unwrap();
        let form: &KeyForm = &key;
        let mut input = vec![0x5au8; 128];
        input[0] = 0x01;
        let jobs = [(form, input.as_slice()), (form, input.as_slice())];
        // Round toward zero; precision exception unmasked.
        for mxcsr in [0x1f80 | 0x6000, 0x1f80 & !0x1000] {
            let old = set_mxcsr(mxcsr);
            let ready = vertical::default_fp_env();
            let results = FMA.private_op_batch(&jobs);
            let kat = FMA.known_answer_test();
            set_mxcsr(old);
            assert!(!ready, "MXCSR {mxcsr:#x} taken for the default");
            assert!(!kat, "MXCSR {mxcsr:#x}: the known-answer test ran");
            assert!(
                results.iter().all(|(sig, ok)| !ok && sig.is_empty()),
                "MXCSR {mxcsr:#x}: a result was released"
            );
        }
        assert!(vertical::default_fp_env());
        let results = FMA.private_op_batch(&jobs);
        assert!(results.iter().all(|(sig, ok)| *ok && sig.len() == 128));
        assert!(FMA.known_answer_test());
    }
}
