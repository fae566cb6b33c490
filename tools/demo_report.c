#include "demo_report.h"

#include <stdio.h>
#include <stdlib.h>

static const char *bytes_text(int64_t bytes, char *buf, size_t size) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, size, "%lld B", (long long)bytes);
    else snprintf(buf, size, "%.1f %s", v, units[u]);
    return buf;
}

static const char *time_text(double seconds, char *buf, size_t size) {
    if (seconds < 1e-3) snprintf(buf, size, "%.0f us", 1e6 * seconds);
    else if (seconds < 1.0) snprintf(buf, size, "%.1f ms", 1e3 * seconds);
    else snprintf(buf, size, "%.2f s", seconds);
    return buf;
}

static int compare_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of K values (the lower middle one when K is even: an observed time). */
static double median(const double *values, int K) {
    double *sorted = malloc(sizeof *sorted * (size_t)K);
    if (!sorted) return values[0];
    for (int i = 0; i < K; i++) sorted[i] = values[i];
    qsort(sorted, (size_t)K, sizeof *sorted, compare_double);
    const double m = sorted[(K - 1) / 2];
    free(sorted);
    return m;
}

static const char *best_isa(void) {
    return cake_cpu_isa_name(cake_cpu_isa_resolve(CAKE_CPU_ISA_AUTO));
}

static void header(const demo_run *run) {
    const demo_options *o = &run->opt;
    printf(
        "cake-demo: %d rank%s, %lld tokens in %lld sequence%s (mean length %lld), %d tensor%s of ",
        run->num_ranks, run->num_ranks == 1 ? "" : "s", (long long)o->tokens,
        (long long)run->num_seqs, run->num_seqs == 1 ? "" : "s", (long long)o->mean_length, run->n,
        run->n == 1 ? "" : "s");
    for (int i = 0; i < run->n; i++) printf("%s%lld", i ? "," : "", (long long)run->channels[i]);
    printf(" channels\n  partition %s, %d thread%s per rank (%s), seed %llu, %d iteration%s, "
           "check mode %s\n\n",
           demo_partition_name(o->partition), run->threads, run->threads == 1 ? "" : "s",
           best_isa(), (unsigned long long)o->seed, o->iterations, o->iterations == 1 ? "" : "s",
           o->check ? "on" : "off");
}

static const char *pair(int64_t a, int64_t b, char *buf, size_t size) {
    snprintf(buf, size, "%lld/%lld", (long long)a, (long long)b);
    return buf;
}

static void table(const demo_run *run) {
    printf("per rank, one call (halo rows: per tensor, in/out; bytes: all tensors)\n");
    printf("rank      rows  frags  history  future   forward in / out      backward in / out\n");
    int64_t sum[6] = {0};
    char p[2][48], b[4][32];
    for (int r = 0; r < run->num_ranks; r++) {
        const demo_rank_stats *s = &run->all_stats[r];
        printf("%4d %9lld %6lld %8s %7s   %10s / %-10s %10s / %s\n", r, (long long)s->local_rows,
               (long long)s->fragments, pair(s->history_in, s->history_out, p[0], sizeof p[0]),
               pair(s->future_in, s->future_out, p[1], sizeof p[1]),
               bytes_text(s->forward_bytes_in, b[0], sizeof b[0]),
               bytes_text(s->forward_bytes_out, b[1], sizeof b[1]),
               bytes_text(s->backward_bytes_in, b[2], sizeof b[2]),
               bytes_text(s->backward_bytes_out, b[3], sizeof b[3]));
        const int64_t v[6] = {s->local_rows, s->fragments, s->history_in, s->history_out,
                              s->future_in, s->future_out};
        for (int k = 0; k < 6; k++) sum[k] += v[k];
    }
    printf(" all %9lld %6lld %8s %7s\n\n", (long long)sum[0],
           (long long)sum[1], pair(sum[2], sum[3], p[0], sizeof p[0]),
           pair(sum[4], sum[5], p[1], sizeof p[1]));
}

