/* Internal interface between the CPU driver (conv_cpu.c) and the per-ISA row kernels. */
#ifndef CAKE_CONV_CPU_H
#define CAKE_CONV_CPU_H

#include "cake.h"

#include <stdint.h>

/* The widest channel strip a span covers (whole rows of common widths: long contiguous reads
 * prefetch well; strips of 1024 or 2048 channels made the plain backward 20-35 % slower on a
 * Xeon, docs/PERFORMANCE.md); the backward kernels size their SiLU carry by it. */
#ifndef CAKE_CPU_STRIP_CHANNELS
#define CAKE_CPU_STRIP_CHANNELS 4096
#endif

/* The rows of the kernels' own arrays (transposed weights, dw partials, SiLU's carry) hold
 * `pairs` floats and start CAKE_CPU_PAIR_STRIDE(pairs) floats apart: 16 floats (one cache line)
 * of padding, so that the rows a step reads together do not all map to one L1 set, as rows of
 * 2^k floats would (8 KiB apart at 4096 channels; L1 is 8-way). AMD EPYC, plain backward at one
 * thread 353-355 -> 307-323 ms, bias + SiLU forward at two 222-245 -> 156-164
 * (docs/PERFORMANCE.md). */
#ifndef CAKE_CPU_PAD
#define CAKE_CPU_PAD 16
#endif
#define CAKE_CPU_PAIR_STRIDE(pairs) ((pairs) + CAKE_CPU_PAD)

/* Calls whose outputs (y forward, dx backward) together take at least this many bytes write
 * them with non-temporal stores where a whole aligned 64-byte line is written (the AVX-512
 * paths' plain and bias forward steps and backward bands): the lines then go to memory without
 * first being read into the cache. Smaller calls keep ordinary stores, which
 * leave the output in the cache for the next op to read. Never changes a bit. AMD EPYC, 3 x
 * [32768, 4096]: plain forward at one thread 86.9-88.6 -> 76.2 ms, with a bias at two 54.7-70.7
 * -> 48.0-48.9 ms; the plain backward bands (64 rows) at two threads 117.9-125.2 -> 103.0-105.0
 * ms (docs/PERFORMANCE.md). */
#ifndef CAKE_CPU_STREAM_BYTES
#define CAKE_CPU_STREAM_BYTES ((int64_t)32 << 20)
#endif

/* Pairs of a piece a step writes to its L1 buffer before stream_out sends the piece's rows out
 * by non-temporal stores, where the steps are vectorised C: the avx2 path's forward (SiLU's
 * too) and the split backward's dx (conv_cpu_kernels.inc). AMD EPYC Zen 3, 2 x [8192, 4096]:
 * 64 pairs 10-20 % slower than 128, 256 as fast at one thread and 5-15 % slower at two
 * (docs/PERFORMANCE.md). */
#ifndef CAKE_CPU_STREAM_PAIRS
#define CAKE_CPU_STREAM_PAIRS 128
#endif

/* 1: a plain or bias backward step of the vectorised C runs two loops over its pairs, dx from dy
 * and then the partials from x and dy (dy read twice, the second time from L2); 0: one loop
 * doing both (a measurement variant; SiLU's steps always do both in one, since g is computed
 * there). Each loop's state fits the registers far better: AMD EPYC Zen 3 (avx2), 3 x [32768,
 * 4096], plain backward at two threads 255-257 -> 179-200 ms (docs/PERFORMANCE.md). */
#ifndef CAKE_CPU_STEP_SPLIT
#define CAKE_CPU_STEP_SPLIT 1
#endif

/* Rows of one band of the AVX-512 plain and bias backward (conv_cpu_avx512.inc): a whole
 * dw block (a span never has more). AMD EPYC, 3 x [32768, 4096], two threads, dx streamed: 64
 * rows 103.0-105.0 ms, 128 102.7-106.0, 256 98.0-98.8 (docs/PERFORMANCE.md). */
#ifndef CAKE_CPU_BAND_ROWS
#define CAKE_CPU_BAND_ROWS CAKE_DW_BLOCK_ROWS
#endif
/* 0 (default): the AVX-512 paths' plain and bias backward takes the split 4-row steps, as the
 * avx2 path does; 1: it walks bands (a measurement variant). Intel Xeon of the H200's host, 3 x
 * [32768, 4096], two threads: steps 95.6-99.7 ms against the bands' 115.9-129.9, with a bias
 * 103.3-110.4 against 125.1-152.3 (docs/PERFORMANCE.md). On the fourth session's AMD EPYC (Zen 4)
 * the bands beat the fused steps of then by about 10 %; the split steps are not measured there. */
