//! The protocol between the remote client (`remote::Client`, inside the module) and
//! `ferrohsm-server`: the request and response messages, their version, their encoding, and
//! the limits a decoder holds them to. Both sides import this one module; nothing else knows
//! the wire.
//!
//! Transport: one HTTP/2 POST per PKCS#11 call to `PATH`, over mutual TLS 1.3; concurrent calls
//! of one client are concurrent streams of one connection. Body: an `Envelope` encoded with
//! postcard (varint integers, length-prefixed bytes). A body over `MAX_BODY` bytes is refused
//! before it is decoded (the server reads at most that much), so no claimed length can make a
//! decoder allocate more than the bytes it holds; then every field is checked against its own
//! limit (`Request::check`).

// The wire's integers are u64 whatever CK_ULONG is on either end (u64 on 64-bit Linux, where
// these casts change nothing; u32 on other ABIs).
#![allow(clippy::unnecessary_cast)]

use crate::error::{Error, Result};
use crate::mechanism::{Param as CParam, Pointed};
use crate::service::{RawMechanism, SessionInfo, TokenInfo};
use cryptoki_sys::*;
use serde::{Deserialize, Serialize};
use zeroize::Zeroize;

/// The version of the messages below. A server answers a request of another version with
/// `Reply::Version` naming its own, so a mismatch is told, never misread.
/// 2: `SignInit` is answered `Reply::SignInit` (the signature's length), not `Reply::Done`.
/// 3: `InitToken`.
pub const VERSION: u16 = 4;
/// Where every call is posted.
pub const PATH: &str = "/ferrohsm/v1/call";
/// The largest body either side reads: requests and answers alike.
pub const MAX_BODY: usize = 4 << 20;
/// The most attributes in one template or one `C_GetAttributeValue`.
pub const MAX_ATTRIBUTES: usize = 4096;
/// The largest attribute value, data input, signature or wrapped key (`MAX_BODY` bounds the
/// sum).
pub const MAX_BYTES: usize = MAX_BODY - 4096;
/// The largest mechanism parameter part (a label, an IV, a context, a peer's point).
pub const MAX_PARAM_BYTES: usize = 64 << 10;
/// The largest `C_GenerateRandom` and the most handles one `C_FindObjects` returns.
pub const MAX_COUNT: u64 = 1 << 20;

/// What travels: a version and a body.
#[derive(Serialize, Deserialize)]
pub struct Envelope<T> {
    pub version: u16,
    pub body: T,
}

/// A PIN on the wire: zeroized when dropped, never printed.
#[derive(Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub Vec<u8>);

impl Drop for Secret {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

/// An attribute of a template: type and value bytes as the token encodes them.
pub type Attribute = (CK_ATTRIBUTE_TYPE, Vec<u8>);

/// A mechanism as the application gave it, parameter unchecked (the server's token checks
/// it): every structure the C boundary reads, with the bytes its pointers named.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mechanism {
    pub ty: CK_MECHANISM_TYPE,
    pub param: Param,
}

/// `mechanism::Param` with its pointed bytes read.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash)]
pub enum Param {
    Length(u64),
    Absent,
    Iv([u8; 16]),
    Ulong(u64),
    RsaPkcsPss {
        hash_alg: u64,
        mgf: u64,
        s_len: u64,
    },
    RsaPkcsOaep {
        hash_alg: u64,
        mgf: u64,
        source: u64,
        source_data: Vec<u8>,
    },
    AesCtr {
        counter_bits: u64,
        cb: [u8; 16],
    },
    Gcm {
        iv: Vec<u8>,
        aad: Vec<u8>,
        tag_bits: u64,
    },
    Ecdh1Derive {
        kdf: u64,
        shared_data_len: u64,
        public_data: Vec<u8>,
    },
    Eddsa {
        ph_flag: bool,
        context: Vec<u8>,
    },
    KeyDerivationStringData {
        data: Vec<u8>,
    },
    AesCbcEncryptData {
        iv: [u8; 16],
        data: Vec<u8>,
    },
    SignAdditionalContext {
        hedge: u64,
        context: Vec<u8>,
    },
    HashSignAdditionalContext {
        hedge: u64,
        context: Vec<u8>,
        hash: u64,
    },
}

