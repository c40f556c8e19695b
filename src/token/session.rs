//! A session: its token, read/write flag, and the operations active in it (at most one of
//! each kind, as PKCS#11 requires).

use super::operation::{CryptOp, DigestOp, FindOp, SignOp, VerifyOp};
use super::slot::{LoginState, Token};
use cryptoki_sys::*;
use parking_lot::Mutex;
use std::sync::Arc;

pub struct Session {
    pub handle: CK_SESSION_HANDLE,
    pub rw: bool,
    pub token: Arc<Token>,
    pub sign: Option<SignOp>,
    pub verify: Option<VerifyOp>,
    pub encrypt: Option<CryptOp>,
    pub decrypt: Option<CryptOp>,
    pub digest: Option<DigestOp>,
    pub find: Option<FindOp>,
    /// A `C_Login(CKU_CONTEXT_SPECIFIC)` made with no operation waiting for it: it authorizes
    /// the next `C_UnwrapKey` or `C_DeriveKey` of this session (calls without an Init to log
    /// in after), which spends it, unless a signature, encryption or decryption starts first
    /// (which drops it: `awaiting_number`).
    pub context_login: bool,
    /// Operations started so far that wait for a context login: the last one's number.
    awaited: u64,
    /// Set by `C_CloseSession` under the session's lock, before it destroys the session's
    /// objects: a call that got the session before and creates an object after finds it set
    /// (`CKR_SESSION_CLOSED`) instead of leaving an object of a closed session behind.
    pub closed: bool,
}

pub type SessionRef = Arc<Mutex<Session>>;

impl Session {
    pub fn new(handle: CK_SESSION_HANDLE, rw: bool, token: Arc<Token>) -> Self {
        Session {
            handle,
            rw,
            token,
            sign: None,
            verify: None,
            encrypt: None,
            decrypt: None,
            digest: None,
            find: None,
            context_login: false,
            awaited: 0,
            closed: false,
        }
    }

    /// An operation starting on a key (`C_SignInit`, `C_EncryptInit`, `C_DecryptInit`): it
    /// drops a context login no operation was waiting for, and, if its key has
    /// `CKA_ALWAYS_AUTHENTICATE` (`needs_login`), gets the next number, which orders the
    /// operations a context login may authorize (`take_context_login`).
    pub fn awaiting_number(&mut self, needs_login: bool) -> Option<u64> {
        self.context_login = false;
        needs_login.then(|| {
            self.awaited += 1;
            self.awaited
        })
    }

    /// A context login, its PIN right: one login, one use (PKCS#11 §4.9: the user supplies the
    /// PIN for each use, right after its Init). It authorizes the waiting operation started
    /// last, or, with none waiting, the next call without an Init (`context_login`).
    pub fn take_context_login(&mut self) {
        let sign = self.sign.as_mut().map(|o| &mut o.needs_auth);
        let decrypt = self.decrypt.as_mut().map(|o| &mut o.needs_auth);
        let waiting = [sign, decrypt].into_iter().flatten().filter(|n| n.is_some());
        match waiting.max_by_key(|n| **n) {
            Some(last) => *last = None,
            None => self.context_login = true,
        }
    }

    pub fn state(&self) -> CK_STATE {
        match (self.token.login_state(), self.rw) {
            (LoginState::Public, false) => CKS_RO_PUBLIC_SESSION,
            (LoginState::Public, true) => CKS_RW_PUBLIC_SESSION,
            (LoginState::User, false) => CKS_RO_USER_FUNCTIONS,
            (LoginState::User, true) => CKS_RW_USER_FUNCTIONS,
            (LoginState::So, _) => CKS_RW_SO_FUNCTIONS,
        }
    }

    /// Whether a sign, verify, encrypt, decrypt or digest operation is active (the state
    /// `C_GetOperationState` would save; a find is not a cryptographic operation).
    pub fn has_crypto_operation(&self) -> bool {
        self.sign.is_some()
            || self.verify.is_some()
            || self.encrypt.is_some()
            || self.decrypt.is_some()
            || self.digest.is_some()
    }

    /// Ends the active operations whose `CKF_*` flag is in `flags` (`C_SessionCancel`, which
    /// names the ones to end: PKCS#11 3.0 §5.6) and leaves the others running.
    pub fn cancel(&mut self, flags: CK_FLAGS) {
        let named = |f: CK_FLAGS| flags & f != 0;
        if named(CKF_SIGN) {
            self.sign = None;
        }
        if named(CKF_VERIFY) {
            self.verify = None;
        }
        if named(CKF_ENCRYPT) {
            self.encrypt = None;
        }
        if named(CKF_DECRYPT) {
            self.decrypt = None;
        }
        if named(CKF_DIGEST) {
            self.digest = None;
        }
        if named(CKF_FIND_OBJECTS) {
            self.find = None;
        }
    }
}
