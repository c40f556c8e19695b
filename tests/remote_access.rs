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
use cryptoki::object::{Attribute, ObjectClass};
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

/// `C_InitToken` through the server: a client with the SO right re-initialises a token it is
/// given, as locally (open sessions refused, a wrong SO PIN counted, objects and user PIN gone);
/// a client without the right is refused before its PIN is evaluated; the free slot (given to
/// no one) and a new label the client is not given are refused.
#[test]
fn c_init_token_reinitialises_a_given_token_with_the_so_right_only() {
    let w = World::new();
    let free = {
        let p = load();
        let free = p
            .get_all_slots()
            .unwrap()
            .into_iter()
            .find(|s| !p.get_token_info(*s).unwrap().token_initialized())
            .unwrap();
        p.finalize().unwrap();
        free
    };
    let so_pin = AuthPin::new(SO_PIN.into());
    let wrong = AuthPin::new("99999999".into());

    w.client("noso");
    let p = load();
    let alpha = slot_of(&p, "alpha").unwrap();
    assert_eq!(
        rv(p.init_token(alpha, &wrong, "alpha").unwrap_err()),
        RvError::UserTypeInvalid
    );
    assert!(
        !p.get_token_info(alpha).unwrap().so_pin_count_low(),
        "the SO PIN of a client without the right was evaluated"
    );
    assert!(
        w.server.logged("does not have so = true") && w.server.log().contains("C_InitToken refused"),
        "{}",
        w.server.log()
    );
    p.finalize().unwrap();

    w.client("signer");
    let p = load();
    let alpha = slot_of(&p, "alpha").unwrap();
    let s = user_session(&p, alpha);
    s.create_object(&[
        Attribute::Class(ObjectClass::DATA),
        Attribute::Token(true),
        Attribute::Label(b"before".to_vec()),
    ])
    .unwrap();
    assert_eq!(
        rv(p.init_token(alpha, &so_pin, "alpha").unwrap_err()),
        RvError::SessionExists
    );
    drop(s);
    assert_eq!(
        rv(p.init_token(alpha, &wrong, "alpha").unwrap_err()),
        RvError::PinIncorrect
    );
    assert!(p.get_token_info(alpha).unwrap().so_pin_count_low());
    assert_eq!(
        rv(p.init_token(alpha, &so_pin, "beta").unwrap_err()),
        RvError::ArgumentsBad
    );
    assert!(w.server.logged("the new label \"beta\""), "{}", w.server.log());
    assert_eq!(
        rv(p.init_token(free, &so_pin, "alpha").unwrap_err()),
        RvError::SlotIdInvalid
    );

    p.init_token(alpha, &so_pin, "alpha").unwrap();
    let info = p.get_token_info(alpha).unwrap();
    assert!(!info.user_pin_initialized(), "{info:?}");
    assert!(!info.so_pin_count_low(), "{info:?}");
    let s = p.open_rw_session(alpha).unwrap();
    s.login(UserType::So, Some(&so_pin)).unwrap();
    s.init_pin(&AuthPin::new("5678".into())).unwrap();
    s.logout().unwrap();
    s.login(UserType::User, Some(&AuthPin::new("5678".into())))
        .unwrap();
    assert!(
        s.find_objects(&[]).unwrap().is_empty(),
        "objects outlived the re-initialisation"
    );
    assert!(
        w.server.logged("re-initialised the token \"alpha\""),
        "{}",
        w.server.log()
    );
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
fn a_dropped_connection_is_reopened_with_its_sessions_login_and_operation() {
    let mut w = World::new();
    w.client("signer");
    let p = load();
    let alpha = slot_of(&p, "alpha").unwrap();
    let s = user_session(&p, alpha);
    let (public, private) = rsa_keypair(&s, 2048, b"drop", true);
    let key = rsa_public(&s, public);
    s.sign(&Mechanism::Sha256RsaPkcs, private, b"before").unwrap();
    let session_key = |label: &str| {
        s.generate_key(
            &Mechanism::AesKeyGen,
            &[
                Attribute::Token(false),
                Attribute::ValueLen(32.into()),
                Attribute::Label(label.into()),
            ],
        )
        .unwrap()
    };
    let lost = session_key("lost");

    // The server goes away; the call in the session fails, the application goes on.
    let addr = w.server.addr.clone();
    let _ = w.server.child.kill();
    let _ = w.server.child.wait();
    assert_eq!(
        rv(s.sign(&Mechanism::Sha256RsaPkcs, private, b"meanwhile")
            .unwrap_err()),
        RvError::DeviceError
    );
    // Back on the same address: the session is opened again, logged in with the PIN the
    // application gave, and signs under the same handles.
    w.server = Server::start(w.env.dir.path(), &addr);
    let signature = s.sign(&Mechanism::Sha256RsaPkcs, private, b"after").unwrap();
    let digest = sha256(b"after");
    key.verify(rsa::Pkcs1v15Sign::new::<Sha256>(), &digest, &signature)
        .expect("the resumed session's signature verifies");
    // Session objects went with the connection, as with a restarted token: the old handle
    // names nothing, not even an object made since.
    let new = session_key("new");
    assert_ne!(new, lost);
    assert_eq!(
        rv(s.get_attributes(lost, &[cryptoki::object::AttributeType::Label])
            .unwrap_err()),
        RvError::ObjectHandleInvalid
    );
    // A signature initialised before the drop is initialised again on the new connection,
    // and the application's C_Sign that follows it signs.
    let raw = Raw::load();
    let h = raw.open_session(alpha.id());
    let mut mech = raw_mech::<()>(cryptoki_sys::CKM_SHA256_RSA_PKCS, None);
    // SAFETY: a live mechanism; the key handle is the application's.
    assert_eq!(
        unsafe { (raw.f.C_SignInit.unwrap())(h, &mut mech, private.handle()) },
        0
    );
    let _ = w.server.child.kill();
    let _ = w.server.child.wait();
    w.server = Server::start(w.env.dir.path(), &addr);
    let data = b"initialised before";
    let mut out = vec![0u8; 256];
    let mut len = out.len() as cryptoki_sys::CK_ULONG;
    // SAFETY: live buffers of the lengths given.
    let rv = unsafe {
        (raw.f.C_Sign.unwrap())(
            h,
            data.as_ptr() as *mut u8,
            data.len() as _,
            out.as_mut_ptr(),
            &mut len,
        )
    };
    assert_eq!(rv, 0);
    key.verify(
        rsa::Pkcs1v15Sign::new::<Sha256>(),
        &sha256(data),
        &out[..len as usize],
    )
    .expect("the signature of the operation made again verifies");
    // SAFETY: the session handle is ours.
    assert_eq!(unsafe { (raw.f.C_CloseSession.unwrap())(h) }, 0);
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

/// The names of this process's threads, from /proc.
fn thread_names() -> String {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .collect::<Vec<_>>()
        .join(", ")
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

/// GnuTLS (so p11tool, certtool, Knot) forbids the module to create threads: the client then
/// drives its connection on the application's threads, several of them at once, and the
/// process has no thread the application did not make.
#[test]
fn an_application_that_forbids_threads_is_served_on_its_own_threads() {
    use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
    let w = World::new();
    w.client("signer");
    let p = Pkcs11::new(module_path()).unwrap();
    let before = threads();
    p.initialize(CInitializeArgs::new(
        CInitializeFlags::OS_LOCKING_OK | CInitializeFlags::LIBRARY_CANT_CREATE_OS_THREADS,
    ))
    .unwrap();
    let alpha = slot_of(&p, "alpha").expect("alpha is served");
    let s = user_session(&p, alpha);
    let (public, private) = rsa_keypair(&s, 2048, b"nothreads", false);
    let pk = rsa_public(&s, public);
    assert_eq!(
        threads(),
        before,
        "the module made threads of its own: {}",
        thread_names()
    );
    // Four application threads sign at once over the one connection.
    std::thread::scope(|scope| {
        for t in 0..4u8 {
            let (p, pk) = (&p, &pk);
            scope.spawn(move || {
                let s = p.open_ro_session(alpha).unwrap();
                for i in 0..5u8 {
                    let data = [t, i];
                    let sig = s.sign(&Mechanism::Sha256RsaPkcs, private, &data).unwrap();
                    pk.verify(rsa::pkcs1v15::Pkcs1v15Sign::new::<Sha256>(), &sha256(&data), &sig)
                        .unwrap();
                }
            });
        }
    });
    // The test's own threads are joined; the kernel may take a moment to reap them.
    for _ in 0..100 {
        if threads() == before {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        threads(),
        before,
        "the module made threads of its own: {}",
        thread_names()
    );
    drop(s);
    p.finalize().unwrap();
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
