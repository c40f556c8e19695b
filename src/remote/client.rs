//! The connection to `ferrohsm-server` and the handles the application holds.
//!
//! The tokio runtime is made here, at `C_Initialize`, and nowhere else: the module starts no
//! thread before it. `C_Finalize` drops the client and with it the runtime (its threads end).
//! In a child after `fork()` the parent's client is abandoned by `ffi` (leaked, never dropped:
//! its runtime's threads do not exist in the child), and the child's `C_Initialize` makes a
//! new one with a new connection.
//!
//! The application's threads never enter the runtime. A call is spawned on it as a task (the
//! exchange, its timeout included) and the calling thread waits for the answer on a plain
//! channel of the standard library (`Client::run`): it parks, and the task that reads the
//! answer wakes it. `Runtime::block_on` did this before, and it panics on a thread that is
//! already inside a runtime of the same copy of tokio: a Rust program that links this crate
//! and calls it from its own tasks (the test below). A module loaded with `dlopen` has a copy
//! of its own, which does not see the application's runtime (tests/remote_access.rs calls it
//! from inside one). The hand-off costs what `block_on`'s did, the same two wake-ups per
//! call (the connection's task woken with the request, the caller with the answer): measured
//! level with it on the 2-core Zen 4 of docs/performance.md ("Fewer hand-offs").
//!
//! Session handles are the client's own, each mapped to a server, the connection it was
//! opened on and the server's handle. A session belongs to its connection on the server (the
//! server closes it when the connection drops), so a handle whose connection is gone answers
//! `CKR_SESSION_HANDLE_INVALID` instead of reaching a new session of the same number. The same
//! map is where failover to another server will hang: a handle can be pointed to a session
//! opened again elsewhere without the application seeing a new number.

use super::proto::{self, Reply, Request};
use crate::config::RemoteConfig;
use crate::error::{Error, Result};
use bytes::Bytes;
use cryptoki_sys::*;
use dashmap::DashMap;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use rustls::pki_types::ServerName;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// A session as the client knows it.
#[derive(Clone, Copy)]
struct RemoteSession {
    /// The connection it was opened on (`Conn::id`).
    conn: u64,
    /// The server's handle.
    handle: u64,
    /// The session's signature operation as far as the client can answer for it.
    sign: Option<Signing>,
}

/// A signature operation running on the server whose length query the client answers itself
/// (saving the round trip of the application's `C_Sign(NULL)`), as the token would: the
/// length the server gave at `SignInit` (`Reply::SignInit`). Held only while the client knows
/// the operation runs: dropped at every call that may end it (a signature made, any error of
/// it, `C_SessionCancel`, `C_Logout`, the session closed), so a query without it is asked of
/// the server as before.
#[derive(Clone, Copy)]
pub(super) struct Signing {
    pub len: usize,
    /// Parts were given (`C_SignUpdate`): the token refuses a one-shot `C_Sign` then, even a
    /// length query (`CKR_OPERATION_ACTIVE`, ending it), so that one goes to the server.
    pub parts: bool,
}

/// One HTTP/2 connection: concurrent calls are its concurrent streams.
#[derive(Clone)]
pub(super) struct Conn {
    id: u64,
    server: usize,
    sender: SendRequest<Full<Bytes>>,
}