/// One PKCS#11 call. Session handles are the server's; `capacity` is the caller's output
/// buffer (`None`: a length query), so the two-call convention holds across the wire.
#[derive(Serialize, Deserialize)]
pub enum Request {
    SlotList {
        token_present: bool,
    },
    CheckSlot {
        slot: u64,
    },
    TokenInfo {
        slot: u64,
    },
    MechanismList {
        slot: u64,
    },
    MechanismInfo {
        slot: u64,
        ty: u64,
    },
    OpenSession {
        slot: u64,
        flags: u64,
    },
    CloseSession {
        session: u64,
    },
    CloseAllSessions {
        slot: u64,
    },
    CheckSession {
        session: u64,
    },
    SessionInfo {
        session: u64,
    },
    HasCryptoOperation {
        session: u64,
    },
    Login {
        session: u64,
        user: u64,
        pin: Secret,
    },
    Logout {
        session: u64,
    },
    InitPin {
        session: u64,
        pin: Secret,
    },
    SetPin {
        session: u64,
        old: Secret,
        new: Secret,
    },
    Cancel {
        session: u64,
        flags: u64,
    },
    CreateObject {
        session: u64,
        template: Vec<Attribute>,
    },
    CopyObject {
        session: u64,
        object: u64,
        template: Vec<Attribute>,
    },
    DestroyObject {
        session: u64,
        object: u64,
    },
    ObjectSize {
        session: u64,
        object: u64,
    },
    GetAttributes {
        session: u64,
        object: u64,
        types: Vec<u64>,
    },
    SetAttributes {
        session: u64,
        object: u64,
        template: Vec<Attribute>,
    },
    FindInit {
        session: u64,
        template: Vec<Attribute>,
    },
    FindNext {
        session: u64,
        max: u64,
    },
    FindFinal {
        session: u64,
    },
    GenerateKey {
        session: u64,
        mechanism: Mechanism,
        template: Vec<Attribute>,
    },
    GenerateKeyPair {
        session: u64,
        mechanism: Mechanism,
        public: Vec<Attribute>,
        private: Vec<Attribute>,
    },
    WrapKey {
        session: u64,
        mechanism: Mechanism,
        wrapping: u64,
        key: u64,
        capacity: Option<u64>,
    },
    UnwrapKey {
        session: u64,
        mechanism: Mechanism,
        unwrapping: u64,
        wrapped: Vec<u8>,
        template: Vec<Attribute>,
    },
    DeriveKey {
        session: u64,
        mechanism: Mechanism,
        base: u64,
        template: Vec<Attribute>,
    },
    SignInit {
        session: u64,
        mechanism: Mechanism,
        key: u64,
    },
    /// `C_Sign` (`data` given) or `C_SignFinal`.
    Sign {
        session: u64,
        data: Option<Vec<u8>>,
        capacity: Option<u64>,
    },
    SignUpdate {
        session: u64,
        data: Vec<u8>,
    },
    VerifyInit {
        session: u64,
        mechanism: Mechanism,
        key: u64,
    },
    /// `C_Verify` (`data` given) or `C_VerifyFinal`.
    Verify {
        session: u64,
        data: Option<Vec<u8>>,
        signature: Vec<u8>,
    },
    VerifyUpdate {
        session: u64,
        data: Vec<u8>,
    },
    EncryptInit {
        session: u64,
        mechanism: Mechanism,
        key: u64,
    },
    DecryptInit {
        session: u64,
        mechanism: Mechanism,
        key: u64,
    },
    Crypt {
        session: u64,
        encrypt: bool,
        data: Vec<u8>,
        capacity: Option<u64>,
    },
    CryptUpdate {
        session: u64,
        encrypt: bool,
        data: Vec<u8>,
        capacity: Option<u64>,
    },
    CryptFinal {
        session: u64,
        encrypt: bool,
        capacity: Option<u64>,
    },
    DigestInit {
        session: u64,
        mechanism: Mechanism,
    },
    /// `C_Digest` (`data` given) or `C_DigestFinal`.
    Digest {
        session: u64,
        data: Option<Vec<u8>>,
        capacity: Option<u64>,
    },
    DigestUpdate {
        session: u64,
        data: Vec<u8>,
    },
    DigestKey {
        session: u64,
        key: u64,
    },
    GenerateRandom {
        session: u64,
        len: u64,
    },
    /// `C_InitToken` (`user_pin` absent) or `FERROHSM_InitTokenWithPIN`.
    InitToken {
        slot: u64,
        so_pin: Secret,
        label: [u8; 32],
        user_pin: Option<Secret>,
    },
    /// `C_SignInit` and the `C_Sign` that follows it, in one round trip (protocol version 4):
    /// the client holds back a `C_SignInit` whose signature length it already knows (the key
    /// and mechanism initialised before on the connection) and sends it with the data.
    SignInitAndSign {
        session: u64,
        mechanism: Mechanism,
        key: u64,
        data: Vec<u8>,
        capacity: Option<u64>,
    },
}

