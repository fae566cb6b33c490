/* The whole op on one process: a P = 1 partition, its plan, and pools filled by local copies. */
#include "args.h"
#include "internal.h"
#include "parallel.h"
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

/* Builds the plan, checks every array of the call against it (so nothing is allocated for a
 * call that will be refused, and the pool sizes are known to fit), then makes and fills the
 * pools the call needs (future only for the backward). */
static cake_status single_init(single *s, const int64_t *cu_seqlens, int64_t num_seqs,
                               const cake_call_args *call) {
    *s = (single){0};
    CAKE_CHECK(cake_partition_create_contiguous(cu_seqlens, num_seqs, 1, &s->partition));
    cake_status status = cake_plan_create(s->partition, 0, &s->plan);
    if (status == CAKE_SUCCESS) {
        cake_call_args args = *call;
        args.rows = cake_plan_local_rows(s->plan);
        args.pool_rows = cake_plan_pool_rows(s->plan);
        args.history_is_internal = 1;
        args.future_is_internal = 1;
        status = cake_check_call_args(&args);
    }
    const int n = call->num_tensors;
    if (status == CAKE_SUCCESS) {
        s->history = calloc((size_t)n, sizeof(cake_bf16 *));
        s->future = call->backward ? calloc((size_t)n, sizeof(cake_bf16 *)) : NULL;
        if (!s->history || (call->backward && !s->future))
            status = cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory");
    }
    const int64_t pool_rows = cake_plan_pool_rows(s->plan);
    if (status == CAKE_SUCCESS) status = cake_alloc_pools(pool_rows, n, call->channels, s->history);
    if (status == CAKE_SUCCESS && call->backward)
        status = cake_alloc_pools(cake_future_pool_rows(call->params, pool_rows), n,
                                  call->channels, s->future);
    for (int kind = CAKE_POOL_HISTORY; kind <= CAKE_POOL_FUTURE && status == CAKE_SUCCESS; kind++) {
        if (kind == CAKE_POOL_FUTURE && !call->backward) break;
        cake_pool_tensors t;
        status = cake_pool_tensors_make((cake_pool_kind)kind, pool_rows, call->params, n,
                                        call->channels, call->x, call->dy,
                                        kind == CAKE_POOL_HISTORY ? s->history : s->future, &t);
        if (status != CAKE_SUCCESS) break;
        if (cake_plan_local_rows(s->plan) > 0)
            cake_fill_local_pool_rows(s->plan, (cake_pool_kind)kind, t.count, t.channels, t.rows,
                                      t.pools);
        cake_pool_tensors_free(&t);
    }
    if (status != CAKE_SUCCESS) single_free(s);
    return status;
}

/* The options with the thread count resolved now ($CAKE_NUM_THREADS read once per call, and an
 * invalid value refused before anything is allocated). Bad options are left for
 * cake_cpu_forward / cake_cpu_backward to name. */
static cake_status resolve_options(const cake_cpu_options *options, cake_cpu_options *out) {
    *out = options ? *options : (cake_cpu_options){0, CAKE_CPU_ISA_AUTO};
    if (out->num_threads == 0) CAKE_CHECK(cake_cpu_threads(0, &out->num_threads));
    return CAKE_SUCCESS;
}

cake_status cake_cpu_forward_single_rank(const int64_t *cu_seqlens, int64_t num_seqs,
                                         int num_tensors, const int64_t *channels,
                                         const cake_bf16 *const *x, const float *const *w,
                                         const cake_conv_params *params, cake_bf16 *const *y,
                                         const cake_cpu_options *options) {
    cake_clear_error();
    const cake_call_args call = {.num_tensors = num_tensors, .channels = channels, .x = x,
                                 .w = w, .params = params, .y = y};
    cake_cpu_options resolved;
    CAKE_CHECK(resolve_options(options, &resolved));
    single s;
    CAKE_CHECK(single_init(&s, cu_seqlens, num_seqs, &call));
    cake_status status = cake_cpu_forward(s.plan, num_tensors, channels, x, w, params,
                                          (const cake_bf16 *const *)s.history, y, &resolved);
    single_free(&s);
    return status;
}

cake_status cake_cpu_backward_single_rank(const int64_t *cu_seqlens, int64_t num_seqs,
                                          int num_tensors, const int64_t *channels,
                                          const cake_bf16 *const *x, const float *const *w,
                                          const cake_conv_params *params,
                                          const cake_bf16 *const *dy, cake_bf16 *const *dx,
                                          float *const *dw, const cake_cpu_options *options) {
    cake_clear_error();
    const cake_call_args call = {.num_tensors = num_tensors, .channels = channels, .x = x,
                                 .w = w, .params = params, .dy = dy, .dx = dx, .dw = dw,
                                 .backward = 1};
    cake_cpu_options resolved;
    CAKE_CHECK(resolve_options(options, &resolved));
    single s;
    CAKE_CHECK(single_init(&s, cu_seqlens, num_seqs, &call));
    cake_status status = cake_cpu_backward(s.plan, num_tensors, channels, x, w, params,
                                           (const cake_bf16 *const *)s.history, dy,
                                           (const cake_bf16 *const *)s.future, dx, dw,
                                           &resolved);
    single_free(&s);
    return status;
}
