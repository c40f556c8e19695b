//! The local arm's calls that the token does not answer in the seam's form by itself: small
//! reshapings of `token::Library`'s answers, no PKCS#11 rule of their own.

use super::{SessionInfo, TokenInfo};
use crate::error::{Error, Result};
use crate::mechanism;
use crate::token::attributes::CKA_USAGE_COUNT;
use crate::token::objects::{attribute_value, AttributeValue};
use crate::token::{usage, Library};
use cryptoki_sys::*;

impl Library {
    pub fn check_slot(&self, slot: CK_SLOT_ID) -> Result<()> {
        self.token(slot).map(drop)
    }

    pub fn token_info(&self, slot: CK_SLOT_ID) -> Result<TokenInfo> {
        let t = self.token_state(slot)?;
        let flags = t.flags();
        let (label, serial) = match &t.record {
            Some(r) => (r.label.to_vec(), r.serial.to_vec()),
            None => (Vec::new(), Vec::new()),
        };
        Ok(TokenInfo {
            label,
            serial,
            flags,
            sessions: t.sessions as u64,
            rw_sessions: t.rw_sessions as u64,
        })
    }

    pub fn session_info(&self, h: CK_SESSION_HANDLE) -> Result<SessionInfo> {
        let s = self.session(h)?;
        let s = s.lock();
        Ok(SessionInfo {
            slot_id: s.token.slot_id,
            state: s.state(),
            flags: CKF_SERIAL_SESSION | if s.rw { CKF_RW_SESSION } else { 0 },
        })
    }

    pub fn has_crypto_operation(&self, h: CK_SESSION_HANDLE) -> Result<bool> {
        Ok(self.session(h)?.lock().has_crypto_operation())
    }

    pub fn mechanism_list(&self, slot: CK_SLOT_ID) -> Result<Vec<CK_MECHANISM_TYPE>> {
        self.check_slot(slot)?;
        Ok(mechanism::mechanism_list().iter().map(|(m, _)| *m).collect())
    }

    pub fn mechanism_info(&self, slot: CK_SLOT_ID, ty: CK_MECHANISM_TYPE) -> Result<CK_MECHANISM_INFO> {
        self.check_slot(slot)?;
        mechanism::mechanism_info(ty).ok_or(Error(CKR_MECHANISM_INVALID))
    }

    pub fn generate_random(&self, h: CK_SESSION_HANDLE, buf: &mut [u8]) -> Result<()> {
        self.check_session(h)?;
        getrandom::fill(buf).map_err(|_| Error(CKR_FUNCTION_FAILED))
    }

    pub fn attribute_values(
        &self,
        h: CK_SESSION_HANDLE,
        o: CK_OBJECT_HANDLE,
        types: &[CK_ATTRIBUTE_TYPE],
        mut each: impl FnMut(usize, AttributeValue<'_>),
    ) -> Result<()> {
        let token = self.session(h)?.lock().token.clone();
        let obj = token.object(o)?;
        for (i, t) in types.iter().enumerate() {
            // The one attribute not held in the object: the store counts it.
            if *t == CKA_USAGE_COUNT {
                match usage::count_value(&token, &obj)? {
                    Some(n) => each(i, AttributeValue::Value(&n.to_ne_bytes())),
                    None => each(i, AttributeValue::Invalid),
                }
                continue;
            }
            each(i, attribute_value(&obj, *t));
        }
        Ok(())
    }
}
