/* Multi-rank correctness: for random sequences, channel counts and partitions of every kind, each
 * trial in one of the four variants (no bias / bias x no activation / SiLU), every rank's y and
 * dx rows are bitwise those of the P = 1 run (the independent reference over the whole batch,
 * and the library on one rank), every rank's dw and dbias are bitwise the reference's over its
 * own local rows, the history pools hold the right rows, single calls equal the multi call
 * (outputs and gradients), a forward from a filled recompute handle equals the first, and each
 * backward is one exchange (one message per peer, the x rows beside the dy rows with SiLU). */
#include "mpi_common.h"
#include "reference.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_TRIALS 64 /* x 5 launch sizes; $CAKE_MPI_TRIALS overrides */

/* Fragments of a rank counted from its local -> global rows alone (SPEC 2): a new one starts
 * where the next local row is not the next global row or lies in another sequence. */
static int64_t count_fragments(const int64_t *l2g, int64_t S, const int64_t *seq_of)
{
    int64_t count = 0;
    for (int64_t t = 0; t < S; t++)
        count += t == 0 || l2g[t] != l2g[t - 1] + 1 || seq_of[l2g[t]] != seq_of[l2g[t - 1]];
    return count;
}

static cake_cpu_options pick_cpu(int index)
{
    cake_cpu_isa isas[CAKE_CPU_ISA_COUNT];
    int count = 0;
    for (int i = 0; i < CAKE_CPU_ISA_COUNT; i++)
        if (cake_cpu_isa_supported((cake_cpu_isa)i))
            isas[count++] = (cake_cpu_isa)i;
    /* One thread mostly: up to 8 ranks share two cores. */
    return (cake_cpu_options){index % 5 == 2 ? 2 : 1, isas[index % count]};
}

/* The history pools against rows taken straight from the global x (tu_build_pools). */
static void check_history(const mc_trial *t, const tu_problem *pb, const cake_ctx *ctx,
                          const mc_local *L, const int64_t *seq_of)
{
    for (int i = 0; i < t->n && L->pool > 0; i++) {
        cake_bf16 *want = tu_malloc((size_t)(L->pool * t->C[i]) * sizeof *want);
        cake_status st = tu_build_pools(cake_ctx_plan(ctx), t->cu, t->num_seqs, seq_of, t->C[i],
                                        pb->x[i], NULL, want, NULL);
        if (mc_ok(st, "tu_build_pools")) {
            char what[64];
            snprintf(what, sizeof what, "history[%d] after the exchange", i);
            mc_count(tu_diff_bf16(what, L->hist[i], want, L->pool, t->C[i]));
        }
        free(want);
    }
}

/* The bias and activation of a trial: variant (index % 4) of tu_variant_name, bias values hashed
 * from the trial's seed (every rank makes the same). pb gets them too, for the reference. */
typedef struct variant_io {
    int with_bias;
    cake_activation activation;
    const float *bias[TU_MAX_TENSORS]; /* borrowed from pb */
    float *dbias[2][TU_MAX_TENSORS];   /* outputs of runs A and B */
    int64_t C[TU_MAX_TENSORS];
    int n;
} variant_io;

static void variant_init(variant_io *v, const mc_trial *t, int index, tu_problem *pb)
{
    memset(v, 0, sizeof *v);
    const int variant = index / 2 % TU_VARIANTS; /* every variant with and without a handle */
    v->with_bias = tu_variant_bias(variant);
    v->activation = tu_variant_activation(variant);
    v->n = t->n;
    pb->with_bias = v->with_bias;
    pb->activation = v->activation;
    for (int i = 0; i < t->n; i++) {
        v->C[i] = t->C[i];
        if (!v->with_bias)
            continue;
        pb->bias[i] = tu_malloc((size_t)t->C[i] * sizeof(float));
        for (int64_t c = 0; c < t->C[i]; c++) /* another hash stream than the weights' */
            pb->bias[i][c] = mc_weight(t->seed ^ UINT64_C(0x62696173), i, c, 0);
        v->bias[i] = pb->bias[i];
        for (int run = 0; run < 2; run++)
            v->dbias[run][i] = tu_malloc((size_t)t->C[i] * sizeof(float));
    }
}

static void variant_poison(variant_io *v, int run)
{
    for (int i = 0; v->with_bias && i < v->n; i++)
        memset(v->dbias[run][i], 0x5a, (size_t)v->C[i] * sizeof(float));
}

static void variant_free(variant_io *v)
{
    for (int i = 0; i < v->n; i++)
        for (int run = 0; run < 2; run++)
            free(v->dbias[run][i]);
    memset(v, 0, sizeof *v);
}

/* The parameters of tensors [first, first + count) for run `run` (dbias outputs of that run). */
typedef struct params_buf {
    cake_conv_params p;
    const float *bias[TU_MAX_TENSORS];
    float *dbias[TU_MAX_TENSORS];
} params_buf;

