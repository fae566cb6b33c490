/*
 * cake: deterministic short causal convolution (width 4) over packed variable-length sequences,
 * for context-parallel training of linear-attention models.
 *
 * Every result is bitwise reproducible: docs/NUMERICS.md fixes every bit (one fp32 fused
 * multiply-add per tap in a fixed order, optional bias and SiLU by a fixed fp32 sequence,
 * round-to-nearest-even bf16 outputs, one canonical NaN, dw and dbias summed over 256-row blocks
 * by a fixed pairwise tree). Results do not depend on thread count, ISA path, CPU or GPU,
 * partition (y, dx) or on whether tensors are passed one by one or together.
 *
 * Worked example (one process, the whole batch):
 *
 *     int64_t cu[] = {0, 5, 5, 12};              // 3 sequences (the middle one empty), T = 12
 *     int64_t ch[] = {64};                        // one tensor of 64 channels
 *     const cake_bf16 *xs[] = {x};                // x: [12, 64] bf16, w: [64, 4] fp32
 *     const float *ws[] = {w};
 *     cake_bf16 *ys[] = {y};
 *     if (cake_cpu_forward_single_rank(cu, 3, 1, ch, xs, ws, NULL, ys, NULL) != CAKE_SUCCESS)
 *         fprintf(stderr, "cake: %s\n", cake_last_error());
 *
 * Conventions. Every function returns a cake_status; on failure cake_last_error() holds a
 * sentence naming the argument, what was expected and what was given, and nothing was written to
 * any output. The message is per thread. Destroy functions accept NULL; getters given NULL
 * return 0 (-1 for a rank). Row counts and offsets are int64_t throughout. Outputs never alias
 * inputs (checked where it can be). Calls that return values rather than a status (getters,
 * cake_cpu_isa_supported) never fail.
 */
#ifndef CAKE_H
#define CAKE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define CAKE_API
#else
#define CAKE_API __attribute__((visibility("default")))
#endif

/* 1.0: every tensor entry point takes a cake_conv_params (bias, activation), so later options
 * extend that struct instead of the signatures. 1.1: CAKE_CPU_ISA_AVX512_BF16 (an added
 * value; programs built against 1.0 run unchanged). */
#define CAKE_VERSION_MAJOR 1
#define CAKE_VERSION_MINOR 1
#define CAKE_VERSION_PATCH 0

/* Kernel width W, and the rows each side of a fragment that a halo carries (W - 1). */
#define CAKE_WIDTH 4
#define CAKE_HALO_ROWS 3
/* dw is summed per block of this many local rows, then over blocks by a fixed tree (docs/NUMERICS.md). */
#define CAKE_DW_BLOCK_ROWS 256

/* Values are only ever appended. */
typedef enum cake_status {
    CAKE_SUCCESS = 0,
    CAKE_ERROR_INVALID_ARGUMENT = 1, /* a precondition on an argument does not hold */
    CAKE_ERROR_OUT_OF_MEMORY = 2,
    CAKE_ERROR_UNSUPPORTED = 3,      /* valid request this build or machine cannot serve */
    CAKE_ERROR_COMMUNICATION = 4,    /* the transport reported a failure */
    CAKE_ERROR_TIMEOUT = 5,          /* an exchange did not complete within the set limit */
    CAKE_ERROR_MISMATCH = 6,         /* ranks disagree on a call (check mode) */
    CAKE_ERROR_INTERNAL = 7,
    CAKE_ERROR_CUDA = 8,             /* the CUDA runtime or NCCL reported a failure */
    CAKE_STATUS_COUNT
} cake_status;

CAKE_API const char *cake_status_string(cake_status status);
/* The message of the last failed call on this thread ("" if none). */
CAKE_API const char *cake_last_error(void);
CAKE_API void cake_version(int *major, int *minor, int *patch);

/* bf16 values are passed as their bit patterns. */
typedef uint16_t cake_bf16;

/* ------------------------------------------------------------------------------------------ */
/* Partition: which global token ranges each rank holds. Immutable once built.                */
/* ------------------------------------------------------------------------------------------ */

typedef struct cake_range {
    int64_t start; /* first global row */
    int64_t end;   /* one past the last global row */
} cake_range;

