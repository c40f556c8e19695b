//! Store scale benchmark: fills a token with N RSA private-key objects (imports of a few
//! pre-generated keys under distinct ids and labels) through the PKCS#11 API, then reports
//! `C_Initialize`, `C_Login` and find-by-id latencies (p50/p99; finds right after each
//! `C_Initialize`, warm finds in one long-lived module, and finds of keys it found before) and
//! resident memory.
//!
//! cargo bench --bench store_scale -- [N]              (default N = 100000; SQLite store)
//! cargo bench --bench store_scale -- [N] --postgres   (the same on a PostgreSQL store: a private
//!                                                       cluster, or FERROHSM_TEST_PG_URL)
//! cargo bench --bench store_scale -- --sign-compare   (RSA-2048 signing through PKCS#11, keys
//!                                                       cached, on SQLite then PostgreSQL)
//!
//! cargo bench --bench store_scale -- [N] --rotate     (after the fill: the time of one user
//!                                                       C_SetPIN, which seals every object again
//!                                                       under a new token key; then stops)
//!
//! Options: `--touch T` signs once with each of T distinct keys (default min(N, 20000)) and
//! samples resident memory as it goes, to show the object cache's bound; `--cache-mib M` sets
//! `store.cache_mib` (default: the module's default).

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, KeyType, ObjectClass};
use cryptoki::session::UserType;
use cryptoki::types::AuthPin;
use rsa::traits::{PrivateKeyParts, PublicKeyParts};
use std::time::{Duration, Instant};

/// The PostgreSQL test server helper of the integration tests.
#[path = "../tests/common/pg.rs"]
mod pg;

fn be(v: &rsa::BoxedUint) -> Vec<u8> {
    let b = v.to_be_bytes();
    let first = b.iter().position(|&x| x != 0).unwrap_or(b.len());
    b[first..].to_vec()
}

/// Resident memory of the process's own (anonymous) pages. SQLite's readers map the store
/// file: its pages are the kernel's page cache, shared and dropped under pressure, and are
/// reported apart (`rss_file_kib`).
fn rss_kib() -> u64 {
    status_kib("RssAnon:")
}

fn rss_file_kib() -> u64 {
    status_kib("RssFile:")
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
        })
        .unwrap_or(0)
}

/// The private key the fill stored under `id`, as a signer finds it.
fn find_by_id(s: &cryptoki::session::Session, id: u64) -> Vec<cryptoki::object::ObjectHandle> {
    s.find_objects(&[
        Attribute::Class(ObjectClass::PRIVATE_KEY),
        Attribute::Id(id.to_be_bytes().to_vec()),
    ])
    .unwrap()
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn module() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    dir.join("libferrohsm.so")
}

fn load() -> Pkcs11 {
    let p = Pkcs11::new(module()).expect("build the module first: cargo build --release");
    p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
        .unwrap();
    p
}

/// A configuration in `dir` for an SQLite store, or for a new database of `server`, with
/// the default Argon2id parameters so login figures are the real ones.
fn store_conf(dir: &std::path::Path, server: Option<&pg::Pg>, cache_mib: Option<u32>) -> std::path::PathBuf {
    let conf = store_conf_file(dir, server);
    if let Some(m) = cache_mib {
        let text = std::fs::read_to_string(&conf).unwrap();
        let text = text.replacen("[store]\n", &format!("[store]\ncache_mib = {m}\n"), 1);
        std::fs::write(&conf, text).unwrap();
    }
    conf
}

fn store_conf_file(dir: &std::path::Path, server: Option<&pg::Pg>) -> std::path::PathBuf {
    match server {
        None => {
            let conf = dir.join("ferrohsm.toml");
            std::fs::write(&conf, "[store]\npath = \"store\"\n").unwrap();
            conf
        }
        Some(server) => {
            let url = server.database("bench");
            let conf = server.config(dir, &url, 10, 1000);
            // The bench keeps the default KDF: drop the test's fast one.
            let text = std::fs::read_to_string(&conf).unwrap();
            let text: String = text
                .lines()
                .filter(|l| !l.starts_with("kdf_"))
                .map(|l| format!("{l}\n"))
                .collect();
            std::fs::write(&conf, text).unwrap();
            conf
        }
    }
}