static const cake_conv_params *params_of(params_buf *b, variant_io *v, int run, int first,
                                         int count)
{
    memset(b, 0, sizeof *b);
    b->p.activation = v->activation;
    if (v->with_bias) {
        for (int i = 0; i < count; i++) {
            b->bias[i] = v->bias[first + i];
            b->dbias[i] = v->dbias[run][first + i];
        }
        b->p.bias = b->bias;
        b->p.dbias = b->dbias;
    }
    return &b->p;
}

/* dbias of two runs bitwise equal. */
static int dbias_diff(const char *label, const variant_io *v, int got, int want)
{
    int bad = 0;
    char what[160];
    for (int i = 0; v->with_bias && i < v->n; i++) {
        snprintf(what, sizeof what, "%s: dbias[%d] (C = %" PRId64 ")", label, i, v->C[i]);
        bad += tu_diff_f32(what, v->dbias[got][i], v->dbias[want][i], 1, v->C[i]);
    }
    return bad;
}

/* What one exchange must have been, from the plan alone: one message to and from each peer that
 * shares halo rows with this rank in that direction, carrying those rows of every tensor (x in
 * the forward; dy in the backward and, with an activation, as many rows of x); none at all when
 * there are no such peers. */
static void check_exchange(const cake_ctx *ctx, const cake_ctx_stats *before,
                           const cake_ctx_stats *after, const variant_io *v, int backward)
{
    const char *dir = backward ? "backward" : "forward";
    int64_t sends = 0, receives = 0, rows_in = 0, rows_out = 0, channels = 0;
    for (int peer = 0; peer < mc_size; peer++) {
        const int64_t in = cake_ctx_halo_rows_from(ctx, peer, backward),
                      out = cake_ctx_halo_rows_to(ctx, peer, backward);
        receives += in > 0;
        sends += out > 0;
        rows_in += in;
        rows_out += out;
    }
    for (int i = 0; i < v->n; i++)
        channels += v->C[i];
    /* backward with an activation: dy and x of each future row */
    const int64_t copies = backward && v->activation != CAKE_ACTIVATION_NONE ? 2 : 1;
    const int64_t exchanges = sends + receives > 0 ? 1 : 0;
    MC_CHECK(after->exchanges - before->exchanges == exchanges,
             "%s: %" PRId64 " exchanges, want %" PRId64 " (one per direction)", dir,
             after->exchanges - before->exchanges, exchanges);
    MC_CHECK(after->messages_sent - before->messages_sent == sends &&
                 after->messages_received - before->messages_received == receives,
             "%s: %" PRId64 " messages sent and %" PRId64 " received, want %" PRId64
             " and %" PRId64 " (one per peer)",
             dir, after->messages_sent - before->messages_sent,
             after->messages_received - before->messages_received, sends, receives);
    MC_CHECK(after->bytes_received - before->bytes_received == 2 * rows_in * channels * copies &&
                 after->bytes_sent - before->bytes_sent == 2 * rows_out * channels * copies,
             "%s: %" PRId64 " bytes received and %" PRId64 " sent, want %" PRId64
             " and %" PRId64 " (%" PRId64 " and %" PRId64 " halo rows of %" PRId64
             " channels, %s)",
             dir, after->bytes_received - before->bytes_received,
             after->bytes_sent - before->bytes_sent, 2 * rows_in * channels * copies,
             2 * rows_out * channels * copies, rows_in, rows_out, channels,
             !backward ? "x" : copies == 2 ? "dy and x" : "dy");
}

/* The P = 1 run on this rank alone: a context over MPI_COMM_SELF holding the whole batch, and
 * the single-rank entry points, both against the reference over the whole batch (`complete`
 * when the caller's reference already covers every row, else NULL). */
