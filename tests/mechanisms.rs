//! Every RSA mechanism through the built module, each signature checked by an independent
//! implementation (the `rsa` crate or OpenSSL's command line), plus digests and wrapping.

mod common;

use common::*;
use cryptoki::error::RvError;
use cryptoki::mechanism::rsa::{PkcsMgfType, PkcsOaepParams, PkcsOaepSource, PkcsPssParams};
use cryptoki::mechanism::{Mechanism, MechanismType};
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass};
use cryptoki_sys::*;
use rsa::pkcs1v15::Pkcs1v15Sign;
use rsa::sha2::{Digest, Sha224, Sha256, Sha384, Sha512};
use rsa::{Oaep, Pss};
use sha1::Sha1;

fn setup() -> (TestEnv, cryptoki::context::Pkcs11, cryptoki::session::Session) {
    let env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "mechanisms");
    let s = user_session(&p, slot);
    (env, p, s)
}

#[test]
fn hash_and_sign_pkcs1_all_hashes_single_and_multi_part() {
    let (_env, _p, s) = setup();
    let (public, private) = rsa_keypair(&s, 2048, b"k1", true);
    let pk = rsa_public(&s, public);
    let data = b"the quick brown fox jumps over the lazy dog".repeat(7);
    let cases: Vec<(Mechanism, Pkcs1v15Sign, Vec<u8>)> = vec![
        (
            Mechanism::Sha1RsaPkcs,
            Pkcs1v15Sign::new::<Sha1>(),
            Sha1::digest(&data).to_vec(),
        ),
        (
            Mechanism::Sha224RsaPkcs,
            Pkcs1v15Sign::new::<Sha224>(),
            Sha224::digest(&data).to_vec(),
        ),
        (
            Mechanism::Sha256RsaPkcs,
            Pkcs1v15Sign::new::<Sha256>(),
            Sha256::digest(&data).to_vec(),
        ),
        (
            Mechanism::Sha384RsaPkcs,
            Pkcs1v15Sign::new::<Sha384>(),
            Sha384::digest(&data).to_vec(),
        ),
        (
            Mechanism::Sha512RsaPkcs,
            Pkcs1v15Sign::new::<Sha512>(),
            Sha512::digest(&data).to_vec(),
        ),
    ];
    for (mech, scheme, hash) in cases {
        let one_shot = s.sign(&mech, private, &data).unwrap();
        assert_eq!(one_shot.len(), 256);
        pk.verify(scheme.clone(), &hash, &one_shot).unwrap();
        s.sign_init(&mech, private).unwrap();
        for chunk in data.chunks(13) {
            s.sign_update(chunk).unwrap();
        }
        let multi = s.sign_final().unwrap();
        // PKCS#1 v1.5 is deterministic: both paths give the same bytes.
        assert_eq!(one_shot, multi, "{mech:?}");
        s.verify(&mech, public, &data, &multi).unwrap();
        let mut bad = multi.clone();
        bad[10] ^= 1;
        assert_eq!(
            rv(s.verify(&mech, public, &data, &bad).unwrap_err()),
            RvError::SignatureInvalid
        );
    }
}

#[test]
fn raw_pkcs1_over_digest_info_and_x509() {
    let (_env, _p, s) = setup();
    let (public, private) = rsa_keypair(&s, 2048, b"k1", true);
    let pk = rsa_public(&s, public);
    let hash = Sha256::digest(b"zone data").to_vec();
    let mut digest_info = vec![
        0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00,
        0x04, 0x20,
    ];
    digest_info.extend_from_slice(&hash);
    let sig = s.sign(&Mechanism::RsaPkcs, private, &digest_info).unwrap();
    pk.verify(Pkcs1v15Sign::new::<Sha256>(), &hash, &sig).unwrap();
    s.verify(&Mechanism::RsaPkcs, public, &digest_info, &sig).unwrap();

    // X.509 (raw): sign a block we padded ourselves, which is then a PKCS#1 signature.
    let mut block = vec![0xffu8; 256];
    block[0] = 0;
    block[1] = 1;
    block[256 - digest_info.len() - 1] = 0;
    block[256 - digest_info.len()..].copy_from_slice(&digest_info);
    let raw = s.sign(&Mechanism::RsaX509, private, &block).unwrap();
    assert_eq!(raw, sig);
    s.verify(&Mechanism::RsaX509, public, &block, &raw).unwrap();

    // Data longer than k - 11 does not fit PKCS#1 padding, and the failure ends the operation.
    let err = s.sign(&Mechanism::RsaPkcs, private, &[7u8; 246]).unwrap_err();
    assert_eq!(rv(err), RvError::DataLenRange);
}

