//! Known-answer test of the AVX2 family, run at every `C_Initialize` (a few milliseconds):
//! four lanes of modular exponentiation at every compiled limb count, and the public-key
//! exponentiation of the check at every check size, against digests computed independently
//! (Python's `pow`) when the test was written.

use super::crt::{CHECK, LIMB_COUNTS, W};
use super::limbs;
use super::vertical::{modexp, powmod_public, LaneInput, PublicLane, LANES};
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

/// Lane `k` at `limbs` limbs of `w` bits: a modulus of ⌊(w·L − 2)/8⌋ bytes (top bit set, odd),
/// lo of as many bytes (below R), hi one byte shorter (below m), a 128-bit exponent.
fn inputs(limbs: usize, w: u32, k: usize) -> [Vec<u8>; 4] {
    let len = (w as usize * limbs - 2) / 8;
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
fn private<const L: usize>() -> String {
    let mut data = vec![];
    for k in 0..LANES {
        let [m, lo, hi, e] = inputs(L, W, k);
        let mut v = [vec![0u64; L], vec![0u64; L], vec![0u64; L]];
        limbs::from_be_bytes(&m, W, &mut v[0]);
        limbs::from_be_bytes(&lo, W, &mut v[1]);
        limbs::from_be_bytes(&hi, W, &mut v[2]);
        let [_, rr, rrr] = limbs::powers_of_r(&v[0], W);
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
            k0: limbs::mont_k0(v[0][0], W),
            rr,
            rrr,
            exp,
        })
        .collect();
    let out = modexp::<L, { W as i32 }>(&lanes, 128);
    let mut h = Sha256::new();
    for (r, d) in out.iter().zip(&data) {
        h.update(limbs::to_be_bytes(r, W, d.4));
    }
    hex(&h.finalize())
}

/// Digest of the four lanes' base^65537 mod m at a check size (base = lo mod 2^(8·len − 8)).
fn public<const L: usize, const NW: i32>() -> String {
    let w = NW as u32;
    let mut data = vec![];
    for k in 0..LANES {
        let [m, _, hi, _] = inputs(L, w, k);
        let (mut ml, mut base) = (vec![0u64; L], vec![0u64; L]);
        limbs::from_be_bytes(&m, w, &mut ml);
        limbs::from_be_bytes(&hi, w, &mut base);
        let [_, rr, _] = limbs::powers_of_r(&ml, w);
        data.push((ml, base, rr, m.len()));
    }
    let lanes: Vec<PublicLane> = data
        .iter()
        .map(|(m, base, rr, _)| PublicLane {
            base,
            n: m,
            k0: limbs::mont_k0(m[0], w),
            rr,
            e: 65537,
        })
        .collect();
    let out = powmod_public::<L, NW>(&lanes);
    let mut h = Sha256::new();
    for (r, d) in out.iter().zip(&data) {
        h.update(limbs::to_be_bytes(r, w, d.3));
    }
    hex(&h.finalize())
}

/// The kernel's digests: per prime limb count, then per check size.
pub fn digests() -> Vec<String> {
    vec![
        private::<{ LIMB_COUNTS[0] }>(),
        private::<{ LIMB_COUNTS[1] }>(),
        private::<{ LIMB_COUNTS[2] }>(),
        private::<{ LIMB_COUNTS[3] }>(),
        public::<{ CHECK[0].0 }, { CHECK[0].1 as i32 }>(),
        public::<{ CHECK[1].0 }, { CHECK[1].1 as i32 }>(),
        public::<{ CHECK[2].0 }, { CHECK[2].1 as i32 }>(),
        public::<{ CHECK[3].0 }, { CHECK[3].1 as i32 }>(),
    ]
}

/// Computed with Python's `pow` over the same inputs (see `inputs`).
pub const KAT_DIGESTS: [&str; 8] = [
    "ba159cfe1cff025ac8cbe3ba6f60508ed9678e81409dd190f6e3d5e54d5b0479",
    "1b21d043278e1679e19d4eb720d44ccc29c83a2f4ac322b1de7e046fddf835f6",
    "c79ec65cec66f1e63cd66e3ffab532b2c70b9d8a3fbd0250e1b417fb0144b78b",
    "415a8a1a9db51364610a1300dafe5de40d626df774e20d5e648aecdd1de1c451",
    "c495cb4bda64d09ea80a26202f16e6794f713947871dd7caf0b83f20b359d605",
    "482d1b35ad997fb96c71b0064d4fc57ce2b6fa4af07f87c37a2da4e639eb8f97",
    "88121997c2dd3db0e2eee5756035fb7c2aa26936894534543c2d645c639eb424",
    "f2a22f93a7cc11cbe46733d709070ab32e19f17063c9e1ce2e069dc205f9f1c1",
];

/// Whether the kernel gives the known answers (call only where the CPU has AVX2).
pub fn known_answers() -> bool {
    digests().iter().zip(KAT_DIGESTS).all(|(a, b)| a == b)
}

#[cfg(test)]
mod tests {
    #[test]
    fn kernel_gives_the_known_answers() {
        if !super::super::vertical::available() {
            eprintln!("no AVX2 on this CPU");
            return;
        }
        assert_eq!(super::digests(), super::KAT_DIGESTS.to_vec());
    }
}
