#include "bench_common.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t bench_rand(uint64_t *state) { /* splitmix64 */
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void bench_fill_bf16(cake_bf16 *data, int64_t count, uint64_t seed) {
    for (int64_t i = 0; i < count; i++) {
        const uint64_t r = bench_rand(&seed);
        /* sign, exponent 126..128 (|v| in [0.5, 4)), random mantissa */
        data[i] = (cake_bf16)(((r & 1) << 15) | ((126 + (r >> 1) % 3) << 7) | ((r >> 8) & 0x7f));
    }
}

void bench_fill_f32(float *data, int64_t count, uint64_t seed) {
    for (int64_t i = 0; i < count; i++)
        data[i] = (float)((double)(bench_rand(&seed) >> 11) * 0x1p-53 - 0.5);
}

int64_t bench_random_cu_seqlens(int64_t rows, int64_t mean_length, uint64_t seed, int64_t *cu) {
    int64_t n = 0;
    cu[0] = 0;
    while (cu[n] < rows) {
        int64_t len = 1 + (int64_t)(bench_rand(&seed) % (uint64_t)(2 * mean_length - 1));
        if (cu[n] + len > rows) len = rows - cu[n];
        cu[n + 1] = cu[n] + len;
        n++;
    }
    return n;
}

typedef struct copy_job {
    char *dst;
    const char *src;
    size_t bytes;
} copy_job;

static void *copy_worker(void *arg) {
    copy_job *j = arg;
    memcpy(j->dst, j->src, j->bytes);
    return NULL;
}

void *bench_alloc_aligned(size_t bytes) {
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

double bench_memcpy_bandwidth(size_t bytes, int threads, int repeats) {
    char *src = bench_alloc_aligned(bytes), *dst = bench_alloc_aligned(bytes);
    if (!src || !dst) {
        free(src);
        free(dst);
        return 0.0;
    }
    memset(src, 1, bytes);
    memset(dst, 2, bytes);
    double best = 1e30;
    copy_job jobs[64];
    pthread_t ids[64];
    if (threads > 64) threads = 64;
    for (int r = 0; r < repeats; r++) {
        const double t0 = bench_now();
        for (int i = 0; i < threads; i++) {
            const size_t a = bytes * (size_t)i / (size_t)threads, b = bytes * (size_t)(i + 1) / (size_t)threads;
            jobs[i] = (copy_job){dst + a, src + a, b - a};
            if (i > 0) pthread_create(&ids[i], NULL, copy_worker, &jobs[i]);
        }
        copy_worker(&jobs[0]);
        for (int i = 1; i < threads; i++) pthread_join(ids[i], NULL);
        const double dt = bench_now() - t0;
        if (dt < best) best = dt;
    }
    free(src);
    free(dst);
    return 2.0 * (double)bytes / best;
}
