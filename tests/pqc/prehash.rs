//! HashML-DSA (FIPS 204 §5.4) and HashSLH-DSA (FIPS 205 §10.2) through the module: the
//! `CKM_HASH_*_<hash>` mechanisms that hash on the token and `CKM_HASH_ML_DSA`/`CKM_HASH_SLH_DSA`
//! that take PH(M) from the caller (through the raw function list: `cryptoki` has no mechanism
//! type for the SHA-3 and SHAKE hashes that `CK_HASH_SIGN_ADDITIONAL_CONTEXT.hash` names).
//! Cross-checked against dilithium-py's and slh-dsa's own pre-hash code where they have the
//! hash, and against M' built in tests/pqc/crosscheck.py for the others.

use super::*;
use sha2::Digest;
use shake::ExtendableOutput;

/// A pre-hash: hashlib's name (crosscheck.py), the digest mechanism that names it in
/// `CK_HASH_SIGN_ADDITIONAL_CONTEXT` (SHAKE: the only PKCS#11 types that name it), and the
/// ML-DSA and SLH-DSA mechanisms that hash with it on the token.
struct Hash {
    name: &'static str,
    digest: CK_MECHANISM_TYPE,
    ml: CK_MECHANISM_TYPE,
    slh: CK_MECHANISM_TYPE,
}

const fn h(
    name: &'static str,
    digest: CK_MECHANISM_TYPE,
    ml: CK_MECHANISM_TYPE,
    slh: CK_MECHANISM_TYPE,
) -> Hash {
    Hash {
        name,
        digest,
        ml,
        slh,
    }
}

const HASHES: [Hash; 10] = [
    h(
        "sha224",
        CKM_SHA224,
        CKM_HASH_ML_DSA_SHA224,
        CKM_HASH_SLH_DSA_SHA224,
    ),
    h(
        "sha256",
        CKM_SHA256,
        CKM_HASH_ML_DSA_SHA256,
        CKM_HASH_SLH_DSA_SHA256,
    ),
    h(
        "sha384",
        CKM_SHA384,
        CKM_HASH_ML_DSA_SHA384,
        CKM_HASH_SLH_DSA_SHA384,
    ),
    h(
        "sha512",
        CKM_SHA512,
        CKM_HASH_ML_DSA_SHA512,
        CKM_HASH_SLH_DSA_SHA512,
    ),
    h(
        "sha3_224",
        CKM_SHA3_224,
        CKM_HASH_ML_DSA_SHA3_224,
        CKM_HASH_SLH_DSA_SHA3_224,
    ),
    h(
        "sha3_256",
        CKM_SHA3_256,
        CKM_HASH_ML_DSA_SHA3_256,
        CKM_HASH_SLH_DSA_SHA3_256,
    ),
    h(
        "sha3_384",
        CKM_SHA3_384,
        CKM_HASH_ML_DSA_SHA3_384,
        CKM_HASH_SLH_DSA_SHA3_384,
    ),
    h(
        "sha3_512",
        CKM_SHA3_512,
        CKM_HASH_ML_DSA_SHA3_512,
        CKM_HASH_SLH_DSA_SHA3_512,
    ),
    h(
        "shake_128",
        CKM_SHAKE_128_KEY_DERIVATION,
        CKM_HASH_ML_DSA_SHAKE128,
        CKM_HASH_SLH_DSA_SHAKE128,
    ),
    h(
        "shake_256",
        CKM_SHAKE_256_KEY_DERIVATION,
        CKM_HASH_ML_DSA_SHAKE256,
        CKM_HASH_SLH_DSA_SHAKE256,
    ),
];

/// PH(M), computed here with RustCrypto's hashes (FIPS 204: 256 bits of SHAKE128, 512 of
/// SHAKE256).
fn ph(name: &str, m: &[u8]) -> Vec<u8> {
    let xof = |len: usize, f: fn(&[u8], &mut [u8])| {
        let mut out = vec![0; len];
        f(m, &mut out);
        out
    };
    match name {
        "sha224" => sha2::Sha224::digest(m).to_vec(),
        "sha256" => sha2::Sha256::digest(m).to_vec(),
        "sha384" => sha2::Sha384::digest(m).to_vec(),
        "sha512" => sha2::Sha512::digest(m).to_vec(),
        "sha3_224" => sha3::Sha3_224::digest(m).to_vec(),
        "sha3_256" => sha3::Sha3_256::digest(m).to_vec(),
        "sha3_384" => sha3::Sha3_384::digest(m).to_vec(),
        "sha3_512" => sha3::Sha3_512::digest(m).to_vec(),
        "shake_128" => xof(32, |m, o| shake::Shake128::digest_xof(m, o)),
        "shake_256" => xof(64, |m, o| shake::Shake256::digest_xof(m, o)),
        _ => unreachable!("{name}"),
    }
}

