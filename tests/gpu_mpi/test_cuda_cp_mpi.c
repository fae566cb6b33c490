/* Context parallelism on the GPU with several MPI ranks sharing one device (device buffers,
 * MPI transport staged through pinned memory): every rank's y, dx, dw (and dbias) from the GPU
 * path must be bitwise equal to the CPU path on the same context (which the CPU tests hold to the
 * reference and to P = 1), in every variant (no bias / bias x no activation / SiLU, one per
 * trial in turn), and y and dx to the single-rank run. Where every rank has its own GPU, the same
 * over NCCL. Also: a forward that reuses a filled recompute handle exchanges nothing and gives the
 * same bits; a backward is at most one exchange; a handle filled on the GPU is refused by a CPU
 * call.
 * Failures are counted per rank, summed over ranks, and make every rank exit 1. No GPU: 77. */
#include "cake_cuda.h"
#include "cake_mpi.h"
#ifdef CAKE_TEST_HAVE_NCCL
#include "cake_nccl.h"
#endif

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank_, size_, failures;
static uint64_t seed_;

static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "rank %d (seed %llu): ", rank_, (unsigned long long)seed_);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    failures++;
}

#define OK(call)                                                                               \
    do {                                                                                       \
        cake_status st_ = (call);                                                              \
        if (st_ != CAKE_SUCCESS) {                                                             \
            fail("%s -> %s: %s", #call, cake_status_string(st_), cake_last_error());           \
            return;                                                                            \
        }                                                                                      \
    } while (0)

#define CUDA(call)                                                                             \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fail("%s -> %s", #call, cudaGetErrorString(e_));                                   \
            return;                                                                            \
        }                                                                                      \
    } while (0)

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* x or dy at (global row, channel): any rank can make any row. */
static cake_bf16 value(uint64_t seed, int64_t g, int64_t c, int which) {
    const uint64_t h = mix(seed * 0x9e3779b97f4a7c15ull + (uint64_t)g * 1000003u + (uint64_t)c * 7919u + (uint64_t)which);
    if (h % 61 == 0) return 0; /* some zeros */
    return (cake_bf16)(((h & 1) << 15) | ((112 + (h >> 1) % 30) << 7) | ((h >> 8) & 0x7f));
}

static uint64_t rng_state;
static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)(mix(++rng_state) % (uint64_t)(hi - lo + 1)); }

/* Random cu_seqlens with empty and short sequences; every rank draws the same. */
static int64_t make_cu(int64_t *cu, int64_t max_seqs, int64_t max_len) {
    const int64_t n = rnd(0, max_seqs);
    cu[0] = 0;
    for (int64_t s = 0; s < n; s++) cu[s + 1] = cu[s] + (rnd(0, 4) == 0 ? rnd(0, 2) : rnd(1, max_len));
    return n;
}

/* Contiguous, zigzag, or explicit random ranges (short pieces, shuffled owners). */
static cake_status make_partition(int kind, const int64_t *cu, int64_t num_seqs, cake_partition **out) {
    if (kind == 0) return cake_partition_create_contiguous(cu, num_seqs, size_, out);
    if (kind == 1) return cake_partition_create_zigzag(cu, num_seqs, size_, out);
    const int64_t T = cu[num_seqs];
    int64_t cuts = 0, *starts = malloc(sizeof(int64_t) * (size_t)(T + 2));
    for (int64_t g = 0; g < T; g += rnd(1, 5)) starts[cuts++] = g;
    starts[cuts] = T;
    int64_t *counts = calloc((size_t)size_, sizeof(int64_t));
    int *owner = malloc(sizeof(int) * (size_t)(cuts + 1));
    for (int64_t k = 0; k < cuts; k++) counts[owner[k] = (int)rnd(0, size_ - 1)]++;
    cake_range *ranges = malloc(sizeof(cake_range) * (size_t)(cuts + 1));
    int64_t at = 0;
    for (int r = 0; r < size_; r++)
        for (int64_t k = 0; k < cuts; k++)
            if (owner[k] == r) ranges[at++] = (cake_range){starts[k], starts[k + 1]};
    const cake_status st = cake_partition_create_ranges(cu, num_seqs, size_, counts, ranges, out);
    free(starts);
    free(counts);
    free(owner);
    free(ranges);
    return st;
}