#[test]
fn pss_prehashed_and_hash_and_sign() {
    let (_env, _p, s) = setup();
    let (public, private) = rsa_keypair(&s, 2048, b"k1", true);
    let pk = rsa_public(&s, public);
    let data = b"pss message".to_vec();
    let hash = Sha256::digest(&data).to_vec();
    let params = PkcsPssParams {
        hash_alg: MechanismType::SHA256,
        mgf: PkcsMgfType::MGF1_SHA256,
        s_len: 32.into(),
    };
    let sig = s.sign(&Mechanism::RsaPkcsPss(params), private, &hash).unwrap();
    pk.verify(Pss::<Sha256>::new(), &hash, &sig).unwrap();
    s.verify(&Mechanism::RsaPkcsPss(params), public, &hash, &sig)
        .unwrap();
    // PSS is randomised: two signatures differ and both verify.
    let sig2 = s.sign(&Mechanism::RsaPkcsPss(params), private, &hash).unwrap();
    assert_ne!(sig, sig2);

    s.sign_init(&Mechanism::Sha256RsaPkcsPss(params), private)
        .unwrap();
    s.sign_update(&data[..4]).unwrap();
    s.sign_update(&data[4..]).unwrap();
    let sig = s.sign_final().unwrap();
    pk.verify(Pss::<Sha256>::new(), &hash, &sig).unwrap();

    let p384 = PkcsPssParams {
        hash_alg: MechanismType::SHA384,
        mgf: PkcsMgfType::MGF1_SHA384,
        s_len: 48.into(),
    };
    let sig = s
        .sign(&Mechanism::Sha384RsaPkcsPss(p384), private, &data)
        .unwrap();
    pk.verify(Pss::<Sha384>::new(), &Sha384::digest(&data), &sig)
        .unwrap();

    // The hash of the parameters must be the mechanism's.
    let wrong = PkcsPssParams {
        hash_alg: MechanismType::SHA1,
        mgf: PkcsMgfType::MGF1_SHA1,
        s_len: 20.into(),
    };
    let err = s
        .sign_init(&Mechanism::Sha256RsaPkcsPss(wrong), private)
        .unwrap_err();
    assert_eq!(rv(err), RvError::MechanismParamInvalid);
    // A pre-hashed PSS input must have the hash's length.
    let err = s
        .sign(&Mechanism::RsaPkcsPss(params), private, &hash[..20])
        .unwrap_err();
    assert_eq!(rv(err), RvError::DataLenRange);
}

#[test]
fn pss_bad_parameters_through_raw_api() {
    let (_env, p, s) = setup();
    let (_public, private) = rsa_keypair(&s, 2048, b"k1", true);
    let r = Raw::load();
    let h = s.handle();
    // A parameter block of the wrong size.
    let mut short = [0u8; 4];
    let mut m = raw_mech(CKM_RSA_PKCS_PSS, Some(&mut short));
    assert_eq!(
        raw_sign(&r, h, &mut m, private, &[0u8; 32]),
        Err(CKR_MECHANISM_PARAM_INVALID)
    );
    // No parameters for CKM_RSA_PKCS_PSS.
    let mut m = raw_mech::<u8>(CKM_RSA_PKCS_PSS, None);
    assert_eq!(
        raw_sign(&r, h, &mut m, private, &[0u8; 32]),
        Err(CKR_MECHANISM_PARAM_INVALID)
    );
    // An unknown MGF.
    let mut pp = CK_RSA_PKCS_PSS_PARAMS {
        hashAlg: CKM_SHA256,
        mgf: 0x77,
        sLen: 32,
    };
    let mut m = raw_mech(CKM_RSA_PKCS_PSS, Some(&mut pp));
    assert_eq!(
        raw_sign(&r, h, &mut m, private, &[0u8; 32]),
        Err(CKR_MECHANISM_PARAM_INVALID)
    );
    drop(p);
}

