//! The smallest keys the token takes (issue 50's low findings, item 7), as tables through
//! every way a key object comes to be: an RSA key of fewer than 1,024 bits (512, 768, 1016)
//! and a secret key of fewer than 14 bytes (1, 2, 13) are refused when created, generated,
//! unwrapped and derived, and the boundary values (1,024 bits, 14 bytes) are taken; and
//! `C_GetMechanismInfo` gives the same minimums. Every refusal is `CKR_KEY_SIZE_RANGE`, written
//! here from the rule (docs/security.md, "Keys are big enough"), not read from the module.

mod common;

use common::*;
use cryptoki::error::RvError;
use cryptoki::mechanism::ekdf::AesCbcDeriveParams;
use cryptoki::mechanism::elliptic_curve::{EcKdf, Ecdh1DeriveParams};
use cryptoki::mechanism::{Mechanism, MechanismType};
use cryptoki::object::{Attribute, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::Session;
use rsa::traits::{PrivateKeyParts, PublicKeyParts};

const KEK: [u8; 32] = [0x3c; 32];
const P256_OID: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const RSA_SMALL: [usize; 3] = [512, 768, 1016];
const RSA_MIN: usize = 1024;
const SECRET_SHORT: [usize; 3] = [1, 2, 13];
const SECRET_MIN: usize = 14;

/// What a call that makes a key answers: its object, or its error's code.
type Made = Result<ObjectHandle, RvError>;

fn made(r: cryptoki::error::Result<ObjectHandle>) -> Made {
    r.map_err(rv)
}

/// What each size should get: refused below the minimum, taken at it.
fn expected(size: usize, min: usize) -> Result<(), RvError> {
    if size < min {
        Err(RvError::KeySizeRange)
    } else {
        Ok(())
    }
}

fn setup() -> (TestEnv, cryptoki::context::Pkcs11, Session) {
    let env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "key sizes");
    let s = user_session(&p, slot);
    (env, p, s)
}

/// An RSA key of exactly `bits` bits, made by the `rsa` crate (whose checked constructor
/// refuses what the token must refuse too).
fn rsa_key(bits: usize) -> rsa::PrivateKey {
    let mut rng = rand_core::UnwrapErr(getrandom::SysRng);
    let k = rsa::PrivateKey::new_unchecked(&mut rng, bits).unwrap();
    assert_eq!(k.n().as_ref().bit_width() as usize, bits);
    k
}

fn rsa_public_template(k: &rsa::PrivateKey) -> Vec<Attribute> {
    vec![
        Attribute::Class(ObjectClass::PUBLIC_KEY),
        Attribute::KeyType(KeyType::RSA),
        Attribute::Token(false),
        Attribute::Verify(true),
        Attribute::Modulus(be(k.n().as_ref())),
        Attribute::PublicExponent(be(k.e())),
    ]
}

fn rsa_private_template(k: &rsa::PrivateKey) -> Vec<Attribute> {
    vec![
        Attribute::Class(ObjectClass::PRIVATE_KEY),
        Attribute::KeyType(KeyType::RSA),
        Attribute::Token(false),
        Attribute::Private(true),
        Attribute::Sign(true),
        Attribute::Modulus(be(k.n().as_ref())),
        Attribute::PublicExponent(be(k.e())),
        Attribute::PrivateExponent(be(k.d())),
        Attribute::Prime1(be(k.primes()[0].as_ref())),
        Attribute::Prime2(be(k.primes()[1].as_ref())),
        Attribute::Exponent1(be(k.dp().unwrap())),
        Attribute::Exponent2(be(k.dq().unwrap())),
        Attribute::Coefficient(be(&k.crt_coefficient().unwrap())),
    ]
}

/// The AES-256 key `KEK` in the token, for unwrapping what `kwp_wrap` wraps.
fn kek(s: &Session) -> ObjectHandle {
    s.create_object(&[
        Attribute::Class(ObjectClass::SECRET_KEY),
        Attribute::KeyType(KeyType::AES),
        Attribute::Token(false),
        Attribute::Value(KEK.to_vec()),
        Attribute::Unwrap(true),
        Attribute::Decrypt(true),
    ])
    .unwrap()
}

/// RFC 5649 (`CKM_AES_KEY_WRAP_PAD`) under `KEK` by the `aes-kw` crate, outside the module.
fn kwp_wrap(key: &[u8]) -> Vec<u8> {
    use aes::cipher::KeyInit;
    let kw = aes_kw::KwpAes256::new_from_slice(&KEK).unwrap();
    let mut out = vec![0u8; key.len().div_ceil(8) * 8 + 8];
    kw.wrap_key(key, &mut out).unwrap().to_vec()
}