/// One attribute's answer to `GetAttributes`.
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
pub enum AttributeAnswer {
    Value(Vec<u8>),
    Sensitive,
    Invalid,
}

/// The answer to a call: `Err(rv)` carries the token's `CK_RV`.
pub type Response = std::result::Result<Reply, CK_RV>;

#[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
pub enum Reply {
    Done,
    Handle(u64),
    Handles(Vec<u64>),
    KeyPair(u64, u64),
    Size(u64),
    Bool(bool),
    /// `Output::Length` (the caller's buffer is too small or absent) or the data.
    Length(u64),
    Data(Vec<u8>),
    TokenInfo(TokenInfo),
    SessionInfo(SessionInfo),
    MechanismInfo {
        min: u64,
        max: u64,
        flags: u64,
    },
    Attributes(Vec<AttributeAnswer>),
    /// The server speaks another version of this protocol: this one.
    Version(u16),
    /// `SignInit` done, with the length the token answers a length query of this operation
    /// with (`C_Sign`/`C_SignFinal` with no buffer or a short one), when that length holds for
    /// the whole operation whatever its input (`None`: ask the server each time). The client
    /// answers those queries itself: a signature costs two round trips, not three.
    /// After `Version`: a variant's tag is its position, and `Version` must keep its tag for
    /// a client of another version to read it.
    SignInit {
        signature_len: Option<u64>,
    },
}

fn within(what: &str, len: usize, max: usize) -> Result<()> {
    if len > max {
        log::warn!("remote request refused: {what} of {len} bytes or items, over the limit of {max}");
        return Err(Error(CKR_DATA_LEN_RANGE));
    }
    Ok(())
}

fn template_within(t: &[Attribute]) -> Result<()> {
    within("template", t.len(), MAX_ATTRIBUTES)?;
    t.iter()
        .try_for_each(|(_, v)| within("attribute value", v.len(), MAX_BYTES))
}

impl Param {
    fn check(&self) -> Result<()> {
        let parts: &[&Vec<u8>] = match self {
            Param::RsaPkcsOaep { source_data, .. } => &[source_data],
            Param::Gcm { iv, aad, .. } => &[iv, aad],
            Param::Ecdh1Derive { public_data, .. } => &[public_data],
            Param::Eddsa { context, .. }
            | Param::SignAdditionalContext { context, .. }
            | Param::HashSignAdditionalContext { context, .. } => &[context],
            Param::KeyDerivationStringData { data } | Param::AesCbcEncryptData { data, .. } => &[data],
            _ => &[],
        };
        parts
            .iter()
            .try_for_each(|p| within("mechanism parameter", p.len(), MAX_PARAM_BYTES))
    }
}