pub struct Client {
    runtime: Option<tokio::runtime::Runtime>,
    tls: Arc<rustls::ClientConfig>,
    servers: Vec<(String, ServerName<'static>)>,
    timeout: Duration,
    conn: Mutex<Option<Conn>>,
    next_conn: AtomicU64,
    sessions: DashMap<CK_SESSION_HANDLE, RemoteSession>,
    next_session: AtomicU64,
}

fn config_error(why: String) -> Error {
    log::error!("C_Initialize: [remote]: {why}");
    Error(CKR_GENERAL_ERROR)
}

impl Client {
    /// Reads the certificates and key, and makes the runtime. Connects at the first call, so
    /// that `C_Initialize` succeeds while a server is down (an application may start first).
    ///
    /// With `may_create_threads` false (`CKF_LIBRARY_CANT_CREATE_OS_THREADS`, which GnuTLS and
    /// so p11tool, certtool and Knot pass) the runtime has no thread of its own: each call
    /// drives the connection on the caller's thread while it waits for its answer, which
    /// tokio allows from several application threads at once.
    pub fn open(config: &RemoteConfig, may_create_threads: bool) -> Result<Client> {
        let file = |p: &Option<std::path::PathBuf>| p.clone().unwrap_or_default();
        let roots = super::tls::roots(&file(&config.ca)).map_err(config_error)?;
        let chain = super::tls::certificates(&file(&config.cert)).map_err(config_error)?;
        let key = super::tls::private_key(&file(&config.key)).map_err(config_error)?;
        let mut tls = rustls::ClientConfig::builder_with_provider(super::tls::provider())
            .with_protocol_versions(super::tls::VERSIONS)
            .map_err(|e| config_error(e.to_string()))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| config_error(format!("the client certificate and key do not go together: {e}")))?;
        tls.alpn_protocols = vec![b"h2".to_vec()];
        let mut servers = Vec::new();
        for s in &config.servers {
            let host = match &config.server_name {
                Some(n) => n.clone(),
                None => host_of(s).to_string(),
            };
            let name = ServerName::try_from(host.clone())
                .map_err(|_| config_error(format!("{host:?} is not a host name or address to check a server's certificate against; set remote.server_name")))?;
            servers.push((s.clone(), name));
        }
        // One worker: the connection's task, the calls' tasks and the socket on one thread,
        // with no second worker woken to steal from it. Against two, on the 2-core Zen 4 of
        // docs/performance.md (loaded, four alternated runs at one thread): p50 0.28 ms
        // against 0.33 (P-256) and 0.63 against 0.81 (RSA-2048); level at 16 threads. An
        // application that forbids threads gets a runtime without any: its callers drive it
        // (`Client::run`).
        let runtime = if may_create_threads {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("ferrohsm-remote")
                .enable_all()
                .build()
        } else {
            tokio::runtime::Builder::new_current_thread().enable_all().build()
        }
        .map_err(|e| config_error(format!("cannot start the client's runtime: {e}")))?;
        Ok(Client {
            runtime: Some(runtime),
            tls: Arc::new(tls),
            servers,
            timeout: Duration::from_millis(u64::from(config.timeout_ms)),
            conn: Mutex::new(None),
            next_conn: AtomicU64::new(1),
            sessions: DashMap::new(),
            next_session: AtomicU64::new(1),
        })
    }

