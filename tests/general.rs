//! Library-level behaviour through the C ABI: initialisation rules, interfaces, function
//! lists, NULL pointers, calls before `C_Initialize`, fork.

mod common;

use common::*;
use cryptoki_sys::*;
use std::ptr::{null, null_mut};

#[test]
fn not_initialized_then_initialize_finalize_cycles() {
    let _env = TestEnv::new();
    let r = Raw::load();
    unsafe {
        let mut info: CK_INFO = std::mem::zeroed();
        assert_eq!((r.f.C_GetInfo.unwrap())(&mut info), CKR_CRYPTOKI_NOT_INITIALIZED);
        let mut n = 0;
        assert_eq!(
            (r.f.C_GetSlotList.unwrap())(0, null_mut(), &mut n),
            CKR_CRYPTOKI_NOT_INITIALIZED
        );
        assert_eq!(
            (r.f.C_Finalize.unwrap())(null_mut()),
            CKR_CRYPTOKI_NOT_INITIALIZED
        );
        for _ in 0..3 {
            assert_eq!((r.f.C_Initialize.unwrap())(null_mut()), CKR_OK);
            assert_eq!(
                (r.f.C_Initialize.unwrap())(null_mut()),
                CKR_CRYPTOKI_ALREADY_INITIALIZED
            );
            assert_eq!((r.f.C_GetInfo.unwrap())(&mut info), CKR_OK);
            assert!(info.libraryVersion.major >= 1);
            assert_eq!(info.cryptokiVersion.major, 2);
            assert_eq!(&info.manufacturerID[..16], b"ferrohsm project");
            let mut bad = 1usize;
            assert_eq!(
                (r.f.C_Finalize.unwrap())(&mut bad as *mut usize as *mut _),
                CKR_ARGUMENTS_BAD
            );
            assert_eq!((r.f.C_Finalize.unwrap())(null_mut()), CKR_OK);
        }
    }
}

#[test]
fn initialize_arguments_are_checked() {
    let _env = TestEnv::new();
    let r = Raw::load();
    unsafe extern "C" fn create(m: *mut *mut std::ffi::c_void) -> CK_RV {
        *m = Box::into_raw(Box::new(0u8)) as *mut _;
        CKR_OK
    }
    unsafe extern "C" fn other(_m: *mut std::ffi::c_void) -> CK_RV {
        CKR_OK
    }
    unsafe {
        let mut args: CK_C_INITIALIZE_ARGS = std::mem::zeroed();
        let mut reserved = 0u8;
        args.pReserved = &mut reserved as *mut u8 as *mut _;
        assert_eq!(
            (r.f.C_Initialize.unwrap())(&mut args as *mut _ as *mut _),
            CKR_ARGUMENTS_BAD
        );
        let mut args: CK_C_INITIALIZE_ARGS = std::mem::zeroed();
        args.CreateMutex = Some(create);
        assert_eq!(
            (r.f.C_Initialize.unwrap())(&mut args as *mut _ as *mut _),
            CKR_ARGUMENTS_BAD
        );
        // All four application mutex functions (p11-kit style), with and without OS locking.
        args.DestroyMutex = Some(other);
        args.LockMutex = Some(other);
        args.UnlockMutex = Some(other);
        assert_eq!((r.f.C_Initialize.unwrap())(&mut args as *mut _ as *mut _), CKR_OK);
        assert_eq!((r.f.C_Finalize.unwrap())(null_mut()), CKR_OK);
        args.flags = CKF_OS_LOCKING_OK;
        assert_eq!((r.f.C_Initialize.unwrap())(&mut args as *mut _ as *mut _), CKR_OK);
        assert_eq!((r.f.C_Finalize.unwrap())(null_mut()), CKR_OK);
        // Knot passes CKF_LIBRARY_CANT_CREATE_OS_THREADS.
        let mut args: CK_C_INITIALIZE_ARGS = std::mem::zeroed();
        args.flags = CKF_LIBRARY_CANT_CREATE_OS_THREADS | CKF_OS_LOCKING_OK;
        assert_eq!((r.f.C_Initialize.unwrap())(&mut args as *mut _ as *mut _), CKR_OK);
        assert_eq!((r.f.C_Finalize.unwrap())(null_mut()), CKR_OK);
    }
}

