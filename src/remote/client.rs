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
//! Session handles are the client's own, each mapped to the connection it was opened on and
//! the server's handle. A session belongs to its connection on the server (the server closes
//! it when the connection drops), so when a connection is lost the client opens each session
//! again on the next connection, at its next call (`Client::resume`): on the next server of
//! `remote.servers` when the lost one does not answer, the handle unchanged. What the
//! application had set up on it is set up again: the login (the PIN the application gave,
//! kept for that, zeroized when the application logs out or closes the token's last session)
//! and a single-part signature or verification operation that was initialised and not ended
//! (its mechanism and key: token objects' handles are their store ids, the same on every
//! server of one store). A call that was on the wire when the connection went is made again
//! there when making it twice cannot change anything (reads, and such a signature or
//! verification); any other answers `CKR_DEVICE_ERROR`, since the lost server may have done
//! it. Lost with the connection, as a restarted token loses them: session objects, a search,
//! and multi-part or encryption operations in progress (the next call of one answers
//! `CKR_OPERATION_NOT_INITIALIZED`).

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
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;
use zeroize::Zeroizing;

/// A session as the client knows it.
#[derive(Clone)]
struct RemoteSession {
    /// The connection it was opened on (`Conn::id`).
    conn: u64,
    /// The server's handle.
    handle: u64,
    /// What it was opened with, to open it again on another connection.
    slot: u64,
    flags: u64,
    /// The session's signature operation as far as the client can answer for it.
    sign: Option<Signing>,
    /// The single-part operations initialised and not ended, made again on another
    /// connection (`Replay`).
    replay: Replay,
    /// A `C_SignInit` held back, to travel with the `C_Sign` that follows it
    /// (`Client::hold_sign_init`).
    pending: Option<Init>,
}

/// An operation's `*Init` as the application made it: its mechanism and key.
pub(super) type Init = (proto::Mechanism, u64);

/// The operations a resumed session gets back: a signature or verification initialised and
/// fed nothing yet. Set when the server accepted the `*Init`, dropped at every call that may
/// end the operation or feeds it a part, so that an operation the application ended is never
/// made again.
#[derive(Clone, Default)]
pub(super) struct Replay {
    pub sign: Option<Init>,
    pub verify: Option<Init>,
}

/// The application's login to a token, made again on each new connection.
struct Login {
    user: u64,
    pin: Zeroizing<Vec<u8>>,
    /// The connection where it holds.
    conn: u64,
}

