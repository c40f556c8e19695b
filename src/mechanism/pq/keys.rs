//! The key model of every post-quantum family (`KeyModel` for `Pq`), written once over
//! `pq::Family`: PKCS#11 3.2 keys of a `CKA_PARAMETER_SET` and their encodings in `CKA_VALUE`
//! (and `CKA_SEED` where the family keeps one), generated with a pairwise consistency test,
//! wrapped as the family's PKCS#8.

use super::{sign, Family, Pq, PrivateKey, PublicKey, SignParams};
use crate::attributes::Attributes;
use crate::error::{fail_because, Error, Result};
use crate::mechanism::key_model::{self, KeyModel, Material, UsableKey};
use cryptoki_sys::*;
use std::sync::Arc;
use zeroize::Zeroizing;

/// The parameter set and the encoded key; a private key's are the family's to say
/// (`Family::private_attributes`: ML-DSA's has its seed too).
const PUBLIC: &[CK_ATTRIBUTE_TYPE] = &[CKA_PARAMETER_SET, CKA_VALUE];
const SECRET: &[CK_ATTRIBUTE_TYPE] = &[CKA_VALUE, CKA_SEED];
/// A private key's `CKA_SEED` or `CKA_VALUE`, as its family needs, is checked when the key is
/// read (`Family::private_key`).
const REQUIRED_PRIVATE: &[CK_ATTRIBUTE_TYPE] = &[CKA_PARAMETER_SET];
/// An expanded ML-DSA key (matrix A in NTT form included) is up to ~60 KiB.
const KEY_FOOTPRINT: usize = 64 << 10;

fn parameter_set(a: &Attributes) -> Result<CK_ULONG> {
    a.ulong(CKA_PARAMETER_SET)
        .ok_or(())
        .or_else(|_| fail_because(CKR_TEMPLATE_INCOMPLETE, "CKA_PARAMETER_SET is required"))
}

fn private(f: &dyn Family, a: &Attributes) -> Result<Box<dyn PrivateKey>> {
    f.private_key(parameter_set(a)?, a.get(CKA_SEED), a.get(CKA_VALUE))
}

fn public(f: &dyn Family, a: &Attributes) -> Result<Arc<dyn PublicKey>> {
    if a.class() == Some(CKO_PRIVATE_KEY) {
        return private(f, a).map(|k| k.public());
    }
    let Some(value) = a.get(CKA_VALUE) else {
        return fail_because(CKR_TEMPLATE_INCOMPLETE, "CKA_VALUE is required");
    };
    f.public_key(parameter_set(a)?, value).map(Arc::from)
}

impl KeyModel for Pq {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn key_type(&self) -> CK_KEY_TYPE {
        self.0.key_type()
    }

    fn attributes(&self, class: CK_OBJECT_CLASS) -> &'static [CK_ATTRIBUTE_TYPE] {
        match class {
            CKO_PUBLIC_KEY => PUBLIC,
            _ => self.0.private_attributes(),
        }
    }

    fn required(&self, class: CK_OBJECT_CLASS) -> &'static [CK_ATTRIBUTE_TYPE] {
        match class {
            CKO_PUBLIC_KEY => PUBLIC,
            _ => REQUIRED_PRIVATE,
        }
    }

    fn secret(&self) -> &'static [CK_ATTRIBUTE_TYPE] {
        SECRET
    }

    fn signs_only(&self) -> bool {
        true
    }

    /// A private key gets every form the family stores (an ML-DSA seed its expanded key),
    /// both get `CKA_PUBLIC_KEY_INFO`.
    fn complete(&self, a: &mut Attributes, class: CK_OBJECT_CLASS) -> Result<()> {
        let public = if class == CKO_PRIVATE_KEY {
            let key = private(self.0, a)?;
            for (t, v) in key.material() {
                a.set_zeroizing(t, v);
            }
            key.public()
        } else {
            public(self.0, a)?
        };
        a.set(CKA_PUBLIC_KEY_INFO, public.public_key_info());
        Ok(())
    }

    /// An `Arc<dyn pq::PrivateKey>`, which `Pq::signer` takes back.
    fn private_key(&self, a: &Attributes) -> Result<UsableKey> {
        let key: Arc<dyn PrivateKey> = Arc::from(private(self.0, a)?);
        Ok(Arc::new(key))
    }

    /// An `Arc<dyn pq::PublicKey>`, which `Pq::verifier` takes back.
    fn public_key(&self, a: &Attributes) -> Result<UsableKey> {
        Ok(Arc::new(public(self.0, a)?))
    }

    /// The parameter set from the public template's `CKA_PARAMETER_SET` (PKCS#11 3.2; the
    /// private template's when only it has one).
    fn check_generation(&self, public: &mut Attributes, private: &mut Attributes) -> Result<()> {
        key_model::refuse_material(public, private, &[CKA_VALUE, CKA_SEED])?;
        key_model::shared_parameter(public, private, CKA_PARAMETER_SET, "CKA_PARAMETER_SET")
    }

    /// The private key gets its `CKA_VALUE` and, for ML-DSA, its `CKA_SEED`.
    fn generate(&self, public: &mut Attributes, private: &mut Attributes) -> Result<()> {
        let key = self.0.generate(parameter_set(public)?)?;
        // Pairwise consistency test (FIPS 140-3 IG 10.3.A): a signature of the new key must
        // verify with its public half (`pq::sign` checks it) before the pair is stored.
        sign(
            key.as_ref(),
            None,
            &SignParams::default(),
            b"ferrohsm pairwise consistency test",
        )?;
        public.set(CKA_VALUE, key.public().value());
        for (t, v) in key.material() {
            private.set_zeroizing(t, v);
        }
        Ok(())
    }

    fn to_pkcs8(&self, a: &Attributes) -> Result<Zeroizing<Vec<u8>>> {
        private(self.0, a)
            .map_err(|_| {
                log::info!("CKR_KEY_NOT_WRAPPABLE: the post-quantum private key is not usable");
                Error(CKR_KEY_NOT_WRAPPABLE)
            })?
            .to_pkcs8()
    }

    fn read_pkcs8(&self, der: &[u8]) -> Option<Result<Material>> {
        let k = self.0.read_pkcs8(der)?;
        let mut attrs = vec![(
            CKA_PARAMETER_SET,
            Zeroizing::new(k.parameter_set().to_ne_bytes().to_vec()),
        )];
        attrs.extend(k.material());
        Some(Ok(attrs))
    }

    fn footprint(&self, _: &Attributes, _: CK_OBJECT_CLASS) -> usize {
        KEY_FOOTPRINT
    }
}
