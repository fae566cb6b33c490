/* One rank of a GPU test case (see cuda_case.h). */
#include "cuda_case.h"

#include "reference.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* C has no implicit T ** -> const T *const * conversion; the API takes the latter. */
#define CC_IN16(a) ((const cake_bf16 *const *)(a))
#define CC_INF(a) ((const float *const *)(a))

/* ---- problems -------------------------------------------------------------------------------- */

void cc_problem_init(cc_problem *pb, tu_rng *r, tu_profile p, int64_t *cu, int64_t num_seqs, int n,
                     const int64_t *C) {
    TU_CHECK(n >= 1 && n <= CC_MAX_TENSORS, "cc_problem_init: %d tensors", n);
    memset(pb, 0, sizeof *pb);
    pb->cu = cu;
    pb->num_seqs = num_seqs;
    pb->T = cu[num_seqs];
    pb->n = n;
    pb->seq_of = tu_seq_of_rows(cu, num_seqs);
    for (int i = 0; i < n; i++) {
        int64_t e = pb->T * C[i];
        pb->C[i] = C[i];
        pb->x[i] = tu_malloc((size_t)e * sizeof(cake_bf16));
        pb->dy[i] = tu_malloc((size_t)e * sizeof(cake_bf16));
        pb->w[i] = tu_malloc((size_t)C[i] * 4 * sizeof(float));
        tu_fill_bf16(r, p, pb->x[i], e);
        tu_fill_bf16(r, p, pb->dy[i], e);
        tu_fill_weights(r, p, pb->w[i], C[i] * 4);
    }
}

int64_t *cc_cu_copy(const int64_t *cu_values, int64_t num_seqs) {
    int64_t *cu = tu_malloc((size_t)(num_seqs + 1) * sizeof *cu);
    memcpy(cu, cu_values, (size_t)(num_seqs + 1) * sizeof *cu);
    return cu;
}

void cc_problem_set_variant(cc_problem *pb, tu_rng *r, tu_profile p, int variant) {
    for (int i = 0; i < pb->n; i++) {
        free(pb->bias[i]);
        pb->bias[i] = NULL;
        if (tu_variant_bias(variant)) {
            pb->bias[i] = tu_malloc((size_t)pb->C[i] * sizeof(float));
            tu_fill_weights(r, p, pb->bias[i], pb->C[i]);
        }
    }
    pb->with_bias = tu_variant_bias(variant);
    pb->activation = tu_variant_activation(variant);
}

int cc_problem_variant(const cc_problem *pb) {
    return (pb->with_bias ? 1 : 0) | (pb->activation == CAKE_ACTIVATION_SILU ? 2 : 0);
}

void cc_problem_free(cc_problem *pb) {
    for (int i = 0; i < pb->n; i++) {
        free(pb->x[i]);
        free(pb->dy[i]);
        free(pb->w[i]);
        free(pb->bias[i]);
    }
    free(pb->cu);
    free(pb->seq_of);
    memset(pb, 0, sizeof *pb);
}

tu_problem cc_problem_view(const cc_problem *pb) {
    TU_CHECK(pb->n <= TU_MAX_TENSORS, "cc_problem_view: %d tensors", pb->n);
    tu_problem v;
    memset(&v, 0, sizeof v);
    v.cu = pb->cu;
    v.num_seqs = pb->num_seqs;
    v.T = pb->T;
    v.n = pb->n;
    v.with_bias = pb->with_bias;
    v.activation = pb->activation;
    for (int i = 0; i < pb->n; i++) {
        v.C[i] = pb->C[i];
        v.x[i] = pb->x[i];
        v.dy[i] = pb->dy[i];
        v.w[i] = pb->w[i];
        v.bias[i] = pb->bias[i];
    }
    return v;
}

static float q_inf_sign(tu_rng *r) {
    return tu_range(r, 0, 1) ? INFINITY : -INFINITY;
}

