//! Both engine paths through the module: the default (IFMA where the CPU has it) and the
//! portable path forced by FERROHSM_FORCE_PORTABLE; every signature verified by the rsa crate,
//! at every size and with concurrent signers so batches of every width run.

mod common;

use common::*;
use cryptoki::mechanism::Mechanism;
use rsa::pkcs1v15::Pkcs1v15Sign;
use rsa::sha2::{Digest, Sha256};

fn sign_everywhere() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "paths");
    let s = user_session(&p, slot);
    for bits in [1024u64, 2048, 3072, 4096] {
        let (public, private) = rsa_keypair(&s, bits, &bits.to_be_bytes(), false);
        let pk = rsa_public(&s, public);
        std::thread::scope(|sc| {
            for t in 0..6 {
                let (p, pk) = (&p, &pk);
                sc.spawn(move || {
                    let s = p.open_ro_session(slot).unwrap();
                    for i in 0..4 {
                        let msg = format!("{bits} {t} {i}");
                        let sig = s
                            .sign(&Mechanism::Sha256RsaPkcs, private, msg.as_bytes())
                            .unwrap();
                        pk.verify(
                            Pkcs1v15Sign::new::<Sha256>(),
                            &Sha256::digest(msg.as_bytes()),
                            &sig,
                        )
                        .unwrap();
                    }
                });
            }
        });
    }
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
