/* The CUDA backend of a context: device tables made on first use, the device exchange (pack,
 * transport, assemble), the GPU kernels, and the public GPU calls. */
#include "halo_cuda.h"

#include "ctx_internal.h"
#include "pools.h"

#include <stdlib.h>
#include <string.h>

#define ALIGNMENT 256

typedef struct device_state {
    int device;
    cake_cuda_plan *plan;
    cake_halo_device halo[2]; /* [CAKE_POOL_HISTORY], [CAKE_POOL_FUTURE] */
    void *pinned;             /* staging for transports without exchange_device */
    size_t pinned_bytes;
    cudaEvent_t staging_done; /* the last copy out of `pinned` */
    cake_transfer *transfers[2]; /* per direction: one per send, then one per receive */
} device_state;

/* Layout: send messages, receive messages, then (backward) future pools and the kernels'
 * workspace. */
typedef struct layout {
    size_t send, recv, future, kernel, total;
} layout;

typedef struct gpu_call {
    cake_cooperative cooperative;
    cudaStream_t stream;
    char *workspace; /* already acquired for this call, laid out as `l` */
    layout l;
} gpu_call;

static void state_free(void *p) {
    device_state *st = p;
    if (!st) return;
    cake_cuda_plan_destroy(st->plan);
    cake_halo_device_free(&st->halo[0]);
    cake_halo_device_free(&st->halo[1]);
    if (st->staging_done) cudaEventDestroy(st->staging_done);
    cudaFreeHost(st->pinned);
    free(st->transfers[0]);
    free(st->transfers[1]);
    free(st);
}

static cake_status state_of(cake_ctx *ctx, device_state **out) {
    int device;
    CAKE_CUDA_CHECK(cudaGetDevice(&device), "cudaGetDevice");
    device_state *st = ctx->device_state;
    if (st) {
        if (st->device != device)
            return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                             "ctx: its GPU tables live on device %d, but the current device is %d",
                             st->device, device);
        *out = st;
        return CAKE_SUCCESS;
    }
    st = calloc(1, sizeof *st);
    if (!st) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory");
    st->device = device;
    cake_status status = cake_cuda_plan_create(ctx->plan, &st->plan);
    if (status == CAKE_SUCCESS)
        status = cake_halo_device_create(ctx->plan, &ctx->lists[CAKE_POOL_HISTORY],
                                         CAKE_POOL_HISTORY, &st->halo[CAKE_POOL_HISTORY]);
    if (status == CAKE_SUCCESS)
        status = cake_halo_device_create(ctx->plan, &ctx->lists[CAKE_POOL_FUTURE],
                                         CAKE_POOL_FUTURE, &st->halo[CAKE_POOL_FUTURE]);
    if (status == CAKE_SUCCESS && cudaEventCreateWithFlags(&st->staging_done, cudaEventDisableTiming) != cudaSuccess)
        status = cake_fail(CAKE_ERROR_CUDA, "cudaEventCreate failed");
    for (int kind = 0; kind < 2 && status == CAKE_SUCCESS; kind++) {
        const cake_halo_lists *lists = &ctx->lists[kind];
        st->transfers[kind] = malloc(sizeof(cake_transfer) *
                                     (size_t)(lists->num_sends + lists->num_receives + 1));
        if (!st->transfers[kind]) status = cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory");
    }
    if (status != CAKE_SUCCESS) {
        state_free(st);
        return status;
    }
    ctx->device_state = st;
    ctx->device_state_free = state_free;
    *out = st;
    return CAKE_SUCCESS;
}

/* ---- workspace ---------------------------------------------------------------------------- */

