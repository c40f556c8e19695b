//! `speed`: RSA sign and verify throughput of ferrohsm through its PKCS#11 entry points, on a
//! temporary in-memory token (or, with `--remote`, a token of a `ferrohsm-server`), printed
//! the way `openssl speed rsa` prints it (the EC table after it is `speed_ec`'s). With
//! `--kernel`, per kernel family (the module is loaded once per family with `FERROHSM_KERNEL`
//! set); which families exist, which this CPU runs and which one served come from the module's
//! vendor statistics, never from a copy of the module's choice.

use clap::Args;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, ObjectHandle};
use cryptoki::session::{Session, UserType};
use cryptoki::types::AuthPin;
use ferrohsm::cli::module::{self, explain, Result};
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
    /// RSA kernel family: auto (the module's choice per CPU and key size), all (every family
    /// this CPU runs, side by side), one family's name (e.g. ifma, fma, avx2, mulx, portable), or a
    /// comma-separated list for the module to choose among (e.g. avx2,mulx).
    #[arg(long, default_value = "auto")]
    kernel: String,
    /// Elliptic curves for the ECDSA/EdDSA table printed after the RSA one (p256, p384, p521,
    /// ed25519); `--curves ''` leaves it out. Not printed with `--json` or `--kernel`.
    #[arg(long, value_delimiter = ',', default_values_t = ["p256".to_string(), "p384".into(), "p521".into(), "ed25519".into()])]
    curves: Vec<String>,
    /// Post-quantum parameter sets for the ML-DSA/SLH-DSA table printed after the EC one
    /// (ml-dsa-44, ml-dsa-65, ml-dsa-87, slh-dsa-128f, slh-dsa-shake-128f, slh-dsa-128s);
    /// `--pq ''` leaves it out. Not printed with `--json` or `--kernel`.
    #[arg(long, value_delimiter = ',', default_values_t = ["ml-dsa-65".to_string(), "slh-dsa-128f".into()])]
    pq: Vec<String>,
    /// Measure through a server: FILE is a module configuration with a [remote] section (as a
    /// signer host's). Its keys are session objects on the token --token, gone after the run.
    #[arg(long, value_name = "FILE", requires_all = ["token", "pin"])]
    remote: Option<std::path::PathBuf>,
    /// With --remote: the label of the server's token to measure on.
    #[arg(long, value_name = "LABEL", requires = "remote")]
    token: Option<String>,
    /// With --remote: its user PIN.
    #[arg(long, requires = "remote")]
    pin: Option<String>,
}

/// Where the figures are measured: a temporary in-memory token made for the run, or a token
/// of a server (`--remote`) whose user logs in and whose keys are session objects.
pub enum Target {
    Temporary,
    Remote { label: String, pin: String },
}

impl Target {
    /// The token's slot and a session logged in as its user.
    pub fn open(&self, p: &cryptoki::context::Pkcs11, name: &str) -> Result<(cryptoki::slot::Slot, Session)> {
        match self {
            Target::Temporary => {
                let slot = module::free_slot(p)?;
                let pin = AuthPin::new(PIN.into());
                p.init_token(slot, &pin, name)
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
                Ok((slot, admin))
            }
            Target::Remote { label, pin } => {
                let slot = module::find_token(p, None, Some(label), None)?;
                let s = p
                    .open_rw_session(slot)
                    .map_err(|e| explain("cannot open a session on the server's token", e))?;
                s.login(UserType::User, Some(&AuthPin::new(pin.clone().into())))
                    .map_err(|e| explain("login to the server's token", e))?;
                Ok((slot, s))
            }
        }
    }

    /// `CKA_TOKEN` of the keys made: token objects on the temporary token (dropped whole with
    /// it), session objects on a server's token (nothing left behind).
    pub fn keep(&self) -> Attribute {
        Attribute::Token(matches!(self, Target::Temporary))
    }
}

