/* Harness: the argument checks of every public entry point that takes tensors. Each input is a
 * short program of calls on one small problem: CPU kernels on one rank of a small partition, the
 * single-rank calls, and the context calls over one-rank contexts (whose transport must never
 * run), with random tensor and channel counts, NULL pointers anywhere, aliased outputs, bad
 * options and recompute handles, random params (SiLU, a bias and its dbias, an activation out of
 * range, bias without dbias and the reverse), plus key-store and context-creation calls. A spec oracle
 * decides which arguments are bad. Every buffer is its own exact-size heap block (ASan sees any
 * stray access) and every output starts as a sentinel: a failed call must name a bad argument
 * and leave every output, input and handle as it was; a successful one must match the test
 * reference bit for bit. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_args.h"
#include "fuzz_layout.h"
#include "reference.h"

enum { CAP_C = 64, MAX_OPS = 16 };
enum op { OP_CPU_FWD, OP_CPU_BWD, OP_SR_FWD, OP_SR_BWD, OP_FWD, OP_BWD, OP_FWD_MULTI,
          OP_BWD_MULTI, OP_TENSOR_COUNT, OP_HANDLE = OP_TENSOR_COUNT, OP_CTX_CREATE };
/* The arrays a call may take; HIN is history as an input, HOUT the CP forward's output; BIAS
 * and DBIAS are params->bias and params->dbias (taken when the call passes them). */
enum arr { A_X, A_W, A_HIN, A_DY, A_FUT, A_BIAS, A_Y, A_HOUT, A_DX, A_DW, A_DBIAS, A_COUNT };
static const char *const arr_name[A_COUNT] = {"x", "w", "history", "dy", "future",
                                              "params->bias", "y", "history", "dx", "dw",
                                              "params->dbias"};
static const int arr_output[A_COUNT] = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1};
static const unsigned op_arrays[OP_TENSOR_COUNT] = {
    [OP_CPU_FWD] = 1u << A_X | 1u << A_W | 1u << A_HIN | 1u << A_Y,
    [OP_CPU_BWD] = 1u << A_X | 1u << A_W | 1u << A_HIN | 1u << A_DY | 1u << A_FUT | 1u << A_DX | 1u << A_DW,
    [OP_SR_FWD] = 1u << A_X | 1u << A_W | 1u << A_Y,
    [OP_SR_BWD] = 1u << A_X | 1u << A_W | 1u << A_DY | 1u << A_DX | 1u << A_DW,
    [OP_FWD] = 1u << A_X | 1u << A_W | 1u << A_Y | 1u << A_HOUT,
    [OP_BWD] = 1u << A_X | 1u << A_W | 1u << A_HIN | 1u << A_DY | 1u << A_DX | 1u << A_DW,
    [OP_FWD_MULTI] = 1u << A_X | 1u << A_W | 1u << A_Y | 1u << A_HOUT,
    [OP_BWD_MULTI] = 1u << A_X | 1u << A_W | 1u << A_HIN | 1u << A_DY | 1u << A_DX | 1u << A_DW,
};

/* The rows a call works on and the model of them. */
typedef struct problem {
    int64_t cu[16], num_seqs, T;
    fz_layout layout;
    int rank;
    int64_t S, pool, nf, *l2g;
    cake_fragment *frags;
    cake_partition *part;
    cake_plan *plan;
} problem;

typedef struct world {
    uint64_t seed;
    problem cpu, ctx_pb[2]; /* cpu: one rank of a P <= 3 partition; ctx_pb: one-rank contexts */
    cake_ctx *ctx[2];
    handle_model handles[NUM_HANDLES];
} world;

/* One call's arguments and buffers. */
typedef struct call {
    int op, n, m;              /* n as passed; m = tensors with buffers */
    int64_t ch[SLOTS];
    const int64_t *channels;
    const problem *pb;
    int ctx_index, handle_index; /* handle_index -1: none */
    int64_t rows_known;        /* 0 when cu is invalid (single-rank): S unknown */
    int64_t S, pool;           /* rows the call claims: the problem's, or a mutated cu's */
    void *own[A_COUNT][SLOTS];  /* our buffers (exact size) */
    void *copy[A_COUNT][SLOTS]; /* inputs as made, to see they did not change */
    size_t bytes[A_COUNT][SLOTS];
    const void *pass[A_COUNT][SLOTS];
    size_t real[A_COUNT][SLOTS]; /* bytes that really lie behind pass[][] */
    int outer_null[A_COUNT];
    int null_plan, null_options;
    /* params: NULL (with_params 0), or an activation (maybe out of range) with a bias and a
     * dbias each passed or not (params->bias / params->dbias NULL when not) */
    int with_params, bias_on, dbias_on;
    int activation;
    cake_cpu_options opt;
    int64_t sr_cu[16], sr_num_seqs;
    int sr_cu_null;
    const char *names[64];     /* arguments a failure may name */
    int num_names, num_bad;    /* num_bad: definite violations (the call must fail) */
    unsigned allowed;
} call;

