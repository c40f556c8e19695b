//! Durable state of tokens: token records, PINs and their failure counters, and objects.
//! The token layer talks to a `Store`; backends differ in where bytes live, not in behaviour.

pub mod crypt;
pub mod memory;
pub mod sqlite;

use crate::error::Result;
use crate::token::attributes::Attributes;
use cryptoki_sys::*;

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
}

/// A store of tokens and their objects. Object ids are unique across the store, never
/// reused, and below `MAX_OBJECT_ID` so that session-object handles cannot alias them.
pub trait Store: Send + Sync {
    /// Every initialised token, in slot order. The free slot is the one after the last.
    fn tokens(&self) -> Result<Vec<TokenRecord>>;
    /// Initialises a token: a new one in the free slot, or, when `slot_id` holds a token whose
    /// SO PIN is `so_pin`, re-initialises it (objects and user PIN dropped, serial kept).
    fn init_token(&self, slot_id: CK_SLOT_ID, so_pin: &[u8], label: &[u8; 32]) -> Result<TokenRecord>;
    /// Checks a PIN, counting failures and locking at the limit; on success the token's
    /// private objects become readable in this process until `logout`.
    fn login(&self, slot_id: CK_SLOT_ID, who: PinOwner, pin: &[u8]) -> Result<()>;
    fn logout(&self, slot_id: CK_SLOT_ID);
    /// Sets the user PIN (by the SO) and unlocks it.
    fn init_pin(&self, slot_id: CK_SLOT_ID, pin: &[u8]) -> Result<()>;
    /// Changes a PIN after checking the old one.
    fn set_pin(&self, slot_id: CK_SLOT_ID, who: PinOwner, old: &[u8], new: &[u8]) -> Result<()>;
    /// Ids of the objects of a token whose attributes match every pair of `template`.
    fn find(
        &self,
        slot_id: CK_SLOT_ID,
        template: &[(CK_ATTRIBUTE_TYPE, Vec<u8>)],
        with_private: bool,
    ) -> Result<Vec<u64>>;
    fn load(&self, slot_id: CK_SLOT_ID, id: u64) -> Result<Option<Attributes>>;
    /// Stores new objects in one transaction (a key pair is both keys or neither).
    fn create(&self, slot_id: CK_SLOT_ID, objects: &[&Attributes]) -> Result<Vec<u64>>;
    fn update(&self, slot_id: CK_SLOT_ID, id: u64, attrs: &Attributes) -> Result<()>;
    fn destroy(&self, slot_id: CK_SLOT_ID, id: u64) -> Result<()>;
    /// A number that changes whenever any object of the token changes, in any process.
    fn generation(&self, slot_id: CK_SLOT_ID) -> Result<u64>;
}

pub const MAX_OBJECT_ID: u64 = 1 << 31;
pub const MIN_PIN_LEN: usize = 4;
pub const MAX_PIN_LEN: usize = 255;
pub const DEFAULT_MAX_FAILURES: u32 = 10;

/// Opens the store the configuration names; the error is worded for the operator.
pub fn open(config: &crate::config::Config) -> std::result::Result<std::sync::Arc<dyn Store>, String> {
    if config.store.backend == "memory" {
        return Ok(std::sync::Arc::new(memory::MemoryStore::new()));
    }
    Ok(std::sync::Arc::new(sqlite::SqliteStore::from_config(config)?))
}
