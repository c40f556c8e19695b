//! HMAC (SHA-1, SHA-224, SHA-256, SHA-384, SHA-512), AES-CMAC and AES-MAC through the built
//! module: every MAC checked against OpenSSL (`openssl mac`; for AES-MAC the last block of
//! `openssl enc -aes-*-cbc` over the zero-padded data: implementations independent of the
//! module's RustCrypto one) at key lengths up to longer than the hash's block, single-part and in
//! uneven multi-part pieces; the `_GENERAL` variants as the leftmost bytes; verification
//! refusing a changed byte and a wrong length; the two-call rule; and the error paths as a
//! table.

mod common;

use common::*;
use cryptoki::error::RvError;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::Session;
use cryptoki_sys::*;
use std::process::Command;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// `openssl mac` of `data`: `alg` is "HMAC" (with `-digest`) or "CMAC" (with `-cipher`).
fn openssl_mac(alg: &str, param: (&str, &str), key: &[u8], data: &[u8]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::write(&input, data).unwrap();
    let out = Command::new("openssl")
        .args(["mac", param.0, param.1, "-macopt"])
        .arg(format!("hexkey:{}", hex(key)))
        .arg("-in")
        .arg(&input)
        .arg(alg)
        .output()
        .expect("openssl must be installed");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    unhex(
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .to_lowercase()
            .as_str(),
    )
}

fn secret_key(s: &Session, kt: KeyType, value: &[u8], sign: bool, verify: bool) -> ObjectHandle {
    s.create_object(&[
        Attribute::Class(ObjectClass::SECRET_KEY),
        Attribute::KeyType(kt),
        Attribute::Token(false),
        Attribute::Value(value.to_vec()),
        Attribute::Sign(sign),
        Attribute::Verify(verify),
    ])
    .unwrap()
}

/// A session secret key of any key type, made with the raw API: cryptoki's
/// `KeyType::SHA224_HMAC` carries CKK_SHA256_HMAC's value (cryptoki 0.12), so HMAC key types
/// are given by number.
fn raw_secret_key(r: &Raw, h: CK_SESSION_HANDLE, kt: CK_KEY_TYPE, value: &[u8]) -> ObjectHandle {
    let (class, yes, no) = (CKO_SECRET_KEY, CK_TRUE, CK_FALSE);
    let attr = |t, p: *const std::ffi::c_void, n: usize| CK_ATTRIBUTE {
        type_: t,
        pValue: p as *mut _,
        ulValueLen: n as CK_ULONG,
    };
    let ulong = std::mem::size_of::<CK_ULONG>();
    let template = [
        attr(CKA_CLASS, &class as *const _ as _, ulong),
        attr(CKA_KEY_TYPE, &kt as *const _ as _, ulong),
        attr(CKA_TOKEN, &no as *const _ as _, 1),
        attr(CKA_SIGN, &yes as *const _ as _, 1),
        attr(CKA_VERIFY, &yes as *const _ as _, 1),
        attr(CKA_VALUE, value.as_ptr() as _, value.len()),
    ];
    let mut out = 0;
    // SAFETY: a template of valid attributes living across the call, and an output handle.
    let rv = unsafe {
        (r.f.C_CreateObject.unwrap())(h, template.as_ptr() as *mut _, template.len() as _, &mut out)
    };
    assert_eq!(rv, CKR_OK, "C_CreateObject of key type 0x{kt:x}");
    // SAFETY: a handle the module just gave this session.
    unsafe { ObjectHandle::new_from_raw(out) }
}

fn key_bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// `data` cut into consecutive pieces of `sizes` (cycled; the last piece may be shorter).
fn pieces<'a>(data: &'a [u8], sizes: &'a [usize]) -> impl Iterator<Item = &'a [u8]> {
    let mut at = 0;
    sizes.iter().cycle().map_while(move |&n| {
        let piece = data.get(at..(at + n).min(data.len())).filter(|p| !p.is_empty())?;
        at += piece.len();
        Some(piece)
    })
}

