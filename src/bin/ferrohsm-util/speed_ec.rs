//! `speed`'s elliptic-curve table: ECDSA (P-256, P-384, P-521, over SHA-256) and Ed25519 sign
//! and verify throughput through the module's PKCS#11 entry points, on a temporary token of the
//! in-memory store, printed the way `openssl speed ecdsap256 ed25519` prints it, with the
//! arithmetic family each curve ran on (the module's `FERROHSM_GetCurveFamilies`).

use cryptoki::mechanism::eddsa::{EddsaParams, EddsaSignatureScheme};
use cryptoki::mechanism::Mechanism;
use cryptoki::object::Attribute;
use cryptoki::session::Session;
use ferrohsm::cli::module::{self, explain, Result};
use std::path::Path;

/// The key-pair generation mechanism of a curve of `CURVES` (Edwards or Weierstrass).
pub(crate) fn keygen_mechanism(edwards: bool) -> Mechanism<'static> {
    if edwards {
        Mechanism::EccEdwardsKeyPairGen
    } else {
        Mechanism::EccKeyPairGen
    }
}

/// A curve `--curves` may name: its OpenSSL-style label, bits, `CKA_EC_PARAMS`, Edwards or not
/// (`bench` makes its EC keys from the same table).
pub(crate) const CURVES: &[(&str, &str, u32, &[u8], bool)] = &[
    (
        "p256",
        "ecdsa (nistp256)",
        256,
        &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07],
        false,
    ),
    (
        "p384",
        "ecdsa (nistp384)",
        384,
        &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22],
        false,
    ),
    (
        "p521",
        "ecdsa (nistp521)",
        521,
        &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23],
        false,
    ),
    (
        "ed25519",
        "EdDSA (Ed25519)",
        253,
        &[0x06, 0x03, 0x2b, 0x65, 0x70],
        true,
    ),
];

/// Mechanisms hold raw pointers and cannot cross threads: each call builds its own.
fn mechanism(edwards: bool) -> Mechanism<'static> {
    if edwards {
        Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Pure))
    } else {
        Mechanism::EcdsaSha256
    }
}

struct Row {
    curve: &'static str,
    label: &'static str,
    bits: u32,
    edwards: bool,
    sign: f64,
    verify: f64,
}

/// Checks `--curves` before anything is measured.
pub fn check_curves(names: &[String]) -> Result<()> {
    match names.iter().find(|n| !CURVES.iter().any(|c| c.0 == n.as_str())) {
        Some(n) => Err(format!("unknown curve {n:?}; use p256, p384, p521, ed25519")),
        None => Ok(()),
    }
}

/// Measures the curves named and prints the table.
pub fn run(
    m: Option<&Path>,
    target: &crate::speed::Target,
    names: &[String],
    seconds: f64,
    threads: usize,
) -> Result<()> {
    let p = module::load(m)?;
    let (slot, admin) = target.open(&p, "ferrohsm speed ec")?;
    let message = b"ferrohsm speed: a message of some length, hashed or not by the mechanism".to_vec();
    let mut rows = vec![];
    let chosen: Vec<_> = CURVES.iter().filter(|c| names.iter().any(|n| n == c.0)).collect();
    let progress = super::progress::bar(chosen.len(), "speed");
    for &&(curve, label, bits, params, edwards) in &chosen {
        progress.set_message(label);
        let gen = keygen_mechanism(edwards);
        let public = [
            target.keep(),
            Attribute::EcParams(params.to_vec()),
            Attribute::Verify(true),
        ];
        let private = [target.keep(), Attribute::Private(true), Attribute::Sign(true)];
        let (pubk, privk) = admin
            .generate_key_pair(&gen, &public, &private)
            .map_err(|e| explain(&format!("cannot generate a {label} key"), e))?;
        let signature = admin
            .sign(&mechanism(edwards), privk, &message)
            .map_err(|e| explain("sign", e))?;
        let sign = |s: &Session| {
            s.sign(&mechanism(edwards), privk, &message)
                .map(|_| ())
                .map_err(|e| explain("sign", e))
        };
        let verify = |s: &Session| {
            s.verify(&mechanism(edwards), pubk, &message, &signature)
                .map_err(|e| explain("verify", e))
        };
        rows.push(Row {
            curve,
            label,
            bits,
            edwards,
            sign: super::speed::measure(&p, slot, threads, seconds, &sign)?,
            verify: super::speed::measure(&p, slot, threads, seconds, &verify)?,
        });
        progress.inc(1);
    }
    progress.finish_and_clear();
    drop(admin);
    p.finalize().ok();
    // The arithmetic this process's module would choose; the server's is its own.
    let families = match target {
        crate::speed::Target::Temporary => curve_families(&module::module_path(m)?).unwrap_or_default(),
        crate::speed::Target::Remote { .. } => CURVES
            .iter()
            .map(|c| (c.0.to_string(), "(the server's)".to_string()))
            .collect(),
    };
    print_table(&rows, &families);
    Ok(())
}

/// Mirrors `FERROHSM_CURVE_FAMILY`.
#[repr(C)]
#[derive(Clone, Copy)]
struct CurveFamily {
    curve: [u8; 16],
    family: [u8; 16],
}

/// (curve, family) for every curve of the module, from its vendor API (None from a module
/// without it: not ferrohsm, or older than 1.3).
fn curve_families(module: &Path) -> Option<Vec<(String, String)>> {
    type GetCurveFamilies =
        unsafe extern "C" fn(*mut CurveFamily, *mut std::ffi::c_ulong) -> std::ffi::c_ulong;
    let text =
        |b: &[u8; 16]| String::from_utf8_lossy(b.split(|&c| c == 0).next().unwrap_or(&[])).into_owned();
    // SAFETY: the module is already loaded (same handle); the signature is the header's, and
    // the buffer holds the `count` entries the first call asked for.
    unsafe {
        let lib = libloading::Library::new(module).ok()?;
        let f: libloading::Symbol<GetCurveFamilies> = lib.get(b"FERROHSM_GetCurveFamilies").ok()?;
        let mut count: std::ffi::c_ulong = 0;
        if f(std::ptr::null_mut(), &mut count) != 0 {
            return None;
        }
        let mut list = vec![
            CurveFamily {
                curve: [0; 16],
                family: [0; 16]
            };
            count as usize
        ];
        if f(list.as_mut_ptr(), &mut count) != 0 {
            return None;
        }
        list.truncate(count as usize);
        Some(list.iter().map(|c| (text(&c.curve), text(&c.family))).collect())
    }
}

/// `openssl speed`'s layout: a header per family, then seconds per operation and operations
/// per second; last, the arithmetic the curve ran on.
fn print_table(rows: &[Row], families: &[(String, String)]) {
    let mut last_edwards = None;
    for r in rows {
        if last_edwards != Some(r.edwards) {
            println!(
                "{:>38}{:>10}{:>10}{:>10}  arithmetic",
                "sign", "verify", "sign/s", "verify/s"
            );
            last_edwards = Some(r.edwards);
        }
        let family = families
            .iter()
            .find(|(c, _)| c == r.curve)
            .map_or("?", |(_, f)| f.as_str());
        println!(
            "{:>4} bits {:<18} {:>8.4}s {:>8.4}s {:>9.1} {:>9.1}  {}",
            r.bits,
            r.label,
            1.0 / r.sign,
            1.0 / r.verify,
            r.sign,
            r.verify,
            family
        );
    }
}