/// The `cryptoki` mechanism of a `CKM_HASH_*_<hash>` type.
fn combined(t: CK_MECHANISM_TYPE, p: SignAdditionalContext<'_>) -> Mechanism<'_> {
    match t {
        CKM_HASH_ML_DSA_SHA224 => Mechanism::HashMlDsaSha224(p),
        CKM_HASH_ML_DSA_SHA256 => Mechanism::HashMlDsaSha256(p),
        CKM_HASH_ML_DSA_SHA384 => Mechanism::HashMlDsaSha384(p),
        CKM_HASH_ML_DSA_SHA512 => Mechanism::HashMlDsaSha512(p),
        CKM_HASH_ML_DSA_SHA3_224 => Mechanism::HashMlDsaSha3_224(p),
        CKM_HASH_ML_DSA_SHA3_256 => Mechanism::HashMlDsaSha3_256(p),
        CKM_HASH_ML_DSA_SHA3_384 => Mechanism::HashMlDsaSha3_384(p),
        CKM_HASH_ML_DSA_SHA3_512 => Mechanism::HashMlDsaSha3_512(p),
        CKM_HASH_ML_DSA_SHAKE128 => Mechanism::HashMlDsaShake128(p),
        CKM_HASH_ML_DSA_SHAKE256 => Mechanism::HashMlDsaShake256(p),
        CKM_HASH_SLH_DSA_SHA224 => Mechanism::HashSlhDsaSha224(p),
        CKM_HASH_SLH_DSA_SHA256 => Mechanism::HashSlhDsaSha256(p),
        CKM_HASH_SLH_DSA_SHA384 => Mechanism::HashSlhDsaSha384(p),
        CKM_HASH_SLH_DSA_SHA512 => Mechanism::HashSlhDsaSha512(p),
        CKM_HASH_SLH_DSA_SHA3_224 => Mechanism::HashSlhDsaSha3_224(p),
        CKM_HASH_SLH_DSA_SHA3_256 => Mechanism::HashSlhDsaSha3_256(p),
        CKM_HASH_SLH_DSA_SHA3_384 => Mechanism::HashSlhDsaSha3_384(p),
        CKM_HASH_SLH_DSA_SHA3_512 => Mechanism::HashSlhDsaSha3_512(p),
        CKM_HASH_SLH_DSA_SHAKE128 => Mechanism::HashSlhDsaShake128(p),
        CKM_HASH_SLH_DSA_SHAKE256 => Mechanism::HashSlhDsaShake256(p),
        _ => unreachable!("0x{t:x}"),
    }
}

fn ctx_param(hedge: HedgeType, ctx: &[u8]) -> SignAdditionalContext<'_> {
    SignAdditionalContext::new(hedge, Some(ctx))
}

/// `CK_HASH_SIGN_ADDITIONAL_CONTEXT` over `ctx`, which must outlive its use.
fn hash_param(hedge: CK_HEDGE_TYPE, ctx: &[u8], hash: CK_MECHANISM_TYPE) -> CK_HASH_SIGN_ADDITIONAL_CONTEXT {
    CK_HASH_SIGN_ADDITIONAL_CONTEXT {
        hedgeVariant: hedge,
        pContext: ctx.as_ptr() as *mut u8,
        ulContextLen: ctx.len() as CK_ULONG,
        hash,
    }
}

/// `CKM_HASH_ML_DSA`/`CKM_HASH_SLH_DSA` (`t`) signing `ph`, through the raw function list.
fn sign_hashed(
    r: &Raw,
    s: &Session,
    t: CK_MECHANISM_TYPE,
    mut p: CK_HASH_SIGN_ADDITIONAL_CONTEXT,
    key: ObjectHandle,
    ph: &[u8],
) -> Result<Vec<u8>, CK_RV> {
    raw_sign(r, s.handle(), &mut raw_mech(t, Some(&mut p)), key, ph)
}

