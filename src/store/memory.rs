//! A store that lives in process memory: for tests and for temporary tokens (the self-test).

use super::{PinCounter, PinOwner, PinState, Store, TokenRecord, DEFAULT_MAX_FAILURES, MAX_OBJECT_ID};
use crate::error::{fail, fail_because, Result};
use crate::token::attributes::Attributes;
use cryptoki_sys::*;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

struct PinHash {
    salt: [u8; 16],
    hash: Zeroizing<Vec<u8>>,
}

impl PinHash {
    fn new(pin: &[u8]) -> Self {
        let mut salt = [0u8; 16];
        getrandom::fill(&mut salt).expect("OS RNG");
        PinHash {
            salt,
            hash: Self::hash(&salt, pin),
        }
    }
    fn hash(salt: &[u8], pin: &[u8]) -> Zeroizing<Vec<u8>> {
        let mut h = Sha256::new();
        h.update(salt);
        h.update(pin);
        Zeroizing::new(h.finalize().to_vec())
    }
    fn matches(&self, pin: &[u8]) -> bool {
        Self::hash(&self.salt, pin).ct_eq(&self.hash).into()
    }
}

struct MemToken {
    record: TokenRecord,
    so_pin: PinHash,
    user_pin: Option<PinHash>,
    so_counter: PinCounter,
    user_counter: PinCounter,
    objects: BTreeMap<u64, Attributes>,
    generation: u64,
}

#[derive(Default)]
struct Inner {
    tokens: BTreeMap<CK_SLOT_ID, MemToken>,
    next_object: u64,
    next_serial: u64,
}

#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }
}

impl MemToken {
    /// Checks `pin` as the SQLite store does: the attempt is reserved before the PIN is
    /// evaluated and resolved after, all under the store's lock.
    fn check_pin(&mut self, who: PinOwner, pin: &[u8]) -> Result<()> {
        let max = self.record.max_failures;
        let slot = self.record.slot_id;
        let (counter, hash, state) = match who {
            PinOwner::So => (&mut self.so_counter, Some(&self.so_pin), &mut self.record.so_pin),
            PinOwner::User => (
                &mut self.user_counter,
                self.user_pin.as_ref(),
                &mut self.record.user_pin,
            ),
        };
        let Some(hash) = hash else {
            return fail(CKR_USER_PIN_NOT_INITIALIZED);
        };
        let ticket = counter.reserve(max).inspect_err(|_| {
            log::warn!("slot {slot}: the {who:?} PIN is locked; the PIN was not checked");
        })?;
        let ok = hash.matches(pin);
        counter.resolve(ticket, ok, max);
        *state = PinState {
            failures: counter.failures,
            locked: counter.locked,
        };
        if ok {
            return Ok(());
        }
        if counter.locked {
            log::warn!(
                "slot {slot}: {who:?} PIN locked after {} wrong attempts",
                counter.failures
            );
        }
        fail(CKR_PIN_INCORRECT)
    }

    fn set_user_pin(&mut self, pin: &[u8]) {
        self.user_pin = Some(PinHash::new(pin));
        self.record.user_pin_initialized = true;
        self.record.user_pin = PinState::default();
        // A new PIN starts a new count; the ticket counter keeps growing.
        self.user_counter = PinCounter {
            attempts: self.user_counter.attempts,
            ..PinCounter::default()
        };
    }
}

impl Store for MemoryStore {
    fn tokens(&self) -> Result<Vec<TokenRecord>> {
        Ok(self
            .inner
            .lock()
            .tokens
            .values()
            .map(|t| t.record.clone())
            .collect())
    }

