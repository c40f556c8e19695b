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

/// Starts this process's session-object handles at a random point above `MAX_OBJECT_ID` (of
/// 2^62), so that two processes are very unlikely to give out the same handle: a server does
/// this at start, so that a session-object handle a client kept from a server it lost (its
/// objects gone with the connection) meets no object on the server it moves to, where the
/// same number would otherwise soon name one of the client's new objects.
pub fn randomize_session_object_handles() {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_ok() {
        let offset = u64::from_le_bytes(bytes) >> 2;
        NEXT_SESSION_OBJECT.store(MAX_OBJECT_ID + offset, Ordering::Relaxed);
    }
}

pub fn new_session_object_handle() -> CK_OBJECT_HANDLE {
    NEXT_SESSION_OBJECT.fetch_add(1, Ordering::Relaxed) as CK_OBJECT_HANDLE
}
