//! A fuzzer of the C ABI: random calls through the real function list with NULLs, short and
//! huge lengths, stale and foreign handles, random mechanisms, parameters and templates.
//!
//! The calls run in child processes (this test binary run again) so that a crash is seen as
//! one, under a watchdog so that a hang is seen as one. Besides crashes and hangs, oracles
//! check that the forbidden never returns `CKR_OK`: reading secret attributes of protected
//! keys, turning their protections off, wrapping a non-extractable key, signing with a key
//! whose CKA_SIGN is false, destroying an undestroyable object, copying an uncopyable one; and
//! that no output is written past the length the caller gave.
//!
//! `FERROHSM_FUZZ_SECONDS` bounds the run (default 5; CI gives more), `FERROHSM_FUZZ_SEED`
//! replays one (each child's seed is printed with any failure), `FERROHSM_FUZZ_TRACE=1`
//! prints every call before it is made (to find the call that crashed).

mod common;

use common::*;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, KeyType, ObjectClass};
use cryptoki_sys::*;
use std::ffi::c_void;
use std::process::{Command, Stdio};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

/// splitmix64: small, seedable, the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len() as u64) as usize]
    }
    /// One of `v`, or now and then any number at all.
    fn pick_or_any(&mut self, v: &[u64]) -> u64 {
        if self.chance(15) {
            self.next()
        } else {
            self.pick(v)
        }
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

const GUARD: u8 = 0xa5;
const GUARD_LEN: usize = 64;

/// An input buffer: its storage (kept alive), pointer and length as the call sees them.
struct In {
    _data: Vec<u8>,
    p: *mut u8,
    len: CK_ULONG,
}

/// An output buffer with a guard area after the length the caller claims.
struct Out {
    data: Vec<u8>,
    p: *mut u8,
    len: CK_ULONG,
    claimed: usize,
    lenp: bool,
}

impl Out {
    fn len_ptr(&mut self) -> *mut CK_ULONG {
        if self.lenp {
            &mut self.len
        } else {
            null_mut()
        }
    }
    /// Whether the module wrote past the claimed length.
    fn overrun(&self) -> bool {
        !self.p.is_null() && self.data[self.claimed..].iter().any(|b| *b != GUARD)
    }
}

/// A random template's storage and the array the call sees.
struct Template {
    _values: Vec<Vec<u8>>,
    attrs: Vec<CK_ATTRIBUTE>,
    null_with_count: bool,
}

impl Template {
    fn ptr(&mut self) -> *mut CK_ATTRIBUTE {
        if self.null_with_count {
            null_mut()
        } else {
            self.attrs.as_mut_ptr()
        }
    }
    fn count(&self) -> CK_ULONG {
        self.attrs.len() as CK_ULONG
    }
    /// The (type, value) pairs as given; `None` for a NULL value.
    fn pairs(&self) -> Vec<(CK_ATTRIBUTE_TYPE, Option<Vec<u8>>)> {
        self.attrs
            .iter()
            .map(|a| {
                let v = (!a.pValue.is_null()).then(|| {
                    // SAFETY: our own storage, `ulValueLen` bytes long.
                    unsafe { std::slice::from_raw_parts(a.pValue as *const u8, a.ulValueLen as usize) }
                        .to_vec()
                });
                (a.type_, v)
            })
            .collect()
    }
}

/// A mechanism with its parameter storage.
struct Mech {
    _param: Vec<u8>,
    _label: Vec<u8>,
    m: CK_MECHANISM,
}

const SECRET_ATTRS: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_VALUE,
    CKA_PRIVATE_EXPONENT,
    CKA_PRIME_1,
    CKA_PRIME_2,
    CKA_EXPONENT_1,
    CKA_EXPONENT_2,
    CKA_COEFFICIENT,
];

const ATTR_TYPES: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_CLASS,
    CKA_TOKEN,
    CKA_PRIVATE,
    CKA_LABEL,
    CKA_ID,
    CKA_VALUE,
    CKA_VALUE_LEN,
    CKA_KEY_TYPE,
    CKA_SENSITIVE,
    CKA_EXTRACTABLE,
    CKA_COPYABLE,
    CKA_DESTROYABLE,
    CKA_MODIFIABLE,
    CKA_SIGN,
    CKA_VERIFY,
    CKA_ENCRYPT,
    CKA_DECRYPT,
    CKA_WRAP,
    CKA_UNWRAP,
    CKA_DERIVE,
    CKA_TRUSTED,
    CKA_WRAP_WITH_TRUSTED,
    CKA_ALWAYS_AUTHENTICATE,
    CKA_ALLOWED_MECHANISMS,
    CKA_MODULUS,
    CKA_MODULUS_BITS,
    CKA_PUBLIC_EXPONENT,
    CKA_PRIVATE_EXPONENT,
    CKA_PRIME_1,
    CKA_PRIME_2,
    CKA_EXPONENT_1,
    CKA_EXPONENT_2,
    CKA_COEFFICIENT,
    CKA_PUBLIC_KEY_INFO,
    CKA_APPLICATION,
    CKA_OBJECT_ID,
    CKA_LOCAL,
    CKA_NEVER_EXTRACTABLE,
    CKA_ALWAYS_SENSITIVE,
    CKA_VENDOR_DEFINED,
];

const MECHS: &[CK_MECHANISM_TYPE] = &[
    CKM_RSA_PKCS_KEY_PAIR_GEN,
    CKM_RSA_PKCS,
    CKM_RSA_X_509,
    CKM_RSA_PKCS_OAEP,
    CKM_RSA_PKCS_PSS,
    CKM_SHA1_RSA_PKCS,
    CKM_SHA256_RSA_PKCS,
    CKM_SHA384_RSA_PKCS,
    CKM_SHA512_RSA_PKCS,
    CKM_SHA256_RSA_PKCS_PSS,
    CKM_SHA512_RSA_PKCS_PSS,
    CKM_SHA_1,
    CKM_SHA256,
    CKM_SHA512,
    CKM_MD5,
    CKM_AES_KEY_GEN,
    CKM_GENERIC_SECRET_KEY_GEN,
    CKM_AES_KEY_WRAP,
    CKM_AES_KEY_WRAP_PAD,
    CKM_AES_CBC,
];

