/* Scalar reference of SPEC 3 with the optional bias and SiLU (see reference.h). Literal and slow:
 * every a is recomputed from the global x of its own sequence, every g from that a, every output
 * from those, in exactly the order SPEC 3 writes. Shares no code with src/; the activation comes
 * from the tests' own implementation (reference_activation.h). */
#include "reference.h"

#include "reference_activation.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define REF_BLOCK 256 /* SPEC 3: R */

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        abort();
    return p;
}

/* The sequence [s0, s1) that holds global row g (empty sequences hold nothing). */
static void seq_bounds(const int64_t *cu, int64_t num_seqs, int64_t g, int64_t *s0, int64_t *s1) {
    for (int64_t s = 0; s < num_seqs; s++)
        if (g >= cu[s] && g < cu[s + 1]) {
            *s0 = cu[s];
            *s1 = cu[s + 1];
            return;
        }
    abort(); /* g outside [0, T) */
}

/* Per global row: its sequence bounds (one pass instead of a search per element). */
typedef struct bounds {
    int64_t *s0, *s1;
} bounds;

static bounds bounds_make(const int64_t *cu, int64_t num_seqs) {
    int64_t T = cu[num_seqs];
    bounds b = {xmalloc((size_t)T * sizeof(int64_t)), xmalloc((size_t)T * sizeof(int64_t))};
    for (int64_t s = 0; s < num_seqs; s++)
        for (int64_t g = cu[s]; g < cu[s + 1]; g++) {
            b.s0[g] = cu[s];
            b.s1[g] = cu[s + 1];
        }
    return b;
}

static void bounds_free(bounds *b) {
    free(b->s0);
    free(b->s1);
}

static float x_at(const uint16_t *x, int64_t C, int64_t g, int64_t c, int64_t s0, int64_t s1) {
    return (g >= s0 && g < s1) ? ref_bf16_to_f32(x[g * C + c]) : 0.0f; /* +0.0 outside */
}

static float preact(int64_t C, const uint16_t *x, const float *w, const ref_params *p, int64_t g,
                    int64_t c, int64_t s0, int64_t s1) {
    float acc = 0.0f;
    for (int k = 0; k < 4; k++)
        acc = fmaf(w[c * 4 + k], x_at(x, C, g - 3 + k, c, s0, s1), acc);
    if (p && p->bias)
        acc = acc + p->bias[c]; /* one fp32 add */
    return acc;
}

float ref_preact(const int64_t *cu, int64_t num_seqs, int64_t C, const uint16_t *x, const float *w,
                 const ref_params *p, int64_t g, int64_t c) {
    int64_t s0, s1;
    seq_bounds(cu, num_seqs, g, &s0, &s1);
    return preact(C, x, w, p, g, c, s0, s1);
}

static int silu_on(const ref_params *p) {
    return p && p->activation == REF_ACT_SILU;
}

void ref_grad_input(const int64_t *cu, int64_t num_seqs, int64_t C, const uint16_t *x,
                    const float *w, const ref_params *p, const uint16_t *dy, float *g) {
    bounds b = bounds_make(cu, num_seqs);
    for (int64_t r = 0; r < cu[num_seqs]; r++)
        for (int64_t c = 0; c < C; c++) {
            float d = ref_bf16_to_f32(dy[r * C + c]);
            if (silu_on(p))
                d = d * ref_silu_grad(preact(C, x, w, p, r, c, b.s0[r], b.s1[r]));
            g[r * C + c] = d;
        }
    bounds_free(&b);
}

void ref_rows_p(const int64_t *cu, int64_t num_seqs, int64_t C, const uint16_t *x, const float *w,
                const ref_params *p, const uint16_t *dy, const int64_t *rows, int64_t nrows,
                uint16_t *y, uint16_t *dx, float *g) {
    const int64_t T = cu[num_seqs];
    bounds b = bounds_make(cu, num_seqs);
    unsigned char *need = xmalloc((size_t)T); /* rows whose g is needed */
    memset(need, 0, (size_t)T);
    for (int64_t q = 0; q < nrows; q++)
        for (int64_t j = 0; j < 4 && rows[q] + j < b.s1[rows[q]]; j++)
            need[rows[q] + j] = 1;
    for (int64_t r = 0; r < T; r++) /* g once per needed row */
        for (int64_t c = 0; need[r] && c < C; c++) {
            float d = ref_bf16_to_f32(dy[r * C + c]);
            if (silu_on(p))
                d = d * ref_silu_grad(preact(C, x, w, p, r, c, b.s0[r], b.s1[r]));
            g[r * C + c] = d;
        }
    for (int64_t q = 0; q < nrows; q++) {
        const int64_t r = rows[q], s0 = b.s0[r], s1 = b.s1[r];
        for (int64_t c = 0; c < C; c++) {
            const float a = preact(C, x, w, p, r, c, s0, s1);
            y[r * C + c] = ref_f32_to_bf16(silu_on(p) ? ref_silu(a) : a);
            float acc = 0.0f;
            for (int j = 0; j < 4; j++) /* g = +0.0 at or past the sequence's end */
                acc = fmaf(w[c * 4 + 3 - j], r + j < s1 ? g[(r + j) * C + c] : 0.0f, acc);
            dx[r * C + c] = ref_f32_to_bf16(acc);
        }
    }
    free(need);
    bounds_free(&b);
}

