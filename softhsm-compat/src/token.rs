//! A SoftHSM v2 token directory (file backend): `token.object` and one `.object` file per
//! object, every number 8 bytes big-endian, records `type, kind, value`.

use crate::crypt;
use crate::Error;
use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

const VENDOR_SOFTHSM: u64 = 0x8000_5348;
const TOKEN_LABEL: u64 = VENDOR_SOFTHSM + 1;
const TOKEN_SERIAL: u64 = VENDOR_SOFTHSM + 2;
const TOKEN_FLAGS: u64 = VENDOR_SOFTHSM + 3;
const SO_PIN_BLOB: u64 = VENDOR_SOFTHSM + 4;
const USER_PIN_BLOB: u64 = VENDOR_SOFTHSM + 5;
const CKA_PRIVATE: u64 = 0x0002;

/// An attribute value in SoftHSM's kinds.
#[derive(Clone, PartialEq, Eq)]
pub enum Value {
    Bool(bool),
    Ulong(u64),
    Bytes(Zeroizing<Vec<u8>>),
    /// An attribute template (`CKA_WRAP_TEMPLATE`, ...): nested attributes.
    Map(Vec<Attr>),
    MechSet(Vec<u64>),
}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "Bool({b})"),
            Value::Ulong(u) => write!(f, "Ulong({u})"),
            Value::Bytes(b) => write!(f, "Bytes({} bytes)", b.len()),
            Value::Map(m) => write!(f, "Map({} attributes)", m.len()),
            Value::MechSet(m) => write!(f, "MechSet({m:?})"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    /// The nested attribute's type (`CKA_*`).
    pub attr_type: u64,
    pub value: Value,
}

/// One object file, attributes in file order (type, value).
#[derive(Debug, Clone)]
pub struct SoftObject {
    pub file: PathBuf,
    pub generation: u64,
    pub attrs: Vec<(u64, Value)>,
}

impl SoftObject {
    pub fn get(&self, t: u64) -> Option<&Value> {
        self.attrs.iter().find(|(x, _)| *x == t).map(|(_, v)| v)
    }

    pub fn is_private(&self) -> bool {
        matches!(self.get(CKA_PRIVATE), Some(Value::Bool(true)))
    }
}

struct Reader<'a> {
    b: &'a [u8],
    file: &'a Path,
}

impl<'a> Reader<'a> {
    fn corrupt(&self, what: &str) -> Error {
        Error::Corrupt(format!(
            "{}: {what} (truncated or corrupt SoftHSM object file)",
            self.file.display()
        ))
    }

    fn ulong(&mut self) -> Result<u64, Error> {
        if self.b.len() < 8 {
            return Err(self.corrupt("a number is cut short"));
        }
        let v = u64::from_be_bytes(self.b[..8].try_into().expect("8 bytes"));
        self.b = &self.b[8..];
        Ok(v)
    }

    fn bytes(&mut self, n: u64) -> Result<&'a [u8], Error> {
        let n = usize::try_from(n).map_err(|_| self.corrupt("a length is out of range"))?;
        if self.b.len() < n {
            return Err(self.corrupt("a value is cut short"));
        }
        let (v, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(v)
    }

    fn value(&mut self, kind: u64) -> Result<Value, Error> {
        Ok(match kind {
            1 => Value::Bool(self.bytes(1)?[0] != 0),
            2 => Value::Ulong(self.ulong()?),
            3 => {
                let n = self.ulong()?;
                Value::Bytes(Zeroizing::new(self.bytes(n)?.to_vec()))
            }
            4 => {
                let n = self.ulong()?;
                let file = self.file;
                let inner = self.bytes(n)?;
                let mut r = Reader { b: inner, file };
                let mut attrs = vec![];
                while !r.b.is_empty() {
                    // Each entry: attribute type, value kind, value.
                    let t = r.ulong()?;
                    let k = r.ulong()?;
                    attrs.push(Attr {
                        attr_type: t,
                        value: r.value(k)?,
                    });
                }
                Value::Map(attrs)
            }
            5 => {
                let n = self.ulong()?;
                if n > 4096 {
                    return Err(self.corrupt("a mechanism set is too long"));
                }
                Value::MechSet((0..n).map(|_| self.ulong()).collect::<Result<_, _>>()?)
            }
            k => return Err(self.corrupt(&format!("unknown attribute kind {k}"))),
        })
    }
}