#[test]
fn sha3_and_sha224_pss_verified_by_openssl() {
    let (env, _p, s) = setup();
    let (public, private) = rsa_keypair(&s, 2048, b"k1", true);
    let pem = env.dir.path().join("pub.pem");
    write_public_pem(&s, public, &pem);
    let data_path = env.dir.path().join("data");
    let data = b"signed by ferrohsm, checked by OpenSSL".to_vec();
    std::fs::write(&data_path, &data).unwrap();
    let r = Raw::load();
    let cases: [(CK_MECHANISM_TYPE, &str, Option<CK_RSA_PKCS_PSS_PARAMS>); 4] = [
        (CKM_SHA3_256_RSA_PKCS, "-sha3-256", None),
        (CKM_SHA3_512_RSA_PKCS, "-sha3-512", None),
        (
            CKM_SHA224_RSA_PKCS_PSS,
            "-sha224",
            Some(CK_RSA_PKCS_PSS_PARAMS {
                hashAlg: CKM_SHA224,
                mgf: CKG_MGF1_SHA224,
                sLen: 28,
            }),
        ),
        (
            CKM_SHA3_256_RSA_PKCS_PSS,
            "-sha3-256",
            Some(CK_RSA_PKCS_PSS_PARAMS {
                hashAlg: CKM_SHA3_256,
                mgf: CKG_MGF1_SHA3_256,
                sLen: 32,
            }),
        ),
    ];
    for (mech, dgst, params) in cases {
        let mut params = params;
        let mut m = raw_mech(mech, params.as_mut());
        let sig = raw_sign(&r, s.handle(), &mut m, private, &data).unwrap();
        let sig_path = env.dir.path().join("sig");
        std::fs::write(&sig_path, &sig).unwrap();
        let mut args = vec![
            "dgst",
            dgst,
            "-verify",
            pem.to_str().unwrap(),
            "-signature",
            sig_path.to_str().unwrap(),
        ];
        if params.is_some() {
            args.extend(["-sigopt", "rsa_padding_mode:pss", "-sigopt", "rsa_pss_saltlen:-1"]);
        }
        args.push(data_path.to_str().unwrap());
        assert!(
            openssl(&args),
            "OpenSSL rejected the signature of mechanism 0x{mech:x}"
        );
    }
}

#[test]
fn every_key_size_signs_including_odd_lengths() {
    let (_env, _p, s) = setup();
    for bits in [1024u64, 1032, 3072, 4096] {
        let (public, private) = rsa_keypair(&s, bits, &bits.to_be_bytes(), false);
        let Attribute::ModulusBits(got) =
            s.get_attributes(public, &[AttributeType::ModulusBits]).unwrap()[0].clone()
        else {
            panic!()
        };
        assert_eq!(u64::from(got), bits);
        let pk = rsa_public(&s, public);
        let sig = s.sign(&Mechanism::Sha256RsaPkcs, private, b"sized").unwrap();
        assert_eq!(sig.len() as u64, bits.div_ceil(8));
        pk.verify(Pkcs1v15Sign::new::<Sha256>(), &Sha256::digest(b"sized"), &sig)
            .unwrap();
    }
}

#[test]
fn encryption_pkcs1_oaep_and_raw() {
    let (_env, _p, s) = setup();
    let (public, private) = rsa_keypair(&s, 2048, b"k1", true);
    let pk = rsa_public(&s, public);
    let mut rng = rand_core::UnwrapErr(getrandom::SysRng);
    // Encrypted by the rsa crate, decrypted by the token.
    let ct = pk
        .encrypt(&mut rng, rsa::Pkcs1v15Encrypt, b"pkcs1 secret")
        .unwrap();
    assert_eq!(
        s.decrypt(&Mechanism::RsaPkcs, private, &ct).unwrap(),
        b"pkcs1 secret"
    );
    let ct = pk
        .encrypt(
            &mut rng,
            Oaep::<Sha256>::new_with_label(b"lbl".to_vec()),
            b"oaep secret",
        )
        .unwrap();
    let oaep = PkcsOaepParams::new(
        MechanismType::SHA256,
        PkcsMgfType::MGF1_SHA256,
        PkcsOaepSource::data_specified(b"lbl"),
    );
    assert_eq!(
        s.decrypt(&Mechanism::RsaPkcsOaep(oaep), private, &ct).unwrap(),
        b"oaep secret"
    );
    // A wrong label is an invalid ciphertext.
    let other = PkcsOaepParams::new(
        MechanismType::SHA256,
        PkcsMgfType::MGF1_SHA256,
        PkcsOaepSource::data_specified(b"xyz"),
    );
    assert_eq!(
        rv(s.decrypt(&Mechanism::RsaPkcsOaep(other), private, &ct)
            .unwrap_err()),
        RvError::EncryptedDataInvalid
    );
    // Encrypted by the token, decrypted by the token.
    let sha1 = PkcsOaepParams::new(
        MechanismType::SHA1,
        PkcsMgfType::MGF1_SHA1,
        PkcsOaepSource::empty(),
    );
    let ct = s
        .encrypt(&Mechanism::RsaPkcsOaep(sha1), public, b"round trip")
        .unwrap();
    assert_eq!(
        s.decrypt(&Mechanism::RsaPkcsOaep(sha1), private, &ct).unwrap(),
        b"round trip"
    );
    let ct = s
        .encrypt(&Mechanism::RsaPkcs, public, b"pkcs1 round trip")
        .unwrap();
    assert_eq!(
        s.decrypt(&Mechanism::RsaPkcs, private, &ct).unwrap(),
        b"pkcs1 round trip"
    );
    // A malformed PKCS#1 block yields a deterministic substitute, not an error (implicit rejection).
    let mut bad = ct.clone();
    bad[5] ^= 0x40;
    let a = s.decrypt(&Mechanism::RsaPkcs, private, &bad).unwrap();
    let b = s.decrypt(&Mechanism::RsaPkcs, private, &bad).unwrap();
    assert_eq!(a, b);
    assert_ne!(a, b"pkcs1 round trip");
    // Raw encryption round trip.
    let m = [0x42u8; 200];
    let ct = s.encrypt(&Mechanism::RsaX509, public, &m).unwrap();
    let pt = s.decrypt(&Mechanism::RsaX509, private, &ct).unwrap();
    assert_eq!(&pt[56..], &m[..]);
    assert!(pt[..56].iter().all(|&b| b == 0));
}

