//! Cryptographic functions of the library: sign and verify (private keys and MACs), encrypt,
//! decrypt, digest, wrap and unwrap (secret keys, and private keys as PKCS#8), derive. Checks
//! key class, usage flags and allowed mechanisms before any work, counts the use of a key with
//! a usage limit (`usage::use_key`), then hands the key to the mechanism's family
//! (`mechanism::Family`), whichever it is.

use super::attributes::Template;
use super::library::{Library, Output};
use super::object::Object;
use super::operation::{CryptOp, DigestOp, Operation, SignOp, VerifyOp};
use super::pkcs8;
use super::policy::{self, Origin};
use super::session::Session;
use super::usage::use_key;
use crate::error::{fail, fail_because, Error, Result};
use crate::mechanism::key_model::check_secret_len;
use crate::mechanism::{self, Mechanism, Op};
use crate::store::audit::{
    event,
    intent::{during, Intent},
    Named,
};
use cryptoki_sys::*;
use zeroize::Zeroizing;

/// Checks that `obj` is a key of the right kind for `mech` with the `usage` flag set.
fn check_key(obj: &Object, mech: &Mechanism, class: CK_OBJECT_CLASS, usage: CK_ATTRIBUTE_TYPE) -> Result<()> {
    let class_ok = obj.attrs.class() == Some(class)
        // Verification and encryption also accept a private key object: it holds the public half.
        || (class == CKO_PUBLIC_KEY && obj.attrs.class() == Some(CKO_PRIVATE_KEY));
    let type_ok = mech.accepts_key_type(obj.attrs.key_type());
    if !class_ok || !type_ok {
        return fail_because(
            CKR_KEY_TYPE_INCONSISTENT,
            format!(
                "object {} is not a key for mechanism 0x{:x}",
                obj.handle,
                mech.mechanism_type()
            ),
        );
    }
    // The usage flag of a private key object used for its public half is not the one asked.
    let flag_ok = obj.attrs.class() != Some(class) || obj.attrs.bool_or(usage, false);
    if !flag_ok {
        return fail_because(
            CKR_KEY_FUNCTION_NOT_PERMITTED,
            format!(
                "key {} does not allow attribute 0x{usage:x}'s operation",
                obj.handle
            ),
        );
    }
    if !obj.allows(mech.mechanism_type()) {
        return fail_because(
            CKR_MECHANISM_INVALID,
            format!(
                "key {} does not allow mechanism 0x{:x} (CKA_ALLOWED_MECHANISMS)",
                obj.handle,
                mech.mechanism_type()
            ),
        );
    }
    Ok(())
}

fn supports(mech: &Mechanism, flag: CK_FLAGS) -> Result<()> {
    match mechanism::mechanism_info(mech.mechanism_type()) {
        Some(i) if i.flags & flag != 0 => Ok(()),
        _ => fail_because(
            CKR_MECHANISM_INVALID,
            format!(
                "mechanism 0x{:x} cannot be used for this operation",
                mech.mechanism_type()
            ),
        ),
    }
}

/// An argument of an operation call as the C boundary converted it: a bad pointer or length
/// arrives as its error, to be taken inside the operation so that it ends it like any other
/// error of the call (the ffi never decides an operation's fate itself).
pub type Arg<T> = Result<T>;

/// Runs `f` on the session's operation in `slot`; any error ends it, as PKCS#11 says of every
/// Update, Final and one-shot call. The exceptions, a too-small buffer and a length query, are
/// not errors here: they are `Ok((Output::Length, false))`. This is the one place of the rule.
fn run_op<T, R>(slot: &mut Option<T>, f: impl FnOnce(&mut T) -> Result<(R, bool)>) -> Result<R> {
    let op = slot.as_mut().ok_or(Error(CKR_OPERATION_NOT_INITIALIZED))?;
    match f(op) {
        Ok((r, done)) => {
            if done {
                *slot = None;
            }
            Ok(r)
        }
        Err(e) => {
            *slot = None;
            Err(e)
        }
    }
}

