//! AVX-512 IFMA kernels: up to eight independent modular exponentiations at once, lane k of
//! every register belonging to exponentiation k ("vertical" multi-buffer layout), in radix
//! 2^52 with almost-Montgomery multiplication. One generic kernel runs on 512-, 256- and
//! 128-bit registers (8, 4 or 2 lanes) so a lone request does not pay for a full batch.
//! Lanes may have different moduli and exponents; all lanes of a call share the limb count L.
//! Constant time: fixed windows, every table entry read and selected with masks, no
//! secret-dependent branch or index.

use super::radix52::{madd52hi, madd52lo, MASK52};
use core::arch::x86_64::*;
use zeroize::{Zeroize, Zeroizing};

pub const LANES: usize = 8;

/// Whether this CPU runs the kernels.
pub fn available() -> bool {
    std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512ifma")
        && std::is_x86_feature_detected!("avx512vl")
        && std::is_x86_feature_detected!("avx512bw")
}

/// Which build of the kernels runs: on AVX-512 IFMA registers, or emulated on plain 64-bit
/// integers (the same algorithm, for machines without IFMA in tests, the fuzz target, and the
/// valgrind constant-time check, which cannot execute AVX-512).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    Avx512,
    Emulated,
}

impl Kernel {
    /// The builds a test can run on this CPU: the emulated one everywhere, the AVX-512 one
    /// where the CPU has it.
    #[cfg(test)]
    pub(crate) fn on_this_cpu() -> Vec<Kernel> {
        let mut kernels = vec![Kernel::Emulated];
        if available() {
            kernels.push(Kernel::Avx512);
        }
        kernels
    }
}

/// A register of 64-bit lanes with the IFMA operations the kernels use. The methods of the
/// AVX-512 types need AVX-512 F, IFMA and VL: callers guarantee them (`available()`).
pub(super) trait Simd: Copy {
    unsafe fn zero() -> Self;
    unsafe fn splat(x: u64) -> Self;
    /// Loads the register's lanes from memory aligned to its width.
    unsafe fn load(p: *const u64) -> Self;
    unsafe fn store(self, p: *mut u64);
    /// acc + low 52 bits of b·c, per lane (b and c use their low 52 bits).
    unsafe fn madd_lo(acc: Self, b: Self, c: Self) -> Self;
    /// acc + bits 52..104 of b·c, per lane.
    unsafe fn madd_hi(acc: Self, b: Self, c: Self) -> Self;
    /// `madd_lo` and `madd_hi` with b and c in registers: LLVM folds loads into IFMAs when
    /// registers run short, and a 512-bit IFMA with a memory operand issues at about two
    /// thirds of the register form's rate on this core. Worth it on 512-bit registers once
    /// the accumulators fill the register file (L ≥ 20); below, and on the narrower registers
    /// (whose IFMAs leave a port free for the loads), LLVM's own scheduling of the
    /// intrinsics measured 1–2% faster.
    unsafe fn madd_lo_reg(acc: Self, b: Self, c: Self) -> Self {
        Self::madd_lo(acc, b, c)
    }
    unsafe fn madd_hi_reg(acc: Self, b: Self, c: Self) -> Self {
        Self::madd_hi(acc, b, c)
    }
    unsafe fn add(a: Self, b: Self) -> Self;
    unsafe fn sub(a: Self, b: Self) -> Self;
    unsafe fn and(a: Self, b: Self) -> Self;
    unsafe fn shr<const N: u32>(a: Self) -> Self;
    unsafe fn shr_var(a: Self, n: Self) -> Self;
    /// `b` in the lanes where x == y, `into` elsewhere.
    unsafe fn blend_eq(into: Self, x: Self, y: Self, b: Self) -> Self;
    /// `b` in the lanes where x != 0, `into` elsewhere.
    unsafe fn blend_nonzero(into: Self, x: Self, b: Self) -> Self;
}

/// `$v` (a vector variable), held in a vector register from here on: the blends take both
/// their operands from registers, never from memory. Without it LLVM folds a table entry's
/// load into the masked move (`vmovdqa64 (mem), zmm{k}`, a masked load; masked stores too), and
/// whether a load whose mask is all zero reads its cache line is left to the CPU (AMD's
/// manual: "implementation dependent"): the table scan would then touch only the entries
/// some lane's secret digit selects. With the value in a register every entry is loaded in
/// full, whatever the digits. `tests/masked_memory.rs` checks the built library for masked
/// memory operands. Used inside functions that enable AVX-512F.
macro_rules! in_register {
    ($v:ident, $m:literal) => {
        // SAFETY: an empty instruction sequence (a comment naming the register): no memory
        // access, no stack, no flags; the enclosing function enables AVX-512F.
        unsafe {
            core::arch::asm!(concat!("/* {v:", $m, "} */"), v = inout(zmm_reg) $v, options(pure, nomem, nostack, preserves_flags));
        }
    };
}

