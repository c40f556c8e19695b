//! The encodings of elliptic-curve keys in PKCS#11 attributes, and nothing else: which curves
//! the token knows, `CKA_EC_PARAMS` (the named-curve OID, or the PKCS#11 3.0 printable-string
//! curve name) parsed and normalised to the OID, `CKA_EC_POINT` as the DER OCTET STRING that
//! OpenSSL's pkcs11-provider, NSS, Java and OpenSC read (raw points accepted on input), and the
//! SubjectPublicKeyInfo of `CKA_PUBLIC_KEY_INFO`. No arithmetic here (`ec`, `eddsa`).

use crate::error::{fail_because, Result};
use cryptoki_sys::*;

/// A curve the token has keys on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Curve {
    P256,
    P384,
    P521,
    Ed25519,
    Ed448,
}

/// DER of each curve's OID (the named-curve form of `CKA_EC_PARAMS`), and the names the
/// printable-string form may use (PKCS#11 3.0 §2.3.3; the OpenSSL and RFC 5480 aliases too,
/// because applications pass what their library calls the curve).
const CURVES: &[(Curve, &[u8], &[&str])] = &[
    (
        Curve::P256,
        &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07],
        &["prime256v1", "secp256r1", "P-256", "nistp256"],
    ),
    (
        Curve::P384,
        &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22],
        &["secp384r1", "P-384", "nistp384"],
    ),
    (
        Curve::P521,
        &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23],
        &["secp521r1", "P-521", "nistp521"],
    ),
    (
        Curve::Ed25519,
        &[0x06, 0x03, 0x2b, 0x65, 0x70],
        &["edwards25519", "ed25519", "Ed25519"],
    ),
    // id-Ed448 (RFC 8410), 1.3.101.113; "edwards448" is PKCS#11 3.0's name.
    (
        Curve::Ed448,
        &[0x06, 0x03, 0x2b, 0x65, 0x71],
        &["edwards448", "ed448", "Ed448"],
    ),
];

/// id-ecPublicKey (1.2.840.10045.2.1), the SPKI algorithm of every Weierstrass curve.
const EC_PUBLIC_KEY_OID: &[u8] = &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];

const TAG_OID: u8 = 0x06;
const TAG_OCTET_STRING: u8 = 0x04;
const TAG_PRINTABLE_STRING: u8 = 0x13;
const TAG_BIT_STRING: u8 = 0x03;
const TAG_SEQUENCE: u8 = 0x30;

impl Curve {
    /// The key type whose keys live on this curve.
    pub fn key_type(self) -> CK_KEY_TYPE {
        match self {
            Curve::Ed25519 | Curve::Ed448 => CKK_EC_EDWARDS,
            _ => CKK_EC,
        }
    }

    /// `CKA_EC_PARAMS` as the token stores and returns it: the OID's DER.
    pub fn oid_der(self) -> &'static [u8] {
        CURVES
            .iter()
            .find(|(c, _, _)| *c == self)
            .map(|(_, d, _)| *d)
            .unwrap_or(&[])
    }

    pub fn name(self) -> &'static str {
        CURVES
            .iter()
            .find(|(c, _, _)| *c == self)
            .map(|(_, _, n)| n[0])
            .unwrap_or("?")
    }

    /// Bytes of a scalar (and of the order n): the length of each half of an ECDSA signature.
    /// For the Edwards curves, the length of the RFC 8032 private key and of each half of a
    /// signature (Ed448's are 57 bytes: its scalars are encoded with a spare byte).
    pub fn scalar_len(self) -> usize {
        match self {
            Curve::P256 | Curve::Ed25519 => 32,
            Curve::P384 => 48,
            Curve::Ed448 => 57,
            Curve::P521 => 66,
        }
    }

    /// Whether the curve's keys sign with EdDSA (`CKK_EC_EDWARDS`) rather than ECDSA.
    pub fn is_edwards(self) -> bool {
        matches!(self, Curve::Ed25519 | Curve::Ed448)
    }

    /// Bits of the order n, FIPS 186's `qlen`, for bits2int.
    pub fn order_bits(self) -> usize {
        match self {
            Curve::P256 => 256,
            Curve::P384 => 384,
            Curve::P521 => 521,
            Curve::Ed25519 => 253,
            Curve::Ed448 => 446,
        }
    }

    /// The key size `C_GetMechanismInfo` counts in: bits of the field.
    pub fn field_bits(self) -> usize {
        match self {
            Curve::P256 => 256,
            Curve::P384 => 384,
            Curve::P521 => 521,
            Curve::Ed25519 => 255,
            Curve::Ed448 => 448,
        }
    }

    /// Length of the public point as raw bytes: uncompressed SEC1 (0x04 || X || Y), or the
    /// RFC 8032 encoding for the Edwards curves (32 bytes for Ed25519, 57 for Ed448).
    pub fn point_len(self) -> usize {
        match self {
            Curve::Ed25519 | Curve::Ed448 => self.scalar_len(),
            c => 1 + 2 * c.scalar_len(),
        }
    }

    pub fn signature_len(self) -> usize {
        2 * self.scalar_len()
    }
}

