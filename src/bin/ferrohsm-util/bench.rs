//! `bench`: sign throughput and latency of any PKCS#11 module through its C API, several
//! modules in one run, with the ratio of each to the first. RSA, ECDSA (P-256, P-384) and
//! Ed25519 keys, each made in every module under test. With `--plot FILE.svg` it runs at every
//! thread count of `--plot-threads` and draws the figures (plot.rs).

use crate::plot;
use clap::Args;
use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::mechanism::Mechanism;
use cryptoki::object::Attribute;
use cryptoki::session::UserType;
use cryptoki::types::AuthPin;
use ferrohsm::cli::module::{explain, Result};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct Bench {
    /// PKCS#11 module to measure (repeat to compare; ratios are to the first).
    #[arg(long = "module", required = true)]
    modules: Vec<PathBuf>,
    /// Label of the token to use in every module.
    #[arg(long = "token")]
    token: String,
    /// User PIN of that token (else $FERROHSM_PIN).
    #[arg(long)]
    pin: Option<String>,
    /// RSA key size in bits (the EC mechanisms name their curve).
    #[arg(long, default_value_t = 2048)]
    key_size: u64,
    /// Client threads, each with its own session.
    #[arg(long, default_value_t = 16)]
    threads: usize,
    /// Seconds to measure each module.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// sha256-rsa-pkcs, rsa-pkcs (over a SHA-256 DigestInfo), sha256-rsa-pkcs-pss, ecdsa-p256,
    /// ecdsa-p384 (CKM_ECDSA over a hash of the curve's size, as `openssl speed ecdsap256`
    /// signs a digest), eddsa-ed25519 (CKM_EDDSA, pure, over a 32-byte message), or a
    /// post-quantum set of `speed --pq` such as ml-dsa-65 or slh-dsa-128f (CKM_ML_DSA,
    /// CKM_SLH_DSA, pure, hedged, over a 32-byte message).
    #[arg(long, default_value = "sha256-rsa-pkcs")]
    mechanism: String,
    /// Print one JSON object per module.
    #[arg(long)]
    json: bool,
    /// One key per thread instead of one key shared by all threads.
    #[arg(long = "key-per-thread")]
    key_per_thread: bool,
    /// Keys as token objects (destroyed after the run) instead of session objects.
    #[arg(long = "token-keys")]
    token_keys: bool,
    /// Measure the modules in this many alternating rounds, so drifts of a shared machine hit
    /// every module alike.
    #[arg(long, default_value_t = 4)]
    rounds: usize,
    /// Measure at every thread count of --plot-threads (--threads is then ignored) and draw
    /// signatures/s against threads for every module, with `openssl speed -multi <cores>` as
    /// a reference line, into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// The thread counts --plot measures.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64")]
    plot_threads: Vec<usize>,
}

/// The EC mechanisms of `--mechanism`: its name, the curve it makes its key on (a short name
/// of `speed_ec::CURVES`), and how the figures name the key. ECDSA signs a digest of the
/// curve's size (as `openssl speed ecdsap256` does), EdDSA a 32-byte message.
const EC_MECHANISMS: &[(&str, &str, &str)] = &[
    ("ecdsa-p256", "p256", "ECDSA-P256"),
    ("ecdsa-p384", "p384", "ECDSA-P384"),
    ("eddsa-ed25519", "ed25519", "Ed25519"),
];

/// The key a `--mechanism` signs with.
#[derive(Clone, Copy)]
enum KeyKind {
    Rsa,
    /// A row of `EC_MECHANISMS` and its curve's row of `speed_ec::CURVES`.
    Ec(
        &'static str,
        &'static (&'static str, &'static str, u32, &'static [u8], bool),
    ),
    /// A post-quantum parameter set of `speed_pq::SETS`.
    Pq(&'static crate::speed_pq::PqSet),
}

impl KeyKind {
    fn of(mechanism: &str) -> KeyKind {
        if let Some(set) = crate::speed_pq::find(mechanism) {
            return KeyKind::Pq(set);
        }
        EC_MECHANISMS
            .iter()
            .find(|m| m.0 == mechanism)
            .and_then(|&(_, curve, name)| {
                let c = crate::speed_ec::CURVES.iter().find(|c| c.0 == curve)?;
                Some(KeyKind::Ec(name, c))
            })
            .unwrap_or(KeyKind::Rsa)
    }

    /// (bits, CKA_EC_PARAMS, Edwards) of an EC kind.
    fn curve(self) -> Option<(u32, &'static [u8], bool)> {
        match self {
            KeyKind::Rsa | KeyKind::Pq(_) => None,
            KeyKind::Ec(_, &(_, _, bits, params, edwards)) => Some((bits, params, edwards)),
        }
    }

    /// How the figures name the key: RSA-2048, ECDSA-P256, Ed25519.
    fn name(self, rsa_bits: u64) -> String {
        match self {
            KeyKind::Rsa => format!("RSA-{rsa_bits}"),
            KeyKind::Ec(name, _) => name.into(),
            KeyKind::Pq(set) => set.label.into(),
        }
    }