typedef struct tensors {
    int n;
    int64_t C[3], rows, pool;
    cake_bf16 *x[3], *dy[3], *y[3], *dx[3], *hist[3];
    float *w[3], *dw[3];
    /* device copies of the inputs */
    cake_bf16 *d_x[3], *d_dy[3], *d_hist[3];
    float *d_w[3];
    /* the variant: a bias (host and device copies, CPU dbias) and the activation */
    int with_bias;
    cake_activation act;
    float *bias[3], *dbias[3], *d_bias[3];
} tensors;

/* The parameters of a call: host or device bias, and dbias outputs (NULL for a forward). */
typedef struct params_buf {
    cake_conv_params p;
    const float *bias[3];
    float *dbias[3];
} params_buf;

static const cake_conv_params *params_of(params_buf *b, const tensors *t, int device,
                                         float *const *dbias) {
    memset(b, 0, sizeof *b);
    b->p.activation = t->act;
    if (t->with_bias) {
        for (int i = 0; i < t->n; i++) {
            b->bias[i] = device ? t->d_bias[i] : t->bias[i];
            b->dbias[i] = dbias ? dbias[i] : NULL;
        }
        b->p.bias = b->bias;
        b->p.dbias = dbias ? b->dbias : NULL;
    }
    return &b->p;
}

static void compare(const char *what, const void *a, const void *b, size_t bytes, const char *where) {
    if (bytes && memcmp(a, b, bytes) != 0) fail("%s: GPU differs from CPU (%s)", what, where);
}

