//! The two CRT halves of a lone request side by side: the caller computes one half while a
//! helper thread computes the other on an idle core, which halves a single client's latency.
//!
//! Measured on a 2-core AMD EPYC Zen 3 (`benches/rsa_stages.rs`, 2026-12-03): a lone mulx
//! RSA-2048 signature spends 96% of its 1.89 M TSC cycles in its two half exponentiations
//! (0.91 M each) and 2.5% in the check; `openssl speed` signs in 1.64 M on one core. With
//! the halves on both cores the signature costs one half plus the hand-off.
//!
//! Measured through PKCS#11 on that machine while other work kept both cores busy (load
//! average 5-6; `ferrohsm-util bench --threads 1`, pair on and off alternating, same minutes):
//! RSA-1024 6,284-6,318/s paired against 6,606-6,640/s on one thread, RSA-2048 1,333-1,335
//! against 1,273-1,359, RSA-4096 167-175 against 181-187: the helper's core was never idle
//! there, and a half the helper has taken cannot be taken back. So the pairing adapts
//! (`Backoff`): a lone request whose helper missed makes the next ones run alone, for longer
//! after each further miss, so a busy machine pays for about one try in 1,024 and an idle one
//! pairs every lone request. `FERROHSM_CRT_PAIR=1` pairs always, `0` never;
//! `benches/rsa_stages.rs` prints the join's wall time (one half's time when the helper gets
//! a core at once).
//!
//! One helper thread per process (per fork generation), started on first use, parked when
//! idle. Nothing ever waits for it: the caller posts its half, runs the other, and if the
//! helper has not taken the posted half by then (busy with another caller's, not scheduled
//! because the cores are busy, or not yet awake) the caller takes it back and runs it
//! itself. So a request never takes longer than on one thread (but for one unpark), and
//! under load, when no core is idle, the halves simply run one after the other. The split
//! changes no arithmetic: each half is the same constant-time code on either thread.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::Thread;

const IDLE: u8 = 0;
/// A caller is writing its task (or took it back, or is running it itself).
const CLAIMED: u8 = 1;
const POSTED: u8 = 2;
const TAKEN: u8 = 3;
const DONE: u8 = 4;

type Task = *mut (dyn FnMut() + Send);

struct Helper {
    state: AtomicU8,
    /// Written by the caller that moved `state` IDLE → CLAIMED, read by the helper after it
    /// moved POSTED → TAKEN: never accessed by two threads at once.
    task: UnsafeCell<Option<Task>>,
    /// The caller waiting for the task, handed over with it (same protocol as `task`).
    waiter: UnsafeCell<Option<Thread>>,
    panicked: AtomicBool,
    /// The helper sleeps in `park` (it spins a while after each task first).
    asleep: AtomicBool,
    thread: Thread,
    generation: u64,
}

// SAFETY: `task` is handed over by the state protocol above (acquire/release on `state`).
unsafe impl Sync for Helper {}
// SAFETY: as above; the task pointer is only dereferenced while its owner waits (`Posted`).
unsafe impl Send for Helper {}

impl Helper {
    fn run(&self) {
        loop {
            // A short spin first: a single client's next request comes within microseconds.
            let mut spins = 0u32;
            while self.state.load(Ordering::Acquire) != POSTED {
                if spins < 500 {
                    std::hint::spin_loop();
                    spins += 1;
                } else {
                    self.asleep.store(true, Ordering::Relaxed);
                    std::thread::park();
                    self.asleep.store(false, Ordering::Relaxed);
                }
            }
            if self
                .state
                .compare_exchange(POSTED, TAKEN, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                continue; // taken back by its caller
            }
            // SAFETY: TAKEN gives this thread the task; its caller waits for DONE before
            // the closure's borrows end (`Posted::drop`).
            let (task, waiter) = unsafe { ((*self.task.get()).take(), (*self.waiter.get()).take()) };
            if let Some(task) = task {
                // SAFETY: as above: the closure is alive and nobody else calls it.
                let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { (*task)() }));
                self.panicked.store(ok.is_err(), Ordering::Relaxed);
            }
            self.state.store(DONE, Ordering::Release);
            if let Some(w) = waiter {
                w.unpark();
            }
        }
    }
}

/// `FERROHSM_CRT_PAIR`: unset (or anything else) pairs adaptively, `1` pairs every lone
/// request, `0` never pairs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Adaptive,
    Always,
    Off,
}

static MODE: std::sync::OnceLock<Mode> = std::sync::OnceLock::new();
static FORCED: AtomicBool = AtomicBool::new(false);

/// Pairs every lone request whatever `FERROHSM_CRT_PAIR` says (tests, benches).
pub fn force_on() {
    FORCED.store(true, Ordering::Relaxed);
}

fn mode() -> Mode {
    if FORCED.load(Ordering::Relaxed) {
        return Mode::Always;
    }
    *MODE.get_or_init(|| match std::env::var("FERROHSM_CRT_PAIR").as_deref() {
        Ok("1") => Mode::Always,
        Ok("0") => Mode::Off,
        _ => Mode::Adaptive,
    })
}

