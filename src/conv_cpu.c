/* CPU driver: argument checks, ISA dispatch, work units over threads, and the dw / dbias tree.
 *
 * Forward units are (tensor, run of rows): each row's y depends only on inputs, so any split
 * gives the same bits. Backward units are (tensor, channel strip, chunk of 2^k aligned dw
 * blocks): a unit computes dx for its rows and strip, the 256-row block partials in row order,
 * and folds them into the roots of its chunk's subtrees; the roots of all chunks are then folded
 * in order. Because chunks are aligned powers of two, the folds are exactly the fixed tree of
 * docs/NUMERICS.md, whatever the chunk size or thread count. */
#include "args.h"
#include "bf16.h"
#include "conv_cpu.h"
#include "internal.h"
#include "parallel.h"

#include <stdlib.h>
#include <string.h>

#define STRIP_CHANNELS CAKE_CPU_STRIP_CHANNELS
#define FORWARD_UNIT_ELEMENTS 131072 /* about 256 KiB of x per forward unit */

int cake_cpu_isa_supported(cake_cpu_isa isa) {
    switch (isa) {
    case CAKE_CPU_ISA_AUTO:
    case CAKE_CPU_ISA_GENERIC: return 1;
#if defined(CAKE_HAVE_X86_KERNELS)
    case CAKE_CPU_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CAKE_CPU_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
#if defined(CAKE_HAVE_AVX512BF16_KERNELS)
    case CAKE_CPU_ISA_AVX512_BF16:
        return cake_cpu_isa_supported(CAKE_CPU_ISA_AVX512) &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512bf16");
#endif
    default: return 0;
    }
}

const char *cake_cpu_isa_name(cake_cpu_isa isa) {
    switch (isa) {
    case CAKE_CPU_ISA_AUTO: return "auto";
    case CAKE_CPU_ISA_GENERIC: return "generic";
    case CAKE_CPU_ISA_AVX2: return "avx2";
    case CAKE_CPU_ISA_AVX512: return "avx512";
    case CAKE_CPU_ISA_AVX512_BF16: return "avx512bf16";
    default: return "unknown";
    }
}

cake_cpu_isa cake_cpu_isa_resolve(cake_cpu_isa isa) {
    if (isa != CAKE_CPU_ISA_AUTO) return isa;
    return cake_cpu_isa_supported(CAKE_CPU_ISA_AVX512_BF16) ? CAKE_CPU_ISA_AVX512_BF16
           : cake_cpu_isa_supported(CAKE_CPU_ISA_AVX512) ? CAKE_CPU_ISA_AVX512
           : cake_cpu_isa_supported(CAKE_CPU_ISA_AVX2) ? CAKE_CPU_ISA_AVX2
                                                       : CAKE_CPU_ISA_GENERIC;
}

static const cake_cpu_kernels *kernels_for(cake_cpu_isa isa) {
#if defined(CAKE_HAVE_X86_KERNELS)
    isa = cake_cpu_isa_resolve(isa);
#if defined(CAKE_HAVE_AVX512BF16_KERNELS)
    if (isa == CAKE_CPU_ISA_AVX512_BF16) return &cake_cpu_kernels_avx512bf16;
#endif
    if (isa == CAKE_CPU_ISA_AVX512) return &cake_cpu_kernels_avx512;
    if (isa == CAKE_CPU_ISA_AVX2) return &cake_cpu_kernels_avx2;
#endif
    (void)isa;
    return &cake_cpu_kernels_generic;
}

cake_status cake_check_cpu_options(const cake_cpu_options *options, const char *prefix) {
    if (options->num_threads < 0)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "%snum_threads: expected >= 0 (0 = default), got %d", prefix,
                         options->num_threads);
    if ((int)options->isa < 0 || options->isa >= CAKE_CPU_ISA_COUNT)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "%sisa: expected a cake_cpu_isa value in [0, %d), got %d", prefix,
                         (int)CAKE_CPU_ISA_COUNT, (int)options->isa);
    if (!cake_cpu_isa_supported(options->isa))
        return cake_fail(CAKE_ERROR_UNSUPPORTED,
                         "%sisa: %s is not supported by this build or processor", prefix,
                         cake_cpu_isa_name(options->isa));
    return CAKE_SUCCESS;
}