static void run_trial(cake_ctx *ctx, const cake_plan *plan, tensors *t, uint64_t seed,
                      cake_cooperative coop, const char *where) {
    const int n = t->n;
    cake_bf16 *gy[3], *gdx[3];
    for (int i = 0; i < n; i++) {
        const size_t rb = sizeof(cake_bf16) * (size_t)(t->rows * t->C[i]);
        gy[i] = malloc(rb + 2);
        gdx[i] = malloc(rb + 2);
    }
    params_buf cpu_fwd, cpu_bwd, gpu_fwd, gpu_bwd;
    /* CPU path */
    OK(cake_forward_multi(ctx, n, t->C, (const cake_bf16 *const *)t->x,
                          (const float *const *)t->w, params_of(&cpu_fwd, t, 0, NULL),
                          t->y, t->hist, NULL));
    OK(cake_backward_multi(ctx, n, t->C, (const cake_bf16 *const *)t->x,
                           (const float *const *)t->w, params_of(&cpu_bwd, t, 0, t->dbias),
                           (const cake_bf16 *const *)t->hist, (const cake_bf16 *const *)t->dy,
                           t->dx, t->dw));
    /* GPU path on the same context; outputs poisoned first */
    cake_bf16 *d_y[3], *d_dx[3];
    float *d_dw[3], *d_db[3] = {NULL, NULL, NULL};
    for (int i = 0; i < n; i++) {
        const size_t rb = sizeof(cake_bf16) * (size_t)(t->rows * t->C[i]) + 16;
        CUDA(cudaMalloc((void **)&d_y[i], rb));
        CUDA(cudaMalloc((void **)&d_dx[i], rb));
        CUDA(cudaMalloc((void **)&d_dw[i], sizeof(float) * 4 * (size_t)t->C[i]));
        CUDA(cudaMalloc((void **)&d_db[i], sizeof(float) * (size_t)t->C[i]));
        CUDA(cudaMemset(d_y[i], 0xff, rb));
        CUDA(cudaMemset(d_dx[i], 0xff, rb));
        CUDA(cudaMemset(d_dw[i], 0xff, sizeof(float) * 4 * (size_t)t->C[i]));
        CUDA(cudaMemset(d_db[i], 0xff, sizeof(float) * (size_t)t->C[i]));
        CUDA(cudaMemset(t->d_hist[i], 0xff, sizeof(cake_bf16) * (size_t)(t->pool * t->C[i]) + 16));
    }
    cudaStream_t stream;
    CUDA(cudaStreamCreate(&stream));
    cake_ctx_stats before, after;
    OK(cake_forward_multi_cuda(ctx, n, t->C, (const cake_bf16 *const *)t->d_x,
                               (const float *const *)t->d_w, params_of(&gpu_fwd, t, 1, NULL),
                               d_y, t->d_hist, NULL, coop, NULL, 0, stream));
    OK(cake_ctx_get_stats(ctx, &before));
    OK(cake_backward_multi_cuda(ctx, n, t->C, (const cake_bf16 *const *)t->d_x,
                                (const float *const *)t->d_w, params_of(&gpu_bwd, t, 1, d_db),
                                (const cake_bf16 *const *)t->d_hist, (const cake_bf16 *const *)t->d_dy,
                                d_dx, d_dw, coop, NULL, 0, stream));
    OK(cake_ctx_get_stats(ctx, &after));
    if (after.exchanges - before.exchanges > 1)
        fail("a GPU backward made %lld exchanges (%s)",
             (long long)(after.exchanges - before.exchanges), where);
    CUDA(cudaStreamSynchronize(stream));
    for (int i = 0; i < n; i++) {
        const size_t rb = sizeof(cake_bf16) * (size_t)(t->rows * t->C[i]);
        float dw[4 * 4200], db[4200];
        CUDA(cudaMemcpy(gy[i], d_y[i], rb, cudaMemcpyDeviceToHost));
        CUDA(cudaMemcpy(gdx[i], d_dx[i], rb, cudaMemcpyDeviceToHost));
        CUDA(cudaMemcpy(dw, d_dw[i], sizeof(float) * 4 * (size_t)t->C[i], cudaMemcpyDeviceToHost));
        compare("y", gy[i], t->y[i], rb, where);
        compare("dx", gdx[i], t->dx[i], rb, where);
        compare("dw", dw, t->dw[i], sizeof(float) * 4 * (size_t)t->C[i], where);
        if (t->with_bias) {
            CUDA(cudaMemcpy(db, d_db[i], sizeof(float) * (size_t)t->C[i], cudaMemcpyDeviceToHost));
            compare("dbias", db, t->dbias[i], sizeof(float) * (size_t)t->C[i], where);
        }
    }
    /* A forward that reuses a filled handle: no exchange, same bits; the CPU path refuses it. */
    cake_recompute_handle *h;
    OK(cake_recompute_handle_create(&h));
    OK(cake_forward_multi_cuda(ctx, n, t->C, (const cake_bf16 *const *)t->d_x,
                               (const float *const *)t->d_w, &gpu_fwd.p,
                               d_y, t->d_hist, h, coop, NULL, 0, stream));
    OK(cake_ctx_get_stats(ctx, &before));
    OK(cake_forward_multi_cuda(ctx, n, t->C, (const cake_bf16 *const *)t->d_x,
                               (const float *const *)t->d_w, &gpu_fwd.p,
                               d_y, t->d_hist, h, coop, NULL, 0, stream));
    OK(cake_ctx_get_stats(ctx, &after));
    CUDA(cudaStreamSynchronize(stream));
    if (after.exchanges != before.exchanges) fail("forward from a filled handle exchanged (%s)", where);
    for (int i = 0; i < n; i++) {
        const size_t rb = sizeof(cake_bf16) * (size_t)(t->rows * t->C[i]);
        CUDA(cudaMemcpy(gy[i], d_y[i], rb, cudaMemcpyDeviceToHost));
        compare("y from handle", gy[i], t->y[i], rb, where);
    }
    if (cake_forward_multi(ctx, n, t->C, (const cake_bf16 *const *)t->x,
                           (const float *const *)t->w, &cpu_fwd.p,
                           t->y, t->hist, h) != CAKE_ERROR_INVALID_ARGUMENT ||
        !strstr(cake_last_error(), "recompute_handle"))
        fail("a CPU forward accepted a handle filled on the GPU (%s): %s", where, cake_last_error());
    cake_recompute_handle_destroy(h);
    (void)plan;
    (void)seed;
    for (int i = 0; i < n; i++) {
        cudaFree(d_y[i]);
        cudaFree(d_dx[i]);
        cudaFree(d_dw[i]);
        cudaFree(d_db[i]);
        free(gy[i]);
        free(gdx[i]);
    }
    cudaStreamDestroy(stream);
}

