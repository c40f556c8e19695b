//! The PIN owners' keys: how a PIN opens the token key, and how the token key reaches the
//! owner whose PIN is not at hand when it is replaced (`rotate`).
//!
//! Each owner (SO, user) has a P-256 key pair. Its wrap (format 2, the `so_wrap`/`user_wrap`
//! column) is
//!
//! ```text
//! 2 ‖ salt(16) ‖ memory(4) ‖ passes(4)
//!   ‖ AES-GCM(pin key, d ‖ S)            aad: slot, owner, Q      (92 bytes)
//!   ‖ Q (33, compressed)
//!   ‖ E (33) ‖ AES-GCM(delivery key, K)  aad: slot, owner         (the delivery)
//! ```
//!
//! with `d` the owner's scalar, `Q = d·G`, `K` the token key, `E` an ephemeral point and the
//! delivery key `HKDF-SHA256(salt = S, ikm = ECDH(e, Q), info = slot ‖ owner ‖ E ‖ Q)`.
//! Anyone can encrypt to a public point, so the delivery key also takes `S`, a secret of the
//! token's owners (both keep it under their PIN, and it is never in the store in clear): a
//! writer of the store cannot hand an owner a token key of its own choosing, under which that
//! owner would then seal new keys. `S` is made with the token and kept through rotations.
//!
//! The token row's `owners` column holds `1 ‖ key generation(8) ‖ MAC`, the MAC under a key
//! derived from `K` over slot, epoch, key generation and both owners' points: a rotation
//! encrypts the new key only to a point the current key vouches for, and a process holding a
//! key of an earlier generation knows it is stale (`Sealed::key_replaced`).
//!
//! Format 1 (`crypt::Wrap`, the token key under the PIN key) is still opened: a store written
//! before owner keys has it until that owner's next login upgrades it (`Sealed::upgrade_wrap`).

use super::crypt::{self, KdfParams, Key};
use crate::store::backend::TokenRow;
use crate::store::PinOwner;
use cryptoki_sys::*;
use hmac::{KeyInit, Mac};
use p256::elliptic_curve::ff::PrimeField;
use p256::elliptic_curve::sec1::ToSec1Point;
use p256::{NonZeroScalar, PublicKey};
use zeroize::Zeroizing;

type Hmac = hmac::Hmac<sha2::Sha256>;

pub(super) const V1: u8 = 1;
const V2: u8 = 2;
const HEADER: usize = 1 + 16 + 8;
const POINT: usize = 33;
/// nonce ‖ (d ‖ S) ‖ GCM tag.
const SEALED_OWNER: usize = 12 + 64 + 16;
const OWNERS_VERSION: u8 = 1;

/// The associated data of a wrap: the token's slot and the PIN's owner, so a wrap moved to
/// another token or owner does not open.
pub(super) fn wrap_aad(slot: CK_SLOT_ID, owner: PinOwner) -> Vec<u8> {
    let mut a = b"ferrohsm token key".to_vec();
    a.extend_from_slice(&slot.to_be_bytes());
    a.push(matches!(owner, PinOwner::So) as u8);
    a
}

/// What a PIN opens: the token key and the owners' shared secret.
#[derive(Clone)]
pub(super) struct Opened {
    pub key: Key,
    pub shared: Key,
}

/// The owners' shared secret of a token whose wraps are of format 1: derived from its token
/// key, which no rotation has replaced yet (a rotation needs both wraps upgraded), so both
/// owners derive the same one when each upgrades.
fn shared_of_v1(key: &Key) -> Key {
    super::ledger::derive(key, b"owners' secret")
}

/// A wrap's format (1 or 2); 0 for none known.
pub(super) fn version(wrap: &[u8]) -> u8 {
    match wrap.first() {
        Some(&V1) => V1,
        Some(&V2) if wrap.len() > HEADER + SEALED_OWNER + POINT => V2,
        _ => 0,
    }
}

/// The owner's public point of a format-2 wrap.
pub(super) fn point(wrap: &[u8]) -> Option<&[u8]> {
    (version(wrap) == V2).then(|| &wrap[HEADER + SEALED_OWNER..HEADER + SEALED_OWNER + POINT])
}

/// A new key pair: the scalar and its compressed point.
fn new_pair() -> (NonZeroScalar, [u8; POINT]) {
    loop {
        let k = crypt::random_key();
        if let Ok(d) = p256::SecretKey::from_slice(&k[..]) {
            let q = d.public_key().to_sec1_point(true);
            let mut point = [0u8; POINT];
            point.copy_from_slice(q.as_bytes());
            return (d.to_nonzero_scalar(), point);
        }
    }
}

