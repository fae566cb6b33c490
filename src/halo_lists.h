/* Who sends which rows to whom, for one direction, derived from the partition alone so every
 * rank computes the same lists without communication. */
#ifndef CAKE_HALO_LISTS_H
#define CAKE_HALO_LISTS_H

#include "cake.h"
#include "pools.h"

typedef struct cake_peer_rows {
    int peer;
    int64_t count;
    int64_t *rows; /* sends: local rows to pack; receives: pool rows (3f + j) to fill */
} cake_peer_rows;

typedef struct cake_halo_lists {
    int num_sends, num_receives;   /* peers with something to send / receive */
    cake_peer_rows *sends, *receives; /* in increasing peer order */
    int64_t rows_sent, rows_received; /* per tensor */
} cake_halo_lists;

/* Builds both directions for `rank` from the plans of every rank (plans[r] for all r). */
cake_status cake_halo_lists_build(const cake_plan *const *plans, int num_ranks, int rank,
                                  cake_pool_kind kind, cake_halo_lists *out);
void cake_halo_lists_free(cake_halo_lists *lists);

#endif
