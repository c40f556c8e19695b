//! One token in one slot: its record in the store, the application's login state, and the
//! cache of its objects (token objects by store id, session objects of this application).
//!
//! The token-object cache is bounded (`store.cache_mib`): a signer that touches every key of
//! a million-key store keeps the keys it uses, not all of them. quick_cache's CLOCK-Pro keeps
//! entries that are hit again (the keys a signer signs with) over those seen once (a scan by
//! `C_FindObjects`), so a bulk search does not push the working set out. An evicted object is
//! read again from the store on its next use; operations already running hold their own `Arc`.

use super::attributes::Attributes;
use super::object::Object;
use super::policy;
use super::records;
use crate::error::{fail, fail_because, Error, Result};
use crate::store::{Found, Store, TokenRecord, CKR_CHANGED_MEANWHILE};
use cryptoki_sys::*;
use dashmap::DashMap;
use parking_lot::{Mutex, RwLock};
use quick_cache::sync::Cache;
use quick_cache::Weighter;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginState {
    Public,
    User,
    So,
}

pub struct Token {
    pub slot_id: CK_SLOT_ID,
    store: Arc<dyn Store>,
    /// `None` while the slot holds the uninitialised token.
    record: RwLock<Option<TokenRecord>>,
    login: RwLock<LoginState>,
    /// Held by `C_Login` from its check of the login state to its change: logins racing in
    /// this process take turns, so one evaluates the PIN and the others find it logged in.
    pub login_turn: Mutex<()>,
    /// Token objects seen by this process: the object and the store generation it was checked at.
    cache: Cache<CK_OBJECT_HANDLE, Cached, ByFootprint>,
    pub session_objects: DashMap<CK_OBJECT_HANDLE, Arc<Object>>,
    /// Held from the read of an object to its write (`C_SetAttributeValue`) and by every
    /// destruction of objects in this process: otherwise a change racing a destruction writes
    /// back the object it read (a destroyed session object comes back), and two changes
    /// racing each other write back each other's old values (`CKA_SENSITIVE` set by one call,
    /// cleared by the other: a one-way rule broken with `CKR_OK` for both).
    pub object_writes: Mutex<()>,
    /// The store generation last read; a change re-reads the record (`generation`).
    seen_generation: AtomicU64,
}

type Cached = (Arc<Object>, u64);

/// Charges each cached object the memory it holds once used (`Object::footprint`).
#[derive(Clone)]
struct ByFootprint;

impl Weighter<CK_OBJECT_HANDLE, Cached> for ByFootprint {
    fn weight(&self, _: &CK_OBJECT_HANDLE, v: &Cached) -> u64 {
        v.0.footprint() as u64
    }
}

/// The cache's bound in bytes from `store.cache_mib`, and how many objects to size its table for
/// (a typical RSA-2048 private key, so the table is not regrown while it fills).
fn new_cache(cache_bytes: u64) -> Cache<CK_OBJECT_HANDLE, Cached, ByFootprint> {
    let typical = 16 * 1024;
    let items = (cache_bytes / typical).clamp(16, 1 << 20) as usize;
    Cache::with_weighter(items, cache_bytes.max(1), ByFootprint)
}

impl Token {
    pub fn new(
        slot_id: CK_SLOT_ID,
        store: Arc<dyn Store>,
        record: Option<TokenRecord>,
        cache_bytes: u64,
    ) -> Self {
        Token {
            slot_id,
            store,
            record: RwLock::new(record),
            login: RwLock::new(LoginState::Public),
            login_turn: Mutex::new(()),
            cache: new_cache(cache_bytes),
            session_objects: DashMap::new(),
            object_writes: Mutex::new(()),
            seen_generation: AtomicU64::new(0),
        }
    }

    pub fn store(&self) -> &dyn Store {
        &*self.store
    }

    pub fn record(&self) -> Option<TokenRecord> {
        self.record.read().clone()
    }

    pub fn set_record(&self, r: Option<TokenRecord>) {
        *self.record.write() = r;
    }

    /// Re-reads the record (PIN counters change in other processes too). A new epoch means
    /// another process re-initialised the token: its objects are gone and this process's
    /// login with them. A new key generation that this process's key is not of means another
    /// process replaced the token key (a PIN change): the objects stay, the login ends.
    pub fn refresh_record(&self) -> Option<TokenRecord> {
        if let Ok(tokens) = self.store.tokens() {
            if let Some(r) = tokens.into_iter().find(|t| t.slot_id == self.slot_id) {
                let (epoch, key_generation) = (r.epoch, r.key_generation);
                let old = self.record.write().replace(r);
                if old.as_ref().is_some_and(|o| o.epoch != epoch) {
                    self.reinitialised_elsewhere();
                } else if old.is_some_and(|o| o.key_generation != key_generation)
                    && self.login_state() != LoginState::Public
                    && self.store.held_key(self.slot_id) != Some((epoch, key_generation))
                {
                    self.key_replaced_elsewhere();
                }
            }
        }
        self.record()
    }