fn verify_hashed(
    r: &Raw,
    s: &Session,
    t: CK_MECHANISM_TYPE,
    mut p: CK_HASH_SIGN_ADDITIONAL_CONTEXT,
    key: ObjectHandle,
    ph: &[u8],
    sig: &[u8],
) -> CK_RV {
    let mut m = raw_mech(t, Some(&mut p));
    // SAFETY: the mechanism, its parameter and context, the data and the signature outlive
    // both calls; the module reads them only.
    unsafe {
        let rv = (r.f.C_VerifyInit.unwrap())(s.handle(), &mut m, key.handle());
        if rv != CKR_OK {
            return rv;
        }
        (r.f.C_Verify.unwrap())(
            s.handle(),
            ph.as_ptr() as *mut u8,
            ph.len() as CK_ULONG,
            sig.as_ptr() as *mut u8,
            sig.len() as CK_ULONG,
        )
    }
}

/// `req` answered by the implementation's own pre-hash code (crosscheck.py's "api").
fn library(req: String) -> String {
    format!("{}, \"api\": \"library\"}}", req.trim_end_matches('}'))
}

/// dilithium-py's HashML-DSA has these hashes; the others are checked with M' built in Python.
const DILITHIUM_HASHES: [&str; 3] = ["sha256", "sha512", "shake_128"];

fn flipped(sig: &[u8]) -> Vec<u8> {
    let mut bad = sig.to_vec();
    bad[sig.len() / 2] ^= 0x01;
    bad
}

#[test]
fn hash_ml_dsa_every_set_and_hash_matches_an_independent_implementation() {
    let (_env, _p, s) = session();
    let r = Raw::load();
    let msg = b"ferrohsm HashML-DSA cross-check";
    let ctx = b"prehash context";
    for (i, (ps, alg)) in ML_DSA_SETS.into_iter().enumerate() {
        let seed = [0x60 + i as u8; 32];
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
        let sk = bytes(&s, private, AttributeType::Value);
        let pk = unhex(&python(&[request("keys", alg, &[("seed", &seed)], None)], "pk")[0]);
        let public = public_object(&s, KeyType::ML_DSA, ps, &pk);

        // Deterministic signatures: the mechanism that hashes on the token, CKM_HASH_ML_DSA
        // given PH(M), and the other side all make the same bytes.
        let mut sign_requests = Vec::new();
        let mut ours = Vec::new();
        for h in &HASHES {
            let det = ctx_param(HedgeType::DeterministicRequired, ctx);
            let on_token = s.sign(&combined(h.ml, det), private, msg).unwrap();
            let p = hash_param(CKH_DETERMINISTIC_REQUIRED, ctx, h.digest);
            let given = sign_hashed(&r, &s, CKM_HASH_ML_DSA, p, private, &ph(h.name, msg)).unwrap();
            assert_eq!(
                on_token, given,
                "{alg} {}: PH(M) hashed on the token or given",
                h.name
            );
            let fields: &[(&str, &[u8])] = &[("sk", &sk), ("msg", msg), ("ctx", ctx)];
            let req = request("sign", alg, fields, Some(h.name));
            sign_requests.push(if DILITHIUM_HASHES.contains(&h.name) {
                library(req)
            } else {
                req
            });
            ours.push(on_token);
        }
        let theirs = python(&sign_requests, "sig");
        let mut verify_requests = Vec::new();
        for ((h, ours), theirs) in HASHES.iter().zip(&ours).zip(&theirs) {
            assert_eq!(&hex(ours), theirs, "{alg} {}: deterministic HashML-DSA", h.name);
            // C_Verify takes theirs both ways, and refuses it with one byte changed.
            let theirs = unhex(theirs);
            let any = ctx_param(HedgeType::Preferred, ctx);
            s.verify(&combined(h.ml, any), public, msg, &theirs).unwrap();
            let p = hash_param(CKH_HEDGE_PREFERRED, ctx, h.digest);
            let digest = ph(h.name, msg);
            assert_eq!(
                verify_hashed(&r, &s, CKM_HASH_ML_DSA, p, public, &digest, &theirs),
                CKR_OK
            );
            assert_eq!(
                rv(s.verify(&combined(h.ml, any), public, msg, &flipped(&theirs))
                    .unwrap_err()),
                RvError::SignatureInvalid,
                "{alg} {}",
                h.name
            );
            assert_eq!(
                verify_hashed(&r, &s, CKM_HASH_ML_DSA, p, public, &digest, &flipped(&theirs)),
                CKR_SIGNATURE_INVALID
            );
            // Hedged signatures of ours, both mechanisms: the other side verifies them.
            let hedged = s
                .sign(&combined(h.ml, ctx_param(HedgeType::Required, ctx)), private, msg)
                .unwrap();
            let p = hash_param(CKH_HEDGE_REQUIRED, ctx, h.digest);
            let given = sign_hashed(&r, &s, CKM_HASH_ML_DSA, p, private, &digest).unwrap();
            assert_ne!(hedged, given, "hedged signatures differ");
            for sig in [&hedged, &given] {
                let fields: &[(&str, &[u8])] = &[("pk", &pk), ("msg", msg), ("ctx", ctx), ("sig", sig)];
                let req = request("verify", alg, fields, Some(h.name));
                verify_requests.push(if DILITHIUM_HASHES.contains(&h.name) {
                    library(req)
                } else {
                    req
                });
            }
        }
        assert_eq!(
            python(&verify_requests, "ok"),
            vec!["true"; 2 * HASHES.len()],
            "{alg}: the other side verifies every hedged HashML-DSA signature of ours"
        );
    }
}

