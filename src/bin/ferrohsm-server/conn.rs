//! Listening, the TLS handshake, and each connection's life: its identity, its token library
//! (its own store handle, login state and sessions, as an application of its own), and the
//! HTTP/2 streams that carry its calls. A connection that drops takes its sessions with it.
//!
//! Where a call runs. Every call used to go to tokio's blocking pool: a hand-off to a pool
//! thread and one back per request, two wake-ups of the ~4 of a loopback round trip. Calls that
//! never wait are now answered on the stream's own task (`dispatch::waits`): `SignInit`, and
//! `Sign` on a session signing with ECDSA, EdDSA or a MAC, which the token computes on the
//! calling thread in tens of microseconds. The others stay on the pool: an RSA private
//! operation waits in the engine's combining scheduler for the rest of its batch, and only
//! threads that may wait let the batch fill. Measured on the 2-core Zen 4 of
//! docs/performance.md ("Fewer hand-offs", loaded by other builds, one `bench` run each, 3 s,
//! on fe881ca before the limits and counters,
//! same client): everything on the pool 991-1,101 RSA-2048 and 1,750-1,983 P-256 signatures/s
//! at 1 thread, 3,960-4,139 and 7,048-7,172 at 16; everything on the task 1,030 and 2,629 at 1,
//! 2,204 and 8,049 at 16 (RSA's batches no longer fill); `block_in_place` for everything 1,417
//! and 2,482 at 1, 3,885 and 6,543 at 16; the split kept (quick calls on the task, the rest on
//! the pool) 1,282-1,376 and 2,254 at 1, 4,154-4,992 and 8,801 at 16, against
//! `block_in_place` for the rest 1,224-1,465 RSA-2048 at 1 and 3,496-4,171 at 16 (every
//! waiting thread takes a worker's place, and the core moves between threads).

use crate::config::{ClientRule, Server};
use crate::dispatch;
use crate::limits;
use crate::metrics::{Metrics, Served};
use bytes::Bytes;
use ferrohsm::remote::proto::{self, Reply, Request};
use ferrohsm::token::Library;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

/// One client connection: who it is, what it may see, and its token library.
pub struct Connection {
    pub who: String,
    pub rule: ClientRule,
    pub lib: Library,
    /// The identity, as the counters and the audit records name it.
    pub identity: Arc<str>,
    limit: Arc<limits::ClientLimit>,
    metrics: Arc<Metrics>,
    /// The sessions whose signature operation (their last `SignInit`) the token computes on
    /// the calling thread without waiting (`dispatch::quick_sign`): their `C_Sign` is answered
    /// on the connection's task.
    pub quick_signs: Mutex<HashSet<u64>>,
    /// The store is a database across the network (PostgreSQL): any call may wait on it, and
    /// its client blocks on a runtime of its own, which tokio refuses inside a task; so every
    /// call runs on the blocking pool.
    pub store_waits: bool,
}

/// What every connection shares: the configuration, the counters and the clients' limits.
struct Shared {
    config: Arc<Server>,
    metrics: Arc<Metrics>,
    limits: limits::Limits,
}

pub fn run(config: Server) -> Result<(), String> {
    ferrohsm::logging::init(Some(&config.module.log));
    // A client that moves here from another server keeps no handle that names an object here.
    ferrohsm::token::handles::randomize_session_object_handles();
    ferrohsm::engine::configure(
        config.module.engine.kernel.as_deref(),
        config.module.engine.force_portable,
    )?;
    // The store is opened once here so that a bad configuration stops the server at start.
    let store = ferrohsm::store::open(&config.module)?;
    let tls = tls_config(&config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the server's threads: {e}"))?;
    let shared = Arc::new(Shared {
        config: Arc::new(config),
        metrics: Arc::default(),
        limits: limits::Limits::default(),
    });
    runtime.block_on(async move {
        if let Some(addr) = shared.config.metrics_listen.clone() {
            crate::metrics::serve(addr, shared.metrics.clone(), store).await?;
        }
        listen(shared, tls).await
    })
}

fn tls_config(config: &Server) -> Result<Arc<rustls::ServerConfig>, String> {
    use ferrohsm::remote::tls;
    let roots = Arc::new(tls::roots(&config.ca)?);
    let webpki = rustls::server::WebPkiClientVerifier::builder_with_provider(roots, tls::provider())
        .build()
        .map_err(|e| format!("{}: {e}", config.ca.display()))?;
    let verifier = Arc::new(crate::identity::NamingVerifier(webpki));
    let mut server = rustls::ServerConfig::builder_with_provider(tls::provider())
        .with_protocol_versions(tls::VERSIONS)
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(tls::certificates(&config.cert)?, tls::private_key(&config.key)?)
        .map_err(|e| format!("the server certificate and key do not go together: {e}"))?;
    server.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(server))
}

async fn listen(shared: Arc<Shared>, tls: Arc<rustls::ServerConfig>) -> Result<(), String> {
    let config = &shared.config;
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    log::info!("listening on {addr}");
    // Said on stdout too: with `listen = "127.0.0.1:0"` it is how a caller learns the port.
    println!("ferrohsm-server: listening on {addr}");
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                log::warn!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, shared) = (acceptor.clone(), shared.clone());
        tokio::spawn(async move { serve(tcp, peer, acceptor, shared).await });
    }
}