static cake_status resolve_options(const cake_cpu_options *options, int *threads,
                                   const cake_cpu_kernels **kernels) {
    const cake_cpu_options defaults = {0, CAKE_CPU_ISA_AUTO};
    if (!options) options = &defaults;
    CAKE_CHECK(cake_check_cpu_options(options, "options->"));
    CAKE_CHECK(cake_cpu_threads(options->num_threads, threads));
    *kernels = kernels_for(options->isa);
    return CAKE_SUCCESS;
}

/* Index of the fragment that holds local row t (fragments tile [0, S_local) in order). */
static int64_t fragment_of_row(const cake_fragment *fragments, int64_t count, int64_t t) {
    int64_t lo = 0, hi = count;
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (fragments[mid].local_start <= t) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* ---- shared call state ---------------------------------------------------------------- */

typedef struct call {
    const cake_fragment *fragments;
    int64_t num_fragments, rows, pool_rows;
    const cake_call_args *args;
    const cake_conv_params *params;
    int variant;              /* CAKE_VARIANT_* of the params */
    int taps;                 /* partial columns per channel: 4 dw taps, + 1 dbias with a bias */
    int stream;               /* y or dx by non-temporal stores (CAKE_CPU_STREAM_BYTES) */
    const cake_cpu_kernels *kernels;
    float **wt;               /* per tensor: weights (and bias) transposed to [rows][C] */
    /* forward */
    int64_t *unit_offset;     /* per tensor + 1: first unit of each tensor */
    int64_t *unit_rows;       /* per tensor: rows per forward unit */
    /* backward */
    int64_t num_blocks, chunk_blocks, num_chunks;
    int64_t depth;            /* stack entries per unit: roots of a partial chunk + a push slot */
    int64_t final_depth;      /* stack entries to fold all chunks of a strip */
    int64_t *strip_offset;    /* per tensor + 1: first (tensor, strip) index */
    float *roots;             /* per unit: depth entries of strip_floats() */
    int64_t *root_sizes;      /* per unit: depth entries, 0 = unused */
    float *final_values;      /* per strip: final_depth entries of strip_floats() */
    int64_t *final_sizes;     /* per strip: final_depth entries */
} call;

static int find_tensor(const int64_t *offset, int n, int64_t index) {
    int i = 0;
    while (i + 1 < n && offset[i + 1] <= index) i++;
    return i;
}

static cake_row_span span_for(const call *k, int tensor, int64_t f, int64_t c0, int64_t c1) {
    const cake_call_args *a = k->args;
    const int64_t C = a->channels[tensor];
    const cake_fragment *fr = &k->fragments[f];
    const int64_t after = fr->seq_end - (fr->global_start + fr->length);
    const cake_bf16 *future = a->backward ? a->future[tensor] + f * CAKE_HALO_ROWS * C : NULL;
    cake_row_span s = {
        .x = a->x[tensor],
        .dy = a->backward ? a->dy[tensor] : NULL,
        .history = a->history[tensor] + f * CAKE_HALO_ROWS * C,
        .future = future,
        /* the x half of the future pool (cake.h) */
        .future_x = future && (k->variant & CAKE_VARIANT_SILU) ? future + k->pool_rows * C : NULL,
        .ld = C,
        .channels = C,
        .local_start = fr->local_start,
        .length = fr->length,
        .future_valid = after < CAKE_HALO_ROWS ? after : CAKE_HALO_ROWS,
        .c0 = c0,
        .c1 = c1,
        .stream = k->stream,
    };
    return s;
}

/* The kernels read weights as [row][parity][pair]: channel c is pair c / 2 of parity c % 2;
 * rows 0..3 are the taps, row 4 the bias when there is one. */
static void transpose_weights(const float *w, const float *bias, int64_t C, float *wt) {
    const int64_t row = CAKE_CPU_PAIR_STRIDE(C / 2); /* floats between rows */
    for (int64_t c = 0; c < C; c++) {
        float *column = wt + c % 2 * row + c / 2;
        for (int k = 0; k < 4; k++) column[2 * k * row] = w[c * 4 + k];
        if (bias) column[2 * 4 * row] = bias[c];
    }
}

static cake_status alloc_weights(call *k) {
    const cake_call_args *a = k->args;
    const int rows = CAKE_CPU_WEIGHT_ROWS(k->variant);
    int64_t total = 0;
    for (int i = 0; i < a->num_tensors; i++) total += CAKE_CPU_PAIR_ROWS_FLOATS(rows, a->channels[i]);
    k->wt = malloc(sizeof(float *) * (size_t)a->num_tensors);
    float *base = malloc(sizeof(float) * (size_t)total);
    if (!k->wt || !base) {
        free(k->wt);
        free(base);
        k->wt = NULL;
        return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory for %lld weights",
                         (long long)total);
    }
    for (int i = 0; i < a->num_tensors; i++) {
        k->wt[i] = base;
        transpose_weights(a->w[i], k->params->bias ? k->params->bias[i] : NULL, a->channels[i],
                          base);
        base += CAKE_CPU_PAIR_ROWS_FLOATS(rows, a->channels[i]);
    }
    return CAKE_SUCCESS;
}

