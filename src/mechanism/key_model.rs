//! The seam every asymmetric key type sits behind: `KeyModel`, what a family says about the key
//! objects of its key type (the attributes of its public and private objects, which of them a
//! new object must have and which are secret, how they are checked and completed, the usable
//! key made of them, key pair generation with its pairwise consistency test, PKCS#8 for wrap
//! and unwrap). A family hands its model out with `Family::key_model`; `key_model` finds the
//! model of a key type among `REGISTRY`'s families. The token runs one generic path over it
//! and keeps the rules that hold for every key type (`token::policy`). Secret key types are
//! described by a value, `SecretKeyType` (the lengths of their values, their check value),
//! which a family lists with `Family::secret_key_types`; the shortest secret of every type is
//! this file's rule (`MIN_SECRET_LEN`, `check_secret_len`).

use crate::attributes::Attributes;
use crate::error::{fail_because, Result};
use cryptoki_sys::*;
use std::any::Any;
use std::sync::Arc;
use zeroize::Zeroizing;

/// A key in the usable form its model made once per object, which its family takes back with
/// `Key::private`/`Key::public` (an RSA `PreparedKey`, an `ec::PrivateKey`, ...).
pub type UsableKey = Arc<dyn Any + Send + Sync>;

/// The key-material attributes of a PKCS#8 private key, as `C_CreateObject` would take them.
pub type Material = Vec<(CK_ATTRIBUTE_TYPE, Zeroizing<Vec<u8>>)>;

/// The key objects of one asymmetric key type.
pub trait KeyModel: Sync {
    /// The key type's name, for log lines.
    fn name(&self) -> &'static str;
    fn key_type(&self) -> CK_KEY_TYPE;
    /// The key-material attributes an object of `class` (`CKO_PUBLIC_KEY` or
    /// `CKO_PRIVATE_KEY`) may carry, beyond those every key of its class has.
    fn attributes(&self, class: CK_OBJECT_CLASS) -> &'static [CK_ATTRIBUTE_TYPE];
    /// Those a new object of `class` must be given or generated with (the rest of what the key
    /// needs is checked by `complete`).
    fn required(&self, class: CK_OBJECT_CLASS) -> &'static [CK_ATTRIBUTE_TYPE];
    /// The private key's secret attributes: never revealed while the key is sensitive or
    /// unextractable, nor compared by a search.
    fn secret(&self) -> &'static [CK_ATTRIBUTE_TYPE];
    /// Whether the key signs and verifies only: then the flags of what it cannot do
    /// (`CKA_ENCRYPT`, `CKA_DECRYPT`, `CKA_WRAP`, ...) default to false, so an application
    /// choosing a key by them does not pick one.
    fn signs_only(&self) -> bool;
    /// Checks the key material of a new object of `class` and fills what the token derives
    /// from it (`CKA_PUBLIC_KEY_INFO`, normalised encodings, missing CRT parts, ...).
    fn complete(&self, a: &mut Attributes, class: CK_OBJECT_CLASS) -> Result<()>;
    /// The private key of a private key object, in the family's usable form.
    fn private_key(&self, a: &Attributes) -> Result<UsableKey>;
    /// The public key of a public or a private key object, in the family's usable form.
    fn public_key(&self, a: &Attributes) -> Result<UsableKey>;
    /// Reads the key pair's parameters from `C_GenerateKeyPair`'s two templates (modulus
    /// bits, curve, parameter set), refuses key material in them, and leaves the parameters
    /// on both as the objects will have them. Runs before the templates' other checks, and
    /// before seconds are spent making the key.
    fn check_generation(&self, public: &mut Attributes, private: &mut Attributes) -> Result<()>;
    /// Makes a key pair of the parameters `check_generation` left, passes its pairwise
    /// consistency test, and puts its material into the two templates.
    fn generate(&self, public: &mut Attributes, private: &mut Attributes) -> Result<()>;
    /// The PKCS#8 `PrivateKeyInfo` DER of a private key object (`C_WrapKey`).
    fn to_pkcs8(&self, a: &Attributes) -> Result<Zeroizing<Vec<u8>>>;
    /// The key material of a PKCS#8 `PrivateKeyInfo`: `None` when it is not one of this key
    /// type's, an error when it is one but unreadable (`C_UnwrapKey`).
    fn read_pkcs8(&self, der: &[u8]) -> Option<Result<Material>>;
    /// Bytes the usable forms of an object of `class` hold once made, for the bound on the
    /// object cache.
    fn footprint(&self, a: &Attributes, class: CK_OBJECT_CLASS) -> usize;
}

