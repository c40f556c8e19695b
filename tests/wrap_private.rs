//! Wrapping and unwrapping of RSA and EC private keys (PKCS#8 inside) through the built
//! module: the blob opened independently (RustCrypto `aes-kw`, `openssl enc`) is a PKCS#8 key
//! that OpenSSL checks and whose public half is the token key's; an unwrapped key signs and
//! OpenSSL verifies; real SoftHSM unwraps what ferrohsm wraps and the reverse; and the policy
//! and malformed-blob errors as a table.

mod common;

use common::*;
use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::error::RvError;
use cryptoki::mechanism::eddsa::{EddsaParams, EddsaSignatureScheme};
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::{Session, UserType};
use cryptoki::types::AuthPin;
use std::path::Path;
use std::process::Command;

const SOFTHSM: &str = "/usr/lib/softhsm/libsofthsm2.so";
const P256_OID: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const P384_OID: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22];
const P521_OID: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23];
const ED25519_OID: &[u8] = &[0x06, 0x03, 0x2b, 0x65, 0x70];
const ED448_OID: &[u8] = &[0x06, 0x03, 0x2b, 0x65, 0x71];
const KEK: [u8; 32] = [0x5c; 32];

/// The kinds of private key tested: RSA-2048 and the five curves (an Edwards curve by its OID).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Rsa,
    Ec(&'static [u8]),
    Ed(&'static [u8]),
}

const KINDS: [Kind; 6] = [
    Kind::Rsa,
    Kind::Ec(P256_OID),
    Kind::Ec(P384_OID),
    Kind::Ec(P521_OID),
    Kind::Ed(ED25519_OID),
    Kind::Ed(ED448_OID),
];

impl Kind {
    fn key_type(self) -> KeyType {
        match self {
            Kind::Rsa => KeyType::RSA,
            Kind::Ec(_) => KeyType::EC,
            Kind::Ed(_) => KeyType::EC_EDWARDS,
        }
    }

    /// A signature of `msg` as OpenSSL checks it: SHA-256 with PKCS#1 v1.5 or ECDSA, or pure
    /// EdDSA. ECDSA signs the SHA-256 hash with CKM_ECDSA, which SoftHSM 2.6 has (it lacks
    /// CKM_ECDSA_SHA256).
    fn sign(self, s: &Session, key: ObjectHandle, msg: &[u8]) -> Vec<u8> {
        use sha2::Digest;
        match self {
            Kind::Rsa => s.sign(&Mechanism::Sha256RsaPkcs, key, msg),
            Kind::Ec(_) => s.sign(&Mechanism::Ecdsa, key, &sha2::Sha256::digest(msg)),
            Kind::Ed(_) => s.sign(
                &Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Pure)),
                key,
                msg,
            ),
        }
        .unwrap_or_else(|e| panic!("{self:?}: signing failed: {e}"))
    }
}

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().expect("tool missing: install openssl and softhsm2");
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// An extractable (and sensitive) key pair of `kind`, session objects.
fn keypair(s: &Session, kind: Kind, extractable: bool) -> (ObjectHandle, ObjectHandle) {
    let mut public = vec![Attribute::Token(false), Attribute::Verify(true)];
    let private = vec![
        Attribute::Token(false),
        Attribute::Private(true),
        Attribute::Sensitive(true),
        Attribute::Extractable(extractable),
        Attribute::Sign(true),
    ];
    let mech = match kind {
        Kind::Rsa => {
            public.extend([
                Attribute::ModulusBits(2048.into()),
                Attribute::PublicExponent(vec![1, 0, 1]),
            ]);
            Mechanism::RsaPkcsKeyPairGen
        }
        Kind::Ec(oid) => {
            public.push(Attribute::EcParams(oid.to_vec()));
            Mechanism::EccKeyPairGen
        }
        Kind::Ed(oid) => {
            public.push(Attribute::EcParams(oid.to_vec()));
            Mechanism::EccEdwardsKeyPairGen
        }
    };
    s.generate_key_pair(&mech, &public, &private).unwrap()
}

/// The AES-256 wrapping key `KEK`, as a session object.
fn kek(s: &Session) -> ObjectHandle {
    s.create_object(&[
        Attribute::Class(ObjectClass::SECRET_KEY),
        Attribute::KeyType(KeyType::AES),
        Attribute::Token(false),
        Attribute::Value(KEK.to_vec()),
        Attribute::Wrap(true),
        Attribute::Unwrap(true),
        Attribute::Encrypt(true),
        Attribute::Decrypt(true),
    ])
    .unwrap()
}

