/* CPU benchmark: forward and backward of n tensors over a packed batch on one rank, as GB/s
 * (forward: x read + y written; backward: x and dy read + dx written; the small pools and
 * weights are not counted) beside the memcpy bandwidth measured in the same run. The row arrays
 * are 64-byte aligned, as torch's CPU allocator gives tensors (bench_alloc_aligned): with
 * malloc's 16-byte offset every 64-byte vector access of the kernels spans two cache lines. */
#include "bench_common.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct config {
    int64_t rows, channels, mean_length;
    int tensors, repeats;
    int threads[8], num_thread_counts;
    cake_cpu_isa isa;
    int bias;                  /* --variant bias or bias+silu */
    cake_activation activation; /* --variant silu or bias+silu */
} config;

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--rows S] [--channels C] [--tensors N] [--mean-length L]\n"
            "          [--threads 1,2] [--repeats R] [--isa auto|generic|avx2|avx512|avx512bf16]\n"
            "          [--variant plain|bias|silu|bias+silu]\n",
            argv0);
}

static int parse(int argc, char **argv, config *cfg) {
    *cfg = (config){32768, 4096, 4096, 3, 5, {1, 2}, 2, CAKE_CPU_ISA_AUTO, 0, CAKE_ACTIVATION_NONE};
    static const struct option options[] = {
        {"rows", required_argument, 0, 's'},     {"channels", required_argument, 0, 'c'},
        {"tensors", required_argument, 0, 'n'},  {"mean-length", required_argument, 0, 'l'},
        {"threads", required_argument, 0, 't'},  {"repeats", required_argument, 0, 'r'},
        {"isa", required_argument, 0, 'i'},      {"variant", required_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "s:c:n:l:t:r:i:v:h", options, NULL)) != -1) {
        switch (opt) {
        case 's': cfg->rows = atoll(optarg); break;
        case 'c': cfg->channels = atoll(optarg); break;
        case 'n': cfg->tensors = atoi(optarg); break;
        case 'l': cfg->mean_length = atoll(optarg); break;
        case 'r': cfg->repeats = atoi(optarg); break;
        case 't': {
            cfg->num_thread_counts = 0;
            for (char *p = optarg; *p && cfg->num_thread_counts < 8;) {
                cfg->threads[cfg->num_thread_counts++] = (int)strtol(p, &p, 10);
                if (*p == ',') p++;
            }
            break;
        }
        case 'i': {
            int found = 0;
            for (int k = 0; k < CAKE_CPU_ISA_COUNT; k++)
                if (!strcmp(optarg, cake_cpu_isa_name((cake_cpu_isa)k))) {
                    cfg->isa = (cake_cpu_isa)k;
                    found = 1;
                }
            if (!found) return -1;
            break;
        }
        case 'v':
            cfg->bias = !strcmp(optarg, "bias") || !strcmp(optarg, "bias+silu");
            cfg->activation = !strcmp(optarg, "silu") || !strcmp(optarg, "bias+silu")
                                  ? CAKE_ACTIVATION_SILU : CAKE_ACTIVATION_NONE;
            if (!cfg->bias && cfg->activation == CAKE_ACTIVATION_NONE && strcmp(optarg, "plain"))
                return -1;
            break;
        default: return -1;
        }
    }
    if (cfg->rows < 1 || cfg->channels < 8 || cfg->channels % 8 || cfg->tensors < 1 ||
        cfg->tensors > 16 || cfg->mean_length < 1 || cfg->repeats < 1 || cfg->num_thread_counts < 1)
        return -1;
    return 0;
}

