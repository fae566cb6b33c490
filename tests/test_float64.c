/* A float64 check that catches a misread spec (wrong taps, rows from another sequence, missing
 * zero padding, flush to zero, truncation instead of rounding, a lost block, a bias on the wrong
 * channel or missing from dbias): the library (and the reference, which could share a
 * misreading) against the exact convolution in double.
 *
 * Bounds. u = 2^-24 (fp32 unit roundoff), gamma(n) = n u / (1 - n u). Every fp32 rounding obeys
 * fl(z) = z (1 + d) + e with |d| <= u, |e| <= 2^-150 (e only for subnormal results). Products of
 * bf16 and fp32 (or two bf16) are exact in double, and double sums of S terms are off by at
 * most S 2^-52 sum|t| (written e_d below).
 *
 * y and dx (4 fmas, then one bf16 rounding): the fp32 accumulator A satisfies
 *     |A - E| <= D = gamma(4) sum|t| + 4 * 2^-149        (each term passes <= 4 roundings)
 * and bf16 rounding to nearest adds at most half a bf16 ulp: |y - A| <= 2^-8 |A| + 2^-134
 * (2^-134: half the bf16 subnormal spacing). Hence "within one bf16 rounding of the exact value,
 * plus the fp32 accumulation error":
 *     |y - E| <= 2^-8 |E| + (1 + 2^-8)(D + e_d) + e_d + 2^-134.
 *
 * dw (per channel and tap, over one rank's S local rows, nb = ceil(S / 256) blocks): a term
 * passes at most min(S, 256) fmas in its block and ceil(log2 nb) additions of the tree (a tree
 * on n <= 2^d leaves has depth <= d), so with K = min(S, 256) + ceil(log2 nb) and S + nb - 1
 * roundings in all, each underflow error amplified by at most 1 + gamma(K) < 2:
 *     |dw - E| <= gamma(K) sum|t| + (S + nb) 2^-149 + e_d,
 * i.e. a relative error of gamma(K) (about 1.6e-5 for K = 264) with respect to sum|dy x|. An
 * empty rank gives exactly +0.0.
 *
 * With a bias (no activation; SiLU's own bound is tests/test_activation.c's): y = bf16(fl(A + b)).
 * The add rounds once, exactly when the result is subnormal: |fl(A + b) - E| <= D' = D + e_d +
 * u (|E| + D + e_d) with E = sum t + b, and then, as above, |y - E| <= D' + 2^-8 (|E| + D') +
 * 2^-134. dx and dw do not see the bias (g = dy). dbias = the tree sum of 256-row block sums of
 * dy: additions only, each term through at most K of them, no underflow error:
 *     |dbias - E| <= gamma(K) sum|dy| + e_d. */
#include "test_util.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"

static double gamma_n(int64_t n) {
    const double u = 0x1p-24;
    return (double)n * u / (1.0 - (double)n * u);
}

/* Exact y (dir 0) or dx (dir 1) at global row g, channel c; *sabs = sum |terms|. */
static double exact_row(const tu_problem *pb, int i, int dir, int64_t g, int64_t c,
                        const int64_t *seq_of, double *sabs) {
    int64_t C = pb->C[i], q = seq_of[g], s0 = pb->cu[q], s1 = pb->cu[q + 1];
    double e = 0, a = 0;
    for (int k = 0; k < 4; k++) {
        int64_t h = dir == 0 ? g - 3 + k : g + k;
        double v = 0;
        if (h >= s0 && h < s1)
            v = (double)tu_bf16_to_f32((dir == 0 ? pb->x[i] : pb->dy[i])[h * C + c]);
        double t = (double)pb->w[i][c * 4 + (dir == 0 ? k : 3 - k)] * v;
        e += t;
        a += fabs(t);
    }
    *sabs = a;
    return e;
}

static int bf16_within(cake_bf16 got, double exact, double sabs) {
    double ed = 0x1p-50 * sabs;
    double D = gamma_n(4) * sabs + 4 * 0x1p-149 + ed;
    double bound = 0x1p-8 * fabs(exact) + (1 + 0x1p-8) * D + ed + 0x1p-134;
    return fabs((double)tu_bf16_to_f32(got) - exact) <= bound; /* false for NaN */
}