/* Local rows of this rank from the global generator, in the plan's order. */
static void fill_local(const cake_plan *plan, tensors *t, uint64_t seed) {
    for (int64_t f = 0; f < cake_plan_num_fragments(plan); f++) {
        cake_fragment fr;
        cake_plan_fragment(plan, f, &fr);
        for (int i = 0; i < t->n; i++)
            for (int64_t r = 0; r < fr.length; r++)
                for (int64_t c = 0; c < t->C[i]; c++) {
                    t->x[i][(fr.local_start + r) * t->C[i] + c] = value(seed + (uint64_t)i, fr.global_start + r, c, 1);
                    t->dy[i][(fr.local_start + r) * t->C[i] + c] = value(seed + (uint64_t)i, fr.global_start + r, c, 2);
                }
    }
}

/* The CP outputs on this rank (t->y, t->dx from the CPU path, which the GPU path equals) against
 * the single-rank run over the whole batch, row by row through the fragments. */
static void compare_single_rank(const cake_plan *plan, const tensors *t, uint64_t seed,
                                const int64_t *cu, int64_t num_seqs, const char *where) {
    const int64_t T = cu[num_seqs];
    for (int i = 0; i < t->n; i++) {
        const int64_t C = t->C[i];
        cake_bf16 *gx = malloc(sizeof(cake_bf16) * (size_t)(T * C) + 2);
        cake_bf16 *gdy = malloc(sizeof(cake_bf16) * (size_t)(T * C) + 2);
        cake_bf16 *gy = malloc(sizeof(cake_bf16) * (size_t)(T * C) + 2);
        cake_bf16 *gdx = malloc(sizeof(cake_bf16) * (size_t)(T * C) + 2);
        float gdw[4 * 320];
        for (int64_t g = 0; g < T; g++)
            for (int64_t c = 0; c < C; c++) {
                gx[g * C + c] = value(seed + (uint64_t)i, g, c, 1);
                gdy[g * C + c] = value(seed + (uint64_t)i, g, c, 2);
            }
        const cake_bf16 *xs[] = {gx}, *dys[] = {gdy};
        const float *ws[] = {t->w[i]}, *bs[] = {t->bias[i]};
        float gdb[320];
        float *dbs[] = {gdb};
        const cake_conv_params prm = {t->act, t->with_bias ? bs : NULL,
                                      t->with_bias ? dbs : NULL};
        if (cake_cpu_forward_single_rank(cu, num_seqs, 1, &C, xs, ws, &prm, &gy,
                                         NULL) != CAKE_SUCCESS ||
            cake_cpu_backward_single_rank(cu, num_seqs, 1, &C, xs, ws, &prm, dys, &gdx,
                                          (float *[]){gdw}, NULL) != CAKE_SUCCESS) {
            fail("single-rank run: %s", cake_last_error());
        } else {
            for (int64_t f = 0; f < cake_plan_num_fragments(plan); f++) {
                cake_fragment fr;
                cake_plan_fragment(plan, f, &fr);
                const size_t bytes = sizeof(cake_bf16) * (size_t)(fr.length * C);
                if (memcmp(t->y[i] + fr.local_start * C, gy + fr.global_start * C, bytes) ||
                    memcmp(t->dx[i] + fr.local_start * C, gdx + fr.global_start * C, bytes)) {
                    fail("tensor %d: y or dx differs from the single-rank run at global rows "
                         "[%lld, %lld) (%s)", i, (long long)fr.global_start,
                         (long long)(fr.global_start + fr.length), where);
                    break;
                }
            }
        }
        free(gx);
        free(gdy);
        free(gy);
        free(gdx);
    }
}