void cc_inject_specials(cc_problem *pb, tu_rng *r, int pct) {
    /* quiet NaN, -quiet NaN with payload, signalling NaNs, +inf, -inf */
    static const cake_bf16 s16[] = {0x7fc0, 0xffc1, 0x7f81, 0xffa5, 0x7f80, 0xff80};
    static const uint32_t s32[] = {0x7fc00000u, 0x7f800001u, 0x7f800000u, 0xff800000u};
    for (int i = 0; i < pb->n; i++) {
        int64_t e = pb->T * pb->C[i];
        for (int64_t k = 0; k < e; k++) {
            if (tu_range(r, 0, 99) < pct)
                pb->x[i][k] = s16[tu_range(r, 0, 5)];
            if (tu_range(r, 0, 99) < pct)
                pb->dy[i][k] = s16[tu_range(r, 0, 5)];
        }
        if (pb->C[i] >= 16) { /* one special weight: a whole channel goes NaN or infinite */
            int64_t k = tu_range(r, 0, pb->C[i] * 4 - 1);
            memcpy(&pb->w[i][k], &s32[tu_range(r, 0, 3)], 4);
        }
        if (pb->with_bias && pb->C[i] >= 16) /* and one special bias value */
            memcpy(&pb->bias[i][tu_range(r, 0, pb->C[i] - 1)], &s32[tu_range(r, 0, 3)], 4);
    }
}

void cc_inject_nan_operands(cc_problem *pb, tu_rng *r, int rows) {
    static const cake_bf16 nan16[] = {0x7fc1, 0xffc0, 0x7f81, 0xff85, 0x7fff, 0xffa0};
    static const uint32_t nan32[] = {0x7fc00001u, 0xffc00000u, 0x7f800001u, 0xff812345u};
    if (pb->T == 0)
        return;
    for (int i = 0; i < pb->n; i++) {
        const int64_t C = pb->C[i];
        for (int q = 0; q < rows; q++) {
            const int64_t g = tu_range(r, 0, pb->T - 1), c = 2 * tu_range(r, 0, C / 2 - 1);
            for (int64_t d = 0; d < 2; d++) {
                pb->x[i][g * C + c + d] = nan16[tu_range(r, 0, 5)];
                pb->dy[i][g * C + c + d] = nan16[tu_range(r, 0, 5)];
                if (g + 1 < pb->T)
                    pb->x[i][(g + 1) * C + c + d] = nan16[tu_range(r, 0, 5)];
            }
            const int64_t gi = tu_range(r, 0, pb->T - 1), ci = tu_range(r, 0, C - 1);
            (q % 2 ? pb->x : pb->dy)[i][gi * C + ci] = q % 4 < 2 ? 0x7f80 : 0xff80;
        }
        memcpy(&pb->w[i][2 * 4 + 1], &nan32[tu_range(r, 0, 3)], 4);
        memcpy(&pb->w[i][3 * 4 + 3], &nan32[tu_range(r, 0, 3)], 4);
        if (pb->with_bias) {
            memcpy(&pb->bias[i][3], &nan32[tu_range(r, 0, 3)], 4);
            memcpy(&pb->bias[i][4], &nan32[tu_range(r, 0, 3)], 4);
            pb->bias[i][5] = q_inf_sign(r);
        }
    }
}

/* ---- ranks ----------------------------------------------------------------------------------- */

static size_t rows_bytes(int64_t rows, int64_t C) { return (size_t)(rows * C) * sizeof(cake_bf16); }

