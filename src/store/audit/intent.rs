//! What the token layer tells the store about the call under way, so the record the store
//! writes in its transaction names the PKCS#11 event (a key pair generated, not merely two
//! objects created), its mechanism and the caller. Per thread: the store is called on the
//! thread that runs the PKCS#11 call, and the store's traits stay as they are.
//!
//! The caller: this process and its OS user, and the client identity `ferrohsm-server`
//! declares for the calls it runs on a client's behalf (`as_client`).

use std::cell::RefCell;
use std::sync::Arc;

/// The event under way and what its record should say beyond what the store sees.
#[derive(Debug, Clone, Default)]
pub struct Intent {
    pub event: &'static str,
    pub mechanism: Option<u64>,
    /// The attribute types a `set_attribute` changes.
    pub attributes: Vec<u64>,
    /// The object's label, for a change whose record the store cannot read it from (a destroy).
    pub label: Option<Vec<u8>>,
}

impl Intent {
    pub fn new(event: &'static str) -> Self {
        Intent {
            event,
            ..Default::default()
        }
    }

    pub fn mechanism(mut self, m: u64) -> Self {
        self.mechanism = Some(m);
        self
    }
}

thread_local! {
    static INTENT: RefCell<Option<Intent>> = const { RefCell::new(None) };
    static CLIENT: RefCell<Option<Arc<str>>> = const { RefCell::new(None) };
}

/// Runs `f` with `intent` as the event under way on this thread (the previous one restored
/// after, a panic included).
pub fn during<R>(intent: Intent, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Intent>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let old = self.0.take();
            INTENT.with(|i| *i.borrow_mut() = old);
        }
    }
    let _restore = Restore(INTENT.with(|i| i.borrow_mut().replace(intent)));
    f()
}

/// The event under way on this thread, if the token layer named one.
pub fn current() -> Option<Intent> {
    INTENT.with(|i| i.borrow().clone())
}

/// Runs `f` as a call made on behalf of the network client `id` (a certificate's identity).
/// Shared, not copied: the server sets it for every call, signatures included.
pub fn as_client<R>(id: &Arc<str>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Arc<str>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let old = self.0.take();
            CLIENT.with(|c| *c.borrow_mut() = old);
        }
    }
    let _restore = Restore(CLIENT.with(|c| c.borrow_mut().replace(id.clone())));
    f()
}

pub fn client() -> Option<String> {
    CLIENT.with(|c| c.borrow().as_deref().map(str::to_string))
}

/// The OS user of this process: `name (uid N)` when /etc/passwd names it, else `uid N`. Read
/// once, without unsafe code: the owner of /proc/self is the process's effective user.
pub fn os_user() -> String {
    static USER: once_cell::sync::OnceCell<String> = once_cell::sync::OnceCell::new();
    USER.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
            return "unknown".into();
        };
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let name = passwd.lines().find_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            (f.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
        });
        match name {
            Some(n) => format!("{n} (uid {uid})"),
            None => format!("uid {uid}"),
        }
    })
    .clone()
}