static void trial(cake_ctx *ctx, uint64_t seed, int64_t C_choice[3], int n, const char *where,
                  const int64_t *cu, int64_t num_seqs, int variant) {
    const cake_plan *plan = cake_ctx_plan(ctx);
    tensors t = {.n = n, .rows = cake_ctx_local_rows(ctx), .pool = cake_ctx_pool_rows(ctx),
                 .with_bias = variant & 1,
                 .act = variant & 2 ? CAKE_ACTIVATION_SILU : CAKE_ACTIVATION_NONE};
    for (int i = 0; i < n; i++) {
        const int64_t C = t.C[i] = C_choice[i];
        const size_t rb = sizeof(cake_bf16) * (size_t)(t.rows * C) + 16;
        const size_t pb = sizeof(cake_bf16) * (size_t)(t.pool * C) + 16;
        t.x[i] = malloc(rb); t.dy[i] = malloc(rb); t.y[i] = malloc(rb); t.dx[i] = malloc(rb);
        t.hist[i] = malloc(pb);
        t.w[i] = malloc(sizeof(float) * 4 * (size_t)C);
        t.dw[i] = malloc(sizeof(float) * 4 * (size_t)C);
        for (int64_t k = 0; k < 4 * C; k++)
            t.w[i][k] = (float)((int64_t)(mix(seed * 31 + (uint64_t)(i * 100000 + k)) % 2001) - 1000) / 1024.0f;
        if (t.with_bias) {
            t.bias[i] = malloc(sizeof(float) * (size_t)C);
            t.dbias[i] = malloc(sizeof(float) * (size_t)C);
            for (int64_t c = 0; c < C; c++) /* some zeros, both signs */
                t.bias[i][c] = (float)((int64_t)(mix(seed * 37 + (uint64_t)(i * 100000 + c)) % 33) - 16) / 8.0f;
        }
    }
    fill_local(plan, &t, seed);
    for (int i = 0; i < n; i++) {
        const size_t rb = sizeof(cake_bf16) * (size_t)(t.rows * t.C[i]) + 16;
        if (cudaMalloc((void **)&t.d_x[i], rb) != cudaSuccess || cudaMalloc((void **)&t.d_dy[i], rb) != cudaSuccess ||
            cudaMalloc((void **)&t.d_hist[i], sizeof(cake_bf16) * (size_t)(t.pool * t.C[i]) + 16) != cudaSuccess ||
            cudaMalloc((void **)&t.d_w[i], sizeof(float) * 4 * (size_t)t.C[i]) != cudaSuccess) {
            fail("cudaMalloc failed");
            return;
        }
        cudaMemcpy(t.d_x[i], t.x[i], rb - 16, cudaMemcpyHostToDevice);
        cudaMemcpy(t.d_dy[i], t.dy[i], rb - 16, cudaMemcpyHostToDevice);
        cudaMemcpy(t.d_w[i], t.w[i], sizeof(float) * 4 * (size_t)t.C[i], cudaMemcpyHostToDevice);
        if (t.with_bias) {
            if (cudaMalloc((void **)&t.d_bias[i], sizeof(float) * (size_t)t.C[i]) != cudaSuccess) {
                fail("cudaMalloc failed");
                return;
            }
            cudaMemcpy(t.d_bias[i], t.bias[i], sizeof(float) * (size_t)t.C[i], cudaMemcpyHostToDevice);
        }
    }
    for (int coop = -1; coop <= 1; coop++) {
        if (coop == 1 && !cake_cuda_cooperative_supported()) continue;
        char w2[256];
        snprintf(w2, sizeof w2, "%s, variant %d (bias %d, SiLU %d), cooperative %d", where, variant,
                 variant & 1, variant >> 1, coop);
        run_trial(ctx, plan, &t, seed, (cake_cooperative)coop, w2);
    }
    compare_single_rank(plan, &t, seed, cu, num_seqs, where);
    for (int i = 0; i < n; i++) {
        free(t.x[i]); free(t.dy[i]); free(t.y[i]); free(t.dx[i]); free(t.hist[i]); free(t.w[i]); free(t.dw[i]);
        free(t.bias[i]); free(t.dbias[i]);
        cudaFree(t.d_x[i]); cudaFree(t.d_dy[i]); cudaFree(t.d_hist[i]); cudaFree(t.d_w[i]);
        cudaFree(t.d_bias[i]);
    }
}

