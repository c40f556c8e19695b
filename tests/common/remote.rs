//! The remote token's test world: a PKI made with rcgen, a running `ferrohsm-server`, a store
//! with two tokens ("alpha", "beta", made through the local module before it switches to
//! remote), and the module pointed at the server as one client or another.

use super::*;
use cryptoki::slot::Slot;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rsa::sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub const P256_OID: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];

/// Writes `NAME.pem` and `NAME.key` in `dir`.
fn write_pair(dir: &Path, name: &str, cert_pem: String, key: &KeyPair) {
    std::fs::write(dir.join(format!("{name}.pem")), cert_pem).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
}

fn make_ca(cn: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, cn);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
}

fn leaf(
    dir: &Path,
    name: &str,
    sans: &[&str],
    issuer: &CertifiedIssuer<'static, KeyPair>,
    client: bool,
    expired: bool,
) {
    let mut p = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name.push(DnType::CommonName, name);
    p.extended_key_usages = vec![if client {
        ExtendedKeyUsagePurpose::ClientAuth
    } else {
        ExtendedKeyUsagePurpose::ServerAuth
    }];
    if expired {
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(2021, 1, 1);
    }
    let key = KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, issuer).unwrap();
    write_pair(dir, name, cert.pem(), &key);
}

/// The PKI of a test: a CA, the server's certificate for 127.0.0.1, clients `signer` (alpha,
/// SO allowed), `noso` (alpha, no SO), `stranger` (signed by the CA, in no [[client]]),
/// `expired`, and `intruder` (signed by another CA).
pub fn make_pki(dir: &Path) {
    let ca = make_ca("ferrohsm test CA");
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    leaf(dir, "server", &["127.0.0.1", "localhost"], &ca, false, false);
    for name in ["signer", "noso", "stranger"] {
        leaf(dir, name, &[], &ca, true, false);
    }
    leaf(dir, "expired", &[], &ca, true, true);
    let other = make_ca("another CA");
    leaf(dir, "intruder", &[], &other, true, false);
}

/// A running `ferrohsm-server`, killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: String,
    /// The address of `GET /metrics` and `/health`, when `metrics_listen` is set.
    pub metrics: Option<String>,
    dir: PathBuf,
    log: PathBuf,
}

impl Server {
    pub fn start(dir: &Path, listen: &str) -> Server {
        Server::start_logging(dir, listen, "info")
    }

    /// `start` with the server's log at `level` (`debug` names each request of a signature).
    pub fn start_logging(dir: &Path, listen: &str, level: &str) -> Server {
        Server::start_with(dir, listen, level, "", "")
    }

    /// `start_logging` with `top` added to the configuration's top-level keys and
    /// `signer` to the `signer` client's entry.
    pub fn start_with(dir: &Path, listen: &str, level: &str, top: &str, signer: &str) -> Server {
        Server::start_configured(
            dir,
            listen,
            level,
            "server",
            &format!(
                "{top}\n\
                 [[client]]\nidentity = \"signer\"\ntokens = [\"alpha\"]\nso = true\n{signer}\n\
                 [[client]]\nidentity = \"noso\"\ntokens = [\"alpha\"]\n\n\
                 [[client]]\nidentity = \"expired\"\ntokens = [\"alpha\"]\n\n\
                 [[client]]\nidentity = \"intruder\"\ntokens = [\"alpha\"]\n"
            ),
        )
    }

