/* Bad input to the CPU functions (SPEC 5): every checkable precondition gives
 * CAKE_ERROR_INVALID_ARGUMENT, a message naming the argument (and the bad value where there is
 * one), and no write to any output (outputs hold a sentinel before the call; inputs are compared
 * with copies, since an aliased output would write through them). The per-call params (bias,
 * dbias, activation) are broken the same ways. Partition and plan constructor errors are in
 * test_partition. */
#include "test_util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NT = 2, CAP_C = 32 }; /* buffers hold CAP_C channels, so a wrong channel count stays inside */
static const int64_t CU[] = {0, 7, 7, 20, 21};
#define NSEQ 4
#define TROWS 21

/* Valid inputs for rank 0 of a two-rank partition (3 fragments, so the pools are non-empty), and
 * for the single-rank calls. */
typedef struct fixture {
    cake_partition *part;
    cake_plan *plan;
    int64_t S, pool, rows; /* rows: buffer rows, enough for both uses */
    cake_bf16 *x[NT], *dy[NT], *hist[NT], *fut[NT], *y[NT], *dx[NT];
    float *w[NT], *dw[NT], *bias[NT], *dbias[NT];
    cake_bf16 *in_copy[4][NT]; /* x, dy, hist, fut */
    float *w_copy[NT], *bias_copy[NT];
} fixture;

static size_t bf_bytes(const fixture *f) {
    return (size_t)(f->rows * CAP_C) * sizeof(cake_bf16);
}

static fixture *fixture_new(void) {
    fixture *f = tu_malloc(sizeof *f);
    memset(f, 0, sizeof *f);
    const int64_t counts[] = {2, 1};
    const cake_range ranges[] = {{0, 5}, {12, 21}, {5, 12}};
    TU_OK(cake_partition_create_ranges(CU, NSEQ, 2, counts, ranges, &f->part));
    TU_OK(cake_plan_create(f->part, 0, &f->plan));
    f->S = cake_plan_local_rows(f->plan);
    f->pool = cake_plan_pool_rows(f->plan);
    assert_int_equal(f->S, 14);
    assert_true(f->pool > 0);
    f->rows = TROWS > 2 * f->pool ? TROWS : 2 * f->pool; /* future pools carry x with SiLU */
    tu_rng r;
    tu_rng_init(&r, 501);
    for (int i = 0; i < NT; i++) {
        cake_bf16 **bufs[] = {&f->x[i], &f->dy[i], &f->hist[i], &f->fut[i], &f->y[i], &f->dx[i]};
        for (int b = 0; b < 6; b++) {
            *bufs[b] = tu_malloc(bf_bytes(f));
            tu_fill_bf16(&r, TU_MODERATE, *bufs[b], f->rows * CAP_C);
        }
        f->w[i] = tu_malloc(CAP_C * 4 * sizeof(float));
        f->dw[i] = tu_malloc(CAP_C * 4 * sizeof(float));
        tu_fill_weights(&r, TU_MODERATE, f->w[i], CAP_C * 4);
        for (int b = 0; b < 4; b++) {
            f->in_copy[b][i] = tu_malloc(bf_bytes(f));
            memcpy(f->in_copy[b][i], *bufs[b], bf_bytes(f));
        }
        f->w_copy[i] = tu_malloc(CAP_C * 4 * sizeof(float));
        memcpy(f->w_copy[i], f->w[i], CAP_C * 4 * sizeof(float));
        f->bias[i] = tu_malloc(CAP_C * sizeof(float));
        f->dbias[i] = tu_malloc(CAP_C * sizeof(float));
        tu_fill_weights(&r, TU_MODERATE, f->bias[i], CAP_C);
        f->bias_copy[i] = tu_malloc(CAP_C * sizeof(float));
        memcpy(f->bias_copy[i], f->bias[i], CAP_C * sizeof(float));
    }
    return f;
}

