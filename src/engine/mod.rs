//! The RSA engine: turns key components into a `PreparedKey` once, performs the private-key
//! operation on it, and never releases a result that fails the public-key check.
//! Knows RSA arithmetic (and, in `ec/`, elliptic-curve arithmetic); nothing here knows
//! PKCS#11. Which kernel family computes an RSA operation is decided in `kernel/` (the seam,
//! the registry and the selection); this file,
//! the scheduler, the statistics and the self-test work through the seam only.

pub mod ct;
pub mod ec;
pub mod kernel;
mod keygen;
pub mod percpu;
pub mod portable;
pub mod scheduler;

pub use keygen::generate;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use zeroize::Zeroizing;

/// Why the engine refused: the caller maps these onto its own error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineError {
    /// The components do not form a consistent RSA key.
    InvalidKey,
    /// The input is not a number below the modulus, or has the wrong length.
    InputOutOfRange,
    /// The computation failed its public-key check twice (fault or bug); nothing was released.
    FaultDetected,
    /// Key generation parameters are out of range.
    BadParameters,
    /// The OS random number generator failed.
    Rng,
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            EngineError::InvalidKey => "RSA key components are inconsistent",
            EngineError::InputOutOfRange => "input is not below the modulus",
            EngineError::FaultDetected => "RSA result failed its public-key check",
            EngineError::BadParameters => "key generation parameters out of range",
            EngineError::Rng => "the OS random number generator failed",
        };
        f.write_str(s)
    }
}

/// The parts of an RSA private key as big-endian byte strings (PKCS#11 attribute form).
#[derive(Clone, Default)]
pub struct KeyComponents {
    pub modulus: Vec<u8>,
    pub public_exponent: Vec<u8>,
    pub private_exponent: Zeroizing<Vec<u8>>,
    pub prime_1: Zeroizing<Vec<u8>>,
    pub prime_2: Zeroizing<Vec<u8>>,
    pub exponent_1: Zeroizing<Vec<u8>>,
    pub exponent_2: Zeroizing<Vec<u8>>,
    pub coefficient: Zeroizing<Vec<u8>>,
}

/// A private key decoded, validated and converted to engine form once, then shared by every
/// signature made with it. Its secret parts are zeroized when the last user drops it.
pub struct PreparedKey {
    /// The reference form: validation, components, the public half, and the recomputation of
    /// anything that failed its check.
    inner: Arc<portable::PortableKey>,
    /// The key in the form of every family this CPU runs that takes it, reference last
    /// (shared with queued jobs: a batch may run on another family than it was queued for).
    forms: Arc<[kernel::Prepared]>,
    rejection_secret: Zeroizing<Vec<u8>>,
    /// n as `modulus_len` big-endian bytes, to check inputs against.
    modulus: Vec<u8>,
    modulus_len: usize,
    modulus_bits: usize,
}

impl PreparedKey {
    /// Validates the components (n = p·q, d·e ≡ 1, and dP, dQ, qInv when given) and prepares
    /// the key. Missing CRT parts are computed.
    pub fn new(c: &KeyComponents) -> Result<Self, EngineError> {
        let inner = Arc::new(portable::PortableKey::new(c)?);
        let n = strip_zeros(&c.modulus);
        let modulus_bits = bit_len(n);
        // Implicit rejection needs a per-key secret that is not the key itself.
        let rejection_secret = {
            use sha2::Digest;
            let d = left_pad(&c.private_exponent, modulus_bits.div_ceil(8)).ok_or(EngineError::InvalidKey)?;
            Zeroizing::new(sha2::Sha256::digest(&d[..]).to_vec())
        };
        let forms = kernel::prepare_all(&kernel::KeySource {
            components: c,
            reference: &inner,
            modulus_bits,
        })
        .into();
        Ok(PreparedKey {
            inner,
            forms,
            rejection_secret,
            modulus: n.to_vec(),
            modulus_len: modulus_bits.div_ceil(8),
            modulus_bits,
        })
    }

    /// k in RFC 8017: the length of signatures and ciphertexts in bytes.
    pub fn modulus_len(&self) -> usize {
        self.modulus_len
    }

    pub fn modulus_bits(&self) -> usize {
        self.modulus_bits
    }