static void free_weights(call *k) {
    if (k->wt) free(k->wt[0]);
    free(k->wt);
}

/* ---- forward ------------------------------------------------------------------------------ */

static void forward_unit(void *context, int64_t unit) {
    const call *k = context;
    const int i = find_tensor(k->unit_offset, k->args->num_tensors, unit);
    const int64_t C = k->args->channels[i];
    const int64_t t0 = (unit - k->unit_offset[i]) * k->unit_rows[i];
    const int64_t t1 = t0 + k->unit_rows[i] < k->rows ? t0 + k->unit_rows[i] : k->rows;
    for (int64_t f = fragment_of_row(k->fragments, k->num_fragments, t0), t = t0; t < t1; f++) {
        const cake_fragment *fr = &k->fragments[f];
        const int64_t end = fr->local_start + fr->length < t1 ? fr->local_start + fr->length : t1;
        const cake_row_span s = span_for(k, i, f, 0, C);
        k->kernels->forward_span(&s, t, end, k->wt[i], k->variant, k->args->y[i]);
        t = end;
    }
}

/* The call state both directions share. */
static call call_of(const cake_plan *plan, const cake_call_args *args) {
    const cake_conv_params *p = cake_params_or_default(args->params);
    const int variant = (p->bias ? CAKE_VARIANT_BIAS : 0) |
                        (p->activation == CAKE_ACTIVATION_SILU ? CAKE_VARIANT_SILU : 0);
    call k = {.fragments = cake_plan_fragments(plan), .num_fragments = cake_plan_num_fragments(plan),
              .rows = args->rows, .pool_rows = args->pool_rows, .args = args, .params = p,
              .variant = variant, .taps = CAKE_CPU_WEIGHT_ROWS(variant)};
    int64_t output_bytes = 0; /* y or dx */
    for (int i = 0; i < args->num_tensors; i++)
        output_bytes += args->rows * args->channels[i] * (int64_t)sizeof(cake_bf16);
    k.stream = output_bytes >= CAKE_CPU_STREAM_BYTES;
    return k;
}

