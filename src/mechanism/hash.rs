//! Hash algorithms the mechanisms use, with their PKCS#11 names and DigestInfo prefixes.

use cryptoki_sys::*;
use digest::Digest;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAlg {
    Md5,
    Sha1,
    Sha224,
    Sha256,
    Sha384,
    Sha512,
    Sha3_224,
    Sha3_256,
    Sha3_384,
    Sha3_512,
}

impl HashAlg {
    /// The hash of a `CKM_SHA*` digest mechanism or a `CKG_MGF1_*`/`CKM_*` parameter value.
    pub fn from_digest_mechanism(m: CK_MECHANISM_TYPE) -> Option<HashAlg> {
        Some(match m {
            CKM_MD5 => HashAlg::Md5,
            CKM_SHA_1 => HashAlg::Sha1,
            CKM_SHA224 => HashAlg::Sha224,
            CKM_SHA256 => HashAlg::Sha256,
            CKM_SHA384 => HashAlg::Sha384,
            CKM_SHA512 => HashAlg::Sha512,
            CKM_SHA3_224 => HashAlg::Sha3_224,
            CKM_SHA3_256 => HashAlg::Sha3_256,
            CKM_SHA3_384 => HashAlg::Sha3_384,
            CKM_SHA3_512 => HashAlg::Sha3_512,
            _ => return None,
        })
    }

    pub fn from_mgf(mgf: CK_RSA_PKCS_MGF_TYPE) -> Option<HashAlg> {
        Some(match mgf {
            CKG_MGF1_SHA1 => HashAlg::Sha1,
            CKG_MGF1_SHA224 => HashAlg::Sha224,
            CKG_MGF1_SHA256 => HashAlg::Sha256,
            CKG_MGF1_SHA384 => HashAlg::Sha384,
            CKG_MGF1_SHA512 => HashAlg::Sha512,
            CKG_MGF1_SHA3_224 => HashAlg::Sha3_224,
            CKG_MGF1_SHA3_256 => HashAlg::Sha3_256,
            CKG_MGF1_SHA3_384 => HashAlg::Sha3_384,
            CKG_MGF1_SHA3_512 => HashAlg::Sha3_512,
            _ => return None,
        })
    }

    pub fn output_len(self) -> usize {
        match self {
            HashAlg::Md5 => 16,
            HashAlg::Sha1 => 20,
            HashAlg::Sha224 | HashAlg::Sha3_224 => 28,
            HashAlg::Sha256 | HashAlg::Sha3_256 => 32,
            HashAlg::Sha384 | HashAlg::Sha3_384 => 48,
            HashAlg::Sha512 | HashAlg::Sha3_512 => 64,
        }
    }

    /// DER of the DigestInfo up to the hash value (RFC 8017 §9.2 note 1; SHA-3 OIDs from NIST).
    pub fn digest_info_prefix(self) -> &'static [u8] {
        match self {
            HashAlg::Md5 => &[
                0x30, 0x20, 0x30, 0x0c, 0x06, 0x08, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x02, 0x05, 0x05,
                0x00, 0x04, 0x10,
            ],
            HashAlg::Sha1 => &[
                0x30, 0x21, 0x30, 0x09, 0x06, 0x05, 0x2b, 0x0e, 0x03, 0x02, 0x1a, 0x05, 0x00, 0x04, 0x14,
            ],
            HashAlg::Sha224 => {
                const P: [u8; 19] = sha2_prefix::<0x2d, 0x04, 0x1c>();
                &P
            }
            HashAlg::Sha256 => {
                const P: [u8; 19] = sha2_prefix::<0x31, 0x01, 0x20>();
                &P
            }
            HashAlg::Sha384 => {
                const P: [u8; 19] = sha2_prefix::<0x41, 0x02, 0x30>();
                &P
            }
            HashAlg::Sha512 => {
                const P: [u8; 19] = sha2_prefix::<0x51, 0x03, 0x40>();
                &P
            }
            HashAlg::Sha3_224 => {
                const P: [u8; 19] = sha2_prefix::<0x2d, 0x07, 0x1c>();
                &P
            }
            HashAlg::Sha3_256 => {
                const P: [u8; 19] = sha2_prefix::<0x31, 0x08, 0x20>();
                &P
            }
            HashAlg::Sha3_384 => {
                const P: [u8; 19] = sha2_prefix::<0x41, 0x09, 0x30>();
                &P
            }
            HashAlg::Sha3_512 => {
                const P: [u8; 19] = sha2_prefix::<0x51, 0x0a, 0x40>();
                &P
            }
        }
    }

    pub fn hasher(self) -> Hasher {
        match self {
            HashAlg::Md5 => Hasher::Md5(md5::Md5::new()),
            HashAlg::Sha1 => Hasher::Sha1(sha1::Sha1::new()),
            HashAlg::Sha224 => Hasher::Sha224(sha2::Sha224::new()),
            HashAlg::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
            HashAlg::Sha384 => Hasher::Sha384(sha2::Sha384::new()),
            HashAlg::Sha512 => Hasher::Sha512(sha2::Sha512::new()),
            HashAlg::Sha3_224 => Hasher::Sha3_224(sha3::Sha3_224::new()),
            HashAlg::Sha3_256 => Hasher::Sha3_256(sha3::Sha3_256::new()),
            HashAlg::Sha3_384 => Hasher::Sha3_384(sha3::Sha3_384::new()),
            HashAlg::Sha3_512 => Hasher::Sha3_512(sha3::Sha3_512::new()),
        }
    }

    pub fn digest(self, data: &[u8]) -> Vec<u8> {
        let mut h = self.hasher();
        h.update(data);
        h.finalize()
    }
}

/// The NIST hash-algorithm arc 2.16.840.1.101.3.4.2.<n>, in a DigestInfo of `total` bytes.
const fn sha2_prefix<const TOTAL: u8, const ARC: u8, const LEN: u8>() -> [u8; 19] {
    [
        0x30, TOTAL, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, ARC, 0x05, 0x00,
        0x04, LEN,
    ]
}

/// A running hash of any supported algorithm (multi-part digest and hash-and-sign state).
#[derive(Clone)]
pub enum Hasher {
    Md5(md5::Md5),
    Sha1(sha1::Sha1),
    Sha224(sha2::Sha224),
    Sha256(sha2::Sha256),
    Sha384(sha2::Sha384),
    Sha512(sha2::Sha512),
    Sha3_224(sha3::Sha3_224),
    Sha3_256(sha3::Sha3_256),
    Sha3_384(sha3::Sha3_384),
    Sha3_512(sha3::Sha3_512),
}

macro_rules! each_hasher {
    ($self:expr, $h:ident => $e:expr) => {
        match $self {
            Hasher::Md5($h) => $e,
            Hasher::Sha1($h) => $e,
            Hasher::Sha224($h) => $e,
            Hasher::Sha256($h) => $e,
            Hasher::Sha384($h) => $e,
            Hasher::Sha512($h) => $e,
            Hasher::Sha3_224($h) => $e,
            Hasher::Sha3_256($h) => $e,
            Hasher::Sha3_384($h) => $e,
            Hasher::Sha3_512($h) => $e,
        }
    };
}

impl Hasher {
    pub fn update(&mut self, data: &[u8]) {
        each_hasher!(self, h => Digest::update(h, data))
    }

    pub fn finalize(self) -> Vec<u8> {
        each_hasher!(self, h => h.finalize().to_vec())
    }
}
