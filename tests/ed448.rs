//! Ed448 (CKM_EDDSA on Ed448 keys) through the built module: generation by OID and by the
//! PKCS#11 name, signatures verified by OpenSSL's command line from the CKA_EC_POINT the token
//! returned; RFC 8032's known answers (with and without a context) from a key imported with
//! C_CreateObject; the import checks; and the CK_EDDSA_PARAMS it refuses (Ed448ph, a context
//! longer than 255 bytes).

mod common;

use common::*;
use cryptoki::error::RvError;
use cryptoki::mechanism::eddsa::{EddsaParams, EddsaSignatureScheme};
use cryptoki::mechanism::{Mechanism, MechanismType};
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::Session;

const ED448_OID: &[u8] = &[0x06, 0x03, 0x2b, 0x65, 0x71];
const ED25519_OID: &[u8] = &[0x06, 0x03, 0x2b, 0x65, 0x70];

fn printable(name: &str) -> Vec<u8> {
    let mut v = vec![0x13, name.len() as u8];
    v.extend_from_slice(name.as_bytes());
    v
}

fn get(s: &Session, key: ObjectHandle, t: AttributeType) -> Vec<u8> {
    match &s.get_attributes(key, &[t]).unwrap()[0] {
        Attribute::EcPoint(v) | Attribute::EcParams(v) | Attribute::PublicKeyInfo(v) => v.clone(),
        other => panic!("unexpected {other:?}"),
    }
}

/// The PEM public key OpenSSL reads, built here from CKA_EC_POINT (RFC 8410's SPKI by hand,
/// not the token's CKA_PUBLIC_KEY_INFO), through `openssl pkey`.
fn pem_from_point(s: &Session, public: ObjectHandle, dir: &std::path::Path) -> std::path::PathBuf {
    let der = get(s, public, AttributeType::EcPoint);
    assert_eq!(
        &der[..2],
        &[0x04, 57],
        "CKA_EC_POINT: a DER OCTET STRING of 57 bytes"
    );
    let raw = &der[2..];
    assert_eq!(raw.len(), 57);
    let spki = [
        &[
            0x30, 0x43, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x71, 0x03, 0x3a, 0x00,
        ][..],
        raw,
    ]
    .concat();
    let (der_path, pem) = (dir.join("ed448.der"), dir.join("ed448.pem"));
    std::fs::write(&der_path, &spki).unwrap();
    assert!(openssl(&[
        "pkey",
        "-pubin",
        "-inform",
        "DER",
        "-in",
        der_path.to_str().unwrap(),
        "-out",
        pem.to_str().unwrap(),
    ]));
    assert_eq!(
        get(s, public, AttributeType::PublicKeyInfo),
        spki,
        "CKA_PUBLIC_KEY_INFO"
    );
    pem
}

fn openssl_verifies(dir: &std::path::Path, pem: &std::path::Path, msg: &[u8], sig: &[u8]) -> bool {
    std::fs::write(dir.join("msg"), msg).unwrap();
    std::fs::write(dir.join("sig"), sig).unwrap();
    openssl(&[
        "pkeyutl",
        "-verify",
        "-pubin",
        "-inkey",
        pem.to_str().unwrap(),
        "-rawin",
        "-in",
        dir.join("msg").to_str().unwrap(),
        "-sigfile",
        dir.join("sig").to_str().unwrap(),
    ])
}

fn keypair(s: &Session, params: &[u8]) -> cryptoki::error::Result<(ObjectHandle, ObjectHandle)> {
    s.generate_key_pair(
        &Mechanism::EccEdwardsKeyPairGen,
        &[
            Attribute::Token(true),
            Attribute::EcParams(params.to_vec()),
            Attribute::Verify(true),
        ],
        &[
            Attribute::Token(true),
            Attribute::Private(true),
            Attribute::Sensitive(true),
            Attribute::Sign(true),
        ],
    )
}

fn pure() -> Mechanism<'static> {
    Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Pure))
}

