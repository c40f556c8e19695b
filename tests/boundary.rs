//! The C boundary's own promises, through the real function list: configuration refused at
//! `C_Initialize`, caller buffers never overrun, an error ends the operation whichever layer
//! found it, handles never reused within a process, the log file's mode, and a module that
//! survives `dlclose` followed by `fork`.

mod common;

use common::*;
use cryptoki_sys::*;
use std::ptr::null_mut;

/// Runs `C_Initialize` with `conf` as the configuration file.
fn initialize_with(env: &TestEnv, conf: &str) -> CK_RV {
    std::fs::write(env.conf(), conf).unwrap();
    let r = Raw::load();
    // SAFETY: C_Initialize takes NULL arguments.
    let rv = unsafe { (r.f.C_Initialize.unwrap())(null_mut()) };
    if rv == CKR_OK {
        // SAFETY: C_Finalize takes a NULL reserved pointer.
        assert_eq!(unsafe { (r.f.C_Finalize.unwrap())(null_mut()) }, CKR_OK);
    }
    rv
}

#[test]
fn initialize_refuses_an_out_of_range_config_value() {
    let env = TestEnv::new();
    let bad = "[pin]\nkdf_passes = 0\nkdf_memory_kib = 64\n";
    assert_eq!(initialize_with(&env, bad), CKR_GENERAL_ERROR);
    let good = "[pin]\nkdf_passes = 1\nkdf_memory_kib = 64\n";
    assert_eq!(
        initialize_with(&env, good),
        CKR_OK,
        "the same file with a good value"
    );
    // The operator reads why: ferrohsm-util shows the module's log line (file, key, range).
    std::fs::write(env.conf(), bad).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_ferrohsm-util"))
        .args(["--module"])
        .arg(module_path())
        .arg("show-slots")
        .env("FERROHSM_CONF", env.conf())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains(&env.conf().display().to_string())
            && err.contains("pin.kdf_passes must be between 1 and 64, not 0"),
        "{err}"
    );
}

/// Opens a session on `slot` through the raw list.
fn open_session(r: &Raw, slot: CK_SLOT_ID) -> CK_SESSION_HANDLE {
    let mut h = 0;
    // SAFETY: a valid output pointer; no notification callback.
    let rv = unsafe {
        (r.f.C_OpenSession.unwrap())(
            slot,
            CKF_SERIAL_SESSION | CKF_RW_SESSION,
            null_mut(),
            None,
            &mut h,
        )
    };
    assert_eq!(rv, CKR_OK);
    h
}

/// Creates a session data object and returns its handle.
fn session_object(r: &Raw, h: CK_SESSION_HANDLE) -> CK_OBJECT_HANDLE {
    let mut class = CKO_DATA;
    let mut token: CK_BBOOL = 0;
    let mut tmpl = [
        CK_ATTRIBUTE {
            type_: CKA_CLASS,
            pValue: &mut class as *mut _ as *mut _,
            ulValueLen: std::mem::size_of::<CK_OBJECT_CLASS>() as CK_ULONG,
        },
        CK_ATTRIBUTE {
            type_: CKA_TOKEN,
            pValue: &mut token as *mut _ as *mut _,
            ulValueLen: 1,
        },
    ];
    let mut o = 0;
    // SAFETY: the template and the output point to live locals of the sizes given.
    let rv = unsafe { (r.f.C_CreateObject.unwrap())(h, tmpl.as_mut_ptr(), 2, &mut o) };
    assert_eq!(rv, CKR_OK);
    o
}