impl Request {
    /// The request's name, as the server's log and counters say it.
    pub fn name(&self) -> &'static str {
        use Request::*;
        match self {
            SlotList { .. } => "SlotList",
            CheckSlot { .. } => "CheckSlot",
            TokenInfo { .. } => "TokenInfo",
            MechanismList { .. } => "MechanismList",
            MechanismInfo { .. } => "MechanismInfo",
            OpenSession { .. } => "OpenSession",
            CloseSession { .. } => "CloseSession",
            CloseAllSessions { .. } => "CloseAllSessions",
            CheckSession { .. } => "CheckSession",
            SessionInfo { .. } => "SessionInfo",
            HasCryptoOperation { .. } => "HasCryptoOperation",
            Login { .. } => "Login",
            Logout { .. } => "Logout",
            InitPin { .. } => "InitPin",
            SetPin { .. } => "SetPin",
            Cancel { .. } => "Cancel",
            CreateObject { .. } => "CreateObject",
            CopyObject { .. } => "CopyObject",
            DestroyObject { .. } => "DestroyObject",
            ObjectSize { .. } => "ObjectSize",
            GetAttributes { .. } => "GetAttributes",
            SetAttributes { .. } => "SetAttributes",
            FindInit { .. } => "FindInit",
            FindNext { .. } => "FindNext",
            FindFinal { .. } => "FindFinal",
            GenerateKey { .. } => "GenerateKey",
            GenerateKeyPair { .. } => "GenerateKeyPair",
            WrapKey { .. } => "WrapKey",
            UnwrapKey { .. } => "UnwrapKey",
            DeriveKey { .. } => "DeriveKey",
            SignInit { .. } => "SignInit",
            Sign { .. } => "Sign",
            SignUpdate { .. } => "SignUpdate",
            VerifyInit { .. } => "VerifyInit",
            Verify { .. } => "Verify",
            VerifyUpdate { .. } => "VerifyUpdate",
            EncryptInit { .. } => "EncryptInit",
            DecryptInit { .. } => "DecryptInit",
            Crypt { .. } => "Crypt",
            CryptUpdate { .. } => "CryptUpdate",
            CryptFinal { .. } => "CryptFinal",
            DigestInit { .. } => "DigestInit",
            Digest { .. } => "Digest",
            DigestUpdate { .. } => "DigestUpdate",
            DigestKey { .. } => "DigestKey",
            GenerateRandom { .. } => "GenerateRandom",
            InitToken { .. } => "InitToken",
            SignInitAndSign { .. } => "SignInitAndSign",
        }
    }

    /// The server's session handle the request names, if any: rewritten when a call lost
    /// with its connection is made again on a session opened again (`remote::client`).
    pub fn session_mut(&mut self) -> Option<&mut u64> {
        use Request::*;
        match self {
            SlotList { .. }
            | CheckSlot { .. }
            | TokenInfo { .. }
            | MechanismList { .. }
            | MechanismInfo { .. }
            | OpenSession { .. }
            | CloseAllSessions { .. }
            | InitToken { .. } => None,
            CloseSession { session }
            | CheckSession { session }
            | SessionInfo { session }
            | HasCryptoOperation { session }
            | Login { session, .. }
            | Logout { session }
            | InitPin { session, .. }
            | SetPin { session, .. }
            | Cancel { session, .. }
            | CreateObject { session, .. }
            | CopyObject { session, .. }
            | DestroyObject { session, .. }
            | ObjectSize { session, .. }
            | GetAttributes { session, .. }
            | SetAttributes { session, .. }
            | FindInit { session, .. }
            | FindNext { session, .. }
            | FindFinal { session }
            | GenerateKey { session, .. }
            | GenerateKeyPair { session, .. }
            | WrapKey { session, .. }
            | UnwrapKey { session, .. }
            | DeriveKey { session, .. }
            | SignInit { session, .. }
            | Sign { session, .. }
            | SignUpdate { session, .. }
            | VerifyInit { session, .. }
            | Verify { session, .. }
            | VerifyUpdate { session, .. }
            | EncryptInit { session, .. }
            | DecryptInit { session, .. }
            | Crypt { session, .. }
            | CryptUpdate { session, .. }
            | CryptFinal { session, .. }
            | DigestInit { session, .. }
            | Digest { session, .. }
            | DigestUpdate { session, .. }
            | DigestKey { session, .. }
            | GenerateRandom { session, .. }
            | SignInitAndSign { session, .. } => Some(session),
        }
    }

    /// The key object the request uses, if any: the signing, verifying, encrypting or
    /// decrypting key at an Init, the wrapping key of a wrap, the unwrapping or base key.
    pub fn key(&self) -> Option<u64> {
        use Request::*;
        match self {
            SignInit { key, .. }
            | SignInitAndSign { key, .. }
            | VerifyInit { key, .. }
            | EncryptInit { key, .. }
            | DecryptInit { key, .. } => Some(*key),
            WrapKey { wrapping, .. } => Some(*wrapping),
            UnwrapKey { unwrapping, .. } => Some(*unwrapping),
            DeriveKey { base, .. } => Some(*base),
            _ => None,
        }
    }

    /// The mechanism the request names, if any: what the server's token parses
    /// (`Mechanism::parse`), and what a per-mechanism count is kept by.
    pub fn mechanism(&self) -> Option<&Mechanism> {
        use Request::*;
        match self {
            GenerateKey { mechanism, .. }
            | GenerateKeyPair { mechanism, .. }
            | WrapKey { mechanism, .. }
            | UnwrapKey { mechanism, .. }
            | DeriveKey { mechanism, .. }
            | SignInit { mechanism, .. }
            | SignInitAndSign { mechanism, .. }
            | VerifyInit { mechanism, .. }
            | EncryptInit { mechanism, .. }
            | DecryptInit { mechanism, .. }
            | DigestInit { mechanism, .. } => Some(mechanism),
            _ => None,
        }
    }

    /// Every field within its limit: the check a server makes on each request it decoded.
    pub fn check(&self) -> Result<()> {
        use Request::*;
        match self {
            CreateObject { template, .. }
            | CopyObject { template, .. }
            | SetAttributes { template, .. }
            | FindInit { template, .. } => template_within(template),
            GetAttributes { types, .. } => within("attribute list", types.len(), MAX_ATTRIBUTES),
            GenerateKey {
                mechanism, template, ..
            }
            | DeriveKey {
                mechanism, template, ..
            } => {
                mechanism.param.check()?;
                template_within(template)
            }
            GenerateKeyPair {
                mechanism,
                public,
                private,
                ..
            } => {
                mechanism.param.check()?;
                template_within(public)?;
                template_within(private)
            }
            UnwrapKey {
                mechanism,
                wrapped,
                template,
                ..
            } => {
                mechanism.param.check()?;
                within("wrapped key", wrapped.len(), MAX_BYTES)?;
                template_within(template)
            }
            WrapKey { mechanism, .. }
            | SignInit { mechanism, .. }
            | VerifyInit { mechanism, .. }
            | EncryptInit { mechanism, .. }
            | DecryptInit { mechanism, .. }
            | DigestInit { mechanism, .. } => mechanism.param.check(),
            Verify { data, signature, .. } => {
                within("data", data.as_ref().map_or(0, Vec::len), MAX_BYTES)?;
                within("signature", signature.len(), MAX_BYTES)
            }
            Sign { data: Some(d), .. } | Digest { data: Some(d), .. } => within("data", d.len(), MAX_BYTES),
            SignInitAndSign { mechanism, data, .. } => {
                mechanism.param.check()?;
                within("data", data.len(), MAX_BYTES)
            }
            SignUpdate { data, .. }
            | VerifyUpdate { data, .. }
            | Crypt { data, .. }
            | CryptUpdate { data, .. }
            | DigestUpdate { data, .. } => within("data", data.len(), MAX_BYTES),
            GenerateRandom { len, .. } | FindNext { max: len, .. } => within(
                "count",
                usize::try_from(*len).unwrap_or(usize::MAX),
                MAX_COUNT as usize,
            ),
            Login { pin, .. } | InitPin { pin, .. } => within("PIN", pin.0.len(), 1024),
            InitToken { so_pin, user_pin, .. } => {
                within("PIN", so_pin.0.len(), 1024)?;
                within("PIN", user_pin.as_ref().map_or(0, |p| p.0.len()), 1024)
            }
            SetPin { old, new, .. } => {
                within("PIN", old.0.len(), 1024)?;
                within("PIN", new.0.len(), 1024)
            }
            _ => Ok(()),
        }
    }
}

