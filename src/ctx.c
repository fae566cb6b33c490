/* Contexts: this rank's plan and halo lists, the transport, and the CP forward and backward
 * (one exchange per direction for all tensors of a call). */
#include "args.h"
#include "check_mode.h"
#include "exchange.h"
#include "halo_lists.h"
#include "internal.h"
#include "pools.h"
#include "recompute_handle.h"

#include <stdlib.h>
#include <string.h>

struct cake_ctx {
    cake_group group;
    cake_transport transport;
    cake_plan *plan;
    cake_halo_lists lists[2]; /* [CAKE_POOL_HISTORY], [CAKE_POOL_FUTURE] */
    int check;
    cake_cpu_options cpu;
    int64_t calls;
    int broken; /* an exchange timed out or failed: messages may still be in flight */
    cake_ctx_stats stats;
    cake_staging staging;
};

void cake_ctx_destroy(cake_ctx *ctx) {
    if (!ctx) return;
    cake_plan_destroy(ctx->plan);
    cake_halo_lists_free(&ctx->lists[0]);
    cake_halo_lists_free(&ctx->lists[1]);
    if (ctx->transport.release) ctx->transport.release(ctx->transport.state);
    free(ctx->staging.data);
    free(ctx);
}

static cake_status build_lists(cake_ctx *ctx, const cake_partition *partition) {
    const int P = cake_partition_num_ranks(partition);
    cake_plan **plans = calloc((size_t)P, sizeof *plans);
    if (!plans) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory for %d plans", P);
    cake_status status = CAKE_SUCCESS;
    for (int r = 0; r < P && status == CAKE_SUCCESS; r++)
        status = r == ctx->group.rank ? CAKE_SUCCESS : cake_plan_create(partition, r, &plans[r]);
    plans[ctx->group.rank] = ctx->plan;
    if (status == CAKE_SUCCESS)
        status = cake_halo_lists_build((const cake_plan *const *)plans, P, ctx->group.rank,
                                       CAKE_POOL_HISTORY, &ctx->lists[CAKE_POOL_HISTORY]);
    if (status == CAKE_SUCCESS)
        status = cake_halo_lists_build((const cake_plan *const *)plans, P, ctx->group.rank,
                                       CAKE_POOL_FUTURE, &ctx->lists[CAKE_POOL_FUTURE]);
    for (int r = 0; r < P; r++)
        if (r != ctx->group.rank) cake_plan_destroy(plans[r]);
    free(plans);
    return status;
}

cake_status cake_ctx_create(const cake_partition *partition, int rank,
                            const cake_transport *transport, const cake_ctx_options *options,
                            cake_ctx **out) {
    cake_clear_error();
    if (!out) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "out: expected a pointer, got NULL");
    if (!partition)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "partition: expected a pointer, got NULL");
    if (!transport || !transport->exchange)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "transport: expected a transport with an exchange callback, got %s",
                         transport ? "exchange = NULL" : "NULL");
    const cake_ctx_options defaults = {0};
    if (!options) options = &defaults;
    if (!(options->timeout_seconds >= 0.0))
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "options->timeout_seconds: expected >= 0 (0 = no limit), got %g",
                         options->timeout_seconds);
    if (options->cpu.num_threads < 0)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "options->cpu.num_threads: expected >= 0 (0 = default), got %d",
                         options->cpu.num_threads);
    if ((int)options->cpu.isa < 0 || options->cpu.isa >= CAKE_CPU_ISA_COUNT ||
        !cake_cpu_isa_supported(options->cpu.isa))
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "options->cpu.isa: expected an ISA this processor supports, got %d",
                         (int)options->cpu.isa);
    cake_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "context: out of memory");
    cake_status status = cake_plan_create(partition, rank, &ctx->plan);
    if (status != CAKE_SUCCESS) {
        free(ctx);
        return status;
    }
    ctx->group = (cake_group){&ctx->transport, rank, cake_partition_num_ranks(partition),
                              cake_partition_total_rows(partition), options->timeout_seconds};
    const char *env_check = getenv("CAKE_CHECK");
    ctx->check = options->check != 0 || (env_check && strcmp(env_check, "1") == 0);
    const char *env_timeout = getenv("CAKE_TIMEOUT_SECONDS");
    if (ctx->group.timeout_seconds == 0.0 && env_timeout) {
        const double t = strtod(env_timeout, NULL);
        if (t > 0.0) ctx->group.timeout_seconds = t;
    }
    ctx->cpu = options->cpu;
    status = build_lists(ctx, partition);
    if (status != CAKE_SUCCESS) {
        cake_plan_destroy(ctx->plan);
        free(ctx);
        return status;
    }
    ctx->transport = *transport; /* owned from here on: destroy releases it */
    *out = ctx;
    return CAKE_SUCCESS;
}

