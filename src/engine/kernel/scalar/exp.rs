//! The scalar driver, generic over the arithmetic (`Arith`): input reduction, constant-time
//! fixed-window exponentiation with a masked scan of the whole table, Garner recombination,
//! serialisation, and the public-key check of every result. Nothing here branches on or
//! indexes memory by a secret: loop counts and window positions follow from the (public)
//! prime length only.

use super::key::{Half, Modulus, ScalarKey};
use super::limbs::{
    add, from_be_bytes, mask, mask_eq, mul_wide, redc, reduce_once, select, sub, to_be_bytes, MAX_LIMBS,
};
use super::{pair, Arith};
use zeroize::Zeroizing;

/// Window width by exponent length: 2^w table entries against bits/w multiplications.
fn window(bits: usize) -> usize {
    if bits > 400 {
        5
    } else {
        4
    }
}

/// The `w` exponent bits starting at bit `pos` (positions are public; the bits are not).
fn digit(exp: &[u64], pos: usize, w: usize) -> u64 {
    let (i, off) = (pos / 64, pos % 64);
    let mut v = exp[i] >> off;
    if off + w > 64 {
        v |= exp[i + 1] << (64 - off);
    }
    v & ((1 << w) - 1)
}

/// sel = the entry `d` of `table` (entries of n limbs), by reading every entry and keeping
/// one under a mask (no branch or address depends on d). With AVX2 the entries of the
/// compiled limb counts go through ymm registers, the selection held in registers: on a
/// Zen 3 the scalar scan was 12-21% of a mulx half exponentiation (130 k of 926 k TSC cycles
/// at RSA-2048, 205 scans of 32 entries: `benches/rsa_stages.rs`).
fn select_entry(table: &[u64], n: usize, d: u64, sel: &mut [u64]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2; each variant reads whole entries of its width.
        unsafe {
            match n {
                8 => return scan_avx2::<2>(table, d, sel),
                16 => return scan_avx2::<4>(table, d, sel),
                24 => return scan_avx2::<6>(table, d, sel),
                32 => return scan_avx2::<8>(table, d, sel),
                _ => {}
            }
        }
    }
    sel.fill(0);
    for (t, entry) in table.chunks_exact(n).enumerate() {
        let keep = mask_eq(t as u64, d);
        for (s, e) in sel.iter_mut().zip(entry) {
            *s |= e & keep;
        }
    }
}

/// `select_entry` for entries of 4·Q limbs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn scan_avx2<const Q: usize>(table: &[u64], d: u64, sel: &mut [u64]) {
    use std::arch::x86_64::*;
    assert!(sel.len() == 4 * Q && table.len().is_multiple_of(4 * Q));
    let mut acc = [_mm256_setzero_si256(); Q];
    for (t, entry) in table.chunks_exact(4 * Q).enumerate() {
        let keep = _mm256_set1_epi64x(mask_eq(t as u64, d) as i64);
        for (j, a) in acc.iter_mut().enumerate() {
            // SAFETY: entry has 4·Q limbs: limbs 4j..4j+4 are in it (unaligned load).
            let e = unsafe { _mm256_loadu_si256(entry.as_ptr().add(4 * j) as *const __m256i) };
            *a = _mm256_or_si256(*a, _mm256_and_si256(e, keep));
        }
    }
    for (j, a) in acc.iter().enumerate() {
        // SAFETY: sel has 4·Q limbs (asserted).
        unsafe { _mm256_storeu_si256(sel.as_mut_ptr().add(4 * j) as *mut __m256i, *a) };
    }
}

/// c·R mod m, fully reduced, for c < m·R given as 2·L limbs: one Montgomery reduction, then
/// a multiplication by R³.
fn montgomery_form<A: Arith>(c: &[u64], h: &Half, out: &mut [u64]) {
    let m = &h.m;
    let mut wide = Zeroizing::new(c.to_vec());
    let mut x = Zeroizing::new(vec![0u64; m.m.len()]);
    redc(&mut wide, &m.m, m.k0, &mut x);
    A::mul(&x, &h.rrr, &m.m, m.k0, out);
}