/* y and dx of local rows l2g[0..S) (NULL: global order) against the exact values. */
static void check_rows(const char *who, const tu_problem *pb, int i, const cake_bf16 *y,
                       const cake_bf16 *dx, const int64_t *l2g, int64_t S, const int64_t *seq_of) {
    int64_t C = pb->C[i];
    for (int64_t t = 0; t < S; t++) {
        int64_t g = l2g ? l2g[t] : t;
        for (int64_t c = 0; c < C; c++) {
            double sabs, e;
            e = exact_row(pb, i, 0, g, c, seq_of, &sabs);
            TU_CHECK(bf16_within(y[t * C + c], e, sabs),
                     "%s: y[%d] row %" PRId64 " (global %" PRId64 ") col %" PRId64
                     ": 0x%04x = %.9g, exact %.17g, sum|t| %.9g",
                     who, i, t, g, c, y[t * C + c], (double)tu_bf16_to_f32(y[t * C + c]), e, sabs);
            e = exact_row(pb, i, 1, g, c, seq_of, &sabs);
            TU_CHECK(bf16_within(dx[t * C + c], e, sabs),
                     "%s: dx[%d] row %" PRId64 " (global %" PRId64 ") col %" PRId64
                     ": 0x%04x = %.9g, exact %.17g, sum|t| %.9g",
                     who, i, t, g, c, dx[t * C + c], (double)tu_bf16_to_f32(dx[t * C + c]), e,
                     sabs);
        }
    }
}

static void check_dw(const char *who, const tu_problem *pb, int i, const float *dw,
                     const int64_t *l2g, int64_t S, const int64_t *seq_of) {
    int64_t C = pb->C[i], nb = (S + 255) / 256, depth = 0;
    while (((int64_t)1 << depth) < nb)
        depth++;
    int64_t K = (S < 256 ? S : 256) + depth;
    for (int64_t c = 0; c < C; c++)
        for (int k = 0; k < 4; k++) {
            double e = 0, a = 0, got = (double)dw[c * 4 + k];
            for (int64_t t = 0; t < S; t++) {
                int64_t g = l2g ? l2g[t] : t, h = g - 3 + k, q = seq_of[g];
                double xv = h >= pb->cu[q] ? (double)tu_bf16_to_f32(pb->x[i][h * C + c]) : 0.0;
                double v = (double)tu_bf16_to_f32(pb->dy[i][g * C + c]) * xv;
                e += v;
                a += fabs(v);
            }
            if (S == 0) {
                uint32_t bits;
                memcpy(&bits, &dw[c * 4 + k], 4);
                TU_CHECK(bits == 0, "%s: empty rank dw[%d][%" PRId64 "][%d] = 0x%08x, want +0.0",
                         who, i, c, k, (unsigned)bits);
                continue;
            }
            double bound = gamma_n(K) * a + (double)(S + nb) * 0x1p-149 + (double)S * 0x1p-52 * a;
            TU_CHECK(fabs(got - e) <= bound,
                     "%s: dw[%d][%" PRId64 "][%d] = %.9g, exact %.17g, |err| %.3g > bound %.3g "
                     "(S %" PRId64 ", sum|t| %.9g)",
                     who, i, c, k, got, e, fabs(got - e), bound, S, a);
        }
}

static const tu_profile profiles[] = {TU_MODERATE, TU_WIDE, TU_TINY};