/// Signs in parts of the given sizes (cycled).
fn sign_parts(s: &Session, mech: &Mechanism, key: ObjectHandle, data: &[u8], sizes: &[usize]) -> Vec<u8> {
    s.sign_init(mech, key).unwrap();
    for piece in pieces(data, sizes) {
        s.sign_update(piece).unwrap();
    }
    s.sign_final().unwrap()
}

fn verify_parts(
    s: &Session,
    mech: &Mechanism,
    key: ObjectHandle,
    data: &[u8],
    sig: &[u8],
) -> cryptoki::error::Result<()> {
    s.verify_init(mech, key)?;
    for part in data.chunks(13) {
        s.verify_update(part)?;
    }
    s.verify_final(sig)
}

/// The HMAC mechanisms, their `openssl mac -digest` name and the hash's block size.
fn hmacs() -> Vec<(Mechanism<'static>, &'static str, usize)> {
    vec![
        (Mechanism::Sha1Hmac, "SHA1", 64),
        (Mechanism::Sha224Hmac, "SHA224", 64),
        (Mechanism::Sha256Hmac, "SHA256", 64),
        (Mechanism::Sha384Hmac, "SHA384", 128),
        (Mechanism::Sha512Hmac, "SHA512", 128),
    ]
}

#[test]
fn hmac_and_cmac_match_openssl_single_and_multi_part() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "mac");
    let s = user_session(&p, slot);
    let raw = Raw::load();
    let msg: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
    for (mech, digest, block) in hmacs() {
        // The shortest key the token takes (shorter than every output), the output, the
        // block, and longer than the block (hashed first, RFC 2104).
        for key_len in [14, 20, block, block + 37] {
            let value = key_bytes(key_len, key_len as u8);
            for kt in [CKK_GENERIC_SECRET, hmac_key_type(digest)] {
                let key = raw_secret_key(&raw, s.handle(), kt, &value);
                for data in [&msg[..0], &msg[..1], &msg[..]] {
                    let want = openssl_mac("HMAC", ("-digest", digest), &value, data);
                    let got = s
                        .sign(&mech, key, data)
                        .unwrap_or_else(|e| panic!("HMAC-{digest} key type 0x{kt:x} key {key_len}: {e}"));
                    assert_eq!(got, want, "HMAC-{digest} key {key_len} data {}", data.len());
                    s.verify(&mech, key, data, &got).unwrap();
                }
                let want = openssl_mac("HMAC", ("-digest", digest), &value, &msg);
                for sizes in [&[1usize][..], &[63, 65, 1], &[300]] {
                    assert_eq!(
                        sign_parts(&s, &mech, key, &msg, sizes),
                        want,
                        "{digest} {sizes:?}"
                    );
                }
                verify_parts(&s, &mech, key, &msg, &want).unwrap();
            }
        }
    }
    for key_len in [16usize, 24, 32] {
        let value = key_bytes(key_len, 0x40);
        let key = secret_key(&s, KeyType::AES, &value, true, true);
        let cipher = format!("AES-{}-CBC", key_len * 8);
        for data in [&msg[..0], &msg[..16], &msg[..17], &msg[..]] {
            let want = openssl_mac("CMAC", ("-cipher", &cipher), &value, data);
            let got = s.sign(&Mechanism::AesCMac, key, data).unwrap();
            assert_eq!(got, want, "CMAC {cipher} data {}", data.len());
            s.verify(&Mechanism::AesCMac, key, data, &got).unwrap();
        }
        let want = openssl_mac("CMAC", ("-cipher", &cipher), &value, &msg);
        for sizes in [&[1usize][..], &[15, 17, 16], &[32]] {
            assert_eq!(sign_parts(&s, &Mechanism::AesCMac, key, &msg, sizes), want);
        }
        verify_parts(&s, &Mechanism::AesCMac, key, &msg, &want).unwrap();
    }
}