#[test]
fn digests_single_multi_and_digest_key() {
    let (_env, _p, s) = setup();
    let data = b"digest me".repeat(100);
    assert_eq!(
        s.digest(&Mechanism::Sha1, &data).unwrap(),
        Sha1::digest(&data).to_vec()
    );
    assert_eq!(
        s.digest(&Mechanism::Sha256, &data).unwrap(),
        Sha256::digest(&data).to_vec()
    );
    assert_eq!(
        s.digest(&Mechanism::Sha384, &data).unwrap(),
        Sha384::digest(&data).to_vec()
    );
    s.digest_init(&Mechanism::Sha512).unwrap();
    for c in data.chunks(77) {
        s.digest_update(c).unwrap();
    }
    assert_eq!(s.digest_final().unwrap(), Sha512::digest(&data).to_vec());
    let r = Raw::load();
    let mut m = raw_mech::<u8>(CKM_SHA3_256, None);
    unsafe {
        assert_eq!((r.f.C_DigestInit.unwrap())(s.handle(), &mut m), CKR_OK);
        let mut out = [0u8; 32];
        let mut len = 32;
        assert_eq!(
            (r.f.C_Digest.unwrap())(
                s.handle(),
                data.as_ptr() as *mut u8,
                data.len() as _,
                out.as_mut_ptr(),
                &mut len
            ),
            CKR_OK
        );
        assert_eq!(out.to_vec(), sha3::Sha3_256::digest(&data).to_vec());
    }
    // C_DigestKey feeds a secret key's value into the digest.
    let value = vec![9u8; 32];
    let key = s
        .create_object(&[
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(KeyType::GENERIC_SECRET),
            Attribute::Value(value.clone()),
        ])
        .unwrap();
    s.digest_init(&Mechanism::Sha256).unwrap();
    s.digest_update(b"prefix").unwrap();
    s.digest_key(key).unwrap();
    let mut expect = Sha256::new();
    expect.update(b"prefix");
    expect.update(&value);
    assert_eq!(s.digest_final().unwrap(), expect.finalize().to_vec());
}

#[test]
fn key_wrapping_aes_kwp_and_rsa_oaep() {
    let (_env, _p, s) = setup();
    let kek = s
        .generate_key(
            &Mechanism::AesKeyGen,
            &[
                Attribute::ValueLen(32.into()),
                Attribute::Wrap(true),
                Attribute::Unwrap(true),
            ],
        )
        .unwrap();
    let secret = s
        .generate_key(
            &Mechanism::GenericSecretKeyGen,
            &[
                Attribute::ValueLen(20.into()),
                Attribute::Extractable(true),
                Attribute::Sensitive(false),
            ],
        )
        .unwrap();
    let Attribute::Value(original) = s.get_attributes(secret, &[AttributeType::Value]).unwrap()[0].clone()
    else {
        panic!()
    };
    let wrapped = s.wrap_key(&Mechanism::AesKeyWrapPad, kek, secret).unwrap();
    assert_eq!(wrapped.len(), 32);
    let template = [
        Attribute::Class(ObjectClass::SECRET_KEY),
        Attribute::KeyType(KeyType::GENERIC_SECRET),
        Attribute::Sensitive(false),
        Attribute::Extractable(true),
    ];
    let unwrapped = s
        .unwrap_key(&Mechanism::AesKeyWrapPad, kek, &wrapped, &template)
        .unwrap();
    let Attribute::Value(back) = s.get_attributes(unwrapped, &[AttributeType::Value]).unwrap()[0].clone()
    else {
        panic!()
    };
    assert_eq!(back, original);
    let attrs = s.get_attributes(unwrapped, &[AttributeType::Local]).unwrap();
    assert_eq!(attrs[0], Attribute::Local(false));

    // RSA-OAEP wrap of the same key, unwrapped with the private key.
    let (public, private) = rsa_keypair(&s, 2048, b"w", false);
    let oaep = PkcsOaepParams::new(
        MechanismType::SHA256,
        PkcsMgfType::MGF1_SHA256,
        PkcsOaepSource::empty(),
    );
    let wrapped = s.wrap_key(&Mechanism::RsaPkcsOaep(oaep), public, secret).unwrap();
    let unwrapped = s
        .unwrap_key(&Mechanism::RsaPkcsOaep(oaep), private, &wrapped, &template)
        .unwrap();
    let Attribute::Value(back) = s.get_attributes(unwrapped, &[AttributeType::Value]).unwrap()[0].clone()
    else {
        panic!()
    };
    assert_eq!(back, original);

    // A sensitive, unextractable key cannot be wrapped.
    let locked = s
        .generate_key(&Mechanism::AesKeyGen, &[Attribute::ValueLen(16.into())])
        .unwrap();
    assert_eq!(
        rv(s.wrap_key(&Mechanism::AesKeyWrapPad, kek, locked).unwrap_err()),
        RvError::KeyUnextractable
    );
    // A tampered wrapping fails integrity.
    let mut bad = s.wrap_key(&Mechanism::AesKeyWrapPad, kek, secret).unwrap();
    bad[3] ^= 1;
    assert_eq!(
        rv(s.unwrap_key(&Mechanism::AesKeyWrapPad, kek, &bad, &template)
            .unwrap_err()),
        RvError::WrappedKeyInvalid
    );
}

