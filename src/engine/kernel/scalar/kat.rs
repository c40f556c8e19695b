//! Known-answer test of a scalar family, run at every `C_Initialize` (about a millisecond):
//! a 128-bit-exponent modular exponentiation at every limb count the family serves among
//! 8, 16, 24, 32 and 40 (the primes of RSA-1024 to RSA-5120), and one RSA-1024 signature
//! through the family's own preparation, Garner step and check; every answer was computed
//! independently (Python's `pow`, OpenSSL) when the test was written.

use super::limbs::{from_be_bytes, to_be_bytes};
use super::{key, Arith};
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

/// SHA-256 of base^e mod m (8·L big-endian bytes) per limb count: m has 64·L bits (top bit
/// set, odd), the base 64·L − 8 bits, e 128 bits, all from `stream`.
pub const DIGESTS: [(usize, &str); 5] = [
    (
        8,
        "6bdcb14322a24ed284d38947d9a8f28b369cd911241bc22be12c510ebc37715b",
    ),
    (
        16,
        "221e5d038dd683ac8866719fabb328fce6416ebb339a01e1805ce22a375b28df",
    ),
    (
        24,
        "53ef1ee08536e2b8ebb1643fd52acc30075eb31d5c4747db1e4cd19f594b9be1",
    ),
    (
        32,
        "a1884274d536a0416dbdc3fc114e8e14214a30482cc3552bd76df3314ee5d65c",
    ),
    (
        40,
        "7d54ebdf7b582a0a798fac64d34fdf3aa3ddbb01b1eecc3b1ad5bb6a516c18d6",
    ),
];

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The digest of the family's answer at `limbs`.
pub fn modexp_digest<A: Arith>(limbs: usize) -> String {
    let mut m = stream(&format!("ferrohsm scalar kat modulus {limbs}"), 8 * limbs);
    m[0] |= 0x80;
    *m.last_mut().unwrap() |= 1;
    let base = stream(&format!("ferrohsm scalar kat base {limbs}"), 8 * limbs - 1);
    let e = stream(&format!("ferrohsm scalar kat exponent {limbs}"), 16);
    let h = key::half(&m, &e, limbs);
    let mut c = vec![0u64; 2 * limbs];
    from_be_bytes(&base, &mut c);
    let mut out = vec![0u64; limbs];
    super::exp::modexp::<A>(&c, &h, 128, &mut out);
    hex(&Sha256::digest(to_be_bytes(&out, 8 * limbs)))
}

/// Whether the family gives every known answer.
pub fn known_answers<A: Arith>() -> bool {
    let exps = DIGESTS
        .iter()
        .filter(|(l, _)| A::serves_limbs(*l))
        .all(|(l, want)| modexp_digest::<A>(*l) == *want);
    exps && rsa_1024::<A>()
}

/// The RSA-1024 known answer of the reference family, through this family's entry points.
fn rsa_1024<A: Arith>() -> bool {
    use crate::engine::kernel::reference::kat_components;
    use crate::engine::kernel::{Family, KeySource};
    let Some((c, input, digest)) = kat_components() else {
        return false;
    };
    let Ok(reference) = crate::engine::portable::PortableKey::new(&c) else {
        return false;
    };
    let reference = std::sync::Arc::new(reference);
    let family = super::Scalar::<A>(std::marker::PhantomData);
    let source = KeySource {
        components: &c,
        reference: &reference,
        modulus_bits: 1024,
    };
    if !A::serves_limbs(8) {
        return true;
    }
    let Some((_, form)) = family.prepare(&source) else {
        return false;
    };
    let (out, verified) = family.private_op_batch(&[(&*form, &input)]).remove(0);
    verified && hex(&Sha256::digest(&out[..])) == digest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn portable_gives_the_known_answers() {
        for (l, want) in DIGESTS {
            assert_eq!(
                modexp_digest::<super::super::portable::Portable>(l),
                want,
                "{l} limbs"
            );
        }
        assert!(rsa_1024::<super::super::portable::Portable>());
    }
}