fn delivery_key(shared: &Key, slot: CK_SLOT_ID, owner: PinOwner, ecdh: &[u8], e: &[u8], q: &[u8]) -> Key {
    let mut extract = <Hmac as KeyInit>::new_from_slice(&shared[..]).expect("any key length");
    extract.update(ecdh);
    let prk = extract.finalize().into_bytes();
    let mut expand = <Hmac as KeyInit>::new_from_slice(&prk).expect("any key length");
    expand.update(b"ferrohsm token key delivery");
    expand.update(&wrap_aad(slot, owner));
    expand.update(e);
    expand.update(q);
    expand.update(&[1]);
    let mut k = Key::default();
    k.copy_from_slice(&expand.finalize().into_bytes());
    k
}

/// E ‖ AES-GCM(delivery key, K): `key` for the owner of point `q`.
fn deliver(key: &Key, shared: &Key, slot: CK_SLOT_ID, owner: PinOwner, q: &[u8]) -> Option<Vec<u8>> {
    let recipient = PublicKey::from_sec1_bytes(q).ok()?;
    let (e, e_point) = new_pair();
    let ecdh = p256::ecdh::diffie_hellman(e, recipient.as_affine());
    let k = delivery_key(shared, slot, owner, ecdh.raw_secret_bytes(), &e_point, q);
    let mut out = e_point.to_vec();
    out.extend_from_slice(&crypt::Cipher::new(&k).seal(&key[..], &wrap_aad(slot, owner)));
    Some(out)
}

fn owner_aad(slot: CK_SLOT_ID, owner: PinOwner, q: &[u8]) -> Vec<u8> {
    let mut a = wrap_aad(slot, owner);
    a.extend_from_slice(b" owner key");
    a.extend_from_slice(q);
    a
}

/// A format-2 wrap for `owner` with a new key pair: its scalar and `shared` under `pin_key`,
/// and `key` delivered to its point.
pub(super) fn new_wrap(
    key: &Key,
    shared: &Key,
    pin_key: &Key,
    salt: &[u8],
    p: KdfParams,
    slot: CK_SLOT_ID,
    owner: PinOwner,
) -> Vec<u8> {
    let (d, q) = new_pair();
    let mut secret = Zeroizing::new(d.to_repr().to_vec());
    secret.extend_from_slice(&shared[..]);
    let mut out = vec![V2];
    out.extend_from_slice(salt);
    out.extend_from_slice(&p.memory_kib.to_be_bytes());
    out.extend_from_slice(&p.passes.to_be_bytes());
    out.extend_from_slice(&crypt::Cipher::new(pin_key).seal(&secret, &owner_aad(slot, owner, &q)));
    out.extend_from_slice(&q);
    out.extend_from_slice(&deliver(key, shared, slot, owner, &q).expect("a point just made"));
    out
}

/// `wrap` (format 2) with `key` delivered to its point in place of the key it held: the owner
/// keeps its key pair and PIN.
pub(super) fn redeliver(
    wrap: &[u8],
    key: &Key,
    shared: &Key,
    slot: CK_SLOT_ID,
    owner: PinOwner,
) -> Option<Vec<u8>> {
    let q = point(wrap)?;
    let mut out = wrap[..HEADER + SEALED_OWNER + POINT].to_vec();
    out.extend_from_slice(&deliver(key, shared, slot, owner, q)?);
    Some(out)
}

/// Opens `wrap` (either format) with the PIN-derived key; `None`: wrong PIN or damaged wrap.
pub(super) fn open(wrap: &[u8], pin_key: &Key, slot: CK_SLOT_ID, owner: PinOwner) -> Option<Opened> {
    if version(wrap) == V1 {
        let key = crypt::Wrap(wrap).open(pin_key, &wrap_aad(slot, owner))?;
        return Some(Opened {
            shared: shared_of_v1(&key),
            key,
        });
    }
    let q = point(wrap)?;
    let sealed = &wrap[HEADER..HEADER + SEALED_OWNER];
    let secret = crypt::Cipher::new(pin_key).open(sealed, &owner_aad(slot, owner, q))?;
    let d = NonZeroScalar::try_from(secret.get(..32)?).ok()?;
    let mut shared = Key::default();
    shared.copy_from_slice(secret.get(32..64)?);
    let delivery = &wrap[HEADER + SEALED_OWNER + POINT..];
    let e = delivery.get(..POINT)?;
    let e_point = PublicKey::from_sec1_bytes(e).ok()?;
    let ecdh = p256::ecdh::diffie_hellman(d, e_point.as_affine());
    let k = delivery_key(&shared, slot, owner, ecdh.raw_secret_bytes(), e, q);
    let plain = crypt::Cipher::new(&k).open(&delivery[POINT..], &wrap_aad(slot, owner))?;
    let mut key = Key::default();
    if plain.len() != 32 {
        return None;
    }
    key.copy_from_slice(&plain);
    Some(Opened { key, shared })
}

