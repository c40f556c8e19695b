//! The token service: the one seam the C boundary speaks to. `ffi/` converts pointers and
//! hands plain Rust values to a `Service`, which is either the token in this process
//! (`token::Library`) or a client of a `ferrohsm-server` (`remote::Client`), so `ffi/` never
//! learns which one it has: ffi → service → {token, remote client}; server → token.
//!
//! An enum, not a trait object: the local arm is a direct call the compiler can inline, and
//! nothing on a signature's path is allocated or copied for the seam. What crosses it is
//! borrowed (`&[u8]`, the caller's capacity) exactly as before; a mechanism crosses it as the
//! C boundary read it (`RawMechanism`), parsed by the local arm and carried by the remote one.

mod local;

use crate::error::Result;
use crate::mechanism::{Family, Mechanism, Param};
use crate::remote::Client;
use crate::token::attributes::Template;
use crate::token::objects::AttributeValue;
use crate::token::{Arg, Library, Output};
use cryptoki_sys::*;

/// The token the application talks to.
pub enum Service {
    /// The token in this process.
    Local(Library),
    /// A token served by `ferrohsm-server` (`[remote]` in the configuration).
    Remote(Box<Client>),
}

/// A mechanism as the C boundary read it: its type, its family, and its parameter in the
/// shape the family names, not yet checked. The local token parses it (`parse`); the remote
/// client carries it as it is, to be parsed by the token on the server.
pub struct RawMechanism<'a> {
    pub ty: CK_MECHANISM_TYPE,
    pub family: &'static dyn Family,
    pub param: Param<'a>,
}

impl RawMechanism<'_> {
    /// The mechanism with its parameter checked by its family.
    pub fn parse(self) -> Result<Mechanism> {
        Mechanism::parse(self.family, self.ty, self.param)
    }
}

/// What `C_GetTokenInfo` reports that the token decides (the rest is constant).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TokenInfo {
    /// Empty for the free slot's uninitialised token.
    pub label: Vec<u8>,
    pub serial: Vec<u8>,
    pub flags: CK_FLAGS,
    pub sessions: u64,
    pub rw_sessions: u64,
}

/// What `C_GetSessionInfo` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SessionInfo {
    pub slot_id: CK_SLOT_ID,
    pub state: CK_STATE,
    pub flags: CK_FLAGS,
}

/// Forwards calls whose arguments both arms take as they are.
macro_rules! forward {
    ($(fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty;)*) => {
        impl Service {
            $(
                #[inline]
                pub fn $name(&self $(, $arg: $ty)*) -> $ret {
                    match self {
                        Service::Local(l) => l.$name($($arg),*),
                        Service::Remote(r) => r.$name($($arg),*),
                    }
                }
            )*
        }
    };
}