/// How an RSA key object comes to be, each way given a key of `bits` bits.
#[derive(Debug, Clone, Copy)]
enum RsaPath {
    CreatePrivate,
    CreatePublic,
    /// `C_UnwrapKey` of the key's PKCS#8, wrapped with AES-KW-PAD outside the module.
    Unwrap,
    /// `C_GenerateKeyPair` with `CKA_MODULUS_BITS`.
    Generate,
}

impl RsaPath {
    fn make(self, s: &Session, kek: ObjectHandle, bits: usize) -> Made {
        match self {
            RsaPath::CreatePrivate => made(s.create_object(&rsa_private_template(&rsa_key(bits)))),
            RsaPath::CreatePublic => made(s.create_object(&rsa_public_template(&rsa_key(bits)))),
            RsaPath::Unwrap => {
                use rsa::pkcs8::EncodePrivateKey;
                let der = rsa_key(bits).to_pkcs8_der().unwrap();
                let template = [
                    Attribute::Class(ObjectClass::PRIVATE_KEY),
                    Attribute::KeyType(KeyType::RSA),
                    Attribute::Token(false),
                    Attribute::Private(true),
                    Attribute::Sign(true),
                ];
                let blob = kwp_wrap(der.as_bytes());
                made(s.unwrap_key(&Mechanism::AesKeyWrapPad, kek, &blob, &template))
            }
            RsaPath::Generate => {
                let public = [
                    Attribute::Token(false),
                    Attribute::ModulusBits((bits as u64).into()),
                    Attribute::PublicExponent(vec![1, 0, 1]),
                ];
                let private = [Attribute::Token(false), Attribute::Private(true)];
                s.generate_key_pair(&Mechanism::RsaPkcsKeyPairGen, &public, &private)
                    .map(|(_, private)| private)
                    .map_err(rv)
            }
        }
    }
}

#[test]
fn rsa_keys_under_1024_bits_are_refused_on_every_path() {
    let (_env, _p, s) = setup();
    let kek = kek(&s);
    let paths = [
        RsaPath::CreatePrivate,
        RsaPath::CreatePublic,
        RsaPath::Unwrap,
        RsaPath::Generate,
    ];
    for path in paths {
        for bits in RSA_SMALL.into_iter().chain([RSA_MIN]) {
            let got = path.make(&s, kek, bits);
            assert_eq!(
                got.map(|_| ()),
                expected(bits, RSA_MIN),
                "{path:?} of an RSA-{bits} key"
            );
        }
    }
    // A key at the minimum is a working key: it signs.
    let private = RsaPath::Unwrap.make(&s, kek, RSA_MIN).unwrap();
    assert_eq!(
        s.sign(&Mechanism::Sha256RsaPkcs, private, b"data").unwrap().len(),
        128
    );
}

/// How a secret key object comes to be, each way given a value of `len` bytes of type `kt`.
#[derive(Debug, Clone, Copy)]
enum SecretPath {
    Create,
    /// `CKM_GENERIC_SECRET_KEY_GEN` with `CKA_VALUE_LEN` (generic secrets only).
    Generate,
    /// `C_UnwrapKey` of the value wrapped with AES-KW-PAD outside the module.
    Unwrap,
    /// `CKM_ECDH1_DERIVE` (P-256) with `CKA_VALUE_LEN`.
    DeriveEcdh,
    /// `CKM_AES_CBC_ENCRYPT_DATA` of 16 bytes with `CKA_VALUE_LEN`.
    DeriveAes,
}

/// The keys the derivations start from.
struct Bases {
    kek: ObjectHandle,
    ec: ObjectHandle,
    peer_point: Vec<u8>,
    aes: ObjectHandle,
}

impl Bases {
    fn new(s: &Session) -> Bases {
        use p256::elliptic_curve::sec1::ToSec1Point;
        let public = [Attribute::Token(false), Attribute::EcParams(P256_OID.to_vec())];
        let private = [
            Attribute::Token(false),
            Attribute::Private(true),
            Attribute::Derive(true),
        ];
        let (_, ec) = s
            .generate_key_pair(&Mechanism::EccKeyPairGen, &public, &private)
            .unwrap();
        let peer = p256::SecretKey::from_slice(&[0x47; 32]).unwrap();
        let aes = s
            .create_object(&[
                Attribute::Class(ObjectClass::SECRET_KEY),
                Attribute::KeyType(KeyType::AES),
                Attribute::Token(false),
                Attribute::Value(vec![0x21; 16]),
                Attribute::Derive(true),
            ])
            .unwrap();
        Bases {
            kek: kek(s),
            ec,
            peer_point: peer.public_key().to_sec1_point(false).as_bytes().to_vec(),
            aes,
        }
    }
}