#[test]
fn ed448_keygen_by_oid_and_name_signs_and_openssl_verifies() {
    let env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "ed448");
    let s = user_session(&p, slot);
    let dir = env.dir.path();
    let msg = b"Ed448 over the whole message, in parts too".repeat(7);
    for params in [ED448_OID.to_vec(), printable("edwards448")] {
        let (public, private) = keypair(&s, &params).unwrap();
        assert_eq!(
            get(&s, public, AttributeType::EcParams),
            ED448_OID,
            "stored as the OID"
        );
        let pem = pem_from_point(&s, public, dir);
        // No parameter and an Ed448 parameter with an empty context are the same scheme.
        let empty = Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Ed448(&[])));
        let sig = s.sign(&pure(), private, &msg).unwrap();
        assert_eq!(sig.len(), 114);
        assert_eq!(
            s.sign(&empty, private, &msg).unwrap(),
            sig,
            "Ed448 is deterministic"
        );
        s.sign_init(&pure(), private).unwrap();
        for c in msg.chunks(33) {
            s.sign_update(c).unwrap();
        }
        assert_eq!(
            s.sign_final().unwrap(),
            sig,
            "multi-part gives the same signature"
        );
        assert!(openssl_verifies(dir, &pem, &msg, &sig), "OpenSSL verifies");
        s.verify(&pure(), public, &msg, &sig).unwrap();
        for at in [0, 60, 113] {
            let mut bad = sig.clone();
            bad[at] ^= 0x10;
            assert!(
                !openssl_verifies(dir, &pem, &msg, &bad),
                "OpenSSL refuses byte {at} changed"
            );
            assert_eq!(
                rv(s.verify(&pure(), public, &msg, &bad).unwrap_err()),
                RvError::SignatureInvalid,
                "byte {at} changed"
            );
        }
        assert_eq!(
            rv(s.verify(&pure(), public, &msg, &sig[..113]).unwrap_err()),
            RvError::SignatureLenRange
        );
    }
}

/// RFC 8032 §7.4's key "1 octet" / "1 octet (with context)", imported: the module's signatures
/// are the RFC's, with no context and with the context "foo"; the context is part of what is
/// signed. OpenSSL 3.0's command line has no Ed448 context option, so the known answer is the
/// independent check here; the plain signature is checked by OpenSSL as well.
#[test]
fn imported_ed448_key_gives_rfc8032_signatures_with_and_without_context() {
    let env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "ed448-kat");
    let s = user_session(&p, slot);
    let secret = unhex(
        "c4eab05d357007c632f3dbb48489924d552b08fe0c353a0d4a1f00acda2c463a
         fbea67c5e8d2877c5e3bc397a659949ef8021e954e0a12274e",
    );
    let point = unhex(
        "43ba28f430cdff456ae531545f7ecd0ac834a55d9358c0372bfa0c6c6798c086
         6aea01eb00742802b8438ea4cb82169c235160627b4c3a9480",
    );
    let private = s
        .create_object(&[
            Attribute::Class(ObjectClass::PRIVATE_KEY),
            Attribute::KeyType(KeyType::EC_EDWARDS),
            Attribute::Token(false),
            Attribute::Private(true),
            Attribute::Sign(true),
            Attribute::EcParams(printable("edwards448")),
            Attribute::Value(secret.clone()),
        ])
        .unwrap();
    // The point as raw bytes (DER comes back).
    let public = s
        .create_object(&[
            Attribute::Class(ObjectClass::PUBLIC_KEY),
            Attribute::KeyType(KeyType::EC_EDWARDS),
            Attribute::Token(false),
            Attribute::Verify(true),
            Attribute::EcParams(ED448_OID.to_vec()),
            Attribute::EcPoint(point.clone()),
        ])
        .unwrap();
    assert_eq!(get(&s, public, AttributeType::EcPoint)[2..], point[..]);
    let plain = unhex(
        "26b8f91727bd62897af15e41eb43c377efb9c610d48f2335cb0bd0087810f435
         2541b143c4b981b7e18f62de8ccdf633fc1bf037ab7cd779805e0dbcc0aae1cb
         cee1afb2e027df36bc04dcecbf154336c19f0af7e0a6472905e799f1953d2a0f
         f3348ab21aa4adafd1d234441cf807c03a00",
    );
    let foo = unhex(
        "d4f8f6131770dd46f40867d6fd5d5055de43541f8c5e35abbcd001b32a89f7d2
         151f7647f11d8ca2ae279fb842d607217fce6e042f6815ea000c85741de5c8da
         1144a6a1aba7f96de42505d7a7298524fda538fccbbb754f578c1cad10d54d0d
         5428407e85dcbc98a49155c13764e66c3c00",
    );
    let with_foo = Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Ed448(b"foo")));
    assert_eq!(s.sign(&pure(), private, &[0x03]).unwrap(), plain);
    assert_eq!(s.sign(&with_foo, private, &[0x03]).unwrap(), foo);
    let pem = pem_from_point(&s, public, env.dir.path());
    assert!(openssl_verifies(env.dir.path(), &pem, &[0x03], &plain));
    s.verify(&with_foo, public, &[0x03], &foo).unwrap();
    s.verify(&pure(), public, &[0x03], &plain).unwrap();
    // A signature under one context does not verify under another, or none.
    let other = Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Ed448(b"fo")));
    for (what, mech) in [("no context", pure()), ("context \"fo\"", other)] {
        assert_eq!(
            rv(s.verify(&mech, public, &[0x03], &foo).unwrap_err()),
            RvError::SignatureInvalid,
            "{what}"
        );
    }
    // The longest context RFC 8032 allows signs; one byte more is refused.
    let long = [0x61u8; 255];
    let mech = Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Ed448(&long)));
    let sig = s.sign(&mech, private, b"m").unwrap();
    s.verify(&mech, public, b"m", &sig).unwrap();
    let too_long = [0x61u8; 256];
    let refused: Vec<(&str, Mechanism)> = vec![
        (
            "a 256-byte context",
            Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Ed448(&too_long))),
        ),
        (
            "Ed448ph",
            Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Ed448ph(&[]))),
        ),
        (
            "Ed448ph with a context",
            Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Ed448ph(b"foo"))),
        ),
    ];
    for (what, mech) in refused {
        assert_eq!(
            rv(s.sign(&mech, private, b"m").unwrap_err()),
            RvError::MechanismParamInvalid,
            "sign: {what}"
        );
        assert_eq!(
            rv(s.verify_init(&mech, public).unwrap_err()),
            RvError::MechanismParamInvalid,
            "verify: {what}"
        );
    }
}

