//! Vendor extensions (`include/ferrohsm.h`): self-test, engine speed probe, engine statistics
//! (overall and per kernel family, read through the engine's kernel seam), the arithmetic
//! each curve runs on, token initialisation with the user PIN in one step.

use super::convert::{bytes, out};
use super::lib;
use crate::engine;
use crate::error::{fail, fail_because, Error};
use cryptoki_sys::*;

/// Mirrors `FERROHSM_ENGINE_STATS`.
#[repr(C)]
pub struct EngineStats {
    pub kernel: CK_ULONG,
    pub self_test_passed: CK_ULONG,
    pub operations: CK_ULONG,
    pub fault_checks_failed: CK_ULONG,
    pub batches: [CK_ULONG; 4],
    pub mean_batch_fill: f64,
}

/// Bytes of a family name in `FERROHSM_KERNEL_STATS`, the terminating NUL included.
pub const KERNEL_NAME_LEN: usize = 16;
/// Batch sizes `FERROHSM_KERNEL_STATS` counts.
pub const KERNEL_MAX_BATCH: usize = 8;

/// Mirrors `FERROHSM_KERNEL_STATS` (since 1.2).
#[repr(C)]
pub struct KernelStats {
    pub name: [u8; KERNEL_NAME_LEN],
    pub id: CK_ULONG,
    pub available: CK_ULONG,
    pub self_test_passed: CK_ULONG,
    pub serves: [CK_ULONG; 4],
    pub max_batch: CK_ULONG,
    pub batches: [CK_ULONG; KERNEL_MAX_BATCH],
}

/// Bytes of a curve or family name in `FERROHSM_CURVE_FAMILY`, the terminating NUL included.
pub const CURVE_NAME_LEN: usize = 16;

/// Mirrors `FERROHSM_CURVE_FAMILY` (since 1.3).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CurveFamily {
    pub curve: [u8; CURVE_NAME_LEN],
    pub family: [u8; CURVE_NAME_LEN],
}

/// Mirrors `FERROHSM_FUNCTION_LIST`.
#[repr(C)]
pub struct VendorFunctionList {
    pub version: CK_VERSION,
    pub self_test: unsafe extern "C" fn(CK_ULONG, *mut CK_ULONG) -> CK_RV,
    pub speed: unsafe extern "C" fn(CK_ULONG, CK_ULONG, CK_ULONG, *mut f64) -> CK_RV,
    pub get_engine_stats: unsafe extern "C" fn(*mut EngineStats) -> CK_RV,
    /// Since 1.1.
    pub init_token_with_pin: unsafe extern "C" fn(
        CK_SLOT_ID,
        *const CK_UTF8CHAR,
        CK_ULONG,
        *const CK_UTF8CHAR,
        *const CK_UTF8CHAR,
        CK_ULONG,
    ) -> CK_RV,
    /// Since 1.2.
    pub get_kernel_stats: unsafe extern "C" fn(*mut KernelStats, *mut CK_ULONG) -> CK_RV,
    /// Since 1.3.
    pub get_curve_families: unsafe extern "C" fn(*mut CurveFamily, *mut CK_ULONG) -> CK_RV,
}

pub static mut VENDOR_FUNCTION_LIST: VendorFunctionList = VendorFunctionList {
    version: CK_VERSION { major: 1, minor: 3 },
    self_test: FERROHSM_SelfTest,
    speed: FERROHSM_Speed,
    get_engine_stats: FERROHSM_GetEngineStats,
    init_token_with_pin: FERROHSM_InitTokenWithPIN,
    get_kernel_stats: FERROHSM_GetKernelStats,
    get_curve_families: FERROHSM_GetCurveFamilies,
};

ck_fn!(
    fn FERROHSM_SelfTest(slot: CK_ULONG, passed: *mut CK_ULONG) {
        let l = lib()?;
        // SAFETY: `passed` is NULL or the caller's writable CK_ULONG.
        let passed = unsafe { out(passed) }?;
        l.0.check_slot(slot)?;
        *passed = engine::self_test() as CK_ULONG;
        Ok(())
    }
);

ck_fn!(
    fn FERROHSM_Speed(bits: CK_ULONG, threads: CK_ULONG, milliseconds: CK_ULONG, sign_per_s: *mut f64) {
        lib()?;
        // SAFETY: `sign_per_s` is NULL or the caller's writable double.
        let rate = unsafe { out(sign_per_s) }?;
        if threads == 0 || threads > 1024 || milliseconds == 0 || milliseconds > 600_000 {
            return fail(CKR_ARGUMENTS_BAD);
        }
        if ![1024, 2048, 3072, 4096].contains(&bits) {
            return fail(CKR_KEY_SIZE_RANGE);
        }
        *rate = engine::speed(bits as usize, threads as usize, milliseconds)
            .map_err(|_| Error(CKR_FUNCTION_FAILED))?;
        Ok(())
    }
);