macro_rules! simd_impl {
    ($name:ident, $t:ty, $lanes:expr, $zero:ident, $set1:ident, $load:ident, $store:ident,
     $lo:ident, $hi:ident, $add:ident, $sub:ident, $and:ident, $srlv:ident,
     $cmpeq:ident, $cmpneq:ident, $movmask:ident, $m:literal) => {
        // $lanes lanes of 64 bits.
        #[derive(Clone, Copy)]
        pub(super) struct $name(pub(super) $t);

        impl Simd for $name {
            #[inline]
            #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
            unsafe fn zero() -> Self {
                $name($zero())
            }
            #[inline]
            #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
            unsafe fn splat(x: u64) -> Self {
                $name($set1(x as i64))
            }
            #[inline]
            #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
            unsafe fn load(p: *const u64) -> Self {
                $name($load(p as *const _))
            }
            #[inline]
            #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
            unsafe fn store(self, p: *mut u64) {
                $store(p as *mut _, self.0)
            }
            #[inline]
            #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
            unsafe fn madd_lo(acc: Self, b: Self, c: Self) -> Self {
                $name($lo(acc.0, b.0, c.0))
            }
            #[inline]
            #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
            unsafe fn madd_lo_reg(acc: Self, b: Self, c: Self) -> Self {
                let mut r = acc.0;
                core::arch::asm!(concat!("vpmadd52luq {a:", $m, "}, {b:", $m, "}, {c:", $m, "}"), a = inout(zmm_reg) r, b = in(zmm_reg) b.0, c = in(zmm_reg) c.0, options(pure, nomem, nostack));
                $name(r)
            }
            #[inline]
            #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
            unsafe fn madd_hi(acc: Self, b: Self, c: Self) -> Self {
                $name($hi(acc.0, b.0, c.0))
            }
            #[inline]
            #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
            unsafe fn madd_hi_reg(acc: Self, b: Self, c: Self) -> Self {
                let mut r = acc.0;
                core::arch::asm!(concat!("vpmadd52huq {a:", $m, "}, {b:", $m, "}, {c:", $m, "}"), a = inout(zmm_reg) r, b = in(zmm_reg) b.0, c = in(zmm_reg) c.0, options(pure, nomem, nostack));
                $name(r)
            }
            #[inline]
            #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
            unsafe fn add(a: Self, b: Self) -> Self {
                $name($add(a.0, b.0))
            }
            #[inline]
            #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
            unsafe fn sub(a: Self, b: Self) -> Self {
                $name($sub(a.0, b.0))
            }
            #[inline]
            #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
            unsafe fn and(a: Self, b: Self) -> Self {
                $name($and(a.0, b.0))
            }
            #[inline]
            #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
            unsafe fn shr<const N: u32>(a: Self) -> Self {
                $name($srlv(a.0, $set1(N as i64)))
            }
            #[inline]
            #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
            unsafe fn shr_var(a: Self, n: Self) -> Self {
                $name($srlv(a.0, n.0))
            }
            #[inline]
            #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
            unsafe fn blend_eq(into: Self, x: Self, y: Self, b: Self) -> Self {
                let (mut a, mut v) = (into.0, b.0);
                in_register!(a, $m);
                in_register!(v, $m);
                $name($movmask(a, $cmpeq(x.0, y.0), v))
            }
            #[inline]
            #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
            unsafe fn blend_nonzero(into: Self, x: Self, b: Self) -> Self {
                let (mut a, mut v) = (into.0, b.0);
                in_register!(a, $m);
                in_register!(v, $m);
                $name($movmask(a, $cmpneq(x.0, $zero()), v))
            }
        }
    };
}

simd_impl!(
    Zmm,
    __m512i,
    8,
    _mm512_setzero_si512,
    _mm512_set1_epi64,
    _mm512_load_si512,
    _mm512_store_si512,
    _mm512_madd52lo_epu64,
    _mm512_madd52hi_epu64,
    _mm512_add_epi64,
    _mm512_sub_epi64,
    _mm512_and_si512,
    _mm512_srlv_epi64,
    _mm512_cmpeq_epi64_mask,
    _mm512_cmpneq_epi64_mask,
    _mm512_mask_mov_epi64,
    "z"
);
simd_impl!(
    Ymm,
    __m256i,
    4,
    _mm256_setzero_si256,
    _mm256_set1_epi64x,
    _mm256_load_si256,
    _mm256_store_si256,
    _mm256_madd52lo_epu64,
    _mm256_madd52hi_epu64,
    _mm256_add_epi64,
    _mm256_sub_epi64,
    _mm256_and_si256,
    _mm256_srlv_epi64,
    _mm256_cmpeq_epi64_mask,
    _mm256_cmpneq_epi64_mask,
    _mm256_mask_mov_epi64,
    "y"
);
simd_impl!(
    Xmm,
    __m128i,
    2,
    _mm_setzero_si128,
    _mm_set1_epi64x,
    _mm_load_si128,
    _mm_store_si128,
    _mm_madd52lo_epu64,
    _mm_madd52hi_epu64,
    _mm_add_epi64,
    _mm_sub_epi64,
    _mm_and_si128,
    _mm_srlv_epi64,
    _mm_cmpeq_epi64_mask,
    _mm_cmpneq_epi64_mask,
    _mm_mask_mov_epi64,
    "x"
);

/// `K` lanes in plain integers (eight for the vertical kernels, four for the horizontal one),
/// branch-free like the instructions they stand for.
#[derive(Clone, Copy)]
pub(super) struct Emu<const K: usize = LANES>(pub(super) [u64; K]);