impl SecretPath {
    fn make(self, s: &Session, b: &Bases, kt: KeyType, len: usize) -> Made {
        let value = vec![0x5a; len];
        let template = vec![
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(kt),
            Attribute::Token(false),
            Attribute::Sign(true),
            Attribute::Verify(true),
        ];
        let with_len = || {
            let mut t = template.clone();
            t.push(Attribute::ValueLen((len as u64).into()));
            t
        };
        match self {
            SecretPath::Create => {
                let mut t = template.clone();
                t.push(Attribute::Value(value));
                made(s.create_object(&t))
            }
            SecretPath::Generate => made(s.generate_key(&Mechanism::GenericSecretKeyGen, &with_len())),
            SecretPath::Unwrap => {
                made(s.unwrap_key(&Mechanism::AesKeyWrapPad, b.kek, &kwp_wrap(&value), &template))
            }
            SecretPath::DeriveEcdh => {
                let params = Ecdh1DeriveParams::new(EcKdf::null(), &b.peer_point);
                made(s.derive_key(&Mechanism::Ecdh1Derive(params), b.ec, &with_len()))
            }
            SecretPath::DeriveAes => {
                let data = [0x11u8; 16];
                let params = AesCbcDeriveParams::new([0; 16], &data);
                made(s.derive_key(&Mechanism::AesCbcEncryptData(params), b.aes, &with_len()))
            }
        }
    }
}

#[test]
fn secret_keys_under_14_bytes_are_refused_on_every_path() {
    let (_env, _p, s) = setup();
    let bases = Bases::new(&s);
    // Generic secrets on every path; the HMAC key types, which no mechanism generates, on the
    // others (the `_GENERAL` HMACs take them as they take generic secrets).
    let rows = [
        (SecretPath::Create, KeyType::GENERIC_SECRET),
        (SecretPath::Generate, KeyType::GENERIC_SECRET),
        (SecretPath::Unwrap, KeyType::GENERIC_SECRET),
        (SecretPath::DeriveEcdh, KeyType::GENERIC_SECRET),
        (SecretPath::DeriveAes, KeyType::GENERIC_SECRET),
        (SecretPath::Create, KeyType::SHA256_HMAC),
        (SecretPath::Unwrap, KeyType::SHA256_HMAC),
        (SecretPath::DeriveEcdh, KeyType::SHA256_HMAC),
        (SecretPath::DeriveAes, KeyType::SHA256_HMAC),
    ];
    for (path, kt) in rows {
        for len in SECRET_SHORT.into_iter().chain([SECRET_MIN]) {
            let got = path.make(&s, &bases, kt, len);
            assert_eq!(
                got.map(|_| ()),
                expected(len, SECRET_MIN),
                "{path:?} of a {len}-byte {kt}"
            );
            // A key at the minimum is a working HMAC key.
            if let Ok(key) = got {
                let mac = s.sign(&Mechanism::Sha256Hmac, key, b"data").unwrap();
                s.verify(&Mechanism::Sha256Hmac, key, b"data", &mac).unwrap();
            }
        }
    }
}

/// `C_GetMechanismInfo` says what the paths above enforce: RSA keys from 1,024 bits, generic
/// secrets generated from 112 bits (this mechanism counts bits), HMAC keys from 14 bytes (the
/// HMAC mechanisms count bytes, as SoftHSM does).
#[test]
fn mechanism_info_gives_the_minimums() {
    let (_env, p, s) = setup();
    let slot = s.get_session_info().unwrap().slot_id();
    let rows = [
        (MechanismType::RSA_PKCS_KEY_PAIR_GEN, RSA_MIN),
        (MechanismType::RSA_PKCS, RSA_MIN),
        (MechanismType::SHA256_RSA_PKCS, RSA_MIN),
        (MechanismType::GENERIC_SECRET_KEY_GEN, SECRET_MIN * 8),
        (MechanismType::SHA1_HMAC, SECRET_MIN),
        (MechanismType::SHA256_HMAC, SECRET_MIN),
        (MechanismType::SHA512_HMAC, SECRET_MIN),
    ];
    for (m, min) in rows {
        let info = p.get_mechanism_info(slot, m).unwrap();
        assert_eq!(info.min_key_size(), min, "{m}");
    }
}
