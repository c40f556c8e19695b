//! Migration from a token made by the real SoftHSM (Debian softhsm2) with real tools: every
//! key signs in ferrohsm and verifies with the public key exported from SoftHSM, every object
//! keeps its id, label and key facts; failures write nothing.

mod common;

use common::*;
use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::object::{Attribute, AttributeType, ObjectClass};
use cryptoki::session::UserType;
use cryptoki::types::AuthPin;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SOFTHSM: &str = "/usr/lib/softhsm/libsofthsm2.so";

struct Fixture {
    env: TestEnv,
    conf: PathBuf,
    tokendir: PathBuf,
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .expect("tool missing: install opensc, softhsm2 and openssl");
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A test store beside an empty SoftHSM token directory (file backend) and its
/// configuration: (env, its directory, the token directory, softhsm2.conf).
fn softhsm_home() -> (TestEnv, PathBuf, PathBuf, PathBuf) {
    let env = TestEnv::new();
    let dir = env.dir.path().to_path_buf();
    let tokendir = dir.join("softhsm-tokens");
    std::fs::create_dir_all(&tokendir).unwrap();
    let conf = dir.join("softhsm2.conf");
    std::fs::write(
        &conf,
        format!(
            "directories.tokendir = {}\nobjectstore.backend = file\n",
            tokendir.display()
        ),
    )
    .unwrap();
    (env, dir, tokendir, conf)
}

/// A SoftHSM token "legacy" with RSA 1024/2048/4096 keys made by pkcs11-tool, a key imported
/// by softhsm2-util, a private data object and a certificate.
fn fixture() -> Fixture {
    let (env, dir, tokendir, conf) = softhsm_home();
    let sh = |args: &[&str]| {
        let mut c = Command::new("pkcs11-tool");
        c.args([
            "--module",
            SOFTHSM,
            "--token-label",
            "legacy",
            "--login",
            "--pin",
            USER_PIN,
        ])
        .args(args)
        .env("SOFTHSM2_CONF", &conf);
        run(&mut c)
    };
    run(Command::new("softhsm2-util")
        .args([
            "--init-token",
            "--free",
            "--label",
            "legacy",
            "--so-pin",
            SO_PIN,
            "--pin",
            USER_PIN,
        ])
        .env("SOFTHSM2_CONF", &conf));
    for (bits, id) in [(1024, "01"), (2048, "02"), (4096, "04")] {
        sh(&[
            "--keypairgen",
            "--key-type",
            &format!("rsa:{bits}"),
            "--id",
            id,
            "--label",
            &format!("key{bits}"),
        ]);
    }
    let pem = dir.join("imported.pem");
    assert!(openssl(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        pem.to_str().unwrap()
    ]));
    run(Command::new("softhsm2-util")
        .args([
            "--import",
            pem.to_str().unwrap(),
            "--token",
            "legacy",
            "--label",
            "imported",
            "--id",
            "0a0b",
            "--pin",
            USER_PIN,
        ])
        .env("SOFTHSM2_CONF", &conf));
    std::fs::write(dir.join("data.txt"), b"private data object").unwrap();
    sh(&[
        "--write-object",
        dir.join("data.txt").to_str().unwrap(),
        "--type",
        "data",
        "--label",
        "notes",
        "--private",
    ]);
    let cert = dir.join("cert.der");
    assert!(openssl(&[
        "req",
        "-x509",
        "-key",
        pem.to_str().unwrap(),
        "-subj",
        "/CN=legacy",
        "-days",
        "30",
        "-outform",
        "DER",
        "-out",
        cert.to_str().unwrap()
    ]));
    sh(&[
        "--write-object",
        cert.to_str().unwrap(),
        "--type",
        "cert",
        "--id",
        "0a0b",
        "--label",
        "imported",
    ]);
    Fixture { env, conf, tokendir }
}