fn hmac_key_type(digest: &str) -> CK_KEY_TYPE {
    match digest {
        "SHA1" => CKK_SHA_1_HMAC,
        "SHA224" => CKK_SHA224_HMAC,
        "SHA256" => CKK_SHA256_HMAC,
        "SHA384" => CKK_SHA384_HMAC,
        _ => CKK_SHA512_HMAC,
    }
}

/// `_GENERAL` mechanisms: (mechanism, full mechanism, full length).
const GENERAL: &[(CK_MECHANISM_TYPE, CK_MECHANISM_TYPE, usize)] = &[
    (CKM_SHA_1_HMAC_GENERAL, CKM_SHA_1_HMAC, 20),
    (CKM_SHA224_HMAC_GENERAL, CKM_SHA224_HMAC, 28),
    (CKM_SHA256_HMAC_GENERAL, CKM_SHA256_HMAC, 32),
    (CKM_SHA384_HMAC_GENERAL, CKM_SHA384_HMAC, 48),
    (CKM_SHA512_HMAC_GENERAL, CKM_SHA512_HMAC, 64),
    (CKM_AES_CMAC_GENERAL, CKM_AES_CMAC, 16),
];

/// Verifies with the raw API, returning the CK_RV.
fn raw_verify(
    r: &Raw,
    h: CK_SESSION_HANDLE,
    mech: &mut CK_MECHANISM,
    key: ObjectHandle,
    data: &[u8],
    sig: &[u8],
) -> CK_RV {
    unsafe {
        let rv = (r.f.C_VerifyInit.unwrap())(h, mech, key.handle());
        if rv != CKR_OK {
            return rv;
        }
        (r.f.C_Verify.unwrap())(
            h,
            data.as_ptr() as *mut u8,
            data.len() as _,
            sig.as_ptr() as *mut u8,
            sig.len() as _,
        )
    }
}

#[test]
fn general_variants_give_the_leftmost_bytes_and_check_their_length() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "mac");
    let s = user_session(&p, slot);
    let raw = Raw::load();
    let h = s.handle();
    let generic = secret_key(&s, KeyType::GENERIC_SECRET, &key_bytes(40, 1), true, true);
    let aes = secret_key(&s, KeyType::AES, &key_bytes(16, 2), true, true);
    let msg = b"general-length MAC";
    for &(general, full, full_len) in GENERAL {
        let key = if full == CKM_AES_CMAC { aes } else { generic };
        let whole = raw_sign(&raw, h, &mut raw_mech::<u8>(full, None), key, msg).unwrap();
        assert_eq!(whole.len(), full_len);
        for n in [1, full_len / 2, full_len] {
            let mut len: CK_MAC_GENERAL_PARAMS = n as _;
            let mut mech = raw_mech(general, Some(&mut len));
            let got = raw_sign(&raw, h, &mut mech, key, msg).unwrap();
            assert_eq!(got, whole[..n], "0x{general:x} of {n} bytes");
            assert_eq!(raw_verify(&raw, h, &mut mech, key, msg, &got), CKR_OK);
            let mut bad = got.clone();
            bad[n - 1] ^= 0x80;
            assert_eq!(
                raw_verify(&raw, h, &mut mech, key, msg, &bad),
                CKR_SIGNATURE_INVALID
            );
            // The full MAC is not the one asked for.
            if n < full_len {
                assert_eq!(
                    raw_verify(&raw, h, &mut mech, key, msg, &whole),
                    CKR_SIGNATURE_LEN_RANGE
                );
            }
        }
        // Lengths out of 1..=full, and no parameter at all.
        for n in [0, full_len + 1, 1 << 20] {
            let mut len: CK_MAC_GENERAL_PARAMS = n as _;
            let mut mech = raw_mech(general, Some(&mut len));
            assert_eq!(
                raw_sign(&raw, h, &mut mech, key, msg),
                Err(CKR_MECHANISM_PARAM_INVALID),
                "0x{general:x} of {n} bytes"
            );
        }
        assert_eq!(
            raw_sign(&raw, h, &mut raw_mech::<u8>(general, None), key, msg),
            Err(CKR_MECHANISM_PARAM_INVALID)
        );
    }
}

