/* cake over MPI: a transport and a context from a communicator the caller owns.
 * Link with libcake_mpi. cake never initialises or finalises MPI, never duplicates or frees the
 * communicator, and only uses point-to-point messages with its own tags (11, 12, 13) on it:
 * keep other traffic on this communicator off those tags while a call runs.
 * MPI errors follow the communicator's error handler (MPI_ERRORS_ARE_FATAL by default; MPICH
 * raises those of MPI_Waitall / MPI_Testall on MPI_COMM_WORLD's). Under MPI_ERRORS_RETURN a
 * failed exchange is CAKE_ERROR_COMMUNICATION with MPI_Error_string's text, the error code and
 * class, the peer and tag, and for a truncated message (a peer sent more than this rank
 * expected) the likely cause: the ranks did not make the same call, which check mode
 * (CAKE_CHECK=1) names. */
#ifndef CAKE_MPI_H
#define CAKE_MPI_H

#include "cake.h"

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A transport over `comm` (host memory). The transport's state is allocated here and freed by
 * its release callback (cake_ctx_destroy calls it). */
CAKE_API cake_status cake_mpi_transport_create(MPI_Comm comm, cake_transport *out);

/* A context for this process: rank = its rank in `comm`, whose size must equal the partition's
 * rank count. Every rank of comm calls it with the same partition. No communication. */
CAKE_API cake_status cake_ctx_create_mpi(MPI_Comm comm, const cake_partition *partition,
                                         const cake_ctx_options *options, cake_ctx **out);

#ifdef __cplusplus
}
#endif
#endif