fn util(f: &Fixture, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrohsm-util"))
        .args(args)
        .env("FERROHSM_CONF", f.env.conf())
        .env("SOFTHSM2_CONF", &f.conf)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

fn open(module: &Path, label: &str) -> (Pkcs11, cryptoki::session::Session) {
    let p = Pkcs11::new(module).unwrap();
    p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
        .unwrap();
    let slot = p
        .get_slots_with_initialized_token()
        .unwrap()
        .into_iter()
        .find(|s| p.get_token_info(*s).unwrap().label() == label)
        .unwrap();
    let s = p.open_ro_session(slot).unwrap();
    s.login(UserType::User, Some(&AuthPin::new(USER_PIN.into())))
        .unwrap();
    (p, s)
}

const FACTS: &[AttributeType] = &[
    AttributeType::Class,
    AttributeType::Label,
    AttributeType::Id,
    AttributeType::Token,
    AttributeType::Private,
    AttributeType::Sensitive,
    AttributeType::Extractable,
    AttributeType::AlwaysSensitive,
    AttributeType::NeverExtractable,
    AttributeType::Local,
    AttributeType::Sign,
    AttributeType::Decrypt,
    AttributeType::Modulus,
    AttributeType::PublicExponent,
];

#[test]
fn softhsm_token_migrates_losslessly() {
    let f = fixture();
    let out = util(
        &f,
        &[
            "migrate-softhsm",
            "--conf",
            f.conf.to_str().unwrap(),
            "--token",
            "legacy",
            "--pin",
            USER_PIN,
            "--so-pin",
            SO_PIN,
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("4 RSA private keys signed and verified"), "{text}");
    // Idempotent.
    let again = util(
        &f,
        &[
            "migrate-softhsm",
            "--conf",
            f.conf.to_str().unwrap(),
            "--token",
            "legacy",
            "--pin",
            USER_PIN,
            "--so-pin",
            SO_PIN,
        ],
    );
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stdout).contains("already exists"));

    std::env::set_var("SOFTHSM2_CONF", &f.conf);
    let (_sp, soft) = open(Path::new(SOFTHSM), "legacy");
    let (fp, fh) = open(&module_path(), "legacy");
    // Same serial.
    let fslot = fh.get_session_info().unwrap().slot_id();
    let sslot = soft.get_session_info().unwrap().slot_id();
    assert_eq!(
        fp.get_token_info(fslot).unwrap().serial_number(),
        _sp.get_token_info(sslot).unwrap().serial_number()
    );
    // Every SoftHSM object is in ferrohsm with the same facts.
    let all = soft.find_objects(&[]).unwrap();
    let mut compared = 0;
    assert_eq!(all.len(), 10, "4 key pairs, a data object and a certificate");
    assert_eq!(fh.find_objects(&[]).unwrap().len(), all.len());
    for h in all {
        let class = soft.get_attributes(h, &[AttributeType::Class]).unwrap();
        let Attribute::Class(class) = class[0] else {
            panic!()
        };
        let label = soft.get_attributes(h, &[AttributeType::Label]).unwrap()[0].clone();
        let mut template = vec![Attribute::Class(class), label];
        if class != ObjectClass::DATA {
            template.push(soft.get_attributes(h, &[AttributeType::Id]).unwrap()[0].clone());
        }
        let found = fh.find_objects(&template).unwrap();
        assert_eq!(found.len(), 1, "{template:?}");
        for t in FACTS {
            // Attributes SoftHSM has (and may reveal) must read the same in ferrohsm.
            if let Ok(a) = soft.get_attributes(h, &[*t]) {
                if !a.is_empty() {
                    assert_eq!(
                        a,
                        fh.get_attributes(found[0], &[*t]).unwrap(),
                        "attribute {t:?} of {template:?}"
                    );
                    compared += 1;
                }
            }
        }
    }
    assert!(compared >= 80, "only {compared} attributes compared");
    // Every key signs in ferrohsm; OpenSSL verifies with the key exported from SoftHSM.
    let dir = f.env.dir.path();
    std::fs::write(dir.join("msg"), b"signed after migration").unwrap();
    for id in ["01", "02", "04", "0a0b"] {
        let der = dir.join(format!("{id}.der"));
        run(Command::new("pkcs11-tool")
            .args([
                "--module",
                SOFTHSM,
                "--token-label",
                "legacy",
                "--read-object",
                "--type",
                "pubkey",
                "--id",
                id,
                "-o",
                der.to_str().unwrap(),
            ])
            .env("SOFTHSM2_CONF", &f.conf));
        let idb: Vec<u8> = (0..id.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&id[i..i + 2], 16).unwrap())
            .collect();
        let key = find_one(&fh, ObjectClass::PRIVATE_KEY, &idb);
        let sig = fh
            .sign(
                &cryptoki::mechanism::Mechanism::Sha256RsaPkcs,
                key,
                b"signed after migration",
            )
            .unwrap();
        std::fs::write(dir.join("sig"), &sig).unwrap();
        assert!(
            openssl(&[
                "dgst",
                "-sha256",
                "-verify",
                der.to_str().unwrap(),
                "-keyform",
                "DER",
                "-signature",
                dir.join("sig").to_str().unwrap(),
                dir.join("msg").to_str().unwrap()
            ]),
            "key {id}"
        );
    }
    // The private data object's value came through decryption intact.
    let data = fh.find_objects(&[Attribute::Class(ObjectClass::DATA)]).unwrap()[0];
    assert_eq!(
        fh.get_attributes(data, &[AttributeType::Value]).unwrap()[0],
        Attribute::Value(b"private data object".to_vec())
    );
    // Nothing was written to the SoftHSM directory... its files are all still SoftHSM's.
    assert!(std::fs::read_dir(&f.tokendir).unwrap().count() == 1);
}