#[test]
fn concurrent_initialize_has_exactly_one_winner() {
    let _env = TestEnv::new();
    let r = Raw::load();
    for _ in 0..5 {
        let results: Vec<CK_RV> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..16)
                .map(|_| sc.spawn(|| unsafe { (r.f.C_Initialize.unwrap())(null_mut()) }))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(
            results.iter().filter(|&&rv| rv == CKR_OK).count(),
            1,
            "{results:?}"
        );
        assert!(results
            .iter()
            .all(|&rv| rv == CKR_OK || rv == CKR_CRYPTOKI_ALREADY_INITIALIZED));
        unsafe { assert_eq!((r.f.C_Finalize.unwrap())(null_mut()), CKR_OK) };
    }
}

#[test]
fn interfaces_and_function_lists() {
    let _env = TestEnv::new();
    let r = Raw::load();
    unsafe {
        let lib = libloading::Library::new(module_path()).unwrap();
        let list_fn: libloading::Symbol<unsafe extern "C" fn(*mut CK_INTERFACE, *mut CK_ULONG) -> CK_RV> =
            lib.get(b"C_GetInterfaceList").unwrap();
        let get_fn: libloading::Symbol<
            unsafe extern "C" fn(*mut u8, *mut CK_VERSION, *mut *mut CK_INTERFACE, CK_FLAGS) -> CK_RV,
        > = lib.get(b"C_GetInterface").unwrap();
        let gfl: libloading::Symbol<unsafe extern "C" fn(*mut *mut CK_FUNCTION_LIST) -> CK_RV> =
            lib.get(b"C_GetFunctionList").unwrap();
        let mut n = 0;
        assert_eq!(list_fn(null_mut(), &mut n), CKR_OK);
        assert_eq!(n, 4);
        let mut small = [std::mem::zeroed::<CK_INTERFACE>(); 1];
        let mut one = 1;
        assert_eq!(list_fn(small.as_mut_ptr(), &mut one), CKR_BUFFER_TOO_SMALL);
        assert_eq!(one, 4);
        let mut all = [std::mem::zeroed::<CK_INTERFACE>(); 4];
        assert_eq!(list_fn(all.as_mut_ptr(), &mut n), CKR_OK);
        let mut versions = vec![];
        for i in &all {
            let name = std::ffi::CStr::from_ptr(i.pInterfaceName as *const _).to_bytes();
            let v = *(i.pFunctionList as *const CK_VERSION);
            versions.push((String::from_utf8_lossy(name).into_owned(), v.major, v.minor));
        }
        versions.sort();
        let expect = [
            ("PKCS 11", 2, 40),
            ("PKCS 11", 3, 0),
            ("PKCS 11", 3, 2),
            ("Vendor ferrohsm", 1, 3),
        ];
        assert_eq!(versions, expect.map(|(n, a, b)| (n.to_string(), a, b)).to_vec());
        // The default interface is 3.0; named lookups by version work.
        let mut iface = null_mut();
        assert_eq!(get_fn(null_mut(), null_mut(), &mut iface, 0), CKR_OK);
        let v0 = *((*iface).pFunctionList as *const CK_VERSION);
        assert_eq!((v0.major, v0.minor), (3, 0));
        let mut v = CK_VERSION { major: 3, minor: 2 };
        assert_eq!(
            get_fn(c"PKCS 11".as_ptr() as *mut u8, &mut v, &mut iface, 0),
            CKR_OK
        );
        let f32 = &mut *((*iface).pFunctionList as *mut CK_FUNCTION_LIST_3_2);
        assert_eq!((f32.version.major, f32.version.minor), (3, 2));
        // Handed-out structures are writable (some wrappers patch them).
        f32.version.minor = 2;
        let mut v = CK_VERSION { major: 9, minor: 9 };
        assert_eq!(
            get_fn(c"PKCS 11".as_ptr() as *mut u8, &mut v, &mut iface, 0),
            CKR_ARGUMENTS_BAD
        );
        assert_eq!(
            get_fn(c"Other".as_ptr() as *mut u8, null_mut(), &mut iface, 0),
            CKR_ARGUMENTS_BAD
        );
        assert_eq!(get_fn(null_mut(), null_mut(), null_mut(), 0), CKR_ARGUMENTS_BAD);
        let mut fl = null_mut();
        assert_eq!(gfl(&mut fl), CKR_OK);
        assert_eq!(((*fl).version.major, (*fl).version.minor), (2, 40));
        assert_eq!(gfl(null_mut()), CKR_ARGUMENTS_BAD);
        // Unimplemented 3.x functions answer CKR_FUNCTION_NOT_SUPPORTED once initialised.
        assert_eq!(
            (f32.C_MessageSignInit.unwrap())(1, null_mut(), 1),
            CKR_CRYPTOKI_NOT_INITIALIZED
        );
        assert_eq!((r.f.C_Initialize.unwrap())(null_mut()), CKR_OK);
        assert_eq!(
            (f32.C_MessageSignInit.unwrap())(1, null_mut(), 1),
            CKR_FUNCTION_NOT_SUPPORTED
        );
        assert_eq!(
            (f32.C_DigestEncryptUpdate.unwrap())(1, null_mut(), 0, null_mut(), null_mut()),
            CKR_FUNCTION_NOT_SUPPORTED
        );
        assert_eq!((r.f.C_Finalize.unwrap())(null_mut()), CKR_OK);
    }
}