void cc_rank_init(cc_rank *rk, const cc_problem *pb, const tu_partition *tp, int rank) {
    memset(rk, 0, sizeof *rk);
    rk->rank = rank;
    rk->n = pb->n;
    rk->with_bias = pb->with_bias;
    rk->activation = pb->activation;
    TU_OK(cake_plan_create(tp->lib, rank, &rk->plan));
    rk->S = cake_plan_local_rows(rk->plan);
    rk->pool = cake_plan_pool_rows(rk->plan);
    rk->fut_rows = tu_future_rows(rk->pool, pb->activation);
    rk->num_fragments = cake_plan_num_fragments(rk->plan);
    TU_CHECK(rk->S == tp->local_rows[rank],
             "rank %d: plan has %" PRId64 " rows, partition %" PRId64, rank, rk->S,
             tp->local_rows[rank]);
    const int64_t S = rk->S, pool = rk->pool;
    for (int i = 0; i < pb->n; i++) {
        const int64_t C = pb->C[i];
        rk->C[i] = C;
        rk->w[i] = pb->w[i];
        rk->bias[i] = pb->with_bias ? pb->bias[i] : NULL;
        if (S > 0) {
            rk->x[i] = tu_malloc(rows_bytes(S, C));
            rk->dy[i] = tu_malloc(rows_bytes(S, C));
            tu_gather(pb->x[i], C, tp->l2g[rank], S, rk->x[i]);
            tu_gather(pb->dy[i], C, tp->l2g[rank], S, rk->dy[i]);
            rk->y[i] = tu_malloc(rows_bytes(S, C));
            rk->dx[i] = tu_malloc(rows_bytes(S, C));
            rk->g_y[i] = tu_malloc(rows_bytes(S, C));
            rk->g_dx[i] = tu_malloc(rows_bytes(S, C));
        }
        if (pool > 0) {
            rk->hist[i] = tu_malloc(rows_bytes(pool, C));
            rk->fut[i] = tu_malloc(rows_bytes(rk->fut_rows, C));
            TU_OK(tu_build_pools_act(rk->plan, pb->cu, pb->num_seqs, pb->seq_of, C, pb->x[i],
                                     pb->dy[i], pb->activation, rk->hist[i], rk->fut[i]));
        }
        rk->dw[i] = tu_malloc((size_t)C * 4 * sizeof(float));
        rk->g_dw[i] = tu_malloc((size_t)C * 4 * sizeof(float));
        if (pb->with_bias) {
            rk->dbias[i] = tu_malloc((size_t)C * sizeof(float));
            rk->g_dbias[i] = tu_malloc((size_t)C * sizeof(float));
        }
    }
    /* The truth: the CPU path, tested against the independent reference elsewhere. */
    const cake_conv_params prm = {rk->activation, rk->with_bias ? rk->bias : NULL,
                                  rk->with_bias ? rk->dbias : NULL};
    TU_OK(cake_cpu_forward(rk->plan, rk->n, rk->C, CC_IN16(rk->x), rk->w, &prm, CC_IN16(rk->hist),
                           rk->y, NULL));
    TU_OK(cake_cpu_backward(rk->plan, rk->n, rk->C, CC_IN16(rk->x), rk->w, &prm,
                            CC_IN16(rk->hist), CC_IN16(rk->dy), CC_IN16(rk->fut), rk->dx, rk->dw,
                            NULL));
    for (int i = 0; i < pb->n; i++) {
        const int64_t C = pb->C[i];
        rk->d_x[i] = cu_upload(rk->x[i], rows_bytes(S, C));
        rk->d_dy[i] = cu_upload(rk->dy[i], rows_bytes(S, C));
        rk->d_hist[i] = cu_upload(rk->hist[i], rows_bytes(pool, C));
        rk->d_fut[i] = cu_upload(rk->fut[i], rows_bytes(rk->fut_rows, C));
        rk->d_y[i] = cu_alloc(rows_bytes(S, C));
        rk->d_dx[i] = cu_alloc(rows_bytes(S, C));
        rk->d_w[i] = cu_upload(rk->w[i], (size_t)C * 4 * sizeof(float));
        rk->d_dw[i] = cu_alloc((size_t)C * 4 * sizeof(float));
        if (pb->with_bias) {
            rk->d_bias[i] = cu_upload(rk->bias[i], (size_t)C * sizeof(float));
            rk->d_dbias[i] = cu_alloc((size_t)C * sizeof(float));
        }
    }
    TU_OK(cake_cuda_plan_create(rk->plan, &rk->dplan));
    /* cudaMemcpy from pageable memory may return before its DMA lands; the tests launch on a
     * non-blocking stream, so wait here rather than rely on that. */
    CU_CHECK(cudaDeviceSynchronize());
}