/// `run_op` for calls that answer with output under the two-call convention: `f` gets the
/// caller's capacity (`None` for a length query), and output that does not fit becomes its
/// length with the operation kept, whatever `f` did, so no operation can overrun a buffer or
/// lose its result to a short one.
fn run_output_op<T>(
    slot: &mut Option<T>,
    capacity: Arg<Option<usize>>,
    f: impl FnOnce(&mut T, Option<usize>) -> Result<(Output, bool)>,
) -> Result<Output> {
    run_op(slot, |op| {
        let capacity = capacity?;
        match f(op, capacity)? {
            (Output::Data(d), _) if capacity.is_none_or(|c| d.len() > c) => {
                Ok((Output::Length(d.len()), false))
            }
            answer => Ok(answer),
        }
    })
}

impl Library {
    fn with_session<R>(&self, h: CK_SESSION_HANDLE, f: impl FnOnce(&mut Session) -> Result<R>) -> Result<R> {
        let session = self.session(h)?;
        let mut s = session.lock();
        f(&mut s)
    }

    pub fn sign_init(&self, h: CK_SESSION_HANDLE, mech: Mechanism, key: CK_OBJECT_HANDLE) -> Result<()> {
        self.with_session(h, |s| {
            if s.sign.is_some() {
                return fail(CKR_OPERATION_ACTIVE);
            }
            supports(&mech, CKF_SIGN)?;
            let obj = s.token.object(key).map_err(|_| Error(CKR_KEY_HANDLE_INVALID))?;
            let class = mech.key_class(Op::Sign).ok_or(Error(CKR_MECHANISM_INVALID))?;
            check_key(&obj, &mech, class, CKA_SIGN)?;
            let signer = mech.family().signer(&mech, use_key(&s.token, &obj, class)?)?;
            let needs_auth = s.awaiting_number(obj.attrs.bool_or(CKA_ALWAYS_AUTHENTICATE, false));
            s.sign = Some(SignOp::new(signer, needs_auth));
            Ok(())
        })
    }

    /// `C_Sign` (`data` given) or `C_SignFinal` (`None`), with the two-call convention.
    pub fn sign(
        &self,
        h: CK_SESSION_HANDLE,
        data: Option<Arg<&[u8]>>,
        capacity: Arg<Option<usize>>,
    ) -> Result<Output> {
        self.with_session(h, |s| {
            run_output_op(&mut s.sign, capacity, |op, capacity| {
                let data = data.transpose()?;
                let len = op.signature_len();
                if capacity.is_none_or(|c| c < len) {
                    if data.is_some() && op.stage == Operation::MultiPart {
                        return fail(CKR_OPERATION_ACTIVE);
                    }
                    return Ok((Output::Length(len), false));
                }
                Ok((Output::Data(Zeroizing::new(op.sign(data)?)), true))
            })
        })
    }

    pub fn sign_update(&self, h: CK_SESSION_HANDLE, data: Arg<&[u8]>) -> Result<()> {
        self.with_session(h, |s| {
            run_op(&mut s.sign, |op| op.update(data?).map(|_| ((), false)))
        })
    }

    pub fn verify_init(&self, h: CK_SESSION_HANDLE, mech: Mechanism, key: CK_OBJECT_HANDLE) -> Result<()> {
        self.with_session(h, |s| {
            if s.verify.is_some() {
                return fail(CKR_OPERATION_ACTIVE);
            }
            supports(&mech, CKF_VERIFY)?;
            let obj = s.token.object(key).map_err(|_| Error(CKR_KEY_HANDLE_INVALID))?;
            let class = mech.key_class(Op::Verify).ok_or(Error(CKR_MECHANISM_INVALID))?;
            check_key(&obj, &mech, class, CKA_VERIFY)?;
            let verifier = mech.family().verifier(&mech, use_key(&s.token, &obj, class)?)?;
            s.verify = Some(VerifyOp::new(verifier));
            Ok(())
        })
    }

    pub fn verify(
        &self,
        h: CK_SESSION_HANDLE,
        data: Option<Arg<&[u8]>>,
        signature: Arg<&[u8]>,
    ) -> Result<()> {
        self.with_session(h, |s| {
            run_op(&mut s.verify, |op| {
                op.verify(data.transpose()?, signature?).map(|_| ((), true))
            })
        })
    }

