//! The kernel seam: every way of computing RSA private-key operations ("family") behind one
//! trait, the registry of the families compiled in, and the one place that picks a family per
//! CPU and key (and the operator's `FERROHSM_KERNEL` / `[engine] kernel` choice).
//!
//! The scheduler, the check before release, the statistics, the self-test at `C_Initialize`,
//! `ferrohsm-util speed` and the vendor API work through `Family` and `REGISTRY` only; none of
//! them names a family. A new family (AVX2 multi-buffer, scalar MULX, ...) is one module
//! implementing `Family` plus one line in `REGISTRY`.

use super::portable::PortableKey;
use super::KeyComponents;
use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use zeroize::Zeroizing;

#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(target_arch = "x86_64")]
pub mod ifma;
pub mod portable;

/// A key in one family's form. Only the family that made it looks inside (one downcast per job
/// per batch, never per limb). Forms holding secrets zeroize themselves when dropped.
pub type KeyForm = dyn Any + Send + Sync;

/// One result of a batch: the output, and whether it passed the public-key check (an output
/// that did not must never leave the engine).
pub type Checked = (Zeroizing<Vec<u8>>, bool);

/// What a family prepares a key from: the components, and the reference form the engine
/// validated them with (a family may share it instead of converting the key again).
pub struct KeySource<'a> {
    pub components: &'a KeyComponents,
    pub reference: &'a Arc<PortableKey>,
    pub modulus_bits: usize,
}

/// A family of kernels.
pub trait Family: Sync {
    /// Short name, as `FERROHSM_KERNEL`, `[engine] kernel`, `ferrohsm-util speed --kernel` and
    /// the vendor statistics spell it.
    fn name(&self) -> &'static str;
    /// One line for people: what it runs on and how it batches.
    fn description(&self) -> &'static str;
    /// The number `FERROHSM_ENGINE_STATS.kernel` reports for it (`FERROHSM_KERNEL_*`).
    fn vendor_id(&self) -> u64;
    /// Whether this CPU runs it.
    fn available(&self) -> bool;
    /// Whether it serves keys with a modulus of this many bits (`prepare` may still refuse an
    /// odd key of such a size, e.g. primes of unequal lengths).
    fn serves_bits(&self, modulus_bits: usize) -> bool;
    /// Signatures per kernel call at most (1: the scheduler runs each request on its caller).
    fn max_batch(&self) -> usize;
    /// How many batch classes (queues) it has: only keys of the same class share a call.
    fn classes(&self) -> usize;
    /// The key in this family's form, prepared once, with its batch class; None when the family
    /// cannot take this key (the next family in the registry will).
    fn prepare(&self, key: &KeySource) -> Option<(usize, Arc<KeyForm>)>;
    /// The private-key operation of every job (all of one class, at most `max_batch`), each
    /// result checked with the public exponent before it is marked verified.
    fn private_op_batch(&self, jobs: &[(&KeyForm, &[u8])]) -> Vec<Checked>;
    /// Known-answer test; a family that fails it is never used.
    fn known_answer_test(&self) -> bool;
    /// For the constant-time proof (tests/constant_time.rs runs it under valgrind with the
    /// key's secrets marked undefined) and the fuzz target: the secret-dependent part of
    /// `private_op_batch`, without the public-key check, on a build valgrind executes on any
    /// x86-64 CPU (an emulated one where the family's instructions are beyond valgrind or this
    /// CPU). None: the family's constant time is not this crate's to prove (the reference, the
    /// `rsa` crate, has its own).
    fn private_op_for_ct(&self, jobs: &[(&KeyForm, &[u8])]) -> Option<Vec<Zeroizing<Vec<u8>>>>;
}

/// Every family compiled in, in order of preference (fastest first). The last one is the
/// reference: it serves every key on every CPU, and recomputes what failed its check elsewhere.
pub const REGISTRY: &[&dyn Family] = &[
    #[cfg(target_arch = "x86_64")]
    &ifma::Ifma,
    #[cfg(target_arch = "x86_64")]
    &avx2::Avx2,
    &portable::Portable,
];

/// Index of the reference family in `REGISTRY`.
pub const REFERENCE: usize = REGISTRY.len() - 1;

/// A key as one family prepared it.
pub struct Prepared {
    /// Index in `REGISTRY`.
    pub family: usize,
    /// The family's batch class (scheduler queue) for this key.
    pub class: usize,
    pub form: Arc<KeyForm>,
}

/// The family's index by name.
pub fn by_name(name: &str) -> Option<usize> {
    REGISTRY.iter().position(|f| f.name() == name)
}

/// `usize::MAX`: no family forced, pick per CPU and key.
static FORCED: AtomicUsize = AtomicUsize::new(usize::MAX);
/// Per family: cleared when its known-answer test fails.
static PASSED: [AtomicBool; REGISTRY.len()] = [const { AtomicBool::new(true) }; REGISTRY.len()];

