#include "args.h"

#include "internal.h"

#include <stdlib.h>

typedef struct span {
    const char *name;
    int index;
    int is_output;
    uintptr_t begin, end; /* bytes [begin, end) */
} span;

/* Every size the library derives from a channel count must fit: rows (or pool rows) of C
 * elements as fp32 and bf16 bytes, weights as 16 bytes a channel. */
static cake_status check_channels(int n, const int64_t *channels, int64_t rows) {
    if (!channels)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "channels: expected a pointer, got NULL");
    for (int i = 0; i < n; i++) {
        int64_t elements;
        if (channels[i] <= 0 || channels[i] % 8 != 0)
            return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                             "channels[%d]: expected a positive multiple of 8, got %lld", i,
                             (long long)channels[i]);
        if (!cake_mul_fits(rows, channels[i], &elements) ||
            !cake_mul_fits(elements, 8, &elements) || !cake_mul_fits(channels[i], 16, &elements))
            return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                             "channels[%d]: %lld rows of %lld channels overflow 64-bit sizes", i,
                             (long long)rows, (long long)channels[i]);
    }
    return CAKE_SUCCESS;
}

static const cake_conv_params default_params = {CAKE_ACTIVATION_NONE, NULL, NULL};

const cake_conv_params *cake_params_or_default(const cake_conv_params *params) {
    return params ? params : &default_params;
}

int cake_future_carries_x(const cake_conv_params *params) {
    return params && params->activation != CAKE_ACTIVATION_NONE;
}

int64_t cake_future_pool_rows(const cake_conv_params *params, int64_t pool_rows) {
    return cake_future_carries_x(params) ? 2 * pool_rows : pool_rows;
}

/* arrays must exist; each entry must be non-NULL when it has elements (rows > 0; rows < 0
 * marks a per-channel array, which always has elements: `shape` then says what it holds) and
 * aligned as asked. */
static cake_status check_array(const char *name, const void *const *arrays, int n, int64_t rows,
                               int alignment, const char *shape) {
    if (!arrays) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "%s: expected a pointer, got NULL", name);
    if (rows == 0) return CAKE_SUCCESS;
    for (int i = 0; i < n; i++) {
        if (!arrays[i]) {
            if (rows < 0)
                return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                                 "%s[%d]: expected a pointer to %s, got NULL", name, i, shape);
            return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                             "%s[%d]: expected a pointer to %lld rows, got NULL", name, i,
                             (long long)rows);
        }
        if (alignment > 0 && (uintptr_t)arrays[i] % (uintptr_t)alignment != 0)
            return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                             "%s[%d]: expected a %d-byte aligned pointer, got %p", name, i,
                             alignment, arrays[i]);
    }
    return CAKE_SUCCESS;
}

static void add_span(span *spans, int *count, const char *name, int index, int is_output,
                     const void *base, int64_t bytes) {
    if (bytes > 0)
        spans[(*count)++] = (span){name, index, is_output, (uintptr_t)base,
                                   (uintptr_t)base + (uintptr_t)bytes};
}

/* No output may overlap an input or another output (the kernels read while they write). */
static cake_status check_aliasing(const cake_call_args *a) {
    const int n = a->num_tensors;
    const cake_conv_params *p = cake_params_or_default(a->params);
    span inline_spans[9 * 8]; /* most calls have a few tensors: no allocation */
    span *spans = n <= 8 ? inline_spans : malloc(sizeof *spans * 9u * (size_t)n);
    if (!spans) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory checking arguments");
    int count = 0;
    for (int i = 0; i < n; i++) {
        const int64_t rows_bytes = a->rows * a->channels[i] * 2;
        const int64_t pool_bytes = a->pool_rows * a->channels[i] * 2;
        const int64_t future_bytes = cake_future_pool_rows(p, a->pool_rows) * a->channels[i] * 2;
        const int64_t w_bytes = a->channels[i] * 16;
        add_span(spans, &count, "x", i, 0, a->x[i], rows_bytes);
        add_span(spans, &count, "w", i, 0, a->w[i], w_bytes);
        if (p->bias) add_span(spans, &count, "params->bias", i, 0, p->bias[i], a->channels[i] * 4);
        if (!a->history_is_internal)
            add_span(spans, &count, "history", i, a->history_is_output, a->history[i], pool_bytes);
        if (a->backward) {
            add_span(spans, &count, "dy", i, 0, a->dy[i], rows_bytes);
            if (!a->future_is_internal)
                add_span(spans, &count, "future", i, 0, a->future[i], future_bytes);
            add_span(spans, &count, "dx", i, 1, a->dx[i], rows_bytes);
            add_span(spans, &count, "dw", i, 1, a->dw[i], w_bytes);
            if (p->dbias)
                add_span(spans, &count, "params->dbias", i, 1, p->dbias[i], a->channels[i] * 4);
        } else {
            add_span(spans, &count, "y", i, 1, a->y[i], rows_bytes);
        }
    }
    cake_status status = CAKE_SUCCESS;
    for (int o = 0; o < count && status == CAKE_SUCCESS; o++) {
        if (!spans[o].is_output) continue;
        for (int k = 0; k < count; k++) {
            if (k == o || !(spans[o].begin < spans[k].end && spans[k].begin < spans[o].end))
                continue;
            status = cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                               "%s[%d]: expected memory that overlaps no other argument, but it "
                               "overlaps %s[%d]",
                               spans[o].name, spans[o].index, spans[k].name, spans[k].index);
            break;
        }
    }
    if (spans != inline_spans) free(spans);
    return status;
}

