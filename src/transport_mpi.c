/* The MPI transport: every receive and send of an exchange posted non-blocking, then one wait
 * (or a polling wait with a deadline when a timeout is set). Messages over 1 GiB are cut into
 * pieces because MPI counts are int; pieces of one transfer match in order (MPI does not let
 * messages with the same source, tag and communicator overtake each other). */
#include "cake_mpi.h"

#include "internal.h"

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PIECE_BYTES ((int64_t)1 << 30)
#define MAX_MPI_TEXT 400 /* characters of MPI_Error_string's text kept in a message */

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

/* The error of a failed MPI call: the one in a status when the call says MPI_ERR_IN_STATUS. */
static int actual_error(int rc, const MPI_Status *statuses, int64_t count, int64_t *index) {
    *index = -1;
    if (rc != MPI_ERR_IN_STATUS || !statuses) return rc;
    for (int64_t i = 0; i < count; i++)
        if (statuses[i].MPI_ERROR != MPI_SUCCESS && statuses[i].MPI_ERROR != MPI_ERR_PENDING) {
            *index = i;
            return statuses[i].MPI_ERROR;
        }
    return rc;
}

/* The peer of request `piece` among the pieces of `count` transfers, or -1. */
static int peer_of(const cake_transfer *t, int count, int64_t piece) {
    for (int i = 0; i < count; i++) {
        const int64_t n = t[i].bytes > 0 ? (t[i].bytes + PIECE_BYTES - 1) / PIECE_BYTES : 1;
        if (piece < n) return t[i].peer;
        piece -= n;
    }
    return -1;
}

/* One exchange's messages, for the message of a failure. */
typedef struct exchange_desc {
    int tag;
    const cake_transfer *sends, *receives;
    int num_sends, num_receives;
    int64_t num_recv_pieces; /* requests [0, num_recv_pieces) are receives, the rest sends */
} exchange_desc;

/* "exchange: <what> failed in a receive from rank R, tag T: <MPI's text> (MPI error code N,
 * class M)", and for a truncated message (a peer sent more than this rank expected) its likely
 * cause. */
static cake_status mpi_failure(const char *what, int rc, const MPI_Status *statuses,
                               int64_t count, const exchange_desc *d) {
    int64_t index;
    const int error = actual_error(rc, statuses, count, &index);
    char text[MPI_MAX_ERROR_STRING + 1] = "";
    int length = 0, error_class = error;
    if (MPI_Error_string(error, text, &length) != MPI_SUCCESS) length = 0;
    text[length > 0 && length <= MPI_MAX_ERROR_STRING ? length : 0] = '\0';
    /* One line (MPICH's text is an error stack over several), short enough to leave room for
     * the rest of the message. */
    for (char *c = text; *c; c++)
        if (*c == '\n' || *c == '\t') *c = ' ';
    const size_t keep = sizeof text - 1 < MAX_MPI_TEXT ? sizeof text - 1 : MAX_MPI_TEXT;
    if (strlen(text) > keep) memcpy(text + keep - 3, "...", 4);
    if (!text[0]) snprintf(text, sizeof text, "(no text from MPI_Error_string)");
    MPI_Error_class(error, &error_class);
    char where[96] = "";
    if (index >= 0) {
        const int receive = index < d->num_recv_pieces;
        snprintf(where, sizeof where, " in a %s rank %d (tag %d)",
                 receive ? "receive from" : "send to",
                 receive ? peer_of(d->receives, d->num_receives, index)
                         : peer_of(d->sends, d->num_sends, index - d->num_recv_pieces),
                 d->tag);
    }
    return cake_fail(CAKE_ERROR_COMMUNICATION, "exchange: %s failed%s: %s (MPI error code %d, "
                     "class %d)%s", what, where, text, error, error_class,
                     error_class == MPI_ERR_TRUNCATE
                         ? "; a peer sent more bytes than this rank expected, so the ranks most "
                           "likely did not make the same call (entry point, tensor or channel "
                           "counts, partition, or a call one rank skipped): check mode "
                           "(CAKE_CHECK=1 or cake_ctx_options.check) finds which"
                         : "");
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
    const size_t slots = (size_t)(count > 0 ? count : 1);
    MPI_Request *requests = malloc(sizeof(MPI_Request) * slots);
    MPI_Status *statuses = malloc(sizeof(MPI_Status) * slots);
    if (!requests || !statuses) {
        free(requests);
        free(statuses);
        return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "exchange: out of memory");
    }
    for (int64_t i = 0; i < count; i++) requests[i] = MPI_REQUEST_NULL;
    /* Receives first, so every send finds its receive already posted. */
    int rc = post(receives, num_receives, tag, s->comm, 1, requests);
    if (rc == MPI_SUCCESS) rc = post(sends, num_sends, tag, s->comm, 0, requests + num_recv_pieces);
    const exchange_desc desc = {tag, sends, receives, num_sends, num_receives, num_recv_pieces};
    cake_status status = CAKE_SUCCESS;
    if (rc != MPI_SUCCESS) {
        abandon(requests, count);
        status = mpi_failure("posting an MPI message", rc, NULL, count, &desc);
    } else if (timeout_seconds <= 0.0) {
        rc = MPI_Waitall((int)count, requests, statuses);
        if (rc != MPI_SUCCESS) {
            status = mpi_failure("MPI_Waitall", rc, statuses, count, &desc);
            abandon(requests, count);
        }
    } else {
        const double deadline = now_seconds() + timeout_seconds;
        int done = 0;
        while (!done) {
            rc = MPI_Testall((int)count, requests, &done, statuses);
            if (rc != MPI_SUCCESS) {
                status = mpi_failure("MPI_Testall", rc, statuses, count, &desc);
                abandon(requests, count);
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
    free(statuses);
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