#[test]
fn ed448_import_checks_and_mechanism_info() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "ed448-bad");
    let s = user_session(&p, slot);
    let (public, _) = keypair(&s, ED448_OID).unwrap();
    let point = get(&s, public, AttributeType::EcPoint)[2..].to_vec();
    let private = |params: &[u8], kt: KeyType, value: Vec<u8>, extra: Option<Attribute>| {
        let mut t = vec![
            Attribute::Class(ObjectClass::PRIVATE_KEY),
            Attribute::KeyType(kt),
            Attribute::Token(false),
            Attribute::Sign(true),
            Attribute::EcParams(params.to_vec()),
            Attribute::Value(value),
        ];
        t.extend(extra);
        s.create_object(&t).map_err(rv)
    };
    let public_key = |params: &[u8], kt: KeyType, point: Vec<u8>| {
        s.create_object(&[
            Attribute::Class(ObjectClass::PUBLIC_KEY),
            Attribute::KeyType(kt),
            Attribute::Token(false),
            Attribute::EcParams(params.to_vec()),
            Attribute::EcPoint(point),
        ])
        .map_err(rv)
    };
    // The good point with a spare bit of its last byte set: not a canonical encoding (RFC 8032
    // §5.2.3), which a lenient decoder would read as the same point.
    let mut non_canonical = point.clone();
    non_canonical[56] |= 0x01;
    // The identity (y = 1): a point, but no key.
    let mut identity = vec![0u8; 57];
    identity[0] = 1;
    let cases: Vec<(&str, Result<ObjectHandle, RvError>, RvError)> = vec![
        (
            "a 56-byte private key",
            private(ED448_OID, KeyType::EC_EDWARDS, vec![1; 56], None),
            RvError::AttributeValueInvalid,
        ),
        (
            "a 32-byte private key",
            private(ED448_OID, KeyType::EC_EDWARDS, vec![1; 32], None),
            RvError::AttributeValueInvalid,
        ),
        (
            "a private key with another key's point",
            private(
                ED448_OID,
                KeyType::EC_EDWARDS,
                vec![1; 57],
                Some(Attribute::EcPoint(point.clone())),
            ),
            RvError::TemplateInconsistent,
        ),
        (
            "an Ed448 key as CKK_EC",
            private(ED448_OID, KeyType::EC, vec![1; 57], None),
            RvError::CurveNotSupported,
        ),
        (
            "an Ed448 point as Ed25519",
            public_key(ED25519_OID, KeyType::EC_EDWARDS, point.clone()),
            RvError::AttributeValueInvalid,
        ),
        (
            "a non-canonical point encoding",
            public_key(ED448_OID, KeyType::EC_EDWARDS, non_canonical),
            RvError::AttributeValueInvalid,
        ),
        (
            "the identity",
            public_key(ED448_OID, KeyType::EC_EDWARDS, identity),
            RvError::AttributeValueInvalid,
        ),
    ];
    for (what, got, want) in cases {
        assert_eq!(got.map(|_| ()), Err(want), "{what}");
    }
    assert_eq!(
        rv(s.generate_key_pair(
            &Mechanism::EccKeyPairGen,
            &[Attribute::EcParams(ED448_OID.to_vec())],
            &[Attribute::Sign(true)],
        )
        .unwrap_err()),
        RvError::CurveNotSupported,
        "Ed448 with CKM_EC_KEY_PAIR_GEN"
    );
    // The sizes C_GetMechanismInfo gives span Ed25519's field (255 bits) to Ed448's (448).
    for m in [MechanismType::ECC_EDWARDS_KEY_PAIR_GEN, MechanismType::EDDSA] {
        let info = p.get_mechanism_info(slot, m).unwrap();
        assert_eq!((info.min_key_size(), info.max_key_size()), (255, 448), "{m:?}");
    }
}
