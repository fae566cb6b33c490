/* Contexts: this rank's plan and halo lists, the transport, and the protocol every CP call
 * follows whatever the backend (usable context, recompute handle rules, check mode, counters). */
#include "ctx_internal.h"
#include "env.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cake_ctx_destroy(cake_ctx *ctx) {
    if (!ctx) return;
    /* After a failed exchange the transport may still read or write the staging messages
     * (abandoned requests), host or pinned: leave that memory rather than free it under them. */
    if (ctx->device_state_free && !ctx->broken) ctx->device_state_free(ctx->device_state);
    cake_plan_destroy(ctx->plan);
    cake_halo_lists_free(&ctx->lists[0]);
    cake_halo_lists_free(&ctx->lists[1]);
    if (ctx->transport.release) ctx->transport.release(ctx->transport.state);
    if (!ctx->broken) free(ctx->staging.data);
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
    CAKE_CHECK(cake_check_cpu_options(&options->cpu, "options->cpu."));
    /* The environment, read once here: a value the user set but mistyped is an error now
     * rather than a silent default (no check, no timeout) later. */
    int env_check, env_threads;
    double env_timeout;
    CAKE_CHECK(cake_env_check(&env_check));
    CAKE_CHECK(cake_env_timeout(&env_timeout));
    CAKE_CHECK(cake_env_threads(&env_threads));
    cake_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "context: out of memory");
    cake_status status = cake_plan_create(partition, rank, &ctx->plan);
    if (status != CAKE_SUCCESS) {
        free(ctx);
        return status;
    }
    ctx->group = (cake_group){&ctx->transport, rank, cake_partition_num_ranks(partition),
                              cake_partition_total_rows(partition),
                              cake_partition_hash(partition),
                              options->timeout_seconds > 0.0 ? options->timeout_seconds
                                                             : env_timeout};
    ctx->check = options->check != 0 || env_check;
    ctx->cpu = options->cpu;
    if (ctx->cpu.num_threads == 0) ctx->cpu.num_threads = env_threads; /* 0 when unset */
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

cake_status cake_ctx_create_owning(const cake_partition *partition, int rank, int size,
                                   const cake_transport *transport,
                                   const cake_ctx_options *options, cake_ctx **out) {
    cake_status status = CAKE_SUCCESS;
    if (!partition)
        status = cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "partition: expected a pointer, got NULL");
    else if (cake_partition_num_ranks(partition) != size)
        status = cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                           "partition: expected %d ranks (the size of comm), got %d", size,
                           cake_partition_num_ranks(partition));
    if (status == CAKE_SUCCESS) status = cake_ctx_create(partition, rank, transport, options, out);
    if (status != CAKE_SUCCESS) transport->release(transport->state);
    return status;
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

/* ---- the protocol ------------------------------------------------------------------------ */

static cake_status check_usable(const cake_ctx *ctx) {
    if (ctx->broken)
        return cake_fail(CAKE_ERROR_COMMUNICATION,
                         "ctx: an earlier exchange failed or timed out, so messages may still be "
                         "in flight; destroy this context and make a new one on every rank over a "
                         "new communicator (MPI_Comm_dup, a new NCCL communicator), since stale "
                         "messages on the old one would be taken for new ones");
    return CAKE_SUCCESS;
}

cake_call_args cake_call_args_of(const cake_ctx *ctx, const cake_call *call, int backward) {
    cake_call_args a = {.num_tensors = call->num_tensors, .channels = call->channels,
                        .rows = cake_plan_local_rows(ctx->plan),
                        .pool_rows = cake_plan_pool_rows(ctx->plan), .x = call->x, .w = call->w,
                        .params = call->params,
                        .history = (const cake_bf16 *const *)call->history, .backward = backward};
    if (backward) {
        a.dy = call->dy;
        a.dx = call->dx;
        a.dw = call->dw;
        a.future_is_internal = 1;
    } else {
        a.y = call->y;
        a.history_is_output = 1;
    }
    return a;
}

