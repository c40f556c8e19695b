//! Differential tests of both scalar families against the reference (the rsa crate) at every
//! size they serve, odd sizes for the portable one, edge inputs (0, 1, n − 1, p), keys
//! stored without CRT parts, and the check's verdicts on the table of right and wrong results
//! (`kernel::check_cases`).

use super::{exp, key::ScalarKey, Arith, Scalar};
use crate::engine::kernel::{check_cases, Family, KeySource};
use crate::engine::{generate, KeyComponents, PreparedKey};
use std::marker::PhantomData;
use std::sync::Arc;

fn inputs(c: &KeyComponents) -> Vec<Vec<u8>> {
    let k = c.modulus.len();
    let mut n_minus_1 = c.modulus.clone();
    *n_minus_1.last_mut().unwrap() -= 1;
    let mut one = vec![0u8; k];
    one[k - 1] = 1;
    let mut p = vec![0u8; k - c.prime_1.len()];
    p.extend_from_slice(&c.prime_1);
    let mut v = vec![vec![0u8; k], one, n_minus_1, p];
    for _ in 0..3 {
        let mut r = vec![0u8; k];
        getrandom::fill(&mut r).unwrap();
        r[0] &= 0x7f;
        v.push(r);
    }
    v
}

fn compare<A: Arith>(bits: usize, keys: &[(KeyComponents, PreparedKey)]) {
    let family = Scalar::<A>(PhantomData);
    for (c, prepared) in keys {
        let reference = Arc::new(crate::engine::portable::PortableKey::new(c).unwrap());
        let source = KeySource {
            components: c,
            reference: &reference,
            modulus_bits: bits,
        };
        let (_, form) = family.prepare(&source).expect("the family takes the key");
        for input in inputs(c) {
            let want = prepared.private_op_portable(&input).unwrap();
            let (got, ok) = family.private_op_batch(&[(&*form, &input)]).remove(0);
            assert_eq!(&got[..], &want[..], "{} RSA-{bits}", A::NAME);
            assert!(ok, "{} RSA-{bits}: a correct result failed the check", A::NAME);
            let ct = family.private_op_for_ct(&[(&*form, &input)]);
            if let Some(ct) = ct {
                assert_eq!(
                    &ct[0][..],
                    &want[..],
                    "{} RSA-{bits} (constant-time entry)",
                    A::NAME
                );
            }
        }
        // The check's verdicts on the table of right and wrong results, each the rsa crate's.
        let key = form.downcast_ref::<ScalarKey>().unwrap();
        let input = inputs(c).pop().unwrap();
        let sig = exp::private_op_unchecked::<A>(key, &input);
        for case in check_cases::cases(c, prepared, &sig, &input) {
            assert_eq!(
                exp::check::<A>(key, &case.input, &case.sig),
                case.valid,
                "{} RSA-{bits}: {}",
                A::NAME,
                case.name
            );
        }
    }
}

fn keys(bits: usize) -> Vec<(KeyComponents, PreparedKey)> {
    (0..2)
        .map(|i| {
            let mut c = generate(bits, &[1, 0, 1]).unwrap();
            if i == 1 {
                // Stored without CRT parts: the family takes them from the reference form.
                c.exponent_1 = Default::default();
                c.exponent_2 = Default::default();
                c.coefficient = Default::default();
            }
            let k = PreparedKey::new(&c).unwrap();
            (c, k)
        })
        .collect()
}

#[test]
fn portable_matches_the_reference_at_every_size_and_odd_sizes() {
    for bits in [1024usize, 1032, 1544, 2048, 2056, 3072, 4096] {
        compare::<super::portable::Portable>(bits, &keys(bits));
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn mulx_matches_the_reference_at_every_size() {
    use super::mulx::Mulx;
    if !Mulx::available() {
        eprintln!("no BMI2+ADX on this CPU");
        return;
    }
    for bits in [1024usize, 2048, 3072, 4096] {
        compare::<Mulx>(bits, &keys(bits));
    }
    let family = Scalar::<Mulx>(PhantomData);
    assert!(!family.serves_bits(1032) && family.serves_bits(4096));
}
