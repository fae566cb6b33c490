/* Tensors of more than 2^31 and more than 2^32 elements (C = 8192, rank 1 of a 2-rank partition),
 * each in two variants, the plain op and bias + SiLU, on the same inputs: GPU y, dx, dw (and
 * dbias) equal the CPU's bitwise in every launch form, and spot rows (around the element indices
 * 2^31 and 2^32, fragment edges, the ends) and spot dw (and dbias) channels equal a scalar
 * evaluation of SPEC 3 from the hash-defined inputs.
 *
 * Runs only with CAKE_LARGE_TESTS=1 (else exit 77, skipped); needs about 5 x 8.6 GB of host
 * memory and 4 x 8.6 GB of GPU memory for the 2^32 case (checked first: exit 77 with the reason
 * when short).
 * Seed: CAKE_TEST_SEED. */
#include "cuda_util.h"
#include "large_data.h"
#include "reference.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Overridable only to try the program's logic at a small scale. */
#ifndef LARGE_C
#define LARGE_C 8192
#endif
#ifndef LARGE_LOG2_A
#define LARGE_LOG2_A 31 /* first case: more than 2^31 elements */
#endif
#define LARGE_LOG2_B (LARGE_LOG2_A + 1)
#define RANK0_ROWS 13 /* rank 0: global rows [1000, 1002), [5000, 5001), [T - 700, T - 690) */