void cc_rank_free(cc_rank *rk) {
    for (int i = 0; i < rk->n; i++) {
        free(rk->x[i]);
        free(rk->dy[i]);
        free(rk->hist[i]);
        free(rk->fut[i]);
        free(rk->y[i]);
        free(rk->dx[i]);
        free(rk->dw[i]);
        free(rk->dbias[i]);
        free(rk->g_y[i]);
        free(rk->g_dx[i]);
        free(rk->g_dw[i]);
        free(rk->g_dbias[i]);
        cudaFree(rk->d_x[i]);
        cudaFree(rk->d_dy[i]);
        cudaFree(rk->d_hist[i]);
        cudaFree(rk->d_fut[i]);
        cudaFree(rk->d_y[i]);
        cudaFree(rk->d_dx[i]);
        cudaFree(rk->d_w[i]);
        cudaFree(rk->d_dw[i]);
        cudaFree(rk->d_bias[i]);
        cudaFree(rk->d_dbias[i]);
    }
    cake_cuda_plan_destroy(rk->dplan);
    cake_plan_destroy(rk->plan);
    memset(rk, 0, sizeof *rk);
}

/* ---- launches -------------------------------------------------------------------------------- */

const char *cc_coop_name(cake_cooperative c) {
    switch (c) {
    case CAKE_COOPERATIVE_AUTO:
        return "AUTO";
    case CAKE_COOPERATIVE_OFF:
        return "OFF";
    case CAKE_COOPERATIVE_ON:
        return "ON";
    default:
        return "invalid";
    }
}

void cc_launch_describe(const cc_launch *l, char *buf, size_t size) {
    snprintf(buf, size, "tensors [%d, %d) cooperative=%s workspace=%s %s", l->first,
             l->first + l->count, cc_coop_name(l->coop),
             l->ws == CC_WS_EXACT ? "caller(exact size)" : "NULL(library)",
             l->stream ? "own stream" : "default stream");
}

void cc_gpu_run(cc_rank *rk, const cc_launch *l) {
    const int a = l->first, n = l->count;
    char desc[160];
    cc_launch_describe(l, desc, sizeof desc);
    for (int i = a; i < a + n; i++) {
        if (rk->S > 0) {
            CU_CHECK(
                cudaMemsetAsync(rk->d_y[i], l->poison, rows_bytes(rk->S, rk->C[i]), l->stream));
            CU_CHECK(
                cudaMemsetAsync(rk->d_dx[i], l->poison, rows_bytes(rk->S, rk->C[i]), l->stream));
        }
        CU_CHECK(cudaMemsetAsync(rk->d_dw[i], l->poison, (size_t)rk->C[i] * 16, l->stream));
        if (rk->with_bias)
            CU_CHECK(cudaMemsetAsync(rk->d_dbias[i], l->poison, (size_t)rk->C[i] * 4, l->stream));
    }
    cake_conv_params fwd, bwd;
    cc_call_params(rk, a, &fwd, &bwd);
    size_t ws_bytes = 0;
    void *ws = NULL;
    if (l->ws == CC_WS_EXACT) {
        TU_OK(cake_cuda_backward_workspace_size(rk->dplan, n, rk->C + a, &bwd, &ws_bytes));
        ws = cu_alloc(ws_bytes); /* exactly that many bytes: memcheck sees any overrun */
    }
    cake_status st =
        cake_cuda_forward(rk->dplan, n, rk->C + a, CC_IN16(rk->d_x + a), CC_INF(rk->d_w + a), &fwd,
                          CC_IN16(rk->d_hist + a), rk->d_y + a, l->coop, l->stream);
    if (st != CAKE_SUCCESS) {
        tu_report("rank %d, %s: cake_cuda_forward -> %s: %s", rk->rank, desc,
                  cake_status_string(st), cake_last_error());
        fail_msg("cake_cuda_forward failed");
    }
    st = cake_cuda_backward(rk->dplan, n, rk->C + a, CC_IN16(rk->d_x + a), CC_INF(rk->d_w + a),
                            &bwd, CC_IN16(rk->d_hist + a), CC_IN16(rk->d_dy + a),
                            CC_IN16(rk->d_fut + a), rk->d_dx + a, rk->d_dw + a, l->coop, ws,
                            ws_bytes, l->stream);
    if (st != CAKE_SUCCESS) {
        tu_report("rank %d, %s: cake_cuda_backward -> %s: %s", rk->rank, desc,
                  cake_status_string(st), cake_last_error());
        fail_msg("cake_cuda_backward failed");
    }
    char what[200];
    snprintf(what, sizeof what, "rank %d, %s", rk->rank, desc);
    cu_sync(l->stream, what);
    cu_free(ws);
    cc_download_results(rk, a, n);
}