cake_status cake_cpu_forward(const cake_plan *plan, int num_tensors, const int64_t *channels,
                             const cake_bf16 *const *x, const float *const *w,
                             const cake_conv_params *params, const cake_bf16 *const *history,
                             cake_bf16 *const *y, const cake_cpu_options *options) {
    cake_clear_error();
    if (!plan) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "plan: expected a pointer, got NULL");
    const cake_call_args args = {.num_tensors = num_tensors, .channels = channels,
                                 .rows = cake_plan_local_rows(plan),
                                 .pool_rows = cake_plan_pool_rows(plan), .x = x, .w = w,
                                 .params = params, .history = history, .y = y};
    CAKE_CHECK(cake_check_call_args(&args));
    int threads;
    call k = call_of(plan, &args);
    CAKE_CHECK(resolve_options(options, &threads, &k.kernels));
    if (args.rows == 0) return CAKE_SUCCESS;
    k.unit_offset = malloc(sizeof(int64_t) * ((size_t)num_tensors + 1));
    k.unit_rows = malloc(sizeof(int64_t) * (size_t)num_tensors);
    if (!k.unit_offset || !k.unit_rows) {
        free(k.unit_offset);
        free(k.unit_rows);
        return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory for the work list");
    }
    cake_status status = alloc_weights(&k);
    if (status == CAKE_SUCCESS) {
        k.unit_offset[0] = 0;
        for (int i = 0; i < num_tensors; i++) {
            const int64_t r = FORWARD_UNIT_ELEMENTS / channels[i];
            k.unit_rows[i] = r > 0 ? r : 1;
            k.unit_offset[i + 1] = k.unit_offset[i] + (args.rows + k.unit_rows[i] - 1) / k.unit_rows[i];
        }
        cake_parallel_for(threads, k.unit_offset[num_tensors], forward_unit, &k);
        free_weights(&k);
    }
    free(k.unit_offset);
    free(k.unit_rows);
    return status;
}

/* ---- backward ----------------------------------------------------------------------------- */

/* A stack of dw subtree roots: push a subtree, merging while the two on top have equal size.
 * Merging equal adjacent aligned subtrees left + right is exactly the fixed tree of docs/NUMERICS.md. */
typedef struct root_stack {
    float *values; /* entries of `width` floats */
    int64_t *sizes;
    int64_t count, width;
    const cake_cpu_kernels *kernels;
} root_stack;

static void stack_push(root_stack *st, const float *value, int64_t size) {
    float *top = st->values + st->count * st->width;
    if (top != value) memcpy(top, value, sizeof(float) * (size_t)st->width);
    st->sizes[st->count++] = size;
    while (st->count >= 2 && st->sizes[st->count - 1] == st->sizes[st->count - 2]) {
        float *left = st->values + (st->count - 2) * st->width;
        st->kernels->add_partials(left, left, left + st->width, st->width);
        st->sizes[st->count - 2] *= 2;
        st->count--;
    }
}

/* sum(p[a..b)) = sum(p[a..a+m)) + sum(p[a+m..b)): fold the remaining roots right to left. */
static const float *stack_total(root_stack *st) {
    for (int64_t e = st->count - 1; e > 0; e--) {
        float *left = st->values + (e - 1) * st->width;
        st->kernels->add_partials(left, left, left + st->width, st->width);
    }
    return st->values;
}

/* Floats of one set of partials of a full strip (a root stack entry). */
static int64_t strip_floats(const call *k) {
    return CAKE_CPU_PAIR_ROWS_FLOATS(k->taps, STRIP_CHANNELS);
}

