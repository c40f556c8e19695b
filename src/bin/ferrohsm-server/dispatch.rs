//! One request to one call of the connection's token, with the connection's rights checked
//! first: the slots it sees (by token label or serial) and whether it may log in as SO.
//! Everything else is the token's own policy, the same as in the local module: key material
//! leaves only wrapped, and the lockout counts in the store.

// The wire's integers are u64 whatever CK_ULONG is on either end (u64 on 64-bit Linux, where
// these casts change nothing; u32 on other ABIs).
#![allow(clippy::unnecessary_cast)]

use crate::conn::Connection;
use cryptoki_sys::*;
use ferrohsm::error::{Error, Result};
use ferrohsm::remote::proto::{Attribute, AttributeAnswer, Mechanism, Reply, Request, Response};
use ferrohsm::token::attributes::Template;
use ferrohsm::token::objects::AttributeValue;
use ferrohsm::token::Output;

/// The label or serial as the operator writes them: without the blank padding.
fn trimmed(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .trim_end_matches([' ', '\0'])
        .to_string()
}

/// The label of the token in `slot` if the connection is given that token (by label or
/// serial). The free slot's uninitialised token is given to no one: tokens are made on the
/// server host.
fn given_label(c: &Connection, slot: CK_SLOT_ID) -> Option<String> {
    let r = c.lib.token_state(slot).ok()?.record?;
    let (label, serial) = (trimmed(&r.label), trimmed(&r.serial));
    c.rule
        .tokens
        .iter()
        .any(|t| *t == label || *t == serial)
        .then_some(label)
}

fn given(c: &Connection, slot: CK_SLOT_ID) -> bool {
    given_label(c, slot).is_some()
}

/// `C_InitToken` of a token given to the connection, by a client with the SO right, checked
/// before the SO PIN is: a client without the right cannot try SO PINs this way either. The
/// new label is the token's own or one its `[[client]] tokens` name, so re-initialising never
/// hands a token this client set up (SO and user PIN known to it) to another client that is
/// given that label, nor takes it out of this client's reach.
fn init_token(
    c: &Connection,
    s: u64,
    so_pin: &[u8],
    label: &[u8; 32],
    user_pin: Option<&[u8]>,
) -> Result<()> {
    let (s, old) = slot_and_label(c, s)?;
    if !c.rule.so {
        log::warn!(
            "{}: C_InitToken refused: its [[client]] entry does not have so = true",
            c.who
        );
        return Err(Error(CKR_USER_TYPE_INVALID));
    }
    let new = trimmed(label);
    if new != old && !c.rule.tokens.contains(&new) {
        log::warn!(
            "{}: C_InitToken of {old:?} refused: the new label {new:?} is not among its [[client]] tokens",
            c.who
        );
        return Err(Error(CKR_ARGUMENTS_BAD));
    }
    c.lib.init_token_with_user_pin(s, so_pin, label, user_pin)?;
    log::info!(
        "{}: re-initialised the token {old:?} in slot {s} as {new:?}",
        c.who
    );
    Ok(())
}

/// The slot, if its token is given to the connection (else logged, `CKR_SLOT_ID_INVALID`),
/// and the token's label.
fn slot_and_label(c: &Connection, slot: u64) -> Result<(CK_SLOT_ID, String)> {
    let s = slot as CK_SLOT_ID;
    let Some(label) = given_label(c, s) else {
        log::warn!(
            "{}: asked for slot {s}, whose token is not given to it ([[client]] tokens)",
            c.who
        );
        return Err(Error(CKR_SLOT_ID_INVALID));
    };
    Ok((s, label))
}

fn slot(c: &Connection, slot: u64) -> Result<CK_SLOT_ID> {
    slot_and_label(c, slot).map(|(s, _)| s)
}

fn template(t: Vec<Attribute>) -> Result<Template> {
    Template::parse(t.into_iter().map(|(t, v)| (t as CK_ATTRIBUTE_TYPE, v)))
}

fn output(o: Output) -> Reply {
    match o {
        Output::Length(n) => Reply::Length(n as u64),
        // Moved out, not copied: the token's buffer is left empty.
        Output::Data(mut d) => Reply::Data(std::mem::take(&mut *d)),
    }
}

fn cap(c: Option<u64>) -> Result<Option<usize>> {
    Ok(c.map(|c| usize::try_from(c).unwrap_or(usize::MAX)))
}

