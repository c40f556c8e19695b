//! Shared helpers: load the built module through `cryptoki` as applications do, each test
//! with its own store in a temporary directory.
#![allow(dead_code)]

pub mod pg;
pub mod race;
pub mod remote;

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, ObjectClass, ObjectHandle};
use cryptoki::session::{Session, UserType};
use cryptoki::slot::Slot;
use cryptoki::types::AuthPin;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const SO_PIN: &str = "12345678";
pub const USER_PIN: &str = "1234";

/// The built `libferrohsm.so` next to the test binary's directory.
pub fn module_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let so = dir.join("libferrohsm.so");
    assert!(so.exists(), "{} is missing: build the crate first", so.display());
    so
}

/// Runs `ferrohsm-util` with the module under test on the configuration `conf`; it must
/// succeed.
pub fn util(conf: &Path, args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrohsm-util"))
        .arg("--module")
        .arg(module_path())
        .args(args)
        .env("FERROHSM_CONF", conf)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ferrohsm-util {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The bytes of a hex string (whitespace between digit pairs ignored): test vectors and the
/// output of tools such as `openssl rsa -modulus`.
pub fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// A store of its own for this test process, with a fast KDF (tests only).
pub struct TestEnv {
    pub dir: tempfile::TempDir,
}

impl TestEnv {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("ferrohsm.toml");
        std::fs::write(
            &conf,
            "[store]\npath = \"store\"\n[pin]\nkdf_memory_kib = 64\nkdf_passes = 1\n",
        )
        .unwrap();
        std::env::set_var("FERROHSM_CONF", &conf);
        TestEnv { dir }
    }

    pub fn conf(&self) -> PathBuf {
        self.dir.path().join("ferrohsm.toml")
    }

    pub fn store_dir(&self) -> PathBuf {
        self.dir.path().join("store")
    }
}

pub fn load() -> Pkcs11 {
    let p = Pkcs11::new(module_path()).unwrap();
    p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
        .unwrap();
    p
}

/// Initialises the free slot's token with `label` and sets the user PIN; returns its slot.
pub fn new_token(p: &Pkcs11, label: &str) -> Slot {
    let slots = p.get_all_slots().unwrap();
    let free = *slots
        .iter()
        .find(|s| !p.get_token_info(**s).unwrap().token_initialized())
        .expect("a free slot");
    p.init_token(free, &AuthPin::new(SO_PIN.into()), label).unwrap();
    let s = p.open_rw_session(free).unwrap();
    s.login(UserType::So, Some(&AuthPin::new(SO_PIN.into()))).unwrap();
    s.init_pin(&AuthPin::new(USER_PIN.into())).unwrap();
    s.logout().unwrap();
    s.close().unwrap();
    free
}

pub fn user_session(p: &Pkcs11, slot: Slot) -> Session {
    let s = p.open_rw_session(slot).unwrap();
    match s.login(UserType::User, Some(&AuthPin::new(USER_PIN.into()))) {
        Ok(()) | Err(cryptoki::error::Error::Pkcs11(cryptoki::error::RvError::UserAlreadyLoggedIn, _)) => {}
        Err(e) => panic!("login failed: {e}"),
    }
    s
}

/// Generates an RSA key pair as token objects with the given id.
pub fn rsa_keypair(s: &Session, bits: u64, id: &[u8], token: bool) -> (ObjectHandle, ObjectHandle) {
    let public = vec![
        Attribute::Token(token),
        Attribute::ModulusBits(bits.into()),
        Attribute::PublicExponent(vec![1, 0, 1]),
        Attribute::Verify(true),
        Attribute::Encrypt(true),
        Attribute::Id(id.to_vec()),
        Attribute::Label(b"test key".to_vec()),
    ];
    let private = vec![
        Attribute::Token(token),
        Attribute::Private(true),
        Attribute::Sensitive(true),
        Attribute::Sign(true),
        Attribute::Decrypt(true),
        Attribute::Id(id.to_vec()),
        Attribute::Label(b"test key".to_vec()),
    ];
    s.generate_key_pair(&Mechanism::RsaPkcsKeyPairGen, &public, &private)
        .unwrap()
}

/// The public key as the `rsa` crate sees it: an implementation independent of ferrohsm's.
pub fn rsa_public(s: &Session, key: ObjectHandle) -> rsa::PublicKey {
    use cryptoki::object::AttributeType;
    let attrs = s
        .get_attributes(key, &[AttributeType::Modulus, AttributeType::PublicExponent])
        .unwrap();
    let (mut n, mut e) = (vec![], vec![]);
    for a in attrs {
        match a {
            Attribute::Modulus(v) => n = v,
            Attribute::PublicExponent(v) => e = v,
            _ => {}
        }
    }
    let bits = (n.len() * 8) as u32;
    rsa::PublicKey::new(
        rsa::BoxedUint::from_be_slice(&n, bits).unwrap(),
        rsa::BoxedUint::from_be_slice(&e, 64).unwrap(),
    )
    .unwrap()
}

/// Writes the key's SubjectPublicKeyInfo as PEM for OpenSSL's command line.
pub fn write_public_pem(s: &Session, key: ObjectHandle, path: &Path) {
    use cryptoki::object::AttributeType;
    let attrs = s.get_attributes(key, &[AttributeType::PublicKeyInfo]).unwrap();
    let Attribute::PublicKeyInfo(der) = &attrs[0] else {
        panic!("no CKA_PUBLIC_KEY_INFO")
    };
    let der_path = path.with_extension("der");
    std::fs::write(&der_path, der).unwrap();
    let st = Command::new("openssl")
        .args(["pkey", "-pubin", "-inform", "DER", "-in"])
        .arg(&der_path)
        .arg("-out")
        .arg(path)
        .status()
        .expect("openssl must be installed");
    assert!(st.success());
}

pub fn find_one(s: &Session, class: ObjectClass, id: &[u8]) -> ObjectHandle {
    let found = s
        .find_objects(&[Attribute::Class(class), Attribute::Id(id.to_vec())])
        .unwrap();
    assert_eq!(
        found.len(),
        1,
        "expected one object of class {class:?} with id {id:02x?}"
    );
    found[0]
}

/// The CK_RV of a failed call.
pub fn rv(e: cryptoki::error::Error) -> cryptoki::error::RvError {
    match e {
        cryptoki::error::Error::Pkcs11(rv, _) => rv,
        other => panic!("not a PKCS#11 error: {other}"),
    }
}

/// Direct access to the module's function list, for calls `cryptoki` cannot make
/// (NULL pointers, short buffers, mechanisms it has no type for).
pub struct Raw {
    _lib: libloading::Library,
    pub f: &'static cryptoki_sys::CK_FUNCTION_LIST_3_0,
}

impl Raw {
    pub fn load() -> Raw {
        unsafe {
            let lib = libloading::Library::new(module_path()).unwrap();
            let get_interface: libloading::Symbol<
                unsafe extern "C" fn(
                    *mut u8,
                    *mut cryptoki_sys::CK_VERSION,
                    *mut *mut cryptoki_sys::CK_INTERFACE,
                    cryptoki_sys::CK_FLAGS,
                ) -> cryptoki_sys::CK_RV,
            > = lib.get(b"C_GetInterface").unwrap();
            let mut iface = std::ptr::null_mut();
            let mut v = cryptoki_sys::CK_VERSION { major: 3, minor: 0 };
            assert_eq!(
                get_interface(c"PKCS 11".as_ptr() as *mut u8, &mut v, &mut iface, 0),
                0
            );
            let f = &*((*iface).pFunctionList as *const cryptoki_sys::CK_FUNCTION_LIST_3_0);
            Raw { _lib: lib, f }
        }
    }

    /// A read/write session on `slot`, opened through the raw API.
    pub fn open_session(&self, slot: cryptoki_sys::CK_SLOT_ID) -> cryptoki_sys::CK_SESSION_HANDLE {
        let mut h = 0;
        // SAFETY: a live out-pointer; no notification callback.
        let rv = unsafe {
            (self.f.C_OpenSession.unwrap())(
                slot,
                cryptoki_sys::CKF_SERIAL_SESSION | cryptoki_sys::CKF_RW_SESSION,
                std::ptr::null_mut(),
                None,
                &mut h,
            )
        };
        assert_eq!(rv, cryptoki_sys::CKR_OK);
        h
    }
}

/// Builds a raw `CK_MECHANISM` with parameter `p`.
pub fn raw_mech<T>(t: cryptoki_sys::CK_MECHANISM_TYPE, p: Option<&mut T>) -> cryptoki_sys::CK_MECHANISM {
    match p {
        Some(p) => cryptoki_sys::CK_MECHANISM {
            mechanism: t,
            pParameter: p as *mut T as *mut std::ffi::c_void,
            ulParameterLen: std::mem::size_of::<T>() as cryptoki_sys::CK_ULONG,
        },
        None => cryptoki_sys::CK_MECHANISM {
            mechanism: t,
            pParameter: std::ptr::null_mut(),
            ulParameterLen: 0,
        },
    }
}

/// Signs `data` with the raw API (two calls: length, then data).
pub fn raw_sign(
    r: &Raw,
    h: cryptoki_sys::CK_SESSION_HANDLE,
    mech: &mut cryptoki_sys::CK_MECHANISM,
    key: ObjectHandle,
    data: &[u8],
) -> Result<Vec<u8>, cryptoki_sys::CK_RV> {
    unsafe {
        let rv = (r.f.C_SignInit.unwrap())(h, mech, key.handle());
        if rv != 0 {
            return Err(rv);
        }
        let mut len = 0;
        let rv = (r.f.C_Sign.unwrap())(
            h,
            data.as_ptr() as *mut u8,
            data.len() as _,
            std::ptr::null_mut(),
            &mut len,
        );
        if rv != 0 {
            return Err(rv);
        }
        let mut out = vec![0u8; len as usize];
        let rv = (r.f.C_Sign.unwrap())(
            h,
            data.as_ptr() as *mut u8,
            data.len() as _,
            out.as_mut_ptr(),
            &mut len,
        );
        if rv != 0 {
            return Err(rv);
        }
        out.truncate(len as usize);
        Ok(out)
    }
}

/// Runs `openssl` with `args` and reports whether it succeeded.
pub fn openssl(args: &[&str]) -> bool {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl must be installed");
    if !out.status.success() {
        eprintln!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    out.status.success()
}

/// A big integer of the rsa crate as minimal big-endian bytes (PKCS#11 attribute form).
pub fn be(v: &rsa::BoxedUint) -> Vec<u8> {
    let b = v.to_be_bytes();
    let first = b.iter().position(|&x| x != 0).unwrap_or(b.len());
    b[first..].to_vec()
}

/// For each size, a session key pair on the user session's token in `slot`, signed with from
/// `threads` threads (`per_thread` signatures each, so batching kernels batch); every
/// signature is verified with the rsa crate.
pub fn sign_concurrently_verified(p: &Pkcs11, slot: Slot, sizes: &[u64], threads: usize, per_thread: usize) {
    use rsa::pkcs1v15::Pkcs1v15Sign;
    use sha2::{Digest, Sha256};
    let s = user_session(p, slot);
    for &bits in sizes {
        let (public, private) = rsa_keypair(&s, bits, &bits.to_be_bytes(), false);
        let pk = rsa_public(&s, public);
        std::thread::scope(|sc| {
            for t in 0..threads {
                let pk = &pk;
                sc.spawn(move || {
                    let s = p.open_ro_session(slot).unwrap();
                    for i in 0..per_thread {
                        let msg = format!("{bits} {t} {i}");
                        let sig = s
                            .sign(&Mechanism::Sha256RsaPkcs, private, msg.as_bytes())
                            .unwrap();
                        pk.verify(
                            Pkcs1v15Sign::new::<Sha256>(),
                            &Sha256::digest(msg.as_bytes()),
                            &sig,
                        )
                        .unwrap();
                    }
                });
            }
        });
    }
}

/// `FERROHSM_KERNEL_STATS` of `include/ferrohsm.h`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelStats {
    pub name: [u8; 16],
    pub id: std::ffi::c_ulong,
    pub available: std::ffi::c_ulong,
    pub self_test_passed: std::ffi::c_ulong,
    pub serves: [std::ffi::c_ulong; 4],
    pub max_batch: std::ffi::c_ulong,
    pub batches: [std::ffi::c_ulong; 8],
}

impl KernelStats {
    pub fn name(&self) -> String {
        String::from_utf8_lossy(self.name.split(|&b| b == 0).next().unwrap()).into_owned()
    }

    /// Signatures it produced (calls times signatures per call).
    pub fn signatures(&self) -> u64 {
        // std::ffi::c_ulong is u64 on the Unix ABIs the module supports.
        self.batches
            .map(u64::from)
            .iter()
            .enumerate()
            .map(|(i, n)| n * (i as u64 + 1))
            .sum()
    }
}

/// Every family of the initialised module, by its vendor API.
pub fn kernel_stats() -> Vec<KernelStats> {
    // SAFETY: the module is loaded and initialised by the caller; the signature is the
    // header's and the buffer holds the count the first call returned.
    unsafe {
        let lib = libloading::Library::new(module_path()).unwrap();
        let f: libloading::Symbol<
            unsafe extern "C" fn(*mut KernelStats, *mut std::ffi::c_ulong) -> std::ffi::c_ulong,
        > = lib.get(b"FERROHSM_GetKernelStats").unwrap();
        let mut n: std::ffi::c_ulong = 0;
        assert_eq!(f(std::ptr::null_mut(), &mut n), 0);
        let mut v = vec![std::mem::zeroed::<KernelStats>(); n as usize];
        assert_eq!(f(v.as_mut_ptr(), &mut n), 0);
        v
    }
}
