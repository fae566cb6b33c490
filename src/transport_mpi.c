/* The MPI transport: every receive and send of an exchange posted non-blocking, then one wait
 * (or a polling wait with a deadline when a timeout is set). Messages over 1 GiB are cut into
 * pieces because MPI counts are int; pieces of one transfer match in order (MPI does not let
 * messages with the same source, tag and communicator overtake each other). */
#include "cake_mpi.h"

#include "internal.h"

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#define PIECE_BYTES ((int64_t)1 << 30)

typedef struct mpi_state {
    MPI_Comm comm;
} mpi_state;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t pieces_of(const cake_transfer *t, int count) {
    int64_t pieces = 0;
    for (int i = 0; i < count; i++) pieces += t[i].bytes > 0 ? (t[i].bytes + PIECE_BYTES - 1) / PIECE_BYTES : 1;
    return pieces;
}

static int post(const cake_transfer *t, int count, int tag, MPI_Comm comm, int receive,
                MPI_Request *requests) {
    int64_t k = 0;
    for (int i = 0; i < count; i++) {
        char *data = t[i].data;
        int64_t left = t[i].bytes;
        do {
            const int bytes = (int)(left < PIECE_BYTES ? left : PIECE_BYTES);
            const int rc = receive ? MPI_Irecv(data, bytes, MPI_BYTE, t[i].peer, tag, comm, &requests[k])
                                   : MPI_Isend(data, bytes, MPI_BYTE, t[i].peer, tag, comm, &requests[k]);
            if (rc != MPI_SUCCESS) return rc;
            k++;
            data += bytes;
            left -= bytes;
        } while (left > 0);
    }
    return MPI_SUCCESS;
}

/* After a deadline: cancel what has not completed so no receive lands later. Sends that cannot
 * be cancelled are released; their buffers belong to the context, which refuses further use. */
static void abandon(MPI_Request *requests, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        if (requests[i] == MPI_REQUEST_NULL) continue;
        int done = 0;
        MPI_Test(&requests[i], &done, MPI_STATUS_IGNORE);
        if (done) continue;
        MPI_Cancel(&requests[i]);
        MPI_Request_free(&requests[i]);
    }
}

static cake_status mpi_exchange(void *state, int tag, const cake_transfer *sends, int num_sends,
                                const cake_transfer *receives, int num_receives,
                                double timeout_seconds) {
    const mpi_state *s = state;
    const int64_t num_recv_pieces = pieces_of(receives, num_receives);
    const int64_t count = num_recv_pieces + pieces_of(sends, num_sends);
    if (count > INT_MAX)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "exchange: %lld MPI messages exceed an int",
                         (long long)count);
    MPI_Request *requests = malloc(sizeof(MPI_Request) * (size_t)(count > 0 ? count : 1));
    if (!requests) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "exchange: out of memory");
    for (int64_t i = 0; i < count; i++) requests[i] = MPI_REQUEST_NULL;
    /* Receives first, so every send finds its receive already posted. */
    int rc = post(receives, num_receives, tag, s->comm, 1, requests);
    if (rc == MPI_SUCCESS) rc = post(sends, num_sends, tag, s->comm, 0, requests + num_recv_pieces);
    cake_status status = CAKE_SUCCESS;
    if (rc != MPI_SUCCESS) {
        abandon(requests, count);
        status = cake_fail(CAKE_ERROR_COMMUNICATION, "exchange: posting an MPI message failed (%d)", rc);
    } else if (timeout_seconds <= 0.0) {
        rc = MPI_Waitall((int)count, requests, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS)
            status = cake_fail(CAKE_ERROR_COMMUNICATION, "exchange: MPI_Waitall failed (%d)", rc);
    } else {
        const double deadline = now_seconds() + timeout_seconds;
        int done = 0;
        while (!done) {
            rc = MPI_Testall((int)count, requests, &done, MPI_STATUSES_IGNORE);
            if (rc != MPI_SUCCESS) {
                status = cake_fail(CAKE_ERROR_COMMUNICATION, "exchange: MPI_Testall failed (%d)", rc);
                break;
            }
            if (!done && now_seconds() > deadline) {
                abandon(requests, count);
                status = cake_fail(CAKE_ERROR_TIMEOUT,
                                   "exchange: not complete after %g s (a peer did not make the "
                                   "same call, or is late); tag %d, %d sends, %d receives",
                                   timeout_seconds, tag, num_sends, num_receives);
                break;
            }
            if (!done) sched_yield();
        }
    }
    free(requests);
    return status;
}

static void mpi_release(void *state) { free(state); }

cake_status cake_mpi_transport_create(MPI_Comm comm, cake_transport *out) {
    cake_clear_error();
    if (!out) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "out: expected a pointer, got NULL");
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "comm: MPI is %s; initialise it before making a cake context (cake "
                         "never does)", finalized ? "finalized" : "not initialized");
    if (comm == MPI_COMM_NULL)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "comm: expected a communicator, got MPI_COMM_NULL");
    mpi_state *s = malloc(sizeof *s);
    if (!s) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "transport: out of memory");
    s->comm = comm;
    *out = (cake_transport){.exchange = mpi_exchange, .release = mpi_release, .state = s};
    return CAKE_SUCCESS;
}

cake_status cake_ctx_create_mpi(MPI_Comm comm, const cake_partition *partition,
                                const cake_ctx_options *options, cake_ctx **out) {
    cake_transport transport;
    CAKE_CHECK(cake_mpi_transport_create(comm, &transport));
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    return cake_ctx_create_owning(partition, rank, size, &transport, options, out);
}
