//! The pre-hash PH of HashML-DSA (FIPS 204 §5.4) and HashSLH-DSA (FIPS 205 §10.2): the hashes
//! the PKCS#11 3.2 `CKM_HASH_ML_DSA_<hash>`/`CKM_HASH_SLH_DSA_<hash>` mechanisms name, each
//! with the DER of the OID that M' carries and its output length. SHAKE128 and SHAKE256 are
//! XOFs; FIPS 204 and 205 fix their output at 256 and 512 bits for this use.

use crate::mechanism::{HashAlg, Hasher};
use cryptoki_sys::*;
use shake::{ExtendableOutput, Update};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreHash {
    Sha224,
    Sha256,
    Sha384,
    Sha512,
    Sha3_224,
    Sha3_256,
    Sha3_384,
    Sha3_512,
    Shake128,
    Shake256,
}

impl PreHash {
    /// The hash that `CK_HASH_SIGN_ADDITIONAL_CONTEXT.hash` names (`CKM_HASH_ML_DSA`,
    /// `CKM_HASH_SLH_DSA`): a SHA-2 or SHA-3 digest mechanism. PKCS#11 3.2 has no SHAKE digest
    /// mechanism; the only mechanism types that name SHAKE128 and SHAKE256 are
    /// `CKM_SHAKE_128/256_KEY_DERIVATION`, taken here for them. MD5 and SHA-1 are refused: FIPS
    /// 204 and 205 ask for an approved hash of at least the scheme's collision strength, and
    /// have no OID for them in M'.
    pub fn from_mechanism(m: CK_MECHANISM_TYPE) -> Option<PreHash> {
        Some(match m {
            CKM_SHAKE_128_KEY_DERIVATION => PreHash::Shake128,
            CKM_SHAKE_256_KEY_DERIVATION => PreHash::Shake256,
            _ => match HashAlg::from_digest_mechanism(m)? {
                HashAlg::Sha224 => PreHash::Sha224,
                HashAlg::Sha256 => PreHash::Sha256,
                HashAlg::Sha384 => PreHash::Sha384,
                HashAlg::Sha512 => PreHash::Sha512,
                HashAlg::Sha3_224 => PreHash::Sha3_224,
                HashAlg::Sha3_256 => PreHash::Sha3_256,
                HashAlg::Sha3_384 => PreHash::Sha3_384,
                HashAlg::Sha3_512 => PreHash::Sha3_512,
                HashAlg::Md5 | HashAlg::Sha1 => return None,
            },
        })
    }

    /// The fixed-output hash the token already has, `None` for the XOFs.
    fn hash(self) -> Option<HashAlg> {
        Some(match self {
            PreHash::Sha224 => HashAlg::Sha224,
            PreHash::Sha256 => HashAlg::Sha256,
            PreHash::Sha384 => HashAlg::Sha384,
            PreHash::Sha512 => HashAlg::Sha512,
            PreHash::Sha3_224 => HashAlg::Sha3_224,
            PreHash::Sha3_256 => HashAlg::Sha3_256,
            PreHash::Sha3_384 => HashAlg::Sha3_384,
            PreHash::Sha3_512 => HashAlg::Sha3_512,
            PreHash::Shake128 | PreHash::Shake256 => return None,
        })
    }

    /// The length of PH(M): the hash's, or FIPS 204/205's 32 bytes of SHAKE128 and 64 of
    /// SHAKE256. The data of `CKM_HASH_ML_DSA` must be exactly this long.
    pub fn output_len(self) -> usize {
        match (self, self.hash()) {
            (_, Some(h)) => h.output_len(),
            (PreHash::Shake128, None) => 32,
            (_, None) => 64,
        }
    }