    fn key_replaced_elsewhere(&self) {
        log::warn!(
            "slot {}: another process replaced the token key (a PIN change or ferrohsm-util rotate-key); this application is logged out: log in again",
            self.slot_id
        );
        self.log_out();
    }

    fn reinitialised_elsewhere(&self) {
        log::warn!(
            "slot {}: the token was re-initialised by another process; its objects are gone and this application is logged out",
            self.slot_id
        );
        self.clear_cache();
        *self.login.write() = LoginState::Public;
        self.store.logout(self.slot_id);
    }

    /// The store generation of this token. A change since the last read re-reads the record,
    /// so a re-initialisation by another process is noticed on the next object access.
    fn generation(&self) -> Result<u64> {
        let g = self.store.generation(self.slot_id)?;
        if self.seen_generation.swap(g, Ordering::Relaxed) != g {
            self.refresh_record();
        }
        Ok(g)
    }

    pub fn is_initialized(&self) -> bool {
        self.record.read().is_some()
    }

    pub fn login_state(&self) -> LoginState {
        *self.login.read()
    }

    pub fn set_login_state(&self, s: LoginState) {
        *self.login.write() = s;
    }

    pub fn user_logged_in(&self) -> bool {
        self.login_state() == LoginState::User
    }

    /// Drops every cached token object (re-initialisation, logout).
    pub fn clear_cache(&self) {
        self.cache.clear();
    }

    /// The object behind `handle` if it exists and this application may see it.
    pub fn object(&self, handle: CK_OBJECT_HANDLE) -> Result<Arc<Object>> {
        let obj = if let Some(o) = self.session_objects.get(&handle) {
            o.clone()
        } else {
            self.token_object(handle)?
        };
        if obj.attrs.is_private() && !self.user_logged_in() {
            return fail_because(
                CKR_OBJECT_HANDLE_INVALID,
                format!("object {handle} is private and no user is logged in"),
            );
        }
        Ok(obj)
    }

    fn token_object(&self, handle: CK_OBJECT_HANDLE) -> Result<Arc<Object>> {
        let generation = self.generation()?;
        if let Some((obj, seen)) = self.cache.get(&handle) {
            if seen == generation {
                return Ok(obj);
            }
        }
        // Another change happened since: reload, and keep the prepared object when the
        // attributes are unchanged so a busy signer does not re-prepare its keys.
        let (attrs, version) = match self.store.load(self.slot_id, handle) {
            Ok(Some(o)) => {
                let version = o.version;
                (records::attributes(o), version)
            }
            Ok(None) => {
                self.cache.remove(&handle);
                return fail_because(CKR_OBJECT_HANDLE_INVALID, format!("object {handle} of slot {} is not in the store (or is private and no user is logged in)", self.slot_id));
            }
            Err(e) => {
                // A record that is damaged or not the token's current one is not used: its
                // handle is invalid (the store logged why).
                self.cache.remove(&handle);
                return Err(if e.rv() == CKR_DEVICE_ERROR {
                    Error(CKR_OBJECT_HANDLE_INVALID)
                } else {
                    e
                });
            }
        };
        Ok(self.remember(handle, attrs, version, generation))
    }

    /// Caches a token object read at `generation`, keeping the prepared object when the
    /// attributes and version are unchanged so a busy signer does not re-prepare its keys.
    fn remember(
        &self,
        handle: CK_OBJECT_HANDLE,
        attrs: Attributes,
        version: u64,
        generation: u64,
    ) -> Arc<Object> {
        let obj = match self.cache.peek(&handle) {
            Some((cached, seen)) if cached.attrs == attrs && cached.version == version => {
                if seen == generation {
                    return cached;
                }
                cached
            }
            _ => {
                let mut o = Object::new(handle, attrs, None);
                o.version = version;
                Arc::new(o)
            }
        };
        self.cache.insert(handle, (obj.clone(), generation));
        obj
    }

    /// Of `handles` (results of a search made at store generation `searched_at`), those that
    /// still exist and are visible. No store read: a result cached at the search's generation
    /// is given as the search found it, a snapshot as of `C_FindObjectsInit` (as SoftHSM gives
    /// its whole result list), less what this process destroyed since (a destroy drops the
    /// cache entry) and less private objects once the user logged out. A result no longer
    /// cached at that generation gets the full check, which reads the store.
    pub fn still_visible(&self, handles: &[CK_OBJECT_HANDLE], searched_at: u64) -> Vec<CK_OBJECT_HANDLE> {
        let logged_in = self.user_logged_in();
        handles
            .iter()
            .copied()
            .filter(|h| {
                let fresh = self
                    .cache
                    .peek(h)
                    .filter(|e| e.1 == searched_at)
                    .map(|e| logged_in || !e.0.attrs.is_private());
                match fresh {
                    Some(visible) => visible,
                    // Changed or evicted since, or a session object: the full check.
                    None => self.object(*h).is_ok(),
                }
            })
            .collect()
    }

