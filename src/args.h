/* Argument checks shared by every entry point that takes tensors (CPU and GPU), so each
 * precondition has one message. Nothing here writes outputs. */
#ifndef CAKE_ARGS_H
#define CAKE_ARGS_H

#include "cake.h"

/* The arrays of one call; an array the call does not use is NULL and not checked. */
typedef struct cake_call_args {
    int num_tensors;
    const int64_t *channels;
    int64_t rows;      /* S_local */
    int64_t pool_rows; /* rows of each history / future pool */
    const cake_bf16 *const *x;
    const float *const *w;
    const cake_conv_params *params; /* NULL: the plain op */
    const cake_bf16 *const *history;
    const cake_bf16 *const *dy;
    const cake_bf16 *const *future;
    cake_bf16 *const *y;
    cake_bf16 *const *dx;
    float *const *dw;
    int backward;           /* 1: dy, future, dx, dw are required */
    int history_is_output;  /* the CP forward fills the history pools */
    int future_is_internal; /* the CP backward makes its own future pools */
    int history_is_internal; /* the single-rank calls make their own history pools */
    int alignment;          /* bytes every array must be aligned to (GPU: 16); 0: any */
} cake_call_args;

cake_status cake_check_call_args(const cake_call_args *args);

/* The parameters a NULL `params` stands for: no bias, no activation. */
const cake_conv_params *cake_params_or_default(const cake_conv_params *params);

/* 1 when the backward needs x at the future rows too (with an activation: the receiver
 * recomputes the activation's input there, docs/NUMERICS.md), else 0. */
int cake_future_carries_x(const cake_conv_params *params);
/* Rows of a future pool (per tensor): pool_rows of dy, and with an activation as many of x. */
int64_t cake_future_pool_rows(const cake_conv_params *params, int64_t pool_rows);

/* The channel counts and the activation of a call of `rows` local rows and `pool_rows` pool
 * rows: what a size query checks (cake_check_call_args checks it too). */
cake_status cake_check_sizes(int num_tensors, const int64_t *channels,
                             const cake_conv_params *params, int64_t rows, int64_t pool_rows);

#endif
