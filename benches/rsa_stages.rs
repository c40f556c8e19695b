//! Where the time of one four-lane batch (two RSA signatures; the avx2 and fma kernels) and
//! of one lone `mulx` signature goes, stage by stage, in TSC cycles (minimum over repeated runs: the machine is
//! shared, and the minimum is the stage's own cost). `cargo bench --bench rsa_stages`
//! (`STAGES_SIZES=2048,4096` to pick sizes). The breakdown in docs/performance.md comes
//! from here; the module's throughput through PKCS#11 from `ferrohsm-util speed`.

#[cfg(target_arch = "x86_64")]
use ferrohsm::engine::kernel::avx2::{crt::Lanes, Int28};
#[cfg(target_arch = "x86_64")]
use ferrohsm::engine::kernel::fma::Fma51;
#[cfg(target_arch = "x86_64")]
use ferrohsm::engine::KeyComponents;

/// `n` rounds of 12 independent `vpmuludq` + `vpaddq` pairs on 256-bit registers.
///
/// # Safety
/// The CPU must run AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn mul_add_pairs(n: usize) -> u64 {
    use std::arch::x86_64::*;
    let mut a = [_mm256_setzero_si256(); 12];
    let mut acc = [_mm256_setzero_si256(); 12];
    for (i, v) in a.iter_mut().enumerate() {
        *v = _mm256_set1_epi64x(i as i64 + 3);
    }
    let mut b = _mm256_set1_epi64x(12345);
    for _ in 0..n {
        for i in 0..12 {
            acc[i] = _mm256_add_epi64(acc[i], _mm256_mul_epu32(a[i], b));
        }
        // b is opaque to the optimiser: the products cannot be hoisted out of the loop.
        b = std::hint::black_box(b);
    }
    let mut s = 0u64;
    for v in acc {
        s = s.wrapping_add(_mm256_extract_epi64::<0>(v) as u64);
    }
    s
}

/// `n` rounds of 6 independent 51x51-bit products as the fma kernel forms them, their halves
/// summed into two accumulators each. Thirteen vectors live (six factors, the multiplier, two
/// constants, four sums), so with the temporaries of a product it fits the 16 registers:
/// eight products into eight sums of each half kept 27 live, and its figure moved with the
/// spills (1.6 to 2.9 cycles a product between runs on a Zen 3).
///
/// # Safety
/// The CPU must run AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_products(n: usize) -> u64 {
    use std::arch::x86_64::*;
    let mut a = [_mm256_setzero_pd(); FMA_CHAINS];
    let mut hi = [_mm256_setzero_si256(); 2];
    let mut lo = [_mm256_setzero_si256(); 2];
    for (i, v) in a.iter_mut().enumerate() {
        *v = _mm256_set1_pd(i as f64 * 12345.0 + 3.0);
    }
    let mut b = _mm256_set1_pd(98765.0);
    let (base, shift) = (
        _mm256_set1_pd(2f64.powi(103)),
        _mm256_set1_pd(2f64.powi(103) + 3.0 * 2f64.powi(51)),
    );
    for _ in 0..n {
        for (i, &x) in a.iter().enumerate() {
            let h = _mm256_fmadd_pd(x, b, base);
            let l = _mm256_fmadd_pd(x, b, _mm256_sub_pd(shift, h));
            hi[i % 2] = _mm256_add_epi64(hi[i % 2], _mm256_castpd_si256(h));
            lo[i % 2] = _mm256_add_epi64(lo[i % 2], _mm256_castpd_si256(l));
        }
        // b is opaque to the optimiser, and stays in its register (`black_box` would take it
        // through memory, a store and a load on the path of every product).
        // SAFETY: an empty instruction sequence naming the register: no memory, stack or flags.
        unsafe {
            std::arch::asm!("/* {b} */", b = inout(ymm_reg) b, options(pure, nomem, nostack, preserves_flags));
        }
    }
    let mut s = 0u64;
    for i in 0..2 {
        s = s.wrapping_add(_mm256_extract_epi64::<0>(_mm256_add_epi64(hi[i], lo[i])) as u64);
    }
    s
}

