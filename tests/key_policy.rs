//! The key-policy holes of issue 29, each as a table through every path that could open it:
//! trusted wrapping keys (copy, set, decrypt, unwrap), `CKA_ALWAYS_AUTHENTICATE` on every use
//! of a private key, `CKA_DERIVE_TEMPLATE` and the sticky attributes on every derivation,
//! `CKA_ALLOWED_MECHANISMS` fixed by set and copy, searches that never compare hidden values,
//! unwrapping by a key that may not decrypt, and small-order Ed25519 public keys; and the
//! holes a review found on 2026-12-07 (a key unwrapped by one that may not decrypt left under
//! the caller's key, CBC-PAD's padding oracle on unwrap, one context login for two uses,
//! `CKA_ALWAYS_AUTHENTICATE` on public objects). Expected codes are written here from the rules
//! in docs/security.md, not read from the module.

mod common;

use common::*;
use cryptoki_sys::*;
use std::ptr::null_mut;

type Pairs = Vec<(CK_ATTRIBUTE_TYPE, Vec<u8>)>;

fn ul(v: CK_ULONG) -> Vec<u8> {
    v.to_ne_bytes().to_vec()
}

/// Adds or replaces `t` in a template.
fn with(mut pairs: Pairs, t: CK_ATTRIBUTE_TYPE, v: &[u8]) -> Pairs {
    pairs.retain(|(x, _)| *x != t);
    pairs.push((t, v.to_vec()));
    pairs
}

/// An owned raw template: values live as long as the attribute array.
struct Tpl {
    _values: Vec<Vec<u8>>,
    attrs: Vec<CK_ATTRIBUTE>,
}

impl Tpl {
    fn new(pairs: Pairs) -> Tpl {
        let (types, mut values): (Vec<_>, Vec<_>) = pairs.into_iter().unzip();
        let attrs = types
            .iter()
            .zip(values.iter_mut())
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
        Tpl {
            _values: values,
            attrs,
        }
    }
}

/// A nested attribute array's bytes, with the values it points to kept alive by `keep`.
fn array(entries: Pairs, keep: &mut Vec<Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    for (t, mut v) in entries {
        let a = CK_ATTRIBUTE {
            type_: t,
            pValue: v.as_mut_ptr() as *mut _,
            ulValueLen: v.len() as CK_ULONG,
        };
        keep.push(v);
        // SAFETY (test): CK_ATTRIBUTE is plain data.
        out.extend_from_slice(unsafe {
            std::slice::from_raw_parts(&a as *const _ as *const u8, std::mem::size_of::<CK_ATTRIBUTE>())
        });
    }
    out
}

/// The module through its raw function list, with one session.
struct T {
    r: Raw,
    s: CK_SESSION_HANDLE,
}

impl T {
    fn create(&self, pairs: Pairs) -> Result<CK_OBJECT_HANDLE, CK_RV> {
        let mut t = Tpl::new(pairs);
        let mut h = 0;
        let rv = unsafe {
            (self.r.f.C_CreateObject.unwrap())(self.s, t.attrs.as_mut_ptr(), t.attrs.len() as _, &mut h)
        };
        if rv == CKR_OK {
            Ok(h)
        } else {
            Err(rv)
        }
    }

    fn copy(&self, h: CK_OBJECT_HANDLE, pairs: Pairs) -> Result<CK_OBJECT_HANDLE, CK_RV> {
        let mut t = Tpl::new(pairs);
        let mut new = 0;
        let rv = unsafe {
            (self.r.f.C_CopyObject.unwrap())(self.s, h, t.attrs.as_mut_ptr(), t.attrs.len() as _, &mut new)
        };
        if rv == CKR_OK {
            Ok(new)
        } else {
            Err(rv)
        }
    }

    fn set(&self, h: CK_OBJECT_HANDLE, pairs: Pairs) -> CK_RV {
        let mut t = Tpl::new(pairs);
        unsafe {
            (self.r.f.C_SetAttributeValue.unwrap())(self.s, h, t.attrs.as_mut_ptr(), t.attrs.len() as _)
        }
    }

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

    fn login(&self, user: CK_USER_TYPE, pin: &str) -> CK_RV {
        unsafe { (self.r.f.C_Login.unwrap())(self.s, user, pin.as_ptr() as *mut u8, pin.len() as _) }
    }

    fn logout(&self) -> CK_RV {
        unsafe { (self.r.f.C_Logout.unwrap())(self.s) }
    }

    fn wrap(
        &self,
        m: &mut CK_MECHANISM,
        wrapping: CK_OBJECT_HANDLE,
        key: CK_OBJECT_HANDLE,
    ) -> Result<Vec<u8>, CK_RV> {
        let mut out = vec![0u8; 4096];
        let mut len = out.len() as CK_ULONG;
        let rv =
            unsafe { (self.r.f.C_WrapKey.unwrap())(self.s, m, wrapping, key, out.as_mut_ptr(), &mut len) };
        if rv != CKR_OK {
            return Err(rv);
        }
        out.truncate(len as usize);
        Ok(out)
    }

    fn unwrap(
        &self,
        m: &mut CK_MECHANISM,
        unwrapping: CK_OBJECT_HANDLE,
        blob: &[u8],
        pairs: Pairs,
    ) -> Result<CK_OBJECT_HANDLE, CK_RV> {
        let mut t = Tpl::new(pairs);
        let mut blob = blob.to_vec();
        let mut h = 0;
        let rv = unsafe {
            (self.r.f.C_UnwrapKey.unwrap())(
                self.s,
                m,
                unwrapping,
                blob.as_mut_ptr(),
                blob.len() as _,
                t.attrs.as_mut_ptr(),
                t.attrs.len() as _,
                &mut h,
            )
        };
        if rv == CKR_OK {
            Ok(h)
        } else {
            Err(rv)
        }
    }

    fn derive(
        &self,
        m: &mut CK_MECHANISM,
        base: CK_OBJECT_HANDLE,
        pairs: Pairs,
    ) -> Result<CK_OBJECT_HANDLE, CK_RV> {
        let mut t = Tpl::new(pairs);
        let mut h = 0;
        let rv = unsafe {
            (self.r.f.C_DeriveKey.unwrap())(self.s, m, base, t.attrs.as_mut_ptr(), t.attrs.len() as _, &mut h)
        };
        if rv == CKR_OK {
            Ok(h)
        } else {
            Err(rv)
        }
    }

    /// C_DecryptInit then C_Decrypt of `data`.
    fn decrypt(&self, m: &mut CK_MECHANISM, key: CK_OBJECT_HANDLE, data: &[u8]) -> Result<Vec<u8>, CK_RV> {
        unsafe {
            let rv = (self.r.f.C_DecryptInit.unwrap())(self.s, m, key);
            if rv != CKR_OK {
                return Err(rv);
            }
            self.decrypt_rest(data)
        }
    }

    /// C_Decrypt of an operation already initialised.
    fn decrypt_rest(&self, data: &[u8]) -> Result<Vec<u8>, CK_RV> {
        let mut data = data.to_vec();
        let mut out = vec![0u8; data.len() + 512];
        let mut len = out.len() as CK_ULONG;
        let rv = unsafe {
            (self.r.f.C_Decrypt.unwrap())(
                self.s,
                data.as_mut_ptr(),
                data.len() as _,
                out.as_mut_ptr(),
                &mut len,
            )
        };
        if rv != CKR_OK {
            return Err(rv);
        }
        out.truncate(len as usize);
        Ok(out)
    }

    fn find(&self, pairs: Pairs) -> Vec<CK_OBJECT_HANDLE> {
        let mut t = Tpl::new(pairs);
        unsafe {
            assert_eq!(
                (self.r.f.C_FindObjectsInit.unwrap())(self.s, t.attrs.as_mut_ptr(), t.attrs.len() as _),
                CKR_OK
            );
            let mut out = vec![0; 64];
            let mut n = 0;
            assert_eq!(
                (self.r.f.C_FindObjects.unwrap())(self.s, out.as_mut_ptr(), 64, &mut n),
                CKR_OK
            );
            assert_eq!((self.r.f.C_FindObjectsFinal.unwrap())(self.s), CKR_OK);
            out.truncate(n as usize);
            out
        }
    }

