//! Known-answer test of a four-lane kernel (the avx2 and fma families), run at every
//! `C_Initialize` (a few milliseconds): four lanes of modular exponentiation at every compiled
//! limb count, and the check's residues (a public exponent modulo a prime) at the same counts,
//! against digests computed independently (Python's `pow`) when the kernel was written.

use super::crt::Lanes;
use super::limbs;
use super::vertical::{CheckLane, LaneInput, LANES};
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

/// Lane `k` at `limbs` limbs of `w` bits: a modulus of ⌊(w·L − headroom)/8⌋ bytes (top bit
/// set, odd; `Lanes::HEADROOM`), lo of as many bytes (below R), hi one byte shorter (below m),
/// a 128-bit exponent.
fn inputs(limbs: usize, w: u32, headroom: usize, k: usize) -> [Vec<u8>; 4] {
    let len = (w as usize * limbs - headroom) / 8;
    let mut m = stream(&format!("ferrohsm avx2 kat modulus {limbs} {k}"), len);
    m[0] |= 0x80;
    m[len - 1] |= 1;
    let lo = stream(&format!("ferrohsm avx2 kat lo {limbs} {k}"), len);
    let hi = stream(&format!("ferrohsm avx2 kat hi {limbs} {k}"), len - 1);
    let e = stream(&format!("ferrohsm avx2 kat exponent {limbs} {k}"), 16);
    [m, lo, hi, e]
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Digest of the four lanes' base^e mod m (each at the modulus length, big-endian).
fn private<K: Lanes>(class: usize) -> String {
    let (l, w) = (K::LIMB_COUNTS[class], K::W);
    let mut data = vec![];
    for k in 0..LANES {
        let [m, lo, hi, e] = inputs(l, w, K::HEADROOM, k);
        let mut v = [vec![0u64; l], vec![0u64; l], vec![0u64; l]];
        limbs::from_be_bytes(&m, w, &mut v[0]);
        limbs::from_be_bytes(&lo, w, &mut v[1]);
        limbs::from_be_bytes(&hi, w, &mut v[2]);
        let [_, rr, rrr] = limbs::powers_of_r(&v[0], w);
        let exp = vec![
            u64::from_be_bytes(e[8..16].try_into().unwrap_or_default()),
            u64::from_be_bytes(e[..8].try_into().unwrap_or_default()),
            0,
        ];
        data.push((v, rr, rrr, exp, m.len()));
    }
    let lanes: Vec<LaneInput> = data
        .iter()
        .map(|(v, rr, rrr, exp, _)| LaneInput {
            lo: &v[1],
            hi: &v[2],
            m: &v[0],
            k0: limbs::mont_k0(v[0][0], w),
            rr,
            rrr,
            exp,
        })
        .collect();
    let out = K::modexp(class, &lanes, 128);
    let mut h = Sha256::new();
    for (r, d) in out.iter().zip(&data) {
        h.update(limbs::to_be_bytes(r, w, d.4));
    }
    hex(&h.finalize())
}

/// The public exponent of lane `k` in the check's answers: 65537, and shorter ones beside it
/// (lanes that start late and take products under a mask).
const CHECK_EXPONENTS: [u64; LANES] = [65537, 3, 65537, 17];

/// Digest of the four lanes' check residues at a prime's limb count (`exp::check_residues`):
/// s^e mod m and c mod m, s = lo + hi·R of `inputs`, c = c_lo + c_hi·R of two more streams
/// (below R and below m, as `inputs`' lo and hi), each at the modulus length.
fn check<K: Lanes>(class: usize) -> String {
    let (l, w) = (K::LIMB_COUNTS[class], K::W);
    let mut data = vec![];
    for k in 0..LANES {
        let [m, lo, hi, _] = inputs(l, w, K::HEADROOM, k);
        let c_lo = stream(&format!("ferrohsm avx2 kat check lo {l} {k}"), lo.len());
        let c_hi = stream(&format!("ferrohsm avx2 kat check hi {l} {k}"), hi.len());
        let mut v = [(); 5].map(|_| vec![0u64; l]);
        for (x, bytes) in v.iter_mut().zip([&m, &lo, &hi, &c_lo, &c_hi]) {
            limbs::from_be_bytes(bytes, w, x);
        }
        let [_, rr, rrr] = limbs::powers_of_r(&v[0], w);
        data.push((v, rr, rrr, m.len()));
    }
    let lanes: Vec<CheckLane> = data
        .iter()
        .zip(CHECK_EXPONENTS)
        .map(|((v, rr, rrr, _), e)| CheckLane {
            s: (&v[1], &v[2]),
            c: (&v[3], &v[4]),
            m: &v[0],
            k0: limbs::mont_k0(v[0][0], w),
            rr,
            rrr,
            e,
        })
        .collect();
    let out = K::check_residues(class, &lanes);
    let mut h = Sha256::new();
    for ((y, z), d) in out.iter().zip(&data) {
        h.update(limbs::to_be_bytes(y, w, d.3));
        h.update(limbs::to_be_bytes(z, w, d.3));
    }
    hex(&h.finalize())
}

/// The kernel's digests: its exponentiation, then its check, per prime limb count.
pub fn digests<K: Lanes>() -> Vec<String> {
    let private = (0..4).map(private::<K>);
    private.chain((0..4).map(check::<K>)).collect()
}

/// Whether the kernel gives its known answers (call only where the CPU runs it).
pub fn known_answers<K: Lanes>() -> bool {
    digests::<K>().iter().zip(K::KAT_DIGESTS).all(|(a, b)| a == b)
}
