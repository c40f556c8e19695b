use super::*;
use crate::mechanism::pq::SignParams;

#[test]
fn fast_sets_sign_verify_and_read_back_from_value_and_pkcs8() {
    for set in [CKP_SLH_DSA_SHA2_128F, CKP_SLH_DSA_SHAKE_128F] {
        let key = SlhDsa.generate(set).unwrap();
        let p = SignParams {
            hedge: CKH_DETERMINISTIC_REQUIRED,
            context: b"c".to_vec(),
        };
        let sig = pq::sign(key.as_ref(), None, &p, b"m").unwrap();
        assert_eq!(sig.len(), 17088, "FIPS 205 Table 2, 128f");
        assert_eq!(
            sig,
            pq::sign(key.as_ref(), None, &p, b"m").unwrap(),
            "deterministic"
        );
        pq::verify(key.public().as_ref(), None, &p, b"m", &sig).unwrap();
        let bad = pq::verify(key.public().as_ref(), None, &SignParams::default(), b"m", &sig);
        assert_eq!(bad.unwrap_err().0, CKR_SIGNATURE_INVALID);
        let value = key.material().remove(0).1;
        assert_eq!(value.len(), 64);
        let again = SlhDsa.private_key(set, None, Some(&value)).unwrap();
        assert_eq!(again.public().value(), key.public().value());
        let back = SlhDsa.read_pkcs8(&key.to_pkcs8().unwrap()).unwrap();
        assert_eq!(back.parameter_set(), set);
        assert_eq!(back.public().value(), key.public().value());
        let mut wrong_root = value.to_vec();
        wrong_root[63] ^= 1;
        let e = SlhDsa.private_key(set, None, Some(&wrong_root)).err().unwrap();
        assert_eq!(e.0, CKR_TEMPLATE_INCONSISTENT);
    }
}
