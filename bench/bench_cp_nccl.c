/* Multi-GPU context-parallel benchmark: one rank per GPU under mpirun, NCCL exchange.
 * Reports the halo exchange latency per direction (time on the stream of the NCCL group, median
 * and p99 over the timed steps, worst rank) and the CP step (forward + backward) against the
 * P = 1 step of the same per-rank shape on the same GPU.
 * Usage: mpirun -np P bench_cp_nccl [--rows S_local] [--channels C] [--tensors n]
 *        [--partition contiguous|zigzag] [--steps N] */
#include "bench_common.h"
#include "cake_cuda.h"
#include "cake_mpi.h"
#include "cake_nccl.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_EVENTS 4096

/* Wraps the NCCL transport: events around each device exchange, on its stream. */
typedef struct timed {
    cake_transport inner;
    cudaEvent_t start[MAX_EVENTS], stop[MAX_EVENTS];
    int tag[MAX_EVENTS], count, recording;
} timed;

static cake_status timed_host(void *s, int tag, const cake_transfer *a, int na,
                              const cake_transfer *b, int nb, double t) {
    timed *x = s;
    return x->inner.exchange(x->inner.state, tag, a, na, b, nb, t);
}

static cake_status timed_device(void *s, int tag, const cake_transfer *a, int na,
                                const cake_transfer *b, int nb, double t, void *stream) {
    timed *x = s;
    const int k = x->count;
    if (x->recording && k < MAX_EVENTS) cudaEventRecord(x->start[k], (cudaStream_t)stream);
    const cake_status st = x->inner.exchange_device(x->inner.state, tag, a, na, b, nb, t, stream);
    if (x->recording && k < MAX_EVENTS) {
        cudaEventRecord(x->stop[k], (cudaStream_t)stream);
        x->tag[k] = tag;
        x->count++;
    }
    return st;
}