impl<const K: usize> Emu<K> {
    fn map(a: Self, f: impl Fn(usize, u64) -> u64) -> Self {
        Emu(core::array::from_fn(|k| f(k, a.0[k])))
    }
}

/// All ones when x != 0, else zero, without a branch. The optimisation barrier keeps LLVM from
/// turning the masks that use it back into a select (a conditional move on secret data).
#[inline]
fn nonzero_mask(x: u64) -> u64 {
    core::hint::black_box(((x | x.wrapping_neg()) >> 63).wrapping_neg())
}

impl<const K: usize> Simd for Emu<K> {
    unsafe fn zero() -> Self {
        Emu([0; K])
    }
    unsafe fn splat(x: u64) -> Self {
        Emu([x; K])
    }
    unsafe fn load(p: *const u64) -> Self {
        Emu(core::ptr::read(p as *const [u64; K]))
    }
    unsafe fn store(self, p: *mut u64) {
        core::ptr::write(p as *mut [u64; K], self.0)
    }
    unsafe fn madd_lo(acc: Self, b: Self, c: Self) -> Self {
        Emu::map(acc, |k, a| madd52lo(a, b.0[k], c.0[k]))
    }
    unsafe fn madd_hi(acc: Self, b: Self, c: Self) -> Self {
        Emu::map(acc, |k, a| madd52hi(a, b.0[k], c.0[k]))
    }
    unsafe fn add(a: Self, b: Self) -> Self {
        Emu::map(a, |k, x| x.wrapping_add(b.0[k]))
    }
    unsafe fn sub(a: Self, b: Self) -> Self {
        Emu::map(a, |k, x| x.wrapping_sub(b.0[k]))
    }
    unsafe fn and(a: Self, b: Self) -> Self {
        Emu::map(a, |k, x| x & b.0[k])
    }
    unsafe fn shr<const N: u32>(a: Self) -> Self {
        Emu::map(a, |_, x| x >> N)
    }
    unsafe fn shr_var(a: Self, n: Self) -> Self {
        // vpsrlvq: counts of 64 and more give zero.
        Emu::map(a, |k, x| (x >> (n.0[k] & 63)) & !nonzero_mask(n.0[k] >> 6))
    }
    unsafe fn blend_eq(into: Self, x: Self, y: Self, b: Self) -> Self {
        Emu::map(into, |k, i| {
            let keep = nonzero_mask(x.0[k] ^ y.0[k]);
            (i & keep) | (b.0[k] & !keep)
        })
    }
    unsafe fn blend_nonzero(into: Self, x: Self, b: Self) -> Self {
        Emu::map(into, |k, i| {
            let take = nonzero_mask(x.0[k]);
            (b.0[k] & take) | (i & !take)
        })
    }
}

/// One lane's work: `base^exp mod m` where base = `lo + hi·R` (each L limbs below R).
pub struct LaneInput<'a> {
    pub lo: &'a [u64],
    pub hi: &'a [u64],
    pub m: &'a [u64],
    pub k0: u64,
    /// R² mod m and R³ mod m (R = 2^(52·L)).
    pub rr: &'a [u64],
    pub rrr: &'a [u64],
    /// Exponent as little-endian 64-bit words, at least `exp_bits` bits.
    pub exp: &'a [u64],
}

/// Vertical operand: limb j of all lanes in one 64-byte row.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Row([u64; LANES]);

impl zeroize::Zeroize for Row {
    fn zeroize(&mut self) {
        self.0.zeroize();
    }
}

fn rows<'a, T, const L: usize>(lanes: &[T], pick: impl Fn(&T) -> &'a [u64]) -> [Row; L] {
    let mut out = [Row([0; LANES]); L];
    for (k, lane) in lanes.iter().enumerate() {
        for (j, &v) in pick(lane).iter().take(L).enumerate() {
            out[j].0[k] = v;
        }
    }
    out
}

fn columns<const L: usize>(out: &[Row; L], n: usize) -> Vec<[u64; L]> {
    (0..n).map(|k| core::array::from_fn(|j| out[j].0[k])).collect()
}

/// Calls a kernel in the build `$kernel` names, on the narrowest register that holds `$lanes`
/// lanes (the emulated build always has eight).
macro_rules! by_width {
    ($kernel:expr, $lanes:expr, $f:ident::<$l:ident>($args:expr)) => {
        // SAFETY: callers checked `available()` for the AVX-512 build; the emulated build needs
        // no CPU feature.
        unsafe {
            match ($kernel, $lanes) {
                (Kernel::Emulated, _) => emulated::$f::<Emu, $l>($args),
                (Kernel::Avx512, 0..=2) => avx512::$f::<Xmm, $l>($args),
                (Kernel::Avx512, 3..=4) => avx512::$f::<Ymm, $l>($args),
                (Kernel::Avx512, _) => avx512::$f::<Zmm, $l>($args),
            }
        }
    };
}

