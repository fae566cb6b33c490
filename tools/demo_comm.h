/* The demo's own MPI traffic: sending whole row arrays (any size) and waiting without spinning. */
#ifndef CAKE_DEMO_COMM_H
#define CAKE_DEMO_COMM_H

#include <mpi.h>
#include <stdint.h>

/* Ranks of `comm` on this node. */
int demo_node_ranks(MPI_Comm comm);
/* Blocking send / receive of `bytes` bytes in pieces of at most 1 GiB (MPI counts are int). */
void demo_send_bytes(const void *data, int64_t bytes, int peer, int tag, MPI_Comm comm);
void demo_recv_bytes(void *data, int64_t bytes, int peer, int tag, MPI_Comm comm);
/* A barrier that sleeps while it waits: ranks idle while rank 0 recomputes the batch must not
 * take the cores it computes on (MPI's own waits spin). */
void demo_quiet_barrier(MPI_Comm comm);

#endif
