//! P-256 signing by stage on one core, per family: what one signature with its check costs
//! and where (docs/performance.md's breakdown). Figures are µs of this thread's CPU time per
//! operation, best of 3 rounds, so other load on the machine inflates them less than wall
//! clock. cargo bench --bench p256
use eng::{check::KeyTable, field::Arith, field::Fe, scalar::Scalar};
use ferrohsm::engine::ec::p256 as eng;
use ferrohsm::engine::ec::sign as ec_sign;
use p256::elliptic_curve::ff::PrimeField;
use p256::elliptic_curve::Curve;

#[path = "common/cpu_time.rs"]
mod cpu_time;
use cpu_time::cpu;

/// µs of CPU per call of `f`, best of 3 rounds of 0.3 s.
fn us(mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = cpu();
        let mut n = 0u64;
        while cpu() - t < 0.3 {
            for _ in 0..16 {
                f();
            }
            n += 16;
        }
        best = best.min((cpu() - t) * 1e6 / n as f64);
    }
    best
}

/// (z, r, s, s⁻¹) of one signature.
type Sig = ([u8; 32], [u8; 32], [u8; 32], [u8; 32]);

/// `one` is made with nonce `k`; `many` with random ones.
fn family<A: Arith>(d: &[u8; 32], k: &[u8; 32], table: &KeyTable, one: &Sig, many: &[Sig]) {
    let (z, r, s, s_inv) = one;
    let fe = Fe::<A>::from_be(z).unwrap();
    let sc = Scalar::from_be(k).unwrap();
    let comb = eng::comb::comb();
    let mut blind = [0x77u8; 128];
    // One signature checked again and again lets the branch predictor learn its digits; a
    // signer checks a new one each time.
    let mut next = 0usize;
    let rows = [
        (
            "field mul",
            us(|| {
                std::hint::black_box(fe.mul(&fe));
            }),
        ),
        (
            "field sqr",
            us(|| {
                std::hint::black_box(fe.sqr());
            }),
        ),
        (
            "field sqr, dependent chain (ns)",
            us(|| {
                let mut x = std::hint::black_box(fe);
                for _ in 0..1000 {
                    x = x.sqr();
                }
                std::hint::black_box(x);
            }),
        ),
        (
            "field mul, 4 chains (ns per mul)",
            us(|| {
                let mut x = std::hint::black_box([fe, fe.dbl(), fe.neg(), fe.sqr()]);
                for _ in 0..250 {
                    for v in x.iter_mut() {
                        *v = v.mul(&fe);
                    }
                }
                std::hint::black_box(x);
            }),
        ),
        (
            "madd chain (ns per addition)",
            us(|| {
                let pt = eng::point::Affine { x: fe, y: fe.sqr() };
                let mut acc = eng::point::Jac::<A>::from_affine(&eng::point::Affine {
                    x: fe.dbl(),
                    y: fe.neg(),
                });
                for _ in 0..1000 {
                    acc = acc.add_affine_vartime(std::hint::black_box(&pt));
                }
                std::hint::black_box(acc);
            }),
        ),
        (
            "dbl chain (ns per doubling)",
            us(|| {
                let mut acc = eng::point::Jac::<A>::from_affine(&eng::point::Affine {
                    x: fe.dbl(),
                    y: fe.neg(),
                });
                for _ in 0..1000 {
                    acc = acc.double_vartime();
                }
                std::hint::black_box(acc);
            }),
        ),
        (
            "field invert (divsteps, z of k·G)",
            us(|| {
                std::hint::black_box(fe.invert());
            }),
        ),
        (
            "field invert, variable time",
            us(|| {
                std::hint::black_box(std::hint::black_box(fe).invert_vartime());
            }),
        ),
        (
            "scalar mul",
            us(|| {
                std::hint::black_box(sc.mul(&sc));
            }),
        ),
        (
            "scalar invert (divsteps)",
            us(|| {
                std::hint::black_box(sc.invert());
            }),
        ),
        (
            "scalar invert, variable time",
            us(|| {
                std::hint::black_box(std::hint::black_box(sc).invert_vartime());
            }),
        ),
        (
            "k·G (comb, with its inversion)",
            us(|| {
                std::hint::black_box(comb.mul_x::<A>(std::hint::black_box(k)));
            }),
        ),
        (
            "sign_ct (k·G, k⁻¹, s)",
            us(|| {
                // A new blinding each time: the blinded inversions' time varies with it.
                blind[0] = blind[0].wrapping_add(1);
                blind[64] = blind[64].wrapping_add(3);
                std::hint::black_box(eng::sign_ct::<A>(d, z, k, &blind));
            }),
        ),
        (
            "check u1·G + u2·Q (with s⁻¹)",
            us(|| assert!(eng::check::verify::<A>(table, z, r, s, None))),
        ),
        (
            "check given the signer's s⁻¹",
            us(|| assert!(eng::check::verify::<A>(table, z, r, s, Some(s_inv)))),
        ),
        (
            "the same, 256 signatures in turn",
            us(|| {
                let (z, r, s, si) = &many[next % many.len()];
                next += 1;
                assert!(eng::check::verify::<A>(table, z, r, s, Some(si)))
            }),
        ),
    ];
    for (name, t) in rows {
        println!("  {:<34} {:8.2} µs", name, t);
    }
}

