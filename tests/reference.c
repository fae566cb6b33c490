/* Scalar reference of SPEC section 3 (see reference.h). Deliberately literal and slow. */
#include "reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define REF_BLOCK 256 /* SPEC 3: R */

/* Bits of a float through a union (C11 allows the type pun): a memcpy per element is an
 * intercepted call under AddressSanitizer, which made the reference the sanitizer run's cost. */
typedef union ref_bits {
    float f;
    uint32_t u;
} ref_bits;

uint16_t ref_f32_to_bf16(float f) {
    ref_bits v = {.f = f};
    uint32_t u = v.u;
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN, any sign or payload: the canonical NaN */
        return REF_BF16_NAN;
    /* Round to nearest, ties to even, on the 16 dropped bits; a carry into the exponent is the
     * correct next binade, and out of the largest finite value gives infinity. */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float ref_f32_canonical(float f) {
    ref_bits v = {.f = f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u)
        v.u = REF_F32_NAN;
    return v.f;
}

float ref_bf16_to_f32(uint16_t b) {
    ref_bits v = {.u = (uint32_t)b << 16};
    return v.f;
}

/* x(g + d) within the sequence [s0, s1) of row g, +0.0 outside it (SPEC 2). */
static float row_or_zero(const uint16_t *a, int64_t C, int64_t g, int64_t c, int64_t s0,
                         int64_t s1) {
    return (g >= s0 && g < s1) ? ref_bf16_to_f32(a[g * C + c]) : 0.0f;
}

void ref_forward(const int64_t *cu, int64_t num_seqs, int64_t C, const uint16_t *x, const float *w,
                 uint16_t *y) {
    for (int64_t s = 0; s < num_seqs; s++)
        for (int64_t t = cu[s]; t < cu[s + 1]; t++)
            for (int64_t c = 0; c < C; c++) {
                float acc = 0.0f;
                for (int k = 0; k < 4; k++)
                    acc = fmaf(w[c * 4 + k], row_or_zero(x, C, t - 3 + k, c, cu[s], cu[s + 1]), acc);
                y[t * C + c] = ref_f32_to_bf16(acc);
            }
}

void ref_backward_dx(const int64_t *cu, int64_t num_seqs, int64_t C, const uint16_t *dy,
                     const float *w, uint16_t *dx) {
    for (int64_t s = 0; s < num_seqs; s++)
        for (int64_t t = cu[s]; t < cu[s + 1]; t++)
            for (int64_t c = 0; c < C; c++) {
                float acc = 0.0f;
                for (int j = 0; j < 4; j++)
                    acc = fmaf(w[c * 4 + 3 - j], row_or_zero(dy, C, t + j, c, cu[s], cu[s + 1]),
                               acc);
                dx[t * C + c] = ref_f32_to_bf16(acc);
            }
}

/* sum(p[a..b)) = p[a] if b - a = 1, else with m the largest power of two < b - a:
 * sum(p[a..a+m)) + sum(p[a+m..b)). */
static float tree_sum(const float *p, int64_t a, int64_t b) {
    if (b - a == 1)
        return p[a];
    int64_t m = 1;
    while (2 * m < b - a)
        m *= 2;
    float left = tree_sum(p, a, a + m);
    float right = tree_sum(p, a + m, b);
    return left + right;
}

float ref_tree_sum(const float *p, int64_t n) {
    return tree_sum(p, 0, n);
}

void ref_dw(const int64_t *cu, int64_t num_seqs, int64_t C, const uint16_t *x, const uint16_t *dy,
            const int64_t *l2g, int64_t S, float *dw) {
    int64_t T = cu[num_seqs], nb = (S + REF_BLOCK - 1) / REF_BLOCK;
    int64_t *s0 = malloc((size_t)(T ? T : 1) * sizeof *s0); /* sequence start of each row */
    int64_t *s1 = malloc((size_t)(T ? T : 1) * sizeof *s1);
    float *p = malloc((size_t)(nb ? nb : 1) * sizeof *p);
    if (!s0 || !s1 || !p)
        abort();
    for (int64_t s = 0; s < num_seqs; s++)
        for (int64_t g = cu[s]; g < cu[s + 1]; g++) {
            s0[g] = cu[s];
            s1[g] = cu[s + 1];
        }
    for (int64_t c = 0; c < C; c++)
        for (int k = 0; k < 4; k++) {
            for (int64_t b = 0; b < nb; b++) {
                float acc = 0.0f;
                int64_t end = (b + 1) * REF_BLOCK < S ? (b + 1) * REF_BLOCK : S;
                for (int64_t t = b * REF_BLOCK; t < end; t++) {
                    int64_t g = l2g[t];
                    acc = fmaf(ref_bf16_to_f32(dy[g * C + c]),
                               row_or_zero(x, C, g - 3 + k, c, s0[g], s1[g]), acc);
                }
                p[b] = acc;
            }
            dw[c * 4 + k] = nb ? ref_f32_canonical(tree_sum(p, 0, nb)) : 0.0f;
        }
    free(s0);
    free(s1);
    free(p);
}
