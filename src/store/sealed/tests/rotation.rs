//! Replacing the token key (`rotate`), on every backend, for each way it happens (the user's
//! and the SO's C_SetPIN, C_InitPIN, `rotate-key`): an old wrap opens nothing current, the
//! other owner keeps everything, a substituted point is refused, a process holding the old
//! key is logged out, and a rotation failing half-way changes nothing.

use super::*;
use crate::store::backend::{transact, RowQuery};
use crate::store::sealed::crypt::Wrap;
use crate::store::sealed::pin::of;

const NEW: &[u8] = b"new-pin-1";
/// Private keys per token, and one public object.
const KEYS: usize = 10;

#[derive(Clone, Copy, Debug)]
enum Kind {
    UserSetPin,
    SoSetPin,
    RotateKey,
    InitPin,
}

const KINDS: [Kind; 4] = [Kind::UserSetPin, Kind::SoSetPin, Kind::RotateKey, Kind::InitPin];

impl Kind {
    /// The owner whose wrap is made again, with its PIN before and after.
    fn changing(self) -> (PinOwner, &'static [u8], &'static [u8]) {
        match self {
            Kind::UserSetPin | Kind::InitPin => (PinOwner::User, USER, NEW),
            Kind::SoSetPin => (PinOwner::So, SO, NEW),
            Kind::RotateKey => (PinOwner::User, USER, USER),
        }
    }

    /// The owner who keeps its key pair and PIN.
    fn other(self) -> (PinOwner, &'static [u8]) {
        match self.changing().0 {
            PinOwner::User => (PinOwner::So, SO),
            PinOwner::So => (PinOwner::User, USER),
        }
    }

    /// The (SO, user) PINs after it.
    fn pins_after(self) -> (&'static [u8], &'static [u8]) {
        match self.changing() {
            (PinOwner::So, _, new) => (new, USER),
            (PinOwner::User, _, new) => (SO, new),
        }
    }

    fn run(self, s: &Sealed, slot: CK_SLOT_ID) -> Result<()> {
        match self {
            Kind::UserSetPin => s.set_pin(slot, PinOwner::User, USER, NEW),
            Kind::SoSetPin => s.set_pin(slot, PinOwner::So, SO, NEW),
            Kind::RotateKey => s.rotate_key(slot, PinOwner::User, USER),
            Kind::InitPin => {
                s.login(slot, PinOwner::So, SO)?;
                s.init_pin(slot, NEW)
            }
        }
    }
}

/// A new token in `slot` with `KEYS` private keys and a public object; logged out.
fn filled(s: &Sealed, slot: CK_SLOT_ID) {
    s.init_token(slot, SO, &[b'r'; 32], Some(USER)).unwrap();
    s.login(slot, PinOwner::User, USER).unwrap();
    let mut records: Vec<ObjectRecord> = (0..KEYS as u8).map(|i| private_key(&[i], b"rotated")).collect();
    records.push(public_data(b"readme"));
    s.create(slot, &records, &[]).unwrap();
    s.logout(slot);
}

fn token_row(s: &Sealed, slot: CK_SLOT_ID) -> TokenRow {
    s.backend
        .tokens()
        .unwrap()
        .into_iter()
        .find(|t| t.slot_id == slot)
        .unwrap()
}

fn wrap_of(s: &Sealed, slot: CK_SLOT_ID, owner: PinOwner) -> Vec<u8> {
    of(&mut token_row(s, slot), owner).wrap.clone().unwrap()
}

/// Writes a wrap straight into the store, as whoever can write its files or tables.
fn put_wrap(s: &Sealed, slot: CK_SLOT_ID, owner: PinOwner, wrap: &[u8]) {
    transact(&*s.backend, |tx| {
        let mut row = tx.token(slot)?.unwrap();
        of(&mut row, owner).wrap = Some(wrap.to_vec());
        tx.update_token(&row)
    })
    .unwrap();
}

/// `owner` logs in with `pin` and reads every object, secrets and keyed searches included.
fn reads_all(s: &Sealed, slot: CK_SLOT_ID, owner: PinOwner, pin: &[u8], what: &str) {
    s.login(slot, owner, pin)
        .unwrap_or_else(|e| panic!("{what}: login {owner:?}: {e:?}"));
    let all = s.find(slot, &Index::default(), true).unwrap();
    assert_eq!(all.len(), KEYS + 1, "{what}");
    let keys = s.find(slot, &by_label(b"rotated"), true).unwrap();
    assert_eq!(keys.len(), KEYS, "{what}");
    for k in &keys {
        assert_eq!(
            value(k, CKA_PRIME_1),
            Some(&b"prime-one-secret-0001"[..]),
            "{what}"
        );
        assert!(k.authenticated, "{what}");
    }
    let by_id = Index {
        id: Some(vec![3]),
        ..Index::default()
    };
    assert_eq!(s.find(slot, &by_id, true).unwrap().len(), 1, "{what}");
    s.logout(slot);
}

