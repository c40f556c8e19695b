//! ferrohsm: a PKCS#11 software token with a fast RSA engine. Module map only.

// Rooms without unsafe code say so, so that none creeps in: unsafe belongs to `ffi` (C
// pointers), `engine` (SIMD intrinsics), `fork` (pthread_atfork), `logging` (syslog) and `cli`
// (the vendor function that initialises a token with its user PIN, called through its pointer).
#[forbid(unsafe_code)]
pub mod attributes;
#[cfg(feature = "cli")]
pub mod cli;
#[forbid(unsafe_code)]
pub mod config;
pub mod engine;
#[forbid(unsafe_code)]
pub mod error;
pub mod ffi;
pub mod fork;
pub mod logging;
#[forbid(unsafe_code)]
pub mod mechanism;
#[forbid(unsafe_code)]
pub mod remote;
#[forbid(unsafe_code)]
pub mod service;
#[forbid(unsafe_code)]
pub mod store;
#[forbid(unsafe_code)]
pub mod token;