/// SLH-DSA's Python implementation signs slowly, so the cross-check takes the fast sets: its
/// own pre-hash code (the hash of each set's security category: SHA-256, SHAKE128, and
/// SHAKE256 for SHAKE-192f) and M' built in Python for every hash on SHAKE-128f.
#[test]
fn hash_slh_dsa_matches_an_independent_implementation() {
    let (_env, _p, s) = session();
    let r = Raw::load();
    let msg = b"ferrohsm HashSLH-DSA cross-check";
    let ctx = b"ctx";
    let sets = [
        (CKP_SLH_DSA_SHA2_128F, "slh-dsa-sha2-128f", "sha256"),
        (CKP_SLH_DSA_SHAKE_128F, "slh-dsa-shake-128f", "shake_128"),
        (CKP_SLH_DSA_SHAKE_192F, "slh-dsa-shake-192f", "shake_256"),
    ];
    let mut requests = Vec::new();
    for (ps, alg, hash) in sets {
        let (public, private) = keypair(&s, &Mechanism::SlhDsaKeyPairGen, ps, true);
        let pk = bytes(&s, public, AttributeType::Value);
        let sk = bytes(&s, private, AttributeType::Value);
        let h = HASHES.iter().find(|h| h.name == hash).unwrap();
        let digest = ph(hash, msg);
        // Deterministic: on the token, given PH(M), and the library's sign_hash (the 128f sets;
        // 192f signs too slowly in Python), the same bytes.
        let det = s
            .sign(
                &combined(h.slh, ctx_param(HedgeType::DeterministicRequired, ctx)),
                private,
                msg,
            )
            .unwrap();
        let p = hash_param(CKH_DETERMINISTIC_REQUIRED, ctx, h.digest);
        let given = sign_hashed(&r, &s, CKM_HASH_SLH_DSA, p, private, &digest).unwrap();
        assert_eq!(det, given, "{alg}: PH(M) hashed on the token or given");
        if ps != CKP_SLH_DSA_SHAKE_192F {
            let fields: &[(&str, &[u8])] = &[("sk", &sk), ("msg", msg), ("ctx", ctx)];
            let theirs = unhex(&python(&[library(request("sign", alg, fields, Some(hash)))], "sig")[0]);
            assert_eq!(det, theirs, "{alg}: deterministic HashSLH-DSA with {hash}");
            let p = hash_param(CKH_HEDGE_PREFERRED, ctx, h.digest);
            assert_eq!(
                verify_hashed(&r, &s, CKM_HASH_SLH_DSA, p, public, &digest, &theirs),
                CKR_OK
            );
            assert_eq!(
                rv(s.verify(
                    &combined(h.slh, ctx_param(HedgeType::Preferred, ctx)),
                    public,
                    msg,
                    &flipped(&theirs)
                )
                .unwrap_err()),
                RvError::SignatureInvalid
            );
        }
        let hedged = s
            .sign(
                &combined(h.slh, ctx_param(HedgeType::Required, ctx)),
                private,
                msg,
            )
            .unwrap();
        let fields: &[(&str, &[u8])] = &[("pk", &pk), ("msg", msg), ("ctx", ctx), ("sig", &hedged)];
        requests.push(library(request("verify", alg, fields, Some(hash))));
        if ps == CKP_SLH_DSA_SHAKE_128F {
            for h in &HASHES {
                let sig = s
                    .sign(
                        &combined(h.slh, ctx_param(HedgeType::Preferred, ctx)),
                        private,
                        msg,
                    )
                    .unwrap();
                let fields: &[(&str, &[u8])] = &[("pk", &pk), ("msg", msg), ("ctx", ctx), ("sig", &sig)];
                requests.push(request("verify", alg, fields, Some(h.name)));
                let p = hash_param(CKH_HEDGE_PREFERRED, ctx, h.digest);
                assert_eq!(
                    verify_hashed(&r, &s, CKM_HASH_SLH_DSA, p, public, &ph(h.name, msg), &sig),
                    CKR_OK,
                    "{}",
                    h.name
                );
            }
        }
    }
    let answers = python(&requests, "ok");
    assert_eq!(answers, vec!["true"; requests.len()]);
}

