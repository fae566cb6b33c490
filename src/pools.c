#include "pools.h"

#include "args.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

void cake_fill_local_pool_rows(const cake_plan *plan, cake_pool_kind kind, int num_tensors,
                               const int64_t *channels, const cake_bf16 *const *rows,
                               cake_bf16 *const *pools) {
    const cake_fragment *fragments = cake_plan_fragments(plan);
    const int64_t count = cake_plan_num_fragments(plan);
    for (int i = 0; i < num_tensors; i++) {
        const int64_t C = channels[i];
        for (int64_t f = 0; f < count; f++) {
            const cake_halo_row *halo =
                kind == CAKE_POOL_HISTORY ? fragments[f].history : fragments[f].future;
            for (int j = 0; j < CAKE_HALO_ROWS; j++) {
                cake_bf16 *dst = pools[i] + (f * CAKE_HALO_ROWS + j) * C;
                if (halo[j].global_row < 0)
                    memset(dst, 0, sizeof(cake_bf16) * (size_t)C); /* +0.0 */
                else if (halo[j].is_local)
                    memcpy(dst, rows[i] + halo[j].local_row * C, sizeof(cake_bf16) * (size_t)C);
            }
        }
    }
}

cake_status cake_alloc_pools(int64_t pool_rows, int num_tensors, const int64_t *channels,
                             cake_bf16 **pools) {
    int64_t total = 0;
    for (int i = 0; i < num_tensors; i++) total += pool_rows * channels[i];
    cake_bf16 *base = malloc(sizeof(cake_bf16) * (size_t)(total > 0 ? total : 1));
    if (!base)
        return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory for %lld halo pool rows",
                         (long long)pool_rows);
    for (int i = 0; i < num_tensors; i++) {
        pools[i] = base;
        base += pool_rows * channels[i];
    }
    return CAKE_SUCCESS;
}

int64_t cake_plan_local_halo_rows(const cake_plan *plan, cake_pool_kind kind) {
    const cake_fragment *fragments = cake_plan_fragments(plan);
    int64_t count = 0;
    for (int64_t f = 0; f < cake_plan_num_fragments(plan); f++)
        for (int j = 0; j < CAKE_HALO_ROWS; j++)
            count += (kind == CAKE_POOL_HISTORY ? fragments[f].history : fragments[f].future)[j].is_local;
    return count;
}

cake_status cake_pool_tensors_make(cake_pool_kind kind, int64_t pool_rows,
                                   const cake_conv_params *params, int num_tensors,
                                   const int64_t *channels, const cake_bf16 *const *x,
                                   const cake_bf16 *const *dy, cake_bf16 *const *pools,
                                   cake_pool_tensors *out) {
    const int with_x = kind == CAKE_POOL_FUTURE && cake_future_carries_x(params);
    const int count = with_x ? 2 * num_tensors : num_tensors;
    out->count = count;
    if (count <= CAKE_POOL_TENSORS_INLINE) {
        out->channels = out->channels_inline;
        out->rows = out->rows_inline;
        out->pools = out->pools_inline;
    } else {
        out->channels = malloc(sizeof(int64_t) * (size_t)count);
        out->rows = malloc(sizeof(cake_bf16 *) * (size_t)count);
        out->pools = malloc(sizeof(cake_bf16 *) * (size_t)count);
        if (!out->channels || !out->rows || !out->pools) {
            cake_pool_tensors_free(out);
            return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory for %d pool tensors", count);
        }
    }
    for (int i = 0; i < num_tensors; i++) {
        out->channels[i] = channels[i];
        out->rows[i] = kind == CAKE_POOL_HISTORY ? x[i] : dy[i];
        out->pools[i] = pools[i];
        if (!with_x) continue;
        out->channels[num_tensors + i] = channels[i];
        out->rows[num_tensors + i] = x[i];
        out->pools[num_tensors + i] = pools[i] ? pools[i] + pool_rows * channels[i] : NULL;
    }
    return CAKE_SUCCESS;
}

void cake_pool_tensors_free(cake_pool_tensors *t) {
    if (t->channels != t->channels_inline) {
        free(t->channels);
        free(t->rows);
        free(t->pools);
    }
    t->count = 0;
    t->channels = NULL;
    t->rows = NULL;
    t->pools = NULL;
}
