//! What constant-time code tells a constant-time checker. `declassify` marks a value that is
//! computed from secrets but reveals nothing of them (a secret times a fresh random blinding
//! factor, which is uniformly random whatever the secret) as public, so that the valgrind
//! runs of `tests/constant_time*.rs`, which mark keys and nonces undefined and report every
//! branch or memory index that depends on them, accept the variable-time code that follows
//! (the P-256 signer's blinded inversions). libsecp256k1 declassifies the same way.
//!
//! Outside valgrind it costs nothing: the client request is a no-op instruction sequence.

/// Marks the bytes of `v` as defined for valgrind's memcheck (MAKE_MEM_DEFINED).
#[inline(always)]
pub fn declassify<T: ?Sized>(v: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        const MAKE_MEM_DEFINED: u64 = (b'M' as u64) << 24 | (b'C' as u64) << 16 | 2;
        let args: [u64; 6] = [
            MAKE_MEM_DEFINED,
            (v as *const T).cast::<u8>() as u64,
            core::mem::size_of_val(v) as u64,
            0,
            0,
            0,
        ];
        // SAFETY: valgrind.h's amd64 client-request sequence: rdi rotated by 128 bits in all
        // (unchanged), rbx exchanged with itself (unchanged); valgrind reads `args` through
        // rax and answers in rdx, which outside valgrind keeps its value. rol changes the flags.
        unsafe {
            core::arch::asm!(
                "rol rdi, 3", "rol rdi, 13", "rol rdi, 61", "rol rdi, 51", "xchg rbx, rbx",
                inout("rdx") 0u64 => _,
                in("rax") args.as_ptr(),
                inout("rdi") 0u64 => _,
                options(nostack),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = v;
}