#[test]
fn hash_mechanisms_sign_in_parts_as_in_one() {
    let (_env, _p, s) = session();
    let cases = [
        (Mechanism::MlDsaKeyPairGen, CKP_ML_DSA_44, true),
        (Mechanism::SlhDsaKeyPairGen, CKP_SLH_DSA_SHA2_128F, false),
    ];
    let msg = b"part one, part two, part three";
    for (gen, ps, ml) in cases {
        let (public, private) = keypair(&s, &gen, ps, false);
        for h in &HASHES {
            let t = if ml { h.ml } else { h.slh };
            let mech = combined(t, ctx_param(HedgeType::DeterministicRequired, b"parts"));
            let one_shot = s.sign(&mech, private, msg).unwrap();
            s.sign_init(&mech, private).unwrap();
            for part in [&msg[..10], &msg[10..], b""] {
                s.sign_update(part).unwrap();
            }
            assert_eq!(s.sign_final().unwrap(), one_shot, "0x{t:x}");
            s.verify_init(&mech, public).unwrap();
            s.verify_update(&msg[..3]).unwrap();
            s.verify_update(&msg[3..]).unwrap();
            s.verify_final(&one_shot).unwrap();
            s.verify_init(&mech, public).unwrap();
            s.verify_update(&msg[..3]).unwrap();
            assert_eq!(
                rv(s.verify_final(&one_shot).unwrap_err()),
                RvError::SignatureInvalid,
                "0x{t:x}: a prefix of the message"
            );
        }
    }
}