    pub fn verify_update(&self, h: CK_SESSION_HANDLE, data: Arg<&[u8]>) -> Result<()> {
        self.with_session(h, |s| {
            run_op(&mut s.verify, |op| op.update(data?).map(|_| ((), false)))
        })
    }

    fn crypt_init(
        &self,
        h: CK_SESSION_HANDLE,
        mech: Mechanism,
        key: CK_OBJECT_HANDLE,
        encrypt: bool,
    ) -> Result<()> {
        self.with_session(h, |s| {
            let slot_busy = if encrypt {
                s.encrypt.is_some()
            } else {
                s.decrypt.is_some()
            };
            if slot_busy {
                return fail(CKR_OPERATION_ACTIVE);
            }
            let obj = s.token.object(key).map_err(|_| Error(CKR_KEY_HANDLE_INVALID))?;
            let (usage, op) = if encrypt {
                (CKA_ENCRYPT, Op::Encrypt)
            } else {
                (CKA_DECRYPT, Op::Decrypt)
            };
            let class = mech.key_class(op).ok_or(Error(CKR_MECHANISM_INVALID))?;
            check_key(&obj, &mech, class, usage)?;
            let needs_auth = s.awaiting_number(
                class == CKO_PRIVATE_KEY && obj.attrs.bool_or(CKA_ALWAYS_AUTHENTICATE, false),
            );
            let op = CryptOp {
                crypter: mech
                    .family()
                    .crypter(&mech, use_key(&s.token, &obj, class)?, encrypt)?,
                needs_auth,
            };
            if encrypt {
                s.encrypt = Some(op);
            } else {
                s.decrypt = Some(op);
            }
            Ok(())
        })
    }

    pub fn encrypt_init(&self, h: CK_SESSION_HANDLE, mech: Mechanism, key: CK_OBJECT_HANDLE) -> Result<()> {
        self.crypt_init(h, mech, key, true)
    }

    pub fn decrypt_init(&self, h: CK_SESSION_HANDLE, mech: Mechanism, key: CK_OBJECT_HANDLE) -> Result<()> {
        self.crypt_init(h, mech, key, false)
    }

    /// `C_Encrypt`/`C_Decrypt`: single-part, with the two-call convention. A length query
    /// answers an upper bound where the exact length needs the work done (RSA and padded AES
    /// decryption); with a buffer, the output that does not fit becomes its exact length.
    pub fn crypt(
        &self,
        h: CK_SESSION_HANDLE,
        encrypt: bool,
        data: Arg<&[u8]>,
        capacity: Arg<Option<usize>>,
    ) -> Result<Output> {
        self.with_session(h, |s| {
            let slot = if encrypt { &mut s.encrypt } else { &mut s.decrypt };
            run_output_op(slot, capacity, |op, capacity| {
                let data = data?;
                if op.crypter.is_multipart() {
                    return fail_because(
                        CKR_OPERATION_ACTIVE,
                        "a multi-part operation is running: finish it with C_EncryptFinal/C_DecryptFinal",
                    );
                }
                // An upper bound where the exact length needs the work done (RSA and padded
                // AES decryption); run_output_op answers the exact one if it does not fit.
                let len = op.crypter.single_len(data.len())?;
                if capacity.is_none_or(|c| encrypt && c < len) {
                    return Ok((Output::Length(len), false));
                }
                Ok((Output::Data(op.single(data)?), true))
            })
        })
    }

    /// `C_EncryptUpdate`/`C_DecryptUpdate`: the next part (AES modes); its output length is
    /// known before any state changes, so a short buffer loses nothing.
    pub fn crypt_update(
        &self,
        h: CK_SESSION_HANDLE,
        encrypt: bool,
        data: Arg<&[u8]>,
        capacity: Arg<Option<usize>>,
    ) -> Result<Output> {
        self.with_session(h, |s| {
            let slot = if encrypt { &mut s.encrypt } else { &mut s.decrypt };
            run_output_op(slot, capacity, |op, capacity| {
                let data = data?;
                let len = op.crypter.update_len(data.len())?;
                if capacity.is_none_or(|c| c < len) {
                    return Ok((Output::Length(len), false));
                }
                Ok((Output::Data(op.crypter.update(data)?), false))
            })
        })
    }

