/* SiLU and its derivative (src/activation.h, the sequences of docs/NUMERICS.md section 9):
 *
 *  - accuracy: cake_silu within 2 fp32 ulp of the float64 oracle a / (1 + exp(-a)) (SPEC 3), and
 *    cake_silu_grad within 2 ulp of its float64 oracle (issue 12's bound; near its zero at
 *    a0 ~ -1.2785 too, where the oracle takes T from a0 in double-double), on every finite input
 *    swept; the max ulp of both functions is printed with its argument;
 *  - the same bits from: the plain loops of tests/activation_isa_{generic,avx2,avx512}.c, each
 *    compiled with the flags of the library's matching ISA path (the generic one scalar, the
 *    others vectorised; an ISA this processor lacks is skipped), and the independent sequence
 *    of tests/reference_activation.c. A NaN input must come back unchanged, so every comparison
 *    is of bits, NaN included;
 *  - the special values of docs/NUMERICS.md section 9.5, on every path and on the functions
 *    compiled in this file;
 *  - the forward's quick sequence (docs/NUMERICS.md 9.8): bf16(cake_silu_for_bf16(a)) =
 *    bf16(cake_silu(a)) on every input swept, and for |a| <= 64 the quick q within
 *    CAKE_SILU_QUICK_DISTANCE bit patterns of cake_silu(a), the bound its guard relies on (the
 *    max distance and how often the full sequence runs are printed). On the GPU the same for
 *    every input, always (tests/cuda/test_activation_cuda.cu);
 *  - cake_silu_grad_unscaled (the SiLU backward's sequence where all a of a walk or chunk are in
 *    its range) bitwise equal to cake_silu_grad for every |a| <= CAKE_ACT_UNSCALED_MAX swept,
 *    compiled here and in each ISA file's loop.
 *
 * Default (CI, seconds): every 331st bit pattern; every pattern of the hard regions (the
 * subnormal results of a in [-110, -85], the zero of silu' and G2's window in [-1.375, -1.1875],
 * the scaling threshold in [-45, -43] and [43, 45], the clamp at +-128, the neighbourhoods of
 * +-FLT_MAX, |a| in [2^-21, 2^-20), |a| near 64, some NaNs); samples of the subnormal and the
 * other |a| < 2^-20; 2^20 random patterns (CAKE_TEST_SEED). CAKE_EXHAUSTIVE=1: all 2^32 patterns
 * (72 s on 16 cores; on 2 cores 13-20 minutes, subnormal arithmetic being slow on x86).
 * Threads: CAKE_NUM_THREADS, else every online processor. Exit 0 pass, 1 fail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "activation.h"
#include "bf16.h" /* cake_f32_to_bf16: only equality of two roundings is asked */
#include "reference_activation.h"

void cake_test_silu_loop_generic(const float *in, float *silu, float *grad, float *quick, int64_t n);
void cake_test_silu_grad_unscaled_loop_generic(const float *in, float *grad, int64_t n);
#if defined(CAKE_TEST_HAVE_X86)
void cake_test_silu_loop_avx2(const float *in, float *silu, float *grad, float *quick, int64_t n);
void cake_test_silu_loop_avx512(const float *in, float *silu, float *grad, float *quick, int64_t n);
void cake_test_silu_grad_unscaled_loop_avx2(const float *in, float *grad, int64_t n);
void cake_test_silu_grad_unscaled_loop_avx512(const float *in, float *grad, int64_t n);
#endif

/* silu, silu' and cake_silu_for_bf16 of n inputs */
typedef void (*silu_loop)(const float *, float *, float *, float *, int64_t);
/* cake_silu_grad_unscaled of n inputs */
typedef void (*grad_loop)(const float *, float *, int64_t);

/* ---- bits, oracle, ulp ------------------------------------------------------------------- */

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static double oracle_silu(float a) {
    const double x = a;
    if (isinf(x))
        return x > 0 ? x : -0.0;
    return x / (1.0 + exp(-x));
}