/* The last sequence q with cu[q] <= g (the one holding g, empty sequences skipped). */
static int64_t seq_of(const int64_t *cu, int64_t num_seqs, int64_t g) {
    int64_t lo = 0, hi = num_seqs; /* cu[lo] <= g < cu[hi] */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (cu[mid] <= g)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

typedef struct large_case {
    int64_t C, S, T, num_seqs;
    int64_t cu[16];
    cake_range r0[3], r1[4];
    lg_rows rows; /* rank 1 */
    lg_data d;
    /* the variant being checked */
    int silu;
    const float *bias; /* [C] or NULL */
} large_case;

/* Rank 1 gets S rows; sequences span the rows where the element index passes 2^31 and 2^32. */
static void layout(large_case *L, int64_t S) {
    memset(L, 0, sizeof *L);
    L->C = LARGE_C;
    L->S = S;
    const int64_t T = S + RANK0_ROWS;
    L->T = T;
    L->r0[0] = (cake_range){1000, 1002};
    L->r0[1] = (cake_range){5000, 5001};
    L->r0[2] = (cake_range){T - 700, T - 690};
    L->r1[0] = (cake_range){0, 1000};
    L->r1[1] = (cake_range){1002, 5000};
    L->r1[2] = (cake_range){5001, T - 700};
    L->r1[3] = (cake_range){T - 690, T};
    lg_rows_init(&L->rows, L->r1, 4);
    /* global rows of the local rows where the element index reaches 2^31 and 2^32 */
    const int64_t g31 = lg_global_row(&L->rows, ((int64_t)1 << LARGE_LOG2_A) / L->C);
    const int64_t g32 = lg_global_row(&L->rows, ((int64_t)1 << LARGE_LOG2_B) / L->C);
    int64_t cand[] = {1,         1,          999,      3000,    g31 - 321,
                      g31 + 400, g32 - 1234, g32 + 77, T - 695, T - 695};
    int64_t n = 0;
    L->cu[n++] = 0;
    for (size_t k = 0; k < sizeof cand / sizeof cand[0]; k++)
        if (cand[k] > 0 && cand[k] < T)
            L->cu[n++] = cand[k];
    qsort(L->cu + 1, (size_t)(n - 1), sizeof(int64_t), cmp_i64);
    L->cu[n] = T;
    L->num_seqs = n;
    lg_data_init(&L->d, tu_seed() ^ (uint64_t)S, L->C);
}

/* ---- scalar SPEC 3 from the hash, for spot checks ---------------------------------------------
 */

static float xval(const large_case *L, int64_t g, int64_t s0, int64_t c) {
    return g >= s0 ? ref_bf16_to_f32(lg_value(&L->d, LG_X, g, c)) : 0.0f;
}

/* a at global row g (in the sequence starting at s0): the four fmas, then the bias. */
static float a_ref(const large_case *L, int64_t g, int64_t s0, int64_t c) {
    float acc = 0.0f;
    for (int k = 0; k < 4; k++)
        acc = fmaf(lg_weight(&L->d, c, k), xval(L, g - 3 + k, s0, c), acc);
    return L->bias ? acc + L->bias[c] : acc;
}

/* g at global row g of the sequence [s0, s1): dy, or dy * silu'(a); +0.0 at or past s1. */
static float g_ref(const large_case *L, int64_t g, int64_t s0, int64_t s1, int64_t c) {
    if (g >= s1)
        return 0.0f;
    const float dy = ref_bf16_to_f32(lg_value(&L->d, LG_DY, g, c));
    return L->silu ? dy * ref_silu_grad(a_ref(L, g, s0, c)) : dy;
}

static cake_bf16 y_ref(const large_case *L, int64_t t, int64_t c) {
    const int64_t g = lg_global_row(&L->rows, t), s0 = L->cu[seq_of(L->cu, L->num_seqs, g)];
    const float a = a_ref(L, g, s0, c);
    return ref_f32_to_bf16(L->silu ? ref_silu(a) : a);
}

static cake_bf16 dx_ref(const large_case *L, int64_t t, int64_t c) {
    const int64_t g = lg_global_row(&L->rows, t), q = seq_of(L->cu, L->num_seqs, g);
    const int64_t s0 = L->cu[q], s1 = L->cu[q + 1];
    float acc = 0.0f;
    for (int j = 0; j < 4; j++)
        acc = fmaf(lg_weight(&L->d, c, 3 - j), g_ref(L, g + j, s0, s1, c), acc);
    return ref_f32_to_bf16(acc);
}

static float tree_sum(const float *p, int64_t a, int64_t b) {
    if (b - a == 1)
        return p[a];
    int64_t m = 1;
    while (m * 2 < b - a)
        m *= 2;
    return tree_sum(p, a, a + m) + tree_sum(p, a + m, b);
}

/* g of every local row of channel c (for dw_ref). */
static void g_column(const large_case *L, int64_t c, float *g) {
    for (int64_t t = 0; t < L->S; t++) {
        const int64_t r = lg_global_row(&L->rows, t), q = seq_of(L->cu, L->num_seqs, r);
        g[t] = g_ref(L, r, L->cu[q], L->cu[q + 1], c);
    }
}

/* dw[c][k] (k < 4) or dbias[c] (k = 4) from g_column's g, canonical NaN. */
static float dw_ref(const large_case *L, int64_t c, int k, const float *g, float *partials) {
    const int64_t nb = (L->S + CAKE_DW_BLOCK_ROWS - 1) / CAKE_DW_BLOCK_ROWS;
    if (nb == 0)
        return 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        float p = 0.0f;
        const int64_t t1 =
            (b + 1) * CAKE_DW_BLOCK_ROWS < L->S ? (b + 1) * CAKE_DW_BLOCK_ROWS : L->S;
        for (int64_t t = b * CAKE_DW_BLOCK_ROWS; t < t1; t++) {
            if (k == 4) {
                p = p + g[t];
                continue;
            }
            const int64_t r = lg_global_row(&L->rows, t), s0 = L->cu[seq_of(L->cu, L->num_seqs, r)];
            p = fmaf(g[t], xval(L, r - 3 + k, s0, c), p);
        }
        partials[b] = p;
    }
    return ref_f32_canonical(tree_sum(partials, 0, nb));
}

/* Local rows worth a scalar check: the ends, both sides of the 2^31 and 2^32 element indices,
 * and the edges of every fragment. */
static int64_t spot_rows(const large_case *L, const cake_plan *plan, int64_t *out, int64_t cap) {
    int64_t n = 0;
    const int64_t marks[] = {0, ((int64_t)1 << LARGE_LOG2_A) / L->C,
                             ((int64_t)1 << LARGE_LOG2_B) / L->C, L->S};
    for (size_t m = 0; m < 4; m++)
        for (int64_t d = -3; d <= 3; d++)
            if (marks[m] + d >= 0 && marks[m] + d < L->S && n < cap)
                out[n++] = marks[m] + d;
    for (int64_t f = 0; f < cake_plan_num_fragments(plan); f++) {
        cake_fragment fr;
        if (cake_plan_fragment(plan, f, &fr) != CAKE_SUCCESS)
            break;
        for (int64_t d = -1; d <= 3; d++) {
            const int64_t a = fr.local_start + d, b = fr.local_start + fr.length - 1 - d;
            if (a >= 0 && a < L->S && n < cap)
                out[n++] = a;
            if (b >= 0 && b < L->S && n < cap)
                out[n++] = b;
        }
    }
    return n;
}

