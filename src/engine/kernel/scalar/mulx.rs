//! The mulx family's arithmetic: Montgomery multiplication and a dedicated squaring in x86-64
//! inline assembly with `mulx` (BMI2: a product that leaves the flags alone) and two carry
//! chains at once, `adcx` through CF and `adox` through OF (ADX), the instructions OpenSSL's
//! x86_64-mont5 uses. Fully unrolled per row for primes of 8, 16, 24 and 32 limbs (RSA-1024 to
//! RSA-4096) and their moduli (16 to 64 limbs, multiplication only: the public-key operation);
//! other limb counts take the portable code.
//!
//! Layout (separated operand scanning): the double-width product (or square) goes to a
//! stack buffer `t`, then L reduction rows add q·m with q = t[i]·k0, each row one unrolled run
//! of mulx/adcx/adox. The accumulator lives in L1 rather than registers (L + 1 limbs do not fit
//! in 14 registers); each product costs a mulx, two flag-chained additions (one with a memory
//! operand), a store and a register move. The squaring computes each cross product once,
//! doubles the lot in the OF chain while adding the squares in the CF chain.

use super::key::ScalarKey;
use super::limbs::reduce_once;
use super::portable;
use super::Arith;
use std::arch::asm;
use zeroize::{Zeroize, Zeroizing};

/// The mulx family's arithmetic (see `Arith`).
pub struct Mulx;

/// Whether this CPU has the instructions (cached by std after the first call).
pub fn available() -> bool {
    std::is_x86_feature_detected!("bmi2") && std::is_x86_feature_detected!("adx")
}

impl Arith for Mulx {
    const NAME: &'static str = "mulx";
    const DESCRIPTION: &'static str =
        "x86-64 BMI2+ADX scalar Montgomery (mulx/adcx/adox, one request per call)";
    const VENDOR_ID: u64 = 3;

    fn available() -> bool {
        available()
    }

    fn serves_limbs(limbs: usize) -> bool {
        matches!(limbs, 8 | 16 | 24 | 32)
    }

    fn mul(a: &[u64], b: &[u64], m: &[u64], k0: u64, out: &mut [u64]) {
        // The assembly is only reached where the CPU runs it (a safe function must not fault).
        if available() {
            Asm::mul(a, b, m, k0, out)
        } else {
            portable::mont_mul(a, b, m, k0, out)
        }
    }

    fn sqr(a: &[u64], m: &[u64], k0: u64, out: &mut [u64]) {
        if available() {
            Asm::sqr(a, m, k0, out)
        } else {
            portable::mont_sqr(a, m, k0, out)
        }
    }

    /// The constant-time test runs the real assembly under valgrind. valgrind 3.19 executes
    /// mulx, adcx and adox (its VEX translation computes them, whatever the host has) but its
    /// CPUID hides ADX, so `available()` is false there: under valgrind the assembly runs
    /// anyway; natively only where the CPU has the instructions.
    fn private_op_for_ct(key: &ScalarKey, input: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
        (available() || under_valgrind()).then(|| super::exp::private_op_unchecked::<Asm>(key, input))
    }

    fn check_for_ct(key: &ScalarKey, input: &[u8], sig: &[u8]) -> Option<u64> {
        (available() || under_valgrind()).then(|| super::exp::check_mask::<Asm>(key, input, sig))
    }
}

/// The assembly without the CPU check: only through `Mulx` (checked) and the constant-time
/// entry above.
struct Asm;

impl Arith for Asm {
    const NAME: &'static str = "mulx";
    const DESCRIPTION: &'static str = "";
    const VENDOR_ID: u64 = 3;

    fn available() -> bool {
        available()
    }

    fn serves_limbs(limbs: usize) -> bool {
        Mulx::serves_limbs(limbs)
    }

    fn mul(a: &[u64], b: &[u64], m: &[u64], k0: u64, out: &mut [u64]) {
        match m.len() {
            8 => mul8(a, b, m, k0, out),
            16 => mul16(a, b, m, k0, out),
            24 => mul24(a, b, m, k0, out),
            32 => mul32(a, b, m, k0, out),
            48 => mul48(a, b, m, k0, out),
            64 => mul64(a, b, m, k0, out),
            _ => portable::mont_mul(a, b, m, k0, out),
        }
    }

