//! ML-DSA (FIPS 204) and SLH-DSA (FIPS 205) through the built module, cross-checked against
//! independent pure-Python implementations (dilithium-py, slh-dsa; tests/pqc/crosscheck.py in
//! a virtual environment under target/): keys from the same seed are byte for byte the same,
//! deterministic signatures are the same, each side verifies the other's hedged signatures.
//! Also: every required parameter set generates, signs and verifies; the context string and
//! the hedge choice of CK_SIGN_ADDITIONAL_CONTEXT; import checks; wrapping under the key
//! policy every private key has; and the codes of bad input. HashML-DSA and HashSLH-DSA, every
//! hash, both ways: `prehash` (tests/pqc/prehash.rs).

mod common;
#[path = "pqc/prehash.rs"]
mod prehash;

use common::*;
use cryptoki::error::RvError;
use cryptoki::mechanism::dsa::{HedgeType, SignAdditionalContext};
use cryptoki::mechanism::{Mechanism, MechanismType};
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass, ObjectHandle, ParameterSetType};
use cryptoki::session::Session;
use cryptoki::types::Ulong;
use cryptoki_sys::*;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

const KEK: [u8; 32] = [0x3c; 32];

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Answers of tests/pqc/crosscheck.py to `requests` (JSON lines), each a string field's value
/// or "true"/"false".
fn python(requests: &[String], field: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = Command::new("bash")
        .arg(root.join("tests/pqc/venv.sh"))
        .output()
        .unwrap();
    assert!(venv.status.success(), "{}", String::from_utf8_lossy(&venv.stderr));
    let py = String::from_utf8(venv.stdout).unwrap();
    let mut child = Command::new(py.trim())
        .arg(root.join("tests/pqc/crosscheck.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(requests.join("\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "crosscheck.py failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let at = l.find(&format!("\"{field}\": ")).expect(l) + field.len() + 4;
            let rest = l[at..].trim_start_matches('"');
            rest[..rest.find(['"', ',', '}']).unwrap()].to_string()
        })
        .collect()
}

fn request(op: &str, alg: &str, fields: &[(&str, &[u8])], prehash: Option<&str>) -> String {
    let mut s = format!("{{\"op\": \"{op}\", \"alg\": \"{alg}\"");
    for (k, v) in fields {
        s += &format!(", \"{k}\": \"{}\"", hex(v));
    }
    match prehash {
        Some(h) => s += &format!(", \"prehash\": \"{h}\"}}"),
        None => s += ", \"prehash\": null}",
    }
    s
}

fn set(v: CK_ULONG) -> Attribute {
    Attribute::ParameterSet(ParameterSetType::try_from(Ulong::from(v)).unwrap())
}

fn bytes(s: &Session, key: ObjectHandle, t: AttributeType) -> Vec<u8> {
    match s.get_attributes(key, &[t]).unwrap().remove(0) {
        Attribute::Value(v) | Attribute::Seed(v) | Attribute::PublicKeyInfo(v) => v,
        other => panic!("unexpected {other:?}"),
    }
}

fn mldsa(hedge: HedgeType, ctx: &[u8]) -> Mechanism<'_> {
    Mechanism::MlDsa(SignAdditionalContext::new(hedge, Some(ctx)))
}

fn slhdsa(hedge: HedgeType, ctx: &[u8]) -> Mechanism<'_> {
    Mechanism::SlhDsa(SignAdditionalContext::new(hedge, Some(ctx)))
}

fn keypair(s: &Session, gen: &Mechanism, ps: CK_ULONG, exportable: bool) -> (ObjectHandle, ObjectHandle) {
    s.generate_key_pair(
        gen,
        &[Attribute::Token(false), set(ps), Attribute::Verify(true)],
        &[
            Attribute::Token(false),
            Attribute::Private(true),
            Attribute::Sensitive(!exportable),
            Attribute::Extractable(exportable),
            Attribute::Sign(true),
        ],
    )
    .unwrap()
}

fn public_object(s: &Session, kt: KeyType, ps: CK_ULONG, value: &[u8]) -> ObjectHandle {
    s.create_object(&[
        Attribute::Class(ObjectClass::PUBLIC_KEY),
        Attribute::KeyType(kt),
        Attribute::Token(false),
        set(ps),
        Attribute::Value(value.to_vec()),
        Attribute::Verify(true),
    ])
    .unwrap()
}

