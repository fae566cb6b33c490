/* cake over NCCL: a transport and a context from a communicator the caller owns (one GPU per
 * rank). Link with libcake_nccl. cake never initialises, aborts or destroys the communicator.
 *
 * The exchange of a call is one ncclGroupStart/ncclGroupEnd of ncclSend and ncclRecv, enqueued
 * on the call's stream. With a timeout set, the call waits for the group on the host and, past
 * the limit, returns CAKE_ERROR_TIMEOUT; the caller should then ncclCommAbort the communicator
 * (NCCL has no way to take back enqueued work). Check mode's fingerprints travel through a
 * stream the transport makes for itself. */
#ifndef CAKE_NCCL_H
#define CAKE_NCCL_H

#include "cake.h"

#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The transport's state (the communicator and a stream of its own) is freed by its release
 * callback, which cake_ctx_destroy calls. Check mode's host-memory fingerprints go through a
 * device buffer allocated for each round and freed after it (kept only after a timeout, when
 * NCCL may still write it). Uses the current CUDA device. */
CAKE_API cake_status cake_nccl_transport_create(ncclComm_t comm, cake_transport *out);

/* A context for this rank: rank and size from the communicator (size must equal the
 * partition's ranks). No communication. */
CAKE_API cake_status cake_ctx_create_nccl(ncclComm_t comm, const cake_partition *partition,
                                          const cake_ctx_options *options, cake_ctx **out);

#ifdef __cplusplus
}
#endif
#endif