typedef struct cake_partition cake_partition;

/* cu_seqlens: num_seqs + 1 offsets, cu_seqlens[0] = 0, non-decreasing; T = cu_seqlens[num_seqs].
 * The partition copies what it needs; the caller keeps ownership of its arrays. */

/* Contiguous equal split: rank r gets T / P rows, the first T % P ranks one more. */
CAKE_API cake_status cake_partition_create_contiguous(const int64_t *cu_seqlens, int64_t num_seqs,
                                                      int num_ranks, cake_partition **out);
/* Contiguous with explicit boundaries: rank r holds [boundaries[r], boundaries[r+1]);
 * boundaries has num_ranks + 1 entries, from 0 to T, non-decreasing. */
CAKE_API cake_status cake_partition_create_boundaries(const int64_t *cu_seqlens, int64_t num_seqs,
                                                      int num_ranks, const int64_t *boundaries,
                                                      cake_partition **out);
/* Zigzag: 2P chunks, equal up to one row with the longer ones first; rank r holds chunks r and
 * 2P-1-r, in that order. */
CAKE_API cake_status cake_partition_create_zigzag(const int64_t *cu_seqlens, int64_t num_seqs,
                                                  int num_ranks, cake_partition **out);
/* Explicit ranges: rank r holds range_counts[r] ranges, taken in order from `ranges` (rank 0's
 * first). Together they must cover [0, T) exactly once; empty ranges [s, s) are allowed for any
 * 0 <= s <= T. */
CAKE_API cake_status cake_partition_create_ranges(const int64_t *cu_seqlens, int64_t num_seqs,
                                                  int num_ranks, const int64_t *range_counts,
                                                  const cake_range *ranges, cake_partition **out);
CAKE_API void cake_partition_destroy(cake_partition *partition);

CAKE_API int cake_partition_num_ranks(const cake_partition *partition);
CAKE_API int64_t cake_partition_total_rows(const cake_partition *partition);
CAKE_API int64_t cake_partition_num_seqs(const cake_partition *partition);
/* Rows held by `rank` (S_local). */
CAKE_API cake_status cake_partition_local_rows(const cake_partition *partition, int rank,
                                               int64_t *rows);

/* ------------------------------------------------------------------------------------------ */
/* Plan: one rank's fragments and where each halo row lives. Pure computation, no communication.*/
/* ------------------------------------------------------------------------------------------ */

typedef struct cake_plan cake_plan;

/* One row of a halo. A row outside the fragment's sequence is +0.0 and has global_row = -1. */
typedef struct cake_halo_row {
    int64_t global_row; /* -1: the row is +0.0 (before the sequence start / at or past its end) */
    int64_t local_row;  /* the row's index among its owner's local rows; -1 when global_row = -1 */
    int32_t rank;       /* owner; -1 when global_row = -1 */
    int32_t is_local;   /* 1: the owner is this plan's rank, so the row is copied, not sent;
                           0 otherwise and when global_row = -1 */
} cake_halo_row;

/* A maximal run of local rows in one sequence, consecutive in global order. */
typedef struct cake_fragment {
    int64_t local_start;  /* first local row */
    int64_t length;       /* rows, >= 1 */
    int64_t global_start; /* global row of local_start */
    int64_t seq_index;    /* the sequence, an index into cu_seqlens */
    int64_t seq_start;    /* cu_seqlens[seq_index] */
    int64_t seq_end;      /* cu_seqlens[seq_index + 1] */
    cake_halo_row history[CAKE_HALO_ROWS]; /* x at global rows global_start - 3 + j */
    cake_halo_row future[CAKE_HALO_ROWS];  /* dy at global rows global_start + length + j */
} cake_fragment;

CAKE_API cake_status cake_plan_create(const cake_partition *partition, int rank, cake_plan **out);
CAKE_API void cake_plan_destroy(cake_plan *plan);

CAKE_API int cake_plan_rank(const cake_plan *plan);
CAKE_API int64_t cake_plan_local_rows(const cake_plan *plan);
CAKE_API int64_t cake_plan_num_fragments(const cake_plan *plan);
CAKE_API cake_status cake_plan_fragment(const cake_plan *plan, int64_t index, cake_fragment *out);

