//! Slots, tokens, sessions and login: the spec's state machine, PIN rules and token flags.

mod common;

use common::*;
use cryptoki::error::RvError;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, ObjectClass};
use cryptoki::session::{SessionState, UserType};
use cryptoki::types::AuthPin;

fn pin(s: &str) -> AuthPin {
    AuthPin::new(s.into())
}

#[test]
fn free_slot_init_token_and_stable_slot_ids() {
    let env = TestEnv::new();
    let p = load();
    let slots = p.get_all_slots().unwrap();
    assert_eq!(slots.len(), 1, "a fresh store has exactly the free slot");
    let info = p.get_token_info(slots[0]).unwrap();
    assert!(!info.token_initialized());
    assert_eq!(
        rv(p.open_rw_session(slots[0]).unwrap_err()),
        RvError::TokenNotRecognized
    );
    let a = new_token(&p, "alpha");
    let b = new_token(&p, "beta");
    assert_ne!(a, b);
    let slots = p.get_all_slots().unwrap();
    assert_eq!(slots.len(), 3, "two tokens and a new free slot");
    let info = p.get_token_info(a).unwrap();
    assert_eq!(info.label(), "alpha");
    assert_eq!(info.manufacturer_id(), "ferrohsm project");
    assert_eq!(info.model(), "ferrohsm");
    assert!(info.token_initialized() && info.user_pin_initialized() && info.login_required() && info.rng());
    assert_eq!(info.serial_number().len(), 16);
    assert_eq!(info.min_pin_length(), 4);
    assert!(info.utc_time().is_some());
    let serial = info.serial_number().to_string();
    // Slot ids and serials survive C_Finalize/C_Initialize.
    p.finalize().unwrap();
    let p = load();
    assert_eq!(p.get_token_info(a).unwrap().serial_number(), serial);
    assert_eq!(p.get_token_info(b).unwrap().label(), "beta");
    // Re-initialising with the SO PIN keeps slot and serial and drops every object.
    let s = user_session(&p, a);
    rsa_keypair(&s, 1024, b"gone", true);
    s.close().unwrap();
    assert_eq!(
        rv(p.init_token(a, &pin("wrong-so-pin"), "alpha2").unwrap_err()),
        RvError::PinIncorrect
    );
    p.init_token(a, &pin(SO_PIN), "alpha2").unwrap();
    let info = p.get_token_info(a).unwrap();
    assert_eq!((info.label(), info.serial_number()), ("alpha2", serial.as_str()));
    assert!(!info.user_pin_initialized());
    let s = p.open_rw_session(a).unwrap();
    s.login(UserType::So, Some(&pin(SO_PIN))).unwrap();
    s.init_pin(&pin(USER_PIN)).unwrap();
    s.logout().unwrap();
    s.login(UserType::User, Some(&pin(USER_PIN))).unwrap();
    assert!(s.find_objects(&[]).unwrap().is_empty());
    // C_InitToken with a session open is refused.
    assert_eq!(
        rv(p.init_token(a, &pin(SO_PIN), "x").unwrap_err()),
        RvError::SessionExists
    );
    drop(env);
}

#[test]
fn token_made_by_another_process_appears_without_restart() {
    let env = TestEnv::new();
    let p = load();
    new_token(&p, "first");
    let before = p.get_all_slots().unwrap();
    let free = *before.last().unwrap();
    let out = std::process::Command::new("pkcs11-tool")
        .arg("--module")
        .arg(module_path())
        .args([
            "--slot",
            &free.id().to_string(),
            "--init-token",
            "--label",
            "second",
            "--so-pin",
            SO_PIN,
        ])
        .env("FERROHSM_CONF", env.conf())
        .output()
        .expect("pkcs11-tool (opensc) must be installed");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let after = p.get_all_slots().unwrap();
    assert_eq!(after.len(), before.len() + 1);
    assert_eq!(p.get_token_info(free).unwrap().label(), "second");
}

