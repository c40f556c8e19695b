//! Every kernel family against the reference: a batch of one to four private-key operations
//! with keys of every size (mixed within a batch when the family puts them in one class) must
//! equal the reference path (the rsa crate) on each family's real build where this CPU runs it,
//! and pass the family's own public-key check; and on its constant-time build
//! (`Family::private_op_for_ct`, the emulated one for IFMA), which runs on every x86-64 CPU.
#![no_main]

use ferrohsm::engine::kernel::{self, KeyForm, KeySource};
use ferrohsm::engine::portable::PortableKey;
use ferrohsm::engine::{generate, KeyComponents, PreparedKey};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};

struct TestKey {
    components: KeyComponents,
    prepared: PreparedKey,
    /// Per family in `kernel::REGISTRY`: its batch class and form, None when it does not take
    /// the key.
    forms: Vec<Option<(usize, Arc<KeyForm>)>>,
}

/// Two keys per size, made once per process.
fn keys() -> &'static [TestKey] {
    static KEYS: OnceLock<Vec<TestKey>> = OnceLock::new();
    KEYS.get_or_init(|| {
        [1024, 1024, 2048, 2048, 3072, 3072, 4096, 4096]
            .iter()
            .map(|&bits| {
                let c = generate(bits, &[1, 0, 1]).unwrap();
                let prepared = PreparedKey::new(&c).unwrap();
                let reference = Arc::new(PortableKey::new(&c).unwrap());
                let source = KeySource {
                    components: &c,
                    reference: &reference,
                    modulus_bits: bits,
                };
                let forms = kernel::REGISTRY
                    .iter()
                    .map(|f| f.serves_bits(bits).then(|| f.prepare(&source)).flatten())
                    .collect();
                TestKey {
                    components: c,
                    prepared,
                    forms,
                }
            })
            .collect()
    })
}

/// One job from a chunk of fuzz input: byte 0 picks the key (low bits) and whether the
/// message counts down from n − 1 (top bit); the rest is the message, left-padded.
fn job(chunk: &[u8], size: usize) -> Option<(usize, Vec<u8>)> {
    let (&sel, rest) = chunk.split_first()?;
    let index = 2 * size + (sel as usize & 1);
    let n = &keys()[index].components.modulus;
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
    for (f, family) in kernel::REGISTRY.iter().enumerate() {
        if f == kernel::REFERENCE {
            continue; // the comparator itself
        }
        // The jobs this family takes, in batches of one class and at most its batch size.
        let mut mine: Vec<(usize, &[u8], usize, &KeyForm)> = Vec::new();
        for (i, m) in &jobs {
            if let Some((class, form)) = &keys[*i].forms[f] {
                mine.push((*i, m.as_slice(), *class, &**form));
            }
        }
        let mut batches: Vec<Vec<(usize, &[u8], usize, &KeyForm)>> = Vec::new();
        for job in mine {
            match batches.last_mut() {
                Some(b) if b.len() < family.max_batch() && b[0].2 == job.2 => b.push(job),
                _ => batches.push(vec![job]),
            }
        }
        for batch in batches {
            let input: Vec<(&KeyForm, &[u8])> = batch.iter().map(|j| (j.3, j.1)).collect();
            let want: Vec<_> = batch
                .iter()
                .map(|j| keys[j.0].prepared.private_op_portable(j.1).unwrap())
                .collect();
            if family.available() {
                for (j, ((sig, ok), want)) in batch.iter().zip(family.private_op_batch(&input).iter().zip(&want)) {
                    assert_eq!(&sig[..], &want[..], "{}: key {}, message {:02x?}", family.name(), j.0, j.1);
                    assert!(ok, "{}: a correct result failed the family's check", family.name());
                }
            }
            if let Some(sigs) = family.private_op_for_ct(&input) {
                for (j, (sig, want)) in batch.iter().zip(sigs.iter().zip(&want)) {
                    assert_eq!(&sig[..], &want[..], "{} (constant-time build): key {}, message {:02x?}", family.name(), j.0, j.1);
                }
            }
        }
    }
});