#[test]
fn key_usage_type_and_allowed_mechanisms_are_enforced() {
    let (_env, _p, s) = setup();
    let public = vec![Attribute::ModulusBits(2048.into()), Attribute::Verify(true)];
    let private = vec![
        Attribute::Sign(false),
        Attribute::Decrypt(true),
        Attribute::AllowedMechanisms(vec![MechanismType::RSA_PKCS_OAEP, MechanismType::RSA_PKCS]),
    ];
    let (pubk, privk) = s
        .generate_key_pair(&Mechanism::RsaPkcsKeyPairGen, &public, &private)
        .unwrap();
    assert_eq!(
        rv(s.sign(&Mechanism::Sha256RsaPkcs, privk, b"x").unwrap_err()),
        RvError::KeyFunctionNotPermitted
    );
    assert_eq!(
        rv(s.sign(&Mechanism::Sha256RsaPkcs, pubk, b"x").unwrap_err()),
        RvError::KeyTypeInconsistent
    );
    s.update_attributes(privk, &[Attribute::Sign(true)]).unwrap();
    // Now CKA_SIGN is set but SHA256-RSA-PKCS is not in CKA_ALLOWED_MECHANISMS.
    assert_eq!(
        rv(s.sign(&Mechanism::Sha256RsaPkcs, privk, b"x").unwrap_err()),
        RvError::MechanismInvalid
    );
    let pk = rsa_public(&s, pubk);
    let mut di = vec![
        0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00,
        0x04, 0x20,
    ];
    let h = Sha256::digest(b"x");
    di.extend_from_slice(&h);
    let sig = s.sign(&Mechanism::RsaPkcs, privk, &di).unwrap();
    pk.verify(Pkcs1v15Sign::new::<Sha256>(), &h, &sig).unwrap();
    // An AES key is no RSA key.
    let aes = s
        .generate_key(
            &Mechanism::AesKeyGen,
            &[Attribute::ValueLen(16.into()), Attribute::Sign(true)],
        )
        .unwrap();
    assert_eq!(
        rv(s.sign(&Mechanism::RsaPkcs, aes, &di).unwrap_err()),
        RvError::KeyTypeInconsistent
    );
}

