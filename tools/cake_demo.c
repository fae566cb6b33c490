/* cake-demo: the main job. Under mpirun, every rank runs cake's context-parallel forward and
 * backward on its share of a synthetic packed batch shaped like a KDA layer's q, k, v short
 * convolutions; rank 0 then recomputes the whole batch on one rank and reports the exchange,
 * the time per phase and whether y, dx and dw agree bit for bit. See --help. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* nanosleep, sysconf under -std=c11 */
#endif
#include "demo.h"

#include "cake_mpi.h"
#include "demo_comm.h"
#include "demo_data.h"
#include "demo_report.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Noreturn void demo_die(const demo_run *run, const char *what, cake_status status) {
    fprintf(stderr, "cake-demo: rank %d: %s failed: %s (%s)\n", run->rank, what,
            cake_last_error()[0] ? cake_last_error() : "no message", cake_status_string(status));
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    exit(3); /* not reached: MPI_Abort does not return */
}

_Noreturn void demo_out_of_memory(const demo_run *run, const char *what) {
    fprintf(stderr, "cake-demo: rank %d: out of memory for %s\n", run->rank, what);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    exit(3);
}

void *demo_alloc(const demo_run *run, int64_t bytes, const char *what) {
    void *p = malloc((size_t)(bytes > 0 ? bytes : 1));
    if (!p) demo_out_of_memory(run, what);
    return p;
}

void demo_progress(const demo_run *run, const char *format, ...) {
    const double elapsed = MPI_Wtime() - run->start;
    if (run->rank != 0 || elapsed < 2.0) return;
    va_list args;
    va_start(args, format);
    printf("cake-demo: %5.1f s: ", elapsed); /* stdout: mpirun keeps it in order with the report */
    vprintf(format, args);
    printf("\n");
    fflush(stdout);
    va_end(args);
}

/* Threads per rank: the node's processors shared by the ranks on it, so oversubscribed runs do
 * not multiply threads past the cores. */
static int default_threads(MPI_Comm comm) {
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int per_rank = (int)((cores > 0 ? cores : 1) / demo_node_ranks(comm));
    return per_rank > 0 ? per_rank : 1;
}

/* Sequences, both views of the partition (the demo's from SPEC 2 and the library's, which must
 * agree), and the context on a duplicate communicator. */
static void setup(demo_run *run) {
    const demo_options *o = &run->opt;
    run->num_seqs = demo_make_seqlens(o->tokens, o->mean_length, o->seed, &run->cu_seqlens);
    if (run->num_seqs < 0 || demo_ranges_create(o->partition, o->tokens, run->num_ranks, o->seed,
                                                &run->ranges) != 0)
        demo_out_of_memory(run, "the batch layout");
    cake_status status = demo_partition_create(o->partition, &run->ranges, run->cu_seqlens,
                                               run->num_seqs, &run->partition);
    if (status != CAKE_SUCCESS) demo_die(run, "creating the partition", status);
    MPI_Comm_dup(run->comm, &run->cake_comm);
    const cake_ctx_options options = {o->check, o->timeout, {run->threads, CAKE_CPU_ISA_AUTO}};
    status = cake_ctx_create_mpi(run->cake_comm, run->partition, &options, &run->ctx);
    if (status != CAKE_SUCCESS) demo_die(run, "cake_ctx_create_mpi", status);
    const int64_t count = demo_fragments(&run->ranges, run->rank, run->cu_seqlens, run->num_seqs,
                                         &run->fragments);
    if (count < 0) demo_out_of_memory(run, "the fragments");
    const char *mismatch = demo_compare_fragments(cake_ctx_plan(run->ctx), run->fragments, count);
    run->local_rows = demo_ranges_local_rows(&run->ranges, run->rank);
    if (mismatch || cake_ctx_local_rows(run->ctx) != run->local_rows) {
        fprintf(stderr, "cake-demo: rank %d: the library's %s partition is not SPEC 2's: %s\n",
                run->rank, demo_partition_name(o->partition),
                mismatch ? mismatch : "another number of local rows");
        demo_die(run, "checking the partition", CAKE_ERROR_INTERNAL);
    }
    run->stats.local_rows = run->local_rows;
    run->stats.fragments = count;
    run->pool_rows = cake_ctx_pool_rows(run->ctx);
}

