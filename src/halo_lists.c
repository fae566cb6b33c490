#include "halo_lists.h"

#include "internal.h"

#include <stdlib.h>

static const cake_halo_row *halo_of(const cake_fragment *f, cake_pool_kind kind) {
    return kind == CAKE_POOL_HISTORY ? f->history : f->future;
}

void cake_halo_lists_free(cake_halo_lists *lists) {
    for (int i = 0; i < lists->num_sends; i++) free(lists->sends[i].rows);
    for (int i = 0; i < lists->num_receives; i++) free(lists->receives[i].rows);
    free(lists->sends);
    free(lists->receives);
    *lists = (cake_halo_lists){0};
}

/* Appends the rows of `plan` (a peer's, or this rank's) that match: for a peer's plan, the
 * halo rows this rank owns (its local rows, to send); for this rank's plan, the pool slots
 * owned by `peer` (to receive). Both sides walk fragments and slots in the same order. */
static int64_t collect(const cake_plan *plan, cake_pool_kind kind, int owner, int sending,
                       int64_t *out) {
    const cake_fragment *fragments = cake_plan_fragments(plan);
    int64_t count = 0;
    for (int64_t f = 0; f < cake_plan_num_fragments(plan); f++) {
        const cake_halo_row *halo = halo_of(&fragments[f], kind);
        for (int j = 0; j < CAKE_HALO_ROWS; j++) {
            if (halo[j].global_row < 0 || halo[j].rank != owner) continue;
            if (out) out[count] = sending ? halo[j].local_row : f * CAKE_HALO_ROWS + j;
            count++;
        }
    }
    return count;
}

static cake_status add_peer(cake_peer_rows *list, int *num, const cake_plan *plan,
                            cake_pool_kind kind, int owner, int sending, int peer) {
    const int64_t count = collect(plan, kind, owner, sending, NULL);
    if (count == 0) return CAKE_SUCCESS;
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)count);
    if (!rows) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory for the halo lists");
    collect(plan, kind, owner, sending, rows);
    list[(*num)++] = (cake_peer_rows){peer, count, rows};
    return CAKE_SUCCESS;
}

cake_status cake_halo_lists_build(const cake_plan *const *plans, int num_ranks, int rank,
                                  cake_pool_kind kind, cake_halo_lists *out) {
    *out = (cake_halo_lists){0};
    out->sends = calloc((size_t)num_ranks, sizeof(cake_peer_rows));
    out->receives = calloc((size_t)num_ranks, sizeof(cake_peer_rows));
    cake_status status = CAKE_SUCCESS;
    if (!out->sends || !out->receives)
        status = cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "out of memory for the halo lists");
    for (int peer = 0; peer < num_ranks && status == CAKE_SUCCESS; peer++) {
        if (peer == rank) continue;
        /* What `peer` needs from this rank, and what this rank needs from `peer`. */
        status = add_peer(out->sends, &out->num_sends, plans[peer], kind, rank, 1, peer);
        if (status == CAKE_SUCCESS)
            status = add_peer(out->receives, &out->num_receives, plans[rank], kind, peer, 0, peer);
    }
    if (status != CAKE_SUCCESS) {
        cake_halo_lists_free(out);
        return status;
    }
    for (int i = 0; i < out->num_sends; i++) out->rows_sent += out->sends[i].count;
    for (int i = 0; i < out->num_receives; i++) out->rows_received += out->receives[i].count;
    return CAKE_SUCCESS;
}
