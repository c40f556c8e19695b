//! The token served by `ferrohsm-server` over mutual TLS, driven through the module's remote
//! client (`[remote]`) as applications load it: keys generated and used on the server, their
//! signatures checked with independent implementations, mechanism parameters of every kind of
//! call carried intact, pkcs11-tool through the client module. Each test has its own PKI, store
//! and server (`common::remote`); the refusals, dropped connections, fork and threads are in
//! tests/remote_access.rs.

mod common;

use common::remote::*;
use common::*;
use cryptoki::error::RvError;
use cryptoki::mechanism::rsa::{PkcsMgfType, PkcsPssParams};
use cryptoki::mechanism::{Mechanism, MechanismType};
use cryptoki::object::{Attribute, AttributeInfo, AttributeType, ObjectClass, ObjectHandle};
use cryptoki::session::Session;
use p256::ecdsa::signature::hazmat::PrehashVerifier;
use rsa::sha2::Sha256;
use std::process::Command;

fn p256_keypair(s: &Session, id: &[u8]) -> (ObjectHandle, ObjectHandle) {
    let public = vec![
        Attribute::Token(true),
        Attribute::EcParams(P256_OID.to_vec()),
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
    s.generate_key_pair(&Mechanism::EccKeyPairGen, &public, &private)
        .unwrap()
}

fn p256_verifier(s: &Session, public: ObjectHandle) -> p256::ecdsa::VerifyingKey {
    let a = s.get_attributes(public, &[AttributeType::EcPoint]).unwrap();
    let Attribute::EcPoint(der) = &a[0] else {
        panic!("no CKA_EC_POINT")
    };
    // A DER OCTET STRING of the 65-byte uncompressed point.
    p256::ecdsa::VerifyingKey::from_sec1_bytes(&der[2..]).unwrap()
}

#[test]
fn remote_keys_sign_and_the_signatures_verify_independently() {
    let w = World::new();
    w.client("signer");
    let p = load();
    let alpha = slot_of(&p, "alpha").expect("alpha is served");
    let s = user_session(&p, alpha);

    // RSA-2048, generated on the server.
    let (public, private) = rsa_keypair(&s, 2048, b"rsa", true);
    let pk = rsa_public(&s, public);
    let data = b"signed through ferrohsm-server".to_vec();
    let hash = sha256(&data);
    let sig = s.sign(&Mechanism::Sha256RsaPkcs, private, &data).unwrap();
    pk.verify(rsa::pkcs1v15::Pkcs1v15Sign::new::<Sha256>(), &hash, &sig)
        .unwrap();
    s.verify(&Mechanism::Sha256RsaPkcs, public, &data, &sig).unwrap();

    // PSS with a salt length other than the hash's: the parameters reach the token intact.
    let params = PkcsPssParams {
        hash_alg: MechanismType::SHA256,
        mgf: PkcsMgfType::MGF1_SHA256,
        s_len: 20.into(),
    };
    let sig = s
        .sign(&Mechanism::Sha256RsaPkcsPss(params), private, &data)
        .unwrap();
    pk.verify(rsa::Pss::<Sha256>::new_with_salt(20), &hash, &sig)
        .unwrap();
    // Multi-part, the same key and parameters.
    s.sign_init(&Mechanism::Sha256RsaPkcsPss(params), private)
        .unwrap();
    s.sign_update(&data[..7]).unwrap();
    s.sign_update(&data[7..]).unwrap();
    let sig = s.sign_final().unwrap();
    pk.verify(rsa::Pss::<Sha256>::new_with_salt(20), &hash, &sig)
        .unwrap();
    s.verify(&Mechanism::Sha256RsaPkcsPss(params), public, &data, &sig)
        .unwrap();
    // Parameters the token refuses are refused there, not lost on the way.
    let wrong = PkcsPssParams {
        hash_alg: MechanismType::SHA384,
        mgf: PkcsMgfType::MGF1_SHA256,
        s_len: 20.into(),
    };
    assert_eq!(
        rv(s.sign(&Mechanism::Sha256RsaPkcsPss(wrong), private, &data)
            .unwrap_err()),
        RvError::MechanismParamInvalid
    );
    // A bad signature is refused by the server's token.
    let mut bad = sig.clone();
    bad[10] ^= 1;
    assert_eq!(
        rv(
            s.verify(&Mechanism::Sha256RsaPkcsPss(params), public, &data, &bad)
                .unwrap_err()
        ),
        RvError::SignatureInvalid
    );

    // P-256 ECDSA over a hash, verified by the p256 crate.
    let (public, private) = p256_keypair(&s, b"ec");
    let sig = s.sign(&Mechanism::Ecdsa, private, &hash).unwrap();
    let vk = p256_verifier(&s, public);
    let sig = p256::ecdsa::Signature::from_slice(&sig).unwrap();
    vk.verify_prehash(&hash, &sig).unwrap();
    let sig = s.sign(&Mechanism::EcdsaSha256, private, &data).unwrap();
    vk.verify_prehash(&hash, &p256::ecdsa::Signature::from_slice(&sig).unwrap())
        .unwrap();

    // The private values never leave the server: sensitive attributes are not answered.
    let info = s
        .get_attribute_info(private, &[AttributeType::Value, AttributeType::Sign])
        .unwrap();
    assert!(matches!(info[0], AttributeInfo::Sensitive), "{info:?}");
    assert!(matches!(info[1], AttributeInfo::Available(_)), "{info:?}");
}

#[test]
fn find_get_and_set_attributes_remotely() {
    let w = World::new();
    w.client("signer");
    let p = load();
    let s = user_session(&p, slot_of(&p, "alpha").unwrap());
    let (public, _private) = rsa_keypair(&s, 2048, b"found", true);
    assert_eq!(find_one(&s, ObjectClass::PUBLIC_KEY, b"found"), public);
    s.update_attributes(public, &[Attribute::Label(b"renamed".to_vec())])
        .unwrap();
    let a = s
        .get_attributes(public, &[AttributeType::Label, AttributeType::ModulusBits])
        .unwrap();
    assert!(a.contains(&Attribute::Label(b"renamed".to_vec())), "{a:?}");
    assert!(a.contains(&Attribute::ModulusBits(2048.into())), "{a:?}");
    let found = s.find_objects(&[Attribute::Label(b"renamed".to_vec())]).unwrap();
    assert_eq!(found, vec![public]);
    // Read-only attributes stay read-only over the wire.
    assert_eq!(
        rv(
            s.update_attributes(public, &[Attribute::Class(ObjectClass::DATA)])
                .unwrap_err()
        ),
        RvError::AttributeReadOnly
    );
    // A session object, destroyed: gone for the next search.
    let data = s
        .create_object(&[
            Attribute::Class(ObjectClass::DATA),
            Attribute::Label(b"note".to_vec()),
            Attribute::Value(b"hello".to_vec()),
        ])
        .unwrap();
    assert_eq!(
        s.find_objects(&[Attribute::Label(b"note".to_vec())]).unwrap(),
        vec![data]
    );
    s.destroy_object(data).unwrap();
    assert!(s
        .find_objects(&[Attribute::Label(b"note".to_vec())])
        .unwrap()
        .is_empty());
    // Random bytes come from the server.
    let r = s.generate_random_vec(32).unwrap();
    assert_eq!(r.len(), 32);
    assert_ne!(r, vec![0u8; 32]);
}

#[test]
fn mechanism_parameters_travel_intact_for_every_kind_of_call() {
    use cryptoki::mechanism::aead::GcmParams;
    use cryptoki::mechanism::dsa::{HedgeType, SignAdditionalContext};
    use cryptoki::mechanism::eddsa::{EddsaParams, EddsaSignatureScheme};
    use cryptoki::mechanism::elliptic_curve::{EcKdf, Ecdh1DeriveParams};
    use cryptoki::object::{KeyType, MlDsaParameterSetType};
    let w = World::new();
    w.client("signer");
    let p = load();
    let alpha = slot_of(&p, "alpha").unwrap();
    let s = user_session(&p, alpha);

    // Mechanism list and info come from the server's token.
    let mechs = p.get_mechanism_list(alpha).unwrap();
    assert!(mechs.contains(&MechanismType::ML_DSA), "{mechs:?}");
    let info = p
        .get_mechanism_info(alpha, MechanismType::RSA_PKCS_KEY_PAIR_GEN)
        .unwrap();
    assert_eq!(info.min_key_size(), 1024);

    // ML-DSA with a context: it reaches the token (another context does not verify).
    let (public, private) = s
        .generate_key_pair(
            &Mechanism::MlDsaKeyPairGen,
            &[
                Attribute::Token(false),
                Attribute::ParameterSet(MlDsaParameterSetType::ML_DSA_44.into()),
                Attribute::Verify(true),
            ],
            &[Attribute::Token(false), Attribute::Sign(true)],
        )
        .unwrap();
    let ctx = |c: &'static [u8]| Mechanism::MlDsa(SignAdditionalContext::new(HedgeType::Preferred, Some(c)));
    let sig = s.sign(&ctx(b"context a"), private, b"message").unwrap();
    s.verify(&ctx(b"context a"), public, b"message", &sig).unwrap();
    assert_eq!(
        rv(s.verify(&ctx(b"context b"), public, b"message", &sig)
            .unwrap_err()),
        RvError::SignatureInvalid
    );

    // Ed448 with a context, the same way.
    let ed448_oid = vec![0x06, 0x03, 0x2b, 0x65, 0x71];
    let (public, private) = s
        .generate_key_pair(
            &Mechanism::EccEdwardsKeyPairGen,
            &[Attribute::EcParams(ed448_oid), Attribute::Verify(true)],
            &[Attribute::Sign(true)],
        )
        .unwrap();
    let ed = |c: &'static [u8]| Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Ed448(c)));
    let sig = s.sign(&ed(b"one"), private, b"message").unwrap();
    s.verify(&ed(b"one"), public, b"message", &sig).unwrap();
    assert_eq!(
        rv(s.verify(&ed(b"two"), public, b"message", &sig).unwrap_err()),
        RvError::SignatureInvalid
    );

    // AES-GCM with IV and AAD, encrypt and decrypt; another AAD fails the tag.
    let aes = s
        .generate_key(
            &Mechanism::AesKeyGen,
            &[
                Attribute::ValueLen(32.into()),
                Attribute::Encrypt(true),
                Attribute::Decrypt(true),
            ],
        )
        .unwrap();
    let mut iv = [7u8; 12];
    let ct = s
        .encrypt(
            &Mechanism::AesGcm(GcmParams::new(&mut iv, b"aad", 128.into()).unwrap()),
            aes,
            b"plain text",
        )
        .unwrap();
    let pt = s
        .decrypt(
            &Mechanism::AesGcm(GcmParams::new(&mut iv, b"aad", 128.into()).unwrap()),
            aes,
            &ct,
        )
        .unwrap();
    assert_eq!(pt, b"plain text");
    assert_eq!(
        rv(s.decrypt(
            &Mechanism::AesGcm(GcmParams::new(&mut iv, b"AAD", 128.into()).unwrap()),
            aes,
            &ct
        )
        .unwrap_err()),
        RvError::EncryptedDataInvalid
    );

    // Wrap and unwrap: the key comes back whole, and only wrapped on the wire.
    let value = [0x42u8; 32];
    let wrapper = s
        .generate_key(
            &Mechanism::AesKeyGen,
            &[
                Attribute::ValueLen(32.into()),
                Attribute::Wrap(true),
                Attribute::Unwrap(true),
            ],
        )
        .unwrap();
    let target = s
        .create_object(&[
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(KeyType::AES),
            Attribute::Value(value.to_vec()),
            Attribute::Extractable(true),
            Attribute::Sensitive(false),
        ])
        .unwrap();
    let wrapped = s.wrap_key(&Mechanism::AesKeyWrapPad, wrapper, target).unwrap();
    assert!(
        !wrapped.windows(8).any(|w| w == &value[..8]),
        "the key travelled in clear"
    );
    let unwrapped = s
        .unwrap_key(
            &Mechanism::AesKeyWrapPad,
            wrapper,
            &wrapped,
            &[
                Attribute::Class(ObjectClass::SECRET_KEY),
                Attribute::KeyType(KeyType::AES),
                Attribute::Sensitive(false),
                Attribute::Extractable(true),
            ],
        )
        .unwrap();
    let a = s.get_attributes(unwrapped, &[AttributeType::Value]).unwrap();
    assert_eq!(a, vec![Attribute::Value(value.to_vec())]);

    // ECDH: both sides derive the same secret from the other's point.
    let derive_pair = |id: &[u8]| {
        s.generate_key_pair(
            &Mechanism::EccKeyPairGen,
            &[Attribute::EcParams(P256_OID.to_vec())],
            &[Attribute::Derive(true), Attribute::Id(id.to_vec())],
        )
        .unwrap()
    };
    let point = |k: ObjectHandle| match s.get_attributes(k, &[AttributeType::EcPoint]).unwrap().remove(0) {
        Attribute::EcPoint(der) => der[2..].to_vec(),
        other => panic!("{other:?}"),
    };
    let ((pa, sa), (pb, sb)) = (derive_pair(b"a"), derive_pair(b"b"));
    let secret = [
        Attribute::Class(ObjectClass::SECRET_KEY),
        Attribute::KeyType(KeyType::GENERIC_SECRET),
        Attribute::Sensitive(false),
        Attribute::Extractable(true),
    ];
    let (qa, qb) = (point(pa), point(pb));
    let ka = s
        .derive_key(
            &Mechanism::Ecdh1Derive(Ecdh1DeriveParams::new(EcKdf::null(), &qb)),
            sa,
            &secret,
        )
        .unwrap();
    let kb = s
        .derive_key(
            &Mechanism::Ecdh1Derive(Ecdh1DeriveParams::new(EcKdf::null(), &qa)),
            sb,
            &secret,
        )
        .unwrap();
    let va = s.get_attributes(ka, &[AttributeType::Value]).unwrap();
    assert_eq!(va, s.get_attributes(kb, &[AttributeType::Value]).unwrap());
    assert!(matches!(&va[0], Attribute::Value(v) if v.len() == 32));

    // Digest, single and multi-part, against the sha2 crate.
    assert_eq!(
        s.digest(&Mechanism::Sha256, b"digest me").unwrap(),
        sha256(b"digest me")
    );
    s.digest_init(&Mechanism::Sha256).unwrap();
    s.digest_update(b"digest ").unwrap();
    s.digest_update(b"me").unwrap();
    assert_eq!(s.digest_final().unwrap(), sha256(b"digest me"));
}

#[test]
fn pkcs11_tool_signs_through_the_server_and_openssl_verifies() {
    let w = World::new();
    w.client("signer");
    let dir = w.env.dir.path();
    let tool = |args: &[&str]| {
        let out = Command::new("pkcs11-tool")
            .arg("--module")
            .arg(module_path())
            .args(["--token-label", "alpha", "--login", "--pin", USER_PIN])
            .args(args)
            .current_dir(dir)
            .output()
            .expect("pkcs11-tool must be installed");
        assert!(
            out.status.success(),
            "pkcs11-tool {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    std::fs::write(dir.join("data"), b"signed by pkcs11-tool").unwrap();
    tool(&[
        "--keypairgen",
        "--key-type",
        "rsa:2048",
        "--id",
        "07",
        "--label",
        "tool",
    ]);
    tool(&[
        "--sign",
        "-m",
        "SHA256-RSA-PKCS",
        "--id",
        "07",
        "-i",
        "data",
        "-o",
        "sig",
    ]);
    tool(&["--read-object", "--type", "pubkey", "--id", "07", "-o", "pub.der"]);
    let verified = Command::new("openssl")
        .args([
            "dgst",
            "-sha256",
            "-verify",
            "pub.der",
            "-keyform",
            "DER",
            "-signature",
            "sig",
            "data",
        ])
        .current_dir(dir)
        .status()
        .expect("openssl must be installed");
    assert!(
        verified.success(),
        "OpenSSL refused the signature made through the server"
    );
    // Each pkcs11-tool run was a connection of its own.
    let log = w.server.log();
    assert!(log.matches(": connected").count() >= 3, "{log}");
}

#[test]
fn an_argument_the_client_cannot_read_ends_the_operation_on_the_server() {
    use cryptoki_sys::*;
    use std::ptr::null_mut;
    let w = World::new();
    w.client("signer");
    let p = load();
    let alpha = slot_of(&p, "alpha").unwrap();
    let s = user_session(&p, alpha);
    let (_public, private) = rsa_keypair(&s, 2048, b"arg", false);
    let r = Raw::load();
    let h = r.open_session(alpha.id());
    let mut m = raw_mech::<u8>(CKM_SHA256_RSA_PKCS, None);
    let (mut sig, mut len) = ([0u8; 256], 256);
    // SAFETY: live buffers; the NULL data with a length is the bad argument under test.
    unsafe {
        assert_eq!((r.f.C_SignInit.unwrap())(h, &mut m, private.handle()), CKR_OK);
        assert_eq!(
            (r.f.C_Sign.unwrap())(h, null_mut(), 5, sig.as_mut_ptr(), &mut len),
            CKR_ARGUMENTS_BAD
        );
        assert_eq!(
            (r.f.C_Sign.unwrap())(h, b"data!".as_ptr() as *mut u8, 5, sig.as_mut_ptr(), &mut len),
            CKR_OPERATION_NOT_INITIALIZED,
            "the operation was ended, as the local token ends it"
        );
    }
}

/// Name, public key, private key, mechanism, input, signature length.
type Signer = (
    &'static str,
    ObjectHandle,
    ObjectHandle,
    Mechanism<'static>,
    Vec<u8>,
    usize,
);

/// Key pairs of the signature families whose length query the client answers, with a
/// mechanism, the input it signs and the signature length the local token reports.
fn signers(s: &Session) -> Vec<Signer> {
    use cryptoki::object::MlDsaParameterSetType;
    let (rsa_pub, rsa_priv) = rsa_keypair(s, 2048, b"len-rsa", false);
    let (ec_pub, ec_priv) = p256_keypair(s, b"len-ec");
    let ed25519_oid = vec![0x06, 0x03, 0x2b, 0x65, 0x70];
    let (ed_pub, ed_priv) = s
        .generate_key_pair(
            &Mechanism::EccEdwardsKeyPairGen,
            &[Attribute::EcParams(ed25519_oid), Attribute::Verify(true)],
            &[Attribute::Sign(true)],
        )
        .unwrap();
    let (ml_pub, ml_priv) = s
        .generate_key_pair(
            &Mechanism::MlDsaKeyPairGen,
            &[
                Attribute::Token(false),
                Attribute::ParameterSet(MlDsaParameterSetType::ML_DSA_65.into()),
                Attribute::Verify(true),
            ],
            &[Attribute::Token(false), Attribute::Sign(true)],
        )
        .unwrap();
    let pss = PkcsPssParams {
        hash_alg: MechanismType::SHA256,
        mgf: PkcsMgfType::MGF1_SHA256,
        s_len: 32.into(),
    };
    let message = b"the length is known before the signature".to_vec();
    vec![
        (
            "RSA-2048 PKCS#1",
            rsa_pub,
            rsa_priv,
            Mechanism::Sha256RsaPkcs,
            message.clone(),
            256,
        ),
        (
            "RSA-2048 PSS",
            rsa_pub,
            rsa_priv,
            Mechanism::Sha256RsaPkcsPss(pss),
            message.clone(),
            256,
        ),
        (
            "ECDSA P-256",
            ec_pub,
            ec_priv,
            Mechanism::Ecdsa,
            sha256(&message),
            64,
        ),
        (
            "Ed25519",
            ed_pub,
            ed_priv,
            Mechanism::Eddsa(cryptoki::mechanism::eddsa::EddsaParams::new(
                cryptoki::mechanism::eddsa::EddsaSignatureScheme::Ed25519,
            )),
            message.clone(),
            64,
        ),
        (
            "ML-DSA-65",
            ml_pub,
            ml_priv,
            Mechanism::MlDsa(cryptoki::mechanism::dsa::SignAdditionalContext::new(
                cryptoki::mechanism::dsa::HedgeType::Preferred,
                None,
            )),
            message,
            3309,
        ),
    ]
}

/// The raw `CK_MECHANISM` of a `cryptoki` one (its parameter pointer lives as long as `m`).
fn raw_of(m: &Mechanism<'_>) -> cryptoki_sys::CK_MECHANISM {
    cryptoki_sys::CK_MECHANISM::from(m)
}

#[test]
fn the_length_query_is_answered_with_the_tokens_length_and_the_signature_follows() {
    use cryptoki_sys::*;
    use std::ptr::null_mut;
    let w = World::new();
    w.client("signer");
    let p = load();
    let alpha = slot_of(&p, "alpha").unwrap();
    let s = user_session(&p, alpha);
    let r = Raw::load();
    let h = r.open_session(alpha.id());
    for (name, public, private, mech, data, expected) in signers(&s) {
        let mut m = raw_of(&mech);
        let d = data.as_ptr() as *mut u8;
        let dl = data.len() as CK_ULONG;
        // SAFETY: live buffers and lengths throughout; NULL output pointers are the queries.
        unsafe {
            assert_eq!(
                (r.f.C_SignInit.unwrap())(h, &mut m, private.handle()),
                CKR_OK,
                "{name}"
            );
            // The length query, twice: it keeps the operation.
            for _ in 0..2 {
                let mut len = 0;
                assert_eq!(
                    (r.f.C_Sign.unwrap())(h, d, dl, null_mut(), &mut len),
                    CKR_OK,
                    "{name}"
                );
                assert_eq!(len as usize, expected, "{name}");
            }
            // A buffer one byte short: CKR_BUFFER_TOO_SMALL with the length, the operation kept.
            let mut sig = vec![0u8; expected];
            let mut len = (expected - 1) as CK_ULONG;
            assert_eq!(
                (r.f.C_Sign.unwrap())(h, d, dl, sig.as_mut_ptr(), &mut len),
                CKR_BUFFER_TOO_SMALL,
                "{name}"
            );
            assert_eq!(len as usize, expected, "{name}");
            // Then the signature, which ends the operation.
            let mut len = expected as CK_ULONG;
            assert_eq!(
                (r.f.C_Sign.unwrap())(h, d, dl, sig.as_mut_ptr(), &mut len),
                CKR_OK,
                "{name}"
            );
            assert_eq!(len as usize, expected, "{name}");
            s.verify(&mech, public, &data, &sig)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let mut len = 0;
            assert_eq!(
                (r.f.C_Sign.unwrap())(h, d, dl, null_mut(), &mut len),
                CKR_OPERATION_NOT_INITIALIZED,
                "{name}: the signature ended the operation; the query is not answered after it"
            );
        }
    }

    // Multi-part (RSA PKCS#1): C_SignFinal's query is answered; a one-shot C_Sign after parts
    // is refused even as a query, and that ends the operation, as in the local token.
    let (_, _, private, mech, data, _) = signers(&s).swap_remove(0);
    let mut m = raw_of(&mech);
    // SAFETY: as above.
    unsafe {
        assert_eq!((r.f.C_SignInit.unwrap())(h, &mut m, private.handle()), CKR_OK);
        assert_eq!(
            (r.f.C_SignUpdate.unwrap())(h, data.as_ptr() as *mut u8, 3),
            CKR_OK
        );
        let mut len = 0;
        assert_eq!((r.f.C_SignFinal.unwrap())(h, null_mut(), &mut len), CKR_OK);
        assert_eq!(len, 256);
        assert_eq!(
            (r.f.C_Sign.unwrap())(h, data.as_ptr() as *mut u8, 3, null_mut(), &mut len),
            CKR_OPERATION_ACTIVE
        );
        assert_eq!(
            (r.f.C_SignFinal.unwrap())(h, null_mut(), &mut len),
            CKR_OPERATION_NOT_INITIALIZED
        );

        // An error of the real call ends the operation: no answer to a query after it.
        assert_eq!((r.f.C_SignInit.unwrap())(h, &mut m, private.handle()), CKR_OK);
        let mut len = 256;
        let mut sig = [0u8; 256];
        assert_eq!(
            (r.f.C_Sign.unwrap())(h, null_mut(), 5, sig.as_mut_ptr(), &mut len),
            CKR_ARGUMENTS_BAD
        );
        assert_eq!(
            (r.f.C_Sign.unwrap())(h, data.as_ptr() as *mut u8, 3, null_mut(), &mut len),
            CKR_OPERATION_NOT_INITIALIZED
        );

        // C_SessionCancel and C_Logout end it too.
        assert_eq!((r.f.C_SignInit.unwrap())(h, &mut m, private.handle()), CKR_OK);
        assert_eq!((r.f.C_SessionCancel.unwrap())(h, CKF_SIGN), CKR_OK);
        assert_eq!(
            (r.f.C_SignFinal.unwrap())(h, null_mut(), &mut len),
            CKR_OPERATION_NOT_INITIALIZED
        );
        assert_eq!((r.f.C_SignInit.unwrap())(h, &mut m, private.handle()), CKR_OK);
        s.logout().unwrap();
        assert_eq!(
            (r.f.C_SignFinal.unwrap())(h, null_mut(), &mut len),
            CKR_OPERATION_NOT_INITIALIZED
        );
    }
}

/// The round trips saved, counted on the server: its debug log names each request of a
/// signature. The client answers the length query itself, and from the second signature
/// with a key it holds `C_SignInit` back and sends it with the `C_Sign` that follows: the
/// first signature takes two round trips, the next ones one.
#[test]
fn a_signature_takes_one_round_trip_after_the_first_and_the_length_query_none() {
    let w = World::logging("debug");
    w.client("signer");
    let p = load();
    let alpha = slot_of(&p, "alpha").unwrap();
    let s = user_session(&p, alpha);
    let (public, private) = p256_keypair(&s, b"trips");
    let verifier = p256_verifier(&s, public);
    const N: usize = 5;
    for i in 0..N {
        // cryptoki's sign: C_SignInit, C_Sign(NULL) for the length, C_Sign.
        let data = format!("counted {i}");
        let sig = s.sign(&Mechanism::EcdsaSha256, private, data.as_bytes()).unwrap();
        let sig = p256::ecdsa::Signature::from_slice(&sig).unwrap();
        verifier
            .verify_prehash(&sha256(data.as_bytes()), &sig)
            .expect("the signature verifies");
    }
    // A length query the client does not answer (a digest's), last: the log holds the lines
    // before it once it holds this one, and it shows the counting sees length queries.
    s.digest(&Mechanism::Sha256, b"last").unwrap();
    assert!(
        w.server.logged("request Digest (length query)"),
        "{}",
        w.server.log()
    );
    let log = w.server.log();
    let count = |what: &str| log.lines().filter(|l| l.ends_with(what)).count();
    assert_eq!(count("request SignInit"), 1, "{log}");
    assert_eq!(count("request Sign"), 1, "{log}");
    assert_eq!(count("request SignInitAndSign"), N - 1, "{log}");
    assert_eq!(count("request Sign (length query)"), 0, "{log}");
}

/// A `C_SignInit` the client holds back answers as one sent would, at every call that can
/// follow it: a second `C_SignInit` is refused as active, a cancel ends it, parts and
/// `C_SignFinal` get it sent first, and what the server would refuse at `C_SignInit` (the
/// key destroyed meanwhile) is refused at the `C_Sign` with the same code.
#[test]
fn a_held_back_sign_init_answers_as_a_sent_one() {
    use cryptoki_sys::*;
    let w = World::new();
    w.client("signer");
    let p = load();
    let alpha = slot_of(&p, "alpha").unwrap();
    let s = user_session(&p, alpha);
    let (public, private) = p256_keypair(&s, b"held");
    let verifier = p256_verifier(&s, public);
    // The key and mechanism known to the client: the next C_SignInit is held back.
    s.sign(&Mechanism::EcdsaSha256, private, b"first").unwrap();
    let raw = Raw::load();
    let h = raw.open_session(alpha.id());
    let f = raw.f;
    let mut mech = raw_mech::<()>(CKM_ECDSA_SHA256, None);
    let key = private.handle();
    let verified = |data: &[u8], sig: &[u8]| {
        let sig = p256::ecdsa::Signature::from_slice(sig).unwrap();
        verifier.verify_prehash(&sha256(data), &sig).is_ok()
    };
    // SAFETY (every call below): live buffers of the lengths given, handles of this test.
    unsafe {
        // A second C_SignInit while one is held: active, as the token says.
        assert_eq!((f.C_SignInit.unwrap())(h, &mut mech, key), CKR_OK);
        assert_eq!((f.C_SignInit.unwrap())(h, &mut mech, key), CKR_OPERATION_ACTIVE);
        let mut info = std::mem::zeroed::<CK_SESSION_INFO>();
        assert_eq!((f.C_GetSessionInfo.unwrap())(h, &mut info), CKR_OK);
        // Cancelled, a new one may start.
        assert_eq!((f.C_SessionCancel.unwrap())(h, CKF_SIGN), CKR_OK);
        assert_eq!((f.C_SignInit.unwrap())(h, &mut mech, key), CKR_OK);
        // In parts: the initialisation is sent before the first part.
        let (a, b) = (b"in ".as_slice(), b"parts".as_slice());
        assert_eq!(
            (f.C_SignUpdate.unwrap())(h, a.as_ptr() as *mut u8, a.len() as _),
            CKR_OK
        );
        assert_eq!(
            (f.C_SignUpdate.unwrap())(h, b.as_ptr() as *mut u8, b.len() as _),
            CKR_OK
        );
        let mut sig = vec![0u8; 64];
        let mut len = sig.len() as CK_ULONG;
        assert_eq!((f.C_SignFinal.unwrap())(h, sig.as_mut_ptr(), &mut len), CKR_OK);
        assert!(verified(b"in parts", &sig[..len as usize]));
        // C_SignFinal right after C_SignInit: the signature of no data.
        assert_eq!((f.C_SignInit.unwrap())(h, &mut mech, key), CKR_OK);
        let mut len = sig.len() as CK_ULONG;
        assert_eq!((f.C_SignFinal.unwrap())(h, sig.as_mut_ptr(), &mut len), CKR_OK);
        assert!(verified(b"", &sig[..len as usize]));
        // Held, then the length query answered, then the signature in one trip.
        assert_eq!((f.C_SignInit.unwrap())(h, &mut mech, key), CKR_OK);
        let data = b"one trip";
        let sign = |out: *mut u8, len: &mut CK_ULONG| {
            (f.C_Sign.unwrap())(h, data.as_ptr() as *mut u8, data.len() as _, out, len)
        };
        let mut len = 0;
        assert_eq!(sign(std::ptr::null_mut(), &mut len), CKR_OK);
        assert_eq!(len, 64);
        assert_eq!(sign(sig.as_mut_ptr(), &mut len), CKR_OK);
        assert!(verified(data, &sig[..len as usize]));
        // The key destroyed while an initialisation is held: refused at C_Sign, with the
        // code the token gives, and the operation is over.
        assert_eq!((f.C_SignInit.unwrap())(h, &mut mech, key), CKR_OK);
        s.destroy_object(private).unwrap();
        for expected in [CKR_KEY_HANDLE_INVALID, CKR_OPERATION_NOT_INITIALIZED] {
            let mut len = sig.len() as CK_ULONG;
            assert_eq!(sign(sig.as_mut_ptr(), &mut len), expected);
        }
        assert_eq!((f.C_CloseSession.unwrap())(h), CKR_OK);
    }
}

/// Data past what one request carries (4 MiB) is refused by the client with
/// `CKR_DATA_LEN_RANGE` and ends the operation, as an error of the call does locally (sent,
/// the server would refuse it unread and leave its operation running); the same data in parts
/// goes through.
#[test]
fn data_past_one_request_is_refused_and_ends_the_operation_and_goes_in_parts() {
    use cryptoki::object::KeyType;
    let w = World::new();
    w.client("signer");
    let p = load();
    let s = user_session(&p, slot_of(&p, "alpha").unwrap());
    let big = vec![0x5au8; 5 << 20];
    let aes = s
        .generate_key(
            &Mechanism::AesKeyGen,
            &[
                Attribute::KeyType(KeyType::AES),
                Attribute::ValueLen(16.into()),
                Attribute::Encrypt(true),
            ],
        )
        .unwrap();
    let cbc = Mechanism::AesCbcPad([3u8; 16]);
    assert_eq!(rv(s.encrypt(&cbc, aes, &big).unwrap_err()), RvError::DataLenRange);
    // Ended: a new operation starts (C_EncryptInit would answer CKR_OPERATION_ACTIVE).
    assert_eq!(s.encrypt(&cbc, aes, b"small").unwrap().len(), 16);
    let (_public, private) = rsa_keypair(&s, 2048, b"big", false);
    assert_eq!(
        rv(s.sign(&Mechanism::Sha256RsaPkcs, private, &big).unwrap_err()),
        RvError::DataLenRange
    );
    s.sign(&Mechanism::Sha256RsaPkcs, private, b"small").unwrap();
    // In parts, the 5 MiB are digested whole.
    s.digest_init(&Mechanism::Sha256).unwrap();
    for part in big.chunks(1 << 20) {
        s.digest_update(part).unwrap();
    }
    assert_eq!(s.digest_final().unwrap(), sha256(&big));
}