const cake_plan *cake_ctx_plan(const cake_ctx *ctx) { return ctx ? ctx->plan : NULL; }
int64_t cake_ctx_local_rows(const cake_ctx *ctx) { return ctx ? cake_plan_local_rows(ctx->plan) : 0; }
int64_t cake_ctx_pool_rows(const cake_ctx *ctx) { return ctx ? cake_plan_pool_rows(ctx->plan) : 0; }

cake_status cake_ctx_get_stats(const cake_ctx *ctx, cake_ctx_stats *out) {
    cake_clear_error();
    if (!ctx) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "ctx: expected a pointer, got NULL");
    if (!out) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "out: expected a pointer, got NULL");
    *out = ctx->stats;
    return CAKE_SUCCESS;
}

static int64_t rows_with(const cake_halo_lists *lists, int peer, int sending) {
    const cake_peer_rows *list = sending ? lists->sends : lists->receives;
    const int count = sending ? lists->num_sends : lists->num_receives;
    for (int i = 0; i < count; i++)
        if (list[i].peer == peer) return list[i].count;
    return 0;
}

int64_t cake_ctx_halo_rows_from(const cake_ctx *ctx, int peer, int backward) {
    return ctx ? rows_with(&ctx->lists[backward ? CAKE_POOL_FUTURE : CAKE_POOL_HISTORY], peer, 0) : 0;
}

int64_t cake_ctx_halo_rows_to(const cake_ctx *ctx, int peer, int backward) {
    return ctx ? rows_with(&ctx->lists[backward ? CAKE_POOL_FUTURE : CAKE_POOL_HISTORY], peer, 1) : 0;
}

/* ---- calls ------------------------------------------------------------------------------ */

static cake_status check_usable(const cake_ctx *ctx) {
    if (!ctx) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "ctx: expected a pointer, got NULL");
    if (ctx->broken)
        return cake_fail(CAKE_ERROR_COMMUNICATION,
                         "ctx: an earlier exchange failed or timed out, so messages may still be "
                         "in flight; destroy this context and make a new one on every rank");
    return CAKE_SUCCESS;
}

/* The handle's "conv" entry must come from the same kind of call on the same partition. */
static cake_status check_handle(const cake_ctx *ctx, const cake_conv_entry *e, int multi,
                                int n, const int64_t *channels) {
    if (!e) return CAKE_SUCCESS;
    static const char *const kinds[2] = {"single", "multi"};
    if (e->multi != multi)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "recompute_handle: its \"conv\" entry was filled by a %s call, this is a "
                         "%s call; one handle serves one call", kinds[e->multi], kinds[multi]);
    if (e->num_tensors != n)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "recompute_handle: its \"conv\" entry holds %d tensors, this call has %d",
                         e->num_tensors, n);
    for (int i = 0; i < n; i++)
        if (e->channels[i] != channels[i])
            return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                             "recompute_handle: its \"conv\" entry holds channels[%d] = %lld, this "
                             "call has %lld", i, (long long)e->channels[i], (long long)channels[i]);
    if (e->pool_rows != cake_plan_pool_rows(ctx->plan) || e->total_rows != ctx->group.total_rows ||
        e->rank != ctx->group.rank)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "recompute_handle: its \"conv\" entry was filled through another "
                         "context (partition of %lld rows, rank %d; this one: %lld rows, rank %d)",
                         (long long)e->total_rows, e->rank, (long long)ctx->group.total_rows,
                         ctx->group.rank);
    return CAKE_SUCCESS;
}