/// Encodes a message for the wire.
pub fn encode<T: Serialize>(body: &T) -> Result<Vec<u8>> {
    postcard::to_stdvec(&Envelope {
        version: VERSION,
        body,
    })
    .map_err(|e| {
        log::error!("remote: a message could not be encoded: {e}");
        Error(CKR_GENERAL_ERROR)
    })
}

/// Decodes a message of this version; `Err(Some(v))` for another version `v`, `Err(None)` for
/// bytes that are no message (or one over `MAX_BODY`).
pub fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> std::result::Result<T, Option<u16>> {
    if bytes.len() > MAX_BODY {
        return Err(None);
    }
    // The version first, alone: a message of another version need not decode as this one's.
    let (version, _) = postcard::take_from_bytes::<u16>(bytes).map_err(|_| None)?;
    if version != VERSION {
        return Err(Some(version));
    }
    let env: Envelope<T> = postcard::from_bytes(bytes).map_err(|_| None)?;
    Ok(env.body)
}

impl Mechanism {
    /// The mechanism as the application gave it, its pointed bytes read now: the remote client
    /// cannot read them later on the server. A pointer the family would not have read is read
    /// here too, so a bad one fails at the client (`CKR_ARGUMENTS_BAD`) where the local token
    /// would have ignored it.
    pub fn from_raw(m: RawMechanism<'_>) -> Result<Mechanism> {
        let ul = |v: CK_ULONG| v as u64;
        let param = match m.param {
            CParam::Length(n) => Param::Length(n as u64),
            CParam::Absent => Param::Absent,
            CParam::Iv(iv) => Param::Iv(iv),
            CParam::Ulong(v) => Param::Ulong(ul(v)),
            CParam::RsaPkcsPss { hash_alg, mgf, s_len } => Param::RsaPkcsPss {
                hash_alg: ul(hash_alg),
                mgf: ul(mgf),
                s_len: ul(s_len),
            },
            CParam::RsaPkcsOaep {
                hash_alg,
                mgf,
                source,
                source_data,
            } => Param::RsaPkcsOaep {
                hash_alg: ul(hash_alg),
                mgf: ul(mgf),
                source: ul(source),
                source_data: bytes(source_data)?,
            },
            CParam::AesCtr { counter_bits, cb } => Param::AesCtr {
                counter_bits: ul(counter_bits),
                cb,
            },
            CParam::Gcm { iv, aad, tag_bits } => Param::Gcm {
                iv: bytes(iv)?,
                aad: bytes(aad)?,
                tag_bits: ul(tag_bits),
            },
            CParam::Ecdh1Derive {
                kdf,
                shared_data_len,
                public_data,
            } => Param::Ecdh1Derive {
                kdf: ul(kdf),
                shared_data_len: ul(shared_data_len),
                public_data: bytes(public_data)?,
            },
            CParam::Eddsa { ph_flag, context } => Param::Eddsa {
                ph_flag,
                context: bytes(context)?,
            },
            CParam::KeyDerivationStringData { data } => Param::KeyDerivationStringData { data: bytes(data)? },
            CParam::AesCbcEncryptData { iv, data } => Param::AesCbcEncryptData {
                iv,
                data: bytes(data)?,
            },
            CParam::SignAdditionalContext { hedge, context } => Param::SignAdditionalContext {
                hedge: ul(hedge),
                context: bytes(context)?,
            },
            CParam::HashSignAdditionalContext { hedge, context, hash } => Param::HashSignAdditionalContext {
                hedge: ul(hedge),
                context: bytes(context)?,
                hash: ul(hash),
            },
        };
        Ok(Mechanism { ty: m.ty, param })
    }