static void check_one_rank(const mc_trial *t, const tu_problem *pb, const tu_ref *complete,
                           const cake_cpu_options *cpu, variant_io *v)
{
    tu_ref whole;
    memset(&whole, 0, sizeof whole);
    if (!complete)
        tu_ref_compute(&whole, pb);
    const tu_ref *ref = complete ? complete : &whole;
    cake_partition *part = NULL;
    cake_ctx *ctx = NULL;
    cake_ctx_options opt = {.cpu = *cpu};
    int64_t *l2g = tu_malloc((size_t)t->T * sizeof *l2g);
    for (int64_t g = 0; g < t->T; g++)
        l2g[g] = g;
    if (mc_ok(cake_partition_create_contiguous(t->cu, t->num_seqs, 1, &part),
              "P = 1: cake_partition_create_contiguous") &&
        mc_ok(cake_ctx_create_mpi(MPI_COMM_SELF, part, &opt, &ctx), "P = 1: cake_ctx_create_mpi")) {
        mc_trial one = *t; /* the same trial seen as one rank holding every row */
        one.tp.local_rows = &one.T;
        int64_t *l2g_one[1] = {l2g};
        one.tp.l2g = l2g_one;
        mc_local L;
        mc_local_init(&L, &one, 0, cake_ctx_pool_rows(ctx));
        params_buf pbuf;
        const cake_conv_params *prm = params_of(&pbuf, v, 1, 0, t->n);
        variant_poison(v, 1);
        if (mc_ok(cake_forward_multi(ctx, t->n, t->C, MC_CX(&L), MC_CW(&L), prm, L.y, L.hist,
                                     NULL),
                  "P = 1: cake_forward_multi") &&
            mc_ok(cake_backward_multi(ctx, t->n, t->C, MC_CX(&L), MC_CW(&L), prm, MC_CHIST(&L),
                                      MC_CDY(&L), L.dx, L.dw),
                  "P = 1: cake_backward_multi")) {
            tu_rank_out o = mc_local_as_out(&L);
            for (int i = 0; v->with_bias && i < t->n; i++)
                o.dbias[i] = v->dbias[1][i];
            mc_count(tu_check_rank("P = 1 context vs reference", pb, ref, l2g, &o, 0));
        }
        mc_local_free(&L);
    }
    cake_ctx_destroy(ctx);
    cake_partition_destroy(part);

    tu_rank_out single;
    if (tu_run_single(pb, cpu, &single) == CAKE_SUCCESS)
        mc_count(tu_check_rank("cake_cpu_*_single_rank vs reference", pb, ref, l2g, &single, 0));
    else
        mc_fail("cake_cpu_*_single_rank failed: %s", cake_last_error());
    tu_rank_out_free(&single);
    free(l2g);
    tu_ref_free(&whole);
}

