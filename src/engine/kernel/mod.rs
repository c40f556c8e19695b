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
pub mod reference;
pub mod scalar;

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
    &scalar::MULX,
    // After mulx: measured at 0.4-0.6x OpenSSL (untuned), it serves AVX2 CPUs without ADX
    // (Haswell) and whoever forces it; mulx is ~1x OpenSSL where both run.
    #[cfg(target_arch = "x86_64")]
    &avx2::Avx2,
    &scalar::PORTABLE,
    &reference::Reference,
];

/// Index of the reference family in `REGISTRY`.
pub const REFERENCE: usize = REGISTRY.len() - 1;

/// A key as one family prepared it.
#[derive(Clone)]
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
/// reference when nothing else fits. The batch fill is weighed when a batch is drained
/// (`fill_choice`).
fn pick(candidates: impl Iterator<Item = usize>) -> usize {
    let mut usable_ones = candidates.filter(|&i| usable(i));
    match forced() {
        Some(f) => usable_ones.find(|&i| i == f).unwrap_or(REFERENCE),
        None => usable_ones.next().unwrap_or(REFERENCE),
    }
}

/// Where a partly filled batch of a multi-buffer family runs instead: a batch of at most
/// `max_fill` signatures drained for `family`, with keys of `bits` bits, runs one request at a
/// time on `instead`, when nothing is forced, `instead` is usable and took every key.
pub struct FillRule {
    pub family: &'static str,
    pub bits: &'static [usize],
    pub max_fill: usize,
    pub instead: &'static str,
}

/// The batch-fill policy, measured (per CPU second, one request per call, against the scalar
/// family alone: `cargo bench --bench engine`).
///
/// ifma: none. On this project's Sapphire-Rapids-class Xeon (model 207, 2 vCPUs, shared and
/// loaded when measured) a lone IFMA request (the 2-lane kernel, check across lanes) signed
/// 13,527 / 2,631 / 805 / 262 per second at RSA-1024 / 2048 / 3072 / 4096 against mulx's
/// 6,619 / 1,331 / 441 / 157: 2.0×, 2.0×, 1.8×, 1.7×. Lone requests and remainders stay on
/// IFMA. A multi-buffer family whose lone request costs more than the scalar path (AVX2: 4
/// lanes, 3/4 empty for one request, ~1.5× OpenSSL's latency on Zen 3) adds its rows here, e.g.
/// `FillRule { family: "avx2", bits: &[1024, 2048, 3072, 4096], max_fill: 1, instead: "mulx" }`.
pub const FILL_POLICY: &[FillRule] = &[];

/// The family that runs a batch of `fill` signatures drained for `family` with keys of
/// `bits` bits, if not `family` itself (see `FILL_POLICY`; never while a family is forced).
pub fn fill_choice(family: usize, fill: usize, bits: usize) -> Option<usize> {
    fill_choice_in(FILL_POLICY, family, fill, bits)
}

fn fill_choice_in(policy: &[FillRule], family: usize, fill: usize, bits: usize) -> Option<usize> {
    if forced().is_some() {
        return None;
    }
    let name = REGISTRY[family].name();
    policy
        .iter()
        .find(|r| r.family == name && fill <= r.max_fill && r.bits.contains(&bits))
        .and_then(|r| by_name(r.instead))
        .filter(|&i| usable(i) && REGISTRY[i].max_batch() == 1)
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
        assert_eq!(REGISTRY[REFERENCE].name(), "reference");
        for (i, f) in REGISTRY.iter().enumerate() {
            assert_eq!(by_name(f.name()), Some(i));
            assert!(f.name().len() < 16, "vendor stats hold 15 bytes of a name");
            assert!(f.max_batch() >= 1 && f.max_batch() <= 8);
        }
    }

    #[test]
    fn requests_resolve_or_say_why_not() {
        assert_eq!(resolve("auto", |_| true), Ok(None));
        assert_eq!(resolve("reference", |_| true), Ok(Some(REFERENCE)));
        assert_eq!(resolve("portable", |_| true), Ok(by_name("portable")));
        let e = resolve("nonsense", |_| true).unwrap_err();
        assert!(
            e.contains("unknown RSA kernel \"nonsense\"") && e.contains("portable"),
            "{e}"
        );
        #[cfg(target_arch = "x86_64")]
        {
            // Every other family is runnable in this call: the message lists them in registry
            // order, without the one asked for.
            let e = resolve("mulx", |f| f.name() != "mulx").unwrap_err();
            let others: Vec<_> = REGISTRY
                .iter()
                .map(|f| f.name())
                .filter(|n| *n != "mulx")
                .collect();
            assert!(
                e.contains("cannot run on this CPU")
                    && e.contains(&format!("runs: auto, {}", others.join(", "))),
                "{e}"
            );
        }
    }

    #[test]
    fn the_fill_policy_sends_small_batches_to_a_usable_one_request_family() {
        let policy = [FillRule {
            family: "ifma",
            bits: &[2048],
            max_fill: 1,
            instead: "portable",
        }];
        // (A family forced by another test of this process turns the policy off.)
        let (Some(ifma), Some(portable), None) = (by_name("ifma"), by_name("portable"), forced()) else {
            return;
        };
        assert_eq!(fill_choice_in(&policy, ifma, 1, 2048), Some(portable));
        assert_eq!(fill_choice_in(&policy, ifma, 2, 2048), None);
        assert_eq!(fill_choice_in(&policy, ifma, 1, 3072), None);
        assert_eq!(fill_choice_in(&policy, portable, 1, 2048), None);
        // A family that batches is never the one that runs requests one by one.
        let batching = [FillRule {
            instead: "ifma",
            family: "portable",
            ..policy[0]
        }];
        assert_eq!(fill_choice_in(&batching, portable, 1, 2048), None);
    }

    #[test]
    fn every_family_this_cpu_runs_passes_its_known_answer_test() {
        for f in REGISTRY.iter().filter(|f| f.available()) {
            assert!(f.known_answer_test(), "{}", f.name());
        }
    }
}
