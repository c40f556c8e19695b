//! The library's state between `C_Initialize` and `C_Finalize`: the store, the tokens of
//! every slot, and the open sessions. Slots, tokens, sessions and login live here; object and
//! crypto functions are in `objects.rs` and `crypto.rs`.

use super::session::{Session, SessionRef};
use super::slot::{LoginState, Token};
use crate::error::{fail, fail_because, Error, Result};
use crate::store::audit::{
    event,
    intent::{during, Intent},
};
use crate::store::{PinOwner, Store, TokenRecord, MAX_PIN_LEN, MIN_PIN_LEN};
use cryptoki_sys::*;
use dashmap::DashMap;
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::sync::Arc;

pub struct Library {
    pub(super) store: Arc<dyn Store>,
    cache_bytes: u64,
    tokens: RwLock<BTreeMap<CK_SLOT_ID, Arc<Token>>>,
    pub(super) sessions: DashMap<CK_SESSION_HANDLE, SessionEntry>,
}

/// An open session with the facts about it that never change, so that counting and filtering
/// sessions never waits for the lock of a session that is busy signing.
#[derive(Clone)]
pub(super) struct SessionEntry {
    handle: CK_SESSION_HANDLE,
    slot_id: CK_SLOT_ID,
    rw: bool,
    session: SessionRef,
}

/// Result of a call that follows the two-call length convention.
pub enum Output {
    /// Only the length is known or the caller's buffer is too small: report it.
    Length(usize),
    Data(zeroize::Zeroizing<Vec<u8>>),
}

/// Answer of `C_GetTokenInfo` in Rust form.
pub struct TokenInfo {
    pub record: Option<TokenRecord>,
    pub sessions: usize,
    pub rw_sessions: usize,
}

impl Library {
    /// `cache_bytes` bounds each token's cache of token objects (`store.cache_mib`).
    pub fn new(store: Arc<dyn Store>, cache_bytes: u64) -> Self {
        Library {
            store,
            cache_bytes,
            tokens: RwLock::new(BTreeMap::new()),
            sessions: DashMap::new(),
        }
    }

    pub(super) fn new_session_object_handle(&self) -> CK_OBJECT_HANDLE {
        super::handles::new_session_object_handle()
    }

    /// Every slot: one per initialised token in the store, plus the free slot. Reading the
    /// store each time makes tokens made by other processes appear without a restart.
    pub fn slot_list(&self, token_present: bool) -> Result<Vec<CK_SLOT_ID>> {
        let _ = token_present; // every slot holds a token, initialised or not
        let records = self.store.tokens()?;
        // Slot ids only grow: the free slot follows the highest initialised one.
        let free = records.last().map_or(0, |r| r.slot_id + 1);
        let mut tokens = self.tokens.write();
        let mut ids = Vec::with_capacity(records.len() + 1);
        for r in records {
            ids.push(r.slot_id);
            match tokens.get(&r.slot_id) {
                Some(t) => {
                    if !t.is_initialized() {
                        t.set_record(Some(r));
                    }
                }
                None => {
                    tokens.insert(
                        r.slot_id,
                        Arc::new(Token::new(
                            r.slot_id,
                            self.store.clone(),
                            Some(r),
                            self.cache_bytes,
                        )),
                    );
                }
            }
        }
        tokens
            .entry(free)
            .or_insert_with(|| Arc::new(Token::new(free, self.store.clone(), None, self.cache_bytes)));
        ids.push(free);
        Ok(ids)
    }

    pub fn token(&self, slot_id: CK_SLOT_ID) -> Result<Arc<Token>> {
        if let Some(t) = self.tokens.read().get(&slot_id) {
            return Ok(t.clone());
        }
        if self.slot_list(true)?.contains(&slot_id) {
            if let Some(t) = self.tokens.read().get(&slot_id) {
                return Ok(t.clone());
            }
        }
        fail(CKR_SLOT_ID_INVALID)
    }

    /// The token's record and session counts, for `C_GetTokenInfo` (`service::TokenInfo`).
    pub fn token_state(&self, slot_id: CK_SLOT_ID) -> Result<TokenInfo> {
        let token = self.token(slot_id)?;
        let record = if token.is_initialized() {
            token.refresh_record()
        } else {
            None
        };
        let (mut sessions, mut rw_sessions) = (0, 0);
        for e in self.sessions_of(slot_id) {
            sessions += 1;
            rw_sessions += e.rw as usize;
        }
        Ok(TokenInfo {
            record,
            sessions,
            rw_sessions,
        })
    }

