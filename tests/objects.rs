//! The object model: creation with validation, attribute policy, copying, destroying,
//! searching, visibility of private objects, and session-object lifetime.

mod common;

use common::*;
use cryptoki::error::RvError;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, AttributeType, CertificateType, KeyType, ObjectClass};
use cryptoki_sys::*;
use rsa::traits::{PrivateKeyParts, PublicKeyParts};

fn setup() -> (TestEnv, cryptoki::context::Pkcs11, cryptoki::session::Session) {
    let env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "objects");
    let s = user_session(&p, slot);
    (env, p, s)
}

fn rsa_private_template(k: &rsa::PrivateKey, id: &[u8]) -> Vec<Attribute> {
    vec![
        Attribute::Class(ObjectClass::PRIVATE_KEY),
        Attribute::KeyType(KeyType::RSA),
        Attribute::Token(true),
        Attribute::Private(true),
        Attribute::Sign(true),
        Attribute::Id(id.to_vec()),
        Attribute::Label(b"imported".to_vec()),
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

fn replace(t: &[Attribute], new: Attribute) -> Vec<Attribute> {
    let mut t: Vec<_> = t
        .iter()
        .filter(|a| a.attribute_type() != new.attribute_type())
        .cloned()
        .collect();
    t.push(new);
    t
}

#[test]
fn import_rsa_private_key_validates_every_part() {
    let (_env, _p, s) = setup();
    let mut rng = rand_core::UnwrapErr(getrandom::SysRng);
    let k = rsa::PrivateKey::new(&mut rng, 2048).unwrap();
    let t = rsa_private_template(&k, b"imp");
    let h = s.create_object(&t).unwrap();
    // Signs, and the rsa crate verifies with the same key's public half.
    use rsa::sha2::{Digest, Sha256};
    let sig = s.sign(&Mechanism::Sha256RsaPkcs, h, b"imported").unwrap();
    k.to_public_key()
        .verify(
            rsa::pkcs1v15::Pkcs1v15Sign::new::<Sha256>(),
            &Sha256::digest(b"imported"),
            &sig,
        )
        .unwrap();
    // Inconsistent parts are refused.
    let mut bad_d = be(k.d());
    bad_d[10] ^= 1;
    for broken in [
        replace(&t, Attribute::PrivateExponent(bad_d)),
        replace(&t, Attribute::Exponent1(vec![3])),
        replace(&t, Attribute::Coefficient(vec![5])),
        replace(&t, Attribute::Prime1(be(k.primes()[1].as_ref()))),
    ] {
        assert_eq!(
            rv(s.create_object(&broken).unwrap_err()),
            RvError::TemplateInconsistent
        );
    }
    let no_modulus: Vec<_> = t
        .iter()
        .filter(|a| a.attribute_type() != AttributeType::Modulus)
        .cloned()
        .collect();
    assert_eq!(
        rv(s.create_object(&no_modulus).unwrap_err()),
        RvError::TemplateIncomplete
    );
    // Created keys are not local, never-extractable or always-sensitive.
    let attrs = s
        .get_attributes(
            h,
            &[
                AttributeType::Local,
                AttributeType::AlwaysSensitive,
                AttributeType::NeverExtractable,
            ],
        )
        .unwrap();
    assert_eq!(attrs[0], Attribute::Local(false));
    assert_eq!(attrs[1], Attribute::AlwaysSensitive(false));
    assert_eq!(attrs[2], Attribute::NeverExtractable(false));
    // Read-only attributes cannot be given at creation.
    let local = replace(&t, Attribute::Local(true));
    assert_eq!(
        rv(s.create_object(&local).unwrap_err()),
        RvError::AttributeReadOnly
    );
}

#[test]
fn sensitive_attributes_and_per_attribute_results() {
    let (_env, _p, s) = setup();
    let (public, private) = rsa_keypair(&s, 2048, b"k", true);
    let r = Raw::load();
    unsafe {
        let mut modulus = [0u8; 256];
        let mut small = [0u8; 4];
        let mut tmpl = [
            CK_ATTRIBUTE {
                type_: CKA_MODULUS,
                pValue: modulus.as_mut_ptr() as *mut _,
                ulValueLen: 256,
            },
            CK_ATTRIBUTE {
                type_: CKA_PRIVATE_EXPONENT,
                pValue: std::ptr::null_mut(),
                ulValueLen: 0,
            },
            CK_ATTRIBUTE {
                type_: CKA_VALUE_LEN,
                pValue: std::ptr::null_mut(),
                ulValueLen: 0,
            },
            CK_ATTRIBUTE {
                type_: CKA_PUBLIC_EXPONENT,
                pValue: small.as_mut_ptr() as *mut _,
                ulValueLen: 1,
            },
            CK_ATTRIBUTE {
                type_: CKA_SIGN,
                pValue: std::ptr::null_mut(),
                ulValueLen: 0,
            },
        ];
        let rv = (r.f.C_GetAttributeValue.unwrap())(s.handle(), private.handle(), tmpl.as_mut_ptr(), 5);
        assert!(matches!(
            rv,
            CKR_ATTRIBUTE_SENSITIVE | CKR_ATTRIBUTE_TYPE_INVALID | CKR_BUFFER_TOO_SMALL
        ));
        assert_eq!(tmpl[0].ulValueLen, 256);
        assert_eq!(tmpl[1].ulValueLen, CK_UNAVAILABLE_INFORMATION);
        assert_eq!(tmpl[2].ulValueLen, CK_UNAVAILABLE_INFORMATION);
        assert_eq!(tmpl[3].ulValueLen, CK_UNAVAILABLE_INFORMATION);
        assert_eq!(tmpl[4].ulValueLen, 1);
        // Length query of one attribute alone.
        let mut one = [CK_ATTRIBUTE {
            type_: CKA_PRIVATE_EXPONENT,
            pValue: std::ptr::null_mut(),
            ulValueLen: 0,
        }];
        assert_eq!(
            (r.f.C_GetAttributeValue.unwrap())(s.handle(), private.handle(), one.as_mut_ptr(), 1),
            CKR_ATTRIBUTE_SENSITIVE
        );
    }
    // Modulus and exponent are readable on the private key (OpenDNSSEC, libp11 need them).
    let a = s
        .get_attributes(private, &[AttributeType::Modulus, AttributeType::PublicExponent])
        .unwrap();
    assert_eq!(a.len(), 2);
    let spki = s.get_attributes(public, &[AttributeType::PublicKeyInfo]).unwrap();
    assert!(matches!(&spki[0], Attribute::PublicKeyInfo(d) if d.len() > 256));
    // CKA_SENSITIVE only goes to true, CKA_EXTRACTABLE only to false.
    assert_eq!(
        rv(s.update_attributes(private, &[Attribute::Sensitive(false)])
            .unwrap_err()),
        RvError::AttributeReadOnly
    );
    s.update_attributes(private, &[Attribute::Extractable(false)])
        .unwrap();
    assert_eq!(
        rv(s.update_attributes(private, &[Attribute::Extractable(true)])
            .unwrap_err()),
        RvError::AttributeReadOnly
    );
    assert_eq!(
        rv(s.update_attributes(private, &[Attribute::Modulus(vec![1])])
            .unwrap_err()),
        RvError::AttributeReadOnly
    );
    assert_eq!(
        rv(s.update_attributes(private, &[Attribute::KeyType(KeyType::AES)])
            .unwrap_err()),
        RvError::AttributeReadOnly
    );
    // Generated keys: local, always sensitive, never extractable.
    let a = s
        .get_attributes(
            private,
            &[
                AttributeType::Local,
                AttributeType::AlwaysSensitive,
                AttributeType::NeverExtractable,
                AttributeType::KeyGenMechanism,
            ],
        )
        .unwrap();
    assert_eq!(a[0], Attribute::Local(true));
    assert_eq!(a[1], Attribute::AlwaysSensitive(true));
    assert_eq!(a[2], Attribute::NeverExtractable(true));
    assert_eq!(
        a[3],
        Attribute::KeyGenMechanism(cryptoki::mechanism::MechanismType::RSA_PKCS_KEY_PAIR_GEN)
    );
    // A non-sensitive, extractable secret key reveals its value.
    let k = s
        .generate_key(
            &Mechanism::AesKeyGen,
            &[
                Attribute::ValueLen(16.into()),
                Attribute::Sensitive(false),
                Attribute::Extractable(true),
            ],
        )
        .unwrap();
    let a = s
        .get_attributes(
            k,
            &[
                AttributeType::Value,
                AttributeType::CheckValue,
                AttributeType::ValueLen,
            ],
        )
        .unwrap();
    assert!(matches!(&a[0], Attribute::Value(v) if v.len() == 16));
    assert!(matches!(&a[1], Attribute::CheckValue(v) if v.len() == 3));
}

#[test]
fn modifiable_copyable_destroyable_and_copy_object() {
    let (_env, _p, s) = setup();
    let data = s
        .create_object(&[
            Attribute::Class(ObjectClass::DATA),
            Attribute::Token(false),
            Attribute::Application(b"app".to_vec()),
            Attribute::Value(b"payload".to_vec()),
            Attribute::Label(b"data".to_vec()),
        ])
        .unwrap();
    s.update_attributes(
        data,
        &[
            Attribute::Label(b"renamed".to_vec()),
            Attribute::Value(b"new".to_vec()),
        ],
    )
    .unwrap();
    let a = s
        .get_attributes(data, &[AttributeType::Label, AttributeType::Value])
        .unwrap();
    assert_eq!(
        a,
        vec![
            Attribute::Label(b"renamed".to_vec()),
            Attribute::Value(b"new".to_vec())
        ]
    );
    // Copy a session object to a token object (what Java does with session keys).
    let copy = s
        .copy_object(
            data,
            &[Attribute::Token(true), Attribute::Label(b"copy".to_vec())],
        )
        .unwrap();
    let a = s
        .get_attributes(
            copy,
            &[AttributeType::Token, AttributeType::Label, AttributeType::Value],
        )
        .unwrap();
    assert_eq!(
        a,
        vec![
            Attribute::Token(true),
            Attribute::Label(b"copy".to_vec()),
            Attribute::Value(b"new".to_vec())
        ]
    );
    let u1 = s.get_attributes(data, &[AttributeType::UniqueId]).unwrap();
    let u2 = s.get_attributes(copy, &[AttributeType::UniqueId]).unwrap();
    assert_ne!(u1, u2);
    // CKA_MODIFIABLE false: no changes, and it cannot be set back.
    let fixed = s.copy_object(copy, &[Attribute::Modifiable(false)]).unwrap();
    assert_eq!(
        rv(s.update_attributes(fixed, &[Attribute::Label(b"x".to_vec())])
            .unwrap_err()),
        RvError::ActionProhibited
    );
    assert_eq!(
        rv(s.copy_object(fixed, &[Attribute::Modifiable(true)]).unwrap_err()),
        RvError::AttributeReadOnly
    );
    // CKA_COPYABLE false.
    s.update_attributes(copy, &[Attribute::Copyable(false)]).unwrap();
    assert_eq!(
        rv(s.copy_object(copy, &[]).unwrap_err()),
        RvError::ActionProhibited
    );
    // CKA_DESTROYABLE false.
    s.update_attributes(copy, &[Attribute::Destroyable(false)])
        .unwrap();
    assert_eq!(rv(s.destroy_object(copy).unwrap_err()), RvError::ActionProhibited);
    s.destroy_object(data).unwrap();
    assert_eq!(
        rv(s.destroy_object(data).unwrap_err()),
        RvError::ObjectHandleInvalid
    );
    assert_eq!(
        rv(s.get_attributes(data, &[AttributeType::Label]).unwrap_err()),
        RvError::ObjectHandleInvalid
    );
    assert!(s.get_attributes(fixed, &[AttributeType::Label]).is_ok());
    // Attributes of another class are invalid in a template.
    let bad = [
        Attribute::Class(ObjectClass::DATA),
        Attribute::Modulus(vec![1, 2]),
    ];
    assert_eq!(
        rv(s.create_object(&bad).unwrap_err()),
        RvError::AttributeTypeInvalid
    );
    assert_eq!(
        rv(s.create_object(&[Attribute::Label(b"no class".to_vec())])
            .unwrap_err()),
        RvError::TemplateIncomplete
    );
}

#[test]
fn certificates_carry_what_java_and_nss_read() {
    let (_env, _p, s) = setup();
    let der = vec![0x30, 0x82, 0x01, 0x00, 1, 2, 3];
    let cert = s
        .create_object(&[
            Attribute::Class(ObjectClass::CERTIFICATE),
            Attribute::CertificateType(CertificateType::X_509),
            Attribute::Token(true),
            Attribute::Value(der.clone()),
            Attribute::Subject(b"subject-der".to_vec()),
            Attribute::Issuer(b"issuer-der".to_vec()),
            Attribute::SerialNumber(vec![2, 1, 5]),
            Attribute::Id(b"c1".to_vec()),
            Attribute::Label(b"my cert".to_vec()),
        ])
        .unwrap();
    let a = s
        .get_attributes(
            cert,
            &[
                AttributeType::Value,
                AttributeType::Subject,
                AttributeType::Issuer,
                AttributeType::SerialNumber,
                AttributeType::Trusted,
                AttributeType::Token,
                AttributeType::Private,
            ],
        )
        .unwrap();
    assert_eq!(a[0], Attribute::Value(der));
    assert_eq!(a[1], Attribute::Subject(b"subject-der".to_vec()));
    assert_eq!(a[4], Attribute::Trusted(false));
    assert_eq!(a[6], Attribute::Private(false));
    // Only the SO may set CKA_TRUSTED.
    assert_eq!(
        rv(s.update_attributes(cert, &[Attribute::Trusted(true)])
            .unwrap_err()),
        RvError::AttributeReadOnly
    );
    let found = s
        .find_objects(&[
            Attribute::Class(ObjectClass::CERTIFICATE),
            Attribute::Label(b"my cert".to_vec()),
        ])
        .unwrap();
    assert_eq!(found, vec![cert]);
    let missing_type = [
        Attribute::Class(ObjectClass::CERTIFICATE),
        Attribute::Value(vec![1]),
    ];
    assert_eq!(
        rv(s.create_object(&missing_type).unwrap_err()),
        RvError::TemplateIncomplete
    );
}

#[test]
fn find_by_any_attribute_and_private_visibility() {
    let (_env, p, s) = setup();
    let slot = s.get_session_info().unwrap().slot_id();
    for i in 0u8..5 {
        rsa_keypair(&s, 1024, &[i], i % 2 == 0);
    }
    assert_eq!(
        s.find_objects(&[Attribute::Class(ObjectClass::PRIVATE_KEY)])
            .unwrap()
            .len(),
        5
    );
    assert_eq!(s.find_objects(&[Attribute::Id(vec![3])]).unwrap().len(), 2);
    assert_eq!(
        s.find_objects(&[Attribute::Id(vec![3]), Attribute::Class(ObjectClass::PUBLIC_KEY)])
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        s.find_objects(&[Attribute::Token(true), Attribute::Class(ObjectClass::PRIVATE_KEY)])
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        s.find_objects(&[
            Attribute::Token(false),
            Attribute::Class(ObjectClass::PRIVATE_KEY)
        ])
        .unwrap()
        .len(),
        2
    );
    assert_eq!(
        s.find_objects(&[Attribute::Label(b"test key".to_vec()), Attribute::Sign(true)])
            .unwrap()
            .len(),
        5
    );
    assert_eq!(
        s.find_objects(&[Attribute::ModulusBits(1024.into())])
            .unwrap()
            .len(),
        5
    );
    assert!(s.find_objects(&[Attribute::Id(vec![42])]).unwrap().is_empty());
    // A second session without login... shares the login; after logout private keys vanish.
    let priv_handle = s
        .find_objects(&[Attribute::Class(ObjectClass::PRIVATE_KEY), Attribute::Id(vec![0])])
        .unwrap()[0];
    // Id 1 is a session key pair.
    let private_session_key = s
        .find_objects(&[Attribute::Class(ObjectClass::PRIVATE_KEY), Attribute::Id(vec![1])])
        .unwrap()[0];
    s.logout().unwrap();
    let public_only = s.find_objects(&[]).unwrap();
    assert_eq!(
        public_only.len(),
        5,
        "only the public keys are visible without login"
    );
    assert_eq!(
        rv(s.get_attributes(priv_handle, &[AttributeType::Label])
            .unwrap_err()),
        RvError::ObjectHandleInvalid
    );
    // Private objects cannot be created without a user login.
    let err = s
        .create_object(&[Attribute::Class(ObjectClass::DATA), Attribute::Private(true)])
        .unwrap_err();
    assert_eq!(rv(err), RvError::UserNotLoggedIn);
    // The logout destroyed the private session objects (PKCS#11 C_Logout: the application's
    // private session objects are destroyed, and their handles stay invalid after a later
    // login): the private keys left are the token's.
    let s2 = user_session(&p, slot);
    let private_keys = s2
        .find_objects(&[Attribute::Class(ObjectClass::PRIVATE_KEY)])
        .unwrap();
    assert_eq!(private_keys.len(), 3);
    assert!(!private_keys.contains(&private_session_key));
    assert_eq!(
        rv(s2
            .get_attributes(private_session_key, &[AttributeType::Label])
            .unwrap_err()),
        RvError::ObjectHandleInvalid
    );
    // Session objects die with their session; token objects do not (the public keys: three
    // token objects, two session objects of `s`).
    let before = s2
        .find_objects(&[Attribute::Class(ObjectClass::PUBLIC_KEY)])
        .unwrap()
        .len();
    assert_eq!(before, 5);
    s.close().unwrap();
    let after = s2
        .find_objects(&[Attribute::Class(ObjectClass::PUBLIC_KEY)])
        .unwrap()
        .len();
    assert_eq!(after, 3);
    // Object size is reported.
    let h = s2
        .find_objects(&[Attribute::Class(ObjectClass::PUBLIC_KEY)])
        .unwrap()[0];
    let r = Raw::load();
    let mut size = 0;
    unsafe {
        assert_eq!(
            (r.f.C_GetObjectSize.unwrap())(s2.handle(), h.handle(), &mut size),
            CKR_OK
        )
    };
    assert!(size > 128);
}

#[test]
fn generate_key_pair_templates() {
    let (_env, _p, s) = setup();
    // Knot's habit: no CKA_CLASS/CKA_KEY_TYPE, a 20-byte id.
    let id = vec![7u8; 20];
    let (pubk, privk) = s
        .generate_key_pair(
            &Mechanism::RsaPkcsKeyPairGen,
            &[
                Attribute::ModulusBits(2048.into()),
                Attribute::Id(id.clone()),
                Attribute::Token(true),
            ],
            &[
                Attribute::Id(id.clone()),
                Attribute::Token(true),
                Attribute::Sign(true),
            ],
        )
        .unwrap();
    assert_eq!(find_one(&s, ObjectClass::PRIVATE_KEY, &id), privk);
    assert_eq!(find_one(&s, ObjectClass::PUBLIC_KEY, &id), pubk);
    // Public exponent from the template.
    let (pubk, _) = s
        .generate_key_pair(
            &Mechanism::RsaPkcsKeyPairGen,
            &[
                Attribute::ModulusBits(1024.into()),
                Attribute::PublicExponent(vec![3]),
            ],
            &[],
        )
        .unwrap();
    assert_eq!(
        s.get_attributes(pubk, &[AttributeType::PublicExponent]).unwrap()[0],
        Attribute::PublicExponent(vec![3])
    );
    let err = s
        .generate_key_pair(
            &Mechanism::RsaPkcsKeyPairGen,
            &[Attribute::ModulusBits(1000.into())],
            &[],
        )
        .unwrap_err();
    assert_eq!(rv(err), RvError::KeySizeRange);
    let err = s
        .generate_key_pair(&Mechanism::RsaPkcsKeyPairGen, &[], &[])
        .unwrap_err();
    assert_eq!(rv(err), RvError::TemplateIncomplete);
    let err = s
        .generate_key_pair(
            &Mechanism::RsaPkcsKeyPairGen,
            &[
                Attribute::ModulusBits(1024.into()),
                Attribute::Class(ObjectClass::SECRET_KEY),
            ],
            &[],
        )
        .unwrap_err();
    assert_eq!(rv(err), RvError::TemplateInconsistent);
    let err = s
        .generate_key_pair(&Mechanism::AesKeyGen, &[Attribute::ModulusBits(1024.into())], &[])
        .unwrap_err();
    assert_eq!(rv(err), RvError::MechanismInvalid);
    // Malformed boolean.
    let r = Raw::load();
    unsafe {
        let mut bits: CK_ULONG = 1024;
        let mut bad_bool = [1u8, 1u8];
        let mut pt = [
            CK_ATTRIBUTE {
                type_: CKA_MODULUS_BITS,
                pValue: &mut bits as *mut _ as *mut _,
                ulValueLen: 8,
            },
            CK_ATTRIBUTE {
                type_: CKA_TOKEN,
                pValue: bad_bool.as_mut_ptr() as *mut _,
                ulValueLen: 2,
            },
        ];
        let mut m = raw_mech::<u8>(CKM_RSA_PKCS_KEY_PAIR_GEN, None);
        let (mut a, mut b) = (0, 0);
        let rv = (r.f.C_GenerateKeyPair.unwrap())(
            s.handle(),
            &mut m,
            pt.as_mut_ptr(),
            2,
            std::ptr::null_mut(),
            0,
            &mut a,
            &mut b,
        );
        assert_eq!(rv, CKR_ATTRIBUTE_VALUE_INVALID);
    }
}