    /// `C_EncryptFinal`/`C_DecryptFinal`: the last part, which ends the operation.
    pub fn crypt_final(
        &self,
        h: CK_SESSION_HANDLE,
        encrypt: bool,
        capacity: Arg<Option<usize>>,
    ) -> Result<Output> {
        self.with_session(h, |s| {
            let slot = if encrypt { &mut s.encrypt } else { &mut s.decrypt };
            run_output_op(slot, capacity, |op, capacity| {
                let len = op.crypter.final_len()?;
                let Some(_) = capacity else {
                    return Ok((Output::Length(len), false));
                };
                // A last part that does not fit becomes its length (run_output_op), the
                // operation kept: `finish` changed nothing.
                Ok((Output::Data(op.crypter.finish()?), true))
            })
        })
    }

    pub fn digest_init(&self, h: CK_SESSION_HANDLE, mech: Mechanism) -> Result<()> {
        let Some(alg) = mech.family().digest(&mech) else {
            return fail(CKR_MECHANISM_INVALID);
        };
        self.with_session(h, |s| {
            if s.digest.is_some() {
                return fail(CKR_OPERATION_ACTIVE);
            }
            s.digest = Some(DigestOp {
                hasher: alg.hasher(),
                alg,
                stage: Operation::Fresh,
            });
            Ok(())
        })
    }

    /// `C_Digest` (`data` given) or `C_DigestFinal`.
    pub fn digest(
        &self,
        h: CK_SESSION_HANDLE,
        data: Option<Arg<&[u8]>>,
        capacity: Arg<Option<usize>>,
    ) -> Result<Output> {
        self.with_session(h, |s| {
            run_output_op(&mut s.digest, capacity, |op, capacity| {
                let data = data.transpose()?;
                if data.is_some() && op.stage == Operation::MultiPart {
                    return fail(CKR_OPERATION_ACTIVE);
                }
                let len = op.alg.output_len();
                if capacity.is_none_or(|c| c < len) {
                    return Ok((Output::Length(len), false));
                }
                let mut h = op.hasher.clone();
                if let Some(d) = data {
                    h.update(d);
                }
                Ok((Output::Data(Zeroizing::new(h.finalize())), true))
            })
        })
    }

    pub fn digest_update(&self, h: CK_SESSION_HANDLE, data: Arg<&[u8]>) -> Result<()> {
        self.with_session(h, |s| {
            run_op(&mut s.digest, |op| {
                op.hasher.update(data?);
                op.stage = Operation::MultiPart;
                Ok(((), false))
            })
        })
    }

    /// `C_DigestKey`: adds a secret key's value to the running digest.
    pub fn digest_key(&self, h: CK_SESSION_HANDLE, key: CK_OBJECT_HANDLE) -> Result<()> {
        self.with_session(h, |s| {
            let obj = s.token.object(key).map_err(|_| Error(CKR_KEY_HANDLE_INVALID));
            run_op(&mut s.digest, |op| {
                let obj = obj?;
                if obj.attrs.class() != Some(CKO_SECRET_KEY) {
                    return fail(CKR_KEY_INDIGESTIBLE);
                }
                let value = obj.attrs.get(CKA_VALUE).unwrap_or(&[]);
                // A key stored before the minimum was enforced: its hash would reveal it.
                check_secret_len(value.len(), "digested")?;
                op.hasher.update(value);
                op.stage = Operation::MultiPart;
                Ok(((), false))
            })
        })
    }

