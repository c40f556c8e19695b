//! `ferrohsm-util pki`, run as an operator runs it: the certificates it makes verify with
//! OpenSSL and carry the extensions the network service relies on, keys are private files,
//! nothing is overwritten unasked, and a mutual TLS 1.3 handshake with rustls (as the service
//! will run it) takes a client of the CA and refuses one of another CA.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection, StreamOwned};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

fn pki(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrohsm-util"))
        .arg("pki")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

fn ok(args: &[&str]) -> String {
    let o = pki(args);
    assert!(
        o.status.success(),
        "ferrohsm-util pki {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Fails with exit code 1 and one `ferrohsm-util:` line containing `expect`.
fn fails(args: &[&str], expect: &str) {
    let o = pki(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "pki {args:?} should fail: {err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("ferrohsm-util:"))
        .unwrap_or_else(|| panic!("no error line in {err}"));
    assert!(
        line.contains(expect),
        "{args:?}: {line:?} does not mention {expect:?}"
    );
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `openssl` with `args`: (success, stdout + stderr).
fn openssl(args: &[&str]) -> (bool, String) {
    let o = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl is installed");
    let text = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    (o.status.success(), text)
}

fn x509_text(pem: &Path) -> String {
    let (ok, text) = openssl(&["x509", "-in", s(pem), "-noout", "-text", "-nameopt", "RFC2253"]);
    assert!(ok, "{text}");
    text
}

/// A CA in `dir` with a server certificate `localhost` (and 127.0.0.1) and a client
/// certificate `signer-01`.
fn ca_with_server_and_client(dir: &Path) {
    ok(&["init-ca", "--dir", s(dir), "--name", "test CA"]);
    ok(&[
        "issue",
        "--dir",
        s(dir),
        "--server",
        "localhost",
        "--san",
        "127.0.0.1",
    ]);
    ok(&["issue", "--dir", s(dir), "--client", "signer-01"]);
}

#[test]
fn certificates_verify_with_openssl_and_carry_the_expected_extensions() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pki");
    ca_with_server_and_client(&dir);
    let ca = dir.join("ca.pem");
    for leaf in ["localhost.pem", "signer-01.pem"] {
        let (good, text) = openssl(&["verify", "-CAfile", s(&ca), s(&dir.join(leaf))]);
        assert!(good && text.contains(": OK"), "{leaf}: {text}");
    }
    // The same check fails against another CA: it is a real check.
    let other = tmp.path().join("other");
    ok(&["init-ca", "--dir", s(&other)]);
    let (good, text) = openssl(&[
        "verify",
        "-CAfile",
        s(&other.join("ca.pem")),
        s(&dir.join("localhost.pem")),
    ]);
    assert!(!good, "a certificate of another CA verified: {text}");
    // OpenSSL's purpose checks: the server certificate serves, the client one does not.
    let purpose =
        |leaf: &str, p: &str| openssl(&["verify", "-CAfile", s(&ca), "-purpose", p, s(&dir.join(leaf))]).0;
    assert!(purpose("localhost.pem", "sslserver") && !purpose("localhost.pem", "sslclient"));
    assert!(purpose("signer-01.pem", "sslclient") && !purpose("signer-01.pem", "sslserver"));

    let text = x509_text(&ca);
    for want in [
        "Subject: CN=test CA",
        "Issuer: CN=test CA",
        "CA:TRUE, pathlen:0",
        "Certificate Sign, CRL Sign",
        "NIST CURVE: P-256",
        "ecdsa-with-SHA256",
    ] {
        assert!(text.contains(want), "ca.pem has no {want:?}:\n{text}");
    }
    let text = x509_text(&dir.join("localhost.pem"));
    for want in [
        "Subject: CN=localhost",
        "Issuer: CN=test CA",
        "CA:FALSE",
        "Digital Signature",
        "TLS Web Server Authentication",
        "DNS:localhost, IP Address:127.0.0.1",
        "X509v3 Authority Key Identifier",
    ] {
        assert!(text.contains(want), "localhost.pem has no {want:?}:\n{text}");
    }
    assert!(!text.contains("Client Authentication"), "{text}");
    let text = x509_text(&dir.join("signer-01.pem"));
    for want in [
        "Subject: CN=signer-01",
        "CA:FALSE",
        "TLS Web Client Authentication",
        "DNS:signer-01",
    ] {
        assert!(text.contains(want), "signer-01.pem has no {want:?}:\n{text}");
    }
    assert!(!text.contains("Server Authentication"), "{text}");
}

#[test]
fn validity_and_serial_numbers() {
    use x509_parser::prelude::*;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ca_with_server_and_client(dir);
    ok(&["issue", "--dir", s(dir), "--client", "short", "--days", "7"]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let day = 86_400;
    let mut serials = vec![];
    for (name, days) in [("ca", 3650), ("localhost", 365), ("signer-01", 365), ("short", 7)] {
        let der = CertificateDer::from_pem_file(dir.join(format!("{name}.pem"))).unwrap();
        let (_, c) = parse_x509_certificate(&der).unwrap();
        let (from, to) = (
            c.validity().not_before.timestamp(),
            c.validity().not_after.timestamp(),
        );
        // Valid from a little before now (clocks a little behind), not from now.
        assert!(
            from <= now - 1800 && from >= now - 2 * 3600,
            "{name}: not before {from}, now {now}"
        );
        assert!(
            (to - (now + days * day)).abs() < 600,
            "{name}: not after {to}, expected {days} days"
        );
        serials.push(c.raw_serial().to_vec());
    }
    for s in &serials {
        assert!(s.len() >= 16, "a serial of {} bytes", s.len());
    }
    serials.sort();
    serials.dedup();
    assert_eq!(serials.len(), 4, "serial numbers repeat");
}

#[test]
fn keys_are_private_and_nothing_is_overwritten_unasked() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pki");
    ca_with_server_and_client(&dir);
    let mode = |f: &str| std::fs::metadata(dir.join(f)).unwrap().mode() & 0o777;
    for key in ["ca.key", "localhost.key", "signer-01.key"] {
        assert_eq!(mode(key), 0o600, "{key}");
        let text = std::fs::read_to_string(dir.join(key)).unwrap();
        assert!(text.starts_with("-----BEGIN PRIVATE KEY-----"), "{key}: {text}");
    }
    assert_eq!(mode("ca.pem"), 0o644);
    assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);

    let ca_before = std::fs::read(dir.join("ca.pem")).unwrap();
    let key_before = std::fs::read(dir.join("ca.key")).unwrap();
    fails(&["init-ca", "--dir", s(&dir)], "--force");
    fails(&["issue", "--dir", s(&dir), "--server", "localhost"], "--force");
    fails(&["issue", "--dir", s(&dir), "--client", "signer-01"], "--force");
    assert_eq!(std::fs::read(dir.join("ca.pem")).unwrap(), ca_before);
    assert_eq!(std::fs::read(dir.join("ca.key")).unwrap(), key_before);
    // A key alone (its certificate lost) is kept too.
    std::fs::remove_file(dir.join("localhost.pem")).unwrap();
    fails(
        &["issue", "--dir", s(&dir), "--server", "localhost"],
        "localhost.key already exists",
    );

    let old = dir.join("old-signer.pem");
    std::fs::copy(dir.join("signer-01.pem"), &old).unwrap();
    ok(&["issue", "--dir", s(&dir), "--client", "signer-01", "--force"]);
    assert_ne!(
        std::fs::read(dir.join("signer-01.pem")).unwrap(),
        std::fs::read(&old).unwrap()
    );
    assert_eq!(mode("signer-01.key"), 0o600);
    // A new CA with --force: what the old one issued no longer verifies.
    ok(&["init-ca", "--dir", s(&dir), "--force"]);
    assert_ne!(std::fs::read(dir.join("ca.pem")).unwrap(), ca_before);
    assert_eq!(mode("ca.key"), 0o600);
    let (good, _) = openssl(&["verify", "-CAfile", s(&dir.join("ca.pem")), s(&old)]);
    assert!(!good, "a certificate of the replaced CA still verifies");
}

#[test]
fn bad_requests_say_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pki");
    let d = s(&dir);
    fails(&["issue", "--dir", d, "--client", "a"], "pki init-ca --dir");
    ok(&["init-ca", "--dir", d]);
    fails(&["issue", "--dir", d, "--client", "Signer"], "lowercase");
    fails(&["issue", "--dir", d, "--client", "a@b"], "identity");
    fails(&["issue", "--dir", d, "--server", "*.example.net"], "wildcard");
    fails(
        &["issue", "--dir", d, "--server", "localhost", "--san", "a b"],
        "DNS name",
    );
    fails(&["issue", "--dir", d, "--client", "ca"], "CA's own files");
    fails(
        &["issue", "--dir", d, "--client", "x", "--days", "4000"],
        "--days 364",
    );
    fails(
        &["init-ca", "--dir", s(&tmp.path().join("n")), "--name", ""],
        "1 to 64",
    );
    // Exactly one of --server and --client; --san only with --server (clap: exit code 2).
    for args in [
        &["issue", "--dir", d][..],
        &["issue", "--dir", d, "--server", "a", "--client", "b"],
        &["issue", "--dir", d, "--client", "b", "--san", "c"],
    ] {
        assert_eq!(pki(args).status.code(), Some(2), "{args:?}");
    }
    // A CA key that is not the CA certificate's.
    let other = tmp.path().join("other");
    ok(&["init-ca", "--dir", s(&other)]);
    std::fs::copy(other.join("ca.key"), dir.join("ca.key")).unwrap();
    fails(&["issue", "--dir", d, "--client", "x"], "is not the key of");
    // A leaf certificate is no CA.
    std::fs::copy(other.join("ca.key"), dir.join("ca.key")).unwrap();
    ok(&["issue", "--dir", s(&other), "--client", "y"]);
    std::fs::copy(other.join("y.pem"), dir.join("ca.pem")).unwrap();
    std::fs::copy(other.join("y.key"), dir.join("ca.key")).unwrap();
    fails(&["issue", "--dir", d, "--client", "x"], "not a CA certificate");
    // Nothing was written by the refusals.
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["ca.key", "ca.pem"]);
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(ca: &Path) -> Arc<RootCertStore> {
    let mut r = RootCertStore::empty();
    r.add(CertificateDer::from_pem_file(ca).unwrap()).unwrap();
    Arc::new(r)
}

fn chain_and_key(dir: &Path, name: &str) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    (
        vec![CertificateDer::from_pem_file(dir.join(format!("{name}.pem"))).unwrap()],
        PrivateKeyDer::from_pem_file(dir.join(format!("{name}.key"))).unwrap(),
    )
}

/// One TLS 1.3 connection over loopback TCP: the server (`server` of `server_dir`, trusting
/// only the CA of `server_dir` for clients) and a client presenting `client` of `client_dir`
/// (and trusting the CA of `server_dir`). Returns the server's view: the DNS names of the
/// client certificate, or the handshake's error; and whether the client got its answer.
fn handshake(
    server_dir: &Path,
    server: &str,
    client_dir: &Path,
    client: &str,
) -> (Result<Vec<String>, String>, bool) {
    let tls13 = &[&rustls::version::TLS13];
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        roots(&server_dir.join("ca.pem")),
        provider(),
    )
    .build()
    .unwrap();
    let (chain, key) = chain_and_key(server_dir, server);
    let server_config = Arc::new(
        ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(tls13)
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .unwrap(),
    );
    let (chain, key) = chain_and_key(client_dir, client);
    let client_config = Arc::new(
        ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(tls13)
            .unwrap()
            .with_root_certificates(roots(&server_dir.join("ca.pem")))
            .with_client_auth_cert(chain, key)
            .unwrap(),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let served = std::thread::spawn(move || -> Result<Vec<String>, String> {
        let (sock, _) = listener.accept().unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let conn = ServerConnection::new(server_config).unwrap();
        let mut tls = StreamOwned::new(conn, sock);
        let mut ping = [0u8; 4];
        tls.read_exact(&mut ping).map_err(|e| e.to_string())?;
        assert_eq!(&ping, b"ping");
        assert_eq!(
            tls.conn.protocol_version(),
            Some(rustls::ProtocolVersion::TLSv1_3)
        );
        // The identity the service maps: the client certificate's DNS names.
        let der = tls.conn.peer_certificates().expect("a client certificate")[0].clone();
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        let names = cert
            .subject_alternative_name()
            .unwrap()
            .map(|san| {
                san.value
                    .general_names
                    .iter()
                    .filter_map(|n| match n {
                        x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        tls.write_all(b"pong").map_err(|e| e.to_string())?;
        tls.conn.send_close_notify();
        tls.flush().map_err(|e| e.to_string())?;
        Ok(names)
    });
    let sock = std::net::TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let conn = ClientConnection::new(client_config, ServerName::try_from("localhost").unwrap()).unwrap();
    let mut tls = StreamOwned::new(conn, sock);
    let mut pong = [0u8; 4];
    let answered = tls
        .write_all(b"ping")
        .and_then(|()| tls.read_exact(&mut pong))
        .is_ok()
        && &pong == b"pong";
    (served.join().unwrap(), answered)
}

#[test]
fn mutual_tls_takes_a_client_of_the_ca_and_refuses_others() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pki");
    ca_with_server_and_client(&dir);
    let (served, answered) = handshake(&dir, "localhost", &dir, "signer-01");
    assert_eq!(served, Ok(vec!["signer-01".to_string()]));
    assert!(answered, "the client got no answer");

    // A client certificate of a second CA: refused at the handshake.
    let other = tmp.path().join("other");
    ok(&["init-ca", "--dir", s(&other)]);
    ok(&["issue", "--dir", s(&other), "--client", "signer-01"]);
    let (served, answered) = handshake(&dir, "localhost", &other, "signer-01");
    let e = served.expect_err("a client of another CA was taken");
    assert!(e.contains("UnknownIssuer"), "{e}");
    assert!(!answered);

    // The server's own certificate, of the right CA, is no client certificate (no clientAuth).
    let (served, answered) = handshake(&dir, "localhost", &dir, "localhost");
    let e = served.expect_err("a server certificate was taken as a client's");
    assert!(
        e.contains("extended key usage") || e.contains("InvalidPurpose"),
        "{e}"
    );
    assert!(!answered);
}

/// `quickstart` for a server other hosts dial: the server's certificate names that host, the
/// client's configuration dials it at the listening port and loads with the module's loader,
/// the server's configuration gives the client only the named token, every certificate
/// verifies against the CA, and a second run refuses to overwrite without `--force`.
#[test]
fn quickstart_makes_matching_certificates_and_configurations() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let args = [
        "quickstart",
        "--dir",
        s(&dir),
        "--token",
        "dnssec",
        "--client",
        "knot-01",
        "--listen",
        "0.0.0.0:7443",
        "--server",
        "hsm.example.net",
    ];
    let out = ok(&args);
    assert!(out.contains("ferrohsm-server --config"), "{out}");
    let server_pem = x509_text(&dir.join("server.pem"));
    for name in ["DNS:hsm.example.net", "DNS:localhost", "IP Address:127.0.0.1"] {
        assert!(
            server_pem.contains(name),
            "server certificate lacks {name}: {server_pem}"
        );
    }
    assert!(
        !server_pem.contains("0.0.0.0"),
        "a wildcard address is no name: {server_pem}"
    );
    assert!(x509_text(&dir.join("knot-01.pem")).contains("DNS:knot-01"));
    for leaf in ["server.pem", "knot-01.pem"] {
        let (ok, text) = openssl(&["verify", "-CAfile", s(&dir.join("ca.pem")), s(&dir.join(leaf))]);
        assert!(ok, "{leaf}: {text}");
    }
    let client = ferrohsm::config::Config::from_file(&dir.join("knot-01.toml")).unwrap();
    let remote = client.remote.expect("a [remote] section");
    assert_eq!(remote.servers, vec!["hsm.example.net:7443".to_string()]);
    assert_eq!(remote.cert, Some(dir.join("knot-01.pem")));
    let server: toml::Value =
        toml::from_str(&std::fs::read_to_string(dir.join("server.toml")).unwrap()).unwrap();
    assert_eq!(server["listen"].as_str(), Some("0.0.0.0:7443"));
    let clients = server["client"].as_array().unwrap();
    assert_eq!(clients.len(), 1);
    assert_eq!(clients[0]["identity"].as_str(), Some("knot-01"));
    assert_eq!(
        clients[0]["tokens"].as_array().unwrap(),
        &[toml::Value::from("dnssec")]
    );
    assert_eq!(clients[0]["so"].as_bool(), Some(false));
    assert_eq!(
        std::fs::metadata(dir.join("knot-01.key")).unwrap().mode() & 0o777,
        0o600
    );
    fails(&args, "exists");
    let mut again = args.to_vec();
    again.push("--force");
    ok(&again);
    fails(
        &[
            "quickstart",
            "--dir",
            s(&dir),
            "--token",
            "t",
            "--client",
            "server",
            "--force",
        ],
        "server's own files",
    );
}
