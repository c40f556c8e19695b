//! State of the operations a session runs: signing and verifying (single and multi-part, with
//! private keys or, for MACs, secret keys), encryption, decryption, digesting, and object
//! searches. The work is the mechanism family's (`Signer`, `Verifier`, `Crypter`); this file
//! keeps the rules PKCS#11 sets around it: a one-shot call after parts is refused, and a
//! `CKA_ALWAYS_AUTHENTICATE` key needs its context-specific login.

use crate::error::{fail_because, Result};
use crate::mechanism::{self, Crypter, Hasher, Signer, Verifier};
use cryptoki_sys::*;
use zeroize::Zeroizing;

/// Whether an operation has taken multi-part input yet (one-shot calls are refused then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Fresh,
    MultiPart,
}

/// Refuses a one-shot call once parts have been given (PKCS#11: only the Final call ends a
/// multi-part operation).
fn check_one_shot(stage: Operation, one_shot: Option<&[u8]>) -> Result<()> {
    if one_shot.is_some() && stage == Operation::MultiPart {
        return fail_because(
            CKR_OPERATION_ACTIVE,
            "a multi-part operation is running; finish it with the Final call",
        );
    }
    Ok(())
}

fn check_login(needs_auth: Option<u64>) -> Result<()> {
    if needs_auth.is_some() {
        return fail_because(
            CKR_USER_NOT_LOGGED_IN,
            "this key has CKA_ALWAYS_AUTHENTICATE: call C_Login with CKU_CONTEXT_SPECIFIC first",
        );
    }
    Ok(())
}

pub struct SignOp {
    signer: Box<dyn Signer>,
    pub stage: Operation,
    /// `CKA_ALWAYS_AUTHENTICATE` keys need `C_Login(CKU_CONTEXT_SPECIFIC)` before use: while
    /// it has not come, the operation's number in its session (`Session::awaiting_number`).
    pub needs_auth: Option<u64>,
}

impl SignOp {
    pub fn new(signer: Box<dyn Signer>, needs_auth: Option<u64>) -> Self {
        SignOp {
            signer,
            stage: Operation::Fresh,
            needs_auth,
        }
    }

    pub fn signature_len(&self) -> usize {
        self.signer.signature_len()
    }

    pub fn update(&mut self, data: &[u8]) -> Result<()> {
        self.signer.update(data)?;
        self.stage = Operation::MultiPart;
        Ok(())
    }

    pub fn sign(&self, one_shot: Option<&[u8]>) -> Result<Vec<u8>> {
        check_login(self.needs_auth)?;
        check_one_shot(self.stage, one_shot)?;
        self.signer.sign(one_shot)
    }
}

pub struct VerifyOp {
    verifier: Box<dyn Verifier>,
    pub stage: Operation,
}

impl VerifyOp {
    pub fn new(verifier: Box<dyn Verifier>) -> Self {
        VerifyOp {
            verifier,
            stage: Operation::Fresh,
        }
    }

    pub fn update(&mut self, data: &[u8]) -> Result<()> {
        self.verifier.update(data)?;
        self.stage = Operation::MultiPart;
        Ok(())
    }

    pub fn verify(&self, one_shot: Option<&[u8]>, signature: &[u8]) -> Result<()> {
        check_one_shot(self.stage, one_shot)?;
        self.verifier.verify(one_shot, signature)
    }
}

/// An encryption or decryption.
pub struct CryptOp {
    pub crypter: Box<dyn Crypter>,
    /// As `SignOp::needs_auth`.
    pub needs_auth: Option<u64>,
}

impl CryptOp {
    /// A one-shot call's output, once the key's login is checked.
    pub fn single(&self, data: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
        check_login(self.needs_auth)?;
        self.crypter.single(data)
    }
}

pub struct DigestOp {
    pub hasher: Hasher,
    pub alg: mechanism::HashAlg,
    pub stage: Operation,
}

pub struct FindOp {
    pub results: Vec<CK_OBJECT_HANDLE>,
    pub pos: usize,
    /// The store generation the results were found at (`Token::still_visible`).
    pub generation: u64,
}
