/* Internal interface between the CPU driver (conv_cpu.c) and the per-ISA row kernels. */
#ifndef CAKE_CONV_CPU_H
#define CAKE_CONV_CPU_H

#include "cake.h"

#include <stdint.h>

/* The rows of one fragment of one tensor, restricted to channels [c0, c1). */
typedef struct cake_row_span {
    const uint16_t *x;       /* local rows of the tensor (row stride ld) */
    const uint16_t *dy;      /* backward only */
    const uint16_t *history; /* the fragment's 3 history rows */
    const uint16_t *future;  /* the fragment's 3 future rows (backward only) */
    int64_t ld;              /* row stride in elements = channels */
    int64_t channels;        /* stride between taps of the transposed weights */
    int64_t local_start;     /* the fragment's first local row */
    int64_t length;          /* the fragment's rows */
    int64_t c0, c1;          /* channel strip */
} cake_row_span;

typedef struct cake_cpu_kernels {
    /* y rows [t0, t1) of the span; wt = weights as [tap][parity][channels / 2]. */
    void (*forward_span)(const cake_row_span *s, int64_t t0, int64_t t1, const float *wt,
                         uint16_t *y);
    /* dx rows [t0, t1), and the dw partials += dy * x(t-3+k) in row order; partial holds
     * 4 * (c1 - c0) floats laid out [parity][tap][(c1 - c0) / 2]. */
    void (*backward_span)(const cake_row_span *s, int64_t t0, int64_t t1, const float *wt,
                          uint16_t *dx, float *partial);
    void (*add_partials)(float *dst, const float *left, const float *right, int64_t n);
} cake_cpu_kernels;

extern const cake_cpu_kernels cake_cpu_kernels_generic;
#if defined(CAKE_HAVE_X86_KERNELS)
extern const cake_cpu_kernels cake_cpu_kernels_avx2;
extern const cake_cpu_kernels cake_cpu_kernels_avx512;
#endif

#endif
