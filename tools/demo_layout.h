/* The batch's sequences and the partition's layout (each rank's ranges and fragments), computed
 * by the demo from SPEC 2 alone, so that the check trusts the library for neither. */
#ifndef CAKE_DEMO_LAYOUT_H
#define CAKE_DEMO_LAYOUT_H

#include "cake.h"
#include "demo_options.h"

#include <stdint.h>

/* Random sequence lengths in [1, 2 * mean_length - 1], the last one cut to end at T. Returns
 * the number of sequences and a malloc'd cu_seqlens (num_seqs + 1 entries), or -1 (memory). */
int64_t demo_make_seqlens(int64_t tokens, int64_t mean_length, uint64_t seed, int64_t **cu_seqlens);

/* Every rank's ordered ranges: rank r holds ranges[2r .. 2r + 2) (the second is empty for the
 * contiguous kinds). Boundaries (num_ranks + 1) are set for the contiguous kinds. */
typedef struct demo_ranges {
    int num_ranks;
    int64_t total_rows;
    cake_range *ranges;   /* 2 * num_ranks */
    int64_t *boundaries;  /* num_ranks + 1, or NULL for zigzag */
} demo_ranges;

int demo_ranges_create(demo_partition_kind kind, int64_t total_rows, int num_ranks, uint64_t seed,
                       demo_ranges *out);
void demo_ranges_free(demo_ranges *r);
int64_t demo_ranges_local_rows(const demo_ranges *r, int rank);

/* The library's partition of the same kind, through its own helper (what a user would call). */
cake_status demo_partition_create(demo_partition_kind kind, const demo_ranges *r,
                                  const int64_t *cu_seqlens, int64_t num_seqs,
                                  cake_partition **out);

/* A maximal run of local rows in one sequence, consecutive in global order (SPEC 2). */
typedef struct demo_fragment {
    int64_t local_start, length, global_start;
    int64_t seq_start, seq_end; /* the sequence's global rows */
} demo_fragment;

/* This rank's fragments in local order; returns their count and a malloc'd array (NULL when
 * there are none), or -1 (memory). */
int64_t demo_fragments(const demo_ranges *r, int rank, const int64_t *cu_seqlens,
                       int64_t num_seqs, demo_fragment **out);

/* NULL when the library's plan lists exactly these fragments, else a static line saying where
 * they first differ. */
const char *demo_compare_fragments(const cake_plan *plan, const demo_fragment *fragments,
                                   int64_t count);

#endif
