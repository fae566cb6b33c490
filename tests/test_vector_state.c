/* A call on the AVX2 or AVX-512 path returns with the upper halves of the vector registers clean
 * (a vzeroupper on the way out). Dirty upper state makes the caller's SSE and VEX-128 code slow:
 * measured in a -O0 build (CMAKE_BUILD_TYPE=Debug, the sanitizer run), where GCC emits no
 * vzeroupper and the AVX-512 kernels copy structs through zmm registers, every later fmaf of the
 * caller took about 110 ns instead of 2 until a vzeroupper, and the tests' reference, all fmaf,
 * became the sanitizer run's main cost.
 *
 * The check reads the processor's own record of it instead of timing anything: XGETBV with
 * ECX = 1 returns XINUSE, whose bit 2 (the upper halves of ymm0-15) and bit 6 (the upper halves
 * of zmm0-15) are 0 once those halves are clean. Skipped where XGETBV(1) does not exist (CPUID
 * leaf 0xD, sub-leaf 1, EAX bit 2) or on other processors. */
#include "test_util.h"

#include <stdint.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>

#define XINUSE_UPPER ((1u << 2) | (1u << 6)) /* YMM_Hi128, ZMM_Hi256 */

static int xinuse_supported(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(0xd, 1, &a, &b, &c, &d)) return 0;
    return (a >> 2) & 1u;
}

static uint32_t xinuse(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1u));
    (void)hi;
    return lo;
}

static void test_upper_state_clean(void **state) {
    (void)state;
    if (!xinuse_supported()) {
        print_message("XGETBV(1) is not supported here: nothing to check\n");
        return;
    }
    enum { T = 64, C = 64 };
    const int64_t cu[] = {0, T}, ch[] = {C};
    static cake_bf16 x[T * C], dy[T * C], y[T * C], dx[T * C];
    static float w[C * 4], bias[C], dw[C * 4], db[C];
    tu_rng r;
    tu_rng_init(&r, 701);
    tu_fill_bf16(&r, TU_NARROW, x, T * C);
    tu_fill_bf16(&r, TU_NARROW, dy, T * C);
    tu_fill_weights(&r, TU_NARROW, w, C * 4);
    tu_fill_weights(&r, TU_NARROW, bias, C);
    const cake_bf16 *xs[] = {x}, *dys[] = {dy};
    const float *ws[] = {w}, *bs[] = {bias};
    cake_bf16 *ys[] = {y}, *dxs[] = {dx};
    float *dws[] = {dw}, *dbs[] = {db};
    int tested = 0;
    for (int isa = CAKE_CPU_ISA_AVX2; isa < CAKE_CPU_ISA_COUNT; isa++) {
        if (!cake_cpu_isa_supported((cake_cpu_isa)isa)) continue;
        tested++;
        for (int v = 0; v < TU_VARIANTS; v += 3) { /* plain, bias + SiLU */
            const cake_conv_params prm = {tu_variant_activation(v), tu_variant_bias(v) ? bs : NULL,
                                          tu_variant_bias(v) ? dbs : NULL};
            /* one thread: the kernels run on this thread, whose state is what XINUSE shows */
            const cake_cpu_options opt = {1, (cake_cpu_isa)isa};
            for (int dir = 0; dir < 2; dir++) {
                tu_set_ctx("vector state after a %s on %s (%s)", dir ? "backward" : "forward",
                           cake_cpu_isa_name((cake_cpu_isa)isa), tu_variant_name[v]);
                const cake_status st =
                    dir == 0 ? cake_cpu_forward_single_rank(cu, 1, 1, ch, xs, ws, &prm, ys, &opt)
                             : cake_cpu_backward_single_rank(cu, 1, 1, ch, xs, ws, &prm, dys, dxs,
                                                             dws, &opt);
                const uint32_t in_use = xinuse(); /* before anything else touches the state */
                TU_OK(st);
                TU_CHECK((in_use & XINUSE_UPPER) == 0,
                         "XINUSE = 0x%x after the call: the kernels returned with dirty upper "
                         "vector state (no vzeroupper)", (unsigned)in_use);
            }
        }
    }
    if (!tested) print_message("no AVX2 or AVX-512 path on this machine: nothing to check\n");
}

#else

static void test_upper_state_clean(void **state) {
    (void)state;
    print_message("not an x86-64 build: nothing to check\n");
}

#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upper_state_clean),
    };
    tu_seed();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