fn session() -> (TestEnv, cryptoki::context::Pkcs11, Session) {
    let env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "pqc");
    let s = user_session(&p, slot);
    (env, p, s)
}

const ML_DSA_SETS: [(CK_ULONG, &str); 3] = [
    (CKP_ML_DSA_44, "ml-dsa-44"),
    (CKP_ML_DSA_65, "ml-dsa-65"),
    (CKP_ML_DSA_87, "ml-dsa-87"),
];

#[test]
fn ml_dsa_keys_and_signatures_match_an_independent_implementation() {
    let (_env, _p, s) = session();
    let msg = b"ferrohsm post-quantum cross-check";
    let ctx = b"context";
    for (i, (ps, alg)) in ML_DSA_SETS.into_iter().enumerate() {
        let seed = [0x40 + i as u8; 32];
        let private = s
            .create_object(&[
                Attribute::Class(ObjectClass::PRIVATE_KEY),
                Attribute::KeyType(KeyType::ML_DSA),
                Attribute::Token(false),
                set(ps),
                Attribute::Seed(seed.to_vec()),
                Attribute::Sensitive(false),
                Attribute::Extractable(true),
                Attribute::Sign(true),
            ])
            .unwrap();
        let ours_sk = bytes(&s, private, AttributeType::Value);
        let spki = bytes(&s, private, AttributeType::PublicKeyInfo);
        let theirs = python(&[request("keys", alg, &[("seed", &seed)], None)], "pk");
        let theirs_sk = python(&[request("keys", alg, &[("seed", &seed)], None)], "sk");
        let pk = unhex(&theirs[0]);
        assert_eq!(
            ours_sk,
            unhex(&theirs_sk[0]),
            "{alg}: expanded key from the same seed"
        );
        assert!(
            spki.ends_with(&pk),
            "{alg}: CKA_PUBLIC_KEY_INFO holds the same public key"
        );
        let public = public_object(&s, KeyType::ML_DSA, ps, &pk);

        // Deterministic: the same bytes on both sides, pure and HashML-DSA-SHA256.
        let det = s
            .sign(&mldsa(HedgeType::DeterministicRequired, ctx), private, msg)
            .unwrap();
        let hash_mech = Mechanism::HashMlDsaSha256(SignAdditionalContext::new(
            HedgeType::DeterministicRequired,
            Some(ctx),
        ));
        let det_hash = s.sign(&hash_mech, private, msg).unwrap();
        let fields: &[(&str, &[u8])] = &[("sk", &ours_sk), ("msg", msg), ("ctx", ctx)];
        let theirs = python(
            &[
                request("sign", alg, fields, None),
                request("sign", alg, fields, Some("sha256")),
            ],
            "sig",
        );
        assert_eq!(hex(&det), theirs[0], "{alg}: deterministic ML-DSA");
        assert_eq!(
            hex(&det_hash),
            theirs[1],
            "{alg}: deterministic HashML-DSA-SHA256"
        );

        // Hedged signatures differ from each other; the other side verifies ours, and C_Verify
        // takes theirs (pure and pre-hash) with the public key object made from their bytes.
        let hedged = s.sign(&mldsa(HedgeType::Required, ctx), private, msg).unwrap();
        assert_ne!(
            hedged,
            s.sign(&mldsa(HedgeType::Preferred, ctx), private, msg).unwrap()
        );
        let verify = |sig: &[u8], c: &[u8]| {
            request(
                "verify",
                alg,
                &[("pk", &pk), ("msg", msg), ("ctx", c), ("sig", sig)],
                None,
            )
        };
        let answers = python(&[verify(&hedged, ctx), verify(&hedged, b"other")], "ok");
        assert_eq!(answers, ["true", "false"], "{alg}: the context is bound");
        s.verify(&mldsa(HedgeType::Preferred, ctx), public, msg, &unhex(&theirs[0]))
            .unwrap();
        s.verify(&hash_mech, public, msg, &unhex(&theirs[1])).unwrap();
        assert_eq!(
            rv(
                s.verify(&mldsa(HedgeType::Preferred, b"other"), public, msg, &hedged)
                    .unwrap_err()
            ),
            RvError::SignatureInvalid
        );
        assert_eq!(
            rv(
                s.verify(&mldsa(HedgeType::Preferred, ctx), public, b"tampered", &hedged)
                    .unwrap_err()
            ),
            RvError::SignatureInvalid
        );
    }
}

