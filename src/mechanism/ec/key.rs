//! Elliptic-curve keys in usable form and the signatures made with them: ECDSA on P-256,
//! P-384 and P-521 (RustCrypto `p256`/`p384`/`p521`, constant time, secrets zeroized on drop),
//! Ed25519 (through `eddsa`) and Ed448 (through `ed448`). Owns key generation with its pairwise consistency test, the
//! checks of imported key material (point on the curve, scalar in range, scalar matching the
//! point), and the rule that no signature leaves before the public key has verified it.

use super::ed25519 as eddsa;
use super::ed448;
use crate::engine::ec::check::{self as ec_check, LazyTable};
use crate::engine::ec::ed25519 as ed25519_engine;
use crate::engine::ec::sign as ec_sign;
use crate::error::{fail_because, Error, Result};
use crate::mechanism::ec_params::{bits2int, Curve};
use cryptoki_sys::*;
use std::sync::OnceLock;
use zeroize::Zeroizing;

/// A private key, prepared once per object; ECDSA keys carry their public point's table for
/// the check before release (`ec_check`), made on the first signature.
pub enum PrivateKey {
    P256(p256::ecdsa::SigningKey, LazyTable<p256::NistP256>),
    P384(p384::ecdsa::SigningKey, LazyTable<p384::NistP384>),
    P521(p521::ecdsa::SigningKey, LazyTable<p521::NistP521>),
    /// With its public key's table for the check before release, made on the first
    /// signature (None if the key's encoding is not one the table takes: then the crate's
    /// verification checks).
    Ed25519(
        ed25519_dalek::SigningKey,
        OnceLock<Option<ed25519_engine::KeyTable>>,
    ),
    /// Boxed: an Ed448 key is twice the size of the others.
    Ed448(Box<ed448_goldilocks::SigningKey>),
}

/// A public key: a point checked to be on its curve and not the identity (with its table for
/// `ec_check`, made on the first verification).
#[derive(Clone)]
pub enum PublicKey {
    P256(p256::ecdsa::VerifyingKey, LazyTable<p256::NistP256>),
    P384(p384::ecdsa::VerifyingKey, LazyTable<p384::NistP384>),
    P521(p521::ecdsa::VerifyingKey, LazyTable<p521::NistP521>),
    Ed25519(ed25519_dalek::VerifyingKey),
    Ed448(ed448_goldilocks::VerifyingKey),
}

fn invalid<T>(what: impl std::fmt::Display) -> Result<T> {
    fail_because(CKR_ATTRIBUTE_VALUE_INVALID, what)
}

/// `invalid` as the error alone, for `map_err`.
fn invalid_err(what: impl std::fmt::Display) -> Error {
    invalid::<()>(what).unwrap_err()
}

/// Runs `$body` with `$k` bound to the curve-specific key of `$key` (a `PrivateKey` or
/// `PublicKey`), for the three Weierstrass curves alike; `$ed` handles Ed25519 and Ed448 (whose
/// keys have `to_bytes` alike).
macro_rules! weierstrass {
    ($key:expr, $ty:ident, $k:ident => $body:expr, $e:ident => $ed:expr) => {
        match $key {
            $ty::P256($k, _) => $body,
            $ty::P384($k, _) => $body,
            $ty::P521($k, _) => $body,
            $ty::Ed25519($e, ..) => $ed,
            $ty::Ed448($e) => $ed,
        }
    };
}