ck_fn!(
    fn FERROHSM_GetEngineStats(stats: *mut EngineStats) {
        // SAFETY: `stats` is NULL or the caller's writable FERROHSM_ENGINE_STATS.
        let stats = unsafe { out(stats) }?;
        let s = engine::stats();
        stats.kernel = s.kernel as CK_ULONG;
        stats.self_test_passed = s.self_test_passed as CK_ULONG;
        stats.operations = s.operations as CK_ULONG;
        stats.fault_checks_failed = s.fault_checks_failed as CK_ULONG;
        for (d, v) in stats.batches.iter_mut().zip(s.batches) {
            *d = v as CK_ULONG;
        }
        stats.mean_batch_fill = s.mean_batch_fill;
        Ok(())
    }
);

ck_fn!(
    fn FERROHSM_GetKernelStats(list: *mut KernelStats, count: *mut CK_ULONG) {
        // SAFETY: `count` is NULL or the caller's writable CK_ULONG.
        let count = unsafe { out(count) }?;
        let s = engine::stats();
        let n = s.families.len();
        if list.is_null() {
            *count = n as CK_ULONG;
            return Ok(());
        }
        if (*count as usize) < n {
            *count = n as CK_ULONG;
            return fail(CKR_BUFFER_TOO_SMALL);
        }
        // SAFETY: `list` is non-NULL (checked above) and, by the header's contract, holds
        // `*count` >= n writable FERROHSM_KERNEL_STATS; only the first n are written.
        let list = unsafe { std::slice::from_raw_parts_mut(list, n) };
        for (d, f) in list.iter_mut().zip(&s.families) {
            let mut name = [0u8; KERNEL_NAME_LEN];
            let len = f.name.len().min(KERNEL_NAME_LEN - 1);
            name[..len].copy_from_slice(&f.name.as_bytes()[..len]);
            let mut batches = [0 as CK_ULONG; KERNEL_MAX_BATCH];
            for (b, v) in batches.iter_mut().zip(&f.batches) {
                *b = *v as CK_ULONG;
            }
            *d = KernelStats {
                name,
                id: f.vendor_id as CK_ULONG,
                available: f.available as CK_ULONG,
                self_test_passed: f.self_test_passed as CK_ULONG,
                serves: f.serves.map(|x| x as CK_ULONG),
                max_batch: f.max_batch as CK_ULONG,
                batches,
            };
        }
        *count = n as CK_ULONG;
        Ok(())
    }
);

/// `name` as a NUL-terminated C string in a field of `CURVE_NAME_LEN` bytes.
fn c_name(name: &str) -> [u8; CURVE_NAME_LEN] {
    let mut out = [0u8; CURVE_NAME_LEN];
    let len = name.len().min(CURVE_NAME_LEN - 1);
    out[..len].copy_from_slice(&name.as_bytes()[..len]);
    out
}

ck_fn!(
    fn FERROHSM_GetCurveFamilies(list: *mut CurveFamily, count: *mut CK_ULONG) {
        // SAFETY: `count` is NULL or the caller's writable CK_ULONG.
        let count = unsafe { out(count) }?;
        let families = engine::ec::families();
        let n = families.len();
        if list.is_null() {
            *count = n as CK_ULONG;
            return Ok(());
        }
        if (*count as usize) < n {
            *count = n as CK_ULONG;
            return fail(CKR_BUFFER_TOO_SMALL);
        }
        // SAFETY: `list` is non-NULL (checked above) and, by the header's contract, holds
        // `*count` >= n writable FERROHSM_CURVE_FAMILY; only the first n are written.
        let list = unsafe { std::slice::from_raw_parts_mut(list, n) };
        for (d, (curve, family)) in list.iter_mut().zip(families) {
            *d = CurveFamily {
                curve: c_name(curve),
                family: c_name(family),
            };
        }
        *count = n as CK_ULONG;
        Ok(())
    }
);

ck_fn!(
    fn FERROHSM_InitTokenWithPIN(
        slot: CK_SLOT_ID,
        so_pin: *const CK_UTF8CHAR,
        so_pin_len: CK_ULONG,
        label: *const CK_UTF8CHAR,
        user_pin: *const CK_UTF8CHAR,
        user_pin_len: CK_ULONG,
    ) {
        let l = lib()?;
        if so_pin.is_null() || label.is_null() || user_pin.is_null() {
            return fail_because(
                CKR_ARGUMENTS_BAD,
                "FERROHSM_InitTokenWithPIN: the SO PIN, the label and the user PIN must not be NULL",
            );
        }
        // SAFETY: each PIN is readable for its length (the caller's contract).
        let so_pin = unsafe { bytes(so_pin, so_pin_len) }?;
        // SAFETY: as above.
        let user_pin = unsafe { bytes(user_pin, user_pin_len) }?;
        // SAFETY: the header documents label as 32 bytes, as C_InitToken's; checked non-NULL
        // above; read unaligned, as any byte pointer may be.
        let label: [u8; 32] = unsafe { std::ptr::read_unaligned(label as *const [u8; 32]) };
        l.0.init_token_with_user_pin(slot, so_pin, &label, Some(user_pin))
    }
);
