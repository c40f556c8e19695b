//! PKCS#11 semantics without C pointers: slots and tokens, sessions and login state, the
//! object model and its attribute policy, and the operations sessions run.

pub use crate::attributes;
mod crypto;
pub mod handles;
mod info;
mod init;
mod library;
pub mod object;
pub mod objects;
mod operation;
mod pkcs8;
pub mod policy;
pub mod records;
mod session;
mod slot;
pub mod usage;

pub use crypto::Arg;
pub use library::{Library, Output, TokenInfo};
pub use operation::Operation;
pub use session::{Session, SessionRef};
pub use slot::{LoginState, Token};

/// Identity the token reports in `C_GetInfo` and `C_GetTokenInfo`.
pub const MANUFACTURER: &str = "ferrohsm project";
pub const MODEL: &str = "ferrohsm";
pub const LIBRARY_DESCRIPTION: &str = "ferrohsm PKCS#11 software token";
pub const VERSION_MAJOR: u8 = 1;
pub const VERSION_MINOR: u8 = 0;