static size_t round_up(size_t n) { return (n + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT; }

/* The backward with an activation carries x next to dy (cake_pool_tensors). */
static cake_status layout_of(const cake_ctx *ctx, int n, const int64_t *channels,
                             const cake_conv_params *params, int backward, layout *l) {
    memset(l, 0, sizeof *l);
    const int64_t pool_rows = cake_plan_pool_rows(ctx->plan);
    const int64_t carried = backward ? 1 + cake_future_carries_x(params) : 1; /* arrays a row carries */
    const int64_t row_elems = carried * cake_total_channels(n, channels);
    const cake_halo_lists *lists = &ctx->lists[backward ? CAKE_POOL_FUTURE : CAKE_POOL_HISTORY];
    l->send = round_up(sizeof(cake_bf16) * (size_t)(lists->rows_sent * row_elems));
    l->recv = round_up(sizeof(cake_bf16) * (size_t)(lists->rows_received * row_elems));
    if (backward) {
        l->future = round_up(sizeof(cake_bf16) * (size_t)(pool_rows * row_elems));
        CAKE_CHECK(cake_cuda_kernel_workspace_bytes(cake_plan_local_rows(ctx->plan), n, channels,
                                                    params, &l->kernel));
        l->kernel = round_up(l->kernel);
    }
    l->total = l->send + l->recv + l->future + l->kernel;
    return CAKE_SUCCESS;
}

cake_status cake_ctx_cuda_workspace_size(const cake_ctx *ctx, int num_tensors,
                                         const int64_t *channels, const cake_conv_params *params,
                                         int backward, size_t *bytes) {
    cake_clear_error();
    if (!ctx) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "ctx: expected a pointer, got NULL");
    if (!bytes) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "bytes: expected a pointer, got NULL");
    CAKE_CHECK(cake_check_sizes(num_tensors, channels, params, cake_plan_local_rows(ctx->plan),
                                cake_plan_pool_rows(ctx->plan)));
    layout l;
    CAKE_CHECK(layout_of(ctx, num_tensors, channels, params, backward, &l));
    *bytes = l.total;
    return CAKE_SUCCESS;
}

/* ---- exchange ----------------------------------------------------------------------------- */

static cake_status staging_reserve(device_state *st, size_t bytes) {
    if (bytes <= st->pinned_bytes) return CAKE_SUCCESS;
    CAKE_CUDA_CHECK(cudaEventSynchronize(st->staging_done), "cudaEventSynchronize");
    cudaFreeHost(st->pinned);
    st->pinned = NULL;
    st->pinned_bytes = 0;
    CAKE_CUDA_CHECK(cudaMallocHost(&st->pinned, bytes), "cudaMallocHost(staging)");
    st->pinned_bytes = bytes;
    return CAKE_SUCCESS;
}

/* Transfers over `send` and `recv` (device or pinned host), in the host layout of exchange.c,
 * written into `t` (one per send, then one per receive). */
static void describe(const cake_halo_lists *lists, int64_t row_elems, char *send, char *recv,
                     cake_transfer *t) {
    for (int s = 0; s < lists->num_sends; s++) {
        const int64_t bytes = (int64_t)sizeof(cake_bf16) * lists->sends[s].count * row_elems;
        t[s] = (cake_transfer){lists->sends[s].peer, send, bytes};
        send += bytes;
    }
    for (int s = 0; s < lists->num_receives; s++) {
        const int64_t bytes = (int64_t)sizeof(cake_bf16) * lists->receives[s].count * row_elems;
        t[lists->num_sends + s] = (cake_transfer){lists->receives[s].peer, recv, bytes};
        recv += bytes;
    }
}

