//! The mulx family's field multiplication on x86-64 (BMI2 `mulx`, ADX `adcx`/`adox`): four
//! rows, each a·b_i added with two carry chains at once (CF for the low halves, OF for the high
//! halves, as OpenSSL's ecp_nistz256 mulx path does) then one reduction step by p's form: with
//! q the low limb, q·(p0 + p1·2^64) = q·2^96 - q, so the step adds q << 32 and q >> 32 (two
//! shifts) and one product q·p3; the accumulator's five limbs rotate through five registers.
//! Squaring has its own routine (10 products instead of 16). The family is chosen at run time (`mod.rs`): only
//! a CPU with BMI2 and ADX reaches this code.

use super::field::{Arith, P};
use std::arch::asm;

/// BMI2 + ADX Montgomery arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Mulx;

/// Whether this CPU runs the family (std caches the answer).
pub fn available() -> bool {
    std::is_x86_feature_detected!("bmi2") && std::is_x86_feature_detected!("adx")
}

impl Arith for Mulx {
    const NAME: &'static str = "mulx";

    #[inline(always)]
    fn mul(a: &[u64; 4], b: &[u64; 4]) -> [u64; 4] {
        let (r0, r1, r2, r3): (u64, u64, u64, u64);
        // SAFETY: reads 4 limbs from each of a and b (valid references) and writes only the
        // named registers; mulx/adcx/adox exist on this CPU: the family is only selected
        // (`mod.rs`) where `available()` says so, and the constant-time test runs it under
        // valgrind, which executes them.
        unsafe {
            asm!(
            "mov rdx, [{b}]",
            "mulx {t1}, {t0}, [{a}]",
            "mulx {t2}, {l}, [{a} + 8]",
            "add {t1}, {l}",
            "mulx {t3}, {l}, [{a} + 16]",
            "adc {t2}, {l}",
            "mulx {t4}, {l}, [{a} + 24]",
            "adc {t3}, {l}",
            "adc {t4}, 0",
            "mov rdx, {t0}",
            "mulx {h}, {l}, {p3}",
            "mov {t}, rdx",
            "shl {t}, 32",
            "shr rdx, 32",
            "xor {t0:e}, {t0:e}",
            "add {t1}, {t}",
            "adc {t2}, rdx",
            "adc {t3}, {l}",
            "adc {t4}, {h}",
            "adc {t0}, 0",
            "mov rdx, [{b} + 8]",
            "xor {h:e}, {h:e}",
            "mulx {h}, {l}, [{a} + 0]",
            "adcx {t1}, {l}",
            "adox {t2}, {h}",
            "mulx {h}, {l}, [{a} + 8]",
            "adcx {t2}, {l}",
            "adox {t3}, {h}",
            "mulx {h}, {l}, [{a} + 16]",
            "adcx {t3}, {l}",
            "adox {t4}, {h}",
            "mulx {h}, {l}, [{a} + 24]",
            "adcx {t4}, {l}",
            "adox {t0}, {h}",
            "adc {t0}, 0",
            "mov rdx, {t1}",
            "mulx {h}, {l}, {p3}",
            "mov {t}, rdx",
            "shl {t}, 32",
            "shr rdx, 32",
            "xor {t1:e}, {t1:e}",
            "add {t2}, {t}",
            "adc {t3}, rdx",
            "adc {t4}, {l}",
            "adc {t0}, {h}",
            "adc {t1}, 0",
            "mov rdx, [{b} + 16]",
            "xor {h:e}, {h:e}",
            "mulx {h}, {l}, [{a} + 0]",
            "adcx {t2}, {l}",
            "adox {t3}, {h}",
            "mulx {h}, {l}, [{a} + 8]",
            "adcx {t3}, {l}",
            "adox {t4}, {h}",
            "mulx {h}, {l}, [{a} + 16]",
            "adcx {t4}, {l}",
            "adox {t0}, {h}",
            "mulx {h}, {l}, [{a} + 24]",
            "adcx {t0}, {l}",
            "adox {t1}, {h}",
            "adc {t1}, 0",
            "mov rdx, {t2}",
            "mulx {h}, {l}, {p3}",
            "mov {t}, rdx",
            "shl {t}, 32",
            "shr rdx, 32",
            "xor {t2:e}, {t2:e}",
            "add {t3}, {t}",
            "adc {t4}, rdx",
            "adc {t0}, {l}",
            "adc {t1}, {h}",
            "adc {t2}, 0",
            "mov rdx, [{b} + 24]",
            "xor {h:e}, {h:e}",
            "mulx {h}, {l}, [{a} + 0]",
            "adcx {t3}, {l}",
            "adox {t4}, {h}",
            "mulx {h}, {l}, [{a} + 8]",
            "adcx {t4}, {l}",
            "adox {t0}, {h}",
            "mulx {h}, {l}, [{a} + 16]",
            "adcx {t0}, {l}",
            "adox {t1}, {h}",
            "mulx {h}, {l}, [{a} + 24]",
            "adcx {t1}, {l}",
            "adox {t2}, {h}",
            "adc {t2}, 0",
            "mov rdx, {t3}",
            "mulx {h}, {l}, {p3}",
            "mov {t}, rdx",
            "shl {t}, 32",
            "shr rdx, 32",
            "xor {t3:e}, {t3:e}",
            "add {t4}, {t}",
            "adc {t0}, rdx",
            "adc {t1}, {l}",
            "adc {t2}, {h}",
            "adc {t3}, 0",
            // t3·2^256 + (t4 t0 t1 t2) is below 2p: subtract p once unless that borrows.
            "mov {a}, {t4}",
            "mov {b}, {t0}",
            "mov {h}, {t1}",
            "mov {l}, {t2}",
            "mov {t:e}, 0xffffffff",
            "sub {a}, -1",
            "sbb {b}, {t}",
            "sbb {h}, 0",
            "sbb {l}, {p3}",
            "sbb {t3}, 0",
            "cmovc {a}, {t4}",
            "cmovc {b}, {t0}",
            "cmovc {h}, {t1}",
            "cmovc {l}, {t2}",
                a = inout(reg) a.as_ptr() => r0,
                b = inout(reg) b.as_ptr() => r1,
                p3 = in(reg) P[3],
                t0 = out(reg) _,
                t1 = out(reg) _,
                t2 = out(reg) _,
                t3 = out(reg) _,
                t4 = out(reg) _,
                h = out(reg) r2,
                l = out(reg) r3,
                t = out(reg) _,
                out("rdx") _,
                options(pure, readonly, nostack),
            );
        }
        [r0, r1, r2, r3]
    }