#[test]
fn failures_write_nothing() {
    let f = fixture();
    let base = ["migrate-softhsm", "--token", "legacy"];
    let fails = |extra: &[&str], expect: &str| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let o = util(&f, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(expect),
            "{args:?}: {err:?} should mention {expect:?}"
        );
        assert!(
            !f.env.store_dir().join("ferrohsm.db").exists() || {
                let o = util(&f, &["show-slots"]);
                !String::from_utf8_lossy(&o.stdout).contains("legacy")
            }
        );
    };
    let conf = f.conf.to_str().unwrap().to_string();
    fails(
        &["--conf", &conf, "--pin", "9999", "--so-pin", SO_PIN],
        "user PIN",
    );
    fails(
        &["--conf", &conf, "--pin", USER_PIN, "--so-pin", "00000000"],
        "SO PIN",
    );
    fails(
        &[
            "--tokendir",
            "/nonexistent/softhsm",
            "--pin",
            USER_PIN,
            "--so-pin",
            SO_PIN,
        ],
        "/nonexistent/softhsm",
    );
    // A truncated object file.
    let tdir = std::fs::read_dir(&f.tokendir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let victim = std::fs::read_dir(&tdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "object") && p.file_name().unwrap() != "token.object")
        .unwrap();
    let bytes = std::fs::read(&victim).unwrap();
    // Cut inside the last record (SoftHSM files have no checksum: a cut exactly at a record
    // boundary would read as a valid, shorter object).
    std::fs::write(&victim, &bytes[..bytes.len() - 3]).unwrap();
    fails(
        &["--conf", &conf, "--pin", USER_PIN, "--so-pin", SO_PIN],
        "truncated or corrupt",
    );
    // An empty object file: SoftHSM is writing it.
    std::fs::write(&victim, b"").unwrap();
    fails(
        &["--conf", &conf, "--pin", USER_PIN, "--so-pin", SO_PIN],
        "SoftHSM is writing it",
    );
}

