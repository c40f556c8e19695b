/* Uses ferrohsm's vendor API as a C application would: by symbol and through the vendor
 * interface. Prints "key value" lines for the Rust test to check. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include "ferrohsm.h"

typedef struct { unsigned char major, minor; } version_t;
typedef struct { unsigned char *name; void *functions; ferrohsm_ulong flags; } interface_t;
typedef ferrohsm_rv (*initialize_fn)(void *);
typedef ferrohsm_rv (*get_interface_fn)(unsigned char *, version_t *, interface_t **, ferrohsm_ulong);

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    void *m = dlopen(argv[1], RTLD_NOW);
    if (!m) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
    initialize_fn init = (initialize_fn)dlsym(m, "C_Initialize");
    get_interface_fn get = (get_interface_fn)dlsym(m, "C_GetInterface");
    if (!init || !get || init(NULL) != 0) return 1;

    interface_t *iface = NULL;
    if (get((unsigned char *)FERROHSM_INTERFACE_NAME, NULL, &iface, 0) != 0 || !iface) return 1;
    printf("interface %s\n", (char *)iface->name);
    FERROHSM_FUNCTION_LIST *v = (FERROHSM_FUNCTION_LIST *)iface->functions;
    printf("version %d.%d\n", v->version.major, v->version.minor);

    ferrohsm_ulong passed = 0;
    printf("selftest_rv %lu\n", v->FERROHSM_SelfTest(0, &passed));
    printf("selftest_passed %lu\n", passed);
    printf("selftest_bad_slot_rv %lu\n", v->FERROHSM_SelfTest(999, &passed));

    double rate = 0;
    printf("speed_rv %lu\n", v->FERROHSM_Speed(1024, 8, 300, &rate));
    printf("speed_sign_per_s %.1f\n", rate);
    printf("speed_bad_size_rv %lu\n", v->FERROHSM_Speed(1000, 2, 300, &rate));

    /* The same functions by symbol. */
    ferrohsm_rv (*stats_fn)(FERROHSM_ENGINE_STATS *) =
        (ferrohsm_rv (*)(FERROHSM_ENGINE_STATS *))dlsym(m, "FERROHSM_GetEngineStats");
    if (!stats_fn || stats_fn != v->FERROHSM_GetEngineStats) return 1;
    FERROHSM_ENGINE_STATS s;
    memset(&s, 0, sizeof s);
    printf("stats_rv %lu\n", stats_fn(&s));
    printf("kernel %lu\n", s.kernel);
    printf("operations %lu\n", s.operations);
    printf("fault_checks_failed %lu\n", s.fault_checks_failed);
    printf("batches %lu %lu %lu %lu\n", s.batches[0], s.batches[1], s.batches[2], s.batches[3]);
    printf("mean_batch_fill %.2f\n", s.mean_batch_fill);
    printf("null_rv %lu\n", stats_fn(NULL));

    /* Per kernel family (1.2): count, too small a buffer, then the list. */
    if (dlsym(m, "FERROHSM_GetKernelStats") != (void *)v->FERROHSM_GetKernelStats) return 1;
    ferrohsm_ulong count = 0;
    printf("kstats_count_rv %lu\n", v->FERROHSM_GetKernelStats(NULL, &count));
    printf("kstats_count %lu\n", count);
    FERROHSM_KERNEL_STATS ks[8];
    ferrohsm_ulong small = 0;
    printf("kstats_small_rv %lu\n", v->FERROHSM_GetKernelStats(ks, &small));
    printf("kstats_small_count %lu\n", small);
    ferrohsm_ulong cap = 8;
    printf("kstats_rv %lu\n", v->FERROHSM_GetKernelStats(ks, &cap));
    printf("kstats_null_count_rv %lu\n", v->FERROHSM_GetKernelStats(ks, NULL));
    for (ferrohsm_ulong i = 0; i < cap && i < 8; i++) {
        ferrohsm_ulong calls = 0;
        for (int b = 0; b < FERROHSM_KERNEL_MAX_BATCH; b++) calls += ks[i].batches[b] * (b + 1);
        printf("family_%s %lu %lu %lu %lu %lu%lu%lu%lu %lu\n", ks[i].name, ks[i].id, ks[i].available,
               ks[i].self_test_passed, ks[i].max_batch, ks[i].serves[0], ks[i].serves[1], ks[i].serves[2],
               ks[i].serves[3], calls);
    }

    /* Per curve (1.3): count, too small a buffer, then the list. */
    if (dlsym(m, "FERROHSM_GetCurveFamilies") != (void *)v->FERROHSM_GetCurveFamilies) return 1;
    ferrohsm_ulong ccount = 0;
    printf("curves_count_rv %lu\n", v->FERROHSM_GetCurveFamilies(NULL, &ccount));
    printf("curves_count %lu\n", ccount);
    FERROHSM_CURVE_FAMILY cf[8];
    ferrohsm_ulong csmall = 1;
    printf("curves_small_rv %lu\n", v->FERROHSM_GetCurveFamilies(cf, &csmall));
    printf("curves_small_count %lu\n", csmall);
    ferrohsm_ulong ccap = 8;
    printf("curves_rv %lu\n", v->FERROHSM_GetCurveFamilies(cf, &ccap));
    printf("curves_null_count_rv %lu\n", v->FERROHSM_GetCurveFamilies(cf, NULL));
    for (ferrohsm_ulong i = 0; i < ccap && i < 8; i++) printf("curve_%s %s\n", cf[i].curve, cf[i].family);

    /* Token and user PIN in one call (1.1): slot 1 is the free slot. */
    unsigned char label[32];
    memset(label, ' ', sizeof label);
    memcpy(label, "from C", 6);
    if (dlsym(m, "FERROHSM_InitTokenWithPIN") != (void *)v->FERROHSM_InitTokenWithPIN) return 1;
    printf("init_rv %lu\n", v->FERROHSM_InitTokenWithPIN(1, (const unsigned char *)"so-pin-c", 8, label,
                                                          (const unsigned char *)"user-pin-c", 10));
    printf("init_null_rv %lu\n", v->FERROHSM_InitTokenWithPIN(1, NULL, 8, label, NULL, 10));
    printf("init_wrong_so_rv %lu\n", v->FERROHSM_InitTokenWithPIN(1, (const unsigned char *)"wrong-so", 8,
                                                                   label, (const unsigned char *)"x-pin", 5));
    return 0;
}