static void fixture_free(fixture *f) {
    for (int i = 0; i < NT; i++) {
        free(f->x[i]);
        free(f->dy[i]);
        free(f->hist[i]);
        free(f->fut[i]);
        free(f->y[i]);
        free(f->dx[i]);
        free(f->w[i]);
        free(f->dw[i]);
        free(f->bias[i]);
        free(f->dbias[i]);
        for (int b = 0; b < 4; b++)
            free(f->in_copy[b][i]);
        free(f->w_copy[i]);
        free(f->bias_copy[i]);
    }
    cake_plan_destroy(f->plan);
    cake_partition_destroy(f->part);
    free(f);
}

static void fill_outputs(fixture *f) {
    for (int i = 0; i < NT; i++) {
        memset(f->y[i], 0xa5, bf_bytes(f));
        memset(f->dx[i], 0xa5, bf_bytes(f));
        memset(f->dw[i], 0xa5, CAP_C * 4 * sizeof(float));
        memset(f->dbias[i], 0xa5, CAP_C * sizeof(float));
    }
}

/* Outputs still hold the sentinel, inputs are unchanged. */
static void check_untouched(const fixture *f, const char *what) {
    for (int i = 0; i < NT; i++) {
        const uint8_t *bufs[] = {(const uint8_t *)f->y[i], (const uint8_t *)f->dx[i]};
        for (int b = 0; b < 2; b++)
            for (size_t k = 0; k < bf_bytes(f); k++)
                TU_CHECK(bufs[b][k] == 0xa5, "%s: %s[%d] was written (byte %zu)", what,
                         b ? "dx" : "y", i, k);
        const uint8_t *dw = (const uint8_t *)f->dw[i];
        for (size_t k = 0; k < CAP_C * 4 * sizeof(float); k++)
            TU_CHECK(dw[k] == 0xa5, "%s: dw[%d] was written (byte %zu)", what, i, k);
        const uint8_t *dbias = (const uint8_t *)f->dbias[i];
        for (size_t k = 0; k < CAP_C * sizeof(float); k++)
            TU_CHECK(dbias[k] == 0xa5, "%s: params->dbias[%d] was written (byte %zu)", what, i, k);
        TU_CHECK(memcmp(f->bias[i], f->bias_copy[i], CAP_C * sizeof(float)) == 0,
                 "%s: input params->bias[%d] changed", what, i);
        const cake_bf16 *ins[] = {f->x[i], f->dy[i], f->hist[i], f->fut[i]};
        static const char *const names[] = {"x", "dy", "history", "future"};
        for (int b = 0; b < 4; b++)
            TU_CHECK(memcmp(ins[b], f->in_copy[b][i], bf_bytes(f)) == 0, "%s: input %s[%d] changed",
                     what, names[b], i);
        TU_CHECK(memcmp(f->w[i], f->w_copy[i], CAP_C * 4 * sizeof(float)) == 0,
                 "%s: input w[%d] changed", what, i);
    }
}

/* The arguments of one call, valid until a case breaks one of them. */
typedef struct call {
    const cake_plan *plan;
    const int64_t *cu;
    int64_t num_seqs;
    int n;
    int64_t ch[NT];
    const int64_t *channels;
    const cake_bf16 *xa[NT], *ha[NT], *dya[NT], *fa[NT];
    const float *wa[NT];
    cake_bf16 *ya[NT], *dxa[NT];
    float *dwa[NT];
    const cake_bf16 **x, **history, **dy, **future;
    const float **w;
    cake_bf16 **y, **dx;
    float **dw;
    cake_cpu_options opt;
    const cake_cpu_options *options;
    const float *biasa[NT];
    float *dbiasa[NT];
    cake_conv_params par;
    const cake_conv_params *params; /* NULL, or &par: SiLU with bias and dbias */
} call;

