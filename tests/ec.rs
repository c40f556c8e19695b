//! Elliptic-curve keys through the built module: ECDSA on P-256, P-384 and P-521 with every
//! hash, single and multi-part, and Ed25519; every signature checked by an independent
//! implementation (OpenSSL's command line, and RustCrypto verifying keys built from the
//! CKA_EC_POINT the token returned). Key import with its consistency checks, the attribute
//! policy on EC keys, the store round trip, and the error paths as a table.

mod common;

use common::*;
use cryptoki::error::RvError;
use cryptoki::mechanism::eddsa::{EddsaParams, EddsaSignatureScheme};
use cryptoki::mechanism::{Mechanism, MechanismType};
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::Session;
use cryptoki_sys::*;
use p256::ecdsa::signature::hazmat::PrehashVerifier;
use sha2::{Digest, Sha224, Sha256, Sha384, Sha512};
use std::path::Path;

const P256_OID: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const P384_OID: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22];
const P521_OID: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23];
const ED25519_OID: &[u8] = &[0x06, 0x03, 0x2b, 0x65, 0x70];

fn printable(name: &str) -> Vec<u8> {
    let mut v = vec![0x13, name.len() as u8];
    v.extend_from_slice(name.as_bytes());
    v
}

fn setup() -> (TestEnv, cryptoki::context::Pkcs11, Session) {
    let env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "ec");
    let s = user_session(&p, slot);
    (env, p, s)
}

fn keypair(
    s: &Session,
    mech: &Mechanism,
    params: &[u8],
    id: &[u8],
) -> cryptoki::error::Result<(ObjectHandle, ObjectHandle)> {
    let public = vec![
        Attribute::Token(true),
        Attribute::EcParams(params.to_vec()),
        Attribute::Verify(true),
        Attribute::Id(id.to_vec()),
    ];
    let private = vec![
        Attribute::Token(true),
        Attribute::Private(true),
        Attribute::Sensitive(true),
        Attribute::Sign(true),
        Attribute::Id(id.to_vec()),
    ];
    s.generate_key_pair(mech, &public, &private)
}

fn ec_keypair(s: &Session, params: &[u8], id: &[u8]) -> (ObjectHandle, ObjectHandle) {
    keypair(s, &Mechanism::EccKeyPairGen, params, id).unwrap()
}

fn get(s: &Session, key: ObjectHandle, t: AttributeType) -> Vec<u8> {
    let a = s.get_attributes(key, &[t]).unwrap();
    match &a[0] {
        Attribute::EcPoint(v)
        | Attribute::EcParams(v)
        | Attribute::PublicKeyInfo(v)
        | Attribute::Value(v) => v.clone(),
        other => panic!("unexpected {other:?}"),
    }
}

/// The raw point inside the DER OCTET STRING the token returns, the wrapping checked here by
/// hand (not by the token's own code).
fn raw_point(s: &Session, key: ObjectHandle) -> Vec<u8> {
    let der = get(s, key, AttributeType::EcPoint);
    assert_eq!(der[0], 0x04, "CKA_EC_POINT is an OCTET STRING");
    let (len, body) = match der[1] {
        0x81 => (der[2] as usize, &der[3..]),
        l if l < 0x80 => (l as usize, &der[2..]),
        _ => panic!("unexpected length form"),
    };
    assert_eq!(len, body.len(), "the OCTET STRING is the whole value");
    body.to_vec()
}

/// An ECDSA verifying key of any of the three curves, from the token's point.
enum Verifier {
    P256(p256::ecdsa::VerifyingKey),
    P384(p384::ecdsa::VerifyingKey),
    P521(p521::ecdsa::VerifyingKey),
}

impl Verifier {
    fn new(params: &[u8], raw: &[u8]) -> Verifier {
        match params {
            P256_OID => Verifier::P256(p256::ecdsa::VerifyingKey::from_sec1_bytes(raw).unwrap()),
            P384_OID => Verifier::P384(p384::ecdsa::VerifyingKey::from_sec1_bytes(raw).unwrap()),
            _ => Verifier::P521(p521::ecdsa::VerifyingKey::from_sec1_bytes(raw).unwrap()),
        }
    }

    fn verify(&self, hash: &[u8], sig: &[u8]) -> bool {
        match self {
            Verifier::P256(k) => {
                p256::ecdsa::Signature::from_slice(sig).is_ok_and(|s| k.verify_prehash(hash, &s).is_ok())
            }
            Verifier::P384(k) => {
                p384::ecdsa::Signature::from_slice(sig).is_ok_and(|s| k.verify_prehash(hash, &s).is_ok())
            }
            Verifier::P521(k) => {
                p521::ecdsa::Signature::from_slice(sig).is_ok_and(|s| k.verify_prehash(hash, &s).is_ok())
            }
        }
    }
}

/// A DER INTEGER of an unsigned big-endian value.
fn der_int(v: &[u8]) -> Vec<u8> {
    let first = v.iter().position(|&b| b != 0).unwrap_or(v.len() - 1);
    let mut body = v[first..].to_vec();
    if body[0] & 0x80 != 0 {
        body.insert(0, 0);
    }
    let mut out = vec![0x02, body.len() as u8];
    out.extend(body);
    out
}