fn h(v: u64) -> CK_ULONG {
    v as CK_ULONG
}

/// Signature mechanisms the token computes on the calling thread in tens of microseconds and
/// without waiting for anything: ECDSA and EdDSA (`engine::ec`) and the MACs. An RSA private
/// operation waits in the engine's combining scheduler for the other callers of its batch
/// (the more threads wait there, the fuller the batch), and post-quantum signatures take
/// milliseconds; those stay on the blocking pool.
fn quick_sign(ty: CK_MECHANISM_TYPE) -> bool {
    matches!(
        ty,
        CKM_ECDSA
            | CKM_ECDSA_SHA1
            | CKM_ECDSA_SHA224
            | CKM_ECDSA_SHA256
            | CKM_ECDSA_SHA384
            | CKM_ECDSA_SHA512
            | CKM_ECDSA_SHA3_224
            | CKM_ECDSA_SHA3_256
            | CKM_ECDSA_SHA3_384
            | CKM_ECDSA_SHA3_512
            | CKM_EDDSA
            | CKM_SHA_1_HMAC
            | CKM_SHA224_HMAC
            | CKM_SHA256_HMAC
            | CKM_SHA384_HMAC
            | CKM_SHA512_HMAC
            | CKM_AES_CMAC
    )
}

/// Whether `request` may wait (for the engine's batch, the store's writes, the PIN's key
/// derivation, a long computation) and so runs on tokio's blocking pool; the others are
/// answered on the connection's task, saving two hand-offs between threads
/// (docs/performance.md, "Fewer hand-offs"). A `SignInit` never waits on the engine: it finds
/// the key (the store's generation read first; the key prepared at its first use on the
/// connection) and asks the signature's length. Its bookkeeping (`quick_signs`) only ever sends
/// a call to the pool that could have been answered inline, never the reverse: a session is
/// marked at a successful `SignInit` of a quick mechanism, which is then its operation.
///
/// On a PostgreSQL store every call waits (`Connection::store_waits`).
pub fn waits(c: &Connection, request: &Request) -> bool {
    if c.store_waits {
        return true;
    }
    match request {
        Request::SignInit { .. } | Request::SessionInfo { .. } | Request::CheckSession { .. } => false,
        Request::Sign { capacity: None, .. } => false,
        Request::SignInitAndSign { mechanism, .. } => !quick_sign(mechanism.ty as CK_MECHANISM_TYPE),
        Request::Sign { session, .. } | Request::SignUpdate { session, .. } => {
            !c.quick_signs.lock().contains(session)
        }
        _ => true,
    }
}

pub fn call(c: &Connection, request: Request) -> Response {
    if log::log_enabled!(log::Level::Debug) {
        if let Some(what) = traced(&request) {
            log::debug!("{}: request {what}", c.who);
        }
    }
    // Records the store writes for this call name the client (`store::audit`).
    ferrohsm::store::audit::intent::as_client(&c.identity, || run(c, request)).map_err(Error::rv)
}

/// The requests of a signature, named for the debug log: how many round trips a signature
/// takes is read there (tests/remote.rs counts the length queries that reach the server).
fn traced(request: &Request) -> Option<&'static str> {
    Some(match request {
        Request::SignInit { .. } => "SignInit",
        Request::SignInitAndSign { .. } => "SignInitAndSign",
        Request::Sign { capacity: None, .. } => "Sign (length query)",
        Request::Sign { .. } => "Sign",
        Request::SignUpdate { .. } => "SignUpdate",
        Request::Digest { capacity: None, .. } => "Digest (length query)",
        _ => return None,
    })
}

/// `C_SignInit` on the connection's session, and the session marked for the quick path when
/// its mechanism takes it. The session's operation is then this one (a failed `SignInit`
/// leaves the previous one, and its mark, as they were).
fn sign_init(c: &Connection, session: u64, mechanism: Mechanism, key: u64) -> Result<()> {
    let quick = quick_sign(mechanism.ty as CK_MECHANISM_TYPE);
    c.lib.sign_init(
        session as CK_SESSION_HANDLE,
        mechanism.parse()?,
        key as CK_OBJECT_HANDLE,
    )?;
    if quick {
        c.quick_signs.lock().insert(session);
    } else {
        c.quick_signs.lock().remove(&session);
    }
    Ok(())
}