/* silu'(x) = (1 + E + x E) / (1 + E)^2 for x >= 0 and E (1 + E + x) / (1 + E)^2 for x < 0, with
 * E = exp(-|x|). Near the zero a0 = -1 - W(1/e) the factor T = 1 + E + x cancels, so there it is
 * computed as T = u + b expm1(u) with u = x - a0 (a0 in double-double, so u is exact to 2^-53
 * relative) and b = e^a0 = -1 - a0: both terms have u's sign, nothing cancels. */
static double oracle_grad(float a) {
    const double x = a;
    if (isinf(x))
        return x > 0 ? 1.0 : -0.0;
    const double e = exp(-fabs(x)), d = 1.0 + e;
    if (x >= 0)
        return (d + x * e) / (d * d);
    double t = d + x;
    if (fabs(x - -0x1.474973c84120bp+0) < 0.25) {
        const double u = (x - -0x1.474973c84120bp+0) - -0x1.f8d74bc9ac154p-54;
        t = u + 0x1.1d25cf210482ep-2 * expm1(u);
    }
    return e * t / (d * d);
}

/* One fp32 ulp at the magnitude of the exact value r: 2^(e-23) for |r| in [2^e, 2^(e+1)),
 * 2^-149 below 2^-126. */
static double ulp_at(double r) {
    r = fabs(r);
    if (r < 0x1p-126)
        return 0x1p-149;
    int e;
    frexp(r, &e); /* r in [2^(e-1), 2^e) */
    return ldexp(1.0, e - 1 - 23);
}

static double ulp_error(float y, double exact) {
    if (isinf(exact) || isinf(y))
        return (double)y == exact ? 0.0 : INFINITY;
    if (isnan(y))
        return INFINITY;
    return fabs((double)y - exact) / ulp_at(exact);
}

/* ---- sweep -------------------------------------------------------------------------------- */

typedef struct sweep_range {
    uint64_t first, end, stride; /* patterns first, first + stride, ... below end (<= 2^32) */
} sweep_range;

typedef struct sweep_stats {
    uint64_t count;
    double silu_max;
    uint32_t silu_arg;
    double silu_normal_max; /* over results whose exact value is normal (>= 2^-126) */
    uint32_t silu_normal_arg;
    double grad_max;
    uint32_t grad_arg;
    uint64_t silu_over_bound; /* finite a with silu more than 2 ulp off */
    uint32_t silu_over_arg;
    uint64_t grad_over_bound; /* finite a with silu' more than 2 ulp off */
    uint32_t grad_over_arg;
    uint64_t not_finite;      /* finite a with a NaN or infinite result */
    uint32_t not_finite_arg;
    uint64_t nan_changed;     /* NaN a not returned unchanged */
    uint32_t nan_changed_arg;
    double quick_distance;    /* max |bits(q) - bits(cake_silu(a))| over |a| <= 64 */
    uint32_t quick_distance_arg;
    uint64_t quick_far;       /* |a| <= 64 with that distance above CAKE_SILU_QUICK_DISTANCE */
    uint32_t quick_far_arg;
    uint64_t quick_bf16;      /* bf16(cake_silu_for_bf16(a)) != bf16(cake_silu(a)) */
    uint32_t quick_bf16_arg;
    uint64_t quick_full;      /* inputs where cake_silu_for_bf16 ran the full sequence */
    uint32_t quick_full_arg;
    uint64_t unscaled_differs; /* |a| <= CAKE_ACT_UNSCALED_MAX, cake_silu_grad_unscaled != g */
    uint32_t unscaled_differs_arg;
    uint64_t mismatch[4];     /* differs from the generic loop: 0 the reference, 2 the avx2 loop,
                                 3 the avx512 loop ([1], the generic loop itself, only by its
                                 unscaled loop); the unscaled loops where |a| <= 44 */
    uint32_t mismatch_arg[4];
} sweep_stats;

static const char *const k_path_name[4] = {"reference_activation.c", "generic loop", "avx2 loop",
                                           "avx512 loop"};

#define CHUNK 8192