#[test]
fn login_state_machine() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "login");
    let ro = p.open_ro_session(slot).unwrap();
    let rw = p.open_rw_session(slot).unwrap();
    assert_eq!(
        ro.get_session_info().unwrap().session_state(),
        SessionState::RoPublic
    );
    assert_eq!(
        rw.get_session_info().unwrap().session_state(),
        SessionState::RwPublic
    );
    assert_eq!(rv(rw.logout().unwrap_err()), RvError::UserNotLoggedIn);
    // SO login is refused while a read-only session exists.
    assert_eq!(
        rv(rw.login(UserType::So, Some(&pin(SO_PIN))).unwrap_err()),
        RvError::SessionReadOnlyExists
    );
    rw.login(UserType::User, Some(&pin(USER_PIN))).unwrap();
    // Login state is shared by every session of the application.
    assert_eq!(
        ro.get_session_info().unwrap().session_state(),
        SessionState::RoUser
    );
    assert_eq!(
        rw.get_session_info().unwrap().session_state(),
        SessionState::RwUser
    );
    assert_eq!(
        rv(ro.login(UserType::User, Some(&pin(USER_PIN))).unwrap_err()),
        RvError::UserAlreadyLoggedIn
    );
    assert_eq!(
        rv(ro.login(UserType::So, Some(&pin(SO_PIN))).unwrap_err()),
        RvError::UserAnotherAlreadyLoggedIn
    );
    ro.logout().unwrap();
    assert_eq!(
        rw.get_session_info().unwrap().session_state(),
        SessionState::RwPublic
    );
    ro.close().unwrap();
    rw.login(UserType::So, Some(&pin(SO_PIN))).unwrap();
    assert_eq!(
        rw.get_session_info().unwrap().session_state(),
        SessionState::RwSecurityOfficer
    );
    // No read-only session while the SO is logged in.
    assert_eq!(
        rv(p.open_ro_session(slot).unwrap_err()),
        RvError::SessionReadWriteSoExists
    );
    rw.logout().unwrap();
    // Closing the last session logs the application out.
    rw.login(UserType::User, Some(&pin(USER_PIN))).unwrap();
    rw.close().unwrap();
    let s = p.open_ro_session(slot).unwrap();
    assert_eq!(
        s.get_session_info().unwrap().session_state(),
        SessionState::RoPublic
    );
    // Bad user type.
    let r = Raw::load();
    unsafe {
        assert_eq!(
            (r.f.C_Login.unwrap())(s.handle(), 7, USER_PIN.as_ptr() as *mut u8, 4),
            cryptoki_sys::CKR_USER_TYPE_INVALID
        );
    }
}

#[test]
fn pins_lengths_changes_counters_and_lockout() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "pins");
    let s = p.open_rw_session(slot).unwrap();
    assert_eq!(
        rv(s.login(UserType::User, Some(&pin("0000"))).unwrap_err()),
        RvError::PinIncorrect
    );
    let info = p.get_token_info(slot).unwrap();
    assert!(info.user_pin_count_low() && !info.user_pin_final_try() && !info.user_pin_locked());
    // A right PIN resets the counter.
    s.login(UserType::User, Some(&pin(USER_PIN))).unwrap();
    assert!(!p.get_token_info(slot).unwrap().user_pin_count_low());
    // C_SetPIN re-wraps; the old PIN stops working.
    assert_eq!(
        rv(s.set_pin(&pin(USER_PIN), &pin("12")).unwrap_err()),
        RvError::PinLenRange
    );
    s.set_pin(&pin(USER_PIN), &pin("new-user-pin")).unwrap();
    s.logout().unwrap();
    assert_eq!(
        rv(s.login(UserType::User, Some(&pin(USER_PIN))).unwrap_err()),
        RvError::PinIncorrect
    );
    s.login(UserType::User, Some(&pin("new-user-pin"))).unwrap();
    s.logout().unwrap();
    // Ten wrong PINs lock it; the ninth leaves the final try.
    for i in 1..10 {
        assert_eq!(
            rv(s.login(UserType::User, Some(&pin("bad-pin"))).unwrap_err()),
            RvError::PinIncorrect
        );
        let info = p.get_token_info(slot).unwrap();
        assert_eq!(info.user_pin_final_try(), i == 9, "after {i} failures");
    }
    assert_eq!(
        rv(s.login(UserType::User, Some(&pin("bad-pin"))).unwrap_err()),
        RvError::PinIncorrect
    );
    assert!(p.get_token_info(slot).unwrap().user_pin_locked());
    assert_eq!(
        rv(s.login(UserType::User, Some(&pin("new-user-pin"))).unwrap_err()),
        RvError::PinLocked
    );
    // The lock holds across C_Finalize (it is in the store).
    s.close().unwrap();
    p.finalize().unwrap();
    let p = load();
    let s = p.open_rw_session(slot).unwrap();
    assert_eq!(
        rv(s.login(UserType::User, Some(&pin("new-user-pin"))).unwrap_err()),
        RvError::PinLocked
    );
    // The SO unlocks it with C_InitPIN.
    s.login(UserType::So, Some(&pin(SO_PIN))).unwrap();
    s.init_pin(&pin("fresh-pin")).unwrap();
    s.logout().unwrap();
    assert!(!p.get_token_info(slot).unwrap().user_pin_locked());
    s.login(UserType::User, Some(&pin("fresh-pin"))).unwrap();
    // C_InitPIN needs the SO; C_SetPIN needs a read/write session.
    assert_eq!(
        rv(s.init_pin(&pin("other-pin")).unwrap_err()),
        RvError::UserNotLoggedIn
    );
    let ro = p.open_ro_session(slot).unwrap();
    assert_eq!(
        rv(ro.set_pin(&pin("fresh-pin"), &pin("again-pin")).unwrap_err()),
        RvError::SessionReadOnly
    );
    // SO PIN change.
    s.logout().unwrap();
    ro.close().unwrap();
    s.login(UserType::So, Some(&pin(SO_PIN))).unwrap();
    s.set_pin(&pin(SO_PIN), &pin("new-so-pin")).unwrap();
    s.logout().unwrap();
    assert_eq!(
        rv(s.login(UserType::So, Some(&pin(SO_PIN))).unwrap_err()),
        RvError::PinIncorrect
    );
    s.login(UserType::So, Some(&pin("new-so-pin"))).unwrap();
}