/* An argument a failure may name; bad(): one that makes the call fail. */
static void also(call *c, const char *n) {
    for (int i = 0; i < c->num_names; i++)
        if (strcmp(c->names[i], n) == 0) return;
    if (c->num_names < 64) c->names[c->num_names++] = n;
}

static void name(call *c, const char *n) {
    also(c, n);
    c->num_bad++;
}

/* ---- problems and data ---------------------------------------------------------------------- */

static void problem_init(problem *pb, const int64_t *cu, int64_t num_seqs, int P, int zigzag,
                         int rank) {
    memcpy(pb->cu, cu, sizeof(int64_t) * (size_t)(num_seqs + 1));
    pb->num_seqs = num_seqs;
    pb->T = cu[num_seqs];
    pb->rank = rank;
    if (zigzag) {
        fz_layout_zigzag(&pb->layout, pb->cu, num_seqs, P);
        FZ_CHECK(cake_partition_create_zigzag(pb->cu, num_seqs, P, &pb->part) == CAKE_SUCCESS,
                 "zigzag: %s", cake_last_error());
    } else {
        fz_layout_contiguous(&pb->layout, pb->cu, num_seqs, P);
        FZ_CHECK(cake_partition_create_contiguous(pb->cu, num_seqs, P, &pb->part) == CAKE_SUCCESS,
                 "contiguous: %s", cake_last_error());
    }
    FZ_CHECK(cake_plan_create(pb->part, rank, &pb->plan) == CAKE_SUCCESS, "plan: %s",
             cake_last_error());
    fz_check_plan(&pb->layout, pb->plan, rank);
    pb->S = pb->layout.local_rows[rank];
    pb->l2g = fz_l2g(&pb->layout, rank);
    pb->frags = fz_fragments(&pb->layout, rank, &pb->nf);
    pb->pool = CAKE_HALO_ROWS * pb->nf;
}

static void problem_free(problem *pb) {
    cake_plan_destroy(pb->plan);
    cake_partition_destroy(pb->part);
    fz_layout_free(&pb->layout);
    free(pb->l2g);
    free(pb->frags);
}

/* Global [T, C] rows of tensor `slot` (x: which 0, dy: which 1): the same values whatever the
 * call, so a recompute handle filled by one call holds what a later one would compute. */
static cake_bf16 *global_rows(const world *w, int which, int slot, int64_t C, int64_t T) {
    cake_bf16 *a = fz_malloc(sizeof(cake_bf16) * (size_t)(T * C));
    const uint64_t stream = fz_hash(w->seed, (uint64_t)(slot * 4 + which) << 32 | (uint64_t)C);
    for (int64_t k = 0; k < T * C; k++) a[k] = fz_bf16(stream, (uint64_t)k, 0);
    return a;
}

static float *weights(const world *w, int slot, int64_t C) {
    float *a = fz_malloc(sizeof(float) * (size_t)(4 * C));
    const uint64_t stream = fz_hash(w->seed, (uint64_t)(slot * 4 + 2) << 32 | (uint64_t)C);
    for (int64_t k = 0; k < 4 * C; k++) a[k] = fz_weight(stream, (uint64_t)k, 0);
    return a;
}

static float *bias_values(const world *w, int slot, int64_t C) {
    float *a = fz_malloc(sizeof(float) * (size_t)C);
    const uint64_t stream = fz_hash(w->seed, (uint64_t)(slot * 4 + 3) << 32 | (uint64_t)C);
    for (int64_t k = 0; k < C; k++) a[k] = fz_weight(stream, (uint64_t)k, 0);
    return a;
}

/* ---- building a call ------------------------------------------------------------------------ */

static int backward_op(int op) {
    return op == OP_CPU_BWD || op == OP_SR_BWD || op == OP_BWD || op == OP_BWD_MULTI;
}

/* The array is one the call passes: the op's, and the params' arrays when given (a forward
 * ignores dbias, so it takes none). */
static int uses(const call *c, int a) {
    if (a == A_BIAS) return c->with_params && c->bias_on;
    if (a == A_DBIAS) return c->with_params && c->dbias_on && backward_op(c->op);
    return (op_arrays[c->op] >> a) & 1u;
}

/* The call's activation is SiLU (and valid): the future pools carry x after dy. */
static int silu(const call *c) {
    return c->with_params && c->activation == CAKE_ACTIVATION_SILU;
}

static int valid_channels(int64_t C) { return C > 0 && C % 8 == 0; }

