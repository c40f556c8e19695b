//! The Ed25519 check before release: the RFC 8032 equation [s]B = R + [k]A for a signature
//! (R, s) the token just made, with k = SHA-512(R ‖ A ‖ M) mod ℓ, computed as [s]B − [k]A and
//! compared with R in its encoding (the check curve25519-dalek's `Verifier` ran before). Every
//! input is public, so the arithmetic may branch and the inversion is variable time.
//!
//! Why not the crate's check: its double-base multiplication runs all 253 doublings on every
//! call (its precomputed Straus too), and was about 60% of a signature with its check through
//! PKCS#11 on the Xeon. The scheme here is P-256's (`engine::ec::p256::check`): each scalar
//! is split into `SEG` segments with tables of the odd multiples of 2^(L·i)·P, so a check
//! runs L = 8 doublings and about 60 mixed additions; B's table is made once per process, A's
//! once per key and cached with it (`PrivateKey::Ed25519`).

use super::point::{to_niels, Ext, Niels};
use crate::engine::ec::wnaf::{segment_multiples, wnaf};
use curve25519_dalek::scalar::Scalar;
use sha2::{Digest, Sha512};
use std::sync::LazyLock;

/// Segments per scalar, as P-256's check.
const SEG: usize = 32;
/// Doublings per check: bits per segment (254: a 253-bit scalar's wNAF may carry one past it).
const L: usize = 254usize.div_ceil(SEG);
/// wNAF width of a key's table: 32 odd multiples per segment, 1,024 points, 120 KiB.
const W_A: usize = 7;
/// wNAF width of the base point's table: 128 per segment, 4,096 points, 480 KiB per process.
const W_B: usize = 9;
const _: () = assert!(W_A <= 15 && W_B <= 15);

/// Odd multiples 1·P, 3·P, … (2^(w−1) − 1)·P of P_i = 2^(L·i)·P for each segment i.
pub struct KeyTable {
    /// 2^(w − 2): entries per segment.
    half: usize,
    w: usize,
    pts: Vec<Niels>,
    /// The public key's encoding (hashed into k).
    encoded: [u8; 32],
}

static B_TABLE: LazyLock<KeyTable> = LazyLock::new(|| {
    let b = curve25519_dalek::constants::ED25519_BASEPOINT_COMPRESSED.to_bytes();
    KeyTable::with_width(&b, W_B).expect("the base point decodes")
});

impl KeyTable {
    /// Bytes of a key's table: what caching a prepared Ed25519 private key costs beyond the
    /// key itself.
    pub const BYTES: usize = SEG * (1 << (W_A - 2)) * std::mem::size_of::<Niels>();

    /// The table of the public key of encoding `a` (a point, as every `VerifyingKey` is).
    pub fn new(a: &[u8; 32]) -> Option<KeyTable> {
        KeyTable::with_width(a, W_A)
    }

    fn with_width(encoded: &[u8; 32], w: usize) -> Option<KeyTable> {
        let p = Ext::decompress(encoded)?;
        let half = 1usize << (w - 2);
        let ext = segment_multiples(p, SEG, L, half, Ext::double, Ext::add);
        Some(KeyTable {
            half,
            w,
            pts: to_niels(&ext),
            encoded: *encoded,
        })
    }

    #[cfg(test)]
    pub(crate) fn bytes_held(&self) -> usize {
        self.pts.len() * std::mem::size_of::<Niels>()
    }
}

/// Whether `sig` (R ‖ s) is an Ed25519 signature of `msg` under the key of table `a`: s
/// canonical (below ℓ) and [s]B − [k]A encoding to R. Variable time.
pub fn verify(a: &KeyTable, msg: &[u8], sig: &[u8; 64]) -> bool {
    let (r, s) = sig.split_at(32);
    let Some(s) = Option::<Scalar>::from(Scalar::from_canonical_bytes(s.try_into().expect("32 bytes")))
    else {
        return false;
    };
    let mut h = Sha512::new();
    h.update(r);
    h.update(a.encoded);
    h.update(msg);
    let k = Scalar::from_bytes_mod_order_wide(&h.finalize().into());
    lincomb(&B_TABLE, &s, a, &k).compress() == r
}