    /// The square: the six cross products once (one carry chain per row), doubled by a
    /// carry chain, the four squares added; then four reduction steps on the low half, each
    /// the rows' step of `mul` (q·2^96 as two shifts, q·p3 by one mulx), and the high half
    /// added. 10 mulx instead of 16.
    #[inline(always)]
    fn sqr(a: &[u64; 4]) -> [u64; 4] {
        let (r0, r1, r2, r3): (u64, u64, u64, u64);
        // SAFETY: reads 4 limbs of a (a valid reference) and writes only the named registers;
        // mulx/adc exist on this CPU (as for `mul`). The cross products sum to less than
        // 2^448 and each partial sum fits its limbs (a1·a3·2^256 + the rest < 2^384), so no
        // carry is dropped; each reduction step leaves the low half below 2^256.
        unsafe {
            asm!(
            // Cross products: a0·(a1, a2, a3) at limbs 1-4.
            "mov rdx, [{a}]",
            "mulx {t2}, {t1}, [{a} + 8]",
            "mulx {t3}, {l}, [{a} + 16]",
            "add {t2}, {l}",
            "mulx {t4}, {l}, [{a} + 24]",
            "adc {t3}, {l}",
            "adc {t4}, 0",
            // a1·a2 at limbs 3-4, a1·a3 at limbs 4-5.
            "mov rdx, [{a} + 8]",
            "mulx {h}, {l}, [{a} + 16]",
            "mulx {t5}, {t0}, [{a} + 24]",
            "add {t3}, {l}",
            "adc {t4}, {h}",
            "adc {t5}, 0",
            "add {t4}, {t0}",
            "adc {t5}, 0",
            // a2·a3 at limbs 5-6.
            "mov rdx, [{a} + 16]",
            "mulx {t6}, {l}, [{a} + 24]",
            "add {t5}, {l}",
            "adc {t6}, 0",
            // Doubled into limbs 1-7.
            "xor {t7:e}, {t7:e}",
            "add {t1}, {t1}",
            "adc {t2}, {t2}",
            "adc {t3}, {t3}",
            "adc {t4}, {t4}",
            "adc {t5}, {t5}",
            "adc {t6}, {t6}",
            "adc {t7}, 0",
            // Plus the squares a_i² at limbs 2i, 2i + 1 (mulx and mov leave the flags).
            "mov rdx, [{a}]",
            "mulx {h}, {t0}, rdx",
            "add {t1}, {h}",
            "mov rdx, [{a} + 8]",
            "mulx {h}, {l}, rdx",
            "adc {t2}, {l}",
            "adc {t3}, {h}",
            "mov rdx, [{a} + 16]",
            "mulx {h}, {l}, rdx",
            "adc {t4}, {l}",
            "adc {t5}, {h}",
            "mov rdx, [{a} + 24]",
            "mulx {h}, {l}, rdx",
            "adc {t6}, {l}",
            "adc {t7}, {h}",
            // a is read: its register holds p3 from here.
            "mov {a}, 0xffffffff00000001",
            // Four reduction steps; the low half rotates (t1 t2 t3 t0), (t2 t3 t0 t1), ...
            "mov rdx, {t0}",
            "mulx {h}, {l}, {a}",
            "shl {t0}, 32",
            "shr rdx, 32",
            "add {t1}, {t0}",
            "adc {t2}, rdx",
            "adc {t3}, {l}",
            "adc {h}, 0",
            "mov {t0}, {h}",
            "mov rdx, {t1}",
            "mulx {h}, {l}, {a}",
            "shl {t1}, 32",
            "shr rdx, 32",
            "add {t2}, {t1}",
            "adc {t3}, rdx",
            "adc {t0}, {l}",
            "adc {h}, 0",
            "mov {t1}, {h}",
            "mov rdx, {t2}",
            "mulx {h}, {l}, {a}",
            "shl {t2}, 32",
            "shr rdx, 32",
            "add {t3}, {t2}",
            "adc {t0}, rdx",
            "adc {t1}, {l}",
            "adc {h}, 0",
            "mov {t2}, {h}",
            "mov rdx, {t3}",
            "mulx {h}, {l}, {a}",
            "shl {t3}, 32",
            "shr rdx, 32",
            "add {t0}, {t3}",
            "adc {t1}, rdx",
            "adc {t2}, {l}",
            "adc {h}, 0",
            "mov {t3}, {h}",
            // Plus the high half: below 2p, the carry in t4.
            "add {t0}, {t4}",
            "adc {t1}, {t5}",
            "adc {t2}, {t6}",
            "adc {t3}, {t7}",
            "mov {t4:e}, 0",
            "adc {t4}, 0",
            // Subtract p once unless that borrows (as in `mul`).
            "mov {t5}, {t0}",
            "mov {t6}, {t1}",
            "mov {t7}, {t2}",
            "mov {h}, {t3}",
            "mov {l:e}, 0xffffffff",
            "sub {t5}, -1",
            "sbb {t6}, {l}",
            "sbb {t7}, 0",
            "sbb {h}, {a}",
            "sbb {t4}, 0",
            "cmovc {t5}, {t0}",
            "cmovc {t6}, {t1}",
            "cmovc {t7}, {t2}",
            "cmovc {h}, {t3}",
                a = inout(reg) a.as_ptr() => _,
                t0 = out(reg) _,
                t1 = out(reg) _,
                t2 = out(reg) _,
                t3 = out(reg) _,
                t4 = out(reg) _,
                t5 = out(reg) r0,
                t6 = out(reg) r1,
                t7 = out(reg) r2,
                h = out(reg) r3,
                l = out(reg) _,
                out("rdx") _,
                options(pure, readonly, nostack),
            );
        }
        [r0, r1, r2, r3]
    }

