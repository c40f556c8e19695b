//! Slot and token management (PKCS#11 §5.5).

use super::convert::{out, padded, required_bytes};
use super::lib;
use crate::error::{fail, fail_because};
use crate::store::{MAX_PIN_LEN, MIN_PIN_LEN};
use crate::token;
use cryptoki_sys::*;

ck_fn!(
    fn C_GetSlotList(token_present: CK_BBOOL, list: *mut CK_SLOT_ID, count: *mut CK_ULONG) {
        let l = lib()?;
        // SAFETY: the caller's count, NULL or valid per PKCS#11.
        let count = unsafe { out(count) }?;
        // SAFETY: the caller's list, NULL or valid for `*count` slot ids per PKCS#11.
        unsafe { write_list(&l.0.slot_list(token_present != 0)?, list, count) }
    }
);

ck_fn!(
    fn C_GetSlotInfo(slot: CK_SLOT_ID, info: *mut CK_SLOT_INFO) {
        let l = lib()?;
        // SAFETY: the caller's output structure, NULL or valid per PKCS#11.
        let info = unsafe { out(info) }?;
        l.0.check_slot(slot)?;
        info.slotDescription = padded(format!("ferrohsm slot {slot}").as_bytes());
        info.manufacturerID = padded(token::MANUFACTURER.as_bytes());
        info.flags = CKF_TOKEN_PRESENT;
        info.hardwareVersion = CK_VERSION {
            major: token::VERSION_MAJOR,
            minor: token::VERSION_MINOR,
        };
        info.firmwareVersion = CK_VERSION {
            major: token::VERSION_MAJOR,
            minor: token::VERSION_MINOR,
        };
        Ok(())
    }
);

ck_fn!(
    fn C_GetTokenInfo(slot: CK_SLOT_ID, info: *mut CK_TOKEN_INFO) {
        let l = lib()?;
        // SAFETY: the caller's output structure, NULL or valid per PKCS#11.
        let info = unsafe { out(info) }?;
        let t = l.0.token_info(slot)?;
        info.label = padded(&t.label);
        info.serialNumber = padded(&t.serial);
        info.manufacturerID = padded(token::MANUFACTURER.as_bytes());
        info.model = padded(token::MODEL.as_bytes());
        info.flags = t.flags;
        info.ulMaxSessionCount = CK_EFFECTIVELY_INFINITE;
        info.ulSessionCount = t.sessions as CK_ULONG;
        info.ulMaxRwSessionCount = CK_EFFECTIVELY_INFINITE;
        info.ulRwSessionCount = t.rw_sessions as CK_ULONG;
        info.ulMaxPinLen = MAX_PIN_LEN as CK_ULONG;
        info.ulMinPinLen = MIN_PIN_LEN as CK_ULONG;
        info.ulTotalPublicMemory = CK_UNAVAILABLE_INFORMATION;
        info.ulFreePublicMemory = CK_UNAVAILABLE_INFORMATION;
        info.ulTotalPrivateMemory = CK_UNAVAILABLE_INFORMATION;
        info.ulFreePrivateMemory = CK_UNAVAILABLE_INFORMATION;
        info.hardwareVersion = CK_VERSION {
            major: token::VERSION_MAJOR,
            minor: token::VERSION_MINOR,
        };
        info.firmwareVersion = CK_VERSION {
            major: token::VERSION_MAJOR,
            minor: token::VERSION_MINOR,
        };
        info.utcTime = utc_time();
        Ok(())
    }
);

/// A list per the two-call convention: the count alone for a NULL list, else the items when
/// they fit, else `CKR_BUFFER_TOO_SMALL` with the needed count.
///
/// # Safety
/// `list` is NULL or valid for writing `*count` items.
unsafe fn write_list(
    items: &[CK_ULONG],
    list: *mut CK_ULONG,
    count: &mut CK_ULONG,
) -> crate::error::Result<()> {
    if !list.is_null() {
        if (*count as usize) < items.len() {
            *count = items.len() as CK_ULONG;
            return fail(CKR_BUFFER_TOO_SMALL);
        }
        for (i, item) in items.iter().enumerate() {
            // SAFETY: `list` holds `*count` >= `items.len()` items (the caller's contract,
            // checked length); written unaligned as the caller's array may be.
            unsafe { list.add(i).write_unaligned(*item) };
        }
    }
    *count = items.len() as CK_ULONG;
    Ok(())
}

/// The current UTC time as `YYYYMMDDhhmmss00`.
fn utc_time() -> [u8; 16] {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    let s = format!(
        "{y:04}{m:02}{d:02}{:02}{:02}{:02}00",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    padded(s.as_bytes())
}

ck_fn!(
    fn C_GetMechanismList(slot: CK_SLOT_ID, list: *mut CK_MECHANISM_TYPE, count: *mut CK_ULONG) {
        let l = lib()?;
        // SAFETY: the caller's count, NULL or valid per PKCS#11.
        let count = unsafe { out(count) }?;
        let mechs = l.0.mechanism_list(slot)?;
        // SAFETY: the caller's list, NULL or valid for `*count` mechanism types per PKCS#11.
        unsafe { write_list(&mechs, list, count) }
    }
);

ck_fn!(
    fn C_GetMechanismInfo(slot: CK_SLOT_ID, mech: CK_MECHANISM_TYPE, info: *mut CK_MECHANISM_INFO) {
        let l = lib()?;
        // SAFETY: the caller's output structure, NULL or valid per PKCS#11.
        let info = unsafe { out(info) }?;
        *info = l.0.mechanism_info(slot, mech)?;
        Ok(())
    }
);

ck_fn!(
    fn C_InitToken(slot: CK_SLOT_ID, pin: *mut CK_UTF8CHAR, pin_len: CK_ULONG, label: *mut CK_UTF8CHAR) {
        let l = lib()?;
        if label.is_null() {
            return fail_because(CKR_ARGUMENTS_BAD, "C_InitToken: the label is NULL");
        }
        // SAFETY: the caller's PIN, NULL or valid for `pin_len` bytes per PKCS#11.
        let pin = unsafe { required_bytes(pin, pin_len) }?;
        // SAFETY: a non-NULL label is 32 bytes per PKCS#11; bytes need no alignment.
        let label: [u8; 32] = unsafe { std::ptr::read_unaligned(label as *const [u8; 32]) };
        l.0.init_token(slot, pin, &label)
    }
);

ck_fn!(
    fn C_InitPIN(session: CK_SESSION_HANDLE, pin: *mut CK_UTF8CHAR, len: CK_ULONG) {
        let l = lib()?;
        // SAFETY: the caller's PIN, NULL or valid for `len` bytes per PKCS#11.
        l.0.init_pin(session, unsafe { required_bytes(pin, len) }?)
    }
);

ck_fn!(
    fn C_SetPIN(
        session: CK_SESSION_HANDLE,
        old: *mut CK_UTF8CHAR,
        old_len: CK_ULONG,
        new: *mut CK_UTF8CHAR,
        new_len: CK_ULONG,
    ) {
        let l = lib()?;
        // SAFETY: the caller's PINs, NULL or valid for their lengths per PKCS#11.
        let (old, new) = unsafe { (required_bytes(old, old_len)?, required_bytes(new, new_len)?) };
        l.0.set_pin(session, old, new)
    }
);
