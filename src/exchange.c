#include "exchange.h"

#include "internal.h"

#include <stdlib.h>
#include <string.h>

cake_status cake_staging_reserve(cake_staging *staging, size_t bytes) {
    if (bytes <= staging->bytes) return CAKE_SUCCESS;
    void *grown = realloc(staging->data, bytes);
    if (!grown)
        return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory for %zu bytes of halo messages",
                         bytes);
    staging->data = grown;
    staging->bytes = bytes;
    return CAKE_SUCCESS;
}

int64_t cake_total_channels(int num_tensors, const int64_t *channels) {
    int64_t total = 0;
    for (int i = 0; i < num_tensors; i++) total += channels[i];
    return total;
}

cake_status cake_exchange_host(const cake_halo_lists *lists, const cake_transport *transport,
                               int tag, double timeout_seconds, int num_tensors,
                               const int64_t *channels, const cake_bf16 *const *rows,
                               cake_bf16 *const *pools, cake_staging *staging,
                               cake_ctx_stats *stats) {
    if (lists->num_sends == 0 && lists->num_receives == 0) return CAKE_SUCCESS;
    const int64_t row_elems = cake_total_channels(num_tensors, channels);
    const int64_t send_elems = lists->rows_sent * row_elems;
    const int64_t recv_elems = lists->rows_received * row_elems;
    const size_t transfers = (size_t)(lists->num_sends + lists->num_receives);
    CAKE_CHECK(cake_staging_reserve(staging, sizeof(cake_bf16) * (size_t)(send_elems + recv_elems) +
                                                 sizeof(cake_transfer) * transfers));
    /* Layout: transfer descriptors, then send messages, then receive messages. */
    cake_transfer *sends = staging->data;
    cake_transfer *receives = sends + lists->num_sends;
    cake_bf16 *cursor = (cake_bf16 *)(receives + lists->num_receives);
    for (int s = 0; s < lists->num_sends; s++) {
        const cake_peer_rows *peer = &lists->sends[s];
        sends[s] = (cake_transfer){peer->peer, cursor,
                                   (int64_t)sizeof(cake_bf16) * peer->count * row_elems};
        for (int i = 0; i < num_tensors; i++)
            for (int64_t r = 0; r < peer->count; r++, cursor += channels[i])
                memcpy(cursor, rows[i] + peer->rows[r] * channels[i],
                       sizeof(cake_bf16) * (size_t)channels[i]);
    }
    for (int s = 0; s < lists->num_receives; s++) {
        const cake_peer_rows *peer = &lists->receives[s];
        receives[s] = (cake_transfer){peer->peer, cursor,
                                      (int64_t)sizeof(cake_bf16) * peer->count * row_elems};
        cursor += peer->count * row_elems;
    }
    CAKE_CHECK(transport->exchange(transport->state, tag, sends, lists->num_sends, receives,
                                   lists->num_receives, timeout_seconds));
    for (int s = 0; s < lists->num_receives; s++) {
        const cake_peer_rows *peer = &lists->receives[s];
        const cake_bf16 *src = receives[s].data;
        for (int i = 0; i < num_tensors; i++)
            for (int64_t r = 0; r < peer->count; r++, src += channels[i])
                memcpy(pools[i] + peer->rows[r] * channels[i], src,
                       sizeof(cake_bf16) * (size_t)channels[i]);
    }
    cake_exchange_count(lists, num_tensors, row_elems, stats);
    return CAKE_SUCCESS;
}

void cake_exchange_count(const cake_halo_lists *lists, int num_tensors, int64_t row_elems,
                         cake_ctx_stats *stats) {
    stats->exchanges++;
    stats->messages_sent += lists->num_sends;
    stats->messages_received += lists->num_receives;
    stats->rows_sent += lists->rows_sent * num_tensors;
    stats->rows_received += lists->rows_received * num_tensors;
    stats->bytes_sent += (int64_t)sizeof(cake_bf16) * lists->rows_sent * row_elems;
    stats->bytes_received += (int64_t)sizeof(cake_bf16) * lists->rows_received * row_elems;
}
