/* The checks: each rank's dw against a reference made from the global data, and rank 0's
 * recompute of the whole batch on one rank, against which every rank's y and dx rows are
 * compared bit for bit. */
#include "demo.h"

#include "demo_comm.h"
#include "demo_data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { TAG_Y = 101, TAG_DX = 102 };

int64_t demo_count_differences(const void *a, const void *b, int64_t count, size_t size) {
    if (count == 0 || memcmp(a, b, (size_t)count * size) == 0) return 0;
    int64_t d = 0;
    for (int64_t i = 0; i < count; i++)
        d += memcmp((const char *)a + (size_t)i * size, (const char *)b + (size_t)i * size, size) !=
             0;
    return d;
}

/* dw is this rank's contribution (SPEC 1), so its reference is cake_cpu_backward on this rank's
 * rows with pools filled from the global data by the demo (SPEC 2), not from the exchange. */
void demo_check_dw(demo_run *run) {
    const double t0 = MPI_Wtime();
    cake_plan *plan = NULL;
    cake_status status = cake_plan_create(run->partition, run->rank, &plan);
    if (status != CAKE_SUCCESS) demo_die(run, "cake_plan_create", status);
    const int64_t pool_rows = cake_plan_pool_rows(plan), count = cake_plan_num_fragments(plan);
    cake_bf16 *history[DEMO_MAX_TENSORS], *future[DEMO_MAX_TENSORS];
    float *dw[DEMO_MAX_TENSORS];
    for (int i = 0; i < run->n; i++) {
        const int64_t C = run->channels[i];
        history[i] = demo_alloc(run, 2 * pool_rows * C, "history pool");
        future[i] = demo_alloc(run, 2 * pool_rows * C, "future pool");
        dw[i] = demo_alloc(run, 16 * C, "dw");
        demo_fill_pool(run->opt.seed, i, DEMO_FIELD_X, run->fragments, count, C, history[i]);
        demo_fill_pool(run->opt.seed, i, DEMO_FIELD_DY, run->fragments, count, C, future[i]);
    }
    const cake_cpu_options cpu = {run->threads, CAKE_CPU_ISA_AUTO};
    /* dx goes to the spare buffers of later iterations: only dw is compared here */
    status = cake_cpu_backward(plan, run->n, run->channels, (const cake_bf16 *const *)run->x,
                               (const float *const *)run->w, NULL,
                                   (const cake_bf16 *const *)history,
                               (const cake_bf16 *const *)run->dy,
                               (const cake_bf16 *const *)future, run->dx[1], dw, &cpu);
    if (status != CAKE_SUCCESS) demo_die(run, "cake_cpu_backward (dw reference)", status);
    for (int i = 0; i < run->n; i++) {
        run->stats.dw_differences +=
            demo_count_differences(run->dw[0][i], dw[i], 4 * run->channels[i], sizeof(float));
        free(history[i]);
        free(future[i]);
        free(dw[i]);
    }
    cake_plan_destroy(plan);
    run->reference_time = MPI_Wtime() - t0;
}

/* Rank 0: the whole batch through the single-rank API, timed. Returns y, dx (per tensor) and dw
 * flattened over tensors. */
static void single_rank(demo_run *run, cake_bf16 **y, cake_bf16 **dx, float *dw_all) {
    const int64_t T = run->opt.tokens;
    cake_bf16 *x[DEMO_MAX_TENSORS], *dy[DEMO_MAX_TENSORS];
    float *dw[DEMO_MAX_TENSORS];
    demo_progress(run, "single-rank run on rank 0: making the whole batch");
    double t = MPI_Wtime();
    int64_t offset = 0; /* of tensor i's dw in dw_all */
    for (int i = 0; i < run->n; offset += 4 * run->channels[i], i++) {
        const int64_t C = run->channels[i];
        x[i] = demo_alloc(run, 2 * T * C, "global x");
        dy[i] = demo_alloc(run, 2 * T * C, "global dy");
        y[i] = demo_alloc(run, 2 * T * C, "global y");
        dx[i] = demo_alloc(run, 2 * T * C, "global dx");
        dw[i] = dw_all + offset;
        demo_fill_rows(run->opt.seed, i, DEMO_FIELD_X, 0, T, C, x[i]);
        demo_fill_rows(run->opt.seed, i, DEMO_FIELD_DY, 0, T, C, dy[i]);
        memset(y[i], 0, (size_t)(2 * T * C)); /* page faults belong to no timed phase */
        memset(dx[i], 0, (size_t)(2 * T * C));
    }
    run->single_generate_time = MPI_Wtime() - t;
    demo_progress(run, "single-rank run on rank 0: forward and backward");
    const cake_cpu_options cpu = {run->threads, CAKE_CPU_ISA_AUTO};
    t = MPI_Wtime();
    cake_status status = cake_cpu_forward_single_rank(
        run->cu_seqlens, run->num_seqs, run->n, run->channels, (const cake_bf16 *const *)x,
        (const float *const *)run->w, NULL, y, &cpu);
    run->single_forward_time = MPI_Wtime() - t;
    if (status != CAKE_SUCCESS) demo_die(run, "cake_cpu_forward_single_rank", status);
    t = MPI_Wtime();
    status = cake_cpu_backward_single_rank(
        run->cu_seqlens, run->num_seqs, run->n, run->channels, (const cake_bf16 *const *)x,
        (const float *const *)run->w, NULL, (const cake_bf16 *const *)dy, dx, dw, &cpu);
    run->single_backward_time = MPI_Wtime() - t;
    if (status != CAKE_SUCCESS) demo_die(run, "cake_cpu_backward_single_rank", status);
    for (int i = 0; i < run->n; i++) {
        free(x[i]);
        free(dy[i]);
    }
}