static void backward_unit(void *context, int64_t unit) {
    const call *k = context;
    const int64_t strip_index = unit / k->num_chunks, chunk = unit % k->num_chunks;
    const int i = find_tensor(k->strip_offset, k->args->num_tensors, strip_index);
    const int64_t C = k->args->channels[i];
    const int64_t c0 = (strip_index - k->strip_offset[i]) * STRIP_CHANNELS;
    const int64_t c1 = c0 + STRIP_CHANNELS < C ? c0 + STRIP_CHANNELS : C;
    const int64_t width = CAKE_CPU_PAIR_ROWS_FLOATS(k->taps, c1 - c0);
    root_stack st = {k->roots + unit * k->depth * strip_floats(k),
                     k->root_sizes + unit * k->depth, 0, width, k->kernels};
    const int64_t b_end = (chunk + 1) * k->chunk_blocks < k->num_blocks
                              ? (chunk + 1) * k->chunk_blocks : k->num_blocks;
    for (int64_t b = chunk * k->chunk_blocks; b < b_end; b++) {
        float *partial = st.values + st.count * width;
        memset(partial, 0, sizeof(float) * (size_t)width); /* p = +0.0f */
        const int64_t t0 = b * CAKE_DW_BLOCK_ROWS;
        const int64_t t1 = t0 + CAKE_DW_BLOCK_ROWS < k->rows ? t0 + CAKE_DW_BLOCK_ROWS : k->rows;
        for (int64_t f = fragment_of_row(k->fragments, k->num_fragments, t0), t = t0; t < t1; f++) {
            const cake_fragment *fr = &k->fragments[f];
            const int64_t end = fr->local_start + fr->length < t1 ? fr->local_start + fr->length : t1;
            const cake_row_span s = span_for(k, i, f, c0, c1);
            k->kernels->backward_span(&s, t, end, k->wt[i], k->variant, k->args->dx[i], partial);
            t = end;
        }
        stack_push(&st, partial, 1);
    }
    for (int64_t e = st.count; e < k->depth; e++) st.sizes[e] = 0;
}

/* Folds the chunk roots of one (tensor, strip) in order and writes dw[c][k] (and dbias[c]),
 * NaN as the canonical NaN. */
static void finish_strip(const call *k, int64_t strip_index, float *scratch, int64_t *sizes) {
    const int i = find_tensor(k->strip_offset, k->args->num_tensors, strip_index);
    const int64_t C = k->args->channels[i];
    const int64_t c0 = (strip_index - k->strip_offset[i]) * STRIP_CHANNELS;
    const int64_t c1 = c0 + STRIP_CHANNELS < C ? c0 + STRIP_CHANNELS : C;
    const int64_t width = CAKE_CPU_PAIR_ROWS_FLOATS(k->taps, c1 - c0);
    root_stack st = {scratch, sizes, 0, width, k->kernels};
    for (int64_t chunk = 0; chunk < k->num_chunks; chunk++) {
        const int64_t unit = strip_index * k->num_chunks + chunk;
        for (int64_t e = 0; e < k->depth && k->root_sizes[unit * k->depth + e] > 0; e++)
            stack_push(&st, k->roots + unit * k->depth * strip_floats(k) + e * width,
                       k->root_sizes[unit * k->depth + e]);
    }
    float *dw = k->args->dw[i];
    float *dbias = k->params->dbias ? k->params->dbias[i] : NULL;
    if (st.count == 0) { /* no local rows: +0.0 */
        for (int64_t c = c0; c < c1; c++) {
            for (int t = 0; t < 4; t++) dw[c * 4 + t] = 0.0f;
            if (dbias) dbias[c] = 0.0f;
        }
        return;
    }
    /* The partials are laid out [parity][tap][pair] (see backward_span); tap 4 is dbias. */
    const float *total = stack_total(&st);
    const int64_t ps = CAKE_CPU_PAIR_STRIDE((c1 - c0) / 2);
    for (int64_t c = 0; c < c1 - c0; c++) {
        const float *column = total + (c % 2 * k->taps) * ps + c / 2;
        for (int t = 0; t < 4; t++) dw[(c0 + c) * 4 + t] = cake_f32_canonical(column[t * ps]);
        if (dbias) dbias[c0 + c] = cake_f32_canonical(column[4 * ps]);
    }
}

static void finish_unit(void *context, int64_t strip_index) {
    const call *k = context;
    finish_strip(k, strip_index,
                 k->final_values + strip_index * k->final_depth * strip_floats(k),
                 k->final_sizes + strip_index * k->final_depth);
}

