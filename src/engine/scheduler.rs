//! The combining scheduler, one per kernel family: concurrent private-key operations of the
//! same batch class (for a multi-buffer family: the same limb count) are run together in one call of
//! the family's batch entry point. There are no background threads: a caller queues its job and,
//! while fewer combiners than twice the cores run, becomes one and runs batches taken from the
//! queue until its own job is done; otherwise it parks until a combiner completes its job. A lone
//! request therefore runs at once on its own thread; nothing waits for a batch to fill.
//! A family that takes one request per call skips the queue: its caller runs it directly.
//! A drained batch too small to pay for the multi-buffer call (a lone request in a wide
//! kernel) runs on the family the batch-fill policy names instead (`kernel::fill_choice`),
//! one request at a time on the combiner's thread; each job carries all its key's forms.
//!
//! A combiner takes the jobs queued from its own CPU first (`take_batch`): their owners wake
//! on that CPU, and waking a thread on the other one costs an interrupt between CPUs, in a
//! VM an exit to the hypervisor. On the Xeon of docs/performance.md (2 cores, 16 client
//! threads, fma kernel) that halved the system time and gave RSA-1024 +6-7%, RSA-2048 +3%.

use super::kernel::{self, Checked, Family, KeyForm, Prepared};
use super::percpu;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use zeroize::Zeroizing;

/// Batches a combiner runs in a row before it returns to its own caller.
const MAX_ROUNDS: usize = 4;

struct Job {
    key: Arc<KeyForm>,
    /// Every form of the key, for a batch the policy sends to another family.
    forms: Arc<[Prepared]>,
    bits: usize,
    input: Zeroizing<Vec<u8>>,
    result: Mutex<Option<(Zeroizing<Vec<u8>>, bool)>>,
    done: Condvar,
    /// The CPU its owner queued it from (where the owner will most likely wake).
    cpu: usize,
    /// Batches drained past it (under the queue's lock).
    passed: AtomicU64,
}

#[derive(Default)]
struct Queue {
    pending: VecDeque<Arc<Job>>,
    combiners: usize,
}

pub struct Scheduler {
    /// The family's index in `kernel::REGISTRY`.
    index: usize,
    family: &'static dyn Family,
    /// One per batch class of the family.
    queues: Vec<Mutex<Queue>>,
    max_combiners: usize,
    /// Signatures per call at most (the family's).
    max_batch: usize,
    /// Kernel calls by the number of signatures they carried (index 0: one signature).
    pub batches: Vec<AtomicU64>,
}

impl Scheduler {
    pub fn new(index: usize, family: &'static dyn Family) -> Scheduler {
        Scheduler {
            index,
            family,
            queues: (0..family.classes()).map(|_| Mutex::default()).collect(),
            // Two per core: while one combiner wakes its batch's owners and waits for the
            // next batch, another's kernel keeps the core busy (on 2 cores, 16 client
            // threads: RSA-1024 +30%, RSA-2048 +15% over one per core; more than two per
            // core splits the queue into partial batches).
            max_combiners: 2 * std::thread::available_parallelism().map_or(1, |n| n.get()),
            max_batch: family.max_batch(),
            batches: (0..family.max_batch()).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Runs the private-key operation of `key` (one of `forms`, the key's forms; a modulus of
    /// `bits` bits) on `input` (k bytes, below n), batched with whatever else is pending; the
    /// flag says whether the result passed the public-key check.
    pub fn run(&self, key: &Prepared, forms: &Arc<[Prepared]>, bits: usize, input: &[u8]) -> Checked {
        if self.max_batch == 1 {
            return self.run_alone(key, input);
        }
        let q = &self.queues[key.class];
        let job = Arc::new(Job {
            key: key.form.clone(),
            forms: forms.clone(),
            bits,
            input: Zeroizing::new(input.to_vec()),
            result: Mutex::new(None),
            done: Condvar::new(),
            cpu: percpu::current_cpu(),
            passed: AtomicU64::new(0),
        });
        let mut guard = q.lock();
        guard.pending.push_back(job.clone());
        loop {
            if let Some(r) = job.result.lock().take() {
                return r;
            }
            if guard.combiners < self.max_combiners && !guard.pending.is_empty() {
                guard.combiners += 1;
                let mut rounds = 0;
                loop {
                    let batch = take_batch(&mut guard.pending, self.max_batch, percpu::current_cpu());
                    drop(guard);
                    self.execute_guarded(&batch);
                    guard = q.lock();
                    rounds += 1;
                    // Less than a full batch waiting: the owners of the batch just completed
                    // are runnable but this core is busy with us. Yield once so they can queue
                    // their next jobs; without it batches run a third empty under load.
                    if guard.pending.len() < self.max_batch && rounds < MAX_ROUNDS {
                        drop(guard);
                        std::thread::yield_now();
                        guard = q.lock();
                    }
                    // Keep the slot while full batches wait (up to a bound, so this caller's
                    // own result is not held back long): handing it to a parked thread costs
                    // a wake-up, and the core idles until that thread runs.
                    if guard.pending.len() < self.max_batch || rounds >= MAX_ROUNDS {
                        break;
                    }
                }
                guard.combiners -= 1;
                // Hand the combiner slot to a parked owner if work is left. Its result lock is
                // taken first: an owner that saw no free slot holds that lock until it waits,
                // so the wake-up cannot fall between its check and its wait.
                if let Some(next) = guard.pending.front() {
                    let _parked = next.result.lock();
                    next.done.notify_one();
                }
                continue;
            }
            // Park until a combiner completes this job or hands over its slot.
            let mut result = job.result.lock();
            if result.is_none() {
                drop(guard);
                // No wake-up is lost (see the hand-over above); the timeout is a safety net
                // only, long enough not to cost a context switch per job.
                job.done
                    .wait_for(&mut result, std::time::Duration::from_millis(50));
                if let Some(r) = result.take() {
                    return r;
                }
                drop(result);
                guard = q.lock();
            }
        }
    }

    /// A family without batching: the caller runs its own request, with no queue or hand-off.
    fn run_alone(&self, key: &Prepared, input: &[u8]) -> Checked {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.family.private_op_batch(&[(&*key.form, input)]).pop()
        }));
        self.batches[0].fetch_add(1, Ordering::Relaxed);
        match r {
            Ok(Some(r)) => r,
            _ => {
                log::error!(
                    "{} kernel call failed; the operation falls back to the reference path",
                    self.family.name()
                );
                (Zeroizing::new(Vec::new()), false)
            }
        }
    }