/// [u]B − [v]A by interleaved wNAF over the segment tables.
fn lincomb(b: &KeyTable, u: &Scalar, a: &KeyTable, v: &Scalar) -> Ext {
    let be = |x: &Scalar| {
        let mut bytes = x.to_bytes();
        bytes.reverse();
        bytes
    };
    let mut du = [0i16; SEG * L];
    let mut dv = [0i16; SEG * L];
    wnaf(&be(u), b.w, &mut du);
    wnaf(&be(v), a.w, &mut dv);
    let mut acc = Ext::IDENTITY;
    for t in (0..L).rev() {
        acc = acc.double();
        for i in 0..SEG {
            // B's digits as they are, A's negated.
            for (tab, d, neg) in [(b, du[i * L + t], false), (a, dv[i * L + t], true)] {
                if d != 0 {
                    let q = &tab.pts[i * tab.half + (d.unsigned_abs() as usize >> 1)];
                    acc = acc.add_niels(q, (d < 0) != neg);
                }
            }
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
    use ed25519_dalek::{Signer, SigningKey};

    fn rng_bytes<const N: usize>() -> [u8; N] {
        let mut b = [0u8; N];
        getrandom::fill(&mut b).unwrap();
        b
    }

    fn random_scalar() -> Scalar {
        Scalar::from_bytes_mod_order_wide(&rng_bytes::<64>())
    }

    #[test]
    fn decompression_agrees_with_curve25519_dalek() {
        let b = curve25519_dalek::constants::ED25519_BASEPOINT_COMPRESSED.to_bytes();
        assert_eq!(Ext::decompress(&b).unwrap().compress(), b);
        let mut points = 0;
        for i in 0..400 {
            let mut enc = rng_bytes::<32>();
            // Canonical y only (dalek reduces y mod p silently; these refuse it).
            enc[31] &= if i % 2 == 0 { 0x7f } else { 0xff };
            enc[31] &= 0xef;
            let ours = Ext::decompress(&enc);
            let theirs = CompressedEdwardsY(enc).decompress();
            assert_eq!(ours.is_some(), theirs.is_some(), "{enc:02x?}");
            if let (Some(o), Some(t)) = (ours, theirs) {
                assert_eq!(o.compress(), t.compress().to_bytes());
                points += 1;
            }
        }
        assert!(points > 100, "about half of all y have a point: {points}");
        // y = p + 1 (not canonical) is refused; y = 1 with the sign bit (x = 0, "−0") too.
        let mut y = [0xffu8; 32];
        y[0] = 0xee;
        y[31] = 0x7f;
        assert!(Ext::decompress(&y).is_none());
        let mut one = [0u8; 32];
        one[0] = 1;
        assert!(Ext::decompress(&one).is_some());
        one[31] = 0x80;
        assert!(Ext::decompress(&one).is_none());
    }

    #[test]
    fn double_scalar_multiplication_agrees_with_curve25519_dalek() {
        for i in 0..60 {
            let a_point = EdwardsPoint::mul_base(&random_scalar());
            let table = KeyTable::new(&a_point.compress().to_bytes()).unwrap();
            let (u, v) = match i {
                0 => (Scalar::ZERO, Scalar::ZERO),
                1 => (Scalar::ONE, Scalar::ZERO),
                2 => (Scalar::ZERO, -Scalar::ONE),
                3 => (-Scalar::ONE, -Scalar::ONE),
                _ => (random_scalar(), random_scalar()),
            };
            let ours = lincomb(&B_TABLE, &u, &table, &v).compress();
            let theirs = EdwardsPoint::vartime_double_scalar_mul_basepoint(&-v, &a_point, &u).compress();
            assert_eq!(ours, theirs.to_bytes(), "case {i}");
        }
        // A = B, u = v: the identity, reached through equal and opposite points.
        let b = curve25519_dalek::constants::ED25519_BASEPOINT_COMPRESSED.to_bytes();
        let u = random_scalar();
        let id = lincomb(&B_TABLE, &u, &KeyTable::new(&b).unwrap(), &u).compress();
        assert_eq!(id, EdwardsPoint::default().compress().to_bytes());
    }

    #[test]
    fn verify_accepts_signatures_and_refuses_every_changed_one() {
        for n in 0..20 {
            let key = SigningKey::from_bytes(&rng_bytes::<32>());
            let enc = key.verifying_key().to_bytes();
            let table = KeyTable::new(&enc).unwrap();
            let msg = vec![n as u8; n * 13];
            let sig = key.sign(&msg).to_bytes();
            assert!(verify(&table, &msg, &sig));
            let mut other = msg.clone();
            other.push(1);
            assert!(!verify(&table, &other, &sig));
            for pos in [0, 17, 31, 32, 45, 63] {
                let mut bad = sig;
                bad[pos] ^= 1 << (n % 8);
                assert!(!verify(&table, &msg, &bad), "byte {pos} changed");
            }
            // s + ℓ: the same residue, not canonical.
            let mut l = [0u8; 32];
            l[..16].copy_from_slice(&[
                0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde,
                0x14,
            ]);
            l[31] = 0x10;
            assert_eq!(Scalar::from_bytes_mod_order(l), Scalar::ZERO, "ℓ");
            let mut high = sig;
            let mut c = 0u16;
            for i in 0..32 {
                c += high[32 + i] as u16 + l[i] as u16;
                high[32 + i] = c as u8;
                c >>= 8;
            }
            assert!(!verify(&table, &msg, &high));
            // Another key's table.
            let stranger = SigningKey::from_bytes(&rng_bytes::<32>());
            let t2 = KeyTable::new(&stranger.verifying_key().to_bytes()).unwrap();
            assert!(!verify(&t2, &msg, &sig));
        }
    }

    #[test]
    fn table_sizes() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let t = KeyTable::new(&key.verifying_key().to_bytes()).unwrap();
        assert_eq!(t.bytes_held(), KeyTable::BYTES);
        assert_eq!(KeyTable::BYTES, 120 * 1024);
    }
}