/// Runs the lanes (at most 8) and returns `base^exp mod m` per lane, fully reduced, as L
/// normalised limbs, on the narrowest register that holds them. `exp_bits` is public (the
/// bit length of the moduli). Unused lanes compute on zeros modulo 1 and are ignored.
/// The result holds s mod p and s mod q, which give away the key: it is wiped when dropped,
/// and so is every copy of the key's parts made here.
pub fn modexp<const L: usize>(
    kernel: Kernel,
    lanes: &[LaneInput],
    exp_bits: usize,
) -> Zeroizing<Vec<[u64; L]>> {
    assert!(lanes.len() <= LANES && (kernel == Kernel::Emulated || available()));
    let mut lo = rows::<_, L>(lanes, |l| l.lo);
    let mut hi = rows::<_, L>(lanes, |l| l.hi);
    let mut m = rows::<_, L>(lanes, |l| l.m);
    let mut rr = rows::<_, L>(lanes, |l| l.rr);
    let mut rrr = rows::<_, L>(lanes, |l| l.rrr);
    let mut k0 = Row([MASK52; LANES]);
    for k in 0..LANES {
        match lanes.get(k) {
            Some(l) => k0.0[k] = l.k0,
            None => m[0].0[k] = 1,
        }
    }
    let mut out = [Row([0; LANES]); L];
    // Runs the kernel of `$module` on `$v` with a table of `$entries` (a window of
    // log2($entries) bits), the exponents cut into digits to match.
    macro_rules! run {
        ($module:ident, $v:ty, $entries:literal) => {{
            let digits = Zeroizing::new(digits(
                lanes,
                exp_bits,
                ($entries as usize).trailing_zeros() as usize,
            ));
            let args = (&lo, &hi, &m, &k0, &rr, &rrr, digits.as_slice(), &mut out);
            $module::modexp_kernel::<$v, L, $entries>(args)
        }};
    }
    // Windows of 5 bits (20% fewer multiplications) on the narrow registers, of 4 on 512-bit
    // ones: there the table scan's blends compete with the IFMAs for the same two ports, and
    // the larger scan costs what the saved multiplications gain.
    // SAFETY: callers checked `available()` for the AVX-512 build.
    unsafe {
        match (kernel, lanes.len()) {
            (Kernel::Emulated, _) => run!(emulated, Emu, 16),
            (Kernel::Avx512, 0..=2) => run!(avx512, Xmm, 32),
            (Kernel::Avx512, 3..=4) => run!(avx512, Ymm, 32),
            (Kernel::Avx512, _) => run!(avx512, Zmm, 16),
        }
    }
    let result = Zeroizing::new(columns(&out, lanes.len()));
    for r in [&mut lo, &mut hi, &mut m, &mut rr, &mut rrr, &mut out] {
        r.zeroize();
    }
    result
}

/// The exponents cut into `window`-bit digits, least significant first, one row per digit:
/// ⌈exp_bits / window⌉ of them (a public count). Shifts by public amounts only.
fn digits(lanes: &[LaneInput], exp_bits: usize, window: usize) -> Vec<Row> {
    let n = exp_bits.div_ceil(window);
    let mut out = vec![Row([0; LANES]); n];
    let mask = (1u64 << window) - 1;
    for (k, lane) in lanes.iter().enumerate() {
        let word = |w: usize| lane.exp.get(w).copied().unwrap_or(0);
        for (r, row) in out.iter_mut().enumerate() {
            // Digit r starts at bit r·window: the word holding it, and the next one when the
            // digit straddles the boundary (positions are public; the bits are not).
            let (w, shift) = (r * window / 64, r * window % 64);
            let mut bits = word(w) >> shift;
            if shift + window > 64 {
                bits |= word(w + 1) << (64 - shift);
            }
            row.0[k] = bits & mask;
        }
    }
    out
}

type KernelArgs<'a, const L: usize> = (
    &'a [Row; L],
    &'a [Row; L],
    &'a [Row; L],
    &'a Row,
    &'a [Row; L],
    &'a [Row; L],
    &'a [Row],
    &'a mut [Row; L],
);

/// One lane of a public-key operation: `base^e mod n` (public data, variable time is fine).
pub struct PublicLane<'a> {
    pub base: &'a [u64],
    pub n: &'a [u64],
    pub k0: u64,
    pub rr: &'a [u64],
    pub e: u64,
}

/// Public-exponent exponentiation on up to eight lanes (signature checks): square and
/// multiply over the bits of the exponents; lanes without a given bit keep their value.
pub fn powmod_public<const L: usize>(kernel: Kernel, lanes: &[PublicLane]) -> Vec<[u64; L]> {
    assert!(lanes.len() <= LANES && (kernel == Kernel::Emulated || available()));
    let base = rows::<_, L>(lanes, |l| l.base);
    let mut n = rows::<_, L>(lanes, |l| l.n);
    let rr = rows::<_, L>(lanes, |l| l.rr);
    let mut k0 = Row([MASK52; LANES]);
    let mut e = Row([0; LANES]);
    for k in 0..LANES {
        match lanes.get(k) {
            Some(l) => (k0.0[k], e.0[k]) = (l.k0, l.e),
            None => n[0].0[k] = 1,
        }
    }
    let any = lanes.iter().fold(0, |a, l| a | l.e);
    let mut out = [Row([0; LANES]); L];
    let args = (&base, &n, &k0, &rr, &e, any, &mut out);
    by_width!(kernel, lanes.len(), powmod_public_kernel::<L>(args));
    columns(&out, lanes.len())
}

type PublicArgs<'a, const L: usize> = (
    &'a [Row; L],
    &'a [Row; L],
    &'a Row,
    &'a [Row; L],
    &'a Row,
    u64,
    &'a mut [Row; L],
);