    /// Runs `work` on the client's runtime and waits for its result on this thread, which
    /// never enters the runtime: it may be one of another runtime's threads. A runtime without
    /// threads of its own (the application forbade them) is driven by the calling thread
    /// instead, while it waits (several callers may do so at once).
    fn run<T: Send + 'static>(&self, work: impl Future<Output = T> + Send + 'static) -> Result<T> {
        let Some(runtime) = self.runtime.as_ref() else {
            return Err(Error(CKR_DEVICE_ERROR));
        };
        if runtime.handle().runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread {
            return Ok(runtime.block_on(work));
        }
        // Room for the one answer, so the task's send never waits.
        let (tx, rx) = mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = tx.send(work.await);
        });
        // Every task's work is bounded by the client's timeout; the channel closes without an
        // answer only when the runtime shuts down under a call (C_Finalize racing it).
        rx.recv().map_err(|_| {
            log::error!("remote: the client's runtime stopped during a call");
            Error(CKR_DEVICE_ERROR)
        })
    }

    /// The live connection, made if there is none (the servers tried in order).
    fn connection(&self) -> Result<Conn> {
        let mut slot = self.conn.lock();
        if let Some(c) = slot.as_ref() {
            if !c.sender.is_closed() {
                return Ok(c.clone());
            }
            log::warn!(
                "remote: the connection to {} was lost; its sessions are gone",
                self.servers[c.server].0
            );
        }
        *slot = None;
        let mut last = String::new();
        for (i, (addr, name)) in self.servers.iter().enumerate() {
            let attempt = connect(addr.clone(), name.clone(), self.tls.clone());
            let timeout = self.timeout;
            match self.run(async move { tokio::time::timeout(timeout, attempt).await })? {
                Ok(Ok(sender)) => {
                    let c = Conn {
                        id: self.next_conn.fetch_add(1, Ordering::Relaxed),
                        server: i,
                        sender,
                    };
                    log::info!("remote: connected to {addr}");
                    *slot = Some(c.clone());
                    return Ok(c);
                }
                Ok(Err(e)) => last = format!("{addr}: {e}"),
                Err(_) => last = format!("{addr}: no answer within {:?}", self.timeout),
            }
        }
        log::error!(
            "remote: no server reached (last: {last}); check remote.servers, that ferrohsm-server runs, and the certificates"
        );
        Err(Error(CKR_DEVICE_ERROR))
    }

    /// One call: the request out, the answer back, the token's error as its `CK_RV`.
    pub(super) fn call(&self, req: &Request) -> Result<Reply> {
        self.call_on(self.connection()?, req)
    }

    fn call_on(&self, conn: Conn, req: &Request) -> Result<Reply> {
        let body = proto::encode(req)?;
        let uri = format!("https://{}{}", self.servers[conn.server].0, proto::PATH);
        let mut sender = conn.sender;
        let exchange = async move {
            sender.ready().await?;
            let request = hyper::Request::post(uri)
                .body(Full::new(Bytes::from(body)))
                .expect("a POST of a valid URI builds");
            let response = sender.send_request(request).await?;
            let status = response.status();
            let bytes = Limited::new(response.into_body(), proto::MAX_BODY)
                .collect()
                .await
                .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> { e })?
                .to_bytes();
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((status, bytes))
        };
        let timeout = self.timeout;
        let answer = self.run(async move { tokio::time::timeout(timeout, exchange).await })?;
        let (status, bytes) = match answer {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => {
                log::error!("remote: call to {} failed: {e}", self.servers[conn.server].0);
                return Err(Error(CKR_DEVICE_ERROR));
            }
            Err(_) => {
                log::error!(
                    "remote: {} did not answer within {:?} (remote.timeout_ms)",
                    self.servers[conn.server].0,
                    self.timeout
                );
                return Err(Error(CKR_DEVICE_ERROR));
            }
        };
        if status == hyper::StatusCode::TOO_MANY_REQUESTS {
            // Over a limit of this client's (the server's [[client]] entry): the call can be
            // made again later, and the server said why.
            log::warn!(
                "remote: {} refused the call: {}",
                self.servers[conn.server].0,
                String::from_utf8_lossy(&bytes)
            );
            return Err(Error(CKR_FUNCTION_FAILED));
        }
        if !status.is_success() {
            log::error!("remote: {} answered HTTP {status}", self.servers[conn.server].0);
            return Err(Error(CKR_DEVICE_ERROR));
        }
        match proto::decode::<proto::Response>(&bytes) {
            Ok(Ok(Reply::Version(v))) => {
                log::error!(
                    "remote: the server speaks protocol version {v}, this module {}; upgrade the older one",
                    proto::VERSION
                );
                Err(Error(CKR_DEVICE_ERROR))
            }
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(rv)) => Err(Error(rv)),
            Err(_) => {
                log::error!(
                    "remote: an answer from {} could not be read",
                    self.servers[conn.server].0
                );
                Err(Error(CKR_DEVICE_ERROR))
            }
        }
    }

    /// The server's handle of session `h`, and the connection it lives on.
    pub(super) fn session(&self, h: CK_SESSION_HANDLE) -> Result<(Conn, u64)> {
        let s = *self.sessions.get(&h).ok_or(Error(CKR_SESSION_HANDLE_INVALID))?;
        let conn = self.connection()?;
        if conn.id != s.conn {
            // Its connection dropped, and the server closed it with it.
            self.sessions.remove(&h);
            return Err(Error(CKR_SESSION_HANDLE_INVALID));
        }
        Ok((conn, s.handle))
    }

    /// A call on session `h`: `make` builds the request from the server's handle.
    pub(super) fn on_session(
        &self,
        h: CK_SESSION_HANDLE,
        make: impl FnOnce(u64) -> Request,
    ) -> Result<Reply> {
        let (conn, handle) = self.session(h)?;
        self.call_on(conn, &make(handle))
    }

    /// Opens a session on the server and gives it a handle of the client's.
    pub(super) fn add_session(&self, req: &Request) -> Result<CK_SESSION_HANDLE> {
        let conn = self.connection()?;
        let id = conn.id;
        match self.call_on(conn, req)? {
            Reply::Handle(handle) => {
                let h = self.next_session.fetch_add(1, Ordering::Relaxed);
                self.sessions.insert(
                    h,
                    RemoteSession {
                        conn: id,
                        handle,
                        sign: None,
                    },
                );
                Ok(h)
            }
            _ => Err(unexpected()),
        }
    }

    /// The signature operation of session `h` as the client knows it.
    pub(super) fn signing(&self, h: CK_SESSION_HANDLE) -> Option<Signing> {
        self.sessions.get(&h).and_then(|s| s.sign)
    }

    /// Sets (or, `None`, forgets) what the client knows of session `h`'s signature operation.
    pub(super) fn set_signing(&self, h: CK_SESSION_HANDLE, sign: Option<Signing>) {
        if let Some(mut s) = self.sessions.get_mut(&h) {
            s.sign = sign;
        }
    }

    /// Forgets every session's signature operation (`C_Logout` ends those of the token's
    /// sessions on the connection; all are forgotten, the cost only a round trip each).
    pub(super) fn forget_signing(&self) {
        self.sessions.iter_mut().for_each(|mut s| s.sign = None);
    }

    pub(super) fn forget_session(&self, h: CK_SESSION_HANDLE) {
        self.sessions.remove(&h);
    }

    /// The client's handles of its open sessions.
    pub(super) fn session_handles(&self) -> Vec<CK_SESSION_HANDLE> {
        self.sessions.iter().map(|e| *e.key()).collect()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // C_Finalize: the connection task and the runtime's threads end here. Not reached in a
        // forked child (the parent's client is leaked there).
        if let Some(rt) = self.runtime.take() {
            if tokio::runtime::Handle::try_current().is_err() {
                rt.shutdown_timeout(Duration::from_secs(1));
                return;
            }
            // Inside the application's own runtime, where tokio refuses to wait for threads
            // (it panics): the wait happens on a thread of our own, joined here.
            let mut rt = Some(rt);
            std::thread::scope(|scope| {
                let _ = std::thread::Builder::new()
                    .name("ferrohsm-remote-stop".into())
                    .spawn_scoped(scope, || {
                        if let Some(rt) = rt.take() {
                            rt.shutdown_timeout(Duration::from_secs(1));
                        }
                    });
            });
            // No thread could be made: the runtime's threads are told to stop, not waited for.
            if let Some(rt) = rt.take() {
                rt.shutdown_background();
            }
        }
    }
}