    /// The DER of the hash's OID in NIST's hashAlgs arc 2.16.840.1.101.3.4.2 (FIPS 204
    /// Algorithm 4 step 10 ff., FIPS 205 Algorithm 23): 06 09 60 86 48 01 65 03 04 02 n.
    pub fn oid(self) -> [u8; 11] {
        let last = match self {
            PreHash::Sha256 => 1,
            PreHash::Sha384 => 2,
            PreHash::Sha512 => 3,
            PreHash::Sha224 => 4,
            PreHash::Sha3_224 => 7,
            PreHash::Sha3_256 => 8,
            PreHash::Sha3_384 => 9,
            PreHash::Sha3_512 => 10,
            PreHash::Shake128 => 11,
            PreHash::Shake256 => 12,
        };
        [0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, last]
    }

    pub fn hasher(self) -> PreHasher {
        match (self, self.hash()) {
            (_, Some(h)) => PreHasher::Hash(h.hasher()),
            (PreHash::Shake128, None) => PreHasher::Shake128(Default::default()),
            (_, None) => PreHasher::Shake256(Default::default()),
        }
    }
}

/// A running PH(M), for the mechanisms that hash the message on the token in parts.
#[derive(Clone)]
pub enum PreHasher {
    Hash(Hasher),
    Shake128(shake::Shake128),
    Shake256(shake::Shake256),
}

impl PreHasher {
    pub fn update(&mut self, data: &[u8]) {
        match self {
            PreHasher::Hash(h) => h.update(data),
            PreHasher::Shake128(h) => h.update(data),
            PreHasher::Shake256(h) => h.update(data),
        }
    }

    pub fn finalize(self) -> Vec<u8> {
        match self {
            PreHasher::Hash(h) => h.finalize(),
            PreHasher::Shake128(h) => xof(h, PreHash::Shake128),
            PreHasher::Shake256(h) => xof(h, PreHash::Shake256),
        }
    }
}

fn xof(h: impl ExtendableOutput, alg: PreHash) -> Vec<u8> {
    let mut out = vec![0u8; alg.output_len()];
    h.finalize_xof_into(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FIPS 204 §5.4 / FIPS 205 §10.2 read against NIST's Computer Security Objects Register
    /// (hashAlgs arc): the last OID arc and PH(M)'s length of each hash, and PH("abc") of the
    /// XOFs against FIPS 202's published values.
    #[test]
    fn oids_and_lengths_follow_fips_204() {
        let table = [
            (CKM_SHA256, 0x01, 32),
            (CKM_SHA384, 0x02, 48),
            (CKM_SHA512, 0x03, 64),
            (CKM_SHA224, 0x04, 28),
            (CKM_SHA3_224, 0x07, 28),
            (CKM_SHA3_256, 0x08, 32),
            (CKM_SHA3_384, 0x09, 48),
            (CKM_SHA3_512, 0x0a, 64),
            (CKM_SHAKE_128_KEY_DERIVATION, 0x0b, 32),
            (CKM_SHAKE_256_KEY_DERIVATION, 0x0c, 64),
        ];
        for (m, last, len) in table {
            let h = PreHash::from_mechanism(m).unwrap();
            let mut oid = vec![0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02];
            oid.push(last);
            assert_eq!(h.oid().to_vec(), oid, "{h:?}");
            assert_eq!(h.output_len(), len, "{h:?}");
            let mut hasher = h.hasher();
            hasher.update(b"a");
            hasher.update(b"bc");
            assert_eq!(hasher.finalize().len(), len, "{h:?}");
        }
        for m in [CKM_MD5, CKM_SHA_1, CKM_SHA256_HMAC, CKM_HASH_ML_DSA_SHA256] {
            assert_eq!(PreHash::from_mechanism(m), None, "0x{m:x}");
        }
        let abc = |h: PreHash| {
            let mut x = h.hasher();
            x.update(b"abc");
            x.finalize()
        };
        // FIPS 202 example values (SHAKE128 and SHAKE256 of "abc"), the first bytes.
        assert_eq!(abc(PreHash::Shake128)[..4], [0x58, 0x81, 0x09, 0x2d]);
        assert_eq!(abc(PreHash::Shake256)[..4], [0x48, 0x33, 0x66, 0x60]);
    }
}