/// ECDSA over `z` (bits2int of the caller's `$hash`, which the nonce takes whole) with signing
/// key `$k` of curve module `$c` (`ec_sign`), checked before release by the same full ECDSA
/// verification `C_Verify` runs (`ecdsa_verify!`, over the key's table `$t`). A macro:
/// `SigningKey`'s bounds are long to name.
/// The nonce is hedged: RFC 6979 with fresh random input (its section 3.6). A purely
/// deterministic nonce gives a fault attacker two signatures under one k whenever one faulty
/// signature escapes; a random one alone rests on the RNG. Both together need both to fail.
macro_rules! ecdsa_sign_checked {
    ($c:ident, $k:expr, $t:expr, $z:expr, $hash:expr) => {{
        // The fresh input, as `sign_prehash_with_rng` draws it (the scalar's length), and the
        // blinding factors' bytes (`ec_sign::Blind`), in one call.
        let len = $c::FieldBytes::default().len();
        let mut fresh = Zeroizing::new(vec![0u8; len + std::mem::size_of::<ec_sign::Blind>()]);
        getrandom::fill(&mut fresh).map_err(|_| Error(CKR_FUNCTION_FAILED))?;
        let (ad, blind) = fresh.split_at(len);
        let blind: &ec_sign::Blind = blind.try_into().expect("the blinding bytes' length");
        let (sig, s_inv): ($c::ecdsa::Signature, _) =
            ec_sign::sign($k.as_nonzero_scalar(), $z, $hash, ad, blind);
        release_checked(sig.to_bytes().to_vec(), |s| {
            ecdsa_verify!($c, $k.verifying_key(), $t, $z, s, Some(&s_inv)).map_err(|_| ())
        })
    }};
}

/// Checks raw r || s `$sig` over `$z` with verifying key `$k` (table `$t`) of curve module `$c`:
/// `CKR_SIGNATURE_INVALID` unless it verifies.
/// `$s_inv`: the signer's s⁻¹ for the check before release (`ec_check::verify_hinted`), or None.
macro_rules! ecdsa_verify {
    ($c:ident, $k:expr, $t:expr, $z:expr, $sig:expr, $s_inv:expr) => {{
        // r and s must each be in [1, n-1]: from_slice refuses the rest.
        match $c::ecdsa::Signature::from_slice($sig) {
            Ok(s) if ec_check::verify_hinted($t.get($k.as_affine()), $z, &s, $s_inv) => Ok(()),
            _ => Err(Error(CKR_SIGNATURE_INVALID)),
        }
    }};
}

/// The check before release (`mechanism::release_checked`) of EC and EdDSA signatures.
pub fn release_checked(
    sig: Vec<u8>,
    verify: impl FnOnce(&[u8]) -> std::result::Result<(), ()>,
) -> Result<Vec<u8>> {
    crate::mechanism::release_checked("EC", sig, verify)
}

/// A big-endian scalar of any length up to the curve's, left-padded to it.
fn pad_scalar(curve: Curve, v: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
    let n = curve.scalar_len();
    let first = v.iter().position(|&b| b != 0).unwrap_or(v.len());
    let v = &v[first..];
    if v.len() > n {
        return invalid(format!("a {} private value is at most {n} bytes", curve.name()));
    }
    let mut out = Zeroizing::new(vec![0u8; n]);
    out[n - v.len()..].copy_from_slice(v);
    Ok(out)
}

impl PrivateKey {
    /// The key of `CKA_VALUE` on `curve`: a scalar in [1, n-1] (big-endian, leading zeros
    /// optional), or the RFC 8032 private key of Ed25519 (32 bytes) or Ed448 (57 bytes).
    pub fn from_value(curve: Curve, value: &[u8]) -> Result<Self> {
        let out_of_range = |_| {
            invalid_err(format!(
                "the private value is not a {} scalar in [1, n-1]",
                curve.name()
            ))
        };
        let v = || pad_scalar(curve, value);
        Ok(match curve {
            Curve::P256 => PrivateKey::P256(
                p256::ecdsa::SigningKey::from_slice(&v()?).map_err(out_of_range)?,
                LazyTable::new(),
            ),
            Curve::P384 => PrivateKey::P384(
                p384::ecdsa::SigningKey::from_slice(&v()?).map_err(out_of_range)?,
                LazyTable::new(),
            ),
            Curve::P521 => PrivateKey::P521(
                p521::ecdsa::SigningKey::from_slice(&v()?).map_err(out_of_range)?,
                LazyTable::new(),
            ),
            Curve::Ed25519 => PrivateKey::Ed25519(eddsa::signing_key(value)?, OnceLock::new()),
            Curve::Ed448 => PrivateKey::Ed448(Box::new(ed448::signing_key(value)?)),
        })
    }