    /// `C_WrapKey`: a secret key's value, or a private key as PKCS#8 `PrivateKeyInfo` (the
    /// form SoftHSM and OpenSSL use), encrypted under the wrapping key. What may leave the
    /// token is decided by `policy::check_wrap` alone, for every kind of key.
    pub fn wrap_key(
        &self,
        h: CK_SESSION_HANDLE,
        mech: Mechanism,
        wrapping: CK_OBJECT_HANDLE,
        key: CK_OBJECT_HANDLE,
        capacity: Option<usize>,
    ) -> Result<Output> {
        self.with_session(h, |s| {
            let wrapper = s
                .token
                .object(wrapping)
                .map_err(|_| Error(CKR_WRAPPING_KEY_HANDLE_INVALID))?;
            let target = s.token.object(key).map_err(|_| Error(CKR_KEY_HANDLE_INVALID))?;
            if !matches!(target.attrs.class(), Some(CKO_SECRET_KEY | CKO_PRIVATE_KEY)) {
                return fail_because(
                    CKR_KEY_NOT_WRAPPABLE,
                    "only secret and private keys can be wrapped",
                );
            }
            policy::check_wrap(&wrapper.attrs, &target.attrs)?;
            let value = match target.attrs.class() {
                Some(CKO_PRIVATE_KEY) => pkcs8::encode(&target.attrs)?,
                _ => Zeroizing::new(target.attrs.get(CKA_VALUE).unwrap_or(&[]).to_vec()),
            };
            let wrapping_key = |class| {
                check_key(&wrapper, &mech, class, CKA_WRAP).map_err(|e| {
                    if e.0 == CKR_KEY_TYPE_INCONSISTENT {
                        Error(CKR_WRAPPING_KEY_TYPE_INCONSISTENT)
                    } else {
                        e
                    }
                })
            };
            let class = mech.key_class(Op::Wrap).ok_or(Error(CKR_MECHANISM_INVALID))?;
            wrapping_key(class)?;
            let wrapped = mech
                .family()
                .wrap(&mech, use_key(&s.token, &wrapper, class)?, &value)?;
            if capacity.is_none_or(|c| c < wrapped.len()) {
                return Ok(Output::Length(wrapped.len()));
            }
            // No key leaves without its record.
            let intent = Intent::new(event::WRAP_KEY).mechanism(mech.mechanism_type());
            let subject = Named {
                id: target.handle,
                class: target.attrs.class(),
                label: target.attrs.get(CKA_LABEL),
            };
            during(intent, || self.store.audit(s.token.slot_id, Some(subject)))?;
            Ok(Output::Data(Zeroizing::new(wrapped)))
        })
    }

    /// `C_UnwrapKey`: a secret key (the template's class, or no class), or a private key
    /// (`CKO_PRIVATE_KEY`) from the PKCS#8 inside; the unwrapping key's
    /// `CKA_UNWRAP_TEMPLATE` applies first (`policy::unwrap_template`).
    pub fn unwrap_key(
        &self,
        h: CK_SESSION_HANDLE,
        mech: Mechanism,
        unwrapping: CK_OBJECT_HANDLE,
        wrapped: &[u8],
        template: Template,
    ) -> Result<CK_OBJECT_HANDLE> {
        self.with_session(h, |s| {
            let authorized = std::mem::take(&mut s.context_login);
            let unwrapper = s
                .token
                .object(unwrapping)
                .map_err(|_| Error(CKR_UNWRAPPING_KEY_HANDLE_INVALID))?;
            check_context_login(&unwrapper, authorized)?;
            let unwrapping_key = |class| {
                check_key(&unwrapper, &mech, class, CKA_UNWRAP).map_err(|e| {
                    if e.0 == CKR_KEY_TYPE_INCONSISTENT {
                        Error(CKR_UNWRAPPING_KEY_TYPE_INCONSISTENT)
                    } else {
                        e
                    }
                })
            };
            let class = mech.key_class(Op::Unwrap).ok_or(Error(CKR_MECHANISM_INVALID))?;
            unwrapping_key(class)?;
            policy::check_unwrap(&unwrapper.attrs, mech.family().unwrap_reveals_nothing(&mech))?;
            let value = mech
                .family()
                .unwrap(&mech, use_key(&s.token, &unwrapper, class)?, wrapped)?;
            let template = policy::unwrap_template(&unwrapper.attrs, template)?;
            during(
                Intent::new(event::UNWRAP_KEY).mechanism(mech.mechanism_type()),
                || {
                    if template.attrs().class() == Some(CKO_PRIVATE_KEY) {
                        return self.add_unwrapped_private(s, template, &value);
                    }
                    self.add_secret(s, template, value.to_vec(), Origin::Unwrapped)
                },
            )
        })
    }

