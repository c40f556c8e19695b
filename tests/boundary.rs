//! The C boundary's own promises, through the real function list: configuration refused at
//! `C_Initialize`, caller buffers never overrun, an error ends the operation whichever layer
//! found it, handles never reused within a process, the log file's mode, counts and lengths no
//! array or value has refused before anything is allocated or read, and a module that
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

/// Counts of attributes no array has: 2^31 and 2^32 entries, and the most `CK_ATTRIBUTE`s a
/// 64-bit address space could name. Each made the module allocate for that many (96 GiB at
/// 2^32), and the failed allocation aborted the application's process.
fn huge_counts() -> [CK_ULONG; 3] {
    let per = std::mem::size_of::<CK_ATTRIBUTE>() as CK_ULONG;
    [1 << 31, 1 << 32, CK_ULONG::MAX / per]
}

/// What the calls with a huge count or length work on: a session with an AES key that
/// wraps, unwraps, encrypts and derives, a blob it wrapped, an EC key that derives and an RSA
/// public key.
struct Huge {
    r: Raw,
    h: CK_SESSION_HANDLE,
    aes: CK_OBJECT_HANDLE,
    blob: Vec<u8>,
    ec: CK_OBJECT_HANDLE,
    rsa: CK_OBJECT_HANDLE,
}

impl Huge {
    fn new(p: &cryptoki::context::Pkcs11) -> Huge {
        use cryptoki::mechanism::Mechanism;
        use cryptoki::object::Attribute;
        let slot = new_token(p, "huge");
        let s = user_session(p, slot);
        let secret = |more: &[Attribute]| {
            let mut t = vec![
                Attribute::Token(false),
                Attribute::ValueLen(32.into()),
                Attribute::Extractable(true),
            ];
            t.extend_from_slice(more);
            s.generate_key(&Mechanism::AesKeyGen, &t).unwrap()
        };
        let aes = secret(&[
            Attribute::Wrap(true),
            Attribute::Unwrap(true),
            Attribute::Derive(true),
        ]);
        let blob = s.wrap_key(&Mechanism::AesKeyWrapPad, aes, secret(&[])).unwrap();
        let (_, ec) = s
            .generate_key_pair(
                &Mechanism::EccKeyPairGen,
                &[
                    Attribute::Token(false),
                    Attribute::EcParams(vec![0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07]),
                ],
                &[Attribute::Token(false), Attribute::Derive(true)],
            )
            .unwrap();
        let (rsa, _) = rsa_keypair(&s, 1024, b"huge", false);
        std::mem::forget(s); // stays open: it keeps the login for the raw session
        let r = Raw::load();
        let h = r.open_session(slot.id());
        Huge {
            r,
            h,
            aes: aes.handle(),
            blob,
            ec: ec.handle(),
            rsa: rsa.handle(),
        }
    }

    /// How many objects the session sees (a call that failed must have made none).
    fn objects(&self) -> usize {
        let mut found = [0 as CK_OBJECT_HANDLE; 256];
        let mut n = 0;
        // SAFETY: an empty template; an output array of 256 handles and a count.
        unsafe {
            assert_eq!(
                (self.r.f.C_FindObjectsInit.unwrap())(self.h, null_mut(), 0),
                CKR_OK
            );
            assert_eq!(
                (self.r.f.C_FindObjects.unwrap())(self.h, found.as_mut_ptr(), 256, &mut n),
                CKR_OK
            );
            assert_eq!((self.r.f.C_FindObjectsFinal.unwrap())(self.h), CKR_OK);
        }
        n as usize
    }
}

/// A call given a template pointer and a count.
type CountCall = fn(&Huge, *mut CK_ATTRIBUTE, CK_ULONG) -> CK_RV;

