//! Session and session-object handles: counters of the process, not of one `Library`, so a
//! handle kept across `C_Finalize`/`C_Initialize` can never address a new session or object
//! (it gets `CKR_SESSION_HANDLE_INVALID`/`CKR_OBJECT_HANDLE_INVALID` instead).

use crate::store::MAX_OBJECT_ID;
use cryptoki_sys::{CK_OBJECT_HANDLE, CK_SESSION_HANDLE};
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);
/// Token objects' handles are their store ids, below `MAX_OBJECT_ID`; session objects' are above.
static NEXT_SESSION_OBJECT: AtomicU64 = AtomicU64::new(MAX_OBJECT_ID);

pub fn new_session_handle() -> CK_SESSION_HANDLE {
    NEXT_SESSION.fetch_add(1, Ordering::Relaxed) as CK_SESSION_HANDLE
}

pub fn new_session_object_handle() -> CK_OBJECT_HANDLE {
    NEXT_SESSION_OBJECT.fetch_add(1, Ordering::Relaxed) as CK_OBJECT_HANDLE
}
