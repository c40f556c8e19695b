//! Durable state of tokens: token records, PINs and their failure counters, and objects.
//! The token layer talks to a `Store`; backends differ in where bytes live, not in behaviour.

pub mod crypt;
pub mod memory;
pub mod sqlite;

use crate::error::Result;
use crate::token::attributes::Attributes;
use cryptoki_sys::*;

/// The two PIN owners of a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinOwner {
    So,
    User,
}

/// The state of one PIN as token flags need it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PinState {
    /// Consecutive wrong attempts since the last success.
    pub failures: u32,
    pub locked: bool,
}

/// One initialised token as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    pub slot_id: CK_SLOT_ID,
    pub label: [u8; 32],
    pub serial: [u8; 16],
    pub user_pin_initialized: bool,
    pub so_pin: PinState,
    pub user_pin: PinState,
    /// Wrong attempts allowed before a PIN locks.
    pub max_failures: u32,
}

/// A store of tokens and their objects. Object ids are unique across the store, never
/// reused, and below `MAX_OBJECT_ID` so that session-object handles cannot alias them.
pub trait Store: Send + Sync {
    /// Every initialised token, in slot order. The free slot is the one after the last.
    fn tokens(&self) -> Result<Vec<TokenRecord>>;
    /// Initialises a token: a new one in the free slot, or, when `slot_id` holds a token whose
    /// SO PIN is `so_pin`, re-initialises it (objects and user PIN dropped, serial kept).
    /// With `user_pin`, the user PIN is set in the same transaction: no process that dies
    /// half-way can leave a token without one.
    fn init_token(
        &self,
        slot_id: CK_SLOT_ID,
        so_pin: &[u8],
        label: &[u8; 32],
        user_pin: Option<&[u8]>,
    ) -> Result<TokenRecord>;
    /// Checks a PIN, counting failures and locking at the limit; on success the token's
    /// private objects become readable in this process until `logout`. The attempt is
    /// recorded (see `PinCounter`) before the PIN is evaluated; when it cannot be recorded the
    /// PIN is not evaluated at all.
    fn login(&self, slot_id: CK_SLOT_ID, who: PinOwner, pin: &[u8]) -> Result<()>;
    fn logout(&self, slot_id: CK_SLOT_ID);
    /// Sets the user PIN (by the SO) and unlocks it.
    fn init_pin(&self, slot_id: CK_SLOT_ID, pin: &[u8]) -> Result<()>;
    /// Changes a PIN after checking the old one.
    fn set_pin(&self, slot_id: CK_SLOT_ID, who: PinOwner, old: &[u8], new: &[u8]) -> Result<()>;
    /// Ids of the objects of a token whose attributes match every pair of `template`.
    fn find(
        &self,
        slot_id: CK_SLOT_ID,
        template: &[(CK_ATTRIBUTE_TYPE, Vec<u8>)],
        with_private: bool,
    ) -> Result<Vec<u64>>;
    fn load(&self, slot_id: CK_SLOT_ID, id: u64) -> Result<Option<Attributes>>;
    /// Stores new objects in one transaction (a key pair is both keys or neither).
    fn create(&self, slot_id: CK_SLOT_ID, objects: &[&Attributes]) -> Result<Vec<u64>>;
    fn update(&self, slot_id: CK_SLOT_ID, id: u64, attrs: &Attributes) -> Result<()>;
    fn destroy(&self, slot_id: CK_SLOT_ID, id: u64) -> Result<()>;
    /// A number that changes whenever any object of the token changes, in any process.
    fn generation(&self, slot_id: CK_SLOT_ID) -> Result<u64>;
}

pub const MAX_OBJECT_ID: u64 = 1 << 31;
pub const MIN_PIN_LEN: usize = 4;
pub const MAX_PIN_LEN: usize = 255;
pub const DEFAULT_MAX_FAILURES: u32 = 10;

/// The failure counter of one PIN, as every backend keeps it.
///
/// An attempt is *reserved* before the PIN is evaluated: the reservation counts as a failure
/// until its outcome is known, so concurrent attempts (threads or processes) can never
/// evaluate more than `max_failures` PINs between two successes. Reservations carry a ticket
/// from a counter that only grows (`attempts`). A success forgives every reservation up to and
/// including its own ticket, not the ones taken after it: those are still pending or were
/// wrong, and in ticket order they come after the success. So `failures` is always the number
/// of reservations after the latest successful one ("consecutive failures since the last
/// success"), whatever order the outcomes arrive in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PinCounter {
    /// Reservations since the latest successful one (pending or wrong).
    pub failures: u32,
    /// Every reservation ever made; the ticket of the latest one.
    pub attempts: u64,
    /// Set when a wrong PIN finds `failures` (pending attempts included) at the limit; only a
    /// new PIN clears it. A success whose reservation was taken before the lock does not
    /// clear it: once locked, every PIN gets `CKR_PIN_LOCKED`.
    pub locked: bool,
}