#[test]
fn operation_state_rules() {
    let (_env, _p, s) = setup();
    let (_public, private) = rsa_keypair(&s, 2048, b"k1", false);
    let r = Raw::load();
    let h = s.handle();
    unsafe {
        // Sign without init.
        let mut len = 0;
        assert_eq!(
            (r.f.C_Sign.unwrap())(h, b"x".as_ptr() as *mut u8, 1, std::ptr::null_mut(), &mut len),
            CKR_OPERATION_NOT_INITIALIZED
        );
        let mut m = raw_mech::<u8>(CKM_SHA256_RSA_PKCS, None);
        assert_eq!((r.f.C_SignInit.unwrap())(h, &mut m, private.handle()), CKR_OK);
        // A second init while active.
        assert_eq!(
            (r.f.C_SignInit.unwrap())(h, &mut m, private.handle()),
            CKR_OPERATION_ACTIVE
        );
        // Length query and a short buffer keep the operation; the needed length is written back.
        assert_eq!(
            (r.f.C_Sign.unwrap())(h, b"x".as_ptr() as *mut u8, 1, std::ptr::null_mut(), &mut len),
            CKR_OK
        );
        assert_eq!(len, 256);
        let mut small = [0u8; 10];
        let mut len = 10;
        assert_eq!(
            (r.f.C_Sign.unwrap())(h, b"x".as_ptr() as *mut u8, 1, small.as_mut_ptr(), &mut len),
            CKR_BUFFER_TOO_SMALL
        );
        assert_eq!(len, 256);
        let mut sig = [0u8; 256];
        let mut len = 256;
        assert_eq!(
            (r.f.C_Sign.unwrap())(h, b"x".as_ptr() as *mut u8, 1, sig.as_mut_ptr(), &mut len),
            CKR_OK
        );
        // The successful call ended the operation.
        assert_eq!(
            (r.f.C_Sign.unwrap())(h, b"x".as_ptr() as *mut u8, 1, sig.as_mut_ptr(), &mut len),
            CKR_OPERATION_NOT_INITIALIZED
        );
        // One-shot after multi-part is refused and ends the operation.
        assert_eq!((r.f.C_SignInit.unwrap())(h, &mut m, private.handle()), CKR_OK);
        assert_eq!(
            (r.f.C_SignUpdate.unwrap())(h, b"x".as_ptr() as *mut u8, 1),
            CKR_OK
        );
        assert_eq!(
            (r.f.C_Sign.unwrap())(h, b"x".as_ptr() as *mut u8, 1, sig.as_mut_ptr(), &mut len),
            CKR_OPERATION_ACTIVE
        );
        assert_eq!(
            (r.f.C_SignFinal.unwrap())(h, sig.as_mut_ptr(), &mut len),
            CKR_OPERATION_NOT_INITIALIZED
        );
        // An error (data too long for CKM_RSA_PKCS) ends the operation.
        let mut m = raw_mech::<u8>(CKM_RSA_PKCS, None);
        assert_eq!((r.f.C_SignInit.unwrap())(h, &mut m, private.handle()), CKR_OK);
        let long = [1u8; 300];
        let mut len = 256;
        assert_eq!(
            (r.f.C_Sign.unwrap())(h, long.as_ptr() as *mut u8, 300, sig.as_mut_ptr(), &mut len),
            CKR_DATA_LEN_RANGE
        );
        assert_eq!(
            (r.f.C_Sign.unwrap())(h, b"x".as_ptr() as *mut u8, 1, sig.as_mut_ptr(), &mut len),
            CKR_OPERATION_NOT_INITIALIZED
        );
        // CKM_RSA_PKCS is single-part.
        assert_eq!((r.f.C_SignInit.unwrap())(h, &mut m, private.handle()), CKR_OK);
        assert_eq!(
            (r.f.C_SignUpdate.unwrap())(h, b"x".as_ptr() as *mut u8, 1),
            CKR_FUNCTION_NOT_SUPPORTED
        );
        // Unknown mechanism and bad key handle.
        let mut m = raw_mech::<u8>(0x7fff_0000, None);
        assert_eq!(
            (r.f.C_SignInit.unwrap())(h, &mut m, private.handle()),
            CKR_MECHANISM_INVALID
        );
        let mut m = raw_mech::<u8>(CKM_SHA256_RSA_PKCS, None);
        assert_eq!(
            (r.f.C_SignInit.unwrap())(h, &mut m, 0xdead),
            CKR_KEY_HANDLE_INVALID
        );
        // Verify of a wrong-length signature.
        assert_eq!((r.f.C_VerifyInit.unwrap())(h, &mut m, _public.handle()), CKR_OK);
        assert_eq!(
            (r.f.C_Verify.unwrap())(h, b"x".as_ptr() as *mut u8, 1, sig.as_mut_ptr(), 100),
            CKR_SIGNATURE_LEN_RANGE
        );
    }
}

#[test]
fn mechanism_info_reports_sizes_and_flags() {
    let (_env, p, s) = setup();
    let slot = s.get_session_info().unwrap().slot_id();
    let list = p.get_mechanism_list(slot).unwrap();
    for m in [
        MechanismType::RSA_PKCS_KEY_PAIR_GEN,
        MechanismType::RSA_PKCS,
        MechanismType::RSA_X_509,
        MechanismType::RSA_PKCS_PSS,
        MechanismType::RSA_PKCS_OAEP,
        MechanismType::SHA256_RSA_PKCS,
        MechanismType::SHA512_RSA_PKCS_PSS,
        MechanismType::SHA1,
        MechanismType::SHA256,
        MechanismType::AES_KEY_WRAP_PAD,
    ] {
        assert!(list.contains(&m), "{m} missing");
    }
    let info = p
        .get_mechanism_info(slot, MechanismType::RSA_PKCS_KEY_PAIR_GEN)
        .unwrap();
    assert_eq!((info.min_key_size(), info.max_key_size()), (1024, 16384));
    assert!(info.generate_key_pair());
    let info = p
        .get_mechanism_info(slot, MechanismType::SHA256_RSA_PKCS)
        .unwrap();
    assert!(info.sign() && info.verify() && !info.encrypt());
    let info = p.get_mechanism_info(slot, MechanismType::RSA_PKCS_OAEP).unwrap();
    assert!(info.encrypt() && info.decrypt() && info.wrap() && info.unwrap() && !info.sign());
    // DES stays out (a withdrawn algorithm); ECDSA is in (tests/ec.rs checks its info).
    assert_eq!(
        rv(p.get_mechanism_info(slot, MechanismType::DES3_CBC).unwrap_err()),
        RvError::MechanismInvalid
    );
}