    fn sqr(a: &[u64], m: &[u64], k0: u64, out: &mut [u64]) {
        match m.len() {
            8 => sqr8(a, m, k0, out),
            16 => sqr16(a, m, k0, out),
            24 => sqr24(a, m, k0, out),
            32 => sqr32(a, m, k0, out),
            _ => portable::mont_sqr(a, m, k0, out),
        }
    }
}

/// Whether this process runs under valgrind: its RUNNING_ON_VALGRIND client request (0x1001),
/// which answers 0 natively (the magic sequence is a no-op on a CPU).
pub fn under_valgrind() -> bool {
    let args: [u64; 6] = [0x1001, 0, 0, 0, 0, 0];
    let mut result: u64 = 0;
    // SAFETY: valgrind.h's amd64 request preamble: rdi is rotated by 128 bits in all
    // (unchanged), rbx exchanged with itself; valgrind reads the six words at rax and answers
    // in rdx, natively rdx keeps its 0. No memory is written, no stack used; flags clobbered.
    unsafe {
        asm!(
            "rol rdi, 3", "rol rdi, 13", "rol rdi, 61", "rol rdi, 51", "xchg rbx, rbx",
            inout("rdx") result,
            in("rax") args.as_ptr(),
            inout("rdi") 0u64 => _,
            options(nostack),
        );
    }
    result != 0
}

/// The L reduction rows over `t` (2·L limbs at `{t}`, which they advance by L limbs), leaving
/// the reduced value in the upper half and its top bit in `{c}`. Row i: q = t[i]·k0;
/// t[i..i+L] += q·m (mulx for each limb of m; CF chain adds the low halves to t, OF chain the
/// high half of the previous product); the row's top word goes to t[i+L] with the previous
/// row's carry `{c}`.
macro_rules! reduce_rows {
    ($n:literal) => {
        concat!(
            "mov {cnt:e}, ",
            stringify!($n),
            "\n",
            "xor {c:e}, {c:e}\n",
            "3:\n",
            "mov rdx, qword ptr [{t}]\n",
            "imul rdx, {k0}\n",
            "xor {hp:e}, {hp:e}\n",
            ".set fh_j, 0\n",
            ".rept ",
            stringify!($n),
            "\n",
            "mulx {hi}, {lo}, qword ptr [{m} + 8*fh_j]\n",
            "adcx {lo}, qword ptr [{t} + 8*fh_j]\n",
            "adox {lo}, {hp}\n",
            "mov qword ptr [{t} + 8*fh_j], {lo}\n",
            "mov {hp}, {hi}\n",
            ".set fh_j, fh_j+1\n",
            ".endr\n",
            "mov {lo:e}, 0\n",
            "adcx {hp}, {lo}\n",
            "adox {hp}, {lo}\n",
            "mov {lo}, qword ptr [{t} + 8*",
            stringify!($n),
            "]\n",
            "add {lo}, {c}\n",
            "mov {c:e}, 0\n",
            "adc {c:e}, 0\n",
            "add {lo}, {hp}\n",
            "adc {c:e}, 0\n",
            "mov qword ptr [{t} + 8*",
            stringify!($n),
            "], {lo}\n",
            "lea {t}, [{t} + 8]\n",
            "dec {cnt:e}\n",
            "jnz 3b\n",
        )
    };
}