    fn init_token(
        &self,
        slot_id: CK_SLOT_ID,
        so_pin: &[u8],
        label: &[u8; 32],
        user_pin: Option<&[u8]>,
    ) -> Result<TokenRecord> {
        let mut g = self.inner.lock();
        if let Some(t) = g.tokens.get_mut(&slot_id) {
            t.check_pin(PinOwner::So, so_pin)?;
            t.record.label = *label;
            t.record.user_pin_initialized = false;
            t.record.user_pin = PinState::default();
            t.user_pin = None;
            t.user_counter = PinCounter::default();
            if let Some(p) = user_pin {
                t.set_user_pin(p);
            }
            t.objects.clear();
            t.generation += 1;
            return Ok(t.record.clone());
        }
        let free = g.tokens.keys().next_back().map_or(0, |k| k + 1);
        if slot_id != free {
            return fail_because(
                CKR_SLOT_ID_INVALID,
                format!("slot {slot_id} is not the free slot"),
            );
        }
        g.next_serial += 1;
        let mut serial = [b'0'; 16];
        let mut rnd = [0u8; 4];
        getrandom::fill(&mut rnd).expect("OS RNG");
        let s = format!("{:08x}{:08x}", u32::from_be_bytes(rnd), g.next_serial);
        serial.copy_from_slice(s.as_bytes());
        let record = TokenRecord {
            slot_id,
            label: *label,
            serial,
            user_pin_initialized: false,
            so_pin: PinState::default(),
            user_pin: PinState::default(),
            max_failures: DEFAULT_MAX_FAILURES,
        };
        let mut token = MemToken {
            record,
            so_pin: PinHash::new(so_pin),
            user_pin: None,
            so_counter: PinCounter::default(),
            user_counter: PinCounter::default(),
            objects: BTreeMap::new(),
            generation: 1,
        };
        if let Some(p) = user_pin {
            token.set_user_pin(p);
        }
        let record = token.record.clone();
        g.tokens.insert(slot_id, token);
        Ok(record)
    }

    fn login(&self, slot_id: CK_SLOT_ID, who: PinOwner, pin: &[u8]) -> Result<()> {
        let mut g = self.inner.lock();
        let t = g
            .tokens
            .get_mut(&slot_id)
            .ok_or(crate::error::Error(CKR_TOKEN_NOT_RECOGNIZED))?;
        t.check_pin(who, pin)
    }

    fn logout(&self, _slot_id: CK_SLOT_ID) {}

    fn init_pin(&self, slot_id: CK_SLOT_ID, pin: &[u8]) -> Result<()> {
        let mut g = self.inner.lock();
        let t = g
            .tokens
            .get_mut(&slot_id)
            .ok_or(crate::error::Error(CKR_TOKEN_NOT_RECOGNIZED))?;
        t.set_user_pin(pin);
        Ok(())
    }

    fn set_pin(&self, slot_id: CK_SLOT_ID, who: PinOwner, old: &[u8], new: &[u8]) -> Result<()> {
        let mut g = self.inner.lock();
        let t = g
            .tokens
            .get_mut(&slot_id)
            .ok_or(crate::error::Error(CKR_TOKEN_NOT_RECOGNIZED))?;
        t.check_pin(who, old)?;
        match who {
            PinOwner::So => t.so_pin = PinHash::new(new),
            PinOwner::User => t.user_pin = Some(PinHash::new(new)),
        }
        Ok(())
    }

    fn find(
        &self,
        slot_id: CK_SLOT_ID,
        template: &[(CK_ATTRIBUTE_TYPE, Vec<u8>)],
        with_private: bool,
    ) -> Result<Vec<u64>> {
        let g = self.inner.lock();
        let Some(t) = g.tokens.get(&slot_id) else {
            return Ok(vec![]);
        };
        Ok(t.objects
            .iter()
            .filter(|(_, a)| (with_private || !a.is_private()) && a.matches(template))
            .map(|(id, _)| *id)
            .collect())
    }

    fn load(&self, slot_id: CK_SLOT_ID, id: u64) -> Result<Option<Attributes>> {
        let g = self.inner.lock();
        Ok(g.tokens.get(&slot_id).and_then(|t| t.objects.get(&id).cloned()))
    }