#[test]
fn null_pointers_and_bad_handles() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "nulls");
    let s = user_session(&p, slot);
    let r = Raw::load();
    let h = s.handle();
    unsafe {
        assert_eq!((r.f.C_GetInfo.unwrap())(null_mut()), CKR_ARGUMENTS_BAD);
        assert_eq!(
            (r.f.C_GetSlotList.unwrap())(0, null_mut(), null_mut()),
            CKR_ARGUMENTS_BAD
        );
        assert_eq!(
            (r.f.C_GetSlotInfo.unwrap())(slot.id(), null_mut()),
            CKR_ARGUMENTS_BAD
        );
        assert_eq!(
            (r.f.C_GetTokenInfo.unwrap())(slot.id(), null_mut()),
            CKR_ARGUMENTS_BAD
        );
        let mut ti: CK_TOKEN_INFO = std::mem::zeroed();
        assert_eq!((r.f.C_GetTokenInfo.unwrap())(999, &mut ti), CKR_SLOT_ID_INVALID);
        assert_eq!(
            (r.f.C_OpenSession.unwrap())(slot.id(), CKF_SERIAL_SESSION, null_mut(), None, null_mut()),
            CKR_ARGUMENTS_BAD
        );
        let mut sh = 0;
        assert_eq!(
            (r.f.C_OpenSession.unwrap())(slot.id(), 0, null_mut(), None, &mut sh),
            CKR_SESSION_PARALLEL_NOT_SUPPORTED
        );
        assert_eq!(
            (r.f.C_OpenSession.unwrap())(999, CKF_SERIAL_SESSION, null_mut(), None, &mut sh),
            CKR_SLOT_ID_INVALID
        );
        assert_eq!((r.f.C_CloseSession.unwrap())(0xdead), CKR_SESSION_HANDLE_INVALID);
        assert_eq!((r.f.C_GetSessionInfo.unwrap())(h, null_mut()), CKR_ARGUMENTS_BAD);
        assert_eq!(
            (r.f.C_Login.unwrap())(h, CKU_USER, null_mut(), 4),
            CKR_ARGUMENTS_BAD
        );
        assert_eq!((r.f.C_SignInit.unwrap())(h, null_mut(), 1), CKR_ARGUMENTS_BAD);
        assert_eq!((r.f.C_DigestInit.unwrap())(h, null_mut()), CKR_ARGUMENTS_BAD);
        let mut obj = 0;
        assert_eq!(
            (r.f.C_CreateObject.unwrap())(h, null_mut(), 3, &mut obj),
            CKR_ARGUMENTS_BAD
        );
        let mut class = CKO_DATA;
        let mut t = [CK_ATTRIBUTE {
            type_: CKA_CLASS,
            pValue: &mut class as *mut _ as *mut _,
            ulValueLen: 8,
        }];
        assert_eq!(
            (r.f.C_CreateObject.unwrap())(h, t.as_mut_ptr(), 1, null_mut()),
            CKR_ARGUMENTS_BAD
        );
        t[0].pValue = null_mut();
        assert_eq!(
            (r.f.C_CreateObject.unwrap())(h, t.as_mut_ptr(), 1, &mut obj),
            CKR_ARGUMENTS_BAD
        );
        assert_eq!((r.f.C_FindObjectsInit.unwrap())(h, null_mut(), 0), CKR_OK);
        assert_eq!(
            (r.f.C_FindObjects.unwrap())(h, null_mut(), 5, &mut obj),
            CKR_ARGUMENTS_BAD
        );
        assert_eq!((r.f.C_FindObjectsFinal.unwrap())(h), CKR_OK);
        assert_eq!(
            (r.f.C_FindObjectsFinal.unwrap())(h),
            CKR_OPERATION_NOT_INITIALIZED
        );
        assert_eq!(
            (r.f.C_GenerateRandom.unwrap())(h, null_mut(), 16),
            CKR_ARGUMENTS_BAD
        );
        let mut buf = [0u8; 64];
        assert_eq!((r.f.C_GenerateRandom.unwrap())(h, buf.as_mut_ptr(), 64), CKR_OK);
        assert!(buf.iter().any(|&b| b != 0));
        assert_eq!((r.f.C_SeedRandom.unwrap())(h, buf.as_mut_ptr(), 8), CKR_OK);
        assert_eq!(
            (r.f.C_GenerateRandom.unwrap())(0xdead, buf.as_mut_ptr(), 64),
            CKR_SESSION_HANDLE_INVALID
        );
        assert_eq!(
            (r.f.C_GetAttributeValue.unwrap())(h, 0xdead, null_mut(), 0),
            CKR_OBJECT_HANDLE_INVALID
        );
        assert_eq!(
            (r.f.C_DestroyObject.unwrap())(h, 0xdead),
            CKR_OBJECT_HANDLE_INVALID
        );
        let mut st = 0;
        // No operation is active: nothing to save.
        assert_eq!(
            (r.f.C_GetOperationState.unwrap())(h, null_mut(), &mut st),
            CKR_OPERATION_NOT_INITIALIZED
        );
        let mut slot_ev = 0;
        assert_eq!(
            (r.f.C_WaitForSlotEvent.unwrap())(CKF_DONT_BLOCK, &mut slot_ev, null_mut()),
            CKR_NO_EVENT
        );
        assert_eq!((r.f.C_GetFunctionStatus.unwrap())(h), CKR_FUNCTION_NOT_PARALLEL);
        let _ = null::<u8>();
    }
}