/// Every function that takes an attribute count, each with the count in the place it names.
/// All but `C_GetAttributeValue` read the values too (its values are output buffers, which
/// the module fills up to their length and never past).
fn count_calls() -> Vec<(&'static str, CountCall)> {
    // SAFETY (every call): live handles and locals; the template pointer is the test's
    // one-entry array, given with a count the module must refuse before reading past it.
    vec![
        ("C_CreateObject", |x, t, n| unsafe {
            (x.r.f.C_CreateObject.unwrap())(x.h, t, n, &mut 0)
        }),
        ("C_CopyObject", |x, t, n| unsafe {
            (x.r.f.C_CopyObject.unwrap())(x.h, x.aes, t, n, &mut 0)
        }),
        ("C_GetAttributeValue", |x, t, n| unsafe {
            (x.r.f.C_GetAttributeValue.unwrap())(x.h, x.aes, t, n)
        }),
        ("C_SetAttributeValue", |x, t, n| unsafe {
            (x.r.f.C_SetAttributeValue.unwrap())(x.h, x.aes, t, n)
        }),
        ("C_FindObjectsInit", |x, t, n| unsafe {
            (x.r.f.C_FindObjectsInit.unwrap())(x.h, t, n)
        }),
        ("C_GenerateKey", |x, t, n| unsafe {
            (x.r.f.C_GenerateKey.unwrap())(x.h, &mut mech(CKM_AES_KEY_GEN), t, n, &mut 0)
        }),
        ("C_GenerateKeyPair (public template)", |x, t, n| unsafe {
            let mut one = CK_ATTRIBUTE::default();
            let m = &mut mech(CKM_EC_KEY_PAIR_GEN);
            (x.r.f.C_GenerateKeyPair.unwrap())(x.h, m, t, n, &mut one, 0, &mut 0, &mut 0)
        }),
        ("C_GenerateKeyPair (private template)", |x, t, n| unsafe {
            let mut one = CK_ATTRIBUTE::default();
            let m = &mut mech(CKM_EC_KEY_PAIR_GEN);
            (x.r.f.C_GenerateKeyPair.unwrap())(x.h, m, &mut one, 0, t, n, &mut 0, &mut 0)
        }),
        ("C_UnwrapKey", |x, t, n| unsafe {
            let (blob, len) = (x.blob.as_ptr() as *mut u8, x.blob.len() as CK_ULONG);
            let m = &mut mech(CKM_AES_KEY_WRAP_PAD);
            (x.r.f.C_UnwrapKey.unwrap())(x.h, m, x.aes, blob, len, t, n, &mut 0)
        }),
        ("C_DeriveKey", |x, t, n| unsafe {
            let mut data = [0u8; 16];
            let mut p = CK_KEY_DERIVATION_STRING_DATA {
                pData: data.as_mut_ptr(),
                ulLen: 16,
            };
            let m = &mut raw_mech(CKM_AES_ECB_ENCRYPT_DATA, Some(&mut p));
            (x.r.f.C_DeriveKey.unwrap())(x.h, m, x.aes, t, n, &mut 0)
        }),
    ]
}

