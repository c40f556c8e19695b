//! The attribute policy as a table: every boolean attribute × object class × way an object
//! comes to exist or changes (create, generate, unwrap, copy, set) × value bytes (0, 1, 2,
//! 0xff, empty, two bytes) gets the return code PKCS#11 specifies, and what the call reports
//! is what the object then holds. The expectations are written here from the specification,
//! not read from the module's own tables. Then the holes this table was made for, replayed
//! end to end: a non-extractable key never leaves the token.

mod common;

use common::*;
use cryptoki::session::UserType;
use cryptoki::types::AuthPin;
use cryptoki_sys::*;
use rsa::traits::{PrivateKeyParts, PublicKeyParts};
use std::ptr::null_mut;

const BOOLS: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_TOKEN,
    CKA_PRIVATE,
    CKA_MODIFIABLE,
    CKA_COPYABLE,
    CKA_DESTROYABLE,
    CKA_DERIVE,
    CKA_LOCAL,
    CKA_ENCRYPT,
    CKA_DECRYPT,
    CKA_SIGN,
    CKA_VERIFY,
    CKA_SIGN_RECOVER,
    CKA_VERIFY_RECOVER,
    CKA_WRAP,
    CKA_UNWRAP,
    CKA_TRUSTED,
    CKA_SENSITIVE,
    CKA_EXTRACTABLE,
    CKA_ALWAYS_SENSITIVE,
    CKA_NEVER_EXTRACTABLE,
    CKA_WRAP_WITH_TRUSTED,
    CKA_ALWAYS_AUTHENTICATE,
];

/// The value bytes tried; only the first two are booleans.
const VALUES: &[&[u8]] = &[&[0], &[1], &[2], &[0xff], &[], &[1, 0]];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Secret,
    Private,
    Public,
    Certificate,
    Data,
}

const CLASSES: &[Class] = &[
    Class::Secret,
    Class::Private,
    Class::Public,
    Class::Certificate,
    Class::Data,
];

/// Which boolean attributes an object of the class has (PKCS#11 3.0 §4.4-4.10).
fn has(class: Class, t: CK_ATTRIBUTE_TYPE) -> bool {
    let common = [
        CKA_TOKEN,
        CKA_PRIVATE,
        CKA_MODIFIABLE,
        CKA_COPYABLE,
        CKA_DESTROYABLE,
    ];
    let key = [CKA_DERIVE, CKA_LOCAL];
    let public = [CKA_ENCRYPT, CKA_VERIFY, CKA_VERIFY_RECOVER, CKA_WRAP, CKA_TRUSTED];
    let private = [
        CKA_SENSITIVE,
        CKA_DECRYPT,
        CKA_SIGN,
        CKA_SIGN_RECOVER,
        CKA_UNWRAP,
        CKA_EXTRACTABLE,
        CKA_ALWAYS_SENSITIVE,
        CKA_NEVER_EXTRACTABLE,
        CKA_WRAP_WITH_TRUSTED,
        CKA_ALWAYS_AUTHENTICATE,
    ];
    let secret = [
        CKA_SENSITIVE,
        CKA_ENCRYPT,
        CKA_DECRYPT,
        CKA_SIGN,
        CKA_VERIFY,
        CKA_WRAP,
        CKA_UNWRAP,
        CKA_EXTRACTABLE,
        CKA_ALWAYS_SENSITIVE,
        CKA_NEVER_EXTRACTABLE,
        CKA_WRAP_WITH_TRUSTED,
        CKA_TRUSTED,
    ];
    common.contains(&t)
        || match class {
            Class::Secret => key.contains(&t) || secret.contains(&t),
            Class::Private => key.contains(&t) || private.contains(&t),
            Class::Public => key.contains(&t) || public.contains(&t),
            Class::Certificate => t == CKA_TRUSTED,
            Class::Data => false,
        }
}

/// Set by the token alone: no template may name them.
fn token_sets(t: CK_ATTRIBUTE_TYPE) -> bool {
    matches!(t, CKA_LOCAL | CKA_ALWAYS_SENSITIVE | CKA_NEVER_EXTRACTABLE)
}

/// What a template value `v` of `t` at creation (create, generate, unwrap) must give, for a
/// normal user. Session objects, except where `t` is CKA_TOKEN.
fn expect_new(class: Class, t: CK_ATTRIBUTE_TYPE, v: &[u8]) -> CK_RV {
    if v != [0] && v != [1] {
        return CKR_ATTRIBUTE_VALUE_INVALID;
    }
    if !has(class, t) {
        return CKR_ATTRIBUTE_TYPE_INVALID;
    }
    if token_sets(t) {
        return CKR_ATTRIBUTE_READ_ONLY;
    }
    // Only the SO may make anything trusted.
    if t == CKA_TRUSTED && v == [1] {
        return CKR_ATTRIBUTE_READ_ONLY;
    }
    CKR_OK
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    Set,
    Copy,
}