/* Rows of array a for tensor i: bytes the call may touch, as claimed by the arguments. */
static __int128 claimed_bytes(const call *c, int a, int i) {
    const __int128 C = c->ch[i];
    if (a == A_W || a == A_DW) return C * 16;
    if (a == A_BIAS || a == A_DBIAS) return C * 4;
    const __int128 rows = a == A_HIN || a == A_HOUT ? c->pool
                          : a == A_FUT              ? (__int128)c->pool * (silu(c) ? 2 : 1)
                                                    : c->S;
    return C * rows * 2;
}

static void *exact_copy(const void *src, size_t bytes) {
    void *p = malloc(bytes);
    if (bytes) memcpy(p, src, bytes);
    return p;
}

/* Exact-size buffers per (array, tensor): inputs from global data through the model, outputs
 * all sentinel. A tensor whose channel count is bad or too big gets the buffers of 8 channels
 * (the call must fail without touching them). */
static void make_buffers(const world *w, call *c) {
    const problem *pb = c->pb;
    for (int i = 0; i < c->m; i++) {
        const int64_t C = valid_channels(c->ch[i]) && c->ch[i] <= CAP_C ? c->ch[i] : 8;
        cake_bf16 *xg = global_rows(w, 0, i, C, pb->T), *dyg = global_rows(w, 1, i, C, pb->T);
        for (int a = 0; a < A_COUNT; a++) {
            if (!uses(c, a)) continue;
            const int64_t rows = a == A_HIN || a == A_HOUT ? pb->pool
                                 : a == A_FUT              ? pb->pool * (silu(c) ? 2 : 1)
                                                           : pb->S;
            const size_t bytes = (size_t)(a == A_W || a == A_DW       ? 16 * C
                                          : a == A_BIAS || a == A_DBIAS ? 4 * C
                                                                        : 2 * rows * C);
            c->bytes[a][i] = bytes;
            if (arr_output[a]) {
                c->own[a][i] = malloc(bytes);
                memset(c->own[a][i], FZ_SENTINEL, bytes);
                continue;
            }
            void *buf = malloc(bytes ? bytes : 1);
            if (a == A_W) {
                float *wt = weights(w, i, C);
                memcpy(buf, wt, bytes);
                free(wt);
            } else if (a == A_BIAS) {
                float *b = bias_values(w, i, C);
                memcpy(buf, b, bytes);
                free(b);
            } else if (a == A_X || a == A_DY) {
                const cake_bf16 *g = a == A_X ? xg : dyg;
                for (int64_t t = 0; t < pb->S; t++)
                    memcpy((cake_bf16 *)buf + t * C, g + pb->l2g[t] * C, sizeof(cake_bf16) * (size_t)C);
            } else {
                fz_pools(pb->frags, pb->nf, C, xg, dyg, a == A_HIN ? buf : NULL,
                         a == A_FUT ? buf : NULL);
                if (a == A_FUT && silu(c)) /* then x at the same rows (cake.h) */
                    fz_pools(pb->frags, pb->nf, C, NULL, xg, NULL,
                             (cake_bf16 *)buf + pb->pool * C);
            }
            c->own[a][i] = buf;
            c->copy[a][i] = exact_copy(buf, bytes);
        }
        free(xg);
        free(dyg);
    }
    for (int a = 0; a < A_COUNT; a++)
        for (int i = 0; i < c->m; i++) c->pass[a][i] = c->own[a][i], c->real[a][i] = c->bytes[a][i];
}

/* NULL arrays and elements, aliased outputs, bad options, bad cu_seqlens. */
static void mutate(fz_reader *r, call *c) {
    for (int k = fz_u8(r) % 4; k > 0; k--) {
        const uint8_t t = fz_u8(r);
        const int a = fz_u8(r) % A_COUNT, i = c->m ? fz_u8(r) % c->m : 0;
        switch (t % 8) {
        case 0: if (uses(c, a) && a != A_BIAS && a != A_DBIAS) c->outer_null[a] = 1; break;
        case 1: if (uses(c, a) && c->m) c->pass[a][i] = NULL; break;
        case 2: case 3: { /* an output aliases another array, at an offset inside it */
            const int src = fz_u8(r) % A_COUNT, j = c->m ? fz_u8(r) % c->m : 0;
            if (!uses(c, a) || !arr_output[a] || !uses(c, src) || !c->m || (src == a && j == i))
                break;
            /* The aliased output must still have room for what it may be asked to write. */
            const size_t len = c->bytes[src][j], need = c->bytes[a][i];
            if (len < need) break;
            const size_t off = len - need > 1 ? (fz_u8(r) % (len - need)) & ~(size_t)1 : 0;
            c->pass[a][i] = (const uint8_t *)c->own[src][j] + off;
            c->real[a][i] = len - off;
            break;
        }
        case 4: c->null_plan = 1; break;
        case 5: c->null_options = 1; break;
        case 6: { /* hostile options */
            static const int threads[] = {1, 2, 3, 0, -1, INT32_MIN, 1, 2};
            static const int isas[] = {0, 1, 2, 3, 4, 99, -1, 0};
            c->opt.num_threads = threads[fz_u8(r) % 8];
            c->opt.isa = (cake_cpu_isa)isas[fz_u8(r) % 8];
            break;
        }
        default: /* bad cu_seqlens for the single-rank calls */
            if (t & 8) c->sr_cu_null = 1;
            else if (t & 16) c->sr_num_seqs = (t & 32) ? -1 : INT64_MIN;
            else if (c->sr_num_seqs >= 0) c->sr_cu[fz_u8(r) % (c->sr_num_seqs + 1)] = fz_hostile_i64(r);
            break;
        }
    }
}

