//! RSA keys of any length a user asks for (issue 53, item 4): 2049, 3092 and 4095 bits as
//! well as the multiples of 64, generated and imported, signed by every kernel family this
//! CPU runs when it is forced (a family that does not take a length hands the key to one
//! that does, so the signature is right either way) and by the module's own choice. Every
//! signature is verified by the rsa crate; one per length by the openssl CLI.

mod common;

use common::*;
use cryptoki::mechanism::rsa::{PkcsMgfType, PkcsPssParams};
use cryptoki::mechanism::{Mechanism, MechanismType};
use cryptoki::object::{Attribute, KeyType, ObjectClass};
use rsa::pkcs1v15::Pkcs1v15Sign;
use rsa::traits::{PrivateKeyParts, PublicKeyParts};
use rsa::Pss;
use sha2::{Digest, Sha256};

const ODD: [u64; 3] = [2049, 3092, 4095];

fn pss() -> Mechanism<'static> {
    Mechanism::Sha256RsaPkcsPss(PkcsPssParams {
        hash_alg: MechanismType::SHA256,
        mgf: PkcsMgfType::MGF1_SHA256,
        s_len: 32.into(),
    })
}

/// Signs `msg` with PKCS #1 v1.5 and PSS and checks both with the rsa crate.
fn sign_both(
    s: &cryptoki::session::Session,
    key: cryptoki::object::ObjectHandle,
    pk: &rsa::PublicKey,
    msg: &[u8],
) {
    let bits = pk.n().as_ref().bit_width();
    let digest = Sha256::digest(msg);
    let sig = s.sign(&Mechanism::Sha256RsaPkcs, key, msg).unwrap();
    assert_eq!(sig.len(), bits.div_ceil(8) as usize, "RSA-{bits}");
    pk.verify(Pkcs1v15Sign::new::<Sha256>(), &digest, &sig)
        .unwrap_or_else(|e| panic!("RSA-{bits} PKCS#1 v1.5: {e}"));
    let sig = s.sign(&pss(), key, msg).unwrap();
    pk.verify(Pss::<Sha256>::new(), &digest, &sig)
        .unwrap_or_else(|e| panic!("RSA-{bits} PSS: {e}"));
}

#[test]
fn odd_lengths_are_generated_and_sign_verified_by_openssl() {
    let env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "sizes");
    let s = user_session(&p, slot);
    for bits in ODD {
        let (public, private) = rsa_keypair(&s, bits, &bits.to_be_bytes(), false);
        let pk = rsa_public(&s, public);
        assert_eq!(
            pk.n().as_ref().bit_width() as u64,
            bits,
            "a key of exactly {bits} bits"
        );
        sign_both(&s, private, &pk, b"odd lengths");
        let pem = env.dir.path().join(format!("{bits}.pem"));
        write_public_pem(&s, public, &pem);
        let data = env.dir.path().join("data");
        std::fs::write(&data, b"checked by openssl").unwrap();
        let sig = s
            .sign(&Mechanism::Sha256RsaPkcs, private, b"checked by openssl")
            .unwrap();
        let sig_path = env.dir.path().join(format!("{bits}.sig"));
        std::fs::write(&sig_path, sig).unwrap();
        let out = std::process::Command::new("openssl")
            .args(["dgst", "-sha256", "-verify"])
            .arg(&pem)
            .arg("-signature")
            .arg(&sig_path)
            .arg(&data)
            .output()
            .expect("openssl is installed");
        assert!(
            out.status.success(),
            "openssl, RSA-{bits}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The limits: 1,024 to 16,384 bits, whatever the length in between.
    for bits in [1023u64, 16385] {
        let err = s
            .generate_key_pair(
                &Mechanism::RsaPkcsKeyPairGen,
                &[Attribute::ModulusBits(bits.into())],
                &[],
            )
            .unwrap_err();
        assert_eq!(rv(err), cryptoki::error::RvError::KeySizeRange, "{bits}");
    }
}

#[test]
fn odd_lengths_are_imported_and_sign() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "imports");
    let s = user_session(&p, slot);
    let mut rng = rand_core::UnwrapErr(getrandom::SysRng);
    for bits in ODD {
        let k = rsa::PrivateKey::new(&mut rng, bits as usize).unwrap();
        let be = |x: &rsa::BoxedUint| x.to_be_bytes_trimmed_vartime().to_vec();
        let primes = k.primes();
        let key = s
            .create_object(&[
                Attribute::Class(ObjectClass::PRIVATE_KEY),
                Attribute::KeyType(KeyType::RSA),
                Attribute::Token(false),
                Attribute::Sign(true),
                Attribute::Modulus(be(k.n().as_ref())),
                Attribute::PublicExponent(be(k.e())),
                Attribute::PrivateExponent(be(k.d())),
                Attribute::Prime1(be(&primes[0])),
                Attribute::Prime2(be(&primes[1])),
            ])
            .unwrap();
        sign_both(&s, key, &k.to_public_key(), b"imported");
    }
}

/// Each family this CPU runs, forced, signs at every odd length (the families that do not take
/// a length hand it on), concurrently so batching families batch; and the module's own choice
/// serves 3092 bits with a family of its own, not only the reference.
#[test]
fn every_family_signs_odd_lengths() {
    let _env = TestEnv::new();
    std::env::remove_var("FERROHSM_KERNEL");
    let p = load();
    let runnable: Vec<String> = kernel_stats()
        .iter()
        .filter(|f| f.available == 1)
        .map(|f| f.name())
        .collect();
    let slot = new_token(&p, "families");
    let before = kernel_stats();
    sign_concurrently_verified(&p, slot, &[3092], 4, 3);
    let after = kernel_stats();
    let served: Vec<String> = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| a.signatures() > b.signatures())
        .map(|(_, a)| a.name())
        .collect();
    assert!(
        served.iter().any(|n| n != "reference"),
        "RSA-3092 served only by {served:?} of {runnable:?}"
    );
    p.finalize().unwrap();
    for family in runnable {
        std::env::set_var("FERROHSM_KERNEL", &family);
        let p = load();
        let slot = new_token(&p, &format!("f-{family}"));
        sign_concurrently_verified(&p, slot, &ODD, 4, 2);
        p.finalize().unwrap();
        std::env::remove_var("FERROHSM_KERNEL");
    }
}
