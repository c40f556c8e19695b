//! An object as sessions see it: its handle, attributes, and the engine forms of its key
//! material, made on first use and dropped with the object.

use super::attributes::Attributes;
use crate::engine::{self, KeyComponents, PreparedKey, PublicKey};
use crate::error::{fail_because, Error, Result};
use crate::mechanism::ec_params::{self, Curve};
use crate::mechanism::{ec, pq, Key};
use cryptoki_sys::*;
use once_cell::sync::OnceCell;
use std::any::Any;
use std::sync::Arc;
use zeroize::Zeroizing;

pub struct Object {
    pub handle: CK_OBJECT_HANDLE,
    pub attrs: Attributes,
    /// The session that owns a session object; `None` for token objects.
    pub owner: Option<CK_SESSION_HANDLE>,
    prepared: OnceCell<Arc<PreparedKey>>,
    public: OnceCell<Arc<PublicKey>>,
    ec_private: OnceCell<Arc<ec::PrivateKey>>,
    ec_public: OnceCell<Arc<ec::PublicKey>>,
    pq_private: OnceCell<Arc<dyn pq::PrivateKey>>,
    pq_public: OnceCell<Arc<dyn pq::PublicKey>>,
}

impl Object {
    pub fn new(handle: CK_OBJECT_HANDLE, attrs: Attributes, owner: Option<CK_SESSION_HANDLE>) -> Self {
        Object {
            handle,
            attrs,
            owner,
            prepared: OnceCell::new(),
            public: OnceCell::new(),
            ec_private: OnceCell::new(),
            ec_public: OnceCell::new(),
            pq_private: OnceCell::new(),
            pq_public: OnceCell::new(),
        }
    }

    /// The memory this object holds once used, for the bound on the object cache: its
    /// attributes, and for keys the engine forms they are prepared into. An RSA private key is
    /// prepared for every kernel family the CPU runs (IFMA, AVX2, MULX, portable, reference):
    /// PREPARED_RSA_PER_BYTE bytes per modulus byte, measured with `benches/store_scale`.
    pub fn footprint(&self) -> usize {
        const OBJECT: usize = 512;
        const PREPARED_RSA_PER_BYTE: usize = 72;
        const EC_KEY: usize = 1024;
        const PQ_KEY: usize = 64 << 10;
        let attrs = self.attrs.size() * 2;
        let prepared = match (self.attrs.class(), self.attrs.key_type()) {
            (Some(CKO_PRIVATE_KEY), Some(CKK_RSA)) => {
                self.attrs.get(CKA_MODULUS).map_or(0, |n| n.len()) * PREPARED_RSA_PER_BYTE
            }
            (Some(CKO_PUBLIC_KEY), Some(CKK_RSA)) => self.attrs.get(CKA_MODULUS).map_or(0, |n| n.len()) * 4,
            (Some(CKO_PRIVATE_KEY | CKO_PUBLIC_KEY), Some(CKK_EC | CKK_EC_EDWARDS)) => EC_KEY,
            // An expanded ML-DSA key (matrix A in NTT form included) is up to ~60 KiB.
            (Some(CKO_PRIVATE_KEY | CKO_PUBLIC_KEY), Some(kt)) if pq::family(kt).is_some() => PQ_KEY,
            _ => 0,
        };
        OBJECT + attrs + prepared
    }

    pub fn is_rsa(&self, class: CK_OBJECT_CLASS) -> bool {
        self.attrs.class() == Some(class) && self.attrs.key_type() == Some(CKK_RSA)
    }