    fn create(&self, slot_id: CK_SLOT_ID, objects: &[&Attributes]) -> Result<Vec<u64>> {
        let mut g = self.inner.lock();
        let first = g.next_object + 1;
        if first + objects.len() as u64 >= MAX_OBJECT_ID {
            return fail_because(CKR_DEVICE_MEMORY, "the store has run out of object ids");
        }
        let t = g
            .tokens
            .get_mut(&slot_id)
            .ok_or(crate::error::Error(CKR_TOKEN_NOT_RECOGNIZED))?;
        let ids: Vec<u64> = (first..first + objects.len() as u64).collect();
        for (id, attrs) in ids.iter().zip(objects) {
            t.objects.insert(*id, (*attrs).clone());
        }
        t.generation += 1;
        g.next_object += objects.len() as u64;
        Ok(ids)
    }

    fn update(&self, slot_id: CK_SLOT_ID, id: u64, attrs: &Attributes) -> Result<()> {
        let mut g = self.inner.lock();
        let t = g
            .tokens
            .get_mut(&slot_id)
            .ok_or(crate::error::Error(CKR_TOKEN_NOT_RECOGNIZED))?;
        match t.objects.get_mut(&id) {
            Some(a) => *a = attrs.clone(),
            None => return fail(CKR_OBJECT_HANDLE_INVALID),
        }
        t.generation += 1;
        Ok(())
    }

    fn destroy(&self, slot_id: CK_SLOT_ID, id: u64) -> Result<()> {
        let mut g = self.inner.lock();
        let t = g
            .tokens
            .get_mut(&slot_id)
            .ok_or(crate::error::Error(CKR_TOKEN_NOT_RECOGNIZED))?;
        if t.objects.remove(&id).is_none() {
            return fail(CKR_OBJECT_HANDLE_INVALID);
        }
        t.generation += 1;
        Ok(())
    }

    fn generation(&self, slot_id: CK_SLOT_ID) -> Result<u64> {
        Ok(self.inner.lock().tokens.get(&slot_id).map_or(0, |t| t.generation))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_store_locks_like_the_durable_one() {
        let s = MemoryStore::new();
        s.init_token(0, b"so-pin-1", &[b' '; 32], Some(b"user-pin"))
            .unwrap();
        let max = DEFAULT_MAX_FAILURES;
        for _ in 0..max - 1 {
            assert_eq!(
                s.login(0, PinOwner::User, b"nope").unwrap_err().rv(),
                CKR_PIN_INCORRECT
            );
        }
        // A success restarts the count.
        s.login(0, PinOwner::User, b"user-pin").unwrap();
        for _ in 0..max {
            assert_eq!(
                s.login(0, PinOwner::User, b"nope").unwrap_err().rv(),
                CKR_PIN_INCORRECT
            );
        }
        assert_eq!(
            s.login(0, PinOwner::User, b"user-pin").unwrap_err().rv(),
            CKR_PIN_LOCKED
        );
        assert_eq!(
            s.set_pin(0, PinOwner::User, b"user-pin", b"other")
                .unwrap_err()
                .rv(),
            CKR_PIN_LOCKED
        );
        assert!(s.tokens().unwrap()[0].user_pin.locked);
        // A new user PIN from the SO unlocks it.
        s.init_pin(0, b"new-user-pin").unwrap();
        s.login(0, PinOwner::User, b"new-user-pin").unwrap();
        // The SO PIN locks the same way, and re-initialisation checks it.
        for _ in 0..max {
            assert_eq!(
                s.login(0, PinOwner::So, b"nope").unwrap_err().rv(),
                CKR_PIN_INCORRECT
            );
        }
        assert_eq!(
            s.init_token(0, b"so-pin-1", &[b' '; 32], None).unwrap_err().rv(),
            CKR_PIN_LOCKED
        );
    }
}