    /// The mechanism checked by its family, as the server's token takes it.
    pub fn parse(self) -> Result<crate::mechanism::Mechanism> {
        let Some((family, _)) = crate::mechanism::find(self.ty) else {
            return Err(Error(CKR_MECHANISM_INVALID));
        };
        let c = |v: u64| v as CK_ULONG;
        let param = match self.param {
            Param::Length(n) => CParam::Length(n as usize),
            Param::Absent => CParam::Absent,
            Param::Iv(iv) => CParam::Iv(iv),
            Param::Ulong(v) => CParam::Ulong(c(v)),
            Param::RsaPkcsPss { hash_alg, mgf, s_len } => CParam::RsaPkcsPss {
                hash_alg: c(hash_alg),
                mgf: c(mgf),
                s_len: c(s_len),
            },
            Param::RsaPkcsOaep {
                hash_alg,
                mgf,
                source,
                source_data,
            } => CParam::RsaPkcsOaep {
                hash_alg: c(hash_alg),
                mgf: c(mgf),
                source: c(source),
                source_data: pointed(source_data),
            },
            Param::AesCtr { counter_bits, cb } => CParam::AesCtr {
                counter_bits: c(counter_bits),
                cb,
            },
            Param::Gcm { iv, aad, tag_bits } => CParam::Gcm {
                iv: pointed(iv),
                aad: pointed(aad),
                tag_bits: c(tag_bits),
            },
            Param::Ecdh1Derive {
                kdf,
                shared_data_len,
                public_data,
            } => CParam::Ecdh1Derive {
                kdf: c(kdf),
                shared_data_len: c(shared_data_len),
                public_data: pointed(public_data),
            },
            Param::Eddsa { ph_flag, context } => CParam::Eddsa {
                ph_flag,
                context: pointed(context),
            },
            Param::KeyDerivationStringData { data } => {
                CParam::KeyDerivationStringData { data: pointed(data) }
            }
            Param::AesCbcEncryptData { iv, data } => CParam::AesCbcEncryptData {
                iv,
                data: pointed(data),
            },
            Param::SignAdditionalContext { hedge, context } => CParam::SignAdditionalContext {
                hedge: c(hedge),
                context: pointed(context),
            },
            Param::HashSignAdditionalContext { hedge, context, hash } => CParam::HashSignAdditionalContext {
                hedge: c(hedge),
                context: pointed(context),
                hash: c(hash),
            },
        };
        crate::mechanism::Mechanism::parse(family, self.ty, param)
    }
}