static void call_init(call *c, const fixture *f) {
    memset(c, 0, sizeof *c);
    c->plan = f->plan;
    c->cu = CU;
    c->num_seqs = NSEQ;
    c->n = NT;
    c->ch[0] = 16;
    c->ch[1] = 8;
    c->channels = c->ch;
    for (int i = 0; i < NT; i++) {
        c->xa[i] = f->x[i];
        c->ha[i] = f->hist[i];
        c->dya[i] = f->dy[i];
        c->fa[i] = f->fut[i];
        c->wa[i] = f->w[i];
        c->ya[i] = f->y[i];
        c->dxa[i] = f->dx[i];
        c->dwa[i] = f->dw[i];
    }
    c->x = c->xa;
    c->history = c->ha;
    c->dy = c->dya;
    c->future = c->fa;
    c->w = c->wa;
    c->y = c->ya;
    c->dx = c->dxa;
    c->dw = c->dwa;
    c->opt = (cake_cpu_options){2, CAKE_CPU_ISA_AUTO};
    c->options = &c->opt;
    for (int i = 0; i < NT; i++) {
        c->biasa[i] = f->bias[i];
        c->dbiasa[i] = f->dbias[i];
    }
    c->par = (cake_conv_params){CAKE_ACTIVATION_SILU, c->biasa, c->dbiasa};
    c->params = NULL;
}

enum { FWD = 1, BWD = 2, SFWD = 4, SBWD = 8, PLANNED = FWD | BWD, SINGLE = SFWD | SBWD, ALL = 15 };

static cake_status invoke(const call *c, int which) {
    switch (which) {
    case FWD:
        return cake_cpu_forward(c->plan, c->n, c->channels, c->x, c->w, c->params, c->history,
                                c->y, c->options);
    case BWD:
        return cake_cpu_backward(c->plan, c->n, c->channels, c->x, c->w, c->params, c->history,
                                 c->dy, c->future, c->dx, c->dw, c->options);
    case SFWD:
        return cake_cpu_forward_single_rank(c->cu, c->num_seqs, c->n, c->channels, c->x, c->w,
                                            c->params, c->y, c->options);
    default:
        return cake_cpu_backward_single_rank(c->cu, c->num_seqs, c->n, c->channels, c->x, c->w,
                                             c->params, c->dy, c->dx, c->dw, c->options);
    }
}

static const char *const call_name[] = {"", "cake_cpu_forward", "cake_cpu_backward", "",
                                        "cake_cpu_forward_single_rank", "", "", "",
                                        "cake_cpu_backward_single_rank"};

typedef enum mut {
    M_PLAN_NULL, M_NT_ZERO, M_NT_NEG, M_CH_NULL, M_CH_12, M_CH_ZERO, M_CH_NEG, M_CH_4,
    M_X_NULL, M_X1_NULL, M_W_NULL, M_W0_NULL, M_H_NULL, M_H1_NULL, M_Y_NULL, M_Y0_NULL,
    M_DY_NULL, M_DY0_NULL, M_F_NULL, M_F1_NULL, M_DX_NULL, M_DX1_NULL, M_DW_NULL, M_DW0_NULL,
    M_Y_IS_X, M_Y_IN_X, M_Y_IS_HIST, M_DX_IS_DY, M_DX_IN_X, M_DW_IS_W,
    M_ISA_99, M_ISA_COUNT, M_THREADS_NEG,
    M_CU_NULL, M_NSEQ_NEG, M_CU_FIRST, M_CU_DECREASE,
    /* params (the call passes SiLU with bias and dbias, then one of them is broken) */
    M_ACT_NEG, M_ACT_COUNT, M_ACT_99, M_BIAS0_NULL, M_BIAS1_NULL, M_DBIAS_NULL, M_DBIAS1_NULL,
    M_DBIAS_NO_BIAS, M_Y_IS_BIAS, M_DX_IN_BIAS, M_DBIAS_IS_W, M_DBIAS_IS_DW, M_DBIAS_IN_DX,
    M_DBIAS_IS_BIAS, M_DBIAS_IS_DBIAS,
} mut;

static const int64_t CU_FIRST[] = {2, 7, 7, 20, 21}, CU_DECREASE[] = {0, 7, 5, 20, 21};