    /// A new key from the operating system's generator, pairwise-tested before it is returned.
    pub fn generate(curve: Curve) -> Result<Self> {
        let key = loop {
            let mut v = Zeroizing::new(vec![0u8; curve.scalar_len()]);
            getrandom::fill(&mut v).map_err(|_| Error(CKR_FUNCTION_FAILED))?;
            if curve == Curve::P521 {
                // 521 bits: without the mask nearly every draw would be above n.
                v[0] &= 0x01;
            }
            // A draw of zero or >= n (probability about 2^-32 on P-256, far less elsewhere)
            // is drawn again: rejection keeps the scalar uniform.
            if let Ok(k) = Self::from_value(curve, &v) {
                break k;
            }
        };
        key.pairwise_test()?;
        Ok(key)
    }

    /// FIPS 140-3's pairwise consistency test: a signature made with the new private key
    /// verifies with its public key (`sign` checks it before release).
    fn pairwise_test(&self) -> Result<()> {
        let probe = [0x5au8; 32];
        self.sign(&probe).map(|_| ()).inspect_err(|_| {
            log::error!("EC key generation: the pairwise consistency test failed");
        })
    }

    pub fn curve(&self) -> Curve {
        match self {
            PrivateKey::P256(..) => Curve::P256,
            PrivateKey::P384(..) => Curve::P384,
            PrivateKey::P521(..) => Curve::P521,
            PrivateKey::Ed25519(..) => Curve::Ed25519,
            PrivateKey::Ed448(_) => Curve::Ed448,
        }
    }

    /// `CKA_VALUE`: the scalar, big-endian at the order's length (the seed for EdDSA keys).
    pub fn value(&self) -> Zeroizing<Vec<u8>> {
        weierstrass!(self, PrivateKey, k => Zeroizing::new(k.to_bytes().to_vec()),
            e => Zeroizing::new(e.to_bytes().to_vec()))
    }

    pub fn public(&self) -> PublicKey {
        match self {
            PrivateKey::P256(k, t) => PublicKey::P256(*k.verifying_key(), t.clone()),
            PrivateKey::P384(k, t) => PublicKey::P384(*k.verifying_key(), t.clone()),
            PrivateKey::P521(k, t) => PublicKey::P521(*k.verifying_key(), t.clone()),
            PrivateKey::Ed25519(k, _) => PublicKey::Ed25519(k.verifying_key()),
            PrivateKey::Ed448(k) => PublicKey::Ed448(k.verifying_key()),
        }
    }

    pub fn signature_len(&self) -> usize {
        self.curve().signature_len()
    }

    /// ECDH (SEC 1 §3.3.1; the NIST curves have cofactor 1): the x-coordinate of d·Q, the
    /// value `CKM_ECDH1_DERIVE` with `CKD_NULL` derives from. The peer's point was checked to
    /// be on the curve when `peer` was made.
    pub fn ecdh(&self, peer: &PublicKey) -> Result<Zeroizing<Vec<u8>>> {
        let x = match (self, peer) {
            (PrivateKey::P256(k, _), PublicKey::P256(q, _)) => {
                p256::ecdh::diffie_hellman(k.as_nonzero_scalar(), q.as_affine())
                    .raw_secret_bytes()
                    .to_vec()
            }
            (PrivateKey::P384(k, _), PublicKey::P384(q, _)) => {
                p384::ecdh::diffie_hellman(k.as_nonzero_scalar(), q.as_affine())
                    .raw_secret_bytes()
                    .to_vec()
            }
            (PrivateKey::P521(k, _), PublicKey::P521(q, _)) => {
                p521::ecdh::diffie_hellman(k.as_nonzero_scalar(), q.as_affine())
                    .raw_secret_bytes()
                    .to_vec()
            }
            _ => {
                return fail_because(
                    CKR_MECHANISM_PARAM_INVALID,
                    "CKM_ECDH1_DERIVE: the public data is not a point of the base key's curve",
                )
            }
        };
        Ok(Zeroizing::new(x))
    }

