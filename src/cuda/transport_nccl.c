/* The NCCL transport: one group of point-to-point operations per exchange. */
#include "cake_nccl.h"

#include "cuda_common.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct nccl_state {
    ncclComm_t comm;
    cudaStream_t stream; /* for host-memory exchanges (check mode) */
} nccl_state;

#define NCCL_CHECK(expr, what)                                                                 \
    do {                                                                                       \
        const ncclResult_t cake_nccl_rc_ = (expr);                                             \
        if (cake_nccl_rc_ != ncclSuccess)                                                      \
            return cake_fail(CAKE_ERROR_COMMUNICATION, "%s: %s", what,                         \
                             ncclGetErrorString(cake_nccl_rc_));                               \
    } while (0)

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static cake_status enqueue(const nccl_state *s, const cake_transfer *sends, int num_sends,
                           const cake_transfer *receives, int num_receives, cudaStream_t stream) {
    NCCL_CHECK(ncclGroupStart(), "ncclGroupStart");
    ncclResult_t rc = ncclSuccess;
    for (int i = 0; i < num_receives && rc == ncclSuccess; i++)
        rc = ncclRecv(receives[i].data, (size_t)receives[i].bytes, ncclUint8, receives[i].peer,
                      s->comm, stream);
    for (int i = 0; i < num_sends && rc == ncclSuccess; i++)
        rc = ncclSend(sends[i].data, (size_t)sends[i].bytes, ncclUint8, sends[i].peer, s->comm,
                      stream);
    const ncclResult_t end = ncclGroupEnd(); /* always close the group */
    NCCL_CHECK(rc, "ncclSend/ncclRecv");
    NCCL_CHECK(end, "ncclGroupEnd");
    return CAKE_SUCCESS;
}

/* With a limit: wait on the host until the group completes, NCCL reports an error, or time
 * runs out. */
static cake_status wait_until(const nccl_state *s, cudaStream_t stream, double timeout_seconds) {
    cudaEvent_t done;
    CAKE_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    cake_status status = CAKE_SUCCESS;
    cudaError_t err = cudaEventRecord(done, stream);
    const double deadline = now_seconds() + timeout_seconds;
    while (err == cudaSuccess && (err = cudaEventQuery(done)) == cudaErrorNotReady) {
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(s->comm, &async);
        if (async != ncclSuccess && async != ncclInProgress) {
            status = cake_fail(CAKE_ERROR_COMMUNICATION, "exchange: NCCL reported %s",
                               ncclGetErrorString(async));
            break;
        }
        if (now_seconds() > deadline) {
            status = cake_fail(CAKE_ERROR_TIMEOUT,
                               "exchange: not complete after %g s (a peer did not make the same "
                               "call, or is late); abort the NCCL communicator", timeout_seconds);
            break;
        }
        sched_yield();
    }
    if (status == CAKE_SUCCESS && err != cudaSuccess)
        status = cake_fail(CAKE_ERROR_CUDA, "exchange: %s", cudaGetErrorString(err));
    cudaEventDestroy(done);
    return status;
}

static cake_status nccl_exchange_device(void *state, int tag, const cake_transfer *sends,
                                        int num_sends, const cake_transfer *receives,
                                        int num_receives, double timeout_seconds, void *stream) {
    (void)tag; /* NCCL keeps the order of operations between two ranks */
    const nccl_state *s = state;
    CAKE_CHECK(enqueue(s, sends, num_sends, receives, num_receives, (cudaStream_t)stream));
    return timeout_seconds > 0.0 ? wait_until(s, (cudaStream_t)stream, timeout_seconds)
                                 : CAKE_SUCCESS;
}