/// What changing `t` from `from` to `to` by `how` must give on a modifiable, copyable object.
fn expect_change(class: Class, t: CK_ATTRIBUTE_TYPE, from: u8, to: &[u8], how: How) -> CK_RV {
    if to != [0] && to != [1] {
        return CKR_ATTRIBUTE_VALUE_INVALID;
    }
    let to = to[0];
    // Guards on the object itself come before the template.
    if how == How::Copy && t == CKA_COPYABLE && from == 0 {
        return CKR_ACTION_PROHIBITED;
    }
    if how == How::Set && t == CKA_MODIFIABLE && from == 0 {
        return CKR_ACTION_PROHIBITED;
    }
    if !has(class, t) {
        return CKR_ATTRIBUTE_TYPE_INVALID;
    }
    if from == to {
        return CKR_OK;
    }
    match t {
        // One way only, once the object exists.
        CKA_EXTRACTABLE | CKA_COPYABLE | CKA_DESTROYABLE if to == 0 => CKR_OK,
        CKA_MODIFIABLE if to == 0 && how == How::Copy => CKR_OK,
        CKA_SENSITIVE | CKA_WRAP_WITH_TRUSTED | CKA_ALWAYS_AUTHENTICATE if to == 1 => CKR_OK,
        CKA_EXTRACTABLE
        | CKA_COPYABLE
        | CKA_DESTROYABLE
        | CKA_MODIFIABLE
        | CKA_SENSITIVE
        | CKA_WRAP_WITH_TRUSTED
        | CKA_ALWAYS_AUTHENTICATE => CKR_ATTRIBUTE_READ_ONLY,
        // Only the SO makes things trusted; anyone who may change the object may untrust it.
        CKA_TRUSTED if to == 1 => CKR_ATTRIBUTE_READ_ONLY,
        CKA_TRUSTED => CKR_OK,
        CKA_TOKEN | CKA_PRIVATE if how == How::Set => CKR_ATTRIBUTE_READ_ONLY,
        CKA_TOKEN | CKA_PRIVATE => CKR_OK,
        CKA_LOCAL | CKA_ALWAYS_SENSITIVE | CKA_NEVER_EXTRACTABLE => CKR_ATTRIBUTE_READ_ONLY,
        // Usage flags change freely.
        _ => CKR_OK,
    }
}

/// An owned raw template: values live as long as the attribute array.
struct Tpl {
    values: Vec<Vec<u8>>,
    types: Vec<CK_ATTRIBUTE_TYPE>,
    attrs: Vec<CK_ATTRIBUTE>,
}

impl Tpl {
    fn new(pairs: Vec<(CK_ATTRIBUTE_TYPE, Vec<u8>)>) -> Tpl {
        let (types, values): (Vec<_>, Vec<_>) = pairs.into_iter().unzip();
        let mut t = Tpl {
            values,
            types,
            attrs: vec![],
        };
        t.attrs = t
            .types
            .iter()
            .zip(t.values.iter_mut())
            .map(|(ty, v)| CK_ATTRIBUTE {
                type_: *ty,
                pValue: if v.is_empty() {
                    null_mut()
                } else {
                    v.as_mut_ptr() as *mut _
                },
                ulValueLen: v.len() as CK_ULONG,
            })
            .collect();
        t
    }
    fn ptr(&mut self) -> *mut CK_ATTRIBUTE {
        self.attrs.as_mut_ptr()
    }
    fn len(&self) -> CK_ULONG {
        self.attrs.len() as CK_ULONG
    }
}

fn ul(v: CK_ULONG) -> Vec<u8> {
    v.to_ne_bytes().to_vec()
}

/// Adds or replaces `t` in a template.
fn with(
    mut pairs: Vec<(CK_ATTRIBUTE_TYPE, Vec<u8>)>,
    t: CK_ATTRIBUTE_TYPE,
    v: &[u8],
) -> Vec<(CK_ATTRIBUTE_TYPE, Vec<u8>)> {
    pairs.retain(|(x, _)| *x != t);
    pairs.push((t, v.to_vec()));
    pairs
}

struct Fixture {
    r: Raw,
    s: CK_SESSION_HANDLE,
    key: rsa::PrivateKey,
    kek: CK_OBJECT_HANDLE,
    wrapped: Vec<u8>,
}

