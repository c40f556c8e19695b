//! What the MAC family offers (key sizes in bytes, SoftHSM's and NSS's unit for these
//! mechanisms) and its one parameter, `CK_MAC_GENERAL_PARAMS`.

use super::{mac_mechanism, mechanism_types, Mac, MacMechanism, HMAC_KEY_TYPES};
use crate::error::{fail_because, Result};
use crate::mechanism::{
    info, params_of, Family, Key, Mechanism, Op, Param, ParamShape, Params, SecretKeyType, Signer, Verifier,
};
use cryptoki_sys::*;
use std::sync::Arc;

pub struct Macs;

impl Family for Macs {
    fn name(&self) -> &'static str {
        "MAC"
    }

    fn offers(&self) -> Vec<(CK_MECHANISM_TYPE, CK_MECHANISM_INFO)> {
        mechanism_types()
            .map(|(m, alg)| {
                let (min, max) = alg.key_sizes();
                (m, info(min as CK_ULONG, max as CK_ULONG, CKF_SIGN | CKF_VERIFY))
            })
            .collect()
    }

    fn param_shape(&self, t: CK_MECHANISM_TYPE) -> Option<ParamShape> {
        // The full-length MACs take no parameter (one given is ignored, as for the
        // hash-and-sign RSA mechanisms); `_GENERAL` needs its length.
        mac_mechanism(t).map(|(_, general)| {
            if general {
                ParamShape::Ulong
            } else {
                ParamShape::Length
            }
        })
    }

    fn parse(&self, t: CK_MECHANISM_TYPE, param: Param<'_>) -> Result<Params> {
        let Some((alg, general)) = mac_mechanism(t) else {
            return crate::error::fail(CKR_MECHANISM_INVALID);
        };
        let len = match (general, param) {
            (false, _) => None,
            (true, Param::Ulong(n)) => Some(n as usize),
            (true, _) => {
                return fail_because(
                    CKR_MECHANISM_PARAM_INVALID,
                    format!("mechanism 0x{t:x} needs CK_MAC_GENERAL_PARAMS (the MAC length in bytes)"),
                )
            }
        };
        Ok(Arc::new(MacMechanism::new(alg, len)?))
    }

    fn accepts_key_type(&self, m: &Mechanism, kt: CK_KEY_TYPE) -> bool {
        params_of::<MacMechanism>(m).is_ok_and(|mac| mac.alg.accepts_key_type(kt))
    }

    fn secret_key_types(&self) -> &'static [SecretKeyType] {
        &HMAC_KEY_TYPES
    }

    fn key_class(&self, _: &Mechanism, op: Op) -> Option<CK_OBJECT_CLASS> {
        matches!(op, Op::Sign | Op::Verify).then_some(CKO_SECRET_KEY)
    }

    fn signer(&self, m: &Mechanism, key: Key) -> Result<Box<dyn Signer>> {
        Ok(Box::new(Running(Mac::new(params_of(m)?, key.secret()?)?)))
    }

    fn verifier(&self, m: &Mechanism, key: Key) -> Result<Box<dyn Verifier>> {
        Ok(Box::new(Running(Mac::new(params_of(m)?, key.secret()?)?)))
    }
}

/// A MAC over the parts so far, signing or verifying.
struct Running(Mac);

impl Running {
    /// The MAC with every part in.
    fn with(&self, one_shot: Option<&[u8]>) -> Mac {
        let mut m = self.0.clone();
        if let Some(data) = one_shot {
            m.update(data);
        }
        m
    }
}

impl Signer for Running {
    fn signature_len(&self) -> usize {
        self.0.output_len()
    }

    fn update(&mut self, data: &[u8]) -> Result<()> {
        self.0.update(data);
        Ok(())
    }

    fn sign(&self, one_shot: Option<&[u8]>) -> Result<Vec<u8>> {
        self.with(one_shot).finalize()
    }
}

impl Verifier for Running {
    fn update(&mut self, data: &[u8]) -> Result<()> {
        self.0.update(data);
        Ok(())
    }

    fn verify(&self, one_shot: Option<&[u8]>, signature: &[u8]) -> Result<()> {
        self.with(one_shot).verify(signature)
    }
}