static void run_trial(int index)
{
    const int rank = mc_rank, P = mc_size;
    mc_trial t;
    /* The trial is the same on every rank, so a refused partition stops all of them. */
    if (mc_trial_make(&t, 1, index, P, -1, 3000, 64) != 0)
        return;
    tu_problem pb;
    tu_ref ref;
    mc_trial_problem(&t, &pb);
    int64_t *seq_of = tu_seq_of_rows(t.cu, t.num_seqs);
    const int64_t *l2g = t.tp.l2g[rank];

    variant_io v;
    variant_init(&v, &t, index, &pb);
    tu_ref_compute_rows(&ref, &pb, l2g, t.tp.local_rows[rank]); /* this rank's rows */
    params_buf pa, pbv;
    const cake_conv_params *prmA = params_of(&pa, &v, 0, 0, t.n);
    const cake_conv_params *prmB = params_of(&pbv, &v, 1, 0, t.n);
    variant_poison(&v, 0);
    variant_poison(&v, 1);

    /* Check mode must not change results; a generous timeout turns a library hang into a
     * failure, and timeout 0 keeps the plain MPI_Waitall path covered. */
    cake_ctx_options opt = {.check = index % 3 == 1,
                            .timeout_seconds = index % 2 ? 60.0 : 0.0,
                            .cpu = pick_cpu(index)};
    cake_ctx *ctx = NULL;
    cake_recompute_handle *handle = NULL;
    mc_local A, B;
    memset(&A, 0, sizeof A);
    memset(&B, 0, sizeof B);
    if (!mc_all(mc_ok(cake_ctx_create_mpi(MPI_COMM_WORLD, t.tp.lib, &opt, &ctx),
                      "cake_ctx_create_mpi")))
        goto done;
    MC_CHECK(cake_ctx_local_rows(ctx) == t.tp.local_rows[rank],
             "cake_ctx_local_rows = %" PRId64 ", the partition gives %" PRId64,
             cake_ctx_local_rows(ctx), t.tp.local_rows[rank]);
    const int64_t pool = cake_ctx_pool_rows(ctx);
    const int64_t frags = count_fragments(l2g, t.tp.local_rows[rank], seq_of);
    MC_CHECK(pool == 3 * frags, "cake_ctx_pool_rows = %" PRId64 ", want 3 x %" PRId64 " fragments",
             pool, frags);
    mc_local_init(&A, &t, rank, pool);
    mc_local_init(&B, &t, rank, pool);
    if (index % 2 == 0 && !mc_ok(cake_recompute_handle_create(&handle), "handle create"))
        goto done;

    /* The multi call, against the reference; each direction is one exchange. */
    cake_ctx_stats before, after;
    if (!mc_ok(cake_ctx_get_stats(ctx, &before), "cake_ctx_get_stats"))
        goto done;
    if (!mc_all(mc_ok(cake_forward_multi(ctx, t.n, t.C, MC_CX(&A), MC_CW(&A), prmA, A.y, A.hist,
                                         handle),
                      "cake_forward_multi")))
        goto done;
    if (mc_ok(cake_ctx_get_stats(ctx, &after), "cake_ctx_get_stats"))
        check_exchange(ctx, &before, &after, &v, 0);
    before = after;
    if (!mc_all(mc_ok(cake_backward_multi(ctx, t.n, t.C, MC_CX(&A), MC_CW(&A), prmA, MC_CHIST(&A),
                                          MC_CDY(&A), A.dx, A.dw),
                      "cake_backward_multi")))
        goto done;
    if (mc_ok(cake_ctx_get_stats(ctx, &after), "cake_ctx_get_stats"))
        check_exchange(ctx, &before, &after, &v, 1);
    tu_rank_out o = mc_local_as_out(&A);
    for (int i = 0; v.with_bias && i < t.n; i++)
        o.dbias[i] = v.dbias[0][i];
    mc_count(tu_check_rank("multi call vs reference", &pb, &ref, l2g, &o, 0));
    check_history(&t, &pb, ctx, &A, seq_of);

    /* The same tensors one by one (forwards in order, backwards in reverse, as autograd would):
     * bitwise the multi call, history pools included. */
    for (int i = 0; i < t.n; i++) {
        params_buf one;
        if (!mc_all(mc_ok(cake_forward(ctx, t.C[i], B.x[i], B.w[i], params_of(&one, &v, 1, i, 1),
                                       B.y[i], B.hist[i], NULL),
                          "cake_forward")))
            goto done;
    }
    for (int i = t.n - 1; i >= 0; i--) {
        params_buf one;
        if (!mc_ok(cake_ctx_get_stats(ctx, &before), "cake_ctx_get_stats"))
            goto done;
        if (!mc_all(mc_ok(cake_backward(ctx, t.C[i], B.x[i], B.w[i], params_of(&one, &v, 1, i, 1),
                                        B.hist[i], B.dy[i], B.dx[i], B.dw[i]),
                          "cake_backward")))
            goto done;
        if (mc_ok(cake_ctx_get_stats(ctx, &after), "cake_ctx_get_stats")) {
            variant_io single = v; /* the exchange of one tensor */
            single.n = 1;
            single.C[0] = t.C[i];
            check_exchange(ctx, &before, &after, &single, 1);
        }
    }
    mc_count(mc_local_diff("single calls vs multi call", &B, &A, 1, 1));
    mc_count(dbias_diff("single calls vs multi call", &v, 1, 0));

    /* The recompute inside backward: the filled handle gives back the same pools and outputs. */
    if (handle) {
        MC_CHECK(cake_recompute_handle_contains(handle, "conv"),
                 "the handle has no \"conv\" entry after a forward");
        mc_local_poison(&B);
        variant_poison(&v, 1);
        if (!mc_ok(cake_ctx_get_stats(ctx, &before), "cake_ctx_get_stats"))
            goto done;
        if (!mc_all(mc_ok(cake_forward_multi(ctx, t.n, t.C, MC_CX(&B), MC_CW(&B), prmB, B.y,
                                             B.hist, handle),
                          "cake_forward_multi from a filled handle")))
            goto done;
        if (mc_ok(cake_ctx_get_stats(ctx, &after), "cake_ctx_get_stats"))
            MC_CHECK(after.exchanges == before.exchanges,
                     "a forward from a filled handle exchanged (%" PRId64 " exchanges)",
                     after.exchanges - before.exchanges);
        if (!mc_all(mc_ok(cake_backward_multi(ctx, t.n, t.C, MC_CX(&B), MC_CW(&B), prmB,
                                              MC_CHIST(&B), MC_CDY(&B), B.dx, B.dw),
                          "cake_backward_multi after the recompute")))
            goto done;
        mc_count(mc_local_diff("forward from the handle vs first forward", &B, &A, 1, 1));
        mc_count(dbias_diff("forward from the handle vs first forward", &v, 1, 0));
    }

    /* The P = 1 run, on one rank per trial to spread the cost. */
    if (rank == index % P)
        check_one_rank(&t, &pb, t.tp.local_rows[rank] == t.T ? &ref : NULL, &opt.cpu, &v);

done:
    variant_free(&v);
    cake_recompute_handle_destroy(handle);
    cake_ctx_destroy(ctx);
    mc_local_free(&A);
    mc_local_free(&B);
    free(seq_of);
    tu_ref_free(&ref);
    tu_problem_free(&pb);
    mc_trial_free(&t);
}

int main(int argc, char **argv)
{
    mc_init(&argc, &argv, "test_mpi_conv");
    const char *env = getenv("CAKE_MPI_TRIALS");
    int trials = env && *env ? atoi(env) : DEFAULT_TRIALS;
    for (int index = 0; index < trials; index++)
        run_trial(index);
    return mc_finish();
}
