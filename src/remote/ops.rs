//! Each PKCS#11 call of the seam as a request to the server: the same signatures as the
//! local token's (`token::Library`), so `service::Service` forwards to either.
//!
//! An argument the C boundary could not read (`Arg` holding an error) is not sent: the
//! server's operation is cancelled and the error answered, so it ends the operation as it does
//! locally (`token::crypto::run_op`). Calls not carried yet answer
//! `CKR_FUNCTION_NOT_SUPPORTED` (docs/architecture.md lists them).

// The wire's integers are u64 whatever CK_ULONG is on either end (u64 on 64-bit Linux, where
// these casts change nothing; u32 on other ABIs).
#![allow(clippy::unnecessary_cast)]

use super::client::{unexpected, Client, Init, Signing};
use super::proto::{Attribute, AttributeAnswer, Mechanism, Reply, Request, Secret, MAX_BYTES};
use crate::error::{fail, fail_because, Error, Result};
use crate::service::{RawMechanism, SessionInfo, TokenInfo};
use crate::token::attributes::Template;
use crate::token::objects::AttributeValue;
use crate::token::{Arg, Output};
use cryptoki_sys::*;
use zeroize::Zeroizing;

fn done(r: Reply) -> Result<()> {
    match r {
        Reply::Done => Ok(()),
        _ => Err(unexpected()),
    }
}

fn handle(r: Reply) -> Result<u64> {
    match r {
        Reply::Handle(h) => Ok(h),
        _ => Err(unexpected()),
    }
}

fn output(r: Reply) -> Result<Output> {
    match r {
        Reply::Length(n) => Ok(Output::Length(n as usize)),
        Reply::Data(d) => Ok(Output::Data(Zeroizing::new(d))),
        _ => Err(unexpected()),
    }
}

fn attributes(t: &Template) -> Vec<Attribute> {
    t.attrs().iter().map(|(t, v)| (t, v.to_vec())).collect()
}

fn capacity(c: Option<usize>) -> Option<u64> {
    c.map(|c| c as u64)
}

fn mech(m: RawMechanism<'_>) -> Result<Mechanism> {
    Mechanism::from_raw(m)
}

impl Client {
    /// `a`, or its error after the session's `op` operation was ended on the server.
    fn arg<T>(&self, h: CK_SESSION_HANDLE, op: CK_FLAGS, a: Arg<T>) -> Result<T> {
        a.inspect_err(|_| {
            // The error answered is the argument's, whatever the cancel meets.
            let _ = self.cancel(h, op);
        })
    }

