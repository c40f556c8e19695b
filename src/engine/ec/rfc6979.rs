//! RFC 6979's nonce generator (HMAC_DRBG, section 3.2, with the added data of section 3.6)
//! for curves whose order has a multiple of 8 bits (P-256, P-384): there bits2int of a
//! candidate is the candidate itself, and bits2octets of the hash is z mod n, which the signer
//! has already. The same bytes as the rfc6979 crate's `KGenerator` (tested), in fewer
//! compressions:
//! - the keyed HMAC state (inner and outer pads hashed) is made once per key K and cloned for
//!   each HMAC under it, where the crate re-keys every call;
//! - the update after an output (K = HMAC_K(V || 0x00), V = HMAC_K(V)) runs only when another
//!   candidate is asked for, where the crate runs it after every output, so almost always
//!   for nothing.
//!
//! 18 SHA-256 compressions per P-256 nonce instead of 32 (5.8% of a signature with its check
//! through PKCS#11 went to SHA-256, Xeon). P-521 (521 bits) keeps the crate's generator.

use hmac::digest::Output;
use hmac::{EagerHash, Hmac, KeyInit, Mac};
use zeroize::Zeroize;

/// The generator's state: K as a keyed HMAC, and V.
pub struct Nonces<D: EagerHash> {
    key: Hmac<D>,
    v: Output<Hmac<D>>,
    /// Whether a candidate was given out: the next one needs the update first.
    given: bool,
}

impl<D: EagerHash> Nonces<D> {
    /// Sections 3.2 b-g with x = int2octets(d), h1 = bits2octets(H(m)) and added data `ad`
    /// (section 3.6's k').
    pub fn new(x: &[u8], h1: &[u8], ad: &[u8]) -> Nonces<D> {
        let mut v = Output::<Hmac<D>>::default();
        v.fill(0x01);
        let k0 = Output::<Hmac<D>>::default();
        let mut n = Nonces {
            key: Hmac::<D>::new_from_slice(&k0).expect("HMAC takes any key length"),
            v,
            given: false,
        };
        n.rekey(&[&[0x00], x, h1, ad]);
        n.step_v();
        n.rekey(&[&[0x01], x, h1, ad]);
        n.step_v();
        n
    }

    /// The next candidate k (section 3.2 h), as many bytes as `out` holds: the caller takes it
    /// if it is in [1, n - 1] and gives a nonzero r and s, else asks again.
    pub fn next(&mut self, out: &mut [u8]) {
        if self.given {
            self.rekey(&[&[0x00]]);
            self.step_v();
        }
        self.given = true;
        for chunk in out.chunks_mut(self.v.len()) {
            self.step_v();
            chunk.copy_from_slice(&self.v[..chunk.len()]);
        }
    }

    /// K = HMAC_K(V || parts...).
    fn rekey(&mut self, parts: &[&[u8]]) {
        let mut h = self.key.clone();
        h.update(&self.v);
        for p in parts {
            h.update(p);
        }
        let mut k = h.finalize().into_bytes();
        self.key = Hmac::<D>::new_from_slice(&k).expect("HMAC takes any key length");
        k.zeroize();
    }

    /// V = HMAC_K(V).
    fn step_v(&mut self) {
        let mut h = self.key.clone();
        h.update(&self.v);
        self.v = h.finalize().into_bytes();
    }
}

impl<D: EagerHash> Drop for Nonces<D> {
    fn drop(&mut self) {
        // The keyed state zeroizes itself (hmac's zeroize feature); V here.
        self.v.zeroize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same candidates as the rfc6979 crate's generator (first and following ones), for
    /// SHA-256 and SHA-384 at their curves' lengths, with and without added data; and RFC
    /// 6979's own example (A.2.5, P-256, SHA-256, "sample").
    #[test]
    fn candidates_equal_the_rfc6979_crate() {
        fn rnd(n: usize) -> Vec<u8> {
            let mut v = vec![0u8; n];
            getrandom::fill(&mut v).unwrap();
            v
        }
        // n is above every 32- or 48-byte value with a top byte below 0xff: the crate then
        // reduces nothing in bits2octets, and h1 is h as given.
        let n256 = <p256::NistP256 as elliptic_curve::Curve>::ORDER;
        let n384 = <p384::NistP384 as elliptic_curve::Curve>::ORDER;
        // Candidates of `$len` bytes under digest `$d` and order `$n`: three in a row.
        macro_rules! same_candidates {
            ($d:ty, $len:expr, $n:expr, $ad:expr) => {{
                let (mut x, mut h) = (rnd($len), rnd($len));
                x[0] &= 0x7f;
                h[0] &= 0x7f;
                let mut theirs = rfc6979::KGenerator::<$d, _>::new(&x, &h, &$ad, &*$n);
                let mut ours = Nonces::<$d>::new(&x, &h, &$ad);
                for _ in 0..3 {
                    let (mut a, mut b) = ([0u8; $len], [0u8; $len]);
                    // The crate skips a candidate of n or more itself (probability about 2^-32
                    // at these n), where ours leaves that to the signer: negligible here.
                    theirs.fill_next_k(&mut a);
                    ours.next(&mut b);
                    assert_eq!(a, b);
                }
            }};
        }
        for round in 0..50 {
            let ad = if round % 2 == 0 { rnd(32) } else { vec![] };
            same_candidates!(sha2::Sha256, 32, n256, ad);
            same_candidates!(sha2::Sha384, 48, n384, ad);
        }
        // RFC 6979 A.2.5: P-256, SHA-256, message "sample".
        let hex = |s: &str| -> Vec<u8> {
            (0..s.len() / 2)
                .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
                .collect()
        };
        let x = hex("C9AFA9D845BA75166B5C215767B1D6934E50C3DB36E89B127B8A622B120F6721");
        let h = {
            use sha2::Digest;
            sha2::Sha256::digest(b"sample")
        };
        // bits2octets(h) = h mod n: this h is below n.
        let mut k = [0u8; 32];
        Nonces::<sha2::Sha256>::new(&x, &h, &[]).next(&mut k);
        assert_eq!(
            k.to_vec(),
            hex("A6E3C57DD01ABE90086538398355DD4C3B17AA873382B0F24D6129493D8AAD60")
        );
    }
}