static void mutate(call *c, mut m) {
    switch (m) {
    case M_PLAN_NULL: c->plan = NULL; break;
    case M_NT_ZERO: c->n = 0; break;
    case M_NT_NEG: c->n = -3; break;
    case M_CH_NULL: c->channels = NULL; break;
    case M_CH_12: c->ch[1] = 12; break;
    case M_CH_ZERO: c->ch[1] = 0; break;
    case M_CH_NEG: c->ch[0] = -8; break;
    case M_CH_4: c->ch[0] = 4; break;
    case M_X_NULL: c->x = NULL; break;
    case M_X1_NULL: c->xa[1] = NULL; break;
    case M_W_NULL: c->w = NULL; break;
    case M_W0_NULL: c->wa[0] = NULL; break;
    case M_H_NULL: c->history = NULL; break;
    case M_H1_NULL: c->ha[1] = NULL; break;
    case M_Y_NULL: c->y = NULL; break;
    case M_Y0_NULL: c->ya[0] = NULL; break;
    case M_DY_NULL: c->dy = NULL; break;
    case M_DY0_NULL: c->dya[0] = NULL; break;
    case M_F_NULL: c->future = NULL; break;
    case M_F1_NULL: c->fa[1] = NULL; break;
    case M_DX_NULL: c->dx = NULL; break;
    case M_DX1_NULL: c->dxa[1] = NULL; break;
    case M_DW_NULL: c->dw = NULL; break;
    case M_DW0_NULL: c->dwa[0] = NULL; break;
    /* aliasing: the output is (part of) an input buffer */
    case M_Y_IS_X: c->ya[0] = (cake_bf16 *)c->xa[0]; break;
    case M_Y_IN_X: c->ya[1] = (cake_bf16 *)c->xa[1] + 3 * c->ch[1]; break;
    case M_Y_IS_HIST: c->ya[0] = (cake_bf16 *)c->ha[0]; break;
    case M_DX_IS_DY: c->dxa[0] = (cake_bf16 *)c->dya[0]; break;
    case M_DX_IN_X: c->dxa[1] = (cake_bf16 *)c->xa[1] + c->ch[1]; break;
    case M_DW_IS_W: c->dwa[0] = (float *)c->wa[0]; break;
    case M_ISA_99: c->opt.isa = (cake_cpu_isa)99; break;
    case M_ISA_COUNT: c->opt.isa = CAKE_CPU_ISA_COUNT; break;
    case M_THREADS_NEG: c->opt.num_threads = -1; break;
    case M_CU_NULL: c->cu = NULL; break;
    case M_NSEQ_NEG: c->num_seqs = -1; break;
    case M_CU_FIRST: c->cu = CU_FIRST; break;
    case M_CU_DECREASE: c->cu = CU_DECREASE; break;
    default: break;
    }
    if (m < M_ACT_NEG) return;
    c->params = &c->par;
    switch (m) {
    case M_ACT_NEG: c->par.activation = (cake_activation)-1; break;
    case M_ACT_COUNT: c->par.activation = CAKE_ACTIVATION_COUNT; break;
    case M_ACT_99: c->par.activation = (cake_activation)99; break;
    case M_BIAS0_NULL: c->biasa[0] = NULL; break;
    case M_BIAS1_NULL: c->biasa[1] = NULL; break;
    case M_DBIAS_NULL: c->par.dbias = NULL; break;
    case M_DBIAS1_NULL: c->dbiasa[1] = NULL; break;
    case M_DBIAS_NO_BIAS: c->par.bias = NULL; break;
    case M_Y_IS_BIAS: c->ya[0] = (cake_bf16 *)c->biasa[0]; break;
    case M_DX_IN_BIAS: c->dxa[1] = (cake_bf16 *)(c->biasa[1] + 2); break;
    case M_DBIAS_IS_W: c->dbiasa[0] = (float *)c->wa[0] + 4; break;
    case M_DBIAS_IS_DW: c->dbiasa[1] = c->dwa[1]; break;
    case M_DBIAS_IN_DX: c->dbiasa[0] = (float *)(c->dxa[0] + 8); break;
    case M_DBIAS_IS_BIAS: c->dbiasa[1] = (float *)c->biasa[1]; break;
    case M_DBIAS_IS_DBIAS: c->dbiasa[1] = c->dbiasa[0] + 4; break;
    default: break;
    }
}

