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

/// Limb counts of a prime with a compiled kernel (batch classes): primes of 490 to 540,
/// 1,000 to 1,050, 1,510 to 1,560 and 2,020 to 2,070 bits (RSA-1024, 2048, 3072, 4096), with
/// R = 2^(51·L) ≥ 4·k·p: the operations reduce by k·p, k = −p⁻¹ mod 2^70
/// (`vertical::scaled_modulus`), one limb longer than the prime needs.
const LIMBS: [usize; 4] = [12, 22, 32, 42];

/// The floating-point kernel of `vertical.rs`, radix 2^51.
pub struct Fma51;

impl Lanes for Fma51 {
    const NAME: &'static str = "fma";
    const DESCRIPTION: &'static str = "AVX2 FMA multi-buffer, 51-bit limbs (4 lanes: 2 signatures per call)";
    const VENDOR_ID: u64 = 5;
    const W: u32 = vertical::W;
    const HEADROOM: usize = 2 + vertical::SCALE_BITS as usize;
    const LIMB_COUNTS: [usize; 4] = LIMBS;
    /// Computed with Python's `pow` over the inputs of `avx2::kat::inputs` at these limb
    /// counts and radix.
    const KAT_DIGESTS: [&'static str; 8] = [
        "4255195a2755e8cd1692f624f723b4e2e76faad6b209724f26823e4dcb006b58",
        "1edb35deffffefb0f0d18dd4a203de55b2c2763b68fbc5f488ca9364ba67c620",
        "bfdbbc6d5fba2a6e43eeb86cd73c29e25b42c467c57cabb54547505882923156",
        "9af0bed300f645519cb110d5ee2224a9206f0b2aa12b6b41acd2814fc977a41a",
        "bbb53977e2a5fc3fb32995614f04c16179401d59979fd01178a0b9087141995b",
        "3891e43b0b6920e5493d4430d6c011b5f695c47b3f482074739a062dcad595d1",
        "a7ea163d47ca04f016c55a34934c0cd90aa5354fb8af802cec35a6d396b05207",
        "dbf20499902a5ee13d3716321e746bd63fc65bf8d91b3aa8085f3b91f3b09e90",
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

    fn op_cycles(class: usize, reps: usize) -> [u64; 4] {
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