/// Parses an object file (also `token.object`).
pub fn parse_object(file: &Path) -> Result<SoftObject, Error> {
    let data = std::fs::read(file).map_err(|e| Error::Io(format!("cannot read {}: {e}", file.display())))?;
    if data.is_empty() {
        return Err(Error::InProgress(file.display().to_string()));
    }
    let mut r = Reader { b: &data, file };
    let generation = r.ulong()?;
    let mut attrs = vec![];
    while !r.b.is_empty() {
        let t = r.ulong()?;
        let kind = r.ulong()?;
        attrs.push((t, r.value(kind)?));
    }
    Ok(SoftObject {
        file: file.to_path_buf(),
        generation,
        attrs,
    })
}

/// A token directory with its metadata and object files.
#[derive(Debug)]
pub struct SoftToken {
    pub dir: PathBuf,
    pub label: String,
    pub serial: String,
    pub flags: u64,
    so_blob: Vec<u8>,
    user_blob: Option<Vec<u8>>,
    /// Object files, sorted by name; each parsed or the reason it could not be.
    pub objects: Vec<Result<SoftObject, Error>>,
}

fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::Bytes(b)) => String::from_utf8_lossy(b).trim_end().to_string(),
        _ => String::new(),
    }
}

impl SoftToken {
    pub fn open(dir: &Path) -> Result<SoftToken, Error> {
        let meta = parse_object(&dir.join("token.object"))?;
        let blob = |t| match meta.get(t) {
            Some(Value::Bytes(b)) if !b.is_empty() => Some(b.to_vec()),
            _ => None,
        };
        let so_blob = blob(SO_PIN_BLOB)
            .ok_or_else(|| Error::Corrupt(format!("{}: token.object has no SO PIN", dir.display())))?;
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| Error::Io(format!("cannot read {}: {e}", dir.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension().is_some_and(|x| x == "object")
                    && p.file_name().is_some_and(|n| n != "token.object")
            })
            .collect();
        files.sort();
        Ok(SoftToken {
            dir: dir.to_path_buf(),
            label: text(meta.get(TOKEN_LABEL)),
            serial: text(meta.get(TOKEN_SERIAL)),
            flags: match meta.get(TOKEN_FLAGS) {
                Some(Value::Ulong(f)) => *f,
                _ => 0,
            },
            so_blob,
            user_blob: blob(USER_PIN_BLOB),
            objects: files.iter().map(|f| parse_object(f)).collect(),
        })
    }

    /// Every token directory under `tokendir`.
    pub fn all(tokendir: &Path) -> Result<Vec<SoftToken>, Error> {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(tokendir)
            .map_err(|e| Error::NotFound(format!("SoftHSM token directory {}: {e}", tokendir.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("token.object").exists())
            .collect();
        dirs.sort();
        dirs.iter().map(|d| SoftToken::open(d)).collect()
    }

    /// The master key, opened with the user PIN or (`so`) the SO PIN.
    pub fn master_key(&self, pin: &[u8], so: bool) -> Result<Zeroizing<[u8; 32]>, Error> {
        let blob = if so {
            Some(&self.so_blob)
        } else {
            self.user_blob.as_ref()
        };
        crypt::open_pin_blob(blob.ok_or(Error::NoUserPin)?, pin)
    }

    pub fn has_user_pin(&self) -> bool {
        self.user_blob.is_some()
    }

    /// An object with its private byte attributes decrypted under `master`.
    pub fn decrypt(obj: &SoftObject, master: &[u8; 32]) -> Result<SoftObject, Error> {
        if !obj.is_private() {
            return Ok(obj.clone());
        }
        let mut out = obj.clone();
        for (t, v) in out.attrs.iter_mut() {
            if let Value::Bytes(b) = v {
                if b.is_empty() {
                    continue;
                }
                let plain = crypt::decrypt_attribute(master, b).ok_or_else(|| {
                    Error::Corrupt(format!(
                        "{}: attribute 0x{t:x} does not decrypt (wrong PIN or damaged file)",
                        obj.file.display()
                    ))
                })?;
                *v = Value::Bytes(plain);
            }
        }
        Ok(out)
    }
}
