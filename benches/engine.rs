//! Engine kernels side by side on one core: the IFMA kernel at full and partial batches
//! against the portable (rsa crate) path. cargo bench --bench engine
use ferrohsm::engine::kernel::ifma::crt;
use ferrohsm::engine::{generate, PreparedKey};
use std::time::Instant;

fn main() {
    for bits in [1024usize, 2048, 3072, 4096] {
        let c = generate(bits, &[1, 0, 1]).unwrap();
        let key = PreparedKey::new(&c).unwrap();
        let k = bits / 8;
        let mut input = vec![0x5au8; k];
        input[0] = 0x1f;
        let portable = {
            let t = Instant::now();
            let mut n = 0;
            while t.elapsed().as_secs_f64() < 1.0 {
                key.private_op_portable(&input).unwrap();
                n += 1;
            }
            n as f64 / t.elapsed().as_secs_f64()
        };
        let verify = {
            let sig = key.private_op_portable(&input).unwrap();
            let t = Instant::now();
            let mut n = 0;
            while t.elapsed().as_secs_f64() < 0.5 {
                key.public_op(&sig).unwrap();
                n += 1;
            }
            n as f64 / t.elapsed().as_secs_f64()
        };
        let ck = crt::CrtKey::new(&c).unwrap();
        let mut line = format!("RSA-{bits}: public op {verify:8.0}/s  portable {portable:8.0}/s");
        if ferrohsm::engine::kernel::ifma::available() {
            for width in [1usize, 2, 4] {
                let jobs: Vec<(&crt::CrtKey, &[u8])> = (0..width).map(|_| (&ck, input.as_slice())).collect();
                let t = Instant::now();
                let mut n = 0;
                while t.elapsed().as_secs_f64() < 1.0 {
                    crt::private_op_batch(crt::Kernel::Avx512, &jobs);
                    n += width;
                }
                line += &format!("  ifma x{width} {:8.0}/s", n as f64 / t.elapsed().as_secs_f64());
            }
        }
        println!("{line}");
    }
}