#[test]
fn handles_from_before_finalize_stay_invalid() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "handles").id();
    let r = Raw::load();
    let old = open_session(&r, slot);
    let old_object = session_object(&r, old);
    // SAFETY: NULL is the reserved argument of C_Finalize and the arguments of C_Initialize.
    unsafe {
        assert_eq!((r.f.C_Finalize.unwrap())(null_mut()), CKR_OK);
        assert_eq!((r.f.C_Initialize.unwrap())(null_mut()), CKR_OK);
    }
    let new = open_session(&r, slot);
    let new_object = session_object(&r, new);
    assert_ne!(old, new, "a session handle is never given out twice in a process");
    assert_ne!(old_object, new_object, "nor a session object's handle");
    // SAFETY: valid output pointers.
    unsafe {
        let mut info: CK_SESSION_INFO = std::mem::zeroed();
        assert_eq!(
            (r.f.C_GetSessionInfo.unwrap())(old, &mut info),
            CKR_SESSION_HANDLE_INVALID
        );
        let mut size = 0;
        assert_eq!(
            (r.f.C_GetObjectSize.unwrap())(new, old_object, &mut size),
            CKR_OBJECT_HANDLE_INVALID
        );
    }
}

#[test]
fn log_file_is_created_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    let log = env.dir.path().join("ferrohsm.log");
    let conf = format!(
        "[pin]\nkdf_memory_kib = 64\nkdf_passes = 1\n[log]\nlevel = \"debug\"\ntarget = {:?}\n",
        log.display().to_string()
    );
    assert_eq!(initialize_with(&env, &conf), CKR_OK);
    let mode = std::fs::metadata(&log).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "log file mode {mode:o}");
}

#[test]
fn operation_state_calls_check_their_pointers() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "opstate").id();
    let r = Raw::load();
    let h = open_session(&r, slot);
    let mut state = [0u8; 16];
    let mut len: CK_ULONG = 16;
    // SAFETY: NULL where the test means it, live locals elsewhere.
    unsafe {
        assert_eq!(
            (r.f.C_SetOperationState.unwrap())(h, null_mut(), 16, 0, 0),
            CKR_ARGUMENTS_BAD
        );
        assert_eq!(
            (r.f.C_SetOperationState.unwrap())(h, state.as_mut_ptr(), 16, 0, 0),
            CKR_SAVED_STATE_INVALID
        );
        assert_eq!(
            (r.f.C_GetOperationState.unwrap())(h, null_mut(), null_mut()),
            CKR_ARGUMENTS_BAD
        );
        // No operation: nothing to save (pkcs11test's GetSetOperationState expects this).
        assert_eq!(
            (r.f.C_GetOperationState.unwrap())(h, null_mut(), &mut len),
            CKR_OPERATION_NOT_INITIALIZED
        );
        let mut m = mech(CKM_SHA256);
        assert_eq!((r.f.C_DigestInit.unwrap())(h, &mut m), CKR_OK);
        assert_eq!(
            (r.f.C_GetOperationState.unwrap())(h, null_mut(), &mut len),
            CKR_STATE_UNSAVEABLE
        );
    }
}

/// The keys an operation case starts with.
struct Keys {
    public: CK_OBJECT_HANDLE,
    private: CK_OBJECT_HANDLE,
}

/// One way of failing a call of a running operation: `init` starts it, `bad` fails (with
/// `CKR_ARGUMENTS_BAD` unless `expect` says otherwise), `next` is a good call of the same
/// operation, which must then find none.
struct Case {
    name: &'static str,
    init: fn(&Raw, CK_SESSION_HANDLE, &Keys) -> CK_RV,
    bad: fn(&Raw, CK_SESSION_HANDLE) -> CK_RV,
    expect: CK_RV,
    next: fn(&Raw, CK_SESSION_HANDLE) -> CK_RV,
}

const DATA: &[u8] = b"abc";

/// The flags of `C_SessionCancel` that name every operation a session can run.
const ALL_OPERATIONS: CK_FLAGS =
    CKF_DIGEST | CKF_SIGN | CKF_VERIFY | CKF_ENCRYPT | CKF_DECRYPT | CKF_FIND_OBJECTS;

fn mech(t: CK_MECHANISM_TYPE) -> CK_MECHANISM {
    raw_mech::<u8>(t, None)
}