static const struct bad_case {
    mut m;
    int calls; /* which entry points the case applies to */
    const char *name;
    int what;
    int64_t value;
    const char *also; /* a second name the message must give (the other side of an overlap) */
    const char *expected; /* words of the "expected ..." part the message must hold */
} cases[] = {
    {M_PLAN_NULL, PLANNED, "plan", TU_NULL, 0, NULL, NULL},
    {M_NT_ZERO, ALL, "num_tensors", TU_VALUE, 0, NULL, NULL},
    {M_NT_NEG, ALL, "num_tensors", TU_VALUE, -3, NULL, NULL},
    {M_CH_NULL, ALL, "channels", TU_NULL, 0, NULL, NULL},
    {M_CH_12, ALL, "channels[1]", TU_VALUE, 12, NULL, NULL},
    {M_CH_ZERO, ALL, "channels[1]", TU_VALUE, 0, NULL, NULL},
    {M_CH_NEG, ALL, "channels[0]", TU_VALUE, -8, NULL, NULL},
    {M_CH_4, ALL, "channels[0]", TU_VALUE, 4, NULL, NULL},
    {M_X_NULL, ALL, "x", TU_NULL, 0, NULL, NULL},
    {M_X1_NULL, ALL, "x[1]", TU_NULL, 0, NULL, NULL},
    {M_W_NULL, ALL, "w", TU_NULL, 0, NULL, NULL},
    {M_W0_NULL, ALL, "w[0]", TU_NULL, 0, NULL, NULL},
    {M_H_NULL, PLANNED, "history", TU_NULL, 0, NULL, NULL},
    {M_H1_NULL, PLANNED, "history[1]", TU_NULL, 0, NULL, NULL},
    {M_Y_NULL, FWD | SFWD, "y", TU_NULL, 0, NULL, NULL},
    {M_Y0_NULL, FWD | SFWD, "y[0]", TU_NULL, 0, NULL, NULL},
    {M_DY_NULL, BWD | SBWD, "dy", TU_NULL, 0, NULL, NULL},
    {M_DY0_NULL, BWD | SBWD, "dy[0]", TU_NULL, 0, NULL, NULL},
    {M_F_NULL, BWD, "future", TU_NULL, 0, NULL, NULL},
    {M_F1_NULL, BWD, "future[1]", TU_NULL, 0, NULL, NULL},
    {M_DX_NULL, BWD | SBWD, "dx", TU_NULL, 0, NULL, NULL},
    {M_DX1_NULL, BWD | SBWD, "dx[1]", TU_NULL, 0, NULL, NULL},
    {M_DW_NULL, BWD | SBWD, "dw", TU_NULL, 0, NULL, NULL},
    {M_DW0_NULL, BWD | SBWD, "dw[0]", TU_NULL, 0, NULL, NULL},
    {M_Y_IS_X, FWD | SFWD, "y[0]", TU_NO_VALUE, 0, NULL, NULL},
    {M_Y_IN_X, FWD | SFWD, "y[1]", TU_NO_VALUE, 0, NULL, NULL},
    {M_Y_IS_HIST, FWD, "y[0]", TU_NO_VALUE, 0, NULL, NULL},
    {M_DX_IS_DY, BWD | SBWD, "dx[0]", TU_NO_VALUE, 0, NULL, NULL},
    {M_DX_IN_X, BWD | SBWD, "dx[1]", TU_NO_VALUE, 0, NULL, NULL},
    {M_DW_IS_W, BWD | SBWD, "dw[0]", TU_NO_VALUE, 0, NULL, NULL},
    {M_ISA_99, ALL, "isa", TU_VALUE, 99, NULL, NULL},
    {M_ISA_COUNT, ALL, "isa", TU_VALUE, CAKE_CPU_ISA_COUNT, NULL, NULL},
    {M_THREADS_NEG, ALL, "num_threads", TU_VALUE, -1, NULL, NULL},
    {M_CU_NULL, SINGLE, "cu_seqlens", TU_NULL, 0, NULL, NULL},
    {M_NSEQ_NEG, SINGLE, "num_seqs", TU_VALUE, -1, NULL, NULL},
    {M_CU_FIRST, SINGLE, "cu_seqlens[0]", TU_VALUE, 2, NULL, NULL},
    {M_CU_DECREASE, SINGLE, "cu_seqlens[2]", TU_VALUE, 5, NULL, NULL},
    {M_ACT_NEG, ALL, "params->activation", TU_VALUE, -1, NULL, "CAKE_ACTIVATION_SILU"},
    {M_ACT_COUNT, ALL, "params->activation", TU_VALUE, CAKE_ACTIVATION_COUNT, NULL,
     "CAKE_ACTIVATION_NONE"},
    {M_ACT_99, ALL, "params->activation", TU_VALUE, 99, NULL, "CAKE_ACTIVATION_SILU"},
    {M_BIAS0_NULL, ALL, "params->bias[0]", TU_NULL, 0, NULL, "[channels] fp32"},
    {M_BIAS1_NULL, ALL, "params->bias[1]", TU_NULL, 0, NULL, "[channels] fp32"},
    {M_DBIAS_NULL, BWD | SBWD, "params->dbias", TU_NULL, 0, "params->bias", "outputs"},
    {M_DBIAS1_NULL, BWD | SBWD, "params->dbias[1]", TU_NULL, 0, NULL, "[channels] fp32"},
    {M_DBIAS_NO_BIAS, BWD | SBWD, "params->dbias", TU_NO_VALUE, 0, "params->bias",
     "expected NULL"},
    {M_Y_IS_BIAS, FWD | SFWD, "y[0]", TU_NO_VALUE, 0, "params->bias[0]", "overlaps no other"},
    {M_DX_IN_BIAS, BWD | SBWD, "dx[1]", TU_NO_VALUE, 0, "params->bias[1]", "overlaps no other"},
    {M_DBIAS_IS_W, BWD | SBWD, "params->dbias[0]", TU_NO_VALUE, 0, "w[0]", "overlaps no other"},
    {M_DBIAS_IS_DW, BWD | SBWD, "dw[1]", TU_NO_VALUE, 0, "params->dbias[1]",
     "overlaps no other"},
    {M_DBIAS_IN_DX, BWD | SBWD, "dx[0]", TU_NO_VALUE, 0, "params->dbias[0]",
     "overlaps no other"},
    {M_DBIAS_IS_BIAS, BWD | SBWD, "params->dbias[1]", TU_NO_VALUE, 0, "params->bias[1]",
     "overlaps no other"},
    {M_DBIAS_IS_DBIAS, BWD | SBWD, "params->dbias[0]", TU_NO_VALUE, 0, "params->dbias[1]",
     "overlaps no other"},
};

