/* The "conv" entry of a recompute handle: what a forward stored, so a recompute can check that
 * it is the same kind of call and read the history pools back without an exchange. */
#ifndef CAKE_RECOMPUTE_HANDLE_H
#define CAKE_RECOMPUTE_HANDLE_H

#include "cake.h"

#define CAKE_CONV_KEY "conv"

typedef struct cake_conv_entry {
    int multi;            /* filled by the multi entry point (1) or the single one (0) */
    int num_tensors;
    int64_t *channels;    /* num_tensors */
    int64_t pool_rows;
    uint64_t partition_hash; /* of the context that filled it, and its rank: another context */
    int rank;                /* is refused */
    int device;           /* -1: pools in host memory; else the CUDA device holding them */
    void *pools;          /* the history pools, tensor after tensor */
    void *stream;         /* device pools: the stream that used them last, which frees them */
    void (*free_pools)(void *pools, void *stream); /* a host free or a stream-ordered free */
} cake_conv_entry;

/* The filled "conv" entry, or NULL. */
cake_conv_entry *cake_handle_conv(cake_recompute_handle *handle);
/* Takes ownership of entry->channels and entry->pools (freed with entry->free_pools). */
cake_status cake_handle_store_conv(cake_recompute_handle *handle, const cake_conv_entry *entry);

#endif