fn unwrap_template(kind: Kind) -> Vec<Attribute> {
    vec![
        Attribute::Class(ObjectClass::PRIVATE_KEY),
        Attribute::KeyType(kind.key_type()),
        Attribute::Token(false),
        Attribute::Private(true),
        Attribute::Sensitive(true),
        Attribute::Sign(true),
    ]
}

/// RFC 5649 unwrap by the `aes-kw` crate, independent of the module.
fn kwp_unwrap(blob: &[u8]) -> Vec<u8> {
    use aes::cipher::KeyInit;
    let kw = aes_kw::KwpAes256::new_from_slice(&KEK).unwrap();
    let mut out = vec![0u8; blob.len()];
    kw.unwrap_key(blob, &mut out).unwrap().to_vec()
}

fn kwp_wrap(key: &[u8]) -> Vec<u8> {
    use aes::cipher::KeyInit;
    let kw = aes_kw::KwpAes256::new_from_slice(&KEK).unwrap();
    let mut out = vec![0u8; key.len().div_ceil(8) * 8 + 8];
    kw.wrap_key(key, &mut out).unwrap().to_vec()
}

fn spki(s: &Session, public: ObjectHandle) -> Vec<u8> {
    match &s.get_attributes(public, &[AttributeType::PublicKeyInfo]).unwrap()[0] {
        Attribute::PublicKeyInfo(v) => v.clone(),
        other => panic!("{other:?}"),
    }
}

/// `openssl pkey -check` of a PKCS#8 DER key; returns its SubjectPublicKeyInfo DER.
fn openssl_check_pkcs8(dir: &Path, der: &[u8]) -> Vec<u8> {
    let key = dir.join("key.der");
    std::fs::write(&key, der).unwrap();
    let out = run(Command::new("openssl")
        .args(["pkey", "-inform", "DER", "-check", "-noout", "-in"])
        .arg(&key));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Key is valid"));
    let out = run(Command::new("openssl")
        .args(["pkey", "-inform", "DER", "-pubout", "-outform", "DER", "-in"])
        .arg(&key));
    out.stdout
}

fn der_int(v: &[u8]) -> Vec<u8> {
    let mut v: Vec<u8> = v.iter().copied().skip_while(|b| *b == 0).collect();
    if v.is_empty() || v[0] & 0x80 != 0 {
        v.insert(0, 0);
    }
    let mut out = vec![0x02];
    der_len(&mut out, v.len());
    out.extend(v);
    out
}

fn der_len(out: &mut Vec<u8>, n: usize) {
    if n < 0x80 {
        out.push(n as u8);
    } else {
        out.extend([0x81, n as u8]);
    }
}

/// Whether OpenSSL verifies `sig` of `msg` with the public key `spki` (DER).
fn openssl_verifies(dir: &Path, kind: Kind, spki: &[u8], msg: &[u8], sig: &[u8]) -> bool {
    let (pubkey, msg_file, sig_file) = (dir.join("pub.der"), dir.join("msg"), dir.join("sig"));
    std::fs::write(&pubkey, spki).unwrap();
    std::fs::write(&msg_file, msg).unwrap();
    let sig = match kind {
        // r‖s into the DER ECDSA-Sig-Value OpenSSL reads.
        Kind::Ec(_) => {
            let (r, s) = sig.split_at(sig.len() / 2);
            let body = [der_int(r), der_int(s)].concat();
            let mut d = vec![0x30];
            der_len(&mut d, body.len());
            d.extend(body);
            d
        }
        _ => sig.to_vec(),
    };
    std::fs::write(&sig_file, sig).unwrap();
    let mut cmd = Command::new("openssl");
    if matches!(kind, Kind::Ed(_)) {
        cmd.args([
            "pkeyutl", "-verify", "-pubin", "-keyform", "DER", "-rawin", "-inkey",
        ])
        .arg(&pubkey)
        .arg("-in")
        .arg(&msg_file)
        .arg("-sigfile")
        .arg(&sig_file);
    } else {
        cmd.args(["dgst", "-sha256", "-keyform", "DER", "-verify"])
            .arg(&pubkey)
            .arg("-signature")
            .arg(&sig_file)
            .arg(&msg_file);
    }
    let out = cmd.output().unwrap();
    if !out.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    }
    out.status.success()
}