/// Attribute values by type.
type Values = Vec<(CK_ATTRIBUTE_TYPE, Vec<u8>)>;

/// What the fuzzer knows of the token it set up.
struct World {
    r: Raw,
    sessions: Vec<CK_SESSION_HANDLE>,
    closed: Vec<CK_SESSION_HANDLE>,
    slots: Vec<CK_SLOT_ID>,
    objects: Vec<CK_OBJECT_HANDLE>,
    destroyed: Vec<CK_OBJECT_HANDLE>,
    foreign: Vec<CK_OBJECT_HANDLE>,
    /// Keys whose protections must hold, with the protection attributes' values at the start.
    protected: Vec<(CK_OBJECT_HANDLE, Values)>,
    /// Keys with CKA_SIGN false (and CKA_MODIFIABLE false, so it stays so).
    no_sign: Vec<CK_OBJECT_HANDLE>,
    /// The key of the signing operation each session started, if any.
    signing_with: std::collections::HashMap<CK_SESSION_HANDLE, CK_OBJECT_HANDLE>,
    calls: u64,
    trace: bool,
    /// How often each return value came back (printed, to see what the calls reach).
    rvs: std::cell::RefCell<std::collections::BTreeMap<CK_RV, u64>>,
}

const PROTECTIONS: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_SENSITIVE,
    CKA_EXTRACTABLE,
    CKA_COPYABLE,
    CKA_DESTROYABLE,
    CKA_MODIFIABLE,
];

/// A CK_BBOOL's truth: one byte, zero or not; `None` for any other length.
fn truth(v: &[u8]) -> Option<bool> {
    match v {
        [b] => Some(*b != 0),
        _ => None,
    }
}

/// A finding: what was called and what broke.
type Finding = String;

impl World {
    fn session(&self, g: &mut Rng) -> CK_SESSION_HANDLE {
        match g.below(20) {
            0 if !self.closed.is_empty() => g.pick(&self.closed),
            1 => g.next(),
            2 => 0,
            _ => g.pick(&self.sessions),
        }
    }

    fn object(&self, g: &mut Rng) -> CK_OBJECT_HANDLE {
        match g.below(20) {
            0 if !self.destroyed.is_empty() => g.pick(&self.destroyed),
            1 | 2 => g.pick(&self.foreign),
            3 => g.next(),
            4 => 0,
            5..=9 => self.protected[g.below(self.protected.len() as u64) as usize].0,
            _ => g.pick(&self.objects),
        }
    }

    fn input(&self, g: &mut Rng) -> In {
        match g.below(12) {
            0 => In {
                _data: vec![],
                p: null_mut(),
                len: 0,
            },
            1 => In {
                _data: vec![],
                p: null_mut(),
                len: g.pick(&[1, 16, CK_ULONG::MAX, 1 << 40]),
            },
            _ => {
                let n = g.pick(&[0usize, 1, 3, 16, 20, 32, 64, 100, 128, 255, 256, 300, 512, 513]);
                let mut data = g.bytes(n);
                let p = if n == 0 && g.chance(50) {
                    null_mut()
                } else {
                    data.as_mut_ptr()
                };
                In {
                    p,
                    len: n as CK_ULONG,
                    _data: data,
                }
            }
        }
    }

    fn output(&self, g: &mut Rng) -> Out {
        let claimed = g.pick(&[0usize, 1, 8, 20, 31, 32, 64, 127, 128, 255, 256, 511, 512, 1024]);
        let mut data = vec![GUARD; claimed + GUARD_LEN];
        let p = if g.chance(25) {
            null_mut()
        } else {
            data.as_mut_ptr()
        };
        Out {
            p,
            len: claimed as CK_ULONG,
            claimed,
            lenp: !g.chance(8),
            data,
        }
    }

    fn value(&self, g: &mut Rng) -> Vec<u8> {
        match g.below(8) {
            0 => vec![],
            1 | 2 => vec![g.pick(&[0u8, 1, 2, 0xff])],
            3 => (g.pick(&[0u64, 1, 2, 3, 4, 0x1f, 1024, 2048]) as CK_ULONG)
                .to_ne_bytes()
                .to_vec(),
            4 => vec![0, 1],
            _ => {
                let n = g.below(40) as usize;
                g.bytes(n)
            }
        }
    }

    fn template(&self, g: &mut Rng) -> Template {
        let n = g.below(7) as usize;
        let mut values = Vec::new();
        let mut attrs = Vec::new();
        for _ in 0..n {
            let t = if g.chance(90) {
                g.pick(ATTR_TYPES)
            } else {
                g.next()
            };
            let mut v = self.value(g);
            let (p, len) = match g.below(20) {
                0 => (null_mut(), 0),
                1 => (null_mut(), v.len().max(1) as CK_ULONG),
                _ => (v.as_mut_ptr() as *mut c_void, v.len() as CK_ULONG),
            };
            values.push(v);
            attrs.push(CK_ATTRIBUTE {
                type_: t,
                pValue: p,
                ulValueLen: len,
            });
        }
        Template {
            _values: values,
            attrs,
            null_with_count: n > 0 && g.chance(5),
        }
    }