/// out = a·b·R⁻¹ mod m at a fixed limb count.
macro_rules! mont_mul {
    ($name:ident, $n:literal) => {
        #[inline(never)]
        fn $name(a: &[u64], b: &[u64], m: &[u64], k0: u64, out: &mut [u64]) {
            assert!(a.len() == $n && b.len() == $n && m.len() == $n && out.len() == $n);
            let mut t = [0u64; 2 * $n];
            let top: u64;
            // SAFETY: the caller checked BMI2 and ADX (`Mulx::mul`). Reads $n limbs at `a`,
            // `b` and `m` (lengths asserted above), reads and writes the 2·$n limbs of `t`
            // (the product rows write t[i..=i+$n] for row i < $n; the reduction rows t[i..=i+$n]
            // for i < $n); nothing else. Registers: the named operands, rdx (mulx's implicit
            // source), CF/OF and the other flags; no stack use.
            unsafe {
                asm!(
                    // Product rows: t[i..=i+L] += a[i]·b, t[i+L] being fresh each row.
                    concat!("mov {cnt:e}, ", stringify!($n)),
                    "2:",
                    "mov rdx, qword ptr [{a}]",
                    "xor {hp:e}, {hp:e}",
                    ".set fh_j, 0",
                    concat!(".rept ", stringify!($n)),
                    "mulx {hi}, {lo}, qword ptr [{b} + 8*fh_j]",
                    "adcx {lo}, qword ptr [{t} + 8*fh_j]",
                    "adox {lo}, {hp}",
                    "mov qword ptr [{t} + 8*fh_j], {lo}",
                    "mov {hp}, {hi}",
                    ".set fh_j, fh_j+1",
                    ".endr",
                    "mov {lo:e}, 0",
                    "adcx {hp}, {lo}",
                    "adox {hp}, {lo}",
                    concat!("mov qword ptr [{t} + 8*", stringify!($n), "], {hp}"),
                    "lea {a}, [{a} + 8]",
                    "lea {t}, [{t} + 8]",
                    "dec {cnt:e}",
                    "jnz 2b",
                    concat!("sub {t}, 8*", stringify!($n)),
                    reduce_rows!($n),
                    a = inout(reg) a.as_ptr() => _,
                    b = in(reg) b.as_ptr(),
                    m = in(reg) m.as_ptr(),
                    t = inout(reg) t.as_mut_ptr() => _,
                    k0 = in(reg) k0,
                    cnt = out(reg) _,
                    lo = out(reg) _,
                    hi = out(reg) _,
                    hp = out(reg) _,
                    c = out(reg) top,
                    out("rdx") _,
                    options(nostack),
                );
            }
            reduce_once(&t[$n..], top, m, out);
            t.zeroize();
        }
    };
}

/// out = a²·R⁻¹ mod m at a fixed limb count.
macro_rules! mont_sqr {
    ($name:ident, $n:literal) => {
        #[inline(never)]
        fn $name(a: &[u64], m: &[u64], k0: u64, out: &mut [u64]) {
            assert!(a.len() == $n && m.len() == $n && out.len() == $n);
            let mut t = [0u64; 2 * $n];
            let top: u64;
            // SAFETY: the caller checked BMI2 and ADX (`Mulx::sqr`). Reads $n limbs at `a` and
            // `m` (lengths asserted above), reads and writes the 2·$n limbs of `t` (cross rows
            // write t[i+1..=i+$n] for i < $n − 1; the doubling t[0..2·$n]; the reduction rows
            // t[i..=i+$n] for i < $n); nothing else. Registers: the named operands, rdx, flags;
            // no stack use.
            unsafe {
                asm!(
                    // Cross products a[i]·a[j], j > i, each once, row by row.
                    ".set fh_i, 0",
                    concat!(".rept ", stringify!($n), "-1"),
                    "mov rdx, qword ptr [{a} + 8*fh_i]",
                    "xor {hp:e}, {hp:e}",
                    ".set fh_j, fh_i+1",
                    concat!(".rept ", stringify!($n), "-1-fh_i"),
                    "mulx {hi}, {lo}, qword ptr [{a} + 8*fh_j]",
                    "adcx {lo}, qword ptr [{t} + 8*(fh_i+fh_j)]",
                    "adox {lo}, {hp}",
                    "mov qword ptr [{t} + 8*(fh_i+fh_j)], {lo}",
                    "mov {hp}, {hi}",
                    ".set fh_j, fh_j+1",
                    ".endr",
                    "mov {lo:e}, 0",
                    "adcx {hp}, {lo}",
                    "adox {hp}, {lo}",
                    concat!("mov qword ptr [{t} + 8*(fh_i+", stringify!($n), ")], {hp}"),
                    ".set fh_i, fh_i+1",
                    ".endr",
                    // Double (OF chain) and add the squares a[i]² (CF chain).
                    "xor {hp:e}, {hp:e}",
                    ".set fh_i, 0",
                    concat!(".rept ", stringify!($n)),
                    "mov rdx, qword ptr [{a} + 8*fh_i]",
                    "mulx {hi}, {lo}, rdx",
                    "mov {hp}, qword ptr [{t} + 16*fh_i]",
                    "adox {hp}, {hp}",
                    "adcx {hp}, {lo}",
                    "mov qword ptr [{t} + 16*fh_i], {hp}",
                    "mov {hp}, qword ptr [{t} + 16*fh_i + 8]",
                    "adox {hp}, {hp}",
                    "adcx {hp}, {hi}",
                    "mov qword ptr [{t} + 16*fh_i + 8], {hp}",
                    ".set fh_i, fh_i+1",
                    ".endr",
                    reduce_rows!($n),
                    a = in(reg) a.as_ptr(),
                    m = in(reg) m.as_ptr(),
                    t = inout(reg) t.as_mut_ptr() => _,
                    k0 = in(reg) k0,
                    cnt = out(reg) _,
                    lo = out(reg) _,
                    hi = out(reg) _,
                    hp = out(reg) _,
                    c = out(reg) top,
                    out("rdx") _,
                    options(nostack),
                );
            }
            reduce_once(&t[$n..], top, m, out);
            t.zeroize();
        }
    };
}