/* A copy of the history pools for the handle. */
static cake_status make_entry(const cake_ctx *ctx, int multi, int n, const int64_t *channels,
                              cake_bf16 *const *history, cake_conv_entry *e) {
    const int64_t pool_rows = cake_plan_pool_rows(ctx->plan);
    const int64_t elems = pool_rows * cake_total_channels(n, channels);
    *e = (cake_conv_entry){multi, n, malloc(sizeof(int64_t) * (size_t)n), pool_rows,
                           ctx->group.total_rows, ctx->group.rank,
                           malloc(sizeof(cake_bf16) * (size_t)(elems > 0 ? elems : 1)),
                           (int64_t)sizeof(cake_bf16) * elems, free};
    if (!e->channels || !e->pools) {
        free(e->channels);
        free(e->pools);
        return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory for the recompute handle");
    }
    memcpy(e->channels, channels, sizeof(int64_t) * (size_t)n);
    cake_bf16 *dst = e->pools;
    for (int i = 0; i < n; i++) {
        if (pool_rows > 0) memcpy(dst, history[i], sizeof(cake_bf16) * (size_t)(pool_rows * channels[i]));
        dst += pool_rows * channels[i];
    }
    return CAKE_SUCCESS;
}

static void pools_from_entry(const cake_conv_entry *e, int n, const int64_t *channels,
                             cake_bf16 *const *history) {
    const cake_bf16 *src = e->pools;
    for (int i = 0; i < n; i++) {
        if (e->pool_rows > 0)
            memcpy(history[i], src, sizeof(cake_bf16) * (size_t)(e->pool_rows * channels[i]));
        src += e->pool_rows * channels[i];
    }
}

/* A failed exchange may leave messages in flight: the context is unusable from then on. */
static cake_status exchange(cake_ctx *ctx, cake_pool_kind kind, int n, const int64_t *channels,
                            const cake_bf16 *const *rows, cake_bf16 *const *pools) {
    cake_status status = cake_exchange_host(
        &ctx->lists[kind], &ctx->transport, kind == CAKE_POOL_HISTORY ? CAKE_TAG_HISTORY : CAKE_TAG_FUTURE,
        ctx->group.timeout_seconds, n, channels, rows, pools, &ctx->staging, &ctx->stats);
    if (status != CAKE_SUCCESS) {
        ctx->broken = status != CAKE_ERROR_OUT_OF_MEMORY;
        if (cake_last_error()[0] == '\0')
            cake_fail(status, "the transport's exchange failed (%s)", cake_status_string(status));
    }
    return status;
}

static cake_status check_round(cake_ctx *ctx, const cake_call_info *call) {
    const int64_t call_number = ctx->calls++;
    if (!ctx->check) return CAKE_SUCCESS;
    cake_status status = cake_check_round(&ctx->group, call_number, call, &ctx->staging, &ctx->stats);
    if (status != CAKE_SUCCESS && status != CAKE_ERROR_MISMATCH) ctx->broken = 1;
    return status;
}

static cake_status forward(cake_ctx *ctx, int multi, int n, const int64_t *channels,
                           const cake_bf16 *const *x, const float *const *w, cake_bf16 *const *y,
                           cake_bf16 *const *history, cake_recompute_handle *handle) {
    CAKE_CHECK(check_usable(ctx));
    const cake_call_args args = {.num_tensors = n, .channels = channels,
                                 .rows = cake_plan_local_rows(ctx->plan),
                                 .pool_rows = cake_plan_pool_rows(ctx->plan), .x = x, .w = w,
                                 .history = (const cake_bf16 *const *)history, .y = y,
                                 .history_is_output = 1};
    CAKE_CHECK(cake_check_call_args(&args));
    const cake_conv_entry *saved = cake_handle_conv(handle);
    CAKE_CHECK(check_handle(ctx, saved, multi, n, channels));
    const cake_call_info call = {0, multi, n, channels, handle != NULL, saved != NULL};
    CAKE_CHECK(check_round(ctx, &call));
    ctx->stats.forward_calls++;
    if (saved) {
        pools_from_entry(saved, n, channels, history);
        ctx->stats.forwards_from_handle++;
    } else {
        cake_fill_local_pool_rows(ctx->plan, CAKE_POOL_HISTORY, n, channels, x, history);
        ctx->stats.rows_copied += cake_plan_local_halo_rows(ctx->plan, CAKE_POOL_HISTORY) * n;
        CAKE_CHECK(exchange(ctx, CAKE_POOL_HISTORY, n, channels, x, history));
    }
    CAKE_CHECK(cake_cpu_forward(ctx->plan, n, channels, x, w, (const cake_bf16 *const *)history,
                                y, &ctx->cpu));
    if (handle && !saved) {
        cake_conv_entry entry;
        CAKE_CHECK(make_entry(ctx, multi, n, channels, history, &entry));
        CAKE_CHECK(cake_handle_store_conv(handle, &entry));
    }
    return CAKE_SUCCESS;
}