    fn ec_pair(&self, private: Pairs) -> (CK_OBJECT_HANDLE, CK_OBJECT_HANDLE) {
        let p256 = vec![0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
        let mut pt = Tpl::new(vec![(CKA_EC_PARAMS, p256)]);
        let mut st = Tpl::new(private);
        let mut m = raw_mech::<u8>(CKM_EC_KEY_PAIR_GEN, None);
        let (mut ph, mut sh) = (0, 0);
        let rv = unsafe {
            (self.r.f.C_GenerateKeyPair.unwrap())(
                self.s,
                &mut m,
                pt.attrs.as_mut_ptr(),
                pt.attrs.len() as _,
                st.attrs.as_mut_ptr(),
                st.attrs.len() as _,
                &mut ph,
                &mut sh,
            )
        };
        assert_eq!(rv, CKR_OK);
        (ph, sh)
    }

    /// `data` encrypted with OAEP (`params`) under `public`, by the token.
    fn oaep_encrypt(
        &self,
        params: &mut CK_RSA_PKCS_OAEP_PARAMS,
        public: CK_OBJECT_HANDLE,
        data: &[u8],
    ) -> Vec<u8> {
        let mut m = raw_mech(CKM_RSA_PKCS_OAEP, Some(params));
        let mut data = data.to_vec();
        let mut out = vec![0u8; 512];
        let mut len = out.len() as CK_ULONG;
        unsafe {
            assert_eq!((self.r.f.C_EncryptInit.unwrap())(self.s, &mut m, public), CKR_OK);
            assert_eq!(
                (self.r.f.C_Encrypt.unwrap())(
                    self.s,
                    data.as_mut_ptr(),
                    data.len() as _,
                    out.as_mut_ptr(),
                    &mut len
                ),
                CKR_OK
            );
        }
        out.truncate(len as usize);
        out
    }

    fn rsa_pair(&self, private: Pairs) -> (CK_OBJECT_HANDLE, CK_OBJECT_HANDLE) {
        self.try_rsa_pair(private).unwrap()
    }

    fn try_rsa_pair(&self, private: Pairs) -> Result<(CK_OBJECT_HANDLE, CK_OBJECT_HANDLE), CK_RV> {
        let mut pt = Tpl::new(vec![(CKA_MODULUS_BITS, ul(1024))]);
        let mut st = Tpl::new(private);
        let mut m = raw_mech::<u8>(CKM_RSA_PKCS_KEY_PAIR_GEN, None);
        let (mut ph, mut sh) = (0, 0);
        let rv = unsafe {
            (self.r.f.C_GenerateKeyPair.unwrap())(
                self.s,
                &mut m,
                pt.attrs.as_mut_ptr(),
                pt.attrs.len() as _,
                st.attrs.as_mut_ptr(),
                st.attrs.len() as _,
                &mut ph,
                &mut sh,
            )
        };
        if rv == CKR_OK {
            Ok((ph, sh))
        } else {
            Err(rv)
        }
    }
}

/// OAEP with SHA-256 and no label, the parameters the tables below encrypt and unwrap with.
fn oaep_sha256() -> CK_RSA_PKCS_OAEP_PARAMS {
    CK_RSA_PKCS_OAEP_PARAMS {
        hashAlg: CKM_SHA256,
        mgf: CKG_MGF1_SHA256,
        source: CKZ_DATA_SPECIFIED,
        pSourceData: null_mut(),
        ulSourceDataLen: 0,
    }
}

fn aes(value: &[u8], more: Pairs) -> Pairs {
    let mut t = vec![
        (CKA_CLASS, ul(CKO_SECRET_KEY)),
        (CKA_KEY_TYPE, ul(CKK_AES)),
        (CKA_TOKEN, vec![0]),
        (CKA_VALUE, value.to_vec()),
    ];
    for (a, v) in more {
        t = with(t, a, &v);
    }
    t
}

fn generic() -> Pairs {
    vec![
        (CKA_CLASS, ul(CKO_SECRET_KEY)),
        (CKA_KEY_TYPE, ul(CKK_GENERIC_SECRET)),
        (CKA_TOKEN, vec![0]),
    ]
}

/// A user session, and a second session of the same application for the SO's turns.
fn setup() -> (TestEnv, cryptoki::context::Pkcs11, T, T) {
    let env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "key-policy");
    let open = || {
        let r = Raw::load();
        let mut s = 0;
        let rv = unsafe {
            (r.f.C_OpenSession.unwrap())(
                slot.id(),
                CKF_SERIAL_SESSION | CKF_RW_SESSION,
                null_mut(),
                None,
                &mut s,
            )
        };
        assert_eq!(rv, CKR_OK);
        T { r, s }
    };
    let (user, so) = (open(), open());
    assert_eq!(user.login(CKU_USER, USER_PIN), CKR_OK);
    (env, p, user, so)
}

fn mech_aes_wrap_pad() -> CK_MECHANISM {
    raw_mech::<u8>(CKM_AES_KEY_WRAP_PAD, None)
}

/// Makes, as the SO, a trusted wrapping key (a public session object the user then sees),
/// with `more` in its template.
fn so_trusted_key(user: &T, so: &T, more: Pairs) -> Result<CK_OBJECT_HANDLE, CK_RV> {
    let logged_in = user.logout();
    assert!(logged_in == CKR_OK || logged_in == CKR_USER_NOT_LOGGED_IN);
    assert_eq!(so.login(CKU_SO, SO_PIN), CKR_OK);
    let mut t = aes(
        &[0x42; 32],
        vec![
            (CKA_PRIVATE, vec![0]),
            (CKA_TRUSTED, vec![1]),
            (CKA_WRAP, vec![1]),
            (CKA_UNWRAP, vec![1]),
        ],
    );
    for (a, v) in more {
        t = with(t, a, &v);
    }
    let made = so.create(t);
    assert_eq!(so.logout(), CKR_OK);
    assert_eq!(user.login(CKU_USER, USER_PIN), CKR_OK);
    made
}

/// Hole 1: a copy obeys the change rules of the original; hole 3 and the rest of the trusted
/// key's rules: no path turns a trusted key into one that decrypts or gives back a
/// wrap-with-trusted key unprotected.
#[test]
fn a_copy_keeps_a_read_only_objects_values() {
    let (_env, _p, u, _so) = setup();
    // (change in the copy's template, expected) on a read-only secret key made with
    // DECRYPT, UNWRAP and EXTRACTABLE false, SENSITIVE false.
    let table: &[(CK_ATTRIBUTE_TYPE, &[u8], CK_RV)] = &[
        (CKA_DECRYPT, &[1], CKR_ATTRIBUTE_READ_ONLY),
        (CKA_UNWRAP, &[1], CKR_ATTRIBUTE_READ_ONLY),
        (CKA_ENCRYPT, &[1], CKR_ATTRIBUTE_READ_ONLY),
        (CKA_SIGN, &[0], CKR_ATTRIBUTE_READ_ONLY),
        (CKA_LABEL, b"renamed", CKR_ATTRIBUTE_READ_ONLY),
        (CKA_ID, b"x", CKR_ATTRIBUTE_READ_ONLY),
        (CKA_DERIVE, &[1], CKR_ATTRIBUTE_READ_ONLY),
        (CKA_MODIFIABLE, &[1], CKR_ATTRIBUTE_READ_ONLY),
        (CKA_EXTRACTABLE, &[1], CKR_ATTRIBUTE_READ_ONLY),
        // What a copy may do: move elsewhere, and be more restricted.
        (CKA_TOKEN, &[1], CKR_OK),
        (CKA_SENSITIVE, &[1], CKR_OK),
        (CKA_COPYABLE, &[0], CKR_OK),
        (CKA_DESTROYABLE, &[0], CKR_OK),
        (CKA_WRAP_WITH_TRUSTED, &[1], CKR_OK),
        // The same value is no change.
        (CKA_DECRYPT, &[0], CKR_OK),
        (CKA_LABEL, b"fixed", CKR_OK),
    ];
    let ro = u
        .create(aes(
            &[7; 16],
            vec![
                (CKA_MODIFIABLE, vec![0]),
                (CKA_DECRYPT, vec![0]),
                (CKA_UNWRAP, vec![0]),
                (CKA_ENCRYPT, vec![0]),
                (CKA_SENSITIVE, vec![0]),
                (CKA_LABEL, b"fixed".to_vec()),
            ],
        ))
        .unwrap();
    let rw = u
        .create(aes(&[7; 16], vec![(CKA_DECRYPT, vec![0]), (CKA_UNWRAP, vec![0])]))
        .unwrap();
    for &(t, v, want) in table {
        let got = u.copy(ro, vec![(t, v.to_vec())]);
        assert_eq!(
            got.err().unwrap_or(CKR_OK),
            want,
            "copy of a read-only key, 0x{t:x} = {v:?}"
        );
        if let Ok(copy) = got {
            assert_eq!(u.get(copy, t).unwrap(), v, "the copy holds what was asked");
            assert_eq!(u.get(copy, CKA_DECRYPT).unwrap(), [0]);
        }
        // The original refuses every change by C_SetAttributeValue.
        assert_eq!(u.set(ro, vec![(t, v.to_vec())]), CKR_ACTION_PROHIBITED);
    }
    // A modifiable key's copy may change its usage flags, as C_SetAttributeValue may.
    let copy = u
        .copy(rw, vec![(CKA_DECRYPT, vec![1]), (CKA_LABEL, b"n".to_vec())])
        .unwrap();
    assert_eq!(u.get(copy, CKA_DECRYPT).unwrap(), [1]);
}