static cake_status move(cake_ctx *ctx, device_state *st, cake_pool_kind kind, int64_t row_elems,
                        char *send, char *recv, cudaStream_t stream) {
    const cake_halo_lists *lists = &ctx->lists[kind];
    const int tag = kind == CAKE_POOL_HISTORY ? CAKE_TAG_HISTORY : CAKE_TAG_FUTURE;
    const size_t send_bytes = sizeof(cake_bf16) * (size_t)(lists->rows_sent * row_elems);
    const size_t recv_bytes = sizeof(cake_bf16) * (size_t)(lists->rows_received * row_elems);
    cake_transfer *t = st->transfers[kind];
    if (ctx->transport.exchange_device) {
        describe(lists, row_elems, send, recv, t);
        return ctx->transport.exchange_device(ctx->transport.state, tag, t, lists->num_sends,
                                              t + lists->num_sends, lists->num_receives,
                                              ctx->group.timeout_seconds, stream);
    }
    /* A host transport: wait for the packed rows, exchange from pinned memory, copy back. */
    CAKE_CHECK(staging_reserve(st, send_bytes + recv_bytes + 1));
    CAKE_CUDA_CHECK(cudaEventSynchronize(st->staging_done), "cudaEventSynchronize");
    char *host_send = st->pinned, *host_recv = (char *)st->pinned + send_bytes;
    if (send_bytes > 0)
        CAKE_CUDA_CHECK(cudaMemcpyAsync(host_send, send, send_bytes, cudaMemcpyDeviceToHost, stream),
                        "cudaMemcpyAsync(halo to host)");
    CAKE_CUDA_CHECK(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    describe(lists, row_elems, host_send, host_recv, t);
    CAKE_CHECK(ctx->transport.exchange(ctx->transport.state, tag, t, lists->num_sends,
                                       t + lists->num_sends, lists->num_receives,
                                       ctx->group.timeout_seconds));
    if (recv_bytes > 0)
        CAKE_CUDA_CHECK(cudaMemcpyAsync(recv, host_recv, recv_bytes, cudaMemcpyHostToDevice, stream),
                        "cudaMemcpyAsync(halo to device)");
    CAKE_CUDA_CHECK(cudaEventRecord(st->staging_done, stream), "cudaEventRecord");
    return CAKE_SUCCESS;
}

/* Pools of one direction on the device: pack, move, assemble (+0.0, local rows, received rows).
 * Nothing reaches the pools before the exchange succeeded. */
static cake_status device_halo(cake_ctx *ctx, device_state *st, cake_pool_kind kind,
                               const cake_pool_tensors *t, const gpu_call *g) {
    const cake_halo_lists *lists = &ctx->lists[kind];
    const cake_halo_device *halo = &st->halo[kind];
    char *send = g->workspace, *recv = g->workspace + g->l.send;
    const int64_t row_elems = cake_total_channels(t->count, t->channels);
    if (lists->num_sends > 0 || lists->num_receives > 0) {
        CAKE_CHECK(cake_halo_pack(halo, t->count, t->channels, t->rows, (cake_bf16 *)send, g->stream));
        const cake_status status = move(ctx, st, kind, row_elems, send, recv, g->stream);
        if (status != CAKE_SUCCESS) return cake_ctx_exchange_failed(ctx, status);
        cake_exchange_count(lists, t->count, row_elems, &ctx->stats);
    }
    ctx->stats.rows_copied += cake_plan_local_halo_rows(ctx->plan, kind) * t->count;
    return cake_halo_assemble(halo, t->count, t->channels, t->rows, (const cake_bf16 *)recv,
                              t->pools, g->stream);
}

/* ---- backend ------------------------------------------------------------------------------ */

static cake_status gpu_forward_halo(cake_ctx *ctx, const cake_call *call) {
    cake_pool_tensors t;
    CAKE_CHECK(cake_pool_tensors_make(CAKE_POOL_HISTORY, cake_plan_pool_rows(ctx->plan),
                                      call->params, call->num_tensors, call->channels, call->x,
                                      NULL, call->history, &t));
    const cake_status status = device_halo(ctx, ctx->device_state, CAKE_POOL_HISTORY, &t,
                                           call->backend_call);
    cake_pool_tensors_free(&t);
    return status;
}

static cake_status gpu_forward_compute(cake_ctx *ctx, const cake_call *call) {
    const gpu_call *g = call->backend_call;
    const device_state *st = ctx->device_state;
    return cake_cuda_forward(st->plan, call->num_tensors, call->channels, call->x, call->w,
                             call->params, (const cake_bf16 *const *)call->history, call->y,
                             g->cooperative, g->stream);
}

static cake_status gpu_backward(cake_ctx *ctx, const cake_call *call) {
    const gpu_call *g = call->backend_call;
    const int n = call->num_tensors;
    const int64_t pool_rows = cake_plan_pool_rows(ctx->plan);
    const int64_t future_rows = cake_future_pool_rows(call->params, pool_rows);
    cake_bf16 *inline_future[CAKE_POOL_TENSORS_INLINE];
    cake_bf16 **future = n <= CAKE_POOL_TENSORS_INLINE ? inline_future
                                                       : malloc(sizeof *future * (size_t)n);
    if (!future) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory");
    char *base = g->workspace + g->l.send + g->l.recv;
    for (int i = 0; i < n; i++) {
        future[i] = (cake_bf16 *)base;
        base += sizeof(cake_bf16) * (size_t)(future_rows * call->channels[i]);
    }
    cake_pool_tensors t;
    cake_status status = cake_pool_tensors_make(CAKE_POOL_FUTURE, pool_rows, call->params, n,
                                                call->channels, call->x, call->dy, future, &t);
    if (status == CAKE_SUCCESS) {
        status = device_halo(ctx, ctx->device_state, CAKE_POOL_FUTURE, &t, g);
        cake_pool_tensors_free(&t);
    }
    if (status == CAKE_SUCCESS) {
        const device_state *st = ctx->device_state;
        status = cake_cuda_backward(st->plan, n, call->channels, call->x, call->w, call->params,
                                    (const cake_bf16 *const *)call->history, call->dy,
                                    (const cake_bf16 *const *)future, call->dx, call->dw,
                                    g->cooperative,
                                    g->workspace + g->l.send + g->l.recv + g->l.future,
                                    g->l.kernel, g->stream);
    }
    if (future != inline_future) free(future);
    return status;
}

/* Stream-ordered, so freeing an entry never waits for the device. */
static void device_free(void *pools, void *stream) { cudaFreeAsync(pools, (cudaStream_t)stream); }

static cake_status gpu_save_pools(cake_ctx *ctx, const cake_call *call, cake_conv_entry *e) {
    const gpu_call *g = call->backend_call;
    const int64_t pool_rows = cake_plan_pool_rows(ctx->plan);
    const size_t bytes = sizeof(cake_bf16) * (size_t)(pool_rows * cake_total_channels(call->num_tensors, call->channels));
    char *block = NULL;
    CAKE_CUDA_CHECK(cudaMallocAsync((void **)&block, bytes > 0 ? bytes : 1, g->stream),
                    "cudaMallocAsync(recompute handle)");
    cudaError_t err = cudaSuccess;
    char *dst = block;
    for (int i = 0; i < call->num_tensors && err == cudaSuccess; i++) {
        const size_t count = sizeof(cake_bf16) * (size_t)(pool_rows * call->channels[i]);
        if (count > 0)
            err = cudaMemcpyAsync(dst, call->history[i], count, cudaMemcpyDeviceToDevice, g->stream);
        dst += count;
    }
    if (err != cudaSuccess) {
        cudaFreeAsync(block, g->stream);
        return cake_fail(CAKE_ERROR_CUDA, "cudaMemcpyAsync(recompute handle): %s",
                         cudaGetErrorString(err));
    }
    e->pools = block;
    e->stream = g->stream;
    e->free_pools = device_free;
    return CAKE_SUCCESS;
}

static cake_status gpu_load_pools(cake_ctx *ctx, const cake_call *call, cake_conv_entry *e) {
    (void)ctx;
    const gpu_call *g = call->backend_call;
    const char *src = e->pools;
    for (int i = 0; i < call->num_tensors; i++) {
        const size_t count = sizeof(cake_bf16) * (size_t)(e->pool_rows * call->channels[i]);
        if (count > 0)
            CAKE_CUDA_CHECK(cudaMemcpyAsync(call->history[i], src, count, cudaMemcpyDeviceToDevice, g->stream),
                            "cudaMemcpyAsync(recompute handle)");
        src += count;
    }
    e->stream = g->stream; /* the free must follow these reads */
    return CAKE_SUCCESS;
}

/* ---- public calls ------------------------------------------------------------------------- */

static cake_status run(cake_ctx *ctx, const cake_call *call, int backward,
                       cake_cooperative cooperative, void *workspace, size_t workspace_bytes,
                       cudaStream_t stream) {
    if (!ctx) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "ctx: expected a pointer, got NULL");
    CAKE_CHECK(cake_ctx_check_call(ctx, call, backward, 16)); /* numbered even if refused */
    CAKE_CHECK(cake_cuda_check_cooperative(cooperative));
    device_state *st = NULL;
    CAKE_CHECK(state_of(ctx, &st));
    layout l;
    CAKE_CHECK(layout_of(ctx, call->num_tensors, call->channels, call->params, backward, &l));
    if (workspace && workspace_bytes < l.total)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "workspace_bytes: expected >= %zu (cake_ctx_cuda_workspace_size), got %zu",
                         l.total, workspace_bytes);
    if (workspace && (uintptr_t)workspace % ALIGNMENT != 0)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "workspace: expected a %d-byte aligned device pointer, got %p", ALIGNMENT,
                         workspace);
    void *owned = NULL;
    if (!workspace && l.total > 0) {
        CAKE_CUDA_CHECK(cudaMallocAsync(&owned, l.total, stream), "cudaMallocAsync(workspace)");
        workspace = owned;
    }
    gpu_call g = {cooperative, stream, workspace, l};
    cake_call c = *call;
    c.backend_call = &g;
    static const cake_backend gpu_backend = {0, gpu_forward_halo, gpu_forward_compute,
                                             gpu_backward, gpu_save_pools, gpu_load_pools};
    cake_backend backend = gpu_backend;
    backend.device = st->device;
    cake_status status = backward ? cake_ctx_run_backward(ctx, &backend, &c)
                                  : cake_ctx_run_forward(ctx, &backend, &c);
    if (owned) {
        const cudaError_t err = cudaFreeAsync(owned, stream);
        if (err != cudaSuccess && status == CAKE_SUCCESS)
            status = cake_fail(CAKE_ERROR_CUDA, "cudaFreeAsync(workspace): %s", cudaGetErrorString(err));
    }
    return status;
}