/// The model of key type `kt`, from the families of `REGISTRY`.
pub fn key_model(kt: CK_KEY_TYPE) -> Option<&'static dyn KeyModel> {
    key_models().find(|m| m.key_type() == kt)
}

/// Every key model of `REGISTRY`'s families, in its order.
pub fn key_models() -> impl Iterator<Item = &'static dyn KeyModel> {
    super::REGISTRY.iter().filter_map(|f| f.key_model())
}

/// Refuses key material in a key generation template (`check_generation`): the token makes it.
pub fn refuse_material(
    public: &Attributes,
    private: &Attributes,
    material: &[CK_ATTRIBUTE_TYPE],
) -> Result<()> {
    if material
        .iter()
        .any(|t| public.contains(*t) || private.contains(*t))
    {
        return fail_because(
            CKR_TEMPLATE_INCONSISTENT,
            "key material cannot be given to C_GenerateKeyPair",
        );
    }
    Ok(())
}

/// The one value of `t` the two generation templates give (the public template's when only
/// it has one, the private's otherwise), set on both; `name` is the attribute's, for the
/// errors.
pub fn shared_parameter(
    public: &mut Attributes,
    private: &mut Attributes,
    t: CK_ATTRIBUTE_TYPE,
    name: &str,
) -> Result<()> {
    let v = match (public.get(t), private.get(t)) {
        (Some(p), Some(q)) if p != q => {
            return fail_because(
                CKR_TEMPLATE_INCONSISTENT,
                format!("the two templates give different values of {name}"),
            )
        }
        (Some(p), _) | (None, Some(p)) => p.to_vec(),
        (None, None) => return fail_because(CKR_TEMPLATE_INCOMPLETE, format!("{name} is required")),
    };
    public.set(t, v.clone());
    private.set(t, v);
    Ok(())
}

/// The shortest secret key value the token makes, takes or uses: 14 bytes, the 112 bits
/// NIST SP 800-131A asks of a key. A shorter secret is no secret however it is kept: one HMAC
/// output, or the hash `C_DigestKey` gives, finds it offline by trying every value (65,536
/// tries for two bytes). `C_GetMechanismInfo` says so for `CKM_GENERIC_SECRET_KEY_GEN` and the
/// HMAC mechanisms.
pub const MIN_SECRET_LEN: usize = 14;

/// Refuses a secret key value of `len` bytes shorter than `MIN_SECRET_LEN`, `name` naming its
/// key type for the log line, with `CKR_KEY_SIZE_RANGE` on every path (create, generate,
/// unwrap, derive, use). Not `CKR_ATTRIBUTE_VALUE_INVALID`: PKCS#11 3.0 §4.1.1 keeps that for
/// values the specification makes invalid (a 20-byte AES key, which `SecretKeyType::check_len`
/// refuses so), and a 13-byte generic secret is a valid one; what refuses it is this token's
/// range of key sizes, which is `CKR_KEY_SIZE_RANGE`'s definition (§5.1.6) and the range
/// `C_GetMechanismInfo` gives. `C_DeriveKey` lists the code; `C_CreateObject` and
/// `C_UnwrapKey` do not, but §5.1 says the lists are not exhaustive and asks applications to
/// take any error as one, and one code for one cause on every path is what an application can
/// act on.
pub fn check_secret_len(len: usize, name: &str) -> Result<()> {
    if len < MIN_SECRET_LEN {
        return fail_because(
            CKR_KEY_SIZE_RANGE,
            format!(
                "a {name} key of {len} bytes is too short: the token takes secret keys of {MIN_SECRET_LEN} bytes (112 bits) or more, as one MAC or digest of a shorter one finds it by trying every value; use a longer key"
            ),
        );
    }
    Ok(())
}

