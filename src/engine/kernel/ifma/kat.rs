//! Known-answer test of the IFMA family, run at every `C_Initialize` (a few milliseconds):
//! eight lanes of modular exponentiation at every compiled limb count against digests computed
//! independently.

use sha2::{Digest, Sha256};

/// Deterministic test data: SHA-256 in counter mode over a label.
fn stream(label: &str, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 32);
    let mut i = 0u32;
    while out.len() < len {
        let mut h = Sha256::new();
        h.update(label.as_bytes());
        h.update(i.to_be_bytes());
        out.extend_from_slice(&h.finalize());
        i += 1;
    }
    out.truncate(len);
    out
}

/// Inputs of lane `k` at `limbs`: modulus (odd, top bit set, 52·L − 8 bits), base halves below
/// R, and a 128-bit exponent.
pub fn kat_inputs(limbs: usize, k: usize) -> (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>) {
    let mod_bits = 52 * limbs - 8;
    let mut m = stream(&format!("ferrohsm kat modulus {limbs} {k}"), mod_bits / 8);
    m[0] |= 0x80;
    *m.last_mut().unwrap() |= 1;
    let lo = stream(&format!("ferrohsm kat lo {limbs} {k}"), mod_bits / 8);
    let hi = stream(&format!("ferrohsm kat hi {limbs} {k}"), mod_bits / 8);
    let e = stream(&format!("ferrohsm kat exponent {limbs} {k}"), 16);
    (m, lo, hi, e)
}

/// SHA-256 over the eight lanes' results (each `52·L/8` bytes, big-endian), per limb count,
/// computed independently (Python's `pow`) when the test was written.
pub const KAT_DIGESTS: [(usize, &str); 4] = [
    (
        10,
        "1d5598d2cf466cd0c13127f1f06b25665b2e094c4528d3fb2dbafe63ba73e45c",
    ),
    (
        20,
        "927c7e89a3b85f185a706c3acc8a9ca3604bcc484f7070df4e91f52914e2cb8a",
    ),
    (
        30,
        "87e1bbd2ecd42c3d7af068254ebdd93aa060180bb475001c617ad7d19702fc81",
    ),
    (
        40,
        "0890bcdf4b4e5065688490baabdaf867e238d189931c88b49ecc00081364d741",
    ),
];

#[cfg(target_arch = "x86_64")]
fn run<const L: usize>(kernel: super::vertical::Kernel) -> String {
    use super::radix52 as r52;
    use super::vertical::{modexp, LaneInput, LANES};
    let data: Vec<_> = (0..LANES).map(|k| kat_inputs(L, k)).collect();
    let mut limbs = vec![];
    for (m, lo, hi, e) in &data {
        let mut ml = vec![0u64; L];
        r52::from_be_bytes(m, &mut ml);
        let mut lol = vec![0u64; L];
        r52::from_be_bytes(lo, &mut lol);
        let mut hil = vec![0u64; L];
        r52::from_be_bytes(hi, &mut hil);
        let [_, rr, rrr] = super::crt::powers_of_r_pub(&ml);
        let exp = vec![
            u64::from_be_bytes(e[8..].try_into().unwrap()),
            u64::from_be_bytes(e[..8].try_into().unwrap()),
        ];
        limbs.push((ml, lol, hil, rr, rrr, exp));
    }
    let lanes: Vec<LaneInput> = limbs
        .iter()
        .map(|(m, lo, hi, rr, rrr, exp)| LaneInput {
            lo,
            hi,
            m,
            k0: r52::mont_k0(m[0]),
            rr,
            rrr,
            exp,
        })
        .collect();
    let out = modexp::<L>(kernel, &lanes, 128);
    let mut h = Sha256::new();
    for r in out.iter() {
        h.update(r52::to_be_bytes(r, 52 * L / 8));
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The digests of one build of the kernel: the AVX-512 one, or the emulated one (the same
/// generic code, each IFMA instruction replaced by integer code) that runs on every CPU.
#[cfg(target_arch = "x86_64")]
fn digests(kernel: super::vertical::Kernel) -> Vec<(usize, String)> {
    vec![
        (10, run::<10>(kernel)),
        (20, run::<20>(kernel)),
        (30, run::<30>(kernel)),
        (40, run::<40>(kernel)),
    ]
}

/// Whether the IFMA kernel gives the known answers at every limb count.
pub fn ifma_known_answers() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let got = digests(super::vertical::Kernel::Avx512);
        KAT_DIGESTS
            .iter()
            .zip(got)
            .all(|((l, want), (gl, have))| *l == gl && *want == have)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::super::vertical::Kernel;

    /// The emulated build on every CPU, the AVX-512 one where the CPU runs it.
    #[test]
    fn kernel_gives_the_known_answers() {
        for kernel in Kernel::on_this_cpu() {
            for ((l, want), (gl, got)) in super::KAT_DIGESTS.iter().zip(super::digests(kernel)) {
                assert_eq!((*l, *want), (gl, got.as_str()), "{kernel:?}");
            }
        }
    }
}
