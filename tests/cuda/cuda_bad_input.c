/* Bad input on the CUDA API: misaligned device pointers, an invalid launch form, a workspace too
 * small or misaligned, NULL plan and arrays, bad channel counts, aliasing outputs. Each call must
 * return CAKE_ERROR_INVALID_ARGUMENT with a message naming the argument, and enqueue nothing:
 * the poisoned outputs are still poison after the device is synchronised. */
#include "cuda_tests.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define POISON 0xa5

typedef struct bad_args {
    int n;
    int64_t C[2];
    const cake_bf16 *x[2], *hist[2], *dy[2], *fut[2];
    const float *w[2];
    cake_bf16 *y[2], *dx[2];
    float *dw[2];
} bad_args;

static void args_from_rank(bad_args *a, const cc_rank *rk) {
    a->n = rk->n;
    for (int i = 0; i < rk->n; i++) {
        a->C[i] = rk->C[i];
        a->x[i] = rk->d_x[i];
        a->hist[i] = rk->d_hist[i];
        a->dy[i] = rk->d_dy[i];
        a->fut[i] = rk->d_fut[i];
        a->w[i] = rk->d_w[i];
        a->y[i] = rk->d_y[i];
        a->dx[i] = rk->d_dx[i];
        a->dw[i] = rk->d_dw[i];
    }
}

static void poison_outputs(cc_rank *rk) {
    for (int i = 0; i < rk->n; i++) {
        size_t rb = (size_t)(rk->S * rk->C[i]) * sizeof(cake_bf16);
        if (rb) {
            CU_CHECK(cudaMemset(rk->d_y[i], POISON, rb));
            CU_CHECK(cudaMemset(rk->d_dx[i], POISON, rb));
        }
        CU_CHECK(cudaMemset(rk->d_dw[i], POISON, (size_t)rk->C[i] * 16));
    }
    CU_CHECK(cudaDeviceSynchronize());
}

/* After a failed call nothing may have been written, nor be pending on the stream. Returns 1
 * (after a report, and a fresh poison for the next case) when something was. */
static int untouched(cc_rank *rk, const char *call) {
    CU_CHECK(cudaDeviceSynchronize());
    CU_CHECK(cudaGetLastError());
    int64_t bad = 0;
    char what[200];
    for (int i = 0; i < rk->n; i++) {
        size_t rb = (size_t)(rk->S * rk->C[i]) * sizeof(cake_bf16);
        cu_download(rk->g_y[i], rk->d_y[i], rb);
        cu_download(rk->g_dx[i], rk->d_dx[i], rb);
        cu_download(rk->g_dw[i], rk->d_dw[i], (size_t)rk->C[i] * 16);
        snprintf(what, sizeof what, "after failed %s: y[%d]", call, i);
        bad += cu_count_not_poison(what, rk->g_y[i], rb, POISON);
        snprintf(what, sizeof what, "after failed %s: dx[%d]", call, i);
        bad += cu_count_not_poison(what, rk->g_dx[i], rb, POISON);
        snprintf(what, sizeof what, "after failed %s: dw[%d]", call, i);
        bad += cu_count_not_poison(what, rk->g_dw[i], (size_t)rk->C[i] * 16, POISON);
    }
    if (bad)
        poison_outputs(rk);
    return bad != 0;
}

/* As tu_expect_invalid, but reports and returns 1 instead of ending the test, so one run shows
 * every case that misbehaves. */
static int invalid(cake_status st, const char *call, const char *name, int what, int64_t value) {
    const char *msg = cake_last_error() ? cake_last_error() : "(NULL)";
    if (st != CAKE_ERROR_INVALID_ARGUMENT) {
        tu_report("%s: status %s, want invalid argument; message \"%s\"", call,
                  cake_status_string(st), msg);
        return 1;
    }
    int bad = 0;
    if (!tu_msg_names(msg, name)) {
        tu_report("%s: message \"%s\" does not name %s", call, msg, name);
        bad = 1;
    }
    if (what == TU_VALUE && !tu_msg_has_number(msg, value)) {
        tu_report("%s: message \"%s\" does not give the value %" PRId64, call, msg, value);
        bad = 1;
    }
    if (what == TU_NULL && !tu_msg_has_null(msg)) {
        tu_report("%s: message \"%s\" does not say NULL", call, msg);
        bad = 1;
    }
    return bad;
}

