//! Per-client limits (`[[client]] max_in_flight`, `max_calls_per_second`): counted per
//! identity across all its connections, so a client cannot step around them by connecting
//! twice. A call over a limit is refused before it reaches the token, with HTTP 429 and a
//! sentence the client module logs (its application sees `CKR_FUNCTION_FAILED`).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// One identity's limits and use.
pub struct ClientLimit {
    identity: String,
    max_in_flight: Option<u32>,
    in_flight: AtomicU32,
    /// Calls per second, and the token bucket (tokens, last refill) that holds the client
    /// to it with a burst of one second's worth.
    rate: Option<(u32, Mutex<(f64, Instant)>)>,
}

/// A call admitted: holds its place in `max_in_flight` until dropped.
pub struct Permit(Arc<ClientLimit>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why a call was refused: the reason for the counters, and the sentence for the client.
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

impl ClientLimit {
    pub fn admit(self: &Arc<Self>) -> Result<Permit, Refusal> {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        let permit = Permit(self.clone());
        if let Some(max) = self.max_in_flight.filter(|&m| now > m) {
            return Err(Refusal {
                reason: "max_in_flight",
                message: format!(
                    "client {} has {max} calls in flight already, its limit (max_in_flight in the server's [[client]] entry); wait for one to end",
                    self.identity
                ),
            });
        }
        if let Some((per_second, bucket)) = &self.rate {
            let mut b = bucket.lock();
            let t = Instant::now();
            let refill = t.duration_since(b.1).as_secs_f64() * f64::from(*per_second);
            b.0 = (b.0 + refill).min(f64::from(*per_second));
            b.1 = t;
            if b.0 < 1.0 {
                return Err(Refusal {
                    reason: "max_calls_per_second",
                    message: format!(
                        "client {} is over its limit of {per_second} calls per second (max_calls_per_second in the server's [[client]] entry)",
                        self.identity
                    ),
                });
            }
            b.0 -= 1.0;
        }
        Ok(permit)
    }
}

/// Every identity's limits, made on its first connection.
#[derive(Default)]
pub struct Limits(Mutex<HashMap<String, Arc<ClientLimit>>>);

impl Limits {
    pub fn of(&self, rule: &crate::config::ClientRule) -> Arc<ClientLimit> {
        self.0
            .lock()
            .entry(rule.identity.clone())
            .or_insert_with(|| {
                Arc::new(ClientLimit {
                    identity: rule.identity.clone(),
                    max_in_flight: rule.max_in_flight,
                    in_flight: AtomicU32::new(0),
                    rate: rule
                        .max_calls_per_second
                        .map(|r| (r, Mutex::new((f64::from(r), Instant::now())))),
                })
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClientRule;

    fn rule(max_in_flight: Option<u32>, max_calls_per_second: Option<u32>) -> ClientRule {
        ClientRule {
            identity: "signer".into(),
            tokens: vec![],
            so: false,
            max_in_flight,
            max_calls_per_second,
        }
    }

    #[test]
    fn calls_in_flight_are_held_to_the_limit_and_released() {
        let limit = Limits::default().of(&rule(Some(2), None));
        let a = limit.admit().ok().unwrap();
        let _b = limit.admit().ok().unwrap();
        let refused = limit.admit().err().unwrap();
        assert_eq!(refused.reason, "max_in_flight");
        assert!(
            refused.message.contains("signer has 2 calls in flight"),
            "{}",
            refused.message
        );
        drop(a);
        assert!(limit.admit().is_ok(), "a call that ended frees its place");
    }

    #[test]
    fn calls_per_second_allow_a_second_of_burst_then_refuse() {
        let limit = Limits::default().of(&rule(None, Some(5)));
        for i in 0..5 {
            assert!(limit.admit().is_ok(), "call {i} of the burst");
        }
        assert_eq!(limit.admit().err().unwrap().reason, "max_calls_per_second");
        std::thread::sleep(std::time::Duration::from_millis(450));
        assert!(limit.admit().is_ok(), "the bucket refills at the rate");
    }

    #[test]
    fn an_identity_has_one_limit_across_its_connections() {
        let limits = Limits::default();
        let (one, two) = (limits.of(&rule(Some(1), None)), limits.of(&rule(Some(1), None)));
        let _held = one.admit().ok().unwrap();
        assert!(two.admit().is_err());
    }
}
