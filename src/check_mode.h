/* Check mode: before an exchange every rank sends a fingerprint of the call to every other, and
 * all ranks fail together, with the same message, when any two disagree. */
#ifndef CAKE_CHECK_MODE_H
#define CAKE_CHECK_MODE_H

#include "cake.h"
#include "exchange.h"

typedef struct cake_call_info {
    int backward;        /* 0 forward, 1 backward */
    int multi;           /* entry point: 0 single, 1 multi */
    int num_tensors;
    const int64_t *channels;
    int handle_passed, handle_filled;
    int activation;      /* params->activation (0 without params) */
    int bias;            /* 1 when params->bias is set */
} cake_call_info;

typedef struct cake_group {
    const cake_transport *transport;
    int rank, num_ranks;
    int64_t total_rows;      /* T of the partition */
    uint64_t partition_hash; /* cake_partition_hash of the partition */
    double timeout_seconds;
} cake_group;

/* A 64-bit hash of everything that defines a partition: cu_seqlens and every rank's ranges, in
 * order. Equal partitions (however made) hash alike; computed once per context. */
uint64_t cake_partition_hash(const cake_partition *partition);

/* One round: this rank's fingerprint of the call (entry point, direction, tensor and channel
 * counts, params, partition, call number, recompute handle) to every peer; CAKE_ERROR_MISMATCH
 * naming the first field that differs and every rank's value of it. */
cake_status cake_check_round(const cake_group *group, int64_t call_number,
                             const cake_call_info *call, cake_staging *staging,
                             cake_ctx_stats *stats);

#endif