void ref_forward_p(const int64_t *cu, int64_t num_seqs, int64_t C, const uint16_t *x,
                   const float *w, const ref_params *p, uint16_t *y) {
    for (int64_t s = 0; s < num_seqs; s++)
        for (int64_t t = cu[s]; t < cu[s + 1]; t++)
            for (int64_t c = 0; c < C; c++) {
                float a = preact(C, x, w, p, t, c, cu[s], cu[s + 1]);
                y[t * C + c] = ref_f32_to_bf16(silu_on(p) ? ref_silu(a) : a);
            }
}

void ref_dx_from_g(const int64_t *cu, int64_t num_seqs, int64_t C, const float *w, const float *g,
                   uint16_t *dx) {
    for (int64_t s = 0; s < num_seqs; s++)
        for (int64_t t = cu[s]; t < cu[s + 1]; t++)
            for (int64_t c = 0; c < C; c++) {
                float acc = 0.0f;
                for (int j = 0; j < 4; j++) {
                    /* g = +0.0 at or past the sequence's end */
                    float gj = t + j < cu[s + 1] ? g[(t + j) * C + c] : 0.0f;
                    acc = fmaf(w[c * 4 + 3 - j], gj, acc);
                }
                dx[t * C + c] = ref_f32_to_bf16(acc);
            }
}

void ref_backward_dx_p(const int64_t *cu, int64_t num_seqs, int64_t C, const uint16_t *x,
                       const float *w, const ref_params *p, const uint16_t *dy, uint16_t *dx) {
    float *g = xmalloc((size_t)(cu[num_seqs] * C) * sizeof *g);
    ref_grad_input(cu, num_seqs, C, x, w, p, dy, g);
    ref_dx_from_g(cu, num_seqs, C, w, g, dx);
    free(g);
}

void ref_grads_from_g(const int64_t *cu, int64_t num_seqs, int64_t C, const uint16_t *x,
                      const float *g, const int64_t *l2g, int64_t S, float *dw, float *dbias) {
    int64_t nb = (S + REF_BLOCK - 1) / REF_BLOCK;
    float *part = xmalloc((size_t)(nb ? nb : 1) * sizeof *part);
    bounds b = bounds_make(cu, num_seqs);
    for (int64_t c = 0; c < C; c++) {
        for (int k = 0; k <= 4; k++) { /* taps 0..3, then 4: dbias */
            if (k == 4 && !dbias)
                break;
            for (int64_t blk = 0; blk < nb; blk++) {
                float acc = 0.0f;
                int64_t end = (blk + 1) * REF_BLOCK < S ? (blk + 1) * REF_BLOCK : S;
                for (int64_t t = blk * REF_BLOCK; t < end; t++) {
                    int64_t r = l2g[t];
                    if (k == 4)
                        acc = acc + g[r * C + c];
                    else
                        acc = fmaf(g[r * C + c], x_at(x, C, r - 3 + k, c, b.s0[r], b.s1[r]), acc);
                }
                part[blk] = acc;
            }
            float v = nb ? ref_f32_canonical(ref_tree_sum(part, nb)) : 0.0f;
            if (k == 4)
                dbias[c] = v;
            else
                dw[c * 4 + k] = v;
        }
    }
    bounds_free(&b);
    free(part);
}

void ref_grads_p(const int64_t *cu, int64_t num_seqs, int64_t C, const uint16_t *x, const float *w,
                 const ref_params *p, const uint16_t *dy, const int64_t *l2g, int64_t S, float *dw,
                 float *dbias) {
    float *g = xmalloc((size_t)(cu[num_seqs] * C) * sizeof *g);
    ref_grad_input(cu, num_seqs, C, x, w, p, dy, g);
    ref_grads_from_g(cu, num_seqs, C, x, g, l2g, S, dw, dbias);
    free(g);
}
