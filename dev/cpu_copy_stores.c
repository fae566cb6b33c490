/* Does the CPU forward's write stream cost it against memcpy? One thread copies 256 MiB three
 * ways: glibc memcpy, an AVX-512 loop with ordinary stores (what the kernels issue) and the
 * same loop with non-temporal stores. Build and run (a machine with AVX-512):
 *     gcc -O2 -mavx512f -o /tmp/cpu_copy_stores dev/cpu_copy_stores.c && /tmp/cpu_copy_stores
 * GB/s count bytes read + written. */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BYTES ((size_t)256 << 20)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

__attribute__((noinline)) static void copy_stores(const char *restrict a, char *restrict b) {
    for (size_t i = 0; i < BYTES; i += 64) _mm512_storeu_si512(b + i, _mm512_loadu_si512(a + i));
}

__attribute__((noinline)) static void copy_streams(const char *restrict a, char *restrict b) {
    for (size_t i = 0; i < BYTES; i += 64) _mm512_stream_si512((void *)(b + i), _mm512_loadu_si512(a + i));
    _mm_sfence();
}

int main(void) {
    char *a = aligned_alloc(64, BYTES), *b = aligned_alloc(64, BYTES);
    if (!a || !b) return 1;
    memset(a, 1, BYTES);
    memset(b, 2, BYTES);
    for (int rep = 0; rep < 3; rep++) {
        double t = now();
        memcpy(b, a, BYTES);
        const double m = now() - t;
        t = now();
        copy_stores(a, b);
        const double s = now() - t;
        t = now();
        copy_streams(a, b);
        const double n = now() - t;
        printf("memcpy %.1f GB/s, ordinary stores %.1f GB/s (%.0f %%), non-temporal %.1f GB/s (%.0f %%)\n",
               2.0 * BYTES / m / 1e9, 2.0 * BYTES / s / 1e9, 100 * m / s, 2.0 * BYTES / n / 1e9,
               100 * m / n);
    }
    free(a);
    free(b);
    return 0;
}
