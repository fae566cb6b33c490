#include "check_mode.h"

#include "internal.h"

#include <stdio.h>
#include <string.h>

#define LISTED_CHANNELS 8
enum {
    F_DIRECTION, F_ENTRY, F_TENSORS, F_ROWS, F_PARTITION, F_CALL, F_HANDLE_PASSED,
    F_HANDLE_FILLED, F_ACTIVATION, F_BIAS, F_CHANNEL_HASH, F_CHANNELS,
    F_COUNT = F_CHANNELS + LISTED_CHANNELS
};

static const char *const field_names[F_CHANNELS] = {
    "direction (0 forward, 1 backward)", "entry point (0 single, 1 multi)", "tensor count",
    "rows of the partition", "partition (hash of cu_seqlens and every rank's ranges)",
    "call number (calls made on this context, refused ones included)",
    "recompute handle passed", "recompute handle filled", "params->activation",
    "bias passed (params->bias)", "channel counts (hash, beyond the first 8)"};

/* One step of a hash over 64-bit words: the splitmix64 finaliser of the running value mixed
 * with the next word, so that every bit of every word reaches every bit of the result. */
static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

uint64_t cake_partition_hash(const cake_partition *partition) {
    const int64_t num_seqs = cake_partition_num_seqs(partition);
    const int64_t *cu = cake_partition_cu_seqlens(partition);
    const int P = cake_partition_num_ranks(partition);
    uint64_t h = mix(0, (uint64_t)num_seqs);
    for (int64_t i = 0; i <= num_seqs; i++) h = mix(h, (uint64_t)cu[i]);
    h = mix(h, (uint64_t)P);
    for (int r = 0; r < P; r++) {
        int64_t count;
        const cake_range *ranges = cake_partition_ranges(partition, r, &count);
        h = mix(h, (uint64_t)count);
        for (int64_t k = 0; k < count; k++)
            h = mix(mix(h, (uint64_t)ranges[k].start), (uint64_t)ranges[k].end);
    }
    return h;
}

static void fingerprint(const cake_group *g, int64_t call_number, const cake_call_info *c,
                        int64_t *f) {
    memset(f, 0, sizeof(int64_t) * F_COUNT);
    f[F_DIRECTION] = c->backward;
    f[F_ENTRY] = c->multi;
    f[F_TENSORS] = c->num_tensors;
    f[F_ROWS] = g->total_rows;
    f[F_PARTITION] = (int64_t)g->partition_hash;
    f[F_CALL] = call_number;
    f[F_HANDLE_PASSED] = c->handle_passed;
    f[F_HANDLE_FILLED] = c->handle_filled;
    f[F_ACTIVATION] = c->activation;
    f[F_BIAS] = c->bias;
    uint64_t hash = 0;
    for (int i = 0; i < c->num_tensors; i++) {
        hash = mix(hash, (uint64_t)c->channels[i]);
        if (i < LISTED_CHANNELS) f[F_CHANNELS + i] = c->channels[i];
    }
    f[F_CHANNEL_HASH] = (int64_t)hash;
}

static void field_name(int field, char *out, size_t size) {
    if (field < F_CHANNELS) snprintf(out, size, "%s", field_names[field]);
    else snprintf(out, size, "channels[%d]", field - F_CHANNELS);
}

cake_status cake_check_round(const cake_group *g, int64_t call_number, const cake_call_info *call,
                             cake_staging *staging, cake_ctx_stats *stats) {
    const int P = g->num_ranks;
    if (P == 1) return CAKE_SUCCESS;
    const size_t fp_bytes = sizeof(int64_t) * F_COUNT;
    CAKE_CHECK(cake_staging_reserve(staging, fp_bytes * (size_t)P +
                                                 2 * sizeof(cake_transfer) * (size_t)(P - 1)));
    int64_t *all = staging->data; /* all[r * F_COUNT ..]: rank r's fingerprint */
    cake_transfer *sends = (cake_transfer *)(all + (size_t)P * F_COUNT);
    cake_transfer *receives = sends + (P - 1);
    int64_t *mine = all + (size_t)g->rank * F_COUNT;
    fingerprint(g, call_number, call, mine);
    int k = 0;
    for (int r = 0; r < P; r++) {
        if (r == g->rank) continue;
        sends[k] = (cake_transfer){r, mine, (int64_t)fp_bytes};
        receives[k++] = (cake_transfer){r, all + (size_t)r * F_COUNT, (int64_t)fp_bytes};
    }
    CAKE_CHECK(g->transport->exchange(g->transport->state, CAKE_TAG_CHECK, sends, P - 1, receives,
                                      P - 1, g->timeout_seconds));
    stats->check_rounds++;
    /* Every rank finds the same first differing field (listed channels before their hash) and
     * prints every rank's value of it, so all ranks report the same thing. */
    for (int k = 0; k < F_COUNT; k++) {
        const int f = k < F_CHANNEL_HASH ? k : k == F_COUNT - 1 ? F_CHANNEL_HASH : k + 1;
        int differs = 0;
        for (int r = 1; r < P; r++) differs |= all[(size_t)r * F_COUNT + f] != all[f];
        if (!differs) continue;
        char name[80], values[768];
        field_name(f, name, sizeof name);
        const int hex = f == F_PARTITION || f == F_CHANNEL_HASH;
        size_t used = 0;
        int r = 0;
        for (; r < P && used < sizeof values - 40; r++) {
            const int64_t v = all[(size_t)r * F_COUNT + f];
            used += (size_t)(hex ? snprintf(values + used, sizeof values - used,
                                            "%srank %d: 0x%016llx", r ? ", " : "", r,
                                            (unsigned long long)v)
                                 : snprintf(values + used, sizeof values - used, "%srank %d: %lld",
                                            r ? ", " : "", r, (long long)v));
        }
        if (r < P) snprintf(values + used, sizeof values - used, ", ...");
        return cake_fail(CAKE_ERROR_MISMATCH,
                         "check mode: the ranks disagree on %s in call %lld of this context (%s)",
                         name, (long long)call_number, values);
    }
    return CAKE_SUCCESS;
}