impl Fixture {
    /// A complete template for a session object of `class`.
    fn base(&self, class: Class) -> Vec<(CK_ATTRIBUTE_TYPE, Vec<u8>)> {
        let k = &self.key;
        let n = be(k.n().as_ref());
        let e = be(k.e());
        let mut t = vec![(CKA_TOKEN, vec![0])];
        match class {
            Class::Secret => t.extend([
                (CKA_CLASS, ul(CKO_SECRET_KEY)),
                (CKA_KEY_TYPE, ul(CKK_AES)),
                (CKA_VALUE, vec![7; 16]),
            ]),
            Class::Private => t.extend([
                (CKA_CLASS, ul(CKO_PRIVATE_KEY)),
                (CKA_KEY_TYPE, ul(CKK_RSA)),
                (CKA_MODULUS, n),
                (CKA_PUBLIC_EXPONENT, e),
                (CKA_PRIVATE_EXPONENT, be(k.d())),
                (CKA_PRIME_1, be(k.primes()[0].as_ref())),
                (CKA_PRIME_2, be(k.primes()[1].as_ref())),
            ]),
            Class::Public => t.extend([
                (CKA_CLASS, ul(CKO_PUBLIC_KEY)),
                (CKA_KEY_TYPE, ul(CKK_RSA)),
                (CKA_MODULUS, n),
                (CKA_PUBLIC_EXPONENT, e),
            ]),
            Class::Certificate => t.extend([
                (CKA_CLASS, ul(CKO_CERTIFICATE)),
                (CKA_CERTIFICATE_TYPE, ul(CKC_X_509)),
                (CKA_VALUE, b"not parsed by the token".to_vec()),
            ]),
            Class::Data => t.extend([(CKA_CLASS, ul(CKO_DATA)), (CKA_VALUE, b"data".to_vec())]),
        }
        t
    }

    fn create(
        &self,
        s: CK_SESSION_HANDLE,
        pairs: Vec<(CK_ATTRIBUTE_TYPE, Vec<u8>)>,
    ) -> (CK_RV, CK_OBJECT_HANDLE) {
        let mut t = Tpl::new(pairs);
        let mut h = 0;
        let rv = unsafe { (self.r.f.C_CreateObject.unwrap())(s, t.ptr(), t.len(), &mut h) };
        (rv, h)
    }

    /// A key made by the token's own generation, `pairs` in the template of the half of
    /// class `class` (the other half gets an empty template).
    fn generate(&self, class: Class, pairs: Vec<(CK_ATTRIBUTE_TYPE, Vec<u8>)>) -> (CK_RV, CK_OBJECT_HANDLE) {
        let mut h = 0;
        unsafe {
            if class == Class::Secret {
                let mut t = Tpl::new(with(pairs, CKA_VALUE_LEN, &ul(16)));
                let mut m = raw_mech::<u8>(CKM_AES_KEY_GEN, None);
                let rv = (self.r.f.C_GenerateKey.unwrap())(self.s, &mut m, t.ptr(), t.len(), &mut h);
                return (rv, h);
            }
            let mut public = vec![(CKA_MODULUS_BITS, ul(1024)), (CKA_TOKEN, vec![0])];
            let mut private = vec![(CKA_TOKEN, vec![0])];
            for (t, v) in pairs {
                let half = if class == Class::Public {
                    &mut public
                } else {
                    &mut private
                };
                *half = with(std::mem::take(half), t, &v);
            }
            let (mut pt, mut st) = (Tpl::new(public), Tpl::new(private));
            let mut m = raw_mech::<u8>(CKM_RSA_PKCS_KEY_PAIR_GEN, None);
            let (mut ph, mut sh) = (0, 0);
            let rv = (self.r.f.C_GenerateKeyPair.unwrap())(
                self.s,
                &mut m,
                pt.ptr(),
                pt.len(),
                st.ptr(),
                st.len(),
                &mut ph,
                &mut sh,
            );
            (rv, if class == Class::Public { ph } else { sh })
        }
    }

    fn unwrap(&self, pairs: Vec<(CK_ATTRIBUTE_TYPE, Vec<u8>)>) -> (CK_RV, CK_OBJECT_HANDLE) {
        let mut t = Tpl::new(pairs);
        let mut m = raw_mech::<u8>(CKM_AES_KEY_WRAP_PAD, None);
        let mut wrapped = self.wrapped.clone();
        let mut h = 0;
        let rv = unsafe {
            (self.r.f.C_UnwrapKey.unwrap())(
                self.s,
                &mut m,
                self.kek,
                wrapped.as_mut_ptr(),
                wrapped.len() as CK_ULONG,
                t.ptr(),
                t.len(),
                &mut h,
            )
        };
        (rv, h)
    }

    fn copy(
        &self,
        h: CK_OBJECT_HANDLE,
        pairs: Vec<(CK_ATTRIBUTE_TYPE, Vec<u8>)>,
    ) -> (CK_RV, CK_OBJECT_HANDLE) {
        let mut t = Tpl::new(pairs);
        let mut new = 0;
        let rv = unsafe { (self.r.f.C_CopyObject.unwrap())(self.s, h, t.ptr(), t.len(), &mut new) };
        (rv, new)
    }

    fn set(&self, h: CK_OBJECT_HANDLE, pairs: Vec<(CK_ATTRIBUTE_TYPE, Vec<u8>)>) -> CK_RV {
        let mut t = Tpl::new(pairs);
        unsafe { (self.r.f.C_SetAttributeValue.unwrap())(self.s, h, t.ptr(), t.len()) }
    }