/// The key generation the row's `owners` column names, unauthenticated: enough to tell that a
/// key held from another generation is stale. 0 before the token had owner keys.
pub(super) fn key_generation(row: &TokenRow) -> u64 {
    row.owners
        .as_deref()
        .and_then(|o| o.get(1..9))
        .map_or(0, |g| u64::from_be_bytes(g.try_into().expect("8 bytes")))
}

fn owners_mac(key: &Key, slot: CK_SLOT_ID, epoch: u64, generation: u64, row: &TokenRow) -> Hmac {
    let mac_key = super::ledger::derive(key, b"owners' points");
    let mut m = <Hmac as KeyInit>::new_from_slice(&mac_key[..]).expect("any key length");
    m.update(b"ferrohsm owners v1");
    m.update(&slot.to_be_bytes());
    m.update(&epoch.to_be_bytes());
    m.update(&generation.to_be_bytes());
    for wrap in [&row.so.wrap, &row.user.wrap] {
        match wrap.as_deref().and_then(point) {
            Some(q) => {
                m.update(&[1]);
                m.update(q);
            }
            None => m.update(&[0]),
        }
    }
    m
}

/// The `owners` column for `row`'s wraps as they are, under `key`, at key `generation`.
pub(super) fn seal(key: &Key, row: &TokenRow, generation: u64) -> Vec<u8> {
    let mut out = vec![OWNERS_VERSION];
    out.extend_from_slice(&generation.to_be_bytes());
    out.extend_from_slice(
        &owners_mac(key, row.slot_id, row.epoch, generation, row)
            .finalize()
            .into_bytes(),
    );
    out
}

/// Whether `key` vouches for the owners' points of `row` (constant time). A row without the
/// column has no points to vouch for: true when neither wrap has one.
pub(super) fn verify(key: &Key, row: &TokenRow) -> bool {
    let Some(stored) = row.owners.as_deref() else {
        return [&row.so.wrap, &row.user.wrap]
            .iter()
            .all(|w| w.as_deref().and_then(point).is_none());
    };
    stored.first() == Some(&OWNERS_VERSION)
        && stored.len() == 1 + 8 + 32
        && owners_mac(key, row.slot_id, row.epoch, key_generation(row), row)
            .verify_slice(&stored[9..])
            .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: KdfParams = KdfParams {
        memory_kib: 64,
        passes: 1,
    };

    fn wrap_for(key: &Key, shared: &Key, owner: PinOwner) -> (Vec<u8>, Key) {
        let salt = [7u8; 16];
        let pin_key = crypt::derive_pin_key(b"pin", &salt, P).unwrap();
        (new_wrap(key, shared, &pin_key, &salt, P, 3, owner), pin_key)
    }

    #[test]
    fn a_wrap_opens_with_its_pin_key_slot_and_owner_only() {
        let (key, shared) = (crypt::random_key(), crypt::random_key());
        let (w, pin_key) = wrap_for(&key, &shared, PinOwner::User);
        let o = open(&w, &pin_key, 3, PinOwner::User).unwrap();
        assert_eq!((o.key, o.shared), (key.clone(), shared.clone()));
        assert!(open(&w, &crypt::random_key(), 3, PinOwner::User).is_none());
        assert!(open(&w, &pin_key, 4, PinOwner::User).is_none());
        assert!(open(&w, &pin_key, 3, PinOwner::So).is_none());
        // Salt and KDF parameters (bytes 1..HEADER) change the PIN key itself.
        for i in (0..1).chain(HEADER..w.len()) {
            let mut bad = w.clone();
            bad[i] ^= 1;
            assert!(
                open(&bad, &pin_key, 3, PinOwner::User).is_none_or(|o| o.key != key),
                "byte {i}"
            );
        }
    }

    /// A key delivered without the owners' secret (by anyone who reads the public point) does
    /// not open.
    #[test]
    fn a_delivery_needs_the_owners_secret() {
        let (key, shared) = (crypt::random_key(), crypt::random_key());
        let (w, pin_key) = wrap_for(&key, &shared, PinOwner::So);
        let other = crypt::random_key();
        let forged = redeliver(&w, &other, &crypt::random_key(), 3, PinOwner::So).unwrap();
        assert!(open(&forged, &pin_key, 3, PinOwner::So).is_none());
        let real = redeliver(&w, &other, &shared, 3, PinOwner::So).unwrap();
        assert_eq!(open(&real, &pin_key, 3, PinOwner::So).unwrap().key, other);
    }
}
