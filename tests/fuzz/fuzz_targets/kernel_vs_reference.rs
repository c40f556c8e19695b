//! The RSA kernel against the reference: a batch of one to four private-key operations with
//! keys of every kernel size (mixed within the batch when sizes agree) on the IFMA kernel (the
//! emulated build where the CPU lacks IFMA) must equal the portable path (the rsa crate), and
//! pass the kernel's own public-key check.
#![no_main]

use ferrohsm::engine::kernel::ifma::crt::{private_op_batch, CrtKey, Kernel};
use ferrohsm::engine::kernel::ifma;
use ferrohsm::engine::{generate, KeyComponents, PreparedKey};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

/// Two keys per size, made once per process.
fn keys() -> &'static [(KeyComponents, PreparedKey, CrtKey)] {
    static KEYS: OnceLock<Vec<(KeyComponents, PreparedKey, CrtKey)>> = OnceLock::new();
    KEYS.get_or_init(|| {
        [1024, 1024, 2048, 2048, 3072, 3072, 4096, 4096]
            .iter()
            .map(|&bits| {
                let c = generate(bits, &[1, 0, 1]).unwrap();
                let p = PreparedKey::new(&c).unwrap();
                let k = CrtKey::new(&c).unwrap();
                (c, p, k)
            })
            .collect()
    })
}

/// One job from a chunk of fuzz input: byte 0 picks the key (low bits) and whether the
/// message counts down from n − 1 (top bit); the rest is the message, left-padded.
fn job(chunk: &[u8], size: usize) -> Option<(usize, Vec<u8>)> {
    let (&sel, rest) = chunk.split_first()?;
    let index = 2 * size + (sel as usize & 1);
    let n = &keys()[index].0.modulus;
    let k = n.len();
    let mut m = vec![0u8; k];
    let take = rest.len().min(k);
    m[k - take..].copy_from_slice(&rest[rest.len() - take..]);
    if sel & 0x80 != 0 {
        // m := n − 1 − m (values near n), when m < n.
        if m.as_slice() >= n.as_slice() {
            return None;
        }
        let mut borrow = 1i16; // the "− 1"
        for i in (0..k).rev() {
            let d = n[i] as i16 - m[i] as i16 - borrow;
            m[i] = d.rem_euclid(256) as u8;
            borrow = (d < 0) as i16;
        }
    }
    (m.as_slice() < n.as_slice()).then_some((index, m))
}

fuzz_target!(|data: &[u8]| {
    let Some((&head, body)) = data.split_first() else {
        return;
    };
    let size = (head & 3) as usize;
    let width = 1 + (head >> 2 & 3) as usize;
    let chunk_len = body.len().div_ceil(width).max(1);
    let jobs: Vec<(usize, Vec<u8>)> = body
        .chunks(chunk_len)
        .filter_map(|c| job(c, size))
        .take(4)
        .collect();
    if jobs.is_empty() {
        return;
    }
    let keys = keys();
    let kernel = if ifma::available() {
        Kernel::Avx512
    } else {
        Kernel::Emulated
    };
    let batch: Vec<(&CrtKey, &[u8])> = jobs.iter().map(|(i, m)| (&keys[*i].2, m.as_slice())).collect();
    let results = private_op_batch(kernel, &batch);
    for ((i, m), (sig, ok)) in jobs.iter().zip(results) {
        let reference = keys[*i].1.private_op_portable(m).unwrap();
        assert_eq!(&sig[..], &reference[..], "key {i}, message {m:02x?}");
        assert!(ok, "a correct result failed the kernel's check");
    }
});
