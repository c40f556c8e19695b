//! Many threads at once: 16 signers on their own sessions with shared and separate keys while
//! another thread creates, finds and destroys objects. Every signature is verified.

mod common;

use common::*;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, ObjectClass};
use rsa::pkcs1v15::Pkcs1v15Sign;
use rsa::sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

#[test]
fn sixteen_signers_and_a_writer() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "busy");
    let admin = user_session(&p, slot);
    let (shared_pub, shared_priv) = rsa_keypair(&admin, 2048, b"shared", true);
    let shared_pk = rsa_public(&admin, shared_pub);
    let mut own = vec![];
    for i in 0..4u8 {
        let (pb, pr) = rsa_keypair(&admin, 1024, &[b'o', i], true);
        own.push((rsa_public(&admin, pb), pr));
    }
    let stop = AtomicBool::new(false);
    let signed = AtomicUsize::new(0);
    std::thread::scope(|sc| {
        for t in 0..16usize {
            let (p, stop, signed) = (&p, &stop, &signed);
            let (shared_pk, own) = (&shared_pk, &own);
            sc.spawn(move || {
                let s = p.open_ro_session(slot).unwrap();
                let mut n = 0;
                while n < 20 || !stop.load(Ordering::Relaxed) {
                    let msg = format!("thread {t} message {n}");
                    let hash = Sha256::digest(msg.as_bytes());
                    let (pk, key) = if t % 2 == 0 {
                        (shared_pk, shared_priv)
                    } else {
                        (&own[t % 4].0, own[t % 4].1)
                    };
                    let sig = s.sign(&Mechanism::Sha256RsaPkcs, key, msg.as_bytes()).unwrap();
                    pk.verify(Pkcs1v15Sign::new::<Sha256>(), &hash, &sig).unwrap();
                    n += 1;
                    signed.fetch_add(1, Ordering::Relaxed);
                    if n >= 200 {
                        break;
                    }
                }
            });
        }
        // The writer: creates, finds and destroys objects and keys throughout.
        let (p, stop) = (&p, &stop);
        sc.spawn(move || {
            let s = user_session(p, slot);
            for i in 0..30u32 {
                let id = i.to_be_bytes().to_vec();
                let d = s
                    .create_object(&[
                        Attribute::Class(ObjectClass::DATA),
                        Attribute::Token(i % 2 == 0),
                        Attribute::Private(true),
                        Attribute::Label(id.clone()),
                        Attribute::Value(vec![i as u8; 100]),
                    ])
                    .unwrap();
                assert_eq!(s.find_objects(&[Attribute::Label(id.clone())]).unwrap(), vec![d]);
                if i % 5 == 0 {
                    let (pb, pr) = rsa_keypair(&s, 1024, &id, true);
                    s.destroy_object(pb).unwrap();
                    s.destroy_object(pr).unwrap();
                }
                s.destroy_object(d).unwrap();
                assert!(s.find_objects(&[Attribute::Label(id)]).unwrap().is_empty());
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    assert!(signed.load(Ordering::Relaxed) >= 16 * 20);
}

#[test]
fn sessions_opened_and_closed_concurrently() {
    let _env = TestEnv::new();
    let p = load();
    let slot = new_token(&p, "churn");
    let keep = user_session(&p, slot);
    let (_pb, pr) = rsa_keypair(&keep, 1024, b"k", true);
    std::thread::scope(|sc| {
        for _ in 0..8 {
            sc.spawn(|| {
                for _ in 0..50 {
                    let s = p.open_rw_session(slot).unwrap();
                    s.sign(&Mechanism::Sha256RsaPkcs, pr, b"x").unwrap();
                    s.close().unwrap();
                }
            });
        }
    });
    // The application is still logged in through the session it kept open.
    keep.sign(&Mechanism::Sha256RsaPkcs, pr, b"still logged in")
        .unwrap();
}