#[test]
fn ml_dsa_generates_every_set_and_signs_in_parts() {
    let (_env, _p, s) = session();
    for (ps, _) in ML_DSA_SETS {
        let (public, private) = keypair(&s, &Mechanism::MlDsaKeyPairGen, ps, false);
        let attrs = s
            .get_attributes(public, &[AttributeType::ParameterSet, AttributeType::Value])
            .unwrap();
        assert!(matches!(&attrs[0], Attribute::ParameterSet(v) if CK_ULONG::from(**v) == ps));
        // cryptoki leaves out what the token answers CKR_ATTRIBUTE_SENSITIVE for.
        let info = s
            .get_attribute_info(private, &[AttributeType::Seed, AttributeType::Value])
            .unwrap();
        assert!(
            info.iter()
                .all(|i| matches!(i, cryptoki::object::AttributeInfo::Sensitive)),
            "a generated key's seed and expanded key are secret: {info:?}"
        );
        let mech = mldsa(HedgeType::DeterministicRequired, b"");
        let one_shot = s.sign(&mech, private, b"part one, part two").unwrap();
        s.sign_init(&mech, private).unwrap();
        s.sign_update(b"part one, ").unwrap();
        s.sign_update(b"part two").unwrap();
        assert_eq!(s.sign_final().unwrap(), one_shot);
        s.verify(
            &Mechanism::MlDsa(SignAdditionalContext::new(HedgeType::Preferred, None)),
            public,
            b"part one, part two",
            &one_shot,
        )
        .unwrap();
    }
}

const SLH_DSA_SETS: [(CK_ULONG, &str); 8] = [
    (CKP_SLH_DSA_SHA2_128F, "slh-dsa-sha2-128f"),
    (CKP_SLH_DSA_SHAKE_128F, "slh-dsa-shake-128f"),
    (CKP_SLH_DSA_SHA2_128S, "slh-dsa-sha2-128s"),
    (CKP_SLH_DSA_SHAKE_128S, "slh-dsa-shake-128s"),
    (CKP_SLH_DSA_SHA2_192S, "slh-dsa-sha2-192s"),
    (CKP_SLH_DSA_SHAKE_192S, "slh-dsa-shake-192s"),
    (CKP_SLH_DSA_SHA2_256S, "slh-dsa-sha2-256s"),
    (CKP_SLH_DSA_SHAKE_256S, "slh-dsa-shake-256s"),
];

#[test]
fn slh_dsa_sets_generate_sign_verify_and_match_an_independent_implementation() {
    let (_env, _p, s) = session();
    let msg = b"ferrohsm SLH-DSA cross-check";
    let ctx = b"ctx";
    let mut requests = Vec::new();
    let mut expected = Vec::new();
    for (i, (ps, alg)) in SLH_DSA_SETS.into_iter().enumerate() {
        let (public, private) = keypair(&s, &Mechanism::SlhDsaKeyPairGen, ps, true);
        let pk = bytes(&s, public, AttributeType::Value);
        let sig = s.sign(&slhdsa(HedgeType::Preferred, ctx), private, msg).unwrap();
        s.verify(&slhdsa(HedgeType::Preferred, ctx), public, msg, &sig)
            .unwrap();
        assert_eq!(
            rv(s.verify(&slhdsa(HedgeType::Preferred, b""), public, msg, &sig)
                .unwrap_err()),
            RvError::SignatureInvalid,
            "{alg}: the context is bound"
        );
        requests.push(request(
            "verify",
            alg,
            &[("pk", &pk), ("msg", msg), ("ctx", ctx), ("sig", &sig)],
            None,
        ));
        expected.push("true".to_string());
        // One fast set: the Python side signs too (pure Python takes a minute for the small
        // sets), with the same deterministic bytes, and C_Verify takes its HashSLH-DSA-SHA256
        // signature.
        if i == 0 {
            let sk = bytes(&s, private, AttributeType::Value);
            let det = s
                .sign(&slhdsa(HedgeType::DeterministicRequired, ctx), private, msg)
                .unwrap();
            let fields: &[(&str, &[u8])] = &[("sk", &sk), ("msg", msg), ("ctx", ctx)];
            let theirs = python(
                &[
                    request("sign", alg, fields, None),
                    request("sign", alg, fields, Some("sha256")),
                ],
                "sig",
            );
            assert_eq!(hex(&det), theirs[0], "{alg}: deterministic SLH-DSA");
            let hash_mech =
                Mechanism::HashSlhDsaSha256(SignAdditionalContext::new(HedgeType::Preferred, Some(ctx)));
            s.verify(&hash_mech, public, msg, &unhex(&theirs[1])).unwrap();
            let ours = s.sign(&hash_mech, private, msg).unwrap();
            requests.push(request(
                "verify",
                alg,
                &[("pk", &pk), ("msg", msg), ("ctx", ctx), ("sig", &ours)],
                Some("sha256"),
            ));
            expected.push("true".to_string());
        }
    }
    assert_eq!(python(&requests, "ok"), expected);
}