/* The handle's "conv" entry must come from the same kind of call on the same partition. */
static cake_status check_handle(const cake_ctx *ctx, const cake_backend *backend,
                                const cake_conv_entry *e, const cake_call *call) {
    if (!e) return CAKE_SUCCESS;
    static const char *const kinds[2] = {"single", "multi"};
    const int n = call->num_tensors;
    if (e->multi != call->multi)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "recompute_handle: its \"conv\" entry was filled by a %s call, this is a "
                         "%s call; one handle serves one call", kinds[e->multi], kinds[call->multi]);
    if (e->num_tensors != n)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "recompute_handle: its \"conv\" entry holds %d tensors, this call has %d",
                         e->num_tensors, n);
    for (int i = 0; i < n; i++)
        if (e->channels[i] != call->channels[i])
            return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                             "recompute_handle: its \"conv\" entry holds channels[%d] = %lld, this "
                             "call has %lld", i, (long long)e->channels[i],
                             (long long)call->channels[i]);
    if (e->partition_hash != ctx->group.partition_hash || e->rank != ctx->group.rank) {
        char differs[160] = "";
        size_t used = 0;
        if (e->partition_hash != ctx->group.partition_hash)
            used += (size_t)snprintf(differs, sizeof differs, "partition hash 0x%016llx vs "
                                     "0x%016llx", (unsigned long long)e->partition_hash,
                                     (unsigned long long)ctx->group.partition_hash);
        if (e->rank != ctx->group.rank)
            snprintf(differs + used, sizeof differs - used, "%srank %d vs %d", used ? ", " : "",
                     e->rank, ctx->group.rank);
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "recompute_handle: its \"conv\" entry was filled through another "
                         "context (the entry's vs this one's: %s); one handle serves one call on "
                         "one context", differs);
    }
    if (e->device != backend->device)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "recompute_handle: its \"conv\" entry holds pools in %s memory, this call "
                         "uses %s memory", e->device < 0 ? "host" : "device",
                         backend->device < 0 ? "host" : "device");
    return CAKE_SUCCESS;
}

cake_status cake_ctx_exchange_failed(cake_ctx *ctx, cake_status status) {
    ctx->broken = status != CAKE_ERROR_OUT_OF_MEMORY;
    if (cake_last_error()[0] == '\0')
        cake_fail(status, "the transport's exchange failed (%s)", cake_status_string(status));
    return status;
}

cake_status cake_ctx_check_call(cake_ctx *ctx, const cake_call *call, int backward,
                                int alignment) {
    ctx->calls++;
    ctx->call_numbered = 1;
    cake_call_args args = cake_call_args_of(ctx, call, backward);
    args.alignment = alignment;
    const cake_status status = cake_check_call_args(&args);
    if (status != CAKE_SUCCESS) ctx->call_numbered = 0; /* refused, but its number is taken */
    return status;
}

/* The number of the call now running: the one cake_ctx_check_call gave it, or the next one for
 * a backend that checks its arrays itself. */
static int64_t call_number(cake_ctx *ctx) {
    if (!ctx->call_numbered) ctx->calls++;
    ctx->call_numbered = 0;
    return ctx->calls - 1;
}

static cake_status check_round(cake_ctx *ctx, const cake_call *call, int64_t number, int backward,
                               int filled) {
    if (!ctx->check) return CAKE_SUCCESS;
    const cake_conv_params *p = cake_params_or_default(call->params);
    const cake_call_info info = {backward, call->multi, call->num_tensors, call->channels,
                                 call->handle != NULL, filled, (int)p->activation,
                                 p->bias != NULL};
    cake_status status = cake_check_round(&ctx->group, number, &info, &ctx->staging, &ctx->stats);
    if (status != CAKE_SUCCESS && status != CAKE_ERROR_MISMATCH) return cake_ctx_exchange_failed(ctx, status);
    return status;
}

static cake_status store_entry(cake_ctx *ctx, const cake_backend *backend, const cake_call *call) {
    const int n = call->num_tensors;
    cake_conv_entry e = {.multi = call->multi, .num_tensors = n,
                         .channels = malloc(sizeof(int64_t) * (size_t)n),
                         .pool_rows = cake_plan_pool_rows(ctx->plan),
                         .partition_hash = ctx->group.partition_hash, .rank = ctx->group.rank,
                         .device = backend->device};
    if (!e.channels) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory for the recompute handle");
    memcpy(e.channels, call->channels, sizeof(int64_t) * (size_t)n);
    cake_status status = backend->save_pools(ctx, call, &e);
    if (status != CAKE_SUCCESS) {
        free(e.channels);
        return status;
    }
    return cake_handle_store_conv(call->handle, &e);
}

cake_status cake_ctx_run_forward(cake_ctx *ctx, const cake_backend *backend, const cake_call *call) {
    const int64_t number = call_number(ctx);
    CAKE_CHECK(check_usable(ctx));
    cake_conv_entry *saved = cake_handle_conv(call->handle);
    CAKE_CHECK(check_handle(ctx, backend, saved, call));
    CAKE_CHECK(check_round(ctx, call, number, 0, saved != NULL));
    ctx->stats.forward_calls++;
    if (saved) {
        CAKE_CHECK(backend->load_pools(ctx, call, saved));
        ctx->stats.forwards_from_handle++;
    } else {
        CAKE_CHECK(backend->forward_halo(ctx, call));
    }
    CAKE_CHECK(backend->forward_compute(ctx, call));
    if (call->handle && !saved) CAKE_CHECK(store_entry(ctx, backend, call));
    return CAKE_SUCCESS;
}

cake_status cake_ctx_run_backward(cake_ctx *ctx, const cake_backend *backend, const cake_call *call) {
    const int64_t number = call_number(ctx);
    CAKE_CHECK(check_usable(ctx));
    CAKE_CHECK(check_round(ctx, call, number, 1, 0));
    ctx->stats.backward_calls++;
    return backend->backward(ctx, call);
}