/* Host memory (check mode's fingerprints): through device copies on the transport's stream. */
static cake_status nccl_exchange_host(void *state, int tag, const cake_transfer *sends,
                                      int num_sends, const cake_transfer *receives,
                                      int num_receives, double timeout_seconds) {
    const nccl_state *s = state;
    int64_t total = 0;
    for (int i = 0; i < num_sends; i++) total += sends[i].bytes;
    for (int i = 0; i < num_receives; i++) total += receives[i].bytes;
    cake_transfer *t = malloc(sizeof *t * (size_t)(num_sends + num_receives + 1));
    char *device = NULL;
    if (!t) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory");
    cudaError_t err = cudaMalloc((void **)&device, (size_t)(total > 0 ? total : 1));
    if (err != cudaSuccess) {
        free(t);
        return cake_fail(CAKE_ERROR_CUDA, "cudaMalloc(exchange): %s", cudaGetErrorString(err));
    }
    char *cursor = device;
    for (int i = 0; i < num_sends + num_receives && err == cudaSuccess; i++) {
        const cake_transfer *src = i < num_sends ? &sends[i] : &receives[i - num_sends];
        t[i] = (cake_transfer){src->peer, cursor, src->bytes};
        if (i < num_sends)
            err = cudaMemcpyAsync(cursor, src->data, (size_t)src->bytes, cudaMemcpyHostToDevice, s->stream);
        cursor += src->bytes;
    }
    cake_status status = err == cudaSuccess
        ? nccl_exchange_device(state, tag, t, num_sends, t + num_sends, num_receives,
                               timeout_seconds, s->stream)
        : cake_fail(CAKE_ERROR_CUDA, "cudaMemcpyAsync(exchange): %s", cudaGetErrorString(err));
    for (int i = 0; i < num_receives && status == CAKE_SUCCESS; i++)
        if (cudaMemcpyAsync(receives[i].data, t[num_sends + i].data, (size_t)receives[i].bytes,
                            cudaMemcpyDeviceToHost, s->stream) != cudaSuccess)
            status = cake_fail(CAKE_ERROR_CUDA, "cudaMemcpyAsync(exchange) failed");
    if (status == CAKE_SUCCESS && (err = cudaStreamSynchronize(s->stream)) != cudaSuccess)
        status = cake_fail(CAKE_ERROR_CUDA, "cudaStreamSynchronize: %s", cudaGetErrorString(err));
    /* After a timeout NCCL may still write `device`: leave it (the context is unusable now). */
    if (status != CAKE_ERROR_TIMEOUT) cudaFree(device);
    free(t);
    return status;
}

static void nccl_release(void *state) {
    nccl_state *s = state;
    cudaStreamDestroy(s->stream);
    free(s);
}

cake_status cake_nccl_transport_create(ncclComm_t comm, cake_transport *out) {
    cake_clear_error();
    if (!out) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "out: expected a pointer, got NULL");
    if (!comm) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "comm: expected a communicator, got NULL");
    nccl_state *s = malloc(sizeof *s);
    if (!s) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "transport: out of memory");
    s->comm = comm;
    const cudaError_t err = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
    if (err != cudaSuccess) {
        free(s);
        return cake_fail(CAKE_ERROR_CUDA, "cudaStreamCreate: %s", cudaGetErrorString(err));
    }
    *out = (cake_transport){.exchange = nccl_exchange_host, .release = nccl_release, .state = s,
                            .exchange_device = nccl_exchange_device};
    return CAKE_SUCCESS;
}

cake_status cake_ctx_create_nccl(ncclComm_t comm, const cake_partition *partition,
                                 const cake_ctx_options *options, cake_ctx **out) {
    cake_transport transport;
    CAKE_CHECK(cake_nccl_transport_create(comm, &transport));
    int rank = 0, size = 0;
    if (ncclCommUserRank(comm, &rank) != ncclSuccess || ncclCommCount(comm, &size) != ncclSuccess) {
        transport.release(transport.state);
        return cake_fail(CAKE_ERROR_COMMUNICATION, "comm: cannot read its rank and size");
    }
    return cake_ctx_create_owning(partition, rank, size, &transport, options, out);
}