    /// A server in `dir` (its CA `ca.pem`, its certificate `CERT.pem` and key `CERT.key`, the
    /// module configuration `ferrohsm.toml`) with `rest` after those keys: more top-level keys,
    /// then the `[[client]]` entries.
    pub fn start_configured(dir: &Path, listen: &str, level: &str, cert: &str, rest: &str) -> Server {
        let conf = dir.join("server.toml");
        std::fs::write(
            &conf,
            format!(
                "listen = \"{listen}\"\nca = \"ca.pem\"\ncert = \"{cert}.pem\"\nkey = \"{cert}.key\"\n\
                 module_config = \"ferrohsm.toml\"\n{rest}"
            ),
        )
        .unwrap();
        let log = dir.join("server.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_ferrohsm-server"))
            .arg("--config")
            .arg(&conf)
            .env("FERROHSM_LOG", level)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut metrics = None;
        loop {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            let line = line.trim();
            if let Some(m) = line.strip_prefix("ferrohsm-server: metrics on ") {
                metrics = Some(m.to_string());
                continue;
            }
            let addr = line
                .strip_prefix("ferrohsm-server: listening on ")
                .unwrap_or_else(|| {
                    panic!(
                        "server did not start: {line:?}; log: {}",
                        std::fs::read_to_string(&log).unwrap()
                    )
                })
                .to_string();
            return Server {
                child,
                addr,
                metrics,
                dir: dir.to_path_buf(),
                log,
            };
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap()
    }

    /// Waits up to 5 s for the log to hold `what`.
    pub fn logged(&self, what: &str) -> bool {
        for _ in 0..100 {
            if self.log().contains(what) {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        false
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A test's world: its store with tokens alpha and beta, its PKI, its server.
pub struct World {
    pub env: TestEnv,
    pub server: Server,
}

impl World {
    pub fn new() -> World {
        World::logging("info")
    }

    /// A world whose server logs at `level`.
    pub fn logging(level: &str) -> World {
        World::with(level, "", "")
    }

    /// A world whose server has `top` among its configuration's keys and `signer` in the
    /// `signer` client's entry (`Server::start_with`).
    pub fn with(level: &str, top: &str, signer: &str) -> World {
        let env = TestEnv::new();
        let p = load();
        new_token(&p, "alpha");
        new_token(&p, "beta");
        p.finalize().unwrap();
        make_pki(env.dir.path());
        let server = Server::start_with(env.dir.path(), "127.0.0.1:0", level, top, signer);
        World { env, server }
    }

    /// Points FERROHSM_CONF at a remote configuration with client `name`'s certificate.
    pub fn client(&self, name: &str) {
        std::env::set_var("FERROHSM_CONF", self.server.client_conf(name));
    }
}

impl Server {
    /// Writes the module's `[remote]` configuration for client `name` (its certificate
    /// `NAME.pem` and key `NAME.key` beside the CA), and returns its path.
    pub fn client_conf(&self, name: &str) -> PathBuf {
        let conf = self.dir.join(format!("remote-{name}.toml"));
        std::fs::write(
            &conf,
            format!(
                "[remote]\nservers = [\"{}\"]\nca = \"ca.pem\"\ncert = \"{name}.pem\"\nkey = \"{name}.key\"\ntimeout_ms = 20000\n",
                self.addr
            ),
        )
        .unwrap();
        conf
    }
}

/// The PKI an operator makes with `ferrohsm-util pki` (docs/operations.md, "Certificates for
/// the network service"), in `dir`: the CA, the server's certificate `server.pem` for
/// 127.0.0.1 and one client certificate per name in `clients`.
pub fn util_pki(dir: &Path, clients: &[&str]) {
    let pki = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_ferrohsm-util"))
            .arg("pki")
            .args(args)
            .arg("--dir")
            .arg(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ferrohsm-util pki {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    pki(&["init-ca", "--name", "e2e CA"]);
    pki(&["issue", "--server", "server", "--san", "127.0.0.1"]);
    for c in clients {
        pki(&["issue", "--client", c]);
    }
}

/// The slot of the token labelled `label`, through whatever the module is now.
pub fn slot_of(p: &cryptoki::context::Pkcs11, label: &str) -> Option<Slot> {
    p.get_slots_with_token()
        .unwrap()
        .into_iter()
        .find(|s| p.get_token_info(*s).is_ok_and(|t| t.label() == label))
}

pub fn sha256(data: &[u8]) -> Vec<u8> {
    Sha256::digest(data).to_vec()
}