#ifndef CAKE_CPU_BANDS
#define CAKE_CPU_BANDS 0
#endif
/* While a band walks one column down its rows, it prefetches the x and dy lines of the column
 * CAKE_CPU_BAND_PREFETCH columns to the right (0: none), with __builtin_prefetch's locality
 * CAKE_CPU_BAND_PREFETCH_HINT (2: prefetcht1, into L2). Rows 8 KiB apart defeat the hardware's
 * prefetchers on Intel Xeons (the L1 stride prefetcher follows strides up to 2 KiB, the L2
 * streamer stays within a 4 KiB page): Xeon of the H200's host, 3 x [32768, 4096], two threads,
 * plain backward 308.8-376.2 -> 165.2-167.8 ms (into L1: 204.1-219.8; two columns ahead:
 * 260.6-278.0), with a bias 358.9 -> 170.7. */
#ifndef CAKE_CPU_BAND_PREFETCH
#define CAKE_CPU_BAND_PREFETCH 1
#endif
#ifndef CAKE_CPU_BAND_PREFETCH_HINT
#define CAKE_CPU_BAND_PREFETCH_HINT 2
#endif

/* The rows of one fragment of one tensor, restricted to channels [c0, c1). */
typedef struct cake_row_span {
    const uint16_t *x;        /* local rows of the tensor (row stride ld) */
    const uint16_t *dy;       /* backward only */
    const uint16_t *history;  /* the fragment's 3 history rows */
    const uint16_t *future;   /* backward: dy at the fragment's 3 future rows */
    const uint16_t *future_x; /* backward with an activation: x at those rows */
    int64_t ld;               /* row stride in elements = channels */
    int64_t channels;         /* stride between taps of the transposed weights */
    int64_t local_start;      /* the fragment's first local row */
    int64_t length;           /* the fragment's rows */
    int64_t future_valid;     /* future rows still in the fragment's sequence (0..3): g is +0.0
                                 beyond them */
    int64_t c0, c1;           /* channel strip, at most CAKE_CPU_STRIP_CHANNELS wide */
    int stream;               /* y or dx by non-temporal stores (CAKE_CPU_STREAM_BYTES) */
} cake_row_span;

/* Which variant of the op a kernel runs: bit 0 bias, bit 1 SiLU. */
enum { CAKE_VARIANT_BIAS = 1, CAKE_VARIANT_SILU = 2, CAKE_VARIANT_COUNT = 4 };

/* Weights as the kernels read them: [tap][parity][channels / 2] (rows CAKE_CPU_PAIR_STRIDE
 * apart), taps 0..3 then, with a bias, the bias as a fifth row. */
#define CAKE_CPU_WEIGHT_ROWS(variant) (4 + ((variant)&CAKE_VARIANT_BIAS))
/* Floats of `rows` rows of each parity for `channels` channels, padding included: the
 * transposed weights, one set of partials. */
#define CAKE_CPU_PAIR_ROWS_FLOATS(rows, channels) ((rows) * 2 * CAKE_CPU_PAIR_STRIDE((channels) / 2))

typedef struct cake_cpu_kernels {
    /* y rows [t0, t1) of the span. */
    void (*forward_span)(const cake_row_span *s, int64_t t0, int64_t t1, const float *wt,
                         int variant, uint16_t *y);
    /* dx rows [t0, t1), and the block partials in row order: dw += g * x(t-3+k) and, with a
     * bias, dbias += g. partial holds CAKE_CPU_PAIR_ROWS_FLOATS(taps, c1 - c0) floats laid out
     * [parity][tap][(c1 - c0) / 2] (rows CAKE_CPU_PAIR_STRIDE apart), taps =
     * CAKE_CPU_WEIGHT_ROWS(variant). */
    void (*backward_span)(const cake_row_span *s, int64_t t0, int64_t t1, const float *wt,
                          int variant, uint16_t *dx, float *partial);
    /* dst[i] = left[i] + right[i]; dst may be left. */
    void (*add_partials)(float *dst, const float *left, const float *right, int64_t n);
} cake_cpu_kernels;

extern const cake_cpu_kernels cake_cpu_kernels_generic;
#if defined(CAKE_HAVE_X86_KERNELS)
extern const cake_cpu_kernels cake_cpu_kernels_avx2;
extern const cake_cpu_kernels cake_cpu_kernels_avx512;
#endif
#if defined(CAKE_HAVE_AVX512BF16_KERNELS)
extern const cake_cpu_kernels cake_cpu_kernels_avx512bf16;
#endif

#endif