#[test]
fn read_only_sessions_cannot_write_token_objects() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "ro");
    let rw = user_session(&p, slot);
    let ro = p.open_ro_session(slot).unwrap();
    let data = |token: bool| {
        vec![
            Attribute::Class(ObjectClass::DATA),
            Attribute::Token(token),
            Attribute::Label(b"d".to_vec()),
            Attribute::Value(b"v".to_vec()),
        ]
    };
    assert_eq!(
        rv(ro.create_object(&data(true)).unwrap_err()),
        RvError::SessionReadOnly
    );
    // Session objects are fine in a read-only session.
    ro.create_object(&data(false)).unwrap();
    let obj = rw.create_object(&data(true)).unwrap();
    assert_eq!(rv(ro.destroy_object(obj).unwrap_err()), RvError::SessionReadOnly);
    assert_eq!(
        rv(ro
            .update_attributes(obj, &[Attribute::Label(b"x".to_vec())])
            .unwrap_err()),
        RvError::SessionReadOnly
    );
    let public = [Attribute::Token(true), Attribute::ModulusBits(1024.into())];
    let err = ro
        .generate_key_pair(&Mechanism::RsaPkcsKeyPairGen, &public, &[Attribute::Token(true)])
        .unwrap_err();
    assert_eq!(rv(err), RvError::SessionReadOnly);
}

#[test]
fn always_authenticate_needs_context_specific_login() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "ctx");
    let s = user_session(&p, slot);
    let public = [Attribute::ModulusBits(2048.into())];
    let private = [Attribute::AlwaysAuthenticate(true), Attribute::Sign(true)];
    let (pubk, privk) = s
        .generate_key_pair(&Mechanism::RsaPkcsKeyPairGen, &public, &private)
        .unwrap();
    s.sign_init(&Mechanism::Sha256RsaPkcs, privk).unwrap();
    let r = Raw::load();
    unsafe {
        let mut sig = [0u8; 256];
        let mut len = 256;
        let sign = r.f.C_Sign.unwrap();
        assert_eq!(
            sign(
                s.handle(),
                b"x".as_ptr() as *mut u8,
                1,
                sig.as_mut_ptr(),
                &mut len
            ),
            cryptoki_sys::CKR_USER_NOT_LOGGED_IN
        );
    }
    s.sign_init(&Mechanism::Sha256RsaPkcs, privk).unwrap();
    assert_eq!(
        rv(s.login(UserType::ContextSpecific, Some(&pin("wrong")))
            .unwrap_err()),
        RvError::PinIncorrect
    );
    s.login(UserType::ContextSpecific, Some(&pin(USER_PIN))).unwrap();
    let sig = s.sign_final_after_context(b"x");
    let pk = rsa_public(&s, pubk);
    use rsa::sha2::{Digest, Sha256};
    pk.verify(
        rsa::pkcs1v15::Pkcs1v15Sign::new::<Sha256>(),
        &Sha256::digest(b"x"),
        &sig,
    )
    .unwrap();
    // Without an operation the context login is for the next C_UnwrapKey or C_DeriveKey
    // (tests/key_policy.rs); a wrong PIN is still refused.
    s.login(UserType::ContextSpecific, Some(&pin(USER_PIN))).unwrap();
    assert_eq!(
        rv(s.login(UserType::ContextSpecific, Some(&pin("wrong")))
            .unwrap_err()),
        RvError::PinIncorrect
    );
}

/// Finishes a sign operation already initialised (cryptoki's `sign` would init again).
trait SignAfterContext {
    fn sign_final_after_context(&self, data: &[u8]) -> Vec<u8>;
}

impl SignAfterContext for cryptoki::session::Session {
    fn sign_final_after_context(&self, data: &[u8]) -> Vec<u8> {
        self.sign_update(data).unwrap();
        self.sign_final().unwrap()
    }
}