/// The adaptive mode's memory: after a miss (`Outcome::Missed`: no core was free)
/// the next `MIN_SKIP` lone requests run both halves on their caller, and each further miss
/// doubles that, up to `MAX_SKIP`; one hit resets it. On a machine whose cores other work
/// keeps busy, pairing is then tried about once in 1,024 requests, and its cost (an unpark,
/// a half run late) vanishes; on an idle one every lone request pairs. Races between callers
/// only blur the counts: the rule is a heuristic, never a correctness matter.
struct Backoff {
    skip: AtomicU32,
    length: AtomicU32,
}

const MIN_SKIP: u32 = 4;
const MAX_SKIP: u32 = 1024;
static BACKOFF: Backoff = Backoff::new();

impl Backoff {
    const fn new() -> Backoff {
        Backoff {
            skip: AtomicU32::new(0),
            length: AtomicU32::new(0),
        }
    }

    /// Whether this lone request should try the helper, counting a skip if not.
    fn try_now(&self) -> bool {
        self.skip
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| s.checked_sub(1))
            .is_err()
    }

    fn record(&self, outcome: Outcome) {
        match outcome {
            Outcome::Paid => self.length.store(0, Ordering::Relaxed),
            Outcome::Excused => {}
            Outcome::Missed => {
                let b = self
                    .length
                    .load(Ordering::Relaxed)
                    .saturating_mul(2)
                    .clamp(MIN_SKIP, MAX_SKIP);
                self.length.store(b, Ordering::Relaxed);
                self.skip.store(b, Ordering::Relaxed);
            }
        }
    }
}

/// How a pairing went, for `Backoff`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Outcome {
    /// The helper ran the other half and the pair took less than both halves in a row.
    Paid,
    /// The helper ran it late, but it was asleep when the half was posted: its wake-up (tens
    /// of µs in a VM, much of a half at RSA-1024) is not a busy machine's sign, and after its
    /// task it spins, awake for the next request. Neither a hit nor a miss: the next lone
    /// request tries again and decides.
    Excused,
    /// Taken back, or run so late by an awake helper that no core was free.
    Missed,
}

impl Outcome {
    fn of(helped: bool, paid: bool, was_asleep: bool) -> Outcome {
        match (helped, paid, was_asleep) {
            (true, true, _) => Outcome::Paid,
            (true, false, true) => Outcome::Excused,
            _ => Outcome::Missed,
        }
    }
}

/// The helper of this process (a fresh one after a fork: the parent's thread is not in the
/// child), or None on a single core.
fn helper() -> Option<Arc<Helper>> {
    static HELPER: arc_swap::ArcSwapOption<Helper> = arc_swap::ArcSwapOption::const_empty();
    static SINGLE_CORE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *SINGLE_CORE.get_or_init(|| std::thread::available_parallelism().map_or(true, |n| n.get() < 2))
        || mode() == Mode::Off
    {
        return None;
    }
    let generation = crate::fork::generation();
    let current = HELPER.load_full();
    if let Some(h) = current.as_ref().filter(|h| h.generation == generation) {
        return Some(h.clone());
    }
    // Only the caller that installs its helper starts a thread for it.
    let (tx, rx) = std::sync::mpsc::channel::<Arc<Helper>>();
    let spawned = std::thread::Builder::new()
        .name("ferrohsm-crt".into())
        .spawn(move || {
            if let Ok(h) = rx.recv() {
                h.run();
            }
        })
        .ok()?;
    let fresh = Arc::new(Helper {
        state: AtomicU8::new(IDLE),
        task: UnsafeCell::new(None),
        waiter: UnsafeCell::new(None),
        panicked: AtomicBool::new(false),
        asleep: AtomicBool::new(false),
        thread: spawned.thread().clone(),
        generation,
    });
    // A helper from before a fork belongs to the parent: `replace_stale` abandons it.
    if crate::fork::replace_stale(&HELPER, &current, &fresh) {
        let _ = tx.send(fresh.clone());
        Some(fresh)
    } else {
        drop(tx); // its thread ends
        let h = HELPER.load_full();
        h.filter(|h| h.generation == generation)
    }
}

/// A task handed to the helper: on drop (also when the caller's own half panics) the task is
/// taken back or waited for, so its borrows outlive every use.
struct Posted<'a> {
    helper: &'a Helper,
    task: Task,
    finished: bool,
    _borrow: std::marker::PhantomData<&'a mut ()>,
}

/// Sets the helper idle when dropped (also when a task taken back panics on the caller).
struct Release<'a>(&'a AtomicU8);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.store(IDLE, Ordering::Release);
    }
}

impl Posted<'_> {
    /// Runs the task here if the helper has not started it; else waits for it. Whether it
    /// ran without a panic on the helper, and whether the helper ran it.
    fn finish(&mut self) -> (bool, bool) {
        self.finished = true;
        let h = self.helper;
        let _idle = Release(&h.state);
        if h.state
            .compare_exchange(POSTED, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            // SAFETY: CLAIMED: the helper no longer reads the slot, and the closure is alive
            // (the `'a` borrow) and called by this thread only.
            unsafe {
                *h.task.get() = None;
                *h.waiter.get() = None;
                (*self.task)();
            }
            return (true, false);
        }
        // The helper runs the same amount of work as the caller just did: a short spin, then
        // park (it unparks this thread when done), so a helper that lost its core to other
        // processes does not also cost the caller's.
        let mut spins = 0u32;
        while h.state.load(Ordering::Acquire) != DONE {
            if spins < 2_000 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::park();
            }
        }
        (!h.panicked.swap(false, Ordering::Relaxed), true)
    }
}