/* The unmodified arguments succeed, without params and with SiLU, bias and dbias (so every
 * failure below is the one broken argument). */
static void test_valid_baseline(void **state) {
    (void)state;
    tu_set_ctx("valid baseline");
    fixture *f = fixture_new();
    call c;
    for (int with_params = 0; with_params <= 1; with_params++)
        for (int which = FWD; which <= SBWD; which *= 2) {
            call_init(&c, f);
            if (with_params) c.params = &c.par;
            TU_OK(invoke(&c, which));
        }
    fixture_free(f);
}

static void test_bad_arguments(void **state) {
    (void)state;
    fixture *f = fixture_new();
    int checked = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int which = FWD; which <= SBWD; which *= 2) {
            if (!(cases[k].calls & which))
                continue;
            char desc[128];
            snprintf(desc, sizeof desc, "%s with bad %s (case %zu)", call_name[which],
                     cases[k].name, k);
            tu_set_ctx("%s", desc);
            call c;
            call_init(&c, f);
            mutate(&c, cases[k].m);
            fill_outputs(f);
            cake_status st = invoke(&c, which);
            tu_expect_invalid(st, desc, cases[k].name, cases[k].what, cases[k].value);
            const char *msg = cake_last_error();
            if (cases[k].also)
                TU_CHECK(tu_msg_names(msg, cases[k].also), "%s: message \"%s\" does not name %s",
                         desc, msg, cases[k].also);
            if (cases[k].expected)
                TU_CHECK(strstr(msg, cases[k].expected) != NULL && strstr(msg, "expected"),
                         "%s: message \"%s\" does not say what was expected (\"%s\")", desc, msg,
                         cases[k].expected);
            check_untouched(f, desc);
            checked++;
        }
    print_message("%d bad calls checked\n", checked);
    fixture_free(f);
}