void cc_call_params(const cc_rank *rk, int first, cake_conv_params *fwd, cake_conv_params *bwd) {
    /* The forward gets the bias alone, the backward bias and dbias (dbias is backward-only). */
    const cake_conv_params f = {rk->activation, rk->with_bias ? CC_INF(rk->d_bias + first) : NULL,
                                NULL};
    const cake_conv_params b = {rk->activation, f.bias, rk->with_bias ? rk->d_dbias + first : NULL};
    *fwd = f;
    *bwd = b;
}

void cc_download_results(cc_rank *rk, int first, int count) {
    for (int i = first; i < first + count; i++) {
        if (rk->S > 0) {
            cu_download(rk->g_y[i], rk->d_y[i], rows_bytes(rk->S, rk->C[i]));
            cu_download(rk->g_dx[i], rk->d_dx[i], rows_bytes(rk->S, rk->C[i]));
        }
        cu_download(rk->g_dw[i], rk->d_dw[i], (size_t)rk->C[i] * 16);
        if (rk->with_bias)
            cu_download(rk->g_dbias[i], rk->d_dbias[i], (size_t)rk->C[i] * 4);
    }
}

/* ---- comparisons ----------------------------------------------------------------------------- */

/* Where local row t sits: its fragment, the 8-row forward item and the 256-row dw block. */
static void explain_row(const cc_rank *rk, int64_t t) {
    for (int64_t f = 0; f < rk->num_fragments; f++) {
        cake_fragment fr;
        if (cake_plan_fragment(rk->plan, f, &fr) != CAKE_SUCCESS)
            break;
        if (t >= fr.local_start && t < fr.local_start + fr.length) {
            fprintf(stderr,
                    "  local row %" PRId64 " (S_local %" PRId64 ", dw block %" PRId64
                    ", 8-row item %" PRId64 ") is row %" PRId64 " of fragment %" PRId64
                    " of %" PRId64 ": local [%" PRId64 ", %" PRId64 "), global start %" PRId64
                    ", sequence %" PRId64 " [%" PRId64 ", %" PRId64 ")\n",
                    t, rk->S, t / CAKE_DW_BLOCK_ROWS, t / 8, t - fr.local_start, f,
                    rk->num_fragments, fr.local_start, fr.local_start + fr.length, fr.global_start,
                    fr.seq_index, fr.seq_start, fr.seq_end);
            return;
        }
    }
    fprintf(stderr, "  local row %" PRId64 " is in no fragment of the plan\n", t);
}

static int g_printed; /* differing arrays reported so far */

int cc_printing(void) { return g_printed < CC_MAX_PRINTED; }

static void count_printed(int bad) {
    if (bad && ++g_printed == CC_MAX_PRINTED)
        fprintf(stderr, "[cake-test] %d differing arrays reported; further ones are only counted\n",
                CC_MAX_PRINTED);
}

int cc_diff16(const char *what, const cake_bf16 *got, const cake_bf16 *want, int64_t rows,
              int64_t cols) {
    const int64_t n = rows * cols;
    if (n == 0)
        return 0;
    if (cc_printing()) {
        int bad = tu_diff_bf16(what, got, want, rows, cols);
        count_printed(bad);
        return bad;
    }
    return memcmp(got, want, (size_t)n * sizeof *got) != 0;
}