impl PinCounter {
    /// Reserves one attempt: its ticket, or `CKR_PIN_LOCKED` without any evaluation.
    pub fn reserve(&mut self, max_failures: u32) -> Result<u64> {
        if self.locked || self.failures >= max_failures {
            return crate::error::fail(CKR_PIN_LOCKED);
        }
        self.failures += 1;
        self.attempts += 1;
        Ok(self.attempts)
    }

    /// Records the outcome of the reservation `ticket`.
    pub fn resolve(&mut self, ticket: u64, ok: bool, max_failures: u32) {
        if ok {
            // Reservations after `ticket` stay counted; everything up to it is forgiven.
            let after = self.attempts.saturating_sub(ticket);
            self.failures = self.failures.min(after.min(u32::MAX as u64) as u32);
        } else if self.failures >= max_failures {
            self.locked = true;
        }
    }
}

/// Opens the store the configuration names; the error is worded for the operator.
pub fn open(config: &crate::config::Config) -> std::result::Result<std::sync::Arc<dyn Store>, String> {
    if config.store.backend == "memory" {
        return Ok(std::sync::Arc::new(memory::MemoryStore::new()));
    }
    Ok(std::sync::Arc::new(sqlite::SqliteStore::from_config(config)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stop_at_the_limit_before_any_evaluation() {
        let mut c = PinCounter::default();
        let tickets: Vec<u64> = (0..3).map(|_| c.reserve(3).unwrap()).collect();
        assert_eq!(tickets, vec![1, 2, 3]);
        // Three attempts are in flight, none resolved: a fourth is refused.
        assert_eq!(c.reserve(3).unwrap_err().rv(), CKR_PIN_LOCKED);
        for t in tickets {
            c.resolve(t, false, 3);
        }
        assert!(c.locked);
        assert_eq!(c.reserve(3).unwrap_err().rv(), CKR_PIN_LOCKED);
    }

    #[test]
    fn a_success_forgives_earlier_reservations_only() {
        let mut c = PinCounter::default();
        let a = c.reserve(5).unwrap();
        let b = c.reserve(5).unwrap();
        let d = c.reserve(5).unwrap();
        // b succeeds while a and d are in flight: d (after b) stays counted, a is forgiven.
        c.resolve(b, true, 5);
        assert_eq!(c.failures, 1);
        c.resolve(a, false, 5);
        c.resolve(d, false, 5);
        assert_eq!(c.failures, 1);
        // An old success arriving late forgives nothing taken after the newer one.
        let e = c.reserve(5).unwrap();
        let f = c.reserve(5).unwrap();
        c.resolve(f, true, 5);
        c.resolve(e, true, 5);
        assert_eq!(c.failures, 0);
        let g = c.reserve(5).unwrap();
        c.resolve(a, true, 5);
        assert_eq!(c.failures, 1, "g is still in flight");
        c.resolve(g, false, 5);
        assert_eq!(c.failures, 1);
    }

    #[test]
    fn a_counter_from_before_tickets_keeps_its_failures() {
        // Schema 1 stores have failures but no attempt tickets.
        let mut c = PinCounter {
            failures: 2,
            attempts: 0,
            locked: false,
        };
        let t = c.reserve(3).unwrap();
        assert_eq!(c.reserve(3).unwrap_err().rv(), CKR_PIN_LOCKED);
        c.resolve(t, true, 3);
        assert_eq!(c.failures, 0);
    }

    #[test]
    fn a_lock_stays_after_a_success_reserved_before_it() {
        let mut c = PinCounter::default();
        let right = c.reserve(2).unwrap();
        let wrong = c.reserve(2).unwrap();
        c.resolve(wrong, false, 2);
        assert!(c.locked);
        c.resolve(right, true, 2);
        assert!(c.locked);
        assert_eq!(c.reserve(2).unwrap_err().rv(), CKR_PIN_LOCKED);
    }
}
