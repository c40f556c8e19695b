//! AES encryption and decryption through the built module: ECB, CBC, CBC-PAD and CTR checked
//! against `openssl enc`, GCM against RustCrypto's `aes-gcm`, at 128, 192 and 256-bit keys,
//! single-part and in uneven multi-part pieces; the two-call rule on every call (a short buffer
//! keeps the operation and loses nothing); and the error paths as a table.

mod common;

use common::*;
use cryptoki::error::RvError;
use cryptoki::mechanism::aead::GcmParams;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::Session;
use cryptoki_sys::*;
use std::io::Write;
use std::process::{Command, Stdio};

/// A mode, the `openssl enc` cipher, its IV, the message and whether OpenSSL pads.
type Case<'a> = (Mechanism<'a>, String, Option<&'a [u8]>, &'a [u8], bool);
/// A call that must fail.
type Call<'a> = Box<dyn Fn() -> cryptoki::error::Result<Vec<u8>> + 'a>;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `openssl enc` of `data` (no padding unless `pad`), the independent answer.
fn openssl_enc(cipher: &str, key: &[u8], iv: Option<&[u8]>, data: &[u8], pad: bool) -> Vec<u8> {
    let mut args = vec!["enc".to_string(), format!("-{cipher}"), "-K".into(), hex(key)];
    if let Some(iv) = iv {
        args.extend(["-iv".into(), hex(iv)]);
    }
    if !pad {
        args.push("-nopad".into());
    }
    let mut child = Command::new("openssl")
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("openssl must be installed");
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "openssl {args:?}");
    out.stdout
}

fn aes_key(s: &Session, value: &[u8], encrypt: bool) -> ObjectHandle {
    s.create_object(&[
        Attribute::Class(ObjectClass::SECRET_KEY),
        Attribute::KeyType(KeyType::AES),
        Attribute::Token(false),
        Attribute::Value(value.to_vec()),
        Attribute::Encrypt(encrypt),
        Attribute::Decrypt(true),
    ])
    .unwrap()
}

/// Multi-part through cryptoki: `data` cut into pieces of the given sizes (cycled).
fn pieces<'a>(data: &'a [u8], sizes: &[usize]) -> Vec<&'a [u8]> {
    let mut out = vec![];
    let mut at = 0;
    for &n in sizes.iter().cycle() {
        if at >= data.len() {
            break;
        }
        let end = (at + n).min(data.len());
        out.push(&data[at..end]);
        at = end;
    }
    out
}

fn encrypt_parts(s: &Session, mech: &Mechanism, key: ObjectHandle, data: &[u8], sizes: &[usize]) -> Vec<u8> {
    s.encrypt_init(mech, key).unwrap();
    let mut out = vec![];
    for p in pieces(data, sizes) {
        out.extend(s.encrypt_update(p).unwrap());
    }
    out.extend(s.encrypt_final().unwrap());
    out
}

fn decrypt_parts(s: &Session, mech: &Mechanism, key: ObjectHandle, data: &[u8], sizes: &[usize]) -> Vec<u8> {
    s.decrypt_init(mech, key).unwrap();
    let mut out = vec![];
    for p in pieces(data, sizes) {
        out.extend(s.decrypt_update(p).unwrap());
    }
    out.extend(s.decrypt_final().unwrap());
    out
}

fn gcm_reference(key: &[u8], iv: &[u8], aad: &[u8], msg: &[u8]) -> Vec<u8> {
    use aes_gcm::aead::{Aead, KeyInit, Payload};
    let p = Payload { msg, aad };
    let nonce = iv.try_into().unwrap();
    match key.len() {
        16 => aes_gcm::Aes128Gcm::new_from_slice(key).unwrap().encrypt(nonce, p),
        24 => aes_gcm::AesGcm::<aes::Aes192, aes_gcm::aead::consts::U12>::new_from_slice(key)
            .unwrap()
            .encrypt(nonce, p),
        _ => aes_gcm::Aes256Gcm::new_from_slice(key).unwrap().encrypt(nonce, p),
    }
    .unwrap()
}