impl Drop for Posted<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.finish();
        }
    }
}

/// Runs `other` and `mine`, `other` on the helper thread if it is free, `mine` on the caller;
/// both on the caller otherwise. Panics if `other` panicked on the helper.
pub fn join(other: &mut (dyn FnMut() + Send), mine: &mut dyn FnMut()) {
    let Some(h) = helper() else {
        other();
        mine();
        return;
    };
    let adaptive = mode() == Mode::Adaptive;
    if adaptive && !BACKOFF.try_now() {
        other();
        mine();
        return;
    }
    if h.state
        .compare_exchange(IDLE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        // Another caller's halves are on it.
        other();
        mine();
        return;
    }
    // SAFETY: the lifetime is erased for the slot only: `Posted` (dropped before `other`'s
    // borrow ends, on every path) takes the task back or waits until the helper is done, and
    // `other` is not touched but through this pointer meanwhile.
    let task: Task = unsafe { std::mem::transmute::<&mut (dyn FnMut() + Send), Task>(other) };
    let was_asleep = h.asleep.load(Ordering::Relaxed);
    // SAFETY: CLAIMED gives this thread the slot.
    unsafe {
        *h.task.get() = Some(task);
        *h.waiter.get() = Some(std::thread::current());
    }
    let mut posted = Posted {
        helper: &h,
        task,
        finished: false,
        _borrow: std::marker::PhantomData,
    };
    h.state.store(POSTED, Ordering::Release);
    h.thread.unpark();
    let start = std::time::Instant::now();
    mine();
    let alone = start.elapsed();
    let (ok, helped) = posted.finish();
    drop(posted);
    if adaptive {
        // Paid: less than the two halves one after the other (about twice the caller's own).
        BACKOFF.record(Outcome::of(helped, start.elapsed() < alone * 2, was_asleep));
    }
    assert!(ok, "a CRT half panicked on the helper thread");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_halves_run_once_whoever_runs_them() {
        force_on();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    for i in 0..2000u64 {
                        let (mut a, mut b) = (0u64, 0u64);
                        let mut other = || a += i + t;
                        let mut mine = || b += 2 * i;
                        join(&mut other, &mut mine);
                        assert_eq!((a, b), (i + t, 2 * i));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn misses_back_off_doubling_and_a_hit_resets() {
        let b = Backoff::new();
        assert!(b.try_now() && b.try_now(), "no miss yet: every request tries");
        let skipped_after = |b: &Backoff, o: Outcome| {
            b.record(o);
            (0..).take_while(|_| !b.try_now()).count()
        };
        assert_eq!(skipped_after(&b, Outcome::Missed), 4);
        assert_eq!(skipped_after(&b, Outcome::Missed), 8);
        // A late pairing with a helper woken from its sleep neither resets nor lengthens.
        assert_eq!(skipped_after(&b, Outcome::Excused), 0);
        assert_eq!(skipped_after(&b, Outcome::Missed), 16);
        for _ in 0..20 {
            b.record(Outcome::Missed);
        }
        assert_eq!(skipped_after(&b, Outcome::Missed), MAX_SKIP as usize);
        assert_eq!(
            skipped_after(&b, Outcome::Paid),
            0,
            "after a hit the next request tries"
        );
        assert_eq!(
            skipped_after(&b, Outcome::Missed),
            4,
            "and a new miss starts from the shortest skip"
        );
    }

    #[test]
    fn outcomes() {
        assert_eq!(Outcome::of(true, true, false), Outcome::Paid);
        assert_eq!(Outcome::of(true, true, true), Outcome::Paid);
        assert_eq!(Outcome::of(true, false, true), Outcome::Excused);
        assert_eq!(Outcome::of(true, false, false), Outcome::Missed);
        assert_eq!(Outcome::of(false, false, true), Outcome::Missed);
        assert_eq!(Outcome::of(false, false, false), Outcome::Missed);
    }

    #[test]
    fn a_panic_on_either_side_reaches_the_caller_and_the_helper_recovers() {
        force_on();
        let r = std::panic::catch_unwind(|| {
            let mut other = || panic!("other");
            let mut mine = || std::thread::sleep(std::time::Duration::from_millis(20));
            join(&mut other, &mut mine);
        });
        assert!(r.is_err());
        let r = std::panic::catch_unwind(|| {
            let mut other = || std::thread::sleep(std::time::Duration::from_millis(5));
            let mut mine = || panic!("mine");
            join(&mut other, &mut mine);
        });
        assert!(r.is_err());
        let (mut a, mut b) = (0, 0);
        join(&mut || a = 1, &mut || b = 2);
        assert_eq!((a, b), (1, 2));
    }
}
