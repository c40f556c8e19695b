//! `ferrohsm-server` as an operator runs it: the counters at `GET /metrics` (OpenMetrics text)
//! count exactly the calls, key uses and refusals that happened, `GET /health` says whether
//! the store answers, and a client's limits refuse what is over them with a sentence the
//! client module logs (`CKR_FUNCTION_FAILED` to the application). Each test has its own PKI,
//! store and server (`common::remote`).

mod common;

use common::remote::*;
use common::*;
use cryptoki::error::RvError;
use cryptoki::mechanism::Mechanism;
use cryptoki::object::Attribute;
use std::io::{Read, Write};

const METRICS: &str = "metrics_listen = \"127.0.0.1:0\"";

/// `GET path` on the metrics address: (status line, content type, body).
fn get(addr: &str, path: &str) -> (String, String, String) {
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    write!(
        tcp,
        "GET {path} HTTP/1.1\r\nHost: metrics\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    tcp.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.lines().next().unwrap().to_string();
    let kind = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_string)
        })
        .unwrap_or_default();
    (status, kind, body.to_string())
}

/// The value of the sample whose name and labels are `sample` (exactly), if present.
fn sample(body: &str, sample: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
}

/// A P-256 key pair: (public, private).
fn p256_key(
    s: &cryptoki::session::Session,
) -> (cryptoki::object::ObjectHandle, cryptoki::object::ObjectHandle) {
    s.generate_key_pair(
        &Mechanism::EccKeyPairGen,
        &[Attribute::EcParams(P256_OID.to_vec()), Attribute::Verify(true)],
        &[Attribute::Sign(true), Attribute::Sensitive(true)],
    )
    .unwrap()
}

#[test]
fn metrics_count_calls_key_uses_and_refusals_and_health_reads_the_store() {
    let w = World::with("info", METRICS, "");
    let addr = w
        .server
        .metrics
        .clone()
        .expect("the server said where its metrics are");
    let (status, _, body) = get(&addr, "/health");
    assert!(status.contains(" 200 "), "{status}: {body}");
    assert!(body.starts_with("ok: 2 token(s)"), "{body}");

    w.client("signer");
    let p = load();
    let alpha = slot_of(&p, "alpha").unwrap();
    let s = user_session(&p, alpha);
    let (public, key) = p256_key(&s);
    const SIGNATURES: usize = 7;
    for i in 0..SIGNATURES {
        s.sign(&Mechanism::Ecdsa, key, &sha256(&[i as u8])).unwrap();
    }
    // A failing call is counted under its outcome: a signature with the public key.
    assert!(s.sign(&Mechanism::Ecdsa, public, &[0; 32]).is_err());
    drop(s);
    p.finalize().unwrap();
    // A client of the CA in no [[client]] entry: refused and counted.
    w.client("stranger");
    let p = load();
    assert_eq!(rv(p.get_slots_with_token().unwrap_err()), RvError::DeviceError);
    p.finalize().unwrap();

    let (status, kind, body) = get(&addr, "/metrics");
    assert!(status.contains(" 200 "), "{status}");
    assert!(
        kind.starts_with("application/openmetrics-text; version=1.0.0"),
        "{kind}"
    );
    assert!(
        body.ends_with("# EOF\n"),
        "an OpenMetrics exposition ends with # EOF: {body}"
    );
    // The first signature's C_SignInit and C_Sign, then each signature's one request with both
    // (the client holds C_SignInit back once it knows the key); each answer counted, and timed.
    let signed = |request: &str| {
        sample(
            &body,
            &format!("ferrohsm_calls_total{{client=\"signer\",request=\"{request}\",outcome=\"CKR_OK\"}}"),
        )
    };
    assert_eq!(signed("SignInit"), Some(1.0), "{body}");
    assert_eq!(signed("Sign"), Some(1.0), "{body}");
    assert_eq!(signed("SignInitAndSign"), Some(SIGNATURES as f64 - 1.0), "{body}");
    let failed: Vec<&str> = body
        .lines()
        .filter(|l| {
            l.starts_with("ferrohsm_calls_total{client=\"signer\",request=\"SignInit\",outcome=\"CKR_")
        })
        .filter(|l| !l.contains("CKR_OK"))
        .collect();
    assert!(failed.len() == 1 && failed[0].ends_with(" 1"), "{body}");
    assert_eq!(
        sample(&body, "ferrohsm_call_seconds_count{request=\"SignInitAndSign\"}"),
        Some(SIGNATURES as f64 - 1.0),
        "{body}"
    );
    assert_eq!(
        sample(
            &body,
            "ferrohsm_call_seconds_bucket{request=\"SignInitAndSign\",le=\"+Inf\"}"
        ),
        Some(SIGNATURES as f64 - 1.0),
        "{body}"
    );
    // The key's uses, under CKM_ECDSA (0x1041): one line, the signatures made.
    let uses: Vec<&str> = body
        .lines()
        .filter(|l| {
            l.starts_with("ferrohsm_key_uses_total{client=\"signer\"")
                && l.contains("mechanism=\"0x00001041\"")
        })
        .collect();
    assert_eq!(uses.len(), 1, "{body}");
    assert!(uses[0].ends_with(&format!(" {SIGNATURES}")), "{body}");
    assert!(
        body.lines()
            .any(|l| l
                .starts_with("ferrohsm_refusals_total{client=\"CN=stranger\",reason=\"unknown_identity\"} ")),
        "{body}"
    );
    assert_eq!(
        sample(&body, "ferrohsm_connections"),
        Some(0.0),
        "both clients are gone: {body}"
    );
    // The engine's own counters are there (P-256 signs outside the RSA engine: any value).
    assert!(
        sample(&body, "ferrohsm_engine_operations_total").is_some(),
        "{body}"
    );

    let (status, _, _) = get(&addr, "/nothing");
    assert!(status.contains(" 404 "), "{status}");
}