/// The token key a wrap opens with `pin`, taken straight from its bytes.
fn key_of_wrap(wrap: &[u8], slot: CK_SLOT_ID, owner: PinOwner, pin: &[u8]) -> Key {
    let w = Wrap(wrap);
    let pin_key = crypt::derive_pin_key(pin, w.salt().unwrap(), w.params().unwrap()).unwrap();
    owners::open(wrap, &pin_key, slot, owner).unwrap().key
}

/// (a) and (b) of issue 50's item 5.
#[test]
fn after_a_rotation_an_old_wrap_opens_nothing_and_the_other_owner_reads_everything() {
    for c in cases() {
        let s = &c.store;
        for (slot, kind) in KINDS.into_iter().enumerate() {
            let slot = slot as CK_SLOT_ID;
            let what = format!("{} {kind:?}", c.name);
            filled(s, slot);
            let (owner, old_pin, new_pin) = kind.changing();
            let old_wrap = wrap_of(s, slot, owner);
            kind.run(s, slot).unwrap();
            s.logout(slot);
            let (other, other_pin) = kind.other();
            reads_all(s, slot, other, other_pin, &what);
            reads_all(s, slot, owner, new_pin, &what);
            // The key the old wrap still opens authenticates and opens no current record...
            let old_key = key_of_wrap(&old_wrap, slot, owner, old_pin);
            let old_records = ledger::RecordKeys::new(&old_key);
            for r in s.backend.rows(slot, &RowQuery::default()).unwrap() {
                assert!(!old_records.verify(slot, &r), "{what}: object {}", r.id);
                if r.private {
                    assert!(
                        s.decode(slot, &r, Some(&old_key), false).is_err(),
                        "{what}: object {}",
                        r.id
                    );
                }
            }
            // ...and the old PIN with the old wrap put back is refused.
            let current = wrap_of(s, slot, owner);
            put_wrap(s, slot, owner, &old_wrap);
            assert_eq!(rv(s.login(slot, owner, old_pin)), CKR_DEVICE_ERROR, "{what}");
            assert!(s.held_key(slot).is_none(), "{what}");
            put_wrap(s, slot, owner, &current);
            reads_all(s, slot, owner, new_pin, &what);
        }
    }
}

/// (c): the other owner's point replaced in the store (a writer's own key pair) is refused
/// before the new key is delivered to it; nothing changes.
#[test]
fn a_substituted_point_of_the_other_owner_is_refused() {
    for c in cases() {
        let s = &c.store;
        for (slot, kind) in KINDS.into_iter().enumerate() {
            let slot = slot as CK_SLOT_ID;
            let what = format!("{} {kind:?}", c.name);
            filled(s, slot);
            let (other, _) = kind.other();
            let genuine = wrap_of(s, slot, other);
            let forged = s
                .wrap(
                    &crypt::random_key(),
                    &crypt::random_key(),
                    slot,
                    other,
                    b"attacker",
                )
                .0;
            let r = if let Kind::InitPin = kind {
                // The SO logged in before: the rotation itself must check the points.
                s.login(slot, PinOwner::So, SO).unwrap();
                put_wrap(s, slot, other, &forged);
                rv(s.init_pin(slot, NEW))
            } else {
                put_wrap(s, slot, other, &forged);
                rv(kind.run(s, slot))
            };
            assert_eq!(r, CKR_DEVICE_ERROR, "{what}");
            s.logout(slot);
            put_wrap(s, slot, other, &genuine);
            let (owner, old_pin, _) = kind.changing();
            reads_all(s, slot, owner, old_pin, &what);
            reads_all(s, slot, kind.other().0, kind.other().1, &what);
        }
    }
}