    /// The private-key operation (RSASP1/RSADP) on a `modulus_len()`-byte input, checked with
    /// the public exponent before the result is released.
    pub fn private_op(&self, input: &[u8]) -> Result<Zeroizing<Vec<u8>>, EngineError> {
        if input.len() != self.modulus_len || input >= self.modulus.as_slice() {
            return Err(EngineError::InputOutOfRange);
        }
        // Counted after the range check, so on the kernel path operations equal batch slots.
        STATS.operations.fetch_add(1, Ordering::Relaxed);
        let form = kernel::choose(&self.forms);
        // The family checks s^e = input in the same batch; only checked results leave.
        let (out, verified) = schedulers().1[form.family].run(form, &self.forms, self.modulus_bits, input);
        if verified {
            return Ok(out);
        }
        STATS.fault_checks_failed.fetch_add(1, Ordering::Relaxed);
        log::error!(
            "RSA-{} {} kernel result failed its public-key check; withheld and recomputed on the reference path",
            self.modulus_bits,
            kernel::REGISTRY[form.family].name()
        );
        // Two tries on the reference in all, counting the one just made if it was the reference.
        let retries = if form.family == kernel::REFERENCE { 1 } else { 2 };
        for attempt in 0..retries {
            match self.inner.private_op_checked(input, self.modulus_len) {
                Ok(out) => return Ok(out),
                Err(EngineError::FaultDetected) => {
                    STATS.fault_checks_failed.fetch_add(1, Ordering::Relaxed);
                    log::error!(
                        "RSA-{} private operation failed its public-key check (attempt {}); result withheld",
                        self.modulus_bits,
                        attempt + 1
                    );
                }
                Err(e) => return Err(e),
            }
        }
        Err(EngineError::FaultDetected)
    }

    /// The name of the kernel family that serves this key's next operation.
    pub fn kernel(&self) -> &'static str {
        kernel::REGISTRY[kernel::choose(&self.forms).family].name()
    }

    /// The reference path alone (benchmarks and differential tests).
    pub fn private_op_portable(&self, input: &[u8]) -> Result<Zeroizing<Vec<u8>>, EngineError> {
        self.inner.private_op_checked(input, self.modulus_len)
    }

    pub fn implicit_rejection_secret(&self) -> &[u8] {
        &self.rejection_secret
    }

    /// The public-key operation (RSAEP/RSAVP1) with this key's public half.
    pub fn public_op(&self, input: &[u8]) -> Result<Vec<u8>, EngineError> {
        self.inner.public.public_op(input)
    }
}

/// An RSA public key prepared for verification and encryption. The public-key operation runs
/// on the scalar families' Montgomery arithmetic (`kernel::scalar::exp::public_power`: mulx
/// where the CPU has it), the code that checks every signature before release; the rsa crate
/// still validates the key (`PortablePublic::new`).
pub struct PublicKey {
    /// n with its Montgomery constants.
    n: kernel::scalar::key::Modulus,
    e: u64,
    /// n as `modulus_len` big-endian bytes: inputs must be below it.
    n_be: Vec<u8>,
    modulus_len: usize,
    modulus_bits: usize,
}

impl PublicKey {
    pub fn new(modulus: &[u8], public_exponent: &[u8]) -> Result<Self, EngineError> {
        let n = strip_zeros(modulus);
        if n.is_empty() {
            return Err(EngineError::InvalidKey);
        }
        let modulus_bits = bit_len(n);
        // The rsa crate's checks first: an odd modulus of 512 to 16,384 bits, e of 64 bits
        // at most and not zero.
        portable::PortablePublic::new(modulus, public_exponent)?;
        let mut limbs = vec![0u64; n.len().div_ceil(8)];
        kernel::scalar::limbs::from_be_bytes(n, &mut limbs);
        let e = strip_zeros(public_exponent)
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
        Ok(PublicKey {
            n: kernel::scalar::key::Modulus::new(limbs),
            e,
            n_be: n.to_vec(),
            modulus_len: modulus_bits.div_ceil(8),
            modulus_bits,
        })
    }

    pub fn modulus_len(&self) -> usize {
        self.modulus_len
    }

    pub fn modulus_bits(&self) -> usize {
        self.modulus_bits
    }

