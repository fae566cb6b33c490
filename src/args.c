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

/* arrays must exist; each entry must be non-NULL when it has elements (rows > 0; rows < 0
 * marks a weight array, which always has elements) and aligned as asked. */
static cake_status check_array(const char *name, const void *const *arrays, int n, int64_t rows,
                               int alignment) {
    if (!arrays) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "%s: expected a pointer, got NULL", name);
    if (rows == 0) return CAKE_SUCCESS;
    for (int i = 0; i < n; i++) {
        if (!arrays[i]) {
            if (rows < 0)
                return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                                 "%s[%d]: expected a pointer to [channels, 4] fp32, got NULL",
                                 name, i);
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
    span *spans = malloc(sizeof *spans * 7u * (size_t)n);
    if (!spans) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory checking arguments");
    int count = 0;
    for (int i = 0; i < n; i++) {
        const int64_t rows_bytes = a->rows * a->channels[i] * 2;
        const int64_t pool_bytes = a->pool_rows * a->channels[i] * 2;
        const int64_t w_bytes = a->channels[i] * 16;
        add_span(spans, &count, "x", i, 0, a->x[i], rows_bytes);
        add_span(spans, &count, "w", i, 0, a->w[i], w_bytes);
        if (!a->history_is_internal)
            add_span(spans, &count, "history", i, a->history_is_output, a->history[i], pool_bytes);
        if (a->backward) {
            add_span(spans, &count, "dy", i, 0, a->dy[i], rows_bytes);
            if (!a->future_is_internal)
                add_span(spans, &count, "future", i, 0, a->future[i], pool_bytes);
            add_span(spans, &count, "dx", i, 1, a->dx[i], rows_bytes);
            add_span(spans, &count, "dw", i, 1, a->dw[i], w_bytes);
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
    free(spans);
    return status;
}

cake_status cake_check_call_args(const cake_call_args *a) {
    const int n = a->num_tensors;
    if (n < 1)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "num_tensors: expected >= 1, got %d", n);
    CAKE_CHECK(check_channels(n, a->channels, a->rows > a->pool_rows ? a->rows : a->pool_rows));
    const int al = a->alignment;
    CAKE_CHECK(check_array("x", (const void *const *)a->x, n, a->rows, al));
    CAKE_CHECK(check_array("w", (const void *const *)a->w, n, -1, al));
    if (!a->history_is_internal)
        CAKE_CHECK(check_array("history", (const void *const *)a->history, n, a->pool_rows, al));
    if (a->backward) {
        CAKE_CHECK(check_array("dy", (const void *const *)a->dy, n, a->rows, al));
        if (!a->future_is_internal)
            CAKE_CHECK(check_array("future", (const void *const *)a->future, n, a->pool_rows, al));
        CAKE_CHECK(check_array("dx", (const void *const *)a->dx, n, a->rows, al));
        CAKE_CHECK(check_array("dw", (const void *const *)a->dw, n, -1, al));
    } else {
        CAKE_CHECK(check_array("y", (const void *const *)a->y, n, a->rows, al));
    }
    return check_aliasing(a);
}