/* Most exchanges per call on any rank, per direction; SPEC 4 allows one. */
static int exchanges(const demo_run *run) {
    int64_t fwd = 0, bwd = 0, peers_f = 0, peers_b = 0, checks = 0, disagree = 0;
    for (int r = 0; r < run->num_ranks; r++) {
        const demo_rank_stats *s = &run->all_stats[r];
        if (s->forward_exchanges > fwd) fwd = s->forward_exchanges;
        if (s->backward_exchanges > bwd) bwd = s->backward_exchanges;
        if (s->forward_peers > peers_f) peers_f = s->forward_peers;
        if (s->backward_peers > peers_b) peers_b = s->backward_peers;
        if (s->check_rounds > checks) checks = s->check_rounds;
        disagree += s->stats_disagree;
    }
    const double K = run->opt.iterations;
    printf("exchanges per call (most on any rank): forward %g, backward %g\n"
           "messages sent + received per call (most on any rank): forward %lld, backward %lld",
           (double)fwd / K, (double)bwd / K, (long long)peers_f, (long long)peers_b);
    if (run->opt.check) printf("; check rounds per call: %g", (double)checks / (2 * K));
    printf("\n");
    int ok = fwd <= run->opt.iterations && bwd <= run->opt.iterations;
    if (!ok)
        printf("  FAIL: more than one exchange per call in a direction (SPEC 4 promises one)\n");
    if (disagree) {
        printf("  FAIL: on %lld rank(s) cake_ctx_get_stats counts other rows or bytes than "
               "cake_ctx_halo_rows_from/to list\n", (long long)disagree);
        ok = 0;
    }
    printf("\n");
    return ok;
}

static void times(const demo_run *run) {
    char a[32], b[32], c[32];
    const int K = run->opt.iterations;
    printf("time per phase (slowest rank; context-parallel calls: median of %d iteration%s)\n", K,
           K == 1 ? "" : "s");
    printf("  inputs, each rank its own rows       %s\n",
           time_text(run->generate_time, a, sizeof a));
    printf("  forward, context parallel            %s\n",
           time_text(median(run->forward_times, K), a, sizeof a));
    printf("  backward, context parallel           %s\n",
           time_text(median(run->backward_times, K), a, sizeof a));
    printf("  dw reference, each rank              %s\n",
           time_text(run->reference_time, a, sizeof a));
    printf(
        "  single-rank run on rank 0            inputs and buffers %s, forward %s, backward %s\n",
        time_text(run->single_generate_time, a, sizeof a),
        time_text(run->single_forward_time, b, sizeof b),
        time_text(run->single_backward_time, c, sizeof c));
    printf("  gather and compare y, dx on rank 0   %s\n\n",
           time_text(run->compare_time, a, sizeof a));
}

static int verdicts(const demo_run *run) {
    int64_t dw_ranks = 0, dw_elems = 0, repeat = 0;
    for (int r = 0; r < run->num_ranks; r++) {
        dw_ranks += run->all_stats[r].dw_differences != 0;
        dw_elems += run->all_stats[r].dw_differences;
        if (run->all_stats[r].repeat_differences > repeat)
            repeat = run->all_stats[r].repeat_differences;
    }
    const char *names[2] = {"y: ", "dx:"};
    const int64_t diffs[2] = {run->y_differences, run->dx_differences};
    for (int k = 0; k < 2; k++) {
        if (diffs[k] == 0)
            printf("%s bitwise equal to the single-rank run (%lld elements)\n", names[k],
                   (long long)run->elements);
        else
            printf("%s DIFFERS from the single-rank run in %lld of %lld elements\n", names[k],
                   (long long)diffs[k], (long long)run->elements);
    }
    if (dw_ranks == 0)
        printf("dw: every rank bitwise equal to its reference (cake_cpu_backward on its rows, "
               "halo pools from the global data)\n");
    else
        printf("dw: DIFFERS from the reference on %lld rank(s), %lld element(s) in all\n",
               (long long)dw_ranks, (long long)dw_elems);
    if (run->opt.iterations > 1) {
        if (repeat == 0)
            printf("repeats: iterations 2..%d bitwise equal to iteration 1 on every rank\n",
                   run->opt.iterations);
        else
            printf("repeats: DIFFER from iteration 1 (up to %lld elements of y, dx, dw on one rank "
                   "in one iteration)\n", (long long)repeat);
    }
    printf("dw summed over ranks vs the single-rank dw: max |difference| %.3g, %.3g of max |dw|\n"
           "    (informational: not bitwise by design, the 256-row blocks fall elsewhere)\n",
           run->dw_sum_max_difference,
           run->dw_max_magnitude > 0 ? run->dw_sum_max_difference / run->dw_max_magnitude : 0.0);
    return run->y_differences == 0 && run->dx_differences == 0 && dw_ranks == 0 && repeat == 0;
}

int demo_report(const demo_run *run) {
    header(run);
    table(run);
    const int ok_exchanges = exchanges(run);
    times(run);
    const int ok = verdicts(run) && ok_exchanges;
    printf("\n%s\n", ok ? "PASS: y, dx and dw agree bit for bit"
                        : "FAIL: see the lines marked DIFFERS or FAIL above");
    fflush(stdout);
    return ok;
}
