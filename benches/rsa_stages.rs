//! Where the time of one AVX2 batch (two RSA signatures, four lanes) and of one lone `mulx`
//! signature goes, stage by stage, in TSC cycles (minimum over repeated runs: the machine is
//! shared, and the minimum is the stage's own cost). `cargo bench --bench rsa_stages`
//! (`STAGES_SIZES=2048,4096` to pick sizes). The breakdown in docs/performance.md comes
//! from here; the module's throughput through PKCS#11 from `ferrohsm-util speed`.
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

#[cfg(target_arch = "x86_64")]
fn main() {
    use ferrohsm::engine::generate;
    use std::arch::x86_64::_rdtsc;
    use std::time::Instant;
    fn tsc() -> u64 {
        // SAFETY: rdtsc has no preconditions.
        unsafe { _rdtsc() }
    }
    fn cycles(reps: usize, mut f: impl FnMut()) -> u64 {
        let mut best = u64::MAX;
        for _ in 0..reps {
            let t = tsc();
            f();
            best = best.min(tsc() - t);
        }
        best
    }
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
        if ferrohsm::engine::kernel::avx2::vertical::available() {
            use ferrohsm::engine::kernel::avx2::crt::{self, CrtKey, LIMB_COUNTS};
            use ferrohsm::engine::kernel::avx2::vertical::{modexp, op_cycles, LaneInput};
            let ak = CrtKey::new(&c).unwrap();
            let jobs = [(&ak, input.as_slice()), (&ak, input.as_slice())];
            fn stages<const L: usize>(
                ak: &CrtKey,
                input: &[u8],
                reps: usize,
                cycles: &dyn Fn(usize, &mut dyn FnMut()) -> u64,
            ) -> (u64, u64, u64, [u64; 3]) {
                let split = cycles(reps * 10, &mut || {
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
                let exp = cycles(reps, &mut || out = modexp::<L, 28>(&lanes, ak.prime_bits));
                let garner = cycles(reps * 10, &mut || {
                    std::hint::black_box(ak.recombine(&out[0], &out[1]));
                });
                (split, exp, garner, op_cycles::<L, 28>(reps * 4))
            }
            let cyc = |r: usize, f: &mut dyn FnMut()| cycles(r, f);
            let (split, exp, garner, ops) = match ak.class {
                0 => stages::<{ LIMB_COUNTS[0] }>(&ak, &input, reps, &cyc),
                1 => stages::<{ LIMB_COUNTS[1] }>(&ak, &input, reps, &cyc),
                2 => stages::<{ LIMB_COUNTS[2] }>(&ak, &input, reps, &cyc),
                _ => stages::<{ LIMB_COUNTS[3] }>(&ak, &input, reps, &cyc),
            };
            let sigs = crt::private_op_unchecked(&jobs);
            let check = cycles(reps, || {
                std::hint::black_box(crt::verify_batch(&jobs, &sigs));
            });
            let unchecked = cycles(reps, || {
                std::hint::black_box(crt::private_op_unchecked(&jobs));
            });
            let total = cycles(reps, || {
                assert!(crt::private_op_batch(&jobs).iter().all(|r| r.1));
            });
            // Operations of the exponentiation: w = 5 windows over the prime's bits.
            let pb = ak.prime_bits;
            let windows = pb.div_ceil(5);
            let (nsq, nmul) = (5 * (windows - 1), windows - 1 + 31 + 4);
            let ideal = nsq as u64 * ops[1] + nmul as u64 * ops[0];
            let scans = windows as u64 * ops[2];
            println!(
                "RSA-{bits} avx2 x2 (one call): total {total} = split 2x{split} + modexp {exp} \
                 + Garner 2x{garner} + check {check} (+ rest {}); unchecked {unchecked}",
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
            let l = LIMB_COUNTS[ak.class] as f64;
            let (ams_at, amm_at) = (pair * (l * (l + 1.0) / 2.0 + l * l), pair * 2.0 * l * l);
            let bound = nsq as f64 * ams_at + nmul as f64 * amm_at;
            println!(
                "    at the multiply-add bound: ams {ams_at:.0} ({:.0}% reached), amm {amm_at:.0} \
                 ({:.0}% reached); the exponentiations alone at the bound: {:.0} sign/s per core",
                100.0 * ams_at / ops[1] as f64,
                100.0 * amm_at / ops[0] as f64,
                per_s(bound as u64, 2)
            );
        }
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
