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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use zeroize::Zeroizing;

#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(test)]
pub mod check_cases;
#[cfg(target_arch = "x86_64")]
pub mod fma;
#[cfg(target_arch = "x86_64")]
pub mod ifma;
pub mod radix;
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
    /// For the same proof: the public-key check of `sigs` (results of `private_op_for_ct`),
    /// where it reads the key's secrets (the four-lane and scalar families check modulo the
    /// primes); its verdicts are the one thing it makes public. None where the check reads
    /// public values only.
    fn check_for_ct(&self, _jobs: &[(&KeyForm, &[u8])], _sigs: &[Zeroizing<Vec<u8>>]) -> Option<Vec<bool>> {
        None
    }
}

/// Every family compiled in, in order of preference (fastest first). The last one is the
/// reference: it serves every key on every CPU, and recomputes what failed its check elsewhere.
pub const REGISTRY: &[&dyn Family] = &[
    #[cfg(target_arch = "x86_64")]
    &ifma::Ifma,
    // Before mulx: two signatures per call; where that does not pay (a lone request)
    // `FILL_POLICY` sends the batch to mulx. fma before avx2: the same four lanes, 1.22x
    // (RSA-1024) to 1.52x (RSA-4096) as fast on the Intel Xeon of docs/performance.md, 1.06x
    // to 1.37x on its AMD Zen 3.
    #[cfg(target_arch = "x86_64")]
    &fma::FMA,
    #[cfg(target_arch = "x86_64")]
    &avx2::AVX2,
    #[cfg(target_arch = "x86_64")]
    &scalar::MULX,
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

/// The families the operator allows, one bit per `REGISTRY` index; every bit: `auto`.
static ALLOWED: AtomicU64 = AtomicU64::new(u64::MAX);
/// Per family: cleared when its known-answer test fails.
static PASSED: [AtomicBool; REGISTRY.len()] = [const { AtomicBool::new(true) }; REGISTRY.len()];

/// Turns the operator's request (`auto`, a family name, or a comma-separated list of them)
/// into the set of families allowed (None: `auto`, every family). A family that is unknown,
/// or that this CPU cannot run, is an error: an operator who names a kernel must not get
/// another one silently (`auto` picks per CPU). One name forces that family; a list lets the
/// usual choice (registry order, `FILL_POLICY`) run among its members, e.g. `avx2,mulx` to
/// keep AVX-512 off.
pub fn resolve(requested: &str, available: impl Fn(&dyn Family) -> bool) -> Result<Option<u64>, String> {
    if requested == "auto" {
        return Ok(None);
    }
    let names = || REGISTRY.iter().map(|f| f.name()).collect::<Vec<_>>().join(", ");
    let mut set = 0u64;
    for name in requested.split(',').map(str::trim) {
        let i =
            by_name(name).ok_or_else(|| format!("unknown RSA kernel {name:?}; known: auto, {}", names()))?;
        if !available(REGISTRY[i]) {
            let runnable: Vec<_> = REGISTRY
                .iter()
                .filter(|f| available(**f))
                .map(|f| f.name())
                .collect();
            return Err(format!(
                "RSA kernel {name:?} ({}) cannot run on this CPU; this CPU runs: auto, {}",
                REGISTRY[i].description(),
                runnable.join(", ")
            ));
        }
        set |= 1 << i;
    }
    Ok(Some(set))
}

/// Sets the allowed families (None: `auto`). Set at `C_Initialize`.
pub fn force(allowed: Option<u64>) {
    ALLOWED.store(allowed.unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// The one family forced, if the operator named exactly one.
pub fn forced() -> Option<usize> {
    let set = ALLOWED.load(Ordering::Relaxed);
    (set.count_ones() == 1).then(|| set.trailing_zeros() as usize)
}

/// Whether the operator limited the families (one forced, or a list).
pub fn restricted() -> bool {
    ALLOWED.load(Ordering::Relaxed) != u64::MAX
}

/// Whether the operator's setting allows this family (the reference serves whatever no
/// allowed family takes, regardless).
pub fn allowed(family: usize) -> bool {
    ALLOWED.load(Ordering::Relaxed) >> family & 1 == 1
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
/// in registry order), the first usable one the operator allows; the reference when nothing
/// else fits. The batch fill is weighed when a batch is drained (`fill_choice`).
fn pick(mut candidates: impl Iterator<Item = usize>) -> usize {
    candidates.find(|&i| usable(i) && allowed(i)).unwrap_or(REFERENCE)
}

/// CPU makers a fill rule can be limited to (their cores differ in how vector multiplies
/// compare with scalar ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vendor {
    Intel,
    Amd,
    Other,
}

/// This CPU's maker, from CPUID leaf 0, read once: `fill_choice` asks at every batch, and
/// under a hypervisor CPUID traps (microseconds, as much as part of an RSA-1024 signature).
pub fn vendor() -> Vendor {
    static VENDOR: std::sync::OnceLock<Vendor> = std::sync::OnceLock::new();
    *VENDOR.get_or_init(read_vendor)
}

fn read_vendor() -> Vendor {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: CPUID exists on every x86-64 CPU; leaf 0 only reads the vendor string.
        #[allow(unused_unsafe)]
        let r = unsafe { std::arch::x86_64::__cpuid(0) };
        let id = [r.ebx, r.edx, r.ecx];
        if id == [0x756e_6547, 0x4965_6e69, 0x6c65_746e] {
            return Vendor::Intel; // "GenuineIntel"
        }
        if id == [0x6874_7541, 0x6974_6e65, 0x444d_4163] {
            return Vendor::Amd; // "AuthenticAMD"
        }
    }
    Vendor::Other
}

/// Where a partly filled batch of a multi-buffer family runs instead: a batch of at most
/// `max_fill` signatures drained for `family`, with keys of `bits` bits, on a CPU of `vendor`
/// (None: any), runs one request at a time on `instead`, when the operator allows `instead`
/// (never while one family is forced), it is usable and took every key.
pub struct FillRule {
    pub family: &'static str,
    pub bits: &'static [usize],
    pub max_fill: usize,
    pub vendor: Option<Vendor>,
    pub instead: &'static str,
}

/// The batch-fill policy, measured per CPU second (`cargo bench --bench engine`: each
/// family at one and at full batches, same run).
///
/// ifma: none. On an IFMA Xeon (model 207) a lone IFMA request (the 2-lane kernel) signed
/// 2.0x, 2.0x, 1.8x, 1.7x as fast as mulx at RSA-1024 / 2048 / 3072 / 4096; lone requests
/// and remainders stay on IFMA.
///
/// avx2 (4 lanes, 2 signatures per call). A lone request leaves half the lanes empty: on an
/// Intel Xeon (model 167, AVX2 forced) it signed 962/s at RSA-2048 against mulx's 2,018, so
/// lone requests go to mulx on every CPU. Full batches stay on avx2 on every CPU since the
/// kernel's second pass: on that Intel core 2,582 / 777 / 340 per second at RSA-2048 / 3072
/// / 4096 against mulx's 1,974 / 628 / 303 (1.31x, 1.24x, 1.12x; 2026-12-05), where before
/// it they were level at 2048 and behind above, and a rule sent Intel's full batches to mulx
/// (through PKCS#11 at 16 clients with `avx2,mulx` that rule cost 20%: 3,525/s against 4,372
/// with avx2). On AMD Zen 3, where OpenSSL's mulx code is slower relative to vector
/// multiplies (engine notes: a 4-lane prototype at 1.35-1.45x OpenSSL at RSA-2048), full
/// batches were ahead from the start. Measured on a
/// Zen 3 without AVX-512 (family 25 model 1, `benches/rsa_stages.rs`, 2026-12-03): full avx2
/// batches 10,721 / 1,895 / 659 / 286 signatures/s per core at RSA-1024 / 2048 / 3072 / 4096
/// against mulx's 7,233 / 1,297 / 435 / 195 (1.46-1.51x), a lone request on a half-empty
/// avx2 call at half the batch rate (behind mulx at every size): the rules hold there as
/// they are, no model needs one of its own (table in docs/performance.md).
///
/// fma (the same four lanes, 51-bit limbs): a lone request costs what a full call costs, as
/// on avx2. On the Intel Xeon (model 167, `benches/rsa_stages.rs`, 2026-12-05) a full call
/// signs 16,957 / 3,103 / 1,051 / 472 per second per core at RSA-1024 / 2048 / 3072 / 4096,
/// so a lone one half that (8,479 / 1,552 / 526 / 236), behind mulx on one core (about
/// 10,300 / 1,780 / 600 / 265): lone requests go to mulx, full batches stay. On AMD Zen 3
/// (family 25 model 1, 2026-12-06) a full call signs 13,823 / 2,740 / 968 / 453 per core; a
/// lone one (6,912 / 1,370 / 484 / 226) is behind mulx (7,830 / 1,510 / 440 / 206) at 1024
/// and 2048 and ahead above, but mulx runs a lone request's halves on both cores when the
/// other is idle, which is when requests come alone: the rule holds there too.
pub const FILL_POLICY: &[FillRule] = &[
    FillRule {
        family: "fma",
        bits: &[1024, 2048, 3072, 4096],
        max_fill: 1,
        vendor: None,
        instead: "mulx",
    },
    FillRule {
        family: "avx2",
        bits: &[1024, 2048, 3072, 4096],
        max_fill: 1,
        vendor: None,
        instead: "mulx",
    },
];

/// The family that runs a batch of `fill` signatures drained for `family` with keys of
/// `bits` bits, if not `family` itself (see `FILL_POLICY`; only a family the operator allows).
pub fn fill_choice(family: usize, fill: usize, bits: usize) -> Option<usize> {
    fill_choice_in(FILL_POLICY, vendor(), family, fill, bits)
}

/// The rule of `FILL_POLICY` that applies on this CPU to a batch of `fill` signatures of
/// `family` at `bits` bits, if any (whether `instead` is usable is checked by `fill_choice`).
pub fn fill_rule(family: &str, fill: usize, bits: usize) -> Option<&'static FillRule> {
    find_rule(FILL_POLICY, vendor(), family, fill, bits)
}

fn find_rule<'a>(
    policy: &'a [FillRule],
    cpu: Vendor,
    family: &str,
    fill: usize,
    bits: usize,
) -> Option<&'a FillRule> {
    policy.iter().find(|r| {
        r.family == family
            && fill <= r.max_fill
            && r.bits.contains(&bits)
            && r.vendor.is_none_or(|v| v == cpu)
    })
}