/* ---- the oracle ----------------------------------------------------------------------------- */

static void judge(const world *w, call *c) {
    const int single = c->op == OP_SR_FWD || c->op == OP_SR_BWD;
    const int ctx_op = c->op >= OP_FWD;
    c->allowed = 1u << CAKE_ERROR_INVALID_ARGUMENT;
    if (c->null_plan) name(c, ctx_op ? "ctx" : single ? "cu_seqlens" : "plan");
    if (single) {
        if (c->sr_num_seqs < 0) name(c, "num_seqs");
        else if (c->sr_cu_null || !fz_cu_valid(c->sr_cu, c->sr_num_seqs)) name(c, "cu_seqlens");
        c->rows_known = c->num_bad == 0;
        if (c->rows_known) { /* one rank: a fragment per non-empty sequence */
            c->S = c->sr_cu[c->sr_num_seqs];
            c->pool = 0;
            for (int64_t q = 0; q < c->sr_num_seqs; q++)
                c->pool += CAKE_HALO_ROWS * (c->sr_cu[q + 1] > c->sr_cu[q]);
        }
    } else {
        c->rows_known = 1;
    }
    if (c->n < 1) name(c, "num_tensors");
    if (!c->channels) name(c, "channels");
    for (int i = 0; i < c->m && c->channels; i++) {
        /* Arrays of more than INT64_MAX bytes cannot exist: x (S rows) makes the call bad;
         * near that edge (other arrays, 4- or 8-byte elements) failing is allowed too. */
        const __int128 C = c->ch[i], S = c->S, pool = 2 * (__int128)c->pool;
        if (!valid_channels(c->ch[i]) || (c->rows_known && C * S * 2 > INT64_MAX))
            name(c, "channels");
        else if (C * 16 > INT64_MAX || C * (S > pool ? S : pool) * 8 > INT64_MAX)
            also(c, "channels"); /* sizes checked for future pools of 2 * pool rows too */
    }
    if (c->with_params && (c->activation < 0 || c->activation >= CAKE_ACTIVATION_COUNT))
        name(c, "params->activation");
    if (c->with_params && backward_op(c->op) && c->bias_on != c->dbias_on)
        name(c, "params->dbias"); /* a backward with a bias writes dbias, and only then */
    if (c->n < 1 || !c->channels) goto options; /* the arrays have no defined length */
    for (int a = 0; a < A_COUNT; a++) {
        if (!uses(c, a)) continue;
        if (c->outer_null[a]) {
            name(c, arr_name[a]);
            continue;
        }
        for (int i = 0; i < c->m; i++)
            if (!c->pass[a][i] && (!c->rows_known || claimed_bytes(c, a, i) > 0))
                name(c, arr_name[a]);
    }
    for (int a = 0; a < A_COUNT; a++) /* no output may overlap any other array */
        for (int i = 0; i < c->m && uses(c, a) && arr_output[a] && !c->outer_null[a]; i++)
            for (int b = 0; b < A_COUNT; b++)
                for (int j = 0; j < c->m && uses(c, b) && !c->outer_null[b]; j++) {
                    if ((a == b && i == j) || !c->pass[a][i] || !c->pass[b][j]) continue;
                    /* A real overlap makes the call bad. Claimed sizes past our buffers (a huge
                     * channel count) may reach other heap blocks: failing is then allowed. */
                    const __int128 s0 = (intptr_t)c->pass[a][i], s1 = (intptr_t)c->pass[b][j];
                    const __int128 e0 = s0 + claimed_bytes(c, a, i), e1 = s1 + claimed_bytes(c, b, j);
                    const __int128 r0 = s0 + (e0 - s0 < c->real[a][i] ? e0 - s0 : c->real[a][i]);
                    const __int128 r1 = s1 + (e1 - s1 < c->real[b][j] ? e1 - s1 : c->real[b][j]);
                    if (r0 > s0 && r1 > s1 && s0 < r1 && s1 < r0) {
                        name(c, arr_name[a]);
                        if (arr_output[b]) name(c, arr_name[b]);
                    } else if (e0 > s0 && e1 > s1 && s0 < e1 && s1 < e0) {
                        also(c, arr_name[a]);
                        if (arr_output[b]) also(c, arr_name[b]);
                    }
                }
options:
    if (!ctx_op && !c->null_options) {
        if (c->opt.num_threads < 0) name(c, "options->num_threads");
        if (c->opt.isa < 0 || c->opt.isa >= CAKE_CPU_ISA_COUNT) {
            name(c, "options->isa");
        } else if (!cake_cpu_isa_supported(c->opt.isa)) {
            name(c, "options->isa");
            c->allowed |= 1u << CAKE_ERROR_UNSUPPORTED;
        }
    }
    /* A filled "conv" entry serves only the same kind of call through the same context. */
    if (c->handle_index >= 0 && (c->op == OP_FWD || c->op == OP_FWD_MULTI) && c->n >= 1) {
        const handle_model *h = &w->handles[c->handle_index];
        int same = h->conv_multi == (c->op == OP_FWD_MULTI) && h->conv_n == c->n &&
                   h->conv_ctx == c->ctx_index;
        for (int i = 0; same && i < c->m && c->channels; i++) same = h->conv_channels[i] == c->ch[i];
        if (h->conv && !same) name(c, "recompute_handle");
    }
}

