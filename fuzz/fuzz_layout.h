/* An independent model of SPEC 2, written for the harnesses from the spec text, not from src/:
 * every rank's ranges, the owner of a global row, each rank's fragments and halo rows, and the
 * pools a plan needs, taken from global data. Works on ranges, never per row, so T may be as
 * large as INT64_MAX. */
#ifndef CAKE_FUZZ_LAYOUT_H
#define CAKE_FUZZ_LAYOUT_H

#include <stdint.h>

#include "cake.h"

typedef struct fz_layout {
    int P;
    int64_t T, num_seqs;
    const int64_t *cu;      /* borrowed, num_seqs + 1 entries, valid */
    int64_t *first;         /* P + 1: rank r holds ranges[first[r] .. first[r + 1]) */
    cake_range *ranges;
    int64_t *local_rows;    /* per rank */
    int64_t *range_local;   /* per range: local row of its start on its rank */
    int32_t *range_rank;
    int64_t num_sorted;     /* non-empty ranges, by start */
    int64_t *sorted;
} fz_layout;

/* 1 if cu_seqlens is valid per SPEC 2 (num_seqs >= 0, cu[0] = 0, non-decreasing). */
int fz_cu_valid(const int64_t *cu, int64_t num_seqs);

/* Builds the model from explicit per-rank counts and ranges (cu must be valid, P >= 1, counts
 * >= 0). Returns 1 if the ranges lie in [0, T] and cover [0, T) exactly once, else 0 (and the
 * layout is freed). */
int fz_layout_ranges(fz_layout *l, const int64_t *cu, int64_t num_seqs, int P,
                     const int64_t *counts, const cake_range *ranges);
/* The helpers of cake.h, as SPEC 2 words them. Always valid for valid cu and P >= 1. */
void fz_layout_contiguous(fz_layout *l, const int64_t *cu, int64_t num_seqs, int P);
void fz_layout_zigzag(fz_layout *l, const int64_t *cu, int64_t num_seqs, int P);
void fz_layout_free(fz_layout *l);

/* Sequence of global row g (0 <= g < T): the i with cu[i] <= g < cu[i + 1]. */
int64_t fz_seq_of(const fz_layout *l, int64_t g);
/* Owner rank and local row of global row g (0 <= g < T). */
void fz_owner(const fz_layout *l, int64_t g, int32_t *rank, int64_t *local);

/* Expected fragments of `rank` (halo rows filled); *count set; free() the result. */
cake_fragment *fz_fragments(const fz_layout *l, int rank, int64_t *count);

/* The library's plan for `rank` equals the model: rows, fragments, every halo row. Aborts with
 * a description otherwise. */
void fz_check_plan(const fz_layout *l, const cake_plan *plan, int rank);

/* Local row -> global row of `rank` (S_local entries; free()). Only for small T. */
int64_t *fz_l2g(const fz_layout *l, int rank);

/* Pools of one tensor from global [T, C] data (SPEC 2 / cake.h layout): history row 3f+j is
 * x at global_start - 3 + j or +0.0 before the sequence; future row 3f+j is dy at
 * global_start + length + j or +0.0 at or past its end. Either output may be NULL. */
void fz_pools(const cake_fragment *frags, int64_t count, int64_t C, const cake_bf16 *x,
              const cake_bf16 *dy, cake_bf16 *history, cake_bf16 *future);

#endif