/// r || s as the DER ECDSA-Sig-Value OpenSSL reads.
fn sig_to_der(sig: &[u8]) -> Vec<u8> {
    let (r, s) = sig.split_at(sig.len() / 2);
    let body = [der_int(r), der_int(s)].concat();
    let mut out = vec![0x30];
    if body.len() >= 0x80 {
        out.push(0x81);
    }
    out.push(body.len() as u8);
    out.extend(body);
    out
}

fn openssl_verify_ecdsa(
    dir: &Path,
    s: &Session,
    public: ObjectHandle,
    digest: &str,
    data: &[u8],
    sig: &[u8],
) -> bool {
    let pem = dir.join("pub.pem");
    write_public_pem(s, public, &pem);
    std::fs::write(dir.join("data"), data).unwrap();
    std::fs::write(dir.join("sig.der"), sig_to_der(sig)).unwrap();
    openssl(&[
        "dgst",
        &format!("-{digest}"),
        "-verify",
        pem.to_str().unwrap(),
        "-signature",
        dir.join("sig.der").to_str().unwrap(),
        dir.join("data").to_str().unwrap(),
    ])
}

#[test]
fn ecdsa_every_curve_and_hash_single_and_multi_part_verified_independently() {
    let (env, _p, s) = setup();
    let data = b"a DNSSEC RRset, or something like one".repeat(5);
    let hashes: Vec<(Mechanism, Vec<u8>)> = vec![
        (Mechanism::EcdsaSha1, sha1::Sha1::digest(&data).to_vec()),
        (Mechanism::EcdsaSha224, Sha224::digest(&data).to_vec()),
        (Mechanism::EcdsaSha256, Sha256::digest(&data).to_vec()),
        (Mechanism::EcdsaSha384, Sha384::digest(&data).to_vec()),
        (Mechanism::EcdsaSha512, Sha512::digest(&data).to_vec()),
    ];
    // The curve given by OID and by name; the token stores and returns the OID either way.
    for (given, oid, half, digest) in [
        (P256_OID.to_vec(), P256_OID, 32, "sha256"),
        (printable("secp384r1"), P384_OID, 48, "sha384"),
        (P521_OID.to_vec(), P521_OID, 66, "sha512"),
    ] {
        let (public, private) = ec_keypair(&s, &given, b"ec");
        assert_eq!(get(&s, public, AttributeType::EcParams), oid);
        assert_eq!(get(&s, private, AttributeType::EcParams), oid);
        let raw = raw_point(&s, public);
        assert_eq!((raw.len(), raw[0]), (1 + 2 * half, 0x04), "uncompressed point");
        let v = Verifier::new(oid, &raw);
        for (mech, hash) in &hashes {
            let one = s.sign(mech, private, &data).unwrap();
            assert_eq!(one.len(), 2 * half, "{mech:?}: r || s at the order's length");
            assert!(v.verify(hash, &one), "{mech:?} on {oid:02x?}");
            // Hedged nonces: the same input signs differently each time (a fresh k).
            let again = s.sign(mech, private, &data).unwrap();
            assert_ne!(again[..half], one[..half], "{mech:?}: r repeated");
            assert!(v.verify(hash, &again), "{mech:?} again");
            s.sign_init(mech, private).unwrap();
            for chunk in data.chunks(17) {
                s.sign_update(chunk).unwrap();
            }
            let multi = s.sign_final().unwrap();
            assert!(v.verify(hash, &multi), "multi-part {mech:?}");
            s.verify(mech, public, &data, &multi).unwrap();
            // The private key object verifies too (it holds the public point).
            s.verify(mech, private, &data, &one).unwrap();
            let mut bad = multi.clone();
            bad[3] ^= 1;
            assert_eq!(
                rv(s.verify(mech, public, &data, &bad).unwrap_err()),
                RvError::SignatureInvalid
            );
            // The raw mechanism over the same hash, verified like the rest.
            let raw_sig = s.sign(&Mechanism::Ecdsa, private, hash).unwrap();
            assert!(v.verify(hash, &raw_sig));
            s.verify(&Mechanism::Ecdsa, public, hash, &raw_sig).unwrap();
        }
        // OpenSSL checks one hash-and-sign signature per curve, with the SPKI the token gave.
        let mech = match digest {
            "sha256" => Mechanism::EcdsaSha256,
            "sha384" => Mechanism::EcdsaSha384,
            _ => Mechanism::EcdsaSha512,
        };
        let sig = s.sign(&mech, private, &data).unwrap();
        assert!(openssl_verify_ecdsa(
            env.dir.path(),
            &s,
            public,
            digest,
            &data,
            &sig
        ));
        let mut bad = sig.clone();
        bad[0] ^= 0x40;
        assert!(
            !openssl_verify_ecdsa(env.dir.path(), &s, public, digest, &data, &bad),
            "OpenSSL can fail"
        );
    }
}