/// Products per round of `fma_products`.
#[cfg(target_arch = "x86_64")]
const FMA_CHAINS: usize = 6;

#[cfg(target_arch = "x86_64")]
fn tsc() -> u64 {
    // SAFETY: rdtsc has no preconditions.
    unsafe { std::arch::x86_64::_rdtsc() }
}

/// The minimum of `reps` timed runs of `f`, in TSC cycles.
#[cfg(target_arch = "x86_64")]
fn cycles(reps: usize, mut f: impl FnMut()) -> u64 {
    let mut best = u64::MAX;
    for _ in 0..reps {
        let t = tsc();
        f();
        best = best.min(tsc() - t);
    }
    best
}

/// One call of a four-lane kernel (two signatures), stage by stage, and its operations
/// against `bound`, the cycles of one limb product at the kernel's bound.
#[cfg(target_arch = "x86_64")]
fn four_lanes<K: Lanes>(c: &KeyComponents, input: &[u8], bits: usize, reps: usize, bound: f64, ghz: f64) {
    use ferrohsm::engine::kernel::avx2::crt::{self, CrtKey};
    use ferrohsm::engine::kernel::avx2::vertical::{CheckLane, LaneInput};
    if !K::available() {
        return;
    }
    let per_s = |cyc: u64, sigs: usize| ghz * 1e9 / cyc as f64 * sigs as f64;
    let ak = CrtKey::<K>::new(c).unwrap();
    let jobs = [(&ak, input), (&ak, input)];
    let split = cycles(reps * 10, || {
        std::hint::black_box(ak.split_input(input));
    });
    let (lo, hi) = ak.split_input(input);
    let lanes: Vec<LaneInput> = (0..4)
        .map(|i| {
            let h = if i % 2 == 0 { &ak.p } else { &ak.q };
            LaneInput {
                lo: &lo,
                hi: &hi,
                m: &h.m,
                k0: h.k0,
                rr: &h.rr,
                rrr: &h.rrr,
                exp: &h.exp,
            }
        })
        .collect();
    let mut out = Vec::new();
    let exp = cycles(reps, || out = K::modexp(ak.class, &lanes, ak.prime_bits));
    let garner = cycles(reps * 10, || {
        std::hint::black_box(ak.recombine(&out[0], &out[1]));
    });
    let ops = K::op_cycles(ak.class, reps * 4);
    let sigs = crt::private_op_unchecked(&jobs);
    let check = cycles(reps, || {
        std::hint::black_box(crt::verify_batch(&jobs, &sigs));
    });
    // The check's kernel call alone (its residues modulo the four primes), on the same values.
    let check_lanes: Vec<CheckLane> = lanes
        .iter()
        .map(|l| CheckLane {
            s: (l.lo, l.hi),
            c: (l.lo, l.hi),
            m: l.m,
            k0: l.k0,
            rr: l.rr,
            rrr: l.rrr,
            e: ak.e,
        })
        .collect();
    let residues = cycles(reps, || {
        std::hint::black_box(K::check_residues(ak.class, &check_lanes));
    });
    let unchecked = cycles(reps, || {
        std::hint::black_box(crt::private_op_unchecked(&jobs));
    });
    let total = cycles(reps, || {
        assert!(crt::private_op_batch(&jobs).iter().all(|r| r.1));
    });
    // Operations of the exponentiation: w-bit windows over the prime's bits; the table's
    // even entries are squares, its odd ones and entry 0 products; two products enter
    // Montgomery form and one leaves it.
    let pb = ak.prime_bits;
    let w = ops[3] as usize;
    let windows = pb.div_ceil(w);
    let half = 1 << (w - 1);
    let (nsq, nmul) = (w * (windows - 1) + half - 1, windows - 1 + half + 3);
    let ideal = nsq as u64 * ops[1] + nmul as u64 * ops[0];
    let scans = windows as u64 * ops[2];
    let name = K::NAME;
    println!(
        "RSA-{bits} {name} x2 (one call): total {total} = split 2x{split} + modexp {exp} \
         + Garner 2x{garner} + check {check} (its kernel call {residues}) (+ rest {}); \
         unchecked {unchecked}",
        total as i64 - (2 * split + exp + 2 * garner + check) as i64
    );
    println!(
        "    modexp {exp}: {nsq} ams x {} + {nmul} amm x {} = {ideal} ({:.0}%), \
         {windows} table scans x {} = {scans} ({:.0}%), rest {} ({:.0}%)",
        ops[1],
        ops[0],
        100.0 * ideal as f64 / exp as f64,
        ops[2],
        100.0 * scans as f64 / exp as f64,
        exp as i64 - (ideal + scans) as i64,
        100.0 * (exp as i64 - (ideal + scans) as i64) as f64 / exp as f64
    );
    println!(
        "    per core: {:.0} sign/s with the check, {:.0} unchecked, {:.0} modexp alone",
        per_s(total, 2),
        per_s(unchecked, 2),
        per_s(exp, 2)
    );
    // Limb products of one operation: ams squares (L(L+1)/2) and reduces (L²), amm
    // multiplies and reduces (2L²).
    let l = K::LIMB_COUNTS[ak.class] as f64;
    let (ams_at, amm_at) = (bound * (l * (l + 1.0) / 2.0 + l * l), bound * 2.0 * l * l);
    let at_bound = nsq as f64 * ams_at + nmul as f64 * amm_at;
    println!(
        "    at the product bound: ams {ams_at:.0} ({:.0}% reached), amm {amm_at:.0} \
         ({:.0}% reached); the exponentiations alone at the bound: {:.0} sign/s per core",
        100.0 * ams_at / ops[1] as f64,
        100.0 * amm_at / ops[0] as f64,
        per_s(at_bound as u64, 2)
    );
}

