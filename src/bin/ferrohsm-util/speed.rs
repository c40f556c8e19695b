//! `speed`: RSA sign and verify throughput of ferrohsm through its PKCS#11 entry points, on a
//! temporary in-memory token, printed the way `openssl speed rsa` prints it.

use crate::module::{self, explain, Result};
use clap::Args;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, ObjectHandle};
use cryptoki::session::UserType;
use cryptoki::types::AuthPin;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct Speed {
    /// Key sizes in bits.
    #[arg(long, value_delimiter = ',', default_values_t = [1024u64, 2048, 3072, 4096])]
    sizes: Vec<u64>,
    /// Seconds to measure each figure.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Client threads, each with its own session (default: eight per core, so batches fill).
    #[arg(long)]
    threads: Option<usize>,
    /// Signature mechanism: sha256-rsa-pkcs, rsa-pkcs (over a SHA-256 DigestInfo) or sha256-rsa-pkcs-pss.
    #[arg(long, default_value = "sha256-rsa-pkcs")]
    mechanism: String,
    /// Also run `openssl speed` on the same sizes (all cores) and print the ratio.
    #[arg(long = "compare-openssl")]
    compare_openssl: bool,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// One measured size.
struct Row {
    bits: u64,
    sign: f64,
    verify: f64,
    single: f64,
    openssl: Option<f64>,
}

/// `openssl speed` sign/s for RSA-`bits` on `cores` processes, if openssl is installed.
fn openssl_speed(bits: u64, seconds: f64, cores: usize) -> Option<f64> {
    let out = std::process::Command::new("openssl")
        .args([
            "speed",
            "-seconds",
            &(seconds.ceil() as u64).max(1).to_string(),
            "-multi",
            &cores.to_string(),
        ])
        .arg(format!("rsa{bits}"))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| {
        l.starts_with(&format!("rsa {bits} bits")) || l.starts_with(&format!("rsa  {bits} bits"))
    })?;
    line.split_whitespace().nth(5)?.parse().ok()
}

/// Kernel calls so far by the number of signatures they carried, from the loaded module's
/// vendor API (None without the IFMA kernel).
fn engine_batches(module: &Path) -> Option<[u64; 4]> {
    #[repr(C)]
    struct Stats {
        kernel: std::ffi::c_ulong,
        self_test_passed: std::ffi::c_ulong,
        operations: std::ffi::c_ulong,
        fault_checks_failed: std::ffi::c_ulong,
        batches: [std::ffi::c_ulong; 4],
        mean_batch_fill: f64,
    }
    // SAFETY: the module is already loaded (same handle); the signature is the header's.
    unsafe {
        let lib = libloading::Library::new(module).ok()?;
        let f: libloading::Symbol<unsafe extern "C" fn(*mut Stats) -> std::ffi::c_ulong> =
            lib.get(b"FERROHSM_GetEngineStats").ok()?;
        let mut s: Stats = std::mem::zeroed();
        (f(&mut s) == 0 && s.kernel == 1).then(|| s.batches.map(u64::from))
    }
}

const PIN: &str = "speed-test-pin";

pub fn mechanism(name: &str) -> Result<(Mechanism<'static>, Vec<u8>)> {
    use cryptoki::mechanism::rsa::{PkcsMgfType, PkcsPssParams};
    use cryptoki::mechanism::MechanismType;
    let message = b"ferrohsm speed test message, 32b".to_vec();
    Ok(match name {
        "sha256-rsa-pkcs" => (Mechanism::Sha256RsaPkcs, message),
        "sha256-rsa-pkcs-pss" => (
            Mechanism::Sha256RsaPkcsPss(PkcsPssParams {
                hash_alg: MechanismType::SHA256,
                mgf: PkcsMgfType::MGF1_SHA256,
                s_len: 32.into(),
            }),
            message,
        ),
        "rsa-pkcs" => {
            let mut di = vec![
                0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01,
                0x05, 0x00, 0x04, 0x20,
            ];
            di.extend_from_slice(&[0x5a; 32]);
            (Mechanism::RsaPkcs, di)
        }
        other => {
            return Err(format!(
                "unknown mechanism {other:?}; use sha256-rsa-pkcs, rsa-pkcs or sha256-rsa-pkcs-pss"
            ))
        }
    })
}