forward! {
    fn slot_list(&self, token_present: bool) -> Result<Vec<CK_SLOT_ID>>;
    fn open_session(&self, slot: CK_SLOT_ID, flags: CK_FLAGS) -> Result<CK_SESSION_HANDLE>;
    fn close_session(&self, h: CK_SESSION_HANDLE) -> Result<()>;
    fn close_all_sessions(&self, slot: CK_SLOT_ID) -> Result<()>;
    fn check_session(&self, h: CK_SESSION_HANDLE) -> Result<()>;
    fn login(&self, h: CK_SESSION_HANDLE, user: CK_USER_TYPE, pin: &[u8]) -> Result<()>;
    fn logout(&self, h: CK_SESSION_HANDLE) -> Result<()>;
    fn init_pin(&self, h: CK_SESSION_HANDLE, pin: &[u8]) -> Result<()>;
    fn set_pin(&self, h: CK_SESSION_HANDLE, old: &[u8], new: &[u8]) -> Result<()>;
    fn cancel(&self, h: CK_SESSION_HANDLE, flags: CK_FLAGS) -> Result<()>;
    fn create_object(&self, h: CK_SESSION_HANDLE, template: Template) -> Result<CK_OBJECT_HANDLE>;
    fn copy_object(&self, h: CK_SESSION_HANDLE, o: CK_OBJECT_HANDLE, template: Template) -> Result<CK_OBJECT_HANDLE>;
    fn destroy_object(&self, h: CK_SESSION_HANDLE, o: CK_OBJECT_HANDLE) -> Result<()>;
    fn object_size(&self, h: CK_SESSION_HANDLE, o: CK_OBJECT_HANDLE) -> Result<usize>;
    fn set_attributes(&self, h: CK_SESSION_HANDLE, o: CK_OBJECT_HANDLE, template: Template) -> Result<()>;
    fn find_init(&self, h: CK_SESSION_HANDLE, template: Vec<(CK_ATTRIBUTE_TYPE, Vec<u8>)>) -> Result<()>;
    fn find_next(&self, h: CK_SESSION_HANDLE, max: usize) -> Result<Vec<CK_OBJECT_HANDLE>>;
    fn find_final(&self, h: CK_SESSION_HANDLE) -> Result<()>;
    fn sign(&self, h: CK_SESSION_HANDLE, data: Option<Arg<&[u8]>>, capacity: Arg<Option<usize>>) -> Result<Output>;
    fn sign_update(&self, h: CK_SESSION_HANDLE, data: Arg<&[u8]>) -> Result<()>;
    fn verify(&self, h: CK_SESSION_HANDLE, data: Option<Arg<&[u8]>>, signature: Arg<&[u8]>) -> Result<()>;
    fn verify_update(&self, h: CK_SESSION_HANDLE, data: Arg<&[u8]>) -> Result<()>;
    fn crypt(&self, h: CK_SESSION_HANDLE, encrypt: bool, data: Arg<&[u8]>, capacity: Arg<Option<usize>>) -> Result<Output>;
    fn crypt_update(&self, h: CK_SESSION_HANDLE, encrypt: bool, data: Arg<&[u8]>, capacity: Arg<Option<usize>>) -> Result<Output>;
    fn crypt_final(&self, h: CK_SESSION_HANDLE, encrypt: bool, capacity: Arg<Option<usize>>) -> Result<Output>;
    fn digest(&self, h: CK_SESSION_HANDLE, data: Option<Arg<&[u8]>>, capacity: Arg<Option<usize>>) -> Result<Output>;
    fn digest_update(&self, h: CK_SESSION_HANDLE, data: Arg<&[u8]>) -> Result<()>;
    fn digest_key(&self, h: CK_SESSION_HANDLE, key: CK_OBJECT_HANDLE) -> Result<()>;
    fn check_slot(&self, slot: CK_SLOT_ID) -> Result<()>;
    fn token_info(&self, slot: CK_SLOT_ID) -> Result<TokenInfo>;
    fn session_info(&self, h: CK_SESSION_HANDLE) -> Result<SessionInfo>;
    fn has_crypto_operation(&self, h: CK_SESSION_HANDLE) -> Result<bool>;
    fn mechanism_list(&self, slot: CK_SLOT_ID) -> Result<Vec<CK_MECHANISM_TYPE>>;
    fn mechanism_info(&self, slot: CK_SLOT_ID, ty: CK_MECHANISM_TYPE) -> Result<CK_MECHANISM_INFO>;
    fn generate_random(&self, h: CK_SESSION_HANDLE, buf: &mut [u8]) -> Result<()>;
    fn init_token(&self, slot: CK_SLOT_ID, so_pin: &[u8], label: &[u8; 32]) -> Result<()>;
    fn init_token_with_user_pin(&self, slot: CK_SLOT_ID, so_pin: &[u8], label: &[u8; 32], user_pin: Option<&[u8]>) -> Result<()>;
}

impl Service {
    /// The service the configuration names, made at `C_Initialize`. The remote client runs
    /// its connection on two threads of its own, or, when the application forbids the module
    /// to create threads (`CKF_LIBRARY_CANT_CREATE_OS_THREADS`), on the threads that call it.
    pub fn open(may_create_threads: bool) -> Result<Service> {
        let config = Library::load_config()?;
        match &config.remote {
            Some(remote) => Client::open(remote, may_create_threads).map(|c| Service::Remote(Box::new(c))),
            None => Library::with_config(&config).map(Service::Local),
        }
    }
}