/// An answer of the wrong kind for its call: a server bug or a mismatched version.
pub(super) fn unexpected() -> Error {
    log::error!("remote: the server answered a call with a reply of another kind");
    Error(CKR_DEVICE_ERROR)
}

fn host_of(addr: &str) -> &str {
    match addr.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
        None => addr,
    }
}

async fn connect(
    addr: String,
    name: ServerName<'static>,
    tls: Arc<rustls::ClientConfig>,
) -> std::result::Result<SendRequest<Full<Bytes>>, Box<dyn std::error::Error + Send + Sync>> {
    // Resolved here, on the calling thread: tokio would resolve a name on a thread of its
    // blocking pool, which an application that forbids threads does not allow.
    let resolved: Vec<std::net::SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(&addr)?.collect();
    let tcp = tokio::net::TcpStream::connect(&resolved[..]).await?;
    tcp.set_nodelay(true)?;
    let stream = tokio_rustls::TlsConnector::from(tls).connect(name, tcp).await?;
    let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(stream))
        .await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            log::warn!("remote: connection to {addr} ended: {e}");
        }
    });
    Ok(sender)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client whose one server does not listen, with a self-signed certificate and key in
    /// `dir` (no handshake is reached).
    fn client(dir: &std::path::Path) -> Client {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["client".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
        Client::open(
            &RemoteConfig {
                servers: vec!["127.0.0.1:1".to_string()],
                ca: Some(dir.join("cert.pem")),
                cert: Some(dir.join("cert.pem")),
                key: Some(dir.join("key.pem")),
                server_name: None,
                timeout_ms: 2_000,
            },
            true,
        )
        .unwrap()
    }

    /// A program that links this crate shares its copy of tokio, so its tasks call from inside
    /// a runtime this copy sees: `Runtime::block_on` panicked there ("Cannot start a runtime
    /// from within a runtime"), and so did the runtime's shutdown at `C_Finalize`. Both now
    /// answer: the call its error (no server), the drop after joining the runtime's threads.
    #[test]
    fn a_call_and_the_finalize_from_inside_a_tokio_runtime_answer() {
        let dir = tempfile::tempdir().unwrap();
        let runtimes = [
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .unwrap(),
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        ];
        for runtime in runtimes {
            let c = client(dir.path());
            let inside = async move {
                let answer = c.call(&Request::SlotList { token_present: true });
                assert!(matches!(answer, Err(Error(CKR_DEVICE_ERROR))));
                drop(c);
            };
            runtime.block_on(async { tokio::spawn(inside).await }).unwrap();
        }
    }
}