    fn sessions_of(&self, slot_id: CK_SLOT_ID) -> Vec<SessionEntry> {
        self.sessions
            .iter()
            .filter(|e| e.slot_id == slot_id)
            .map(|e| e.clone())
            .collect()
    }

    pub fn init_token(&self, slot_id: CK_SLOT_ID, so_pin: &[u8], label: &[u8; 32]) -> Result<()> {
        self.init_token_with_user_pin(slot_id, so_pin, label, None)
    }

    /// `C_InitToken`, and with `user_pin` also `C_InitPIN`, as one store transaction: a process
    /// killed half-way leaves either no change or a token whose user PIN works
    /// (`FERROHSM_InitTokenWithPIN`).
    pub fn init_token_with_user_pin(
        &self,
        slot_id: CK_SLOT_ID,
        so_pin: &[u8],
        label: &[u8; 32],
        user_pin: Option<&[u8]>,
    ) -> Result<()> {
        let token = self.token(slot_id)?;
        if !self.sessions_of(slot_id).is_empty() {
            return fail_because(CKR_SESSION_EXISTS, "close every session before C_InitToken");
        }
        check_pin_len(so_pin)?;
        if let Some(p) = user_pin {
            check_pin_len(p)?;
        }
        let record = during(Intent::new(event::INIT_TOKEN), || {
            self.store.init_token(slot_id, so_pin, label, user_pin)
        })?;
        token.clear_cache();
        token.session_objects.clear();
        token.set_login_state(LoginState::Public);
        token.set_record(Some(record));
        // A new free slot appears after the free one was initialised.
        self.slot_list(true)?;
        log::info!("token in slot {slot_id} initialised");
        Ok(())
    }

    pub fn open_session(&self, slot_id: CK_SLOT_ID, flags: CK_FLAGS) -> Result<CK_SESSION_HANDLE> {
        if flags & CKF_SERIAL_SESSION == 0 {
            return fail(CKR_SESSION_PARALLEL_NOT_SUPPORTED);
        }
        let token = self.token(slot_id)?;
        if !token.is_initialized() {
            return fail_because(
                CKR_TOKEN_NOT_RECOGNIZED,
                format!("slot {slot_id} holds an uninitialised token; run C_InitToken first"),
            );
        }
        let rw = flags & CKF_RW_SESSION != 0;
        if !rw && token.login_state() == LoginState::So {
            return fail(CKR_SESSION_READ_WRITE_SO_EXISTS);
        }
        let handle = super::handles::new_session_handle();
        let session = Arc::new(Mutex::new(Session::new(handle, rw, token)));
        self.sessions.insert(
            handle,
            SessionEntry {
                handle,
                slot_id,
                rw,
                session,
            },
        );
        Ok(handle)
    }

    pub fn session(&self, handle: CK_SESSION_HANDLE) -> Result<SessionRef> {
        self.sessions
            .get(&handle)
            .map(|e| e.session.clone())
            .ok_or(Error(CKR_SESSION_HANDLE_INVALID))
    }

    /// `CKR_SESSION_HANDLE_INVALID` unless `handle` is an open session. A function checks this
    /// before its arguments and mechanism: PKCS#11 ranks the session handle errors above those.
    pub fn check_session(&self, handle: CK_SESSION_HANDLE) -> Result<()> {
        self.session(handle).map(drop)
    }

    pub fn close_session(&self, handle: CK_SESSION_HANDLE) -> Result<()> {
        let (_, e) = self
            .sessions
            .remove(&handle)
            .ok_or(Error(CKR_SESSION_HANDLE_INVALID))?;
        let token = {
            let mut s = e.session.lock();
            s.closed = true;
            s.token.clone()
        };
        token.drop_session_objects(handle);
        if self.sessions_of(token.slot_id).is_empty() && token.login_state() != LoginState::Public {
            token.log_out();
        }
        Ok(())
    }

    pub fn close_all_sessions(&self, slot_id: CK_SLOT_ID) -> Result<()> {
        self.token(slot_id)?;
        for e in self.sessions_of(slot_id) {
            let _ = self.close_session(e.handle);
        }
        Ok(())
    }

