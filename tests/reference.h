/* Independent scalar reference of SPEC section 3, written for the tests: plain loops over each
 * global sequence, one fmaf per tap in the order written, its own bf16 rounding, dw in blocks of
 * 256 local rows summed by the recursive pairwise tree. Shares no code with src/. */
#ifndef CAKE_TEST_REFERENCE_H
#define CAKE_TEST_REFERENCE_H

#include <stdint.h>

/* fp32 -> bf16: round to nearest even, NaN stays NaN (quiet, sign kept), no flush to zero. */
uint16_t ref_f32_to_bf16(float f);
float ref_bf16_to_f32(uint16_t b);

/* y for every global row of the packed batch: x, y are [T, C], w is [C, 4]. */
void ref_forward(const int64_t *cu, int64_t num_seqs, int64_t C, const uint16_t *x, const float *w,
                 uint16_t *y);
/* dx for every global row: dy, dx are [T, C]. */
void ref_backward_dx(const int64_t *cu, int64_t num_seqs, int64_t C, const uint16_t *dy,
                     const float *w, uint16_t *dx);
/* One rank's dw [C, 4] over its local rows, given as their global rows l2g[0..S) in local order;
 * x and dy are the global [T, C] arrays. */
void ref_dw(const int64_t *cu, int64_t num_seqs, int64_t C, const uint16_t *x, const uint16_t *dy,
            const int64_t *l2g, int64_t S, float *dw);

#endif