/* The call must fail naming `name` and leave the outputs alone. */
static int refused(cc_rank *rk, cake_status st, const char *call, const char *name, int what,
                   int64_t value) {
    tu_set_ctx("bad input: %s", call);
    return invalid(st, call, name, what, value) + untouched(rk, call);
}

static cake_status forward(const cake_cuda_plan *plan, const bad_args *a, cake_cooperative coop) {
    return cake_cuda_forward(plan, a->n, a->C, a->x, a->w, NULL, a->hist, a->y, coop, ct_stream);
}

static cake_status backward(const cake_cuda_plan *plan, const bad_args *a, cake_cooperative coop,
                            void *ws, size_t ws_bytes) {
    return cake_cuda_backward(plan, a->n, a->C, a->x, a->w, NULL, a->hist, a->dy, a->fut, a->dx,
                              a->dw,
                              coop, ws, ws_bytes, ct_stream);
}

/* Both calls (or only the backward) with `a` must fail naming `name`. */
static int both_refuse(cc_rank *rk, const bad_args *a, const char *label, const char *name,
                       int what, int64_t value, int forward_too) {
    char call[160];
    int bad = 0;
    if (forward_too) {
        snprintf(call, sizeof call, "cake_cuda_forward with %s", label);
        tu_set_ctx("bad input: %s", call);
        bad += refused(rk, forward(rk->dplan, a, CAKE_COOPERATIVE_OFF), call, name, what, value);
    }
    snprintf(call, sizeof call, "cake_cuda_backward with %s", label);
    tu_set_ctx("bad input: %s", call);
    bad +=
        refused(rk, backward(rk->dplan, a, CAKE_COOPERATIVE_OFF, NULL, 0), call, name, what, value);
    return bad;
}

/* A device buffer big enough for any array of rk plus 64 bytes, so a pointer a few bytes into it
 * is misaligned but overlaps nothing (else the aliasing check could answer first). */
static void *scratch_for(const cc_rank *rk) {
    size_t most = 0;
    for (int i = 0; i < rk->n; i++) {
        size_t b = (size_t)((rk->S > rk->pool ? rk->S : rk->pool) * rk->C[i]) * 2;
        if ((size_t)rk->C[i] * 16 > b)
            b = (size_t)rk->C[i] * 16;
        if (b > most)
            most = b;
    }
    return cu_alloc(most + 64);
}

static void build_rank(cc_rank *rk, cc_problem *pb, tu_partition *tp, int want_rows) {
    tu_rng r;
    tu_rng_init(&r, CT_STREAM_BAD);
    const int64_t cu[] = {0, 7, 7, 20, 33}, C[] = {16, 24};
    cc_problem_init(pb, &r, TU_MODERATE, cc_cu_copy(cu, 4), 4, 2, C);
    /* rank 0: rows 0-9 and 20-22 (future rows from rank 1); rank 1: the rest; rank 2: none */
    const int64_t counts[] = {2, 2, 0};
    const cake_range ranges[] = {{0, 10}, {20, 23}, {10, 20}, {23, 33}};
    TU_OK(tu_partition_explicit(tp, pb->cu, 4, 3, counts, ranges));
    cc_rank_init(rk, pb, tp, want_rows ? 0 : 2);
    TU_CHECK((rk->S > 0) == want_rows, "rank has %" PRId64 " rows", rk->S);
}