typedef struct sweep_job {
    const sweep_range *ranges;
    int num_ranges;
    const uint32_t *extra; /* explicit patterns (random part) */
    uint64_t num_extra;
    silu_loop loops[4]; /* [1..3]; NULL where not supported */
    grad_loop unscaled[4]; /* the same paths' cake_silu_grad_unscaled */
    pthread_mutex_t lock;
    uint64_t next_chunk; /* shared cursor over (range, chunk) and then the extra patterns */
    uint64_t *chunk_base; /* first chunk index of each range, plus the total */
} sweep_job;

typedef struct worker {
    sweep_job *job;
    sweep_stats st;
    float in[CHUNK], s0[CHUNK], g0[CHUNK], q0[CHUNK], s1[CHUNK], g1[CHUNK], q1[CHUNK], u1[CHUNK];
} worker;

static void note_max(double e, uint32_t u, double *max, uint32_t *arg) {
    if (e > *max || (e == *max && e > 0 && u < *arg)) {
        *max = e;
        *arg = u;
    }
}

static void note_count(uint64_t *count, uint32_t *arg, uint32_t u) {
    if (*count == 0 || u < *arg)
        *arg = u;
    ++*count;
}

static void check_chunk(worker *w, int64_t n) {
    sweep_stats *st = &w->st;
    /* the scalar generic build is the baseline; every other path against it */
    cake_test_silu_loop_generic(w->in, w->s0, w->g0, w->q0, n);
    for (int path = 0; path < 4; path++) {
        if (path == 0) { /* the reference has no quick sequence: its q is not compared */
            for (int64_t i = 0; i < n; i++) {
                w->s1[i] = ref_silu(w->in[i]);
                w->g1[i] = ref_silu_grad(w->in[i]);
                w->q1[i] = w->q0[i];
            }
        } else if (path > 1 && w->job->loops[path]) {
            w->job->loops[path](w->in, w->s1, w->g1, w->q1, n);
        } else {
            continue;
        }
        for (int64_t i = 0; i < n; i++)
            if (bits(w->s1[i]) != bits(w->s0[i]) || bits(w->g1[i]) != bits(w->g0[i]) ||
                bits(w->q1[i]) != bits(w->q0[i]))
                note_count(&st->mismatch[path], &st->mismatch_arg[path], bits(w->in[i]));
    }
    for (int path = 1; path < 4; path++) { /* each path's unscaled silu', vectorised as there */
        if (!w->job->unscaled[path])
            continue;
        w->job->unscaled[path](w->in, w->u1, n);
        for (int64_t i = 0; i < n; i++)
            if (fabsf(w->in[i]) <= CAKE_ACT_UNSCALED_MAX && bits(w->u1[i]) != bits(w->g0[i]))
                note_count(&st->mismatch[path], &st->mismatch_arg[path], bits(w->in[i]));
    }
    for (int64_t i = 0; i < n; i++) {
        const float a = w->in[i], y = w->s0[i], g = w->g0[i];
        const uint32_t u = bits(a);
        st->count++;
        if (cake_f32_to_bf16(w->q0[i]) != cake_f32_to_bf16(y))
            note_count(&st->quick_bf16, &st->quick_bf16_arg, u);
        uint32_t ok;
        const float q = cake_silu_quick_(a, &ok);
        if (!ok)
            note_count(&st->quick_full, &st->quick_full_arg, u);
        if (fabsf(a) <= 64.0f) {
            const uint32_t qb = bits(q), yb = bits(y);
            const uint32_t dist = qb > yb ? qb - yb : yb - qb;
            note_max((double)dist, u, &st->quick_distance, &st->quick_distance_arg);
            if (dist > CAKE_SILU_QUICK_DISTANCE)
                note_count(&st->quick_far, &st->quick_far_arg, u);
        }
        if (fabsf(a) <= CAKE_ACT_UNSCALED_MAX && bits(cake_silu_grad_unscaled(a)) != bits(g))
            note_count(&st->unscaled_differs, &st->unscaled_differs_arg, u);
        if (isnan(a)) {
            if (bits(y) != u || bits(g) != u)
                note_count(&st->nan_changed, &st->nan_changed_arg, u);
            continue;
        }
        if (isfinite(a) && !(isfinite(y) && isfinite(g)))
            note_count(&st->not_finite, &st->not_finite_arg, u);
        const double os = oracle_silu(a), es = ulp_error(y, os);
        note_max(es, u, &st->silu_max, &st->silu_arg);
        if (fabs(os) >= 0x1p-126)
            note_max(es, u, &st->silu_normal_max, &st->silu_normal_arg);
        if (!(es <= 2.0))
            note_count(&st->silu_over_bound, &st->silu_over_arg, u);
        const double eg = ulp_error(g, oracle_grad(a));
        note_max(eg, u, &st->grad_max, &st->grad_arg);
        if (!(eg <= 2.0))
            note_count(&st->grad_over_bound, &st->grad_over_arg, u);
    }
}

