//! End-to-end scenarios with real consumers (scripts in tests/e2e/): each makes a fresh
//! token, drives the consumer as its documentation does, and verifies the result with an
//! independent tool. A consumer that is not installed fails the scenario.

mod common;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn scenario(name: &str) {
    if let Err(e) = try_scenario(name) {
        panic!("{e}");
    }
}

/// The longest a scenario may run: its own waits are bounded well below this (the longest,
/// OpenDNSSEC's, at 4 minutes), so only a hang reaches it.
const SCENARIO_LIMIT: Duration = Duration::from_secs(420);

/// Runs a scenario in a fresh directory; the failure text on failure. A scenario still
/// running at `SCENARIO_LIMIT` fails with the machine's process tree and every process of
/// its group is killed (its daemons run in the foreground, in that group), so a hang costs
/// minutes, not the CI run.
fn try_scenario(name: &str) -> Result<(), String> {
    let env = common::TestEnv::new();
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/e2e")
        .join(format!("{name}.sh"));
    let mut child = Command::new("bash")
        .arg(&script)
        .env("FERROHSM_MODULE", common::module_path())
        .env("FERROHSM_UTIL", env!("CARGO_BIN_EXE_ferrohsm-util"))
        .env("WORK", env.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let stdout = drain(child.stdout.take().unwrap());
    let stderr = drain(child.stderr.take().unwrap());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > SCENARIO_LIMIT {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let hung = status.is_none().then(|| {
        let tree = Command::new("ps")
            .args(["-eo", "pid,pgid,stat,etimes,wchan:24,args", "--forest"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        // SAFETY: signals the process group this function made (its leader is `child`).
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
        let _ = child.wait();
        tree
    });
    // Whatever a leftover process still holds of the pipes is not waited for.
    let (stdout, stderr) = (stdout.collect(), stderr.collect());
    if let Some(tree) = hung {
        return Err(format!(
            "scenario {name} still running after {} s, killed with its process group; processes then:\n{tree}\n{stdout}\n{stderr}",
            SCENARIO_LIMIT.as_secs()
        ));
    }
    if !status.is_some_and(|s| s.success()) || !stdout.contains(&format!("e2e {name}:")) {
        return Err(format!("scenario {name} failed:\n{stdout}\n{stderr}"));
    }
    Ok(())
}

/// A pipe read to its end on a thread of its own.
struct Drained(std::sync::mpsc::Receiver<Vec<u8>>);

fn drain(mut pipe: impl Read + Send + 'static) -> Drained {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        let _ = tx.send(buf);
    });
    Drained(rx)
}

impl Drained {
    /// What was read, waiting up to 10 s for the pipe's last writer to close it.
    fn collect(self) -> String {
        match self.0.recv_timeout(Duration::from_secs(10)) {
            Ok(buf) => String::from_utf8_lossy(&buf).into_owned(),
            Err(_) => "(the output pipe was still open 10 s after the scenario ended: a process it started lives on)".into(),
        }
    }
}

#[test]
fn openssl_libp11_engine() {
    scenario("openssl-engine");
}

#[test]
fn gnutls_p11tool_certtool() {
    scenario("gnutls");
}

#[test]
fn p11_kit_module_and_proxy() {
    scenario("p11-kit");
}

#[test]
fn p11_kit_remoting() {
    scenario("p11-kit-remote");
}

#[test]
fn ldns_signzone_via_engine() {
    scenario("ldns");
}

#[test]
fn java_keytool_jarsigner() {
    scenario("java");
}

#[test]
fn openssh_pkcs11_login() {
    scenario("ssh");
}

#[test]
fn openssl_pkcs11_provider() {
    scenario("openssl-provider");
}

#[test]
fn knot_keymgr_kzonesign() {
    scenario("knot");
}

#[test]
fn powerdns_pdnsutil_hsm() {
    // pdnsutil 4.7.3 corrupts its own heap (see powerdns.sh) and dies by a signal now and then,
    // in `hsm create-key` right after C_Initialize (about one run in four in CI) or in another
    // command; every retry in the same directory crashes alike (the crash follows the run's
    // paths, not the token). A fresh directory is a fresh chance: the scenario marks such runs
    // ("PDNSUTIL CRASHED", or no key pair after create-key), and any other failure fails at once.
    for attempt in 1..=4 {
        match try_scenario("powerdns") {
            Ok(()) => return,
            Err(e)
                if attempt < 4
                    && (e.contains("PDNSUTIL CRASHED")
                        || e.contains("pdnsutil hsm create-key made no key pair")) =>
            {
                eprintln!("powerdns: pdnsutil crashed (run {attempt}); again in a fresh directory:\n{e}");
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn opendnssec_hsm_tools() {
    scenario("opendnssec");
}

#[test]
fn opendnssec_enforcer_and_signer() {
    scenario("opendnssec-signer");
}

#[test]
fn python_pkcs11_test_suite() {
    scenario("python-pkcs11");
}