#[test]
fn the_health_check_fails_when_the_store_cannot_be_read() {
    let w = World::with("info", METRICS, "");
    let addr = w.server.metrics.clone().unwrap();
    assert!(get(&addr, "/health").0.contains(" 200 "));
    // The store's file replaced by something that is no store.
    let db = w.env.dir.path().join("store").join("ferrohsm.db");
    assert!(db.exists(), "the test store is at {}", db.display());
    std::fs::write(&db, b"not a database at all, just bytes that fill the header").unwrap();
    let (status, _, body) = get(&addr, "/health");
    assert!(status.contains(" 503 "), "{status}: {body}");
    assert!(body.contains("cannot be read"), "{body}");
}

#[test]
fn a_client_over_its_calls_per_second_is_refused_with_a_reason() {
    let w = World::with("info", METRICS, "max_calls_per_second = 5");
    w.client("signer");
    let p = load();
    let alpha = slot_of(&p, "alpha").unwrap();
    let (mut ok, mut refused) = (0, 0);
    for _ in 0..40 {
        match p.get_token_info(alpha) {
            Ok(_) => ok += 1,
            Err(e) => {
                assert_eq!(rv(e), RvError::FunctionFailed);
                refused += 1;
            }
        }
    }
    p.finalize().unwrap();
    assert!(refused > 0 && ok > 0, "ok {ok}, refused {refused}");
    assert!(
        w.server
            .logged("client signer is over its limit of 5 calls per second"),
        "{}",
        w.server.log()
    );
    let (_, _, body) = get(w.server.metrics.as_ref().unwrap(), "/metrics");
    let counted = sample(
        &body,
        "ferrohsm_refusals_total{client=\"signer\",reason=\"max_calls_per_second\"}",
    );
    // Calls refused before this loop (the slot search) count too.
    assert!(
        counted.is_some_and(|n| n >= f64::from(refused)),
        "{counted:?} < {refused}: {body}"
    );
}

/// `ferrohsm-util speed --remote`: the figures are measured through the server (its counters
/// see the signatures), the table says the server's engine signed, and the keys it made were
/// session objects: the token holds none after the run.
#[test]
fn speed_measures_through_the_server_and_leaves_no_key() {
    let w = World::with("info", METRICS, "");
    w.client("signer");
    let conf = w.server.client_conf("signer");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ferrohsm-util"))
        .args(["--module", module_path().to_str().unwrap(), "speed", "--remote"])
        .arg(&conf)
        .args([
            "--token",
            "alpha",
            "--pin",
            USER_PIN,
            "--sizes",
            "1024",
            "--seconds",
            "0.2",
        ])
        .args(["--curves", "p256", "--pq", "", "--threads", "2"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rsa = text
        .lines()
        .find(|l| l.starts_with("rsa  1024 bits") && l.contains("sign/s per core"))
        .unwrap_or_else(|| panic!("no RSA-1024 line: {text}"));
    assert!(rsa.contains("kernel (the server's)"), "{rsa}");
    assert!(
        text.contains("ecdsa (nistp256)") && text.contains("(the server's)"),
        "{text}"
    );
    let (_, _, body) = get(w.server.metrics.as_ref().unwrap(), "/metrics");
    let signed = |request: &str| {
        sample(
            &body,
            &format!("ferrohsm_calls_total{{client=\"signer\",request=\"{request}\",outcome=\"CKR_OK\"}}"),
        )
        .unwrap_or(0.0)
    };
    let signed = signed("Sign") + signed("SignInitAndSign");
    assert!(signed >= 10.0, "{signed}: {body}");
    let p = load();
    let alpha = slot_of(&p, "alpha").unwrap();
    let s = user_session(&p, alpha);
    assert_eq!(
        s.find_objects(&[]).unwrap().len(),
        0,
        "speed left keys on the server's token"
    );
}