    /// The value of `t`, or the return code that refused it.
    fn get(&self, h: CK_OBJECT_HANDLE, t: CK_ATTRIBUTE_TYPE) -> Result<Vec<u8>, CK_RV> {
        let mut buf = vec![0u8; 4096];
        let mut a = CK_ATTRIBUTE {
            type_: t,
            pValue: buf.as_mut_ptr() as *mut _,
            ulValueLen: buf.len() as CK_ULONG,
        };
        let rv = unsafe { (self.r.f.C_GetAttributeValue.unwrap())(self.s, h, &mut a, 1) };
        if rv != CKR_OK {
            return Err(rv);
        }
        buf.truncate(a.ulValueLen as usize);
        Ok(buf)
    }

    fn destroy(&self, h: CK_OBJECT_HANDLE) {
        unsafe { (self.r.f.C_DestroyObject.unwrap())(self.s, h) };
    }

    fn wrap(&self, wrapping: CK_OBJECT_HANDLE, key: CK_OBJECT_HANDLE) -> Result<Vec<u8>, CK_RV> {
        let mut m = raw_mech::<u8>(CKM_AES_KEY_WRAP_PAD, None);
        let mut out = vec![0u8; 1024];
        let mut len = out.len() as CK_ULONG;
        let rv = unsafe {
            (self.r.f.C_WrapKey.unwrap())(self.s, &mut m, wrapping, key, out.as_mut_ptr(), &mut len)
        };
        if rv != CKR_OK {
            return Err(rv);
        }
        out.truncate(len as usize);
        Ok(out)
    }
}

fn fixture() -> (
    TestEnv,
    cryptoki::context::Pkcs11,
    cryptoki::session::Session,
    Fixture,
) {
    let env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "policy");
    let session = user_session(&p, slot);
    let mut rng = rand_core::UnwrapErr(getrandom::SysRng);
    let key = rsa::PrivateKey::new(&mut rng, 1024).unwrap();
    let mut f = Fixture {
        r: Raw::load(),
        s: session.handle(),
        key,
        kek: 0,
        wrapped: vec![],
    };
    let (rv, kek) = f.create(
        f.s,
        vec![
            (CKA_CLASS, ul(CKO_SECRET_KEY)),
            (CKA_KEY_TYPE, ul(CKK_AES)),
            (CKA_VALUE, vec![9; 32]),
            (CKA_WRAP, vec![1]),
            (CKA_UNWRAP, vec![1]),
        ],
    );
    assert_eq!(rv, CKR_OK);
    let (rv, plain) = f.create(f.s, with(f.base(Class::Secret), CKA_EXTRACTABLE, &[1]));
    assert_eq!(rv, CKR_OK);
    f.kek = kek;
    f.wrapped = f.wrap(kek, plain).expect("an extractable key wraps");
    (env, p, session, f)
}

fn name(t: CK_ATTRIBUTE_TYPE) -> String {
    format!("{:?}", cryptoki::object::AttributeType::try_from(t).unwrap())
}

