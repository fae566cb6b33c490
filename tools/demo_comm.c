#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* nanosleep, sysconf under -std=c11 */
#endif
#include "demo_comm.h"

#include <time.h>

#define PIECE ((int64_t)1 << 30)

int demo_node_ranks(MPI_Comm comm) {
    MPI_Comm node;
    int size = 1;
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_size(node, &size);
        MPI_Comm_free(&node);
    }
    return size;
}

void demo_send_bytes(const void *data, int64_t bytes, int peer, int tag, MPI_Comm comm) {
    const char *p = data;
    for (int64_t done = 0; done < bytes; done += PIECE) {
        const int64_t left = bytes - done;
        MPI_Send(p + done, (int)(left < PIECE ? left : PIECE), MPI_BYTE, peer, tag, comm);
    }
}

void demo_recv_bytes(void *data, int64_t bytes, int peer, int tag, MPI_Comm comm) {
    char *p = data;
    for (int64_t done = 0; done < bytes; done += PIECE) {
        const int64_t left = bytes - done;
        MPI_Recv(p + done, (int)(left < PIECE ? left : PIECE), MPI_BYTE, peer, tag, comm,
                 MPI_STATUS_IGNORE);
    }
}

void demo_quiet_barrier(MPI_Comm comm) {
    MPI_Request request;
    MPI_Ibarrier(comm, &request);
    int done = 0;
    const struct timespec nap = {0, 2000000}; /* 2 ms: invisible next to the work waited for */
    for (;;) {
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        if (done) return;
        nanosleep(&nap, NULL);
    }
}
