//! The token served by `ferrohsm-server` over mutual TLS, driven through the module's remote
//! client (`[remote]`) as applications load it: keys generated and used on the server, their
//! signatures checked with independent implementations, the server's refusals (certificates,
//! tokens, SO), a dropped connection, and a forked child.
//!
//! Each test makes its own PKI (rcgen), its own store with two tokens ("alpha", "beta", made
//! through the local module before it switches to remote), and its own server on a free port
//! of 127.0.0.1.

mod common;

use common::*;
use cryptoki::error::RvError;
use cryptoki::mechanism::rsa::{PkcsMgfType, PkcsPssParams};
use cryptoki::mechanism::{Mechanism, MechanismType};
use cryptoki::object::{Attribute, AttributeInfo, AttributeType, ObjectClass, ObjectHandle};
use cryptoki::session::{Session, UserType};
use cryptoki::slot::Slot;
use cryptoki::types::AuthPin;
use p256::ecdsa::signature::hazmat::PrehashVerifier;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rsa::sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const P256_OID: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];

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
fn make_pki(dir: &Path) {
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
struct Server {
    child: Child,
    addr: String,
    log: PathBuf,
}

impl Server {
    fn start(dir: &Path, listen: &str) -> Server {
        let conf = dir.join("server.toml");
        std::fs::write(
            &conf,
            format!(
                "listen = \"{listen}\"\nca = \"ca.pem\"\ncert = \"server.pem\"\nkey = \"server.key\"\n\
                 module_config = \"ferrohsm.toml\"\n\n\
                 [[client]]\nidentity = \"signer\"\ntokens = [\"alpha\"]\nso = true\n\n\
                 [[client]]\nidentity = \"noso\"\ntokens = [\"alpha\"]\n\n\
                 [[client]]\nidentity = \"expired\"\ntokens = [\"alpha\"]\n\n\
                 [[client]]\nidentity = \"intruder\"\ntokens = [\"alpha\"]\n"
            ),
        )
        .unwrap();
        let log = dir.join("server.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_ferrohsm-server"))
            .arg("--config")
            .arg(&conf)
            .env("FERROHSM_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("ferrohsm-server: listening on ")
            .unwrap_or_else(|| {
                panic!(
                    "server did not start: {line:?}; log: {}",
                    std::fs::read_to_string(&log).unwrap()
                )
            })
            .to_string();
        Server { child, addr, log }
    }

    /// The server's log so far.
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap()
    }

    /// Waits up to 5 s for the log to hold `what`.
    fn logged(&self, what: &str) -> bool {
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
struct World {
    env: TestEnv,
    server: Server,
}

impl World {
    fn new() -> World {
        let env = TestEnv::new();
        let p = load();
        new_token(&p, "alpha");
        new_token(&p, "beta");
        p.finalize().unwrap();
        make_pki(env.dir.path());
        let server = Server::start(env.dir.path(), "127.0.0.1:0");
        World { env, server }
    }

    /// Points FERROHSM_CONF at a remote configuration with client `name`'s certificate.
    fn client(&self, name: &str) {
        let dir = self.env.dir.path();
        let conf = dir.join(format!("remote-{name}.toml"));
        std::fs::write(
            &conf,
            format!(
                "[remote]\nservers = [\"{}\"]\nca = \"ca.pem\"\ncert = \"{name}.pem\"\nkey = \"{name}.key\"\ntimeout_ms = 20000\n",
                self.server.addr
            ),
        )
        .unwrap();
        std::env::set_var("FERROHSM_CONF", &conf);
    }
}

/// The slot of the token labelled `label`, through whatever the module is now.
fn slot_of(p: &cryptoki::context::Pkcs11, label: &str) -> Option<Slot> {
    p.get_slots_with_token()
        .unwrap()
        .into_iter()
        .find(|s| p.get_token_info(*s).is_ok_and(|t| t.label() == label))
}

fn sha256(data: &[u8]) -> Vec<u8> {
    Sha256::digest(data).to_vec()
}

fn p256_keypair(s: &Session, id: &[u8]) -> (ObjectHandle, ObjectHandle) {
    let public = vec![
        Attribute::Token(true),
        Attribute::EcParams(P256_OID.to_vec()),
        Attribute::Verify(true),
        Attribute::Id(id.to_vec()),
    ];
    let private = vec![
        Attribute::Token(true),
        Attribute::Private(true),
        Attribute::Sensitive(true),
        Attribute::Sign(true),
        Attribute::Id(id.to_vec()),
    ];
    s.generate_key_pair(&Mechanism::EccKeyPairGen, &public, &private)
        .unwrap()
}

fn p256_verifier(s: &Session, public: ObjectHandle) -> p256::ecdsa::VerifyingKey {
    let a = s.get_attributes(public, &[AttributeType::EcPoint]).unwrap();
    let Attribute::EcPoint(der) = &a[0] else {
        panic!("no CKA_EC_POINT")
    };
    // A DER OCTET STRING of the 65-byte uncompressed point.
    p256::ecdsa::VerifyingKey::from_sec1_bytes(&der[2..]).unwrap()
}

#[test]
fn remote_keys_sign_and_the_signatures_verify_independently() {
    let w = World::new();
    w.client("signer");
    let p = load();
    let alpha = slot_of(&p, "alpha").expect("alpha is served");
    let s = user_session(&p, alpha);

    // RSA-2048, generated on the server.
    let (public, private) = rsa_keypair(&s, 2048, b"rsa", true);
    let pk = rsa_public(&s, public);
    let data = b"signed through ferrohsm-server".to_vec();
    let hash = sha256(&data);
    let sig = s.sign(&Mechanism::Sha256RsaPkcs, private, &data).unwrap();
    pk.verify(rsa::pkcs1v15::Pkcs1v15Sign::new::<Sha256>(), &hash, &sig)
        .unwrap();
    s.verify(&Mechanism::Sha256RsaPkcs, public, &data, &sig).unwrap();

    // PSS with a salt length other than the hash's: the parameters reach the token intact.
    let params = PkcsPssParams {
        hash_alg: MechanismType::SHA256,
        mgf: PkcsMgfType::MGF1_SHA256,
        s_len: 20.into(),
    };
    let sig = s
        .sign(&Mechanism::Sha256RsaPkcsPss(params), private, &data)
        .unwrap();
    pk.verify(rsa::Pss::<Sha256>::new_with_salt(20), &hash, &sig)
        .unwrap();
    // Multi-part, the same key and parameters.
    s.sign_init(&Mechanism::Sha256RsaPkcsPss(params), private)
        .unwrap();
    s.sign_update(&data[..7]).unwrap();
    s.sign_update(&data[7..]).unwrap();
    let sig = s.sign_final().unwrap();
    pk.verify(rsa::Pss::<Sha256>::new_with_salt(20), &hash, &sig)
        .unwrap();
    s.verify(&Mechanism::Sha256RsaPkcsPss(params), public, &data, &sig)
        .unwrap();
    // Parameters the token refuses are refused there, not lost on the way.
    let wrong = PkcsPssParams {
        hash_alg: MechanismType::SHA384,
        mgf: PkcsMgfType::MGF1_SHA256,
        s_len: 20.into(),
    };
    assert_eq!(
        rv(s.sign(&Mechanism::Sha256RsaPkcsPss(wrong), private, &data)
            .unwrap_err()),
        RvError::MechanismParamInvalid
    );
    // A bad signature is refused by the server's token.
    let mut bad = sig.clone();
    bad[10] ^= 1;
    assert_eq!(
        rv(
            s.verify(&Mechanism::Sha256RsaPkcsPss(params), public, &data, &bad)
                .unwrap_err()
        ),
        RvError::SignatureInvalid
    );

    // P-256 ECDSA over a hash, verified by the p256 crate.
    let (public, private) = p256_keypair(&s, b"ec");
    let sig = s.sign(&Mechanism::Ecdsa, private, &hash).unwrap();
    let vk = p256_verifier(&s, public);
    let sig = p256::ecdsa::Signature::from_slice(&sig).unwrap();
    vk.verify_prehash(&hash, &sig).unwrap();
    let sig = s.sign(&Mechanism::EcdsaSha256, private, &data).unwrap();
    vk.verify_prehash(&hash, &p256::ecdsa::Signature::from_slice(&sig).unwrap())
        .unwrap();

    // The private values never leave the server: sensitive attributes are not answered.
    let info = s
        .get_attribute_info(private, &[AttributeType::Value, AttributeType::Sign])
        .unwrap();
    assert!(matches!(info[0], AttributeInfo::Sensitive), "{info:?}");
    assert!(matches!(info[1], AttributeInfo::Available(_)), "{info:?}");
}

#[test]
fn find_get_and_set_attributes_remotely() {
    let w = World::new();
    w.client("signer");
    let p = load();
    let s = user_session(&p, slot_of(&p, "alpha").unwrap());
    let (public, _private) = rsa_keypair(&s, 2048, b"found", true);
    assert_eq!(find_one(&s, ObjectClass::PUBLIC_KEY, b"found"), public);
    s.update_attributes(public, &[Attribute::Label(b"renamed".to_vec())])
        .unwrap();
    let a = s
        .get_attributes(public, &[AttributeType::Label, AttributeType::ModulusBits])
        .unwrap();
    assert!(a.contains(&Attribute::Label(b"renamed".to_vec())), "{a:?}");
    assert!(a.contains(&Attribute::ModulusBits(2048.into())), "{a:?}");
    let found = s.find_objects(&[Attribute::Label(b"renamed".to_vec())]).unwrap();
    assert_eq!(found, vec![public]);
    // Read-only attributes stay read-only over the wire.
    assert_eq!(
        rv(
            s.update_attributes(public, &[Attribute::Class(ObjectClass::DATA)])
                .unwrap_err()
        ),
        RvError::AttributeReadOnly
    );
    // A session object, destroyed: gone for the next search.
    let data = s
        .create_object(&[
            Attribute::Class(ObjectClass::DATA),
            Attribute::Label(b"note".to_vec()),
            Attribute::Value(b"hello".to_vec()),
        ])
        .unwrap();
    assert_eq!(
        s.find_objects(&[Attribute::Label(b"note".to_vec())]).unwrap(),
        vec![data]
    );
    s.destroy_object(data).unwrap();
    assert!(s
        .find_objects(&[Attribute::Label(b"note".to_vec())])
        .unwrap()
        .is_empty());
    // Random bytes come from the server.
    let r = s.generate_random_vec(32).unwrap();
    assert_eq!(r.len(), 32);
    assert_ne!(r, vec![0u8; 32]);
}

#[test]
fn a_wrong_pin_counts_on_the_server() {
    let w = World::new();
    w.client("signer");
    let p = load();
    let alpha = slot_of(&p, "alpha").unwrap();
    let s = p.open_rw_session(alpha).unwrap();
    assert!(!p.get_token_info(alpha).unwrap().user_pin_count_low());
    let wrong = s
        .login(UserType::User, Some(&AuthPin::new("99999999".into())))
        .unwrap_err();
    assert_eq!(rv(wrong), RvError::PinIncorrect);
    // The failure is in the server's store: a session of a new connection sees it too.
    drop(s);
    p.finalize().unwrap();
    let p = load();
    assert!(p.get_token_info(alpha).unwrap().user_pin_count_low());
    let s = user_session(&p, alpha);
    assert!(!p.get_token_info(alpha).unwrap().user_pin_count_low());
    drop(s);
}

#[test]
fn a_client_sees_only_the_tokens_given_to_it() {
    let w = World::new();
    // The local module's view: both tokens exist.
    let beta = {
        let p = load();
        let b = slot_of(&p, "beta").unwrap();
        p.finalize().unwrap();
        b
    };
    w.client("signer");
    let p = load();
    assert!(slot_of(&p, "alpha").is_some());
    assert!(
        !p.get_slots_with_token().unwrap().contains(&beta),
        "beta is listed"
    );
    assert_eq!(rv(p.get_token_info(beta).unwrap_err()), RvError::SlotIdInvalid);
    assert_eq!(rv(p.open_ro_session(beta).unwrap_err()), RvError::SlotIdInvalid);
    assert!(w.server.logged("signer@127.0.0.1"), "{}", w.server.log());
    assert!(
        w.server.logged(&format!("asked for slot {}", beta.id())),
        "{}",
        w.server.log()
    );
}

#[test]
fn so_login_needs_the_so_right() {
    let w = World::new();
    w.client("noso");
    let p = load();
    let alpha = slot_of(&p, "alpha").unwrap();
    let s = p.open_rw_session(alpha).unwrap();
    let e = s
        .login(UserType::So, Some(&AuthPin::new(SO_PIN.into())))
        .unwrap_err();
    assert_eq!(rv(e), RvError::UserTypeInvalid);
    assert!(w.server.logged("noso@127.0.0.1"), "{}", w.server.log());
    assert!(w.server.logged("SO login refused"), "{}", w.server.log());
    // Its user login works.
    s.login(UserType::User, Some(&AuthPin::new(USER_PIN.into())))
        .unwrap();
    drop(s);
    p.finalize().unwrap();
    // A client with the right logs in as SO.
    w.client("signer");
    let p = load();
    let s = p.open_rw_session(alpha).unwrap();
    s.login(UserType::So, Some(&AuthPin::new(SO_PIN.into()))).unwrap();
}

/// The module configured as client `name` reaches no token: the connection is refused.
fn refused(w: &World, name: &str) {
    w.client(name);
    let p = load();
    assert_eq!(rv(p.get_slots_with_token().unwrap_err()), RvError::DeviceError);
    p.finalize().unwrap();
}

#[test]
fn unknown_expired_and_unlisted_certificates_are_refused_and_named() {
    let w = World::new();
    refused(&w, "intruder");
    assert!(w.server.logged("CN=intruder"), "{}", w.server.log());
    assert!(w.server.logged("refused at the handshake"), "{}", w.server.log());
    refused(&w, "expired");
    assert!(w.server.logged("CN=expired"), "{}", w.server.log());
    refused(&w, "stranger");
    assert!(
        w.server
            .logged("\"CN=stranger\" is signed by the CA but no [[client]] identity matches"),
        "{}",
        w.server.log()
    );
}

#[test]
fn a_client_without_a_certificate_is_refused_at_the_handshake() {
    use std::io::{Read, Write};
    let w = World::new();
    let dir = w.env.dir.path();
    let roots = ferrohsm::remote::tls::roots(&dir.join("ca.pem")).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(ferrohsm::remote::tls::provider())
        .with_protocol_versions(ferrohsm::remote::tls::VERSIONS)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
    let tcp = std::net::TcpStream::connect(&w.server.addr).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let _ = tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    let mut buf = [0u8; 64];
    let answered = tls.read(&mut buf);
    assert!(
        !matches!(answered, Ok(n) if n > 0),
        "a client without a certificate was answered: {answered:?}"
    );
    assert!(w.server.logged("TLS handshake refused"), "{}", w.server.log());
}

#[test]
fn a_dropped_connection_takes_its_sessions_and_the_next_call_reconnects() {
    let mut w = World::new();
    w.client("signer");
    let p = load();
    let alpha = slot_of(&p, "alpha").unwrap();
    let s = user_session(&p, alpha);
    let (_public, private) = rsa_keypair(&s, 2048, b"drop", true);
    s.sign(&Mechanism::Sha256RsaPkcs, private, b"before").unwrap();

    // The server goes away; the call in the session fails, the application goes on.
    let addr = w.server.addr.clone();
    let _ = w.server.child.kill();
    let _ = w.server.child.wait();
    assert_eq!(
        rv(s.sign(&Mechanism::Sha256RsaPkcs, private, b"meanwhile")
            .unwrap_err()),
        RvError::DeviceError
    );
    // Back on the same address: the old session is gone with its connection, a new one works.
    w.server = Server::start(w.env.dir.path(), &addr);
    assert_eq!(
        rv(s.sign(&Mechanism::Sha256RsaPkcs, private, b"after").unwrap_err()),
        RvError::SessionHandleInvalid
    );
    std::mem::forget(s); // its C_CloseSession would only be refused the same way
    let s = user_session(&p, alpha);
    let private = find_one(&s, ObjectClass::PRIVATE_KEY, b"drop");
    s.sign(&Mechanism::Sha256RsaPkcs, private, b"after").unwrap();
    // And the server closes a connection's sessions when the client goes.
    drop(s);
    p.finalize().unwrap();
    assert!(
        w.server.logged("disconnected; its sessions are closed"),
        "{}",
        w.server.log()
    );
}

#[test]
fn a_forked_child_initializes_and_signs_through_the_server() {
    use cryptoki_sys::*;
    use std::ptr::null_mut;
    let w = World::new();
    w.client("signer");
    let p = load();
    let alpha = slot_of(&p, "alpha").unwrap();
    let s = user_session(&p, alpha);
    let (public, _private) = rsa_keypair(&s, 2048, b"forked", true);
    let pk = rsa_public(&s, public);
    let r = Raw::load();
    let result_path = w.env.dir.path().join("child-result");
    // SAFETY: the child only calls the module and exits with _exit.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0);
        if pid == 0 {
            let code = std::panic::catch_unwind(|| {
                let mut info: CK_INFO = std::mem::zeroed();
                assert_eq!((r.f.C_GetInfo.unwrap())(&mut info), CKR_CRYPTOKI_NOT_INITIALIZED);
                assert_eq!((r.f.C_Initialize.unwrap())(null_mut()), CKR_OK);
                let h = r.open_session(alpha.id());
                assert_eq!(
                    (r.f.C_Login.unwrap())(h, CKU_USER, USER_PIN.as_ptr() as *mut u8, 4),
                    CKR_OK
                );
                let mut class = CKO_PRIVATE_KEY;
                let mut t = [
                    CK_ATTRIBUTE {
                        type_: CKA_CLASS,
                        pValue: &mut class as *mut _ as *mut _,
                        ulValueLen: 8,
                    },
                    CK_ATTRIBUTE {
                        type_: CKA_ID,
                        pValue: b"forked".as_ptr() as *mut _,
                        ulValueLen: 6,
                    },
                ];
                assert_eq!((r.f.C_FindObjectsInit.unwrap())(h, t.as_mut_ptr(), 2), CKR_OK);
                let (mut key, mut n) = (0, 0);
                assert_eq!((r.f.C_FindObjects.unwrap())(h, &mut key, 1, &mut n), CKR_OK);
                assert_eq!(n, 1);
                let mut m = raw_mech::<u8>(CKM_SHA256_RSA_PKCS, None);
                assert_eq!((r.f.C_SignInit.unwrap())(h, &mut m, key), CKR_OK);
                let mut sig = [0u8; 256];
                let mut len = 256;
                assert_eq!(
                    (r.f.C_Sign.unwrap())(h, b"child".as_ptr() as *mut u8, 5, sig.as_mut_ptr(), &mut len),
                    CKR_OK
                );
                std::fs::write(&result_path, &sig[..len as usize]).unwrap();
                assert_eq!((r.f.C_Finalize.unwrap())(null_mut()), CKR_OK);
            });
            libc::_exit(if code.is_ok() { 0 } else { 1 });
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child failed"
        );
    }
    let sig = std::fs::read(&result_path).unwrap();
    pk.verify(
        rsa::pkcs1v15::Pkcs1v15Sign::new::<Sha256>(),
        &sha256(b"child"),
        &sig,
    )
    .unwrap();
    // The parent's connection still works.
    let private = find_one(&s, ObjectClass::PRIVATE_KEY, b"forked");
    s.sign(&Mechanism::Sha256RsaPkcs, private, b"parent").unwrap();
}

#[test]
fn mechanism_parameters_travel_intact_for_every_kind_of_call() {
    use cryptoki::mechanism::aead::GcmParams;
    use cryptoki::mechanism::dsa::{HedgeType, SignAdditionalContext};
    use cryptoki::mechanism::eddsa::{EddsaParams, EddsaSignatureScheme};
    use cryptoki::mechanism::elliptic_curve::{EcKdf, Ecdh1DeriveParams};
    use cryptoki::object::{KeyType, MlDsaParameterSetType};
    let w = World::new();
    w.client("signer");
    let p = load();
    let alpha = slot_of(&p, "alpha").unwrap();
    let s = user_session(&p, alpha);

    // Mechanism list and info come from the server's token.
    let mechs = p.get_mechanism_list(alpha).unwrap();
    assert!(mechs.contains(&MechanismType::ML_DSA), "{mechs:?}");
    let info = p
        .get_mechanism_info(alpha, MechanismType::RSA_PKCS_KEY_PAIR_GEN)
        .unwrap();
    assert_eq!(info.min_key_size(), 1024);

    // ML-DSA with a context: it reaches the token (another context does not verify).
    let (public, private) = s
        .generate_key_pair(
            &Mechanism::MlDsaKeyPairGen,
            &[
                Attribute::Token(false),
                Attribute::ParameterSet(MlDsaParameterSetType::ML_DSA_44.into()),
                Attribute::Verify(true),
            ],
            &[Attribute::Token(false), Attribute::Sign(true)],
        )
        .unwrap();
    let ctx = |c: &'static [u8]| Mechanism::MlDsa(SignAdditionalContext::new(HedgeType::Preferred, Some(c)));
    let sig = s.sign(&ctx(b"context a"), private, b"message").unwrap();
    s.verify(&ctx(b"context a"), public, b"message", &sig).unwrap();
    assert_eq!(
        rv(s.verify(&ctx(b"context b"), public, b"message", &sig)
            .unwrap_err()),
        RvError::SignatureInvalid
    );

    // Ed448 with a context, the same way.
    let ed448_oid = vec![0x06, 0x03, 0x2b, 0x65, 0x71];
    let (public, private) = s
        .generate_key_pair(
            &Mechanism::EccEdwardsKeyPairGen,
            &[Attribute::EcParams(ed448_oid), Attribute::Verify(true)],
            &[Attribute::Sign(true)],
        )
        .unwrap();
    let ed = |c: &'static [u8]| Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Ed448(c)));
    let sig = s.sign(&ed(b"one"), private, b"message").unwrap();
    s.verify(&ed(b"one"), public, b"message", &sig).unwrap();
    assert_eq!(
        rv(s.verify(&ed(b"two"), public, b"message", &sig).unwrap_err()),
        RvError::SignatureInvalid
    );

    // AES-GCM with IV and AAD, encrypt and decrypt; another AAD fails the tag.
    let aes = s
        .generate_key(
            &Mechanism::AesKeyGen,
            &[
                Attribute::ValueLen(32.into()),
                Attribute::Encrypt(true),
                Attribute::Decrypt(true),
            ],
        )
        .unwrap();
    let mut iv = [7u8; 12];
    let ct = s
        .encrypt(
            &Mechanism::AesGcm(GcmParams::new(&mut iv, b"aad", 128.into()).unwrap()),
            aes,
            b"plain text",
        )
        .unwrap();
    let pt = s
        .decrypt(
            &Mechanism::AesGcm(GcmParams::new(&mut iv, b"aad", 128.into()).unwrap()),
            aes,
            &ct,
        )
        .unwrap();
    assert_eq!(pt, b"plain text");
    assert_eq!(
        rv(s.decrypt(
            &Mechanism::AesGcm(GcmParams::new(&mut iv, b"AAD", 128.into()).unwrap()),
            aes,
            &ct
        )
        .unwrap_err()),
        RvError::EncryptedDataInvalid
    );

    // Wrap and unwrap: the key comes back whole, and only wrapped on the wire.
    let value = [0x42u8; 32];
    let wrapper = s
        .generate_key(
            &Mechanism::AesKeyGen,
            &[
                Attribute::ValueLen(32.into()),
                Attribute::Wrap(true),
                Attribute::Unwrap(true),
            ],
        )
        .unwrap();
    let target = s
        .create_object(&[
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(KeyType::AES),
            Attribute::Value(value.to_vec()),
            Attribute::Extractable(true),
            Attribute::Sensitive(false),
        ])
        .unwrap();
    let wrapped = s.wrap_key(&Mechanism::AesKeyWrapPad, wrapper, target).unwrap();
    assert!(
        !wrapped.windows(8).any(|w| w == &value[..8]),
        "the key travelled in clear"
    );
    let unwrapped = s
        .unwrap_key(
            &Mechanism::AesKeyWrapPad,
            wrapper,
            &wrapped,
            &[
                Attribute::Class(ObjectClass::SECRET_KEY),
                Attribute::KeyType(KeyType::AES),
                Attribute::Sensitive(false),
                Attribute::Extractable(true),
            ],
        )
        .unwrap();
    let a = s.get_attributes(unwrapped, &[AttributeType::Value]).unwrap();
    assert_eq!(a, vec![Attribute::Value(value.to_vec())]);

    // ECDH: both sides derive the same secret from the other's point.
    let derive_pair = |id: &[u8]| {
        s.generate_key_pair(
            &Mechanism::EccKeyPairGen,
            &[Attribute::EcParams(P256_OID.to_vec())],
            &[Attribute::Derive(true), Attribute::Id(id.to_vec())],
        )
        .unwrap()
    };
    let point = |k: ObjectHandle| match s.get_attributes(k, &[AttributeType::EcPoint]).unwrap().remove(0) {
        Attribute::EcPoint(der) => der[2..].to_vec(),
        other => panic!("{other:?}"),
    };
    let ((pa, sa), (pb, sb)) = (derive_pair(b"a"), derive_pair(b"b"));
    let secret = [
        Attribute::Class(ObjectClass::SECRET_KEY),
        Attribute::KeyType(KeyType::GENERIC_SECRET),
        Attribute::Sensitive(false),
        Attribute::Extractable(true),
    ];
    let (qa, qb) = (point(pa), point(pb));
    let ka = s
        .derive_key(
            &Mechanism::Ecdh1Derive(Ecdh1DeriveParams::new(EcKdf::null(), &qb)),
            sa,
            &secret,
        )
        .unwrap();
    let kb = s
        .derive_key(
            &Mechanism::Ecdh1Derive(Ecdh1DeriveParams::new(EcKdf::null(), &qa)),
            sb,
            &secret,
        )
        .unwrap();
    let va = s.get_attributes(ka, &[AttributeType::Value]).unwrap();
    assert_eq!(va, s.get_attributes(kb, &[AttributeType::Value]).unwrap());
    assert!(matches!(&va[0], Attribute::Value(v) if v.len() == 32));

    // Digest, single and multi-part, against the sha2 crate.
    assert_eq!(
        s.digest(&Mechanism::Sha256, b"digest me").unwrap(),
        sha256(b"digest me")
    );
    s.digest_init(&Mechanism::Sha256).unwrap();
    s.digest_update(b"digest ").unwrap();
    s.digest_update(b"me").unwrap();
    assert_eq!(s.digest_final().unwrap(), sha256(b"digest me"));
}

#[test]
fn pkcs11_tool_signs_through_the_server_and_openssl_verifies() {
    let w = World::new();
    w.client("signer");
    let dir = w.env.dir.path();
    let tool = |args: &[&str]| {
        let out = Command::new("pkcs11-tool")
            .arg("--module")
            .arg(module_path())
            .args(["--token-label", "alpha", "--login", "--pin", USER_PIN])
            .args(args)
            .current_dir(dir)
            .output()
            .expect("pkcs11-tool must be installed");
        assert!(
            out.status.success(),
            "pkcs11-tool {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    std::fs::write(dir.join("data"), b"signed by pkcs11-tool").unwrap();
    tool(&[
        "--keypairgen",
        "--key-type",
        "rsa:2048",
        "--id",
        "07",
        "--label",
        "tool",
    ]);
    tool(&[
        "--sign",
        "-m",
        "SHA256-RSA-PKCS",
        "--id",
        "07",
        "-i",
        "data",
        "-o",
        "sig",
    ]);
    tool(&["--read-object", "--type", "pubkey", "--id", "07", "-o", "pub.der"]);
    let verified = Command::new("openssl")
        .args([
            "dgst",
            "-sha256",
            "-verify",
            "pub.der",
            "-keyform",
            "DER",
            "-signature",
            "sig",
            "data",
        ])
        .current_dir(dir)
        .status()
        .expect("openssl must be installed");
    assert!(
        verified.success(),
        "OpenSSL refused the signature made through the server"
    );
    // Each pkcs11-tool run was a connection of its own.
    let log = w.server.log();
    assert!(log.matches(": connected").count() >= 3, "{log}");
}

#[test]
fn an_argument_the_client_cannot_read_ends_the_operation_on_the_server() {
    use cryptoki_sys::*;
    use std::ptr::null_mut;
    let w = World::new();
    w.client("signer");
    let p = load();
    let alpha = slot_of(&p, "alpha").unwrap();
    let s = user_session(&p, alpha);
    let (_public, private) = rsa_keypair(&s, 2048, b"arg", false);
    let r = Raw::load();
    let h = r.open_session(alpha.id());
    let mut m = raw_mech::<u8>(CKM_SHA256_RSA_PKCS, None);
    let (mut sig, mut len) = ([0u8; 256], 256);
    // SAFETY: live buffers; the NULL data with a length is the bad argument under test.
    unsafe {
        assert_eq!((r.f.C_SignInit.unwrap())(h, &mut m, private.handle()), CKR_OK);
        assert_eq!(
            (r.f.C_Sign.unwrap())(h, null_mut(), 5, sig.as_mut_ptr(), &mut len),
            CKR_ARGUMENTS_BAD
        );
        assert_eq!(
            (r.f.C_Sign.unwrap())(h, b"data!".as_ptr() as *mut u8, 5, sig.as_mut_ptr(), &mut len),
            CKR_OPERATION_NOT_INITIALIZED,
            "the operation was ended, as the local token ends it"
        );
    }
}

#[test]
fn an_application_that_forbids_threads_is_told_the_remote_token_needs_them() {
    use cryptoki_sys::*;
    let w = World::new();
    w.client("signer");
    let r = Raw::load();
    // SAFETY: all zeros is a valid CK_C_INITIALIZE_ARGS (NULL functions and pointers, no flags).
    let mut args: CK_C_INITIALIZE_ARGS = unsafe { std::mem::zeroed() };
    args.flags = CKF_LIBRARY_CANT_CREATE_OS_THREADS;
    // SAFETY: a valid CK_C_INITIALIZE_ARGS without mutex functions.
    let rv = unsafe { (r.f.C_Initialize.unwrap())(&mut args as *mut _ as *mut _) };
    assert_eq!(rv, CKR_NEED_TO_CREATE_THREADS);
    // Allowed threads, the same configuration works.
    args.flags = CKF_OS_LOCKING_OK;
    // SAFETY: as above.
    let rv = unsafe { (r.f.C_Initialize.unwrap())(&mut args as *mut _ as *mut _) };
    assert_eq!(rv, CKR_OK);
    // SAFETY: initialised above.
    assert_eq!(unsafe { (r.f.C_Finalize.unwrap())(std::ptr::null_mut()) }, CKR_OK);
}

/// This process's thread count, from /proc.
fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Threads:")).unwrap();
    line["Threads:".len()..].trim().parse().unwrap()
}

#[test]
fn the_client_starts_its_threads_at_c_initialize_and_ends_them_at_c_finalize() {
    let w = World::new();
    w.client("signer");
    let p = cryptoki::context::Pkcs11::new(module_path()).unwrap();
    let before = threads();
    p.initialize(cryptoki::context::CInitializeArgs::new(
        cryptoki::context::CInitializeFlags::OS_LOCKING_OK,
    ))
    .unwrap();
    assert!(slot_of(&p, "alpha").is_some());
    assert!(threads() > before, "the remote client runs on threads of its own");
    p.finalize().unwrap();
    // The runtime's threads are joined by its shutdown; give the kernel a moment to reap them.
    for _ in 0..100 {
        if threads() == before {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!(
        "{} threads after C_Finalize, {before} before C_Initialize",
        threads()
    );
}
