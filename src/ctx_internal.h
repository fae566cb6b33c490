/* The context's insides, shared by the protocol (ctx.c) and the backends that move and compute
 * the data: host (ctx_host.c) and CUDA (cuda/ctx_cuda.c). */
#ifndef CAKE_CTX_INTERNAL_H
#define CAKE_CTX_INTERNAL_H

#include "args.h"
#include "check_mode.h"
#include "exchange.h"
#include "halo_lists.h"
#include "recompute_handle.h"

struct cake_ctx {
    cake_group group;
    cake_transport transport;
    cake_plan *plan;
    cake_halo_lists lists[2]; /* [CAKE_POOL_HISTORY], [CAKE_POOL_FUTURE] */
    int check;
    cake_cpu_options cpu;
    /* Calls begun on this context, refused ones included, so that check mode sees a call one
     * rank refused locally; call_numbered: the running call already has its number. */
    int64_t calls;
    int call_numbered;
    int broken; /* an exchange timed out or failed: messages may still be in flight */
    cake_ctx_stats stats;
    cake_staging staging;
    /* The CUDA backend's per-context state (device tables, staging), made on first use. */
    void *device_state;
    void (*device_state_free)(void *state);
};

/* One call's arrays. For the backward, `history` is the forward's (read only). */
typedef struct cake_call {
    int multi, num_tensors;
    const int64_t *channels;
    const cake_bf16 *const *x;
    const float *const *w;
    const cake_conv_params *params; /* NULL: the plain op */
    cake_bf16 *const *y;
    cake_bf16 *const *history;
    const cake_bf16 *const *dy;
    cake_bf16 *const *dx;
    float *const *dw;
    cake_recompute_handle *handle;
    void *backend_call; /* backend-specific: stream, launch form, workspace */
} cake_call;

/* How a backend moves and computes data; the protocol around it is the same for all. */
typedef struct cake_backend {
    int device; /* -1: host memory; else the CUDA device whose memory the call uses */
    /* The history pools: local rows, +0.0 rows, and the forward exchange. */
    cake_status (*forward_halo)(cake_ctx *ctx, const cake_call *call);
    cake_status (*forward_compute)(cake_ctx *ctx, const cake_call *call);
    /* The future pools (made and freed here), the backward exchange, dx, dw and dbias. */
    cake_status (*backward)(cake_ctx *ctx, const cake_call *call);
    /* Copy the history pools into a new handle entry (pools, stream, free_pools); on failure
     * the entry holds nothing. */
    cake_status (*save_pools)(cake_ctx *ctx, const cake_call *call, cake_conv_entry *entry);
    /* Copy a filled entry's pools into the call's history (and note the stream that read them). */
    cake_status (*load_pools)(cake_ctx *ctx, const cake_call *call, cake_conv_entry *entry);
} cake_backend;

/* Argument arrays of a call, for cake_check_call_args. */
cake_call_args cake_call_args_of(const cake_ctx *ctx, const cake_call *call, int backward);
/* What every public call on a context does first: takes the call's number (every call takes
 * one, refused or not, so that check mode names the difference when one rank refused a call
 * the others made) and checks its arrays (cake_check_call_args, with `alignment`). */
cake_status cake_ctx_check_call(cake_ctx *ctx, const cake_call *call, int backward,
                                int alignment);

/* The protocol: usable context, recompute handle rules, check mode, counters, then the
 * backend. The caller has checked the arrays (cake_ctx_check_call and its own rules). */
cake_status cake_ctx_run_forward(cake_ctx *ctx, const cake_backend *backend, const cake_call *call);
cake_status cake_ctx_run_backward(cake_ctx *ctx, const cake_backend *backend, const cake_call *call);

/* Marks the context unusable after a failed exchange and makes sure a message is set. */
cake_status cake_ctx_exchange_failed(cake_ctx *ctx, cake_status status);

#endif