/// c^exp mod m for c < m·R given as 2·L limbs (the whole input): reduced by one Montgomery
/// reduction, taken to Montgomery form with R³, raised over `bits` exponent bits, returned
/// fully reduced in normal form.
#[doc(hidden)]
pub fn modexp<A: Arith>(c: &[u64], h: &Half, bits: usize, out: &mut [u64]) {
    let m = &h.m;
    let n = m.m.len();
    let w = window(bits);
    let entries = 1 << w;
    // table[t] = c^t·R mod m, t < 2^w, one flat array.
    let mut table = Zeroizing::new(vec![0u64; entries * n]);
    table[..n].copy_from_slice(&m.r);
    montgomery_form::<A>(c, h, &mut table[n..2 * n]);
    for t in 2..entries {
        let (done, rest) = table.split_at_mut(t * n);
        let prev = &done[(t - 1) * n..];
        if t % 2 == 0 {
            A::sqr(&done[(t / 2) * n..(t / 2 + 1) * n], &m.m, m.k0, &mut rest[..n]);
        } else {
            A::mul(prev, &done[n..2 * n], &m.m, m.k0, &mut rest[..n]);
        }
    }
    let windows = bits.div_ceil(w);
    let mut acc = Zeroizing::new(vec![0u64; n]);
    let mut tmp = Zeroizing::new(vec![0u64; n]);
    let mut sel = Zeroizing::new(vec![0u64; n]);
    for k in (0..windows).rev() {
        let d = digit(&h.exp, k * w, w);
        // The entry for this digit, by reading every entry and keeping one under a mask.
        select_entry(&table, n, d, &mut sel);
        if k == windows - 1 {
            acc.copy_from_slice(&sel);
            continue;
        }
        for _ in 0..w {
            A::sqr(&acc, &m.m, m.k0, &mut tmp);
            std::mem::swap(&mut acc, &mut tmp);
        }
        A::mul(&acc, &sel, &m.m, m.k0, &mut tmp);
        std::mem::swap(&mut acc, &mut tmp);
    }
    // Out of Montgomery form: a multiplication by 1.
    let mut one = vec![0u64; n];
    one[0] = 1;
    A::mul(&acc, &one, &m.m, m.k0, out);
}

/// The private-key operation without the check: s = c^d mod n by CRT and Garner, as
/// `modulus_len` big-endian bytes. `input` is `modulus_len` bytes below n.
pub fn private_op_unchecked<A: Arith>(key: &ScalarKey, input: &[u8]) -> Zeroizing<Vec<u8>> {
    let l = key.limbs;
    let mut c = Zeroizing::new(vec![0u64; 2 * l]);
    from_be_bytes(input, &mut c);
    let mut m1 = Zeroizing::new(vec![0u64; l]);
    let mut m2 = Zeroizing::new(vec![0u64; l]);
    // The two halves side by side where a core is idle (`pair`), else one after the other.
    {
        let (c, bits) = (&*c, key.prime_bits);
        let (m1, m2) = (&mut *m1, &mut *m2);
        pair::join(&mut || modexp::<A>(c, &key.q, bits, m2), &mut || {
            modexp::<A>(c, &key.p, bits, m1)
        });
    }
    let p = &key.p.m;
    // m2 < q < 2p (equal bit lengths): one conditional subtraction gives m2 mod p.
    let mut t = Zeroizing::new(vec![0u64; 4 * l]);
    let (m2p, rest) = t.split_at_mut(l);
    let (d, rest) = rest.split_at_mut(l);
    let (diff, h) = rest.split_at_mut(l);
    reduce_once(&m2, 0, &p.m, m2p);
    // (m1 − m2) mod p: the difference, plus p where it borrowed.
    let borrow = sub(&m1, m2p, d);
    add(d, &p.m, diff);
    select(!mask(borrow), d, diff);
    // h = (m1 − m2)·qInv mod p; s = m2 + h·q < n.
    A::mul(diff, &key.qinv_r, &p.m, p.k0, &mut h[..l]);
    let mut w = Zeroizing::new(vec![0u64; 4 * l]);
    let (hq, s) = w.split_at_mut(2 * l);
    mul_wide(&h[..l], &key.q.m.m, hq);
    c.fill(0);
    c[..l].copy_from_slice(&m2);
    add(hq, &c, s);
    Zeroizing::new(to_be_bytes(s, key.modulus_len))
}

/// Whether `sig` is the signature of `input`: both `modulus_len` bytes and below n, and
/// s^e ≡ input modulo p and modulo q, which for values below n is the statement s^e mod n =
/// input (the Chinese remainder theorem) at half the size: two exponentiations by e at L
/// limbs cost about half of one at 2·L. It reads the primes, so it runs in constant time
/// like signing; only the verdict is public.
///
/// It converts the input again rather than reuse signing's Montgomery form of it: a fault in
/// that conversion would then reach both sides of the comparison and pass.
pub fn check<A: Arith>(key: &ScalarKey, input: &[u8], sig: &[u8]) -> bool {
    check_mask::<A>(key, input, sig) != 0
}