fn bool_attr(s: &Session, key: ObjectHandle, t: AttributeType) -> bool {
    match &s.get_attributes(key, &[t]).unwrap()[0] {
        Attribute::Local(b)
        | Attribute::NeverExtractable(b)
        | Attribute::AlwaysSensitive(b)
        | Attribute::Sensitive(b)
        | Attribute::Extractable(b) => *b,
        other => panic!("{other:?}"),
    }
}

#[test]
fn private_keys_wrap_as_pkcs8_that_openssl_reads_and_unwrap_into_signing_keys() {
    let env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "wrap");
    let s = user_session(&p, slot);
    let kek = kek(&s);
    let msg = b"moved between tokens the standard way";
    for kind in KINDS {
        let (public, private) = keypair(&s, kind, true);
        let blob = s.wrap_key(&Mechanism::AesKeyWrapPad, kek, private).unwrap();
        let der = kwp_unwrap(&blob);
        assert_eq!(
            openssl_check_pkcs8(env.dir.path(), &der),
            spki(&s, public),
            "{kind:?}: the PKCS#8 inside is the token key"
        );
        // The same PKCS#8 under CBC-PAD, opened by `openssl enc`.
        let iv = [7u8; 16];
        let cbc = s.wrap_key(&Mechanism::AesCbcPad(iv), kek, private).unwrap();
        let dir = env.dir.path();
        std::fs::write(dir.join("cbc"), &cbc).unwrap();
        let out = run(Command::new("openssl")
            .args(["enc", "-d", "-aes-256-cbc", "-K"])
            .arg(KEK.iter().map(|b| format!("{b:02x}")).collect::<String>())
            .arg("-iv")
            .arg(iv.iter().map(|b| format!("{b:02x}")).collect::<String>())
            .arg("-in")
            .arg(dir.join("cbc")));
        assert_eq!(out.stdout, der, "{kind:?}: CBC-PAD holds the same PKCS#8");
        for (mech, blob) in [
            (Mechanism::AesKeyWrapPad, &blob),
            (Mechanism::AesCbcPad(iv), &cbc),
        ] {
            let back = s.unwrap_key(&mech, kek, blob, &unwrap_template(kind)).unwrap();
            let sig = kind.sign(&s, back, msg);
            assert!(
                openssl_verifies(dir, kind, &spki(&s, public), msg, &sig),
                "{kind:?}: OpenSSL verifies the unwrapped key's signature"
            );
            assert!(!bool_attr(&s, back, AttributeType::Local), "{kind:?} CKA_LOCAL");
            assert!(!bool_attr(&s, back, AttributeType::NeverExtractable));
            assert!(!bool_attr(&s, back, AttributeType::AlwaysSensitive));
            assert!(bool_attr(&s, back, AttributeType::Sensitive));
            assert!(!bool_attr(&s, back, AttributeType::Extractable));
            // Its public half is the original's (the token derived it from the PKCS#8).
            assert_eq!(spki(&s, back), spki(&s, public));
        }
    }
}

