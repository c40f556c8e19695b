//! Durable state of tokens: token records, PINs and their failure counters, and objects.
//!
//! Two levels, like Kryoptic's storage. `sealed` implements the security once (PIN wrap with
//! Argon2id, the token-key cache, lockout counters, AES-256-GCM sealing with AAD, lookup HMACs)
//! over `backend::Backend`, a row-level trait that SQLite and memory (and any later backend,
//! one folder each) implement without knowing any of it.
//!
//! The token layer talks to a `Store` and hands it records already split into clear and secret
//! parts (`ObjectRecord`): which attributes are secret is PKCS#11 policy, decided in `token/`.
//! The store knows bytes, rows and transactions, and never imports `token/`.

pub mod audit;
pub mod backend;
pub mod sealed;

pub use sealed::lockout::PinCounter;
pub use sealed::Sealed;

use crate::error::Result;
use cryptoki_sys::*;
use zeroize::Zeroizing;

/// The two PIN owners of a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinOwner {
    So,
    User,
}

/// The state of one PIN as token flags need it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PinState {
    /// Consecutive wrong attempts since the last success.
    pub failures: u32,
    pub locked: bool,
}

/// One initialised token as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    pub slot_id: CK_SLOT_ID,
    pub label: [u8; 32],
    pub serial: [u8; 16],
    pub user_pin_initialized: bool,
    pub so_pin: PinState,
    pub user_pin: PinState,
    /// Wrong attempts allowed before a PIN locks.
    pub max_failures: u32,
    /// Changes at every re-initialisation (`TokenRow::epoch`).
    pub epoch: u64,
    /// Changes whenever the token key is replaced (a PIN change, `ferrohsm-util rotate-key`).
    pub key_generation: u64,
}

/// Values by numeric type, as the store keeps them: bytes without meaning to it. Values are
/// zeroized when dropped (secret parts pass through here in clear before sealing).
pub type Fields = Vec<(u64, Zeroizing<Vec<u8>>)>;

/// The values an object is found by. `id` and `label` of a private record are stored as keyed
/// hashes, so they can be indexed without clear text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Index {
    pub class: Option<u64>,
    pub id: Option<Vec<u8>>,
    pub label: Option<Vec<u8>>,
}

/// One object as the token layer hands it to the store, already split.
#[derive(Clone, Default)]
pub struct ObjectRecord {
    /// The whole record is readable only with the token key (after a login), and its index
    /// values are stored as keyed hashes.
    pub private: bool,
    /// Stored as they are.
    pub clear: Fields,
    /// Each value sealed with the token key, bound to token, object and type.
    pub secret: Fields,
    pub index: Index,
}

/// One object as the store gives it back: clear and opened secret values together. Secret
/// values of a public record stay out until a login makes the token key available.
pub struct StoredObject {
    pub id: u64,
    pub private: bool,
    pub fields: Fields,
    /// The version a change of this object must name (`Store::update`, `destroy`).
    pub version: u64,
    /// Its record's tag was checked under the token key and it is the token's current copy.
    /// False for public objects read without a login and for public objects written without
    /// one: their attributes grant no right (`token::records::attributes`).
    pub authenticated: bool,
}

/// The attributes a private record keeps in clear: what a search without a login must see to
/// leave the object out. The token layer splits records by it; the store refuses a private
/// record holding any other attribute in clear (a value added to the clear part is never
/// taken for a sealed one).
pub const PRIVATE_CLEAR: &[u64] = &[CKA_CLASS, CKA_TOKEN, CKA_PRIVATE];

/// The return value of a change whose object changed (in any process or host) since the
/// caller read it: the caller reads it again, checks the change again, and retries. Never
/// returned to an application (`token::slot`).
pub const CKR_CHANGED_MEANWHILE: CK_RV = CKR_VENDOR_DEFINED | 0x6368_6764;

/// A search result: an object read and opened, or only the id of one the caller holds
/// unchanged already (`Store::search`'s `known`), which is not opened again.
pub enum Found {
    Known(u64),
    Read(StoredObject),
}