    /// The post-quantum family of this key's type, if it is one of theirs.
    fn pq_family(&self) -> Option<&'static dyn pq::Family> {
        self.attrs.key_type().and_then(pq::family)
    }

    fn is_ec(&self) -> bool {
        matches!(self.attrs.key_type(), Some(CKK_EC | CKK_EC_EDWARDS))
    }

    /// The key an operation takes of this object, as `class` says (`Family::key_class`): a
    /// secret key's value, or the private or public key in its family's usable form.
    pub fn key(&self, class: CK_OBJECT_CLASS) -> Result<Key> {
        match class {
            CKO_SECRET_KEY => Ok(Key::Secret(Zeroizing::new(
                self.attrs.get(CKA_VALUE).unwrap_or(&[]).to_vec(),
            ))),
            CKO_PRIVATE_KEY => self.private_key().map(Key::Private),
            _ => self.public_key_any().map(Key::Public),
        }
    }

    /// The private key of this object, made once: RSA's prepared key, an EC key or a
    /// post-quantum one.
    fn private_key(&self) -> Result<Arc<dyn Any + Send + Sync>> {
        if let Some(f) = self.pq_family() {
            return self
                .pq_private
                .get_or_try_init(|| {
                    pq_private(f, &self.attrs).map(Arc::from).map_err(|_| {
                        log::error!("object {}: post-quantum private key unusable", self.handle);
                        Error(CKR_KEY_HANDLE_INVALID)
                    })
                })
                .cloned()
                .map(|k| Arc::new(k) as Arc<dyn Any + Send + Sync>);
        }
        if self.is_ec() {
            return self.ec_private_key().map(|k| k as Arc<dyn Any + Send + Sync>);
        }
        self.prepared_key().map(|k| k as Arc<dyn Any + Send + Sync>)
    }

    /// The public key of this object (a public or a private key object), made once.
    fn public_key_any(&self) -> Result<Arc<dyn Any + Send + Sync>> {
        if let Some(f) = self.pq_family() {
            return self
                .pq_public
                .get_or_try_init(|| {
                    let key = match self.attrs.class() {
                        Some(CKO_PRIVATE_KEY) => pq_private(f, &self.attrs).map(|k| k.public()),
                        _ => pq_public(f, &self.attrs).map(Arc::from),
                    };
                    key.map_err(|_| {
                        log::error!("object {}: post-quantum public key unusable", self.handle);
                        Error(CKR_KEY_HANDLE_INVALID)
                    })
                })
                .cloned()
                .map(|k| Arc::new(k) as Arc<dyn Any + Send + Sync>);
        }
        if self.is_ec() {
            return self.ec_public_key().map(|k| k as Arc<dyn Any + Send + Sync>);
        }
        self.public_key().map(|k| k as Arc<dyn Any + Send + Sync>)
    }

    /// The EC private key, prepared once per object (checked when the object was made).
    pub fn ec_private_key(&self) -> Result<Arc<ec::PrivateKey>> {
        self.ec_private
            .get_or_try_init(|| {
                ec_private(&self.attrs).map(Arc::new).map_err(|_| {
                    log::error!("object {}: EC private key unusable", self.handle);
                    Error(CKR_KEY_HANDLE_INVALID)
                })
            })
            .cloned()
    }

    /// The EC public key, from `CKA_EC_POINT` (public objects; private ones carry it too).
    pub fn ec_public_key(&self) -> Result<Arc<ec::PublicKey>> {
        self.ec_public
            .get_or_try_init(|| {
                let key = match self.attrs.class() {
                    Some(CKO_PRIVATE_KEY) if !self.attrs.contains(CKA_EC_POINT) => {
                        ec_private(&self.attrs).map(|k| k.public())
                    }
                    _ => ec_public(&self.attrs),
                };
                key.map(Arc::new).map_err(|_| {
                    log::error!("object {}: EC public key unusable", self.handle);
                    Error(CKR_KEY_HANDLE_INVALID)
                })
            })
            .cloned()
    }

    /// The private key in engine form, prepared once per object.
    pub fn prepared_key(&self) -> Result<Arc<PreparedKey>> {
        self.prepared
            .get_or_try_init(|| {
                let c = rsa_components(&self.attrs);
                PreparedKey::new(&c).map(Arc::new).map_err(|e| {
                    log::error!("object {}: RSA private key unusable: {e}", self.handle);
                    Error(CKR_KEY_HANDLE_INVALID)
                })
            })
            .cloned()
    }

    /// The public half in engine form (from a public or a private key object).
    pub fn public_key(&self) -> Result<Arc<PublicKey>> {
        self.public
            .get_or_try_init(|| {
                let n = self.attrs.get(CKA_MODULUS).unwrap_or(&[]);
                let e = self.attrs.get(CKA_PUBLIC_EXPONENT).unwrap_or(&[]);
                PublicKey::new(n, e).map(Arc::new).map_err(|err| {
                    log::error!("object {}: RSA public key unusable: {err}", self.handle);
                    Error(CKR_KEY_HANDLE_INVALID)
                })
            })
            .cloned()
    }

    /// Whether `mechanism` is allowed by `CKA_ALLOWED_MECHANISMS` (empty means all).
    pub fn allows(&self, mechanism: CK_MECHANISM_TYPE) -> bool {
        match self.attrs.get(CKA_ALLOWED_MECHANISMS) {
            None | Some([]) => true,
            Some(list) => list
                .chunks_exact(std::mem::size_of::<CK_ULONG>())
                .any(|c| CK_ULONG::from_ne_bytes(c.try_into().unwrap()) == mechanism),
        }
    }
}