/// How a secret key type computes `CKA_CHECK_VALUE` from a value.
pub type CheckValue = fn(&[u8]) -> Vec<u8>;

/// A secret key type a family owns (`Family::secret_key_types`): the lengths its values may
/// have and its `CKA_CHECK_VALUE`. The rest of a secret key object is the same for every type
/// (`token::policy`).
pub struct SecretKeyType {
    pub key_type: CK_KEY_TYPE,
    pub name: &'static str,
    /// The lengths in bytes PKCS#11 allows a value; empty for any non-empty value, of which
    /// the token takes `MIN_SECRET_LEN` bytes or more.
    pub lengths: &'static [usize],
    /// The longest value key generation makes, where `lengths` is empty.
    pub max_generated: usize,
    /// `CKA_CHECK_VALUE` of a value; `None` where the type defines none (it is empty then).
    pub check_value: Option<CheckValue>,
}

impl SecretKeyType {
    /// Whether a value of `len` bytes may be a key of this type: one of its lengths
    /// (`CKR_ATTRIBUTE_VALUE_INVALID` otherwise), and not shorter than `MIN_SECRET_LEN`
    /// (`check_secret_len`). Every new secret key object passes here (`C_CreateObject`,
    /// generation, unwrap, derivation: `object::derive_key_attributes`).
    pub fn check_len(&self, len: usize) -> Result<()> {
        let ok = match self.lengths {
            [] => len > 0,
            lengths => lengths.contains(&len),
        };
        if !ok {
            return fail_because(
                CKR_ATTRIBUTE_VALUE_INVALID,
                format!("{len} bytes is not a length of {} keys", self.name),
            );
        }
        check_secret_len(len, self.name)
    }

    /// Whether key generation makes a value of `len` bytes (`CKA_VALUE_LEN` of
    /// `C_GenerateKey`'s template), checked before the value is made: a length of the type
    /// from `MIN_SECRET_LEN` to `max_generated`, else `CKR_KEY_SIZE_RANGE`.
    pub fn check_generated_len(&self, len: usize) -> Result<()> {
        let ok = match self.lengths {
            [] => (MIN_SECRET_LEN..=self.max_generated).contains(&len),
            lengths => lengths.contains(&len),
        };
        if !ok {
            return fail_because(
                CKR_KEY_SIZE_RANGE,
                format!(
                    "CKA_VALUE_LEN {len}: {} keys are generated {}",
                    self.name,
                    self.generated_lengths()
                ),
            );
        }
        Ok(())
    }

    /// The lengths `check_generated_len` takes, in words, for its error.
    fn generated_lengths(&self) -> String {
        match self.lengths {
            [] => format!("{MIN_SECRET_LEN} to {} bytes long", self.max_generated),
            lengths => format!("{lengths:?} bytes long"),
        }
    }

    /// `CKA_CHECK_VALUE` of `value`.
    pub fn check_value(&self, value: &[u8]) -> Vec<u8> {
        self.check_value.map_or_else(Vec::new, |f| f(value))
    }
}