    /// The signature of `input`: for ECDSA the hash (any length, bits2int'ed), for EdDSA
    /// the message. Raw r || s with each half the order's length; verified before release.
    pub fn sign(&self, input: &[u8]) -> Result<Vec<u8>> {
        self.sign_with_context(input, &[])
    }

    /// `sign` with an EdDSA context (`CK_EDDSA_PARAMS`): Ed448 signs it (RFC 8032's dom4);
    /// the other curves take none (`eddsa::check_context` refused one when the operation
    /// started).
    pub fn sign_with_context(&self, input: &[u8], context: &[u8]) -> Result<Vec<u8>> {
        // bits2int is ECDSA's: an EdDSA message is not a hash (and Ed448's order, 446 bits in
        // 57 bytes, is not a length bits2int handles).
        let z = if self.curve().is_edwards() {
            Vec::new()
        } else {
            bits2int(input, self.curve())
        };
        match self {
            PrivateKey::P256(k, t) => ecdsa_sign_checked!(p256, k, t, &z, input),
            PrivateKey::P384(k, t) => ecdsa_sign_checked!(p384, k, t, &z, input),
            PrivateKey::P521(k, t) => ecdsa_sign_checked!(p521, k, t, &z, input),
            PrivateKey::Ed25519(e, t) => eddsa::sign_checked(e, t, input),
            PrivateKey::Ed448(e) => ed448::sign_checked(e, context, input),
        }
    }
}

impl PublicKey {
    /// The key of a raw point (SEC1 uncompressed or compressed; RFC 8032 for EdDSA):
    /// refused unless it is on the curve and not the identity.
    pub fn from_point(curve: Curve, raw: &[u8]) -> Result<Self> {
        let off_curve = |_| invalid_err(format!("CKA_EC_POINT is not a point on {}", curve.name()));
        Ok(match curve {
            Curve::P256 => PublicKey::P256(
                p256::ecdsa::VerifyingKey::from_sec1_bytes(raw).map_err(off_curve)?,
                LazyTable::new(),
            ),
            Curve::P384 => PublicKey::P384(
                p384::ecdsa::VerifyingKey::from_sec1_bytes(raw).map_err(off_curve)?,
                LazyTable::new(),
            ),
            Curve::P521 => PublicKey::P521(
                p521::ecdsa::VerifyingKey::from_sec1_bytes(raw).map_err(off_curve)?,
                LazyTable::new(),
            ),
            Curve::Ed25519 => PublicKey::Ed25519(eddsa::verifying_key(raw)?),
            Curve::Ed448 => PublicKey::Ed448(ed448::verifying_key(raw)?),
        })
    }

    pub fn curve(&self) -> Curve {
        match self {
            PublicKey::P256(..) => Curve::P256,
            PublicKey::P384(..) => Curve::P384,
            PublicKey::P521(..) => Curve::P521,
            PublicKey::Ed25519(_) => Curve::Ed25519,
            PublicKey::Ed448(_) => Curve::Ed448,
        }
    }

    /// The raw point, uncompressed (what `CKA_EC_POINT` wraps).
    pub fn point(&self) -> Vec<u8> {
        weierstrass!(self, PublicKey, k => k.to_sec1_point(false).as_bytes().to_vec(),
            e => e.to_bytes().to_vec())
    }

    pub fn signature_len(&self) -> usize {
        self.curve().signature_len()
    }

    /// Checks `sig` over `input` (the hash for ECDSA, the message for EdDSA).
    pub fn verify(&self, input: &[u8], sig: &[u8]) -> Result<()> {
        self.verify_with_context(input, &[], sig)
    }