pub fn rsa_components(a: &Attributes) -> KeyComponents {
    let secret = |t| Zeroizing::new(a.get(t).unwrap_or(&[]).to_vec());
    KeyComponents {
        modulus: a.get(CKA_MODULUS).unwrap_or(&[]).to_vec(),
        public_exponent: a.get(CKA_PUBLIC_EXPONENT).unwrap_or(&[]).to_vec(),
        private_exponent: secret(CKA_PRIVATE_EXPONENT),
        prime_1: secret(CKA_PRIME_1),
        prime_2: secret(CKA_PRIME_2),
        exponent_1: secret(CKA_EXPONENT_1),
        exponent_2: secret(CKA_EXPONENT_2),
        coefficient: secret(CKA_COEFFICIENT),
    }
}

/// The curve of an EC key's `CKA_EC_PARAMS`, which must suit its key type.
pub fn ec_curve(a: &Attributes) -> Result<Curve> {
    let curve = ec_params::parse_ec_params(a.get(CKA_EC_PARAMS).unwrap_or(&[]))?;
    if Some(curve.key_type()) != a.key_type() {
        return fail_because(
            CKR_CURVE_NOT_SUPPORTED,
            format!(
                "curve {} is not one for key type 0x{:x}",
                curve.name(),
                a.key_type().unwrap_or(CK_UNAVAILABLE_INFORMATION)
            ),
        );
    }
    Ok(curve)
}

fn ec_private(a: &Attributes) -> Result<ec::PrivateKey> {
    ec::PrivateKey::from_value(ec_curve(a)?, a.get(CKA_VALUE).unwrap_or(&[]))
}

fn ec_public(a: &Attributes) -> Result<ec::PublicKey> {
    let curve = ec_curve(a)?;
    let raw = ec_params::unwrap_point(curve, a.get(CKA_EC_POINT).unwrap_or(&[]))?;
    ec::PublicKey::from_point(curve, &raw)
}

/// Checks an EC key's material and normalises it: `CKA_EC_PARAMS` to the curve's OID,
/// `CKA_EC_POINT` to the DER OCTET STRING of the uncompressed point (a private key gets the
/// point of its scalar, which must equal a point given with it), a private `CKA_VALUE` to the
/// order's length; `CKA_PUBLIC_KEY_INFO` from the point.
fn derive_ec_attributes(a: &mut Attributes, class: CK_OBJECT_CLASS) -> Result<()> {
    let curve = ec_curve(a)?;
    let given = match a.get(CKA_EC_POINT) {
        Some(_) => Some(ec_public(a)?),
        None => None,
    };
    let public = if class == CKO_PRIVATE_KEY {
        let key = ec_private(a)?;
        let public = key.public();
        if given.as_ref().is_some_and(|g| g.point() != public.point()) {
            return fail_because(
                CKR_TEMPLATE_INCONSISTENT,
                "CKA_EC_POINT is not the public point of the private key's CKA_VALUE",
            );
        }
        a.set_zeroizing(CKA_VALUE, key.value());
        public
    } else {
        match given {
            Some(p) => p,
            None => return fail_because(CKR_TEMPLATE_INCOMPLETE, "CKA_EC_POINT is required"),
        }
    };
    let point = public.point();
    a.set(CKA_EC_PARAMS, curve.oid_der().to_vec());
    a.set(CKA_EC_POINT, ec_params::wrap_point(&point));
    a.set(CKA_PUBLIC_KEY_INFO, ec_params::public_key_info(curve, &point));
    Ok(())
}

fn parameter_set(a: &Attributes) -> Result<CK_ULONG> {
    a.ulong(CKA_PARAMETER_SET)
        .ok_or(())
        .or_else(|_| fail_because(CKR_TEMPLATE_INCOMPLETE, "CKA_PARAMETER_SET is required"))
}

/// The post-quantum private key of an object's attributes.
pub fn pq_private(f: &dyn pq::Family, a: &Attributes) -> Result<Box<dyn pq::PrivateKey>> {
    f.private_key(parameter_set(a)?, a.get(CKA_SEED), a.get(CKA_VALUE))
}

fn pq_public(f: &dyn pq::Family, a: &Attributes) -> Result<Box<dyn pq::PublicKey>> {
    let Some(value) = a.get(CKA_VALUE) else {
        return fail_because(CKR_TEMPLATE_INCOMPLETE, "CKA_VALUE is required");
    };
    f.public_key(parameter_set(a)?, value)
}