/* Elements of rank r's local rows `got` (of one tensor) that differ from the global `want`. */
static int64_t compare_rows(const demo_run *run, int r, const cake_bf16 *got,
                            const cake_bf16 *want, int64_t C) {
    int64_t d = 0;
    for (int side = 0; side < 2; side++) {
        const cake_range g = run->ranges.ranges[2 * r + side];
        d += demo_count_differences(got, want + g.start * C, (g.end - g.start) * C,
                                    sizeof(cake_bf16));
        got += (g.end - g.start) * C;
    }
    return d;
}

void demo_check_single_rank(demo_run *run) {
    float *dw_all = NULL, *dw_ranks = NULL;
    int64_t dw_count = 0;
    for (int i = 0; i < run->n; i++) dw_count += 4 * run->channels[i];
    float *dw_mine = demo_alloc(run, 4 * dw_count, "dw");
    int64_t offset = 0;
    for (int i = 0; i < run->n; offset += 4 * run->channels[i], i++)
        memcpy(dw_mine + offset, run->dw[0][i], sizeof(float) * 4 * (size_t)run->channels[i]);
    if (run->rank == 0)
        dw_ranks = demo_alloc(run, 4 * dw_count * run->num_ranks, "dw of all ranks");
    MPI_Gather(dw_mine, (int)dw_count, MPI_FLOAT, dw_ranks, (int)dw_count, MPI_FLOAT, 0, run->comm);
    free(dw_mine);

    if (run->rank != 0) {
        demo_quiet_barrier(run->comm); /* until rank 0 has its reference */
        for (int i = 0; i < run->n; i++) {
            const int64_t bytes = 2 * run->local_rows * run->channels[i];
            demo_send_bytes(run->y[0][i], bytes, 0, TAG_Y, run->comm);
            demo_send_bytes(run->dx[0][i], bytes, 0, TAG_DX, run->comm);
        }
        return;
    }
    cake_bf16 *y[DEMO_MAX_TENSORS], *dx[DEMO_MAX_TENSORS];
    dw_all = demo_alloc(run, 4 * dw_count, "single-rank dw");
    single_rank(run, y, dx, dw_all);
    demo_quiet_barrier(run->comm);
    const double t = MPI_Wtime();
    int64_t max_rows = 0, max_channels = 0;
    for (int r = 0; r < run->num_ranks; r++)
        if (demo_ranges_local_rows(&run->ranges, r) > max_rows)
            max_rows = demo_ranges_local_rows(&run->ranges, r);
    for (int i = 0; i < run->n; i++)
        if (run->channels[i] > max_channels) max_channels = run->channels[i];
    cake_bf16 *got = demo_alloc(run, 2 * max_rows * max_channels, "received rows");
    for (int r = 0; r < run->num_ranks; r++) {
        const int64_t rows = demo_ranges_local_rows(&run->ranges, r);
        for (int i = 0; i < run->n; i++) {
            const int64_t C = run->channels[i];
            if (r != 0) demo_recv_bytes(got, 2 * rows * C, r, TAG_Y, run->comm);
            run->y_differences += compare_rows(run, r, r ? got : run->y[0][i], y[i], C);
            if (r != 0) demo_recv_bytes(got, 2 * rows * C, r, TAG_DX, run->comm);
            run->dx_differences += compare_rows(run, r, r ? got : run->dx[0][i], dx[i], C);
        }
    }
    for (int i = 0; i < run->n; i++) {
        run->elements += run->opt.tokens * run->channels[i];
        free(y[i]);
        free(dx[i]);
    }
    free(got);
    /* The sum over ranks, in rank order, against the P = 1 dw: close, not bitwise (the blocks
     * of 256 rows fall elsewhere). */
    for (int64_t k = 0; k < dw_count; k++) {
        double sum = 0.0;
        for (int r = 0; r < run->num_ranks; r++) sum += dw_ranks[r * dw_count + k];
        const double diff = fabs(sum - (double)dw_all[k]);
        if (diff > run->dw_sum_max_difference) run->dw_sum_max_difference = diff;
        if (fabs((double)dw_all[k]) > run->dw_max_magnitude)
            run->dw_max_magnitude = fabs((double)dw_all[k]);
    }
    free(dw_all);
    free(dw_ranks);
    run->compare_time = MPI_Wtime() - t;
}

/* Rank 0 gets every rank's counters and the slowest rank's times. */
void demo_collect(demo_run *run) {
    if (run->rank == 0)
        run->all_stats =
            demo_alloc(run, (int64_t)sizeof(demo_rank_stats) * run->num_ranks, "stats");
    MPI_Gather(&run->stats, DEMO_STATS_FIELDS, MPI_INT64_T, run->all_stats, DEMO_STATS_FIELDS,
               MPI_INT64_T, 0, run->comm);
    const int K = run->opt.iterations;
    double *in = demo_alloc(run, (int64_t)sizeof(double) * (2 * K + 2), "times");
    double *out = demo_alloc(run, (int64_t)sizeof(double) * (2 * K + 2), "times");
    memcpy(in, run->forward_times, sizeof(double) * (size_t)K);
    memcpy(in + K, run->backward_times, sizeof(double) * (size_t)K);
    in[2 * K] = run->generate_time;
    in[2 * K + 1] = run->reference_time;
    MPI_Reduce(in, out, 2 * K + 2, MPI_DOUBLE, MPI_MAX, 0, run->comm);
    if (run->rank == 0) {
        memcpy(run->forward_times, out, sizeof(double) * (size_t)K);
        memcpy(run->backward_times, out + K, sizeof(double) * (size_t)K);
        run->generate_time = out[2 * K];
        run->reference_time = out[2 * K + 1];
    }
    free(in);
    free(out);
}