fn run(c: &Connection, request: Request) -> Result<Reply> {
    let lib = &c.lib;
    let done = |r: Result<()>| r.map(|()| Reply::Done);
    let handle = |r: Result<CK_ULONG>| r.map(|o| Reply::Handle(o as u64));
    use Request as R;
    match request {
        R::SlotList { token_present } => Ok(Reply::Handles(
            lib.slot_list(token_present)?
                .into_iter()
                .filter(|s| given(c, *s))
                .map(|s| s as u64)
                .collect(),
        )),
        R::CheckSlot { slot: s } => done(lib.check_slot(slot(c, s)?)),
        R::TokenInfo { slot: s } => lib.token_info(slot(c, s)?).map(Reply::TokenInfo),
        R::MechanismList { slot: s } => Ok(Reply::Handles(
            lib.mechanism_list(slot(c, s)?)?
                .into_iter()
                .map(|m| m as u64)
                .collect(),
        )),
        R::MechanismInfo { slot: s, ty } => {
            lib.mechanism_info(slot(c, s)?, h(ty))
                .map(|i| Reply::MechanismInfo {
                    min: i.ulMinKeySize as u64,
                    max: i.ulMaxKeySize as u64,
                    flags: i.flags as u64,
                })
        }
        R::OpenSession { slot: s, flags } => handle(lib.open_session(slot(c, s)?, h(flags))),
        R::CloseSession { session } => {
            c.quick_signs.lock().remove(&session);
            done(lib.close_session(h(session)))
        }
        R::CloseAllSessions { slot: s } => {
            // Other slots' marks go too: their next C_Sign runs on the pool, no worse.
            c.quick_signs.lock().clear();
            done(lib.close_all_sessions(slot(c, s)?))
        }
        R::CheckSession { session } => done(lib.check_session(h(session))),
        R::SessionInfo { session } => lib.session_info(h(session)).map(Reply::SessionInfo),
        R::HasCryptoOperation { session } => lib.has_crypto_operation(h(session)).map(Reply::Bool),
        R::Login { session, user, pin } => {
            if h(user) == CKU_SO && !c.rule.so {
                lib.check_session(h(session))?;
                log::warn!(
                    "{}: SO login refused: its [[client]] entry does not have so = true",
                    c.who
                );
                return Err(Error(CKR_USER_TYPE_INVALID));
            }
            done(lib.login(h(session), h(user), &pin.0))
        }
        R::Logout { session } => done(lib.logout(h(session))),
        R::InitPin { session, pin } => done(lib.init_pin(h(session), &pin.0)),
        R::SetPin { session, old, new } => done(lib.set_pin(h(session), &old.0, &new.0)),
        R::Cancel { session, flags } => done(lib.cancel(h(session), h(flags))),
        R::CreateObject { session, template: t } => handle(lib.create_object(h(session), template(t)?)),
        R::CopyObject {
            session,
            object,
            template: t,
        } => handle(lib.copy_object(h(session), h(object), template(t)?)),
        R::DestroyObject { session, object } => done(lib.destroy_object(h(session), h(object))),
        R::ObjectSize { session, object } => lib
            .object_size(h(session), h(object))
            .map(|n| Reply::Size(n as u64)),
        R::GetAttributes {
            session,
            object,
            types,
        } => {
            let types: Vec<CK_ATTRIBUTE_TYPE> = types.into_iter().map(h).collect();
            let mut answers = Vec::with_capacity(types.len());
            lib.attribute_values(h(session), h(object), &types, |_, v| {
                answers.push(match v {
                    AttributeValue::Value(v) => AttributeAnswer::Value(v.to_vec()),
                    AttributeValue::Sensitive => AttributeAnswer::Sensitive,
                    AttributeValue::Invalid => AttributeAnswer::Invalid,
                });
            })?;
            Ok(Reply::Attributes(answers))
        }
        R::SetAttributes {
            session,
            object,
            template: t,
        } => done(lib.set_attributes(h(session), h(object), template(t)?)),
        R::FindInit { session, template: t } => done(lib.find_init(
            h(session),
            t.into_iter().map(|(t, v)| (t as CK_ATTRIBUTE_TYPE, v)).collect(),
        )),
        R::FindNext { session, max } => Ok(Reply::Handles(
            lib.find_next(h(session), max as usize)?
                .into_iter()
                .map(|o| o as u64)
                .collect(),
        )),
        R::FindFinal { session } => done(lib.find_final(h(session))),
        R::GenerateKey {
            session,
            mechanism,
            template: t,
        } => {
            let t = template(t)?;
            handle(lib.generate_key(h(session), &mechanism.parse()?, t))
        }
        R::GenerateKeyPair {
            session,
            mechanism,
            public,
            private,
        } => {
            let (public, private) = (template(public)?, template(private)?);
            let (p, s) = lib.generate_key_pair(h(session), &mechanism.parse()?, public, private)?;
            Ok(Reply::KeyPair(p as u64, s as u64))
        }
        R::WrapKey {
            session,
            mechanism,
            wrapping,
            key,
            capacity,
        } => lib
            .wrap_key(
                h(session),
                mechanism.parse()?,
                h(wrapping),
                h(key),
                cap(capacity)?,
            )
            .map(output),
        R::UnwrapKey {
            session,
            mechanism,
            unwrapping,
            wrapped,
            template: t,
        } => {
            let t = template(t)?;
            handle(lib.unwrap_key(h(session), mechanism.parse()?, h(unwrapping), &wrapped, t))
        }
        R::DeriveKey {
            session,
            mechanism,
            base,
            template: t,
        } => {
            let t = template(t)?;
            handle(lib.derive_key(h(session), mechanism.parse()?, h(base), t))
        }
        R::SignInit {
            session,
            mechanism,
            key,
        } => {
            sign_init(c, session, mechanism, key)?;
            // The token's own answer to the length query, asked now (it ends nothing): a
            // `Signer` gives its length from the key and mechanism alone (no input), so it is
            // the answer to every length query of this operation and the client may give it.
            let signature_len = match lib.sign(h(session), None, Ok(None))? {
                Output::Length(n) => Some(n as u64),
                Output::Data(_) => None,
            };
            Ok(Reply::SignInit { signature_len })
        }
        R::Sign {
            session,
            data,
            capacity,
        } => lib
            .sign(h(session), data.as_deref().map(Ok), cap(capacity))
            .map(output),
        R::SignInitAndSign {
            session,
            mechanism,
            key,
            data,
            capacity,
        } => {
            sign_init(c, session, mechanism, key)?;
            lib.sign(h(session), Some(Ok(&data)), cap(capacity)).map(output)
        }
        R::SignUpdate { session, data } => done(lib.sign_update(h(session), Ok(&data))),
        R::VerifyInit {
            session,
            mechanism,
            key,
        } => done(lib.verify_init(h(session), mechanism.parse()?, h(key))),
        R::Verify {
            session,
            data,
            signature,
        } => done(lib.verify(h(session), data.as_deref().map(Ok), Ok(&signature))),
        R::VerifyUpdate { session, data } => done(lib.verify_update(h(session), Ok(&data))),
        R::EncryptInit {
            session,
            mechanism,
            key,
        } => done(lib.encrypt_init(h(session), mechanism.parse()?, h(key))),
        R::DecryptInit {
            session,
            mechanism,
            key,
        } => done(lib.decrypt_init(h(session), mechanism.parse()?, h(key))),
        R::Crypt {
            session,
            encrypt,
            data,
            capacity,
        } => lib
            .crypt(h(session), encrypt, Ok(&data), cap(capacity))
            .map(output),
        R::CryptUpdate {
            session,
            encrypt,
            data,
            capacity,
        } => lib
            .crypt_update(h(session), encrypt, Ok(&data), cap(capacity))
            .map(output),
        R::CryptFinal {
            session,
            encrypt,
            capacity,
        } => lib.crypt_final(h(session), encrypt, cap(capacity)).map(output),
        R::DigestInit { session, mechanism } => done(lib.digest_init(h(session), mechanism.parse()?)),
        R::Digest {
            session,
            data,
            capacity,
        } => lib
            .digest(h(session), data.as_deref().map(Ok), cap(capacity))
            .map(output),
        R::DigestUpdate { session, data } => done(lib.digest_update(h(session), Ok(&data))),
        R::DigestKey { session, key } => done(lib.digest_key(h(session), h(key))),
        R::InitToken {
            slot: s,
            so_pin,
            label,
            user_pin,
        } => done(init_token(
            c,
            s,
            &so_pin.0,
            &label,
            user_pin.as_ref().map(|p| &p.0[..]),
        )),
        R::GenerateRandom { session, len } => {
            let mut buf = vec![0u8; len as usize];
            lib.generate_random(h(session), &mut buf)?;
            Ok(Reply::Data(buf))
        }
    }
}