    /// Handles of the visible objects matching `template`, token objects first, and the store
    /// generation they were found at (for `still_visible`).
    pub fn find(&self, template: &[(CK_ATTRIBUTE_TYPE, Vec<u8>)]) -> Result<(Vec<CK_OBJECT_HANDLE>, u64)> {
        // The generation is read first: a change in between makes the cache entries stale,
        // never wrongly fresh, and a re-initialisation elsewhere ends the login before it is used.
        let generation = if self.is_initialized() {
            self.generation()?
        } else {
            0
        };
        let with_private = self.user_logged_in();
        let wants = |t: CK_ATTRIBUTE_TYPE| {
            template
                .iter()
                .find(|(x, _)| *x == t)
                .map(|(_, v)| v.as_slice() == [1])
        };
        let mut out = Vec::new();
        if wants(CKA_TOKEN) != Some(false) && self.is_initialized() {
            // One store query. Records this process holds from the current generation are
            // matched on its own copy and not opened again; the others are opened once and
            // cached, so the handles `C_FindObjects` returns need no second read.
            let fresh = |id: u64| {
                self.cache
                    .peek(&id)
                    .filter(|(_, seen)| *seen == generation)
                    .map(|(obj, _)| obj.attrs.is_private())
            };
            let found = self
                .store
                .search(self.slot_id, &records::query(template), with_private, &fresh)?;
            for f in found {
                let (handle, matches) = match f {
                    Found::Known(id) => match self.cache.peek(&id) {
                        Some((obj, _)) => (id, policy::search_matches(&obj.attrs, template)),
                        // Evicted since the search began: read it again.
                        None => match self.token_object(id) {
                            Ok(obj) => (id, policy::search_matches(&obj.attrs, template)),
                            Err(_) => continue,
                        },
                    },
                    Found::Read(o) => {
                        let (handle, version) = (o.id, o.version);
                        let attrs = records::attributes(o);
                        if !policy::search_matches(&attrs, template) {
                            continue;
                        }
                        self.remember(handle, attrs, version, generation);
                        (handle, true)
                    }
                };
                if matches {
                    out.push(handle);
                }
            }
        }
        if wants(CKA_TOKEN) != Some(true) {
            let mut session: Vec<_> = self
                .session_objects
                .iter()
                .filter(|o| {
                    (with_private || !o.attrs.is_private()) && policy::search_matches(&o.attrs, template)
                })
                .map(|o| o.handle)
                .collect();
            session.sort_unstable();
            out.extend(session);
        }
        Ok((out, generation))
    }

    /// Stores new token objects in one transaction; with `source` (a copy's), only if that
    /// token object is still as it was read (`CKR_CHANGED_MEANWHILE` otherwise).
    pub fn store_objects(
        &self,
        objects: &[&Attributes],
        source: Option<&Object>,
    ) -> Result<Vec<CK_OBJECT_HANDLE>> {
        let records: Vec<_> = objects.iter().map(|a| records::split(a)).collect();
        let unchanged: Vec<(u64, u64)> = source
            .filter(|o| o.owner.is_none())
            .map(|o| (o.handle, o.version))
            .into_iter()
            .collect();
        let stored = self.store.create(self.slot_id, &records, &unchanged);
        if stored.as_ref().is_err_and(|e| e.rv() == CKR_CHANGED_MEANWHILE) {
            // Read the source again on the next try.
            for (h, _) in &unchanged {
                self.cache.remove(h);
            }
        }
        stored
    }

    /// Replaces `obj` (as read) with `attrs`: `CKR_CHANGED_MEANWHILE` when a token object
    /// changed in the store since it was read.
    pub fn update_object(&self, obj: &Object, attrs: Attributes) -> Result<()> {
        if obj.owner.is_some() {
            let new = Arc::new(Object::new(obj.handle, attrs, obj.owner));
            self.session_objects.insert(obj.handle, new);
            Ok(())
        } else {
            let done = self
                .store
                .update(self.slot_id, obj.handle, obj.version, &records::split(&attrs));
            self.cache.remove(&obj.handle);
            done
        }
    }

    /// Destroys `obj` (as read): `CKR_CHANGED_MEANWHILE` when a token object changed in the
    /// store since it was read (it may have become indestructible).
    pub fn destroy_object(&self, obj: &Object) -> Result<()> {
        if obj.owner.is_some() {
            self.session_objects
                .remove(&obj.handle)
                .map(|_| ())
                .ok_or(Error(CKR_OBJECT_HANDLE_INVALID))
        } else {
            self.cache.remove(&obj.handle);
            self.store.destroy(self.slot_id, obj.handle, obj.version)
        }
    }

