//! Several servers on one store: two `ferrohsm-server`s on one PostgreSQL database, a client
//! module naming both (`remote.servers`), and servers killed and restarted under a signing
//! run. The application never restarts, never sees an error, and every signature verifies
//! under the `rsa` crate.

mod common;

use common::pg::Pg;
use common::remote::*;
use common::*;
use cryptoki::mechanism::Mechanism;
use rsa::sha2::Sha256;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Signing threads of the run.
const THREADS: usize = 4;
/// How long a killed server's clients may go without a signature (issue 51).
const RESUME_WITHIN: Duration = Duration::from_secs(2);

/// Two servers over one database, each in a directory of its own.
struct Fleet {
    env: TestEnv,
    _pg: Pg,
    dirs: Vec<PathBuf>,
    servers: Vec<Server>,
}

impl Fleet {
    fn new() -> Fleet {
        Fleet::with_timeout(20_000)
    }

    /// A fleet whose client waits `timeout_ms` for an answer (`remote.timeout_ms`).
    fn with_timeout(timeout_ms: u32) -> Fleet {
        let env = TestEnv::new();
        let pg = Pg::start();
        let url = pg.database("failover");
        let root = env.dir.path().to_path_buf();
        // The token made through the local module, on the database.
        std::env::set_var("FERROHSM_CONF", pg.config(&root.join("local"), &url, 10, 300));
        let p = load();
        new_token(&p, "alpha");
        p.finalize().unwrap();
        make_pki(&root);
        let mut dirs = Vec::new();
        let mut servers = Vec::new();
        for i in 0..2 {
            let dir = root.join(format!("server{i}"));
            pg.config(&dir, &url, 10, 300);
            for f in ["ca.pem", "server.pem", "server.key", "signer.pem", "signer.key"] {
                std::fs::copy(root.join(f), dir.join(f)).unwrap();
            }
            servers.push(start(&dir, "127.0.0.1:0"));
            dirs.push(dir);
        }
        let conf = root.join("client.toml");
        std::fs::write(
            &conf,
            format!(
                "[remote]\nservers = [\"{}\", \"{}\"]\nca = \"ca.pem\"\ncert = \"signer.pem\"\nkey = \"signer.key\"\ntimeout_ms = {timeout_ms}\n[log]\nlevel = \"info\"\ntarget = \"{}\"\n",
                servers[0].addr,
                servers[1].addr,
                root.join("client.log").display()
            ),
        )
        .unwrap();
        std::env::set_var("FERROHSM_CONF", &conf);
        Fleet {
            env,
            _pg: pg,
            dirs,
            servers,
        }
    }

    fn kill(&mut self, i: usize) {
        let _ = self.servers[i].child.kill();
        let _ = self.servers[i].child.wait();
    }

    /// Starts server `i` again on its address.
    fn restart(&mut self, i: usize) {
        let addr = self.servers[i].addr.clone();
        self.servers[i] = start(&self.dirs[i], &addr);
    }