/// AES-GCM with a `T`-byte tag, from RustCrypto's `aes-gcm` instantiated for that size.
fn gcm_reference_tag<T: aes_gcm::TagSize>(key: &[u8], iv: &[u8], aad: &[u8], msg: &[u8]) -> Vec<u8> {
    use aes_gcm::aead::consts::U12;
    use aes_gcm::aead::{Aead, KeyInit, Payload};
    let p = Payload { msg, aad };
    let nonce = iv.try_into().unwrap();
    match key.len() {
        16 => aes_gcm::AesGcm::<aes::Aes128, U12, T>::new_from_slice(key)
            .unwrap()
            .encrypt(nonce, p),
        24 => aes_gcm::AesGcm::<aes::Aes192, U12, T>::new_from_slice(key)
            .unwrap()
            .encrypt(nonce, p),
        _ => aes_gcm::AesGcm::<aes::Aes256, U12, T>::new_from_slice(key)
            .unwrap()
            .encrypt(nonce, p),
    }
    .unwrap()
}

/// Each tag length SP 800-38D allows for general use encrypts and decrypts, single and
/// multi-part, and gives `aes-gcm`'s answer for that tag size, which is also the full 128-bit
/// tag cut to its leading bytes (the standard's definition of a shorter tag); a changed tag byte
/// fails. Every other length is refused with CKR_MECHANISM_PARAM_INVALID and a log line naming
/// the allowed ones.
#[test]
fn gcm_takes_the_tag_lengths_sp800_38d_allows_and_refuses_the_others() {
    use aes_gcm::aead::consts::{U12, U13, U14, U15, U16};
    let env = TestEnv::new();
    let log = env.dir.path().join("ferrohsm.log");
    std::fs::write(
        env.conf(),
        format!(
            "[store]\npath = \"store\"\n[pin]\nkdf_memory_kib = 64\nkdf_passes = 1\n[log]\nlevel = \"info\"\ntarget = \"{}\"\n",
            log.display()
        ),
    )
    .unwrap();
    std::env::remove_var("FERROHSM_LOG");
    let p = load();
    let slot = new_token(&p, "gcm-tags");
    let s = user_session(&p, slot);
    let msg: Vec<u8> = (0..70u32).map(|i| (i * 13 + 3) as u8).collect();
    let aad = b"tag lengths";
    for key_len in [16usize, 32] {
        let value: Vec<u8> = (0..key_len).map(|i| (i * 7 + 1) as u8).collect();
        let key = aes_key(&s, &value, true);
        let iv = [0x3cu8; 12];
        let full = gcm_reference(&value, &iv, aad, &msg);
        for bits in [96usize, 104, 112, 120, 128] {
            let want = match bits {
                96 => gcm_reference_tag::<U12>(&value, &iv, aad, &msg),
                104 => gcm_reference_tag::<U13>(&value, &iv, aad, &msg),
                112 => gcm_reference_tag::<U14>(&value, &iv, aad, &msg),
                120 => gcm_reference_tag::<U15>(&value, &iv, aad, &msg),
                _ => gcm_reference_tag::<U16>(&value, &iv, aad, &msg),
            };
            assert_eq!(want.len(), msg.len() + bits / 8);
            assert_eq!(
                want[..],
                full[..want.len()],
                "{bits}-bit tag: a prefix of the full one"
            );
            let mut giv = iv;
            let gcm = Mechanism::AesGcm(GcmParams::new(&mut giv, aad, (bits as u64).into()).unwrap());
            let what = format!("AES-{}-GCM, {bits}-bit tag", key_len * 8);
            assert_eq!(s.encrypt(&gcm, key, &msg).unwrap(), want, "{what}");
            assert_eq!(encrypt_parts(&s, &gcm, key, &msg, &[5, 31]), want, "{what}");
            assert_eq!(s.decrypt(&gcm, key, &want).unwrap(), msg, "{what}");
            assert_eq!(decrypt_parts(&s, &gcm, key, &want, &[20, 1]), msg, "{what}");
            // The last byte of the tag, and the ciphertext cut to leave a 128-bit tag's room.
            let mut bad = want.clone();
            *bad.last_mut().unwrap() ^= 0x80;
            assert_eq!(
                rv(s.decrypt(&gcm, key, &bad).unwrap_err()),
                RvError::EncryptedDataInvalid,
                "{what}"
            );
            if bits < 128 {
                assert_eq!(
                    rv(s.decrypt(&gcm, key, &full).unwrap_err()),
                    RvError::EncryptedDataInvalid,
                    "{what}"
                );
            }
        }
        for bits in [0u64, 8, 32, 64, 88, 95, 97, 127, 136, 256] {
            let mut giv = iv;
            let gcm = Mechanism::AesGcm(GcmParams::new(&mut giv, aad, bits.into()).unwrap());
            assert_eq!(
                rv(s.encrypt(&gcm, key, &msg).unwrap_err()),
                RvError::MechanismParamInvalid,
                "encrypt, {bits}-bit tag"
            );
            assert_eq!(
                rv(s.decrypt_init(&gcm, key).unwrap_err()),
                RvError::MechanismParamInvalid,
                "decrypt, {bits}-bit tag"
            );
        }
    }
    let text = std::fs::read_to_string(&log).unwrap();
    for bits in [0, 8, 32, 64, 88, 95, 97, 127, 136, 256] {
        assert!(
            text.contains(&format!("CKR_MECHANISM_PARAM_INVALID: AES-GCM: a {bits}-bit tag (ulTagBits); SP 800-38D allows 96, 104, 112, 120 and 128 bits")),
            "no log line for a {bits}-bit tag: {text}"
        );
    }
}