    /// Runs a batch; a panic in the kernel must not strand the jobs of other threads: they
    /// get an unverified result, so their callers recompute on the portable path.
    fn execute_guarded(&self, batch: &[Arc<Job>]) {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.execute(batch))).is_err() {
            log::error!("kernel batch failed; its operations fall back to the portable path");
            for j in batch {
                let mut r = j.result.lock();
                if r.is_none() {
                    *r = Some((Zeroizing::new(Vec::new()), false));
                }
                drop(r);
                j.done.notify_one();
            }
        }
    }

    fn execute(&self, batch: &[Arc<Job>]) {
        let bits = batch.iter().map(|j| j.bits).max().unwrap_or(0);
        if let Some(alt) = kernel::fill_choice(self.index, batch.len(), bits) {
            let forms: Option<Vec<&Prepared>> = batch
                .iter()
                .map(|j| j.forms.iter().find(|p| p.family == alt))
                .collect();
            if let Some(forms) = forms {
                let others = super::schedulers();
                for (job, form) in batch.iter().zip(forms) {
                    let r = others.1[alt].run_alone(form, &job.input);
                    *job.result.lock() = Some(r);
                    job.done.notify_one();
                }
                return;
            }
        }
        let jobs: Vec<(&KeyForm, &[u8])> = batch.iter().map(|j| (&*j.key, j.input.as_slice())).collect();
        let results = self.family.private_op_batch(&jobs);
        self.batches[batch.len() - 1].fetch_add(1, Ordering::Relaxed);
        for (job, r) in batch.iter().zip(results) {
            *job.result.lock() = Some(r);
            job.done.notify_one();
        }
    }
}

/// A job passed over this many times is taken next, wherever its owner waits.
const MAX_PASSED: u64 = 2;

/// Up to `max` jobs from the queue, those queued from this CPU first: their owners wake here,
/// where waking one costs no interrupt to the other CPU (in a VM, an exit to the hypervisor).
/// A job passed over `MAX_PASSED` times goes first, so none waits long.
fn take_batch(pending: &mut VecDeque<Arc<Job>>, max: usize, cpu: usize) -> Vec<Arc<Job>> {
    if pending.len() <= max {
        return pending.drain(..).collect();
    }
    let mut picked: Vec<usize> = Vec::with_capacity(max);
    let old = |j: &Arc<Job>| j.passed.load(Ordering::Relaxed) >= MAX_PASSED;
    for pass in 0..3 {
        for (i, j) in pending.iter().enumerate() {
            if picked.len() == max {
                break;
            }
            let wanted = match pass {
                0 => old(j),
                1 => j.cpu == cpu,
                _ => true,
            };
            if wanted && !picked.contains(&i) {
                picked.push(i);
            }
        }
    }
    picked.sort_unstable();
    let last = picked[picked.len() - 1];
    for (i, j) in pending.iter().enumerate().take(last) {
        if !picked.contains(&i) {
            j.passed.fetch_add(1, Ordering::Relaxed);
        }
    }
    let mut batch = Vec::with_capacity(max);
    for &i in picked.iter().rev() {
        batch.push(pending.remove(i).expect("index from the queue"));
    }
    batch.reverse();
    batch
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(cpu: usize, tag: u8) -> Arc<Job> {
        Arc::new(Job {
            key: Arc::new(()),
            forms: Arc::from(Vec::new()),
            bits: 2048,
            input: Zeroizing::new(vec![tag]),
            result: Mutex::new(None),
            done: Condvar::new(),
            cpu,
            passed: AtomicU64::new(0),
        })
    }

    fn tags(batch: &[Arc<Job>]) -> Vec<u8> {
        batch.iter().map(|j| j.input[0]).collect()
    }

    /// Batches drained in turn from one queue: (the combiner's CPU, the tags it takes). Jobs
    /// are tagged by queue position; their CPUs are 1, 0, 1, 0, 0, 1, 1.
    #[test]
    fn batches_take_this_cpus_jobs_first_and_none_is_passed_over_long() {
        let cpus = [1, 0, 1, 0, 0, 1, 1];
        let mut q: VecDeque<Arc<Job>> = cpus.iter().enumerate().map(|(i, &c)| job(c, i as u8)).collect();
        let steps: [(usize, &[u8]); 4] = [
            // CPU 0's own jobs, in queue order; 0 and 2 are passed over once.
            (0, &[1, 3]),
            // One job of CPU 0 left: the oldest other job fills the batch; 2 is passed again.
            (0, &[0, 4]),
            // Job 2, passed over twice, goes first even where it is not local.
            (0, &[2, 5]),
            // One left (at most a batch): taken as it is.
            (1, &[6]),
        ];
        for (cpu, want) in steps {
            assert_eq!(tags(&take_batch(&mut q, 2, cpu)), want, "combiner on CPU {cpu}");
        }
        assert!(q.is_empty());
    }
}