static uint64_t range_chunks(const sweep_range *r) {
    const uint64_t n = r->end > r->first ? (r->end - r->first + r->stride - 1) / r->stride : 0;
    return (n + CHUNK - 1) / CHUNK;
}

static void *worker_main(void *arg) {
    worker *w = arg;
    sweep_job *job = w->job;
    const uint64_t range_total = job->chunk_base[job->num_ranges];
    const uint64_t total = range_total + (job->num_extra + CHUNK - 1) / CHUNK;
    for (;;) {
        pthread_mutex_lock(&job->lock);
        const uint64_t c = job->next_chunk++;
        pthread_mutex_unlock(&job->lock);
        if (c >= total)
            break;
        int64_t n = 0;
        if (c < range_total) {
            int r = 0;
            while (job->chunk_base[r + 1] <= c) r++;
            const sweep_range *rg = &job->ranges[r];
            uint64_t p = rg->first + (c - job->chunk_base[r]) * CHUNK * rg->stride;
            for (; n < CHUNK && p < rg->end; n++, p += rg->stride)
                w->in[n] = from_bits((uint32_t)p);
        } else {
            uint64_t e = (c - range_total) * CHUNK;
            for (; n < CHUNK && e < job->num_extra; n++, e++) w->in[n] = from_bits(job->extra[e]);
        }
        check_chunk(w, n);
    }
    return NULL;
}

static int num_threads(void) {
    const char *s = getenv("CAKE_NUM_THREADS");
    long n = (s && *s) ? strtol(s, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}

static void merge(sweep_stats *m, const sweep_stats *s) {
    m->count += s->count;
    note_max(s->silu_max, s->silu_arg, &m->silu_max, &m->silu_arg);
    note_max(s->silu_normal_max, s->silu_normal_arg, &m->silu_normal_max, &m->silu_normal_arg);
    note_max(s->grad_max, s->grad_arg, &m->grad_max, &m->grad_arg);
    note_max(s->quick_distance, s->quick_distance_arg, &m->quick_distance, &m->quick_distance_arg);
#define MERGE_COUNT(c, a)                                                                         \
    if (s->c && (m->c == 0 || s->a < m->a))                                                       \
        m->a = s->a;                                                                              \
    m->c += s->c
    MERGE_COUNT(silu_over_bound, silu_over_arg);
    MERGE_COUNT(grad_over_bound, grad_over_arg);
    MERGE_COUNT(not_finite, not_finite_arg);
    MERGE_COUNT(nan_changed, nan_changed_arg);
    MERGE_COUNT(quick_far, quick_far_arg);
    MERGE_COUNT(quick_bf16, quick_bf16_arg);
    MERGE_COUNT(quick_full, quick_full_arg);
    MERGE_COUNT(unscaled_differs, unscaled_differs_arg);
    for (int p = 0; p < 4; p++) {
        MERGE_COUNT(mismatch[p], mismatch_arg[p]);
    }
#undef MERGE_COUNT
}

static uint64_t test_seed(void) {
    static int done;
    static uint64_t seed;
    if (!done) {
        const char *s = getenv("CAKE_TEST_SEED");
        seed = (s && *s) ? (uint64_t)strtoull(s, NULL, 0) : UINT64_C(0x63616b6574657374);
        done = 1;
    }
    return seed;
}

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static void loops_for_this_cpu(silu_loop loops[4], grad_loop unscaled[4]) {
    grad_loop u[4] = {NULL, cake_test_silu_grad_unscaled_loop_generic, NULL, NULL};
    loops[0] = NULL;
    loops[1] = cake_test_silu_loop_generic;
    loops[2] = loops[3] = NULL;
#if defined(CAKE_TEST_HAVE_X86)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        loops[2] = cake_test_silu_loop_avx2;
        u[2] = cake_test_silu_grad_unscaled_loop_avx2;
    }
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        loops[3] = cake_test_silu_loop_avx512;
        u[3] = cake_test_silu_grad_unscaled_loop_avx512;
    }