// SAFETY (every unsafe block of the cases): the function list's calls with NULL where the
// case means it and live locals of the sizes given elsewhere.
fn digest_init(r: &Raw, h: CK_SESSION_HANDLE, _: &Keys) -> CK_RV {
    unsafe { (r.f.C_DigestInit.unwrap())(h, &mut mech(CKM_SHA256)) }
}
fn sign_init(r: &Raw, h: CK_SESSION_HANDLE, k: &Keys) -> CK_RV {
    unsafe { (r.f.C_SignInit.unwrap())(h, &mut mech(CKM_SHA256_RSA_PKCS), k.private) }
}
fn verify_init(r: &Raw, h: CK_SESSION_HANDLE, k: &Keys) -> CK_RV {
    unsafe { (r.f.C_VerifyInit.unwrap())(h, &mut mech(CKM_SHA256_RSA_PKCS), k.public) }
}
fn encrypt_init(r: &Raw, h: CK_SESSION_HANDLE, k: &Keys) -> CK_RV {
    unsafe { (r.f.C_EncryptInit.unwrap())(h, &mut mech(CKM_RSA_PKCS), k.public) }
}
fn decrypt_init(r: &Raw, h: CK_SESSION_HANDLE, k: &Keys) -> CK_RV {
    unsafe { (r.f.C_DecryptInit.unwrap())(h, &mut mech(CKM_RSA_PKCS), k.private) }
}
fn data() -> *mut u8 {
    DATA.as_ptr() as *mut u8
}
fn digest_update_ok(r: &Raw, h: CK_SESSION_HANDLE) -> CK_RV {
    unsafe { (r.f.C_DigestUpdate.unwrap())(h, data(), 3) }
}
fn sign_update_ok(r: &Raw, h: CK_SESSION_HANDLE) -> CK_RV {
    unsafe { (r.f.C_SignUpdate.unwrap())(h, data(), 3) }
}
fn verify_update_ok(r: &Raw, h: CK_SESSION_HANDLE) -> CK_RV {
    unsafe { (r.f.C_VerifyUpdate.unwrap())(h, data(), 3) }
}
fn encrypt_ok(r: &Raw, h: CK_SESSION_HANDLE) -> CK_RV {
    let mut len = 0;
    unsafe { (r.f.C_Encrypt.unwrap())(h, data(), 3, null_mut(), &mut len) }
}
fn decrypt_ok(r: &Raw, h: CK_SESSION_HANDLE) -> CK_RV {
    let mut len = 0;
    let mut c = [0u8; 128];
    unsafe { (r.f.C_Decrypt.unwrap())(h, c.as_mut_ptr(), 128, null_mut(), &mut len) }
}

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    let mut add = |name, init, bad, next| {
        v.push(Case {
            name,
            init,
            bad,
            expect: CKR_ARGUMENTS_BAD,
            next,
        })
    };
    // Digest.
    add(
        "DigestUpdate(NULL data)",
        digest_init,
        |r, h| unsafe { (r.f.C_DigestUpdate.unwrap())(h, null_mut(), 3) },
        digest_update_ok,
    );
    add(
        "DigestFinal(NULL length)",
        digest_init,
        |r, h| unsafe { (r.f.C_DigestFinal.unwrap())(h, null_mut(), null_mut()) },
        digest_update_ok,
    );
    add(
        "Digest(NULL length)",
        digest_init,
        |r, h| unsafe { (r.f.C_Digest.unwrap())(h, data(), 3, null_mut(), null_mut()) },
        digest_update_ok,
    );
    add(
        "Digest(NULL data)",
        digest_init,
        |r, h| {
            let mut n = 0;
            unsafe { (r.f.C_Digest.unwrap())(h, null_mut(), 3, null_mut(), &mut n) }
        },
        digest_update_ok,
    );
    // Sign.
    add(
        "SignUpdate(NULL data)",
        sign_init,
        |r, h| unsafe { (r.f.C_SignUpdate.unwrap())(h, null_mut(), 3) },
        sign_update_ok,
    );
    add(
        "SignFinal(NULL length)",
        sign_init,
        |r, h| unsafe { (r.f.C_SignFinal.unwrap())(h, null_mut(), null_mut()) },
        sign_update_ok,
    );
    add(
        "Sign(NULL length)",
        sign_init,
        |r, h| unsafe { (r.f.C_Sign.unwrap())(h, data(), 3, null_mut(), null_mut()) },
        sign_update_ok,
    );
    add(
        "Sign(NULL data)",
        sign_init,
        |r, h| {
            let mut n = 0;
            unsafe { (r.f.C_Sign.unwrap())(h, null_mut(), 3, null_mut(), &mut n) }
        },
        sign_update_ok,
    );
    // Verify.
    add(
        "VerifyUpdate(NULL data)",
        verify_init,
        |r, h| unsafe { (r.f.C_VerifyUpdate.unwrap())(h, null_mut(), 3) },
        verify_update_ok,
    );
    add(
        "VerifyFinal(NULL signature)",
        verify_init,
        |r, h| unsafe { (r.f.C_VerifyFinal.unwrap())(h, null_mut(), 128) },
        verify_update_ok,
    );
    add(
        "Verify(NULL signature)",
        verify_init,
        |r, h| unsafe { (r.f.C_Verify.unwrap())(h, data(), 3, null_mut(), 128) },
        verify_update_ok,
    );
    add(
        "Verify(NULL data)",
        verify_init,
        |r, h| {
            let mut s = [0u8; 128];
            unsafe { (r.f.C_Verify.unwrap())(h, null_mut(), 3, s.as_mut_ptr(), 128) }
        },
        verify_update_ok,
    );
    // RSA encryption and decryption are single-part (AES multi-part: tests/aes_modes.rs).
    add(
        "Encrypt(NULL data)",
        encrypt_init,
        |r, h| {
            let mut n = 0;
            unsafe { (r.f.C_Encrypt.unwrap())(h, null_mut(), 3, null_mut(), &mut n) }
        },
        encrypt_ok,
    );
    add(
        "Encrypt(NULL length)",
        encrypt_init,
        |r, h| unsafe { (r.f.C_Encrypt.unwrap())(h, data(), 3, null_mut(), null_mut()) },
        encrypt_ok,
    );
    add(
        "Decrypt(NULL data)",
        decrypt_init,
        |r, h| {
            let mut n = 0;
            unsafe { (r.f.C_Decrypt.unwrap())(h, null_mut(), 128, null_mut(), &mut n) }
        },
        decrypt_ok,
    );
    add(
        "Decrypt(NULL length)",
        decrypt_init,
        |r, h| {
            let mut c = [0u8; 128];
            unsafe { (r.f.C_Decrypt.unwrap())(h, c.as_mut_ptr(), 128, null_mut(), null_mut()) }
        },
        decrypt_ok,
    );
    v.push(Case {
        name: "DigestKey(no such key)",
        init: digest_init,
        bad: |r, h| unsafe { (r.f.C_DigestKey.unwrap())(h, 0xdead_beef) },
        expect: CKR_KEY_HANDLE_INVALID,
        next: digest_update_ok,
    });
    v
}

