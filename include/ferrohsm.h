/*
 * ferrohsm vendor extensions to PKCS#11: the kernels' self-test, an engine speed probe,
 * engine statistics (overall and per kernel family) and token initialisation with the user PIN in one step, and the usage-limit attributes of keys. Reach the functions by symbol (dlsym) or through the interface named
 * FERROHSM_INTERFACE_NAME in C_GetInterfaceList / C_GetInterface, whose pFunctionList points
 * to a FERROHSM_FUNCTION_LIST.
 *
 * Types: ferrohsm_ulong is CK_ULONG and ferrohsm_rv is CK_RV on every Unix ABI (unsigned
 * long), so values pass unchanged between this header and <pkcs11.h>.
 */
#ifndef FERROHSM_H
#define FERROHSM_H

#ifdef __cplusplus
extern "C" {
#endif

typedef unsigned long ferrohsm_ulong;
typedef unsigned long ferrohsm_rv;

#define FERROHSM_INTERFACE_NAME "Vendor ferrohsm"
#define FERROHSM_VERSION_MAJOR 1
#define FERROHSM_VERSION_MINOR 2

/*
 * Vendor attributes of private and secret keys: usage limits (docs/security.md, "Usage
 * limits"). Both are CK_ULONG. FERROHSM_CKA_USAGE_LIMIT is the number of uses the key allows:
 * at least 1, token objects only, set once (in the template of C_CreateObject, C_GenerateKey,
 * C_GenerateKeyPair, C_UnwrapKey, C_DeriveKey or C_CopyObject, or later by
 * C_SetAttributeValue on a key without one) and afterwards only lowered (raising it is
 * CKR_ATTRIBUTE_READ_ONLY; a key with a limit cannot be copied, CKR_ACTION_PROHIBITED).
 * FERROHSM_CKA_USAGE_COUNT is read-only: the uses counted so far, in the token store, for
 * every process and host (0 on a key without a limit, whose uses are not counted). A use is
 * one operation initialised with the key as itself: C_SignInit, C_VerifyInit (secret keys),
 * C_EncryptInit, C_DecryptInit, C_WrapKey (wrapping key), C_UnwrapKey (unwrapping key),
 * C_DeriveKey (base key). Once the count reaches the limit, every use is refused with
 * CKR_KEY_FUNCTION_NOT_PERMITTED. The values are "ucnt" and "ulim" in the vendor range.
 */
#define FERROHSM_CKA_USAGE_COUNT (0x80000000UL | 0x75636e74UL)
#define FERROHSM_CKA_USAGE_LIMIT (0x80000000UL | 0x756c696dUL)

/* Kernel families (FERROHSM_KERNEL_STATS.id, FERROHSM_ENGINE_STATS.kernel). */
#define FERROHSM_KERNEL_REFERENCE 0UL   /* the rsa crate; until 1.2 this id was named FERROHSM_KERNEL_PORTABLE */
#define FERROHSM_KERNEL_AVX512_IFMA 1UL
#define FERROHSM_KERNEL_AVX2 2UL        /* AVX2 4-lane multi-buffer */
#define FERROHSM_KERNEL_MULX 3UL        /* x86-64 BMI2+ADX scalar Montgomery */
#define FERROHSM_KERNEL_PORTABLE 4UL    /* portable Rust scalar Montgomery */
#define FERROHSM_KERNEL_FMA 5UL         /* AVX2+FMA 4-lane multi-buffer, 51-bit limbs in doubles */

typedef struct FERROHSM_ENGINE_STATS {
    ferrohsm_ulong kernel;              /* FERROHSM_KERNEL_* serving new RSA-2048 operations */
    ferrohsm_ulong self_test_passed;    /* 1 when every kernel this CPU runs passed its known-answer test */
    ferrohsm_ulong operations;          /* private-key operations since the module was loaded */
    ferrohsm_ulong fault_checks_failed; /* results withheld because their check failed */
    ferrohsm_ulong batches[4];          /* kernel calls (every family) carrying 1, 2, 3 and 4 signatures */
    double mean_batch_fill;             /* signatures per kernel call */
} FERROHSM_ENGINE_STATS;

/* One kernel family compiled into the module (since 1.2). */
#define FERROHSM_KERNEL_NAME_LEN 16
#define FERROHSM_KERNEL_MAX_BATCH 8
typedef struct FERROHSM_KERNEL_STATS {
    char name[FERROHSM_KERNEL_NAME_LEN]; /* "ifma", "mulx", "portable", "reference", ...: as FERROHSM_KERNEL takes it; NUL-terminated */
    ferrohsm_ulong id;                   /* FERROHSM_KERNEL_* */
    ferrohsm_ulong available;            /* 1 when this CPU runs it */
    ferrohsm_ulong self_test_passed;     /* 1 when it gave the known answers at the last self-test */
    ferrohsm_ulong serves[4];            /* 1 when new RSA-1024, 2048, 3072, 4096 operations go to it */
    ferrohsm_ulong max_batch;            /* signatures per kernel call at most */
    ferrohsm_ulong batches[FERROHSM_KERNEL_MAX_BATCH]; /* its calls carrying 1, 2, ... signatures */
} FERROHSM_KERNEL_STATS;

/*
 * Runs the known-answer tests of the kernels now. slot_id must name a slot of the module.
 * *passed receives 1 when every kernel the CPU would use gave the known answers; a failing
 * kernel is disabled. Returns CKR_OK, CKR_SLOT_ID_INVALID, CKR_ARGUMENTS_BAD or
 * CKR_CRYPTOKI_NOT_INITIALIZED.
 */
ferrohsm_rv FERROHSM_SelfTest(ferrohsm_ulong slot_id, ferrohsm_ulong *passed);

/*
 * Measures the engine (not the PKCS#11 layer): RSA private-key operations per second with a
 * temporary key of `bits` bits (1024, 2048, 3072 or 4096), `threads` threads, for
 * `milliseconds`. *sign_per_s receives the rate. Returns CKR_OK, CKR_ARGUMENTS_BAD,
 * CKR_KEY_SIZE_RANGE or CKR_CRYPTOKI_NOT_INITIALIZED.
 */
ferrohsm_rv FERROHSM_Speed(ferrohsm_ulong bits, ferrohsm_ulong threads, ferrohsm_ulong milliseconds,
                           double *sign_per_s);

/* Fills *stats. Returns CKR_OK or CKR_ARGUMENTS_BAD. */
ferrohsm_rv FERROHSM_GetEngineStats(FERROHSM_ENGINE_STATS *stats);

/*
 * Per kernel family, in order of preference: the PKCS#11 two-call convention. With stats NULL,
 * *count receives the number of families; otherwise *count is the capacity of stats on entry
 * and the number written on return (CKR_BUFFER_TOO_SMALL, with the number needed, when too
 * small). Returns CKR_OK, CKR_BUFFER_TOO_SMALL or CKR_ARGUMENTS_BAD (count NULL).
 * A new struct rather than fields appended to FERROHSM_ENGINE_STATS, which callers of 1.0 and
 * 1.1 allocate at its old size. Since version 1.2.
 */
ferrohsm_rv FERROHSM_GetKernelStats(FERROHSM_KERNEL_STATS *stats, ferrohsm_ulong *count);

/* The arithmetic one curve runs on (since 1.3). */
#define FERROHSM_CURVE_NAME_LEN 16
typedef struct FERROHSM_CURVE_FAMILY {
    char curve[FERROHSM_CURVE_NAME_LEN];  /* "p256", "p384", "p521", "ed25519", "ed448"; NUL-terminated */
    char family[FERROHSM_CURVE_NAME_LEN]; /* p256: "mulx" or "portable" (FERROHSM_KERNEL=portable forces
                                             the latter); ed25519: "avx512ifma", "avx2" or "serial"
                                             (curve25519-dalek's backend for this CPU); "rustcrypto"
                                             for the curves on the RustCrypto crates' fields */
} FERROHSM_CURVE_FAMILY;

/*
 * Per curve, the arithmetic family new operations run on: the PKCS#11 two-call convention, as
 * FERROHSM_GetKernelStats. Returns CKR_OK, CKR_BUFFER_TOO_SMALL or CKR_ARGUMENTS_BAD (count
 * NULL). Since version 1.3.
 */
ferrohsm_rv FERROHSM_GetCurveFamilies(FERROHSM_CURVE_FAMILY *families, ferrohsm_ulong *count);

/*
 * C_InitToken followed by C_InitPIN, as one store transaction: a process killed during the
 * call leaves either the token as it was or an initialised token whose user PIN is
 * user_pin; never a token without a user PIN. Arguments as C_InitToken's (label is 32 bytes,
 * blank-padded), plus the user PIN. No session may be open on the slot. Returns what
 * C_InitToken and C_InitPIN return (CKR_PIN_INCORRECT, CKR_PIN_LOCKED, CKR_PIN_LEN_RANGE,
 * CKR_SESSION_EXISTS, CKR_SLOT_ID_INVALID, CKR_DEVICE_ERROR, CKR_ARGUMENTS_BAD, ...).
 * Since version 1.1.
 */
ferrohsm_rv FERROHSM_InitTokenWithPIN(ferrohsm_ulong slot_id, const unsigned char *so_pin,
                                      ferrohsm_ulong so_pin_len, const unsigned char *label,
                                      const unsigned char *user_pin, ferrohsm_ulong user_pin_len);

typedef struct FERROHSM_FUNCTION_LIST {
    struct { unsigned char major, minor; } version;
    ferrohsm_rv (*FERROHSM_SelfTest)(ferrohsm_ulong, ferrohsm_ulong *);
    ferrohsm_rv (*FERROHSM_Speed)(ferrohsm_ulong, ferrohsm_ulong, ferrohsm_ulong, double *);
    ferrohsm_rv (*FERROHSM_GetEngineStats)(FERROHSM_ENGINE_STATS *);
    /* Since 1.1. */
    ferrohsm_rv (*FERROHSM_InitTokenWithPIN)(ferrohsm_ulong, const unsigned char *, ferrohsm_ulong,
                                             const unsigned char *, const unsigned char *,
                                             ferrohsm_ulong);
    /* Since 1.2. */
    ferrohsm_rv (*FERROHSM_GetKernelStats)(FERROHSM_KERNEL_STATS *, ferrohsm_ulong *);
    /* Since 1.3. */
    ferrohsm_rv (*FERROHSM_GetCurveFamilies)(FERROHSM_CURVE_FAMILY *, ferrohsm_ulong *);
} FERROHSM_FUNCTION_LIST;

#ifdef __cplusplus
}
#endif

#endif /* FERROHSM_H */