/// (d): a process logged in before another replaced the key: its writes and reads are
/// refused with CKR_USER_NOT_LOGGED_IN (never answered from nothing), and it logs in again.
#[test]
fn a_process_holding_a_replaced_key_is_logged_out_and_logs_in_again() {
    for (name, a, b, _keep) in shared_pairs() {
        for (slot, kind) in KINDS.into_iter().enumerate() {
            let slot = slot as CK_SLOT_ID;
            let what = format!("{name} {kind:?}");
            filled(&a, slot);
            let (so, user) = kind.pins_after();
            b.login(slot, PinOwner::User, USER).unwrap();
            let id = b.find(slot, &by_label(b"rotated"), true).unwrap()[0].id;
            kind.run(&a, slot).unwrap();
            a.logout(slot);
            assert_eq!(
                rv(b.create(slot, &[private_key(b"x", b"y")], &[])),
                CKR_USER_NOT_LOGGED_IN,
                "{what}: create"
            );
            assert!(b.held_key(slot).is_none(), "{what}");
            b.login(slot, PinOwner::User, user).unwrap();
            a.rotate_key(slot, PinOwner::So, so).unwrap();
            assert_eq!(
                rv(b.find(slot, &by_label(b"rotated"), true)),
                CKR_USER_NOT_LOGGED_IN,
                "{what}: keyed search"
            );
            b.login(slot, PinOwner::User, user).unwrap();
            a.rotate_key(slot, PinOwner::User, user).unwrap();
            assert_eq!(
                rv(b.find(slot, &Index::default(), true)),
                CKR_USER_NOT_LOGGED_IN,
                "{what}: search"
            );
            b.login(slot, PinOwner::User, user).unwrap();
            a.rotate_key(slot, PinOwner::So, so).unwrap();
            assert_eq!(rv(b.load(slot, id)), CKR_USER_NOT_LOGGED_IN, "{what}: load");
            reads_all(&b, slot, PinOwner::User, user, &what);
            reads_all(&b, slot, PinOwner::So, so, &what);
        }
    }
}

/// (e): a rotation whose transaction fails half-way (a row write refused) leaves the store as
/// it was, and succeeds when tried again.
#[test]
fn a_rotation_failing_half_way_leaves_the_store_as_it_was() {
    for c in cases() {
        let s = &c.store;
        for (slot, kind) in KINDS.into_iter().enumerate() {
            let slot = slot as CK_SLOT_ID;
            let what = format!("{} {kind:?}", c.name);
            filled(s, slot);
            c.calls.puts_before_failure.store(KEYS / 2, SeqCst);
            assert_eq!(rv(kind.run(s, slot)), CKR_DEVICE_ERROR, "{what}");
            s.logout(slot);
            reads_all(s, slot, PinOwner::User, USER, &what);
            reads_all(s, slot, PinOwner::So, SO, &what);
            kind.run(s, slot).unwrap();
            s.logout(slot);
            let (so, user) = kind.pins_after();
            reads_all(s, slot, PinOwner::User, user, &what);
            reads_all(s, slot, PinOwner::So, so, &what);
        }
    }
}

/// Item 6: a store of format-1 wraps (written before owner keys) upgrades each wrap at its
/// owner's login; until both are upgraded a rotation is refused (the new key could not be
/// given to the other owner), then it works.
#[test]
fn format_1_wraps_are_upgraded_at_login_and_a_rotation_waits_for_both() {
    for c in cases() {
        let s = &c.store;
        filled(s, 0);
        s.login(0, PinOwner::User, USER).unwrap();
        let key = s.token_key(0).unwrap();
        s.logout(0);
        let v1 = |owner: PinOwner, pin: &[u8]| {
            let salt = [owner as u8 + 1; 16];
            let pin_key = crypt::derive_pin_key(pin, &salt, kdf()).unwrap();
            crypt::wrap_with(&key, &pin_key, &salt, kdf(), &owners::wrap_aad(0, owner))
        };
        transact(&*s.backend, |tx| {
            let mut row = tx.token(0)?.unwrap();
            row.so.wrap = Some(v1(PinOwner::So, SO));
            row.user.wrap = Some(v1(PinOwner::User, USER));
            row.owners = None;
            tx.update_token(&row)
        })
        .unwrap();
        s.pins.clear();
        reads_all(s, 0, PinOwner::User, USER, c.name);
        let version = |owner| owners::version(&wrap_of(s, 0, owner));
        assert_eq!(
            (version(PinOwner::So), version(PinOwner::User)),
            (1, 2),
            "{}",
            c.name
        );
        assert_eq!(
            rv(s.set_pin(0, PinOwner::User, USER, NEW)),
            CKR_FUNCTION_FAILED,
            "{}",
            c.name
        );
        reads_all(s, 0, PinOwner::So, SO, c.name);
        assert_eq!(version(PinOwner::So), 2, "{}", c.name);
        s.set_pin(0, PinOwner::User, USER, NEW).unwrap();
        reads_all(s, 0, PinOwner::User, NEW, c.name);
        reads_all(s, 0, PinOwner::So, SO, c.name);
    }
}