mont_mul!(mul8, 8);
mont_mul!(mul16, 16);
mont_mul!(mul24, 24);
mont_mul!(mul32, 32);
mont_mul!(mul48, 48);
mont_mul!(mul64, 64);
mont_sqr!(sqr8, 8);
mont_sqr!(sqr16, 16);
mont_sqr!(sqr24, 24);
mont_sqr!(sqr32, 32);

#[cfg(test)]
mod tests {
    use super::super::limbs::{from_be_bytes, mont_k0};
    use super::*;

    fn random(n: usize) -> Vec<u64> {
        let mut b = vec![0u8; 8 * n];
        getrandom::fill(&mut b).unwrap();
        let mut v = vec![0u64; n];
        from_be_bytes(&b, &mut v);
        v
    }

    /// Every compiled limb count against the portable code: random values and the edges
    /// (0, 1, m − 1, m with all limbs set but the lowest bits).
    #[test]
    fn assembly_matches_portable_at_every_limb_count() {
        if !available() {
            eprintln!("no BMI2+ADX on this CPU");
            return;
        }
        for n in [8usize, 16, 24, 32, 48, 64] {
            for round in 0..40 {
                let mut m = random(n);
                m[0] |= 1;
                if round % 4 == 0 {
                    m.iter_mut().for_each(|x| *x = u64::MAX);
                }
                if round % 4 == 1 {
                    m[n - 1] = 1 << 63;
                    m[1..n - 1].iter_mut().for_each(|x| *x = 0);
                }
                let k0 = mont_k0(m[0]);
                let below = |v: Vec<u64>| {
                    let mut v = v;
                    v[n - 1] %= m[n - 1].max(1);
                    v
                };
                let mut m1 = m.clone();
                m1[0] -= 1;
                let mut one = vec![0u64; n];
                one[0] = 1;
                let values = [vec![0u64; n], one, m1, below(random(n)), below(random(n))];
                for x in &values {
                    for y in &values {
                        let (mut want, mut got) = (vec![0u64; n], vec![0u64; n]);
                        portable::mont_mul(x, y, &m, k0, &mut want);
                        Mulx::mul(x, y, &m, k0, &mut got);
                        assert_eq!(got, want, "mul, {n} limbs");
                    }
                    if n <= 32 {
                        let (mut want, mut got) = (vec![0u64; n], vec![0u64; n]);
                        portable::mont_mul(x, x, &m, k0, &mut want);
                        Mulx::sqr(x, &m, k0, &mut got);
                        assert_eq!(got, want, "sqr, {n} limbs");
                    }
                }
            }
        }
    }
}
