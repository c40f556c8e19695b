//! A host that unloads the module and then forks: the module's fork handler cannot be
//! unregistered, so the module must stay mapped (`-z nodelete`) or the child crashes in it.
//! Its own file: the module must be loaded exactly once in this process.

mod common;

use common::*;
use cryptoki_sys::*;
use std::ptr::null_mut;

/// Whether the module is mapped into this process.
fn mapped() -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.contains("libferrohsm.so")
}

/// Whether the module's dynamic section carries DF_1_NODELETE.
fn linked_nodelete() -> bool {
    let out = std::process::Command::new("readelf")
        .arg("-d")
        .arg(module_path())
        .output()
        .expect("readelf (binutils) must be installed");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .any(|l| l.contains("FLAGS_1") && l.contains("NODELETE"))
}

#[test]
fn fork_after_dlclose_survives() {
    // glibc also keeps a module mapped once a thread-local destructor of it is registered,
    // which may or may not happen before the dlclose; the link flag makes it unconditional,
    // so it is checked as such.
    assert!(linked_nodelete(), "libferrohsm.so is linked with -z nodelete");
    let _env = TestEnv::new();
    assert!(!mapped());
    {
        let r = Raw::load();
        // SAFETY: NULL arguments for both calls.
        unsafe {
            assert_eq!((r.f.C_Initialize.unwrap())(null_mut()), CKR_OK);
            assert_eq!((r.f.C_Finalize.unwrap())(null_mut()), CKR_OK);
        }
    } // dlclose
    assert!(
        mapped(),
        "the module stays mapped after dlclose (linked -z nodelete)"
    );
    // SAFETY: the child only calls async-signal-safe _exit; the fork handlers run in it.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: leaving the child at once, without running the parent's destructors.
        unsafe { libc::_exit(7) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 7,
        "child died: status {status:#x} (signal {})",
        libc::WTERMSIG(status)
    );
}