    /// Key bits; 0 for post-quantum keys, which are named by their parameter set.
    fn bits(self, rsa_bits: u64) -> u64 {
        if let KeyKind::Pq(_) = self {
            return 0;
        }
        self.curve().map_or(rsa_bits, |c| c.0.into())
    }
}

/// The mechanism and data of `--mechanism` (built per thread: mechanisms cannot cross threads).
fn mechanism(name: &str) -> Result<(Mechanism<'static>, Vec<u8>)> {
    use cryptoki::mechanism::eddsa::{EddsaParams, EddsaSignatureScheme};
    if let KeyKind::Pq(set) = KeyKind::of(name) {
        return Ok((set.mechanism(), b"ferrohsm speed test message, 32b".to_vec()));
    }
    Ok(match KeyKind::of(name).curve() {
        Some((_, _, true)) => (
            Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Pure)),
            b"ferrohsm speed test message, 32b".to_vec(),
        ),
        // A digest stands in for the hash of the signed data, as for RSA-PKCS.
        Some((bits, _, false)) => (Mechanism::Ecdsa, vec![0x5a; bits.div_ceil(8) as usize]),
        None => crate::speed::mechanism(name).map_err(|_| {
            let ec: Vec<&str> = EC_MECHANISMS.iter().map(|m| m.0).collect();
            format!(
                "unknown mechanism {name:?}; use sha256-rsa-pkcs, rsa-pkcs, sha256-rsa-pkcs-pss, {}",
                ec.join(", ")
            )
        })?,
    })
}

struct Figures {
    per_s: f64,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

/// A module loaded and logged in, with the keys the run signs with.
struct Loaded {
    p: Pkcs11,
    slot: cryptoki::slot::Slot,
    admin: cryptoki::session::Session,
    keys: Vec<cryptoki::object::ObjectHandle>,
    owned: Vec<cryptoki::object::ObjectHandle>,
    signatures: usize,
    elapsed: f64,
    latencies: Vec<Duration>,
}

/// Loads `path` with `count` keys (one per thread of the largest run, or one for all).
fn load(path: &PathBuf, a: &Bench, pin: &str, count: usize) -> Result<Loaded> {
    let p = Pkcs11::new(path).map_err(|e| format!("cannot load {}: {e}", path.display()))?;
    p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
        .map_err(|e| explain(&format!("{} did not initialise", path.display()), e))?;
    let slot = ferrohsm::cli::module::find_token(&p, None, Some(&a.token), None)?;
    let pin = AuthPin::new(pin.into());
    let admin = p.open_rw_session(slot).map_err(|e| explain("open session", e))?;
    admin
        .login(UserType::User, Some(&pin))
        .map_err(|e| explain("login", e))?;
    let mut keys = vec![];
    let mut owned = vec![];
    let (generate, public) = match (KeyKind::of(&a.mechanism), KeyKind::of(&a.mechanism).curve()) {
        (KeyKind::Pq(set), _) => (set.keygen(), set.parameter_set()),
        (_, None) => (
            Mechanism::RsaPkcsKeyPairGen,
            Attribute::ModulusBits(a.key_size.into()),
        ),
        (_, Some((_, params, edwards))) => (
            crate::speed_ec::keygen_mechanism(edwards),
            Attribute::EcParams(params.to_vec()),
        ),
    };
    for _ in 0..count {
        let (public, private) = admin
            .generate_key_pair(
                &generate,
                &[
                    Attribute::Token(a.token_keys),
                    public.clone(),
                    Attribute::Verify(true),
                ],
                &[
                    Attribute::Token(a.token_keys),
                    Attribute::Private(true),
                    Attribute::Sign(true),
                ],
            )
            .map_err(|e| explain("key generation", e))?;
        keys.push(private);
        owned.extend([public, private]);
    }
    Ok(Loaded {
        p,
        slot,
        admin,
        keys,
        owned,
        signatures: 0,
        elapsed: 0.0,
        latencies: vec![],
    })
}

/// One measuring round on a loaded module, with `threads` client threads.
fn round(m: &mut Loaded, a: &Bench, threads: usize, seconds: f64) -> Result<()> {
    let (_, message) = mechanism(&a.mechanism)?;
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let (p, slot, keys) = (&m.p, m.slot, &m.keys);
    let latencies: Vec<Vec<Duration>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, message) = (&stop, &message);
                sc.spawn(move || -> Result<Vec<Duration>> {
                    let s = p.open_ro_session(slot).map_err(|e| explain("open session", e))?;
                    let key = keys[t % keys.len()];
                    let (mech, _) = mechanism(&a.mechanism)?;
                    let mut lat = vec![];
                    while !stop.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        s.sign(&mech, key, message).map_err(|e| explain("sign", e))?;
                        lat.push(t.elapsed());
                    }
                    Ok(lat)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .collect::<Result<Vec<_>>>()
    })?;
    m.elapsed += start.elapsed().as_secs_f64();
    for l in latencies {
        m.signatures += l.len();
        m.latencies.extend(l);
    }
    Ok(())
}

