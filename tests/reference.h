/* Independent scalar reference of SPEC section 3, written for the tests: plain loops over each
 * global sequence, one fmaf per tap in the order written, its own bf16 rounding, dw in blocks of
 * 256 local rows summed by the recursive pairwise tree, the optional bias and SiLU, and dbias.
 * Shares no code with src/. The one outside piece is the activation itself, ref_silu and
 * ref_silu_grad of tests/reference_activation.h: an implementation of the documented fp32
 * sequence written separately for the tests (docs/NUMERICS.md).
 *
 * reference.c holds the plain op (no bias, no activation) and the helpers; reference_bias_silu.c
 * the op with bias and activation. The plain functions are kept on their own so that programs
 * that need only them (fuzz/) link reference.c alone. */
#ifndef CAKE_TEST_REFERENCE_H
#define CAKE_TEST_REFERENCE_H

#include <stdint.h>

#define REF_BF16_NAN 0x7fc0u     /* SPEC 3: the one NaN of bf16 outputs */
#define REF_F32_NAN 0x7fc00000u  /* and of fp32 outputs (dw, dbias) */

/* fp32 -> bf16: round to nearest even, no flush to zero, overflow to infinity, every NaN the
 * canonical 0x7FC0. */
uint16_t ref_f32_to_bf16(float f);
float ref_bf16_to_f32(uint16_t b);
/* f, or the canonical NaN 0x7FC00000 when f is a NaN (the fp32 outputs). */
float ref_f32_canonical(float f);
/* SPEC 3's tree over p[0..n), n >= 1: sum(p[a..b)) = p[a] if b - a = 1, else with m the largest
 * power of two < b - a, sum(p[a..a+m)) + sum(p[a+m..b)). */
float ref_tree_sum(const float *p, int64_t n);

/* ---- the plain op (reference.c) -------------------------------------------------------------- */

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

/* ---- with bias and activation (reference_bias_silu.c) ---------------------------------------- */

enum { REF_ACT_NONE = 0, REF_ACT_SILU = 1 };

/* The tests' SiLU and its derivative (tests/reference_activation.h), for callers that evaluate
 * single elements. */
float ref_silu(float a);
float ref_silu_grad(float a);

/* What a call computes beyond the plain op: bias (NULL: none) and activation (REF_ACT_*). */
typedef struct ref_params {
    const float *bias; /* [C] fp32, or NULL */
    int activation;
} ref_params;

/* a(g, c) = fma chain over x of g's sequence (+0.0 outside it), then + bias[c]. */
float ref_preact(const int64_t *cu, int64_t num_seqs, int64_t C, const uint16_t *x, const float *w,
                 const ref_params *p, int64_t g, int64_t c);
/* g(row, c) for every global row: dy, or dy * silu'(a) with SiLU. g is [T, C] fp32. */
void ref_grad_input(const int64_t *cu, int64_t num_seqs, int64_t C, const uint16_t *x,
                    const float *w, const ref_params *p, const uint16_t *dy, float *g);
/* y = bf16(a) or bf16(silu(a)) for every global row. */
void ref_forward_p(const int64_t *cu, int64_t num_seqs, int64_t C, const uint16_t *x,
                   const float *w, const ref_params *p, uint16_t *y);
/* dx from g (+0.0 at or past the sequence end) for every global row. */
void ref_backward_dx_p(const int64_t *cu, int64_t num_seqs, int64_t C, const uint16_t *x,
                       const float *w, const ref_params *p, const uint16_t *dy, uint16_t *dx);
/* One rank's dw [C, 4] and, when dbias is not NULL, dbias [C] over its local rows l2g[0..S):
 * block partials of g * x(t-3+k) and of g, 256 local rows a block, summed by the tree; +0.0 for
 * S = 0; NaN canonical. */
void ref_grads_p(const int64_t *cu, int64_t num_seqs, int64_t C, const uint16_t *x, const float *w,
                 const ref_params *p, const uint16_t *dy, const int64_t *l2g, int64_t S, float *dw,
                 float *dbias);
/* y, dx and g of the global rows rows[0..nrows) only (any order), into the global [T, C]
 * arrays: y and dx at those rows; g at those rows and the three after each in its sequence (what
 * their dx reads). Other rows are not written. For one rank's share of a large batch. */
void ref_rows_p(const int64_t *cu, int64_t num_seqs, int64_t C, const uint16_t *x, const float *w,
                const ref_params *p, const uint16_t *dy, const int64_t *rows, int64_t nrows,
                uint16_t *y, uint16_t *dx, float *g);
/* The same two from g already computed by ref_grad_input (for many ranks of one problem). */
void ref_dx_from_g(const int64_t *cu, int64_t num_seqs, int64_t C, const float *w, const float *g,
                   uint16_t *dx);
void ref_grads_from_g(const int64_t *cu, int64_t num_seqs, int64_t C, const uint16_t *x,
                      const float *g, const int64_t *l2g, int64_t S, float *dw, float *dbias);

#endif