/// A call that did not reach an answer because the connection went: the lost server may or
/// may not have made it.
struct Lost;

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
    /// The server tried first for the next connection: the one after a lost one.
    first_server: AtomicUsize,
    /// Per slot, the login the application made.
    logins: Mutex<HashMap<u64, Login>>,
    /// Held while a session is opened again on a new connection, so that each is resumed
    /// and each token logged in once.
    resuming: Mutex<()>,
    /// The signature length of each mechanism and key initialised on a connection: a
    /// `C_SignInit` of one of these is held back and sent with its `C_Sign`.
    known: DashMap<(u64, Init), usize>,
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
            first_server: AtomicUsize::new(0),
            logins: Mutex::new(HashMap::new()),
            resuming: Mutex::new(()),
            known: DashMap::new(),
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

    /// The live connection, made if there is none: the servers tried in order, from the one
    /// after the server last lost.
    fn connection(&self) -> Result<Conn> {
        let mut slot = self.conn.lock();
        if let Some(c) = slot.as_ref() {
            if !c.sender.is_closed() {
                return Ok(c.clone());
            }
            self.left(c.server);
        }
        *slot = None;
        let mut last = String::new();
        let first = self.first_server.load(Ordering::Relaxed);
        for i in (0..self.servers.len()).map(|k| (first + k) % self.servers.len()) {
            let (addr, name) = &self.servers[i];
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
            log::warn!("remote: cannot reach {last}");
        }
        log::error!(
            "remote: no server reached (last: {last}); check remote.servers, that ferrohsm-server runs, and the certificates"
        );
        Err(Error(CKR_DEVICE_ERROR))
    }

    /// Forgets `conn` after a call on it was lost, if it is still the live one: the next call
    /// connects again, to the next server first.
    fn lose(&self, conn: &Conn) {
        let mut slot = self.conn.lock();
        if slot.as_ref().is_some_and(|c| c.id == conn.id) {
            self.left(conn.server);
            *slot = None;
        }
    }

    /// Says that the connection to server `i` was lost, and has the next one tried first.
    fn left(&self, i: usize) {
        log::warn!("remote: the connection to {} was lost", self.servers[i].0);
        self.first_server
            .store((i + 1) % self.servers.len(), Ordering::Relaxed);
    }

    /// One call without a session: the request out, the answer back, the token's error as its
    /// `CK_RV`. A read lost with its connection is asked again on the next one.
    pub(super) fn call(&self, req: &Request) -> Result<Reply> {
        self.call_with_conn(req).map(|(_, reply)| reply)
    }

    /// `call`, and the connection that answered.
    fn call_with_conn(&self, req: &Request) -> Result<(Conn, Reply)> {
        let conn = self.connection()?;
        match self.call_on(&conn, req) {
            Ok(answer) => answer.map(|reply| (conn, reply)),
            Err(Lost) => {
                self.lose(&conn);
                if !again(req) {
                    return Err(Error(CKR_DEVICE_ERROR));
                }
                let conn = self.connection()?;
                let reply = self.call_on(&conn, req).unwrap_or(Err(Error(CKR_DEVICE_ERROR)))?;
                Ok((conn, reply))
            }
        }
    }

    /// One exchange on `conn`; `Err(Lost)` when the connection failed under it (logged).
    fn call_on(&self, conn: &Conn, req: &Request) -> std::result::Result<Result<Reply>, Lost> {
        let body = match proto::encode(req) {
            Ok(b) => b,
            Err(e) => return Ok(Err(e)),
        };
        let uri = format!("https://{}{}", self.servers[conn.server].0, proto::PATH);
        let mut sender = conn.sender.clone();
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
        let answer = match self.run(async move { tokio::time::timeout(timeout, exchange).await }) {
            Ok(a) => a,
            Err(e) => return Ok(Err(e)),
        };
        let server = &self.servers[conn.server].0;
        let (status, bytes) = match answer {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => {
                log::warn!("remote: {} to {server} failed: {e}", req.name());
                return Err(Lost);
            }
            Err(_) => {
                // Not made again: the server may still be making it. The connection is left
                // (a server that stops answering is as good as lost), so the next call goes to
                // the next server.
                log::error!(
                    "remote: {server} did not answer {} within {:?} (remote.timeout_ms); leaving it",
                    req.name(),
                    self.timeout
                );
                self.lose(conn);
                return Ok(Err(Error(CKR_DEVICE_ERROR)));
            }
        };
        Ok(answer_of(server, status, &bytes))
    }

    /// The server's handle of session `h`, and the connection it lives on: opened again
    /// there if it was opened on a connection since lost.
    pub(super) fn session(&self, h: CK_SESSION_HANDLE) -> Result<(Conn, u64)> {
        let (on, handle) = self
            .sessions
            .get(&h)
            .map(|s| (s.conn, s.handle))
            .ok_or(Error(CKR_SESSION_HANDLE_INVALID))?;
        let conn = self.connection()?;
        if conn.id == on {
            return Ok((conn, handle));
        }
        self.resume(h, conn)
    }

    /// Opens session `h` again on `conn`, logs its token in if the application had, and
    /// initialises again the operations it had running (`Replay`).
    fn resume(&self, h: CK_SESSION_HANDLE, conn: Conn) -> Result<(Conn, u64)> {
        let _one = self.resuming.lock();
        let s = self
            .sessions
            .get(&h)
            .map(|s| s.clone())
            .ok_or(Error(CKR_SESSION_HANDLE_INVALID))?;
        if s.conn == conn.id {
            return Ok((conn, s.handle)); // another thread did it meanwhile
        }
        let server = &self.servers[conn.server].0;
        let lost = || Error(CKR_DEVICE_ERROR);
        let open = Request::OpenSession {
            slot: s.slot,
            flags: s.flags,
        };
        let handle = match self.call_on(&conn, &open).map_err(|Lost| lost())?? {
            Reply::Handle(handle) => handle,
            _ => return Err(unexpected()),
        };
        self.log_in_again(&conn, s.slot, handle)?;
        // Each operation initialised again, or forgotten (logged) when the server refuses.
        let again_on =
            |init: &mut Option<Init>, what: &str, make: fn(u64, proto::Mechanism, u64) -> Request| {
                let Some((mechanism, key)) = init.clone() else {
                    return Ok(());
                };
                if let Err(e) = self
                    .call_on(&conn, &make(handle, mechanism, key))
                    .map_err(|Lost| lost())?
                {
                    log::error!("remote: session {h}'s {what} could not be made again on {server}: {e}");
                    *init = None;
                }
                Ok::<_, Error>(())
            };
        let mut replay = s.replay.clone();
        again_on(
            &mut replay.sign,
            "signature operation",
            |session, mechanism, key| Request::SignInit {
                session,
                mechanism,
                key,
            },
        )?;
        again_on(&mut replay.verify, "verification", |session, mechanism, key| {
            Request::VerifyInit {
                session,
                mechanism,
                key,
            }
        })?;
        // The length the client answers for goes with a signature operation not made again
        // (one held back, `pending`, was never sent and keeps it).
        let sign = s
            .sign
            .filter(|_| replay.sign.is_some() || s.replay.sign.is_none());
        if let Some(mut e) = self.sessions.get_mut(&h) {
            *e = RemoteSession {
                conn: conn.id,
                handle,
                replay,
                sign,
                ..s
            };
        }
        log::info!("remote: session {h} resumed on {server}");
        Ok((conn, handle))
    }

    /// Logs the token of `slot` in on `conn` through its session `handle`, if the
    /// application is logged in to it and it is not yet on that connection.
    fn log_in_again(&self, conn: &Conn, slot: u64, handle: u64) -> Result<()> {
        let mut logins = self.logins.lock();
        let Some(login) = logins.get_mut(&slot).filter(|l| l.conn != conn.id) else {
            return Ok(());
        };
        let req = Request::Login {
            session: handle,
            user: login.user,
            pin: proto::Secret(login.pin.to_vec()),
        };
        match self.call_on(conn, &req).map_err(|Lost| Error(CKR_DEVICE_ERROR))? {
            Ok(_) | Err(Error(CKR_USER_ALREADY_LOGGED_IN)) => {
                login.conn = conn.id;
                Ok(())
            }
            Err(e) => {
                log::error!(
                    "remote: the token in slot {slot} refused the application's login on {}: {e} (was the PIN changed meanwhile?)",
                    self.servers[conn.server].0
                );
                Err(e)
            }
        }
    }

    /// A call on session `h`: `make` builds the request from the server's handle. A call lost
    /// with its connection is made again on the next one when that cannot change anything
    /// (`again`, or a signature or verification that `Replay` sets up again).
    pub(super) fn on_session(
        &self,
        h: CK_SESSION_HANDLE,
        make: impl FnOnce(u64) -> Request,
    ) -> Result<Reply> {
        let (conn, handle) = self.session(h)?;
        let mut req = make(handle);
        let replayed = self.sessions.get(&h).is_some_and(|s| match req {
            Request::Sign { .. } => s.replay.sign.is_some(),
            Request::Verify { .. } => s.replay.verify.is_some(),
            _ => false,
        });
        match self.call_on(&conn, &req) {
            Ok(answer) => answer,
            Err(Lost) => {
                self.lose(&conn);
                if !(replayed || again(&req)) {
                    return Err(Error(CKR_DEVICE_ERROR));
                }
                let (conn, handle) = self.session(h)?;
                if let Some(s) = req.session_mut() {
                    *s = handle;
                }
                self.call_on(&conn, &req).unwrap_or(Err(Error(CKR_DEVICE_ERROR)))
            }
        }
    }

    /// Opens a session on the server and gives it a handle of the client's, logged in when
    /// the application is logged in to the token.
    pub(super) fn add_session(&self, slot: u64, flags: u64) -> Result<CK_SESSION_HANDLE> {
        let (conn, handle) = match self.call_with_conn(&Request::OpenSession { slot, flags })? {
            (conn, Reply::Handle(handle)) => (conn, handle),
            _ => return Err(unexpected()),
        };
        {
            let _one = self.resuming.lock();
            if let Err(e) = self.log_in_again(&conn, slot, handle) {
                let _ = self.call_on(&conn, &Request::CloseSession { session: handle });
                return Err(e);
            }
        }
        let h = self.next_session.fetch_add(1, Ordering::Relaxed);
        self.sessions.insert(
            h,
            RemoteSession {
                conn: conn.id,
                handle,
                slot,
                flags,
                sign: None,
                replay: Replay::default(),
                pending: None,
            },
        );
        Ok(h)
    }

    /// Whether session `h` lives on the live connection (without connecting).
    pub(super) fn is_live(&self, h: CK_SESSION_HANDLE) -> bool {
        let on = self.sessions.get(&h).map(|s| s.conn);
        let conn = self.conn.lock();
        matches!((on, conn.as_ref()), (Some(on), Some(c)) if c.id == on && !c.sender.is_closed())
    }

    /// The slot session `h` was opened on.
    pub(super) fn slot_of(&self, h: CK_SESSION_HANDLE) -> Option<u64> {
        self.sessions.get(&h).map(|s| s.slot)
    }

    /// Remembers the application's login to `slot` (made through session `h`) to make it again
    /// on a new connection.
    // CK_USER_TYPE is u64 here, u32 on other ABIs; the wire's is u64.
    #[allow(clippy::unnecessary_cast)]
    pub(super) fn logged_in(&self, h: CK_SESSION_HANDLE, user: CK_USER_TYPE, pin: &[u8]) {
        if user == CKU_CONTEXT_SPECIFIC {
            return;
        }
        if let Some((slot, conn)) = self.sessions.get(&h).map(|s| (s.slot, s.conn)) {
            self.logins.lock().insert(
                slot,
                Login {
                    user: user as u64,
                    pin: Zeroizing::new(pin.to_vec()),
                    conn,
                },
            );
        }
    }

    /// Forgets the login to `slot` (a logout, or its last session closed).
    pub(super) fn logged_out(&self, slot: u64) {
        self.logins.lock().remove(&slot);
    }

    /// The PIN of the login to `slot` changed to `pin` (`C_SetPIN` by the logged-in user).
    pub(super) fn pin_changed(&self, slot: u64, pin: &[u8]) {
        if let Some(l) = self.logins.lock().get_mut(&slot) {
            l.pin = Zeroizing::new(pin.to_vec());
        }
    }

    /// Holds back `C_SignInit(init)` on session `h` when the client knows what the server
    /// would answer: the mechanism and key were initialised on this connection before (the
    /// signature's length known) and the session has no signature operation. The
    /// initialisation then travels with the `C_Sign` that follows (`SignInitAndSign`), one
    /// round trip per signature instead of two. What the server would refuse at `C_SignInit`
    /// (the key destroyed or its `CKA_SIGN` cleared since, a logout elsewhere) is then refused
    /// at that `C_Sign`, with the same code. `Ok(false)`: not held, send it.
    pub(super) fn hold_sign_init(&self, h: CK_SESSION_HANDLE, init: &Init) -> Result<bool> {
        let (conn, _) = self.session(h)?;
        let Some(mut s) = self.sessions.get_mut(&h) else {
            return Err(Error(CKR_SESSION_HANDLE_INVALID));
        };
        if s.pending.is_some() {
            return Err(Error(CKR_OPERATION_ACTIVE));
        }
        if s.sign.is_some() {
            return Ok(false); // the server answers, CKR_OPERATION_ACTIVE if it still runs
        }
        let Some(len) = self.known.get(&(conn.id, init.clone())).map(|l| *l) else {
            return Ok(false);
        };
        s.pending = Some(init.clone());
        s.sign = Some(Signing { len, parts: false });
        Ok(true)
    }

    /// The `C_SignInit` held back on session `h`, taken (it is sent now).
    pub(super) fn take_pending(&self, h: CK_SESSION_HANDLE) -> Option<Init> {
        self.sessions.get_mut(&h).and_then(|mut s| s.pending.take())
    }

    /// Whether session `h` has a `C_SignInit` held back.
    pub(super) fn has_pending(&self, h: CK_SESSION_HANDLE) -> bool {
        self.sessions.get(&h).is_some_and(|s| s.pending.is_some())
    }

    /// Remembers the signature length of `init` on session `h`'s connection.
    pub(super) fn remember_length(&self, h: CK_SESSION_HANDLE, init: Init, len: usize) {
        if let Some(conn) = self.sessions.get(&h).map(|s| s.conn) {
            self.known.insert((conn, init), len);
        }
    }

    /// Changes what session `h` replays (`Replay`).
    pub(super) fn set_replay(&self, h: CK_SESSION_HANDLE, change: impl FnOnce(&mut Replay)) {
        if let Some(mut s) = self.sessions.get_mut(&h) {
            change(&mut s.replay);
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
        self.sessions.iter_mut().for_each(|mut s| {
            s.sign = None;
            s.replay = Replay::default();
            s.pending = None;
        });
        self.known.clear();
    }

    /// Forgets session `h`; with the token's last session the login goes too, as the token's
    /// does.
    pub(super) fn forget_session(&self, h: CK_SESSION_HANDLE) {
        if let Some((_, s)) = self.sessions.remove(&h) {
            if !self.sessions.iter().any(|o| o.slot == s.slot) {
                self.logged_out(s.slot);
            }
        }
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

/// The answer in an HTTP response from `server`.
fn answer_of(server: &str, status: hyper::StatusCode, bytes: &[u8]) -> Result<Reply> {
    if status == hyper::StatusCode::TOO_MANY_REQUESTS {
        // Over a limit of this client's (the server's [[client]] entry): the call can be
        // made again later, and the server said why.
        log::warn!(
            "remote: {server} refused the call: {}",
            String::from_utf8_lossy(bytes)
        );
        return Err(Error(CKR_FUNCTION_FAILED));
    }
    if !status.is_success() {
        log::error!("remote: {server} answered HTTP {status}");
        return Err(Error(CKR_DEVICE_ERROR));
    }
    match proto::decode::<proto::Response>(bytes) {
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
            log::error!("remote: an answer from {server} could not be read");
            Err(Error(CKR_DEVICE_ERROR))
        }
    }
}

/// Whether a call lost with its connection may be made again on the next: it changes
/// nothing on the token, or what it changes was lost with the connection (a session, a
/// login, a search or an operation being set up).
fn again(req: &Request) -> bool {
    use Request::*;
    matches!(
        req,
        SlotList { .. }
            | CheckSlot { .. }
            | TokenInfo { .. }
            | MechanismList { .. }
            | MechanismInfo { .. }
            | CheckSession { .. }
            | SessionInfo { .. }
            | HasCryptoOperation { .. }
            | Login { .. }
            | ObjectSize { .. }
            | GetAttributes { .. }
            | FindInit { .. }
            | SignInit { .. }
            | VerifyInit { .. }
            | EncryptInit { .. }
            | DecryptInit { .. }
            | DigestInit { .. }
            | GenerateRandom { .. }
            | SignInitAndSign { .. }
    )
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