/* Contexts over MPI (device buffers staged through pinned memory) or NCCL. Check mode on: a
 * test that desynchronised the ranks would fail instead of hanging. */
static cake_status make_mpi_ctx(void *comm, const cake_partition *part, cake_ctx **ctx) {
    (void)comm;
    cake_ctx_options opts = {0};
    opts.check = 1;
    opts.timeout_seconds = 120;
    return cake_ctx_create_mpi(MPI_COMM_WORLD, part, &opts, ctx);
}

#ifdef CAKE_TEST_HAVE_NCCL
static cake_status make_nccl_ctx(void *comm, const cake_partition *part, cake_ctx **ctx) {
    cake_ctx_options opts = {0};
    opts.check = 1;
    opts.timeout_seconds = 120;
    return cake_ctx_create_nccl((ncclComm_t)comm, part, &opts, ctx);
}
#endif

/* Random cu_seqlens (short sequences and fragments included) and partitions of every kind. */
static int run_trials(cake_status (*make_ctx)(void *, const cake_partition *, cake_ctx **),
                      void *comm, const char *transport) {
    int trials = 0;
    for (int k = 0; k < 12; k++) {
        int64_t cu[64];
        const int64_t num_seqs = make_cu(cu, 40, k % 3 == 0 ? 3 : 300);
        const int kind = k % 3;
        int64_t C[3] = {8 * rnd(1, 20), 8 * rnd(1, 4), 8 * rnd(1, 40)};
        const int n = (int)rnd(1, 3);
        cake_partition *part;
        if (make_partition(kind, cu, num_seqs, &part) != CAKE_SUCCESS) {
            fail("partition: %s", cake_last_error());
            continue;
        }
        cake_ctx *ctx;
        if (make_ctx(comm, part, &ctx) != CAKE_SUCCESS) {
            fail("%s ctx: %s", transport, cake_last_error());
        } else {
            char where[128];
            snprintf(where, sizeof where, "%s, trial %d, partition kind %d, T %lld, n %d",
                     transport, k, kind, (long long)cu[num_seqs], n);
            trial(ctx, seed_ + (uint64_t)k, C, n, where, cu, num_seqs, k % 4);
            trials++;
            cake_ctx_destroy(ctx);
        }
        cake_partition_destroy(part);
    }
    return trials;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    int devices = 0, skip = cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0, any_skip;
    MPI_Allreduce(&skip, &any_skip, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any_skip) {
        if (rank_ == 0) printf("no CUDA device: skipped\n");
        MPI_Finalize();
        return 77;
    }
    cudaSetDevice(rank_ % devices); /* one GPU per rank where there are enough */
    const char *env = getenv("CAKE_TEST_SEED");
    seed_ = env ? strtoull(env, NULL, 0) : 20261129u;
    rng_state = seed_;
    int trials = run_trials(make_mpi_ctx, NULL, "MPI");
#ifdef CAKE_TEST_HAVE_NCCL
    /* NCCL needs one GPU per rank: with fewer GPUs than ranks this part is skipped. */
    if (devices >= size_) {
        ncclComm_t comm;
        ncclUniqueId id;
        if (rank_ == 0 && ncclGetUniqueId(&id) != ncclSuccess) fail("ncclGetUniqueId failed");
        MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
        if (ncclCommInitRank(&comm, size_, id, rank_) != ncclSuccess) {
            fail("ncclCommInitRank failed");
        } else {
            trials += run_trials(make_nccl_ctx, comm, "NCCL");
            ncclCommDestroy(comm);
        }
    } else if (rank_ == 0) {
        printf("NCCL part skipped: %d ranks, %d GPUs\n", size_, devices);
    }
#endif
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0) printf("%d ranks, %d trials per rank: %d failures\n", size_, trials, total);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
