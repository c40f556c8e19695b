//! Who may reach the token served by `ferrohsm-server`, and what becomes of a client's state:
//! refused certificates (none, unknown CA, expired, in no [[client]]), tokens not given, SO
//! without the right, the lockout counted on the server, a dropped connection, a forked child,
//! the client's threads between C_Initialize and C_Finalize, and an application calling the
//! module from inside its own tokio runtime. Each test has its own PKI, store and server
//! (`common::remote`).

mod common;

use common::remote::*;
use common::*;
use cryptoki::error::RvError;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::ObjectClass;
use cryptoki::session::UserType;
use cryptoki::types::AuthPin;
use rsa::sha2::Sha256;

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

/// An application that calls the module from its own tokio tasks (a `#[tokio::main]` program),
/// on either kind of runtime: every call answers, `C_Finalize` included. The loaded module's
/// copy of tokio does not see the application's runtime, so this held before the client
/// stopped entering its runtime from the caller's thread too; the case that panicked, a
/// program sharing the module's tokio, is `remote::client`'s own test.
#[test]
fn the_module_works_when_called_from_inside_an_applications_tokio_runtime() {
    let w = World::new();
    w.client("signer");
    let runtimes = [
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap(),
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
    ];
    for (i, runtime) in runtimes.into_iter().enumerate() {
        let id = format!("in-runtime-{i}").into_bytes();
        let work = async move {
            let p = load();
            let alpha = slot_of(&p, "alpha").unwrap();
            let s = user_session(&p, alpha);
            let (public, private) = rsa_keypair(&s, 2048, &id, false);
            let pk = rsa_public(&s, public);
            let sig = s
                .sign(&Mechanism::Sha256RsaPkcs, private, b"from a task")
                .unwrap();
            pk.verify(
                rsa::pkcs1v15::Pkcs1v15Sign::new::<Sha256>(),
                &sha256(b"from a task"),
                &sig,
            )
            .unwrap();
            drop(s);
            p.finalize().unwrap();
        };
        // On a worker of the application's runtime (a spawned task), as a server would call.
        runtime.block_on(async { tokio::spawn(work).await }).unwrap();
    }
}
