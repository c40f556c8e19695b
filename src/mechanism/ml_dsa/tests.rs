use super::*;
use crate::mechanism::pq::{PreHash, SignParams};

fn params(hedge: CK_HEDGE_TYPE, context: &[u8]) -> SignParams {
    SignParams {
        hedge,
        context: context.to_vec(),
    }
}

#[test]
fn every_set_signs_verifies_and_binds_context_and_message() {
    for set in [CKP_ML_DSA_44, CKP_ML_DSA_65, CKP_ML_DSA_87] {
        let key = MlDsa.generate(set).unwrap();
        let p = params(CKH_HEDGE_PREFERRED, b"ctx");
        let sig = pq::sign(key.as_ref(), None, &p, b"message").unwrap();
        assert_eq!(sig.len(), key.signature_len());
        let public = key.public();
        assert_eq!(public.value().len(), [1312, 1952, 2592][set as usize - 1]);
        pq::verify(public.as_ref(), None, &p, b"message", &sig).unwrap();
        for (p2, m) in [(params(0, b"ctx2"), &b"message"[..]), (p.clone(), b"messagf")] {
            let e = pq::verify(public.as_ref(), None, &p2, m, &sig).unwrap_err();
            assert_eq!(e.0, CKR_SIGNATURE_INVALID);
        }
        // A pure signature is no pre-hash signature of the same bytes, and the reverse.
        let ph = [0x5a; 32];
        let pure = pq::sign(key.as_ref(), None, &p, &ph).unwrap();
        let hashed = pq::sign(key.as_ref(), Some(PreHash::Sha256), &p, &ph).unwrap();
        pq::verify(public.as_ref(), Some(PreHash::Sha256), &p, &ph, &hashed).unwrap();
        for (prehash, sig) in [(Some(PreHash::Sha256), &pure), (None, &hashed)] {
            let e = pq::verify(public.as_ref(), prehash, &p, &ph, sig).unwrap_err();
            assert_eq!(e.0, CKR_SIGNATURE_INVALID);
        }
    }
}

#[test]
fn deterministic_signatures_repeat_and_hedged_ones_do_not() {
    let key = MlDsa.generate(CKP_ML_DSA_65).unwrap();
    let det = params(CKH_DETERMINISTIC_REQUIRED, b"");
    let a = pq::sign(key.as_ref(), None, &det, b"m").unwrap();
    assert_eq!(a, pq::sign(key.as_ref(), None, &det, b"m").unwrap());
    let hedged = params(CKH_HEDGE_REQUIRED, b"");
    assert_ne!(
        pq::sign(key.as_ref(), None, &hedged, b"m").unwrap(),
        pq::sign(key.as_ref(), None, &hedged, b"m").unwrap()
    );
}

#[test]
fn a_key_is_its_seed_and_the_pkcs8_seed_form_reads_back() {
    let key = MlDsa.generate(CKP_ML_DSA_44).unwrap();
    let material = key.material();
    let seed = &material.iter().find(|(t, _)| *t == CKA_SEED).unwrap().1;
    let value = &material.iter().find(|(t, _)| *t == CKA_VALUE).unwrap().1;
    assert_eq!(value.len(), 2560, "FIPS 204 skEncode of ML-DSA-44");
    let again = MlDsa.private_key(CKP_ML_DSA_44, Some(seed), Some(value)).unwrap();
    assert_eq!(again.public().value(), key.public().value());
    let mut other = value.to_vec();
    other[100] ^= 1;
    let e = MlDsa
        .private_key(CKP_ML_DSA_44, Some(seed), Some(&other))
        .err()
        .unwrap();
    assert_eq!(e.0, CKR_TEMPLATE_INCONSISTENT);
    // Our PKCS#8 writer and the crate's reader agree.
    let der = key.to_pkcs8().unwrap();
    assert_eq!(der.len(), 54);
    let back = MlDsa.read_pkcs8(&der).unwrap();
    assert_eq!(back.parameter_set(), CKP_ML_DSA_44);
    assert_eq!(back.public().value(), key.public().value());
    assert_eq!(
        MlDsa.private_key(7, Some(seed), None).err().unwrap().0,
        CKR_PARAMETER_SET_NOT_SUPPORTED
    );
}

/// A private key whose signatures come out as a glitch would leave them: one bit flipped.
struct Faulty(Box<dyn PrivateKey>);

impl PrivateKey for Faulty {
    fn parameter_set(&self) -> CK_ULONG {
        self.0.parameter_set()
    }
    fn material(&self) -> Vec<(CK_ATTRIBUTE_TYPE, Zeroizing<Vec<u8>>)> {
        self.0.material()
    }
    fn public(&self) -> Arc<dyn PublicKey> {
        self.0.public()
    }
    fn signature_len(&self) -> usize {
        self.0.signature_len()
    }
    fn sign_internal(&self, message: &[&[u8]], hedged: bool) -> Result<Vec<u8>> {
        let mut sig = self.0.sign_internal(message, hedged)?;
        sig[40] ^= 0x10;
        Ok(sig)
    }
    fn to_pkcs8(&self) -> Result<Zeroizing<Vec<u8>>> {
        self.0.to_pkcs8()
    }
}

#[test]
fn a_faulty_signature_is_withheld() {
    let key = Faulty(MlDsa.generate(CKP_ML_DSA_65).unwrap());
    let e = pq::sign(&key, None, &params(CKH_HEDGE_PREFERRED, b""), b"m").unwrap_err();
    assert_eq!(e.0, CKR_DEVICE_ERROR);
}
