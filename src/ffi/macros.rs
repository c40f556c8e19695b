//! The one macro that makes every exported entry point.

/// Defines `#[no_mangle] extern "C" fn $name(...) -> CK_RV` whose body returns
/// `Result<(), Error>`, guarded against panics by `ffi::guard`.
macro_rules! ck_fn {
    (fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        /// # Safety
        /// Called from C with the pointer arguments the PKCS#11 specification defines.
        #[no_mangle]
        #[allow(clippy::not_unsafe_ptr_arg_deref, unused_unsafe)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> cryptoki_sys::CK_RV {
            $crate::ffi::guard(stringify!($name), move || -> $crate::error::Result<()> {
                #[allow(unused_unsafe)]
                unsafe { $body }
            })
        }
    };
}
