/* Helpers shared by the benchmarks: timing, random packed batches, the memcpy baseline. */
#ifndef CAKE_BENCH_COMMON_H
#define CAKE_BENCH_COMMON_H

#include "cake.h"

#include <stddef.h>
#include <stdint.h>

double bench_now(void);
uint64_t bench_rand(uint64_t *state);
/* Random bf16 in about [-2, 2) and fp32 weights in about [-0.5, 0.5). */
void bench_fill_bf16(cake_bf16 *data, int64_t count, uint64_t seed);
void bench_fill_f32(float *data, int64_t count, uint64_t seed);
/* cu_seqlens for `rows` tokens cut into sequences of random length in [1, 2 * mean_length);
 * returns the number of sequences. cu must hold rows + 1 entries. */
int64_t bench_random_cu_seqlens(int64_t rows, int64_t mean_length, uint64_t seed, int64_t *cu);
/* 64-byte aligned memory (free() releases it), as torch's CPU allocator aligns tensors. */
void *bench_alloc_aligned(size_t bytes);
/* Best copy bandwidth (bytes read + written per second) of memcpy over `bytes`, on `threads`
 * threads each copying its share (64-byte aligned buffers). */
double bench_memcpy_bandwidth(size_t bytes, int threads, int repeats);

#endif