#[cfg(target_arch = "x86_64")]
fn main() {
    use ferrohsm::engine::generate;
    use std::time::Instant;
    let (t0, i0) = (tsc(), Instant::now());
    std::thread::sleep(std::time::Duration::from_millis(200));
    let ghz = (tsc() - t0) as f64 / i0.elapsed().as_nanos() as f64;
    println!("TSC {ghz:.3} GHz; cycles are TSC cycles, minimum of repeated runs");
    // The AVX2 kernel's bound on this CPU: a limb product is a `vpmuludq` and the `vpaddq` that
    // accumulates it (AVX2 has no multiply-add), both on the vector ports. Twelve independent
    // chains of the pair, so neither latency nor loads limit it: what `ams` and `amm` could
    // reach at best.
    let pair = if ferrohsm::engine::kernel::avx2::vertical::available() {
        const N: usize = 200_000;
        // SAFETY: the CPU runs AVX2 (checked just above).
        let c = cycles(20, || unsafe {
            std::hint::black_box(mul_add_pairs(N));
        });
        let pair = c as f64 / (N * 12) as f64;
        println!(
            "AVX2 multiply-add bound: {pair:.3} cycles per vpmuludq + vpaddq (4 lanes of 32x32 bits; \
             12 independent chains)"
        );
        pair
    } else {
        0.0
    };
    // The fma kernel's bound: a 51x51-bit product is two FMAs, a subtraction and the two
    // `vpaddq` that accumulate its halves (`fma/vertical.rs`), six independent products a round.
    let fma_product = if ferrohsm::engine::kernel::fma::vertical::available() {
        const N: usize = 200_000;
        // SAFETY: the CPU runs AVX2 and FMA (checked just above).
        let c = cycles(20, || unsafe {
            std::hint::black_box(fma_products(N));
        });
        let per = c as f64 / (N * FMA_CHAINS) as f64;
        println!(
            "FMA product bound: {per:.3} cycles per 51x51-bit product (2 vfmadd + vsubpd + 2 vpaddq, \
             4 lanes; {FMA_CHAINS} independent products a round, in registers)"
        );
        per
    } else {
        0.0
    };
    {
        // The hand-off of `scalar::pair`: two busy halves of ~1 ms each, wall time of the join.
        use ferrohsm::engine::kernel::scalar::pair;
        pair::force_on();
        let spin = |c: u64| {
            let t = tsc();
            while tsc() - t < c {
                std::hint::spin_loop();
            }
        };
        let half = (ghz * 1e6) as u64;
        let mut walls: Vec<u64> = (0..20)
            .map(|_| {
                let t = tsc();
                pair::join(&mut || spin(half), &mut || spin(half));
                tsc() - t
            })
            .collect();
        walls.sort();
        println!(
            "pair::join of two {half}-cycle halves: min {} median {} cycles ({:.2} and {:.2} halves)",
            walls[0],
            walls[10],
            walls[0] as f64 / half as f64,
            walls[10] as f64 / half as f64
        );
    }
    let sizes: Vec<usize> = std::env::var("STAGES_SIZES")
        .unwrap_or_else(|_| "1024,2048,3072,4096".into())
        .split(',')
        .map(|s| s.trim().parse().unwrap())
        .collect();
    for bits in sizes {
        let c = generate(bits, &[1, 0, 1]).unwrap();
        let k = bits / 8;
        let mut input = vec![0x5au8; k];
        input[0] = 0x1f;
        let reps = (40 * 2048 * 2048 * 2048 / (bits * bits * bits)).clamp(6, 200);
        let per_s = |cyc: u64, sigs: usize| ghz * 1e9 / cyc as f64 * sigs as f64;
        four_lanes::<Int28>(&c, &input, bits, reps, pair, ghz);
        four_lanes::<Fma51>(&c, &input, bits, reps, fma_product, ghz);
        {
            use ferrohsm::engine::kernel::scalar::mulx::Mulx;
            use ferrohsm::engine::kernel::scalar::{exp, key::ScalarKey, Arith};
            if !Mulx::available() {
                continue;
            }
            let Some(sk) = ScalarKey::new::<Mulx>(&c) else {
                continue;
            };
            let l = sk.limbs;
            let mut cw = vec![0u64; 2 * l];
            ferrohsm::engine::kernel::scalar::limbs::from_be_bytes(&input, &mut cw);
            let mut m1 = vec![0u64; l];
            let half = cycles(reps * 2, || {
                exp::modexp::<Mulx>(&cw, &sk.p, sk.prime_bits, &mut m1)
            });
            let unchecked = cycles(reps * 2, || {
                std::hint::black_box(exp::private_op_unchecked::<Mulx>(&sk, &input));
            });
            let sig = exp::private_op_unchecked::<Mulx>(&sk, &input);
            let check = cycles(reps * 4, || assert!(exp::check::<Mulx>(&sk, &input, &sig)));
            let total = cycles(reps * 2, || assert!(exp::private_op::<Mulx>(&sk, &input).1));
            let m = &sk.p.m;
            let (a, b) = (m1.clone(), sk.p.rrr.clone());
            let mut o = vec![0u64; l];
            let mul = cycles(2000, || Mulx::mul(&a, &b, &m.m, m.k0, &mut o)).max(1);
            let sqr = cycles(2000, || Mulx::sqr(&a, &m.m, m.k0, &mut o)).max(1);
            let w = if sk.prime_bits > 400 { 5 } else { 4 };
            let windows = sk.prime_bits.div_ceil(w);
            let (nsq, nmul) = (w * (windows - 1) + (1 << (w - 1)) - 1, windows + (1 << (w - 1)));
            let ideal = nsq as u64 * sqr + nmul as u64 * mul;
            println!(
                "RSA-{bits} mulx (lone): total {total} = 2 x modexp {half} + check {check} + rest {}; \
                 unchecked {unchecked}",
                total as i64 - (2 * half + check) as i64
            );
            println!(
                "    modexp {half}: {nsq} sqr x {sqr} + {nmul} mul x {mul} = {ideal} ({:.0}%), rest {}",
                100.0 * ideal as f64 / half as f64,
                half as i64 - ideal as i64
            );
            println!(
                "    one core: {:.0} sign/s with the check, {:.0} unchecked",
                per_s(total, 1),
                per_s(unchecked, 1)
            );
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {}
