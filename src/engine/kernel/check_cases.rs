//! The check's table of right and wrong results (tests only), one table for every family
//! whose check reads the primes: each case a signature, its input, and the verdict of an
//! independent implementation (the rsa crate: s of the modulus length, below n, and s^e mod n
//! equal to the input).

use crate::engine::{strip_zeros, KeyComponents, PreparedKey};

pub struct Case {
    pub name: &'static str,
    pub sig: Vec<u8>,
    pub input: Vec<u8>,
    /// The rsa crate's verdict.
    pub valid: bool,
}

/// Right and wrong results around `sig`, the right signature of `input` under the key `c`
/// (`key`, its reference form): wrong in a low bit or a high one, right modulo one prime only
/// (a fault in one CRT half), right modulo both but not below n, an input not below n, a
/// length off by one. Asserts that all but the two right ones are wrong.
pub fn cases(c: &KeyComponents, key: &PreparedKey, sig: &[u8], input: &[u8]) -> Vec<Case> {
    let n = strip_zeros(&c.modulus).to_vec();
    let k = n.len();
    let below_n = |x: Vec<u8>| {
        if x.as_slice() >= n.as_slice() {
            sub_be(&x, &n)
        } else {
            x
        }
    };
    let one = add_be(&[1], &[], k);
    let flip = |at: usize| {
        let mut s = sig.to_vec();
        s[at] ^= 0x10;
        s
    };
    let mut padded_sig = vec![0u8];
    padded_sig.extend_from_slice(sig);
    let table: Vec<(&'static str, Vec<u8>, Vec<u8>)> = vec![
        ("right", sig.to_vec(), input.to_vec()),
        ("one, whose e-th power is one", one.clone(), one.clone()),
        ("a low bit flipped", flip(k - 3), input.to_vec()),
        ("a high bit flipped", flip(1), input.to_vec()),
        (
            "right modulo q only",
            below_n(add_be(sig, &c.prime_2, k)),
            input.to_vec(),
        ),
        (
            "right modulo p only",
            below_n(add_be(sig, &c.prime_1, k)),
            input.to_vec(),
        ),
        (
            "one plus n: right modulo both primes, not below n",
            add_be(&one, &n, k),
            one.clone(),
        ),
        ("an input of one plus n", one.clone(), add_be(&one, &n, k)),
        ("a byte too short", sig[1..].to_vec(), input.to_vec()),
        ("a leading zero byte too long", padded_sig, input.to_vec()),
    ];
    let cases: Vec<Case> = table
        .into_iter()
        .map(|(name, sig, input)| {
            let valid = sig.len() == k && key.public_op(&sig).map(|r| r == input).unwrap_or(false);
            Case {
                name,
                sig,
                input,
                valid,
            }
        })
        .collect();
    let wrong = cases.iter().filter(|c| !c.valid).count();
    assert_eq!(wrong, cases.len() - 2, "every case but the right ones is wrong");
    cases
}

/// Big-endian a + b at `len` bytes (the sum must fit).
pub fn add_be(a: &[u8], b: &[u8], len: usize) -> Vec<u8> {
    let (mut out, mut carry) = (vec![0u8; len], 0u16);
    for i in 0..len {
        let at = |x: &[u8]| if i < x.len() { x[x.len() - 1 - i] as u16 } else { 0 };
        let t = at(a) + at(b) + carry;
        out[len - 1 - i] = t as u8;
        carry = t >> 8;
    }
    assert_eq!(carry, 0, "the sum does not fit");
    out
}

/// Big-endian a − b at a's length (a ≥ b).
pub fn sub_be(a: &[u8], b: &[u8]) -> Vec<u8> {
    let (mut out, mut borrow) = (a.to_vec(), 0i16);
    for i in 0..a.len() {
        let bi = if i < b.len() { b[b.len() - 1 - i] as i16 } else { 0 };
        let t = a[a.len() - 1 - i] as i16 - bi - borrow;
        out[a.len() - 1 - i] = t.rem_euclid(256) as u8;
        borrow = (t < 0) as i16;
    }
    assert_eq!(borrow, 0);
    out
}