static cake_status check_activation(const cake_conv_params *p) {
    if (p && ((int)p->activation < 0 || p->activation >= CAKE_ACTIVATION_COUNT))
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "params->activation: expected CAKE_ACTIVATION_NONE (0) or "
                         "CAKE_ACTIVATION_SILU (1), got %d", (int)p->activation);
    return CAKE_SUCCESS;
}

cake_status cake_check_sizes(int num_tensors, const int64_t *channels,
                             const cake_conv_params *params, int64_t rows, int64_t pool_rows) {
    if (num_tensors < 1)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "num_tensors: expected >= 1, got %d",
                         num_tensors);
    /* Future pools have up to 2 * pool_rows rows: their sizes must fit too. */
    const int64_t future_rows = pool_rows <= INT64_MAX / 2 ? 2 * pool_rows : INT64_MAX;
    CAKE_CHECK(check_channels(num_tensors, channels, rows > future_rows ? rows : future_rows));
    return check_activation(params);
}

/* Bias arrays must exist when given; bias and dbias come together in a backward. */
static cake_status check_params(const cake_call_args *a) {
    const cake_conv_params *p = a->params;
    if (!p) return CAKE_SUCCESS;
    if (p->bias)
        CAKE_CHECK(check_array("params->bias", (const void *const *)p->bias, a->num_tensors, -1,
                               a->alignment, "[channels] fp32"));
    if (!a->backward) return CAKE_SUCCESS;
    if (p->bias && !p->dbias)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "params->dbias: expected per-tensor [channels] fp32 outputs, since "
                         "params->bias is set, got NULL");
    if (!p->bias && p->dbias)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "params->dbias: expected NULL, since params->bias is NULL (no bias, "
                         "nothing to differentiate), got %p", (const void *)p->dbias);
    if (p->dbias)
        CAKE_CHECK(check_array("params->dbias", (const void *const *)p->dbias, a->num_tensors, -1,
                               a->alignment, "[channels] fp32"));
    return CAKE_SUCCESS;
}

cake_status cake_check_call_args(const cake_call_args *a) {
    const int n = a->num_tensors;
    CAKE_CHECK(cake_check_sizes(n, a->channels, a->params, a->rows, a->pool_rows));
    const int al = a->alignment;
    CAKE_CHECK(check_array("x", (const void *const *)a->x, n, a->rows, al, NULL));
    CAKE_CHECK(check_array("w", (const void *const *)a->w, n, -1, al, "[channels, 4] fp32"));
    CAKE_CHECK(check_params(a));
    if (!a->history_is_internal)
        CAKE_CHECK(check_array("history", (const void *const *)a->history, n, a->pool_rows, al,
                               NULL));
    if (a->backward) {
        CAKE_CHECK(check_array("dy", (const void *const *)a->dy, n, a->rows, al, NULL));
        if (!a->future_is_internal)
            CAKE_CHECK(check_array("future", (const void *const *)a->future, n,
                                   cake_future_pool_rows(a->params, a->pool_rows), al, NULL));
        CAKE_CHECK(check_array("dx", (const void *const *)a->dx, n, a->rows, al, NULL));
        CAKE_CHECK(check_array("dw", (const void *const *)a->dw, n, -1, al, "[channels, 4] fp32"));
    } else {
        CAKE_CHECK(check_array("y", (const void *const *)a->y, n, a->rows, al, NULL));
    }
    return check_aliasing(a);
}