/// Checks a post-quantum key's material and completes it: a private key gets every form the
/// family stores (an ML-DSA seed its expanded key), both get `CKA_PUBLIC_KEY_INFO`.
fn derive_pq_attributes(f: &dyn pq::Family, a: &mut Attributes, class: CK_OBJECT_CLASS) -> Result<()> {
    let public = if class == CKO_PRIVATE_KEY {
        let key = pq_private(f, a)?;
        for (t, v) in key.material() {
            a.set_zeroizing(t, v);
        }
        key.public()
    } else {
        Arc::from(pq_public(f, a)?)
    };
    a.set(CKA_PUBLIC_KEY_INFO, public.public_key_info());
    Ok(())
}

/// Checks the key material of a new object and fills what the token derives from it
/// (`CKA_MODULUS_BITS`, `CKA_PUBLIC_KEY_INFO`, `CKA_VALUE_LEN`, `CKA_CHECK_VALUE`, the
/// normalised EC encodings).
pub fn derive_key_attributes(a: &mut Attributes) -> Result<()> {
    if let (Some(class @ (CKO_PUBLIC_KEY | CKO_PRIVATE_KEY)), Some(f)) =
        (a.class(), a.key_type().and_then(pq::family))
    {
        return derive_pq_attributes(f, a, class);
    }
    match (a.class(), a.key_type()) {
        (Some(class @ (CKO_PUBLIC_KEY | CKO_PRIVATE_KEY)), Some(CKK_EC | CKK_EC_EDWARDS)) => {
            derive_ec_attributes(a, class)?;
        }
        (Some(class @ (CKO_PUBLIC_KEY | CKO_PRIVATE_KEY)), Some(CKK_RSA)) => {
            let n = a.get(CKA_MODULUS).unwrap_or(&[]).to_vec();
            let e = a.get(CKA_PUBLIC_EXPONENT).unwrap_or(&[]).to_vec();
            let public = PublicKey::new(&n, &e).map_err(|err| {
                log::info!("RSA key rejected: {err}");
                Error(CKR_ATTRIBUTE_VALUE_INVALID)
            })?;
            if class == CKO_PRIVATE_KEY {
                let c = rsa_components(a);
                let full = !c.prime_1.is_empty() && !c.prime_2.is_empty();
                if !full {
                    return fail_because(
                        CKR_TEMPLATE_INCOMPLETE,
                        "RSA private keys need CKA_PRIME_1 and CKA_PRIME_2",
                    );
                }
                // n = p·q, d·e ≡ 1 and the CRT parts are all checked here, once.
                let key = PreparedKey::new(&c).map_err(|err| {
                    log::info!("RSA private key rejected: {err}");
                    Error(CKR_TEMPLATE_INCONSISTENT)
                })?;
                let full = engine::full_components(&key);
                a.set(CKA_EXPONENT_1, full.exponent_1.to_vec());
                a.set(CKA_EXPONENT_2, full.exponent_2.to_vec());
                a.set(CKA_COEFFICIENT, full.coefficient.to_vec());
            } else {
                let bits = public.modulus_bits() as CK_ULONG;
                if a.ulong(CKA_MODULUS_BITS).is_some_and(|b| b != bits) {
                    return fail_because(
                        CKR_TEMPLATE_INCONSISTENT,
                        "CKA_MODULUS_BITS does not match CKA_MODULUS",
                    );
                }
                a.set_ulong(CKA_MODULUS_BITS, bits);
            }
            if let Some(spki) = engine::public_key_info(&n, &e) {
                a.set(CKA_PUBLIC_KEY_INFO, spki);
            }
        }
        (Some(CKO_SECRET_KEY), Some(kt)) => {
            let len = a.get(CKA_VALUE).map_or(0, |v| v.len());
            if kt == CKK_AES && ![16, 24, 32].contains(&len) {
                return fail_because(
                    CKR_ATTRIBUTE_VALUE_INVALID,
                    format!("an AES key is 16, 24 or 32 bytes, not {len}"),
                );
            }
            if len == 0 {
                return fail_because(CKR_ATTRIBUTE_VALUE_INVALID, "a secret key cannot be empty");
            }
            if a.ulong(CKA_VALUE_LEN).is_some_and(|l| l as usize != len) {
                return fail_because(
                    CKR_TEMPLATE_INCONSISTENT,
                    "CKA_VALUE_LEN does not match CKA_VALUE",
                );
            }
            a.set_ulong(CKA_VALUE_LEN, len as CK_ULONG);
            if kt == CKK_AES {
                let value = a.get(CKA_VALUE).unwrap_or(&[]).to_vec();
                a.set(CKA_CHECK_VALUE, crate::mechanism::aes::wrap::check_value(&value));
            } else {
                a.set(CKA_CHECK_VALUE, vec![]);
            }
        }
        _ => {}
    }
    Ok(())
}