int cc_diff32(const char *what, const float *got, const float *want, int64_t rows, int64_t cols) {
    const int64_t n = rows * cols;
    if (n == 0)
        return 0;
    if (cc_printing()) {
        int bad = tu_diff_f32(what, got, want, rows, cols);
        count_printed(bad);
        return bad;
    }
    return memcmp(got, want, (size_t)n * sizeof *got) != 0;
}

static int compare16(const char *what, const cc_rank *rk, const cake_bf16 *got,
                     const cake_bf16 *want, int64_t C) {
    const int printing = cc_printing();
    int bad = cc_diff16(what, got, want, rk->S, C);
    if (bad && printing) {
        for (int64_t k = 0; k < rk->S * C; k++)
            if (got[k] != want[k]) {
                explain_row(rk, k / C);
                break;
            }
    }
    return bad;
}

/* dw ([C, 4]) or dbias ([1, C]) */
static int compare_f32(const char *what, const cc_rank *rk, const float *got, const float *want,
                       int64_t rows, int64_t cols) {
    const int printing = cc_printing();
    int bad = cc_diff32(what, got, want, rows, cols);
    if (bad && printing) {
        int64_t nb = (rk->S + CAKE_DW_BLOCK_ROWS - 1) / CAKE_DW_BLOCK_ROWS, wrong = 0;
        for (int64_t k = 0; k < rows * cols; k++)
            wrong += memcmp(&got[k], &want[k], 4) != 0;
        fprintf(stderr,
                "  %" PRId64 " of %" PRId64 " values differ; S_local %" PRId64 " = %" PRId64
                " dw blocks, %" PRId64 " fragments\n",
                wrong, rows * cols, rk->S, nb, rk->num_fragments);
    }
    return bad;
}

static const char *variant_name(const cc_rank *rk) {
    return tu_variant_name[(rk->with_bias ? 1 : 0) |
                           (rk->activation == CAKE_ACTIVATION_SILU ? 2 : 0)];
}

int cc_compare_truth(const char *label, const cc_rank *rk, int first, int count) {
    int bad = 0;
    char what[320];
    const char *v = variant_name(rk);
    for (int i = first; i < first + count; i++) {
        const int64_t C = rk->C[i];
        snprintf(what, sizeof what,
                 "%s: GPU vs CPU y[%d] (%s, C=%" PRId64 ", rank %d, S_local %" PRId64 ")", label,
                 i, v, C, rk->rank, rk->S);
        bad += compare16(what, rk, rk->g_y[i], rk->y[i], C);
        snprintf(what, sizeof what,
                 "%s: GPU vs CPU dx[%d] (%s, C=%" PRId64 ", rank %d, S_local %" PRId64 ")", label,
                 i, v, C, rk->rank, rk->S);
        bad += compare16(what, rk, rk->g_dx[i], rk->dx[i], C);
        snprintf(what, sizeof what,
                 "%s: GPU vs CPU dw[%d] (%s, C=%" PRId64 ", rank %d, S_local %" PRId64
                 "; rows: channels, cols: taps)",
                 label, i, v, C, rk->rank, rk->S);
        bad += compare_f32(what, rk, rk->g_dw[i], rk->dw[i], C, 4);
        if (rk->with_bias) {
            snprintf(what, sizeof what,
                     "%s: GPU vs CPU dbias[%d] (%s, C=%" PRId64 ", rank %d, S_local %" PRId64 ")",
                     label, i, v, C, rk->rank, rk->S);
            bad += compare_f32(what, rk, rk->g_dbias[i], rk->dbias[i], 1, C);
        }
    }
    return bad;
}