    fn mechanism(&self, g: &mut Rng) -> Mech {
        let t = if g.chance(90) { g.pick(MECHS) } else { g.next() };
        let mut label = vec![];
        let mut param = match g.below(4) {
            0 | 1 => vec![],
            2 if t == CKM_RSA_PKCS_OAEP => {
                // Pointers inside parameters must be real: the caller's contract.
                let n = g.below(8) as usize;
                label = g.bytes(n);
                let p = CK_RSA_PKCS_OAEP_PARAMS {
                    hashAlg: g.pick_or_any(&[CKM_SHA_1, CKM_SHA256, CKM_SHA512, CKM_MD5]),
                    mgf: g.pick_or_any(&[CKG_MGF1_SHA1, CKG_MGF1_SHA256]),
                    source: g.pick_or_any(&[0, CKZ_DATA_SPECIFIED]),
                    pSourceData: if g.chance(30) {
                        null_mut()
                    } else {
                        label.as_mut_ptr() as *mut c_void
                    },
                    ulSourceDataLen: if g.chance(80) { label.len() as CK_ULONG } else { 0 },
                };
                // SAFETY: a plain C struct viewed as its bytes.
                unsafe { std::slice::from_raw_parts(&p as *const _ as *const u8, std::mem::size_of_val(&p)) }
                    .to_vec()
            }
            2 => {
                let p = CK_RSA_PKCS_PSS_PARAMS {
                    hashAlg: g.pick_or_any(&[CKM_SHA_1, CKM_SHA256, CKM_SHA512]),
                    mgf: g.pick_or_any(&[CKG_MGF1_SHA1, CKG_MGF1_SHA256, CKG_MGF1_SHA512]),
                    sLen: g.pick_or_any(&[0, 20, 32, 64, 1 << 20]),
                };
                // SAFETY: a plain C struct viewed as its bytes.
                unsafe { std::slice::from_raw_parts(&p as *const _ as *const u8, std::mem::size_of_val(&p)) }
                    .to_vec()
            }
            _ => {
                // Random bytes, never the size of a struct that holds pointers.
                let mut n = g.below(64) as usize;
                if n == std::mem::size_of::<CK_RSA_PKCS_OAEP_PARAMS>() {
                    n += 1;
                }
                g.bytes(n)
            }
        };
        let (p, len) = match g.below(12) {
            0 => (null_mut(), param.len().max(1) as CK_ULONG),
            _ if param.is_empty() => (null_mut(), 0),
            // Off by one on purpose, one way or the other (always within the storage).
            1 => (param.as_mut_ptr() as *mut c_void, (param.len() - 1) as CK_ULONG),
            _ => (param.as_mut_ptr() as *mut c_void, param.len() as CK_ULONG),
        };
        Mech {
            _param: param,
            _label: label,
            m: CK_MECHANISM {
                mechanism: t,
                pParameter: p,
                ulParameterLen: len,
            },
        }
    }

    fn is_protected(&self, h: CK_OBJECT_HANDLE) -> bool {
        self.protected.iter().any(|(p, _)| *p == h)
    }

    fn protection(&self, h: CK_OBJECT_HANDLE, t: CK_ATTRIBUTE_TYPE) -> Option<Vec<u8>> {
        let (_, attrs) = self.protected.iter().find(|(p, _)| *p == h)?;
        attrs.iter().find(|(a, _)| *a == t).map(|(_, v)| v.clone())
    }