/// RSA-2048 PKCS#1 v1.5 signatures per second through PKCS#11 with 2 threads for `secs`, on
/// one token key of the store `conf` names (prepared once, then cached).
fn sign_rate(conf: &std::path::Path, secs: u64) -> f64 {
    std::env::set_var("FERROHSM_CONF", conf);
    let pin = AuthPin::new("bench-pin".into());
    let p = load();
    let slot = p.get_all_slots().unwrap()[0];
    p.init_token(slot, &pin, "sign").unwrap();
    let s = p.open_rw_session(slot).unwrap();
    s.login(UserType::So, Some(&pin)).unwrap();
    s.init_pin(&pin).unwrap();
    s.logout().unwrap();
    s.login(UserType::User, Some(&pin)).unwrap();
    let (_, key) = s
        .generate_key_pair(
            &Mechanism::RsaPkcsKeyPairGen,
            &[
                Attribute::Token(true),
                Attribute::ModulusBits(2048.into()),
                Attribute::Verify(true),
            ],
            &[
                Attribute::Token(true),
                Attribute::Private(true),
                Attribute::Sign(true),
            ],
        )
        .unwrap();
    s.sign(&Mechanism::Sha256RsaPkcs, key, b"warm").unwrap();
    let done = std::sync::atomic::AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|sc| {
        for _ in 0..2 {
            let (p, done) = (&p, &done);
            sc.spawn(move || {
                let s = p.open_ro_session(slot).unwrap();
                while start.elapsed() < Duration::from_secs(secs) {
                    s.sign(&Mechanism::Sha256RsaPkcs, key, b"rate").unwrap();
                    done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
    });
    let rate = done.load(std::sync::atomic::Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64();
    drop(s);
    p.finalize().unwrap();
    rate
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--sign-compare") {
        let server = pg::Pg::start();
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let sqlite = sign_rate(&store_conf(a.path(), None, None), 10);
        let postgres = sign_rate(&store_conf(b.path(), Some(&server), None), 10);
        println!("RSA-2048 sign/s through PKCS#11, 2 threads, 10 s each: sqlite {sqlite:.0}, postgres {postgres:.0} ({:+.1}%)", (postgres / sqlite - 1.0) * 100.0);
        return;
    }
    let option = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .map(|i| args[i + 1].parse::<usize>().expect("a number after the option"))
    };
    let (touch, cache_mib) = (option("--touch"), option("--cache-mib"));
    let n: usize = args
        .iter()
        .enumerate()
        .find(|(i, _)| *i == 0 || !args[i - 1].starts_with("--"))
        .and_then(|(_, a)| a.parse().ok())
        .unwrap_or(100_000);
    let touch = touch.unwrap_or(n.min(20_000)).min(n);
    let server = args.iter().any(|a| a == "--postgres").then(pg::Pg::start);
    // `--keep DIR` fills a store in DIR once and measures it again on later runs (SQLite).
    let kept = args
        .iter()
        .position(|a| a == "--keep")
        .map(|i| std::path::PathBuf::from(&args[i + 1]));
    let temp = tempfile::tempdir().unwrap();
    let dir_path = kept.clone().unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&dir_path).unwrap();
    let refill = !(kept.is_some() && server.is_none() && dir_path.join("store/ferrohsm.db").exists());
    let conf = store_conf(&dir_path, server.as_ref(), cache_mib.map(|m| m as u32));
    std::env::set_var("FERROHSM_CONF", &conf);
    let pin = AuthPin::new("bench-pin".into());

    let mut rng = rand_core::UnwrapErr(getrandom::SysRng);
    let keys: Vec<rsa::PrivateKey> = (0..8)
        .map(|_| rsa::PrivateKey::new(&mut rng, 2048).unwrap())
        .collect();
    let p = load();
    let slot = p.get_all_slots().unwrap()[0];
    if refill {
        p.init_token(slot, &pin, "scale").unwrap();
    }
    let s = p.open_rw_session(slot).unwrap();
    if refill {
        s.login(UserType::So, Some(&pin)).unwrap();
        s.init_pin(&pin).unwrap();
        s.logout().unwrap();
    }
    s.login(UserType::User, Some(&pin)).unwrap();
    let start = Instant::now();
    for i in (0..n).filter(|_| refill) {
        let k = &keys[i % keys.len()];
        s.create_object(&[
            Attribute::Class(ObjectClass::PRIVATE_KEY),
            Attribute::KeyType(KeyType::RSA),
            Attribute::Token(true),
            Attribute::Private(true),
            Attribute::Sign(true),
            Attribute::Id((i as u64).to_be_bytes().to_vec()),
            Attribute::Label(format!("key-{i}").into_bytes()),
            Attribute::Modulus(be(k.n().as_ref())),
            Attribute::PublicExponent(be(k.e())),
            Attribute::PrivateExponent(be(k.d())),
            Attribute::Prime1(be(k.primes()[0].as_ref())),
            Attribute::Prime2(be(k.primes()[1].as_ref())),
            Attribute::Exponent1(be(k.dp().unwrap())),
            Attribute::Exponent2(be(k.dq().unwrap())),
            Attribute::Coefficient(be(&k.crt_coefficient().unwrap())),
        ])
        .unwrap();
        if (i + 1) % 10_000 == 0 {
            eprintln!(
                "imported {} objects ({:.0}/s)",
                i + 1,
                (i + 1) as f64 / start.elapsed().as_secs_f64()
            );
        }
    }
    let fill = start.elapsed();
    s.close().unwrap();
    p.finalize().unwrap();
    let db_size = match &server {
        None => std::fs::metadata(dir_path.join("store/ferrohsm.db")).map_or(0, |m| m.len()),
        Some(server) => {
            let url = std::fs::read_to_string(&conf)
                .unwrap()
                .lines()
                .find_map(|l| {
                    l.strip_prefix("url = \"")
                        .map(|u| u.trim_end_matches('"').to_string())
                })
                .unwrap();
            let size: i64 = server
                .client(&url)
                .query_one("SELECT pg_database_size(current_database())", &[])
                .unwrap()
                .get(0);
            size as u64
        }
    };

    if args.iter().any(|a| a == "--rotate") {
        rotate(slot, n, &pin);
        return;
    }
    let rss_before = rss_kib();
    let mut init_t = vec![];
    let mut login_t = vec![];
    let mut find_t = vec![];
    let mut sign_t = vec![];
    for round in 0..20 {
        let t = Instant::now();
        let p = load();
        init_t.push(t.elapsed());
        let s = p.open_ro_session(slot).unwrap();
        let t = Instant::now();
        s.login(UserType::User, Some(&pin)).unwrap();
        login_t.push(t.elapsed());
        for j in 0..50 {
            let id = ((round * 7919 + j * 104_729) % n) as u64;
            let t = Instant::now();
            let found = find_by_id(&s, id);
            find_t.push(t.elapsed());
            assert_eq!(found.len(), 1);
            if j < 5 {
                let t = Instant::now();
                s.sign(&Mechanism::Sha256RsaPkcs, found[0], b"scale").unwrap();
                sign_t.push(t.elapsed());
            }
        }
        s.close().unwrap();
        p.finalize().unwrap();
    }
    // A long-running signer: one initialised module, 5,000 finds of random ids. Above, every
    // round's first find also opened its thread's read connection.
    let p = load();
    let s = p.open_ro_session(slot).unwrap();
    s.login(UserType::User, Some(&pin)).unwrap();
    // 5,000 random ids (xorshift), the same each run and each pass.
    let ids: Vec<u64> = std::iter::successors(Some(0x9e37_79b9_7f4a_7c15u64), |x| {
        let x = x ^ (x << 13);
        let x = x ^ (x >> 7);
        Some(x ^ (x << 17))
    })
    .skip(1)
    .take(5000)
    .map(|x| x % n as u64)
    .collect();
    let finds = |times: &mut Vec<Duration>| {
        for &id in &ids {
            let t = Instant::now();
            let found = find_by_id(&s, id);
            times.push(t.elapsed());
            assert_eq!(found.len(), 1);
        }
    };
    let mut warm_t = vec![];
    finds(&mut warm_t);
    // A signer that finds its keys again and again (a DNS signer finds its ZSK at every run
    // of its signing loop): the 5,000 ids above once more, each now held by the module.
    let mut cached_t = vec![];
    finds(&mut cached_t);
    // A signer that uses every key in turn: each is found, prepared and cached once. With the
    // cache bounded, resident memory levels off once the cache is full.
    let rss_touch_start = rss_kib();
    let mut rss_touch = vec![];
    let touch_start = Instant::now();
    for i in 0..touch {
        let id = (i * 104_729 % n) as u64;
        let found = find_by_id(&s, id);
        s.sign(&Mechanism::Sha256RsaPkcs, found[0], b"touch").unwrap();
        if (i + 1) % (touch / 4).max(1) == 0 {
            rss_touch.push((i + 1, rss_kib()));
        }
    }
    let touch_time = touch_start.elapsed();
    s.close().unwrap();
    p.finalize().unwrap();
    let rss_after = rss_kib();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    if !refill {
        println!("(the store was kept from an earlier run: its fill figures are that run's)");
    }
    let filled = if refill {
        format!(
            "fill {:.1} s ({:.0} objects/s)",
            fill.as_secs_f64(),
            n as f64 / fill.as_secs_f64()
        )
    } else {
        "filled by an earlier run (--keep)".to_string()
    };
    println!(
        "{} store, objects: {n} RSA-2048 private keys; store {:.1} MiB; {filled}",
        if server.is_some() { "postgres" } else { "sqlite" },
        db_size as f64 / 1048576.0,
    );
    println!(
        "C_Initialize        p50 {:8.3} ms  p99 {:8.3} ms",
        ms(percentile(&mut init_t, 0.5)),
        ms(percentile(&mut init_t, 0.99))
    );
    println!("C_Login (user)      p50 {:8.3} ms  p99 {:8.3} ms  (first login runs Argon2id; later ones in the same process do not)", ms(percentile(&mut login_t, 0.5)), ms(percentile(&mut login_t, 0.99)));
    println!(
        "find by CKA_ID      p50 {:8.3} ms  p99 {:8.3} ms  (after each C_Initialize and login)",
        ms(percentile(&mut find_t, 0.5)),
        ms(percentile(&mut find_t, 0.99))
    );
    println!(
        "find by CKA_ID, warm p50 {:8.3} ms  p99 {:8.3} ms  (5,000 random ids in one initialised module)",
        ms(percentile(&mut warm_t, 0.5)),
        ms(percentile(&mut warm_t, 0.99))
    );
    println!(
        "find, found before  p50 {:8.3} ms  p99 {:8.3} ms  (the same 5,000 ids again, each held by the module)",
        ms(percentile(&mut cached_t, 0.5)),
        ms(percentile(&mut cached_t, 0.99))
    );
    println!(
        "first sign of key   p50 {:8.3} ms  p99 {:8.3} ms  (includes preparing the key)",
        ms(percentile(&mut sign_t, 0.5)),
        ms(percentile(&mut sign_t, 0.99))
    );
    println!(
        "resident memory     {} KiB before, {} KiB after 20 init/login/find cycles and the rest (anonymous; mapped store file {} KiB)",
        rss_before,
        rss_after,
        rss_file_kib()
    );
    let samples: Vec<String> = rss_touch
        .iter()
        .map(|(k, r)| format!("{k} keys {:.0} MiB", *r as f64 / 1024.0))
        .collect();
    println!(
        "signing with {touch} distinct keys ({:.0} keys/s, cache_mib {}): resident memory (anonymous) {:.0} MiB at the start, then {}",
        touch as f64 / touch_time.as_secs_f64(),
        cache_mib.map_or("default".to_string(), |m| m.to_string()),
        rss_touch_start as f64 / 1024.0,
        samples.join(", ")
    );
}

/// One user C_SetPIN on the filled token, timed: every object is sealed again under a new
/// token key in one transaction (`store::sealed::rotate`). Then the new PIN finds a key.
fn rotate(slot: cryptoki::slot::Slot, n: usize, pin: &AuthPin) {
    let p = load();
    let s = p.open_rw_session(slot).unwrap();
    // A store upgraded from the earlier format gives the SO PIN its owner key at the SO's
    // first login; a new token key is refused until then (docs/operations.md).
    s.login(UserType::So, Some(pin)).unwrap();
    s.logout().unwrap();
    let new_pin = AuthPin::new("bench-pin-2".into());
    let t = Instant::now();
    s.set_pin(pin, &new_pin).unwrap();
    let took = t.elapsed();
    s.login(UserType::User, Some(&new_pin)).unwrap();
    assert_eq!(find_by_id(&s, (n / 2) as u64).len(), 1);
    s.close().unwrap();
    p.finalize().unwrap();
    println!(
        "C_SetPIN (user) with {n} RSA-2048 private keys: {:.2} s ({:.0} objects/s sealed again under a new token key, one transaction)",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64()
    );
}
