//! Verification of an exported log, offline: the records must follow each other by number,
//! each naming the hash of the one before and hashing to what it says, and every checkpoint
//! must carry the audit key's signature over the chain up to it. The first record is number 1
//! (after 32 zero bytes), or a signed checkpoint where `audit prune` cut the older ones.
//!
//! What it cannot see: records removed from the end of a log after its last checkpoint (the
//! report says how many records follow that checkpoint unsigned; compare with the number of
//! the last record you saw before).

use super::{chain, checkpoint, event, hex, unhex, Entry};
use ed25519_dalek::VerifyingKey;

/// A log that verifies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub first: u64,
    pub last: u64,
    pub records: u64,
    pub checkpoints: u64,
    /// The number of the last signed checkpoint.
    pub last_checkpoint: Option<u64>,
}

/// The first place a log does not verify: the record number where the chain breaks (for a
/// line that is not a record: the number it should have had), the line, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Break {
    pub seq: u64,
    pub line: usize,
    pub why: String,
}

impl std::fmt::Display for Break {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the chain breaks at record {} (line {}): {}",
            self.seq, self.line, self.why
        )
    }
}

/// Verifies the lines of an exported log (JSON Lines; blank lines ignored).
pub fn verify<'a>(lines: impl IntoIterator<Item = &'a str>, key: &VerifyingKey) -> Result<Report, Break> {
    let mut report = Report {
        first: 0,
        last: 0,
        records: 0,
        checkpoints: 0,
        last_checkpoint: None,
    };
    let mut before: Option<Entry> = None;
    for (n, line) in lines.into_iter().enumerate() {
        let line_no = n + 1;
        if line.trim().is_empty() {
            continue;
        }
        let expected = before.as_ref().map_or(1, |b| b.record.seq + 1);
        let broken = |seq: u64, why: String| Break {
            seq,
            line: line_no,
            why,
        };
        let e: Entry = serde_json::from_str(line)
            .map_err(|err| broken(expected, format!("not an audit record ({err})")))?;
        let r = &e.record;
        let prev = unhex(&e.prev)
            .filter(|p| p.len() == 32)
            .ok_or_else(|| broken(r.seq, "its prev is not a SHA-256 in hex".into()))?;
        match &before {
            None if r.seq == 1 && prev != chain::ZERO => {
                return Err(broken(1, "the first record names a record before it".into()));
            }
            None if r.seq == 1 => {}
            None if r.event != event::CHECKPOINT => {
                return Err(broken(
                    r.seq,
                    format!(
                        "records 1 to {} are missing and no signed checkpoint marks a cut there",
                        r.seq - 1
                    ),
                ));
            }
            None => {}
            Some(b) => {
                if r.token != b.record.token {
                    return Err(broken(r.seq, format!("a record of another token ({})", r.token)));
                }
                if r.seq != expected {
                    let why = if r.seq > expected {
                        format!("record {expected} is missing (the next line is record {})", r.seq)
                    } else {
                        format!(
                            "record {} comes again or out of order after record {}",
                            r.seq, b.record.seq
                        )
                    };
                    return Err(broken(expected, why));
                }
                if e.prev != b.hash {
                    return Err(broken(
                        r.seq,
                        format!(
                            "it does not follow record {} (its prev is not that record's hash)",
                            b.record.seq
                        ),
                    ));
                }
            }
        }
        if hex(&chain::hash(&prev, &chain::encode(r))) != e.hash {
            return Err(broken(
                r.seq,
                "its fields do not hash to its hash: the record was altered".into(),
            ));
        }
        if r.event == event::CHECKPOINT {
            let sig = r.detail.as_deref().and_then(unhex).unwrap_or_default();
            if !checkpoint::check(key, &r.token, r.seq, &r.time, &prev, &sig) {
                return Err(broken(
                    r.seq,
                    "the checkpoint's signature does not verify under this public key: forged, or the chain before it was altered".into(),
                ));
            }
            report.checkpoints += 1;
            report.last_checkpoint = Some(r.seq);
        }
        if before.is_none() {
            report.first = r.seq;
        }
        report.last = r.seq;
        report.records += 1;
        before = Some(e);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::audit::{chain, Record};

    fn log(n: u64) -> Vec<String> {
        let mut prev = chain::ZERO.to_vec();
        (1..=n)
            .map(|seq| {
                let e = chain::link(
                    &prev,
                    Record {
                        seq,
                        token: "t".into(),
                        event: "login".into(),
                        ..Default::default()
                    },
                );
                prev = unhex(&e.hash).unwrap();
                serde_json::to_string(&e).unwrap()
            })
            .collect()
    }

    fn key() -> VerifyingKey {
        ed25519_dalek::SigningKey::from_bytes(&[1; 32]).verifying_key()
    }

    #[test]
    fn a_chain_without_checkpoints_verifies_unsigned() {
        let lines = log(3);
        let r = verify(lines.iter().map(String::as_str), &key()).unwrap();
        assert_eq!((r.first, r.last, r.records, r.last_checkpoint), (1, 3, 3, None));
    }

    #[test]
    fn a_line_that_is_not_a_record_is_located() {
        let mut lines = log(3);
        lines[1] = "{not json".into();
        let b = verify(lines.iter().map(String::as_str), &key()).unwrap_err();
        assert_eq!((b.seq, b.line), (2, 2));
        assert!(b.why.contains("not an audit record"), "{b}");
    }

    #[test]
    fn a_record_of_another_token_breaks_the_chain() {
        let mut lines = log(3);
        lines[2] = lines[2].replace("\"token\":\"t\"", "\"token\":\"u\"");
        let b = verify(lines.iter().map(String::as_str), &key()).unwrap_err();
        assert_eq!(b.seq, 3);
    }
}