static void timed_release(void *s) {
    timed *x = s;
    x->inner.release(x->inner.state);
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

#define CHECK(call)                                                                            \
    do {                                                                                       \
        cake_status st_ = (call);                                                              \
        if (st_ != CAKE_SUCCESS) {                                                             \
            fprintf(stderr, "rank %d: %s: %s\n", rank, #call, cake_last_error());              \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                      \
        }                                                                                      \
    } while (0)

typedef struct buffers {
    int n;
    int64_t C[8], rows;
    cake_bf16 *x[8], *y[8], *dy[8], *dx[8], *hist[8];
    float *w[8], *dw[8];
} buffers;

static void alloc_buffers(buffers *b, int n, int64_t C, int64_t rows, int64_t pool_rows) {
    b->n = n;
    b->rows = rows;
    cake_bf16 *host = malloc(sizeof(cake_bf16) * (size_t)(rows * C));
    float hw[4 * 8192];
    for (int i = 0; i < n; i++) {
        const size_t rb = sizeof(cake_bf16) * (size_t)(rows * C) + 256;
        b->C[i] = C;
        cudaMalloc((void **)&b->x[i], rb);
        cudaMalloc((void **)&b->y[i], rb);
        cudaMalloc((void **)&b->dy[i], rb);
        cudaMalloc((void **)&b->dx[i], rb);
        cudaMalloc((void **)&b->hist[i], sizeof(cake_bf16) * (size_t)(pool_rows * C) + 256);
        cudaMalloc((void **)&b->w[i], sizeof(float) * 4 * (size_t)C);
        cudaMalloc((void **)&b->dw[i], sizeof(float) * 4 * (size_t)C);
        bench_fill_bf16(host, rows * C, 11 + (uint64_t)i);
        cudaMemcpy(b->x[i], host, rb - 256, cudaMemcpyHostToDevice);
        bench_fill_bf16(host, rows * C, 21 + (uint64_t)i);
        cudaMemcpy(b->dy[i], host, rb - 256, cudaMemcpyHostToDevice);
        bench_fill_f32(hw, 4 * C, 31 + (uint64_t)i);
        cudaMemcpy(b->w[i], hw, sizeof(float) * 4 * (size_t)C, cudaMemcpyHostToDevice);
    }
    free(host);
}

static void free_buffers(buffers *b) {
    for (int i = 0; i < b->n; i++) {
        cudaFree(b->x[i]); cudaFree(b->y[i]); cudaFree(b->dy[i]); cudaFree(b->dx[i]);
        cudaFree(b->hist[i]); cudaFree(b->w[i]); cudaFree(b->dw[i]);
    }
}

/* Median ms of `steps` forward + backward steps on ctx. */
static float time_steps(cake_ctx *ctx, buffers *b, int steps, cudaStream_t stream, int rank,
                        timed *rec) {
    cudaEvent_t a, z;
    cudaEventCreate(&a);
    cudaEventCreate(&z);
    float *ms = malloc(sizeof(float) * (size_t)steps);
    for (int s = -3; s < steps; s++) {
        if (rec) rec->recording = s >= 0;
        MPI_Barrier(MPI_COMM_WORLD);
        cudaEventRecord(a, stream);
        CHECK(cake_forward_multi_cuda(ctx, b->n, b->C, (const cake_bf16 *const *)b->x,
                                      (const float *const *)b->w, NULL, b->y, b->hist, NULL,
                                      CAKE_COOPERATIVE_AUTO, NULL, 0, stream));
        CHECK(cake_backward_multi_cuda(ctx, b->n, b->C, (const cake_bf16 *const *)b->x,
                                       (const float *const *)b->w, NULL,
                                       (const cake_bf16 *const *)b->hist,
                                       (const cake_bf16 *const *)b->dy, b->dx, b->dw,
                                       CAKE_COOPERATIVE_AUTO, NULL, 0, stream));
        cudaEventRecord(z, stream);
        cudaEventSynchronize(z);
        if (s >= 0) cudaEventElapsedTime(&ms[s], a, z);
    }
    qsort(ms, (size_t)steps, sizeof(float), cmp_float);
    const float median = ms[steps / 2];
    free(ms);
    cudaEventDestroy(a);
    cudaEventDestroy(z);
    return median;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, P, devices = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    int64_t rows = 32768, C = 4096;
    int n = 3, steps = 30, zigzag = 0;
    static const struct option options[] = {{"rows", required_argument, 0, 's'},
                                            {"channels", required_argument, 0, 'c'},
                                            {"tensors", required_argument, 0, 'n'},
                                            {"partition", required_argument, 0, 'p'},
                                            {"steps", required_argument, 0, 'k'},
                                            {0, 0, 0, 0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "s:c:n:p:k:", options, NULL)) != -1) {
        if (opt == 's') rows = atoll(optarg);
        else if (opt == 'c') C = atoll(optarg);
        else if (opt == 'n') n = atoi(optarg);
        else if (opt == 'p') zigzag = strcmp(optarg, "zigzag") == 0;
        else if (opt == 'k') steps = atoi(optarg);
        else {
            if (rank == 0) fprintf(stderr, "usage: see the comment at the top of bench_cp_nccl.c\n");
            MPI_Finalize();
            return 2;
        }
    }
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < P || n < 1 || n > 8 || C % 8 ||
        C > 8192 || rows < 1 || steps < 1) {
        if (rank == 0) fprintf(stderr, "bench_cp_nccl: needs one GPU per rank (%d GPUs, %d ranks) "
                                       "and 1 <= tensors <= 8, C %% 8 == 0, C <= 8192\n", devices, P);
        MPI_Finalize();
        return 2;
    }
    cudaSetDevice(rank);
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    ncclUniqueId id;
    if (rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, P, id, rank) != ncclSuccess) {
        fprintf(stderr, "rank %d: ncclCommInitRank failed\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* CP: P * rows tokens, random sequence lengths (mean 4096), every rank rows of them. */
    const int64_t T = rows * P;
    int64_t *cu = malloc(sizeof(int64_t) * (size_t)(T + 1));
    const int64_t num_seqs = bench_random_cu_seqlens(T, 4096, 7, cu);
    cake_partition *part;
    CHECK(zigzag ? cake_partition_create_zigzag(cu, num_seqs, P, &part)
                 : cake_partition_create_contiguous(cu, num_seqs, P, &part));
    timed *rec = calloc(1, sizeof *rec);
    CHECK(cake_nccl_transport_create(comm, &rec->inner));
    for (int k = 0; k < MAX_EVENTS; k++) {
        cudaEventCreate(&rec->start[k]);
        cudaEventCreate(&rec->stop[k]);
    }
    const cake_transport wrapped = {.exchange = timed_host, .release = timed_release,
                                    .state = rec, .exchange_device = timed_device};
    cake_ctx *ctx;
    CHECK(cake_ctx_create(part, rank, &wrapped, NULL, &ctx));
    buffers b;
    alloc_buffers(&b, n, C, cake_ctx_local_rows(ctx), cake_ctx_pool_rows(ctx));
    const float cp_ms = time_steps(ctx, &b, steps, stream, rank, rec);
    /* Exchange latency per direction. */
    float lat[2][MAX_EVENTS];
    int counts[2] = {0, 0};
    for (int k = 0; k < rec->count; k++) {
        const int dir = rec->tag[k] == 12; /* CAKE_TAG_FUTURE */
        cudaEventElapsedTime(&lat[dir][counts[dir]++], rec->start[k], rec->stop[k]);
    }
    float stats[4] = {0, 0, 0, 0}; /* fwd median, fwd p99, bwd median, bwd p99 (us) */
    for (int d = 0; d < 2; d++) {
        if (counts[d] == 0) continue;
        qsort(lat[d], (size_t)counts[d], sizeof(float), cmp_float);
        stats[2 * d] = 1e3f * lat[d][counts[d] / 2];
        stats[2 * d + 1] = 1e3f * lat[d][(int)((counts[d] - 1) * 0.99)];
    }
    float worst[4];
    MPI_Reduce(stats, worst, 4, MPI_FLOAT, MPI_MAX, 0, MPI_COMM_WORLD);
    float cp_worst;
    MPI_Reduce(&cp_ms, &cp_worst, 1, MPI_FLOAT, MPI_MAX, 0, MPI_COMM_WORLD);
    free_buffers(&b);
    cake_ctx_destroy(ctx);
    cake_partition_destroy(part);
    /* P = 1 with the same per-rank shape, on each GPU, over MPI_COMM_SELF (no exchange). */
    int64_t *cu1 = malloc(sizeof(int64_t) * (size_t)(rows + 1));
    const int64_t seqs1 = bench_random_cu_seqlens(rows, 4096, 7, cu1);
    cake_partition *part1;
    cake_ctx *ctx1;
    CHECK(cake_partition_create_contiguous(cu1, seqs1, 1, &part1));
    CHECK(cake_ctx_create_mpi(MPI_COMM_SELF, part1, NULL, &ctx1));
    alloc_buffers(&b, n, C, rows, cake_ctx_pool_rows(ctx1));
    const float one_ms = time_steps(ctx1, &b, steps, stream, rank, NULL);
    float one_worst;
    MPI_Reduce(&one_ms, &one_worst, 1, MPI_FLOAT, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("cake CP over NCCL: %d GPUs, %d tensors x [%lld rows per rank, %lld channels], "
               "%s partition, %lld sequences, %d steps\n", P, n, (long long)rows, (long long)C,
               zigzag ? "zigzag" : "contiguous", (long long)num_seqs, steps);
        printf("  exchange latency, forward:  median %.1f us, p99 %.1f us (worst rank)\n", worst[0], worst[1]);
        printf("  exchange latency, backward: median %.1f us, p99 %.1f us (worst rank)\n", worst[2], worst[3]);
        printf("  step (forward + backward): CP %.3f ms, P = 1 same per-rank shape %.3f ms, "
               "overhead %.1f %%\n", cp_worst, one_worst, 100.0 * (cp_worst - one_worst) / one_worst);
    }
    free_buffers(&b);
    cake_ctx_destroy(ctx1);
    cake_partition_destroy(part1);
    free(cu);
    free(cu1);
    ncclCommDestroy(comm);
    MPI_Finalize();
    return 0;
}
