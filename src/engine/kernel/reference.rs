//! The reference family: the constant-time `rsa`-crate path (`engine/portable.rs`), one
//! request per call on the caller's thread. It runs on every CPU, serves every key (also those
//! no other family takes: unequal primes, public exponents over 64 bits), and recomputes
//! whatever failed its check in another family. Last in the registry.

use super::{Checked, Family, KeyForm, KeySource};
use crate::engine::portable::PortableKey;
use crate::engine::EngineError;
use std::sync::Arc;
use zeroize::Zeroizing;

/// The family object in `REGISTRY`.
pub struct Reference;

impl Family for Reference {
    fn name(&self) -> &'static str {
        "reference"
    }

    fn description(&self) -> &'static str {
        "reference: the rsa crate (any key, one request per call)"
    }

    fn vendor_id(&self) -> u64 {
        0
    }

    fn available(&self) -> bool {
        true
    }

    fn serves_bits(&self, _modulus_bits: usize) -> bool {
        true
    }

    fn max_batch(&self) -> usize {
        1
    }

    fn classes(&self) -> usize {
        1
    }

    fn prepare(&self, key: &KeySource) -> Option<(usize, Arc<KeyForm>)> {
        // The engine's validated reference key is this family's form: shared, not rebuilt.
        Some((0, key.reference.clone()))
    }

    fn private_op_batch(&self, jobs: &[(&KeyForm, &[u8])]) -> Vec<Checked> {
        jobs.iter()
            .map(|(form, input)| {
                let key = form
                    .downcast_ref::<PortableKey>()
                    .expect("a form the reference family prepared");
                // The input is k bytes (checked by the engine); the check is inside.
                match key.private_op_checked(input, input.len()) {
                    Ok(out) => (out, true),
                    Err(_) => (Zeroizing::new(Vec::new()), false),
                }
            })
            .collect()
    }

    fn known_answer_test(&self) -> bool {
        known_answer().is_ok_and(|ok| ok)
    }

    fn private_op_for_ct(&self, _jobs: &[(&KeyForm, &[u8])]) -> Option<Vec<Zeroizing<Vec<u8>>>> {
        None
    }
}

/// An RSA-1024 key (n, d, p, q; e = 65537), an input, and the SHA-256 of input^d mod n, all
/// computed independently (OpenSSL and Python's `pow`) when the test was written.
const KAT_N: &str = "becdb04d1159b6352e19b54bd7ce4bdce4557f0e6aa02643abf79f548647dd681311284dfa2c88e9ff524d0188560b2c1ff7b334d755be2eb19116c9df16961e33b397a860804fdcb3033e3e110dcfe8b234cac20111192e6a7489a3474cc69b2ca8b3b346dc69da705314db35b7d06ba9623dafae440887aa2300b480cde5ff";
const KAT_D: &str = "7b8e68f74f20000cea007dd55237660af1d5a7846769b3bda8b39e7ab6c5fccb3365adeae8f143ebfb8989124ffe2017ffcf803ddc9fca9b242367556c608cee7cdaa79a6adfef9b1c9591496a0b2244a17918a3320b952d2178c23c49db4834f0e377ad02a238ac36999fbf0c72d6ef53e70f9810a13e37f45561b8d587ae59";
const KAT_P: &str = "ede58a6750ab351690de5b86fac2fec67b3854e3dabadeef59e249192b4651a7ca03b56fcbc5e76218878784badaabb1098296ffe33a98a3858a2b089e6e67b5";
const KAT_Q: &str = "cd52ba1b258bd29ac5da826f80495af248daebb90f4b92c6c5e1a4bbdcc6383dcf547a6bd5934bb06db79247b7cec5c1da1fc6bc254b6c90f63832dc83a57f63";
const KAT_INPUT: &str = "12a101042793384870468f5f63bc9cddd67b75430735af650ca62e052619490cbe5d89033ec065939f0df7a9b334dd8e9ad9411c9a80177a070cb68fcd4a90569dbb19a8d86c9ea0eb5d066d2a7d18d2089c298f70c4bc7a4e2943b665145fd9a4c5fd9df21084a32e0d2fd005d3184f116eb6a1c391cd210e7acca52b934075";
const KAT_DIGEST: &str = "f46bc57f0adf57990bbf592ab9c1112c7ad4d6316faadc0ef331cb96c79ba6f7";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex constant"))
        .collect()
}

/// The known-answer key with its CRT parts (computed by the rsa crate), the input, and the
/// digest of the answer (shared with the other families' known-answer tests).
pub fn kat_components() -> Option<(crate::engine::KeyComponents, Vec<u8>, &'static str)> {
    let c = crate::engine::KeyComponents {
        modulus: unhex(KAT_N),
        public_exponent: vec![1, 0, 1],
        private_exponent: Zeroizing::new(unhex(KAT_D)),
        prime_1: Zeroizing::new(unhex(KAT_P)),
        prime_2: Zeroizing::new(unhex(KAT_Q)),
        ..Default::default()
    };
    let full = PortableKey::new(&c).ok()?.components();
    Some((full, unhex(KAT_INPUT), KAT_DIGEST))
}

/// The known-answer test through this family's own entry points (prepare, batch).
fn known_answer() -> Result<bool, EngineError> {
    use sha2::{Digest, Sha256};
    let c = crate::engine::KeyComponents {
        modulus: unhex(KAT_N),
        public_exponent: vec![1, 0, 1],
        private_exponent: Zeroizing::new(unhex(KAT_D)),
        prime_1: Zeroizing::new(unhex(KAT_P)),
        prime_2: Zeroizing::new(unhex(KAT_Q)),
        ..Default::default()
    };
    let reference = Arc::new(PortableKey::new(&c)?);
    let source = KeySource {
        components: &c,
        reference: &reference,
        modulus_bits: 1024,
    };
    let (_, form) = Reference.prepare(&source).ok_or(EngineError::InvalidKey)?;
    let input = unhex(KAT_INPUT);
    let (out, verified) = Reference.private_op_batch(&[(&*form, &input)]).remove(0);
    let digest: String = Sha256::digest(&out[..])
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(verified && digest == KAT_DIGEST)
}