/// Runs `op` on `threads` sessions for `seconds`; returns operations per second.
fn measure(
    p: &cryptoki::context::Pkcs11,
    slot: cryptoki::slot::Slot,
    threads: usize,
    seconds: f64,
    op: &(dyn Fn(&cryptoki::session::Session) -> Result<()> + Sync),
) -> Result<f64> {
    let count = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let failure = parking_lot::Mutex::new(None);
    let start = Instant::now();
    std::thread::scope(|sc| {
        for _ in 0..threads {
            sc.spawn(|| {
                let s = match p.open_ro_session(slot) {
                    Ok(s) => s,
                    Err(e) => {
                        *failure.lock() = Some(explain("cannot open a session", e));
                        return;
                    }
                };
                while !stop.load(Ordering::Relaxed) {
                    if let Err(e) = op(&s) {
                        *failure.lock() = Some(e);
                        stop.store(true, Ordering::Relaxed);
                    }
                    count.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
    });
    if let Some(e) = failure.into_inner() {
        return Err(e);
    }
    Ok(count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

pub fn run(m: Option<&Path>, a: Speed) -> Result<()> {
    // A temporary in-memory token: the user's tokens are never touched.
    let dir = tempfile::tempdir().map_err(|e| format!("cannot make a temporary directory: {e}"))?;
    let conf = dir.path().join("speed.toml");
    std::fs::write(&conf, "[store]\nbackend = \"memory\"\n").map_err(|e| e.to_string())?;
    std::env::set_var("FERROHSM_CONF", &conf);
    let p = module::load(m)?;
    let slot = module::free_slot(&p)?;
    let pin = AuthPin::new(PIN.into());
    p.init_token(slot, &pin, "ferrohsm speed")
        .map_err(|e| explain("cannot make the test token", e))?;
    let admin = p
        .open_rw_session(slot)
        .map_err(|e| explain("cannot open a session", e))?;
    admin
        .login(UserType::So, Some(&pin))
        .map_err(|e| explain("SO login", e))?;
    admin.init_pin(&pin).map_err(|e| explain("init PIN", e))?;
    admin.logout().ok();
    admin
        .login(UserType::User, Some(&pin))
        .map_err(|e| explain("login", e))?;

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = a.threads.unwrap_or(8 * cores).max(1);
    let (mech, message) = mechanism(&a.mechanism)?;
    eprintln!(
        "CPU: {} ({cores} cores); {threads} client threads; mechanism {}",
        cpu_model(),
        a.mechanism
    );
    let mut rows = vec![];
    let module_path = module::module_path(m)?;
    // Batch fill of the multi-threaded signing runs only (the single-thread and verify runs
    // would dilute it).
    let mut sign_batches = [0u64; 4];
    for &bits in &a.sizes {
        eprint!("measuring RSA-{bits} ...                 \r");
        let public = [
            Attribute::Token(true),
            Attribute::ModulusBits(bits.into()),
            Attribute::Verify(true),
        ];
        let private = [
            Attribute::Token(true),
            Attribute::Private(true),
            Attribute::Sign(true),
        ];
        let (pubk, privk): (ObjectHandle, ObjectHandle) = admin
            .generate_key_pair(&Mechanism::RsaPkcsKeyPairGen, &public, &private)
            .map_err(|e| explain(&format!("cannot generate an RSA-{bits} key"), e))?;
        let signature = admin
            .sign(&mech, privk, &message)
            .map_err(|e| explain("sign", e))?;
        // Mechanisms hold raw pointers and cannot cross threads: each call builds its own.
        let name = a.mechanism.as_str();
        let sign = |s: &cryptoki::session::Session| {
            let (mech, _) = mechanism(name)?;
            s.sign(&mech, privk, &message)
                .map(|_| ())
                .map_err(|e| explain("sign", e))
        };
        let verify = |s: &cryptoki::session::Session| {
            let (mech, _) = mechanism(name)?;
            s.verify(&mech, pubk, &message, &signature)
                .map_err(|e| explain("verify", e))
        };
        let before = engine_batches(&module_path);
        let sign_all = measure(&p, slot, threads, a.seconds, &sign)?;
        if let (Some(b), Some(e)) = (before, engine_batches(&module_path)) {
            for i in 0..4 {
                sign_batches[i] += e[i].saturating_sub(b[i]);
            }
        }
        let verify_all = measure(&p, slot, threads, a.seconds, &verify)?;
        let sign_one = measure(&p, slot, 1, a.seconds / 2.0, &sign)?;
        let openssl = if a.compare_openssl {
            eprint!("measuring openssl speed rsa{bits} ...   \r");
            openssl_speed(bits, a.seconds, cores)
        } else {
            None
        };
        rows.push(Row {
            bits,
            sign: sign_all,
            verify: verify_all,
            single: sign_one,
            openssl,
        });
    }
    eprint!("                                        \r");
    let fill = ferrohsm::engine::mean_batch_fill(&sign_batches);
    if a.json {
        print_json(&rows, &a, cores, threads, fill);
        return Ok(());
    }
    let ratio_head = if a.compare_openssl {
        format!(" {:>10} {:>8}", "openssl/s", "ratio")
    } else {
        String::new()
    };
    println!(
        "{:>18} {:>10} {:>10} {:>10} {:>10}{ratio_head}",
        "", "sign", "verify", "sign/s", "verify/s"
    );
    for r in &rows {
        let ratio = match r.openssl {
            Some(o) => format!(" {o:>10.1} {:>7.2}x", r.sign / o),
            None if a.compare_openssl => format!(" {:>10} {:>8}", "n/a", "n/a"),
            None => String::new(),
        };
        println!(
            "rsa {:>5} bits     {:>9.6}s {:>9.6}s {:>10.1} {:>10.1}{ratio}",
            r.bits,
            1.0 / r.sign,
            1.0 / r.verify,
            r.sign,
            r.verify
        );
    }
    println!();
    for r in &rows {
        println!(
            "rsa {:>5} bits     sign/s per core {:>10.1}   single thread {:>10.1}   kernel {}",
            r.bits,
            r.sign / cores as f64,
            r.single,
            kernel_for(r.bits)
        );
    }
    if let Some(f) = fill {
        println!("mean batch fill ({threads}-thread signing): {f:.2} signatures per kernel call");
    }
    println!("CPU: {}; cores: {cores}; client threads: {threads}", cpu_model());
    Ok(())
}

fn print_json(rows: &[Row], a: &Speed, cores: usize, threads: usize, fill: Option<f64>) {
    let num = |x: Option<f64>, digits: usize| x.map_or("null".to_string(), |v| format!("{v:.digits$}"));
    let items: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{{\"bits\":{},\"sign_per_s\":{:.1},\"verify_per_s\":{:.1},\"sign_per_s_per_core\":{:.1},\"single_thread_sign_per_s\":{:.1},\"kernel\":{:?},\"openssl_sign_per_s\":{},\"ratio_to_openssl\":{}}}",
                r.bits,
                r.sign,
                r.verify,
                r.sign / cores as f64,
                r.single,
                kernel_for(r.bits),
                num(r.openssl, 1),
                num(r.openssl.map(|o| r.sign / o), 2)
            )
        })
        .collect();
    println!(
        "{{\"cpu\":{:?},\"cores\":{cores},\"threads\":{threads},\"mechanism\":{:?},\"mean_batch_fill\":{},\"sizes\":[{}]}}",
        cpu_model(),
        a.mechanism,
        num(fill, 2),
        items.join(",")
    );
}

/// The mechanism named on the command line (built per call: mechanisms cannot cross threads).
pub fn mechanism_of(name: &str) -> Result<Mechanism<'static>> {
    mechanism(name).map(|(m, _)| m)
}

/// The data signed with that mechanism.
pub fn message(name: &str) -> Result<Vec<u8>> {
    mechanism(name).map(|(_, d)| d)
}

/// The kernel ferrohsm uses on this machine for a key size, as the module decides it.
fn kernel_for(bits: u64) -> &'static str {
    let forced =
        std::env::var("FERROHSM_FORCE_PORTABLE").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    let limbs = (bits as usize / 2 + 8).div_ceil(52);
    #[cfg(target_arch = "x86_64")]
    if ferrohsm::engine::ifma::available() && !forced && ferrohsm::engine::crt::LIMB_COUNTS.contains(&limbs) {
        return "AVX-512 IFMA (2/4/8 lanes by batch)";
    }
    let _ = (forced, limbs);
    "portable"
}