#[test]
fn every_mode_matches_an_independent_implementation_single_and_multi_part() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "aes");
    let s = user_session(&p, slot);
    let raw = Raw::load();
    let msg: Vec<u8> = (0..100u32).map(|i| (i * 37 + 11) as u8).collect();
    let iv: [u8; 16] = std::array::from_fn(|i| 0xa0 + i as u8);
    let splits: [&[usize]; 3] = [&[1], &[15, 17, 16], &[33, 1, 7]];
    for key_len in [16usize, 24, 32] {
        let value: Vec<u8> = (0..key_len).map(|i| (i * 29 + 5) as u8).collect();
        let key = aes_key(&s, &value, true);
        let bits = key_len * 8;
        // ECB and CBC take whole blocks; CBC-PAD any length.
        let cases: [Case; 3] = [
            (
                Mechanism::AesEcb,
                format!("aes-{bits}-ecb"),
                None,
                &msg[..96],
                false,
            ),
            (
                Mechanism::AesCbc(iv),
                format!("aes-{bits}-cbc"),
                Some(&iv),
                &msg[..96],
                false,
            ),
            (
                Mechanism::AesCbcPad(iv),
                format!("aes-{bits}-cbc"),
                Some(&iv),
                &msg[..],
                true,
            ),
        ];
        for (mech, cipher, civ, data, pad) in &cases {
            let want = openssl_enc(cipher, &value, *civ, data, *pad);
            let ct = s.encrypt(mech, key, data).unwrap();
            assert_eq!(ct, want, "{cipher} single-part");
            assert_eq!(s.decrypt(mech, key, &ct).unwrap(), *data, "{cipher} decrypt");
            for sizes in splits {
                assert_eq!(
                    encrypt_parts(&s, mech, key, data, sizes),
                    want,
                    "{cipher} {sizes:?}"
                );
                assert_eq!(
                    decrypt_parts(&s, mech, key, &want, sizes),
                    *data,
                    "{cipher} {sizes:?}"
                );
            }
        }
        // CBC-PAD of an empty message and of a whole number of blocks (a full padding block).
        for n in [0usize, 16, 32] {
            let want = openssl_enc(&format!("aes-{bits}-cbc"), &value, Some(&iv), &msg[..n], true);
            let mech = Mechanism::AesCbcPad(iv);
            assert_eq!(s.encrypt(&mech, key, &msg[..n]).unwrap(), want);
            assert_eq!(decrypt_parts(&s, &mech, key, &want, &[16]), &msg[..n]);
        }
        // CTR (cryptoki has no type for it: the raw API), against openssl's 128-bit counter,
        // starting near a carry across bytes.
        let mut block = iv;
        block[14] = 0xff;
        block[15] = 0xfe;
        let want = openssl_enc(&format!("aes-{bits}-ctr"), &value, Some(&block), &msg, false);
        let mut params = CK_AES_CTR_PARAMS {
            ulCounterBits: 128,
            cb: block,
        };
        let mut mech = raw_mech(CKM_AES_CTR, Some(&mut params));
        let h = s.handle();
        let ct = raw_crypt(&raw, h, &mut mech, key, &msg, true, &[7, 16, 30]).unwrap();
        assert_eq!(ct, want, "aes-{bits}-ctr");
        let pt = raw_crypt(&raw, h, &mut mech, key, &ct, false, &[100]).unwrap();
        assert_eq!(pt, msg);
        // GCM, with AAD, single and multi-part; a changed byte anywhere fails the tag.
        let mut giv = [0x5au8; 12];
        let aad = b"ferrohsm aad";
        let want = gcm_reference(&value, &giv, aad, &msg);
        let gcm = Mechanism::AesGcm(GcmParams::new(&mut giv, aad, 128.into()).unwrap());
        assert_eq!(s.encrypt(&gcm, key, &msg).unwrap(), want, "aes-{bits}-gcm");
        assert_eq!(encrypt_parts(&s, &gcm, key, &msg, &[9, 40]), want);
        assert_eq!(s.decrypt(&gcm, key, &want).unwrap(), msg);
        assert_eq!(decrypt_parts(&s, &gcm, key, &want, &[3, 50]), msg);
        for at in [0, 50, want.len() - 1] {
            let mut bad = want.clone();
            bad[at] ^= 1;
            assert_eq!(
                rv(s.decrypt(&gcm, key, &bad).unwrap_err()),
                RvError::EncryptedDataInvalid,
                "GCM byte {at} changed"
            );
        }
    }
}

