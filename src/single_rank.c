/* The whole op on one process: a P = 1 partition, its plan, and pools filled by local copies. */
#include "internal.h"
#include "pools.h"

#include <stdlib.h>

typedef struct single {
    cake_partition *partition;
    cake_plan *plan;
    cake_bf16 **history, **future;
} single;

static void single_free(single *s) {
    if (s->history) free(s->history[0]);
    if (s->future) free(s->future[0]);
    free(s->history);
    free(s->future);
    cake_plan_destroy(s->plan);
    cake_partition_destroy(s->partition);
}

/* Builds the plan and the pools the call needs (future only for the backward). The channel
 * counts are checked here first so the pool sizes below are safe to compute. */
static cake_status single_init(single *s, const int64_t *cu_seqlens, int64_t num_seqs,
                               int num_tensors, const int64_t *channels, int backward) {
    *s = (single){0};
    if (num_tensors < 1)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "num_tensors: expected >= 1, got %d",
                         num_tensors);
    if (!channels)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "channels: expected a pointer, got NULL");
    for (int i = 0; i < num_tensors; i++)
        if (channels[i] <= 0 || channels[i] % 8 != 0)
            return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                             "channels[%d]: expected a positive multiple of 8, got %lld", i,
                             (long long)channels[i]);
    CAKE_CHECK(cake_partition_create_contiguous(cu_seqlens, num_seqs, 1, &s->partition));
    cake_status status = cake_plan_create(s->partition, 0, &s->plan);
    if (status == CAKE_SUCCESS) {
        s->history = calloc((size_t)num_tensors, sizeof(cake_bf16 *));
        s->future = backward ? calloc((size_t)num_tensors, sizeof(cake_bf16 *)) : NULL;
        if (!s->history || (backward && !s->future))
            status = cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory");
    }
    if (status == CAKE_SUCCESS) status = cake_alloc_pools(s->plan, num_tensors, channels, s->history);
    if (status == CAKE_SUCCESS && backward)
        status = cake_alloc_pools(s->plan, num_tensors, channels, s->future);
    if (status != CAKE_SUCCESS) single_free(s);
    return status;
}

/* Pools are filled only after the kernels' own argument checks would pass, so check pointers
 * the fill reads first: a NULL row array is reported by the kernel call instead. */
static int rows_present(const cake_bf16 *const *rows, int n) {
    if (!rows) return 0;
    for (int i = 0; i < n; i++)
        if (!rows[i]) return 0;
    return 1;
}

cake_status cake_cpu_forward_single_rank(const int64_t *cu_seqlens, int64_t num_seqs,
                                         int num_tensors, const int64_t *channels,
                                         const cake_bf16 *const *x, const float *const *w,
                                         cake_bf16 *const *y, const cake_cpu_options *options) {
    cake_clear_error();
    single s;
    CAKE_CHECK(single_init(&s, cu_seqlens, num_seqs, num_tensors, channels, 0));
    if (cake_plan_local_rows(s.plan) > 0 && rows_present(x, num_tensors))
        cake_fill_local_pool_rows(s.plan, CAKE_POOL_HISTORY, num_tensors, channels, x, s.history);
    cake_status status = cake_cpu_forward(s.plan, num_tensors, channels, x, w,
                                          (const cake_bf16 *const *)s.history, y, options);
    single_free(&s);
    return status;
}

cake_status cake_cpu_backward_single_rank(const int64_t *cu_seqlens, int64_t num_seqs,
                                          int num_tensors, const int64_t *channels,
                                          const cake_bf16 *const *x, const float *const *w,
                                          const cake_bf16 *const *dy, cake_bf16 *const *dx,
                                          float *const *dw, const cake_cpu_options *options) {
    cake_clear_error();
    single s;
    CAKE_CHECK(single_init(&s, cu_seqlens, num_seqs, num_tensors, channels, 1));
    if (cake_plan_local_rows(s.plan) > 0 && rows_present(x, num_tensors))
        cake_fill_local_pool_rows(s.plan, CAKE_POOL_HISTORY, num_tensors, channels, x, s.history);
    if (cake_plan_local_rows(s.plan) > 0 && rows_present(dy, num_tensors))
        cake_fill_local_pool_rows(s.plan, CAKE_POOL_FUTURE, num_tensors, channels, dy, s.future);
    cake_status status = cake_cpu_backward(s.plan, num_tensors, channels, x, w,
                                           (const cake_bf16 *const *)s.history, dy,
                                           (const cake_bf16 *const *)s.future, dx, dw, options);
    single_free(&s);
    return status;
}