#[test]
fn verification_refuses_a_changed_byte_and_a_wrong_length() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "mac");
    let s = user_session(&p, slot);
    let key = secret_key(&s, KeyType::GENERIC_SECRET, &key_bytes(32, 9), true, true);
    let aes = secret_key(&s, KeyType::AES, &key_bytes(32, 9), true, true);
    let msg = b"message to authenticate";
    for (mech, key) in [
        (Mechanism::Sha1Hmac, key),
        (Mechanism::Sha256Hmac, key),
        (Mechanism::Sha512Hmac, key),
        (Mechanism::AesCMac, aes),
    ] {
        let mac = s.sign(&mech, key, msg).unwrap();
        for at in [0, mac.len() / 2, mac.len() - 1] {
            let mut bad = mac.clone();
            bad[at] ^= 1;
            assert_eq!(
                rv(s.verify(&mech, key, msg, &bad).unwrap_err()),
                RvError::SignatureInvalid
            );
            assert_eq!(
                rv(verify_parts(&s, &mech, key, msg, &bad).unwrap_err()),
                RvError::SignatureInvalid
            );
        }
        let mut other = msg.to_vec();
        other[0] ^= 1;
        assert_eq!(
            rv(s.verify(&mech, key, &other, &mac).unwrap_err()),
            RvError::SignatureInvalid
        );
        for sig in [&mac[..mac.len() - 1], &[mac.clone(), vec![0]].concat(), &[]] {
            assert_eq!(
                rv(s.verify(&mech, key, msg, sig).unwrap_err()),
                RvError::SignatureLenRange,
                "{} bytes",
                sig.len()
            );
        }
        // Every failure ended its operation: a new one starts.
        s.verify(&mech, key, msg, &mac).unwrap();
    }
}