    /// RSAEP/RSAVP1 on a `modulus_len()`-byte input below n; the output has the same length.
    pub fn public_op(&self, input: &[u8]) -> Result<Vec<u8>, EngineError> {
        // Both big-endian of the same length: byte order is numeric order.
        if input.len() != self.modulus_len || input >= &self.n_be[..] {
            return Err(EngineError::InputOutOfRange);
        }
        use kernel::scalar::exp::public_power;
        let (n, e, len) = (&self.n, self.e, self.modulus_len);
        #[cfg(target_arch = "x86_64")]
        if kernel::scalar::mulx::available() {
            return public_power::<kernel::scalar::mulx::Mulx>(n, e, len, input)
                .ok_or(EngineError::InputOutOfRange);
        }
        public_power::<kernel::scalar::portable::Portable>(n, e, len, input)
            .ok_or(EngineError::InputOutOfRange)
    }
}

#[cfg(test)]
mod public_key_tests {
    use super::*;

    /// The public operation equals the rsa crate's for generated keys of several sizes, odd
    /// and 3-byte exponents, edge inputs (0, 1, 2, n - 1) and random ones; n and above are
    /// refused, as are inputs of another length.
    #[test]
    fn public_op_agrees_with_rsa_crate() {
        for (bits, e) in [
            (1024usize, &[1u8, 0, 1][..]),
            (2048, &[1, 0, 1]),
            (1536, &[3]),
            (3072, &[1, 0, 1]),
        ] {
            let c = generate(bits, e).expect("key generation");
            let (n, e) = (&c.modulus[..], &c.public_exponent[..]);
            let ours = PublicKey::new(n, e).unwrap();
            let theirs = portable::PortablePublic::new(n, e).unwrap();
            let k = ours.modulus_len();
            let n_be = strip_zeros(n).to_vec();
            assert_eq!(n_be.len(), k);
            let mut inputs = vec![vec![0u8; k], vec![0u8; k], vec![0u8; k]];
            inputs[1][k - 1] = 1;
            inputs[2][k - 1] = 2;
            let mut n_minus_1 = n_be.clone();
            n_minus_1[k - 1] -= 1; // n is odd
            inputs.push(n_minus_1);
            for _ in 0..20 {
                let mut r = vec![0u8; k];
                getrandom::fill(&mut r).unwrap();
                r[0] %= n_be[0].max(1);
                inputs.push(r);
            }
            for x in &inputs {
                assert_eq!(
                    ours.public_op(x).unwrap(),
                    theirs.public_op(x).unwrap(),
                    "{bits} bits"
                );
            }
            let mut above = n_be.clone();
            assert_eq!(ours.public_op(&above).unwrap_err(), EngineError::InputOutOfRange);
            above[k - 1] = above[k - 1].wrapping_add(1);
            if above > n_be {
                assert_eq!(ours.public_op(&above).unwrap_err(), EngineError::InputOutOfRange);
            }
            assert_eq!(
                ours.public_op(&[0xff; 1]).unwrap_err(),
                EngineError::InputOutOfRange
            );
            assert_eq!(
                ours.public_op(&vec![0u8; k + 1]).unwrap_err(),
                EngineError::InputOutOfRange
            );
        }
    }
}

/// Engine counters, readable through the vendor interface.
#[derive(Default)]
pub struct Stats {
    pub operations: AtomicU64,
    pub fault_checks_failed: AtomicU64,
}

pub static STATS: Stats = Stats {
    operations: AtomicU64::new(0),
    fault_checks_failed: AtomicU64::new(0),
};

/// Bit length of a big-endian number (0 for zero).
pub fn bit_len(b: &[u8]) -> usize {
    let b = strip_zeros(b);
    b.first().map_or(0, |x| b.len() * 8 - x.leading_zeros() as usize)
}

pub(crate) fn strip_zeros(b: &[u8]) -> &[u8] {
    let first = b.iter().position(|&x| x != 0).unwrap_or(b.len());
    &b[first..]
}

/// Left-pads `b` with zeros to `len` bytes (fails when it does not fit).
pub(crate) fn left_pad(b: &[u8], len: usize) -> Option<Zeroizing<Vec<u8>>> {
    let b = strip_zeros(b);
    if b.len() > len {
        return None;
    }
    let mut out = Zeroizing::new(vec![0u8; len]);
    out[len - b.len()..].copy_from_slice(b);
    Some(out)
}

/// Smallest and largest RSA key generation size in bits.
pub fn keygen_limits() -> (usize, usize) {
    (keygen::MIN_BITS, keygen::MAX_BITS)
}

/// Every component of a prepared key, including the CRT parts it computed.
pub fn full_components(key: &PreparedKey) -> KeyComponents {
    key.inner.components()
}