    pub fn login(&self, handle: CK_SESSION_HANDLE, user: CK_USER_TYPE, pin: &[u8]) -> Result<()> {
        let session = self.session(handle)?;
        let token = session.lock().token.clone();
        let current = token.login_state();
        match user {
            CKU_CONTEXT_SPECIFIC => {
                if current != LoginState::User {
                    return fail(CKR_USER_NOT_LOGGED_IN);
                }
                let mut s = session.lock();
                self.store.login(token.slot_id, PinOwner::User, pin)?;
                s.take_context_login();
                Ok(())
            }
            CKU_SO | CKU_USER => {
                let (owner, state) = if user == CKU_SO {
                    (PinOwner::So, LoginState::So)
                } else {
                    (PinOwner::User, LoginState::User)
                };
                // A login racing one in flight in this process waits for it, then finds the
                // state it left: the PIN is evaluated once, not once per thread.
                let _turn = token.login_turn.lock();
                let current = token.login_state();
                if current == state {
                    return fail(CKR_USER_ALREADY_LOGGED_IN);
                }
                if current != LoginState::Public {
                    return fail(CKR_USER_ANOTHER_ALREADY_LOGGED_IN);
                }
                if user == CKU_SO && self.sessions_of(token.slot_id).iter().any(|e| !e.rw) {
                    return fail(CKR_SESSION_READ_ONLY_EXISTS);
                }
                if user == CKU_USER && !token.refresh_record().is_some_and(|r| r.user_pin_initialized) {
                    return fail(CKR_USER_PIN_NOT_INITIALIZED);
                }
                self.store.login(token.slot_id, owner, pin).inspect_err(|e| {
                    log::warn!("login to slot {} as {:?} refused: {e}", token.slot_id, owner);
                })?;
                token.set_login_state(state);
                // Objects read before the login were not authenticated (no key to check their
                // tags): they are read again, checked.
                token.clear_cache();
                Ok(())
            }
            _ => fail(CKR_USER_TYPE_INVALID),
        }
    }

    pub fn logout(&self, handle: CK_SESSION_HANDLE) -> Result<()> {
        let session = self.session(handle)?;
        let token = session.lock().token.clone();
        if token.login_state() == LoginState::Public {
            return fail(CKR_USER_NOT_LOGGED_IN);
        }
        token.log_out();
        // Operations on private keys cannot go on without a login.
        for e in self.sessions_of(token.slot_id) {
            let mut s = e.session.lock();
            s.sign = None;
            s.decrypt = None;
            s.find = None;
            s.context_login = false;
        }
        Ok(())
    }

    pub fn init_pin(&self, handle: CK_SESSION_HANDLE, pin: &[u8]) -> Result<()> {
        let session = self.session(handle)?;
        let s = session.lock();
        if s.token.login_state() != LoginState::So {
            return fail(CKR_USER_NOT_LOGGED_IN);
        }
        if !s.rw {
            return fail(CKR_SESSION_READ_ONLY);
        }
        check_pin_len(pin)?;
        during(Intent::new(event::INIT_PIN), || {
            self.store.init_pin(s.token.slot_id, pin)
        })?;
        s.token.refresh_record();
        Ok(())
    }

    pub fn set_pin(&self, handle: CK_SESSION_HANDLE, old: &[u8], new: &[u8]) -> Result<()> {
        let session = self.session(handle)?;
        let s = session.lock();
        if !s.rw {
            return fail(CKR_SESSION_READ_ONLY);
        }
        check_pin_len(new)?;
        let owner = if s.token.login_state() == LoginState::So {
            PinOwner::So
        } else {
            PinOwner::User
        };
        during(Intent::new(event::SET_PIN), || {
            self.store.set_pin(s.token.slot_id, owner, old, new)
        })?;
        s.token.refresh_record();
        Ok(())
    }

    /// `C_SessionCancel`: ends the operations `flags` names.
    pub fn cancel(&self, handle: CK_SESSION_HANDLE, flags: CK_FLAGS) -> Result<()> {
        self.session(handle)?.lock().cancel(flags);
        Ok(())
    }
}

fn check_pin_len(pin: &[u8]) -> Result<()> {
    if pin.len() < MIN_PIN_LEN || pin.len() > MAX_PIN_LEN {
        return fail_because(
            CKR_PIN_LEN_RANGE,
            format!(
                "a PIN has {MIN_PIN_LEN} to {MAX_PIN_LEN} characters, not {}",
                pin.len()
            ),
        );
    }
    Ok(())
}