    /// (a + b) mod p: add/adc, then p subtracted from a copy and the sum kept where that
    /// borrows (cmovc).
    #[inline(always)]
    fn add(a: &[u64; 4], b: &[u64; 4]) -> [u64; 4] {
        let (s0, s1, s2, s3): (u64, u64, u64, u64);
        // SAFETY: reads the 4 limbs of b (a valid reference); otherwise register arithmetic
        // (add/adc/sbb/cmov exist on every x86-64 CPU). 12 registers: builds that reserve more
        // (the fuzz build's instrumentation) must still find them.
        unsafe {
            asm!(
            "xor {c:e}, {c:e}",
            "add {r0}, [{b}]",
            "adc {r1}, [{b} + 8]",
            "adc {r2}, [{b} + 16]",
            "adc {r3}, [{b} + 24]",
            "adc {c}, 0",
            "mov {s0}, {r0}",
            "mov {s1}, {r1}",
            "mov {s2}, {r2}",
            "mov {s3}, {r3}",
            "sub {s0}, -1",
            "sbb {s1}, {p1}",
            "sbb {s2}, 0",
            "sbb {s3}, {p3}",
            "sbb {c}, 0",
            "cmovc {s0}, {r0}",
            "cmovc {s1}, {r1}",
            "cmovc {s2}, {r2}",
            "cmovc {s3}, {r3}",
                r0 = inout(reg) a[0] => _,
                r1 = inout(reg) a[1] => _,
                r2 = inout(reg) a[2] => _,
                r3 = inout(reg) a[3] => _,
                b = in(reg) b.as_ptr(),
                p1 = in(reg) P[1],
                p3 = in(reg) P[3],
                c = out(reg) _,
                s0 = out(reg) s0,
                s1 = out(reg) s1,
                s2 = out(reg) s2,
                s3 = out(reg) s3,
                options(pure, readonly, nostack),
            );
        }
        [s0, s1, s2, s3]
    }