    /// Data an operation is fed: `arg`, refused here when it is more than one request carries
    /// (`MAX_BYTES`), which ends the server's operation as an error of the call ends it
    /// locally. Sent, it would be refused by the server unread, its operation left running.
    fn data<'a>(&self, h: CK_SESSION_HANDLE, op: CK_FLAGS, a: Arg<&'a [u8]>) -> Result<&'a [u8]> {
        self.arg(
            h,
            op,
            a.and_then(|d| {
                if d.len() > MAX_BYTES {
                    return fail_because(
                        CKR_DATA_LEN_RANGE,
                        format!(
                            "{} bytes in one call; a remote token takes at most {MAX_BYTES}: feed them in parts (C_*Update)",
                            d.len()
                        ),
                    );
                }
                Ok(d)
            }),
        )
    }

    pub fn slot_list(&self, token_present: bool) -> Result<Vec<CK_SLOT_ID>> {
        match self.call(&Request::SlotList { token_present })? {
            Reply::Handles(s) => Ok(s.into_iter().map(|s| s as CK_SLOT_ID).collect()),
            _ => Err(unexpected()),
        }
    }

    pub fn check_slot(&self, slot: CK_SLOT_ID) -> Result<()> {
        done(self.call(&Request::CheckSlot { slot: slot as u64 })?)
    }

    pub fn token_info(&self, slot: CK_SLOT_ID) -> Result<TokenInfo> {
        match self.call(&Request::TokenInfo { slot: slot as u64 })? {
            Reply::TokenInfo(t) => Ok(t),
            _ => Err(unexpected()),
        }
    }

    pub fn mechanism_list(&self, slot: CK_SLOT_ID) -> Result<Vec<CK_MECHANISM_TYPE>> {
        match self.call(&Request::MechanismList { slot: slot as u64 })? {
            Reply::Handles(m) => Ok(m.into_iter().map(|m| m as CK_MECHANISM_TYPE).collect()),
            _ => Err(unexpected()),
        }
    }

    pub fn mechanism_info(&self, slot: CK_SLOT_ID, ty: CK_MECHANISM_TYPE) -> Result<CK_MECHANISM_INFO> {
        match self.call(&Request::MechanismInfo {
            slot: slot as u64,
            ty: ty as u64,
        })? {
            Reply::MechanismInfo { min, max, flags } => Ok(CK_MECHANISM_INFO {
                ulMinKeySize: min as CK_ULONG,
                ulMaxKeySize: max as CK_ULONG,
                flags: flags as CK_FLAGS,
            }),
            _ => Err(unexpected()),
        }
    }

    pub fn init_token(&self, slot: CK_SLOT_ID, so_pin: &[u8], label: &[u8; 32]) -> Result<()> {
        self.init_token_with_user_pin(slot, so_pin, label, None)
    }

    /// Re-initialises a token the server gives this client, which needs the SO right there
    /// (`ferrohsm-server`'s dispatch says what it allows).
    pub fn init_token_with_user_pin(
        &self,
        slot: CK_SLOT_ID,
        so_pin: &[u8],
        label: &[u8; 32],
        user_pin: Option<&[u8]>,
    ) -> Result<()> {
        done(self.call(&Request::InitToken {
            slot: slot as u64,
            so_pin: Secret(so_pin.to_vec()),
            label: *label,
            user_pin: user_pin.map(|p| Secret(p.to_vec())),
        })?)
    }

    pub fn open_session(&self, slot: CK_SLOT_ID, flags: CK_FLAGS) -> Result<CK_SESSION_HANDLE> {
        self.add_session(slot as u64, flags as u64)
    }

    pub fn close_session(&self, h: CK_SESSION_HANDLE) -> Result<()> {
        // A session whose connection was lost is closed with it: forgotten, not opened again
        // only to be closed.
        if !self.is_live(h) && self.slot_of(h).is_some() {
            self.forget_session(h);
            return Ok(());
        }
        let r = self.on_session(h, |session| Request::CloseSession { session });
        self.forget_session(h);
        done(r?)
    }

    pub fn close_all_sessions(&self, slot: CK_SLOT_ID) -> Result<()> {
        // The server closes them all in one call; the client forgets its handles of them.
        let mine: Vec<_> = self
            .session_handles()
            .into_iter()
            .filter(|h| self.session_info(*h).is_ok_and(|i| i.slot_id == slot))
            .collect();
        done(self.call(&Request::CloseAllSessions { slot: slot as u64 })?)?;
        mine.into_iter().for_each(|h| self.forget_session(h));
        self.logged_out(slot as u64);
        Ok(())
    }

    pub fn check_session(&self, h: CK_SESSION_HANDLE) -> Result<()> {
        // Known to the client and on the live connection; the server checks the rest with the
        // call that follows.
        self.session(h).map(drop)
    }

    pub fn session_info(&self, h: CK_SESSION_HANDLE) -> Result<SessionInfo> {
        match self.on_session(h, |session| Request::SessionInfo { session })? {
            Reply::SessionInfo(i) => Ok(i),
            _ => Err(unexpected()),
        }
    }

    pub fn has_crypto_operation(&self, h: CK_SESSION_HANDLE) -> Result<bool> {
        if self.has_pending(h) {
            self.session(h)?;
            return Ok(true);
        }
        match self.on_session(h, |session| Request::HasCryptoOperation { session })? {
            Reply::Bool(b) => Ok(b),
            _ => Err(unexpected()),
        }
    }

    pub fn login(&self, h: CK_SESSION_HANDLE, user: CK_USER_TYPE, pin: &[u8]) -> Result<()> {
        done(self.on_session(h, |session| Request::Login {
            session,
            user: user as u64,
            pin: Secret(pin.to_vec()),
        })?)?;
        self.logged_in(h, user, pin);
        Ok(())
    }

    pub fn logout(&self, h: CK_SESSION_HANDLE) -> Result<()> {
        // The token ends its sessions' signature operations at a logout.
        self.forget_signing();
        if let Some(slot) = self.slot_of(h) {
            self.logged_out(slot);
        }
        done(self.on_session(h, |session| Request::Logout { session })?)
    }

    pub fn init_pin(&self, h: CK_SESSION_HANDLE, pin: &[u8]) -> Result<()> {
        done(self.on_session(h, |session| Request::InitPin {
            session,
            pin: Secret(pin.to_vec()),
        })?)
    }

    pub fn set_pin(&self, h: CK_SESSION_HANDLE, old: &[u8], new: &[u8]) -> Result<()> {
        done(self.on_session(h, |session| Request::SetPin {
            session,
            old: Secret(old.to_vec()),
            new: Secret(new.to_vec()),
        })?)?;
        if let Some(slot) = self.slot_of(h) {
            self.pin_changed(slot, new);
        }
        Ok(())
    }

    pub fn cancel(&self, h: CK_SESSION_HANDLE, flags: CK_FLAGS) -> Result<()> {
        if flags & CKF_SIGN != 0 {
            self.set_signing(h, None);
            self.take_pending(h);
        }
        self.set_replay(h, |r| {
            if flags & CKF_SIGN != 0 {
                r.sign = None;
            }
            if flags & CKF_VERIFY != 0 {
                r.verify = None;
            }
        });
        done(self.on_session(h, |session| Request::Cancel {
            session,
            flags: flags as u64,
        })?)
    }

    pub fn create_object(&self, h: CK_SESSION_HANDLE, t: Template) -> Result<CK_OBJECT_HANDLE> {
        let template = attributes(&t);
        handle(self.on_session(h, |session| Request::CreateObject { session, template })?)
            .map(|o| o as CK_OBJECT_HANDLE)
    }

    pub fn copy_object(
        &self,
        h: CK_SESSION_HANDLE,
        o: CK_OBJECT_HANDLE,
        t: Template,
    ) -> Result<CK_OBJECT_HANDLE> {
        let template = attributes(&t);
        handle(self.on_session(h, |session| Request::CopyObject {
            session,
            object: o as u64,
            template,
        })?)
        .map(|o| o as CK_OBJECT_HANDLE)
    }

    pub fn destroy_object(&self, h: CK_SESSION_HANDLE, o: CK_OBJECT_HANDLE) -> Result<()> {
        done(self.on_session(h, |session| Request::DestroyObject {
            session,
            object: o as u64,
        })?)
    }

    pub fn object_size(&self, h: CK_SESSION_HANDLE, o: CK_OBJECT_HANDLE) -> Result<usize> {
        match self.on_session(h, |session| Request::ObjectSize {
            session,
            object: o as u64,
        })? {
            Reply::Size(n) => Ok(n as usize),
            _ => Err(unexpected()),
        }
    }

    pub fn attribute_values(
        &self,
        h: CK_SESSION_HANDLE,
        o: CK_OBJECT_HANDLE,
        types: &[CK_ATTRIBUTE_TYPE],
        mut each: impl FnMut(usize, AttributeValue<'_>),
    ) -> Result<()> {
        let answers = match self.on_session(h, |session| Request::GetAttributes {
            session,
            object: o as u64,
            types: types.iter().map(|t| *t as u64).collect(),
        })? {
            Reply::Attributes(a) if a.len() == types.len() => a,
            _ => return Err(unexpected()),
        };
        for (i, a) in answers.iter().enumerate() {
            each(
                i,
                match a {
                    AttributeAnswer::Value(v) => AttributeValue::Value(v),
                    AttributeAnswer::Sensitive => AttributeValue::Sensitive,
                    AttributeAnswer::Invalid => AttributeValue::Invalid,
                },
            );
        }
        Ok(())
    }

    pub fn set_attributes(&self, h: CK_SESSION_HANDLE, o: CK_OBJECT_HANDLE, t: Template) -> Result<()> {
        let template = attributes(&t);
        done(self.on_session(h, |session| Request::SetAttributes {
            session,
            object: o as u64,
            template,
        })?)
    }

    pub fn find_init(&self, h: CK_SESSION_HANDLE, template: Vec<(CK_ATTRIBUTE_TYPE, Vec<u8>)>) -> Result<()> {
        done(self.on_session(h, |session| Request::FindInit { session, template })?)
    }

    pub fn find_next(&self, h: CK_SESSION_HANDLE, max: usize) -> Result<Vec<CK_OBJECT_HANDLE>> {
        let max = max.min(super::proto::MAX_COUNT as usize);
        match self.on_session(h, |session| Request::FindNext {
            session,
            max: max as u64,
        })? {
            Reply::Handles(found) if found.len() <= max => {
                Ok(found.into_iter().map(|o| o as CK_OBJECT_HANDLE).collect())
            }
            _ => Err(unexpected()),
        }
    }

    pub fn find_final(&self, h: CK_SESSION_HANDLE) -> Result<()> {
        done(self.on_session(h, |session| Request::FindFinal { session })?)
    }

    pub fn generate_key(
        &self,
        h: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        t: Template,
    ) -> Result<CK_OBJECT_HANDLE> {
        let (mechanism, template) = (mech(m)?, attributes(&t));
        handle(self.on_session(h, |session| Request::GenerateKey {
            session,
            mechanism,
            template,
        })?)
        .map(|o| o as CK_OBJECT_HANDLE)
    }

    pub fn generate_key_pair(
        &self,
        h: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        public: Template,
        private: Template,
    ) -> Result<(CK_OBJECT_HANDLE, CK_OBJECT_HANDLE)> {
        let (mechanism, public, private) = (mech(m)?, attributes(&public), attributes(&private));
        match self.on_session(h, |session| Request::GenerateKeyPair {
            session,
            mechanism,
            public,
            private,
        })? {
            Reply::KeyPair(p, s) => Ok((p as CK_OBJECT_HANDLE, s as CK_OBJECT_HANDLE)),
            _ => Err(unexpected()),
        }
    }

    pub fn wrap_key(
        &self,
        h: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        wrapping: CK_OBJECT_HANDLE,
        key: CK_OBJECT_HANDLE,
        cap: Option<usize>,
    ) -> Result<Output> {
        let mechanism = mech(m)?;
        output(self.on_session(h, |session| Request::WrapKey {
            session,
            mechanism,
            wrapping: wrapping as u64,
            key: key as u64,
            capacity: capacity(cap),
        })?)
    }

    pub fn unwrap_key(
        &self,
        h: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        unwrapping: CK_OBJECT_HANDLE,
        wrapped: &[u8],
        t: Template,
    ) -> Result<CK_OBJECT_HANDLE> {
        let (mechanism, template) = (mech(m)?, attributes(&t));
        handle(self.on_session(h, |session| Request::UnwrapKey {
            session,
            mechanism,
            unwrapping: unwrapping as u64,
            wrapped: wrapped.to_vec(),
            template,
        })?)
        .map(|o| o as CK_OBJECT_HANDLE)
    }

    pub fn derive_key(
        &self,
        h: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        base: CK_OBJECT_HANDLE,
        t: Template,
    ) -> Result<CK_OBJECT_HANDLE> {
        let (mechanism, template) = (mech(m)?, attributes(&t));
        handle(self.on_session(h, |session| Request::DeriveKey {
            session,
            mechanism,
            base: base as u64,
            template,
        })?)
        .map(|o| o as CK_OBJECT_HANDLE)
    }

    pub fn sign_init(&self, h: CK_SESSION_HANDLE, m: RawMechanism<'_>, key: CK_OBJECT_HANDLE) -> Result<()> {
        let init = (mech(m)?, key as u64);
        if self.hold_sign_init(h, &init)? {
            return Ok(());
        }
        self.sign_init_now(h, init)
    }

    /// `C_SignInit` sent to the server. An error leaves what the client knows as it was: a
    /// refused SignInit leaves the running operation (CKR_OPERATION_ACTIVE) or none.
    fn sign_init_now(&self, h: CK_SESSION_HANDLE, init: Init) -> Result<()> {
        let (mechanism, key) = init.clone();
        match self.on_session(h, |session| Request::SignInit {
            session,
            mechanism,
            key,
        })? {
            Reply::SignInit { signature_len } => {
                self.set_replay(h, |r| r.sign = Some(init.clone()));
                let sign = signature_len.map(|n| Signing {
                    len: usize::try_from(n).unwrap_or(usize::MAX),
                    parts: false,
                });
                if let Some(sign) = sign {
                    self.remember_length(h, init, sign.len);
                }
                self.set_signing(h, sign);
                Ok(())
            }
            _ => Err(unexpected()),
        }
    }

    /// Sends the `C_SignInit` held back on session `h`, if any, before a call that needs the
    /// operation running on the server; if the server refuses it, the operation is gone.
    fn send_pending(&self, h: CK_SESSION_HANDLE) -> Result<()> {
        self.take_pending(h)
            .map_or(Ok(()), |init| self.send_held(h, init))
    }

    /// Sends `init`, taken from session `h`'s held-back `C_SignInit`.
    fn send_held(&self, h: CK_SESSION_HANDLE, init: Init) -> Result<()> {
        self.sign_init_now(h, init)
            .inspect_err(|_| self.set_signing(h, None))
    }

    pub fn sign(
        &self,
        h: CK_SESSION_HANDLE,
        data: Option<Arg<&[u8]>>,
        cap: Arg<Option<usize>>,
    ) -> Result<Output> {
        let data = data.map(|d| self.data(h, CKF_SIGN, d)).transpose()?;
        let cap = self.arg(h, CKF_SIGN, cap)?;
        // The length query (no buffer, or one too short) answered here when the client knows
        // the operation's length: what the token answers, without its round trip. The session
        // is checked as the server would (its connection alive).
        if let Some(sign) = self.signing(h) {
            if !(data.is_some() && sign.parts) && cap.is_none_or(|c| c < sign.len) {
                self.session(h)?;
                return Ok(Output::Length(sign.len));
            }
        }
        let answer = match (self.take_pending(h), data) {
            // The initialisation held back travels with the data: one round trip.
            (Some(init), Some(data)) => {
                let replay = init.clone();
                let answer = self.on_session(h, |session| Request::SignInitAndSign {
                    session,
                    mechanism: init.0,
                    key: init.1,
                    data: data.to_vec(),
                    capacity: capacity(cap),
                });
                if matches!(answer, Ok(Reply::Length(_)) | Err(Error(CKR_BUFFER_TOO_SMALL))) {
                    // The operation now runs on the server.
                    self.set_replay(h, |r| r.sign = Some(replay));
                }
                answer
            }
            (pending, data) => {
                if let Some(init) = pending {
                    // C_SignFinal right after C_SignInit: the operation on the server first.
                    self.send_held(h, init)?;
                }
                let data = data.map(<[u8]>::to_vec);
                self.on_session(h, |session| Request::Sign {
                    session,
                    data,
                    capacity: capacity(cap),
                })
            }
        };
        // A length keeps the operation; a signature or an error ends it on the server (a
        // buffer too small keeps it, which the client does not count on: the server is asked).
        if !matches!(answer, Ok(Reply::Length(_))) {
            self.set_signing(h, None);
        }
        if !matches!(answer, Ok(Reply::Length(_)) | Err(Error(CKR_BUFFER_TOO_SMALL))) {
            self.set_replay(h, |r| r.sign = None);
        }
        output(answer?)
    }

    pub fn sign_update(&self, h: CK_SESSION_HANDLE, data: Arg<&[u8]>) -> Result<()> {
        let data = self.data(h, CKF_SIGN, data)?.to_vec();
        self.send_pending(h)?;
        // Fed a part, the operation cannot be made again elsewhere.
        self.set_replay(h, |r| r.sign = None);
        let answer = self.on_session(h, |session| Request::SignUpdate { session, data });
        match (answer.is_ok(), self.signing(h)) {
            (true, Some(sign)) => self.set_signing(h, Some(Signing { parts: true, ..sign })),
            // An error ends the operation on the server.
            _ => self.set_signing(h, None),
        }
        done(answer?)
    }

    pub fn verify_init(
        &self,
        h: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        key: CK_OBJECT_HANDLE,
    ) -> Result<()> {
        let mechanism = mech(m)?;
        let replay = (mechanism.clone(), key as u64);
        done(self.on_session(h, |session| Request::VerifyInit {
            session,
            mechanism,
            key: key as u64,
        })?)?;
        self.set_replay(h, |r| r.verify = Some(replay));
        Ok(())
    }

    pub fn verify(
        &self,
        h: CK_SESSION_HANDLE,
        data: Option<Arg<&[u8]>>,
        signature: Arg<&[u8]>,
    ) -> Result<()> {
        let data = data
            .map(|d| self.data(h, CKF_VERIFY, d))
            .transpose()?
            .map(<[u8]>::to_vec);
        let signature = self.arg(h, CKF_VERIFY, signature)?.to_vec();
        let answer = self.on_session(h, |session| Request::Verify {
            session,
            data,
            signature,
        });
        // Every answer ends it.
        self.set_replay(h, |r| r.verify = None);
        done(answer?)
    }

    pub fn verify_update(&self, h: CK_SESSION_HANDLE, data: Arg<&[u8]>) -> Result<()> {
        let data = self.data(h, CKF_VERIFY, data)?.to_vec();
        self.set_replay(h, |r| r.verify = None);
        done(self.on_session(h, |session| Request::VerifyUpdate { session, data })?)
    }

    pub fn encrypt_init(
        &self,
        h: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        key: CK_OBJECT_HANDLE,
    ) -> Result<()> {
        let mechanism = mech(m)?;
        done(self.on_session(h, |session| Request::EncryptInit {
            session,
            mechanism,
            key: key as u64,
        })?)
    }

    pub fn decrypt_init(
        &self,
        h: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        key: CK_OBJECT_HANDLE,
    ) -> Result<()> {
        let mechanism = mech(m)?;
        done(self.on_session(h, |session| Request::DecryptInit {
            session,
            mechanism,
            key: key as u64,
        })?)
    }

    pub fn crypt(
        &self,
        h: CK_SESSION_HANDLE,
        encrypt: bool,
        data: Arg<&[u8]>,
        cap: Arg<Option<usize>>,
    ) -> Result<Output> {
        let op = if encrypt { CKF_ENCRYPT } else { CKF_DECRYPT };
        let data = self.data(h, op, data)?.to_vec();
        let cap = capacity(self.arg(h, op, cap)?);
        output(self.on_session(h, |session| Request::Crypt {
            session,
            encrypt,
            data,
            capacity: cap,
        })?)
    }

    pub fn crypt_update(
        &self,
        h: CK_SESSION_HANDLE,
        encrypt: bool,
        data: Arg<&[u8]>,
        cap: Arg<Option<usize>>,
    ) -> Result<Output> {
        let op = if encrypt { CKF_ENCRYPT } else { CKF_DECRYPT };
        let data = self.data(h, op, data)?.to_vec();
        let cap = capacity(self.arg(h, op, cap)?);
        output(self.on_session(h, |session| Request::CryptUpdate {
            session,
            encrypt,
            data,
            capacity: cap,
        })?)
    }

    pub fn crypt_final(
        &self,
        h: CK_SESSION_HANDLE,
        encrypt: bool,
        cap: Arg<Option<usize>>,
    ) -> Result<Output> {
        let op = if encrypt { CKF_ENCRYPT } else { CKF_DECRYPT };
        let cap = capacity(self.arg(h, op, cap)?);
        output(self.on_session(h, |session| Request::CryptFinal {
            session,
            encrypt,
            capacity: cap,
        })?)
    }

    pub fn digest_init(&self, h: CK_SESSION_HANDLE, m: RawMechanism<'_>) -> Result<()> {
        let mechanism = mech(m)?;
        done(self.on_session(h, |session| Request::DigestInit { session, mechanism })?)
    }

    pub fn digest(
        &self,
        h: CK_SESSION_HANDLE,
        data: Option<Arg<&[u8]>>,
        cap: Arg<Option<usize>>,
    ) -> Result<Output> {
        let data = data
            .map(|d| self.data(h, CKF_DIGEST, d))
            .transpose()?
            .map(<[u8]>::to_vec);
        let cap = capacity(self.arg(h, CKF_DIGEST, cap)?);
        output(self.on_session(h, |session| Request::Digest {
            session,
            data,
            capacity: cap,
        })?)
    }

    pub fn digest_update(&self, h: CK_SESSION_HANDLE, data: Arg<&[u8]>) -> Result<()> {
        let data = self.data(h, CKF_DIGEST, data)?.to_vec();
        done(self.on_session(h, |session| Request::DigestUpdate { session, data })?)
    }

    pub fn digest_key(&self, h: CK_SESSION_HANDLE, key: CK_OBJECT_HANDLE) -> Result<()> {
        done(self.on_session(h, |session| Request::DigestKey {
            session,
            key: key as u64,
        })?)
    }

    pub fn generate_random(&self, h: CK_SESSION_HANDLE, buf: &mut [u8]) -> Result<()> {
        if buf.len() as u64 > super::proto::MAX_COUNT {
            return fail_because(
                CKR_DATA_LEN_RANGE,
                "a remote C_GenerateRandom gives at most 1 MiB per call",
            );
        }
        match self.on_session(h, |session| Request::GenerateRandom {
            session,
            len: buf.len() as u64,
        })? {
            Reply::Data(d) if d.len() == buf.len() => {
                buf.copy_from_slice(&d);
                Ok(())
            }
            _ => fail(CKR_DEVICE_ERROR).map_err(|e: Error| e),
        }
    }
}