#[test]
fn a_trusted_wrapping_key_never_gives_a_wrap_with_trusted_key_away() {
    let (_env, _p, u, so) = setup();
    // The SO's templates: a trusted key never decrypts, and its unwrap template cannot ask
    // for unprotected keys.
    let mut keep = vec![];
    let loose = array(vec![(CKA_SENSITIVE, vec![0])], &mut keep);
    let free = array(vec![(CKA_WRAP_WITH_TRUSTED, vec![0])], &mut keep);
    let tight = array(vec![(CKA_EXTRACTABLE, vec![0])], &mut keep);
    let made: &[(Pairs, CK_RV)] = &[
        (vec![(CKA_DECRYPT, vec![1])], CKR_TEMPLATE_INCONSISTENT),
        (vec![(CKA_UNWRAP_TEMPLATE, loose)], CKR_TEMPLATE_INCONSISTENT),
        (vec![(CKA_UNWRAP_TEMPLATE, free)], CKR_TEMPLATE_INCONSISTENT),
        (vec![(CKA_UNWRAP_TEMPLATE, tight)], CKR_OK),
        (vec![(CKA_DECRYPT, vec![0])], CKR_OK),
        (vec![], CKR_OK),
    ];
    for (more, want) in made {
        let got = so_trusted_key(&u, &so, more.clone());
        assert_eq!(got.err().unwrap_or(CKR_OK), *want, "{more:?}");
        if let Ok(w) = got {
            assert_eq!(u.get(w, CKA_DECRYPT).unwrap(), [0], "a trusted key's default");
        }
    }
    // The key: read-only, DECRYPT and UNWRAP asked false by the SO.
    let w = so_trusted_key(
        &u,
        &so,
        vec![
            (CKA_DECRYPT, vec![0]),
            (CKA_UNWRAP, vec![0]),
            (CKA_MODIFIABLE, vec![0]),
        ],
    )
    .unwrap();
    let w_rw = so_trusted_key(&u, &so, vec![]).unwrap();
    // Every path that could loosen it, by the user.
    let changes: &[(&str, CK_RV)] = &[
        ("copy {}", CKR_ACTION_PROHIBITED),
        ("copy {DECRYPT, UNWRAP}", CKR_ACTION_PROHIBITED),
        ("set W {DECRYPT}", CKR_ACTION_PROHIBITED),
        ("set W' {DECRYPT}", CKR_TEMPLATE_INCONSISTENT),
        ("set W' {TRUSTED false}", CKR_ATTRIBUTE_READ_ONLY),
        ("set W' {TRUSTED false, DECRYPT}", CKR_ATTRIBUTE_READ_ONLY),
    ];
    for (what, want) in changes {
        let got = match *what {
            "copy {}" => u.copy(w, vec![]).err().unwrap_or(CKR_OK),
            "copy {DECRYPT, UNWRAP}" => u
                .copy(w, vec![(CKA_DECRYPT, vec![1]), (CKA_UNWRAP, vec![1])])
                .err()
                .unwrap_or(CKR_OK),
            "set W {DECRYPT}" => u.set(w, vec![(CKA_DECRYPT, vec![1])]),
            "set W' {DECRYPT}" => u.set(w_rw, vec![(CKA_DECRYPT, vec![1])]),
            "set W' {TRUSTED false}" => u.set(w_rw, vec![(CKA_TRUSTED, vec![0])]),
            _ => u.set(w_rw, vec![(CKA_TRUSTED, vec![0]), (CKA_DECRYPT, vec![1])]),
        };
        assert_eq!(got, *want, "{what}");
    }
    assert_eq!(u.get(w_rw, CKA_DECRYPT).unwrap(), [0]);
    assert_eq!(u.get(w_rw, CKA_TRUSTED).unwrap(), [1]);
    // The SO may copy a trusted key; the copy is as trusted and as restricted.
    assert_eq!(u.logout(), CKR_OK);
    assert_eq!(so.login(CKU_SO, SO_PIN), CKR_OK);
    let so_copy = so.copy(w_rw, vec![]).unwrap();
    assert_eq!(so.get(so_copy, CKA_TRUSTED).unwrap(), [1]);
    assert_eq!(
        so.copy(w_rw, vec![(CKA_DECRYPT, vec![1])]).err(),
        Some(CKR_TEMPLATE_INCONSISTENT)
    );
    assert_eq!(so.logout(), CKR_OK);
    assert_eq!(u.login(CKU_USER, USER_PIN), CKR_OK);

    // A wrap-with-trusted key, wrapped under the trusted key: neither decryption nor unwrap
    // as an unprotected key brings it back.
    let secret = [0x5a; 32];
    let k = u
        .create(aes(
            &secret,
            vec![(CKA_EXTRACTABLE, vec![1]), (CKA_WRAP_WITH_TRUSTED, vec![1])],
        ))
        .unwrap();
    let own_kek = u
        .create(aes(&[9; 32], vec![(CKA_WRAP, vec![1]), (CKA_UNWRAP, vec![1])]))
        .unwrap();
    assert_eq!(
        u.wrap(&mut mech_aes_wrap_pad(), own_kek, k).err(),
        Some(CKR_KEY_NOT_WRAPPABLE)
    );
    let blob = u.wrap(&mut mech_aes_wrap_pad(), w_rw, k).unwrap();
    let mut ecb = raw_mech::<u8>(CKM_AES_ECB, None);
    let mut iv = [0u8; 16];
    let mut cbc = raw_mech(CKM_AES_CBC, Some(&mut iv));
    for m in [&mut ecb, &mut cbc] {
        assert_eq!(
            u.decrypt(m, w_rw, &blob[..32]).err(),
            Some(CKR_KEY_FUNCTION_NOT_PERMITTED)
        );
    }
    let unwraps: &[(Pairs, CK_RV)] = &[
        (vec![(CKA_SENSITIVE, vec![0])], CKR_TEMPLATE_INCONSISTENT),
        (vec![(CKA_WRAP_WITH_TRUSTED, vec![0])], CKR_TEMPLATE_INCONSISTENT),
        (
            vec![(CKA_SENSITIVE, vec![0]), (CKA_EXTRACTABLE, vec![1])],
            CKR_TEMPLATE_INCONSISTENT,
        ),
        (vec![(CKA_EXTRACTABLE, vec![1])], CKR_OK),
        (vec![], CKR_OK),
    ];
    for (more, want) in unwraps {
        let mut t = generic();
        for (a, v) in more {
            t = with(t, *a, v);
        }
        let got = u.unwrap(&mut mech_aes_wrap_pad(), w_rw, &blob, t);
        assert_eq!(got.err().unwrap_or(CKR_OK), *want, "unwrap {more:?}");
        if let Ok(k2) = got {
            assert_eq!(u.get(k2, CKA_SENSITIVE).unwrap(), [1]);
            assert_eq!(u.get(k2, CKA_WRAP_WITH_TRUSTED).unwrap(), [1]);
            assert_eq!(u.get(k2, CKA_VALUE), Err(CKR_ATTRIBUTE_SENSITIVE));
            // Nor can it be wrapped under a key the user holds, then decrypted.
            let extractable = u.get(k2, CKA_EXTRACTABLE).unwrap() == [1];
            assert_eq!(
                u.wrap(&mut mech_aes_wrap_pad(), own_kek, k2).err(),
                Some(if extractable {
                    CKR_KEY_NOT_WRAPPABLE
                } else {
                    CKR_KEY_UNEXTRACTABLE
                })
            );
        }
    }
}

