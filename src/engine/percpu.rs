//! Read-only tables that every signature scans, one copy per CPU (`PerCpu`).
//!
//! Why a copy per CPU, measured on the Xeon (family 6 model 167, 2 cores, 2026-12-05): P-256's
//! signer reads all 152 kB of the comb table for every k·G (`ec::p256::comb`). With two
//! threads of one process signing on the two cores, `perf record` put 2.7 µs of each signature
//! in that scan against 1.6 µs when each core ran a process of its own (same table, same code,
//! both cores busy in both runs), and the two processes together signed 7% more than the one
//! process with two threads. A copy per CPU gave the one process that back: 1.03-1.06× at
//! 16 clients (`ferrohsm-util bench --mechanism ecdsa-p256`, both module orders), while two
//! copies that every thread read alike (the same memory layout, still shared) gave 1.00×: the
//! cost is in two cores reading the same lines, not in where the table sits. The generator's
//! 512 KiB check table, read at ~23 scattered entries a signature, gained 1.01× from copies and
//! stays shared.
//!
//! How: a slot per CPU number (modulo `MAX_SLOTS`), the number from `sched_getcpu` (glibc
//! reads it from rseq or the vDSO: no system call). A slot is filled on its CPU's first use
//! with a clone of the first copy, kept as the template (a copy of memory, where making the
//! comb takes about a millisecond), by
//! a thread running there, so on a server with several sockets the copy also sits in the
//! memory nearest the CPU that reads it. A thread that moves to another CPU between the
//! lookup and its reads still reads a whole, valid copy: which copy only changes the speed.
//! The CPU number is public, so the choice says nothing about a secret.

use std::sync::OnceLock;

/// Slots at most: CPUs past this share a slot (`cpu % MAX_SLOTS`), which bounds the memory
/// (64 copies of the 152 kB comb: under 10 MB on the largest servers).
const MAX_SLOTS: usize = 64;

/// One copy of a `T` per CPU, made from the first by `Clone`.
pub struct PerCpu<T> {
    make: fn() -> T,
    /// The copy every other is cloned from, made on first use.
    first: OnceLock<T>,
    slots: Box<[OnceLock<Box<T>>]>,
}

impl<T: Clone> PerCpu<T> {
    /// Copies of `make()`'s value, made when first asked for.
    pub fn new(make: fn() -> T) -> PerCpu<T> {
        let slots = configured_cpus().clamp(1, MAX_SLOTS);
        PerCpu {
            make,
            first: OnceLock::new(),
            slots: (0..slots).map(|_| OnceLock::new()).collect(),
        }
    }

    /// The copy of the CPU this thread runs on.
    pub fn get(&self) -> &T {
        let slot = &self.slots[self.slot_of(current_cpu())];
        slot.get_or_init(|| Box::new(self.first().clone()))
    }

    /// The copy the others are made from.
    fn first(&self) -> &T {
        self.first.get_or_init(self.make)
    }

    /// The slot of CPU `cpu`.
    fn slot_of(&self, cpu: usize) -> usize {
        cpu % self.slots.len()
    }
}

/// The number of the CPU this thread runs on (0 where the OS does not say).
pub(crate) fn current_cpu() -> usize {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sched_getcpu takes no arguments and only returns a number (-1 on error).
        let cpu = unsafe { libc::sched_getcpu() };
        usize::try_from(cpu).unwrap_or(0)
    }
    #[cfg(not(target_os = "linux"))]
    0
}

/// CPUs the system is configured with (CPU numbers run below this).
fn configured_cpus() -> usize {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf only reads the named setting and returns a number (-1 on error).
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        usize::try_from(n).unwrap_or(1)
    }
    #[cfg(not(target_os = "linux"))]
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Calls of `make`: only `each_cpu_reads_its_own_copy` makes its table with it.
    static MADE: AtomicUsize = AtomicUsize::new(0);

    fn make() -> Vec<u64> {
        MADE.fetch_add(1, Ordering::SeqCst);
        make_value()
    }

    fn make_value() -> Vec<u64> {
        (0..1000).map(|i| i * 7 + 3).collect()
    }

    /// The CPUs this process may run on (its affinity mask).
    #[cfg(target_os = "linux")]
    fn allowed_cpus() -> Vec<usize> {
        // SAFETY: `set` is a plain bit set that sched_getaffinity fills; its size is passed.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(
                libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
                0
            );
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect()
        }
    }

    /// Pins the calling thread to `cpu`.
    #[cfg(target_os = "linux")]
    fn pin(cpu: usize) {
        // SAFETY: as above; the set names one CPU the process may run on.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            assert_eq!(
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
                0
            );
        }
    }

    /// A thread on each allowed CPU gets the copy of its CPU's slot: equal to the value made,
    /// the same copy for CPUs that share a slot, another copy for each other slot, and the
    /// value is made once however many copies there are.
    #[cfg(target_os = "linux")]
    #[test]
    fn each_cpu_reads_its_own_copy() {
        let table: &'static PerCpu<Vec<u64>> = Box::leak(Box::new(PerCpu::new(make)));
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty());
        let seen: Vec<(usize, usize)> = cpus
            .iter()
            .take(8)
            .map(|&cpu| {
                std::thread::spawn(move || {
                    pin(cpu);
                    assert_eq!(current_cpu(), cpu, "pinned to CPU {cpu}");
                    let copy = table.get();
                    assert_eq!(*copy, make_value());
                    // Asked again on the same CPU: the same copy.
                    assert!(std::ptr::eq(copy, table.get()));
                    (table.slot_of(cpu), copy.as_ptr() as usize)
                })
                .join()
                .unwrap()
            })
            .collect();
        for (i, a) in seen.iter().enumerate() {
            for b in &seen[i + 1..] {
                assert_eq!(
                    a.0 == b.0,
                    a.1 == b.1,
                    "slots {} and {}: copies {:x} and {:x}",
                    a.0,
                    b.0,
                    a.1,
                    b.1
                );
            }
        }
        assert_eq!(
            MADE.load(Ordering::SeqCst),
            1,
            "the value is made once, then cloned"
        );
    }

    /// CPU numbers past the slots wrap around.
    #[test]
    fn cpus_past_the_slots_share_one() {
        let table = PerCpu::new(make_value);
        let n = table.slots.len();
        assert!((1..=MAX_SLOTS).contains(&n));
        assert_eq!(table.slot_of(n), 0);
        assert_eq!(table.slot_of(n + 3), 3 % n);
        assert_eq!(table.slot_of(MAX_SLOTS * 2 + 1), (MAX_SLOTS * 2 + 1) % n);
    }
}