#[test]
fn ecdsa_raw_input_of_any_length_is_bits2int_of_the_hash() {
    let (env, _p, s) = setup();
    let dir = env.dir.path();
    for (oid, lens) in [
        (P256_OID, &[1usize, 20, 32, 48, 64, 100][..]),
        (P521_OID, &[20, 64, 66, 80][..]),
    ] {
        let (public, private) = ec_keypair(&s, oid, b"raw");
        let v = Verifier::new(oid, &raw_point(&s, public));
        write_public_pem(&s, public, &dir.join("raw.pem"));
        for &n in lens {
            let input: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(37) | 0x80).collect();
            let sig = s.sign(&Mechanism::Ecdsa, private, &input).unwrap();
            s.verify(&Mechanism::Ecdsa, public, &input, &sig).unwrap();
            // OpenSSL applies FIPS 186 bits2int to a raw digest: keep the leftmost qlen bits.
            std::fs::write(dir.join("in.bin"), &input).unwrap();
            std::fs::write(dir.join("sig.der"), sig_to_der(&sig)).unwrap();
            let ok = openssl(&[
                "pkeyutl",
                "-verify",
                "-pubin",
                "-inkey",
                dir.join("raw.pem").to_str().unwrap(),
                "-in",
                dir.join("in.bin").to_str().unwrap(),
                "-sigfile",
                dir.join("sig.der").to_str().unwrap(),
            ]);
            // OpenSSL refuses inputs longer than any hash it knows (64 bytes).
            assert!(ok || n > 64, "OpenSSL: input of {n} bytes on {oid:02x?}");
            // RustCrypto agrees wherever its truncation is the FIPS one: every byte-aligned
            // order, and P-521 inputs of at most 521 bits. Longer ones it masks instead of
            // shifting, so there the test takes the leftmost 521 bits itself.
            let z = if oid == P521_OID && n * 8 > 521 {
                leftmost_521_bits(&input)
            } else {
                input.clone()
            };
            assert!(v.verify(&z, &sig), "RustCrypto: input of {n} bytes on {oid:02x?}");
        }
    }
}

/// FIPS 186 bits2int for P-521, written out here: the first 66 bytes shifted right by 7.
fn leftmost_521_bits(h: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; 66];
    let mut carry = 0u8;
    for (o, &b) in out.iter_mut().zip(&h[..66]) {
        *o = (b >> 7) | carry;
        carry = b << 1;
    }
    out
}

#[test]
fn ed25519_keygen_sign_and_verify_with_openssl_and_dalek() {
    let (env, _p, s) = setup();
    let msg = b"pure Ed25519 over the whole message".repeat(9);
    for params in [ED25519_OID.to_vec(), printable("edwards25519")] {
        let (public, private) = keypair(&s, &Mechanism::EccEdwardsKeyPairGen, &params, b"ed").unwrap();
        assert_eq!(get(&s, public, AttributeType::EcParams), ED25519_OID);
        let raw = raw_point(&s, public);
        let vk = ed25519_dalek::VerifyingKey::from_bytes(&raw.clone().try_into().unwrap()).unwrap();
        for mech in [
            Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Pure)),
            Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Ed25519ctx(&[]))),
        ] {
            let sig = s.sign(&mech, private, &msg).unwrap();
            assert_eq!(sig.len(), 64);
            vk.verify_strict(&msg, &ed25519_dalek::Signature::from_slice(&sig).unwrap())
                .unwrap();
            s.sign_init(&mech, private).unwrap();
            for c in msg.chunks(50) {
                s.sign_update(c).unwrap();
            }
            assert_eq!(s.sign_final().unwrap(), sig, "Ed25519 is deterministic");
            s.verify(&mech, public, &msg, &sig).unwrap();
            let mut bad = sig.clone();
            bad[40] ^= 1;
            assert_eq!(
                rv(s.verify(&mech, public, &msg, &bad).unwrap_err()),
                RvError::SignatureInvalid
            );
        }
        let sig = s
            .sign(
                &Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Pure)),
                private,
                &msg,
            )
            .unwrap();
        let dir = env.dir.path();
        write_public_pem(&s, public, &dir.join("ed.pem"));
        std::fs::write(dir.join("msg"), &msg).unwrap();
        std::fs::write(dir.join("ed.sig"), &sig).unwrap();
        let verify = |sigfile: &str| {
            openssl(&[
                "pkeyutl",
                "-verify",
                "-pubin",
                "-inkey",
                dir.join("ed.pem").to_str().unwrap(),
                "-rawin",
                "-in",
                dir.join("msg").to_str().unwrap(),
                "-sigfile",
                dir.join(sigfile).to_str().unwrap(),
            ])
        };
        assert!(verify("ed.sig"));
        let mut bad = sig.clone();
        bad[1] ^= 1;
        std::fs::write(dir.join("bad.sig"), &bad).unwrap();
        assert!(!verify("bad.sig"));
    }
}

fn create(s: &Session, attrs: Vec<Attribute>) -> cryptoki::error::Result<ObjectHandle> {
    s.create_object(&attrs)
}

fn ec_private_template(params: &[u8], value: &[u8], extra: Vec<Attribute>) -> Vec<Attribute> {
    let mut t = vec![
        Attribute::Class(ObjectClass::PRIVATE_KEY),
        Attribute::KeyType(KeyType::EC),
        Attribute::Token(false),
        Attribute::Private(true),
        Attribute::Sign(true),
        Attribute::EcParams(params.to_vec()),
        Attribute::Value(value.to_vec()),
    ];
    t.extend(extra);
    t
}

