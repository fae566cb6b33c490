/* Filling history / future pools from this rank's own rows (the rows a plan marks is_local) and
 * with +0.0 outside the sequence. Rows owned by other ranks are left for the exchange. */
#ifndef CAKE_POOLS_H
#define CAKE_POOLS_H

#include "cake.h"

typedef enum cake_pool_kind { CAKE_POOL_HISTORY, CAKE_POOL_FUTURE } cake_pool_kind;

/* pools[i] has cake_plan_pool_rows(plan) rows of channels[i]; rows[i] are the local rows (x for
 * the history, dy for the future). */
void cake_fill_local_pool_rows(const cake_plan *plan, cake_pool_kind kind, int num_tensors,
                               const int64_t *channels, const cake_bf16 *const *rows,
                               cake_bf16 *const *pools);

/* Halo rows of the plan (one tensor) that the rank holds itself: copied, not exchanged. */
int64_t cake_plan_local_halo_rows(const cake_plan *plan, cake_pool_kind kind);

/* Allocates one pool per tensor in a single block (pools[0] owns it; free(pools[0])). */
cake_status cake_alloc_pools(const cake_plan *plan, int num_tensors, const int64_t *channels,
                             cake_bf16 **pools);

#endif