/// The figures of the rounds so far, which it clears for the next thread count.
fn figures(m: &mut Loaded) -> Result<Figures> {
    if m.latencies.is_empty() {
        return Err("no signature completed; raise --seconds".into());
    }
    m.latencies.sort();
    let all = &m.latencies;
    let pick = |q: f64| all[((all.len() - 1) as f64 * q).round() as usize];
    let f = Figures {
        per_s: m.signatures as f64 / m.elapsed,
        p50: pick(0.5),
        p99: pick(0.99),
        max: *all.last().unwrap(),
    };
    (m.signatures, m.elapsed) = (0, 0.0);
    m.latencies.clear();
    Ok(f)
}

pub fn run(a: Bench) -> Result<()> {
    let pin = a
        .pin
        .clone()
        .or_else(|| std::env::var("FERROHSM_PIN").ok())
        .ok_or("give --pin or FERROHSM_PIN")?;
    // An unknown mechanism or a thread count of 0 is refused before any module is loaded.
    mechanism(&a.mechanism)?;
    let counts = match &a.plot {
        Some(_) => a.plot_threads.clone(),
        None => vec![a.threads],
    };
    let most = match counts.iter().max() {
        Some(&n) if !counts.contains(&0) => n,
        _ => return Err("thread counts must be 1 or more".into()),
    };
    let kind = KeyKind::of(&a.mechanism);
    let keys = if a.key_per_thread { most } else { 1 };
    let mut loaded = a
        .modules
        .iter()
        .map(|path| load(path, &a, &pin, keys))
        .collect::<Result<Vec<_>>>()?;
    let rounds = a.rounds.max(1);
    let mut series: Vec<plot::Series> = a
        .modules
        .iter()
        .map(|p| plot::Series {
            name: p
                .file_name()
                .map_or(p.display().to_string(), |n| n.to_string_lossy().into()),
            points: vec![],
        })
        .collect();
    let progress = super::progress::bar(counts.len() * rounds * a.modules.len(), "bench");
    for &threads in &counts {
        for r in 0..rounds {
            for (path, m) in a.modules.iter().zip(loaded.iter_mut()) {
                progress.set_message(format!(
                    "{threads} threads, round {}/{rounds}: {}",
                    r + 1,
                    path.display()
                ));
                round(m, &a, threads, a.seconds / rounds as f64)?;
                progress.inc(1);
            }
        }
        let mut first = None;
        for ((path, m), s) in a.modules.iter().zip(loaded.iter_mut()).zip(series.iter_mut()) {
            let f = figures(m)?;
            s.points.push((threads, f.per_s));
            let base = *first.get_or_insert(f.per_s);
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            progress.suspend(|| {
                if a.json {
                    println!(
                        "{{\"module\":{:?},\"mechanism\":{:?},\"key\":{:?},\"key_size\":{},\"threads\":{},\"sign_per_s\":{:.1},\"per_thread\":{:.1},\"p50_ms\":{:.3},\"p99_ms\":{:.3},\"max_ms\":{:.3},\"ratio\":{:.2}}}",
                        path.display().to_string(), a.mechanism, kind.name(a.key_size), kind.bits(a.key_size), threads, f.per_s, f.per_s / threads as f64, ms(f.p50), ms(f.p99), ms(f.max), f.per_s / base
                    );
                } else {
                    println!(
                        "{:<48} {} {:>2} threads {:>9.1} sign/s ({:>7.1}/thread)  p50 {:>7.3} ms  p99 {:>7.3} ms  max {:>8.3} ms  ratio {:>5.2}",
                        path.display().to_string(), kind.name(a.key_size), threads, f.per_s, f.per_s / threads as f64, ms(f.p50), ms(f.p99), ms(f.max), f.per_s / base
                    );
                }
            });
        }
    }
    progress.finish_and_clear();
    // Token keys made for the run are removed.
    for m in &loaded {
        for h in &m.owned {
            let _ = m.admin.destroy_object(*h);
        }
    }
    if let Some(file) = &a.plot {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let key = kind.name(a.key_size);
        let openssl = plot::openssl_multi(&key, kind.bits(a.key_size), a.seconds, cores);
        let label = format!("openssl speed -multi {cores}");
        match openssl {
            Some(v) => eprintln!("{label} {key}: {v:.1} sign/s"),
            None => eprintln!("openssl speed printed no {key} figure: the plot has no reference line"),
        }
        let mut title = format!("{key} ({}) on {}", a.mechanism, plot::cpu());
        // A forced kernel family changes what the figures mean: the title says so.
        if let Ok(k) = std::env::var("FERROHSM_KERNEL") {
            title.push_str(&format!(", FERROHSM_KERNEL={k}"));
        }
        plot::draw(file, &title, &series, openssl.map(|v| (label.as_str(), v)))?;
        eprintln!("plot written to {}", file.display());
    }
    Ok(())
}