static void make_inputs(demo_run *run) {
    const double t = MPI_Wtime();
    const int64_t S = run->local_rows;
    for (int i = 0; i < run->n; i++) {
        const int64_t C = run->channels[i], bytes = 2 * S * C;
        run->x[i] = demo_alloc(run, bytes, "x");
        run->dy[i] = demo_alloc(run, bytes, "dy");
        run->history[i] = demo_alloc(run, 2 * run->pool_rows * C, "history pool");
        run->w[i] = demo_alloc(run, 16 * C, "w");
        for (int set = 0; set < 2; set++) {
            run->y[set][i] = demo_alloc(run, bytes, "y");
            run->dx[set][i] = demo_alloc(run, bytes, "dx");
            run->dw[set][i] = demo_alloc(run, 16 * C, "dw");
        }
        demo_fill_local(run->opt.seed, i, DEMO_FIELD_X, &run->ranges, run->rank, C, run->x[i]);
        demo_fill_local(run->opt.seed, i, DEMO_FIELD_DY, &run->ranges, run->rank, C, run->dy[i]);
        demo_fill_weights(run->opt.seed, i, C, run->w[i]);
        /* Touch the outputs now: first-touch page faults would otherwise land in the timings. */
        memset(run->history[i], 0, (size_t)(2 * run->pool_rows * C));
        for (int set = 0; set < 2; set++) {
            memset(run->y[set][i], 0, (size_t)bytes);
            memset(run->dx[set][i], 0, (size_t)bytes);
        }
    }
    run->forward_times = demo_alloc(run, (int64_t)sizeof(double) * run->opt.iterations, "times");
    run->backward_times = demo_alloc(run, (int64_t)sizeof(double) * run->opt.iterations, "times");
    run->generate_time = MPI_Wtime() - t;
}

static void teardown(demo_run *run) {
    for (int i = 0; i < run->n; i++) {
        free(run->x[i]);
        free(run->dy[i]);
        free(run->history[i]);
        free(run->w[i]);
        for (int set = 0; set < 2; set++) {
            free(run->y[set][i]);
            free(run->dx[set][i]);
            free(run->dw[set][i]);
        }
    }
    free(run->forward_times);
    free(run->backward_times);
    free(run->all_stats);
    free(run->fragments);
    free(run->cu_seqlens);
    demo_ranges_free(&run->ranges);
    cake_ctx_destroy(run->ctx);
    cake_partition_destroy(run->partition);
    MPI_Comm_free(&run->cake_comm);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    static demo_run run; /* large; zero-initialised */
    run.comm = MPI_COMM_WORLD;
    run.start = MPI_Wtime();
    MPI_Comm_rank(run.comm, &run.rank);
    MPI_Comm_size(run.comm, &run.num_ranks);
    char message[256];
    const demo_parse_result parsed =
        demo_parse_options(argc, argv, &run.opt, message, sizeof message);
    if (parsed != DEMO_PARSE_RUN) { /* every rank parsed the same argv, so all leave here */
        if (run.rank == 0 && parsed == DEMO_PARSE_HELP) demo_print_usage(stdout, argv[0]);
        if (run.rank == 0 && parsed == DEMO_PARSE_ERROR)
            fprintf(stderr, "cake-demo: %s\n", message);
        MPI_Finalize();
        return parsed == DEMO_PARSE_HELP ? 0 : 2;
    }
    run.n = run.opt.num_tensors;
    run.channels = run.opt.channels;
    run.threads = run.opt.threads > 0 ? run.opt.threads : default_threads(run.comm);

    setup(&run);
    make_inputs(&run);
    demo_run_cp(&run);
    demo_progress(&run, "checking dw on every rank");
    demo_check_dw(&run);
    demo_check_single_rank(&run);
    demo_collect(&run);
    int ok = 1;
    if (run.rank == 0) ok = demo_report(&run);
    MPI_Bcast(&ok, 1, MPI_INT, 0, run.comm);
    teardown(&run);
    MPI_Finalize();
    return ok ? 0 : 1;
}