#[test]
fn every_boolean_attribute_at_creation() {
    let (_env, _p, _session, f) = fixture();
    let mut failures = vec![];
    let mut cases = 0;
    for &class in CLASSES {
        for &t in BOOLS {
            for &v in VALUES {
                let mut ways = vec![("create", f.create(f.s, with(f.base(class), t, v)))];
                if matches!(class, Class::Secret | Class::Private | Class::Public) {
                    ways.push(("generate", f.generate(class, vec![(t, v.to_vec())])));
                }
                if class == Class::Secret {
                    let tpl = vec![
                        (CKA_CLASS, ul(CKO_SECRET_KEY)),
                        (CKA_KEY_TYPE, ul(CKK_AES)),
                        (CKA_TOKEN, vec![0]),
                    ];
                    ways.push(("unwrap", f.unwrap(with(tpl, t, v))));
                }
                for (way, (rv, h)) in ways {
                    cases += 1;
                    let want = expect_new(class, t, v);
                    if rv != want {
                        failures.push(format!(
                            "{way} {class:?} {}={v:?}: 0x{rv:x}, want 0x{want:x}",
                            name(t)
                        ));
                    }
                    if rv == CKR_OK {
                        // What was accepted is what the object holds.
                        let got = f.get(h, t);
                        if got.as_deref() != Ok(v) {
                            failures.push(format!("{way} {class:?} {}={v:?}: object holds {got:?}", name(t)));
                        }
                        f.destroy(h);
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} cases wrong:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_boolean_attribute_changed_by_set_and_copy() {
    let (_env, _p, _session, f) = fixture();
    let mut failures = vec![];
    let mut cases = 0;
    for &class in CLASSES {
        for &t in BOOLS {
            for from in [0u8, 1] {
                for &to in VALUES {
                    for how in [How::Set, How::Copy] {
                        // The object starts with `t` = `from` where a template may say so;
                        // otherwise with what the token gave it.
                        let settable = has(class, t) && !token_sets(t) && !(t == CKA_TRUSTED && from == 1);
                        let base = if settable {
                            with(f.base(class), t, &[from])
                        } else {
                            f.base(class)
                        };
                        let (rv, h) = f.create(f.s, base);
                        assert_eq!(rv, CKR_OK, "{class:?} {}={from}", name(t));
                        let from = match f.get(h, t) {
                            Ok(v) => v[0],
                            Err(_) => from,
                        };
                        cases += 1;
                        let template = vec![(t, to.to_vec())];
                        let (rv, target) = match how {
                            How::Set => (f.set(h, template), h),
                            How::Copy => f.copy(h, template),
                        };
                        let want = expect_change(class, t, from, to, how);
                        let case = format!("{how:?} {class:?} {} {from}->{to:?}", name(t));
                        if rv != want {
                            failures.push(format!("{case}: 0x{rv:x}, want 0x{want:x}"));
                        }
                        // The original is unchanged unless a set succeeded; a copy holds the
                        // new value.
                        let original = f.get(h, t).ok();
                        let unchanged = if has(class, t) { Some(vec![from]) } else { None };
                        let expect_original = if rv == CKR_OK && how == How::Set {
                            Some(to.to_vec())
                        } else {
                            unchanged
                        };
                        if original != expect_original {
                            failures.push(format!("{case}: original holds {original:?}"));
                        }
                        if rv == CKR_OK && how == How::Copy {
                            let got = f.get(target, t);
                            if got.as_deref() != Ok(to) {
                                failures.push(format!("{case}: copy holds {got:?}"));
                            }
                            f.destroy(target);
                        }
                        // Unmodifiable, undestroyable objects stay in the session: fine.
                        f.destroy(h);
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} cases wrong:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The security officer, and only the SO, makes objects trusted.
#[test]
fn only_the_security_officer_sets_cka_trusted() {
    let (_env, p, session, f) = fixture();
    // A user may not, at creation or later.
    let (rv, _) = f.create(f.s, with(f.base(Class::Public), CKA_TRUSTED, &[1]));
    assert_eq!(rv, CKR_ATTRIBUTE_READ_ONLY);
    let (rv, pk) = f.create(f.s, f.base(Class::Public));
    assert_eq!(rv, CKR_OK);
    assert_eq!(f.set(pk, vec![(CKA_TRUSTED, vec![1])]), CKR_ATTRIBUTE_READ_ONLY);
    // The SO may, on a public token object it creates or one that exists.
    session.logout().unwrap();
    let slot = session.get_session_info().unwrap().slot_id();
    let so = p.open_rw_session(slot).unwrap();
    so.login(UserType::So, Some(&AuthPin::new(SO_PIN.into())))
        .unwrap();
    let (rv, trusted) = f.create(
        so.handle(),
        with(with(f.base(Class::Public), CKA_TRUSTED, &[1]), CKA_TOKEN, &[1]),
    );
    assert_eq!(rv, CKR_OK);
    let (rv, _) = f.create(
        so.handle(),
        with(with(f.base(Class::Public), CKA_TRUSTED, &[2]), CKA_TOKEN, &[1]),
    );
    assert_eq!(rv, CKR_ATTRIBUTE_VALUE_INVALID);
    let mut t = Tpl::new(vec![(CKA_TRUSTED, vec![1])]);
    let rv = unsafe { (f.r.f.C_SetAttributeValue.unwrap())(so.handle(), pk, t.ptr(), t.len()) };
    assert_eq!(rv, CKR_OK);
    let mut buf = [9u8; 1];
    let mut a = CK_ATTRIBUTE {
        type_: CKA_TRUSTED,
        pValue: buf.as_mut_ptr() as *mut _,
        ulValueLen: 1,
    };
    let rv = unsafe { (f.r.f.C_GetAttributeValue.unwrap())(so.handle(), trusted, &mut a, 1) };
    assert_eq!((rv, buf), (CKR_OK, [1]));
}

/// The reported attack: CKA_EXTRACTABLE "true" written as 0x02 on a sensitive,
/// non-extractable key, then C_WrapKey with a key the user made; the same through
/// C_CopyObject, and for an RSA key whose private exponent would then be readable.
#[test]
fn a_non_extractable_key_never_leaves_the_token() {
    let (_env, _p, _session, f) = fixture();
    for v in [&[1u8][..], &[2], &[0xff], &[1, 0], &[]] {
        let (rv, aes) = f.create(f.s, with(f.base(Class::Secret), CKA_EXTRACTABLE, &[0]));
        assert_eq!(rv, CKR_OK);
        let want = if v == [1] {
            CKR_ATTRIBUTE_READ_ONLY
        } else {
            CKR_ATTRIBUTE_VALUE_INVALID
        };
        assert_eq!(f.set(aes, vec![(CKA_EXTRACTABLE, v.to_vec())]), want, "set {v:?}");
        assert_eq!(
            f.wrap(f.kek, aes),
            Err(CKR_KEY_UNEXTRACTABLE),
            "wrap after set {v:?}"
        );
        let (rv, copy) = f.copy(aes, vec![(CKA_EXTRACTABLE, v.to_vec())]);
        assert_eq!(rv, want, "copy {v:?}");
        if rv == CKR_OK {
            assert_eq!(f.wrap(f.kek, copy), Err(CKR_KEY_UNEXTRACTABLE));
        }
        assert_eq!(f.get(aes, CKA_VALUE), Err(CKR_ATTRIBUTE_SENSITIVE));
        assert_eq!(f.get(aes, CKA_NEVER_EXTRACTABLE).unwrap(), [0]);

        let rsa = with(
            with(f.base(Class::Private), CKA_SENSITIVE, &[0]),
            CKA_EXTRACTABLE,
            &[0],
        );
        let (rv, rsa) = f.create(f.s, rsa);
        assert_eq!(rv, CKR_OK);
        assert_eq!(f.set(rsa, vec![(CKA_EXTRACTABLE, v.to_vec())]), want);
        let (rv, _) = f.copy(rsa, vec![(CKA_EXTRACTABLE, v.to_vec())]);
        assert_eq!(rv, want);
        for t in [
            CKA_PRIVATE_EXPONENT,
            CKA_PRIME_1,
            CKA_PRIME_2,
            CKA_EXPONENT_1,
            CKA_EXPONENT_2,
            CKA_COEFFICIENT,
        ] {
            assert_eq!(
                f.get(rsa, t),
                Err(CKR_ATTRIBUTE_SENSITIVE),
                "{} after {v:?}",
                name(t)
            );
        }
    }
    // A generated key is never-extractable from birth and stays so.
    let (rv, k) = f.generate(Class::Secret, vec![(CKA_EXTRACTABLE, vec![0])]);
    assert_eq!(rv, CKR_OK);
    assert_eq!(f.get(k, CKA_NEVER_EXTRACTABLE).unwrap(), [1]);
    assert_eq!(
        f.set(k, vec![(CKA_EXTRACTABLE, vec![2])]),
        CKR_ATTRIBUTE_VALUE_INVALID
    );
    assert_eq!(f.wrap(f.kek, k), Err(CKR_KEY_UNEXTRACTABLE));
}

/// A key made to need a context-specific login keeps needing it.
#[test]
fn always_authenticate_cannot_be_cleared() {
    let (_env, _p, _session, f) = fixture();
    let (rv, k) = f.create(f.s, with(f.base(Class::Private), CKA_ALWAYS_AUTHENTICATE, &[1]));
    assert_eq!(rv, CKR_OK);
    for v in [&[0u8][..], &[2], &[]] {
        assert_ne!(
            f.set(k, vec![(CKA_ALWAYS_AUTHENTICATE, v.to_vec())]),
            CKR_OK,
            "{v:?}"
        );
        let (rv, _) = f.copy(k, vec![(CKA_ALWAYS_AUTHENTICATE, v.to_vec())]);
        assert_ne!(rv, CKR_OK, "{v:?}");
    }
    // Signing still needs the context-specific login: without it, C_Sign refuses.
    let mut m = raw_mech::<u8>(CKM_SHA256_RSA_PKCS, None);
    unsafe {
        assert_eq!((f.r.f.C_SignInit.unwrap())(f.s, &mut m, k), CKR_OK);
        let mut data = *b"data";
        let mut sig = vec![0u8; 256];
        let mut len = sig.len() as CK_ULONG;
        let rv = (f.r.f.C_Sign.unwrap())(f.s, data.as_mut_ptr(), 4, sig.as_mut_ptr(), &mut len);
        assert_eq!(rv, CKR_USER_NOT_LOGGED_IN);
    }
}

/// Private and secret keys stored on the token are private: the rule is the same in every
/// process, so a copy made public is refused rather than usable only where it was made.
#[test]
fn token_keys_are_private() {
    let (_env, _p, _session, f) = fixture();
    for class in [Class::Private, Class::Secret] {
        let tpl = with(with(f.base(class), CKA_TOKEN, &[1]), CKA_PRIVATE, &[0]);
        assert_eq!(f.create(f.s, tpl).0, CKR_TEMPLATE_INCONSISTENT, "{class:?}");
        let (rv, k) = f.create(f.s, with(f.base(class), CKA_TOKEN, &[1]));
        assert_eq!(rv, CKR_OK);
        assert_eq!(
            f.copy(k, vec![(CKA_PRIVATE, vec![0])]).0,
            CKR_TEMPLATE_INCONSISTENT
        );
        // A session copy may be public: it lives in this process only.
        let (rv, session_copy) = f.copy(k, vec![(CKA_PRIVATE, vec![0]), (CKA_TOKEN, vec![0])]);
        assert_eq!(rv, CKR_OK);
        assert_eq!(
            f.copy(session_copy, vec![(CKA_TOKEN, vec![1])]).0,
            CKR_TEMPLATE_INCONSISTENT
        );
        f.destroy(k);
    }
    let (rv, _) = f.generate(Class::Secret, vec![(CKA_TOKEN, vec![1]), (CKA_PRIVATE, vec![0])]);
    assert_eq!(rv, CKR_TEMPLATE_INCONSISTENT);
    let (rv, _) = f.generate(Class::Private, vec![(CKA_TOKEN, vec![1]), (CKA_PRIVATE, vec![0])]);
    assert_eq!(rv, CKR_TEMPLATE_INCONSISTENT);
}

/// Without a login, an R/W session makes public token objects, never a private key, and a
/// key pair is made whole or not at all.
#[test]
fn key_pair_without_login_is_refused_whole() {
    let (_env, p, session, f) = fixture();
    let slot = session.get_session_info().unwrap().slot_id();
    session.logout().unwrap();
    let public = p.open_rw_session(slot).unwrap();
    let count = |s: &cryptoki::session::Session| s.find_objects(&[]).unwrap().len();
    let before = count(&public);
    let g = Fixture {
        r: Raw::load(),
        s: public.handle(),
        key: f.key.clone(),
        kek: 0,
        wrapped: vec![],
    };
    for private_template in [
        vec![(CKA_TOKEN, vec![1])],
        vec![(CKA_TOKEN, vec![1]), (CKA_PRIVATE, vec![1])],
    ] {
        let (rv, _) = g.generate(Class::Private, private_template);
        assert_eq!(rv, CKR_USER_NOT_LOGGED_IN);
        assert_eq!(count(&public), before, "no half of the pair is left behind");
    }
    // Public objects are allowed.
    let (rv, h) = g.create(g.s, with(f.base(Class::Public), CKA_TOKEN, &[1]));
    assert_eq!(rv, CKR_OK);
    assert_eq!(g.get(h, CKA_TOKEN).unwrap(), [1]);
    let (rv, _) = g.create(g.s, with(f.base(Class::Secret), CKA_TOKEN, &[1]));
    assert_eq!(rv, CKR_USER_NOT_LOGGED_IN);
}

/// A raw `CK_ATTRIBUTE` array as the bytes of an attribute-array value; `keep` owns the
/// nested values.
fn array_value(entries: &mut [(CK_ATTRIBUTE_TYPE, Vec<u8>)]) -> Vec<CK_ATTRIBUTE> {
    entries
        .iter_mut()
        .map(|(t, v)| CK_ATTRIBUTE {
            type_: *t,
            pValue: v.as_mut_ptr() as *mut _,
            ulValueLen: v.len() as CK_ULONG,
        })
        .collect()
}

fn as_bytes(a: &[CK_ATTRIBUTE]) -> Vec<u8> {
    // SAFETY (test): plain-old-data structs viewed as bytes; the pointers inside stay valid
    // while the caller keeps the nested values.
    unsafe { std::slice::from_raw_parts(a.as_ptr() as *const u8, std::mem::size_of_val(a)) }.to_vec()
}

/// CKA_WRAP_TEMPLATE and CKA_UNWRAP_TEMPLATE: accepted as attribute arrays, read back by the
/// two-call rule, fixed once made, and enforced by C_WrapKey and C_UnwrapKey.
#[test]
fn wrap_and_unwrap_templates_are_kept_and_enforced() {
    let (_env, _p, _session, f) = fixture();
    let mut wrap_rule = vec![(CKA_SENSITIVE, vec![1])];
    let mut unwrap_rule = vec![(CKA_EXTRACTABLE, vec![0]), (CKA_LABEL, b"imposed".to_vec())];
    let (wrap_arr, unwrap_arr) = (array_value(&mut wrap_rule), array_value(&mut unwrap_rule));
    let kek_tpl = vec![
        (CKA_CLASS, ul(CKO_SECRET_KEY)),
        (CKA_KEY_TYPE, ul(CKK_AES)),
        (CKA_VALUE, vec![5; 32]),
        (CKA_WRAP, vec![1]),
        (CKA_UNWRAP, vec![1]),
        (CKA_WRAP_TEMPLATE, as_bytes(&wrap_arr)),
        (CKA_UNWRAP_TEMPLATE, as_bytes(&unwrap_arr)),
    ];
    let (rv, kek) = f.create(f.s, kek_tpl.clone());
    assert_eq!(rv, CKR_OK);

    // Read back: size, then types and lengths, then values.
    let entry = std::mem::size_of::<CK_ATTRIBUTE>() as CK_ULONG;
    let mut a = CK_ATTRIBUTE {
        type_: CKA_UNWRAP_TEMPLATE,
        pValue: null_mut(),
        ulValueLen: 0,
    };
    unsafe {
        assert_eq!((f.r.f.C_GetAttributeValue.unwrap())(f.s, kek, &mut a, 1), CKR_OK);
        assert_eq!(a.ulValueLen, 2 * entry);
        let mut out = [CK_ATTRIBUTE {
            type_: 0,
            pValue: null_mut(),
            ulValueLen: 0,
        }; 2];
        a.pValue = out.as_mut_ptr() as *mut _;
        assert_eq!((f.r.f.C_GetAttributeValue.unwrap())(f.s, kek, &mut a, 1), CKR_OK);
        let mut got: Vec<(CK_ATTRIBUTE_TYPE, CK_ULONG)> =
            out.iter().map(|e| (e.type_, e.ulValueLen)).collect();
        got.sort();
        assert_eq!(got, vec![(CKA_LABEL, 7), (CKA_EXTRACTABLE, 1)]);
        let mut bufs = [vec![0u8; 16], vec![0u8; 16]];
        for (e, b) in out.iter_mut().zip(bufs.iter_mut()) {
            e.pValue = b.as_mut_ptr() as *mut _;
            e.ulValueLen = b.len() as CK_ULONG;
        }
        assert_eq!((f.r.f.C_GetAttributeValue.unwrap())(f.s, kek, &mut a, 1), CKR_OK);
        for (e, b) in out.iter().zip(bufs.iter()) {
            let v = &b[..e.ulValueLen as usize];
            match e.type_ {
                CKA_LABEL => assert_eq!(v, b"imposed"),
                CKA_EXTRACTABLE => assert_eq!(v, [0]),
                t => panic!("unexpected nested attribute 0x{t:x}"),
            }
        }
        // A buffer too small for the array.
        a.ulValueLen = entry;
        assert_eq!(
            (f.r.f.C_GetAttributeValue.unwrap())(f.s, kek, &mut a, 1),
            CKR_BUFFER_TOO_SMALL
        );
    }

    // Fixed once made.
    assert_eq!(
        f.set(kek, vec![(CKA_WRAP_TEMPLATE, vec![])]),
        CKR_ATTRIBUTE_READ_ONLY
    );

    // C_WrapKey: only keys matching the wrap template leave.
    let (rv, loose) = f.create(
        f.s,
        with(
            with(f.base(Class::Secret), CKA_EXTRACTABLE, &[1]),
            CKA_SENSITIVE,
            &[0],
        ),
    );
    assert_eq!(rv, CKR_OK);
    assert_eq!(f.wrap(kek, loose), Err(CKR_KEY_NOT_WRAPPABLE));
    let (rv, tight) = f.create(
        f.s,
        with(
            with(f.base(Class::Secret), CKA_EXTRACTABLE, &[1]),
            CKA_SENSITIVE,
            &[1],
        ),
    );
    assert_eq!(rv, CKR_OK);
    let wrapped = f
        .wrap(kek, tight)
        .expect("a key matching the wrap template wraps");

    // C_UnwrapKey: the unwrap template is imposed, and a template contradicting it refused.
    let g = Fixture {
        r: Raw::load(),
        s: f.s,
        key: f.key.clone(),
        kek,
        wrapped,
    };
    let base = vec![(CKA_CLASS, ul(CKO_SECRET_KEY)), (CKA_KEY_TYPE, ul(CKK_AES))];
    assert_eq!(
        g.unwrap(with(base.clone(), CKA_EXTRACTABLE, &[1])).0,
        CKR_TEMPLATE_INCONSISTENT
    );
    let (rv, k) = g.unwrap(base);
    assert_eq!(rv, CKR_OK);
    assert_eq!(g.get(k, CKA_LABEL).unwrap(), b"imposed");
    assert_eq!(g.get(k, CKA_EXTRACTABLE).unwrap(), [0]);

    // Malformed arrays: a length that is no whole number of entries, a nested CK_BBOOL of 2,
    // an array inside an array.
    let mut bad_bool = vec![(CKA_SENSITIVE, vec![2])];
    let bad_bool = array_value(&mut bad_bool);
    let mut inner = vec![(CKA_SENSITIVE, vec![1])];
    let inner = array_value(&mut inner);
    let mut nested = vec![(CKA_WRAP_TEMPLATE, as_bytes(&inner))];
    let nested = array_value(&mut nested);
    for bad in [
        as_bytes(&wrap_arr)[..5].to_vec(),
        as_bytes(&bad_bool),
        as_bytes(&nested),
    ] {
        let (rv, _) = f.create(f.s, with(kek_tpl.clone(), CKA_WRAP_TEMPLATE, &bad));
        assert_eq!(rv, CKR_ATTRIBUTE_VALUE_INVALID);
    }
    // Only keys that wrap or unwrap have them.
    let (rv, _) = f.create(
        f.s,
        with(f.base(Class::Data), CKA_WRAP_TEMPLATE, &as_bytes(&wrap_arr)),
    );
    assert_eq!(rv, CKR_ATTRIBUTE_TYPE_INVALID);
}