#[test]
fn errors_get_the_specified_codes() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "mac");
    let s = user_session(&p, slot);
    let raw = Raw::load();
    let h = s.handle();
    let generic = secret_key(&s, KeyType::GENERIC_SECRET, &key_bytes(32, 3), true, true);
    let sha1_key = raw_secret_key(&raw, h, CKK_SHA_1_HMAC, &key_bytes(32, 3));
    let aes = secret_key(&s, KeyType::AES, &key_bytes(16, 3), true, true);
    let no_sign = secret_key(&s, KeyType::GENERIC_SECRET, &key_bytes(32, 3), false, true);
    let no_verify = secret_key(&s, KeyType::AES, &key_bytes(16, 3), true, false);
    let (rsa_public, rsa_private) = rsa_keypair(&s, 1024, b"rsa", false);
    type Call<'a> = Box<dyn Fn() -> cryptoki::error::Result<Vec<u8>> + 'a>;
    let m = b"data";
    let cases: Vec<(&str, Call, RvError)> = vec![
        (
            "HMAC with an AES key",
            Box::new(|| s.sign(&Mechanism::Sha256Hmac, aes, m)),
            RvError::KeyTypeInconsistent,
        ),
        (
            "HMAC-SHA256 with a CKK_SHA_1_HMAC key",
            Box::new(|| s.sign(&Mechanism::Sha256Hmac, sha1_key, m)),
            RvError::KeyTypeInconsistent,
        ),
        (
            "CMAC with a generic secret",
            Box::new(|| s.sign(&Mechanism::AesCMac, generic, m)),
            RvError::KeyTypeInconsistent,
        ),
        (
            "HMAC with an RSA private key",
            Box::new(|| s.sign(&Mechanism::Sha256Hmac, rsa_private, m)),
            RvError::KeyTypeInconsistent,
        ),
        (
            "HMAC verify with an RSA public key",
            Box::new(|| {
                s.verify(&Mechanism::Sha1Hmac, rsa_public, m, &[0; 20])
                    .map(|_| vec![])
            }),
            RvError::KeyTypeInconsistent,
        ),
        (
            "RSA signing with a secret key",
            Box::new(|| s.sign(&Mechanism::Sha256RsaPkcs, generic, m)),
            RvError::KeyTypeInconsistent,
        ),
        (
            "CKA_SIGN false",
            Box::new(|| s.sign(&Mechanism::Sha256Hmac, no_sign, m)),
            RvError::KeyFunctionNotPermitted,
        ),
        (
            "CKA_VERIFY false",
            Box::new(|| {
                s.verify(&Mechanism::AesCMac, no_verify, m, &[0; 16])
                    .map(|_| vec![])
            }),
            RvError::KeyFunctionNotPermitted,
        ),
        (
            "C_Sign after C_SignUpdate",
            Box::new(|| {
                s.sign_init(&Mechanism::Sha256Hmac, generic)?;
                s.sign_update(m)?;
                s.sign(&Mechanism::Sha256Hmac, generic, m)
            }),
            RvError::OperationActive,
        ),
    ];
    for (what, call, want) in &cases {
        assert_eq!(rv(call().unwrap_err()), *want, "{what}");
        // No operation is left behind by a failure.
        let _ = s.sign_final();
        s.sign(&Mechanism::Sha1Hmac, generic, m).unwrap();
    }
    // A buffer one byte short: CKR_BUFFER_TOO_SMALL with the length, the operation kept and
    // the same call then giving the whole MAC.
    let want = s.sign(&Mechanism::Sha384Hmac, generic, m).unwrap();
    let mut mech = raw_mech::<u8>(CKM_SHA384_HMAC, None);
    unsafe {
        assert_eq!(
            (raw.f.C_SignInit.unwrap())(h, &mut mech, generic.handle()),
            CKR_OK
        );
        let mut buf = [0u8; 64];
        let mut len: CK_ULONG = 47;
        let rv = (raw.f.C_Sign.unwrap())(h, m.as_ptr() as *mut u8, 4, buf.as_mut_ptr(), &mut len);
        assert_eq!((rv, len), (CKR_BUFFER_TOO_SMALL, 48));
        let rv = (raw.f.C_Sign.unwrap())(h, m.as_ptr() as *mut u8, 4, buf.as_mut_ptr(), &mut len);
        assert_eq!((rv, len), (CKR_OK, 48));
        assert_eq!(&buf[..48], &want[..]);
        // Multi-part: the short Final keeps the operation too.
        assert_eq!(
            (raw.f.C_SignInit.unwrap())(h, &mut mech, generic.handle()),
            CKR_OK
        );
        assert_eq!((raw.f.C_SignUpdate.unwrap())(h, m.as_ptr() as *mut u8, 4), CKR_OK);
        let mut len: CK_ULONG = 10;
        assert_eq!(
            (raw.f.C_SignFinal.unwrap())(h, buf.as_mut_ptr(), &mut len),
            CKR_BUFFER_TOO_SMALL
        );
        assert_eq!(len, 48);
        assert_eq!(
            (raw.f.C_SignFinal.unwrap())(h, buf.as_mut_ptr(), &mut len),
            CKR_OK
        );
        assert_eq!(&buf[..48], &want[..]);
    }
    // An AES key of a size CMAC cannot take never exists (C_CreateObject refuses it), and a
    // huge HMAC key is refused at init.
    let big = secret_key(&s, KeyType::GENERIC_SECRET, &key_bytes(513, 0), true, true);
    assert_eq!(
        rv(s.sign(&Mechanism::Sha256Hmac, big, m).unwrap_err()),
        RvError::KeySizeRange
    );
}