/* Each status has its own string (by value: a missing case would fall back to "unknown
 * status"), values outside the enum give "unknown status", and a failed call leaves a message
 * that the next successful call clears. */
static void test_status_strings(void **state) {
    (void)state;
    tu_set_ctx("status strings");
    static const struct {
        cake_status status;
        const char *string;
    } want[] = {
        {CAKE_SUCCESS, "success"},
        {CAKE_ERROR_INVALID_ARGUMENT, "invalid argument"},
        {CAKE_ERROR_OUT_OF_MEMORY, "out of memory"},
        {CAKE_ERROR_UNSUPPORTED, "unsupported"},
        {CAKE_ERROR_COMMUNICATION, "communication error"},
        {CAKE_ERROR_TIMEOUT, "timeout"},
        {CAKE_ERROR_MISMATCH, "ranks disagree"},
        {CAKE_ERROR_INTERNAL, "internal error"},
        {CAKE_ERROR_CUDA, "CUDA error"},
    };
    const int count = (int)(sizeof want / sizeof want[0]);
    TU_CHECK(count == CAKE_STATUS_COUNT, "%d statuses listed here, the enum has %d", count,
             (int)CAKE_STATUS_COUNT);
    for (int s = 0; s < count; s++) {
        TU_CHECK((int)want[s].status == s, "status %d is listed as %d", s, (int)want[s].status);
        const char *str = cake_status_string(want[s].status);
        TU_CHECK(str != NULL && strcmp(str, want[s].string) == 0,
                 "cake_status_string(%d) = \"%s\", want \"%s\"", s, str ? str : "(NULL)",
                 want[s].string);
    }
    const int outside[] = {CAKE_STATUS_COUNT, CAKE_STATUS_COUNT + 1, -1, 1000, INT32_MIN};
    for (size_t k = 0; k < sizeof outside / sizeof outside[0]; k++) {
        const char *str = cake_status_string((cake_status)outside[k]);
        TU_CHECK(str != NULL && strcmp(str, "unknown status") == 0,
                 "cake_status_string(%d) = \"%s\", want \"unknown status\"", outside[k],
                 str ? str : "(NULL)");
    }
    int major = -1, minor = -1, patch = -1;
    cake_version(&major, &minor, &patch);
    TU_CHECK(major == CAKE_VERSION_MAJOR && minor == CAKE_VERSION_MINOR &&
                 patch == CAKE_VERSION_PATCH,
             "cake_version %d.%d.%d, the header says %d.%d.%d", major, minor, patch,
             CAKE_VERSION_MAJOR, CAKE_VERSION_MINOR, CAKE_VERSION_PATCH);
    cake_partition *part = NULL;
    TU_CHECK(cake_partition_create_contiguous(NULL, 1, 1, &part) == CAKE_ERROR_INVALID_ARGUMENT &&
                 strcmp(cake_last_error(), "cu_seqlens: expected a pointer, got NULL") == 0,
             "a failed call left \"%s\"", cake_last_error());
    const int64_t cu[] = {0, 4};
    TU_OK(cake_partition_create_contiguous(cu, 1, 1, &part));
    TU_CHECK(strcmp(cake_last_error(), "") == 0, "a successful call left \"%s\"",
             cake_last_error());
    cake_partition_destroy(part);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_baseline),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_status_strings),
    };
    tu_seed();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
