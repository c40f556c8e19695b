//! What the server counts, and the plain-HTTP endpoint that shows it (`metrics_listen`):
//! `GET /metrics` in the OpenMetrics text format, `GET /health` answering whether the store
//! can be read. Counted: calls by client, request and outcome; their time on the server by
//! request (a histogram); uses of each key by client and mechanism (at each Init, wrap,
//! unwrap and derive: one signature is one `SignInit`); refusals by reason; open
//! connections; and the engine's own counters (operations, failed fault checks, batches by
//! fill), read when scraped.
//!
//! The endpoint is separate from the mutual TLS port and without TLS: it shows counts and
//! identities, never key material, and belongs on a loopback or management address (the
//! default is off). One lock per map: a call takes two short locks, against a round trip of
//! a quarter of a millisecond.

use cryptoki_sys::{CKR_OK, CK_MECHANISM_TYPE, CK_RV};
use ferrohsm::engine;
use ferrohsm::error::rv_name;
use ferrohsm::store::Store;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Upper bounds of the latency histogram's buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.1, 1.0, 10.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// A call as the counters see it.
pub struct Served<'a> {
    pub client: &'a Arc<str>,
    pub request: &'static str,
    pub key: Option<u64>,
    pub mechanism: Option<CK_MECHANISM_TYPE>,
    pub rv: CK_RV,
    pub took: Duration,
}

