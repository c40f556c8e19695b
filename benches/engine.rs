//! Engine kernels side by side on one core, one request per call unless stated: the reference
//! (rsa crate) path, the scalar families (portable, mulx), the AVX2 kernel at 1 and 2 and the
//! IFMA kernel at 1, 2 and 4 signatures per call; figures are per second of this thread's CPU time, so other load on the
//! machine inflates them less than wall-clock rates. cargo bench --bench engine
//! (`FERROHSM_BENCH_SCALAR=1`: the reference and the scalar families only.)
use ferrohsm::engine::kernel::scalar::{exp, key::ScalarKey, portable::Portable, Arith};
use ferrohsm::engine::{generate, PreparedKey};

#[path = "common/cpu_time.rs"]
mod cpu_time;
use cpu_time::cpu;

/// Operations per CPU second of `f` (each call does `per_call` operations), best of 3 rounds.
fn rate(per_call: usize, mut f: impl FnMut()) -> f64 {
    let mut best: f64 = 0.0;
    for _ in 0..3 {
        let t = cpu();
        let mut n = 0;
        while cpu() - t < 0.4 {
            f();
            n += per_call;
        }
        best = best.max(n as f64 / (cpu() - t));
    }
    best
}

fn scalar<A: Arith>(c: &ferrohsm::engine::KeyComponents, input: &[u8]) -> Option<f64> {
    let key = ScalarKey::new::<A>(c)?;
    A::available().then(|| rate(1, || assert!(exp::private_op::<A>(&key, input).1)))
}

fn main() {
    let scalar_only = std::env::var_os("FERROHSM_BENCH_SCALAR").is_some();
    for bits in [1024usize, 2048, 3072, 4096] {
        let c = generate(bits, &[1, 0, 1]).unwrap();
        let key = PreparedKey::new(&c).unwrap();
        let k = bits / 8;
        let mut input = vec![0x5au8; k];
        input[0] = 0x1f;
        let reference = rate(1, || {
            key.private_op_portable(&input).unwrap();
        });
        let mut line = format!("RSA-{bits}: reference {reference:7.0}/s");
        let portable = scalar::<Portable>(&c, &input).unwrap();
        line += &format!("  portable {portable:7.0}/s ({:.2}x)", portable / reference);
        #[cfg(target_arch = "x86_64")]
        {
            use ferrohsm::engine::kernel::ifma::crt;
            use ferrohsm::engine::kernel::scalar::mulx::Mulx;
            if let Some(mulx) = scalar::<Mulx>(&c, &input) {
                line += &format!("  mulx {mulx:7.0}/s");
            }
            if !scalar_only {
                line += &four_lanes::<ferrohsm::engine::kernel::avx2::Int28>(&c, &input);
                line += &four_lanes::<ferrohsm::engine::kernel::fma::Fma51>(&c, &input);
            }
            if !scalar_only && ferrohsm::engine::kernel::ifma::available() {
                let ck = crt::CrtKey::new(&c).unwrap();
                for width in [1usize, 2, 4] {
                    let jobs: Vec<(&crt::CrtKey, &[u8])> =
                        (0..width).map(|_| (&ck, input.as_slice())).collect();
                    let r = rate(width, || {
                        crt::private_op_batch(crt::Kernel::Avx512, &jobs);
                    });
                    line += &format!("  ifma x{width} {r:7.0}/s");
                }
            }
        }
        println!("{line}");
    }
}

/// A four-lane family at one and two signatures per call, and unchecked, as text for the line.
#[cfg(target_arch = "x86_64")]
fn four_lanes<K: ferrohsm::engine::kernel::avx2::crt::Lanes>(
    c: &ferrohsm::engine::KeyComponents,
    input: &[u8],
) -> String {
    use ferrohsm::engine::kernel::avx2::crt::{self, CrtKey};
    if !K::available() {
        return String::new();
    }
    let mut line = String::new();
    let ak = CrtKey::<K>::new(c).unwrap();
    for width in [1usize, 2] {
        let jobs: Vec<(&CrtKey<K>, &[u8])> = (0..width).map(|_| (&ak, input)).collect();
        let r = rate(width, || {
            assert!(crt::private_op_batch(&jobs).iter().all(|r| r.1));
        });
        line += &format!("  {} x{width} {r:7.0}/s", K::NAME);
    }
    let jobs = [(&ak, input), (&ak, input)];
    let r = rate(2, || {
        crt::private_op_unchecked(&jobs);
    });
    line + &format!(" (unchecked {r:7.0}/s)")
}