static int check_spots16(const char *what, const large_case *L, const cake_bf16 *got,
                         const int64_t *rows, int64_t nrows, int is_dx) {
    int64_t bad = 0;
    for (int64_t q = 0; q < nrows; q++)
        for (int64_t c = 0; c < L->C; c++) {
            const int64_t t = rows[q];
            const cake_bf16 want = is_dx ? dx_ref(L, t, c) : y_ref(L, t, c);
            const cake_bf16 g = got[t * L->C + c];
            if (g != want && bad++ == 0)
                tu_report("%s: local row %" PRId64 " (global %" PRId64 ", element %" PRId64
                          ") col %" PRId64 ": got 0x%04x, scalar SPEC 3 gives 0x%04x",
                          what, t, lg_global_row(&L->rows, t), t * L->C + c, c, g, want);
        }
    if (bad)
        fprintf(stderr, "  %s: %" PRId64 " spot values differ over %" PRId64 " rows\n", what, bad,
                nrows);
    return bad != 0;
}

/* Spot channels of dw and (with a bias) dbias against the scalar evaluation. */
static int check_spot_dw(const char *what, const large_case *L, const float *got,
                         const float *got_dbias) {
    const int64_t chans[] = {0, 1, 7, 8, L->C / 2 - 1, L->C / 2, L->C - 9, L->C - 1};
    const int64_t nb = (L->S + CAKE_DW_BLOCK_ROWS - 1) / CAKE_DW_BLOCK_ROWS;
    float *partials = tu_malloc((size_t)(nb > 0 ? nb : 1) * sizeof(float));
    float *g = tu_malloc((size_t)(L->S > 0 ? L->S : 1) * sizeof(float));
    int bad = 0;
    for (size_t q = 0; q < sizeof chans / sizeof chans[0]; q++) {
        const int64_t c = chans[q];
        g_column(L, c, g);
        for (int k = 0; k < (got_dbias ? 5 : 4); k++) {
            const float want = dw_ref(L, c, k, g, partials);
            const float v = k < 4 ? got[c * 4 + k] : got_dbias[c];
            if (memcmp(&want, &v, 4) != 0) {
                if (k < 4)
                    tu_report("%s: dw[%" PRId64 "][%d] = %.9g, scalar SPEC 3 gives %.9g", what, c,
                              k, (double)v, (double)want);
                else
                    tu_report("%s: dbias[%" PRId64 "] = %.9g, scalar SPEC 3 gives %.9g", what, c,
                              (double)v, (double)want);
                bad = 1;
            }
        }
    }
    free(partials);
    free(g);
    return bad;
}

/* ---- the case ----------------------------------------------------------------------------------
 */

/* Pools of rank 1 from the hash (layout of cake.h), sequence bounds from cu. The future pool has
 * 2 * pool_rows rows: dy, then x at the same rows (the half a call with SiLU reads). */
static void build_pools(const large_case *L, const cake_plan *plan, cake_bf16 *hist,
                        cake_bf16 *fut) {
    const int64_t C = L->C, pool = cake_plan_pool_rows(plan);
    for (int64_t f = 0; f < cake_plan_num_fragments(plan); f++) {
        cake_fragment fr;
        TU_OK(cake_plan_fragment(plan, f, &fr));
        const int64_t q = seq_of(L->cu, L->num_seqs, fr.global_start);
        const int64_t s0 = L->cu[q], s1 = L->cu[q + 1];
        for (int64_t j = 0; j < 3; j++) {
            const int64_t hg = fr.global_start - 3 + j, fg = fr.global_start + fr.length + j;
            for (int64_t c = 0; c < C; c++) {
                hist[(3 * f + j) * C + c] = hg >= s0 ? lg_value(&L->d, LG_X, hg, c) : 0;
                fut[(3 * f + j) * C + c] = fg < s1 ? lg_value(&L->d, LG_DY, fg, c) : 0;
                fut[(pool + 3 * f + j) * C + c] = fg < s1 ? lg_value(&L->d, LG_X, fg, c) : 0;
            }
        }
    }
}

/* The variants run on each case, on the same inputs (bias + SiLU reads the x half of the future
 * pool and writes dbias too). */
typedef struct variant {
    const char *name;
    int bias, silu;
} variant;
static const variant k_variants[] = {{"plain", 0, 0}, {"bias + SiLU", 1, 1}};
enum { NUM_VARIANTS = sizeof k_variants / sizeof k_variants[0] };