    /// `C_DeriveKey`: `CKM_ECDH1_DERIVE` (`CKD_NULL`), a secret key whose value is the shared
    /// x-coordinate, or its leftmost `CKA_VALUE_LEN` bytes, the peer's point checked to be on
    /// the base key's curve first (no invalid-curve attack reaches the scalar); and
    /// `CKM_AES_ECB_ENCRYPT_DATA`/`CKM_AES_CBC_ENCRYPT_DATA`, whose value is the base key's
    /// encryption of the data. Every derivation: the base key's `CKA_DERIVE` and
    /// `CKA_ALLOWED_MECHANISMS` (`check_key`), its `CKA_ALWAYS_AUTHENTICATE`, its
    /// `CKA_DERIVE_TEMPLATE` (`policy::derive_template`) and the sticky attributes
    /// (`policy::derived_from`).
    pub fn derive_key(
        &self,
        h: CK_SESSION_HANDLE,
        mech: Mechanism,
        base: CK_OBJECT_HANDLE,
        template: Template,
    ) -> Result<CK_OBJECT_HANDLE> {
        self.with_session(h, |s| {
            let authorized = std::mem::take(&mut s.context_login);
            supports(&mech, CKF_DERIVE)?;
            let obj = s.token.object(base).map_err(|_| Error(CKR_KEY_HANDLE_INVALID))?;
            let class = mech.key_class(Op::Derive).ok_or(Error(CKR_MECHANISM_INVALID))?;
            check_key(&obj, &mech, class, CKA_DERIVE)?;
            check_context_login(&obj, authorized)?;
            let derived = mech.family().derive(&mech, use_key(&s.token, &obj, class)?)?;
            let secret = derived.secret;
            let mut t = policy::derive_template(&obj.attrs, template)?.into_attributes();
            if t.class().is_some_and(|c| c != CKO_SECRET_KEY) {
                return fail_because(CKR_TEMPLATE_INCONSISTENT, "key derivation makes secret keys only");
            }
            let len = match t.remove(CKA_VALUE_LEN) {
                Some(v) => match <[u8; std::mem::size_of::<CK_ULONG>()]>::try_from(v.as_slice()) {
                    Ok(b) => CK_ULONG::from_ne_bytes(b) as usize,
                    Err(_) => return fail(CKR_ATTRIBUTE_VALUE_INVALID),
                },
                None => secret.len(),
            };
            if len > secret.len() && derived.len_from_param {
                // The data is the mechanism's parameter: it is what falls short (SoftHSM and
                // python-pkcs11's suite expect this code).
                return fail_because(
                    CKR_MECHANISM_PARAM_INVALID,
                    format!(
                        "CKA_VALUE_LEN {len}: the data to encrypt is {} bytes",
                        secret.len()
                    ),
                );
            }
            if len == 0 || len > secret.len() {
                return fail_because(
                    CKR_TEMPLATE_INCONSISTENT,
                    format!(
                        "CKA_VALUE_LEN {len}: the derived secret is {} bytes",
                        secret.len()
                    ),
                );
            }
            t.set_ulong(CKA_CLASS, CKO_SECRET_KEY);
            if t.key_type().is_none() {
                t.set_ulong(CKA_KEY_TYPE, CKK_GENERIC_SECRET);
            }
            let template = Template::parse(t.iter().map(|(t, v)| (t, v.to_vec())))?;
            let origin = policy::derived_from(&obj.attrs);
            let intent = Intent::new(event::DERIVE_KEY).mechanism(mech.mechanism_type());
            during(intent, || {
                self.add_secret(s, template, secret[..len].to_vec(), origin)
            })
        })
    }
}

/// `CKA_ALWAYS_AUTHENTICATE` on a key used by a call without an Init (`C_UnwrapKey`,
/// `C_DeriveKey`): the user logs in with `CKU_CONTEXT_SPECIFIC` right before it, and that
/// login (`authorized`, taken from the session) is spent by the call whatever its key.
fn check_context_login(key: &Object, authorized: bool) -> Result<()> {
    if key.attrs.bool_or(CKA_ALWAYS_AUTHENTICATE, false) && !authorized {
        return fail_because(
            CKR_USER_NOT_LOGGED_IN,
            "this key has CKA_ALWAYS_AUTHENTICATE: call C_Login with CKU_CONTEXT_SPECIFIC right before C_UnwrapKey or C_DeriveKey",
        );
    }
    Ok(())
}
