//! The RSA engine: turns key components into a `PreparedKey` once, performs the private-key
//! operation on it, and never releases a result that fails the public-key check.
//! Knows RSA arithmetic only; nothing here knows PKCS#11.

pub mod crt;
#[cfg(target_arch = "x86_64")]
pub mod horizontal;
#[cfg(target_arch = "x86_64")]
pub mod ifma;
mod keygen;
mod portable;
pub mod radix52;
#[cfg(target_arch = "x86_64")]
pub mod scheduler;
pub mod selftest;

pub use keygen::generate;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
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
    inner: portable::PortableKey,
    /// Kernel form, when the key's size has a compiled kernel and the CPU runs it.
    fast: Option<std::sync::Arc<crt::CrtKey>>,
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
        let inner = portable::PortableKey::new(c)?;
        let n = strip_zeros(&c.modulus);
        let modulus_bits = bit_len(n);
        // Implicit rejection needs a per-key secret that is not the key itself.
        let rejection_secret = {
            use sha2::Digest;
            let d = left_pad(&c.private_exponent, modulus_bits.div_ceil(8)).ok_or(EngineError::InvalidKey)?;
            Zeroizing::new(sha2::Sha256::digest(&d[..]).to_vec())
        };
        let fast = if ifma_usable() {
            crt::CrtKey::new(c).map(std::sync::Arc::new)
        } else {
            None
        };
        Ok(PreparedKey {
            inner,
            fast,
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
        #[cfg(target_arch = "x86_64")]
        if let Some(fast) = self.fast.as_ref().filter(|_| kernel_enabled()) {
            // The kernel checks s^e = input in the same batch; only checked results leave.
            let (out, verified) = scheduler().1.run(fast, input);
            if verified {
                return Ok(out);
            }
            STATS.fault_checks_failed.fetch_add(1, Ordering::Relaxed);
            log::error!(
                "RSA-{} kernel result failed its public-key check; withheld and recomputed on the portable path",
                self.modulus_bits
            );
        }
        for attempt in 0..2 {
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

    /// Which kernel serves this key: "ifma" or "portable".
    pub fn kernel(&self) -> &'static str {
        if self.fast.is_some() && kernel_enabled() {
            "ifma"
        } else {
            "portable"
        }
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

/// An RSA public key prepared for verification and encryption.
pub struct PublicKey {
    inner: portable::PortablePublic,
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
        Ok(PublicKey {
            inner: portable::PortablePublic::new(modulus, public_exponent)?,
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

    /// RSAEP/RSAVP1 on a `modulus_len()`-byte input; the output has the same length.
    pub fn public_op(&self, input: &[u8]) -> Result<Vec<u8>, EngineError> {
        if input.len() != self.modulus_len {
            return Err(EngineError::InputOutOfRange);
        }
        self.inner.public_op(input)
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

/// Set at `C_Initialize` from the configuration (`engine.force_portable`) or the environment
/// (`FERROHSM_FORCE_PORTABLE=1`).
static FORCE_PORTABLE: AtomicBool = AtomicBool::new(false);
/// Cleared when the kernel's known-answer test fails.
static KERNEL_PASSED: AtomicBool = AtomicBool::new(true);

fn ifma_usable() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        ifma::available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether private-key operations use the IFMA kernel right now.
pub fn kernel_enabled() -> bool {
    ifma_usable() && !FORCE_PORTABLE.load(Ordering::Relaxed) && KERNEL_PASSED.load(Ordering::Relaxed)
}

/// Engine start-up at `C_Initialize`: apply the portable switch and run the known-answer test
/// of the kernel this CPU would use; a failing kernel is disabled, never used.
pub fn configure(force_portable: bool) {
    let env =
        std::env::var("FERROHSM_FORCE_PORTABLE").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    FORCE_PORTABLE.store(force_portable || env, Ordering::Relaxed);
    self_test();
}

/// The scheduler of this process (a fresh one after fork: the parent's may hold locks).
#[cfg(target_arch = "x86_64")]
pub fn scheduler() -> std::sync::Arc<(u64, scheduler::Scheduler)> {
    static SCHED: arc_swap::ArcSwapOption<(u64, scheduler::Scheduler)> =
        arc_swap::ArcSwapOption::const_empty();
    let generation = crate::fork::generation();
    // Lock-free, so a child forked while a parent thread was in here cannot deadlock, and one
    // scheduler per generation however many threads race: only one compare-and-swap wins.
    loop {
        let current = SCHED.load_full();
        if let Some(s) = current.as_ref().filter(|s| s.0 == generation) {
            return s.clone();
        }
        let fresh = std::sync::Arc::new((generation, scheduler::Scheduler::new()));
        let previous = SCHED.compare_and_swap(&current, Some(fresh.clone()));
        let won = match (&*previous, &current) {
            (Some(a), Some(b)) => std::sync::Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if won {
            // A scheduler from before a fork belongs to the parent: abandon it, never drop it.
            std::mem::forget(arc_swap::Guard::into_inner(previous));
            return fresh;
        }
    }
}

/// Engine statistics for the vendor interface and `ferrohsm-util`.
pub struct EngineStatsSnapshot {
    pub ifma: bool,
    pub self_test_passed: bool,
    pub operations: u64,
    pub fault_checks_failed: u64,
    pub batches: [u64; 4],
    pub mean_batch_fill: f64,
}

pub fn stats() -> EngineStatsSnapshot {
    #[cfg(target_arch = "x86_64")]
    let batches: [u64; 4] = {
        let s = scheduler();
        core::array::from_fn(|i| s.1.batches[i].load(Ordering::Relaxed))
    };
    #[cfg(not(target_arch = "x86_64"))]
    let batches = [0u64; 4];
    EngineStatsSnapshot {
        ifma: kernel_enabled(),
        self_test_passed: KERNEL_PASSED.load(Ordering::Relaxed),
        operations: STATS.operations.load(Ordering::Relaxed),
        fault_checks_failed: STATS.fault_checks_failed.load(Ordering::Relaxed),
        batches,
        mean_batch_fill: mean_batch_fill(&batches).unwrap_or(0.0),
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

/// Runs the known-answer tests now; a failing kernel is disabled. Returns whether all passed.
pub fn self_test() -> bool {
    if !ifma_usable() {
        return true;
    }
    let ok = selftest::ifma_known_answers();
    KERNEL_PASSED.store(ok, Ordering::Relaxed);
    if !ok {
        log::error!("the AVX-512 IFMA kernel failed its known-answer test: disabled");
    }
    ok
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

#[cfg(all(test, target_arch = "x86_64"))]
mod stats_tests {
    #[test]
    fn every_operation_is_one_batch_slot() {
        if !super::ifma::available() {
            return;
        }
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