/// Hole 2: every use of a `CKA_ALWAYS_AUTHENTICATE` private key needs the context-specific
/// login, and one login authorizes one use.
#[test]
fn always_authenticate_holds_for_every_use_of_the_key() {
    let (_env, _p, u, _so) = setup();
    let auth = vec![(CKA_ALWAYS_AUTHENTICATE, vec![1]), (CKA_TOKEN, vec![0])];
    let (rsa_pub, rsa) = u.rsa_pair(with(with(auth.clone(), CKA_DECRYPT, &[1]), CKA_UNWRAP, &[1]));
    let (_, ec) = u.ec_pair(with(auth, CKA_DERIVE, &[1]));
    let (peer_pub, _) = u.ec_pair(vec![(CKA_TOKEN, vec![0])]);
    let peer_point = u.get(peer_pub, CKA_EC_POINT).unwrap();
    // An OAEP blob of a 16-byte secret under the RSA key, made by the token's public half.
    let mut oaep = oaep_sha256();
    let secret = [0x33u8; 16];
    let blob = u.oaep_encrypt(&mut oaep, rsa_pub, &secret);
    let ecdh = CK_ECDH1_DERIVE_PARAMS {
        kdf: CKD_NULL,
        ulSharedDataLen: 0,
        pSharedData: null_mut(),
        ulPublicDataLen: peer_point.len() as CK_ULONG,
        pPublicData: peer_point.as_ptr() as *mut u8,
    };
    // Each use: (name, call) where the call makes the use once, from its Init if it has one.
    type Use<'a> = (&'a str, Box<dyn Fn(bool) -> CK_RV + 'a>);
    let u = &u;
    let uses: Vec<Use> = vec![
        (
            "sign",
            Box::new(|login| unsafe {
                let mut m = raw_mech::<u8>(CKM_SHA256_RSA_PKCS, None);
                assert_eq!((u.r.f.C_SignInit.unwrap())(u.s, &mut m, rsa), CKR_OK);
                if login {
                    assert_eq!(u.login(CKU_CONTEXT_SPECIFIC, USER_PIN), CKR_OK);
                }
                let mut data = *b"data";
                let mut sig = vec![0u8; 256];
                let mut len = sig.len() as CK_ULONG;
                (u.r.f.C_Sign.unwrap())(u.s, data.as_mut_ptr(), 4, sig.as_mut_ptr(), &mut len)
            }),
        ),
        (
            "decrypt",
            Box::new(|login| unsafe {
                let mut oaep = oaep;
                let mut m = raw_mech(CKM_RSA_PKCS_OAEP, Some(&mut oaep));
                assert_eq!((u.r.f.C_DecryptInit.unwrap())(u.s, &mut m, rsa), CKR_OK);
                if login {
                    assert_eq!(u.login(CKU_CONTEXT_SPECIFIC, USER_PIN), CKR_OK);
                }
                match u.decrypt_rest(&blob) {
                    Ok(plain) => {
                        assert_eq!(plain, secret);
                        CKR_OK
                    }
                    Err(rv) => rv,
                }
            }),
        ),
        (
            "unwrap",
            Box::new(|login| {
                if login {
                    assert_eq!(u.login(CKU_CONTEXT_SPECIFIC, USER_PIN), CKR_OK);
                }
                let mut oaep = oaep;
                let mut m = raw_mech(CKM_RSA_PKCS_OAEP, Some(&mut oaep));
                let t = with(generic(), CKA_SENSITIVE, &[0]);
                match u.unwrap(&mut m, rsa, &blob, with(t, CKA_EXTRACTABLE, &[1])) {
                    Ok(k) => {
                        assert_eq!(u.get(k, CKA_VALUE).unwrap(), secret);
                        CKR_OK
                    }
                    Err(rv) => rv,
                }
            }),
        ),
        (
            "derive",
            Box::new(|login| {
                if login {
                    assert_eq!(u.login(CKU_CONTEXT_SPECIFIC, USER_PIN), CKR_OK);
                }
                let mut ecdh = ecdh;
                let mut m = raw_mech(CKM_ECDH1_DERIVE, Some(&mut ecdh));
                u.derive(&mut m, ec, generic()).err().unwrap_or(CKR_OK)
            }),
        ),
    ];
    for (name, call) in &uses {
        assert_eq!(
            call(false),
            CKR_USER_NOT_LOGGED_IN,
            "{name} without the context login"
        );
        assert_eq!(call(true), CKR_OK, "{name} right after the context login");
        assert_eq!(call(false), CKR_USER_NOT_LOGGED_IN, "{name}: one login, one use");
    }
    // A wrong PIN authorizes nothing.
    assert_eq!(u.login(CKU_CONTEXT_SPECIFIC, "wrong"), CKR_PIN_INCORRECT);
    assert_eq!(uses[3].1(false), CKR_USER_NOT_LOGGED_IN);
    // An authorization does not outlive the login it was made in. The logout also destroyed
    // the private session keys (PKCS#11 C_Logout), so a new key shows it.
    assert_eq!(u.login(CKU_CONTEXT_SPECIFIC, USER_PIN), CKR_OK);
    assert_eq!(u.logout(), CKR_OK);
    assert_eq!(u.login(CKU_USER, USER_PIN), CKR_OK);
    assert_eq!(uses[2].1(false), CKR_UNWRAPPING_KEY_HANDLE_INVALID);
    let (_, ec2) = u.ec_pair(vec![
        (CKA_ALWAYS_AUTHENTICATE, vec![1]),
        (CKA_TOKEN, vec![0]),
        (CKA_DERIVE, vec![1]),
    ]);
    let mut ecdh = ecdh;
    let mut m = raw_mech(CKM_ECDH1_DERIVE, Some(&mut ecdh));
    assert_eq!(
        u.derive(&mut m, ec2, generic()).err(),
        Some(CKR_USER_NOT_LOGGED_IN)
    );
}

/// Review of 2026-12-07: one context login authorizes one use, the operation started last
/// (PKCS#11 §4.9: the login comes right after the Init of the use it is for), where one
/// login had authorized a pending signature and a pending decryption together; and a
/// context login no operation waited for is dropped when a signature or decryption starts,
/// instead of lasting until the next unwrap or derivation. Each row is a sequence of calls in one
/// session and what each answers: `S`/`D` start a signature/decryption with the
/// always-authenticate RSA key, `P` starts and makes a signature with a plain key, `L` is
/// the context login, `s`/`d`/`u` finish the signature, the decryption, or unwrap with the
/// always-authenticate key.
#[test]
fn one_context_login_authorizes_the_operation_started_last() {
    let (_env, _p, u, _so) = setup();
    let auth = vec![
        (CKA_ALWAYS_AUTHENTICATE, vec![1]),
        (CKA_TOKEN, vec![0]),
        (CKA_DECRYPT, vec![1]),
        (CKA_UNWRAP, vec![1]),
    ];
    let (rsa_pub, rsa) = u.rsa_pair(auth);
    let (_, plain) = u.rsa_pair(vec![(CKA_TOKEN, vec![0])]);
    let mut oaep = oaep_sha256();
    let secret = [0x44u8; 16];
    let blob = u.oaep_encrypt(&mut oaep, rsa_pub, &secret);
    let sign = || unsafe {
        let mut data = *b"data";
        let mut sig = vec![0u8; 256];
        let mut len = sig.len() as CK_ULONG;
        (u.r.f.C_Sign.unwrap())(u.s, data.as_mut_ptr(), 4, sig.as_mut_ptr(), &mut len)
    };
    let step = |c: char| -> CK_RV {
        let mut oaep = oaep;
        unsafe {
            match c {
                'S' | 'P' => {
                    let key = if c == 'S' { rsa } else { plain };
                    let mut m = raw_mech::<u8>(CKM_SHA256_RSA_PKCS, None);
                    let rv = (u.r.f.C_SignInit.unwrap())(u.s, &mut m, key);
                    if c == 'P' && rv == CKR_OK {
                        return sign();
                    }
                    rv
                }
                'D' => {
                    let mut m = raw_mech(CKM_RSA_PKCS_OAEP, Some(&mut oaep));
                    (u.r.f.C_DecryptInit.unwrap())(u.s, &mut m, rsa)
                }
                'L' => u.login(CKU_CONTEXT_SPECIFIC, USER_PIN),
                's' => sign(),
                'd' => match u.decrypt_rest(&blob) {
                    Ok(p) => {
                        assert_eq!(p, secret);
                        CKR_OK
                    }
                    Err(rv) => rv,
                },
                _ => {
                    let mut m = raw_mech(CKM_RSA_PKCS_OAEP, Some(&mut oaep));
                    u.unwrap(&mut m, rsa, &blob, generic()).err().unwrap_or(CKR_OK)
                }
            }
        }
    };
    const OK: CK_RV = CKR_OK;
    const NO: CK_RV = CKR_USER_NOT_LOGGED_IN;
    let table: &[(&str, &[CK_RV])] = &[
        ("SDLds", &[OK, OK, OK, OK, NO]),
        ("DSLsd", &[OK, OK, OK, OK, NO]),
        ("SDLLsd", &[OK, OK, OK, OK, OK, OK]),
        ("SDLLds", &[OK, OK, OK, OK, OK, OK]),
        ("SLDsd", &[OK, OK, OK, OK, NO]),
        ("Lu", &[OK, OK]),
        ("LPu", &[OK, OK, NO]),
        ("LDLdu", &[OK, OK, OK, OK, NO]),
        ("LSLsu", &[OK, OK, OK, OK, NO]),
    ];
    for (calls, want) in table {
        let got: Vec<CK_RV> = calls.chars().map(step).collect();
        assert_eq!(&got, want, "{calls}");
    }
}