void test_bad_input(void **state) {
    (void)state;
    cc_problem pb;
    tu_partition tp;
    cc_rank rk;
    build_rank(&rk, &pb, &tp, 1);
    poison_outputs(&rk);
    char *scratch = scratch_for(&rk);
    bad_args good, a;
    args_from_rank(&good, &rk);
    int bad = 0;

    /* misaligned device pointers: 2, 4 or 8 bytes off */
#define MISALIGNED(field, i, offset, label, fwd)                                                   \
    do {                                                                                           \
        a = good;                                                                                  \
        a.field[i] = (void *)(scratch + (offset));                                                 \
        bad += both_refuse(&rk, &a, "misaligned " label, label, TU_NO_VALUE, 0, fwd);              \
    } while (0)
    MISALIGNED(x, 0, 2, "x[0]", 1);
    MISALIGNED(x, 1, 8, "x[1]", 1);
    MISALIGNED(w, 1, 4, "w[1]", 1);
    MISALIGNED(hist, 0, 2, "history[0]", 1);
    MISALIGNED(dy, 1, 2, "dy[1]", 0);
    MISALIGNED(fut, 0, 2, "future[0]", 0);
    MISALIGNED(dx, 1, 2, "dx[1]", 0);
    MISALIGNED(dw, 0, 4, "dw[0]", 0);
#undef MISALIGNED
    a = good;
    a.y[1] = (cake_bf16 *)(scratch + 2);
    bad += refused(&rk, forward(rk.dplan, &a, CAKE_COOPERATIVE_OFF), "forward, misaligned y[1]",
                   "y[1]", TU_NO_VALUE, 0);

    /* NULL arrays where there are rows */
    a = good;
    a.x[0] = NULL;
    bad += both_refuse(&rk, &a, "NULL x[0]", "x[0]", TU_NULL, 0, 1);
    a = good;
    a.dw[1] = NULL;
    bad += both_refuse(&rk, &a, "NULL dw[1]", "dw[1]", TU_NULL, 0, 0);

    /* channel counts and tensor counts */
    a = good;
    a.C[1] = 12;
    bad += both_refuse(&rk, &a, "channels[1] = 12", "channels[1]", TU_VALUE, 12, 1);
    a = good;
    a.n = 0;
    bad += both_refuse(&rk, &a, "num_tensors = 0", "num_tensors", TU_VALUE, 0, 1);

    /* outputs that alias inputs */
    a = good;
    a.y[0] = (cake_bf16 *)good.x[0];
    bad += refused(&rk, forward(rk.dplan, &a, CAKE_COOPERATIVE_OFF), "forward, y[0] = x[0]", "y[0]",
                   TU_NO_VALUE, 0);
    a = good;
    a.dx[1] = (cake_bf16 *)good.dy[1];
    bad += both_refuse(&rk, &a, "dx[1] = dy[1]", "dx[1]", TU_NO_VALUE, 0, 0);

    /* launch form */
    bad += refused(&rk, forward(rk.dplan, &good, (cake_cooperative)5), "forward, cooperative 5",
                   "cooperative", TU_VALUE, 5);
    bad += refused(&rk, backward(rk.dplan, &good, (cake_cooperative)-2, NULL, 0),
                   "backward, cooperative -2", "cooperative", TU_VALUE, -2);
    if (!cake_cuda_cooperative_supported()) { /* True where it cannot be done: a clear error */
        cake_status st = forward(rk.dplan, &good, CAKE_COOPERATIVE_ON);
        if (st != CAKE_ERROR_UNSUPPORTED || !tu_msg_names(cake_last_error(), "cooperative")) {
            tu_report("cooperative ON on a device without cooperative launch: %s, \"%s\"",
                      cake_status_string(st), cake_last_error());
            bad++;
        }
        bad += untouched(&rk, "forward, cooperative ON unsupported");
    }

    /* workspace: given but too small, misaligned */
    size_t need = 0;
    TU_OK(cake_cuda_backward_workspace_size(rk.dplan, 2, good.C, NULL, &need));
    TU_CHECK(need >= 16, "workspace size %zu for %" PRId64 " rows", need, rk.S);
    void *ws = cu_alloc(need + 64);
    bad += refused(&rk, backward(rk.dplan, &good, CAKE_COOPERATIVE_OFF, ws, need - 16),
                   "backward, workspace_bytes 16 too small", "workspace_bytes", TU_VALUE,
                   (int64_t)(need - 16));
    bad += refused(&rk, backward(rk.dplan, &good, CAKE_COOPERATIVE_AUTO, ws, 1),
                   "backward, AUTO, workspace_bytes 1", "workspace_bytes", TU_VALUE, 1);
    bad += refused(&rk, backward(rk.dplan, &good, CAKE_COOPERATIVE_OFF, (char *)ws + 4, need),
                   "backward, misaligned workspace", "workspace", TU_NO_VALUE, 0);

    /* NULL plan and out-pointers */
    bad += refused(&rk, forward(NULL, &good, CAKE_COOPERATIVE_OFF), "forward, NULL plan", "plan",
                   TU_NULL, 0);
    bad += refused(&rk, backward(NULL, &good, CAKE_COOPERATIVE_OFF, NULL, 0), "backward, NULL plan",
                   "plan", TU_NULL, 0);
    size_t bytes = 0;
    tu_set_ctx("bad input: workspace size, plan create");
    bad += invalid(cake_cuda_backward_workspace_size(NULL, 2, good.C, NULL, &bytes),
                   "workspace_size, NULL plan", "plan", TU_NULL, 0);
    bad += invalid(cake_cuda_backward_workspace_size(rk.dplan, 2, good.C, NULL, NULL),
                   "workspace_size, NULL bytes", "bytes", TU_NULL, 0);
    bad += invalid(cake_cuda_backward_workspace_size(rk.dplan, 0, good.C, NULL, &bytes),
                   "workspace_size, 0 tensors", "num_tensors", TU_VALUE, 0);
    cake_cuda_plan *dp = NULL;
    bad += invalid(cake_cuda_plan_create(NULL, &dp), "cuda plan create, NULL plan", "plan", TU_NULL,
                   0);
    bad += invalid(cake_cuda_plan_create(rk.plan, NULL), "cuda plan create, NULL out", "out",
                   TU_NULL, 0);
    cake_cuda_plan_destroy(NULL); /* accepted */

    /* a plan made on another device (only where there is one) */
    int devices = 0;
    CU_CHECK(cudaGetDeviceCount(&devices));
    if (devices > 1) {
        CU_CHECK(cudaSetDevice(1));
        cake_status st = forward(rk.dplan, &good, CAKE_COOPERATIVE_OFF);
        CU_CHECK(cudaSetDevice(0));
        bad += refused(&rk, st, "forward on device 1 with a device-0 plan", "plan", TU_NO_VALUE, 0);
    }

    /* and the good arguments still work after all that */
    tu_set_ctx("bad input: good call after the bad ones");
    cc_launch l = {0, 2, CAKE_COOPERATIVE_AUTO, CC_WS_EXACT, 0xff, ct_stream};
    cc_gpu_run(&rk, &l);
    bad += cc_compare_truth("good call after the bad ones", &rk, 0, 2);

    cu_free(ws);
    cu_free(scratch);
    cc_rank_free(&rk);
    tu_partition_free(&tp);
    cc_problem_free(&pb);
    TU_CHECK(bad == 0, "%d bad-input checks failed (see above)", bad);
}