    /// Reads one attribute; `None` unless the call succeeded.
    fn read(&self, s: CK_SESSION_HANDLE, h: CK_OBJECT_HANDLE, t: CK_ATTRIBUTE_TYPE) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 4096];
        let mut a = CK_ATTRIBUTE {
            type_: t,
            pValue: buf.as_mut_ptr() as *mut c_void,
            ulValueLen: buf.len() as CK_ULONG,
        };
        // SAFETY: one attribute with a 4096-byte buffer.
        let rv = unsafe { (self.r.f.C_GetAttributeValue.unwrap())(s, h, &mut a, 1) };
        (rv == CKR_OK).then(|| buf[..a.ulValueLen as usize].to_vec())
    }

    /// The protections of every protected key are what they were at the start.
    fn check_invariants(&self) -> Result<(), Finding> {
        let s = self.sessions[0];
        for (h, attrs) in &self.protected {
            for (t, v) in attrs {
                match self.read(s, *h, *t) {
                    Some(now) if truth(&now) != truth(v) => {
                        return Err(format!(
                            "protected key {h}: attribute 0x{t:x} is now {now:02x?}, was {v:02x?}"
                        ))
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// One random call and the oracles that apply to it.
    fn call(&mut self, g: &mut Rng) -> Result<(), Finding> {
        self.calls += 1;
        let f = self.r.f;
        let s = self.session(g);
        let kind = g.below(30);
        let what: String;
        macro_rules! trace {
            ($($a:tt)*) => {{
                what = format!($($a)*);
                if self.trace {
                    eprintln!("call {}: {what}", self.calls);
                }
            }};
        }
        macro_rules! finding {
            ($($a:tt)*) => {
                return Err(format!("call {}: {what}: {}", self.calls, format!($($a)*)))
            };
        }
        // SAFETY (every call below): the pointers given are NULL or point to live storage of
        // at least the length given with them: the fuzzer breaks the rules a module must
        // check, never the caller's memory contract it cannot.
        unsafe {
            match kind {
                0..=3 => {
                    let h = self.object(g);
                    let mut t = self.template(g);
                    // Reading needs buffers the module may fill: give each its claimed length.
                    let mut bufs: Vec<Vec<u8>> = Vec::new();
                    for a in t.attrs.iter_mut() {
                        let n = if g.chance(30) { 4096 } else { a.ulValueLen as usize };
                        let mut b = vec![GUARD; n + GUARD_LEN];
                        if !a.pValue.is_null() {
                            a.pValue = b.as_mut_ptr() as *mut c_void;
                            a.ulValueLen = n as CK_ULONG;
                        }
                        bufs.push(b);
                    }
                    if self.is_protected(h) && g.chance(50) {
                        // Ask for a secret: by length query or into a buffer of any size.
                        let n = g.pick(&[0usize, 1, 32, 4096]);
                        let mut b = vec![GUARD; n + GUARD_LEN];
                        t.attrs.push(CK_ATTRIBUTE {
                            type_: g.pick(SECRET_ATTRS),
                            pValue: if g.chance(40) {
                                null_mut()
                            } else {
                                b.as_mut_ptr() as *mut c_void
                            },
                            ulValueLen: n as CK_ULONG,
                        });
                        bufs.push(b);
                    }
                    let lens: Vec<CK_ULONG> = t.attrs.iter().map(|a| a.ulValueLen).collect();
                    trace!(
                        "C_GetAttributeValue({s}, {h}, {:x?})",
                        t.attrs
                            .iter()
                            .map(|a| (a.type_, a.ulValueLen))
                            .collect::<Vec<_>>()
                    );
                    let (p, n) = (t.ptr(), t.count());
                    let rv = (f.C_GetAttributeValue.unwrap())(s, h, p, n);
                    for (i, a) in t.attrs.iter().enumerate() {
                        if !a.pValue.is_null() && bufs[i][lens[i] as usize..].iter().any(|b| *b != GUARD) {
                            finding!("attribute 0x{:x}: written past its {} bytes", a.type_, lens[i]);
                        }
                        if self.is_protected(h) && SECRET_ATTRS.contains(&a.type_) && !p.is_null() {
                            if !a.pValue.is_null() && bufs[i].iter().any(|b| *b != GUARD) {
                                finding!(
                                    "secret attribute 0x{:x} of a protected key written out (rv 0x{rv:x})",
                                    a.type_
                                );
                            }
                            // The entries are answered only when the call got to them.
                            let answered = matches!(
                                rv,
                                CKR_OK
                                    | CKR_ATTRIBUTE_SENSITIVE
                                    | CKR_ATTRIBUTE_TYPE_INVALID
                                    | CKR_BUFFER_TOO_SMALL
                            );
                            if answered && a.ulValueLen != CK_UNAVAILABLE_INFORMATION {
                                finding!("secret attribute 0x{:x} of a protected key answered {} bytes (rv 0x{rv:x})", a.type_, a.ulValueLen);
                            }
                            if rv == CKR_OK {
                                finding!(
                                    "CKR_OK reading secret attribute 0x{:x} of a protected key",
                                    a.type_
                                );
                            }
                        }
                    }
                    self.general_error(rv, &what)?;
                }
                4..=6 => {
                    let h = if g.chance(60) {
                        self.protected[g.below(self.protected.len() as u64) as usize].0
                    } else {
                        self.object(g)
                    };
                    let mut t = self.template(g);
                    if g.chance(60) {
                        // Aim at a protection, with any value bytes.
                        let ty = g.pick(PROTECTIONS);
                        let mut v = self.value(g);
                        t.attrs.push(CK_ATTRIBUTE {
                            type_: ty,
                            pValue: v.as_mut_ptr() as *mut c_void,
                            ulValueLen: v.len() as CK_ULONG,
                        });
                        t._values.push(v);
                    }
                    trace!("C_SetAttributeValue({s}, {h}, {:02x?})", t.pairs());
                    let (p, n) = (t.ptr(), t.count());
                    let rv = (f.C_SetAttributeValue.unwrap())(s, h, p, n);
                    if rv == CKR_OK && self.is_protected(h) {
                        for (ty, v) in t.pairs() {
                            let Some(start) = self.protection(h, ty) else {
                                continue;
                            };
                            // Only the truth the key has, or SENSITIVE going true, may be
                            // accepted; a CK_BBOOL is one byte, any other length is invalid.
                            let v = v.unwrap_or_default();
                            let allowed = truth(&v) == truth(&start)
                                || (ty == CKA_SENSITIVE && truth(&v) == Some(true));
                            if !allowed {
                                finding!(
                                    "CKR_OK setting attribute 0x{ty:x} to {v:02x?} on a protected key that has {start:02x?}"
                                );
                            }
                        }
                    }
                    self.general_error(rv, &what)?;
                }
                7 => {
                    let h = if g.chance(50) {
                        self.protected[g.below(self.protected.len() as u64) as usize].0
                    } else {
                        self.object(g)
                    };
                    let mut t = self.template(g);
                    let mut o = 0;
                    trace!("C_CopyObject({s}, {h}, {:02x?})", t.pairs());
                    let (p, n) = (t.ptr(), t.count());
                    let rv = (f.C_CopyObject.unwrap())(s, h, p, n, &mut o);
                    if rv == CKR_OK {
                        if self.protection(h, CKA_COPYABLE) == Some(vec![0]) {
                            finding!("CKR_OK copying a key with CKA_COPYABLE false");
                        }
                        self.objects.push(o);
                    }
                    self.general_error(rv, &what)?;
                }
                8 => {
                    let h = self.object(g);
                    trace!("C_DestroyObject({s}, {h})");
                    let rv = (f.C_DestroyObject.unwrap())(s, h);
                    if rv == CKR_OK {
                        if self.protection(h, CKA_DESTROYABLE) == Some(vec![0]) {
                            finding!("CKR_OK destroying an object with CKA_DESTROYABLE false");
                        }
                        self.objects.retain(|o| *o != h);
                        if self.objects.is_empty() {
                            self.objects.push(g.next());
                        }
                        self.destroyed.push(h);
                    }
                    self.general_error(rv, &what)?;
                }
                9 | 10 => {
                    let mut t = self.template(g);
                    let mut o = 0;
                    let keygen = g.chance(50);
                    let mut m = self.mechanism(g);
                    if keygen && g.chance(70) {
                        m.m.mechanism = g.pick(&[CKM_AES_KEY_GEN, CKM_GENERIC_SECRET_KEY_GEN]);
                    }
                    trace!(
                        "{}({s}, 0x{:x}, {:02x?})",
                        if keygen { "C_GenerateKey" } else { "C_CreateObject" },
                        m.m.mechanism,
                        t.pairs()
                    );
                    let (p, n) = (t.ptr(), t.count());
                    let rv = if keygen {
                        (f.C_GenerateKey.unwrap())(s, &mut m.m, p, n, &mut o)
                    } else {
                        (f.C_CreateObject.unwrap())(s, p, n, &mut o)
                    };
                    if rv == CKR_OK {
                        self.objects.push(o);
                    }
                    self.general_error(rv, &what)?;
                }
                11 => {
                    let mut t = self.template(g);
                    trace!(
                        "C_FindObjectsInit({s}, {:02x?}) + C_FindObjects + Final",
                        t.pairs()
                    );
                    let (p, n) = (t.ptr(), t.count());
                    let rv = (f.C_FindObjectsInit.unwrap())(s, p, n);
                    self.general_error(rv, &what)?;
                    let max = g.pick(&[0usize, 1, 3, 100]);
                    let mut found = vec![0 as CK_OBJECT_HANDLE; max + 4];
                    let mut count = 0;
                    let hp = if max == 0 && g.chance(50) {
                        null_mut()
                    } else {
                        found.as_mut_ptr()
                    };
                    let rv = (f.C_FindObjects.unwrap())(s, hp, max as CK_ULONG, &mut count);
                    if found[max..].iter().any(|x| *x != 0) || count as usize > max {
                        finding!("C_FindObjects wrote past its {max} handles");
                    }
                    self.general_error(rv, &what)?;
                    if g.chance(80) {
                        (f.C_FindObjectsFinal.unwrap())(s);
                    }
                }
                12..=15 => {
                    // Sign or verify: an init, then a few random steps.
                    let sign = kind <= 13;
                    let h = if sign && g.chance(40) {
                        g.pick(&self.no_sign)
                    } else {
                        self.object(g)
                    };
                    let mut m = self.mechanism(g);
                    trace!(
                        "C_{}Init({s}, 0x{:x}, {h})",
                        if sign { "Sign" } else { "Verify" },
                        m.m.mechanism
                    );
                    let mp = if g.chance(3) {
                        null_mut()
                    } else {
                        &mut m.m as *mut _
                    };
                    let rv = if sign {
                        (f.C_SignInit.unwrap())(s, mp, h)
                    } else {
                        (f.C_VerifyInit.unwrap())(s, mp, h)
                    };
                    if sign && rv == CKR_OK {
                        if self.no_sign.contains(&h) {
                            finding!("CKR_OK from C_SignInit with a key whose CKA_SIGN is false");
                        }
                        self.signing_with.insert(s, h);
                    }
                    self.general_error(rv, &what)?;
                    for _ in 0..g.below(4) {
                        self.step(g, s, sign)?;
                    }
                }
                16..=18 => {
                    // Encrypt, decrypt or digest, one-shot with random buffers.
                    let h = self.object(g);
                    let mut m = self.mechanism(g);
                    let which = kind - 16;
                    trace!("init {which} ({s}, 0x{:x}, {h}) + one-shot", m.m.mechanism);
                    let rv = match which {
                        0 => (f.C_EncryptInit.unwrap())(s, &mut m.m, h),
                        1 => (f.C_DecryptInit.unwrap())(s, &mut m.m, h),
                        _ => (f.C_DigestInit.unwrap())(s, &mut m.m),
                    };
                    self.general_error(rv, &what)?;
                    for _ in 0..g.below(3) {
                        let i = self.input(g);
                        let mut o = self.output(g);
                        let lp = o.len_ptr();
                        let rv = match (which, g.below(3)) {
                            (0, _) => (f.C_Encrypt.unwrap())(s, i.p, i.len, o.p, lp),
                            (1, _) => (f.C_Decrypt.unwrap())(s, i.p, i.len, o.p, lp),
                            (_, 0) => (f.C_DigestUpdate.unwrap())(s, i.p, i.len),
                            (_, 1) => (f.C_DigestFinal.unwrap())(s, o.p, lp),
                            _ => (f.C_Digest.unwrap())(s, i.p, i.len, o.p, lp),
                        };
                        if o.overrun() {
                            finding!(
                                "output written past the caller's {} bytes (rv 0x{rv:x})",
                                o.claimed
                            );
                        }
                        self.general_error(rv, &what)?;
                    }
                }
                19 | 20 => {
                    let wrapping = self.object(g);
                    let key = if g.chance(60) {
                        self.protected[g.below(self.protected.len() as u64) as usize].0
                    } else {
                        self.object(g)
                    };
                    let mut m = self.mechanism(g);
                    if g.chance(60) {
                        m.m.mechanism = g.pick(&[CKM_AES_KEY_WRAP, CKM_AES_KEY_WRAP_PAD, CKM_RSA_PKCS_OAEP]);
                    }
                    let mut o = self.output(g);
                    trace!(
                        "C_WrapKey({s}, 0x{:x}, {wrapping}, {key}, buffer {})",
                        m.m.mechanism,
                        o.claimed
                    );
                    let lp = o.len_ptr();
                    let rv = (f.C_WrapKey.unwrap())(s, &mut m.m, wrapping, key, o.p, lp);
                    if rv == CKR_OK && self.protection(key, CKA_EXTRACTABLE) == Some(vec![0]) {
                        finding!("CKR_OK wrapping a key with CKA_EXTRACTABLE false");
                    }
                    if o.overrun() {
                        finding!("wrapped key written past the caller's {} bytes", o.claimed);
                    }
                    self.general_error(rv, &what)?;
                }
                21 => {
                    let unwrapping = self.object(g);
                    let mut m = self.mechanism(g);
                    let i = self.input(g);
                    let mut t = self.template(g);
                    let mut o = 0;
                    trace!(
                        "C_UnwrapKey({s}, 0x{:x}, {unwrapping}, {} bytes, {:02x?})",
                        m.m.mechanism,
                        i.len,
                        t.pairs()
                    );
                    let (p, n) = (t.ptr(), t.count());
                    let rv = (f.C_UnwrapKey.unwrap())(s, &mut m.m, unwrapping, i.p, i.len, p, n, &mut o);
                    if rv == CKR_OK {
                        self.objects.push(o);
                    }
                    self.general_error(rv, &what)?;
                }
                22 => {
                    let o = self.output(g);
                    let len = if g.chance(50) {
                        o.claimed as CK_ULONG
                    } else {
                        g.pick(&[0, 1, 1 << 40])
                    };
                    let p = if len > o.claimed as CK_ULONG {
                        null_mut()
                    } else {
                        o.p
                    };
                    trace!("C_GenerateRandom({s}, {len})");
                    let rv = (f.C_GenerateRandom.unwrap())(s, p, len);
                    if o.overrun() {
                        finding!("random bytes written past {len}");
                    }
                    self.general_error(rv, &what)?;
                    let i = self.input(g);
                    (f.C_SeedRandom.unwrap())(s, i.p, i.len);
                }
                23 => {
                    let slot = if g.chance(80) {
                        g.pick(&self.slots)
                    } else {
                        g.next()
                    };
                    let flags = g.pick_or_any(&[CKF_SERIAL_SESSION, CKF_SERIAL_SESSION | CKF_RW_SESSION, 0]);
                    let mut h = 0;
                    trace!("C_OpenSession({slot}, 0x{flags:x})");
                    let rv = (f.C_OpenSession.unwrap())(slot, flags, null_mut(), None, &mut h);
                    if rv == CKR_OK {
                        if self.sessions.contains(&h) || self.closed.contains(&h) {
                            finding!("session handle {h} given out twice");
                        }
                        self.sessions.push(h);
                    }
                    self.general_error(rv, &what)?;
                }
                24 => {
                    // Close a session the fuzzer opened (the first four stay: they keep logins).
                    if self.sessions.len() > 4 {
                        let i = 4 + g.below(self.sessions.len() as u64 - 4) as usize;
                        let h = self.sessions.remove(i);
                        trace!("C_CloseSession({h})");
                        let rv = (f.C_CloseSession.unwrap())(h);
                        if rv != CKR_OK {
                            finding!("closing open session {h}: 0x{rv:x}");
                        }
                        self.closed.push(h);
                        self.signing_with.remove(&h);
                    }
                }
                25 => {
                    let mut info: CK_SESSION_INFO = std::mem::zeroed();
                    let mut size = 0;
                    let h = self.object(g);
                    trace!("C_GetSessionInfo({s}) + C_GetObjectSize({h})");
                    let rv =
                        (f.C_GetSessionInfo.unwrap())(s, if g.chance(10) { null_mut() } else { &mut info });
                    self.general_error(rv, &what)?;
                    let rv =
                        (f.C_GetObjectSize.unwrap())(s, h, if g.chance(10) { null_mut() } else { &mut size });
                    self.general_error(rv, &what)?;
                }
                26 => {
                    let mut o = self.output(g);
                    let lp = o.len_ptr();
                    trace!("C_GetOperationState({s}) / C_SetOperationState / C_SessionCancel");
                    let rv = (f.C_GetOperationState.unwrap())(s, o.p, lp);
                    if rv == CKR_OK || o.overrun() {
                        finding!("operation state handed out (rv 0x{rv:x})");
                    }
                    let i = self.input(g);
                    let rv = (f.C_SetOperationState.unwrap())(s, i.p, i.len, self.object(g), self.object(g));
                    if rv == CKR_OK {
                        finding!("operation state accepted");
                    }
                    if g.chance(30) {
                        (f.C_SessionCancel.unwrap())(s, g.next());
                        self.signing_with.remove(&s);
                    }
                }
                27 => {
                    let slot = if g.chance(80) {
                        g.pick(&self.slots)
                    } else {
                        g.next()
                    };
                    let mut info: CK_TOKEN_INFO = std::mem::zeroed();
                    let mut mi: CK_MECHANISM_INFO = std::mem::zeroed();
                    let mut n: CK_ULONG = g.pick(&[0, 1, 2, 100]);
                    let mut list = vec![0 as CK_ULONG; 100 + 8];
                    let claimed = n as usize;
                    trace!("C_GetTokenInfo/C_GetMechanismList/C_GetMechanismInfo({slot})");
                    self.general_error((f.C_GetTokenInfo.unwrap())(slot, &mut info), &what)?;
                    let lp = if g.chance(20) {
                        null_mut()
                    } else {
                        list.as_mut_ptr()
                    };
                    self.general_error((f.C_GetMechanismList.unwrap())(slot, lp, &mut n), &what)?;
                    if list[claimed..].iter().any(|x| *x != 0) {
                        finding!("mechanism list written past {claimed} entries");
                    }
                    let mech = if g.chance(80) { g.pick(MECHS) } else { g.next() };
                    self.general_error((f.C_GetMechanismInfo.unwrap())(slot, mech, &mut mi), &what)?;
                }
                _ => {
                    // Login and logout, mostly with the right PIN; the test's store allows many
                    // failures so that the PIN never locks.
                    let user = g.pick_or_any(&[CKU_USER, CKU_USER, CKU_SO, CKU_CONTEXT_SPECIFIC]);
                    let mut pin = if g.chance(80) {
                        USER_PIN.as_bytes().to_vec()
                    } else {
                        self.value(g)
                    };
                    trace!("C_Login({s}, {user}) or C_Logout");
                    let rv = if g.chance(15) {
                        (f.C_Logout.unwrap())(s)
                    } else {
                        let p = if g.chance(5) { null_mut() } else { pin.as_mut_ptr() };
                        (f.C_Login.unwrap())(s, user, p, pin.len() as CK_ULONG)
                    };
                    self.general_error(rv, &what)?;
                }
            }
        }
        Ok(())
    }

    /// A step of a running sign or verify operation.
    fn step(&mut self, g: &mut Rng, s: CK_SESSION_HANDLE, sign: bool) -> Result<(), Finding> {
        let f = self.r.f;
        let i = self.input(g);
        let mut o = self.output(g);
        let lp = o.len_ptr();
        let which = g.below(3);
        // SAFETY: as in `call`: NULL or live storage of the lengths given.
        let rv = unsafe {
            match (sign, which) {
                (true, 0) => (f.C_SignUpdate.unwrap())(s, i.p, i.len),
                (true, 1) => (f.C_SignFinal.unwrap())(s, o.p, lp),
                (true, _) => (f.C_Sign.unwrap())(s, i.p, i.len, o.p, lp),
                (false, 0) => (f.C_VerifyUpdate.unwrap())(s, i.p, i.len),
                (false, 1) => (f.C_VerifyFinal.unwrap())(s, i.p, i.len),
                (false, _) => (f.C_Verify.unwrap())(s, i.p, i.len, o.p, o.claimed as CK_ULONG),
            }
        };
        let what = format!(
            "call {}: {} step {which} on session {s}",
            self.calls,
            if sign { "sign" } else { "verify" }
        );
        if sign && rv == CKR_OK && which != 0 && !o.p.is_null() {
            if let Some(k) = self.signing_with.remove(&s) {
                if self.no_sign.contains(&k) {
                    return Err(format!(
                        "{what}: CKR_OK signature with a key whose CKA_SIGN is false"
                    ));
                }
            }
        }
        if o.overrun() {
            return Err(format!(
                "{what}: signature written past the caller's {} bytes",
                o.claimed
            ));
        }
        self.general_error(rv, &what)
    }

    /// A caught panic is a bug at the boundary even though the host survived it.
    fn general_error(&self, rv: CK_RV, what: &str) -> Result<(), Finding> {
        *self.rvs.borrow_mut().entry(rv).or_default() += 1;
        if rv == CKR_GENERAL_ERROR {
            return Err(format!(
                "call {}: {what}: CKR_GENERAL_ERROR (a panic caught at the boundary?)",
                self.calls
            ));
        }
        Ok(())
    }
}

/// Sets up two tokens with protected keys and runs calls until `until`.
fn child(seed: u64, until: Instant, trace: bool) -> Result<u64, Finding> {
    let env = TestEnv::new();
    std::fs::write(
        env.conf(),
        "[store]\npath = \"store\"\n[pin]\nkdf_memory_kib = 64\nkdf_passes = 1\nmax_failures = 1000\n",
    )
    .unwrap();
    let p = load();
    let a = new_token(&p, "fuzz a");
    let b = new_token(&p, "fuzz b");
    let sa = user_session(&p, a);
    let sb = user_session(&p, b);
    let bool_attrs = |sign: bool, modifiable: bool| {
        vec![
            Attribute::Token(true),
            Attribute::Private(true),
            Attribute::Sensitive(true),
            Attribute::Extractable(false),
            Attribute::Copyable(false),
            Attribute::Destroyable(false),
            Attribute::Modifiable(modifiable),
            Attribute::Sign(sign),
            Attribute::Decrypt(true),
            Attribute::Unwrap(true),
        ]
    };
    let public = vec![
        Attribute::Token(true),
        Attribute::ModulusBits(1024.into()),
        Attribute::PublicExponent(vec![1, 0, 1]),
        Attribute::Verify(true),
        Attribute::Encrypt(true),
        Attribute::Wrap(true),
    ];
    let gen = Mechanism::RsaPkcsKeyPairGen;
    let (pub1, priv1) = sa
        .generate_key_pair(&gen, &public, &bool_attrs(true, true))
        .unwrap();
    let (pub2, priv2) = sa
        .generate_key_pair(&gen, &public, &bool_attrs(false, false))
        .unwrap();
    let mut aes = vec![
        Attribute::Class(ObjectClass::SECRET_KEY),
        Attribute::KeyType(KeyType::AES),
        Attribute::ValueLen(32.into()),
    ];
    let secret = sa
        .generate_key(
            &Mechanism::AesKeyGen,
            &[aes.clone(), bool_attrs(true, true)].concat(),
        )
        .unwrap();
    aes.extend([
        Attribute::Token(true),
        Attribute::Wrap(true),
        Attribute::Unwrap(true),
        Attribute::Encrypt(true),
    ]);
    let kek = sa.generate_key(&Mechanism::AesKeyGen, &aes).unwrap();
    aes.push(Attribute::Extractable(true));
    let loose = sa.generate_key(&Mechanism::AesKeyGen, &aes).unwrap();
    let (fpub, fpriv) = rsa_keypair(&sb, 1024, b"f", true);
    let r = Raw::load();
    let open = |slot: CK_SLOT_ID, flags| {
        let mut h = 0;
        // SAFETY: a live output handle.
        assert_eq!(
            unsafe { (r.f.C_OpenSession.unwrap())(slot, flags, null_mut(), None, &mut h) },
            CKR_OK
        );
        h
    };
    let rw = CKF_SERIAL_SESSION | CKF_RW_SESSION;
    let sessions = vec![
        open(a.id(), rw),
        open(a.id(), rw),
        open(a.id(), CKF_SERIAL_SESSION),
        open(b.id(), rw),
    ];
    std::mem::forget(sa);
    std::mem::forget(sb);
    let mut w = World {
        sessions,
        closed: vec![],
        slots: vec![a.id(), b.id(), b.id() + 1],
        objects: [pub1, pub2, kek, loose].iter().map(|o| o.handle()).collect(),
        destroyed: vec![],
        foreign: vec![fpub.handle(), fpriv.handle()],
        protected: vec![],
        no_sign: vec![priv2.handle()],
        signing_with: Default::default(),
        calls: 0,
        trace,
        rvs: Default::default(),
        r,
    };
    for k in [priv1, priv2, secret] {
        let attrs = PROTECTIONS
            .iter()
            .map(|t| {
                (
                    *t,
                    w.read(w.sessions[0], k.handle(), *t)
                        .expect("protection readable"),
                )
            })
            .collect();
        w.protected.push((k.handle(), attrs));
    }
    let mut g = Rng(seed);
    while Instant::now() < until {
        w.call(&mut g)?;
        if w.calls.is_multiple_of(200) {
            w.check_invariants()
                .map_err(|e| format!("after call {}: {e}", w.calls))?;
        }
    }
    w.check_invariants()
        .map_err(|e| format!("after call {}: {e}", w.calls))?;
    drop(p);
    let rvs: Vec<String> = w
        .rvs
        .borrow()
        .iter()
        .map(|(rv, n)| format!("{rv:x}:{n}"))
        .collect();
    println!("FUZZ-RVS {}", rvs.join(" "));
    Ok(w.calls)
}

/// The child's side, run by `cabi_fuzz` when the parent starts this binary with the seed in
/// the environment (one test, so no entry point sits in the suite as skipped or as a pass that
/// checks nothing).
fn child_main(seed: &str) -> ! {
    let seed: u64 = seed.parse().unwrap();
    let ms: u64 = std::env::var("FERROHSM_FUZZ_CHILD_MS").unwrap().parse().unwrap();
    let trace = std::env::var("FERROHSM_FUZZ_TRACE").is_ok_and(|v| v == "1");
    match child(seed, Instant::now() + Duration::from_millis(ms), trace) {
        Ok(calls) => {
            println!("FUZZ-CALLS {calls}");
            std::process::exit(0);
        }
        Err(e) => {
            println!("FUZZ-FINDING {e}");
            std::process::exit(2);
        }
    }
}

#[test]
fn cabi_fuzz() {
    if let Ok(seed) = std::env::var("FERROHSM_FUZZ_CHILD_SEED") {
        child_main(&seed);
    }
    let seconds: u64 = std::env::var("FERROHSM_FUZZ_SECONDS").map_or(5, |s| s.parse().unwrap());
    let base: u64 = std::env::var("FERROHSM_FUZZ_SEED").map_or_else(
        |_| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        },
        |s| s.parse().unwrap(),
    );
    eprintln!("cabi_fuzz: seed {base}, {seconds} s (replay: FERROHSM_FUZZ_SEED={base})");
    let start = Instant::now();
    let budget = Duration::from_secs(seconds);
    let (mut total, mut children) = (0u64, 0u64);
    let mut rvs = std::collections::BTreeMap::new();
    let logs = tempfile::tempdir().unwrap();
    let (out_path, err_path) = (logs.path().join("stdout"), logs.path().join("stderr"));
    while start.elapsed() < budget || children == 0 {
        let seed = base.wrapping_add(children);
        let ms = (budget.saturating_sub(start.elapsed()).as_millis() as u64).clamp(1000, 15_000);
        let mut c = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "cabi_fuzz", "--nocapture"])
            .env("FERROHSM_FUZZ_CHILD_SEED", seed.to_string())
            .env("FERROHSM_FUZZ_CHILD_MS", ms.to_string())
            // Files, not pipes: a child writing more than a pipe holds (the module's log, a
            // trace) while nobody reads would look like a hang.
            .stdout(Stdio::from(std::fs::File::create(&out_path).unwrap()))
            .stderr(Stdio::from(std::fs::File::create(&err_path).unwrap()))
            .spawn()
            .unwrap();
        // Watchdog: setup plus the child's time plus a generous margin for one slow call.
        let deadline = Instant::now() + Duration::from_millis(ms) + Duration::from_secs(60);
        let status = loop {
            if let Some(st) = c.try_wait().unwrap() {
                break Some(st);
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
        let stderr = String::from_utf8_lossy(&std::fs::read(&err_path).unwrap_or_default()).into_owned();
        let replay = format!(
            "replay: FERROHSM_FUZZ_SEED={seed} FERROHSM_FUZZ_SECONDS={} (FERROHSM_FUZZ_TRACE=1 shows each call)",
            ms.div_ceil(1000)
        );
        let tail = stderr
            .lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        let Some(status) = status else {
            panic!("cabi_fuzz: child hung (no end 60 s after its budget); {replay}\n{tail}");
        };
        if let Some(f) = stdout.lines().find_map(|l| l.strip_prefix("FUZZ-FINDING ")) {
            panic!("cabi_fuzz: {f}\n{replay}");
        }
        let calls = stdout
            .lines()
            .find_map(|l| l.strip_prefix("FUZZ-CALLS "))
            .and_then(|n| n.parse::<u64>().ok());
        let Some(calls) = calls.filter(|_| status.success()) else {
            use std::os::unix::process::ExitStatusExt;
            panic!(
                "cabi_fuzz: child crashed ({status:?}, signal {:?}); {replay}\n{}",
                status.signal(),
                tail
            );
        };
        total += calls;
        for (rv, n) in stdout
            .lines()
            .filter_map(|l| l.strip_prefix("FUZZ-RVS "))
            .flat_map(|l| l.split(' '))
            .filter_map(|x| x.split_once(':'))
        {
            *rvs.entry(rv.to_string()).or_insert(0u64) += n.parse::<u64>().unwrap_or(0);
        }
        children += 1;
    }
    let mut rvs: Vec<_> = rvs.into_iter().collect();
    rvs.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    let rvs: Vec<String> = rvs.iter().map(|(rv, n)| format!("0x{rv}: {n}")).collect();
    eprintln!("cabi_fuzz: seed {base}: {total} calls in {children} child processes, no finding");
    eprintln!("cabi_fuzz: return values: {}", rvs.join(", "));
}
