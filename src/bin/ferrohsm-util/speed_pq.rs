//! `speed`'s post-quantum table: ML-DSA and SLH-DSA sign and verify throughput through the
//! module's PKCS#11 entry points (`CKM_ML_DSA`, `CKM_SLH_DSA`, pure, hedged, no context), on a
//! temporary token of the in-memory store, in the layout of `speed_ec`'s table. `bench` makes
//! its post-quantum keys from the same table.

use cryptoki::mechanism::dsa::{HedgeType, SignAdditionalContext};
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, ParameterSetType};
use cryptoki::session::Session;
use cryptoki::types::Ulong;
use cryptoki_sys::*;
use ferrohsm::cli::module::{self, explain, Result};
use std::path::Path;

/// A parameter set `--pq` and `bench --mechanism` may name: its short name, the label printed,
/// ML-DSA (or SLH-DSA), and its `CKA_PARAMETER_SET`.
pub(crate) struct PqSet {
    pub name: &'static str,
    pub label: &'static str,
    pub ml_dsa: bool,
    pub set: CK_ULONG,
}

pub(crate) const SETS: &[PqSet] = &[
    PqSet {
        name: "ml-dsa-44",
        label: "ML-DSA-44",
        ml_dsa: true,
        set: CKP_ML_DSA_44,
    },
    PqSet {
        name: "ml-dsa-65",
        label: "ML-DSA-65",
        ml_dsa: true,
        set: CKP_ML_DSA_65,
    },
    PqSet {
        name: "ml-dsa-87",
        label: "ML-DSA-87",
        ml_dsa: true,
        set: CKP_ML_DSA_87,
    },
    PqSet {
        name: "slh-dsa-128f",
        label: "SLH-DSA-SHA2-128f",
        ml_dsa: false,
        set: CKP_SLH_DSA_SHA2_128F,
    },
    PqSet {
        name: "slh-dsa-shake-128f",
        label: "SLH-DSA-SHAKE-128f",
        ml_dsa: false,
        set: CKP_SLH_DSA_SHAKE_128F,
    },
    PqSet {
        name: "slh-dsa-128s",
        label: "SLH-DSA-SHA2-128s",
        ml_dsa: false,
        set: CKP_SLH_DSA_SHA2_128S,
    },
];

pub(crate) fn find(name: &str) -> Option<&'static PqSet> {
    SETS.iter().find(|s| s.name == name)
}

impl PqSet {
    pub(crate) fn keygen(&self) -> Mechanism<'static> {
        if self.ml_dsa {
            Mechanism::MlDsaKeyPairGen
        } else {
            Mechanism::SlhDsaKeyPairGen
        }
    }

    /// The pure signature mechanism (built per call: mechanisms cannot cross threads).
    pub(crate) fn mechanism(&self) -> Mechanism<'static> {
        let p = SignAdditionalContext::new(HedgeType::Preferred, None);
        if self.ml_dsa {
            Mechanism::MlDsa(p)
        } else {
            Mechanism::SlhDsa(p)
        }
    }

    pub(crate) fn parameter_set(&self) -> Attribute {
        Attribute::ParameterSet(ParameterSetType::try_from(Ulong::from(self.set)).expect("any CK_ULONG"))
    }
}

/// Checks `--pq` before anything is measured.
pub fn check(names: &[String]) -> Result<()> {
    match names.iter().find(|n| find(n).is_none()) {
        Some(n) => {
            let known: Vec<&str> = SETS.iter().map(|s| s.name).collect();
            Err(format!("unknown parameter set {n:?}; use {}", known.join(", ")))
        }
        None => Ok(()),
    }
}

/// Measures the parameter sets named and prints the table.
pub fn run(
    m: Option<&Path>,
    target: &crate::speed::Target,
    names: &[String],
    seconds: f64,
    threads: usize,
) -> Result<()> {
    let p = module::load(m)?;
    let (slot, admin) = target.open(&p, "ferrohsm speed pq")?;
    let message = b"ferrohsm speed: a message of some length, hashed or not by the mechanism".to_vec();
    let chosen: Vec<&PqSet> = names.iter().filter_map(|n| find(n)).collect();
    let progress = super::progress::bar(chosen.len(), "speed");
    let mut rows = vec![];
    for set in chosen {
        progress.set_message(set.label);
        let public = [target.keep(), set.parameter_set(), Attribute::Verify(true)];
        let private = [target.keep(), Attribute::Private(true), Attribute::Sign(true)];
        let (pubk, privk) = admin
            .generate_key_pair(&set.keygen(), &public, &private)
            .map_err(|e| explain(&format!("cannot generate a {} key", set.label), e))?;
        let signature = admin
            .sign(&set.mechanism(), privk, &message)
            .map_err(|e| explain("sign", e))?;
        let sign = |s: &Session| {
            s.sign(&set.mechanism(), privk, &message)
                .map(|_| ())
                .map_err(|e| explain("sign", e))
        };
        let verify = |s: &Session| {
            s.verify(&set.mechanism(), pubk, &message, &signature)
                .map_err(|e| explain("verify", e))
        };
        let sign = super::speed::measure(&p, slot, threads, seconds, &sign)?;
        let verify = super::speed::measure(&p, slot, threads, seconds, &verify)?;
        rows.push((set.label, sign, verify));
        progress.inc(1);
    }
    progress.finish_and_clear();
    drop(admin);
    p.finalize().ok();
    println!("{:>38}{:>10}{:>10}{:>10}", "sign", "verify", "sign/s", "verify/s");
    for (label, sign, verify) in rows {
        println!(
            "{:<28} {:>8.4}s {:>8.4}s {:>9.1} {:>9.1}",
            label,
            1.0 / sign,
            1.0 / verify,
            sign,
            verify
        );
    }
    Ok(())
}