fn main() {
    let key = p256::ecdsa::SigningKey::from_slice(&[0x42; 32]).unwrap();
    let vk = *key.verifying_key();
    let table = KeyTable::new(vk.as_affine());
    let d: [u8; 32] = key.to_bytes().into();
    let z = [0x5a; 32];
    let k = [0x3c; 32];
    let (r, s, s_inv) = eng::sign(&d, &z, &k, &[0x77; 128]).unwrap();
    let nz = *key.as_nonzero_scalar();
    let many: Vec<Sig> = (0..256u32)
        .map(|i| {
            let mut z = [0u8; 32];
            let mut k = [0u8; 32];
            getrandom::fill(&mut z).unwrap();
            getrandom::fill(&mut k).unwrap();
            k[0] &= 0x7f;
            k[31] |= 1;
            let (r, s, si) = eng::sign(&d, &z, &k, &[i as u8; 128]).unwrap();
            (z, r, s, si)
        })
        .collect();
    println!("P-256 stages (µs of CPU per operation, one thread)");
    println!(
        "  {:<34} {:8.2} µs",
        "a key's check table (first use)",
        us(|| {
            std::hint::black_box(KeyTable::new(vk.as_affine()));
        })
    );
    let ad = [7u8; 32];
    println!(
        "  {:<34} {:8.2} µs",
        "nonce (hedged RFC 6979, SHA-256)",
        us(|| {
            let x = nz.to_repr();
            let order = p256::NistP256::ORDER;
            let mut g = rfc6979::KGenerator::<sha2::Sha256, <p256::NistP256 as Curve>::Uint>::new(
                &x, &z, &ad, &order,
            );
            let mut kb = p256::FieldBytes::default();
            g.fill_next_k(&mut kb);
            std::hint::black_box(kb);
        })
    );
    println!(
        "  {:<34} {:8.2} µs",
        "ec_sign::sign (nonce + sign)",
        us(|| {
            std::hint::black_box(ec_sign::sign::<p256::NistP256>(&nz, &z, &z, &ad, &[0x77; 128]));
        })
    );
    let ks = p256::Scalar::from_repr(k.into()).unwrap();
    println!(
        "  {:<34} {:8.2} µs",
        "p256 crate Scalar::invert (CT)",
        us(|| {
            std::hint::black_box(std::hint::black_box(ks).invert());
        })
    );
    println!(
        "  {:<34} {:8.2} µs",
        "p256 crate Scalar::invert_vartime",
        us(|| {
            std::hint::black_box(std::hint::black_box(ks).invert_vartime());
        })
    );
    // P-384: the crate's inversions against the engine's divsteps (ec_sign::SignCurve).
    {
        use ec_sign::SignCurve;
        use p256::elliptic_curve::Field;
        type C = p384::NistP384;
        type Fp = <C as primeorder::FieldArithmetic>::FieldElement;
        let k = p384::Scalar::from(0x1234_5678_9abc_def1u64)
            .square()
            .square()
            .square();
        let z = Fp::from(0x0fed_cba9_8765_4321u64).square().square().square();
        let k384 = p384::SecretKey::from_slice(&[0x42; 48]).unwrap();
        let nz = k384.to_nonzero_scalar();
        let z48 = [0x5au8; 48];
        for (name, t) in [
            (
                "P-384 scalar invert, crate",
                us(|| {
                    std::hint::black_box(std::hint::black_box(k).invert());
                }),
            ),
            (
                "P-384 scalar invert, divsteps",
                us(|| {
                    std::hint::black_box(C::invert_scalar(std::hint::black_box(&k)));
                }),
            ),
            (
                "P-384 field invert, crate",
                us(|| {
                    std::hint::black_box(Field::invert(std::hint::black_box(&z)));
                }),
            ),
            (
                "P-384 field invert, divsteps",
                us(|| {
                    std::hint::black_box(C::invert_field(std::hint::black_box(&z)));
                }),
            ),
            (
                "P-384 ec_sign::sign (nonce + sign)",
                us(|| {
                    std::hint::black_box(ec_sign::sign::<C>(&nz, &z48, &z48, &ad, &[0x77; 128]));
                }),
            ),
        ] {
            println!("  {:<34} {:8.2} µs", name, t);
        }
    }
    println!("family portable");
    family::<eng::field::Portable>(&d, &k, &table, &(z, r, s, s_inv), &many);
    #[cfg(target_arch = "x86_64")]
    if eng::mulx::available() {
        println!("family mulx");
        family::<eng::mulx::Mulx>(&d, &k, &table, &(z, r, s, s_inv), &many);
    }
}