#[test]
fn wrapping_follows_the_private_key_policy_and_unwrapped_keys_sign() {
    let (_env, _p, s) = session();
    let kek = s
        .create_object(&[
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(KeyType::AES),
            Attribute::Token(false),
            Attribute::Value(KEK.to_vec()),
            Attribute::Wrap(true),
            Attribute::Unwrap(true),
        ])
        .unwrap();
    let cases = [
        (Mechanism::MlDsaKeyPairGen, KeyType::ML_DSA, CKP_ML_DSA_65),
        (
            Mechanism::SlhDsaKeyPairGen,
            KeyType::SLH_DSA,
            CKP_SLH_DSA_SHA2_128F,
        ),
    ];
    for (gen, kt, ps) in cases {
        let (public, private) = keypair(&s, &gen, ps, true);
        let blob = s.wrap_key(&Mechanism::AesKeyWrapPad, kek, private).unwrap();
        // The blob opened independently is a PKCS#8 PrivateKeyInfo (SEQUENCE, version 0).
        let der = {
            use aes::cipher::KeyInit;
            let kw = aes_kw::KwpAes256::new_from_slice(&KEK).unwrap();
            let mut out = vec![0u8; blob.len()];
            kw.unwrap_key(&blob, &mut out).unwrap().to_vec()
        };
        assert_eq!(&der[..1], &[0x30]);
        assert_eq!(&der[2..5], &[0x02, 0x01, 0x00]);
        let template = [
            Attribute::Class(ObjectClass::PRIVATE_KEY),
            Attribute::KeyType(kt),
            Attribute::Token(false),
            Attribute::Private(true),
            Attribute::Sensitive(true),
            Attribute::Sign(true),
        ];
        let back = s
            .unwrap_key(&Mechanism::AesKeyWrapPad, kek, &blob, &template)
            .unwrap();
        let attrs = s
            .get_attributes(back, &[AttributeType::ParameterSet, AttributeType::Local])
            .unwrap();
        assert!(matches!(&attrs[0], Attribute::ParameterSet(v) if CK_ULONG::from(**v) == ps));
        assert_eq!(attrs[1], Attribute::Local(false));
        let mech = if kt == KeyType::ML_DSA {
            mldsa(HedgeType::Preferred, b"")
        } else {
            slhdsa(HedgeType::Preferred, b"")
        };
        let sig = s.sign(&mech, back, b"unwrapped").unwrap();
        s.verify(&mech, public, b"unwrapped", &sig).unwrap();

        // The same policy as every private key: a key that is not extractable stays in.
        let (_, locked) = keypair(&s, &gen, ps, false);
        assert_eq!(
            rv(s.wrap_key(&Mechanism::AesKeyWrapPad, kek, locked).unwrap_err()),
            RvError::KeyUnextractable
        );
    }
}