/// Review of 2026-12-07: `CKA_ALWAYS_AUTHENTICATE` true only with `CKA_PRIVATE` true (PKCS#11
/// §4.9), on every path that makes or changes a private key: generation, copy, set and
/// unwrap (of a PKCS#8 blob), each with the pair of values refused and, beside it, allowed.
#[test]
fn always_authenticate_needs_a_private_key_object() {
    let (_env, _p, u, _so) = setup();
    let session = (CKA_TOKEN, vec![0]);
    let aa = |v: u8| (CKA_ALWAYS_AUTHENTICATE, vec![v]);
    let private = |v: u8| (CKA_PRIVATE, vec![v]);
    // A private key to wrap, and the key to wrap it under.
    let (_, loose) = u.rsa_pair(vec![
        session.clone(),
        (CKA_EXTRACTABLE, vec![1]),
        (CKA_SENSITIVE, vec![0]),
    ]);
    let kek = u
        .create(aes(&[7; 32], vec![(CKA_WRAP, vec![1]), (CKA_UNWRAP, vec![1])]))
        .unwrap();
    let blob = u.wrap(&mut mech_aes_wrap_pad(), kek, loose).unwrap();
    let (_, aa_key) = u.rsa_pair(vec![session.clone(), aa(1)]);
    let (_, public_key) = u.rsa_pair(vec![session.clone(), private(0)]);
    let rsa_private = vec![
        (CKA_CLASS, ul(CKO_PRIVATE_KEY)),
        (CKA_KEY_TYPE, ul(CKK_RSA)),
        session.clone(),
    ];
    // (path, CKA_ALWAYS_AUTHENTICATE, CKA_PRIVATE, expected)
    let table: &[(&str, u8, u8, CK_RV)] = &[
        ("generate", 1, 0, CKR_TEMPLATE_INCONSISTENT),
        ("generate", 1, 1, CKR_OK),
        ("generate", 0, 0, CKR_OK),
        ("copy", 1, 0, CKR_TEMPLATE_INCONSISTENT),
        ("copy", 1, 1, CKR_OK),
        ("set", 1, 0, CKR_TEMPLATE_INCONSISTENT),
        ("set", 0, 0, CKR_OK),
        ("unwrap", 1, 0, CKR_TEMPLATE_INCONSISTENT),
        ("unwrap", 1, 1, CKR_OK),
        ("unwrap", 0, 0, CKR_OK),
    ];
    for &(path, a, p, want) in table {
        let values = vec![aa(a), private(p)];
        let got = match path {
            "generate" => {
                let mut t = values;
                t.push(session.clone());
                u.try_rsa_pair(t).map(|(_, k)| k)
            }
            // A copy of the always-authenticate key, with CKA_PRIVATE as the row says.
            "copy" => u.copy(aa_key, vec![private(p)]),
            // A public (session) key made always-authenticate, or left as it is.
            "set" => match u.set(public_key, vec![aa(a)]) {
                CKR_OK => Ok(public_key),
                rv => Err(rv),
            },
            _ => {
                let mut t = rsa_private.clone();
                t.extend(values);
                u.unwrap(&mut mech_aes_wrap_pad(), kek, &blob, t)
            }
        };
        assert_eq!(
            got.err().unwrap_or(CKR_OK),
            want,
            "{path}: ALWAYS_AUTHENTICATE {a}, PRIVATE {p}"
        );
        if let Ok(k) = got {
            assert_eq!(u.get(k, CKA_ALWAYS_AUTHENTICATE).unwrap(), [a], "{path}");
            assert_eq!(u.get(k, CKA_PRIVATE).unwrap(), [p], "{path}");
        }
    }
    // And the always-authenticate key itself cannot be made public.
    assert_ne!(u.set(aa_key, vec![private(0)]), CKR_OK);
    assert_eq!(u.get(aa_key, CKA_PRIVATE).unwrap(), [1]);
}

/// The derivation mechanisms of the table below, with their parameters kept alive.
struct Derivations {
    ecdh: CK_ECDH1_DERIVE_PARAMS,
    ecb: CK_KEY_DERIVATION_STRING_DATA,
    cbc: CK_AES_CBC_ENCRYPT_DATA_PARAMS,
    _point: Vec<u8>,
    _data: Box<[u8; 32]>,
}