/// A token with a user session and an RSA-1024 key pair, seen through the raw list.
fn setup(label: &str) -> (cryptoki::context::Pkcs11, Raw, CK_SESSION_HANDLE, Keys) {
    let p = load();
    let slot = new_token(&p, label);
    let s = user_session(&p, slot);
    let (public, private) = rsa_keypair(&s, 1024, b"k", true);
    std::mem::forget(s); // stays open: it keeps the login for the raw session
    let r = Raw::load();
    let h = open_session(&r, slot.id());
    let keys = Keys {
        public: public.handle(),
        private: private.handle(),
    };
    (p, r, h, keys)
}

#[test]
fn every_error_of_a_running_operation_ends_it() {
    let _env = TestEnv::new();
    let (_p, r, h, keys) = setup("ops");
    let mut wrong = vec![];
    for c in cases() {
        assert_eq!((c.init)(&r, h, &keys), CKR_OK, "{}: init", c.name);
        let rv = (c.bad)(&r, h);
        assert_eq!(rv, c.expect, "{}", c.name);
        let next = (c.next)(&r, h);
        if next != CKR_OPERATION_NOT_INITIALIZED {
            wrong.push(format!("{}: the next call returned 0x{next:x}", c.name));
            // Clear the operation for the next case.
            // SAFETY: C_SessionCancel takes the handle and flags only.
            unsafe { (r.f.C_SessionCancel.unwrap())(h, ALL_OPERATIONS) };
        }
    }
    assert!(
        wrong.is_empty(),
        "operations not ended by an error:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn a_short_buffer_keeps_the_operation_and_is_never_overrun() {
    let _env = TestEnv::new();
    let (_p, r, h, keys) = setup("short");
    // Output buffers with a guard area: the module may write `len` bytes, never more.
    for (name, init) in [
        ("sign", sign_init as fn(&Raw, _, &Keys) -> CK_RV),
        ("digest", digest_init),
    ] {
        assert_eq!(init(&r, h, &keys), CKR_OK);
        let mut buf = [0xa5u8; 256];
        let mut len: CK_ULONG = 8;
        // SAFETY: `buf` holds more than `len` bytes.
        let call = |buf: &mut [u8; 256], len: &mut CK_ULONG| unsafe {
            if name == "sign" {
                (r.f.C_Sign.unwrap())(h, data(), 3, buf.as_mut_ptr(), len)
            } else {
                (r.f.C_Digest.unwrap())(h, data(), 3, buf.as_mut_ptr(), len)
            }
        };
        assert_eq!(call(&mut buf, &mut len), CKR_BUFFER_TOO_SMALL, "{name}");
        let needed = len as usize;
        assert!(needed > 8, "{name}: the needed length is told");
        assert!(buf.iter().all(|b| *b == 0xa5), "{name}: nothing written");
        assert_eq!(call(&mut buf, &mut len), CKR_OK, "{name}: the operation went on");
        assert_eq!(len as usize, needed);
        assert!(
            buf[needed..].iter().all(|b| *b == 0xa5),
            "{name}: no byte past the output"
        );
    }
}

#[test]
fn an_invalid_session_handle_outranks_mechanism_and_argument_errors() {
    // PKCS#11 ranks the session-handle errors above the rest: a call on a closed session with
    // an unknown mechanism (DES key generation) and NULL outputs is CKR_SESSION_HANDLE_INVALID
    // (pkcs11test's GenerateKeyInvalid, WrapInvalid and UnwrapInvalid check this order).
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "order").id();
    let r = Raw::load();
    let h = open_session(&r, slot);
    // SAFETY: C_CloseSession takes a handle only.
    assert_eq!(unsafe { (r.f.C_CloseSession.unwrap())(h) }, CKR_OK);
    let mut m = mech(CKM_DES_KEY_GEN);
    // SAFETY: the module rejects the closed session before reading any pointer; the mechanism
    // is a live local.
    let rvs = unsafe {
        [
            ("C_EncryptInit", (r.f.C_EncryptInit.unwrap())(h, &mut m, 1)),
            ("C_DecryptInit", (r.f.C_DecryptInit.unwrap())(h, &mut m, 1)),
            ("C_DigestInit", (r.f.C_DigestInit.unwrap())(h, &mut m)),
            ("C_SignInit", (r.f.C_SignInit.unwrap())(h, &mut m, 1)),
            ("C_VerifyInit", (r.f.C_VerifyInit.unwrap())(h, &mut m, 1)),
            (
                "C_GenerateKey",
                (r.f.C_GenerateKey.unwrap())(h, &mut m, null_mut(), 3, null_mut()),
            ),
            (
                "C_GenerateKeyPair",
                (r.f.C_GenerateKeyPair.unwrap())(
                    h,
                    &mut m,
                    null_mut(),
                    1,
                    null_mut(),
                    1,
                    null_mut(),
                    null_mut(),
                ),
            ),
            (
                "C_WrapKey",
                (r.f.C_WrapKey.unwrap())(h, &mut m, 1, 2, null_mut(), null_mut()),
            ),
            (
                "C_UnwrapKey",
                (r.f.C_UnwrapKey.unwrap())(h, &mut m, 1, null_mut(), 4, null_mut(), 1, null_mut()),
            ),
            (
                "C_DeriveKey",
                (r.f.C_DeriveKey.unwrap())(h, &mut m, 1, null_mut(), 1, null_mut()),
            ),
        ]
    };
    for (name, rv) in rvs {
        assert_eq!(rv, CKR_SESSION_HANDLE_INVALID, "{name}");
    }
    // With the session open: a NULL template of 3 attributes is CKR_ARGUMENTS_BAD whatever the
    // mechanism (pkcs11test's GenerateKeyInvalid), an empty one leaves the mechanism to answer.
    let h = open_session(&r, slot);
    // SAFETY: as above, on an open session; the output handle is a live local.
    unsafe {
        let mut key = 0;
        assert_eq!(
            (r.f.C_GenerateKey.unwrap())(h, &mut m, null_mut(), 3, &mut key),
            CKR_ARGUMENTS_BAD
        );
        assert_eq!(
            (r.f.C_GenerateKey.unwrap())(h, &mut m, null_mut(), 0, &mut key),
            CKR_MECHANISM_INVALID
        );
        assert_eq!(
            (r.f.C_GenerateKey.unwrap())(h, null_mut(), null_mut(), 0, &mut key),
            CKR_ARGUMENTS_BAD
        );
    }
}