/// DER SubjectPublicKeyInfo of an RSA public key (`CKA_PUBLIC_KEY_INFO`).
pub fn public_key_info(modulus: &[u8], public_exponent: &[u8]) -> Option<Vec<u8>> {
    portable::PortablePublic::new(modulus, public_exponent)
        .ok()?
        .spki_der()
}

use std::sync::atomic::AtomicBool;

/// Engine start-up at `C_Initialize`: apply the operator's kernel choice and run the
/// known-answer test of every family this CPU runs (a failing family is disabled, never used).
/// `kernel` and `force_portable` are the configuration file's `[engine]` keys; the environment
/// (`FERROHSM_KERNEL`, `FERROHSM_FORCE_PORTABLE=1`) overrides the file. An unknown family, one
/// this CPU cannot run, or two settings of one source that disagree are refused with the reason.
pub fn configure(kernel: Option<&str>, force_portable: bool) -> Result<(), String> {
    let env_kernel = std::env::var("FERROHSM_KERNEL").ok().filter(|v| !v.is_empty());
    let env_portable =
        std::env::var("FERROHSM_FORCE_PORTABLE").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    let (requested, source) = if env_kernel.is_some() || env_portable {
        (
            request(
                env_kernel.as_deref(),
                env_portable,
                "FERROHSM_KERNEL",
                "FERROHSM_FORCE_PORTABLE",
            )?,
            "FERROHSM_KERNEL",
        )
    } else {
        (
            request(kernel, force_portable, "engine.kernel", "engine.force_portable")?,
            "engine.kernel",
        )
    };
    let forced = kernel::resolve(&requested, |f| f.available()).map_err(|e| format!("{source}: {e}"))?;
    kernel::force(forced);
    // The same choice for P-256's field families (`portable`, `mulx`; others: the CPU's best).
    ec::p256::force(&requested);
    if let Some(set) = forced {
        let names: Vec<_> = (0..kernel::REGISTRY.len())
            .filter(|i| set >> i & 1 == 1)
            .map(|i| kernel::REGISTRY[i].name())
            .collect();
        log::info!("RSA kernels limited to {} by {source}", names.join(", "));
    }
    // A power-up self-test: once per process. Its results stay for later initialisations
    // (it costs about 10 ms, which a signer that initialises per request would pay each
    // time); the vendor function runs it again on demand.
    static POWER_UP: std::sync::Once = std::sync::Once::new();
    POWER_UP.call_once(|| {
        self_test();
    });
    Ok(())
}

/// One source's request: a family name, or the portable alias, or both when they agree.
fn request(
    kernel: Option<&str>,
    portable: bool,
    kernel_key: &str,
    portable_key: &str,
) -> Result<String, String> {
    // The switch predates the kernel seam; it meant "the portable Rust code", which is now the
    // `portable` family (the rsa crate path became `reference`).
    let name = "portable";
    match (kernel, portable) {
        (Some(k), true) if k != name => Err(format!(
            "{kernel_key} = {k:?} and {portable_key} disagree ({portable_key} means {name:?})"
        )),
        (_, true) => Ok(name.to_string()),
        (Some(k), false) => Ok(k.to_string()),
        (None, false) => Ok("auto".to_string()),
    }
}

/// One scheduler per family in `kernel::REGISTRY`, of this process (fresh ones after fork: the
/// parent's may hold locks).
pub fn schedulers() -> Arc<(u64, Vec<scheduler::Scheduler>)> {
    static SCHED: arc_swap::ArcSwapOption<(u64, Vec<scheduler::Scheduler>)> =
        arc_swap::ArcSwapOption::const_empty();
    let generation = crate::fork::generation();
    // Lock-free, so a child forked while a parent thread was in here cannot deadlock, and one
    // set per generation however many threads race: only one compare-and-swap wins.
    loop {
        let current = SCHED.load_full();
        if let Some(s) = current.as_ref().filter(|s| s.0 == generation) {
            return s.clone();
        }
        let fresh = Arc::new((
            generation,
            kernel::REGISTRY
                .iter()
                .enumerate()
                .map(|(i, f)| scheduler::Scheduler::new(i, *f))
                .collect(),
        ));
        // Schedulers from before a fork belong to the parent: `replace_stale` abandons them.
        if crate::fork::replace_stale(&SCHED, &current, &fresh) {
            return fresh;
        }
    }
}

/// Key sizes the statistics report the serving family for.
pub const REPORTED_SIZES: [usize; 4] = [1024, 2048, 3072, 4096];

