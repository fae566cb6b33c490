/* The context-parallel part: every rank runs cake_forward_multi then cake_backward_multi on its
 * rows, K times, timing each phase and reading the context's counters around each call. */
#include "demo.h"

#include <string.h>

/* Iteration 2 onward must give iteration 1's bits (SPEC 3: bitwise run to run). */
static int64_t repeat_differences(const demo_run *run) {
    int64_t d = 0;
    for (int i = 0; i < run->n; i++) {
        const int64_t elems = run->local_rows * run->channels[i];
        d += demo_count_differences(run->y[0][i], run->y[1][i], elems, sizeof(cake_bf16));
        d += demo_count_differences(run->dx[0][i], run->dx[1][i], elems, sizeof(cake_bf16));
        d += demo_count_differences(run->dw[0][i], run->dw[1][i], 4 * run->channels[i],
                                    sizeof(float));
    }
    return d;
}

/* Halo rows per tensor of one call, summed over peers. */
static void halo_rows(demo_run *run) {
    demo_rank_stats *s = &run->stats;
    for (int p = 0; p < run->num_ranks; p++) {
        s->history_in += cake_ctx_halo_rows_from(run->ctx, p, 0);
        s->history_out += cake_ctx_halo_rows_to(run->ctx, p, 0);
        s->future_in += cake_ctx_halo_rows_from(run->ctx, p, 1);
        s->future_out += cake_ctx_halo_rows_to(run->ctx, p, 1);
    }
}

static void get_stats(const demo_run *run, cake_ctx_stats *out) {
    const cake_status status = cake_ctx_get_stats(run->ctx, out);
    if (status != CAKE_SUCCESS) demo_die(run, "cake_ctx_get_stats", status);
}

/* Counters of one direction over all iterations, turned into per-call numbers; they must agree
 * with the halo lists (rows per tensor x tensors, 2 bytes per channel). */
static void record(demo_run *run, const cake_ctx_stats *d, int backward) {
    demo_rank_stats *s = &run->stats;
    const int64_t K = run->opt.iterations;
    int64_t total_channels = 0;
    for (int i = 0; i < run->n; i++) total_channels += run->channels[i];
    const int64_t in = backward ? s->future_in : s->history_in;
    const int64_t out = backward ? s->future_out : s->history_out;
    if (d->rows_received != K * run->n * in || d->rows_sent != K * run->n * out ||
        d->bytes_received != K * in * total_channels * 2 ||
        d->bytes_sent != K * out * total_channels * 2)
        s->stats_disagree = 1;
    *(backward ? &s->backward_bytes_in : &s->forward_bytes_in) = d->bytes_received / K;
    *(backward ? &s->backward_bytes_out : &s->forward_bytes_out) = d->bytes_sent / K;
    *(backward ? &s->backward_peers : &s->forward_peers) =
        (d->messages_sent + d->messages_received) / K;
    *(backward ? &s->backward_exchanges : &s->forward_exchanges) = d->exchanges;
    s->check_rounds += d->check_rounds;
}

static void add_delta(cake_ctx_stats *sum, const cake_ctx_stats *a, const cake_ctx_stats *b) {
    /* the struct is all int64_t: add field by field through an array view */
    int64_t *s = (int64_t *)sum;
    const int64_t *x = (const int64_t *)a, *y = (const int64_t *)b;
    for (size_t k = 0; k < sizeof *sum / sizeof(int64_t); k++) s[k] += y[k] - x[k];
}

void demo_run_cp(demo_run *run) {
    halo_rows(run);
    cake_ctx_stats forward = {0}, backward = {0}, s0, s1, s2;
    for (int it = 0; it < run->opt.iterations; it++) {
        const int set = it == 0 ? 0 : 1;
        MPI_Barrier(run->comm);
        get_stats(run, &s0);
        double t = MPI_Wtime();
        cake_status status = cake_forward_multi(
            run->ctx, run->n, run->channels, (const cake_bf16 *const *)run->x,
            (const float *const *)run->w, NULL, run->y[set], run->history, NULL);
        run->forward_times[it] = MPI_Wtime() - t;
        if (status != CAKE_SUCCESS) demo_die(run, "cake_forward_multi", status);
        get_stats(run, &s1);
        /* so the backward's time is its own, not the forward's stragglers' */
        MPI_Barrier(run->comm);
        t = MPI_Wtime();
        status = cake_backward_multi(run->ctx, run->n, run->channels,
                                     (const cake_bf16 *const *)run->x,
                                         (const float *const *)run->w, NULL,
                                     (const cake_bf16 *const *)run->history,
                                     (const cake_bf16 *const *)run->dy, run->dx[set], run->dw[set]);
        run->backward_times[it] = MPI_Wtime() - t;
        if (status != CAKE_SUCCESS) demo_die(run, "cake_backward_multi", status);
        get_stats(run, &s2);
        add_delta(&forward, &s0, &s1);
        add_delta(&backward, &s1, &s2);
        if (set == 1) {
            const int64_t d = repeat_differences(run);
            if (d > run->stats.repeat_differences) run->stats.repeat_differences = d;
        }
        demo_progress(run, "iteration %d/%d: forward %.3f s, backward %.3f s (rank 0)", it + 1,
                      run->opt.iterations, run->forward_times[it], run->backward_times[it]);
    }
    record(run, &forward, 0);
    record(run, &backward, 1);
}