#[test]
fn mechanisms_are_listed_with_sign_and_verify_and_key_sizes() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "mac");
    // The raw list: cryptoki's drops the types it has no name for (the `_GENERAL` ones).
    let raw = Raw::load();
    let mut n = 0;
    let mut list = vec![0; 200];
    // SAFETY: a valid slot and an output array of `n` entries.
    unsafe {
        assert_eq!(
            (raw.f.C_GetMechanismList.unwrap())(slot.id(), std::ptr::null_mut(), &mut n),
            CKR_OK
        );
        list.resize(n as usize, 0);
        assert_eq!(
            (raw.f.C_GetMechanismList.unwrap())(slot.id(), list.as_mut_ptr(), &mut n),
            CKR_OK
        );
    }
    let macs = [
        (CKM_SHA_1_HMAC, 14, 512),
        (CKM_SHA_1_HMAC_GENERAL, 14, 512),
        (CKM_SHA224_HMAC, 14, 512),
        (CKM_SHA224_HMAC_GENERAL, 14, 512),
        (CKM_SHA256_HMAC, 14, 512),
        (CKM_SHA256_HMAC_GENERAL, 14, 512),
        (CKM_SHA384_HMAC, 14, 512),
        (CKM_SHA384_HMAC_GENERAL, 14, 512),
        (CKM_SHA512_HMAC, 14, 512),
        (CKM_SHA512_HMAC_GENERAL, 14, 512),
        (CKM_AES_CMAC, 16, 32),
        (CKM_AES_CMAC_GENERAL, 16, 32),
        (CKM_AES_MAC, 16, 32),
        (CKM_AES_MAC_GENERAL, 16, 32),
    ];
    for (t, min, max) in macs {
        assert!(list.contains(&t), "0x{t:x} listed");
        let mut info = CK_MECHANISM_INFO::default();
        // SAFETY: a valid slot id and an output struct of the right type.
        let rv = unsafe { (raw.f.C_GetMechanismInfo.unwrap())(slot.id(), t, &mut info) };
        assert_eq!(rv, CKR_OK);
        assert_eq!(
            info.flags,
            CKF_SIGN | CKF_VERIFY,
            "0x{t:x} signs and verifies, nothing else"
        );
        assert_eq!((info.ulMinKeySize, info.ulMaxKeySize), (min, max), "0x{t:x}");
    }
    // MD5 and SHA-3 HMACs are not offered.
    for t in [CKM_MD5_HMAC, CKM_MD5_HMAC_GENERAL, CKM_SHA3_256_HMAC] {
        assert!(!list.contains(&t), "0x{t:x} is not offered");
    }
}

/// CBC-MAC by OpenSSL: the last block of AES-CBC (zero IV, no padding) over `data` padded with
/// zero bytes to whole blocks.
fn openssl_cbc_mac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    let mut padded = data.to_vec();
    padded.resize(data.len().div_ceil(16) * 16, 0);
    std::fs::write(&input, &padded).unwrap();
    let out = Command::new("openssl")
        .arg("enc")
        .arg(format!("-aes-{}-cbc", key.len() * 8))
        .args(["-nopad", "-iv", &"00".repeat(16), "-K", &hex(key), "-in"])
        .arg(&input)
        .output()
        .expect("openssl must be installed");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout[out.stdout.len() - 16..].to_vec()
}

/// Signs `data` in parts of `sizes` (cycled) with the raw API; returns the CK_RV of the first
/// call that fails.
fn raw_sign_parts(
    r: &Raw,
    h: CK_SESSION_HANDLE,
    mech: &mut CK_MECHANISM,
    key: ObjectHandle,
    data: &[u8],
    sizes: &[usize],
) -> Result<Vec<u8>, CK_RV> {
    // SAFETY: a valid session, a mechanism that outlives the calls, and buffers with their
    // true lengths.
    unsafe {
        let rv = (r.f.C_SignInit.unwrap())(h, mech, key.handle());
        if rv != CKR_OK {
            return Err(rv);
        }
        for piece in pieces(data, sizes) {
            let rv = (r.f.C_SignUpdate.unwrap())(h, piece.as_ptr() as *mut u8, piece.len() as _);
            if rv != CKR_OK {
                return Err(rv);
            }
        }
        let mut out = vec![0u8; 64];
        let mut len = out.len() as CK_ULONG;
        let rv = (r.f.C_SignFinal.unwrap())(h, out.as_mut_ptr(), &mut len);
        if rv != CKR_OK {
            return Err(rv);
        }
        out.truncate(len as usize);
        Ok(out)
    }
}