/// One family in the statistics.
pub struct FamilyStats {
    pub name: &'static str,
    pub description: &'static str,
    pub vendor_id: u64,
    /// This CPU runs it.
    pub available: bool,
    pub self_test_passed: bool,
    /// Whether new operations of each of `REPORTED_SIZES` go to it.
    pub serves: [bool; 4],
    pub max_batch: usize,
    /// Calls by the number of signatures they carried (index 0: one signature).
    pub batches: Vec<u64>,
}

/// Engine statistics for the vendor interface and `ferrohsm-util`.
pub struct EngineStatsSnapshot {
    /// Vendor number of the family serving new RSA-2048 operations.
    pub kernel: u64,
    pub self_test_passed: bool,
    pub operations: u64,
    pub fault_checks_failed: u64,
    /// Calls of every family by the number of signatures they carried (up to four).
    pub batches: [u64; 4],
    pub mean_batch_fill: f64,
    /// Every family compiled in, in registry order.
    pub families: Vec<FamilyStats>,
}

pub fn stats() -> EngineStatsSnapshot {
    let s = schedulers();
    let serving: Vec<usize> = REPORTED_SIZES
        .iter()
        .map(|&b| kernel::family_for_bits(b))
        .collect();
    let families: Vec<FamilyStats> = kernel::REGISTRY
        .iter()
        .enumerate()
        .map(|(i, f)| FamilyStats {
            name: f.name(),
            description: f.description(),
            vendor_id: f.vendor_id(),
            available: f.available(),
            self_test_passed: kernel::self_test_passed(i),
            serves: core::array::from_fn(|k| serving[k] == i),
            max_batch: f.max_batch(),
            batches: s.1[i].batches.iter().map(|b| b.load(Ordering::Relaxed)).collect(),
        })
        .collect();
    let mut batches = [0u64; 4];
    for f in &families {
        for (d, v) in batches.iter_mut().zip(&f.batches) {
            *d += v;
        }
    }
    EngineStatsSnapshot {
        kernel: kernel::REGISTRY[serving[1]].vendor_id(),
        self_test_passed: families.iter().all(|f| !f.available || f.self_test_passed),
        operations: STATS.operations.load(Ordering::Relaxed),
        fault_checks_failed: STATS.fault_checks_failed.load(Ordering::Relaxed),
        batches,
        mean_batch_fill: mean_batch_fill(&batches).unwrap_or(0.0),
        families,
    }
}

/// Signatures per kernel call, from kernel calls counted by batch size (index 0: one
/// signature); None before the first call.
pub fn mean_batch_fill(batches: &[u64]) -> Option<f64> {
    let (calls, sigs) = batches
        .iter()
        .enumerate()
        .fold((0u64, 0u64), |(c, s), (i, &n)| (c + n, s + n * (i as u64 + 1)));
    (calls > 0).then(|| sigs as f64 / calls as f64)
}

/// Runs the known-answer tests now; a failing family is disabled. Returns whether all passed.
pub fn self_test() -> bool {
    kernel::self_test()
}

/// Private-key operations per second of this engine with a temporary key of `bits` bits on
/// `threads` threads for `milliseconds` (the vendor speed probe).
pub fn speed(bits: usize, threads: usize, milliseconds: u64) -> Result<f64, EngineError> {
    let c = generate(bits, &[1, 0, 1])?;
    let key = PreparedKey::new(&c)?;
    let k = key.modulus_len();
    let mut input = vec![0x5au8; k];
    input[0] = 0x1f;
    let stop = AtomicBool::new(false);
    let count = AtomicU64::new(0);
    let start = std::time::Instant::now();
    std::thread::scope(|sc| {
        for _ in 0..threads {
            sc.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    if key.private_op(&input).is_ok() {
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(milliseconds));
        stop.store(true, Ordering::Relaxed);
    });
    Ok(count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64())
}

#[cfg(test)]
mod stats_tests {
    /// Every family's calls, whichever serves: each operation is one slot of one call.
    #[test]
    fn every_operation_is_one_batch_slot() {
        for _ in 0..5 {
            let before = super::stats();
            super::speed(1024, 2, 100).unwrap();
            let after = super::stats();
            let ops = after.operations - before.operations;
            let sigs: u64 = (0..4)
                .map(|i| (after.batches[i] - before.batches[i]) * (i as u64 + 1))
                .sum();
            assert_eq!(ops, sigs, "faults {}", after.fault_checks_failed);
        }
    }
}