/// One measured size.
struct Row {
    bits: u64,
    /// The family that served the multi-threaded signing run.
    kernel: String,
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

/// `FERROHSM_KERNEL_STATS` of `include/ferrohsm.h`.
#[repr(C)]
#[derive(Clone, Copy)]
struct KernelStats {
    name: [u8; 16],
    id: std::ffi::c_ulong,
    available: std::ffi::c_ulong,
    self_test_passed: std::ffi::c_ulong,
    serves: [std::ffi::c_ulong; 4],
    max_batch: std::ffi::c_ulong,
    batches: [std::ffi::c_ulong; 8],
}

/// One kernel family as the loaded module reports it.
struct Family {
    name: String,
    available: bool,
    /// Calls so far by the number of signatures they carried.
    batches: [u64; 8],
}

/// Every kernel family of the loaded module, from its vendor API (None from a module without
/// it: not ferrohsm, or older than 1.2).
fn kernel_stats(module: &Path) -> Option<Vec<Family>> {
    type GetKernelStats = unsafe extern "C" fn(*mut KernelStats, *mut std::ffi::c_ulong) -> std::ffi::c_ulong;
    // SAFETY: the module is already loaded (same handle); the signature is the header's, and
    // the buffer holds the `count` entries the first call asked for.
    unsafe {
        let lib = libloading::Library::new(module).ok()?;
        let f: libloading::Symbol<GetKernelStats> = lib.get(b"FERROHSM_GetKernelStats").ok()?;
        let mut count: std::ffi::c_ulong = 0;
        if f(std::ptr::null_mut(), &mut count) != 0 {
            return None;
        }
        let mut list: Vec<KernelStats> = vec![std::mem::zeroed(); count as usize];
        if f(list.as_mut_ptr(), &mut count) != 0 {
            return None;
        }
        list.truncate(count as usize);
        Some(
            list.iter()
                .map(|k| Family {
                    name: String::from_utf8_lossy(k.name.split(|&b| b == 0).next().unwrap_or(&[]))
                        .into_owned(),
                    available: k.available == 1,
                    batches: k.batches.map(u64::from),
                })
                .collect(),
        )
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
pub fn measure(
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

/// The CPU's name as /proc/cpuinfo gives it (`speed` and `bench --plot` print it).
pub(crate) fn cpu_model() -> String {
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
    let target = match (&a.remote, &a.token, &a.pin) {
        (Some(conf), Some(label), Some(pin)) => {
            let loaded = ferrohsm::config::Config::from_file(conf).map_err(|e| e.0)?;
            if loaded.remote.is_none() {
                return Err(format!(
                    "{}: --remote needs a module configuration with a [remote] section (docs/operations.md, \"Serve the token over the network\")",
                    conf.display()
                ));
            }
            if a.kernel != "auto" {
                return Err("--kernel chooses the family of the engine in this process; with --remote the server's engine signs".into());
            }
            std::env::set_var("FERROHSM_CONF", conf);
            Target::Remote {
                label: label.clone(),
                pin: pin.clone(),
            }
        }
        _ => {
            let conf = dir.path().join("speed.toml");
            std::fs::write(&conf, "[store]\nbackend = \"memory\"\n").map_err(|e| e.to_string())?;
            std::env::set_var("FERROHSM_CONF", &conf);
            Target::Temporary
        }
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = a.threads.unwrap_or(8 * cores).max(1);
    let curves: Vec<String> = a.curves.iter().filter(|c| !c.is_empty()).cloned().collect();
    crate::speed_ec::check_curves(&curves)?;
    let pq: Vec<String> = a.pq.iter().filter(|c| !c.is_empty()).cloned().collect();
    crate::speed_pq::check(&pq)?;
    if a.kernel == "auto" {
        // The module's own choice (FERROHSM_KERNEL, if the user set it, still applies).
        let (rows, fill) = measure_sizes(m, &a, &target, cores, threads)?;
        if a.json {
            println!("{}", json(&rows, &a, cores, threads, fill));
        } else {
            print_table(&rows, &a, cores, threads, fill);
            if !curves.is_empty() {
                println!();
                crate::speed_ec::run(m, &target, &curves, a.seconds, threads)?;
            }
            if !pq.is_empty() {
                println!();
                crate::speed_pq::run(m, &target, &pq, a.seconds, threads)?;
            }
        }
        return Ok(());
    }
    let names = families_to_measure(m, &a.kernel)?;
    let mut results = vec![];
    for name in &names {
        std::env::set_var("FERROHSM_KERNEL", name);
        let measured = measure_sizes(m, &a, &target, cores, threads);
        std::env::remove_var("FERROHSM_KERNEL");
        results.push((name.clone(), measured.map_err(|e| format!("kernel {name}: {e}"))?));
    }
    if a.json {
        let items: Vec<String> = results
            .iter()
            .map(|(name, (rows, fill))| {
                format!(
                    "{{\"kernel\":{name:?},\"result\":{}}}",
                    json(rows, &a, cores, threads, *fill)
                )
            })
            .collect();
        println!("{{\"kernels\":[{}]}}", items.join(","));
        return Ok(());
    }
    for (name, (rows, fill)) in &results {
        println!("kernel {name}:");
        print_table(rows, &a, cores, threads, *fill);
        println!();
    }
    if results.len() > 1 {
        // Side by side: signatures per second with all cores, per family.
        print!("{:<18}", "sign/s by kernel");
        for (name, _) in &results {
            print!(" {name:>12}");
        }
        println!();
        for (i, r) in results[0].1 .0.iter().enumerate() {
            print!("rsa {:>5} bits    ", r.bits);
            for (_, (rows, _)) in &results {
                print!(" {:>12.1}", rows[i].sign);
            }
            println!();
        }
    }
    Ok(())
}

/// The families `--kernel` names (`all`: every one this CPU runs), checked against what the
/// module reports, so a wrong name is a clear error here rather than a failed C_Initialize.
fn families_to_measure(m: Option<&Path>, kernel: &str) -> Result<Vec<String>> {
    std::env::set_var("FERROHSM_KERNEL", "auto");
    let p = module::load(m);
    std::env::remove_var("FERROHSM_KERNEL");
    let p = p?;
    let families = kernel_stats(&module::module_path(m)?)
        .ok_or("the module has no kernel statistics (not ferrohsm 1.2 or later): --kernel needs them")?;
    // Finalised, so the next load initialises afresh and reads FERROHSM_KERNEL again.
    p.finalize().ok();
    let runnable: Vec<String> = families
        .iter()
        .filter(|f| f.available)
        .map(|f| f.name.clone())
        .collect();
    if kernel == "all" {
        return Ok(runnable);
    }
    // One family, or a list the module chooses among (measured as one entry).
    for name in kernel.split(',').map(str::trim) {
        if runnable.iter().any(|n| n == name) {
            continue;
        }
        let why = if families.iter().any(|f| f.name == name) {
            "cannot run on this CPU"
        } else {
            "is not a kernel of this module"
        };
        return Err(format!(
            "kernel {name:?} {why}; this CPU runs: auto, all, {}",
            runnable.join(", ")
        ));
    }
    Ok(vec![kernel.to_string()])
}

/// Loads the module, makes a token and measures every size; returns the rows and the mean
/// batch fill of the multi-threaded signing runs.
fn measure_sizes(
    m: Option<&Path>,
    a: &Speed,
    target: &Target,
    cores: usize,
    threads: usize,
) -> Result<(Vec<Row>, Option<f64>)> {
    let p = module::load(m)?;
    let (slot, admin) = target.open(&p, "ferrohsm speed")?;

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
    let mut sign_batches = [0u64; 8];
    let progress = super::progress::bar(a.sizes.len(), "speed");
    for &bits in &a.sizes {
        progress.set_message(format!("RSA-{bits}"));
        let public = [
            target.keep(),
            Attribute::ModulusBits(bits.into()),
            Attribute::Verify(true),
        ];
        let private = [target.keep(), Attribute::Private(true), Attribute::Sign(true)];
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
        let before = kernel_stats(&module_path);
        let sign_all = measure(&p, slot, threads, a.seconds, &sign)?;
        // The family that served: the one whose calls grew the most (what ran, not a guess).
        let mut kernel = match target {
            Target::Temporary => "unknown".to_string(),
            Target::Remote { .. } => "(the server's)".to_string(),
        };
        if let (Some(b), Some(e)) = (before, kernel_stats(&module_path)) {
            let mut most = 0;
            for (fb, fe) in b.iter().zip(&e) {
                let calls: u64 = (0..8).map(|i| fe.batches[i].saturating_sub(fb.batches[i])).sum();
                for (i, s) in sign_batches.iter_mut().enumerate() {
                    *s += fe.batches[i].saturating_sub(fb.batches[i]);
                }
                if calls > most {
                    most = calls;
                    kernel = fe.name.clone();
                }
            }
        }
        let verify_all = measure(&p, slot, threads, a.seconds, &verify)?;
        let sign_one = measure(&p, slot, 1, a.seconds / 2.0, &sign)?;
        let openssl = if a.compare_openssl {
            progress.set_message(format!("openssl speed rsa{bits}"));
            openssl_speed(bits, a.seconds, cores)
        } else {
            None
        };
        rows.push(Row {
            bits,
            kernel,
            sign: sign_all,
            verify: verify_all,
            single: sign_one,
            openssl,
        });
        progress.inc(1);
    }
    progress.finish_and_clear();
    drop(admin);
    p.finalize().ok();
    Ok((rows, ferrohsm::engine::mean_batch_fill(&sign_batches)))
}

fn print_table(rows: &[Row], a: &Speed, cores: usize, threads: usize, fill: Option<f64>) {
    let ratio_head = if a.compare_openssl {
        format!(" {:>10} {:>8}", "openssl/s", "ratio")
    } else {
        String::new()
    };
    println!(
        "{:>18} {:>10} {:>10} {:>10} {:>10}{ratio_head}",
        "", "sign", "verify", "sign/s", "verify/s"
    );
    for r in rows {
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
    for r in rows {
        println!(
            "rsa {:>5} bits     sign/s per core {:>10.1}   single thread {:>10.1}   kernel {}",
            r.bits,
            r.sign / cores as f64,
            r.single,
            r.kernel
        );
    }
    if let Some(f) = fill {
        println!("mean batch fill ({threads}-thread signing): {f:.2} signatures per kernel call");
    }
    println!("CPU: {}; cores: {cores}; client threads: {threads}", cpu_model());
}

fn json(rows: &[Row], a: &Speed, cores: usize, threads: usize, fill: Option<f64>) -> String {
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
                r.kernel,
                num(r.openssl, 1),
                num(r.openssl.map(|o| r.sign / o), 2)
            )
        })
        .collect();
    format!(
        "{{\"cpu\":{:?},\"cores\":{cores},\"threads\":{threads},\"mechanism\":{:?},\"mean_batch_fill\":{},\"sizes\":[{}]}}",
        cpu_model(),
        a.mechanism,
        num(fill, 2),
        items.join(",")
    )
}