async fn serve(
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    acceptor: tokio_rustls::TlsAcceptor,
    shared: Arc<Shared>,
) {
    let config = &shared.config;
    let metrics = &shared.metrics;
    let stream = match acceptor.accept(tcp).await {
        Ok(s) => s,
        Err(e) => {
            log::warn!("{peer}: TLS handshake refused: {e}");
            metrics.refused(&peer.ip().to_string(), "handshake");
            return;
        }
    };
    let Some(cert) = stream.get_ref().1.peer_certificates().and_then(|c| c.first()) else {
        log::warn!("{peer}: no client certificate; connection closed");
        metrics.refused(&peer.ip().to_string(), "no_certificate");
        return;
    };
    let names = crate::identity::names(cert);
    let Some(rule) = config
        .clients
        .iter()
        .find(|r| names.names.contains(&r.identity))
        .cloned()
    else {
        log::warn!(
            "{peer}: certificate \"{}\" is signed by the CA but no [[client]] identity matches {:?}; connection closed",
            names.subject,
            names.names
        );
        metrics.refused(&names.subject, "unknown_identity");
        return;
    };
    let who = format!("{}@{peer}", rule.identity);
    // A store handle of the connection's own: login state and the token key it unseals are
    // this client's, as they are a process's with the local module.
    let module = config.module.clone();
    let store = match tokio::task::spawn_blocking(move || ferrohsm::store::open(&module)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            log::error!("{who}: cannot open the store: {e}");
            return;
        }
        Err(e) => {
            log::error!("{who}: cannot open the store: {e}");
            return;
        }
    };
    log::info!("{who}: connected");
    let conn = Arc::new(Connection {
        who: who.clone(),
        identity: Arc::from(rule.identity.as_str()),
        limit: shared.limits.of(&rule),
        metrics: metrics.clone(),
        rule,
        lib: Library::new(store, u64::from(config.module.store.cache_mib) << 20),
        quick_signs: Mutex::new(HashSet::new()),
        store_waits: config.module.store.backend == "postgres",
    });
    metrics.connected();
    let service = hyper::service::service_fn(move |req| call(conn.clone(), req));
    if let Err(e) = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        log::info!("{who}: connection ended: {e}");
    }
    metrics.disconnected();
    log::info!("{who}: disconnected; its sessions are closed");
}

fn answer(status: StatusCode, body: Vec<u8>) -> hyper::Response<Full<Bytes>> {
    let mut r = hyper::Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}

fn panicked(conn: &Connection) -> proto::Response {
    log::error!("{}: a call panicked", conn.who);
    Err(cryptoki_sys::CKR_GENERAL_ERROR)
}

async fn call(
    conn: Arc<Connection>,
    req: hyper::Request<Incoming>,
) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    if req.method() != Method::POST || req.uri().path() != proto::PATH {
        return Ok(answer(StatusCode::NOT_FOUND, Vec::new()));
    }
    let bytes = match Limited::new(req.into_body(), proto::MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            log::warn!(
                "{}: request refused: {e} (at most {} bytes)",
                conn.who,
                proto::MAX_BODY
            );
            return Ok(answer(StatusCode::PAYLOAD_TOO_LARGE, Vec::new()));
        }
    };
    let response: proto::Response = match proto::decode::<Request>(&bytes) {
        Ok(request) => match request.check() {
            Err(e) => Err(e.rv()),
            Ok(()) => match conn.limit.admit() {
                Err(refusal) => {
                    conn.metrics.refused(&conn.identity, refusal.reason);
                    log::warn!("{}: call refused: {}", conn.who, refusal.message);
                    return Ok(answer(
                        StatusCode::TOO_MANY_REQUESTS,
                        refusal.message.into_bytes(),
                    ));
                }
                Ok(permit) => served(&conn, request, permit).await,
            },
        },
        Err(Some(v)) => {
            log::warn!(
                "{}: speaks protocol version {v}, this server {}",
                conn.who,
                proto::VERSION
            );
            Ok(Reply::Version(proto::VERSION))
        }
        Err(None) => {
            log::warn!("{}: a request could not be decoded", conn.who);
            return Ok(answer(StatusCode::BAD_REQUEST, Vec::new()));
        }
    };
    Ok(match proto::encode(&response) {
        Ok(b) => answer(StatusCode::OK, b),
        Err(_) => answer(StatusCode::INTERNAL_SERVER_ERROR, Vec::new()),
    })
}

/// One admitted call through the token, counted.
async fn served(conn: &Arc<Connection>, request: Request, permit: limits::Permit) -> proto::Response {
    let started = std::time::Instant::now();
    let (name, key, mechanism) = (request.name(), request.key(), request.mechanism().map(|m| m.ty));
    // A call that never waits is answered on the stream's task; one that may wait (the
    // engine's batches, the store, the PIN's key derivation) runs on the blocking pool (the
    // module's top comment says why, measured).
    let response = if !dispatch::waits(conn, &request) {
        std::panic::catch_unwind(AssertUnwindSafe(|| dispatch::call(conn, request)))
            .unwrap_or_else(|_| panicked(conn))
    } else {
        let c = conn.clone();
        tokio::task::spawn_blocking(move || dispatch::call(&c, request))
            .await
            .unwrap_or_else(|_| panicked(conn))
    };
    drop(permit);
    conn.metrics.served(Served {
        client: &conn.identity,
        request: name,
        key,
        mechanism,
        rv: response.as_ref().err().map_or(cryptoki_sys::CKR_OK, |&rv| rv),
        took: started.elapsed(),
    });
    response
}