fn bytes(p: Pointed<'_>) -> Result<Vec<u8>> {
    p.read()
}

fn pointed(v: Vec<u8>) -> Pointed<'static> {
    Pointed::new(v.len() as CK_ULONG, move |_| Ok(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_round_trips_with_its_mechanism_parameters() {
        let m = Mechanism {
            ty: CKM_SHA256_RSA_PKCS_PSS,
            param: Param::RsaPkcsPss {
                hash_alg: CKM_SHA256,
                mgf: CKG_MGF1_SHA256,
                s_len: 32,
            },
        };
        let bytes = encode(&Request::SignInit {
            session: 7,
            mechanism: m.clone(),
            key: 9,
        })
        .unwrap();
        match decode::<Request>(&bytes) {
            Ok(Request::SignInit {
                session,
                mechanism,
                key,
            }) => assert_eq!((session, mechanism, key), (7, m, 9)),
            _ => panic!("not decoded as sent"),
        }
    }

    #[test]
    fn another_version_is_told_not_misread() {
        let bytes = postcard::to_stdvec(&Envelope {
            version: VERSION + 1,
            body: Request::SlotList { token_present: true },
        })
        .unwrap();
        assert_eq!(decode::<Request>(&bytes).err(), Some(Some(VERSION + 1)));
    }

    #[test]
    fn the_version_reply_keeps_its_tag_and_sign_init_carries_the_length() {
        // Tag 12 since version 1: a client of another version still reads which one the
        // server speaks.
        assert_eq!(postcard::to_stdvec(&Reply::Version(1)).unwrap(), [12, 1]);
        let bytes = encode(&Ok::<_, CK_RV>(Reply::SignInit {
            signature_len: Some(3309),
        }))
        .unwrap();
        assert_eq!(
            decode::<Response>(&bytes).ok(),
            Some(Ok(Reply::SignInit {
                signature_len: Some(3309)
            }))
        );
    }

    #[test]
    fn a_claimed_length_beyond_the_bytes_is_refused_without_allocating_it() {
        // SignUpdate { session: 1, data: <claims 2^62 bytes> } with nothing after the claim.
        let mut bytes = encode(&Request::SignUpdate {
            session: 1,
            data: vec![],
        })
        .unwrap();
        bytes.pop();
        bytes.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f]);
        assert!(decode::<Request>(&bytes).is_err());
    }

    /// Random bytes and every truncation and one-byte change of valid requests: decoding never
    /// panics, and what decodes is held to the limits (the request decoder's fuzz, bounded).
    #[test]
    fn arbitrary_bytes_decode_to_an_error_or_a_checked_request() {
        let valid = [
            encode(&Request::SignInit {
                session: 3,
                key: 4,
                mechanism: Mechanism {
                    ty: CKM_ML_DSA,
                    param: Param::SignAdditionalContext {
                        hedge: 0,
                        context: b"ctx".to_vec(),
                    },
                },
            })
            .unwrap(),
            encode(&Request::CreateObject {
                session: 1,
                template: vec![(CKA_LABEL, b"label".to_vec()), (CKA_ID, vec![1, 2])],
            })
            .unwrap(),
            encode(&Request::Login {
                session: 1,
                user: CKU_USER,
                pin: Secret(b"1234".to_vec()),
            })
            .unwrap(),
        ];
        let mut inputs = Vec::new();
        for v in &valid {
            for cut in 0..v.len() {
                inputs.push(v[..cut].to_vec());
            }
            for at in 0..v.len() {
                for flip in [0x01u8, 0x80, 0xff] {
                    let mut m = v.clone();
                    m[at] ^= flip;
                    inputs.push(m);
                }
            }
        }
        for n in 0..2000usize {
            let mut b = vec![0u8; n % 97];
            getrandom::fill(&mut b).unwrap();
            b.splice(0..0, [VERSION as u8]);
            inputs.push(b);
        }
        let mut decoded = 0;
        for i in &inputs {
            if let Ok(r) = decode::<Request>(i) {
                decoded += 1;
                let _ = r.check();
            }
        }
        assert!(
            decoded > 0,
            "no mutated request decoded: the test exercised nothing past the version"
        );
    }

    #[test]
    fn fields_over_their_limits_are_refused() {
        let big = Request::SignUpdate {
            session: 1,
            data: vec![0; MAX_BYTES + 1],
        };
        assert_eq!(big.check().err(), Some(Error(CKR_DATA_LEN_RANGE)));
        let many = Request::GetAttributes {
            session: 1,
            object: 2,
            types: vec![0; MAX_ATTRIBUTES + 1],
        };
        assert!(many.check().is_err());
        let context = Request::SignInit {
            session: 1,
            key: 2,
            mechanism: Mechanism {
                ty: CKM_ML_DSA,
                param: Param::SignAdditionalContext {
                    hedge: 0,
                    context: vec![0; MAX_PARAM_BYTES + 1],
                },
            },
        };
        assert!(context.check().is_err());
        assert!(Request::GenerateRandom {
            session: 1,
            len: MAX_COUNT + 1
        }
        .check()
        .is_err());
        let init = |so: usize, user: usize| Request::InitToken {
            slot: 0,
            so_pin: Secret(vec![b'1'; so]),
            label: [b' '; 32],
            user_pin: Some(Secret(vec![b'1'; user])),
        };
        assert!(init(1024, 1024).check().is_ok());
        assert!(init(1025, 4).check().is_err());
        assert!(init(8, 1025).check().is_err());
    }
}