    /// (a - b) mod p: sub/sbb, then p added back under the borrow's mask (p's limbs are
    /// all ones, 2^32 - 1, 0 and p3, so the masked limbs are the mask, the mask shifted,
    /// nothing and the mask and-ed with p3).
    #[inline(always)]
    fn sub(a: &[u64; 4], b: &[u64; 4]) -> [u64; 4] {
        let [mut r0, mut r1, mut r2, mut r3] = *a;
        // SAFETY: reads the 4 limbs of b, as in `add`.
        unsafe {
            asm!(
            "sub {r0}, [{b}]",
            "sbb {r1}, [{b} + 8]",
            "sbb {r2}, [{b} + 16]",
            "sbb {r3}, [{b} + 24]",
            "sbb {m}, {m}",
            "mov {m1}, {m}",
            "shr {m1}, 32",
            "and {m3}, {m}",
            "add {r0}, {m}",
            "adc {r1}, {m1}",
            "adc {r2}, 0",
            "adc {r3}, {m3}",
                r0 = inout(reg) r0,
                r1 = inout(reg) r1,
                r2 = inout(reg) r2,
                r3 = inout(reg) r3,
                b = in(reg) b.as_ptr(),
                m = out(reg) _,
                m1 = out(reg) _,
                m3 = inout(reg) P[3] => _,
                options(pure, readonly, nostack),
            );
        }
        [r0, r1, r2, r3]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mulx_agrees_with_p256_crate() {
        if !available() {
            return;
        }
        super::super::field::tests::agrees_with_p256_crate::<Mulx>();
        super::super::point::tests::agrees_with_p256_crate::<Mulx>();
        super::super::comb::tests::agrees_with_mul_by_generator::<Mulx>();
    }
}