fn ec_public_template(key_type: KeyType, params: &[u8], point: &[u8]) -> Vec<Attribute> {
    vec![
        Attribute::Class(ObjectClass::PUBLIC_KEY),
        Attribute::KeyType(key_type),
        Attribute::Token(false),
        Attribute::Verify(true),
        Attribute::EcParams(params.to_vec()),
        Attribute::EcPoint(point.to_vec()),
    ]
}

#[test]
fn imported_keys_are_checked_and_sign_like_generated_ones() {
    let (_env, _p, s) = setup();
    // A key made by RustCrypto, imported: raw point on the public key, the scalar unpadded
    // when it happens to start with zero bytes.
    let sk = p256::ecdsa::SigningKey::from_slice(&[0x11; 32]).unwrap();
    let point = sk.verifying_key().to_sec1_point(false).as_bytes().to_vec();
    let private = create(&s, ec_private_template(P256_OID, &sk.to_bytes(), vec![])).unwrap();
    let public = create(&s, ec_public_template(KeyType::EC, P256_OID, &point)).unwrap();
    assert_eq!(
        raw_point(&s, public),
        point,
        "a raw point is stored as the DER form"
    );
    assert_eq!(raw_point(&s, private), point, "the private key carries its point");
    let hash = Sha256::digest(b"imported").to_vec();
    let sig = s.sign(&Mechanism::Ecdsa, private, &hash).unwrap();
    let ours = p256::ecdsa::Signature::from_slice(&sig).unwrap();
    sk.verifying_key().verify_prehash(&hash, &ours).unwrap();
    s.verify(&Mechanism::Ecdsa, public, &hash, &sig).unwrap();
    // Imported keys are not local, have no generating mechanism, and were never sensitive.
    let a = s
        .get_attributes(private, &[AttributeType::Local, AttributeType::AlwaysSensitive])
        .unwrap();
    assert!(matches!(a[0], Attribute::Local(false)));
    assert!(matches!(a[1], Attribute::AlwaysSensitive(false)));

    // A DER point and the private key given with its matching point are accepted.
    let mut der = vec![0x04, 65];
    der.extend(&point);
    create(&s, ec_public_template(KeyType::EC, P256_OID, &der)).unwrap();
    create(
        &s,
        ec_private_template(P256_OID, &sk.to_bytes(), vec![Attribute::EcPoint(der.clone())]),
    )
    .unwrap();

    let other = p256::ecdsa::SigningKey::from_slice(&[0x22; 32]).unwrap();
    let other_point = other.verifying_key().to_sec1_point(false).as_bytes().to_vec();
    let mut off_curve = point.clone();
    off_curve[64] ^= 1;
    let n = unhex("ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551");
    let ed = ed25519_dalek::SigningKey::from_bytes(&[3u8; 32]);
    let cases: Vec<(&str, Vec<Attribute>, RvError)> = vec![
        (
            "point not on the curve",
            ec_public_template(KeyType::EC, P256_OID, &off_curve),
            RvError::AttributeValueInvalid,
        ),
        (
            "P-256 point as P-384",
            ec_public_template(KeyType::EC, P384_OID, &point),
            RvError::AttributeValueInvalid,
        ),
        (
            "point of garbage",
            ec_public_template(KeyType::EC, P256_OID, b"\x04\x03abc"),
            RvError::AttributeValueInvalid,
        ),
        (
            "scalar n",
            ec_private_template(P256_OID, &n, vec![]),
            RvError::AttributeValueInvalid,
        ),
        (
            "scalar zero",
            ec_private_template(P256_OID, &[0; 32], vec![]),
            RvError::AttributeValueInvalid,
        ),
        (
            "scalar with another key's point",
            ec_private_template(P256_OID, &sk.to_bytes(), vec![Attribute::EcPoint(other_point)]),
            RvError::TemplateInconsistent,
        ),
        (
            "unknown curve",
            ec_public_template(KeyType::EC, &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x0a], &point),
            RvError::CurveNotSupported,
        ),
        (
            "garbage params",
            ec_public_template(KeyType::EC, b"\x01\x02", &point),
            RvError::AttributeValueInvalid,
        ),
        (
            "Edwards curve on CKK_EC",
            ec_public_template(KeyType::EC, ED25519_OID, &ed.verifying_key().to_bytes()),
            RvError::CurveNotSupported,
        ),
        (
            "public key without a point",
            ec_public_template(KeyType::EC, P256_OID, &point)[..5].to_vec(),
            RvError::TemplateIncomplete,
        ),
        (
            "RSA attribute on an EC key",
            [
                ec_public_template(KeyType::EC, P256_OID, &point),
                vec![Attribute::ModulusBits(2048.into())],
            ]
            .concat(),
            RvError::AttributeTypeInvalid,
        ),
    ];
    for (what, template, want) in cases {
        assert_eq!(rv(create(&s, template).unwrap_err()), want, "{what}");
    }
    // An Ed25519 key imported signs as RFC 8032 says.
    let mut t = ec_private_template(ED25519_OID, &[3u8; 32], vec![]);
    t[1] = Attribute::KeyType(KeyType::EC_EDWARDS);
    let edk = create(&s, t).unwrap();
    let sig = s
        .sign(
            &Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Pure)),
            edk,
            b"m",
        )
        .unwrap();
    ed.verifying_key()
        .verify_strict(b"m", &ed25519_dalek::Signature::from_slice(&sig).unwrap())
        .unwrap();
}