    /// Runs a read-check-write of token objects (`C_SetAttributeValue`, `C_CopyObject`,
    /// `C_DestroyObject`) until it writes over what it read: when another process or host
    /// changed the object meanwhile, `f` runs again on the object as it is now, so its checks
    /// see the change (a one-way flag set elsewhere stays set) and no change is lost.
    pub fn until_unchanged<R>(&self, mut f: impl FnMut() -> Result<R>) -> Result<R> {
        const TRIES: usize = 100;
        for _ in 0..TRIES {
            match f() {
                Err(e) if e.rv() == CKR_CHANGED_MEANWHILE => {
                    // Read it again: the generation moved, so the cache entry is stale.
                    continue;
                }
                done => return done,
            }
        }
        log::error!(
            "slot {}: an object changed in the store {TRIES} times while this process tried to change it; try again",
            self.slot_id
        );
        fail(CKR_FUNCTION_FAILED)
    }

    /// Destroys the session objects a closing session owned.
    pub fn drop_session_objects(&self, session: CK_SESSION_HANDLE) {
        let _writes = self.object_writes.lock();
        self.session_objects.retain(|_, o| o.owner != Some(session));
    }

    /// Ends this application's login (`C_Logout`, or the close of its last session): the store
    /// forgets the token key, every private session object is destroyed (PKCS#11: their handles
    /// stay invalid after a later login), and the token objects this process unsealed leave the
    /// cache (their key material dropped and zeroized, not kept until the next login).
    pub fn log_out(&self) {
        self.set_login_state(LoginState::Public);
        self.store.logout(self.slot_id);
        let _writes = self.object_writes.lock();
        self.session_objects.retain(|_, o| !o.attrs.is_private());
        self.clear_cache();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::backend::memory::MemoryBackend;
    use crate::store::backend::testing::Probe;
    use crate::store::{PinOwner, Sealed};

    /// `C_FindObjects` on token objects: one generation read and one search at
    /// `C_FindObjectsInit`, then no store read to hand the results out.
    #[test]
    fn a_search_and_its_results_take_a_constant_number_of_store_reads() {
        let (backend, calls) = Probe::new(MemoryBackend::new());
        let kdf = crate::store::sealed::crypt::KdfParams {
            memory_kib: 64,
            passes: 1,
        };
        let store: Arc<dyn Store> = Arc::new(Sealed::new(Box::new(backend), kdf, 3));
        let record = store
            .init_token(0, b"so-pin", &[b' '; 32], Some(b"user"))
            .unwrap();
        store.login(0, PinOwner::User, b"user").unwrap();
        let token = Token::new(0, store.clone(), Some(record), 1 << 20);
        token.set_login_state(LoginState::User);
        let keys: Vec<Attributes> = (0..40u8)
            .map(|i| {
                let mut a = Attributes::new();
                a.set_ulong(CKA_CLASS, CKO_SECRET_KEY);
                a.set_bool(CKA_TOKEN, true);
                a.set_bool(CKA_PRIVATE, true);
                a.set(CKA_LABEL, b"batch".to_vec());
                a.set(CKA_ID, vec![i]);
                a.set(CKA_VALUE, vec![i; 16]);
                a
            })
            .collect();
        token
            .store_objects(&keys.iter().collect::<Vec<_>>(), None)
            .unwrap();
        calls.reset();
        let template = vec![(CKA_LABEL, b"batch".to_vec())];
        let (found, at) = token.find(&template).unwrap();
        assert_eq!(found.len(), 40);
        let visible: Vec<_> = found
            .chunks(10)
            .flat_map(|c| token.still_visible(c, at))
            .collect();
        assert_eq!(visible, found);
        // One generation read and one search; and one token read because the generation
        // moved since this token last looked (the re-initialisation check).
        assert_eq!(calls.find.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(calls.object.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert_eq!(calls.reads(), 2 + 1);
        // The secret value came back opened, once, and is in the cache.
        assert_eq!(
            token.object(found[3]).unwrap().attrs.get(CKA_VALUE),
            Some(&[3u8; 16][..])
        );
        // A destroyed object drops out of the results.
        token.destroy_object(&token.object(found[0]).unwrap()).unwrap();
        assert_eq!(token.still_visible(&found[..2], at), vec![found[1]]);
        // So do private objects once the user logged out.
        token.set_login_state(LoginState::Public);
        assert_eq!(
            token.still_visible(&found[1..3], at),
            Vec::<CK_OBJECT_HANDLE>::new()
        );
    }
}
