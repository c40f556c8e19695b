//! ferrohsm: a PKCS#11 software token with a fast RSA engine. Module map only.

pub mod config;
pub mod engine;
pub mod error;
pub mod ffi;
pub mod fork;
pub mod logging;
pub mod mechanism;
pub mod store;
pub mod token;