cake_status cake_forward_cuda(cake_ctx *ctx, int64_t channels, const cake_bf16 *x, const float *w,
                              const cake_conv_params *params, cake_bf16 *y, cake_bf16 *history,
                              cake_recompute_handle *handle, cake_cooperative cooperative,
                              void *workspace, size_t workspace_bytes, cudaStream_t stream) {
    cake_clear_error();
    const cake_call call = {.multi = 0, .num_tensors = 1, .channels = &channels, .x = &x, .w = &w,
                            .params = params, .y = &y, .history = &history, .handle = handle};
    return run(ctx, &call, 0, cooperative, workspace, workspace_bytes, stream);
}

cake_status cake_backward_cuda(cake_ctx *ctx, int64_t channels, const cake_bf16 *x,
                               const float *w, const cake_conv_params *params,
                               const cake_bf16 *history, const cake_bf16 *dy, cake_bf16 *dx,
                               float *dw, cake_cooperative cooperative, void *workspace,
                               size_t workspace_bytes, cudaStream_t stream) {
    cake_clear_error();
    cake_bf16 *h = (cake_bf16 *)history; /* read only in the backward */
    const cake_call call = {.multi = 0, .num_tensors = 1, .channels = &channels, .x = &x, .w = &w,
                            .params = params, .history = &h, .dy = &dy, .dx = &dx, .dw = &dw};
    return run(ctx, &call, 1, cooperative, workspace, workspace_bytes, stream);
}

