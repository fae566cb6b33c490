/* Multi-rank correctness: for random sequences, channel counts and partitions of every kind,
 * every rank's y and dx rows are bitwise those of the P = 1 run (the independent reference over
 * the whole batch, and the library on one rank), every rank's dw is bitwise the reference dw of
 * its own local rows, the history pools hold the right rows, single calls equal the multi call
 * (outputs and gradients), and a forward from a filled recompute handle equals the first. */
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

/* The P = 1 run on this rank alone: a context over MPI_COMM_SELF holding the whole batch, and
 * the single-rank entry points, both against the reference. */
static void check_one_rank(const mc_trial *t, const tu_problem *pb, const tu_ref *ref,
                           const cake_cpu_options *cpu)
{
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
        if (mc_ok(cake_forward_multi(ctx, t->n, t->C, MC_CX(&L), MC_CW(&L), NULL, L.y, L.hist,
                                     NULL),
                  "P = 1: cake_forward_multi") &&
            mc_ok(cake_backward_multi(ctx, t->n, t->C, MC_CX(&L), MC_CW(&L), NULL, MC_CHIST(&L),
                                      MC_CDY(&L), L.dx, L.dw),
                  "P = 1: cake_backward_multi")) {
            tu_rank_out o = mc_local_as_out(&L);
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
    tu_ref_compute(&ref, &pb);
    int64_t *seq_of = tu_seq_of_rows(t.cu, t.num_seqs);
    const int64_t *l2g = t.tp.l2g[rank];

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

    /* The multi call, against the reference. */
    if (!mc_all(mc_ok(cake_forward_multi(ctx, t.n, t.C, MC_CX(&A), MC_CW(&A), NULL, A.y, A.hist,
                                         handle),
                      "cake_forward_multi")))
        goto done;
    if (!mc_all(mc_ok(cake_backward_multi(ctx, t.n, t.C, MC_CX(&A), MC_CW(&A), NULL, MC_CHIST(&A),
                                          MC_CDY(&A), A.dx, A.dw),
                      "cake_backward_multi")))
        goto done;
    tu_rank_out o = mc_local_as_out(&A);
    mc_count(tu_check_rank("multi call vs reference", &pb, &ref, l2g, &o, 0));
    check_history(&t, &pb, ctx, &A, seq_of);

    /* The same tensors one by one (forwards in order, backwards in reverse, as autograd would):
     * bitwise the multi call, history pools included. */
    for (int i = 0; i < t.n; i++)
        if (!mc_all(mc_ok(cake_forward(ctx, t.C[i], B.x[i], B.w[i], NULL, B.y[i], B.hist[i], NULL),
                          "cake_forward")))
            goto done;
    for (int i = t.n - 1; i >= 0; i--)
        if (!mc_all(mc_ok(cake_backward(ctx, t.C[i], B.x[i], B.w[i], NULL, B.hist[i], B.dy[i],
                                        B.dx[i],
                                        B.dw[i]),
                          "cake_backward")))
            goto done;
    mc_count(mc_local_diff("single calls vs multi call", &B, &A, 1, 1));

    /* The recompute inside backward: the filled handle gives back the same pools and outputs. */
    if (handle) {
        MC_CHECK(cake_recompute_handle_contains(handle, "conv"),
                 "the handle has no \"conv\" entry after a forward");
        mc_local_poison(&B);
        if (!mc_all(mc_ok(cake_forward_multi(ctx, t.n, t.C, MC_CX(&B), MC_CW(&B), NULL, B.y, B.hist,
                                             handle),
                          "cake_forward_multi from a filled handle")))
            goto done;
        if (!mc_all(mc_ok(cake_backward_multi(ctx, t.n, t.C, MC_CX(&B), MC_CW(&B), NULL,
                                              MC_CHIST(&B),
                                              MC_CDY(&B), B.dx, B.dw),
                          "cake_backward_multi after the recompute")))
            goto done;
        mc_count(mc_local_diff("forward from the handle vs first forward", &B, &A, 1, 1));
    }

    /* The P = 1 run, on one rank per trial to spread the cost. */
    if (rank == index % P)
        check_one_rank(&t, &pb, &ref, &opt.cpu);

done:
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