/// Calls by (client, request, outcome).
type Calls = HashMap<(Arc<str>, &'static str, CK_RV), u64>;
/// Key uses by (client, key handle, mechanism).
type KeyUses = HashMap<(Arc<str>, u64, CK_MECHANISM_TYPE), u64>;

#[derive(Default)]
pub struct Metrics {
    connections: AtomicI64,
    calls: Mutex<Calls>,
    latency: Mutex<HashMap<&'static str, Histogram>>,
    keys: Mutex<KeyUses>,
    refusals: Mutex<HashMap<(String, &'static str), u64>>,
}

/// An OpenMetrics label value: backslash, quote and newline escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

impl Metrics {
    pub fn connected(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    pub fn disconnected(&self) {
        self.connections.fetch_sub(1, Ordering::Relaxed);
    }

    /// A connection or call refused: `client` is the identity when known, else the peer.
    pub fn refused(&self, client: &str, reason: &'static str) {
        *self
            .refusals
            .lock()
            .entry((client.to_string(), reason))
            .or_default() += 1;
    }

    pub fn served(&self, s: Served) {
        *self
            .calls
            .lock()
            .entry((s.client.clone(), s.request, s.rv))
            .or_default() += 1;
        if let (Some(key), Some(m), CKR_OK) = (s.key, s.mechanism, s.rv) {
            *self.keys.lock().entry((s.client.clone(), key, m)).or_default() += 1;
        }
        let secs = s.took.as_secs_f64();
        let mut latency = self.latency.lock();
        let h = latency.entry(s.request).or_default();
        if let Some(i) = BUCKETS.iter().position(|&b| secs <= b) {
            h.counts[i] += 1;
        }
        h.count += 1;
        h.sum += secs;
    }

    /// Every counter, in the OpenMetrics text format (sorted, so a scrape reads the same way
    /// each time).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let family = |out: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(out, "# TYPE {name} {kind}\n# HELP {name} {help}");
        };
        family(
            &mut out,
            "ferrohsm_connections",
            "gauge",
            "Client connections open.",
        );
        let _ = writeln!(
            out,
            "ferrohsm_connections {}",
            self.connections.load(Ordering::Relaxed)
        );

        family(
            &mut out,
            "ferrohsm_calls",
            "counter",
            "PKCS#11 calls served, by client identity, request and outcome.",
        );
        let calls: BTreeMap<_, _> = self
            .calls
            .lock()
            .iter()
            .map(|((c, r, rv), n)| ((c.clone(), *r, rv_name(*rv)), *n))
            .collect();
        for ((client, request, outcome), n) in calls {
            let _ = writeln!(
                out,
                "ferrohsm_calls_total{{client=\"{}\",request=\"{request}\",outcome=\"{outcome}\"}} {n}",
                label(&client)
            );
        }

        family(
            &mut out,
            "ferrohsm_call_seconds",
            "histogram",
            "Time a call takes on the server, from its decoded request to its answer, by request.",
        );
        let latency = self.latency.lock();
        let mut requests: Vec<_> = latency.keys().copied().collect();
        requests.sort_unstable();
        for r in requests {
            let h = &latency[r];
            let mut cumulative = 0;
            for (b, c) in BUCKETS.iter().zip(h.counts) {
                cumulative += c;
                let _ = writeln!(
                    out,
                    "ferrohsm_call_seconds_bucket{{request=\"{r}\",le=\"{b}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "ferrohsm_call_seconds_bucket{{request=\"{r}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(out, "ferrohsm_call_seconds_sum{{request=\"{r}\"}} {}", h.sum);
            let _ = writeln!(out, "ferrohsm_call_seconds_count{{request=\"{r}\"}} {}", h.count);
        }
        drop(latency);

        family(
            &mut out,
            "ferrohsm_key_uses",
            "counter",
            "Operations started with a key (its object handle), by client and mechanism.",
        );
        let keys: BTreeMap<_, _> = self.keys.lock().iter().map(|(k, n)| (k.clone(), *n)).collect();
        for ((client, key, m), n) in keys {
            let _ = writeln!(
                out,
                "ferrohsm_key_uses_total{{client=\"{}\",key=\"{key}\",mechanism=\"0x{m:08x}\"}} {n}",
                label(&client)
            );
        }

        family(
            &mut out,
            "ferrohsm_refusals",
            "counter",
            "Connections and calls refused, by client (identity or peer address) and reason.",
        );
        let refusals: BTreeMap<_, _> = self
            .refusals
            .lock()
            .iter()
            .map(|(k, n)| (k.clone(), *n))
            .collect();
        for ((client, reason), n) in refusals {
            let _ = writeln!(
                out,
                "ferrohsm_refusals_total{{client=\"{}\",reason=\"{reason}\"}} {n}",
                label(&client)
            );
        }

        let e = engine::stats();
        family(
            &mut out,
            "ferrohsm_engine_operations",
            "counter",
            "Private-key operations of the RSA engine.",
        );
        let _ = writeln!(out, "ferrohsm_engine_operations_total {}", e.operations);
        family(
            &mut out,
            "ferrohsm_engine_fault_checks_failed",
            "counter",
            "Results withheld because their check failed (and computed again).",
        );
        let _ = writeln!(
            out,
            "ferrohsm_engine_fault_checks_failed_total {}",
            e.fault_checks_failed
        );
        family(
            &mut out,
            "ferrohsm_engine_batches",
            "counter",
            "Calls of the engine's kernels, by the signatures each carried.",
        );
        for (i, n) in e.batches.iter().enumerate() {
            let _ = writeln!(
                out,
                "ferrohsm_engine_batches_total{{signatures=\"{}\"}} {n}",
                i + 1
            );
        }
        family(
            &mut out,
            "ferrohsm_engine_batch_fill",
            "gauge",
            "Mean signatures per kernel call since start.",
        );
        let _ = writeln!(out, "ferrohsm_engine_batch_fill {}", e.mean_batch_fill);
        out.push_str("# EOF\n");
        out
    }
}

/// Serves `GET /metrics` and `GET /health` on `addr` (plain HTTP/1.1) until the process ends.
pub async fn serve(addr: String, metrics: Arc<Metrics>, store: Arc<dyn Store>) -> Result<(), String> {
    use bytes::Bytes;
    use http_body_util::Full;
    use hyper::{Method, Response, StatusCode};
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} (metrics_listen): {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    log::info!("metrics and health on http://{local}/metrics and /health");
    println!("ferrohsm-server: metrics on {local}");
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let (metrics, store) = (metrics.clone(), store.clone());
            let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let (metrics, store) = (metrics.clone(), store.clone());
                async move {
                    let reply = |status, kind: &'static str, body: String| {
                        let mut r = Response::new(Full::new(Bytes::from(body)));
                        *r.status_mut() = status;
                        r.headers_mut().insert(
                            hyper::header::CONTENT_TYPE,
                            hyper::header::HeaderValue::from_static(kind),
                        );
                        r
                    };
                    Ok::<_, std::convert::Infallible>(match (req.method(), req.uri().path()) {
                        (&Method::GET, "/metrics") => reply(
                            StatusCode::OK,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            metrics.render(),
                        ),
                        (&Method::GET, "/health") => {
                            let read = tokio::task::spawn_blocking(move || store.probe()).await;
                            match read {
                                Ok(Ok(t)) => {
                                    reply(StatusCode::OK, "text/plain", format!("ok: {t} token(s)\n"))
                                }
                                Ok(Err(e)) => reply(
                                    StatusCode::SERVICE_UNAVAILABLE,
                                    "text/plain",
                                    format!(
                                        "the store cannot be read ({}); see the server's log\n",
                                        rv_name(e.rv())
                                    ),
                                ),
                                Err(_) => reply(
                                    StatusCode::SERVICE_UNAVAILABLE,
                                    "text/plain",
                                    "the store check failed\n".into(),
                                ),
                            }
                        }
                        _ => reply(
                            StatusCode::NOT_FOUND,
                            "text/plain",
                            "GET /metrics or /health\n".into(),
                        ),
                    })
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    Ok(())
}