/// Hole 4, and `CKM_AES_{ECB,CBC}_ENCRYPT_DATA` (issue 26): every derivation applies the base
/// key's `CKA_DERIVE_TEMPLATE`, `CKA_DERIVE` and the sticky attributes; the derived values
/// are checked against the `aes` crate and the `p256` crate.
#[test]
fn every_derivation_applies_the_base_keys_policy() {
    use aes::cipher::{BlockCipherEncrypt, KeyInit};
    let (_env, _p, u, _so) = setup();
    let mut keep = vec![];
    let rule = array(
        vec![(CKA_SENSITIVE, vec![1]), (CKA_EXTRACTABLE, vec![0])],
        &mut keep,
    );
    let base_value = [0x11u8; 32];
    let (peer_pub, peer) = u.ec_pair(vec![
        (CKA_TOKEN, vec![0]),
        (CKA_SENSITIVE, vec![0]),
        (CKA_EXTRACTABLE, vec![1]),
    ]);
    let point = u.get(peer_pub, CKA_EC_POINT).unwrap();
    let peer_scalar = u.get(peer, CKA_VALUE).unwrap();
    let mut data = Box::new([0u8; 32]);
    for (i, b) in data.iter_mut().enumerate() {
        *b = i as u8;
    }
    let mut d = Derivations {
        ecdh: CK_ECDH1_DERIVE_PARAMS {
            kdf: CKD_NULL,
            ulSharedDataLen: 0,
            pSharedData: null_mut(),
            ulPublicDataLen: point.len() as CK_ULONG,
            pPublicData: point.as_ptr() as *mut u8,
        },
        ecb: CK_KEY_DERIVATION_STRING_DATA {
            pData: data.as_mut_ptr(),
            ulLen: 32,
        },
        cbc: CK_AES_CBC_ENCRYPT_DATA_PARAMS {
            iv: [0x77; 16],
            pData: data.as_mut_ptr(),
            length: 32,
        },
        _point: point.clone(),
        _data: data.clone(),
    };
    // The values the derivations must give, by independent code.
    let cipher = aes::Aes256::new(&base_value.into());
    let ecb_value: Vec<u8> = data
        .chunks(16)
        .flat_map(|c| {
            let mut b = aes::Block::try_from(c).unwrap();
            cipher.encrypt_block(&mut b);
            b.to_vec()
        })
        .collect();
    let mut prev = [0x77u8; 16];
    let cbc_value: Vec<u8> = data
        .chunks(16)
        .flat_map(|c| {
            let mut b = aes::Block::default();
            for i in 0..16 {
                b[i] = c[i] ^ prev[i];
            }
            cipher.encrypt_block(&mut b);
            prev.copy_from_slice(&b);
            b.to_vec()
        })
        .collect();

    for mech in [
        CKM_ECDH1_DERIVE,
        CKM_AES_ECB_ENCRYPT_DATA,
        CKM_AES_CBC_ENCRYPT_DATA,
    ] {
        let m = |d: &mut Derivations| match mech {
            CKM_ECDH1_DERIVE => raw_mech(mech, Some(&mut d.ecdh)),
            CKM_AES_ECB_ENCRYPT_DATA => raw_mech(mech, Some(&mut d.ecb)),
            _ => raw_mech(mech, Some(&mut d.cbc)),
        };
        // Bases: (DERIVE, with the derive template), generated (sticky attributes true).
        let base = |derive: bool, template: bool| -> CK_OBJECT_HANDLE {
            let mut t = vec![(CKA_TOKEN, vec![0]), (CKA_DERIVE, vec![derive as u8])];
            if template {
                t.push((CKA_DERIVE_TEMPLATE, rule.clone()));
            }
            if mech == CKM_ECDH1_DERIVE {
                u.ec_pair(t).1
            } else {
                let mut t = aes(&base_value, t);
                t.retain(|(a, _)| *a != CKA_TOKEN);
                t.push((CKA_TOKEN, vec![0]));
                u.create(t).unwrap()
            }
        };
        let open = |h| u.get(h, CKA_VALUE);
        let expected = |b: CK_OBJECT_HANDLE| -> Vec<u8> {
            match mech {
                CKM_ECDH1_DERIVE => {
                    let mine = p256::SecretKey::from_slice(&peer_scalar).unwrap();
                    let their = u.get(b, CKA_EC_POINT).unwrap();
                    let their = p256::PublicKey::from_sec1_bytes(&their[2..]).unwrap();
                    let shared = p256::ecdh::diffie_hellman(mine.to_nonzero_scalar(), their.as_affine());
                    shared.raw_secret_bytes().to_vec()
                }
                CKM_AES_ECB_ENCRYPT_DATA => ecb_value.clone(),
                _ => cbc_value.clone(),
            }
        };
        let loose = vec![(CKA_SENSITIVE, vec![0]), (CKA_EXTRACTABLE, vec![1])];
        // (base has DERIVE, base has the template, derived template, expected)
        let table: &[(bool, bool, Pairs, CK_RV)] = &[
            (false, false, vec![], CKR_KEY_FUNCTION_NOT_PERMITTED),
            (true, false, loose.clone(), CKR_OK),
            (
                true,
                true,
                vec![(CKA_SENSITIVE, vec![0])],
                CKR_TEMPLATE_INCONSISTENT,
            ),
            (
                true,
                true,
                vec![(CKA_EXTRACTABLE, vec![1])],
                CKR_TEMPLATE_INCONSISTENT,
            ),
            (true, true, loose.clone(), CKR_TEMPLATE_INCONSISTENT),
            (true, true, vec![], CKR_OK),
            (true, true, vec![(CKA_LABEL, b"ok".to_vec())], CKR_OK),
            (true, false, vec![(CKA_TRUSTED, vec![1])], CKR_ATTRIBUTE_READ_ONLY),
            (
                true,
                false,
                vec![(CKA_CLASS, ul(CKO_DATA))],
                CKR_TEMPLATE_INCONSISTENT,
            ),
        ];
        for (derive, template, more, want) in table {
            let b = base(*derive, *template);
            let mut t = generic();
            for (a, v) in more {
                t = with(t, *a, v);
            }
            let got = u.derive(&mut m(&mut d), b, t);
            let what = format!("0x{mech:x}: derive {derive}, template {template}, {more:?}");
            assert_eq!(got.err().unwrap_or(CKR_OK), *want, "{what}");
            let Ok(k) = got else { continue };
            if *template {
                assert_eq!(u.get(k, CKA_SENSITIVE).unwrap(), [1], "{what}");
                assert_eq!(u.get(k, CKA_EXTRACTABLE).unwrap(), [0], "{what}");
                assert_eq!(open(k), Err(CKR_ATTRIBUTE_SENSITIVE), "{what}");
                // Sticky: the EC base was generated (always sensitive, never extractable), the
                // AES base created.
                let generated = (mech == CKM_ECDH1_DERIVE) as u8;
                assert_eq!(u.get(k, CKA_ALWAYS_SENSITIVE).unwrap(), [generated], "{what}");
                assert_eq!(u.get(k, CKA_NEVER_EXTRACTABLE).unwrap(), [generated], "{what}");
            } else {
                assert_eq!(open(k).unwrap(), expected(b), "{what}");
                assert_eq!(u.get(k, CKA_ALWAYS_SENSITIVE).unwrap(), [0], "{what}");
                assert_eq!(u.get(k, CKA_LOCAL).unwrap(), [0], "{what}");
            }
        }
        // CKA_VALUE_LEN takes the leftmost bytes; more than there are is refused: ECDH's
        // template asks too much, ENCRYPT_DATA's parameter gives too little.
        let b = base(true, false);
        let t = with(with(generic(), CKA_SENSITIVE, &[0]), CKA_EXTRACTABLE, &[1]);
        let k = u
            .derive(&mut m(&mut d), b, with(t.clone(), CKA_VALUE_LEN, &ul(16)))
            .unwrap();
        assert_eq!(open(k).unwrap(), expected(b)[..16]);
        assert_eq!(
            u.derive(&mut m(&mut d), b, with(t, CKA_VALUE_LEN, &ul(33))).err(),
            Some(if mech == CKM_ECDH1_DERIVE {
                CKR_TEMPLATE_INCONSISTENT
            } else {
                CKR_MECHANISM_PARAM_INVALID
            })
        );
    }
    // The data of ENCRYPT_DATA is whole blocks.
    let b = u.create(aes(&base_value, vec![(CKA_DERIVE, vec![1])])).unwrap();
    for len in [0usize, 15, 17] {
        let mut bytes = vec![1u8; len.max(1)];
        let mut p = CK_KEY_DERIVATION_STRING_DATA {
            pData: bytes.as_mut_ptr(),
            ulLen: len as CK_ULONG,
        };
        let mut m = raw_mech(CKM_AES_ECB_ENCRYPT_DATA, Some(&mut p));
        assert_eq!(
            u.derive(&mut m, b, generic()).err(),
            Some(CKR_MECHANISM_PARAM_INVALID),
            "{len}"
        );
    }
}

/// Hole 5: `CKA_ALLOWED_MECHANISMS` is fixed once the key exists, by set and by copy, and
/// what it leaves out stays refused.
#[test]
fn allowed_mechanisms_cannot_change() {
    let (_env, _p, u, _so) = setup();
    let list = |ms: &[CK_MECHANISM_TYPE]| ms.iter().flat_map(|m| m.to_ne_bytes()).collect::<Vec<u8>>();
    let (_, ec) = u.ec_pair(vec![
        (CKA_TOKEN, vec![0]),
        (CKA_DERIVE, vec![1]),
        (CKA_ALLOWED_MECHANISMS, list(&[CKM_ECDSA])),
    ]);
    let (_, rsa) = u.rsa_pair(vec![
        (CKA_TOKEN, vec![0]),
        (CKA_DECRYPT, vec![1]),
        (CKA_ALLOWED_MECHANISMS, list(&[CKM_RSA_PKCS_OAEP])),
    ]);
    let aes_key = u
        .create(aes(
            &[3; 16],
            vec![(CKA_ALLOWED_MECHANISMS, list(&[CKM_AES_CBC]))],
        ))
        .unwrap();
    for (key, now, wider) in [
        (ec, list(&[CKM_ECDSA]), list(&[CKM_ECDSA, CKM_ECDH1_DERIVE])),
        (
            rsa,
            list(&[CKM_RSA_PKCS_OAEP]),
            list(&[CKM_RSA_PKCS_OAEP, CKM_RSA_X_509]),
        ),
        (aes_key, list(&[CKM_AES_CBC]), list(&[CKM_AES_CBC, CKM_AES_ECB])),
    ] {
        // (new value, expected) for set and for copy alike.
        for (v, want) in [
            (wider.clone(), CKR_ATTRIBUTE_READ_ONLY),
            (vec![], CKR_ATTRIBUTE_READ_ONLY),
            (list(&[CKM_SHA256]), CKR_ATTRIBUTE_READ_ONLY),
            (now.clone(), CKR_OK),
        ] {
            assert_eq!(
                u.set(key, vec![(CKA_ALLOWED_MECHANISMS, v.clone())]),
                want,
                "set {v:?}"
            );
            let copy = u.copy(key, vec![(CKA_ALLOWED_MECHANISMS, v.clone())]);
            assert_eq!(copy.err().unwrap_or(CKR_OK), want, "copy {v:?}");
        }
        assert_eq!(u.get(key, CKA_ALLOWED_MECHANISMS).unwrap(), now);
    }
    // What the list leaves out stays refused.
    let (peer, _) = u.ec_pair(vec![(CKA_TOKEN, vec![0])]);
    let point = u.get(peer, CKA_EC_POINT).unwrap();
    let mut p = CK_ECDH1_DERIVE_PARAMS {
        kdf: CKD_NULL,
        ulSharedDataLen: 0,
        pSharedData: null_mut(),
        ulPublicDataLen: point.len() as CK_ULONG,
        pPublicData: point.as_ptr() as *mut u8,
    };
    let mut m = raw_mech(CKM_ECDH1_DERIVE, Some(&mut p));
    assert_eq!(u.derive(&mut m, ec, generic()).err(), Some(CKR_MECHANISM_INVALID));
    let mut m = raw_mech::<u8>(CKM_RSA_X_509, None);
    assert_eq!(
        u.decrypt(&mut m, rsa, &[1u8; 128]).err(),
        Some(CKR_MECHANISM_INVALID)
    );
    let mut m = raw_mech::<u8>(CKM_AES_ECB, None);
    assert_eq!(
        u.decrypt(&mut m, aes_key, &[1u8; 16]).err(),
        Some(CKR_MECHANISM_INVALID)
    );
}

