//! What the two programs (`ferrohsm-util`, `ferrohsm-softhsm2-util`) share: loading the module
//! through PKCS#11 as any application does, finding tokens, reading PINs, importing keys,
//! deleting tokens, writing their man pages and completions, and the small CA of
//! `ferrohsm-util pki`. Built only with the `cli`
//! feature (on by default), so the module itself depends on none of the command-line crates:
//! `cargo tree -e normal --no-default-features` shows the module's own dependencies.

pub mod audit;
pub mod docs;
pub mod ec_import;
pub mod module;
pub mod pin;
pub mod pki;
pub mod tokens;
pub mod usage;
