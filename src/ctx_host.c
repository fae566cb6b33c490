/* The host backend of a context (CPU kernels, host-memory exchange) and the public CPU calls. */
#include "args.h"
#include "ctx_internal.h"
#include "internal.h"
#include "pools.h"

#include <stdlib.h>
#include <string.h>

/* Fills one direction's pools: the exchange first, so that a failed exchange leaves them as
 * they were (the forward's history is an output), then the rows this rank holds itself. */
static cake_status exchange(cake_ctx *ctx, cake_pool_kind kind, const cake_pool_tensors *t) {
    const cake_status status = cake_exchange_host(
        &ctx->lists[kind], &ctx->transport,
        kind == CAKE_POOL_HISTORY ? CAKE_TAG_HISTORY : CAKE_TAG_FUTURE, ctx->group.timeout_seconds,
        t->count, t->channels, t->rows, t->pools, &ctx->staging, &ctx->stats);
    if (status != CAKE_SUCCESS) return cake_ctx_exchange_failed(ctx, status);
    cake_fill_local_pool_rows(ctx->plan, kind, t->count, t->channels, t->rows, t->pools);
    ctx->stats.rows_copied += cake_plan_local_halo_rows(ctx->plan, kind) * t->count;
    return CAKE_SUCCESS;
}

static cake_status host_forward_halo(cake_ctx *ctx, const cake_call *call) {
    cake_pool_tensors t;
    CAKE_CHECK(cake_pool_tensors_make(CAKE_POOL_HISTORY, cake_plan_pool_rows(ctx->plan),
                                      call->params, call->num_tensors, call->channels, call->x,
                                      NULL, call->history, &t));
    const cake_status status = exchange(ctx, CAKE_POOL_HISTORY, &t);
    cake_pool_tensors_free(&t);
    return status;
}

static cake_status host_forward_compute(cake_ctx *ctx, const cake_call *call) {
    return cake_cpu_forward(ctx->plan, call->num_tensors, call->channels, call->x, call->w,
                            call->params, (const cake_bf16 *const *)call->history, call->y,
                            &ctx->cpu);
}

static cake_status host_backward(cake_ctx *ctx, const cake_call *call) {
    const int n = call->num_tensors;
    const int64_t pool_rows = cake_plan_pool_rows(ctx->plan);
    cake_bf16 **future = calloc((size_t)n, sizeof *future);
    if (!future) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory");
    cake_pool_tensors t = {0};
    cake_status status = cake_alloc_pools(cake_future_pool_rows(call->params, pool_rows), n,
                                          call->channels, future);
    if (status == CAKE_SUCCESS)
        status = cake_pool_tensors_make(CAKE_POOL_FUTURE, pool_rows, call->params, n,
                                        call->channels, call->x, call->dy, future, &t);
    if (status == CAKE_SUCCESS) status = exchange(ctx, CAKE_POOL_FUTURE, &t);
    if (status == CAKE_SUCCESS)
        status = cake_cpu_backward(ctx->plan, n, call->channels, call->x, call->w, call->params,
                                   (const cake_bf16 *const *)call->history, call->dy,
                                   (const cake_bf16 *const *)future, call->dx, call->dw,
                                   &ctx->cpu);
    cake_pool_tensors_free(&t);
    free(future[0]);
    free(future);
    return status;
}

static void host_free(void *pools, void *stream) {
    (void)stream;
    free(pools);
}

static cake_status host_save_pools(cake_ctx *ctx, const cake_call *call, cake_conv_entry *e) {
    const int64_t pool_rows = cake_plan_pool_rows(ctx->plan);
    const int64_t elems = pool_rows * cake_total_channels(call->num_tensors, call->channels);
    cake_bf16 *dst = malloc(sizeof(cake_bf16) * (size_t)(elems > 0 ? elems : 1));
    if (!dst) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory for the recompute handle");
    e->pools = dst;
    e->free_pools = host_free;
    for (int i = 0; i < call->num_tensors; i++) {
        const int64_t count = pool_rows * call->channels[i];
        if (count > 0) memcpy(dst, call->history[i], sizeof(cake_bf16) * (size_t)count);
        dst += count;
    }
    return CAKE_SUCCESS;
}

static cake_status host_load_pools(cake_ctx *ctx, const cake_call *call, cake_conv_entry *e) {
    (void)ctx;
    const cake_bf16 *src = e->pools;
    for (int i = 0; i < call->num_tensors; i++) {
        const int64_t count = e->pool_rows * call->channels[i];
        if (count > 0) memcpy(call->history[i], src, sizeof(cake_bf16) * (size_t)count);
        src += count;
    }
    return CAKE_SUCCESS;
}

static const cake_backend host_backend = {-1, host_forward_halo, host_forward_compute,
                                          host_backward, host_save_pools, host_load_pools};

static cake_status forward(cake_ctx *ctx, const cake_call *call) {
    if (!ctx) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "ctx: expected a pointer, got NULL");
    CAKE_CHECK(cake_ctx_check_call(ctx, call, 0, 0));
    return cake_ctx_run_forward(ctx, &host_backend, call);
}

static cake_status backward(cake_ctx *ctx, const cake_call *call) {
    if (!ctx) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "ctx: expected a pointer, got NULL");
    CAKE_CHECK(cake_ctx_check_call(ctx, call, 1, 0));
    return cake_ctx_run_backward(ctx, &host_backend, call);
}

cake_status cake_forward(cake_ctx *ctx, int64_t channels, const cake_bf16 *x, const float *w,
                         const cake_conv_params *params, cake_bf16 *y, cake_bf16 *history,
                         cake_recompute_handle *handle) {
    cake_clear_error();
    const cake_call call = {.multi = 0, .num_tensors = 1, .channels = &channels, .x = &x, .w = &w,
                            .params = params, .y = &y, .history = &history, .handle = handle};
    return forward(ctx, &call);
}

cake_status cake_backward(cake_ctx *ctx, int64_t channels, const cake_bf16 *x, const float *w,
                          const cake_conv_params *params, const cake_bf16 *history,
                          const cake_bf16 *dy, cake_bf16 *dx, float *dw) {
    cake_clear_error();
    cake_bf16 *h = (cake_bf16 *)history; /* read only in the backward */
    const cake_call call = {.multi = 0, .num_tensors = 1, .channels = &channels, .x = &x, .w = &w,
                            .params = params, .history = &h, .dy = &dy, .dx = &dx, .dw = &dw};
    return backward(ctx, &call);
}

cake_status cake_forward_multi(cake_ctx *ctx, int num_tensors, const int64_t *channels,
                               const cake_bf16 *const *x, const float *const *w,
                               const cake_conv_params *params, cake_bf16 *const *y,
                               cake_bf16 *const *history, cake_recompute_handle *handle) {
    cake_clear_error();
    const cake_call call = {.multi = 1, .num_tensors = num_tensors, .channels = channels, .x = x,
                            .w = w, .params = params, .y = y, .history = history,
                            .handle = handle};
    return forward(ctx, &call);
}

cake_status cake_backward_multi(cake_ctx *ctx, int num_tensors, const int64_t *channels,
                                const cake_bf16 *const *x, const float *const *w,
                                const cake_conv_params *params, const cake_bf16 *const *history,
                                const cake_bf16 *const *dy, cake_bf16 *const *dx,
                                float *const *dw) {
    cake_clear_error();
    const cake_call call = {.multi = 1, .num_tensors = num_tensors, .channels = channels, .x = x,
                            .w = w, .params = params, .history = (cake_bf16 *const *)history,
                            .dy = dy, .dx = dx, .dw = dw};
    return backward(ctx, &call);
}