/// The description of secret key type `kt`, from the families of `REGISTRY`.
pub fn secret_key_type(kt: CK_KEY_TYPE) -> Option<&'static SecretKeyType> {
    super::REGISTRY
        .iter()
        .flat_map(|f| f.secret_key_types())
        .find(|t| t.key_type == kt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mechanism::REGISTRY;

    /// One model per key type, one description per secret key type, and a model or a
    /// description for every key type a family's mechanism generates.
    #[test]
    fn every_key_type_is_described_once_and_every_generated_one_is_described() {
        let models: Vec<CK_KEY_TYPE> = key_models().map(|m| m.key_type()).collect();
        let secrets: Vec<CK_KEY_TYPE> = REGISTRY
            .iter()
            .flat_map(|f| f.secret_key_types())
            .map(|t| t.key_type)
            .collect();
        for kt in models.iter().chain(&secrets) {
            let n = models.iter().chain(&secrets).filter(|k| *k == kt).count();
            assert_eq!(n, 1, "key type 0x{kt:x} is described {n} times");
        }
        for &(t, info) in crate::mechanism::mechanism_list() {
            if info.flags & (CKF_GENERATE | CKF_GENERATE_KEY_PAIR) == 0 {
                continue;
            }
            let (family, _) = crate::mechanism::find(t).unwrap();
            let m =
                crate::mechanism::Mechanism::parse(family, t, crate::mechanism::Param::Length(0)).unwrap();
            match family.generates(&m) {
                Some(crate::mechanism::Generates::KeyPair(kt)) => {
                    assert!(
                        key_model(kt).is_some(),
                        "0x{t:x} makes 0x{kt:x}, which has no model"
                    )
                }
                Some(crate::mechanism::Generates::SecretKey(kt)) => assert!(
                    secret_key_type(kt).is_some(),
                    "0x{t:x} makes 0x{kt:x}, which is not described"
                ),
                None => panic!("0x{t:x} is offered for generation and generates nothing"),
            }
        }
    }

    #[test]
    fn secret_key_lengths() {
        let aes = secret_key_type(CKK_AES).unwrap();
        assert!(aes.check_len(24).is_ok());
        assert_eq!(aes.check_len(20).unwrap_err().0, CKR_ATTRIBUTE_VALUE_INVALID);
        assert_eq!(aes.check_generated_len(0).unwrap_err().0, CKR_KEY_SIZE_RANGE);
        let generic = secret_key_type(CKK_GENERIC_SECRET).unwrap();
        assert!(generic.check_len(1000).is_ok());
        assert_eq!(generic.check_len(0).unwrap_err().0, CKR_ATTRIBUTE_VALUE_INVALID);
        assert!(generic.check_generated_len(512).is_ok());
        assert_eq!(
            generic.check_generated_len(513).unwrap_err().0,
            CKR_KEY_SIZE_RANGE
        );
        assert!(generic.check_value(b"k").is_empty());
        assert_eq!(aes.check_value(&[0; 16]).len(), 3);
    }

    /// Every secret key type takes `MIN_SECRET_LEN` bytes and more and nothing shorter, from
    /// every path: the lengths a type may have never go below the minimum, and the types of
    /// any length stop exactly at it.
    #[test]
    fn no_secret_key_type_takes_a_value_shorter_than_the_minimum() {
        let types = REGISTRY.iter().flat_map(|f| f.secret_key_types());
        for st in types {
            for len in [1, 2, MIN_SECRET_LEN - 1] {
                assert!(st.check_len(len).is_err(), "{}: {len} bytes", st.name);
                assert_eq!(
                    st.check_generated_len(len).unwrap_err().0,
                    CKR_KEY_SIZE_RANGE,
                    "{}: {len} bytes generated",
                    st.name
                );
            }
            assert!(
                st.lengths.iter().all(|l| *l >= MIN_SECRET_LEN),
                "{}: {:?}",
                st.name,
                st.lengths
            );
            if st.lengths.is_empty() {
                assert_eq!(
                    st.check_len(MIN_SECRET_LEN - 1).unwrap_err().0,
                    CKR_KEY_SIZE_RANGE,
                    "{}",
                    st.name
                );
                assert!(st.check_len(MIN_SECRET_LEN).is_ok(), "{}", st.name);
                assert!(st.check_generated_len(MIN_SECRET_LEN).is_ok(), "{}", st.name);
            }
        }
    }
}