/* P = 1: the library's single-rank entry points and the reference. */
static void test_single_rank(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 301);
    for (int trial = 0; trial < 90; trial++) {
        int64_t *cu, C[TU_MAX_TENSORS];
        int64_t ns = tu_random_cu(&r, 10, trial % 4 == 0 ? 700 : 80, &cu);
        int n = (int)tu_range(&r, 1, 3);
        tu_profile prof = profiles[trial % 3];
        tu_random_channels(&r, n, 32, C);
        tu_problem pb;
        tu_problem_init(&pb, &r, prof, cu, ns, n, C);
        tu_set_ctx("float64 single-rank trial %d: profile %d, T=%" PRId64 ", %d tensors", trial,
                   (int)prof, pb.T, n);
        int64_t *seq_of = tu_seq_of_rows(cu, ns), *l2g = tu_malloc((size_t)pb.T * sizeof *l2g);
        for (int64_t t = 0; t < pb.T; t++)
            l2g[t] = t;
        tu_rank_out o;
        TU_OK(tu_run_single(&pb, NULL, &o));
        for (int i = 0; i < n; i++) {
            check_rows("library", &pb, i, o.y[i], o.dx[i], NULL, pb.T, seq_of);
            check_dw("library", &pb, i, o.dw[i], NULL, pb.T, seq_of);
            /* the reference must pass the same bounds */
            size_t bytes = (size_t)(pb.T * C[i]) * sizeof(cake_bf16);
            cake_bf16 *ry = tu_malloc(bytes), *rdx = tu_malloc(bytes);
            float *rdw = tu_malloc((size_t)C[i] * 4 * sizeof *rdw);
            ref_forward(cu, ns, C[i], pb.x[i], pb.w[i], ry);
            ref_backward_dx(cu, ns, C[i], pb.dy[i], pb.w[i], rdx);
            ref_dw(cu, ns, C[i], pb.x[i], pb.dy[i], l2g, pb.T, rdw);
            check_rows("reference", &pb, i, ry, rdx, NULL, pb.T, seq_of);
            check_dw("reference", &pb, i, rdw, NULL, pb.T, seq_of);
            free(ry);
            free(rdx);
            free(rdw);
        }
        tu_rank_out_free(&o);
        tu_problem_free(&pb);
        free(seq_of);
        free(l2g);
        free(cu);
    }
}

/* Every rank of random partitions: its y, dx and its own dw contribution. */
static void test_partitions(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 302);
    for (int trial = 0; trial < 90; trial++) {
        int64_t *cu, C[TU_MAX_TENSORS];
        int64_t ns = tu_random_cu(&r, 10, trial % 3 == 0 ? 500 : 60, &cu);
        int n = (int)tu_range(&r, 1, 2);
        tu_random_channels(&r, n, 24, C);
        tu_problem pb;
        tu_partition tp;
        tu_problem_init(&pb, &r, profiles[trial % 2], cu, ns, n, C);
        tu_kind kind = (tu_kind)(trial % TU_KIND_COUNT);
        int P = (int)tu_range(&r, 1, 6);
        tu_set_ctx("float64 partition trial %d: %s P=%d, T=%" PRId64, trial, tu_kind_name[kind], P,
                   pb.T);
        TU_OK(tu_partition_make(&tp, &r, kind, P, cu, ns, tu_range(&r, 1, 300)));
        int64_t *seq_of = tu_seq_of_rows(cu, ns);
        for (int k = 0; k < P; k++) {
            tu_rank_out o;
            TU_OK(tu_run_rank(&pb, &tp, k, NULL, 0, &o));
            for (int i = 0; i < n; i++) {
                check_rows("library rank", &pb, i, o.y[i], o.dx[i], tp.l2g[k], o.S, seq_of);
                check_dw("library rank", &pb, i, o.dw[i], tp.l2g[k], o.S, seq_of);
            }
            tu_rank_out_free(&o);
        }
        free(seq_of);
        tu_partition_free(&tp);
        tu_problem_free(&pb);
        free(cu);
    }
}

/* y (with the bias) and dbias of local rows l2g[0..S) (NULL: global order) against the exact
 * values; dx and dw are checked by check_rows / check_dw, the bias does not reach them. */
static void check_bias(const char *who, const tu_problem *pb, int i, const cake_bf16 *y,
                       const float *dbias, const int64_t *l2g, int64_t S, const int64_t *seq_of) {
    int64_t C = pb->C[i], nb = (S + 255) / 256, depth = 0;
    while (((int64_t)1 << depth) < nb)
        depth++;
    const int64_t K = (S < 256 ? S : 256) + depth;
    const double u = 0x1p-24;
    for (int64_t t = 0; t < S; t++) {
        const int64_t g = l2g ? l2g[t] : t;
        for (int64_t c = 0; c < C; c++) {
            double sabs, e = exact_row(pb, i, 0, g, c, seq_of, &sabs) + (double)pb->bias[i][c];
            const double ed = 0x1p-50 * (sabs + fabs((double)pb->bias[i][c]));
            const double D = gamma_n(4) * sabs + 4 * 0x1p-149 + ed;
            const double Dv = D + u * (fabs(e) + D);
            const double bound = Dv + 0x1p-8 * (fabs(e) + Dv) + 0x1p-134;
            const double got = (double)tu_bf16_to_f32(y[t * C + c]);
            TU_CHECK(fabs(got - e) <= bound, /* false for NaN */
                     "%s: y[%d] row %" PRId64 " (global %" PRId64 ") col %" PRId64
                     " with bias %.9g: %.9g, exact %.17g, bound %.3g",
                     who, i, t, g, c, (double)pb->bias[i][c], got, e, bound);
        }
    }
    for (int64_t c = 0; c < C; c++) {
        double e = 0, a = 0;
        for (int64_t t = 0; t < S; t++) {
            const double v = (double)tu_bf16_to_f32(pb->dy[i][(l2g ? l2g[t] : t) * C + c]);
            e += v;
            a += fabs(v);
        }
        if (S == 0) {
            uint32_t bits;
            memcpy(&bits, &dbias[c], 4);
            TU_CHECK(bits == 0, "%s: empty rank dbias[%d][%" PRId64 "] = 0x%08x, want +0.0", who,
                     i, c, (unsigned)bits);
            continue;
        }
        const double bound = gamma_n(K) * a + (double)S * 0x1p-52 * a;
        TU_CHECK(fabs((double)dbias[c] - e) <= bound,
                 "%s: dbias[%d][%" PRId64 "] = %.9g, exact %.17g, |err| %.3g > bound %.3g "
                 "(S %" PRId64 ")",
                 who, i, c, (double)dbias[c], e, fabs((double)dbias[c] - e), bound, S);
    }
}

