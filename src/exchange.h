/* One halo exchange for all tensors of a call: pack the rows each peer needs (tensor after
 * tensor, row after row, in the order of the halo lists), one transport exchange, unpack into
 * the pools. Host memory. */
#ifndef CAKE_EXCHANGE_H
#define CAKE_EXCHANGE_H

#include "cake.h"
#include "halo_lists.h"

enum { CAKE_TAG_HISTORY = 11, CAKE_TAG_FUTURE = 12, CAKE_TAG_CHECK = 13 };

/* A staging area that grows as needed and lives as long as its context: after a timeout the
 * transport may still touch it, so it is never freed mid-call. */
typedef struct cake_staging {
    void *data;
    size_t bytes;
} cake_staging;

cake_status cake_staging_reserve(cake_staging *staging, size_t bytes);

/* Sums of channels over the tensors: the elements one halo row carries for all tensors. */
int64_t cake_total_channels(int num_tensors, const int64_t *channels);

/* Exchanges the rows in `lists`: sends rows[i] rows, receives into pools[i] rows. Counts the
 * messages and bytes in `stats`. Does nothing (and no transport call) when the lists are empty. */
cake_status cake_exchange_host(const cake_halo_lists *lists, const cake_transport *transport,
                               int tag, double timeout_seconds, int num_tensors,
                               const int64_t *channels, const cake_bf16 *const *rows,
                               cake_bf16 *const *pools, cake_staging *staging,
                               cake_ctx_stats *stats);

/* Adds one exchange of `lists` for num_tensors tensors to the counters. */
void cake_exchange_count(const cake_halo_lists *lists, int num_tensors, int64_t row_elems,
                         cake_ctx_stats *stats);

#endif
