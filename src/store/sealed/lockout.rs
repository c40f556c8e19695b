//! Lockout counters: the failure count of one PIN, with the attempt reserved before the PIN
//! is evaluated, and the reservations still in flight. Kept in the token row of every
//! backend; decided here, once.

use crate::error::Result;
use cryptoki_sys::*;

/// The failure counter of one PIN, as every backend keeps it.
///
/// An attempt is *reserved* before the PIN is evaluated: the reservation counts as a failure
/// until its outcome is known, so concurrent attempts (threads, processes, hosts) can never
/// evaluate more than `max_failures` PINs between two successes. Reservations carry a ticket
/// from a counter that only grows (`attempts`). A success forgives every reservation up to and
/// including its own ticket, not the ones taken after it: those are still pending or were
/// wrong, and in ticket order they come after the success. So `failures` is always the number
/// of reservations after the latest successful one ("consecutive failures since the last
/// success"), whatever order the outcomes arrive in: the tickets `attempts - failures + 1
/// ..= attempts` (the *window*).
///
/// A full window is not a lock while some of it is still in flight (`pending`): one of those
/// may be the right PIN and forgive the rest. An attempt that finds the window full then waits
/// (`Reservation::Wait`) instead of being refused, so right PINs racing each other are never
/// turned away, and no PIN beyond the budget is evaluated meanwhile. The PIN locks when the
/// window is full of decided failures. A reservation whose process stopped before deciding
/// never resolves: after a timeout the waiters count it as a wrong PIN (`expire`), which is
/// what the window already assumed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PinCounter {
    /// Reservations since the latest successful one (pending or wrong).
    pub failures: u32,
    /// Every reservation ever made; the ticket of the latest one.
    pub attempts: u64,
    /// Set when the window is full and none of it is pending any more (every attempt in it
    /// was wrong or timed out); only a new PIN clears it. A success whose reservation was
    /// taken before the window does not clear it: once locked, every PIN gets
    /// `CKR_PIN_LOCKED`.
    pub locked: bool,
    /// Tickets of the window whose outcome is not known yet, in ticket order. Only tickets
    /// of the window are kept, so there are at most `max_failures` of them.
    pub pending: Vec<u64>,
}

/// What `PinCounter::reserve` decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// The attempt may evaluate its PIN; resolve this ticket with the outcome.
    Granted(u64),
    /// The window is full, but these tickets of it are still in flight: ask again later.
    Wait(Vec<u64>),
}

impl PinCounter {
    /// Reserves one attempt: its ticket; or the tickets to wait for when the window is full
    /// of attempts some of which are still in flight; or `CKR_PIN_LOCKED` when it is full of
    /// failures. Nothing is evaluated in the last two cases.
    pub fn reserve(&mut self, max_failures: u32) -> Result<Reservation> {
        if self.locked {
            return crate::error::fail(CKR_PIN_LOCKED);
        }
        self.keep_window();
        if self.failures < max_failures {
            self.failures += 1;
            self.attempts += 1;
            self.pending.push(self.attempts);
            return Ok(Reservation::Granted(self.attempts));
        }
        if self.pending.is_empty() {
            // Full of decided failures but not marked (a store written before `pending`
            // existed): locked all the same.
            return crate::error::fail(CKR_PIN_LOCKED);
        }
        Ok(Reservation::Wait(self.pending.clone()))
    }

    /// Records the outcome of the reservation `ticket`.
    pub fn resolve(&mut self, ticket: u64, ok: bool, max_failures: u32) {
        self.pending.retain(|t| *t != ticket);
        if ok {
            // Reservations after `ticket` stay counted; everything up to it is forgiven.
            let after = self.attempts.saturating_sub(ticket);
            self.failures = self.failures.min(after.min(u32::MAX as u64) as u32);
            self.keep_window();
        } else {
            self.lock_if_decided(max_failures);
        }
    }

    /// Counts the reservations `tickets`, whose outcome never came (their process stopped),
    /// as wrong PINs. Whether any of them was still pending.
    pub fn expire(&mut self, tickets: &[u64], max_failures: u32) -> bool {
        let before = self.pending.len();
        self.pending.retain(|t| !tickets.contains(t));
        self.lock_if_decided(max_failures);
        self.pending.len() != before
    }