#[test]
fn generates_an_8192_bit_key() {
    let (_env, _p, s) = setup();
    let (public, private) = rsa_keypair(&s, 8192, b"big", false);
    let pk = rsa_public(&s, public);
    let sig = s
        .sign(&Mechanism::Sha256RsaPkcs, private, b"eight thousand")
        .unwrap();
    assert_eq!(sig.len(), 1024);
    pk.verify(
        Pkcs1v15Sign::new::<Sha256>(),
        &Sha256::digest(b"eight thousand"),
        &sig,
    )
    .unwrap();
    // Sizes beyond 16384 bits, or under 1024, are refused (tests/rsa_sizes.rs: any length
    // between is generated).
    let err = s
        .generate_key_pair(
            &Mechanism::RsaPkcsKeyPairGen,
            &[Attribute::ModulusBits(16392.into())],
            &[],
        )
        .unwrap_err();
    assert_eq!(rv(err), RvError::KeySizeRange);
    let err = s
        .generate_key_pair(
            &Mechanism::RsaPkcsKeyPairGen,
            &[Attribute::ModulusBits(1016.into())],
            &[],
        )
        .unwrap_err();
    assert_eq!(rv(err), RvError::KeySizeRange);
}

/// DES and 3DES (withdrawn algorithms) and MD5-based MACs are deliberately absent: not in the
/// list, and every function that takes a mechanism answers CKR_MECHANISM_INVALID for them.
#[test]
fn des_3des_and_md5_hmac_are_invalid_mechanisms_everywhere() {
    let (_env, p, s) = setup();
    let slot = s.get_session_info().unwrap().slot_id();
    let r = Raw::load();
    let h = s.handle();
    let aes = s
        .generate_key(
            &Mechanism::AesKeyGen,
            &[
                Attribute::ValueLen(16.into()),
                Attribute::Sign(true),
                Attribute::Verify(true),
                Attribute::Wrap(true),
                Attribute::Extractable(true),
            ],
        )
        .unwrap();
    let absent = [
        CKM_DES_KEY_GEN,
        CKM_DES_ECB,
        CKM_DES_CBC,
        CKM_DES_CBC_PAD,
        CKM_DES_MAC,
        CKM_DES_MAC_GENERAL,
        CKM_DES2_KEY_GEN,
        CKM_DES3_KEY_GEN,
        CKM_DES3_ECB,
        CKM_DES3_CBC,
        CKM_DES3_CBC_PAD,
        CKM_DES3_MAC,
        CKM_DES3_MAC_GENERAL,
        CKM_DES3_CMAC,
        CKM_DES3_CMAC_GENERAL,
        CKM_MD5_HMAC,
        CKM_MD5_HMAC_GENERAL,
    ];
    let mut n = 0;
    let mut list = vec![0; 200];
    let mut iv = [0u8; 8];
    let value_len: CK_ULONG = 24;
    let template = [CK_ATTRIBUTE {
        type_: CKA_VALUE_LEN,
        pValue: &value_len as *const CK_ULONG as *mut _,
        ulValueLen: std::mem::size_of::<CK_ULONG>() as _,
    }];
    // SAFETY: valid handles, mechanisms, a template and output buffers living across each call.
    unsafe {
        assert_eq!(
            (r.f.C_GetMechanismList.unwrap())(slot.id(), std::ptr::null_mut(), &mut n),
            CKR_OK
        );
        list.resize(n as usize, 0);
        assert_eq!(
            (r.f.C_GetMechanismList.unwrap())(slot.id(), list.as_mut_ptr(), &mut n),
            CKR_OK
        );
        for t in absent {
            assert!(!list.contains(&t), "0x{t:x} is not listed");
            let mut info = CK_MECHANISM_INFO::default();
            let calls: [(&str, CK_RV); 6] = [
                (
                    "C_GetMechanismInfo",
                    (r.f.C_GetMechanismInfo.unwrap())(slot.id(), t, &mut info),
                ),
                (
                    "C_EncryptInit",
                    (r.f.C_EncryptInit.unwrap())(h, &mut raw_mech(t, Some(&mut iv)), aes.handle()),
                ),
                (
                    "C_DecryptInit",
                    (r.f.C_DecryptInit.unwrap())(h, &mut raw_mech::<u8>(t, None), aes.handle()),
                ),
                (
                    "C_SignInit",
                    (r.f.C_SignInit.unwrap())(h, &mut raw_mech::<u8>(t, None), aes.handle()),
                ),
                (
                    "C_VerifyInit",
                    (r.f.C_VerifyInit.unwrap())(h, &mut raw_mech::<u8>(t, None), aes.handle()),
                ),
                ("C_GenerateKey", {
                    let mut key = 0;
                    (r.f.C_GenerateKey.unwrap())(
                        h,
                        &mut raw_mech::<u8>(t, None),
                        template.as_ptr() as *mut _,
                        1,
                        &mut key,
                    )
                }),
            ];
            for (f, got) in calls {
                assert_eq!(got, CKR_MECHANISM_INVALID, "{f} with 0x{t:x}");
            }
            let mut len = 0;
            assert_eq!(
                (r.f.C_WrapKey.unwrap())(
                    h,
                    &mut raw_mech::<u8>(t, None),
                    aes.handle(),
                    aes.handle(),
                    std::ptr::null_mut(),
                    &mut len
                ),
                CKR_MECHANISM_INVALID,
                "C_WrapKey with 0x{t:x}"
            );
        }
    }
    assert!(p
        .get_mechanism_list(slot)
        .unwrap()
        .iter()
        .all(|m| !m.to_string().contains("DES")));
}

