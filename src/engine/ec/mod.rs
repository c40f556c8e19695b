//! Elliptic-curve arithmetic of the engine: what computes with private EC keys and what
//! checks every EC signature before release. `p256` is P-256's dedicated implementation (its
//! own field, scalar, points, signer and check); `wnaf` is the public-scalar recoding every
//! curve's check uses. P-384 and P-521 still run on the RustCrypto crates' field types
//! (`mechanism::ec_sign`, `mechanism::ec_check`), which `mechanism::ec` drives.

pub mod p256;
pub mod safegcd;
pub mod wnaf;