/* ---- running and checking ------------------------------------------------------------------- */

#define ARR(a, T) ((T *const *)(c->outer_null[a] ? NULL : (const void *const *)c->pass[a]))

static cake_status invoke(world *w, call *c) {
    const cake_cpu_options *opt = c->null_options ? NULL : &c->opt;
    const int64_t *cu = c->sr_cu_null || c->null_plan ? NULL : c->sr_cu;
    cake_ctx *ctx = c->null_plan ? NULL : w->ctx[c->ctx_index];
    cake_recompute_handle *h = c->handle_index >= 0 ? w->handles[c->handle_index].h : NULL;
    const cake_plan *plan = c->null_plan ? NULL : c->pb->plan;
    /* A forward given dbias ignores it: pass an array of NULL entries then. */
    static float *const no_dbias[SLOTS] = {NULL};
    const cake_conv_params par = {
        (cake_activation)c->activation,
        c->bias_on ? (const float *const *)c->pass[A_BIAS] : NULL,
        !c->dbias_on ? NULL : backward_op(c->op) ? (float *const *)c->pass[A_DBIAS] : no_dbias};
    const cake_conv_params *p = c->with_params ? &par : NULL;
    switch (c->op) {
    case OP_CPU_FWD:
        return cake_cpu_forward(plan, c->n, c->channels, ARR(A_X, const cake_bf16),
                                ARR(A_W, const float), p, ARR(A_HIN, const cake_bf16),
                                ARR(A_Y, cake_bf16), opt);
    case OP_CPU_BWD:
        return cake_cpu_backward(plan, c->n, c->channels, ARR(A_X, const cake_bf16),
                                 ARR(A_W, const float), p, ARR(A_HIN, const cake_bf16),
                                 ARR(A_DY, const cake_bf16), ARR(A_FUT, const cake_bf16),
                                 ARR(A_DX, cake_bf16), ARR(A_DW, float), opt);
    case OP_SR_FWD:
        return cake_cpu_forward_single_rank(cu, c->sr_num_seqs, c->n, c->channels,
                                            ARR(A_X, const cake_bf16), ARR(A_W, const float), p,
                                            ARR(A_Y, cake_bf16), opt);
    case OP_SR_BWD:
        return cake_cpu_backward_single_rank(cu, c->sr_num_seqs, c->n, c->channels,
                                             ARR(A_X, const cake_bf16), ARR(A_W, const float), p,
                                             ARR(A_DY, const cake_bf16), ARR(A_DX, cake_bf16),
                                             ARR(A_DW, float), opt);
    case OP_FWD:
        return cake_forward(ctx, c->ch[0], (const cake_bf16 *)c->pass[A_X][0],
                            (const float *)c->pass[A_W][0], p, (cake_bf16 *)c->pass[A_Y][0],
                            (cake_bf16 *)c->pass[A_HOUT][0], h);
    case OP_BWD:
        return cake_backward(ctx, c->ch[0], (const cake_bf16 *)c->pass[A_X][0],
                             (const float *)c->pass[A_W][0], p,
                             (const cake_bf16 *)c->pass[A_HIN][0],
                             (const cake_bf16 *)c->pass[A_DY][0], (cake_bf16 *)c->pass[A_DX][0],
                             (float *)c->pass[A_DW][0]);
    case OP_FWD_MULTI:
        return cake_forward_multi(ctx, c->n, c->channels, ARR(A_X, const cake_bf16),
                                  ARR(A_W, const float), p, ARR(A_Y, cake_bf16),
                                  ARR(A_HOUT, cake_bf16), h);
    default:
        return cake_backward_multi(ctx, c->n, c->channels, ARR(A_X, const cake_bf16),
                                   ARR(A_W, const float), p, ARR(A_HIN, const cake_bf16),
                                   ARR(A_DY, const cake_bf16), ARR(A_DX, cake_bf16),
                                   ARR(A_DW, float));
    }
}