cake_status cake_forward_multi_cuda(cake_ctx *ctx, int num_tensors, const int64_t *channels,
                                    const cake_bf16 *const *x, const float *const *w,
                                    const cake_conv_params *params, cake_bf16 *const *y,
                                    cake_bf16 *const *history, cake_recompute_handle *handle,
                                    cake_cooperative cooperative, void *workspace,
                                    size_t workspace_bytes, cudaStream_t stream) {
    cake_clear_error();
    const cake_call call = {.multi = 1, .num_tensors = num_tensors, .channels = channels, .x = x,
                            .w = w, .params = params, .y = y, .history = history,
                            .handle = handle};
    return run(ctx, &call, 0, cooperative, workspace, workspace_bytes, stream);
}

cake_status cake_backward_multi_cuda(cake_ctx *ctx, int num_tensors, const int64_t *channels,
                                     const cake_bf16 *const *x, const float *const *w,
                                     const cake_conv_params *params,
                                     const cake_bf16 *const *history, const cake_bf16 *const *dy,
                                     cake_bf16 *const *dx, float *const *dw,
                                     cake_cooperative cooperative, void *workspace,
                                     size_t workspace_bytes, cudaStream_t stream) {
    cake_clear_error();
    const cake_call call = {.multi = 1, .num_tensors = num_tensors, .channels = channels, .x = x,
                            .w = w, .params = params, .history = (cake_bf16 *const *)history,
                            .dy = dy, .dx = dx, .dw = dw};
    return run(ctx, &call, 1, cooperative, workspace, workspace_bytes, stream);
}