/// A store of tokens and their objects. Object ids are unique across the store, never
/// reused, and below `MAX_OBJECT_ID` so that session-object handles cannot alias them.
pub trait Store: Send + Sync {
    /// Every initialised token, in slot order. The free slot is the one after the last.
    fn tokens(&self) -> Result<Vec<TokenRecord>>;
    /// How many tokens the store holds, read from where it lives, past any cache: what a
    /// health check asks (`ferrohsm-server`'s `/health`).
    fn probe(&self) -> Result<usize> {
        self.tokens().map(|t| t.len())
    }
    /// Initialises a token: a new one in the free slot, or, when `slot_id` holds a token whose
    /// SO PIN is `so_pin`, re-initialises it (objects and user PIN dropped, serial kept).
    /// With `user_pin`, the user PIN is set in the same transaction: no process that dies
    /// half-way can leave a token without one.
    fn init_token(
        &self,
        slot_id: CK_SLOT_ID,
        so_pin: &[u8],
        label: &[u8; 32],
        user_pin: Option<&[u8]>,
    ) -> Result<TokenRecord>;
    /// Checks a PIN, counting failures and locking at the limit; on success the token's
    /// private objects become readable in this process until `logout`. The attempt is
    /// recorded (see `PinCounter`) before the PIN is evaluated; when it cannot be recorded the
    /// PIN is not evaluated at all.
    fn login(&self, slot_id: CK_SLOT_ID, who: PinOwner, pin: &[u8]) -> Result<()>;
    /// Forgets the token key: private records cannot be read or written until the next login.
    fn logout(&self, slot_id: CK_SLOT_ID);
    /// The (epoch, key generation) of the token key this process holds, if logged in: a
    /// record naming others means another process replaced the key or re-initialised the token.
    fn held_key(&self, slot_id: CK_SLOT_ID) -> Option<(u64, u64)>;
    /// Sets the user PIN (by the SO, who is logged in) and unlocks it.
    fn init_pin(&self, slot_id: CK_SLOT_ID, pin: &[u8]) -> Result<()>;
    /// Changes a PIN after checking the old one.
    fn set_pin(&self, slot_id: CK_SLOT_ID, who: PinOwner, old: &[u8], new: &[u8]) -> Result<()>;
    /// The objects of a token whose index values equal every value `query` names, in one
    /// backend query, each record opened once. Private records only while logged in and when
    /// `with_private`. Damaged records are logged and left out; the search goes on.
    fn find(&self, slot_id: CK_SLOT_ID, query: &Index, with_private: bool) -> Result<Vec<StoredObject>> {
        Ok(self
            .search(slot_id, query, with_private, &|_| None)?
            .into_iter()
            .filter_map(|f| match f {
                Found::Read(o) => Some(o),
                Found::Known(_) => None,
            })
            .collect())
    }
    /// `find`, but the records for which `known` says whether they are private come back as
    /// ids, unopened: a process that holds them from the current generation needs neither
    /// their bytes nor a decryption (it matches its own authenticated copy against the
    /// search). Still one backend search.
    fn search(
        &self,
        slot_id: CK_SLOT_ID,
        query: &Index,
        with_private: bool,
        known: &dyn Fn(u64) -> Option<bool>,
    ) -> Result<Vec<Found>>;
    /// One object; `None` when it does not exist or is private and no login opened the token.
    fn load(&self, slot_id: CK_SLOT_ID, id: u64) -> Result<Option<StoredObject>>;
    /// Stores new objects in one transaction (a key pair is both keys or neither), if every
    /// object `unchanged` names (id, version) is still at that version (the source of a copy);
    /// `CKR_CHANGED_MEANWHILE` otherwise.
    fn create(
        &self,
        slot_id: CK_SLOT_ID,
        objects: &[ObjectRecord],
        unchanged: &[(u64, u64)],
    ) -> Result<Vec<u64>>;
    /// Replaces an object read at `version`; `CKR_CHANGED_MEANWHILE` when it changed since.
    fn update(&self, slot_id: CK_SLOT_ID, id: u64, version: u64, record: &ObjectRecord) -> Result<()>;
    /// Destroys an object read at `version`; `CKR_CHANGED_MEANWHILE` when it changed since.
    fn destroy(&self, slot_id: CK_SLOT_ID, id: u64, version: u64) -> Result<()>;
    /// A number that changes whenever any object of the token changes, in any process.
    fn generation(&self, slot_id: CK_SLOT_ID) -> Result<u64>;
    /// Counts one use of the limited key `id` before it is used, if fewer than `limit` are
    /// counted, for every process and host of the store (`Backend::count_use`): the count
    /// after it, or `None` when the limit is reached. The count is kept beside the records,
    /// not in them: it is not authenticated under the token key (docs/security.md).
    fn count_use(&self, slot_id: CK_SLOT_ID, id: u64, limit: u64) -> Result<Option<u64>>;
    /// The uses counted of the key `id`.
    fn use_count(&self, slot_id: CK_SLOT_ID, id: u64) -> Result<u64>;
    /// Records the event under way (`audit::intent`) that changes nothing in the store (a
    /// key leaving by `C_WrapKey`), naming the object (id, class, label); the caller refuses
    /// the operation when it cannot be recorded.
    fn audit(&self, slot_id: CK_SLOT_ID, object: Option<audit::Named>) -> Result<()> {
        let _ = (slot_id, object);
        Ok(())
    }
}

pub const MAX_OBJECT_ID: u64 = 1 << 31;
pub const MIN_PIN_LEN: usize = 4;
pub const MAX_PIN_LEN: usize = 255;
pub const DEFAULT_MAX_FAILURES: u32 = 10;

/// Opens the sealed store over the backend the configuration names; the error is worded for
/// the operator. Tools that need more than `Store` (migration, token deletion) use this.
pub fn open_sealed(config: &crate::config::Config) -> std::result::Result<Sealed, String> {
    let kdf = sealed::crypt::KdfParams {
        memory_kib: config.pin.kdf_memory_kib,
        passes: config.pin.kdf_passes,
    };
    let backend: Box<dyn backend::Backend> = match config.store.backend.as_str() {
        "memory" => Box::new(backend::memory::MemoryBackend::new()),
        "postgres" => Box::new(backend::postgres::PostgresBackend::open(config)?),
        _ => Box::new(backend::sqlite::SqliteBackend::open(&config.store_dir())?),
    };
    Ok(
        Sealed::new(backend, kdf, config.pin.max_failures).with_attempt_timeout(
            std::time::Duration::from_secs(config.pin.attempt_timeout_s.into()),
        ),
    )
}

/// Opens the store the configuration names, as the token layer uses it.
pub fn open(config: &crate::config::Config) -> std::result::Result<std::sync::Arc<dyn Store>, String> {
    Ok(std::sync::Arc::new(open_sealed(config)?))
}