#[test]
fn aes_mac_is_openssl_cbc_mac_half_a_block_and_refuses_empty_data() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "mac");
    let s = user_session(&p, slot);
    let raw = Raw::load();
    let h = s.handle();
    let msg: Vec<u8> = (0..100u8).map(|i| i.wrapping_mul(37)).collect();
    for key_len in [16usize, 24, 32] {
        let value = key_bytes(key_len, 0x51);
        let key = secret_key(&s, KeyType::AES, &value, true, true);
        for n in [1usize, 15, 16, 17, 32, 100] {
            let data = &msg[..n];
            let want = openssl_cbc_mac(&value, data);
            // CKM_AES_MAC: half a block, single-part and in uneven parts.
            let mut mech = raw_mech::<u8>(CKM_AES_MAC, None);
            let got = raw_sign(&raw, h, &mut mech, key, data).unwrap();
            assert_eq!(got, want[..8], "AES-{} MAC of {n} bytes", key_len * 8);
            for sizes in [&[1usize][..], &[7, 16, 3]] {
                assert_eq!(
                    raw_sign_parts(&raw, h, &mut mech, key, data, sizes).unwrap(),
                    want[..8]
                );
            }
            assert_eq!(raw_verify(&raw, h, &mut mech, key, data, &got), CKR_OK);
            let mut bad = got.clone();
            bad[3] ^= 1;
            assert_eq!(
                raw_verify(&raw, h, &mut mech, key, data, &bad),
                CKR_SIGNATURE_INVALID
            );
            assert_eq!(
                raw_verify(&raw, h, &mut mech, key, data, &want),
                CKR_SIGNATURE_LEN_RANGE
            );
            // CKM_AES_MAC_GENERAL: the leftmost 1 to 16 bytes.
            for len in [1usize, 8, 13, 16] {
                let mut l: CK_MAC_GENERAL_PARAMS = len as _;
                let mut mech = raw_mech(CKM_AES_MAC_GENERAL, Some(&mut l));
                let got = raw_sign(&raw, h, &mut mech, key, data).unwrap();
                assert_eq!(got, want[..len], "AES-MAC-GENERAL {len} of {n} bytes");
                assert_eq!(raw_verify(&raw, h, &mut mech, key, data, &got), CKR_OK);
            }
        }
        // Lengths outside 1..=16 are refused at init.
        for len in [0usize, 17, 32] {
            let mut l: CK_MAC_GENERAL_PARAMS = len as _;
            let mut mech = raw_mech(CKM_AES_MAC_GENERAL, Some(&mut l));
            assert_eq!(
                raw_sign(&raw, h, &mut mech, key, b"data"),
                Err(CKR_MECHANISM_PARAM_INVALID),
                "length {len}"
            );
        }
        // No data: zero blocks of CBC-MAC would be a MAC independent of the key.
        let mut mech = raw_mech::<u8>(CKM_AES_MAC, None);
        assert_eq!(raw_sign(&raw, h, &mut mech, key, b""), Err(CKR_DATA_LEN_RANGE));
        assert_eq!(
            raw_sign_parts(&raw, h, &mut mech, key, b"", &[1]),
            Err(CKR_DATA_LEN_RANGE)
        );
        assert_eq!(
            raw_verify(&raw, h, &mut mech, key, b"", &[0u8; 8]),
            CKR_DATA_LEN_RANGE
        );
    }
    // Only AES keys.
    let generic = secret_key(&s, KeyType::GENERIC_SECRET, &key_bytes(16, 3), true, true);
    let mut mech = raw_mech::<u8>(CKM_AES_MAC, None);
    assert_eq!(
        raw_sign(&raw, h, &mut mech, generic, b"data"),
        Err(CKR_KEY_TYPE_INCONSISTENT)
    );
}