/// `check`'s verdict as a mask, all ones where it passed: the form the constant-time test
/// declassifies (an `Option<bool>` would keep the verdict in its tag, and the test's code
/// would branch on it before the verdict is made public).
pub fn check_mask<A: Arith>(key: &ScalarKey, input: &[u8], sig: &[u8]) -> u64 {
    let l = key.limbs;
    if sig.len() != key.modulus_len || input.len() != key.modulus_len {
        return 0;
    }
    let mut s = Zeroizing::new(vec![0u64; 2 * l]);
    let mut c = Zeroizing::new(vec![0u64; 2 * l]);
    from_be_bytes(sig, &mut s);
    from_be_bytes(input, &mut c);
    let mut t = Zeroizing::new(vec![0u64; 2 * l]);
    let below = mask(sub(&s, &key.n, &mut t)) & mask(sub(&c, &key.n, &mut t));
    // One prime after the other: on both cores (`pair`, as signing's halves) the check was
    // faster alone but signing slower through PKCS#11 (one client, RSA-1024: 0.94-0.96x),
    // its extra hand-offs and misses making the pairing back off for the next requests.
    let same = congruent::<A>(&s, &c, &key.p, key.e) & congruent::<A>(&s, &c, &key.q, key.e);
    below & same
}

/// All ones where s^e ≡ c modulo the half's prime, for s and c below m·R (2·L limbs): both in
/// Montgomery form, s raised by squarings from e's top bit (e is public), the two compared
/// in full (the arithmetic's results are fully reduced).
fn congruent<A: Arith>(s: &[u64], c: &[u64], h: &Half, e: u64) -> u64 {
    let (m, k0) = (&h.m.m, h.m.k0);
    let n = m.len();
    let mut base = Zeroizing::new(vec![0u64; n]);
    let mut y = Zeroizing::new(vec![0u64; n]);
    let mut t = Zeroizing::new(vec![0u64; n]);
    montgomery_form::<A>(s, h, &mut base);
    power_public::<A>(&base, e, m, k0, &mut y, &mut t);
    montgomery_form::<A>(c, h, &mut t);
    let diff = y.iter().zip(t.iter()).fold(0, |d, (a, b)| d | (a ^ b));
    mask_eq(diff, 0)
}

/// s^e mod n as `modulus_len` big-endian bytes, for the big-endian s (`modulus_len` bytes,
/// below n: callers check that), on the family's arithmetic: the public-key operation
/// (RSAVP1, RSAEP) of `engine::PublicKey`. None for a modulus over `MAX_LIMBS` or an s of
/// another length. Public values only: the loop branches on e.
pub fn public_power<A: Arith>(n: &Modulus, e: u64, modulus_len: usize, s_be: &[u8]) -> Option<Vec<u8>> {
    let len = n.m.len();
    if len > MAX_LIMBS || s_be.len() != modulus_len || e == 0 {
        return None;
    }
    let mut s = vec![0u64; len];
    from_be_bytes(s_be, &mut s);
    let mut base = vec![0u64; len];
    A::mul(&s, &n.rr, &n.m, n.k0, &mut base);
    let (mut y, mut t) = (vec![0u64; len], vec![0u64; len]);
    power_public::<A>(&base, e, &n.m, n.k0, &mut y, &mut t);
    let mut one = vec![0u64; len];
    one[0] = 1;
    A::mul(&y, &one, &n.m, n.k0, &mut t);
    Some(to_be_bytes(&t, modulus_len))
}

/// y = base^e, both in Montgomery form modulo m, by squarings from e's top bit and a product
/// where its bit is set; `t` is scratch. e is public: the branches on its bits are fine. The
/// squarings run on the dedicated squaring where the arithmetic has one at this size. The
/// public-key operation's power and the check's.
fn power_public<A: Arith>(base: &[u64], e: u64, m: &[u64], k0: u64, y: &mut [u64], t: &mut [u64]) {
    let square = A::serves_limbs(m.len());
    y.copy_from_slice(base);
    let (mut acc, mut tmp) = (y, t);
    // Whether the value is in `t`'s buffer (after an odd number of swaps).
    let mut in_t = false;
    for bit in (0..63 - e.leading_zeros()).rev() {
        if square {
            A::sqr(acc, m, k0, tmp);
        } else {
            A::mul(acc, acc, m, k0, tmp);
        }
        if e >> bit & 1 == 1 {
            A::mul(tmp, base, m, k0, acc);
        } else {
            std::mem::swap(&mut acc, &mut tmp);
            in_t = !in_t;
        }
    }
    if in_t {
        tmp.copy_from_slice(acc);
    }
}

/// The checked private-key operation (an empty, unverified result for a malformed input, which
/// the engine never passes).
pub fn private_op<A: Arith>(key: &ScalarKey, input: &[u8]) -> (Zeroizing<Vec<u8>>, bool) {
    if input.len() != key.modulus_len {
        return (Zeroizing::new(Vec::new()), false);
    }
    let out = private_op_unchecked::<A>(key, input);
    let ok = check::<A>(key, input, &out);
    (out, ok)
}
