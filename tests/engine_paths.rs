//! Engine paths through the module: the default (IFMA where the CPU has it), the portable
//! family forced by FERROHSM_FORCE_PORTABLE, and the mulx family forced by FERROHSM_KERNEL;
//! every signature verified by the rsa crate, at every size and with concurrent signers so
//! batches of every width run.

mod common;

use common::*;

fn sign_everywhere() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "paths");
    sign_concurrently_verified(&p, slot, &[1024, 2048, 3072, 4096], 6, 4);
}

#[test]
fn default_engine_signs_correctly_at_every_size() {
    std::env::remove_var("FERROHSM_FORCE_PORTABLE");
    sign_everywhere();
}

#[test]
fn forced_portable_engine_signs_correctly_at_every_size() {
    std::env::set_var("FERROHSM_FORCE_PORTABLE", "1");
    sign_everywhere();
}

#[test]
fn forced_mulx_engine_signs_correctly_at_every_size() {
    if !(std::is_x86_feature_detected!("bmi2") && std::is_x86_feature_detected!("adx")) {
        eprintln!("no BMI2+ADX on this CPU");
        return;
    }
    std::env::set_var("FERROHSM_KERNEL", "mulx");
    sign_everywhere();
}
