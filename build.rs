//! Link flags of the cdylib.

fn main() {
    // The module registers a pthread_atfork handler (src/fork.rs) that cannot be removed. If a
    // host dlclose()d the module and the code were unmapped, its next fork() would jump into
    // nothing; `-z nodelete` keeps the module mapped until the process ends.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    println!("cargo:rerun-if-changed=build.rs");
}