    /// The signatures server `i` made (its log, the store configuration's, names each at
    /// debug level).
    fn signed(&self, i: usize) -> usize {
        std::fs::read_to_string(self.dirs[i].join("ferrohsm.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.ends_with("request Sign") || l.ends_with("request SignInitAndSign"))
            .count()
    }
}

fn start(dir: &Path, listen: &str) -> Server {
    Server::start_configured(
        dir,
        listen,
        "debug",
        "server",
        "[[client]]\nidentity = \"signer\"\ntokens = [\"alpha\"]\n",
    )
}

/// What the signing threads saw.
struct Run {
    stop: AtomicBool,
    signatures: AtomicUsize,
    errors: Mutex<Vec<String>>,
    /// When each signature was made.
    times: Mutex<Vec<Instant>>,
    /// The client module's log.
    log: PathBuf,
}

impl Run {
    /// Waits until `n` more signatures were made, or panics after `limit`.
    fn wait_for(&self, n: usize, limit: Duration) {
        let goal = self.signatures.load(Ordering::Relaxed) + n;
        let start = Instant::now();
        while self.signatures.load(Ordering::Relaxed) < goal {
            assert!(
                start.elapsed() < limit,
                "the run stalled at {} signatures; errors: {:?}; the client's log:\n{}",
                self.signatures.load(Ordering::Relaxed),
                self.errors.lock().unwrap(),
                self.logs()
            );
            assert!(
                self.errors.lock().unwrap().len() < 10,
                "errors: {:?}; the client's log:\n{}",
                self.errors.lock().unwrap(),
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The logs of the client module and of the servers beside it.
    fn logs(&self) -> String {
        let root = self.log.parent().unwrap().parent().unwrap();
        [
            "local/ferrohsm.log",
            "server0/ferrohsm.log",
            "server1/ferrohsm.log",
        ]
        .iter()
        .map(|f| {
            format!(
                "{f}:\n{}",
                std::fs::read_to_string(root.join(f)).unwrap_or_default()
            )
        })
        .collect()
    }

    /// The longest pause between signatures from `at` (the kill) to `until`: the run's
    /// whole stall, not only the first signature after the kill (which may have been computed
    /// before it).
    fn longest_pause(&self, at: Instant, until: Instant) -> Duration {
        let mut times: Vec<Instant> = self
            .times
            .lock()
            .unwrap()
            .iter()
            .copied()
            .filter(|t| *t >= at && *t <= until)
            .collect();
        times.sort();
        let mut last = at;
        let mut longest = Duration::ZERO;
        for t in times {
            longest = longest.max(t.duration_since(last));
            last = t;
        }
        longest
    }
}

#[test]
fn a_signing_run_moves_to_the_other_server_when_one_is_killed_and_back_when_it_returns() {
    let mut fleet = Fleet::new();
    let p = load();
    let alpha = slot_of(&p, "alpha").unwrap();
    let s = user_session(&p, alpha);
    let (public, private) = rsa_keypair(&s, 2048, b"fleet", true);
    let key = rsa_public(&s, public);

    let run = Arc::new(Run {
        stop: AtomicBool::new(false),
        signatures: AtomicUsize::new(0),
        errors: Mutex::new(Vec::new()),
        times: Mutex::new(Vec::new()),
        log: fleet.env.dir.path().join("local/ferrohsm.log"),
    });
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (p, run, key) = (p.clone(), run.clone(), key.clone());
            std::thread::spawn(move || {
                // Each thread's own session, logged in by the application's one login.
                let s = p.open_rw_session(alpha).unwrap();
                let mut n = 0u64;
                while !run.stop.load(Ordering::Relaxed) {
                    n += 1;
                    let data = format!("thread {t} signature {n}");
                    match s.sign(&Mechanism::Sha256RsaPkcs, private, data.as_bytes()) {
                        Ok(sig) => {
                            key.verify(rsa::Pkcs1v15Sign::new::<Sha256>(), &sha256(data.as_bytes()), &sig)
                                .unwrap_or_else(|e| panic!("a wrong signature for {data:?}: {e}"));
                            run.times.lock().unwrap().push(Instant::now());
                            run.signatures.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            let mut errors = run.errors.lock().unwrap();
                            errors.push(format!("{data}: {e}"));
                            if errors.len() >= 10 {
                                return;
                            }
                        }
                    }
                }
            })
        })
        .collect();

    // The client is on the first server; it dies under the run.
    run.wait_for(100, Duration::from_secs(60));
    assert!(
        fleet.signed(0) > 0 && fleet.signed(1) == 0,
        "{} {} {}",
        fleet.signed(0),
        fleet.signed(1),
        run.logs()
    );
    let killed = Instant::now();
    fleet.kill(0);
    run.wait_for(100, Duration::from_secs(30));
    let first_gap = run.longest_pause(killed, Instant::now());
    let on_second = fleet.signed(1);
    let on_first = fleet.signed(0);
    // It comes back; the second dies; the run is back on the first.
    fleet.restart(0);
    let killed = Instant::now();
    fleet.kill(1);
    run.wait_for(100, Duration::from_secs(30));
    let second_gap = run.longest_pause(killed, Instant::now());
    // A session opened now, after both moves, is logged in as the application is.
    let late = p.open_rw_session(alpha).unwrap();
    let sig = late.sign(&Mechanism::Sha256RsaPkcs, private, b"late").unwrap();
    key.verify(rsa::Pkcs1v15Sign::new::<Sha256>(), &sha256(b"late"), &sig)
        .unwrap();
    run.stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }

    eprintln!(
        "longest pauses after the kills {first_gap:?} and {second_gap:?}; {} signatures, {on_second} on the second server",
        run.signatures.load(Ordering::Relaxed)
    );
    let errors = run.errors.lock().unwrap();
    assert!(errors.is_empty(), "the application saw errors: {errors:?}");
    assert!(on_second >= 100, "the second server made {on_second} signatures");
    assert!(fleet.signed(0) > on_first, "the restarted first server made none");
    for gap in [first_gap, second_gap] {
        assert!(
            gap <= RESUME_WITHIN,
            "signing resumed {gap:?} after the server was killed"
        );
    }
    drop(late);
    drop(s);
    p.finalize().unwrap();
    drop(fleet.env);
}

/// A server that stops answering without closing its connection (stopped, as a host that
/// hangs): the call waiting on it answers `CKR_DEVICE_ERROR` after `remote.timeout_ms`, and
/// the client leaves it: the next call is made on the other server, the session resumed.
#[test]
fn a_server_that_stops_answering_is_left_after_the_timeout() {
    let mut fleet = Fleet::with_timeout(1_000);
    let p = load();
    let alpha = slot_of(&p, "alpha").unwrap();
    let s = user_session(&p, alpha);
    let (public, private) = rsa_keypair(&s, 2048, b"hang", true);
    let key = rsa_public(&s, public);
    s.sign(&Mechanism::Sha256RsaPkcs, private, b"before").unwrap();

    let pid = fleet.servers[0].child.id().to_string();
    let signal = |sig: &str| {
        assert!(std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success())
    };
    signal("-STOP");
    let started = Instant::now();
    let hung = s.sign(&Mechanism::Sha256RsaPkcs, private, b"hung");
    let waited = started.elapsed();
    let after = s.sign(&Mechanism::Sha256RsaPkcs, private, b"after");
    signal("-CONT");
    assert_eq!(rv(hung.unwrap_err()), cryptoki::error::RvError::DeviceError);
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
    let sig = after.expect("the next call goes to the other server");
    key.verify(rsa::Pkcs1v15Sign::new::<Sha256>(), &sha256(b"after"), &sig)
        .unwrap();
    assert!(fleet.signed(1) > 0, "the other server made no signature");
    drop(s);
    p.finalize().unwrap();
    fleet.kill(0);
}