/*
 * Pools. The rows a fragment reads from outside itself are passed in pools, one per tensor, of
 * cake_plan_pool_rows(plan) rows of that tensor's C channels (bf16, row-major):
 *   history pool, row 3f + j: x at global row fragment(f).global_start - 3 + j, or +0.0 when that
 *                             row is before the fragment's sequence start;
 *   future pool,  row 3f + j: dy at global row fragment(f).global_start + length + j, or +0.0
 *                             when that row is at or past the sequence end.
 * With an activation (cake_conv_params) the backward needs the activation's input a at the
 * future rows, so the future pool has twice the rows: the pool_rows rows of dy above, then
 * pool_rows rows of x at the same global rows (+0.0 where dy is +0.0).
 * The pools may be NULL when pool_rows is 0 (no local rows). pool_rows = 3 * num_fragments.
 */
CAKE_API int64_t cake_plan_pool_rows(const cake_plan *plan);

/* ------------------------------------------------------------------------------------------ */
/* Per-call parameters: what a call computes beyond the plain convolution.                    */
/* ------------------------------------------------------------------------------------------ */

typedef enum cake_activation {
    CAKE_ACTIVATION_NONE = 0,
    CAKE_ACTIVATION_SILU = 1, /* y = silu(a); the fixed fp32 sequence of docs/NUMERICS.md */
    CAKE_ACTIVATION_COUNT
} cake_activation;

/*
 * Every tensor entry point takes one; NULL (or a zero-initialised struct) is the plain op of
 * docs/NUMERICS.md, no bias and no activation. One struct can serve a layer's forward and its backward.
 * Options added later are appended here, so the entry points keep their signatures.
 *   a = acc + bias[c] (one fp32 add; a = acc without bias), y = bf16(a) or bf16(silu(a)).
 *   Backward: g = dy * silu'(a) (g = dy without activation); dx and dw use g, and
 *   dbias[c] = the fixed-tree sum of g over this rank's rows (256-row blocks, as dw).
 */
typedef struct cake_conv_params {
    cake_activation activation;
    const float *const *bias; /* NULL: no bias; else per tensor an fp32 [channels[i]] array */
    float *const *dbias;      /* backward with bias: per tensor fp32 [channels[i]], written
                                 (this rank's part, +0.0 without rows); NULL without bias;
                                 forwards ignore it */
} cake_conv_params;

/* ------------------------------------------------------------------------------------------ */
/* CPU kernels                                                                                 */
/* ------------------------------------------------------------------------------------------ */

typedef enum cake_cpu_isa {
    CAKE_CPU_ISA_AUTO = 0,    /* the fastest path this processor supports */
    CAKE_CPU_ISA_GENERIC = 1, /* portable C (fmaf from libm) */
    CAKE_CPU_ISA_AVX2 = 2,    /* AVX2 + FMA */
    CAKE_CPU_ISA_AVX512 = 3,  /* AVX-512F + BW */
    CAKE_CPU_ISA_AVX512_BF16 = 4, /* AVX-512 + the processor's bf16 conversion (AVX512_BF16) */
    CAKE_CPU_ISA_COUNT
} cake_cpu_isa;

/* 1 if this build and processor can run `isa`, else 0 (a call forcing it then fails with
 * CAKE_ERROR_UNSUPPORTED). Every path gives the same bits. */
CAKE_API int cake_cpu_isa_supported(cake_cpu_isa isa);
CAKE_API const char *cake_cpu_isa_name(cake_cpu_isa isa);
/* The path a call with `isa` runs: CAKE_CPU_ISA_AUTO becomes the fastest supported one. */
CAKE_API cake_cpu_isa cake_cpu_isa_resolve(cake_cpu_isa isa);

