/* Shared pieces of the multi-rank tests: MPI start and finish with a failure count reduced over
 * every rank, inputs hashed from (seed, tensor, global row, channel) so any rank builds any row
 * on its own, random trials (sequences, channel counts, partitions of every kind) that every
 * rank derives identically without communication, and a rank's local buffers.
 * Environment: CAKE_TEST_SEED (the base seed), CAKE_MPI_TRIALS (trials per program),
 * CAKE_MPI_VERBOSE=1 (rank 0 prints each trial). */
#ifndef CAKE_MPI_COMMON_H
#define CAKE_MPI_COMMON_H

#include <mpi.h>
#include <stdint.h>

#include "cake.h"
#include "cake_mpi.h"
#include "test_util.h"

/* ---- run and failure accounting --------------------------------------------------------- */

extern int mc_rank, mc_size;
extern uint64_t mc_seed; /* tu_seed() of rank 0, broadcast */

/* MPI_Init, rank, size, seed. `program` names the test in messages. */
void mc_init(int *argc, char ***argv, const char *program);
/* Sums the failures over all ranks, prints a summary on rank 0, MPI_Finalize. Returns the
 * process exit code: 1 on every rank when any rank failed. */
int mc_finish(void);

/* Names what the current check is about (prefixed with the rank); failure reports print it with
 * the seed. */
void mc_case(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Reports a failed check on this rank and counts it. */
void mc_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Counts `bad` failures already reported (by tu_diff_* or tu_check_rank). */
void mc_count(int bad);
#define MC_CHECK(cond, ...)                                                                       \
    do {                                                                                          \
        if (!(cond))                                                                              \
            mc_fail(__VA_ARGS__);                                                                 \
    } while (0)
/* The call's status must be CAKE_SUCCESS; otherwise report it with cake_last_error(). Returns
 * 1 when it was. */
int mc_ok(cake_status st, const char *call);
/* 1 on every rank when `ok` holds on every rank. Lets a trial stop together after a failure
 * instead of leaving a peer waiting in an exchange. */
int mc_all(int ok);

/* ---- inputs ------------------------------------------------------------------------------- */

enum { MC_X = 0, MC_DY = 1 };

/* Element (g, c) of tensor `tensor`'s x or dy: a finite bf16 of either sign, some +-0.0 and
 * subnormals, exponents 2^-20 .. 2^20 (no overflow anywhere in the op). */
cake_bf16 mc_value(uint64_t seed, int tensor, int which, int64_t g, int64_t c);
/* w[c][k] of tensor `tensor`: fp32, either sign, some zeros, magnitudes 2^-8 .. 2^4. */
float mc_weight(uint64_t seed, int tensor, int64_t c, int k);
/* out[t][c] = mc_value(.., l2g[t], c) for t < S; l2g NULL means global rows 0 .. S-1. */
void mc_fill_rows(uint64_t seed, int tensor, int which, int64_t C, const int64_t *l2g, int64_t S,
                  cake_bf16 *out);

/* ---- trials ------------------------------------------------------------------------------- */

typedef enum mc_part {
    MC_CONTIGUOUS = 0, /* cake_partition_create_contiguous */
    MC_BOUNDARIES,     /* random, uneven boundaries (some ranks may get 0 rows) */
    MC_ZIGZAG,         /* cake_partition_create_zigzag */
    MC_RANGES,         /* random explicit ranges, chunks of 1 .. max_chunk rows, shuffled */
    MC_ROUND_ROBIN,    /* chunks of 1 or 2 rows dealt to the ranks in turn: many short fragments */
    MC_EMPTY_RANKS,    /* contiguous over a random subset of the ranks, the others hold nothing */
    MC_SEQ_ALIGNED,    /* contiguous cut only at sequence boundaries: nothing to exchange */
    MC_PART_COUNT
} mc_part;
extern const char *const mc_part_name[MC_PART_COUNT];

typedef enum mc_seqs {
    MC_SEQS_RANDOM = 0, /* many sequences, lengths 0 .. max (tu_random_cu) */
    MC_SEQS_ONE,        /* one sequence of T >= P rows: it spans every rank */
    MC_SEQS_TINY,       /* sequences of 0 .. 3 rows */
    MC_SEQS_FEW_ROWS,   /* T < P (some ranks get nothing), possibly T = 0 */
    MC_SEQS_COUNT
} mc_seqs;

typedef struct mc_trial {
    uint64_t seed; /* of the data */
    mc_part part;
    int64_t *cu, num_seqs, T;
    int n;
    int64_t C[TU_MAX_TENSORS];
    tu_partition tp; /* ranges and local -> global rows of every rank, and the library's */
    char desc[192];
} mc_trial;

/* Trial `index` of a program for P ranks: every rank gets the same trial. `part` < 0 picks the
 * kind from the index; max_T bounds T; max_c bounds each channel count. Returns 0, or -1 when
 * the library refused the partition (reported). */
int mc_trial_make(mc_trial *t, uint64_t stream, int index, int P, int part, int64_t max_T,
                  int64_t max_c);
void mc_trial_free(mc_trial *t);
/* The problem over the whole global batch, with inputs from mc_value / mc_weight (for the
 * reference: tu_ref_compute, tu_check_rank). Free with tu_problem_free. */
void mc_trial_problem(const mc_trial *t, tu_problem *pb);

/* ---- one rank's buffers ------------------------------------------------------------------- */

typedef struct mc_local {
    int n;
    int64_t S, pool;
    int64_t C[TU_MAX_TENSORS];
    cake_bf16 *x[TU_MAX_TENSORS], *dy[TU_MAX_TENSORS]; /* NULL when S = 0 */
    float *w[TU_MAX_TENSORS];
    cake_bf16 *y[TU_MAX_TENSORS], *dx[TU_MAX_TENSORS]; /* NULL when S = 0 */
    cake_bf16 *hist[TU_MAX_TENSORS];                   /* NULL when pool = 0 */
    float *dw[TU_MAX_TENSORS];
} mc_local;

/* This rank's rows of the trial's inputs (built from its own l2g), weights, and outputs filled
 * with a sentinel. pool = cake_ctx_pool_rows of the context. */
void mc_local_init(mc_local *L, const mc_trial *t, int rank, int64_t pool);
/* Outputs (y, dx, history, dw) back to the sentinel. */
void mc_local_poison(mc_local *L);
void mc_local_free(mc_local *L);
/* 1 when the outputs still hold the sentinel (nothing was written). */
int mc_local_untouched(const mc_local *L);
/* Outputs of two runs bitwise equal, each difference reported; returns the number of arrays
 * that differ. */
int mc_local_diff(const char *label, const mc_local *got, const mc_local *want, int with_hist,
                  int with_backward);
/* Wraps L's outputs as a tu_rank_out (borrowed pointers: do not free it) for tu_check_rank. */
tu_rank_out mc_local_as_out(const mc_local *L);

/* Pointer arrays as the API takes them. */
#define MC_CX(L) ((const cake_bf16 *const *)(L)->x)
#define MC_CDY(L) ((const cake_bf16 *const *)(L)->dy)
#define MC_CW(L) ((const float *const *)(L)->w)
#define MC_CHIST(L) ((const cake_bf16 *const *)(L)->hist)

#endif
