//! Fork detection: a counter bumped in the child after every `fork()`. State made before a
//! fork belongs to the parent (its locks may be held by threads the child does not have).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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

/// Puts `fresh` in `slot` if the slot still holds `current` (what the caller loaded and found
/// stale): true if it did. The value it replaced was made before a fork and belongs to the
/// parent, whose threads may hold its locks: it is abandoned, never dropped. Lock-free, so a
/// child forked while a parent thread was in here cannot deadlock; of racing callers exactly
/// one wins.
pub fn replace_stale<T>(slot: &arc_swap::ArcSwapOption<T>, current: &Option<Arc<T>>, fresh: &Arc<T>) -> bool {
    let previous = slot.compare_and_swap(current, Some(fresh.clone()));
    let won = match (&*previous, current) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    };
    if won {
        std::mem::forget(arc_swap::Guard::into_inner(previous));
    }
    won
}