/*
 * Environment variables. Each is read where it applies: CAKE_CHECK and CAKE_TIMEOUT_SECONDS by
 * cake_ctx_create, CAKE_NUM_THREADS by cake_ctx_create and by each plan-level or single-rank CPU
 * call given num_threads = 0; nothing is cached between calls. A set variable must hold exactly
 * one of these forms (no spaces, signs or trailing characters); anything else, the empty string
 * included, fails that call with CAKE_ERROR_INVALID_ARGUMENT naming the variable and its value
 * (e.g. `CAKE_TIMEOUT_SECONDS: expected a finite number of seconds >= 0 ..., got "-5"`):
 *   CAKE_CHECK=0|1                  check mode off or on (cake_ctx_options.check)
 *   CAKE_TIMEOUT_SECONDS=<seconds>  a finite decimal number >= 0 (30, 0.5, 1e3); 0 = no limit
 *   CAKE_NUM_THREADS=<n>            a decimal integer in [1, 4096]
 */

typedef struct cake_cpu_options {
    int num_threads;  /* 0: $CAKE_NUM_THREADS, else the online processors. Never changes bits. */
    cake_cpu_isa isa; /* CAKE_CPU_ISA_AUTO unless forcing a path (tests, benchmarks) */
} cake_cpu_options;

/*
 * Multi-tensor calls. Tensor i of num_tensors has channels[i] channels (a positive multiple of
 * 8) and arrays x[i], y[i], dy[i], dx[i] of [S_local, channels[i]] bf16 with S_local =
 * cake_plan_local_rows(plan), contiguous; w[i] and dw[i] are [channels[i], 4] fp32 with w[c][3]
 * multiplying the current row. Row arrays may be NULL when S_local = 0; w and dw never (dw is
 * written, +0.0, even then). `params` and `options` may be NULL. The result is bitwise the same
 * as num_tensors single-tensor calls. The pointer arrays are `const T *const *`: declare them as
 * `const cake_bf16 *x[]` (C does not convert `cake_bf16 **` implicitly).
 */
CAKE_API cake_status cake_cpu_forward(const cake_plan *plan, int num_tensors,
                                      const int64_t *channels, const cake_bf16 *const *x,
                                      const float *const *w, const cake_conv_params *params,
                                      const cake_bf16 *const *history, cake_bf16 *const *y,
                                      const cake_cpu_options *options);

/* dx from dy and the future pool; dw (this rank's contribution) from dy, x and the history pool;
 * dbias (params->dbias) with a bias. */
CAKE_API cake_status cake_cpu_backward(const cake_plan *plan, int num_tensors,
                                       const int64_t *channels, const cake_bf16 *const *x,
                                       const float *const *w, const cake_conv_params *params,
                                       const cake_bf16 *const *history,
                                       const cake_bf16 *const *dy, const cake_bf16 *const *future,
                                       cake_bf16 *const *dx, float *const *dw,
                                       const cake_cpu_options *options);

/* The whole op on one process (P = 1): rows = T = cu_seqlens[num_seqs]. */
CAKE_API cake_status cake_cpu_forward_single_rank(const int64_t *cu_seqlens, int64_t num_seqs,
                                                  int num_tensors, const int64_t *channels,
                                                  const cake_bf16 *const *x, const float *const *w,
                                                  const cake_conv_params *params,
                                                  cake_bf16 *const *y,
                                                  const cake_cpu_options *options);
CAKE_API cake_status cake_cpu_backward_single_rank(const int64_t *cu_seqlens, int64_t num_seqs,
                                                   int num_tensors, const int64_t *channels,
                                                   const cake_bf16 *const *x,
                                                   const float *const *w,
                                                   const cake_conv_params *params,
                                                   const cake_bf16 *const *dy,
                                                   cake_bf16 *const *dx, float *const *dw,
                                                   const cake_cpu_options *options);


/* ------------------------------------------------------------------------------------------ */
/* Context parallelism: a context (partition + this rank + a transport), the exchange of halo  */
/* rows, and the recompute handle.                                                            */
/* ------------------------------------------------------------------------------------------ */

/* One message of an exchange: `bytes` bytes to or from rank `peer`. */
typedef struct cake_transfer {
    int peer;
    void *data;
    int64_t bytes;
} cake_transfer;

/* How bytes move between the ranks of the group. cake_mpi.h (MPI) and cake_nccl.h (NCCL) make
 * one; any other engine (torch.distributed, say) can be plugged in with these callbacks. */