#endif
    if (unscaled)
        memcpy(unscaled, u, sizeof u);
    for (int p = 1; p < 4; p++)
        if (!loops[p])
            printf("[cake-test] %s: not supported by this build or processor, skipped\n",
                   k_path_name[p]);
}

static void print_arg(const char *what, double v, const char *unit, uint32_t u) {
    printf("[cake-test]   %-44s %.4f %s at a = %a (0x%08" PRIx32 ")\n", what, v, unit,
           (double)from_bits(u), u);
}

static void run_sweep(const char *label, const sweep_range *ranges, int num_ranges,
                      const uint32_t *extra, uint64_t num_extra) {
    sweep_job job;
    memset(&job, 0, sizeof job);
    job.ranges = ranges;
    job.num_ranges = num_ranges;
    job.extra = extra;
    job.num_extra = num_extra;
    loops_for_this_cpu(job.loops, job.unscaled);
    pthread_mutex_init(&job.lock, NULL);
    job.chunk_base = malloc(sizeof(uint64_t) * (size_t)(num_ranges + 1));
    assert_non_null(job.chunk_base);
    job.chunk_base[0] = 0;
    for (int r = 0; r < num_ranges; r++)
        job.chunk_base[r + 1] = job.chunk_base[r] + range_chunks(&ranges[r]);

    const int T = num_threads();
    worker *w = calloc((size_t)T, sizeof *w);
    pthread_t *th = calloc((size_t)T, sizeof *th);
    assert_non_null(w);
    assert_non_null(th);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < T; i++) {
        w[i].job = &job;
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    sweep_stats m;
    memset(&m, 0, sizeof m);
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        merge(&m, &w[i].st);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);

    printf("[cake-test] %s: %" PRIu64 " inputs, %d threads, %.1f s\n", label, m.count, T, secs);
    print_arg("cake_silu: max error", m.silu_max, "ulp", m.silu_arg);
    print_arg("cake_silu: max error, normal results", m.silu_normal_max, "ulp", m.silu_normal_arg);
    print_arg("cake_silu_grad: max error", m.grad_max, "ulp", m.grad_arg);
    print_arg("quick silu: max distance, |a| <= 64", m.quick_distance, "patterns",
              m.quick_distance_arg);
    printf("[cake-test]   quick silu: the full sequence ran for %" PRIu64 " of %" PRIu64
           " inputs\n", m.quick_full, m.count);
    int failed = 0;
#define REPORT(c, a, ...)                                                                         \
    if (m.c) {                                                                                    \
        failed = 1;                                                                               \
        fprintf(stderr, "[cake-test] FAILED with CAKE_TEST_SEED=0x%016" PRIx64 ": %" PRIu64 " ", \
                test_seed(), m.c);                                                                \
        fprintf(stderr, __VA_ARGS__);                                                             \
        fprintf(stderr, ", the first at a = %a (0x%08" PRIx32 "): silu %a (0x%08" PRIx32          \
                        "), grad %a (0x%08" PRIx32 ")\n",                                         \
                (double)from_bits(m.a), m.a, (double)cake_silu(from_bits(m.a)),                   \
                bits(cake_silu(from_bits(m.a))), (double)cake_silu_grad(from_bits(m.a)),          \
                bits(cake_silu_grad(from_bits(m.a))));                                            \
    }
    REPORT(silu_over_bound, silu_over_arg, "inputs with cake_silu more than 2 ulp off");
    REPORT(grad_over_bound, grad_over_arg, "inputs with cake_silu_grad more than 2 ulp off");
    REPORT(not_finite, not_finite_arg, "finite inputs with a NaN or infinite result");
    REPORT(nan_changed, nan_changed_arg, "NaN inputs not returned unchanged");
    REPORT(quick_far, quick_far_arg, "inputs |a| <= 64 with the quick q more than %u patterns "
           "from cake_silu", CAKE_SILU_QUICK_DISTANCE);
    REPORT(quick_bf16, quick_bf16_arg, "inputs where bf16(cake_silu_for_bf16) differs from "
           "bf16(cake_silu)");
    REPORT(unscaled_differs, unscaled_differs_arg, "inputs |a| <= %g where "
           "cake_silu_grad_unscaled differs from cake_silu_grad", (double)CAKE_ACT_UNSCALED_MAX);
    for (int p = 0; p < 4; p++) {
        REPORT(mismatch[p], mismatch_arg[p], "inputs where %s differs from the generic loop "
               "(silu, silu', the quick silu, or, where |a| <= %g, its unscaled silu')",
               k_path_name[p], (double)CAKE_ACT_UNSCALED_MAX);
    }