static int64_t ceil_pow2(int64_t n) {
    int64_t p = 1;
    while (p < n) p *= 2;
    return p;
}

static int64_t log2_of(int64_t pow2) {
    int64_t l = 0;
    while (((int64_t)1 << l) < pow2) l++;
    return l;
}

cake_status cake_cpu_backward(const cake_plan *plan, int num_tensors, const int64_t *channels,
                              const cake_bf16 *const *x, const float *const *w,
                              const cake_conv_params *params, const cake_bf16 *const *history,
                              const cake_bf16 *const *dy, const cake_bf16 *const *future,
                              cake_bf16 *const *dx, float *const *dw,
                              const cake_cpu_options *options) {
    cake_clear_error();
    if (!plan) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "plan: expected a pointer, got NULL");
    const cake_call_args args = {.num_tensors = num_tensors, .channels = channels,
                                 .rows = cake_plan_local_rows(plan),
                                 .pool_rows = cake_plan_pool_rows(plan), .x = x, .w = w,
                                 .params = params, .history = history, .dy = dy,
                                 .future = future, .dx = dx, .dw = dw, .backward = 1};
    CAKE_CHECK(cake_check_call_args(&args));
    int threads;
    call k = call_of(plan, &args);
    CAKE_CHECK(resolve_options(options, &threads, &k.kernels));

    k.strip_offset = malloc(sizeof(int64_t) * ((size_t)num_tensors + 1));
    if (!k.strip_offset) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory for the work list");
    k.strip_offset[0] = 0;
    for (int i = 0; i < num_tensors; i++)
        k.strip_offset[i + 1] = k.strip_offset[i] + (channels[i] + STRIP_CHANNELS - 1) / STRIP_CHANNELS;
    const int64_t strips = k.strip_offset[num_tensors];
    /* Chunks of 2^k blocks: halve until there are enough units to keep every thread busy. */
    k.num_blocks = (args.rows + CAKE_DW_BLOCK_ROWS - 1) / CAKE_DW_BLOCK_ROWS;
    k.chunk_blocks = ceil_pow2(k.num_blocks > 0 ? k.num_blocks : 1);
    while (k.chunk_blocks > 1 && strips * ((k.num_blocks + k.chunk_blocks - 1) / k.chunk_blocks) < 8 * (int64_t)threads)
        k.chunk_blocks /= 2;
    k.num_chunks = k.num_blocks > 0 ? (k.num_blocks + k.chunk_blocks - 1) / k.chunk_blocks : 0;
    k.depth = log2_of(k.chunk_blocks) + 2; /* roots of a partial chunk, plus a push slot */
    const int64_t units = strips * k.num_chunks;
    k.final_depth = log2_of(ceil_pow2(k.num_blocks > 0 ? k.num_blocks : 1)) + 2;
    k.roots = malloc(sizeof(float) * (size_t)strip_floats(&k) * (size_t)(units * k.depth + 1));
    k.root_sizes = malloc(sizeof(int64_t) * (size_t)(units * k.depth + 1));
    k.final_values = malloc(sizeof(float) * (size_t)strip_floats(&k) *
                            (size_t)(strips * k.final_depth));
    k.final_sizes = malloc(sizeof(int64_t) * (size_t)(strips * k.final_depth));
    cake_status status = CAKE_SUCCESS;
    if (!k.roots || !k.root_sizes || !k.final_values || !k.final_sizes) status = cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory for dw partials");
    if (status == CAKE_SUCCESS) status = alloc_weights(&k);
    if (status == CAKE_SUCCESS) {
        cake_parallel_for(threads, units, backward_unit, &k);
        cake_parallel_for(threads, strips, finish_unit, &k);
        free_weights(&k);
    }
    free(k.strip_offset);
    free(k.roots);
    free(k.root_sizes);
    free(k.final_values);
    free(k.final_sizes);
    return status;
}