/// Encrypts or decrypts with the raw API, in parts of the given sizes (cycled), each call
/// asked for its length first.
fn raw_crypt(
    r: &Raw,
    h: CK_SESSION_HANDLE,
    mech: &mut CK_MECHANISM,
    key: ObjectHandle,
    data: &[u8],
    encrypt: bool,
    sizes: &[usize],
) -> Result<Vec<u8>, CK_RV> {
    let f = r.f;
    unsafe {
        let (init, update, fin) = if encrypt {
            (
                f.C_EncryptInit.unwrap(),
                f.C_EncryptUpdate.unwrap(),
                f.C_EncryptFinal.unwrap(),
            )
        } else {
            (
                f.C_DecryptInit.unwrap(),
                f.C_DecryptUpdate.unwrap(),
                f.C_DecryptFinal.unwrap(),
            )
        };
        let rv = init(h, mech, key.handle());
        if rv != 0 {
            return Err(rv);
        }
        let mut out = vec![];
        for part in pieces(data, sizes) {
            let mut len = 0;
            let rv = update(
                h,
                part.as_ptr() as *mut u8,
                part.len() as _,
                std::ptr::null_mut(),
                &mut len,
            );
            if rv != 0 {
                return Err(rv);
            }
            let mut buf = vec![0u8; len as usize];
            let rv = update(
                h,
                part.as_ptr() as *mut u8,
                part.len() as _,
                buf.as_mut_ptr(),
                &mut len,
            );
            if rv != 0 {
                return Err(rv);
            }
            out.extend_from_slice(&buf[..len as usize]);
        }
        let mut len = 0;
        let rv = fin(h, std::ptr::null_mut(), &mut len);
        if rv != 0 {
            return Err(rv);
        }
        let mut buf = vec![0u8; len as usize];
        let rv = fin(h, buf.as_mut_ptr(), &mut len);
        if rv != 0 {
            return Err(rv);
        }
        out.extend_from_slice(&buf[..len as usize]);
        Ok(out)
    }
}