fn find_init(r: &Raw, h: CK_SESSION_HANDLE, _: &Keys) -> CK_RV {
    // SAFETY: an empty template (NULL, 0) matches every object.
    unsafe { (r.f.C_FindObjectsInit.unwrap())(h, null_mut(), 0) }
}

/// `C_SessionCancel` ends the operations its flags name and leaves the others running
/// (PKCS#11 3.0 §5.6; it used to end every operation whatever the flags). Each row cancels one
/// kind with all six running; an Init of each kind afterwards answers whether it still runs
/// (`CKR_OPERATION_ACTIVE`) or had ended (`CKR_OK`, which starts it again for the next row).
#[test]
fn session_cancel_ends_the_operations_its_flags_name() {
    let _env = TestEnv::new();
    let (_p, r, h, keys) = setup("cancel");
    type Init = fn(&Raw, CK_SESSION_HANDLE, &Keys) -> CK_RV;
    let ops: [(CK_FLAGS, Init); 6] = [
        (CKF_DIGEST, digest_init),
        (CKF_SIGN, sign_init),
        (CKF_VERIFY, verify_init),
        (CKF_ENCRYPT, encrypt_init),
        (CKF_DECRYPT, decrypt_init),
        (CKF_FIND_OBJECTS, find_init),
    ];
    for (_, init) in &ops {
        assert_eq!(init(&r, h, &keys), CKR_OK);
    }
    // SAFETY: C_SessionCancel takes the handle and flags only.
    let cancel = |flags| unsafe { (r.f.C_SessionCancel.unwrap())(h, flags) };
    for &(flag, _) in &ops {
        assert_eq!(cancel(flag), CKR_OK);
        for &(f, init) in &ops {
            let want = if f == flag { CKR_OK } else { CKR_OPERATION_ACTIVE };
            assert_eq!(init(&r, h, &keys), want, "cancel 0x{flag:x}: operation 0x{f:x}");
        }
    }
    // No flag: nothing ends. Every flag: everything does.
    assert_eq!(cancel(0), CKR_OK);
    for &(f, init) in &ops {
        assert_eq!(
            init(&r, h, &keys),
            CKR_OPERATION_ACTIVE,
            "cancel 0: operation 0x{f:x}"
        );
    }
    assert_eq!(cancel(ALL_OPERATIONS), CKR_OK);
    for &(f, init) in &ops {
        assert_eq!(init(&r, h, &keys), CKR_OK, "cancel all: operation 0x{f:x}");
    }
}