/// A count or length from the caller that no array or value has is refused, never allocated
/// for, and never read past: `CKR_ARGUMENTS_BAD` (or `CKR_HOST_MEMORY` where an allocation
/// fails), from every function that takes a template, for the template's count, an attribute
/// array's length inside it and a value's length; and from the mechanisms whose parameter
/// names bytes the module copies. The process survives each, and nothing is made.
#[test]
fn huge_counts_and_lengths_are_refused_not_allocated() {
    let _env = TestEnv::new();
    let p = load();
    let x = Huge::new(&p);
    let before = x.objects();
    let refused = |rv: CK_RV| rv == CKR_ARGUMENTS_BAD || rv == CKR_HOST_MEMORY;
    let mut label = [b'x'];
    let mut one = [CK_ATTRIBUTE {
        type_: CKA_LABEL,
        pValue: label.as_mut_ptr() as *mut _,
        ulValueLen: 1,
    }];
    let entry = std::mem::size_of::<CK_ATTRIBUTE>() as CK_ULONG;
    for (name, call) in count_calls() {
        for n in huge_counts() {
            let rv = call(&x, one.as_mut_ptr(), n);
            assert!(refused(rv), "{name} with {n} attributes: 0x{rv:x}");
        }
        if name == "C_GetAttributeValue" {
            continue;
        }
        // One attribute whose value claims more bytes than any value has: a label, and an
        // attribute array of a huge count of entries.
        for n in huge_counts() {
            let mut long = [CK_ATTRIBUTE {
                type_: CKA_LABEL,
                pValue: label.as_mut_ptr() as *mut _,
                ulValueLen: n,
            }];
            let rv = call(&x, long.as_mut_ptr(), 1);
            assert!(refused(rv), "{name} with a value of {n} bytes: 0x{rv:x}");
            let mut array = [CK_ATTRIBUTE {
                type_: CKA_UNWRAP_TEMPLATE,
                pValue: one.as_mut_ptr() as *mut _,
                ulValueLen: n * entry,
            }];
            let rv = call(&x, array.as_mut_ptr(), 1);
            assert!(refused(rv), "{name} with an array of {n} attributes: 0x{rv:x}");
        }
    }
    // Bytes the module copies beside templates: a wrapped key, and mechanism parameters'
    // IV, additional data, OAEP label, peer's public point and data to encrypt into a key.
    for n in huge_counts() {
        let mut bytes = [0u8; 16];
        let b = bytes.as_mut_ptr();
        // SAFETY: live handles and locals; each length is the huge `n` over 16 bytes, which
        // the module must refuse before reading past them.
        let rows: [(&str, CK_RV); 6] = unsafe {
            let m = &mut mech(CKM_AES_KEY_WRAP_PAD);
            let wrapped = (x.r.f.C_UnwrapKey.unwrap())(x.h, m, x.aes, b, n, null_mut(), 0, &mut 0);
            let mut gcm = CK_GCM_PARAMS {
                pIv: b,
                ulIvLen: n,
                ulIvBits: 96,
                pAAD: null_mut(),
                ulAADLen: 0,
                ulTagBits: 128,
            };
            let gcm_iv =
                (x.r.f.C_EncryptInit.unwrap())(x.h, &mut raw_mech(CKM_AES_GCM, Some(&mut gcm)), x.aes);
            let mut gcm = CK_GCM_PARAMS {
                pIv: b,
                ulIvLen: 12,
                ulIvBits: 96,
                pAAD: b,
                ulAADLen: n,
                ulTagBits: 128,
            };
            let gcm_aad =
                (x.r.f.C_EncryptInit.unwrap())(x.h, &mut raw_mech(CKM_AES_GCM, Some(&mut gcm)), x.aes);
            let mut oaep = CK_RSA_PKCS_OAEP_PARAMS {
                hashAlg: CKM_SHA256,
                mgf: CKG_MGF1_SHA256,
                source: CKZ_DATA_SPECIFIED,
                pSourceData: b as *mut _,
                ulSourceDataLen: n,
            };
            let oaep_label =
                (x.r.f.C_EncryptInit.unwrap())(x.h, &mut raw_mech(CKM_RSA_PKCS_OAEP, Some(&mut oaep)), x.rsa);
            let mut ecdh = CK_ECDH1_DERIVE_PARAMS {
                kdf: CKD_NULL,
                ulSharedDataLen: 0,
                pSharedData: null_mut(),
                ulPublicDataLen: n,
                pPublicData: b,
            };
            let m = &mut raw_mech(CKM_ECDH1_DERIVE, Some(&mut ecdh));
            let ecdh_point = (x.r.f.C_DeriveKey.unwrap())(x.h, m, x.ec, null_mut(), 0, &mut 0);
            let mut data = CK_KEY_DERIVATION_STRING_DATA { pData: b, ulLen: n };
            let m = &mut raw_mech(CKM_AES_ECB_ENCRYPT_DATA, Some(&mut data));
            let derive_data = (x.r.f.C_DeriveKey.unwrap())(x.h, m, x.aes, null_mut(), 0, &mut 0);
            [
                ("C_UnwrapKey's wrapped key", wrapped),
                ("CKM_AES_GCM's IV", gcm_iv),
                ("CKM_AES_GCM's additional data", gcm_aad),
                ("CKM_RSA_PKCS_OAEP's label", oaep_label),
                ("CKM_ECDH1_DERIVE's public point", ecdh_point),
                ("CKM_AES_ECB_ENCRYPT_DATA's data", derive_data),
            ]
        };
        for (what, rv) in rows {
            assert!(refused(rv), "{what} of {n} bytes: 0x{rv:x}");
        }
    }
    // An output array said to hold more handles than any array can ("all there are") gets
    // them all, every time.
    let mut found = [0 as CK_OBJECT_HANDLE; 256];
    // SAFETY: an empty template; an output array holding every object the session sees.
    unsafe {
        assert_eq!((x.r.f.C_FindObjectsInit.unwrap())(x.h, null_mut(), 0), CKR_OK);
        for want in [before, 0] {
            let mut n = 0;
            let rv = (x.r.f.C_FindObjects.unwrap())(x.h, found.as_mut_ptr(), CK_ULONG::MAX, &mut n);
            assert_eq!((rv, n as usize), (CKR_OK, want));
        }
        assert_eq!((x.r.f.C_FindObjectsFinal.unwrap())(x.h), CKR_OK);
    }
    assert_eq!(x.objects(), before, "a refused call made an object");
}
