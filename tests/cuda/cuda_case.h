/* One rank of a GPU test case: the global problem, the rank's inputs and pools built from it, the
 * CPU result as the truth (cake_cpu_forward / cake_cpu_backward), the same inputs on the device,
 * GPU calls in a chosen launch form, and bitwise comparisons with diagnostics. */
#ifndef CAKE_TEST_CUDA_CASE_H
#define CAKE_TEST_CUDA_CASE_H

#include "cuda_util.h"

/* More than the launcher's 8 tensors per launch, so calls that it splits can be tested. */
#define CC_MAX_TENSORS 20

/* The global packed batch and n tensors over it ([T, C] bf16 x and dy, [C, 4] fp32 w). */
typedef struct cc_problem {
    int64_t *cu; /* owned, num_seqs + 1 entries */
    int64_t num_seqs, T;
    int n;
    int64_t C[CC_MAX_TENSORS];
    cake_bf16 *x[CC_MAX_TENSORS], *dy[CC_MAX_TENSORS];
    float *w[CC_MAX_TENSORS];
    int64_t *seq_of; /* sequence of every global row */
} cc_problem;

/* Takes ownership of cu (malloc'd). Random values of profile p. */
void cc_problem_init(cc_problem *pb, tu_rng *r, tu_profile p, int64_t *cu, int64_t num_seqs, int n,
                     const int64_t *C);
/* A copy of cu_values (num_seqs + 1 entries) for fixed cases. */
int64_t *cc_cu_copy(const int64_t *cu_values, int64_t num_seqs);
void cc_problem_free(cc_problem *pb);
/* Tensors 0..n-1 as a tu_problem for the reference helpers (n <= TU_MAX_TENSORS). */
tu_problem cc_problem_view(const cc_problem *pb);

/* Replace about pct percent of x and dy values (and a few weights) by NaNs (quiet and
 * signalling, both signs) and infinities of both signs. */
void cc_inject_specials(cc_problem *pb, tu_rng *r, int pct);

typedef struct cc_rank {
    int rank, n;
    int64_t S, pool, num_fragments;
    int64_t C[CC_MAX_TENSORS];
    cake_plan *plan;
    cake_cuda_plan *dplan;
    /* host inputs: local rows and pools (NULL when empty); w is borrowed from the problem */
    cake_bf16 *x[CC_MAX_TENSORS], *dy[CC_MAX_TENSORS], *hist[CC_MAX_TENSORS], *fut[CC_MAX_TENSORS];
    const float *w[CC_MAX_TENSORS];
    /* CPU truth */
    cake_bf16 *y[CC_MAX_TENSORS], *dx[CC_MAX_TENSORS];
    float *dw[CC_MAX_TENSORS];
    /* device copies of the inputs (NULL when empty) and device outputs (dw always) */
    cake_bf16 *d_x[CC_MAX_TENSORS], *d_dy[CC_MAX_TENSORS], *d_hist[CC_MAX_TENSORS],
        *d_fut[CC_MAX_TENSORS], *d_y[CC_MAX_TENSORS], *d_dx[CC_MAX_TENSORS];
    float *d_w[CC_MAX_TENSORS], *d_dw[CC_MAX_TENSORS];
    /* the last GPU results, downloaded */
    cake_bf16 *g_y[CC_MAX_TENSORS], *g_dx[CC_MAX_TENSORS];
    float *g_dw[CC_MAX_TENSORS];
} cc_rank;

/* Plan, local rows, pools, CPU truth (one multi-tensor call), device copies, device plan. */
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

/* Poison outputs, run forward and backward, wait, download into g_y, g_dx, g_dw. */
void cc_gpu_run(cc_rank *rk, const cc_launch *l);
/* Bitwise comparisons as tu_diff_bf16 / tu_diff_f32 (with nan_equal any NaN matches any NaN).
 * The first CC_MAX_PRINTED differing arrays of the program are reported (first differing
 * element, counts); later ones are only counted, so a systematic fault cannot bury the output.
 * Return 1 when the arrays differ. */
#define CC_MAX_PRINTED 40
int cc_diff16(const char *what, const cake_bf16 *got, const cake_bf16 *want, int64_t rows,
              int64_t cols, int nan_equal);
int cc_diff32(const char *what, const float *got, const float *want, int64_t rows, int64_t cols,
              int nan_equal);
/* 1 while differences are still printed. */
int cc_printing(void);

/* GPU results of tensors [first, first + count) against the CPU truth, bitwise (with nan_equal
 * any NaN matches any NaN). Reports the first differing element with its fragment and dw block.
 * Returns the number of differing arrays. */
int cc_compare_truth(const char *label, const cc_rank *rk, int first, int count, int nan_equal);

/* The launch forms every equality test runs: OFF, ON (where supported), AUTO. */
int cc_coop_forms(cake_cooperative *forms);

/* Runs every launch form (and both workspace modes, alternating) on all tensors of rk and checks
 * each against the CPU truth; returns the number of mismatching arrays. */
int cc_check_all_forms(cc_rank *rk, const char *label, unsigned char poison, int nan_equal,
                       cudaStream_t stream);

/* GPU results (g_y, g_dx, g_dw) of all tensors against the independent reference: ref holds the
 * global y and dx of `view` (tu_ref_compute); dw is recomputed over the rank's rows l2g. */
int cc_compare_reference(const char *label, const cc_rank *rk, const tu_problem *view,
                         const tu_ref *ref, const int64_t *l2g, int nan_equal);

/* For every rank of tp: init, cc_check_all_forms, free. Returns the number of mismatches. */
int cc_check_partition(const cc_problem *pb, const tu_partition *tp, const char *label,
                       unsigned char poison, int nan_equal, cudaStream_t stream);

#endif