#undef REPORT
    if (failed) {
        const uint32_t u = m.mismatch[0] ? m.mismatch_arg[0] : 0;
        if (m.mismatch[0])
            fprintf(stderr, "[cake-test]   reference at a = %a: silu %a, grad %a\n",
                    (double)from_bits(u), (double)ref_silu(from_bits(u)),
                    (double)ref_silu_grad(from_bits(u)));
    }
    fflush(stdout);
    pthread_mutex_destroy(&job.lock);
    free(job.chunk_base);
    free(w);
    free(th);
    if (failed)
        fail_msg("%s failed (see above)", label);
}

static int exhaustive(void) {
    const char *s = getenv("CAKE_EXHAUSTIVE");
    return s && *s && strcmp(s, "0") != 0;
}

/* 2^-20 = 0x35800000, -85 = 0xc2aa0000, -110 = 0xc2dc0000, -43 = 0xc22c0000, -45 = 0xc2340000,
 * -1.1875 = 0xbf980000, -1.375 = 0xbfb00000, 127 = 0x42fe0000, 129 = 0x43010000. */
static void test_sweep(void **state) {
    (void)state;
    if (exhaustive()) {
        const sweep_range all = {0, UINT64_C(1) << 32, 1};
        run_sweep("every fp32 pattern (CAKE_EXHAUSTIVE=1)", &all, 1, NULL, 0);
        return;
    }
    /* Subnormal arithmetic is slow on x86 (microcode assists), hence the sparse strides where
     * the intermediate values are subnormal (|a| < 2^-100 or so). */
    static const sweep_range ranges[] = {
        {0, UINT64_C(1) << 32, 331},              /* everything, every 331st */
        {0x00000000, 0x00800000, 257},            /* subnormal a, both signs */
        {0x80000000, 0x80800000, 257},
        {0x00800000, 0x35800000, 1021},           /* normal |a| < 2^-20 */
        {0x80800000, 0xb5800000, 1021},
        {0x35000000, 0x35800000, 1},              /* |a| in [2^-21, 2^-20) */
        {0xb5000000, 0xb5800000, 1},
        {0xc2aa0000, 0xc2dc0001, 1},              /* a in [-110, -85]: subnormal results */
        {0xbf980000, 0xbfb00001, 1},              /* a in [-1.375, -1.1875]: silu' crosses zero,
                                                     G2's window |a - A0H| < 2^-4 and its edges */
        {0xc22c0000, 0xc2340001, 1},              /* a in [-45, -43]: n = -64, scaling starts,
                                                     and the unscaled silu''s limit, -44 */
        {0x422c0000, 0x42340001, 1},              /* a in [43, 45]: its limit 44 */
        {0x427f0000, 0x42810000, 1},              /* |a| near 64, the quick sequence's limit */
        {0xc27f0000, 0xc2810000, 1},
        {0x42fe0000, 0x43010000, 1},              /* |a| near the clamp at 128 */
        {0xc2fe0000, 0xc3010000, 1},
        {0x7f7f0000, 0x7f800001, 1},              /* up to FLT_MAX and +inf */
        {0xff7f0000, 0xff800001, 1},              /* down to -FLT_MAX and -inf */
        {0x7f800001, 0x7f800401, 1},              /* NaNs */
        {0x7fc00000, 0x7fc00400, 1},
        {0xfffffc00, UINT64_C(0x100000000), 1},
    };
    enum { NUM_RANDOM = 1 << 20 };
    uint32_t *extra = malloc(sizeof(uint32_t) * NUM_RANDOM);
    assert_non_null(extra);
    uint64_t x = test_seed();
    for (int i = 0; i < NUM_RANDOM; i++) extra[i] = (uint32_t)splitmix(&x);
    run_sweep("sweep", ranges, (int)(sizeof ranges / sizeof ranges[0]), extra, NUM_RANDOM);
    free(extra);
}

