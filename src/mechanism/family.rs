//! The seam every mechanism family sits behind: the `Family` trait (what a family offers to
//! `C_GetMechanismList`/`C_GetMechanismInfo`, which C structure each of its mechanisms takes as
//! a parameter and how it checks it, which keys it takes for which operation, and its entry
//! points); the parameter as the C boundary hands it over (`ParamShape`, `Param`, `Pointed`:
//! plain Rust values, read by `ffi` without knowing what any mechanism means); and what the
//! token and a family exchange (`Key`, the running `Signer`/`Verifier`/`Crypter`, `Derived`,
//! `Generates`). The key objects a family owns sit behind the seam beside it, `KeyModel`.

use super::HashAlg;
use crate::error::{fail, Error, Result};
use cryptoki_sys::*;
use std::any::Any;
use std::sync::Arc;
use zeroize::Zeroizing;

/// A mechanism with its parameter checked: its type, its family, and the parameter in the
/// family's own type. The token reaches the family through it without knowing which it is.
#[derive(Clone)]
pub struct Mechanism {
    ty: CK_MECHANISM_TYPE,
    family: &'static dyn Family,
    params: Params,
}

impl std::fmt::Debug for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} mechanism 0x{:x}", self.family.name(), self.ty)
    }
}

impl Mechanism {
    /// Mechanism `t` of `family` with its parameter read from C (`ffi`).
    pub fn parse(family: &'static dyn Family, t: CK_MECHANISM_TYPE, param: Param<'_>) -> Result<Self> {
        let params = family.parse(t, param)?;
        Ok(Mechanism {
            ty: t,
            family,
            params,
        })
    }

    pub fn mechanism_type(&self) -> CK_MECHANISM_TYPE {
        self.ty
    }

    pub fn family(&self) -> &'static dyn Family {
        self.family
    }

    /// The parameter as the family parsed it, if it is a `P`.
    pub fn params<P: std::any::Any>(&self) -> Option<&P> {
        self.params.downcast_ref()
    }

    /// Whether a key of type `kt` suits the mechanism.
    pub fn accepts_key_type(&self, kt: Option<CK_KEY_TYPE>) -> bool {
        kt.is_some_and(|kt| self.family.accepts_key_type(self, kt))
    }

    /// The class of key the mechanism takes for `op`, `None` if it does not do `op`.
    pub fn key_class(&self, op: Op) -> Option<CK_OBJECT_CLASS> {
        self.family.key_class(self, op)
    }
}

/// The parameter of `m` as its family's `P`; a family asked about another's mechanism (a bug)
/// answers `CKR_MECHANISM_INVALID`.
pub fn params_of<P: std::any::Any>(m: &Mechanism) -> Result<&P> {
    m.params().ok_or(Error(CKR_MECHANISM_INVALID))
}

/// A mechanism family: one folder under `src/mechanism/`, one line in `super::REGISTRY`.
pub trait Family: Sync {
    /// The family's name, for log lines and the docs.
    fn name(&self) -> &'static str;
    /// The mechanisms it offers with `C_GetMechanismInfo`'s answer for each, in list order.
    fn offers(&self) -> Vec<(CK_MECHANISM_TYPE, CK_MECHANISM_INFO)>;
    /// The C structure of mechanism `t`'s parameter, or `None` when `t` is not the family's.
    /// A mechanism the family knows but does not list (none today) would still be parsed.
    fn param_shape(&self, t: CK_MECHANISM_TYPE) -> Option<ParamShape>;
    /// Mechanism `t`'s parameter (read as `param_shape` asked) checked, in the family's own
    /// type (`Mechanism::params` gives it back).
    fn parse(&self, t: CK_MECHANISM_TYPE, param: Param<'_>) -> Result<Params>;
    /// Whether a key of type `kt` suits mechanism `m`.
    fn accepts_key_type(&self, m: &Mechanism, kt: CK_KEY_TYPE) -> bool;
    /// The class of key `m` takes for `op`; `None` when `m` does not do `op`.
    fn key_class(&self, _m: &Mechanism, _op: Op) -> Option<CK_OBJECT_CLASS> {
        None
    }
    fn signer(&self, _m: &Mechanism, _key: Key) -> Result<Box<dyn Signer>> {
        fail(CKR_MECHANISM_INVALID)
    }
    fn verifier(&self, _m: &Mechanism, _key: Key) -> Result<Box<dyn Verifier>> {
        fail(CKR_MECHANISM_INVALID)
    }
    fn crypter(&self, _m: &Mechanism, _key: Key, _encrypt: bool) -> Result<Box<dyn Crypter>> {
        fail(CKR_MECHANISM_INVALID)
    }
    /// `value` (a secret key's value or a private key's PKCS#8) wrapped under `key`.
    fn wrap(&self, _m: &Mechanism, _key: Key, _value: &[u8]) -> Result<Vec<u8>> {
        fail(CKR_MECHANISM_INVALID)
    }
    fn unwrap(&self, _m: &Mechanism, _key: Key, _wrapped: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
        fail(CKR_MECHANISM_INVALID)
    }
    /// Whether a refused unwrap with `m` tells nothing of the blob's plaintext: the blob's
    /// integrity is checked (AES key wrap), or every failure is one answer after the same work
    /// (OAEP). Not so for CBC-PAD, whose padding check answers whether the plaintext ends in a
    /// valid pad: repeated with chosen IVs, that answer decrypts the blob (the padding
    /// oracle). `policy::check_unwrap` lets a key that may not decrypt unwrap only with a
    /// mechanism that says yes.
    fn unwrap_reveals_nothing(&self, _m: &Mechanism) -> bool {
        false
    }
    fn derive(&self, _m: &Mechanism, _key: Key) -> Result<Derived> {
        fail(CKR_MECHANISM_INVALID)
    }
    /// The hash of a digest mechanism.
    fn digest(&self, _m: &Mechanism) -> Option<HashAlg> {
        None
    }
    /// What a key generation mechanism makes.
    fn generates(&self, _m: &Mechanism) -> Option<Generates> {
        None
    }
    /// The model of the key objects the family owns (`key_model::KeyModel`), `None` for a
    /// family that takes the keys of another or secret keys only.
    fn key_model(&self) -> Option<&dyn super::KeyModel> {
        None
    }
    /// The secret key types the family owns (`key_model::SecretKeyType`).
    fn secret_key_types(&self) -> &'static [super::key_model::SecretKeyType] {
        &[]
    }
    /// A post-quantum family's own seam (`pq::Family`: its mechanisms, keys, generation,
    /// PKCS#8), through which `pq::families` finds it; `None` for every other family.
    fn post_quantum(&self) -> Option<&'static dyn super::pq::Family> {
        None
    }
}