static void check_inputs_kept(const call *c, const char *what) {
    for (int a = 0; a < A_COUNT; a++)
        for (int i = 0; i < c->m; i++)
            if (c->copy[a][i])
                FZ_CHECK(memcmp(c->own[a][i], c->copy[a][i], c->bytes[a][i]) == 0,
                         "%s: input %s[%d] changed", what, arr_name[a], i);
}

/* Outputs against the reference over the problem's global rows, with the call's bias and
 * activation (tests/reference.h). */
static void check_results(const world *w, const call *c, const char *what) {
    const problem *pb = c->pb;
    for (int i = 0; i < c->m; i++) {
        const int64_t C = c->ch[i], T = pb->T, S = pb->S;
        cake_bf16 *xg = global_rows(w, 0, i, C, T), *dyg = global_rows(w, 1, i, C, T);
        float *wt = weights(w, i, C), *bias = uses(c, A_BIAS) ? bias_values(w, i, C) : NULL;
        const ref_params rp = {bias, silu(c) ? REF_ACT_SILU : REF_ACT_NONE};
        cake_bf16 *ref = fz_malloc(sizeof(cake_bf16) * (size_t)(T * C));
        cake_bf16 *want = fz_malloc(sizeof(cake_bf16) * (size_t)((S > pb->pool ? S : pb->pool) * C));
        float dw[4 * CAP_C], dbias[CAP_C];
        int grads = 0;
        int64_t at = -1;
        for (int a = A_Y; a < A_COUNT; a++) {
            if (!uses(c, a) || c->pass[a][i] != c->own[a][i]) continue; /* aliased, empty */
            if (a == A_DW || a == A_DBIAS) {
                if (!grads++)
                    ref_grads_p(pb->cu, pb->num_seqs, C, xg, wt, &rp, dyg, pb->l2g, S, dw,
                                uses(c, A_DBIAS) ? dbias : NULL);
                FZ_CHECK(fz_same_f32(c->own[a][i], a == A_DW ? dw : dbias,
                                     a == A_DW ? 4 * C : C, &at),
                         "%s: %s[%d] differs from the reference at %" PRId64, what, arr_name[a],
                         i, at);
                continue;
            }
            if (a == A_HOUT) {
                fz_pools(pb->frags, pb->nf, C, xg, NULL, want, NULL);
            } else {
                if (a == A_Y) ref_forward_p(pb->cu, pb->num_seqs, C, xg, wt, &rp, ref);
                else ref_backward_dx_p(pb->cu, pb->num_seqs, C, xg, wt, &rp, dyg, ref);
                for (int64_t t = 0; t < S; t++)
                    memcpy(want + t * C, ref + pb->l2g[t] * C, sizeof(cake_bf16) * (size_t)C);
            }
            FZ_CHECK(fz_same_bf16(c->own[a][i], want, (int64_t)c->bytes[a][i] / 2, &at),
                     "%s: %s[%d] differs from the reference at element %" PRId64, what,
                     arr_name[a], i, at);
        }
        free(xg);
        free(dyg);
        free(wt);
        free(bias);
        free(ref);
        free(want);
    }
}

static void free_call(call *c) {
    for (int a = 0; a < A_COUNT; a++)
        for (int i = 0; i < SLOTS; i++) {
            free(c->own[a][i]);
            free(c->copy[a][i]);
        }
}