/// C_Verify of RSA on signatures made by OpenSSL's command line with its own keys (1024 to
/// 4096 bits), imported as public key objects: each verifies; a flipped bit, n - 1, n itself
/// and a value above n (all bits set) give CKR_SIGNATURE_INVALID, a signature one byte short
/// or long CKR_SIGNATURE_LEN_RANGE.
#[test]
fn openssl_signatures_verify_on_the_token_and_out_of_range_values_are_refused() {
    let (_env, _p, s) = setup();
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (key, msg, sig) = (path("k.pem"), path("m"), path("s"));
    let data = b"example.com. 3600 IN SOA ns1 hostmaster 1 7200 3600 1209600 3600";
    std::fs::write(&msg, data).unwrap();
    for bits in [1024u32, 2048, 3072, 4096] {
        let kbits = format!("rsa_keygen_bits:{bits}");
        assert!(openssl(&[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            &kbits,
            "-out",
            &key
        ]));
        assert!(openssl(&["dgst", "-sha256", "-sign", &key, "-out", &sig, &msg]));
        let out = std::process::Command::new("openssl")
            .args(["rsa", "-in", &key, "-noout", "-modulus"])
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let hex = text
            .trim()
            .strip_prefix("Modulus=")
            .expect("openssl rsa -modulus");
        let n = unhex(hex);
        assert_eq!(n.len() * 8, bits as usize);
        let public = s
            .create_object(&[
                Attribute::Class(ObjectClass::PUBLIC_KEY),
                Attribute::KeyType(KeyType::RSA),
                Attribute::Modulus(n.clone()),
                Attribute::PublicExponent(vec![1, 0, 1]),
                Attribute::Verify(true),
                Attribute::Token(false),
            ])
            .unwrap();
        let good = std::fs::read(&sig).unwrap();
        assert_eq!(good.len(), n.len());
        let mech = Mechanism::Sha256RsaPkcs;
        s.verify(&mech, public, data, &good).unwrap();
        let mut flipped = good.clone();
        flipped[n.len() / 2] ^= 0x10;
        let mut n_minus_1 = n.clone();
        *n_minus_1.last_mut().unwrap() -= 1; // n is odd
        for (what, bad) in [
            ("a flipped bit", flipped),
            ("n - 1", n_minus_1),
            ("n", n.clone()),
            ("all bits set", vec![0xff; n.len()]),
        ] {
            assert_eq!(
                rv(s.verify(&mech, public, data, &bad).unwrap_err()),
                RvError::SignatureInvalid,
                "{bits} bits, {what}"
            );
        }
        for len in [n.len() - 1, n.len() + 1] {
            let mut wrong = good.clone();
            wrong.resize(len, 0);
            assert_eq!(
                rv(s.verify(&mech, public, data, &wrong).unwrap_err()),
                RvError::SignatureLenRange,
                "{bits} bits, {len} bytes"
            );
        }
        s.destroy_object(public).unwrap();
    }
}