/// A buffer one byte short gets CKR_BUFFER_TOO_SMALL with the length, and the same call with
/// the right buffer then gives exactly the output of an uninterrupted run.
#[test]
fn short_buffers_keep_the_operation_and_lose_nothing() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "aes");
    let s = user_session(&p, slot);
    let raw = Raw::load();
    let value = [0x11u8; 32];
    let key = aes_key(&s, &value, true);
    let iv = [3u8; 16];
    let msg: Vec<u8> = (0..70u8).collect();
    let want = openssl_enc("aes-256-cbc", &value, Some(&iv), &msg, true);
    let mut iv_param = iv;
    let mut mech = raw_mech(CKM_AES_CBC_PAD, Some(&mut iv_param));
    let h = s.handle();
    let f = raw.f;
    unsafe {
        assert_eq!((f.C_EncryptInit.unwrap())(h, &mut mech, key.handle()), CKR_OK);
        let mut got = vec![];
        for part in [&msg[..40], &msg[40..]] {
            let mut buf = [0u8; 64];
            let mut len: CK_ULONG = 15;
            let rv = (f.C_EncryptUpdate.unwrap())(
                h,
                part.as_ptr() as *mut u8,
                part.len() as _,
                buf.as_mut_ptr(),
                &mut len,
            );
            assert_eq!(rv, CKR_BUFFER_TOO_SMALL);
            assert_eq!(len, 32, "40 bytes in, two whole blocks out");
            let rv = (f.C_EncryptUpdate.unwrap())(
                h,
                part.as_ptr() as *mut u8,
                part.len() as _,
                buf.as_mut_ptr(),
                &mut len,
            );
            assert_eq!(rv, CKR_OK);
            got.extend_from_slice(&buf[..len as usize]);
        }
        let mut buf = [0u8; 16];
        let mut len: CK_ULONG = 15;
        assert_eq!(
            (f.C_EncryptFinal.unwrap())(h, buf.as_mut_ptr(), &mut len),
            CKR_BUFFER_TOO_SMALL
        );
        assert_eq!(len, 16);
        assert_eq!((f.C_EncryptFinal.unwrap())(h, buf.as_mut_ptr(), &mut len), CKR_OK);
        got.extend_from_slice(&buf[..len as usize]);
        assert_eq!(got, want);
        // The operation ended with its final part.
        assert_eq!(
            (f.C_EncryptFinal.unwrap())(h, buf.as_mut_ptr(), &mut len),
            CKR_OPERATION_NOT_INITIALIZED
        );
        // Padded decryption, single-part: the length query answers the input length (an
        // upper bound); a buffer that fits the plaintext but not the bound is enough.
        let mut iv_param = iv;
        let mut mech = raw_mech(CKM_AES_CBC_PAD, Some(&mut iv_param));
        assert_eq!((f.C_DecryptInit.unwrap())(h, &mut mech, key.handle()), CKR_OK);
        let mut len = 0;
        let rv = (f.C_Decrypt.unwrap())(
            h,
            want.as_ptr() as *mut u8,
            want.len() as _,
            std::ptr::null_mut(),
            &mut len,
        );
        assert_eq!((rv, len as usize), (CKR_OK, want.len()));
        let mut out = vec![0u8; msg.len()];
        let mut len = 69;
        let rv = (f.C_Decrypt.unwrap())(
            h,
            want.as_ptr() as *mut u8,
            want.len() as _,
            out.as_mut_ptr(),
            &mut len,
        );
        assert_eq!((rv, len), (CKR_BUFFER_TOO_SMALL, 70));
        let rv = (f.C_Decrypt.unwrap())(
            h,
            want.as_ptr() as *mut u8,
            want.len() as _,
            out.as_mut_ptr(),
            &mut len,
        );
        assert_eq!((rv, len), (CKR_OK, 70));
        assert_eq!(out, msg);
    }
}