/// Hole 6: a search template naming a hidden attribute never matches, on session and token
/// objects, while the same search finds a key whose value may be read.
#[test]
fn a_search_never_compares_hidden_values() {
    let (_env, _p, u, _so) = setup();
    let value = [0x2bu8; 16];
    // (token object, sensitive, extractable, found)
    let table = [
        (false, true, false, false),
        (false, true, true, false),
        (false, false, false, false),
        (true, true, false, false),
        (true, false, false, false),
        (false, false, true, true),
        (true, false, true, true),
    ];
    for (token, sensitive, extractable, found) in table {
        let label = format!("k-{token}-{sensitive}-{extractable}").into_bytes();
        let k = u
            .create(aes(
                &value,
                vec![
                    (CKA_TOKEN, vec![token as u8]),
                    (CKA_SENSITIVE, vec![sensitive as u8]),
                    (CKA_EXTRACTABLE, vec![extractable as u8]),
                    (CKA_LABEL, label.clone()),
                ],
            ))
            .unwrap();
        let hits = u.find(vec![(CKA_LABEL, label.clone()), (CKA_VALUE, value.to_vec())]);
        assert_eq!(hits.contains(&k), found, "{token} {sensitive} {extractable}");
        // A wrong guess never matches either, so the answer says nothing.
        let hits = u.find(vec![(CKA_LABEL, label.clone()), (CKA_VALUE, vec![0; 16])]);
        assert!(hits.is_empty());
        // Searches that name no hidden attribute still find it.
        assert_eq!(u.find(vec![(CKA_LABEL, label)]), vec![k]);
    }
    // An RSA private key's secret parts likewise, searched with their true values.
    use rsa::traits::{PrivateKeyParts, PublicKeyParts};
    let mut rng = rand_core::UnwrapErr(getrandom::SysRng);
    let key = rsa::PrivateKey::new(&mut rng, 1024).unwrap();
    let p = be(key.primes()[0].as_ref());
    let d = be(key.d());
    for (sensitive, found) in [(true, false), (false, true)] {
        let label = format!("rsa-{sensitive}").into_bytes();
        let k = u
            .create(vec![
                (CKA_CLASS, ul(CKO_PRIVATE_KEY)),
                (CKA_KEY_TYPE, ul(CKK_RSA)),
                (CKA_TOKEN, vec![0]),
                (CKA_LABEL, label.clone()),
                (CKA_SENSITIVE, vec![sensitive as u8]),
                (CKA_EXTRACTABLE, vec![1]),
                (CKA_MODULUS, be(key.n().as_ref())),
                (CKA_PUBLIC_EXPONENT, be(key.e())),
                (CKA_PRIVATE_EXPONENT, d.clone()),
                (CKA_PRIME_1, p.clone()),
                (CKA_PRIME_2, be(key.primes()[1].as_ref())),
            ])
            .unwrap();
        for t in [(CKA_PRIME_1, p.clone()), (CKA_PRIVATE_EXPONENT, d.clone())] {
            let hits = u.find(vec![(CKA_LABEL, label.clone()), t]);
            assert_eq!(hits.contains(&k), found, "sensitive {sensitive}");
        }
        assert_eq!(u.find(vec![(CKA_LABEL, label)]), vec![k]);
    }
}

/// Hole 7: a key that may not decrypt cannot decrypt through `C_UnwrapKey` either: what it
/// unwraps comes out sensitive, and wrap-with-trusted (review of 2026-12-07: a sensitive but
/// extractable key left under a key the caller held and came back readable).
#[test]
fn unwrapping_is_no_way_around_decrypt_false() {
    let (_env, _p, u, _so) = setup();
    let kek_value = [0x61u8; 32];
    // Someone's ciphertext: any AES-KWP blob under the key.
    let plain = b"attack at dawn, sixteen+ bytes!!".to_vec();
    let maker = u
        .create(aes(
            &kek_value,
            vec![(CKA_WRAP, vec![1]), (CKA_EXTRACTABLE, vec![1])],
        ))
        .unwrap();
    let data_key = u
        .create(with(
            with(with(generic(), CKA_VALUE, &plain), CKA_EXTRACTABLE, &[1]),
            CKA_SENSITIVE,
            &[0],
        ))
        .unwrap();
    let blob = u.wrap(&mut mech_aes_wrap_pad(), maker, data_key).unwrap();
    // A key the caller holds that may wrap, unwrap and decrypt: the way out it must not get.
    let mine = u
        .create(aes(
            &[9; 32],
            vec![(CKA_WRAP, vec![1]), (CKA_UNWRAP, vec![1]), (CKA_DECRYPT, vec![1])],
        ))
        .unwrap();
    // (unwrapping key's DECRYPT, template, expected, value readable)
    let loose = vec![(CKA_SENSITIVE, vec![0]), (CKA_EXTRACTABLE, vec![1])];
    let free = vec![(CKA_WRAP_WITH_TRUSTED, vec![0]), (CKA_EXTRACTABLE, vec![1])];
    let table: &[(bool, Pairs, CK_RV, bool)] = &[
        (false, loose.clone(), CKR_TEMPLATE_INCONSISTENT, false),
        (
            false,
            vec![(CKA_SENSITIVE, vec![0])],
            CKR_TEMPLATE_INCONSISTENT,
            false,
        ),
        (false, free.clone(), CKR_TEMPLATE_INCONSISTENT, false),
        (false, vec![], CKR_OK, false),
        (false, vec![(CKA_EXTRACTABLE, vec![1])], CKR_OK, false),
        (false, vec![(CKA_EXTRACTABLE, vec![0])], CKR_OK, false),
        (true, loose.clone(), CKR_OK, true),
        (
            true,
            with(loose.clone(), CKA_WRAP_WITH_TRUSTED, &[0]),
            CKR_OK,
            true,
        ),
    ];
    for (decrypt, more, want, readable) in table {
        let kek = u
            .create(aes(
                &kek_value,
                vec![(CKA_UNWRAP, vec![1]), (CKA_DECRYPT, vec![*decrypt as u8])],
            ))
            .unwrap();
        let mut t = generic();
        for (a, v) in more {
            t = with(t, *a, v);
        }
        let got = u.unwrap(&mut mech_aes_wrap_pad(), kek, &blob, t);
        assert_eq!(got.err().unwrap_or(CKR_OK), *want, "DECRYPT {decrypt}, {more:?}");
        if let Ok(k) = got {
            let v = u.get(k, CKA_VALUE);
            let extractable = u.get(k, CKA_EXTRACTABLE).unwrap() == [1];
            // Wrapped under `mine` and unwrapped as a readable key: the value, or a refusal.
            let out = u.wrap(&mut mech_aes_wrap_pad(), mine, k).and_then(|b| {
                let t = with(with(generic(), CKA_SENSITIVE, &[0]), CKA_EXTRACTABLE, &[1]);
                u.unwrap(&mut mech_aes_wrap_pad(), mine, &b, t)
            });
            if *readable {
                assert_eq!(v.unwrap(), plain);
                assert_eq!(u.get(k, CKA_WRAP_WITH_TRUSTED).unwrap(), [0]);
                assert_eq!(u.get(out.unwrap(), CKA_VALUE).unwrap(), plain);
            } else {
                assert_eq!(v, Err(CKR_ATTRIBUTE_SENSITIVE));
                assert_eq!(u.get(k, CKA_SENSITIVE).unwrap(), [1]);
                assert_eq!(u.get(k, CKA_WRAP_WITH_TRUSTED).unwrap(), [1]);
                let refused = if extractable {
                    CKR_KEY_NOT_WRAPPABLE
                } else {
                    CKR_KEY_UNEXTRACTABLE
                };
                assert_eq!(
                    out.err(),
                    Some(refused),
                    "{more:?}: out under a key the caller holds"
                );
            }
        }
    }
}

