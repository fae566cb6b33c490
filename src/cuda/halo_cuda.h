/* Device side of the halo exchange: tables built once per context and direction, and the two
 * kernels around the transport (pack the rows peers need; assemble the pools). */
#ifndef CAKE_HALO_CUDA_H
#define CAKE_HALO_CUDA_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "halo_lists.h"
#ifdef __cplusplus
}
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cake_halo_device {
    int64_t num_send_rows, num_recv_rows, pool_rows;
    /* device arrays */
    int64_t *send_local_row; /* per send row: the local row to pack */
    int32_t *send_peer;      /* per send row: index into the send peers */
    int64_t *send_begin;     /* per send peer + 1: first send row */
    int32_t *recv_peer;      /* per received row: index into the receive peers */
    int64_t *recv_begin;     /* per receive peer + 1 */
    int64_t *slot_source;    /* per pool row: -1 zero, >= 0 local row, <= -2 received row -2-g */
} cake_halo_device;

/* Uploads the tables of one direction (synchronous; once per context). */
cake_status cake_halo_device_create(const cake_plan *plan, const cake_halo_lists *lists,
                                    cake_pool_kind kind, cake_halo_device *out);
void cake_halo_device_free(cake_halo_device *halo);

/* Packs rows[i] into `send` (bf16, the host layout of exchange.c: per peer, tensor after
 * tensor, row after row). */
cake_status cake_halo_pack(const cake_halo_device *halo, int num_tensors, const int64_t *channels,
                           const cake_bf16 *const *rows, cake_bf16 *send, cudaStream_t stream);
/* Fills every pool row: +0.0, a local row of rows[i], or a received row from `recv`. */
cake_status cake_halo_assemble(const cake_halo_device *halo, int num_tensors,
                               const int64_t *channels, const cake_bf16 *const *rows,
                               const cake_bf16 *recv, cake_bf16 *const *pools, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
