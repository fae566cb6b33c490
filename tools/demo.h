/* State shared by cake-demo's phases: the batch, this rank's buffers, and the numbers the
 * report needs. */
#ifndef CAKE_DEMO_H
#define CAKE_DEMO_H

#include "cake.h"
#include "demo_layout.h"
#include "demo_options.h"

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

/* One rank's numbers, all int64 so one MPI_Gather brings every rank's to rank 0. */
typedef struct demo_rank_stats {
    int64_t local_rows, fragments;
    /* halo rows per tensor of one call, from cake_ctx_halo_rows_from / _to */
    int64_t history_in, history_out, future_in, future_out;
    /* per call, from cake_ctx_get_stats deltas (all tensors) */
    int64_t forward_bytes_in, forward_bytes_out, backward_bytes_in, backward_bytes_out;
    int64_t forward_peers, backward_peers; /* messages sent + received per call */
    /* over all iterations */
    int64_t forward_exchanges, backward_exchanges, check_rounds;
    int64_t stats_disagree;     /* 1: get_stats deltas disagree with halo_rows_from / _to */
    int64_t repeat_differences; /* most elements of y, dx, dw differing from iteration 1 */
    int64_t dw_differences;     /* elements of dw differing from this rank's reference */
} demo_rank_stats;

#define DEMO_STATS_FIELDS ((int)(sizeof(demo_rank_stats) / sizeof(int64_t)))

typedef struct demo_run {
    demo_options opt;
    MPI_Comm comm; /* the demo's own messages; cake gets a duplicate */
    int rank, num_ranks, threads;
    double start; /* MPI_Wtime at start, for progress lines */

    int64_t num_seqs, *cu_seqlens;
    demo_ranges ranges;
    demo_fragment *fragments;
    cake_partition *partition;
    MPI_Comm cake_comm;
    cake_ctx *ctx;

    /* this rank's buffers, per tensor; [0] is iteration 1's output, [1] later iterations' */
    int n;
    const int64_t *channels;
    int64_t local_rows, pool_rows;
    cake_bf16 *x[DEMO_MAX_TENSORS], *dy[DEMO_MAX_TENSORS], *history[DEMO_MAX_TENSORS];
    cake_bf16 *y[2][DEMO_MAX_TENSORS], *dx[2][DEMO_MAX_TENSORS];
    float *w[DEMO_MAX_TENSORS], *dw[2][DEMO_MAX_TENSORS];

    demo_rank_stats stats;
    /* times in seconds: this rank's (then, on rank 0 after demo_collect, max over ranks) */
    double *forward_times, *backward_times; /* per iteration */
    double generate_time, reference_time;   /* inputs; the per-rank dw reference */

    /* rank 0 only: results of the comparison with the single-rank run */
    demo_rank_stats *all_stats; /* per rank */
    double single_generate_time, single_forward_time, single_backward_time, compare_time;
    int64_t y_differences, dx_differences, elements;
    double dw_sum_max_difference, dw_max_magnitude;
} demo_run;

/* Prints why a call failed on this rank, then ends every rank with status 3 (a collective
 * may already be waiting on this rank, so nothing gentler is safe). */
_Noreturn void demo_die(const demo_run *run, const char *what, cake_status status);
/* Reports that `what` did not fit in memory and ends every rank with status 3. */
_Noreturn void demo_out_of_memory(const demo_run *run, const char *what);
/* malloc that dies on failure; never returns NULL (asks for at least one byte). */
void *demo_alloc(const demo_run *run, int64_t bytes, const char *what);
/* On rank 0, once the run has taken more than two seconds: one progress line. */
void demo_progress(const demo_run *run, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/* Elements of `count` elements of `size` bytes whose bits differ (memcmp; 0 when count is 0). */
int64_t demo_count_differences(const void *a, const void *b, int64_t count, size_t size);

/* Phases, in order (demo_cp.c, demo_check.c). Each is called by every rank. */
void demo_run_cp(demo_run *run);
void demo_check_dw(demo_run *run);
void demo_check_single_rank(demo_run *run);
void demo_collect(demo_run *run);

#endif