#[test]
fn generated_keys_have_the_attributes_of_local_sensitive_keys() {
    let (_env, _p, s) = setup();
    let (public, private) = ec_keypair(&s, P256_OID, b"attrs");
    let a = s
        .get_attributes(
            private,
            &[
                AttributeType::Local,
                AttributeType::KeyGenMechanism,
                AttributeType::AlwaysSensitive,
                AttributeType::NeverExtractable,
                AttributeType::Decrypt,
            ],
        )
        .unwrap();
    assert!(matches!(a[0], Attribute::Local(true)));
    assert!(matches!(a[1], Attribute::KeyGenMechanism(m) if m == MechanismType::ECC_KEY_PAIR_GEN));
    assert!(matches!(a[2], Attribute::AlwaysSensitive(true)));
    assert!(matches!(a[3], Attribute::NeverExtractable(true)));
    assert!(
        matches!(a[4], Attribute::Decrypt(false)),
        "EC keys do not decrypt"
    );
    // The secret scalar is never revealed; the SPKI of both halves is the same public key.
    assert!(sensitive(&s, private));
    let spki = get(&s, public, AttributeType::PublicKeyInfo);
    assert_eq!(spki, get(&s, private, AttributeType::PublicKeyInfo));
    let (_, edp) = keypair(&s, &Mechanism::EccEdwardsKeyPairGen, ED25519_OID, b"ed").unwrap();
    let a = s.get_attributes(edp, &[AttributeType::KeyGenMechanism]).unwrap();
    assert!(matches!(a[0], Attribute::KeyGenMechanism(m) if m == MechanismType::ECC_EDWARDS_KEY_PAIR_GEN));
}

/// Whether C_GetAttributeValue answers CKR_ATTRIBUTE_SENSITIVE for the key's CKA_VALUE.
fn sensitive(s: &Session, key: ObjectHandle) -> bool {
    let info = s.get_attribute_info(key, &[AttributeType::Value]).unwrap();
    matches!(info[0], cryptoki::object::AttributeInfo::Sensitive)
}

#[test]
fn the_one_policy_applies_to_ec_private_values() {
    let (_env, _p, s) = setup();
    let sk = [0x42u8; 32];
    // Extractable and not sensitive: the value may be read, then made sensitive for good.
    let k = create(
        &s,
        ec_private_template(
            P256_OID,
            &sk,
            vec![Attribute::Sensitive(false), Attribute::Extractable(true)],
        ),
    )
    .unwrap();
    assert_eq!(get(&s, k, AttributeType::Value), sk);
    s.update_attributes(k, &[Attribute::Sensitive(true)]).unwrap();
    assert!(sensitive(&s, k));
    assert_eq!(
        rv(s.update_attributes(k, &[Attribute::Sensitive(false)])
            .unwrap_err()),
        RvError::AttributeReadOnly
    );
    // Not extractable hides it even when not sensitive.
    let k = create(
        &s,
        ec_private_template(P256_OID, &sk, vec![Attribute::Sensitive(false)]),
    )
    .unwrap();
    assert!(sensitive(&s, k));
    // The curve and point are fixed once the key exists.
    assert_eq!(
        rv(s.update_attributes(k, &[Attribute::EcParams(P384_OID.to_vec())])
            .unwrap_err()),
        RvError::AttributeReadOnly
    );
}

#[test]
fn token_ec_keys_survive_a_restart() {
    let env = TestEnv::new();
    let (point, slot) = {
        let p = load();
        let slot = new_token(&p, "ec");
        let s = user_session(&p, slot);
        let (public, _) = ec_keypair(&s, P384_OID, b"kept");
        keypair(&s, &Mechanism::EccEdwardsKeyPairGen, ED25519_OID, b"kept-ed").unwrap();
        let point = raw_point(&s, public);
        drop(s);
        p.finalize().unwrap();
        (point, slot)
    };
    let p = load();
    let s = user_session(&p, slot);
    let private = find_one(&s, ObjectClass::PRIVATE_KEY, b"kept");
    let hash = Sha384::digest(b"after restart").to_vec();
    let sig = s.sign(&Mechanism::Ecdsa, private, &hash).unwrap();
    assert!(Verifier::new(P384_OID, &point).verify(&hash, &sig));
    let ed = find_one(&s, ObjectClass::PRIVATE_KEY, b"kept-ed");
    s.sign(
        &Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Pure)),
        ed,
        b"x",
    )
    .unwrap();
    drop(env);
}

