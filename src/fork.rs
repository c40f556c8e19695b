//! Fork detection: a counter bumped in the child after every `fork()`. State made before a
//! fork belongs to the parent (its locks may be held by threads the child does not have).

use std::sync::atomic::{AtomicU64, Ordering};

static GENERATION: AtomicU64 = AtomicU64::new(0);

extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// Installs the handler once per process.
pub fn watch() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain function that only bumps an atomic. Handlers cannot be
        // unregistered, so the module is linked `-z nodelete` (build.rs): the code stays mapped
        // after a dlclose and the child's handler never runs into unmapped memory.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
}

/// The number of forks between the process start and this one.
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}