typedef struct cake_transport {
    /* Posts every send and receive of one exchange as one group (no rank may wait for a send
     * that follows its receive), then waits for all of them. `tag` separates the library's kinds
     * of messages. With timeout_seconds > 0 it must return CAKE_ERROR_TIMEOUT rather than wait
     * longer; 0 means wait as long as it takes. Data pointers are host or device memory, as the
     * context that uses the transport was made for. */
    cake_status (*exchange)(void *state, int tag, const cake_transfer *sends, int num_sends,
                            const cake_transfer *receives, int num_receives,
                            double timeout_seconds);
    /* Called once by cake_ctx_destroy; NULL when the caller keeps ownership of state. */
    void (*release)(void *state);
    void *state;
    /* Optional: the same exchange over device memory, enqueued on `stream` (a cudaStream_t),
     * returning once enqueued (or, with a timeout, once complete). NULL: the GPU calls stage the
     * messages through pinned host memory and use `exchange`. */
    cake_status (*exchange_device)(void *state, int tag, const cake_transfer *sends, int num_sends,
                                   const cake_transfer *receives, int num_receives,
                                   double timeout_seconds, void *stream);
} cake_transport;

typedef struct cake_ctx cake_ctx;

typedef struct cake_ctx_options {
    /* 1: before each exchange the ranks compare a fingerprint of the call (direction, entry
     * point, tensor count, channel counts, params: activation and bias passed or not, the
     * partition: T and a 64-bit hash of cu_seqlens and every rank's ranges, the call number,
     * recompute handle passed and filled) and all fail with CAKE_ERROR_MISMATCH naming the
     * first differing field and every rank's value of it. Every call on a context takes a call
     * number, refused ones included, so a call one rank refused (a bad argument) shows up in
     * the next round as a differing call number rather than pairing that rank's next call with
     * the others' refused one. This costs one small message per peer per call, also in a
     * forward that reuses a filled recompute handle. 0: off unless CAKE_CHECK=1 at creation. */
    int check;
    /* > 0: an exchange (or check round) not complete in this many seconds fails with
     * CAKE_ERROR_TIMEOUT, and the context refuses further calls. 0: $CAKE_TIMEOUT_SECONDS at
     * creation if set, else wait as long as it takes. */
    double timeout_seconds;
    cake_cpu_options cpu; /* threads and ISA of the CPU kernels; num_threads = 0 takes
                             $CAKE_NUM_THREADS at creation */
} cake_ctx_options;

/* Builds this rank's plan and its send and receive lists. Every rank of the group calls it with
 * the same partition. No communication. The transport struct is copied; `options` may be NULL.
 * Reads CAKE_CHECK, CAKE_TIMEOUT_SECONDS and CAKE_NUM_THREADS (above): a set but invalid one is
 * CAKE_ERROR_INVALID_ARGUMENT, whether or not `options` overrides it. */
CAKE_API cake_status cake_ctx_create(const cake_partition *partition, int rank,
                                     const cake_transport *transport,
                                     const cake_ctx_options *options, cake_ctx **out);
/* After an exchange failed or timed out the context's message buffers (and GPU state) are
 * deliberately not freed: a transport may still touch them. */
CAKE_API void cake_ctx_destroy(cake_ctx *ctx);

CAKE_API const cake_plan *cake_ctx_plan(const cake_ctx *ctx);
/* S_local, and the rows of each history pool the forward fills (3 per fragment). */
CAKE_API int64_t cake_ctx_local_rows(const cake_ctx *ctx);
CAKE_API int64_t cake_ctx_pool_rows(const cake_ctx *ctx);

/* Counters since creation, for reports and tests. */
typedef struct cake_ctx_stats {
    int64_t forward_calls, backward_calls;
    int64_t exchanges;       /* data exchanges (transport calls), all directions */
    int64_t check_rounds;    /* fingerprint comparisons (check mode) */
    int64_t messages_sent, messages_received;
    int64_t rows_sent, rows_received; /* halo rows, summed over tensors */
    int64_t bytes_sent, bytes_received;
    int64_t rows_copied;     /* halo rows taken from this rank's own rows, summed over tensors */
    int64_t forwards_from_handle; /* forwards served by a filled recompute handle */
} cake_ctx_stats;
CAKE_API cake_status cake_ctx_get_stats(const cake_ctx *ctx, cake_ctx_stats *out);