#[test]
fn forked_child_initializes_and_signs() {
    let env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "fork");
    let s = user_session(&p, slot);
    let (_public, _private) = rsa_keypair(&s, 2048, b"forked", true);
    let r = Raw::load();
    let result_path = env.dir.path().join("child-result");
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0);
        if pid == 0 {
            // Child: the parent's library state is stale until C_Initialize, which then works
            // without C_Finalize (as libp11 and p11-kit do).
            let code = std::panic::catch_unwind(|| {
                let mut info: CK_INFO = std::mem::zeroed();
                assert_eq!((r.f.C_GetInfo.unwrap())(&mut info), CKR_CRYPTOKI_NOT_INITIALIZED);
                assert_eq!((r.f.C_Initialize.unwrap())(null_mut()), CKR_OK);
                let mut h = 0;
                assert_eq!(
                    (r.f.C_OpenSession.unwrap())(slot.id(), CKF_SERIAL_SESSION, null_mut(), None, &mut h),
                    CKR_OK
                );
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
                let mut key = 0;
                let mut n = 0;
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
    // The parent still works, and the child's signature verifies with the public key.
    let sig = std::fs::read(&result_path).unwrap();
    let public = find_one(&s, cryptoki::object::ObjectClass::PUBLIC_KEY, b"forked");
    let pk = rsa_public(&s, public);
    use rsa::sha2::{Digest, Sha256};
    pk.verify(
        rsa::pkcs1v15::Pkcs1v15Sign::new::<Sha256>(),
        &Sha256::digest(b"child"),
        &sig,
    )
    .unwrap();
}

#[test]
fn finalize_at_process_exit_does_not_crash() {
    // A child process that initialises, opens a session and calls C_Finalize from an atexit
    // handler, as OpenSSL's cleanup does; it must exit cleanly.
    let env = TestEnv::new();
    let p = load();
    new_token(&p, "atexit");
    drop(p);
    let r = Raw::load();
    static mut FINALIZE: Option<unsafe extern "C" fn(*mut std::ffi::c_void) -> CK_RV> = None;
    extern "C" fn at_exit() {
        unsafe {
            if let Some(f) = FINALIZE {
                f(null_mut());
            }
        }
    }
    unsafe {
        let pid = libc::fork();
        if pid == 0 {
            FINALIZE = r.f.C_Finalize;
            assert_eq!((r.f.C_Initialize.unwrap())(null_mut()), CKR_OK);
            let mut h = 0;
            (r.f.C_OpenSession.unwrap())(0, CKF_SERIAL_SESSION, null_mut(), None, &mut h);
            libc::atexit(at_exit);
            libc::exit(0);
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
    drop(env);
}

/// `C_GetSessionValidationFlags` (3.2) answers truthfully: no validated operation, so 0 after
/// a signature; the one flags type 3.2 defines; the usual codes for a bad session and NULL.
#[test]
fn session_validation_flags_are_zero_and_checked() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "validation");
    let s = user_session(&p, slot);
    let (_, private) = rsa_keypair(&s, 2048, b"v", false);
    s.sign(
        &cryptoki::mechanism::Mechanism::Sha256RsaPkcs,
        private,
        b"validated?",
    )
    .unwrap();
    // (cryptoki takes the default interface, 3.0, whose list has no 3.2 function: the 3.2
    // list is asked for by name, as a 3.2 application does.)
    // SAFETY: the 3.2 list of the loaded module; outputs are live locals or NULL.
    unsafe {
        let lib = libloading::Library::new(module_path()).unwrap();
        let get_interface: libloading::Symbol<
            unsafe extern "C" fn(*mut u8, *mut CK_VERSION, *mut *mut CK_INTERFACE, CK_FLAGS) -> CK_RV,
        > = lib.get(b"C_GetInterface").unwrap();
        let mut iface = null_mut();
        let mut v = CK_VERSION { major: 3, minor: 2 };
        assert_eq!(
            get_interface(c"PKCS 11".as_ptr() as *mut u8, &mut v, &mut iface, 0),
            CKR_OK
        );
        let f = (*((*iface).pFunctionList as *const CK_FUNCTION_LIST_3_2))
            .C_GetSessionValidationFlags
            .unwrap();
        let h = s.handle();
        let table: [(CK_SESSION_HANDLE, CK_ULONG, bool, CK_RV); 5] = [
            (h, CKS_LAST_VALIDATION_OK, true, CKR_OK),
            (h, CKS_LAST_VALIDATION_OK, false, CKR_ARGUMENTS_BAD),
            (h, CKS_LAST_VALIDATION_OK + 1, true, CKR_ARGUMENTS_BAD),
            (h, 0, true, CKR_ARGUMENTS_BAD),
            (0xdead, CKS_LAST_VALIDATION_OK, true, CKR_SESSION_HANDLE_INVALID),
        ];
        for (session, ty, with_out, want) in table {
            let mut flags: CK_FLAGS = 0xff;
            let out = if with_out {
                &mut flags as *mut CK_FLAGS
            } else {
                null_mut()
            };
            assert_eq!(
                f(session, ty, out),
                want,
                "session {session:#x}, type {ty}, out {with_out}"
            );
            if want == CKR_OK {
                assert_eq!(flags, 0, "no validated operation");
            }
        }
    }
}