int main(int argc, char **argv) {
    config cfg;
    if (parse(argc, argv, &cfg) != 0) {
        usage(argv[0]);
        return 2;
    }
    const int n = cfg.tensors;
    const int64_t S = cfg.rows, C = cfg.channels;
    int64_t *cu = malloc(sizeof(int64_t) * (size_t)(S + 1));
    const int64_t num_seqs = bench_random_cu_seqlens(S, cfg.mean_length, 7, cu);
    int64_t channels[16];
    cake_bf16 *x[16], *y[16], *dy[16], *dx[16];
    float *w[16], *dw[16], *bias[16], *dbias[16];
    for (int i = 0; i < n; i++) {
        channels[i] = C;
        x[i] = bench_alloc_aligned(sizeof(cake_bf16) * (size_t)(S * C));
        y[i] = bench_alloc_aligned(sizeof(cake_bf16) * (size_t)(S * C));
        dy[i] = bench_alloc_aligned(sizeof(cake_bf16) * (size_t)(S * C));
        dx[i] = bench_alloc_aligned(sizeof(cake_bf16) * (size_t)(S * C));
        w[i] = malloc(sizeof(float) * (size_t)(4 * C));
        dw[i] = malloc(sizeof(float) * (size_t)(4 * C));
        bias[i] = malloc(sizeof(float) * (size_t)C);
        dbias[i] = malloc(sizeof(float) * (size_t)C);
        if (!x[i] || !y[i] || !dy[i] || !dx[i] || !w[i] || !dw[i] || !bias[i] || !dbias[i]) {
            fprintf(stderr, "bench_cpu: out of memory\n");
            return 1;
        }
        bench_fill_bf16(x[i], S * C, 100 + (uint64_t)i);
        bench_fill_bf16(dy[i], S * C, 200 + (uint64_t)i);
        bench_fill_bf16(y[i], S * C, 300 + (uint64_t)i); /* touch the pages */
        bench_fill_bf16(dx[i], S * C, 400 + (uint64_t)i);
        bench_fill_f32(w[i], 4 * C, 500 + (uint64_t)i);
        bench_fill_f32(bias[i], C, 600 + (uint64_t)i);
    }
    const cake_conv_params params = {cfg.activation,
                                     cfg.bias ? (const float *const *)bias : NULL,
                                     cfg.bias ? dbias : NULL};
    const double bytes_fwd = 2.0 * (double)n * (double)S * (double)C * 2.0;
    const double bytes_bwd = 3.0 * (double)n * (double)S * (double)C * 2.0;
    printf("cake CPU benchmark: %d tensors x [%lld, %lld] bf16, %lld sequences (mean length %lld), "
           "isa %s, %s%s\n", n, (long long)S, (long long)C, (long long)num_seqs,
           (long long)cfg.mean_length, cake_cpu_isa_name(cake_cpu_isa_resolve(cfg.isa)),
           cfg.bias ? "bias" : "no bias",
           cfg.activation == CAKE_ACTIVATION_SILU ? ", SiLU" : ", no activation");
    printf("%-8s %-9s %10s %10s %12s %10s\n", "threads", "direction", "ms", "GB/s", "memcpy GB/s",
           "% memcpy");
    for (int ti = 0; ti < cfg.num_thread_counts; ti++) {
        const cake_cpu_options opts = {cfg.threads[ti], cfg.isa};
        const double copy = bench_memcpy_bandwidth((size_t)(S * C * 2), cfg.threads[ti], cfg.repeats);
        for (int dir = 0; dir < 2; dir++) {
            double best = 1e30;
            for (int r = 0; r <= cfg.repeats; r++) { /* the first run warms up */
                const double t0 = bench_now();
                cake_status st = dir == 0
                    ? cake_cpu_forward_single_rank(cu, num_seqs, n, channels,
                                                   (const cake_bf16 *const *)x,
                                                   (const float *const *)w, &params, y, &opts)
                    : cake_cpu_backward_single_rank(cu, num_seqs, n, channels,
                                                    (const cake_bf16 *const *)x,
                                                    (const float *const *)w, &params,
                                                    (const cake_bf16 *const *)dy, dx, dw, &opts);
                const double dt = bench_now() - t0;
                if (st != CAKE_SUCCESS) {
                    fprintf(stderr, "bench_cpu: %s\n", cake_last_error());
                    return 1;
                }
                if (r > 0 && dt < best) best = dt;
            }
            const double bytes = dir == 0 ? bytes_fwd : bytes_bwd;
            printf("%-8d %-9s %10.2f %10.2f %12.2f %9.1f%%\n", cfg.threads[ti],
                   dir == 0 ? "forward" : "backward", best * 1e3, bytes / best / 1e9, copy / 1e9,
                   100.0 * (bytes / best) / copy);
        }
    }
    for (int i = 0; i < n; i++) {
        free(x[i]); free(y[i]); free(dy[i]); free(dx[i]); free(w[i]); free(dw[i]);
        free(bias[i]); free(dbias[i]);
    }
    free(cu);
    return 0;
}