static void print_call(const call *c, const char *what) {
    fprintf(stderr, "%s: n %d, channels%s", what, c->n, c->channels ? "" : " NULL");
    for (int i = 0; i < c->m; i++) fprintf(stderr, " %" PRId64, c->ch[i]);
    fprintf(stderr, ", S %" PRId64 ", pool %" PRId64 ", T %" PRId64 "%s%s, options {%d, %d}%s",
            c->S, c->pool, c->pb->T, c->null_plan ? ", plan/ctx/cu NULL" : "",
            c->op >= OP_FWD ? (c->ctx_index ? ", ctx 1" : ", ctx 0") : "", c->opt.num_threads,
            (int)c->opt.isa, c->null_options ? " (NULL)" : "");
    if (c->op == OP_SR_FWD || c->op == OP_SR_BWD) {
        fprintf(stderr, ", num_seqs %" PRId64 "%s, cu", c->sr_num_seqs, c->sr_cu_null ? " (cu NULL)" : "");
        for (int64_t i = 0; i <= c->sr_num_seqs && i < 16; i++) fprintf(stderr, " %" PRId64, c->sr_cu[i]);
    }
    for (int a = 0; a < A_COUNT; a++) {
        if (!uses(c, a)) continue;
        if (c->outer_null[a]) fprintf(stderr, ", %s NULL", arr_name[a]);
        for (int i = 0; i < c->m && !c->outer_null[a]; i++)
            if (c->pass[a][i] != c->own[a][i])
                fprintf(stderr, ", %s[%d] %s", arr_name[a], i, c->pass[a][i] ? "aliased" : "NULL");
    }
    if (c->with_params)
        fprintf(stderr, ", params {activation %d, bias %s, dbias %s}", c->activation,
                c->bias_on ? "given" : "NULL", c->dbias_on ? "given" : "NULL");
    fprintf(stderr, "\n  expected: %s", c->num_bad ? "failure naming" : "success");
    for (int k = 0; k < c->num_names; k++) fprintf(stderr, " %s", c->names[k]);
    fputc('\n', stderr);
}

static void tensor_op(fz_reader *r, world *w, int op) {
    static const char *const op_name[] = {
        "cake_cpu_forward", "cake_cpu_backward", "cake_cpu_forward_single_rank",
        "cake_cpu_backward_single_rank", "cake_forward", "cake_backward", "cake_forward_multi",
        "cake_backward_multi"};
    call *c = calloc(1, sizeof *c);
    c->op = op;
    const uint8_t nb = fz_u8(r);
    static const int odd_counts[] = {0, -1, INT32_MIN, 0};
    c->n = op == OP_FWD || op == OP_BWD ? 1 : nb < 200 ? 1 + nb % 4 : nb < 236 ? 5 + nb % 4
                                                                              : odd_counts[nb % 4];
    c->m = c->n < 0 ? 0 : c->n;
    for (int i = 0; i < c->m; i++) {
        const uint8_t b = fz_u8(r);
        c->ch[i] = b < 224 ? 8 * (1 + b % 8) : fz_hostile_i64(r);
    }
    c->channels = (fz_u8(r) % 16 == 0 && op != OP_FWD && op != OP_BWD) ? NULL : c->ch;
    c->ctx_index = op >= OP_FWD ? fz_u8(r) % 2 : 0;
    c->handle_index = op == OP_FWD || op == OP_FWD_MULTI ? (int)(fz_u8(r) % 3) - 1 : -1;
    c->pb = op >= OP_FWD ? &w->ctx_pb[c->ctx_index] : op >= OP_SR_FWD ? &w->ctx_pb[0] : &w->cpu;
    memcpy(c->sr_cu, c->pb->cu, sizeof c->sr_cu);
    c->sr_num_seqs = c->pb->num_seqs;
    c->S = c->pb->S;
    c->pool = c->pb->pool;
    static const cake_cpu_isa isas[] = {CAKE_CPU_ISA_AUTO, CAKE_CPU_ISA_GENERIC, CAKE_CPU_ISA_AVX2,
                                        CAKE_CPU_ISA_AVX512};
    const uint8_t ob = fz_u8(r);
    c->opt = (cake_cpu_options){1 + ob % 3, isas[(ob >> 2) % 4]};
    if (!cake_cpu_isa_supported(c->opt.isa)) c->opt.isa = CAKE_CPU_ISA_AUTO;
    /* params: byte 0 (an exhausted input) passes NULL; else a bias (bit 2), dbias with it but
     * one time in eight the other way, and an activation: none, SiLU or a hostile value. */
    const uint8_t pb = fz_u8(r);
    c->with_params = pb % 4 != 0;
    if (c->with_params) {
        const uint8_t q = fz_u8(r);
        c->activation = q < 224 ? q % 2 : fz_hostile_int(r);
        c->bias_on = (pb >> 2) & 1;
        c->dbias_on = c->bias_on ^ ((pb >> 3) % 8 == 0);
    }
    make_buffers(w, c);
    mutate(r, c);
    if (op == OP_FWD || op == OP_BWD) { /* scalars and plain pointers: no array to be NULL */
        c->channels = c->ch;
        for (int a = 0; a < A_COUNT; a++)
            if (c->outer_null[a]) c->pass[a][0] = NULL, c->outer_null[a] = 0;
    }
    judge(w, c);
    /* A valid call is made only where the buffers hold what the arguments claim (a bad call
     * must stop before it touches rows, whatever it claims). A mutated cu_seqlens that is still
     * valid describes another problem than the buffers': not made either. */
    int skip = 0;
    for (int i = 0; i < c->m && c->num_bad == 0; i++) skip |= c->ch[i] > CAP_C;
    if ((op == OP_SR_FWD || op == OP_SR_BWD) && !c->sr_cu_null && !c->null_plan &&
        fz_cu_valid(c->sr_cu, c->sr_num_seqs))
        skip |= c->sr_num_seqs != c->pb->num_seqs ||
                memcmp(c->sr_cu, c->pb->cu, sizeof(int64_t) * (size_t)(c->sr_num_seqs + 1)) != 0;
    if (skip) {
        free_call(c);
        free(c);
        return;
    }
    handle_model *hm = c->handle_index >= 0 ? &w->handles[c->handle_index] : NULL;
    const char *what = op_name[op];
    if (fz_verbose()) print_call(c, what);
    const cake_status st = invoke(w, c);
    if (fz_verbose()) fprintf(stderr, "  -> %s: %s\n", cake_status_string(st), cake_last_error());
    check_inputs_kept(c, what);
    if (c->num_bad > 0) {
        for (int k = 0; k < c->num_names; k++) fz_count("%s: bad %s", what, c->names[k]);
        fz_expect_failure(what, st, c->allowed, c->names, c->num_names);
        for (int a = 0; a < A_COUNT; a++)
            for (int i = 0; i < c->m; i++)
                if (arr_output[a] && c->own[a][i])
                    FZ_CHECK(fz_untouched(c->own[a][i], c->bytes[a][i]),
                             "%s failed (%s) but wrote %s[%d]", what, cake_last_error(),
                             arr_name[a], i);
    } else {
        FZ_CHECK(st == CAKE_SUCCESS, "%s: valid call failed: %s", what, cake_last_error());
        fz_count("%s: valid%s%s%s", what, c->handle_index >= 0 ? " with a recompute handle" : "",
                 silu(c) ? ", SiLU" : "", uses(c, A_BIAS) ? ", bias" : "");
        check_results(w, c, what);
        if (hm && !hm->conv) { /* the first forward with a handle fills "conv" */
            hm->conv = 1;
            hm->conv_multi = op == OP_FWD_MULTI;
            hm->conv_n = c->n;
            hm->conv_ctx = c->ctx_index;
            memcpy(hm->conv_channels, c->ch, sizeof c->ch);
        }
    }
    if (hm) fz_check_handle(hm);
    free_call(c);
    free(c);
}

