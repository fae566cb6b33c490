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

/* Allocates one pool of `pool_rows` rows per tensor in a single block (pools[0] owns it;
 * free(pools[0])). */
cake_status cake_alloc_pools(int64_t pool_rows, int num_tensors, const int64_t *channels,
                             cake_bf16 **pools);

/* The arrays one direction's pools are filled from, as a list of `count` tensors: the history
 * pools from x; the future pools from dy and, with an activation, their second half (rows
 * pool_rows..) from x at the same rows, so that the receiver can recompute the activation's
 * input there (docs/NUMERICS.md). One exchange carries them all. */
#define CAKE_POOL_TENSORS_INLINE 16 /* held inside the struct: most calls allocate nothing */
typedef struct cake_pool_tensors {
    int count; /* num_tensors, or 2 * num_tensors for the future pools with an activation */
    int64_t *channels;
    const cake_bf16 **rows;
    cake_bf16 **pools;
    int64_t channels_inline[CAKE_POOL_TENSORS_INLINE];
    const cake_bf16 *rows_inline[CAKE_POOL_TENSORS_INLINE];
    cake_bf16 *pools_inline[CAKE_POOL_TENSORS_INLINE];
} cake_pool_tensors;

cake_status cake_pool_tensors_make(cake_pool_kind kind, int64_t pool_rows,
                                   const cake_conv_params *params, int num_tensors,
                                   const int64_t *channels, const cake_bf16 *const *x,
                                   const cake_bf16 *const *dy, cake_bf16 *const *pools,
                                   cake_pool_tensors *out);
/* Frees what make allocated (nothing for up to CAKE_POOL_TENSORS_INLINE tensors). */
void cake_pool_tensors_free(cake_pool_tensors *tensors);

#endif