#[test]
fn bad_templates_and_parameters_get_the_specified_codes() {
    let (_env, p, s) = session();
    let gen = |public: Vec<Attribute>| {
        rv(
            s.generate_key_pair(&Mechanism::MlDsaKeyPairGen, &public, &[Attribute::Sign(true)])
                .unwrap_err(),
        )
    };
    assert_eq!(gen(vec![Attribute::Token(false)]), RvError::TemplateIncomplete);
    assert_eq!(
        gen(vec![set(7)]),
        RvError::UnknownErrorCode(CKR_PARAMETER_SET_NOT_SUPPORTED)
    );
    assert_eq!(
        rv(s.generate_key_pair(&Mechanism::SlhDsaKeyPairGen, &[set(99)], &[])
            .unwrap_err()),
        RvError::UnknownErrorCode(CKR_PARAMETER_SET_NOT_SUPPORTED)
    );
    let ml_private = |extra: Vec<Attribute>| {
        let mut t = vec![
            Attribute::Class(ObjectClass::PRIVATE_KEY),
            Attribute::KeyType(KeyType::ML_DSA),
            Attribute::Token(false),
            set(CKP_ML_DSA_44),
        ];
        t.extend(extra);
        s.create_object(&t)
    };
    // The expanded key alone, a seed of the wrong length, a value that is not the seed's.
    assert_eq!(
        rv(ml_private(vec![Attribute::Value(vec![0; 2560])]).unwrap_err()),
        RvError::TemplateIncomplete
    );
    assert_eq!(
        rv(ml_private(vec![Attribute::Seed(vec![1; 31])]).unwrap_err()),
        RvError::AttributeValueInvalid
    );
    assert_eq!(
        rv(ml_private(vec![
            Attribute::Seed(vec![1; 32]),
            Attribute::Value(vec![0; 2560])
        ])
        .unwrap_err()),
        RvError::TemplateInconsistent
    );
    let key = ml_private(vec![Attribute::Seed(vec![1; 32]), Attribute::Sign(true)]).unwrap();
    // A context over 255 bytes is a parameter error (an unknown hedge choice too:
    // mechanism::pq's unit tests, as cryptoki cannot send one).
    let long = [0u8; 256];
    assert_eq!(
        rv(s.sign_init(&mldsa(HedgeType::Preferred, &long), key).unwrap_err()),
        RvError::MechanismParamInvalid
    );
    // An SLH-DSA private key whose PK.root is not its seeds' root.
    let (good_public, good) = keypair(&s, &Mechanism::SlhDsaKeyPairGen, CKP_SLH_DSA_SHAKE_128F, true);
    let mut value = bytes(&s, good, AttributeType::Value);
    *value.last_mut().unwrap() ^= 1;
    let bad = s.create_object(&[
        Attribute::Class(ObjectClass::PRIVATE_KEY),
        Attribute::KeyType(KeyType::SLH_DSA),
        Attribute::Token(false),
        set(CKP_SLH_DSA_SHAKE_128F),
        Attribute::Value(value),
    ]);
    assert_eq!(rv(bad.unwrap_err()), RvError::TemplateInconsistent);
    // SLH-DSA has no CKA_SEED: a private key that brings one is refused, not stored unchecked.
    let seeded = s.create_object(&[
        Attribute::Class(ObjectClass::PRIVATE_KEY),
        Attribute::KeyType(KeyType::SLH_DSA),
        Attribute::Token(false),
        set(CKP_SLH_DSA_SHAKE_128F),
        Attribute::Value(bytes(&s, good, AttributeType::Value)),
        Attribute::Seed(vec![1; 32]),
    ]);
    assert_eq!(rv(seeded.unwrap_err()), RvError::AttributeTypeInvalid);
    // A signature of the wrong length: CKR_SIGNATURE_LEN_RANGE, as for every other mechanism;
    // the right length with a flipped bit: CKR_SIGNATURE_INVALID.
    let mech = slhdsa(HedgeType::Preferred, b"");
    let mut sig = s.sign(&mech, good, b"m").unwrap();
    for cut in [&sig[..sig.len() - 1], &[sig.as_slice(), &[0]].concat()[..]] {
        assert_eq!(
            rv(s.verify(&mech, good_public, b"m", cut).unwrap_err()),
            RvError::SignatureLenRange
        );
    }
    sig[0] ^= 1;
    assert_eq!(
        rv(s.verify(&mech, good_public, b"m", &sig).unwrap_err()),
        RvError::SignatureInvalid
    );
    // The mechanisms are listed with the public key sizes in bytes.
    let slot = s.get_session_info().unwrap().slot_id();
    for (m, min, max) in [
        (MechanismType::ML_DSA, 1312, 2592),
        (MechanismType::ML_DSA_KEY_PAIR_GEN, 1312, 2592),
        (MechanismType::SLH_DSA, 32, 64),
        (MechanismType::SLH_DSA_KEY_PAIR_GEN, 32, 64),
    ] {
        let info = p.get_mechanism_info(slot, m).unwrap();
        assert_eq!((info.min_key_size(), info.max_key_size()), (min, max), "{m}");
    }
}