static void world_init(fz_reader *r, world *w) {
    int64_t cu[16] = {0};
    const int64_t num_seqs = fz_u8(r) % 7;
    for (int64_t i = 1; i <= num_seqs; i++) cu[i] = cu[i - 1] + fz_u8(r) % 9;
    const uint8_t p = fz_u8(r);
    const int P = 1 + p % 3;
    problem_init(&w->cpu, cu, num_seqs, P, (p >> 2) & 1, (p >> 3) % P);
    problem_init(&w->ctx_pb[0], cu, num_seqs, 1, 0, 0);
    cu[num_seqs + 1] = cu[num_seqs] + 1; /* one more row: another T, so another context */
    problem_init(&w->ctx_pb[1], cu, num_seqs + 1, 1, 0, 0);
    for (int k = 0; k < 2; k++) {
        const uint8_t o = fz_u8(r);
        const cake_transport t = {fz_exchange_never, fz_release, NULL, NULL};
        cake_ctx_options opt = {.check = o & 1, .cpu = {1 + (o >> 1) % 2, CAKE_CPU_ISA_AUTO}};
        FZ_CHECK(cake_ctx_create(w->ctx_pb[k].part, 0, &t, &opt, &w->ctx[k]) == CAKE_SUCCESS,
                 "ctx: %s", cake_last_error());
    }
    for (int k = 0; k < NUM_HANDLES; k++)
        FZ_CHECK(cake_recompute_handle_create(&w->handles[k].h) == CAKE_SUCCESS, "handle");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_reader r = {data, size, 0};
    world *w = calloc(1, sizeof *w);
    w->seed = fz_u64(&r);
    world_init(&r, w);
    for (int k = 0; k < MAX_OPS && fz_left(&r); k++) {
        const int op = fz_u8(&r) % (OP_CTX_CREATE + 1);
        if (op < OP_TENSOR_COUNT) tensor_op(&r, w, op);
        else if (op == OP_HANDLE) fz_handle_op(&r, w->handles);
        else fz_ctx_create_op(&r, w->ctx_pb[0].part);
    }
    const int releases = fz_releases;
    for (int k = 0; k < 2; k++) cake_ctx_destroy(w->ctx[k]);
    FZ_CHECK(fz_releases == releases + 2, "cake_ctx_destroy: transport released %d times for 2",
             fz_releases - releases);
    for (int k = 0; k < NUM_HANDLES; k++) cake_recompute_handle_destroy(w->handles[k].h);
    problem_free(&w->cpu);
    for (int k = 0; k < 2; k++) problem_free(&w->ctx_pb[k]);
    free(w);
    return 0;
}
