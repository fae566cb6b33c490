/* One rank of a GPU test case: the global problem (with its bias and activation), the rank's
 * inputs and pools built from it, the CPU result as the truth (cake_cpu_forward /
 * cake_cpu_backward, held to the independent reference by the CPU tests), the same inputs on the
 * device, GPU calls in a chosen launch form, and bitwise comparisons with diagnostics. NaN
 * outputs are canonical (SPEC 3), so every comparison is bitwise, NaN included. */
#ifndef CAKE_TEST_CUDA_CASE_H
#define CAKE_TEST_CUDA_CASE_H

#include "cuda_util.h"

/* More than the launcher's 8 tensors per launch, so calls that it splits can be tested. */
#define CC_MAX_TENSORS 20

/* The global packed batch and n tensors over it ([T, C] bf16 x and dy, [C, 4] fp32 w), with a
 * bias for every tensor or none, and the activation (the variant, as tu_variant_name). */
typedef struct cc_problem {
    int64_t *cu; /* owned, num_seqs + 1 entries */
    int64_t num_seqs, T;
    int n;
    int64_t C[CC_MAX_TENSORS];
    cake_bf16 *x[CC_MAX_TENSORS], *dy[CC_MAX_TENSORS];
    float *w[CC_MAX_TENSORS];
    int64_t *seq_of; /* sequence of every global row */
    int with_bias;
    cake_activation activation;
    float *bias[CC_MAX_TENSORS]; /* [C] fp32 when with_bias */
} cc_problem;

/* Takes ownership of cu (malloc'd). Random values of profile p; the plain op. */
void cc_problem_init(cc_problem *pb, tu_rng *r, tu_profile p, int64_t *cu, int64_t num_seqs, int n,
                     const int64_t *C);
/* Makes pb variant `variant` (bit 0 bias, bit 1 SiLU): random bias values of profile p. */
void cc_problem_set_variant(cc_problem *pb, tu_rng *r, tu_profile p, int variant);
int cc_problem_variant(const cc_problem *pb);
/* A copy of cu_values (num_seqs + 1 entries) for fixed cases. */
int64_t *cc_cu_copy(const int64_t *cu_values, int64_t num_seqs);
void cc_problem_free(cc_problem *pb);
/* Tensors 0..n-1 as a tu_problem for the reference helpers (n <= TU_MAX_TENSORS). */
tu_problem cc_problem_view(const cc_problem *pb);

/* Replace about pct percent of x and dy values (and a few weights and bias values) by NaNs
 * (quiet and signalling, both signs, several payloads) and infinities of both signs. */
void cc_inject_specials(cc_problem *pb, tu_rng *r, int pct);
/* NaN in several operands at once: `rows` random rows get NaNs of different payloads in x and
 * dy at the same channels (a channel pair each, and x of the next row too), two weights of
 * different channels and (with a bias) two bias values become NaN, and infinities of both signs
 * are planted nearby. */
void cc_inject_nan_operands(cc_problem *pb, tu_rng *r, int rows);

typedef struct cc_rank {
    int rank, n;
    int64_t S, pool, num_fragments;
    int64_t C[CC_MAX_TENSORS];
    cake_plan *plan;
    cake_cuda_plan *dplan;
    int with_bias;
    cake_activation activation;
    int64_t fut_rows; /* rows of each future pool: pool, or 2 * pool with an activation */
    /* host inputs: local rows and pools (NULL when empty); w, bias borrowed from the problem */
    cake_bf16 *x[CC_MAX_TENSORS], *dy[CC_MAX_TENSORS], *hist[CC_MAX_TENSORS], *fut[CC_MAX_TENSORS];
    const float *w[CC_MAX_TENSORS], *bias[CC_MAX_TENSORS];
    /* CPU truth (dbias: with a bias) */
    cake_bf16 *y[CC_MAX_TENSORS], *dx[CC_MAX_TENSORS];
    float *dw[CC_MAX_TENSORS], *dbias[CC_MAX_TENSORS];
    /* device copies of the inputs (NULL when empty) and device outputs (dw always) */
    cake_bf16 *d_x[CC_MAX_TENSORS], *d_dy[CC_MAX_TENSORS], *d_hist[CC_MAX_TENSORS],
        *d_fut[CC_MAX_TENSORS], *d_y[CC_MAX_TENSORS], *d_dx[CC_MAX_TENSORS];
    float *d_w[CC_MAX_TENSORS], *d_dw[CC_MAX_TENSORS], *d_bias[CC_MAX_TENSORS],
        *d_dbias[CC_MAX_TENSORS];
    /* the last GPU results, downloaded */
    cake_bf16 *g_y[CC_MAX_TENSORS], *g_dx[CC_MAX_TENSORS];
    float *g_dw[CC_MAX_TENSORS], *g_dbias[CC_MAX_TENSORS];
} cc_rank;