#[test]
fn policy_and_malformed_blobs_get_the_specified_codes() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "wrap");
    let s = user_session(&p, slot);
    let kek = kek(&s);
    let kwp = Mechanism::AesKeyWrapPad;
    let (_, locked) = keypair(&s, Kind::Ec(P256_OID), false);
    let (_, rsa) = keypair(&s, Kind::Rsa, true);
    let (_, ec) = keypair(&s, Kind::Ec(P256_OID), true);
    let trusted_only = s
        .generate_key_pair(
            &Mechanism::EccKeyPairGen,
            &[Attribute::Token(false), Attribute::EcParams(P256_OID.to_vec())],
            &[
                Attribute::Token(false),
                Attribute::Sign(true),
                Attribute::Extractable(true),
                Attribute::WrapWithTrusted(true),
            ],
        )
        .unwrap()
        .1;
    assert_eq!(
        rv(s.wrap_key(&kwp, kek, locked).unwrap_err()),
        RvError::KeyUnextractable
    );
    assert_eq!(
        rv(s.wrap_key(&kwp, kek, trusted_only).unwrap_err()),
        RvError::KeyNotWrappable
    );
    // RSA-OAEP cannot hold a PKCS#8 private key of this size.
    let (oaep_pub, _) = keypair(&s, Kind::Rsa, false);
    let oaep = cryptoki::mechanism::rsa::PkcsOaepParams::new(
        cryptoki::mechanism::MechanismType::SHA256,
        cryptoki::mechanism::rsa::PkcsMgfType::MGF1_SHA256,
        cryptoki::mechanism::rsa::PkcsOaepSource::empty(),
    );
    assert_eq!(
        rv(s.wrap_key(&Mechanism::RsaPkcsOaep(oaep), oaep_pub, rsa)
            .unwrap_err()),
        RvError::KeySizeRange
    );

    let rsa_blob = s.wrap_key(&kwp, kek, rsa).unwrap();
    let ec_der = kwp_unwrap(&s.wrap_key(&kwp, kek, ec).unwrap());
    let mut corrupted = rsa_blob.clone();
    corrupted[20] ^= 1;
    // A valid PKCS#8 P-256 key whose scalar is replaced by 2^256 - 1 (above the order).
    let scalar = p256::SecretKey::from_pkcs8_der(&ec_der)
        .unwrap()
        .to_bytes()
        .to_vec();
    let at = ec_der.windows(32).position(|w| w == scalar.as_slice()).unwrap();
    let mut out_of_range = ec_der.clone();
    out_of_range[at..at + 32].fill(0xff);
    // A PKCS#8 RSA key whose CRT exponent dP is off by one.
    let rsa_der = kwp_unwrap(&rsa_blob);
    let bad_crt = {
        use rsa::pkcs8::der::{Decode, Encode};
        let info = rsa::pkcs8::PrivateKeyInfoRef::from_der(&rsa_der).unwrap();
        let k = rsa::pkcs1::RsaPrivateKeyRef::from_der(info.private_key.as_bytes()).unwrap();
        let mut dp = k.exponent1.as_bytes().to_vec();
        *dp.last_mut().unwrap() ^= 2;
        let k2 = rsa::pkcs1::RsaPrivateKeyRef {
            exponent1: rsa::pkcs1::UintRef::new(&dp).unwrap(),
            ..k
        };
        let inner = k2.to_der().unwrap();
        let oct = rsa::pkcs8::der::asn1::OctetStringRef::new(&inner).unwrap();
        rsa::pkcs8::PrivateKeyInfoRef::new(info.algorithm, oct)
            .to_der()
            .unwrap()
    };
    use rsa::pkcs8::DecodePrivateKey;
    let rsa_t = unwrap_template(Kind::Rsa);
    let ec_t = unwrap_template(Kind::Ec(P256_OID));
    let mut local_t = rsa_t.clone();
    local_t.push(Attribute::Local(true));
    let public_t = vec![
        Attribute::Class(ObjectClass::PUBLIC_KEY),
        Attribute::KeyType(KeyType::RSA),
        Attribute::Token(false),
    ];
    let cases: Vec<(&str, Vec<u8>, &[Attribute], RvError)> = vec![
        ("a corrupted blob", corrupted, &rsa_t, RvError::WrappedKeyInvalid),
        (
            "a wrapped 32-byte secret as a private key",
            kwp_wrap(&[1; 32]),
            &rsa_t,
            RvError::WrappedKeyInvalid,
        ),
        (
            "an RSA key into an EC template",
            rsa_blob.clone(),
            &ec_t,
            RvError::TemplateInconsistent,
        ),
        (
            "an EC key into an RSA template",
            kwp_wrap(&ec_der),
            &rsa_t,
            RvError::TemplateInconsistent,
        ),
        (
            "an RSA key as a public key",
            rsa_blob.clone(),
            &public_t,
            RvError::TemplateInconsistent,
        ),
        (
            "CKA_LOCAL in the template",
            rsa_blob.clone(),
            &local_t,
            RvError::AttributeReadOnly,
        ),
        (
            "an EC scalar above the order",
            kwp_wrap(&out_of_range),
            &ec_t,
            RvError::WrappedKeyInvalid,
        ),
        (
            "an RSA key with a wrong dP",
            kwp_wrap(&bad_crt),
            &rsa_t,
            RvError::WrappedKeyInvalid,
        ),
    ];
    for (what, blob, template, want) in &cases {
        assert_eq!(
            rv(s.unwrap_key(&kwp, kek, blob, template).unwrap_err()),
            *want,
            "{what}"
        );
    }
    // The good blob still unwraps (nothing above changed the token's state).
    s.unwrap_key(&kwp, kek, &rsa_blob, &rsa_t).unwrap();
}