static void run_large(int64_t S, const char *name) {
    large_case *L = tu_malloc(sizeof *L);
    layout(L, S);
    const int64_t C = L->C;
    const size_t bytes = (size_t)S * (size_t)C * sizeof(cake_bf16);
    tu_set_ctx("%s: C=%" PRId64 ", rank 1 of 2, S_local=%" PRId64 " (%" PRId64
               " elements), T=%" PRId64,
               name, C, S, S * C, L->T);
    printf("[cake-test] %s: S_local=%" PRId64 " x C=%" PRId64 " = %" PRId64
           " elements (%.2f GB per array), %" PRId64 " sequences\n",
           name, S, C, S * C, (double)bytes / 1e9, L->num_seqs);
    double t0 = lg_now(), t1;

    /* partition and plan of rank 1 */
    const int64_t counts[] = {3, 4};
    cake_range ranges[7];
    memcpy(ranges, L->r0, sizeof L->r0);
    memcpy(ranges + 3, L->r1, sizeof L->r1);
    cake_partition *part = NULL;
    cake_plan *plan = NULL;
    TU_OK(cake_partition_create_ranges(L->cu, L->num_seqs, 2, counts, ranges, &part));
    TU_OK(cake_plan_create(part, 1, &plan));
    TU_CHECK(cake_plan_local_rows(plan) == S, "plan has %" PRId64 " rows",
             cake_plan_local_rows(plan));
    const int64_t pool = cake_plan_pool_rows(plan);
    const size_t hist_bytes = (size_t)(pool * C) * 2, fut_bytes = 2 * hist_bytes;

    /* inputs, and a bias for the bias variant */
    cake_bf16 *x = tu_malloc(bytes), *dy = tu_malloc(bytes);
    cake_bf16 *hist = tu_malloc(hist_bytes), *fut = tu_malloc(fut_bytes);
    float *w = tu_malloc((size_t)C * 16), *bias = tu_malloc((size_t)C * 4);
    float *dw_cpu = tu_malloc((size_t)C * 16), *dw_gpu = tu_malloc((size_t)C * 16);
    float *db_cpu = tu_malloc((size_t)C * 4), *db_gpu = tu_malloc((size_t)C * 4);
    lg_fill_local(&L->d, LG_X, &L->rows, x);
    lg_fill_local(&L->d, LG_DY, &L->rows, dy);
    build_pools(L, plan, hist, fut);
    for (int64_t c = 0; c < C; c++) {
        for (int k = 0; k < 4; k++)
            w[c * 4 + k] = lg_weight(&L->d, c, k);
        bias[c] = lg_weight(&L->d, c, 0) * (float)((c % 7) - 3); /* some zeros, both signs */
    }
    t1 = lg_now();
    printf("[cake-test]   inputs filled in %.1f s (%" PRId64 " fragments, %" PRId64 " pool rows)\n",
           t1 - t0, cake_plan_num_fragments(plan), pool);

    /* device copies (host x and dy stay: each variant's CPU truth reads them) */
    cake_bf16 *d_x = cu_upload(x, bytes), *d_dy = cu_upload(dy, bytes);
    cake_bf16 *d_h = cu_upload(hist, hist_bytes), *d_f = cu_upload(fut, fut_bytes);
    float *d_w = cu_upload(w, (size_t)C * 16), *d_dw = cu_alloc((size_t)C * 16);
    float *d_b = cu_upload(bias, (size_t)C * 4), *d_db = cu_alloc((size_t)C * 4);
    cake_bf16 *d_y = cu_alloc(bytes), *d_dx = cu_alloc(bytes);
    cake_cuda_plan *dplan = NULL;
    TU_OK(cake_cuda_plan_create(plan, &dplan));
    const int64_t ch[] = {C};
    size_t ws_bytes = 0;
    for (int v = 0; v < NUM_VARIANTS; v++) { /* one workspace big enough for both */
        const float *bs[] = {d_b};
        float *dbs[] = {d_db};
        const cake_conv_params prm = {k_variants[v].silu ? CAKE_ACTIVATION_SILU
                                                          : CAKE_ACTIVATION_NONE,
                                      k_variants[v].bias ? bs : NULL,
                                      k_variants[v].bias ? dbs : NULL};
        size_t need = 0;
        TU_OK(cake_cuda_backward_workspace_size(dplan, 1, ch, &prm, &need));
        if (need > ws_bytes)
            ws_bytes = need;
    }
    void *d_ws = cu_alloc(ws_bytes);
    CU_CHECK(cudaDeviceSynchronize());
    cake_bf16 *got = tu_malloc(bytes), *y_cpu = tu_malloc(bytes), *dx_cpu = tu_malloc(bytes);
    t0 = lg_now();
    printf("[cake-test]   uploaded in %.1f s (workspace %zu bytes)\n", t0 - t1, ws_bytes);

    int64_t spots[400];
    const int64_t nspots = spot_rows(L, plan, spots, 400);
    cake_cooperative forms[3];
    int nforms = 0, bad = 0;
    forms[nforms++] = CAKE_COOPERATIVE_OFF;
    if (cake_cuda_cooperative_supported())
        forms[nforms++] = CAKE_COOPERATIVE_ON;
    forms[nforms++] = CAKE_COOPERATIVE_AUTO;
    for (int v = 0; v < NUM_VARIANTS; v++) {
        const variant *var = &k_variants[v];
        const cake_activation act = var->silu ? CAKE_ACTIVATION_SILU : CAKE_ACTIVATION_NONE;
        L->silu = var->silu;
        L->bias = var->bias ? bias : NULL;

        /* CPU truth on all cores */
        t1 = lg_now();
        const cake_cpu_options opt = {0, CAKE_CPU_ISA_AUTO};
        const cake_bf16 *xs[] = {x}, *hs[] = {hist}, *dys[] = {dy}, *fs[] = {fut};
        const float *ws[] = {w}, *bs[] = {bias};
        cake_bf16 *ys[] = {y_cpu}, *dxs[] = {dx_cpu};
        float *dws[] = {dw_cpu}, *dbs[] = {db_cpu};
        const cake_conv_params cprm = {act, var->bias ? bs : NULL, var->bias ? dbs : NULL};
        TU_OK(cake_cpu_forward(plan, 1, ch, xs, ws, &cprm, hs, ys, &opt));
        TU_OK(cake_cpu_backward(plan, 1, ch, xs, ws, &cprm, hs, dys, fs, dxs, dws, &opt));
        t0 = lg_now();
        printf("[cake-test]   %s: CPU forward + backward in %.1f s\n", var->name, t0 - t1);

        for (int j = 0; j < nforms; j++) {
            const cake_bf16 *in_x[] = {d_x}, *in_h[] = {d_h}, *in_dy[] = {d_dy}, *in_f[] = {d_f};
            const float *in_w[] = {d_w}, *in_b[] = {d_b};
            cake_bf16 *out_y[] = {d_y}, *out_dx[] = {d_dx};
            float *out_dw[] = {d_dw}, *out_db[] = {d_db};
            const cake_conv_params gprm = {act, var->bias ? in_b : NULL,
                                           var->bias ? out_db : NULL};
            const int caller_ws = j == 1;
            char what[200];
            CU_CHECK(cudaMemset(d_y, 0xff, bytes));
            CU_CHECK(cudaMemset(d_dx, 0xff, bytes));
            CU_CHECK(cudaMemset(d_dw, 0xff, (size_t)C * 16));
            CU_CHECK(cudaMemset(d_db, 0xff, (size_t)C * 4));
            t0 = lg_now();
            TU_OK(cake_cuda_forward(dplan, 1, ch, in_x, in_w, &gprm, in_h, out_y, forms[j], 0));
            TU_OK(cake_cuda_backward(dplan, 1, ch, in_x, in_w, &gprm, in_h, in_dy, in_f, out_dx,
                                     out_dw, forms[j], caller_ws ? d_ws : NULL,
                                     caller_ws ? ws_bytes : 0, 0));
            snprintf(what, sizeof what, "%s, %s, cooperative=%s, workspace %s", name, var->name,
                     forms[j] == CAKE_COOPERATIVE_OFF  ? "OFF"
                     : forms[j] == CAKE_COOPERATIVE_ON ? "ON"
                                                       : "AUTO",
                     caller_ws ? "caller" : "NULL");
            cu_sync(0, what);
            t1 = lg_now();
            cu_download(got, d_y, bytes);
            char label[260];
            snprintf(label, sizeof label, "%s: GPU vs CPU y", what);
            bad += tu_diff_bf16(label, got, y_cpu, S, C);
            if (j == 0) {
                snprintf(label, sizeof label, "%s: GPU y vs scalar", what);
                bad += check_spots16(label, L, got, spots, nspots, 0);
            }
            cu_download(got, d_dx, bytes);
            snprintf(label, sizeof label, "%s: GPU vs CPU dx", what);
            bad += tu_diff_bf16(label, got, dx_cpu, S, C);
            if (j == 0) {
                snprintf(label, sizeof label, "%s: GPU dx vs scalar", what);
                bad += check_spots16(label, L, got, spots, nspots, 1);
            }
            cu_download(dw_gpu, d_dw, (size_t)C * 16);
            snprintf(label, sizeof label, "%s: GPU vs CPU dw", what);
            bad += tu_diff_f32(label, dw_gpu, dw_cpu, C, 4);
            if (var->bias) {
                cu_download(db_gpu, d_db, (size_t)C * 4);
                snprintf(label, sizeof label, "%s: GPU vs CPU dbias", what);
                bad += tu_diff_f32(label, db_gpu, db_cpu, 1, C);
            }
            if (j == 0) {
                snprintf(label, sizeof label, "%s: GPU dw vs scalar", what);
                bad += check_spot_dw(label, L, dw_gpu, var->bias ? db_gpu : NULL);
            }
            printf("[cake-test]   %s: GPU %.3f s, compared in %.1f s%s\n", what, t1 - t0,
                   lg_now() - t1, bad ? " (MISMATCH)" : "");
            fflush(stdout);
        }
    }

    cu_free(d_x);
    cu_free(d_dy);
    cu_free(d_h);
    cu_free(d_f);
    cu_free(d_w);
    cu_free(d_dw);
    cu_free(d_b);
    cu_free(d_db);
    cu_free(d_y);
    cu_free(d_dx);
    cu_free(d_ws);
    cake_cuda_plan_destroy(dplan);
    cake_plan_destroy(plan);
    cake_partition_destroy(part);
    free(x);
    free(dy);
    free(hist);
    free(fut);
    free(w);
    free(bias);
    free(dw_cpu);
    free(dw_gpu);
    free(db_cpu);
    free(db_gpu);
    free(y_cpu);
    free(dx_cpu);
    free(got);
    free(L);
    TU_CHECK(bad == 0, "%d comparisons failed (see above)", bad);
}

