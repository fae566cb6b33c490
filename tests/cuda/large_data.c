/* Hash-defined data for the large-tensor test (see large_data.h). */
#include "large_data.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void lg_rows_init(lg_rows *rows, const cake_range *ranges, int64_t num_ranges) {
    memset(rows, 0, sizeof *rows);
    rows->num_ranges = num_ranges;
    for (int64_t q = 0; q < num_ranges; q++) {
        rows->range[q] = ranges[q];
        rows->local_start[q + 1] = rows->local_start[q] + ranges[q].end - ranges[q].start;
    }
}

int64_t lg_global_row(const lg_rows *rows, int64_t t) {
    int64_t q = 0;
    while (q + 1 < rows->num_ranges && rows->local_start[q + 1] <= t)
        q++;
    return rows->range[q].start + (t - rows->local_start[q]);
}

static uint64_t mix(uint64_t z) { /* splitmix64 finaliser */
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

void lg_data_init(lg_data *d, uint64_t seed, int64_t C) {
    d->C = C;
    for (int s = 0; s < 4; s++)
        d->salt[s] = mix(seed + UINT64_C(0x9e3779b97f4a7c15) * (uint64_t)(s + 1));
}

static uint64_t hash(const lg_data *d, int which, uint64_t index) {
    return mix(d->salt[which] + index * UINT64_C(0x9e3779b97f4a7c15));
}

cake_bf16 lg_value(const lg_data *d, int which, int64_t g, int64_t c) {
    const uint64_t h = hash(d, which, (uint64_t)g * (uint64_t)d->C + (uint64_t)c);
    const uint16_t sign = (uint16_t)((h >> 8) & 1) << 15;
    const unsigned kind = (unsigned)(h & 0xff);
    if (kind < 6)
        return sign; /* signed zero */
    if (kind < 9)
        return (cake_bf16)(sign | (uint16_t)(((h >> 16) & 0x7f) | 1));         /* subnormal */
    const uint16_t exp = (uint16_t)(117 + ((h >> 24) & 15) + ((h >> 28) & 3)); /* 2^-10..2^8 */
    return (cake_bf16)(sign | (uint16_t)(exp << 7) | (uint16_t)((h >> 40) & 0x7f));
}

float lg_weight(const lg_data *d, int64_t c, int k) {
    const uint64_t h = hash(d, LG_W, (uint64_t)c * 4 + (uint64_t)k);
    const uint32_t bits = (uint32_t)((h >> 8) & 1) << 31 | (uint32_t)(121 + ((h >> 16) & 7)) << 23 |
                          (uint32_t)((h >> 32) & 0x7fffff);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

typedef struct fill_job {
    const lg_data *d;
    int which;
    const lg_rows *rows;
    cake_bf16 *out;
} fill_job;

static void fill_range(void *ctx, int64_t begin, int64_t end) {
    const fill_job *j = ctx;
    const int64_t C = j->d->C;
    for (int64_t t = begin; t < end; t++) {
        const int64_t g = lg_global_row(j->rows, t);
        cake_bf16 *row = j->out + t * C;
        for (int64_t c = 0; c < C; c++)
            row[c] = lg_value(j->d, j->which, g, c);
    }
}

void lg_fill_local(const lg_data *d, int which, const lg_rows *rows, cake_bf16 *out) {
    fill_job j = {d, which, rows, out};
    lg_parallel(rows->local_start[rows->num_ranges], fill_range, &j);
}

typedef struct par_job {
    void (*fn)(void *, int64_t, int64_t);
    void *ctx;
    int64_t begin, end;
} par_job;

static void *par_main(void *arg) {
    par_job *j = arg;
    j->fn(j->ctx, j->begin, j->end);
    return NULL;
}

void lg_parallel(int64_t n, void (*fn)(void *ctx, int64_t begin, int64_t end), void *ctx) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = cpus < 1 ? 1 : cpus > 256 ? 256 : (int)cpus;
    if (n < threads)
        threads = n > 0 ? (int)n : 1;
    par_job jobs[256];
    pthread_t tid[256];
    int started[256] = {0};
    for (int k = 0; k < threads; k++) {
        jobs[k] = (par_job){fn, ctx, n * k / threads, n * (k + 1) / threads};
        started[k] = k > 0 && pthread_create(&tid[k], NULL, par_main, &jobs[k]) == 0;
        if (k > 0 && !started[k]) /* no thread: do it here */
            par_main(&jobs[k]);
    }
    par_main(&jobs[0]);
    for (int k = 1; k < threads; k++)
        if (started[k])
            pthread_join(tid[k], NULL);
}

double lg_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