#[test]
fn mechanism_list_and_info_name_the_ec_key_sizes() {
    let (_env, p, s) = setup();
    let slot = s.get_session_info().unwrap().slot_id();
    let list = p.get_mechanism_list(slot).unwrap();
    for (m, min, max, flag) in [
        (MechanismType::ECC_KEY_PAIR_GEN, 256, 521, CKF_GENERATE_KEY_PAIR),
        (MechanismType::ECDSA, 256, 521, CKF_SIGN),
        (MechanismType::ECDSA_SHA256, 256, 521, CKF_VERIFY),
        (MechanismType::ECDSA_SHA512, 256, 521, CKF_SIGN),
        // Ed25519's field (255 bits) to Ed448's (448).
        (
            MechanismType::ECC_EDWARDS_KEY_PAIR_GEN,
            255,
            448,
            CKF_GENERATE_KEY_PAIR,
        ),
        (MechanismType::EDDSA, 255, 448, CKF_SIGN | CKF_VERIFY),
    ] {
        assert!(list.contains(&m), "{m:?} listed");
        let info = p.get_mechanism_info(slot, m).unwrap();
        assert_eq!((info.min_key_size(), info.max_key_size()), (min, max), "{m:?}");
        let raw = unsafe_flags(&info);
        assert_eq!(raw & flag, flag, "{m:?} flags");
    }
}

fn unsafe_flags(info: &cryptoki::mechanism::MechanismInfo) -> CK_FLAGS {
    let mut f = 0;
    if info.sign() {
        f |= CKF_SIGN;
    }
    if info.verify() {
        f |= CKF_VERIFY;
    }
    if info.generate_key_pair() {
        f |= CKF_GENERATE_KEY_PAIR;
    }
    f
}

#[test]
fn error_paths() {
    let (_env, _p, s) = setup();
    let (ec_pub, ec_priv) = ec_keypair(&s, P256_OID, b"e");
    let (_, ed_priv) = keypair(&s, &Mechanism::EccEdwardsKeyPairGen, ED25519_OID, b"d").unwrap();
    let (_, rsa_priv) = rsa_keypair(&s, 2048, b"r", false);
    let eddsa = Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Pure));
    let hash = [1u8; 32];
    let sign = |m: &Mechanism, k| s.sign(m, k, &hash).map(|_| ()).map_err(rv);
    let gen = |m: &Mechanism, params: &[u8]| keypair(&s, m, params, b"x").map(|_| ()).map_err(rv);
    let cases: Vec<(&str, Result<(), RvError>, RvError)> = vec![
        (
            "ECDSA with an RSA key",
            sign(&Mechanism::Ecdsa, rsa_priv),
            RvError::KeyTypeInconsistent,
        ),
        (
            "ECDSA with an Ed25519 key",
            sign(&Mechanism::EcdsaSha256, ed_priv),
            RvError::KeyTypeInconsistent,
        ),
        (
            "EdDSA with a P-256 key",
            sign(&eddsa, ec_priv),
            RvError::KeyTypeInconsistent,
        ),
        (
            "RSA with an EC key",
            sign(&Mechanism::RsaPkcs, ec_priv),
            RvError::KeyTypeInconsistent,
        ),
        (
            "sign with a public key",
            sign(&Mechanism::Ecdsa, ec_pub),
            RvError::KeyTypeInconsistent,
        ),
        (
            "unknown curve",
            gen(
                &Mechanism::EccKeyPairGen,
                &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x0a],
            ),
            RvError::CurveNotSupported,
        ),
        (
            "unknown curve name",
            gen(&Mechanism::EccKeyPairGen, &printable("brainpoolP256r1")),
            RvError::CurveNotSupported,
        ),
        (
            "garbage EC params",
            gen(&Mechanism::EccKeyPairGen, b"\xffgarbage"),
            RvError::AttributeValueInvalid,
        ),
        (
            "Edwards curve with EC keygen",
            gen(&Mechanism::EccKeyPairGen, ED25519_OID),
            RvError::CurveNotSupported,
        ),
        (
            "P-256 with Edwards keygen",
            gen(&Mechanism::EccEdwardsKeyPairGen, P256_OID),
            RvError::CurveNotSupported,
        ),
        (
            "Ed25519ph",
            sign(
                &Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Ed25519ph(&[]))),
                ed_priv,
            ),
            RvError::MechanismParamInvalid,
        ),
        (
            "Ed25519ctx with a context",
            sign(
                &Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Ed25519ctx(b"ctx"))),
                ed_priv,
            ),
            RvError::MechanismParamInvalid,
        ),
        (
            "signature of the wrong length",
            s.verify(&Mechanism::Ecdsa, ec_pub, &hash, &[1u8; 63]).map_err(rv),
            RvError::SignatureLenRange,
        ),
        (
            "r = 0",
            s.verify(&Mechanism::Ecdsa, ec_pub, &hash, &[0u8; 64]).map_err(rv),
            RvError::SignatureInvalid,
        ),
    ];
    for (what, got, want) in cases {
        assert_eq!(got, Err(want), "{what}");
    }
    // No EC_PARAMS at all.
    let err = s
        .generate_key_pair(
            &Mechanism::EccKeyPairGen,
            &[Attribute::Token(false)],
            &[Attribute::Token(false)],
        )
        .unwrap_err();
    assert_eq!(rv(err), RvError::TemplateIncomplete);

    // CKM_ECDSA is single-part: C_SignUpdate fails and ends the operation.
    s.sign_init(&Mechanism::Ecdsa, ec_priv).unwrap();
    assert_eq!(
        rv(s.sign_update(&hash).unwrap_err()),
        RvError::FunctionNotSupported
    );
    assert_eq!(rv(s.sign_final().unwrap_err()), RvError::OperationNotInitialized);
}