/* The special values of docs/NUMERICS.md, exactly, on every path. */
static void test_specials(void **state) {
    (void)state;
    static const struct {
        uint32_t a, silu, grad;
    } cases[] = {
        {0x00000000u, 0x00000000u, 0x3f000000u}, /* +0 -> +0, 0.5 */
        {0x80000000u, 0x80000000u, 0x3f000000u}, /* -0 -> -0, 0.5 */
        {0x7f800000u, 0x7f800000u, 0x3f800000u}, /* +inf -> +inf, 1 */
        {0xff800000u, 0x80000000u, 0x80000000u}, /* -inf -> -0, -0 */
        {0x7f7fffffu, 0x7f7fffffu, 0x3f800000u}, /* FLT_MAX -> FLT_MAX, 1 */
        {0xff7fffffu, 0x80000000u, 0x80000000u}, /* -FLT_MAX -> -0, -0 */
        {0x43000000u, 0x43000000u, 0x3f800000u}, /* 128 -> 128, 1 */
        {0xc3000000u, 0x80000000u, 0x80000000u}, /* -128 -> -0, -0 */
        {0x42c80000u, 0x42c80000u, 0x3f800000u}, /* 100 -> 100, 1 */
        {0x7fc00000u, 0x7fc00000u, 0x7fc00000u}, /* NaNs come back unchanged */
        {0xffc00001u, 0xffc00001u, 0xffc00001u},
        {0x7f800001u, 0x7f800001u, 0x7f800001u},
    };
    silu_loop loops[4];
    loops_for_this_cpu(loops, NULL);
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const float a = from_bits(cases[i].a);
        float s[4], g[4];
        s[0] = cake_silu(a);
        g[0] = cake_silu_grad(a);
        s[1] = ref_silu(a);
        g[1] = ref_silu_grad(a);
        for (int p = 1; p < 4; p++) {
            float in[1] = {a}, so[1], go[1], qo[1];
            if (!loops[p])
                continue;
            loops[p](in, so, go, qo, 1);
            if (bits(so[0]) != cases[i].silu || bits(go[0]) != cases[i].grad) {
                fprintf(stderr, "[cake-test] FAILED: %s at 0x%08" PRIx32 ": silu 0x%08" PRIx32
                                ", grad 0x%08" PRIx32 "\n",
                        k_path_name[p], cases[i].a, bits(so[0]), bits(go[0]));
                bad = 1;
            }
        }
        for (int p = 0; p < 2; p++)
            if (bits(s[p]) != cases[i].silu || bits(g[p]) != cases[i].grad) {
                fprintf(stderr, "[cake-test] FAILED: %s at 0x%08" PRIx32 ": silu 0x%08" PRIx32
                                " (want 0x%08" PRIx32 "), grad 0x%08" PRIx32 " (want 0x%08" PRIx32
                                ")\n",
                        p ? "reference" : "cake_silu/cake_silu_grad", cases[i].a, bits(s[p]),
                        cases[i].silu, bits(g[p]), cases[i].grad);
                bad = 1;
            }
    }
    if (bad)
        fail_msg("special values (see above)");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_specials),
        cmocka_unit_test(test_sweep),
    };
    printf("[cake-test] seed 0x%016" PRIx64 " (set CAKE_TEST_SEED to change)\n", test_seed());
    return cmocka_run_group_tests(tests, NULL, NULL);
}