/// Calls that take a mechanism: the local token parses it first, as the C boundary did before
/// the seam, so its errors come in the same order.
impl Service {
    pub fn sign_init(&self, h: CK_SESSION_HANDLE, m: RawMechanism<'_>, key: CK_OBJECT_HANDLE) -> Result<()> {
        match self {
            Service::Local(l) => l.sign_init(h, m.parse()?, key),
            Service::Remote(r) => r.sign_init(h, m, key),
        }
    }

    pub fn verify_init(
        &self,
        h: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        key: CK_OBJECT_HANDLE,
    ) -> Result<()> {
        match self {
            Service::Local(l) => l.verify_init(h, m.parse()?, key),
            Service::Remote(r) => r.verify_init(h, m, key),
        }
    }

    pub fn encrypt_init(
        &self,
        h: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        key: CK_OBJECT_HANDLE,
    ) -> Result<()> {
        match self {
            Service::Local(l) => l.encrypt_init(h, m.parse()?, key),
            Service::Remote(r) => r.encrypt_init(h, m, key),
        }
    }

    pub fn decrypt_init(
        &self,
        h: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        key: CK_OBJECT_HANDLE,
    ) -> Result<()> {
        match self {
            Service::Local(l) => l.decrypt_init(h, m.parse()?, key),
            Service::Remote(r) => r.decrypt_init(h, m, key),
        }
    }

    pub fn digest_init(&self, h: CK_SESSION_HANDLE, m: RawMechanism<'_>) -> Result<()> {
        match self {
            Service::Local(l) => l.digest_init(h, m.parse()?),
            Service::Remote(r) => r.digest_init(h, m),
        }
    }

    pub fn generate_key(
        &self,
        h: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        t: Template,
    ) -> Result<CK_OBJECT_HANDLE> {
        match self {
            Service::Local(l) => l.generate_key(h, &m.parse()?, t),
            Service::Remote(r) => r.generate_key(h, m, t),
        }
    }

    pub fn generate_key_pair(
        &self,
        h: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        public: Template,
        private: Template,
    ) -> Result<(CK_OBJECT_HANDLE, CK_OBJECT_HANDLE)> {
        match self {
            Service::Local(l) => l.generate_key_pair(h, &m.parse()?, public, private),
            Service::Remote(r) => r.generate_key_pair(h, m, public, private),
        }
    }

    pub fn wrap_key(
        &self,
        h: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        wrapping: CK_OBJECT_HANDLE,
        key: CK_OBJECT_HANDLE,
        capacity: Option<usize>,
    ) -> Result<Output> {
        match self {
            Service::Local(l) => l.wrap_key(h, m.parse()?, wrapping, key, capacity),
            Service::Remote(r) => r.wrap_key(h, m, wrapping, key, capacity),
        }
    }

    pub fn unwrap_key(
        &self,
        h: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        unwrapping: CK_OBJECT_HANDLE,
        wrapped: &[u8],
        t: Template,
    ) -> Result<CK_OBJECT_HANDLE> {
        match self {
            Service::Local(l) => l.unwrap_key(h, m.parse()?, unwrapping, wrapped, t),
            Service::Remote(r) => r.unwrap_key(h, m, unwrapping, wrapped, t),
        }
    }

    pub fn derive_key(
        &self,
        h: CK_SESSION_HANDLE,
        m: RawMechanism<'_>,
        base: CK_OBJECT_HANDLE,
        t: Template,
    ) -> Result<CK_OBJECT_HANDLE> {
        match self {
            Service::Local(l) => l.derive_key(h, m.parse()?, base, t),
            Service::Remote(r) => r.derive_key(h, m, base, t),
        }
    }

    /// `C_GetAttributeValue`: `each(i, answer)` for each of `types` in order. The local arm
    /// lends the object's own bytes (no copy); the remote one lends what the server sent.
    pub fn attribute_values(
        &self,
        h: CK_SESSION_HANDLE,
        o: CK_OBJECT_HANDLE,
        types: &[CK_ATTRIBUTE_TYPE],
        each: impl FnMut(usize, AttributeValue<'_>),
    ) -> Result<()> {
        match self {
            Service::Local(l) => l.attribute_values(h, o, types, each),
            Service::Remote(r) => r.attribute_values(h, o, types, each),
        }
    }
}