#[test]
fn short_output_buffers_follow_the_two_call_rule() {
    let (_env, _p, s) = setup();
    let (public, _private) = ec_keypair(&s, P521_OID, b"short");
    let v = Verifier::new(P521_OID, &raw_point(&s, public));
    let slot = s.get_session_info().unwrap().slot_id().id();
    let r = Raw::load();
    let slot_session = raw_session(&r, slot);
    let hash = Sha512::digest(b"two calls").to_vec();
    unsafe {
        let mut m = raw_mech::<u8>(CKM_ECDSA, None);
        let key = find_raw_private(&r, slot_session);
        assert_eq!((r.f.C_SignInit.unwrap())(slot_session, &mut m, key), CKR_OK);
        let mut len: CK_ULONG = 0;
        let sign = |buf: *mut u8, len: &mut CK_ULONG| {
            (r.f.C_Sign.unwrap())(slot_session, hash.as_ptr() as *mut u8, hash.len() as _, buf, len)
        };
        assert_eq!(sign(std::ptr::null_mut(), &mut len), CKR_OK);
        assert_eq!(len, 132, "P-521: two 66-byte halves");
        let mut buf = vec![0u8; 200];
        len = 131;
        assert_eq!(sign(buf.as_mut_ptr(), &mut len), CKR_BUFFER_TOO_SMALL);
        assert_eq!(len, 132);
        assert!(buf.iter().all(|&b| b == 0), "nothing written to a short buffer");
        len = 200;
        assert_eq!(sign(buf.as_mut_ptr(), &mut len), CKR_OK, "the operation was kept");
        assert_eq!(len, 132);
        assert!(v.verify(&hash, &buf[..132]));
    }
}

/// A session of the raw API on the token `setup` made, logged in by the cryptoki session.
fn raw_session(r: &Raw, slot: CK_SLOT_ID) -> CK_SESSION_HANDLE {
    r.open_session(slot)
}

unsafe fn find_raw_private(r: &Raw, h: CK_SESSION_HANDLE) -> CK_OBJECT_HANDLE {
    let mut class = CKO_PRIVATE_KEY;
    let mut id = *b"short";
    let mut t = [
        CK_ATTRIBUTE {
            type_: CKA_CLASS,
            pValue: &mut class as *mut _ as *mut std::ffi::c_void,
            ulValueLen: std::mem::size_of::<CK_OBJECT_CLASS>() as CK_ULONG,
        },
        CK_ATTRIBUTE {
            type_: CKA_ID,
            pValue: id.as_mut_ptr() as *mut std::ffi::c_void,
            ulValueLen: id.len() as CK_ULONG,
        },
    ];
    // SAFETY: a test: the template and outputs are live locals of the right types.
    unsafe {
        assert_eq!((r.f.C_FindObjectsInit.unwrap())(h, t.as_mut_ptr(), 2), CKR_OK);
        let mut found = 0;
        let mut n = 0;
        assert_eq!((r.f.C_FindObjects.unwrap())(h, &mut found, 1, &mut n), CKR_OK);
        assert_eq!((r.f.C_FindObjectsFinal.unwrap())(h), CKR_OK);
        assert_eq!(n, 1);
        found
    }
}