/// Review of 2026-12-07: a key that may not decrypt (a trusted key, or `CKA_DECRYPT` false)
/// unwraps only with mechanisms whose refusals tell nothing of the blob (AES key wrap, OAEP).
/// CBC-PAD's padding check was an oracle: a trusted key's blob of a wrap-with-trusted key came
/// out in the clear from a few thousand unwraps with chosen IVs. Each unwrapping key and
/// mechanism: a blob of a known secret wrapped by the same key, then the oracle's probe (the
/// blob's first block under the 256 values of the IV's last byte) and what it answers.
#[test]
fn a_key_that_may_not_decrypt_unwraps_only_with_mechanisms_that_check_the_blob() {
    let (_env, _p, u, so) = setup();
    // First: the SO's turn logs the user out, which destroys the user's private session keys.
    let trusted = so_trusted_key(&u, &so, vec![]).unwrap();
    let secret = [0x5au8; 32];
    let k = u.create(aes(&secret, vec![(CKA_EXTRACTABLE, vec![1])])).unwrap();
    let both = vec![(CKA_WRAP, vec![1]), (CKA_UNWRAP, vec![1])];
    let decrypting = u
        .create(aes(&[1; 32], with(both.clone(), CKA_DECRYPT, &[1])))
        .unwrap();
    let not_decrypting = u
        .create(aes(&[2; 32], with(both.clone(), CKA_DECRYPT, &[0])))
        .unwrap();
    let (rsa_pub, rsa) = u.rsa_pair(vec![
        (CKA_TOKEN, vec![0]),
        (CKA_DECRYPT, vec![0]),
        (CKA_UNWRAP, vec![1]),
    ]);
    let mut oaep = oaep_sha256();
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Mech {
        KwPad,
        CbcPad,
        Oaep,
    }
    let mech = |m: Mech, iv: &mut [u8; 16], oaep: &mut CK_RSA_PKCS_OAEP_PARAMS| match m {
        Mech::KwPad => mech_aes_wrap_pad(),
        Mech::CbcPad => raw_mech(CKM_AES_CBC_PAD, Some(iv)),
        Mech::Oaep => raw_mech(CKM_RSA_PKCS_OAEP, Some(oaep)),
    };
    // (unwrapping key, the key that wraps for it, mechanism, may the unwrap run)
    let table = [
        ("decrypting", decrypting, decrypting, Mech::KwPad, true),
        ("decrypting", decrypting, decrypting, Mech::CbcPad, true),
        ("DECRYPT false", not_decrypting, not_decrypting, Mech::KwPad, true),
        (
            "DECRYPT false",
            not_decrypting,
            not_decrypting,
            Mech::CbcPad,
            false,
        ),
        ("trusted", trusted, trusted, Mech::KwPad, true),
        ("trusted", trusted, trusted, Mech::CbcPad, false),
        ("RSA, DECRYPT false", rsa, rsa_pub, Mech::Oaep, true),
    ];
    for (name, unwrapper, wrapper, m, runs) in table {
        let mut iv = [0x3cu8; 16];
        let blob = u.wrap(&mut mech(m, &mut iv, &mut oaep), wrapper, k).unwrap();
        let mut iv = [0x3cu8; 16];
        let got = u.unwrap(&mut mech(m, &mut iv, &mut oaep), unwrapper, &blob, generic());
        if !runs {
            assert_eq!(got.err(), Some(CKR_KEY_FUNCTION_NOT_PERMITTED), "{name} {m:?}");
            continue;
        }
        let got = got.unwrap_or_else(|rv| panic!("{name} {m:?}: 0x{rv:x}"));
        let readable = name == "decrypting";
        if readable {
            let t = with(with(generic(), CKA_SENSITIVE, &[0]), CKA_EXTRACTABLE, &[1]);
            let mut iv = [0x3cu8; 16];
            let open = u
                .unwrap(&mut mech(m, &mut iv, &mut oaep), unwrapper, &blob, t)
                .unwrap();
            assert_eq!(u.get(open, CKA_VALUE).unwrap(), secret, "{name} {m:?}");
        } else {
            assert_eq!(
                u.get(got, CKA_VALUE),
                Err(CKR_ATTRIBUTE_SENSITIVE),
                "{name} {m:?}"
            );
            assert_eq!(u.get(got, CKA_WRAP_WITH_TRUSTED).unwrap(), [1], "{name} {m:?}");
        }
    }
    // The oracle's probe: the first block of a CBC-PAD blob under each value of the IV's last
    // byte. A key that may decrypt answers by the padding (one value at least ends in 0x01,
    // most end in no pad), which tells it nothing it could not decrypt; a key that may not
    // gives one answer to all 256.
    for (name, key) in [
        ("decrypting", decrypting),
        ("DECRYPT false", not_decrypting),
        ("trusted", trusted),
    ] {
        let mut iv = [0x3cu8; 16];
        let blob = u
            .wrap(&mut raw_mech(CKM_AES_CBC_PAD, Some(&mut iv)), key, k)
            .unwrap();
        let mut answers = std::collections::BTreeSet::new();
        for g in 0..=255u8 {
            let mut iv = [0u8; 16];
            iv[15] = g;
            let got = u.unwrap(
                &mut raw_mech(CKM_AES_CBC_PAD, Some(&mut iv)),
                key,
                &blob[..16],
                generic(),
            );
            answers.insert(got.err().unwrap_or(CKR_OK));
        }
        let want: Vec<CK_RV> = if name == "decrypting" {
            vec![CKR_OK, CKR_WRAPPED_KEY_INVALID]
        } else {
            vec![CKR_KEY_FUNCTION_NOT_PERMITTED]
        };
        assert_eq!(answers.into_iter().collect::<Vec<_>>(), want, "{name}");
    }
}

/// Hole 9: the eight Ed25519 points of small order are refused as public keys, as raw and as
/// DER-wrapped CKA_EC_POINT, while a real key's point is accepted.
#[test]
fn small_order_ed25519_public_keys_are_refused() {
    let (_env, _p, u, _so) = setup();
    // The torsion points of edwards25519 (identity, order 2, two of order 4, four of order
    // 8), in their canonical encodings.
    let small = [
        "0100000000000000000000000000000000000000000000000000000000000000",
        "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
        "0000000000000000000000000000000000000000000000000000000000000000",
        "0000000000000000000000000000000000000000000000000000000000000080",
        "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
        "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
        "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
        "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
    ];
    let ed25519 = vec![0x06, 0x03, 0x2b, 0x65, 0x70];
    let real = ed25519_dalek::SigningKey::from_bytes(&[7; 32])
        .verifying_key()
        .to_bytes()
        .to_vec();
    let cases = small
        .iter()
        .map(|s| (unhex(s), CKR_ATTRIBUTE_VALUE_INVALID))
        .chain([(real, CKR_OK)]);
    for (point, want) in cases {
        let mut der = vec![0x04, 0x20];
        der.extend_from_slice(&point);
        for encoded in [point.clone(), der] {
            let t = vec![
                (CKA_CLASS, ul(CKO_PUBLIC_KEY)),
                (CKA_KEY_TYPE, ul(CKK_EC_EDWARDS)),
                (CKA_TOKEN, vec![0]),
                (CKA_EC_PARAMS, ed25519.clone()),
                (CKA_EC_POINT, encoded.clone()),
            ];
            assert_eq!(u.create(t).err().unwrap_or(CKR_OK), want, "{encoded:02x?}");
        }
    }
}
