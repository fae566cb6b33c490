/* Shared test helpers: seeded RNG, random data, sequences and partitions built independently of
 * the library, halo pools taken from global data, and failure reports that print the seed. */
#ifndef CAKE_TEST_UTIL_H
#define CAKE_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cake.h"
#include "reference.h"

#define TU_MAX_TENSORS 8

/* ---- failure reports ----------------------------------------------------------------------- */

/* The base seed: $CAKE_TEST_SEED (decimal or 0x hex) if set, else a fixed default. */
uint64_t tu_seed(void);
/* Describe the current trial; printed with the seed when a check fails. */
void tu_set_ctx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print "seed=..., ctx" and the message to stderr. */
void tu_report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define TU_CHECK(cond, ...)                                                                       \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            tu_report(__VA_ARGS__);                                                               \
            fail_msg("check failed: %s", #cond);                                                  \
        }                                                                                         \
    } while (0)

/* The call must succeed; otherwise print the status and cake_last_error(). */
#define TU_OK(call)                                                                               \
    do {                                                                                          \
        cake_status tu_st_ = (call);                                                              \
        if (tu_st_ != CAKE_SUCCESS) {                                                             \
            tu_report("%s -> %s: %s", #call, cake_status_string(tu_st_), cake_last_error());      \
            fail_msg("call failed: %s", #call);                                                   \
        }                                                                                         \
    } while (0)

/* Bitwise comparisons; on a difference report the first differing element (row, col) and
 * return 1. rows * cols elements. */
int tu_diff_bf16(const char *what, const cake_bf16 *got, const cake_bf16 *want, int64_t rows,
                 int64_t cols);
int tu_diff_f32(const char *what, const float *got, const float *want, int64_t rows,
                int64_t cols);
/* There is no NaN-lenient comparison: SPEC 3 makes every NaN output the canonical NaN (bf16
 * 0x7FC0, fp32 0x7FC00000), so NaN outputs are compared bit for bit like everything else.
 * Every NaN among rows * cols values is canonical; otherwise report the first one and return 1. */
int tu_check_canonical_bf16(const char *what, const cake_bf16 *a, int64_t rows, int64_t cols);
int tu_check_canonical_f32(const char *what, const float *a, int64_t rows, int64_t cols);

/* ---- RNG and random values ------------------------------------------------------------------ */

typedef struct tu_rng {
    uint64_t state;
} tu_rng;

/* An independent stream per test (stream id), all derived from tu_seed(). */
void tu_rng_init(tu_rng *r, uint64_t stream);
uint64_t tu_next(tu_rng *r);
/* Uniform in [lo, hi], inclusive. */
int64_t tu_range(tu_rng *r, int64_t lo, int64_t hi);

typedef enum tu_profile {
    TU_MODERATE = 0, /* exponents -12..12, some zeros and subnormals */
    TU_WIDE,         /* exponents over most of the range, subnormals included */
    TU_TINY,         /* x near the bottom of the normal range and subnormal: exercises no-FTZ */
    TU_NARROW,       /* x 2^-6..2^4, w 2^-4..2^1: activation inputs mostly where SiLU bends */
} tu_profile;

cake_bf16 tu_bf16(tu_rng *r, tu_profile p);
float tu_weight(tu_rng *r, tu_profile p);
void tu_fill_bf16(tu_rng *r, tu_profile p, cake_bf16 *a, int64_t n);
void tu_fill_weights(tu_rng *r, tu_profile p, float *a, int64_t n);

float tu_bf16_to_f32(cake_bf16 b);
int tu_bf16_isnan(cake_bf16 b);

/* ---- sequences and problems ----------------------------------------------------------------- */

/* Random cu_seqlens with 1..max_seqs sequences of length 0..max_len, many of them empty or
 * 1-3 rows. Returns num_seqs; *cu is malloc'd (num_seqs + 1 entries). */
int64_t tu_random_cu(tu_rng *r, int64_t max_seqs, int64_t max_len, int64_t **cu);
/* seq_of[g] for every global row (malloc'd, T entries). */
int64_t *tu_seq_of_rows(const int64_t *cu, int64_t num_seqs);

/* One global problem: n tensors over the same packed batch, and what the calls compute beyond
 * the plain op (cake_conv_params): a bias for every tensor or for none (the API takes both or
 * neither), and the activation. A zero-initialised tail is the plain op. */
typedef struct tu_problem {
    const int64_t *cu; /* borrowed */
    int64_t num_seqs, T;
    int n;
    int64_t C[TU_MAX_TENSORS];
    cake_bf16 *x[TU_MAX_TENSORS], *dy[TU_MAX_TENSORS]; /* [T, C] */
    float *w[TU_MAX_TENSORS];                           /* [C, 4] */
    int with_bias;                                      /* 1: bias[i] for every tensor */
    cake_activation activation;
    float *bias[TU_MAX_TENSORS]; /* [C] fp32 when with_bias (freed by tu_problem_free) */
} tu_problem;

void tu_problem_init(tu_problem *pb, tu_rng *r, tu_profile p, const int64_t *cu, int64_t num_seqs,
                     int n, const int64_t *C);
/* Gives pb a random bias per tensor (with_bias) and the activation. Bias values follow p (some
 * zeros of either sign). */
void tu_problem_set_params(tu_problem *pb, tu_rng *r, tu_profile p, int with_bias,
                           cake_activation activation);
void tu_problem_free(tu_problem *pb);

/* The four variants of the op, bit 0: bias, bit 1: SiLU; "plain", "bias", "silu", "bias+silu". */
enum { TU_VARIANTS = 4 };
extern const char *const tu_variant_name[TU_VARIANTS];
int tu_variant_bias(int variant);
cake_activation tu_variant_activation(int variant);
/* pb's variant number. */
int tu_problem_variant(const tu_problem *pb);
/* The library's parameters of tensors [first, first + count) of pb: bias pointers into pb, dbias
 * pointers from `dbias` (may be NULL for a forward). The pointer arrays live in *storage. */
typedef struct tu_params {
    cake_conv_params params;
    const float *bias[TU_MAX_TENSORS];
    float *dbias[TU_MAX_TENSORS];
} tu_params;
const cake_conv_params *tu_params_of(tu_params *storage, const tu_problem *pb, int first,
                                     int count, float *const *dbias);
/* The reference's parameters of tensor i of pb. */
void tu_ref_params(const tu_problem *pb, int i, ref_params *out);
/* Random channel counts, multiples of 8 in [8, max_c]. */
void tu_random_channels(tu_rng *r, int n, int64_t max_c, int64_t *C);

/* ---- partitions built from the spec, independently of the library --------------------------- */

typedef enum tu_kind { TU_CONTIGUOUS = 0, TU_BOUNDARIES, TU_ZIGZAG, TU_RANGES, TU_KIND_COUNT } tu_kind;
extern const char *const tu_kind_name[TU_KIND_COUNT];

typedef struct tu_partition {
    tu_kind kind;
    int P;
    int64_t T;
    int64_t *counts;        /* ranges per rank */
    int64_t *first;         /* index of each rank's first range in `ranges` (P + 1 entries) */
    cake_range *ranges;     /* all ranks' ranges, rank 0's first */
    int64_t *boundaries;    /* TU_BOUNDARIES only: P + 1 entries */
    int64_t *local_rows;    /* S_local per rank */
    int64_t **l2g;          /* per rank: local row -> global row, from the ranges */
    cake_partition *lib;    /* the library's partition, built from the same description */
} tu_partition;

/* Builds the description for `kind` (for TU_RANGES: random cut points with chunks of
 * 1..max_chunk rows, random owners, per-rank order permuted or kept, some empty ranges), then
 * the library partition. Returns the library status (the description is freed on failure). */
cake_status tu_partition_make(tu_partition *tp, tu_rng *r, tu_kind kind, int P, const int64_t *cu,
                              int64_t num_seqs, int64_t max_chunk);
/* A TU_RANGES partition from a given description (copied). */
cake_status tu_partition_explicit(tu_partition *tp, const int64_t *cu, int64_t num_seqs, int P,
                                  const int64_t *counts, const cake_range *ranges);
void tu_partition_free(tu_partition *tp);

/* ---- per-rank runs --------------------------------------------------------------------------- */

/* Copy the rows l2g[0..S) of a global [T, C] array. */
void tu_gather(const cake_bf16 *global, int64_t C, const int64_t *l2g, int64_t S, cake_bf16 *out);
/* Pools for one tensor (layout of cake.h): history row 3f+j = x at global_start-3+j or +0.0
 * before the sequence start; future row 3f+j = dy at global_start+length+j or +0.0 at or past
 * the sequence end. Sequence bounds come from cu, values from the global arrays; either output
 * may be NULL. The future pool of the plain op: pool_rows rows. */
cake_status tu_build_pools(const cake_plan *plan, const int64_t *cu, int64_t num_seqs,
                           const int64_t *seq_of, int64_t C, const cake_bf16 *x,
                           const cake_bf16 *dy, cake_bf16 *history, cake_bf16 *future);
/* The same for a call with `activation`: with CAKE_ACTIVATION_SILU the future pool has
 * 2 * pool_rows rows, dy as above then x at the same global rows (+0.0 where dy is +0.0). */
cake_status tu_build_pools_act(const cake_plan *plan, const int64_t *cu, int64_t num_seqs,
                               const int64_t *seq_of, int64_t C, const cake_bf16 *x,
                               const cake_bf16 *dy, cake_activation activation,
                               cake_bf16 *history, cake_bf16 *future);
/* Rows of the future pool of a call with `activation`. */
int64_t tu_future_rows(int64_t pool_rows, cake_activation activation);

typedef struct tu_rank_out {
    int n;
    int64_t S;
    int64_t C[TU_MAX_TENSORS];
    cake_bf16 *y[TU_MAX_TENSORS], *dx[TU_MAX_TENSORS]; /* NULL when S = 0 */
    float *dw[TU_MAX_TENSORS];
    float *dbias[TU_MAX_TENSORS]; /* [C]; NULL for a problem without bias */
} tu_rank_out;

/* Forward and backward of all tensors on one rank of tp (plan, gather, pools, calls), with the
 * problem's bias and activation. With one_by_one, each tensor goes through its own single-tensor
 * calls. Row arrays and pools are passed as NULL when empty. Outputs start as a sentinel. */
cake_status tu_run_rank(const tu_problem *pb, const tu_partition *tp, int rank,
                        const cake_cpu_options *opt, int one_by_one, tu_rank_out *out);
/* The same through the single-rank entry points (P = 1, rows in global order). */
cake_status tu_run_single(const tu_problem *pb, const cake_cpu_options *opt, tu_rank_out *out);
void tu_rank_out_free(tu_rank_out *o);

/* The reference's global y and dx of every tensor of a problem, and g (the gradient that reaches
 * the convolution: dy, or dy * silu'(a)) that every rank's dw and dbias are summed from. */
typedef struct tu_ref {
    int n;
    cake_bf16 *y[TU_MAX_TENSORS], *dx[TU_MAX_TENSORS];
    float *g[TU_MAX_TENSORS];
} tu_ref;
void tu_ref_compute(tu_ref *ref, const tu_problem *pb);
/* The same for the rows one rank checks (its global rows l2g[0..S)): enough for tu_check_rank of
 * that rank, at a cost that follows S rather than T. Other rows hold 0 (y, dx) and NaN (g). */
void tu_ref_compute_rows(tu_ref *ref, const tu_problem *pb, const int64_t *l2g, int64_t S);
void tu_ref_free(tu_ref *ref);
/* A rank's outputs against the reference, bitwise (canonical NaN included): y and dx rows
 * through l2g, dw and (with a bias) dbias from ref_grads_p over the same local rows. `flags`
 * must be 0 (it was a NaN-lenient mode, gone now that NaN outputs are canonical; the argument is
 * kept so that existing callers compile). Returns the number of mismatching arrays (each
 * reported). */
int tu_check_rank(const char *label, const tu_problem *pb, const tu_ref *ref, const int64_t *l2g,
                  const tu_rank_out *o, int flags);
/* Two runs' outputs (y, dx, dw, dbias) bitwise equal; returns the number of arrays that
 * differ (each reported). */
int tu_compare_outs(const char *label, const tu_rank_out *got, const tu_rank_out *want);

/* ---- misc ------------------------------------------------------------------------------------ */

void *tu_malloc(size_t bytes); /* never NULL; aborts the test program on exhaustion */

/* Messages: `name` occurs as a whole identifier (not inside "dx[1]" when looking for "x[1]"). */
int tu_msg_names(const char *msg, const char *name);
/* The decimal `v` occurs as a whole number. */
int tu_msg_has_number(const char *msg, int64_t v);
/* "NULL" or "null" occurs. */
int tu_msg_has_null(const char *msg);

/* A call that must fail its checks: status CAKE_ERROR_INVALID_ARGUMENT and a message that names
 * `name` and, per `what`, contains the number `value` or says NULL. */
enum { TU_NO_VALUE = 0, TU_VALUE, TU_NULL };
void tu_expect_invalid(cake_status st, const char *call, const char *name, int what,
                       int64_t value);

#endif