static void test_over_2_31(void **state) {
    (void)state;
    run_large(((int64_t)1 << LARGE_LOG2_A) / LARGE_C + 1000, "more than 2^31 elements");
}

static void test_over_2_32(void **state) {
    (void)state;
    run_large(((int64_t)1 << LARGE_LOG2_B) / LARGE_C + 1000, "more than 2^32 elements");
}

/* Bytes of MemAvailable, or -1 when /proc/meminfo cannot be read. */
static int64_t host_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    int64_t kb = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %" SCNd64 " kB", &kb) == 1)
            break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

int main(void) {
    const char *want = getenv("CAKE_LARGE_TESTS");
    if (!want || strcmp(want, "1") != 0) {
        printf("[cake-test] large-tensor test not requested (set CAKE_LARGE_TESTS=1): skipping "
               "(exit %d)\n",
               CU_SKIP);
        return CU_SKIP;
    }
    (void)tu_seed();
    cu_require_gpu();
    /* the 2^32 case: host x, dy, y, dx and one download buffer; device x, dy, y, dx */
    const int64_t array = (((int64_t)1 << LARGE_LOG2_B) / LARGE_C + 1000) * LARGE_C * 2;
    const int64_t need_host = 5 * array + ((int64_t)2 << 30),
                  need_dev = 4 * array + ((int64_t)1 << 30);
    const int64_t host = host_available();
    size_t dev_free = 0, dev_total = 0;
    if (cudaMemGetInfo(&dev_free, &dev_total) != cudaSuccess)
        dev_free = 0;
    printf(
        "[cake-test] memory: host available %.1f GB (need %.1f), device free %.1f GB (need %.1f)\n",
        (double)host / 1e9, (double)need_host / 1e9, (double)dev_free / 1e9,
        (double)need_dev / 1e9);
    if ((host >= 0 && host < need_host) || (int64_t)dev_free < need_dev) {
        printf("[cake-test] SKIPPED: not enough memory for the 2^32-element case (exit %d)\n",
               CU_SKIP);
        return CU_SKIP;
    }
    fflush(stdout);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_over_2_31),
        cmocka_unit_test(test_over_2_32),
    };
    return cmocka_run_group_tests_name("cuda_large", tests, NULL, NULL);
}