int cc_check_canonical(const char *label, const cc_rank *rk) {
    int bad = 0;
    char what[240];
    for (int i = 0; i < rk->n; i++) {
        snprintf(what, sizeof what, "%s: GPU y[%d], rank %d", label, i, rk->rank);
        bad += tu_check_canonical_bf16(what, rk->g_y[i], rk->S, rk->C[i]);
        snprintf(what, sizeof what, "%s: GPU dx[%d], rank %d", label, i, rk->rank);
        bad += tu_check_canonical_bf16(what, rk->g_dx[i], rk->S, rk->C[i]);
        snprintf(what, sizeof what, "%s: GPU dw[%d], rank %d", label, i, rk->rank);
        bad += tu_check_canonical_f32(what, rk->g_dw[i], rk->C[i], 4);
        if (rk->with_bias) {
            snprintf(what, sizeof what, "%s: GPU dbias[%d], rank %d", label, i, rk->rank);
            bad += tu_check_canonical_f32(what, rk->g_dbias[i], 1, rk->C[i]);
        }
    }
    return bad;
}

int cc_coop_forms(cake_cooperative *forms) {
    int n = 0;
    forms[n++] = CAKE_COOPERATIVE_OFF;
    if (cake_cuda_cooperative_supported())
        forms[n++] = CAKE_COOPERATIVE_ON;
    forms[n++] = CAKE_COOPERATIVE_AUTO;
    return n;
}

int cc_check_all_forms(cc_rank *rk, const char *label, unsigned char poison,
                       cudaStream_t stream) {
    cake_cooperative forms[3];
    int nforms = cc_coop_forms(forms), bad = 0;
    for (int j = 0; j < nforms; j++) {
        cc_launch l = {0,      rk->n, forms[j], (cc_workspace)((j + rk->rank) % CC_WS_COUNT),
                       poison, stream};
        char desc[160], what[400];
        cc_launch_describe(&l, desc, sizeof desc);
        snprintf(what, sizeof what, "%s, %s", label, desc);
        cc_gpu_run(rk, &l);
        bad += cc_compare_truth(what, rk, 0, rk->n);
    }
    return bad;
}

int cc_compare_reference(const char *label, const cc_rank *rk, const tu_problem *view,
                         const tu_ref *ref, const int64_t *l2g) {
    int bad = 0;
    char what[320];
    for (int i = 0; i < rk->n; i++) {
        const int64_t C = rk->C[i], S = rk->S;
        cake_bf16 *want = tu_malloc(rows_bytes(S, C));
        float *dw = tu_malloc((size_t)C * 16), *dbias = tu_malloc((size_t)C * 4);
        tu_gather(ref->y[i], C, l2g, S, want);
        snprintf(what, sizeof what, "%s: GPU vs reference y[%d] (C=%" PRId64 ", rank %d)", label, i,
                 C, rk->rank);
        bad += compare16(what, rk, rk->g_y[i], want, C);
        tu_gather(ref->dx[i], C, l2g, S, want);
        snprintf(what, sizeof what, "%s: GPU vs reference dx[%d] (C=%" PRId64 ", rank %d)", label,
                 i, C, rk->rank);
        bad += compare16(what, rk, rk->g_dx[i], want, C);
        ref_grads_from_g(view->cu, view->num_seqs, C, view->x[i], ref->g[i], l2g, S, dw,
                         view->with_bias ? dbias : NULL);
        snprintf(what, sizeof what, "%s: GPU vs reference dw[%d] (C=%" PRId64 ", rank %d)", label,
                 i, C, rk->rank);
        bad += compare_f32(what, rk, rk->g_dw[i], dw, C, 4);
        if (view->with_bias) {
            snprintf(what, sizeof what, "%s: GPU vs reference dbias[%d] (C=%" PRId64 ", rank %d)",
                     label, i, C, rk->rank);
            bad += compare_f32(what, rk, rk->g_dbias[i], dbias, 1, C);
        }
        free(want);
        free(dw);
        free(dbias);
    }
    return bad;
}

int cc_check_partition(const cc_problem *pb, const tu_partition *tp, const char *label,
                       unsigned char poison, cudaStream_t stream) {
    int bad = 0;
    for (int k = 0; k < tp->P; k++) {
        cc_rank rk;
        cc_rank_init(&rk, pb, tp, k);
        bad += cc_check_all_forms(&rk, label, poison, stream);
        cc_rank_free(&rk);
    }
    return bad;
}
