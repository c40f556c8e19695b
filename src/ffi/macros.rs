//! The one macro that makes every exported entry point.

/// Defines `#[no_mangle] extern "C" fn $name(...) -> CK_RV` whose body returns
/// `Result<(), Error>`, guarded against panics by `ffi::guard`. The body is safe code: each
/// unsafe operation in it (reading a caller's pointer) sits in its own `unsafe` block with
/// the reason it holds (`unsafe_op_in_unsafe_fn` is denied in `ffi/`).
macro_rules! ck_fn {
    (fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        /// # Safety
        /// Called from C with the pointer arguments the PKCS#11 specification defines.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> cryptoki_sys::CK_RV {
            $crate::ffi::guard(stringify!($name), move || -> $crate::error::Result<()> { $body })
        }
    };
}
