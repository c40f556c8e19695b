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
    /// in after), which spends it.
    pub context_login: bool,
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

    /// Ends every active operation (`C_SessionCancel`, logout).
    pub fn cancel_all(&mut self) {
        self.sign = None;
        self.verify = None;
        self.encrypt = None;
        self.decrypt = None;
        self.digest = None;
        self.find = None;
    }
}