    /// Decided failures in the window: the failures that are not in flight.
    pub fn decided_failures(&self) -> u32 {
        self.failures.saturating_sub(self.pending.len() as u32)
    }

    /// Drops pending tickets from before the window: a success after them forgave them, or
    /// a new PIN restarted the count; they hold no budget any more.
    fn keep_window(&mut self) {
        let first = self.attempts.saturating_sub(self.failures as u64);
        self.pending.retain(|t| *t > first);
    }

    /// A new PIN: a new count, not locked. Tickets keep growing, so a check of the old PIN
    /// still in flight resolves harmlessly.
    pub fn restart(&mut self) {
        self.failures = 0;
        self.locked = false;
        self.pending.clear();
    }

    fn lock_if_decided(&mut self, max_failures: u32) {
        if self.failures >= max_failures && self.pending.is_empty() {
            self.locked = true;
        }
    }

    /// `pending` as backends store it: decimal tickets separated by commas.
    pub fn pending_text(&self) -> String {
        let t: Vec<String> = self.pending.iter().map(u64::to_string).collect();
        t.join(",")
    }

    /// Reads `pending_text`. A damaged entry is left out: that attempt then counts as a wrong
    /// PIN, the safe reading.
    pub fn parse_pending(text: &str) -> Vec<u64> {
        text.split(',').filter_map(|t| t.trim().parse().ok()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granted(c: &mut PinCounter, max: u32) -> u64 {
        match c.reserve(max).unwrap() {
            Reservation::Granted(t) => t,
            w => panic!("expected a ticket, got {w:?}"),
        }
    }

    #[test]
    fn a_full_window_in_flight_waits_and_a_full_window_of_failures_locks() {
        let mut c = PinCounter::default();
        let tickets: Vec<u64> = (0..3).map(|_| granted(&mut c, 3)).collect();
        assert_eq!(tickets, vec![1, 2, 3]);
        // Three attempts are in flight, none resolved: a fourth waits for them, unevaluated.
        assert_eq!(c.reserve(3).unwrap(), Reservation::Wait(vec![1, 2, 3]));
        assert_eq!(c.attempts, 3, "waiting takes no ticket");
        c.resolve(1, false, 3);
        c.resolve(2, false, 3);
        assert!(!c.locked, "ticket 3 may still be right");
        assert_eq!(c.reserve(3).unwrap(), Reservation::Wait(vec![3]));
        c.resolve(3, false, 3);
        assert!(c.locked);
        assert_eq!(c.reserve(3).unwrap_err().rv(), CKR_PIN_LOCKED);
    }

    #[test]
    fn a_right_pin_in_flight_keeps_wrong_ones_from_locking_and_frees_the_waiters() {
        let mut c = PinCounter::default();
        let right = granted(&mut c, 2);
        let wrong = granted(&mut c, 2);
        c.resolve(wrong, false, 2);
        assert!(!c.locked);
        assert_eq!(c.decided_failures(), 1);
        assert_eq!(c.reserve(2).unwrap(), Reservation::Wait(vec![right]));
        c.resolve(right, true, 2);
        // The wrong one came after the right one in ticket order: still counted.
        assert_eq!((c.failures, c.decided_failures()), (1, 1));
        assert_eq!(granted(&mut c, 2), 3);
    }

    #[test]
    fn right_pins_racing_are_never_refused() {
        // Any number of right PINs, with at most `max` in flight at once and the rest
        // waiting, in any resolution order: every one gets a ticket eventually.
        let max = 3;
        let mut c = PinCounter::default();
        let mut in_flight = Vec::new();
        let mut served = 0;
        let mut waited = 0;
        let mut order = 0x2545f4914f6cdd1du64;
        while served < 100 {
            match c.reserve(max).unwrap() {
                Reservation::Granted(t) => {
                    in_flight.push(t);
                    served += 1;
                }
                Reservation::Wait(p) => {
                    waited += 1;
                    assert_eq!(p.len(), max as usize);
                    order ^= order << 13;
                    order ^= order >> 7;
                    order ^= order << 17;
                    let t = in_flight.swap_remove((order % in_flight.len() as u64) as usize);
                    c.resolve(t, true, max);
                }
            }
        }
        for t in in_flight {
            c.resolve(t, true, max);
        }
        assert!(waited > 0);
        assert_eq!(
            c,
            PinCounter {
                attempts: 100,
                ..PinCounter::default()
            }
        );
    }

    #[test]
    fn a_success_forgives_earlier_reservations_only() {
        let mut c = PinCounter::default();
        let a = granted(&mut c, 5);
        let b = granted(&mut c, 5);
        let d = granted(&mut c, 5);
        // b succeeds while a and d are in flight: d (after b) stays counted, a is forgiven.
        c.resolve(b, true, 5);
        assert_eq!(c.failures, 1);
        assert_eq!(c.pending, vec![d], "a left the window");
        c.resolve(a, false, 5);
        c.resolve(d, false, 5);
        assert_eq!(c.failures, 1);
        // An old success arriving late forgives nothing taken after the newer one.
        let e = granted(&mut c, 5);
        let f = granted(&mut c, 5);
        c.resolve(f, true, 5);
        c.resolve(e, true, 5);
        assert_eq!(c.failures, 0);
        let g = granted(&mut c, 5);
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
            ..PinCounter::default()
        };
        let t = granted(&mut c, 3);
        // Full, and the two old failures are decided: only ticket 1 is awaited.
        assert_eq!(c.reserve(3).unwrap(), Reservation::Wait(vec![t]));
        c.resolve(t, true, 3);
        assert_eq!(c.failures, 0);
        // Full of old failures with nothing in flight: locked.
        let mut full = PinCounter {
            failures: 3,
            ..PinCounter::default()
        };
        assert_eq!(full.reserve(3).unwrap_err().rv(), CKR_PIN_LOCKED);
    }

    #[test]
    fn a_lock_stays_after_a_success_reserved_before_the_window() {
        let mut c = PinCounter::default();
        let early = granted(&mut c, 2);
        let ok = granted(&mut c, 2);
        c.resolve(ok, true, 2);
        assert!(c.pending.is_empty(), "the early one is outside the window");
        let w1 = granted(&mut c, 2);
        let w2 = granted(&mut c, 2);
        c.resolve(w1, false, 2);
        c.resolve(w2, false, 2);
        assert!(c.locked);
        c.resolve(early, true, 2);
        assert!(c.locked);
        assert_eq!(c.reserve(2).unwrap_err().rv(), CKR_PIN_LOCKED);
    }

    #[test]
    fn attempts_whose_process_stopped_count_as_wrong_pins() {
        let mut c = PinCounter::default();
        let a = granted(&mut c, 2);
        let b = granted(&mut c, 2);
        assert!(c.expire(&[a], 2));
        assert!(!c.locked, "b is still in flight");
        assert!(!c.expire(&[a], 2), "already expired");
        assert!(c.expire(&[b], 2));
        assert!(c.locked);
        assert_eq!(c.reserve(2).unwrap_err().rv(), CKR_PIN_LOCKED);
        // An expired attempt that turns out right later forgives what came before it, as
        // any success does, but not the lock.
        c.resolve(b, true, 2);
        assert!(c.locked);
    }

    #[test]
    fn a_new_pin_drops_attempts_in_flight_from_the_budget() {
        let mut c = PinCounter::default();
        let old = granted(&mut c, 2);
        granted(&mut c, 2);
        c.restart();
        assert_eq!((c.failures, c.locked, c.pending.len()), (0, false, 0));
        let t = granted(&mut c, 2);
        // The check of the old PIN ends wrong: it is not in the new count.
        c.resolve(old, false, 2);
        assert_eq!((c.failures, c.locked), (1, false));
        c.resolve(t, true, 2);
        assert_eq!(c.failures, 0);
        // Tickets from before the window never make anyone wait.
        let mut c = PinCounter {
            failures: 2,
            attempts: 10,
            pending: vec![3, 4, 10],
            ..PinCounter::default()
        };
        assert_eq!(c.reserve(2).unwrap(), Reservation::Wait(vec![10]));
    }

    #[test]
    fn pending_tickets_survive_their_text_form() {
        let c = PinCounter {
            pending: vec![7, 8, 12],
            ..PinCounter::default()
        };
        assert_eq!(c.pending_text(), "7,8,12");
        assert_eq!(PinCounter::parse_pending(&c.pending_text()), vec![7, 8, 12]);
        assert_eq!(PinCounter::parse_pending(""), Vec::<u64>::new());
        assert_eq!(PinCounter::parse_pending("7,x,9"), vec![7, 9]);
    }
}