/// A SoftHSM key with a CKA_UNWRAP_TEMPLATE and a CKA_WRAP_TEMPLATE (made through SoftHSM's own
/// C API: no tool sets them) keeps both in ferrohsm, and ferrohsm enforces them.
#[test]
fn attribute_templates_migrate() {
    use cryptoki_sys::*;
    let (env, _, _, conf) = softhsm_home();
    run(Command::new("softhsm2-util")
        .args([
            "--init-token",
            "--free",
            "--label",
            "wrapping",
            "--so-pin",
            SO_PIN,
            "--pin",
            USER_PIN,
        ])
        .env("SOFTHSM2_CONF", &conf));
    std::env::set_var("SOFTHSM2_CONF", &conf);
    let ul = |v: CK_ULONG| v.to_ne_bytes().to_vec();
    let mut nested = [(CKA_EXTRACTABLE, vec![0u8]), (CKA_LABEL, b"imposed".to_vec())];
    let nested: Vec<CK_ATTRIBUTE> = nested
        .iter_mut()
        .map(|(t, v)| CK_ATTRIBUTE {
            type_: *t,
            pValue: v.as_mut_ptr() as *mut _,
            ulValueLen: v.len() as CK_ULONG,
        })
        .collect();
    // SAFETY (test): the nested array stays alive for the calls below.
    let array = unsafe {
        std::slice::from_raw_parts(nested.as_ptr() as *const u8, std::mem::size_of_val(&nested[..]))
    }
    .to_vec();
    let mut values = vec![
        (CKA_CLASS, ul(CKO_SECRET_KEY)),
        (CKA_KEY_TYPE, ul(CKK_AES)),
        (CKA_TOKEN, vec![1]),
        (CKA_PRIVATE, vec![1]),
        (CKA_VALUE, vec![3u8; 32]),
        (CKA_LABEL, b"kek".to_vec()),
        (CKA_ID, vec![0x4b]),
        (CKA_WRAP, vec![1]),
        (CKA_UNWRAP, vec![1]),
        (CKA_UNWRAP_TEMPLATE, array.clone()),
        (CKA_WRAP_TEMPLATE, array),
    ];
    let mut template: Vec<CK_ATTRIBUTE> = values
        .iter_mut()
        .map(|(t, v)| CK_ATTRIBUTE {
            type_: *t,
            pValue: v.as_mut_ptr() as *mut _,
            ulValueLen: v.len() as CK_ULONG,
        })
        .collect();
    // SAFETY (test): SoftHSM's 2.40 function list, used as the specification says.
    unsafe {
        let lib = libloading::Library::new(SOFTHSM).unwrap();
        let get: libloading::Symbol<unsafe extern "C" fn(*mut *mut CK_FUNCTION_LIST) -> CK_RV> =
            lib.get(b"C_GetFunctionList").unwrap();
        let mut f = std::ptr::null_mut();
        assert_eq!(get(&mut f), CKR_OK);
        let f = &*f;
        assert_eq!((f.C_Initialize.unwrap())(std::ptr::null_mut()), CKR_OK);
        let mut slots = [0 as CK_SLOT_ID; 8];
        let mut n = slots.len() as CK_ULONG;
        assert_eq!(
            (f.C_GetSlotList.unwrap())(CK_TRUE, slots.as_mut_ptr(), &mut n),
            CKR_OK
        );
        let mut s = 0;
        let flags = CKF_SERIAL_SESSION | CKF_RW_SESSION;
        assert_eq!(
            (f.C_OpenSession.unwrap())(slots[0], flags, std::ptr::null_mut(), None, &mut s),
            CKR_OK
        );
        let mut pin = USER_PIN.as_bytes().to_vec();
        assert_eq!(
            (f.C_Login.unwrap())(s, CKU_USER, pin.as_mut_ptr(), pin.len() as CK_ULONG),
            CKR_OK
        );
        let mut h = 0;
        let rv = (f.C_CreateObject.unwrap())(s, template.as_mut_ptr(), template.len() as CK_ULONG, &mut h);
        assert_eq!(rv, CKR_OK);
        (f.C_Finalize.unwrap())(std::ptr::null_mut());
    }
    let out = Command::new(env!("CARGO_BIN_EXE_ferrohsm-util"))
        .args([
            "migrate-softhsm",
            "--conf",
            conf.to_str().unwrap(),
            "--token",
            "wrapping",
        ])
        .args(["--pin", USER_PIN, "--so-pin", SO_PIN])
        .env("FERROHSM_CONF", env.conf())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("template"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // In ferrohsm: the key unwraps only under its template. Wrap an extractable key that
    // matches the wrap template, unwrap it with a template that contradicts the unwrap
    // template (refused), then with none (the template is imposed).
    let (_p, s) = open(&module_path(), "wrapping");
    let r = Raw::load();
    let kek = find_one(&s, ObjectClass::SECRET_KEY, &[0x4b]);
    let mut plain_values = vec![
        (CKA_CLASS, ul(CKO_SECRET_KEY)),
        (CKA_KEY_TYPE, ul(CKK_AES)),
        (CKA_VALUE, vec![8u8; 16]),
        (CKA_EXTRACTABLE, vec![0]),
        (CKA_LABEL, b"imposed".to_vec()),
    ];
    let attrs = |v: &mut Vec<(CK_ATTRIBUTE_TYPE, Vec<u8>)>| -> Vec<CK_ATTRIBUTE> {
        v.iter_mut()
            .map(|(t, v)| CK_ATTRIBUTE {
                type_: *t,
                pValue: v.as_mut_ptr() as *mut _,
                ulValueLen: v.len() as CK_ULONG,
            })
            .collect()
    };
    // SAFETY (test): raw calls with live buffers.
    unsafe {
        let mut t = attrs(&mut plain_values);
        let mut plain = 0;
        assert_eq!(
            (r.f.C_CreateObject.unwrap())(s.handle(), t.as_mut_ptr(), t.len() as CK_ULONG, &mut plain),
            CKR_OK
        );
        let mut m = raw_mech::<u8>(CKM_AES_KEY_WRAP_PAD, None);
        let mut out = [0u8; 64];
        let mut len = out.len() as CK_ULONG;
        // Not extractable: refused before any template check.
        let rv = (r.f.C_WrapKey.unwrap())(
            s.handle(),
            &mut m,
            kek.handle(),
            plain,
            out.as_mut_ptr(),
            &mut len,
        );
        assert_eq!(rv, CKR_KEY_UNEXTRACTABLE);
        let mut wrapped = mechanism_wrap(&[3u8; 32], &[8u8; 16]);
        let mut bad = vec![
            (CKA_CLASS, ul(CKO_SECRET_KEY)),
            (CKA_KEY_TYPE, ul(CKK_AES)),
            (CKA_EXTRACTABLE, vec![1]),
        ];
        let mut t = attrs(&mut bad);
        let mut h = 0;
        let rv = (r.f.C_UnwrapKey.unwrap())(
            s.handle(),
            &mut m,
            kek.handle(),
            wrapped.as_mut_ptr(),
            wrapped.len() as CK_ULONG,
            t.as_mut_ptr(),
            t.len() as CK_ULONG,
            &mut h,
        );
        assert_eq!(rv, CKR_TEMPLATE_INCONSISTENT);
        let mut good = vec![(CKA_CLASS, ul(CKO_SECRET_KEY)), (CKA_KEY_TYPE, ul(CKK_AES))];
        let mut t = attrs(&mut good);
        let rv = (r.f.C_UnwrapKey.unwrap())(
            s.handle(),
            &mut m,
            kek.handle(),
            wrapped.as_mut_ptr(),
            wrapped.len() as CK_ULONG,
            t.as_mut_ptr(),
            t.len() as CK_ULONG,
            &mut h,
        );
        assert_eq!(rv, CKR_OK);
        let mut label = [0u8; 16];
        let mut a = CK_ATTRIBUTE {
            type_: CKA_LABEL,
            pValue: label.as_mut_ptr() as *mut _,
            ulValueLen: label.len() as CK_ULONG,
        };
        assert_eq!(
            (r.f.C_GetAttributeValue.unwrap())(s.handle(), h, &mut a, 1),
            CKR_OK
        );
        assert_eq!(&label[..a.ulValueLen as usize], b"imposed");
    }
}

/// RFC 5649 key wrap with padding, by the `aes-kw` crate (independent of the module).
fn mechanism_wrap(kek: &[u8; 32], key: &[u8]) -> Vec<u8> {
    use aes::cipher::KeyInit;
    let kw = aes_kw::KwpAes256::new_from_slice(kek).unwrap();
    let mut out = vec![0u8; key.len().div_ceil(8) * 8 + 8];
    kw.wrap_key(key, &mut out).unwrap().to_vec()
}

/// SoftHSM EC keys (P-256, P-384 by pkcs11-tool; Ed25519) migrate: ferrohsm signs with each
/// migrated private key and the signature verifies with the public point SoftHSM itself
/// reports (RustCrypto / ed25519-dalek), and the point comes back in the same DER form.
#[test]
fn softhsm_ec_keys_migrate_and_sign() {
    use cryptoki::mechanism::eddsa::{EddsaParams, EddsaSignatureScheme};
    use cryptoki::mechanism::Mechanism;
    use p256::ecdsa::signature::hazmat::PrehashVerifier;
    use sha2::{Digest, Sha256};
    let (env, _dir, tokendir, conf) = softhsm_home();
    let f = Fixture { env, conf, tokendir };
    run(Command::new("softhsm2-util")
        .args([
            "--init-token",
            "--free",
            "--label",
            "ecsoft",
            "--so-pin",
            SO_PIN,
            "--pin",
            USER_PIN,
        ])
        .env("SOFTHSM2_CONF", &f.conf));
    let keys = [
        ("EC:prime256v1", "e1"),
        ("EC:secp384r1", "e2"),
        ("EC:edwards25519", "e3"),
    ];
    for (kt, id) in keys {
        run(Command::new("pkcs11-tool")
            .args([
                "--module",
                SOFTHSM,
                "--token-label",
                "ecsoft",
                "--login",
                "--pin",
                USER_PIN,
            ])
            .args(["--keypairgen", "--key-type", kt, "--id", id, "--label", kt])
            .env("SOFTHSM2_CONF", &f.conf));
    }
    let out = util(
        &f,
        &[
            "migrate-softhsm",
            "--conf",
            f.conf.to_str().unwrap(),
            "--token",
            "ecsoft",
            "--pin",
            USER_PIN,
            "--so-pin",
            SO_PIN,
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("3 EC private keys signed and verified"), "{text}");

    std::env::set_var("SOFTHSM2_CONF", &f.conf);
    let (_sp, soft) = open(Path::new(SOFTHSM), "ecsoft");
    let (_fp, fh) = open(&module_path(), "ecsoft");
    let hash = Sha256::digest(b"after migration").to_vec();
    for (kt, id) in keys {
        let id = vec![u8::from_str_radix(&id[..2], 16).unwrap()];
        let point = |s: &cryptoki::session::Session| {
            let h = s
                .find_objects(&[
                    Attribute::Class(ObjectClass::PUBLIC_KEY),
                    Attribute::Id(id.clone()),
                ])
                .unwrap()[0];
            match &s.get_attributes(h, &[AttributeType::EcPoint]).unwrap()[0] {
                Attribute::EcPoint(p) => p.clone(),
                _ => panic!(),
            }
        };
        let soft_point = point(&soft);
        assert_eq!(point(&fh), soft_point, "{kt}: the same DER point");
        let raw = &soft_point[2..];
        let private = fh
            .find_objects(&[
                Attribute::Class(ObjectClass::PRIVATE_KEY),
                Attribute::Id(id.clone()),
            ])
            .unwrap()[0];
        match kt {
            "EC:edwards25519" => {
                let mech = Mechanism::Eddsa(EddsaParams::new(EddsaSignatureScheme::Pure));
                let sig = fh.sign(&mech, private, b"after migration").unwrap();
                let vk = ed25519_dalek::VerifyingKey::from_bytes(raw.try_into().unwrap()).unwrap();
                vk.verify_strict(
                    b"after migration",
                    &ed25519_dalek::Signature::from_slice(&sig).unwrap(),
                )
                .unwrap();
            }
            "EC:prime256v1" => {
                let sig = fh.sign(&Mechanism::Ecdsa, private, &hash).unwrap();
                let vk = p256::ecdsa::VerifyingKey::from_sec1_bytes(raw).unwrap();
                vk.verify_prehash(&hash, &p256::ecdsa::Signature::from_slice(&sig).unwrap())
                    .unwrap();
            }
            _ => {
                let sig = fh.sign(&Mechanism::Ecdsa, private, &hash).unwrap();
                let vk = p384::ecdsa::VerifyingKey::from_sec1_bytes(raw).unwrap();
                vk.verify_prehash(&hash, &p384::ecdsa::Signature::from_slice(&sig).unwrap())
                    .unwrap();
            }
        }
    }
}

/// Keys below the sizes ferrohsm takes (an RSA-512 pair, an 8-byte generic secret) migrate as
/// they are, each with a note saying so: a migration loses no key. In ferrohsm the RSA key
/// still signs; HMAC and C_DigestKey refuse the short secret (`CKR_KEY_SIZE_RANGE`), whose
/// every MAC or digest would give it away, and take a 14-byte one migrated beside it.
#[test]
fn keys_below_the_minimum_migrate_with_a_note() {
    use cryptoki::mechanism::Mechanism;
    use cryptoki::object::KeyType;
    use rsa::traits::{PrivateKeyParts, PublicKeyParts};
    let (env, _, tokendir, conf) = softhsm_home();
    let f = Fixture { env, conf, tokendir };
    run(Command::new("softhsm2-util")
        .args([
            "--init-token",
            "--free",
            "--label",
            "weak",
            "--so-pin",
            SO_PIN,
            "--pin",
            USER_PIN,
        ])
        .env("SOFTHSM2_CONF", &f.conf));
    std::env::set_var("SOFTHSM2_CONF", &f.conf);
    let mut rng = rand_core::UnwrapErr(getrandom::SysRng);
    let k = rsa::PrivateKey::new_unchecked(&mut rng, 512).unwrap();
    {
        let p = Pkcs11::new(SOFTHSM).unwrap();
        p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
            .unwrap();
        let slot = p.get_slots_with_initialized_token().unwrap()[0];
        let s = p.open_rw_session(slot).unwrap();
        s.login(UserType::User, Some(&AuthPin::new(USER_PIN.into())))
            .unwrap();
        let secret = |id: u8, len: usize| {
            s.create_object(&[
                Attribute::Class(ObjectClass::SECRET_KEY),
                Attribute::KeyType(KeyType::GENERIC_SECRET),
                Attribute::Token(true),
                Attribute::Private(true),
                Attribute::Sign(true),
                Attribute::Id(vec![id]),
                Attribute::Value(vec![0x77; len]),
            ])
            .unwrap()
        };
        secret(0x5e, 8);
        secret(0x5f, 14);
        let rsa = [
            Attribute::KeyType(KeyType::RSA),
            Attribute::Token(true),
            Attribute::Id(vec![0x52]),
            Attribute::Modulus(be(k.n().as_ref())),
            Attribute::PublicExponent(be(k.e())),
        ];
        let mut public = rsa.to_vec();
        public.extend([Attribute::Class(ObjectClass::PUBLIC_KEY), Attribute::Verify(true)]);
        s.create_object(&public).unwrap();
        let mut private = rsa.to_vec();
        private.extend([
            Attribute::Class(ObjectClass::PRIVATE_KEY),
            Attribute::Private(true),
            Attribute::Sign(true),
            Attribute::PrivateExponent(be(k.d())),
            Attribute::Prime1(be(k.primes()[0].as_ref())),
            Attribute::Prime2(be(k.primes()[1].as_ref())),
            Attribute::Exponent1(be(k.dp().unwrap())),
            Attribute::Exponent2(be(k.dq().unwrap())),
            Attribute::Coefficient(be(&k.crt_coefficient().unwrap())),
        ]);
        s.create_object(&private).unwrap();
    }
    let args = [
        "migrate-softhsm",
        "--conf",
        f.conf.to_str().unwrap(),
        "--token",
        "weak",
        "--pin",
        USER_PIN,
        "--so-pin",
        SO_PIN,
    ];
    let out = util(&f, &args);
    let (text, notes) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{text}{notes}");
    assert!(
        text.contains("4 objects (1 RSA private keys signed and verified)"),
        "{text}"
    );
    let note_lines = |what: &str| {
        notes
            .lines()
            .filter(|l| l.starts_with("note:") && l.contains(what))
            .count()
    };
    assert_eq!(note_lines("a secret key of 8 bytes (id [5e])"), 1, "{notes}");
    assert_eq!(note_lines("an RSA key of 512 bits (id [52])"), 2, "{notes}");
    assert_eq!(note_lines("[5f]"), 0, "{notes}");

    let (_p, s) = open(&module_path(), "weak");
    let short = find_one(&s, ObjectClass::SECRET_KEY, &[0x5e]);
    let long = find_one(&s, ObjectClass::SECRET_KEY, &[0x5f]);
    assert_eq!(
        rv(s.sign(&Mechanism::Sha256Hmac, short, b"data").unwrap_err()),
        cryptoki::error::RvError::KeySizeRange
    );
    assert_eq!(s.sign(&Mechanism::Sha256Hmac, long, b"data").unwrap().len(), 32);
    s.digest_init(&Mechanism::Sha256).unwrap();
    assert_eq!(
        rv(s.digest_key(short).unwrap_err()),
        cryptoki::error::RvError::KeySizeRange
    );
    s.digest_init(&Mechanism::Sha256).unwrap();
    s.digest_key(long).unwrap();
    assert_eq!(s.digest_final().unwrap().len(), 32);
    let private = find_one(&s, ObjectClass::PRIVATE_KEY, &[0x52]);
    assert_eq!(
        s.sign(&Mechanism::Sha256RsaPkcs, private, b"data").unwrap().len(),
        64
    );
}
