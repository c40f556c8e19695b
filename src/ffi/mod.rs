//! The C ABI: every exported `C_*` function is a thin shell made by `ck_fn!` around Rust code
//! returning `Result<(), Error>`. This folder converts pointers and nothing else.
//!
//! Unsafe code is confined here (and to the engine's intrinsics); inside the shells every
//! unsafe operation is its own block with a `// SAFETY:` line, never the whole body.
#![deny(unsafe_op_in_unsafe_fn)]

#[macro_use]
mod macros;
mod array;
mod convert;
mod crypto;
pub mod function_list;
mod general;
mod interface;
mod object;
mod param;
mod session;
mod slice;
mod slot;
pub mod vendor;

pub use crypto::*;
pub use general::*;
pub use interface::*;
pub use object::*;
pub use session::*;
pub use slot::*;
pub use vendor::*;

use crate::error::{Error, Result};
use crate::service::Service;
use arc_swap::ArcSwapOption;
use cryptoki_sys::*;
use std::sync::Arc;

/// The initialised token service (local or remote), if any, with the fork generation it was made in.
static STATE: ArcSwapOption<(Service, u64)> = ArcSwapOption::const_empty();

/// The library for this call, or `CKR_CRYPTOKI_NOT_INITIALIZED` (also in a forked child
/// that has not called `C_Initialize` itself).
pub(crate) fn lib() -> Result<LibRef> {
    let state = STATE.load();
    match &*state {
        Some(s) if s.1 == crate::fork::generation() => Ok(LibRef { state }),
        _ => Err(Error(CKR_CRYPTOKI_NOT_INITIALIZED)),
    }
}

/// The library for the length of one call: arc_swap's guard, which marks the library in use
/// in a slot of this thread's instead of counting a reference in the library's shared `Arc`.
/// With signers on every core, that shared count was a write to one cache line by every call
/// of every thread (`ffi::lib` 0.1% of a one-client profile, 0.4% at two clients).
pub(crate) struct LibRef {
    state: arc_swap::Guard<Option<Arc<(Service, u64)>>>,
}

impl std::ops::Deref for LibRef {
    type Target = (Service, u64);

    fn deref(&self) -> &(Service, u64) {
        self.state
            .as_deref()
            .expect("lib() returns a LibRef only for an initialised library")
    }
}

/// Runs an entry point's body: panics become `CKR_GENERAL_ERROR`, errors their `CK_RV`.
pub(crate) fn guard(name: &str, f: impl FnOnce() -> Result<()>) -> CK_RV {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => CKR_OK,
        Ok(Err(e)) => {
            log::debug!("{name} -> {e}");
            e.rv()
        }
        Err(_) => {
            log::error!("{name}: internal error (panic caught at the C boundary)");
            CKR_GENERAL_ERROR
        }
    }
}