/// The C structures mechanism parameters come in (PKCS#11 3.2 §6). `ffi` reads each into the
/// `Param` of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamShape {
    /// No structure: the parameter is ignored or must be absent; only its length is read.
    Length,
    /// A 16-byte IV (`CKM_AES_CBC`, `CKM_AES_CBC_PAD`).
    Iv,
    /// `CK_MAC_GENERAL_PARAMS` (a `CK_ULONG`).
    Ulong,
    RsaPkcsPss,
    RsaPkcsOaep,
    AesCtr,
    /// `CK_GCM_PARAMS` of 3.0, or of 2.40 (without `ulIvBits`) told apart by its size.
    Gcm,
    Ecdh1Derive,
    Eddsa,
    KeyDerivationStringData,
    AesCbcEncryptData,
    SignAdditionalContext,
    HashSignAdditionalContext,
}

/// A mechanism parameter as `ffi` read it for its `ParamShape`. `Absent` stands for a NULL
/// `pParameter` or a zero `ulParameterLen` of any structured shape.
pub enum Param<'a> {
    /// `ParamShape::Length`: `ulParameterLen`, the parameter itself unread.
    Length(usize),
    Absent,
    Iv([u8; 16]),
    Ulong(CK_ULONG),
    RsaPkcsPss {
        hash_alg: CK_MECHANISM_TYPE,
        mgf: CK_RSA_PKCS_MGF_TYPE,
        s_len: CK_ULONG,
    },
    RsaPkcsOaep {
        hash_alg: CK_MECHANISM_TYPE,
        mgf: CK_RSA_PKCS_MGF_TYPE,
        source: CK_RSA_PKCS_OAEP_SOURCE_TYPE,
        source_data: Pointed<'a>,
    },
    AesCtr {
        counter_bits: CK_ULONG,
        cb: [u8; 16],
    },
    Gcm {
        iv: Pointed<'a>,
        aad: Pointed<'a>,
        tag_bits: CK_ULONG,
    },
    Ecdh1Derive {
        kdf: CK_EC_KDF_TYPE,
        shared_data_len: CK_ULONG,
        public_data: Pointed<'a>,
    },
    Eddsa {
        ph_flag: bool,
        context: Pointed<'a>,
    },
    KeyDerivationStringData {
        data: Pointed<'a>,
    },
    AesCbcEncryptData {
        iv: [u8; 16],
        data: Pointed<'a>,
    },
    SignAdditionalContext {
        hedge: CK_HEDGE_TYPE,
        context: Pointed<'a>,
    },
    HashSignAdditionalContext {
        hedge: CK_HEDGE_TYPE,
        context: Pointed<'a>,
        hash: CK_MECHANISM_TYPE,
    },
}

/// Bytes a parameter points at (a label, an IV, a context), followed only when the family
/// asks: a pointer the family has no use for is never read, and a read that fails gives its
/// error where the family takes it, so the order of checks is the family's.
pub struct Pointed<'a> {
    len: CK_ULONG,
    read: Box<dyn FnOnce(bool) -> Result<Vec<u8>> + 'a>,
}