static cake_status backward(cake_ctx *ctx, int multi, int n, const int64_t *channels,
                            const cake_bf16 *const *x, const float *const *w,
                            const cake_bf16 *const *history, const cake_bf16 *const *dy,
                            cake_bf16 *const *dx, float *const *dw) {
    CAKE_CHECK(check_usable(ctx));
    const cake_call_args args = {.num_tensors = n, .channels = channels,
                                 .rows = cake_plan_local_rows(ctx->plan),
                                 .pool_rows = cake_plan_pool_rows(ctx->plan), .x = x, .w = w,
                                 .history = history, .dy = dy, .dx = dx, .dw = dw,
                                 .backward = 1, .future_is_internal = 1};
    CAKE_CHECK(cake_check_call_args(&args));
    cake_bf16 **future = calloc((size_t)n, sizeof *future);
    if (!future) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory");
    cake_status status = cake_alloc_pools(ctx->plan, n, channels, future);
    if (status != CAKE_SUCCESS) {
        free(future);
        return status;
    }
    const cake_call_info call = {1, multi, n, channels, 0, 0};
    status = check_round(ctx, &call);
    if (status == CAKE_SUCCESS) {
        ctx->stats.backward_calls++;
        cake_fill_local_pool_rows(ctx->plan, CAKE_POOL_FUTURE, n, channels, dy, future);
        ctx->stats.rows_copied += cake_plan_local_halo_rows(ctx->plan, CAKE_POOL_FUTURE) * n;
        status = exchange(ctx, CAKE_POOL_FUTURE, n, channels, dy, future);
    }
    if (status == CAKE_SUCCESS)
        status = cake_cpu_backward(ctx->plan, n, channels, x, w, history, dy,
                                   (const cake_bf16 *const *)future, dx, dw, &ctx->cpu);
    free(future[0]);
    free(future);
    return status;
}

cake_status cake_forward(cake_ctx *ctx, int64_t channels, const cake_bf16 *x, const float *w,
                         cake_bf16 *y, cake_bf16 *history, cake_recompute_handle *handle) {
    cake_clear_error();
    return forward(ctx, 0, 1, &channels, &x, &w, &y, &history, handle);
}

cake_status cake_backward(cake_ctx *ctx, int64_t channels, const cake_bf16 *x, const float *w,
                          const cake_bf16 *history, const cake_bf16 *dy, cake_bf16 *dx,
                          float *dw) {
    cake_clear_error();
    return backward(ctx, 0, 1, &channels, &x, &w, &history, &dy, &dx, &dw);
}

cake_status cake_forward_multi(cake_ctx *ctx, int num_tensors, const int64_t *channels,
                               const cake_bf16 *const *x, const float *const *w,
                               cake_bf16 *const *y, cake_bf16 *const *history,
                               cake_recompute_handle *handle) {
    cake_clear_error();
    return forward(ctx, 1, num_tensors, channels, x, w, y, history, handle);
}

cake_status cake_backward_multi(cake_ctx *ctx, int num_tensors, const int64_t *channels,
                                const cake_bf16 *const *x, const float *const *w,
                                const cake_bf16 *const *history, const cake_bf16 *const *dy,
                                cake_bf16 *const *dx, float *const *dw) {
    cake_clear_error();
    return backward(ctx, 1, num_tensors, channels, x, w, history, dy, dx, dw);
}
