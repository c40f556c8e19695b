//! Record times: UTC in RFC 3339 with milliseconds, one fixed width, so that times compare as
//! text (`audit show --since`, `audit prune --before`). No time crate in the module for this.

use std::time::{SystemTime, UNIX_EPOCH};

/// The civil date of a day count since 1970-01-01 (Howard Hinnant's days-to-civil algorithm).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `ms` since the epoch as `2026-12-08T01:43:19.123Z`.
pub fn format(ms: u64) -> String {
    let secs = (ms / 1000) as i64;
    let (y, mo, d) = civil(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        s / 3600,
        s / 60 % 60,
        s % 60,
        ms % 1000
    )
}

pub fn now() -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    format(ms)
}

/// Whether `t` is a date (`2026-12-08`) or a time as records write it, or a prefix of one
/// (`2026-12-08T01:43`): what the filters accept, compared as text.
pub fn valid_bound(t: &str) -> bool {
    let model = "0000-00-00T00:00:00.000Z";
    t.len() >= 10
        && t.len() <= model.len()
        && t.bytes()
            .zip(model.bytes())
            .all(|(c, m)| if m == b'0' { c.is_ascii_digit() } else { c == m })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(format(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(format(1_796_694_199_000), "2026-12-08T01:43:19.000Z");
        assert!(valid_bound("2026-12-08"));
        assert!(valid_bound("2026-12-08T01:43"));
        assert!(!valid_bound("yesterday"));
    }
}