    /// `verify` with an EdDSA context (Ed448 only, as in `PrivateKey::sign_with_context`).
    pub fn verify_with_context(&self, input: &[u8], context: &[u8], sig: &[u8]) -> Result<()> {
        if sig.len() != self.signature_len() {
            return fail_because(
                CKR_SIGNATURE_LEN_RANGE,
                format!(
                    "a {} signature is {} bytes, not {}",
                    self.curve().name(),
                    self.signature_len(),
                    sig.len()
                ),
            );
        }
        // bits2int is ECDSA's: an EdDSA message is not a hash (and Ed448's order, 446 bits in
        // 57 bytes, is not a length bits2int handles).
        let z = if self.curve().is_edwards() {
            Vec::new()
        } else {
            bits2int(input, self.curve())
        };
        match self {
            PublicKey::P256(k, t) => ecdsa_verify!(p256, k, t, &z, sig, None),
            PublicKey::P384(k, t) => ecdsa_verify!(p384, k, t, &z, sig, None),
            PublicKey::P521(k, t) => ecdsa_verify!(p521, k, t, &z, sig, None),
            PublicKey::Ed25519(e) => eddsa::verify(e, input, sig),
            PublicKey::Ed448(e) => ed448::verify(e, context, input, sig),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_curve_signs_and_verifies_and_refuses_a_changed_signature() {
        for c in [
            Curve::P256,
            Curve::P384,
            Curve::P521,
            Curve::Ed25519,
            Curve::Ed448,
        ] {
            let k = PrivateKey::generate(c).unwrap();
            let again = PrivateKey::from_value(c, &k.value()).unwrap();
            assert_eq!(again.public().point(), k.public().point());
            let sig = k.sign(b"a hash of some kind").unwrap();
            assert_eq!(sig.len(), c.signature_len());
            let pk = PublicKey::from_point(c, &k.public().point()).unwrap();
            pk.verify(b"a hash of some kind", &sig).unwrap();
            let mut bad = sig.clone();
            bad[5] ^= 1;
            assert_eq!(
                pk.verify(b"a hash of some kind", &bad).unwrap_err().0,
                CKR_SIGNATURE_INVALID
            );
            assert_eq!(
                pk.verify(b"a hash of some kind", &sig[1..]).unwrap_err().0,
                CKR_SIGNATURE_LEN_RANGE
            );
        }
    }

    #[test]
    fn scalars_out_of_range_and_points_off_the_curve_are_refused() {
        // n of P-256 itself, zero, and a value longer than the order.
        let n = hex_bytes("ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551");
        for v in [&n[..], &[0u8; 32][..], &[1u8; 33][..]] {
            assert_eq!(
                PrivateKey::from_value(Curve::P256, v).err().unwrap().0,
                CKR_ATTRIBUTE_VALUE_INVALID
            );
        }
        // A short scalar is left-padded.
        PrivateKey::from_value(Curve::P256, &[7]).unwrap();
        let mut p = PrivateKey::generate(Curve::P256).unwrap().public().point();
        p[40] ^= 1;
        assert_eq!(
            PublicKey::from_point(Curve::P256, &p).err().unwrap().0,
            CKR_ATTRIBUTE_VALUE_INVALID
        );
    }

    /// r or s zero, equal to n or above it: refused before any arithmetic; n - 1 is in range
    /// and simply wrong. (r, n - s) of a good signature verifies: these curves have no low-s rule.
    #[test]
    fn ecdsa_verify_refuses_r_and_s_out_of_range() {
        let n256 = hex_bytes("ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551");
        let n384 = hex_bytes(concat!(
            "ffffffffffffffffffffffffffffffffffffffffffffffffc7634d81f4372ddf",
            "581a0db248b0a77aecec196accc52973"
        ));
        for (c, n) in [(Curve::P256, n256), (Curve::P384, n384)] {
            let k = PrivateKey::generate(c).unwrap();
            let pk = k.public();
            let z = [0x11u8; 32];
            let sig = k.sign(&z).unwrap();
            pk.verify(&z, &sig).unwrap();
            let half = sig.len() / 2;
            let mut n_plus_1 = n.clone();
            *n_plus_1.last_mut().unwrap() += 1;
            let mut n_minus_1 = n.clone();
            *n_minus_1.last_mut().unwrap() -= 1;
            let zero = vec![0u8; half];
            let ones = vec![0xffu8; half];
            for bad in [&zero, &n, &n_plus_1, &ones, &n_minus_1] {
                for which in 0..2 {
                    let mut v = sig.clone();
                    v[which * half..(which + 1) * half].copy_from_slice(bad);
                    assert_eq!(pk.verify(&z, &v).unwrap_err().0, CKR_SIGNATURE_INVALID);
                }
            }
            // s' = n - s.
            let s = &sig[half..];
            let mut high = vec![0u8; half];
            let mut borrow = 0i16;
            for i in (0..half).rev() {
                let d = i16::from(n[i]) - i16::from(s[i]) - borrow;
                borrow = i16::from(d < 0);
                high[i] = (d + 256 * borrow) as u8;
            }
            let mut v = sig[..half].to_vec();
            v.extend_from_slice(&high);
            pk.verify(&z, &v).unwrap();
        }
    }

    #[test]
    fn a_signature_that_does_not_verify_is_not_released() {
        let e = release_checked(vec![1, 2, 3], |_| Err(())).unwrap_err();
        assert_eq!(e.0, CKR_DEVICE_ERROR);
        assert_eq!(release_checked(vec![1, 2, 3], |_| Ok(())).unwrap(), vec![1, 2, 3]);
    }

    /// Log lines of this test process (each test runs in its own process under nextest).
    struct Capture(parking_lot::Mutex<Vec<String>>);
    impl log::Log for Capture {
        fn enabled(&self, _: &log::Metadata) -> bool {
            true
        }
        fn log(&self, r: &log::Record) {
            self.0.lock().push(format!("{}: {}", r.level(), r.args()));
        }
        fn flush(&self) {}
    }
    static CAPTURE: Capture = Capture(parking_lot::Mutex::new(Vec::new()));

    /// The fault table: a bit of k flipped after R, of R, of s or of d, on every ECDSA curve;
    /// each time the signature is withheld (CKR_DEVICE_ERROR) with an error log line, and the
    /// next signature, without a fault, is released and verifies.
    #[test]
    fn a_faulty_ecdsa_signature_is_withheld_on_every_curve() {
        use crate::engine::ec::sign::fault::{Fault, NEXT};
        log::set_logger(&CAPTURE).expect("run under nextest: one test per process");
        log::set_max_level(log::LevelFilter::Error);
        let hash = [0x5au8; 32];
        for c in [Curve::P256, Curve::P384, Curve::P521] {
            let k = PrivateKey::generate(c).unwrap();
            let pk = k.public();
            for fault in [Fault::NonceAfterR, Fault::R, Fault::S, Fault::Key] {
                CAPTURE.0.lock().clear();
                NEXT.with(|f| f.set(Some(fault)));
                let got = k.sign(&hash);
                assert_eq!(
                    got.as_ref().map_err(|e| e.0),
                    Err(CKR_DEVICE_ERROR),
                    "{c:?} {fault:?}: a faulty signature came out"
                );
                assert!(
                    NEXT.with(|f| f.get()).is_none(),
                    "{c:?} {fault:?}: the fault was not applied"
                );
                let lines = CAPTURE.0.lock().clone();
                assert!(
                    lines
                        .iter()
                        .any(|l| l.starts_with("ERROR: EC signature failed verification")),
                    "{c:?} {fault:?}: no log line, got {lines:?}"
                );
                let sig = k.sign(&hash).unwrap();
                pk.verify(&hash, &sig).unwrap();
            }
        }
    }

    fn hex_bytes(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }
}
