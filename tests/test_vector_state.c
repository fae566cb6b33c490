/* A call on the AVX2 or AVX-512 path leaves the caller's floating point as fast as before it: the
 * kernels must not return with the upper halves of the vector registers dirty (a vzeroupper on
 * the way out). Measured: in a -O0 build (CMAKE_BUILD_TYPE=Debug, the sanitizer run) GCC emits no
 * vzeroupper, the AVX-512 kernels copy structs through zmm registers, and afterwards every fmaf
 * of the caller (libm's VEX-encoded one) takes about 110 ns instead of 2 ns, until a vzeroupper:
 * the tests' reference, which is all fmaf, became the sanitizer run's main cost. Release builds
 * emit vzeroupper and pass.
 *
 * The check: a chain of fmaf calls timed (best of several runs) before any kernel call and after
 * a forward and a backward on each vector path; after must stay within a factor of the before. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static double now_ns(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return 1e9 * (double)ts.tv_sec + (double)ts.tv_nsec;
}

/* Nanoseconds per fmaf of a dependent chain, best of `reps` runs of `n`. */
static volatile float g_sink; /* keeps the chain's result alive */

static double fmaf_ns(int reps, int n) {
    volatile float x = 0.999f, z = 0.5f;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        float acc = 0.0f;
        const float a = x, c = z;
        const double t0 = now_ns();
        for (int i = 0; i < n; i++)
            acc = fmaf(a, acc, c);
        const double t = (now_ns() - t0) / n;
        g_sink = acc;
        if (t < best)
            best = t;
    }
    return best;
}

static void test_upper_state_clean(void **state) {
    (void)state;
    enum { T = 64, C = 64, REPS = 7, N = 200000, LIMIT = 8 };
    const double before = fmaf_ns(REPS, N);
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
        if (!cake_cpu_isa_supported((cake_cpu_isa)isa))
            continue;
        tested++;
        for (int v = 0; v < TU_VARIANTS; v += 3) { /* plain, bias + SiLU */
            const cake_conv_params prm = {tu_variant_activation(v), tu_variant_bias(v) ? bs : NULL,
                                          tu_variant_bias(v) ? dbs : NULL};
            const cake_cpu_options opt = {1, (cake_cpu_isa)isa};
            for (int dir = 0; dir < 2; dir++) {
                tu_set_ctx("vector state after a %s on %s (%s)", dir ? "backward" : "forward",
                           cake_cpu_isa_name((cake_cpu_isa)isa), tu_variant_name[v]);
                if (dir == 0)
                    TU_OK(cake_cpu_forward_single_rank(cu, 1, 1, ch, xs, ws, &prm, ys, &opt));
                else
                    TU_OK(cake_cpu_backward_single_rank(cu, 1, 1, ch, xs, ws, &prm, dys, dxs, dws,
                                                        &opt));
                const double after = fmaf_ns(REPS, N);
                print_message("%s, %s, %s: fmaf %.1f ns before any call, %.1f ns after\n",
                              cake_cpu_isa_name((cake_cpu_isa)isa), tu_variant_name[v],
                              dir ? "backward" : "forward", before, after);
                TU_CHECK(after <= LIMIT * before + 1.0,
                         "the caller's fmaf takes %.1f ns after the call, %.1f ns before: the "
                         "kernels returned with dirty upper vector state (no vzeroupper)",
                         after, before);
            }
        }
    }
    if (!tested)
        print_message("no AVX2 or AVX-512 path on this machine: nothing to check\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upper_state_clean),
    };
    tu_seed();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