fn softhsm_session(conf: &Path) -> (Pkcs11, Session) {
    run(Command::new("softhsm2-util")
        .args([
            "--init-token",
            "--free",
            "--label",
            "peer",
            "--so-pin",
            SO_PIN,
            "--pin",
            USER_PIN,
        ])
        .env("SOFTHSM2_CONF", conf));
    std::env::set_var("SOFTHSM2_CONF", conf);
    let p = Pkcs11::new(SOFTHSM).unwrap();
    p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
        .unwrap();
    let slot = p
        .get_slots_with_initialized_token()
        .unwrap()
        .into_iter()
        .find(|s| p.get_token_info(*s).unwrap().label() == "peer")
        .unwrap();
    let s = p.open_rw_session(slot).unwrap();
    s.login(UserType::User, Some(&AuthPin::new(USER_PIN.into())))
        .unwrap();
    (p, s)
}

/// RSA-2048, P-256, P-384 and P-521: ferrohsm wraps, SoftHSM unwraps and signs, OpenSSL
/// verifies with ferrohsm's public key; then SoftHSM wraps its own keys and ferrohsm unwraps
/// and signs them.
#[test]
fn keys_move_between_ferrohsm_and_softhsm_both_ways() {
    let env = TestEnv::new();
    let dir = env.dir.path();
    let tokendir = dir.join("softhsm-tokens");
    std::fs::create_dir_all(&tokendir).unwrap();
    let conf = dir.join("softhsm2.conf");
    std::fs::write(
        &conf,
        format!(
            "directories.tokendir = {}\nobjectstore.backend = file\n",
            tokendir.display()
        ),
    )
    .unwrap();
    let (_sp, soft) = softhsm_session(&conf);
    let p = load();
    let slot = new_token(&p, "wrap");
    let fh = user_session(&p, slot);
    let (fh_kek, soft_kek) = (kek(&fh), kek(&soft));
    let msg = b"wrapped in one token, signing in the other";
    let kwp = Mechanism::AesKeyWrapPad;
    // SoftHSM 2.6 neither wraps nor unwraps EdDSA private keys (CKR_KEY_NOT_WRAPPABLE,
    // CKR_FUNCTION_FAILED): their PKCS#8 is checked against OpenSSL above instead.
    for kind in KINDS.into_iter().filter(|k| !matches!(k, Kind::Ed(_))) {
        // ferrohsm -> SoftHSM.
        let (public, private) = keypair(&fh, kind, true);
        let blob = fh.wrap_key(&kwp, fh_kek, private).unwrap();
        let there = soft
            .unwrap_key(&kwp, soft_kek, &blob, &unwrap_template(kind))
            .unwrap_or_else(|e| panic!("{kind:?}: SoftHSM unwraps ferrohsm's blob: {e}"));
        let sig = kind.sign(&soft, there, msg);
        assert!(
            openssl_verifies(dir, kind, &spki(&fh, public), msg, &sig),
            "{kind:?}: SoftHSM's signature with the moved key verifies"
        );
        // SoftHSM -> ferrohsm.
        let (soft_public, soft_private) = keypair(&soft, kind, true);
        let blob = soft.wrap_key(&kwp, soft_kek, soft_private).unwrap();
        let here = fh
            .unwrap_key(&kwp, fh_kek, &blob, &unwrap_template(kind))
            .unwrap_or_else(|e| panic!("{kind:?}: ferrohsm unwraps SoftHSM's blob: {e}"));
        let sig = kind.sign(&fh, here, msg);
        // SoftHSM zero-pads its PKCS#8 to a multiple of 8 inside the wrap: OpenSSL reads the
        // DER and ignores what follows only through asn1parse, so the padding is cut here.
        let inner = kwp_unwrap(&blob);
        let their_spki = openssl_check_pkcs8(dir, der_prefix(&inner));
        assert!(
            openssl_verifies(dir, kind, &their_spki, msg, &sig),
            "{kind:?}: ferrohsm's signature with SoftHSM's key verifies"
        );
        // The public half ferrohsm derived is the one SoftHSM holds.
        assert_eq!(spki(&fh, here), their_spki, "{kind:?}");
        let _ = soft_public;
    }
}

/// The DER element at the start of `b` (its header read by hand), without what follows.
fn der_prefix(b: &[u8]) -> &[u8] {
    assert_eq!(b[0], 0x30);
    let (len, header) = match b[1] {
        l if l < 0x80 => (l as usize, 2),
        0x81 => (b[2] as usize, 3),
        0x82 => (((b[2] as usize) << 8) | b[3] as usize, 4),
        _ => panic!("unexpected length form"),
    };
    &b[..header + len]
}