/// OpenSC's pkcs11-tool makes EC and Ed25519 keys, signs with them (OpenSSL verifies, with
/// the SubjectPublicKeyInfo the token gives), and its own `--test --test-ec` passes.
#[test]
fn pkcs11_tool_keypairgen_sign_and_test_ec() {
    let env = TestEnv::new();
    let tool = |args: &[&str]| -> String {
        let out = std::process::Command::new("pkcs11-tool")
            .arg("--module")
            .arg(module_path())
            .args(args)
            .env("FERROHSM_CONF", env.conf())
            .output()
            .expect("pkcs11-tool (Debian package opensc) must be installed");
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "pkcs11-tool {args:?}:\n{text}");
        text
    };
    tool(&["--init-token", "--label", "tool", "--so-pin", SO_PIN]);
    tool(&[
        "--token-label",
        "tool",
        "--login",
        "--login-type",
        "so",
        "--so-pin",
        SO_PIN,
        "--init-pin",
        "--pin",
        USER_PIN,
    ]);
    let login = ["--token-label", "tool", "--login", "--pin", USER_PIN];
    let dir = env.dir.path();
    std::fs::write(dir.join("data"), b"signed by pkcs11-tool\n").unwrap();
    let data = dir.join("data");
    let keys = [
        ("EC:prime256v1", "01"),
        ("EC:secp384r1", "02"),
        ("EC:secp521r1", "03"),
        ("EC:edwards25519", "04"),
    ];
    for (kt, id) in keys {
        tool(
            &[
                &login[..],
                &["--keypairgen", "--key-type", kt, "--id", id, "--label", kt],
            ]
            .concat(),
        );
        let sig = dir.join(format!("sig{id}"));
        let mech: &[&str] = if kt == "EC:edwards25519" {
            &["-m", "EDDSA"]
        } else {
            &["-m", "ECDSA-SHA256", "--signature-format", "openssl"]
        };
        tool(
            &[
                &login[..],
                &[
                    "--sign",
                    "--id",
                    id,
                    "-i",
                    data.to_str().unwrap(),
                    "-o",
                    sig.to_str().unwrap(),
                ],
                mech,
            ]
            .concat(),
        );
    }
    // OpenSSL verifies each signature with the public key read through the module.
    let p = load();
    let slot = *p
        .get_slots_with_token()
        .unwrap()
        .iter()
        .find(|s| p.get_token_info(**s).unwrap().label() == "tool")
        .unwrap();
    let s = user_session(&p, slot);
    for (kt, id) in keys {
        let public = find_one(&s, ObjectClass::PUBLIC_KEY, &unhex(id));
        let pem = dir.join(format!("pub{id}.pem"));
        write_public_pem(&s, public, &pem);
        let sig = dir.join(format!("sig{id}"));
        let (pem, sig, data) = (
            pem.to_str().unwrap(),
            sig.to_str().unwrap(),
            data.to_str().unwrap(),
        );
        let ok = if kt == "EC:edwards25519" {
            openssl(&[
                "pkeyutl", "-verify", "-pubin", "-inkey", pem, "-rawin", "-in", data, "-sigfile", sig,
            ])
        } else {
            openssl(&["dgst", "-sha256", "-verify", pem, "-signature", sig, data])
        };
        assert!(ok, "OpenSSL verifies the {kt} signature");
    }
    drop(s);
    p.finalize().unwrap();
    let out = tool(
        &[
            &login[..],
            &[
                "--test",
                "--test-ec",
                "--allow-sw",
                "--id",
                "99",
                "--key-type",
                "EC:prime256v1",
            ],
        ]
        .concat(),
    );
    assert!(out.contains("No errors") && out.contains("==> OK"), "{out}");
}

/// CKM_ECDH1_DERIVE with CKD_NULL: the derived secret equals RustCrypto's x-coordinate of the
/// shared point (peer point given raw and as DER), truncated to CKA_VALUE_LEN from the left;
/// bad parameters and a key without CKA_DERIVE are refused.
#[test]
fn ecdh1_derive_matches_rustcrypto() {
    use cryptoki::mechanism::elliptic_curve::{EcKdf, Ecdh1DeriveParams};
    let (_env, _p, s) = setup();
    let ours = p256::SecretKey::from_slice(&[0x31; 32]).unwrap();
    let peer = p256::SecretKey::from_slice(&[0x47; 32]).unwrap();
    use p256::elliptic_curve::sec1::ToSec1Point;
    let peer_point = peer.public_key().to_sec1_point(false).as_bytes().to_vec();
    let expected = p256::ecdh::diffie_hellman(peer.to_nonzero_scalar(), ours.public_key().as_affine());
    let expected = expected.raw_secret_bytes().to_vec();
    let base = create(
        &s,
        ec_private_template(P256_OID, &ours.to_bytes(), vec![Attribute::Derive(true)]),
    )
    .unwrap();
    let secret = |len: Option<u64>| {
        let mut t = vec![
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(KeyType::GENERIC_SECRET),
            Attribute::Token(false),
            Attribute::Sensitive(false),
            Attribute::Extractable(true),
        ];
        if let Some(l) = len {
            t.push(Attribute::ValueLen(l.into()));
        }
        t
    };
    let mut der = vec![0x04, 65];
    der.extend(&peer_point);
    for (point, len) in [(&peer_point, None), (&der, Some(16u64))] {
        let mech = Mechanism::Ecdh1Derive(Ecdh1DeriveParams::new(EcKdf::null(), point));
        let k = s.derive_key(&mech, base, &secret(len)).unwrap();
        let n = len.unwrap_or(32) as usize;
        assert_eq!(get(&s, k, AttributeType::Value), expected[..n], "{} bytes", n);
    }
    let mut off = peer_point.clone();
    off[20] ^= 1;
    let mech = Mechanism::Ecdh1Derive(Ecdh1DeriveParams::new(EcKdf::null(), &off));
    assert_eq!(
        rv(s.derive_key(&mech, base, &secret(None)).unwrap_err()),
        RvError::MechanismParamInvalid
    );
    let no_derive = create(&s, ec_private_template(P256_OID, &ours.to_bytes(), vec![])).unwrap();
    let mech = Mechanism::Ecdh1Derive(Ecdh1DeriveParams::new(EcKdf::null(), &peer_point));
    assert_eq!(
        rv(s.derive_key(&mech, no_derive, &secret(None)).unwrap_err()),
        RvError::KeyFunctionNotPermitted
    );
    assert_eq!(
        rv(s.derive_key(&mech, base, &secret(Some(33))).unwrap_err()),
        RvError::TemplateInconsistent
    );
}
