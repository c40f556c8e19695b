//! Ed25519 arithmetic of the engine's own, for the check every Ed25519 signature passes before
//! release (`check`: [s]B − [k]A over a static table of B and a per-key table of A) on a field
//! (`field`, 2^255 − 19 in 51-bit limbs) and points (`point`, extended coordinates) of its own.
//! Signing itself (r·B, constant time) stays with curve25519-dalek, as does `C_Verify`'s strict
//! verification.

mod check;
mod field;
mod point;

pub use check::{verify, KeyTable};