/// `for $p in $lo..$hi`, fully unrolled (LLVM leaves long loops over 30–40 limbs rolled,
/// which keeps the accumulators in memory). Bounds up to 82 (162 `wide`, for the columns of a
/// square); the guards fold at compile time.
macro_rules! unroll {
    ($p:ident in $lo:expr, $hi:expr => $body:block) => {
        assert!($hi <= 82);
        unroll!(@ $p, $lo, $hi, $body; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63 64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81)
    };
    (wide $p:ident in $lo:expr, $hi:expr => $body:block) => {
        assert!($hi <= 162);
        unroll!(@ $p, $lo, $hi, $body; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63 64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95 96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119 120 121 122 123 124 125 126 127 128 129 130 131 132 133 134 135 136 137 138 139 140 141 142 143 144 145 146 147 148 149 150 151 152 153 154 155 156 157 158 159 160 161)
    };
    (@ $p:ident, $lo:expr, $hi:expr, $body:block; $($n:literal)*) => {
        $({
            let $p: usize = $n;
            if ($lo..$hi).contains(&$p) $body
        })*
    };
}

/// The kernels, generic over the register type, compiled twice: for the AVX-512 registers with
/// their target features, and for `Emu` without any (so the emulated build holds no AVX-512
/// instruction and runs anywhere, valgrind included).
/// In the AVX-512 build the arithmetic (`sqr`, `amm`, their helpers) is `#[inline(always)]`,
/// which cannot carry target features: it is compiled only inside the entry points that carry
/// them. Left to LLVM, the squaring was inlined into the exponentiation loop in one crate's
/// copy and called in another's, and the called form ran 10–15% slower; `amm_call` keeps the
/// cold multiplications out of line.
macro_rules! kernels {
    ($module:ident, #[$inline:meta] $(, #[$attr:meta])*) => {
        mod $module {
            use super::*;

#[inline]
$(#[$attr])*
pub(super) unsafe fn load<V: Simd, const L: usize>(r: &[Row; L]) -> [V; L] {
    core::array::from_fn(|j| V::load(r[j].0.as_ptr()))
}

/// Whether IFMAs take b and c in registers: 512-bit registers once the accumulators fill the
/// register file (see `Simd::madd_lo_reg`).
const fn register_operands<V, const L: usize>() -> bool {
    L >= 20 && core::mem::size_of::<V>() > 32
}

/// IFMA low half, in the form `register_operands` picks.
#[$inline]
pub(super) unsafe fn lo<V: Simd, const L: usize>(acc: V, b: V, c: V) -> V {
    if register_operands::<V, L>() { V::madd_lo_reg(acc, b, c) } else { V::madd_lo(acc, b, c) }
}

/// IFMA high half, as `lo`.
#[$inline]
pub(super) unsafe fn hi<V: Simd, const L: usize>(acc: V, b: V, c: V) -> V {
    if register_operands::<V, L>() { V::madd_hi_reg(acc, b, c) } else { V::madd_hi(acc, b, c) }
}

/// Almost-Montgomery multiplication a·b·R⁻¹ mod m per lane; output < 2m, carried (`carry`).
/// Two rows of a at a time, so every limb of b and m brought into a register feeds four
/// IFMAs; each position takes its a·b and q·m terms in one pass and lands two limbs down
/// (the shift costs no moves). The two q's of a pair come first: every later row waits on
/// them.
#[$inline]
pub(super) unsafe fn amm<V: Simd, const L: usize>(a: &[V; L], b: &[V; L], m: &[V; L], k0: V) -> [V; L] {
    let mut align = Row([0; LANES]);
    core::hint::black_box(&mut align);
    let zero = V::zero();
    let mut acc = [zero; L];
    let mut i = 0;
    while i < L {
        let (a0, a1) = (a[i], a[i + 1]);
        let mut p0 = lo::<V, L>(acc[0], a0, b[0]);
        let q0 = lo::<V, L>(zero, p0, k0);
        let mut p1 = lo::<V, L>(acc[1], a0, b[1]);
        p1 = hi::<V, L>(p1, a0, b[0]);
        p1 = lo::<V, L>(p1, a1, b[0]);
        p0 = lo::<V, L>(p0, q0, m[0]);
        p1 = lo::<V, L>(p1, q0, m[1]);
        p1 = hi::<V, L>(p1, q0, m[0]);
        p1 = V::add(p1, V::shr::<52>(p0));
        let q1 = lo::<V, L>(zero, p1, k0);
        p1 = lo::<V, L>(p1, q1, m[0]);
        let c1 = V::shr::<52>(p1);
        unroll!(p in 2, L => {
            let mut v = lo::<V, L>(acc[p], a0, b[p]);
            v = hi::<V, L>(v, a0, b[p - 1]);
            v = lo::<V, L>(v, a1, b[p - 1]);
            v = hi::<V, L>(v, a1, b[p - 2]);
            v = lo::<V, L>(v, q0, m[p]);
            v = hi::<V, L>(v, q0, m[p - 1]);
            v = lo::<V, L>(v, q1, m[p - 1]);
            acc[p - 2] = hi::<V, L>(v, q1, m[p - 2]);
        });
        let mut v = hi::<V, L>(zero, a0, b[L - 1]);
        v = lo::<V, L>(v, a1, b[L - 1]);
        v = hi::<V, L>(v, a1, b[L - 2]);
        v = hi::<V, L>(v, q0, m[L - 1]);
        v = lo::<V, L>(v, q1, m[L - 1]);
        acc[L - 2] = hi::<V, L>(v, q1, m[L - 2]);
        let v = hi::<V, L>(zero, a1, b[L - 1]);
        acc[L - 1] = hi::<V, L>(v, q1, m[L - 1]);
        acc[0] = V::add(acc[0], c1);
        i += 2;
    }
    carry(&mut acc);
    acc
}

/// `amm` as a call: for the multiplications outside the exponentiation's main loop, so only
/// the hot one is inlined (each inlined copy adds several kilobytes of unrolled code).
#[inline(never)]
$(#[$attr])*
pub(super) unsafe fn amm_call<V: Simd, const L: usize>(a: &[V; L], b: &[V; L], m: &[V; L], k0: V) -> [V; L] {
    amm(a, b, m, k0)
}

/// `sqr` as a call, for the table's even entries (see `amm_call`).
#[inline(never)]
$(#[$attr])*
pub(super) unsafe fn sqr_call<V: Simd, const L: usize>(a: &[V; L], m: &[V; L], k0: V) -> [V; L] {
    sqr(a, m, k0)
}

/// Column k of a² (unnormalised): twice the cross products a_i·a_j (i < j; low halves of
/// i + j = k, high halves of i + j = k − 1) plus the diagonal term.
#[$inline]
pub(super) unsafe fn column<V: Simd, const L: usize>(a: &[V; L], k: usize) -> V {
    let zero = V::zero();
    let (lo_start, hi_start) = ((k + 1).saturating_sub(L), k.saturating_sub(L));
    let cross = if L <= 20 {
        // Up to 20 limbs, one chain with low and high terms alternating: the add that would
        // join two sums shares the ports of the IFMAs (8-lane RSA-2048 batches 6–7% faster).
        // Longer columns need the two chains' parallelism (one chain: RSA-3072 2%, RSA-4096
        // 5–8% slower).
        let mut c = zero;
        unroll!(t in 0, L => {
            let i = lo_start + t;
            if 2 * i < k {
                c = lo::<V, L>(c, a[i], a[k - i]);
            }
            let i = hi_start + t;
            if 2 * i + 1 < k {
                c = hi::<V, L>(c, a[i], a[k - 1 - i]);
            }
        });
        c
    } else {
        let (mut c0, mut c1) = (zero, zero);
        let mut i = lo_start;
        while 2 * i < k {
            c0 = lo::<V, L>(c0, a[i], a[k - i]);
            i += 1;
        }
        let mut i = hi_start;
        while 2 * i + 1 < k {
            c1 = hi::<V, L>(c1, a[i], a[k - 1 - i]);
            i += 1;
        }
        V::add(c0, c1)
    };
    let v = V::add(cross, cross);
    if k % 2 == 0 {
        lo::<V, L>(v, a[k / 2], a[k / 2])
    } else {
        hi::<V, L>(v, a[k / 2], a[k / 2])
    }
}

/// Almost-Montgomery squaring a·a·R⁻¹ mod m: each cross product once, doubled, then the
/// reduction two rows at a time. About a quarter fewer IFMAs than `amm(a, a)`.
#[$inline]
pub(super) unsafe fn sqr<V: Simd, const L: usize>(a: &[V; L], m: &[V; L], k0: V) -> [V; L] {
    let mut align = Row([0; LANES]);
    core::hint::black_box(&mut align);
    let zero = V::zero();
    // Columns of a² (2L of them, unnormalised), computed one at a time so only `a` and two
    // partial sums are live.
    let mut t = [[zero; L]; 2];
    unroll!(wide k in 0, 2 * L => {
        t[k / L][k % L] = column(a, k);
    });
    let [mut acc, high] = t;
    let mut i = 0;
    while i < L {
        let q0 = lo::<V, L>(zero, acc[0], k0);
        let p0 = lo::<V, L>(acc[0], q0, m[0]);
        let mut p1 = lo::<V, L>(acc[1], q0, m[1]);
        p1 = hi::<V, L>(p1, q0, m[0]);
        p1 = V::add(p1, V::shr::<52>(p0));
        let q1 = lo::<V, L>(zero, p1, k0);
        p1 = lo::<V, L>(p1, q1, m[0]);
        let c1 = V::shr::<52>(p1);
        unroll!(p in 2, L => {
            let mut v = lo::<V, L>(acc[p], q0, m[p]);
            v = hi::<V, L>(v, q0, m[p - 1]);
            v = lo::<V, L>(v, q1, m[p - 1]);
            acc[p - 2] = hi::<V, L>(v, q1, m[p - 2]);
        });
        let mut v = hi::<V, L>(high[i], q0, m[L - 1]);
        v = lo::<V, L>(v, q1, m[L - 1]);
        acc[L - 2] = hi::<V, L>(v, q1, m[L - 2]);
        acc[L - 1] = hi::<V, L>(high[i + 1], q1, m[L - 1]);
        acc[0] = V::add(acc[0], c1);
        i += 2;
    }
    carry(&mut acc);
    acc
}

#[inline]
$(#[$attr])*
pub(super) unsafe fn normalise<V: Simd, const L: usize>(x: &mut [V; L]) {
    carry(x);
    clear_carries(x);
}

/// Adds each limb's bits above 52 into the next limb but leaves them in place: enough for a
/// value that only feeds IFMAs (which read the low 52 bits of their multiplicands), and a
/// third fewer operations than `normalise` on the ports the IFMAs need. `clear_carries`
/// finishes the job.
#[inline]
$(#[$attr])*
pub(super) unsafe fn carry<V: Simd, const L: usize>(x: &mut [V; L]) {
    for j in 0..L - 1 {
        x[j + 1] = V::add(x[j + 1], V::shr::<52>(x[j]));
    }
}

/// Drops the bits above 52 that `carry` left behind: the limbs are then normalised.
#[inline]
$(#[$attr])*
pub(super) unsafe fn clear_carries<V: Simd, const L: usize>(x: &mut [V; L]) {
    let mask = V::splat(MASK52);
    for limb in x.iter_mut() {
        *limb = V::and(*limb, mask);
    }
}

/// x − m if x ≥ m, else x, per lane, with masks.
#[inline]
$(#[$attr])*
pub(super) unsafe fn reduce_once<V: Simd, const L: usize>(x: &[V; L], m: &[V; L]) -> [V; L] {
    let mask = V::splat(MASK52);
    let mut borrow = V::zero();
    let mut d = [borrow; L];
    for j in 0..L {
        let t = V::sub(V::sub(x[j], m[j]), borrow);
        borrow = V::shr::<63>(t);
        d[j] = V::and(t, mask);
    }
    core::array::from_fn(|j| V::blend_nonzero(d[j], borrow, x[j]))
}

#[inline]
$(#[$attr])*
pub(super) unsafe fn store<V: Simd, const L: usize>(r: &[V; L], out: &mut [Row; L]) {
    for j in 0..L {
        r[j].store(out[j].0.as_mut_ptr());
    }
}

/// `T`: table entries, 2^window; `digits` holds the window digits, least significant first.
$(#[$attr])*
pub(super) unsafe fn modexp_kernel<V: Simd, const L: usize, const T: usize>(args: KernelArgs<'_, L>) {
    let (lo, hi, m, k0, rr, rrr, digits, out) = args;
    let window = T.trailing_zeros() as usize;
    let m = load::<V, L>(m);
    let k0 = V::load(k0.0.as_ptr());
    let zero = V::zero();
    let mut one = [zero; L];
    one[0] = V::splat(1);
    // Montgomery form of the base: lo·R + hi·R² ≡ AMM(lo, R²) + AMM(hi, R³). Each term is
    // below 2m, so the sum is below 4m, well inside the kernel's bound (R ≥ 256·m).
    let rr = load::<V, L>(rr);
    let mut x_lo = amm_call(&load::<V, L>(lo), &rr, &m, k0);
    let mut x_hi = amm_call(&load::<V, L>(hi), &load::<V, L>(rrr), &m, k0);
    clear_carries(&mut x_lo);
    clear_carries(&mut x_hi);
    let mut base = [zero; L];
    for j in 0..L {
        base[j] = V::add(x_lo[j], x_hi[j]);
    }
    normalise(&mut base);
    // R mod m (the Montgomery one) = AMM(1, R²).
    let mont_one = amm_call(&one, &rr, &m, k0);
    let mut table = [[zero; L]; T];
    table[0] = mont_one;
    table[1] = base;
    // Even entries by squaring (a quarter fewer IFMAs than a multiplication).
    for t in 2..T {
        table[t] = if t % 2 == 0 {
            sqr_call(&table[t / 2], &m, k0)
        } else {
            amm_call(&table[t - 1], &base, &m, k0)
        };
    }
    let mut acc = mont_one;
    for (win, digit) in digits.iter().enumerate().rev() {
        let top = win == digits.len() - 1;
        if !top {
            for _ in 0..window {
                acc = sqr(&acc, &m, k0);
            }
        }
        let digit = V::load(digit.0.as_ptr());
        // Read every entry; keep the one whose index equals the lane's digit.
        let mut sel = [zero; L];
        for (t, entry) in table.iter().enumerate() {
            let t = V::splat(t as u64);
            for j in 0..L {
                sel[j] = V::blend_eq(sel[j], digit, t, entry[j]);
            }
        }
        // The top window's entry is where the accumulator starts (no multiplication by one).
        acc = if top { sel } else { amm(&acc, &sel, &m, k0) };
    }
    // Out of Montgomery form: AMM(acc, 1) ≤ m, then one conditional subtraction.
    let mut r = amm_call(&acc, &one, &m, k0);
    clear_carries(&mut r);
    let r = reduce_once(&r, &m);
    store(&r, out);
    // The table (powers of the base mod p) lives on the stack: wipe it before returning.
    for v in table.iter_mut().flatten() {
        core::ptr::write_volatile(v, zero);
    }
}

$(#[$attr])*
pub(super) unsafe fn powmod_public_kernel<V: Simd, const L: usize>(args: PublicArgs<'_, L>) {
    let (base, n, k0, rr, e, any, out) = args;
    let n = load::<V, L>(n);
    let (k0, e) = (V::load(k0.0.as_ptr()), V::load(e.0.as_ptr()));
    let zero = V::zero();
    let x = amm_call(&load::<V, L>(base), &load::<V, L>(rr), &n, k0);
    let mut acc = x;
    let bits = 64 - any.leading_zeros() as usize;
    for bit in (0..bits.saturating_sub(1)).rev() {
        acc = sqr(&acc, &n, k0);
        // Exponents are public: skip the multiplication when no lane has this bit.
        if any >> bit & 1 == 0 {
            continue;
        }
        let with_x = amm_call(&acc, &x, &n, k0);
        let set = V::and(V::shr_var(e, V::splat(bit as u64)), V::splat(1));
        for j in 0..L {
            acc[j] = V::blend_nonzero(acc[j], set, with_x[j]);
        }
    }
    let mut one = [zero; L];
    one[0] = V::splat(1);
    let mut r = amm_call(&acc, &one, &n, k0);
    clear_carries(&mut r);
    let r = reduce_once(&r, &n);
    store(&r, out);
}
        }
    };
}

kernels!(avx512, #[inline(always)], #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]);
// The emulated build's speed does not matter; its compile time does.
kernels!(emulated, #[inline]);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::kernel::ifma::radix52;

    /// Moduli shaped like the kernels' (the prime 16 bits short of R) and inputs across the
    /// whole range an AMM accepts (below 2m), edges included: 0, 1, m − 1, m, 2m − 1.
    fn operands<const L: usize>(seed: u64) -> ([Row; L], [Row; L], Row) {
        let mut x = seed | 1;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x & MASK52
        };
        let (mut m, mut a, mut k0) = ([Row([0; LANES]); L], [Row([0; LANES]); L], Row([0; LANES]));
        for k in 0..LANES {
            let mut ml: Vec<u64> = (0..L).map(|_| rnd()).collect();
            ml[0] |= 1;
            ml[L - 1] = (ml[L - 1] >> 16) | 1 << 35;
            let mut al: Vec<u64> = (0..L).map(|_| rnd()).collect();
            al[L - 1] >>= 15; // below 2m
            let one: Vec<u64> = (0..L).map(|j| (j == 0) as u64).collect();
            match k {
                0 => al = vec![0; L],
                1 => al = one,
                2 => al = radix52::sub(&ml, &one).0,
                3 => al = ml.clone(),
                4 => al = radix52::sub(&radix52::add(&ml, &ml), &one).0,
                _ => {}
            }
            for j in 0..L {
                m[j].0[k] = ml[j];
                // Bits above 52, as a carried (not masked) product leaves them: the kernels
                // must ignore them, as the IFMA instructions do.
                a[j].0[k] = al[j] | (rnd() & 0xfff) << 52;
            }
            k0.0[k] = radix52::mont_k0(ml[0]);
        }
        (m, a, k0)
    }

    fn lane<const L: usize>(r: &[Row; L], k: usize) -> Vec<u64> {
        (0..L).map(|j| r[j].0[k]).collect()
    }

    macro_rules! check {
        ($module:ident, $v:ty, $lanes:expr, $l:literal) => {{
            for seed in 1..4u64 {
                let (m, a, k0) = operands::<$l>(seed * 0x9e37_79b9);
                let (mut sq, mut mul) = ([Row([0; LANES]); $l], [Row([0; LANES]); $l]);
                // SAFETY: the AVX-512 build runs only where `available()` said so.
                unsafe {
                    let (mv, av) = ($module::load::<$v, $l>(&m), $module::load::<$v, $l>(&a));
                    let k0v = <$v>::load(k0.0.as_ptr());
                    let (mut s, mut p) = ($module::sqr(&av, &mv, k0v), $module::amm(&av, &av, &mv, k0v));
                    $module::clear_carries(&mut s);
                    $module::clear_carries(&mut p);
                    $module::store(&s, &mut sq);
                    $module::store(&p, &mut mul);
                }
                for k in 0..$lanes {
                    let (ml, mut al) = (lane(&m, k), lane(&a, k));
                    al.iter_mut().for_each(|x| *x &= MASK52);
                    let reference = radix52::amm(&al, &al, &ml, k0.0[k]);
                    let what = concat!(stringify!($module), " ", stringify!($v), " L=", $l);
                    assert_eq!(lane(&sq, k), reference, "{what} sqr, lane {k}, seed {seed}");
                    assert_eq!(lane(&mul, k), reference, "{what} amm, lane {k}, seed {seed}");
                }
            }
        }};
    }

    #[test]
    fn squaring_and_multiplication_match_the_scalar_amm() {
        check!(emulated, Emu, 8, 10);
        check!(emulated, Emu, 8, 20);
        check!(emulated, Emu, 8, 30);
        check!(emulated, Emu, 8, 40);
        if !available() {
            eprintln!("no AVX-512 IFMA here: only the emulated build checked");
            return;
        }
        check!(avx512, Xmm, 2, 10);
        check!(avx512, Ymm, 4, 20);
        check!(avx512, Zmm, 8, 20);
        check!(avx512, Xmm, 2, 30);
        check!(avx512, Zmm, 8, 40);
        check!(avx512, Ymm, 4, 40);
    }
}