fn fill_choice_in(
    policy: &[FillRule],
    cpu: Vendor,
    family: usize,
    fill: usize,
    bits: usize,
) -> Option<usize> {
    find_rule(policy, cpu, REGISTRY[family].name(), fill, bits)
        .and_then(|r| by_name(r.instead))
        .filter(|&i| allowed(i) && usable(i) && REGISTRY[i].max_batch() == 1)
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
        let bit = |name: &str| 1u64 << by_name(name).unwrap();
        assert_eq!(resolve("auto", |_| true), Ok(None));
        assert_eq!(resolve("reference", |_| true), Ok(Some(1 << REFERENCE)));
        assert_eq!(resolve("portable", |_| true), Ok(Some(bit("portable"))));
        assert_eq!(
            resolve("portable, reference", |_| true),
            Ok(Some(bit("portable") | bit("reference")))
        );
        let e = resolve("portable,nonsense", |_| true).unwrap_err();
        assert!(e.contains("unknown RSA kernel \"nonsense\""), "{e}");
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
        let policy = [
            FillRule {
                family: "ifma",
                bits: &[2048],
                max_fill: 1,
                vendor: None,
                instead: "portable",
            },
            FillRule {
                family: "ifma",
                bits: &[3072],
                max_fill: 2,
                vendor: Some(Vendor::Amd),
                instead: "portable",
            },
        ];
        // (Families limited by another test of this process change the policy's reach.)
        let (Some(ifma), Some(portable), false) = (by_name("ifma"), by_name("portable"), restricted()) else {
            return;
        };
        for cpu in [Vendor::Intel, Vendor::Amd, Vendor::Other] {
            assert_eq!(fill_choice_in(&policy, cpu, ifma, 1, 2048), Some(portable));
            assert_eq!(fill_choice_in(&policy, cpu, ifma, 2, 2048), None);
            assert_eq!(fill_choice_in(&policy, cpu, portable, 1, 2048), None);
            // The rule limited to one maker applies on its CPUs only.
            let amd = (cpu == Vendor::Amd).then_some(portable);
            assert_eq!(fill_choice_in(&policy, cpu, ifma, 2, 3072), amd);
            assert_eq!(fill_choice_in(&policy, cpu, ifma, 3, 3072), None);
        }
        // A family that batches is never the one that runs requests one by one.
        let batching = [FillRule {
            instead: "ifma",
            family: "portable",
            ..policy[0]
        }];
        assert_eq!(fill_choice_in(&batching, Vendor::Other, portable, 1, 2048), None);
    }

    #[test]
    fn the_vendor_is_read_from_the_cpu() {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let expected = if cpuinfo.contains("GenuineIntel") {
            Vendor::Intel
        } else if cpuinfo.contains("AuthenticAMD") {
            Vendor::Amd
        } else {
            Vendor::Other
        };
        assert_eq!(vendor(), expected);
    }

    #[test]
    fn every_family_this_cpu_runs_passes_its_known_answer_test() {
        for f in REGISTRY.iter().filter(|f| f.available()) {
            assert!(f.known_answer_test(), "{}", f.name());
        }
    }
}