#[test]
fn hash_ml_dsa_bad_input_gets_the_specified_codes() {
    let (_env, _p, s) = session();
    let r = Raw::load();
    let (public, private) = keypair(&s, &Mechanism::MlDsaKeyPairGen, CKP_ML_DSA_44, false);
    let sha256 = ph("sha256", b"m");
    let ok = hash_param(CKH_HEDGE_PREFERRED, b"", CKM_SHA256);
    let sig = sign_hashed(&r, &s, CKM_HASH_ML_DSA, ok, private, &sha256).unwrap();
    assert_eq!(
        verify_hashed(&r, &s, CKM_HASH_ML_DSA, ok, public, &sha256, &sig),
        CKR_OK
    );
    // PH(M) must be the hash's length (PKCS#11 3.2: C_Sign's input is "length of hash").
    for len in [0, 31, 33, 64] {
        let data = vec![0x11; len];
        assert_eq!(
            sign_hashed(&r, &s, CKM_HASH_ML_DSA, ok, private, &data),
            Err(CKR_DATA_LEN_RANGE),
            "{len} bytes"
        );
        assert_eq!(
            verify_hashed(&r, &s, CKM_HASH_ML_DSA, ok, public, &data, &sig),
            CKR_DATA_LEN_RANGE
        );
    }
    let shake = hash_param(CKH_HEDGE_PREFERRED, b"", CKM_SHAKE_256_KEY_DERIVATION);
    assert_eq!(
        sign_hashed(&r, &s, CKM_HASH_ML_DSA, shake, private, &[0; 32]),
        Err(CKR_DATA_LEN_RANGE)
    );
    // A context over 255 bytes, a hash FIPS 204 has no OID for or that is no hash, an unknown
    // hedge choice: parameter errors; so are no parameter and the parameter of the mechanisms
    // that hash on the token (CK_SIGN_ADDITIONAL_CONTEXT, too short).
    let long = [0u8; 256];
    let bad = [
        hash_param(CKH_HEDGE_PREFERRED, &long, CKM_SHA256),
        hash_param(CKH_HEDGE_PREFERRED, b"", CKM_SHA_1),
        hash_param(CKH_HEDGE_PREFERRED, b"", CKM_MD5),
        hash_param(CKH_HEDGE_PREFERRED, b"", CKM_SHA256_HMAC),
        hash_param(7, b"", CKM_SHA256),
    ];
    for p in bad {
        assert_eq!(
            sign_hashed(&r, &s, CKM_HASH_ML_DSA, p, private, &sha256),
            Err(CKR_MECHANISM_PARAM_INVALID),
            "hash 0x{:x}, hedge {}, context {}",
            p.hash,
            p.hedgeVariant,
            p.ulContextLen
        );
    }
    let none = raw_sign(
        &r,
        s.handle(),
        &mut raw_mech::<u8>(CKM_HASH_ML_DSA, None),
        private,
        &sha256,
    );
    assert_eq!(none, Err(CKR_MECHANISM_PARAM_INVALID));
    let mut short = CK_SIGN_ADDITIONAL_CONTEXT {
        hedgeVariant: CKH_HEDGE_PREFERRED,
        pContext: std::ptr::null_mut(),
        ulContextLen: 0,
    };
    let mut m = raw_mech(CKM_HASH_ML_DSA, Some(&mut short));
    assert_eq!(
        raw_sign(&r, s.handle(), &mut m, private, &sha256),
        Err(CKR_MECHANISM_PARAM_INVALID)
    );
    assert_eq!(
        rv(s.sign_init(
            &combined(CKM_HASH_ML_DSA_SHA256, ctx_param(HedgeType::Preferred, &long)),
            private
        )
        .unwrap_err()),
        RvError::MechanismParamInvalid
    );
    // CKM_HASH_ML_DSA is single-part (PKCS#11 3.2 §6.67): C_SignUpdate is refused.
    let mut param = ok;
    let mut m = raw_mech(CKM_HASH_ML_DSA, Some(&mut param));
    // SAFETY: the mechanism and data outlive the calls.
    unsafe {
        assert_eq!(
            (r.f.C_SignInit.unwrap())(s.handle(), &mut m, private.handle()),
            CKR_OK
        );
        let rv = (r.f.C_SignUpdate.unwrap())(s.handle(), sha256.as_ptr() as *mut u8, 32);
        assert_eq!(rv, CKR_FUNCTION_NOT_SUPPORTED);
    }

    // Offered for signing and verifying, with the public key sizes of CKM_ML_DSA (asked
    // through the raw function list: cryptoki leaves out CKM_HASH_ML_DSA, which it has no
    // MechanismType for).
    let slot = s.get_session_info().unwrap().slot_id().id();
    let mut list = vec![0; 256];
    let mut n = list.len() as CK_ULONG;
    // SAFETY: `list` has room for `n` types.
    let rv = unsafe { (r.f.C_GetMechanismList.unwrap())(slot, list.as_mut_ptr(), &mut n) };
    assert_eq!(rv, CKR_OK);
    list.truncate(n as usize);
    let offered = |t: CK_MECHANISM_TYPE, min: CK_ULONG, max: CK_ULONG| {
        assert!(list.contains(&t), "0x{t:x} listed");
        let mut info = CK_MECHANISM_INFO {
            ulMinKeySize: 0,
            ulMaxKeySize: 0,
            flags: 0,
        };
        // SAFETY: `info` is writable for the call.
        let rv = unsafe { (r.f.C_GetMechanismInfo.unwrap())(slot, t, &mut info) };
        assert_eq!(rv, CKR_OK);
        assert_eq!(info.flags, CKF_SIGN | CKF_VERIFY, "0x{t:x}");
        assert_eq!((info.ulMinKeySize, info.ulMaxKeySize), (min, max), "0x{t:x}");
    };
    offered(CKM_HASH_ML_DSA, 1312, 2592);
    offered(CKM_HASH_SLH_DSA, 32, 64);
    for h in &HASHES {
        offered(h.ml, 1312, 2592);
        offered(h.slh, 32, 64);
    }
}