/* A rank without rows: row arrays may be NULL, but w and dw are still checked, and a failed
 * backward must not clear dw. */
void test_bad_input_empty_rank(void **state) {
    (void)state;
    cc_problem pb;
    tu_partition tp;
    cc_rank rk;
    build_rank(&rk, &pb, &tp, 0);
    poison_outputs(&rk);
    char *scratch = scratch_for(&rk);
    bad_args good, a;
    args_from_rank(&good, &rk);
    TU_CHECK(good.x[0] == NULL && good.hist[0] == NULL, "empty rank has row arrays");
    int bad = 0;

    bad += refused(&rk, backward(rk.dplan, &good, (cake_cooperative)5, NULL, 0),
                   "backward (no rows), cooperative 5", "cooperative", TU_VALUE, 5);
    a = good;
    a.dw[1] = (float *)(scratch + 4);
    bad += both_refuse(&rk, &a, "no rows, misaligned dw[1]", "dw[1]", TU_NO_VALUE, 0, 0);
    a = good;
    a.w[0] = (const float *)(scratch + 8);
    bad += both_refuse(&rk, &a, "no rows, misaligned w[0]", "w[0]", TU_NO_VALUE, 0, 1);
    a = good;
    a.w[1] = NULL;
    bad += both_refuse(&rk, &a, "no rows, NULL w[1]", "w[1]", TU_NULL, 0, 1);
    a = good;
    a.dw[0] = NULL;
    bad += both_refuse(&rk, &a, "no rows, NULL dw[0]", "dw[0]", TU_NULL, 0, 0);

    /* the good call zeroes dw */
    tu_set_ctx("bad input, empty rank: good call");
    cc_launch l = {0, 2, CAKE_COOPERATIVE_OFF, CC_WS_NULL, 0xff, ct_stream};
    cc_gpu_run(&rk, &l);
    bad += cc_compare_truth("empty rank, good call", &rk, 0, 2);

    cu_free(scratch);
    cc_rank_free(&rk);
    tu_partition_free(&tp);
    cc_problem_free(&pb);
    TU_CHECK(bad == 0, "%d bad-input checks failed (see above)", bad);
}