/// A DER length prefix, for contents below 64 KiB (the largest here, a P-521 SPKI, is 158
/// bytes).
fn der_len(n: usize, out: &mut Vec<u8>) {
    match n {
        0..=0x7f => out.push(n as u8),
        0x80..=0xff => out.extend([0x81, n as u8]),
        _ => out.extend([0x82, (n >> 8) as u8, n as u8]),
    }
}

fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    der_len(content.len(), &mut out);
    out.extend_from_slice(content);
    out
}

/// One whole DER TLV of tag `tag` in `b` (nothing after it), its content. Only the definite
/// minimal lengths DER allows are accepted.
fn der_unwrap(tag: u8, b: &[u8]) -> Option<&[u8]> {
    let (&t, rest) = b.split_first()?;
    if t != tag {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = match first {
        0..=0x7f => (first as usize, rest),
        0x81 => {
            let (&l, rest) = rest.split_first()?;
            if l < 0x80 {
                return None;
            }
            (l as usize, rest)
        }
        0x82 => {
            let l = u16::from_be_bytes(rest.get(..2)?.try_into().ok()?) as usize;
            if l < 0x100 {
                return None;
            }
            (l, &rest[2..])
        }
        _ => return None,
    };
    (rest.len() == len).then_some(rest)
}

/// The curve `CKA_EC_PARAMS` names: the named-curve OID's DER or a printable-string name.
/// A well-formed OID or name of another curve, or explicit curve parameters, is
/// `CKR_CURVE_NOT_SUPPORTED`; anything else `CKR_ATTRIBUTE_VALUE_INVALID`.
pub fn parse_ec_params(v: &[u8]) -> Result<Curve> {
    if let Some((c, _, _)) = CURVES.iter().find(|(_, d, _)| *d == v) {
        return Ok(*c);
    }
    if let Some(name) = der_unwrap(TAG_PRINTABLE_STRING, v) {
        let found = CURVES
            .iter()
            .find(|(_, _, names)| names.iter().any(|n| n.as_bytes() == name));
        return match found {
            Some((c, _, _)) => Ok(*c),
            None => fail_because(
                CKR_CURVE_NOT_SUPPORTED,
                format!(
                    "CKA_EC_PARAMS names curve {:?}; supported: P-256, P-384, P-521, edwards25519, edwards448",
                    String::from_utf8_lossy(name)
                ),
            ),
        };
    }
    if der_unwrap(TAG_OID, v).is_some_and(|oid| !oid.is_empty()) || der_unwrap(TAG_SEQUENCE, v).is_some() {
        return fail_because(
            CKR_CURVE_NOT_SUPPORTED,
            "CKA_EC_PARAMS names a curve the token does not support (P-256, P-384, P-521, edwards25519, edwards448 by OID or name)",
        );
    }
    fail_because(
        CKR_ATTRIBUTE_VALUE_INVALID,
        "CKA_EC_PARAMS is neither a DER OID nor a DER PrintableString curve name",
    )
}

/// `CKA_EC_POINT` as returned: the raw point wrapped in a DER OCTET STRING.
pub fn wrap_point(raw: &[u8]) -> Vec<u8> {
    der(TAG_OCTET_STRING, raw)
}

/// The raw point of a `CKA_EC_POINT` value: a DER OCTET STRING around the point, or the point
/// itself (some applications and SoftHSM's older versions pass it bare). The two cannot be
/// confused: the DER form is two or three bytes longer than any raw form of the same curve.
/// Compressed SEC1 points (0x02/0x03 || X) are let through for the curve code to expand.
pub fn unwrap_point(curve: Curve, v: &[u8]) -> Result<Vec<u8>> {
    let raw_len_ok = |p: &[u8]| match curve {
        Curve::Ed25519 | Curve::Ed448 => p.len() == curve.point_len(),
        c => {
            (p.len() == c.point_len() && p[0] == 0x04)
                || (p.len() == 1 + c.scalar_len() && matches!(p[0], 0x02 | 0x03))
        }
    };
    if raw_len_ok(v) {
        return Ok(v.to_vec());
    }
    match der_unwrap(TAG_OCTET_STRING, v) {
        Some(inner) if raw_len_ok(inner) => Ok(inner.to_vec()),
        _ => fail_because(
            CKR_ATTRIBUTE_VALUE_INVALID,
            format!(
                "CKA_EC_POINT of {} bytes is not a {} point (raw or DER OCTET STRING)",
                v.len(),
                curve.name()
            ),
        ),
    }
}

/// The SubjectPublicKeyInfo DER of a raw public point (RFC 5480 and RFC 8410).
pub fn public_key_info(curve: Curve, raw_point: &[u8]) -> Vec<u8> {
    let algorithm = match curve {
        Curve::Ed25519 | Curve::Ed448 => der(TAG_SEQUENCE, curve.oid_der()),
        c => der(TAG_SEQUENCE, &[EC_PUBLIC_KEY_OID, c.oid_der()].concat()),
    };
    let mut bits = vec![0u8];
    bits.extend_from_slice(raw_point);
    der(TAG_SEQUENCE, &[algorithm, der(TAG_BIT_STRING, &bits)].concat())
}

/// FIPS 186-5 bits2int of a hash for a curve of order length `qlen` bits, as the big-endian
/// scalar-length bytes ECDSA reduces mod n: a longer hash keeps its leftmost `qlen` bits, a
/// shorter one is left-padded with zeros (PKCS#11 3.0 §2.3.6: "any truncation is done by the
/// token").
pub fn bits2int(hash: &[u8], curve: Curve) -> Vec<u8> {
    let qlen = curve.order_bits();
    let n = curve.scalar_len();
    let mut out = vec![0u8; n];
    if hash.len() * 8 <= qlen {
        out[n - hash.len()..].copy_from_slice(hash);
        return out;
    }
    // Take the first n bytes and drop the bits beyond qlen by a right shift.
    let shift = n * 8 - qlen;
    out.copy_from_slice(&hash[..n]);
    if shift > 0 {
        for i in (0..n).rev() {
            let carry = if i > 0 { out[i - 1] << (8 - shift) } else { 0 };
            out[i] = (out[i] >> shift) | carry;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ec_params_by_oid_and_name_normalise_to_the_oid() {
        for c in [
            Curve::P256,
            Curve::P384,
            Curve::P521,
            Curve::Ed25519,
            Curve::Ed448,
        ] {
            assert_eq!(parse_ec_params(c.oid_der()).unwrap(), c);
        }
        assert_eq!(
            parse_ec_params(&[0x06, 0x03, 0x2b, 0x65, 0x71]).unwrap(),
            Curve::Ed448
        );
        let printable = |s: &str| der(TAG_PRINTABLE_STRING, s.as_bytes());
        assert_eq!(
            parse_ec_params(&printable("edwards25519")).unwrap(),
            Curve::Ed25519
        );
        assert_eq!(parse_ec_params(&printable("edwards448")).unwrap(), Curve::Ed448);
        assert_eq!(parse_ec_params(&printable("prime256v1")).unwrap(), Curve::P256);
        assert_eq!(parse_ec_params(&printable("secp384r1")).unwrap(), Curve::P384);
        assert_eq!(parse_ec_params(&printable("secp521r1")).unwrap(), Curve::P521);
        assert_eq!(Curve::P256.oid_der()[0], TAG_OID);
    }

    #[test]
    fn unknown_curves_and_garbage_are_told_apart() {
        let secp256k1 = [0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x0a];
        // X448 is a Montgomery curve: no signatures, not a key the token holds.
        let curve448 = der(TAG_PRINTABLE_STRING, b"curve448");
        let explicit = der(TAG_SEQUENCE, &[0x02, 0x01, 0x01]);
        for v in [&secp256k1[..], &curve448, &explicit] {
            assert_eq!(
                parse_ec_params(v).unwrap_err().0,
                CKR_CURVE_NOT_SUPPORTED,
                "{v:02x?}"
            );
        }
        let truncated = &Curve::P256.oid_der()[..5];
        for v in [&[][..], b"P-256", &[0x06, 0x00], truncated, &[0x13, 0x05, b'a']] {
            assert_eq!(
                parse_ec_params(v).unwrap_err().0,
                CKR_ATTRIBUTE_VALUE_INVALID,
                "{v:02x?}"
            );
        }
    }

    #[test]
    fn ec_point_wraps_and_unwraps_raw_or_der() {
        let mut raw = vec![0x04];
        raw.extend([7u8; 64]);
        let wrapped = wrap_point(&raw);
        assert_eq!(&wrapped[..3], &[0x04, 0x41, 0x04]);
        assert_eq!(unwrap_point(Curve::P256, &wrapped).unwrap(), raw);
        assert_eq!(unwrap_point(Curve::P256, &raw).unwrap(), raw);
        // P-521's point needs the long length form.
        let mut raw521 = vec![0x04];
        raw521.extend([9u8; 132]);
        let w = wrap_point(&raw521);
        assert_eq!(&w[..4], &[0x04, 0x81, 0x85, 0x04]);
        assert_eq!(unwrap_point(Curve::P521, &w).unwrap(), raw521);
        // Ed25519: 32 bytes, wrapped or not.
        let ed = [0x04u8; 32];
        assert_eq!(unwrap_point(Curve::Ed25519, &wrap_point(&ed)).unwrap(), ed);
        assert_eq!(unwrap_point(Curve::Ed25519, &ed).unwrap(), ed);
        // Ed448: 57 bytes, wrapped or not; an Ed25519-sized point is not one.
        let ed448 = [0x04u8; 57];
        assert_eq!(unwrap_point(Curve::Ed448, &wrap_point(&ed448)).unwrap(), ed448);
        assert_eq!(unwrap_point(Curve::Ed448, &ed448).unwrap(), ed448);
        assert_eq!(
            unwrap_point(Curve::Ed448, &ed).unwrap_err().0,
            CKR_ATTRIBUTE_VALUE_INVALID
        );
        // Wrong lengths, wrong curve, trailing bytes, non-minimal lengths.
        let mut trailing = wrapped.clone();
        trailing.push(0);
        let long_form = [&[0x04, 0x81, 0x41][..], &raw].concat();
        for (c, v) in [
            (Curve::P384, &wrapped),
            (Curve::P256, &trailing),
            (Curve::P256, &long_form),
            (Curve::P256, &raw[..64].to_vec()),
        ] {
            assert_eq!(unwrap_point(c, v).unwrap_err().0, CKR_ATTRIBUTE_VALUE_INVALID);
        }
    }

    #[test]
    fn bits2int_truncates_to_the_order_length_and_pads_short_hashes() {
        // A shorter hash is its own value, left-padded.
        let h = [0xab; 20];
        let z = bits2int(&h, Curve::P256);
        assert_eq!((&z[..12], &z[12..]), (&[0u8; 12][..], &h[..]));
        // SHA-512 on P-256 keeps the first 32 bytes.
        let h: Vec<u8> = (0..64).collect();
        assert_eq!(bits2int(&h, Curve::P256), h[..32]);
        // On P-521 SHA-512 is shorter than the order: padded, not shifted.
        let z = bits2int(&h, Curve::P521);
        assert_eq!((&z[..2], &z[2..]), (&[0u8; 2][..], &h[..]));
        // A 66-byte input on P-521 keeps its leftmost 521 bits: a right shift by 7.
        let h = [0xffu8; 66];
        let z = bits2int(&h, Curve::P521);
        assert_eq!(z[0], 0x01);
        assert!(z[1..].iter().all(|&b| b == 0xff));
        let mut h = [0u8; 70];
        h[0] = 0x80;
        let z = bits2int(&h, Curve::P521);
        assert_eq!((z[0], z[1]), (0x01, 0x00), "the top bit lands at bit 520");
    }

    #[test]
    fn spki_matches_the_rfc_5480_and_8410_layouts() {
        let ed = public_key_info(Curve::Ed25519, &[1u8; 32]);
        assert_eq!(
            &ed[..12],
            &[0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00]
        );
        // RFC 8410 §4: 30 43 30 05 06 03 2b 65 71 03 3a 00 || 57 bytes.
        let ed448 = public_key_info(Curve::Ed448, &[1u8; 57]);
        assert_eq!(
            &ed448[..12],
            &[0x30, 0x43, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x71, 0x03, 0x3a, 0x00]
        );
        assert_eq!(ed448.len(), 69);
        let mut raw = vec![0x04];
        raw.extend([7u8; 64]);
        let p = public_key_info(Curve::P256, &raw);
        assert_eq!(&p[..4], &[0x30, 0x59, 0x30, 0x13]);
        assert_eq!(p.len(), 91);
    }
}