/* Plan, local rows, pools, CPU truth (one multi-tensor call with the problem's bias and
 * activation), device copies, device plan. */
void cc_rank_init(cc_rank *rk, const cc_problem *pb, const tu_partition *tp, int rank);
void cc_rank_free(cc_rank *rk);

typedef enum cc_workspace { CC_WS_NULL = 0, CC_WS_EXACT, CC_WS_COUNT } cc_workspace;

/* One GPU forward + backward of tensors [first, first + count) in one call each. */
typedef struct cc_launch {
    int first, count;
    cake_cooperative coop;
    cc_workspace ws;      /* NULL: the library allocates; EXACT: a buffer of exactly the size */
    unsigned char poison; /* byte written over y, dx and dw before the calls */
    cudaStream_t stream;
} cc_launch;

const char *cc_coop_name(cake_cooperative c);
/* "tensors [a, b) coop=ON ws=exact stream=..." */
void cc_launch_describe(const cc_launch *l, char *buf, size_t size);

/* Poison outputs, run forward and backward, wait, download into g_y, g_dx, g_dw, g_dbias. */
void cc_gpu_run(cc_rank *rk, const cc_launch *l);
/* The params of a call on tensors from `first`: the forward's (activation, bias) and the
 * backward's (activation, bias, dbias), over the rank's device arrays. */
void cc_call_params(const cc_rank *rk, int first, cake_conv_params *fwd, cake_conv_params *bwd);
/* The device's y, dx, dw (and dbias) of tensors [first, first + count) into g_y, g_dx, g_dw,
 * g_dbias (after the stream was waited for). */
void cc_download_results(cc_rank *rk, int first, int count);
/* Bitwise comparisons as tu_diff_bf16 / tu_diff_f32. The first CC_MAX_PRINTED differing arrays
 * of the program are reported (first differing element, counts); later ones are only counted,
 * so a systematic fault cannot bury the output. Return 1 when the arrays differ. */
#define CC_MAX_PRINTED 40
int cc_diff16(const char *what, const cake_bf16 *got, const cake_bf16 *want, int64_t rows,
              int64_t cols);
int cc_diff32(const char *what, const float *got, const float *want, int64_t rows, int64_t cols);
/* 1 while differences are still printed. */
int cc_printing(void);

/* GPU results of tensors [first, first + count) against the CPU truth, bitwise (y, dx, dw, and
 * dbias with a bias). Reports the first differing element with its fragment and dw block.
 * Returns the number of differing arrays. */
int cc_compare_truth(const char *label, const cc_rank *rk, int first, int count);
/* Every NaN of the last GPU results is the canonical one; returns the arrays where one is not. */
int cc_check_canonical(const char *label, const cc_rank *rk);

/* The launch forms every equality test runs: OFF, ON (where supported), AUTO. */
int cc_coop_forms(cake_cooperative *forms);

/* Runs every launch form (and both workspace modes, alternating) on all tensors of rk and checks
 * each against the CPU truth; returns the number of mismatching arrays. */
int cc_check_all_forms(cc_rank *rk, const char *label, unsigned char poison,
                       cudaStream_t stream);

/* GPU results (g_y, g_dx, g_dw, g_dbias) of all tensors against the independent reference: ref
 * holds the global y and dx of `view` (tu_ref_compute); dw and dbias are recomputed over the
 * rank's rows l2g. */
int cc_compare_reference(const char *label, const cc_rank *rk, const tu_problem *view,
                         const tu_ref *ref, const int64_t *l2g);

/* For every rank of tp: init, cc_check_all_forms, free. Returns the number of mismatches. */
int cc_check_partition(const cc_problem *pb, const tu_partition *tp, const char *label,
                       unsigned char poison, cudaStream_t stream);

#endif