impl<'a> Pointed<'a> {
    /// `read(required)` copies the bytes out: NULL is accepted only for an empty input unless
    /// `required`, when it is refused (`CKR_ARGUMENTS_BAD`) even with a zero length.
    pub fn new(len: CK_ULONG, read: impl FnOnce(bool) -> Result<Vec<u8>> + 'a) -> Self {
        Pointed {
            len,
            read: Box::new(read),
        }
    }

    /// The length the structure gives, without reading.
    pub fn len(&self) -> CK_ULONG {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes; NULL is accepted for an empty input.
    pub fn read(self) -> Result<Vec<u8>> {
        (self.read)(false)
    }

    /// The bytes of an input the mechanism cannot do without: NULL is refused.
    pub fn read_required(self) -> Result<Vec<u8>> {
        (self.read)(true)
    }
}

/// The parameters a family parsed, which only it reads back (`Mechanism::params`).
pub type Params = Arc<dyn Any + Send + Sync>;

/// The operations a mechanism may take a key for (`Family::key_class`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Sign,
    Verify,
    Encrypt,
    Decrypt,
    Wrap,
    Unwrap,
    Derive,
}

/// A key as the token hands it to a family: a secret key's `CKA_VALUE`, or a private or
/// public key in the usable form its key type's model (`KeyModel`) made once per object (an
/// RSA `PreparedKey`, an `ec::PrivateKey`, a post-quantum `Arc<dyn pq::PrivateKey>`, ...),
/// which the family takes back with `private`/`public`.
pub enum Key {
    Secret(Zeroizing<Vec<u8>>),
    Private(Arc<dyn Any + Send + Sync>),
    Public(Arc<dyn Any + Send + Sync>),
}

impl Key {
    /// The secret key's value.
    pub fn secret(&self) -> Result<&[u8]> {
        match self {
            Key::Secret(v) => Ok(v),
            _ => fail(CKR_KEY_TYPE_INCONSISTENT),
        }
    }

    /// The private key as its family's type `T`.
    pub fn private<T: Any + Send + Sync>(self) -> Result<Arc<T>> {
        match self {
            Key::Private(k) => k.downcast().map_err(|_| Error(CKR_KEY_TYPE_INCONSISTENT)),
            _ => fail(CKR_KEY_TYPE_INCONSISTENT),
        }
    }

    /// The public key as its family's type `T`.
    pub fn public<T: Any + Send + Sync>(self) -> Result<Arc<T>> {
        match self {
            Key::Public(k) => k.downcast().map_err(|_| Error(CKR_KEY_TYPE_INCONSISTENT)),
            _ => fail(CKR_KEY_TYPE_INCONSISTENT),
        }
    }
}

/// A running signature or MAC: the parts so far and the key. The token keeps the rules around
/// it (one-shot or multi-part, errors ending the operation, the two-call lengths).
pub trait Signer: Send {
    fn signature_len(&self) -> usize;
    fn update(&mut self, data: &[u8]) -> Result<()>;
    /// The signature over every part, and `one_shot` when it is the whole message.
    fn sign(&self, one_shot: Option<&[u8]>) -> Result<Vec<u8>>;
}

/// A running verification.
pub trait Verifier: Send {
    fn update(&mut self, data: &[u8]) -> Result<()>;
    fn verify(&self, one_shot: Option<&[u8]>, signature: &[u8]) -> Result<()>;
}

/// A running encryption or decryption. Every length is known before any state changes, so a
/// short buffer loses nothing; a single-part mechanism refuses the multi-part calls.
pub trait Crypter: Send {
    /// Whether multi-part input has been taken (a one-shot call is refused then).
    fn is_multipart(&self) -> bool;
    /// The output length of a one-shot call on `n` bytes (an upper bound where the exact one
    /// needs the work done).
    fn single_len(&self, n: usize) -> Result<usize>;
    fn single(&self, data: &[u8]) -> Result<Zeroizing<Vec<u8>>>;
    fn update_len(&self, n: usize) -> Result<usize>;
    /// The next part; the state moves on only when it succeeds.
    fn update(&mut self, data: &[u8]) -> Result<Zeroizing<Vec<u8>>>;
    fn final_len(&self) -> Result<usize>;
    /// The last part; changes nothing, so a short buffer can ask again.
    fn finish(&self) -> Result<Zeroizing<Vec<u8>>>;
}

/// A derived secret, and whether its length is the mechanism parameter's (then a template
/// asking for more is `CKR_MECHANISM_PARAM_INVALID`, not `CKR_TEMPLATE_INCONSISTENT`).
pub struct Derived {
    pub secret: Zeroizing<Vec<u8>>,
    pub len_from_param: bool,
}

/// What a key generation mechanism makes: a key pair or a secret key, of a key type whose key
/// model (templates, attributes) the token owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generates {
    KeyPair(CK_KEY_TYPE),
    SecretKey(CK_KEY_TYPE),
}