/// Bad input, each with the code the specification gives, and the operation ended.
#[test]
fn bad_input_gets_the_specified_codes() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "aes");
    let s = user_session(&p, slot);
    let raw = Raw::load();
    let key = aes_key(&s, &[9u8; 16], true);
    let decrypt_only = aes_key(&s, &[9u8; 16], false);
    let (rsa_public, _) = rsa_keypair(&s, 1024, b"rsa", false);
    let iv = [0u8; 16];
    let cbc = Mechanism::AesCbc(iv);
    let ecb = Mechanism::AesEcb;
    let cases: Vec<(&str, Call, RvError)> = vec![
        (
            "ECB encrypt of 15 bytes",
            Box::new(|| s.encrypt(&ecb, key, &[0; 15])),
            RvError::DataLenRange,
        ),
        (
            "CBC decrypt of 17 bytes",
            Box::new(|| s.decrypt(&cbc, key, &[0; 17])),
            RvError::EncryptedDataLenRange,
        ),
        (
            "CBC-PAD decrypt of nothing",
            Box::new(|| s.decrypt(&Mechanism::AesCbcPad(iv), key, &[])),
            RvError::EncryptedDataLenRange,
        ),
        (
            "CBC-PAD with bad padding",
            Box::new(|| s.decrypt(&Mechanism::AesCbcPad(iv), key, &[0x42; 32])),
            RvError::EncryptedDataInvalid,
        ),
        (
            "multi-part ECB ending mid-block",
            Box::new(|| {
                s.encrypt_init(&ecb, key)?;
                s.encrypt_update(&[0; 20])?;
                s.encrypt_final()
            }),
            RvError::DataLenRange,
        ),
        (
            "GCM shorter than its tag",
            Box::new(|| {
                let mut giv = [0u8; 12];
                s.decrypt(
                    &Mechanism::AesGcm(GcmParams::new(&mut giv, &[], 128.into()).unwrap()),
                    key,
                    &[0; 15],
                )
            }),
            RvError::EncryptedDataLenRange,
        ),
        (
            "GCM with a 64-bit tag",
            Box::new(|| {
                let mut giv = [0u8; 12];
                s.encrypt(
                    &Mechanism::AesGcm(GcmParams::new(&mut giv, &[], 64.into()).unwrap()),
                    key,
                    &[0; 16],
                )
            }),
            RvError::MechanismParamInvalid,
        ),
        (
            "GCM with an 8-byte IV",
            Box::new(|| {
                let mut giv = [0u8; 8];
                s.encrypt(
                    &Mechanism::AesGcm(GcmParams::new(&mut giv, &[], 128.into()).unwrap()),
                    key,
                    &[0; 16],
                )
            }),
            RvError::MechanismParamInvalid,
        ),
        (
            "an RSA key for AES-CBC",
            Box::new(|| s.encrypt(&cbc, rsa_public, &[0; 16])),
            RvError::KeyTypeInconsistent,
        ),
        (
            "a key with CKA_ENCRYPT false",
            Box::new(|| s.encrypt(&cbc, decrypt_only, &[0; 16])),
            RvError::KeyFunctionNotPermitted,
        ),
        (
            "an AES key for RSA",
            Box::new(|| s.encrypt(&Mechanism::RsaPkcs, key, &[0; 16])),
            RvError::KeyTypeInconsistent,
        ),
        (
            "RSA in parts",
            Box::new(|| {
                s.encrypt_init(&Mechanism::RsaPkcs, rsa_public)?;
                s.encrypt_update(&[0; 16])
            }),
            RvError::MechanismInvalid,
        ),
    ];
    for (what, call, want) in &cases {
        assert_eq!(rv(call().unwrap_err()), *want, "{what}");
        // Whatever failed, no operation is left running (errors end operations), so a new one
        // starts cleanly.
        s.encrypt(&ecb, key, &[0; 16]).unwrap();
        s.decrypt(&ecb, key, &[0; 16]).unwrap();
    }
    // C_Encrypt cannot end a multi-part operation: refused, and the operation is over.
    let h = s.handle();
    let f = raw.f;
    let mut iv_param = iv;
    let mut mech = raw_mech(CKM_AES_CBC, Some(&mut iv_param));
    let mut buf = [0u8; 32];
    unsafe {
        assert_eq!((f.C_EncryptInit.unwrap())(h, &mut mech, key.handle()), CKR_OK);
        let mut len: CK_ULONG = 32;
        let input = [0u8; 16];
        assert_eq!(
            (f.C_EncryptUpdate.unwrap())(h, input.as_ptr() as *mut u8, 16, buf.as_mut_ptr(), &mut len),
            CKR_OK
        );
        let mut len: CK_ULONG = 32;
        let data = [0u8; 16];
        assert_eq!(
            (f.C_Encrypt.unwrap())(h, data.as_ptr() as *mut u8, 16, buf.as_mut_ptr(), &mut len),
            CKR_OPERATION_ACTIVE
        );
        let mut len: CK_ULONG = 32;
        assert_eq!(
            (f.C_EncryptFinal.unwrap())(h, buf.as_mut_ptr(), &mut len),
            CKR_OPERATION_NOT_INITIALIZED
        );
    }
    // Parameters the raw API can get wrong: an IV of 8 bytes, CTR counter widths.
    let mut short_iv = [0u8; 8];
    let mut mech = raw_mech(CKM_AES_CBC, Some(&mut short_iv));
    assert_eq!(
        raw_crypt(&raw, h, &mut mech, key, &[0; 16], true, &[16]),
        Err(CKR_MECHANISM_PARAM_INVALID)
    );
    // PKCS#11: 0 < ulCounterBits <= 128, CKR_MECHANISM_PARAM_INVALID outside (python-pkcs11
    // passes 8 for a 15-byte nonce).
    for (bits, want) in [
        (0, Err(CKR_MECHANISM_PARAM_INVALID)),
        (1, Ok(16)),
        (8, Ok(16)),
        (16, Ok(16)),
        (32, Ok(16)),
        (127, Ok(16)),
        (128, Ok(16)),
        (129, Err(CKR_MECHANISM_PARAM_INVALID)),
    ] {
        let mut params = CK_AES_CTR_PARAMS {
            ulCounterBits: bits,
            cb: [0; 16],
        };
        let mut mech = raw_mech(CKM_AES_CTR, Some(&mut params));
        assert_eq!(
            raw_crypt(&raw, h, &mut mech, key, &[0; 16], true, &[16]).map(|v| v.len()),
            want,
            "CTR with {bits} counter bits"
        );
    }
    // A 32-bit counter one block from its end: a second block would wrap it.
    let mut params = CK_AES_CTR_PARAMS {
        ulCounterBits: 32,
        cb: [0xff; 16],
    };
    let mut mech = raw_mech(CKM_AES_CTR, Some(&mut params));
    assert_eq!(
        raw_crypt(&raw, h, &mut mech, key, &[0; 16], true, &[16]).map(|v| v.len()),
        Ok(16)
    );
    assert_eq!(
        raw_crypt(&raw, h, &mut mech, key, &[0; 32], true, &[32]),
        Err(CKR_DATA_LEN_RANGE)
    );
    // An 8-bit counter at 0xfe under a fixed 120-bit nonce: two blocks fit, a third wraps;
    // the keystream is AES of the counter blocks ..fe and ..ff (ECB of them, XORed).
    let mut cb = [0x5a; 16];
    cb[15] = 0xfe;
    let mut params = CK_AES_CTR_PARAMS { ulCounterBits: 8, cb };
    let mut mech = raw_mech(CKM_AES_CTR, Some(&mut params));
    assert_eq!(
        raw_crypt(&raw, h, &mut mech, key, &[0; 48], true, &[48]),
        Err(CKR_DATA_LEN_RANGE)
    );
    let got = raw_crypt(&raw, h, &mut mech, key, &[0; 32], true, &[32]).unwrap();
    let mut blocks = [cb, cb];
    blocks[1][15] = 0xff;
    let mut ecb = raw_mech::<u8>(CKM_AES_ECB, None);
    assert_eq!(
        got,
        raw_crypt(&raw, h, &mut ecb, key, blocks.as_flattened(), true, &[32]).unwrap()
    );
}
