//! The remote token: the client of `ferrohsm-server` that lives inside the module
//! (`client`: connection, TLS, runtime, handles; `ops`: each PKCS#11 call as a request), and
//! the protocol both sides import (`proto`).

mod client;
mod ops;
pub mod proto;
pub mod tls;

pub use client::Client;