/* A bias without activation, single rank and every rank of random partitions: y, dbias (and dx,
 * dw, which it does not change) within their float64 bounds, for the library and the
 * reference. */
static void test_bias(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 303);
    for (int trial = 0; trial < 60; trial++) {
        int64_t *cu, C[TU_MAX_TENSORS];
        int64_t ns = tu_random_cu(&r, 10, trial % 3 == 0 ? 600 : 60, &cu);
        int n = (int)tu_range(&r, 1, 2);
        tu_random_channels(&r, n, 24, C);
        tu_problem pb;
        tu_partition tp;
        const tu_profile prof = profiles[trial % 3];
        tu_problem_init(&pb, &r, prof, cu, ns, n, C);
        tu_problem_set_params(&pb, &r, prof, 1, CAKE_ACTIVATION_NONE);
        tu_kind kind = (tu_kind)(trial % TU_KIND_COUNT);
        int P = (int)tu_range(&r, 1, 5);
        tu_set_ctx("float64 bias trial %d: profile %d, %s P=%d, T=%" PRId64, trial, (int)prof,
                   tu_kind_name[kind], P, pb.T);
        TU_OK(tu_partition_make(&tp, &r, kind, P, cu, ns, tu_range(&r, 1, 300)));
        int64_t *seq_of = tu_seq_of_rows(cu, ns), *l2g = tu_malloc((size_t)pb.T * sizeof *l2g);
        for (int64_t t = 0; t < pb.T; t++)
            l2g[t] = t;
        tu_rank_out o;
        TU_OK(tu_run_single(&pb, NULL, &o));
        tu_ref ref;
        tu_ref_compute(&ref, &pb);
        for (int i = 0; i < n; i++) {
            check_bias("library", &pb, i, o.y[i], o.dbias[i], NULL, pb.T, seq_of);
            check_dw("library", &pb, i, o.dw[i], NULL, pb.T, seq_of);
            float *rdw = tu_malloc((size_t)C[i] * 16), *rdb = tu_malloc((size_t)C[i] * 4);
            ref_grads_from_g(cu, ns, C[i], pb.x[i], ref.g[i], l2g, pb.T, rdw, rdb);
            check_bias("reference", &pb, i, ref.y[i], rdb, NULL, pb.T, seq_of);
            free(rdw);
            free(rdb);
        }
        tu_ref_free(&ref);
        tu_rank_out_free(&o);
        for (int k = 0; k < P; k++) {
            TU_OK(tu_run_rank(&pb, &tp, k, NULL, 0, &o));
            for (int i = 0; i < n; i++) {
                check_bias("library rank", &pb, i, o.y[i], o.dbias[i], tp.l2g[k], o.S, seq_of);
                check_dw("library rank", &pb, i, o.dw[i], tp.l2g[k], o.S, seq_of);
            }
            tu_rank_out_free(&o);
        }
        free(seq_of);
        free(l2g);
        tu_partition_free(&tp);
        tu_problem_free(&pb);
        free(cu);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_rank),
        cmocka_unit_test(test_partitions),
        cmocka_unit_test(test_bias),
    };
    tu_seed();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
