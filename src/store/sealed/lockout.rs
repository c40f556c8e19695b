//! Lockout counters: the failure count of one PIN, with the attempt reserved before the PIN
//! is evaluated. Kept in the token row of every backend; decided here, once.

use crate::error::Result;
use cryptoki_sys::*;

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