/// Turns the operator's request (`auto`, a family name, or the legacy portable switch) into the
/// forced family. A family that is unknown, or that this CPU cannot run, is an error: an
/// operator who names a kernel must not get another one silently (`auto` picks per CPU).
pub fn resolve(requested: &str, available: impl Fn(&dyn Family) -> bool) -> Result<Option<usize>, String> {
    if requested == "auto" {
        return Ok(None);
    }
    let names = || REGISTRY.iter().map(|f| f.name()).collect::<Vec<_>>().join(", ");
    let i = by_name(requested)
        .ok_or_else(|| format!("unknown RSA kernel {requested:?}; known: auto, {}", names()))?;
    if !available(REGISTRY[i]) {
        let runnable: Vec<_> = REGISTRY
            .iter()
            .filter(|f| available(**f))
            .map(|f| f.name())
            .collect();
        return Err(format!(
            "RSA kernel {requested:?} ({}) cannot run on this CPU; this CPU runs: auto, {}",
            REGISTRY[i].description(),
            runnable.join(", ")
        ));
    }
    Ok(Some(i))
}

/// Forces a family (None: pick per CPU and key). Set at `C_Initialize`.
pub fn force(family: Option<usize>) {
    FORCED.store(family.unwrap_or(usize::MAX), Ordering::Relaxed);
}

/// The forced family, if any.
pub fn forced() -> Option<usize> {
    Some(FORCED.load(Ordering::Relaxed)).filter(|&i| i < REGISTRY.len())
}

/// Whether a family may serve operations now: it runs here and passed its known-answer test
/// (the reference always may: there is nothing to fall back to).
pub fn usable(family: usize) -> bool {
    family == REFERENCE || (REGISTRY[family].available() && PASSED[family].load(Ordering::Relaxed))
}

pub fn self_test_passed(family: usize) -> bool {
    PASSED[family].load(Ordering::Relaxed)
}

/// The one place that picks the family: among `candidates` (families able to take the key,
/// in registry order), the forced one if it is among them, else the first usable one; the
/// reference when nothing else fits. Later also the place to weigh the batch fill.
fn pick(candidates: impl Iterator<Item = usize>) -> usize {
    let mut usable_ones = candidates.filter(|&i| usable(i));
    match forced() {
        Some(f) => usable_ones.find(|&i| i == f).unwrap_or(REFERENCE),
        None => usable_ones.next().unwrap_or(REFERENCE),
    }
}

/// The form that serves a key's next operation, from the forms prepared for it.
pub fn choose(forms: &[Prepared]) -> &Prepared {
    let family = pick(forms.iter().map(|p| p.family));
    forms
        .iter()
        .find(|p| p.family == family)
        .unwrap_or_else(|| forms.last().expect("the reference form is always prepared"))
}

/// The family that serves new keys of `modulus_bits` bits (for reports: speed, vendor stats).
pub fn family_for_bits(modulus_bits: usize) -> usize {
    pick((0..REGISTRY.len()).filter(|&i| REGISTRY[i].available() && REGISTRY[i].serves_bits(modulus_bits)))
}

/// Prepares a key for every family this CPU runs that takes it (reference last, always), so
/// a later change of the forced family needs no new preparation, as before the seam.
pub fn prepare_all(key: &KeySource) -> Vec<Prepared> {
    REGISTRY
        .iter()
        .enumerate()
        .filter(|(i, f)| *i == REFERENCE || (f.available() && f.serves_bits(key.modulus_bits)))
        .filter_map(|(i, f)| {
            f.prepare(key).map(|(class, form)| Prepared {
                family: i,
                class,
                form,
            })
        })
        .collect()
}

/// Runs the known-answer test of every family this CPU runs; a failing one is disabled.
/// Returns whether all passed.
pub fn self_test() -> bool {
    let mut all = true;
    for (i, f) in REGISTRY.iter().enumerate() {
        if !f.available() {
            continue;
        }
        let ok = f.known_answer_test();
        PASSED[i].store(ok, Ordering::Relaxed);
        if !ok {
            all = false;
            if i == REFERENCE {
                log::error!("the {} RSA kernel failed its known-answer test", f.name());
            } else {
                log::error!(
                    "the {} RSA kernel ({}) failed its known-answer test: disabled",
                    f.name(),
                    f.description()
                );
            }
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_is_last_and_every_name_is_unique() {
        assert_eq!(REGISTRY[REFERENCE].name(), "portable");
        for (i, f) in REGISTRY.iter().enumerate() {
            assert_eq!(by_name(f.name()), Some(i));
            assert!(f.name().len() < 16, "vendor stats hold 15 bytes of a name");
            assert!(f.max_batch() >= 1 && f.max_batch() <= 8);
        }
    }

    #[test]
    fn requests_resolve_or_say_why_not() {
        assert_eq!(resolve("auto", |_| true), Ok(None));
        assert_eq!(resolve("portable", |_| true), Ok(Some(REFERENCE)));
        let e = resolve("nonsense", |_| true).unwrap_err();
        assert!(
            e.contains("unknown RSA kernel \"nonsense\"") && e.contains("portable"),
            "{e}"
        );
        #[cfg(target_arch = "x86_64")]
        {
            let e = resolve("ifma", |f| f.name() == "portable").unwrap_err();
            assert!(
                e.contains("cannot run on this CPU") && e.contains("runs: auto, portable"),
                "{e}"
            );
        }
    }

    #[test]
    fn every_family_this_cpu_runs_passes_its_known_answer_test() {
        for f in REGISTRY.iter().filter(|f| f.available()) {
            assert!(f.known_answer_test(), "{}", f.name());
        }
    }
}