/* The rows each peer sends this rank in a forward (history) or backward (future) exchange, per
 * tensor; 0 for itself. For reports. */
CAKE_API int64_t cake_ctx_halo_rows_from(const cake_ctx *ctx, int peer, int backward);
CAKE_API int64_t cake_ctx_halo_rows_to(const cake_ctx *ctx, int peer, int backward);

typedef struct cake_recompute_handle cake_recompute_handle;

/*
 * Forward with context parallelism, CPU. x, y: [S_local, channels] bf16; w: [channels, 4] fp32.
 * history (output): [cake_ctx_pool_rows(ctx), channels] bf16, the rows the backward needs; keep
 * it until then (it is the saved state of an autograd op). At most one exchange; none when
 * `handle` (may be NULL) holds a filled "conv" entry from the same kind of call.
 * Every rank calls each op once per layer in the same order with the same channel counts.
 */
CAKE_API cake_status cake_forward(cake_ctx *ctx, int64_t channels, const cake_bf16 *x,
                                  const float *w, const cake_conv_params *params, cake_bf16 *y,
                                  cake_bf16 *history, cake_recompute_handle *handle);
/* Backward: dx [S_local, channels] bf16 and this rank's dw [channels, 4] fp32 (and dbias) from
 * dy, x, w and the history the forward filled. One exchange (the future rows of dy, with an
 * activation also of x). */
CAKE_API cake_status cake_backward(cake_ctx *ctx, int64_t channels, const cake_bf16 *x,
                                   const float *w, const cake_conv_params *params,
                                   const cake_bf16 *history, const cake_bf16 *dy, cake_bf16 *dx,
                                   float *dw);
/* The same for n tensors of one layer, with one exchange per direction for all of them; the
 * results are bitwise those of n single calls. */
CAKE_API cake_status cake_forward_multi(cake_ctx *ctx, int num_tensors, const int64_t *channels,
                                        const cake_bf16 *const *x, const float *const *w,
                                        const cake_conv_params *params, cake_bf16 *const *y,
                                        cake_bf16 *const *history, cake_recompute_handle *handle);
CAKE_API cake_status cake_backward_multi(cake_ctx *ctx, int num_tensors, const int64_t *channels,
                                         const cake_bf16 *const *x, const float *const *w,
                                         const cake_conv_params *params,
                                         const cake_bf16 *const *history,
                                         const cake_bf16 *const *dy, cake_bf16 *const *dx,
                                         float *const *dw);

/*
 * Recompute handle: a keyed store, one per call and micro-step, created outside the outermost
 * activation-checkpoint region. The forward fills its "conv" entry with the history pools (set
 * and get refuse that key; erase empties it); a later forward with the same handle reads them
 * back and exchanges nothing. The entry records the kind of call, tensor and channel counts,
 * the partition's hash and the rank: a forward that differs in any of them (another context,
 * unless over an equal partition on the same rank) is CAKE_ERROR_INVALID_ARGUMENT, naming the
 * values that differ. Other keys (e.g. "kda") hold any bytes the caller puts there.
 */
CAKE_API cake_status cake_recompute_handle_create(cake_recompute_handle **out);
CAKE_API void cake_recompute_handle_destroy(cake_recompute_handle *handle);
/* 1 if `key` holds an entry, else 0. */
CAKE_API int cake_recompute_handle_contains(const cake_recompute_handle *handle, const char *key);
/* Copies `bytes` bytes under `key`, replacing an earlier entry. */
CAKE_API cake_status cake_recompute_handle_set(cake_recompute_handle *handle, const char *key,
                                               const void *data, size_t bytes);
/* The entry under `key` (owned by the handle, valid until it is replaced or erased). */
CAKE_API cake_status cake_recompute_handle_get(const cake_recompute_handle *handle,
                                               const char *key, const void **data,
                                               size_t *bytes);
CAKE_API cake_status cake_recompute_handle_erase(cake_recompute_handle *handle, const char *key);

#ifdef __cplusplus
}
#endif
#endif /* CAKE_H */
