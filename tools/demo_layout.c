#include "demo_layout.h"

#include "demo_random.h"

#include <stdio.h>
#include <stdlib.h>

enum { STREAM_LENGTHS = 1, STREAM_BOUNDARIES = 2 };

int64_t demo_make_seqlens(int64_t tokens, int64_t mean_length, uint64_t seed,
                          int64_t **cu_seqlens) {
    const uint64_t key = demo_key(seed, STREAM_LENGTHS);
    const uint64_t span = (uint64_t)(2 * mean_length - 1);
    int64_t n = 0, end = 0;
    while (end < tokens) { /* first pass: count, so the array is allocated once */
        end += 1 + (int64_t)demo_below(key, (uint64_t)n, span);
        n++;
    }
    int64_t *cu = malloc(sizeof *cu * (size_t)(n + 1));
    if (!cu) return -1;
    cu[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t len = 1 + (int64_t)demo_below(key, (uint64_t)i, span);
        cu[i + 1] = cu[i] + len < tokens ? cu[i] + len : tokens;
    }
    *cu_seqlens = cu;
    return n;
}

static int compare_int64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int demo_ranges_create(demo_partition_kind kind, int64_t T, int P, uint64_t seed,
                       demo_ranges *out) {
    *out = (demo_ranges){P, T, calloc((size_t)(2 * P), sizeof(cake_range)),
                         kind == DEMO_PARTITION_ZIGZAG ? NULL
                                                       : malloc(sizeof(int64_t) * (size_t)(P + 1))};
    if (!out->ranges || (kind != DEMO_PARTITION_ZIGZAG && !out->boundaries)) {
        demo_ranges_free(out);
        return -1;
    }
    int64_t *b = out->boundaries;
    switch (kind) {
    case DEMO_PARTITION_CONTIGUOUS: /* T / P each, the first T % P ranks one more */
        b[0] = 0;
        for (int r = 0; r < P; r++) b[r + 1] = b[r] + T / P + (r < T % P);
        break;
    case DEMO_PARTITION_UNEVEN: { /* P - 1 uniform cut points, sorted: some ranks may get 0 rows */
        const uint64_t key = demo_key(seed, STREAM_BOUNDARIES);
        b[0] = 0;
        b[P] = T;
        for (int r = 1; r < P; r++) b[r] = (int64_t)demo_below(key, (uint64_t)r, (uint64_t)T + 1);
        qsort(b + 1, (size_t)(P - 1), sizeof *b, compare_int64);
        break;
    }
    case DEMO_PARTITION_ZIGZAG: { /* 2P chunks, longer first; rank r: chunks r and 2P-1-r */
        const int64_t chunks = 2 * (int64_t)P;
        for (int r = 0; r < P; r++) {
            for (int side = 0; side < 2; side++) {
                const int64_t c = side == 0 ? r : chunks - 1 - r;
                /* start of chunk c: c * (T / 2P) plus one per longer chunk before it */
                const int64_t start = c * (T / chunks) + (c < T % chunks ? c : T % chunks);
                out->ranges[2 * r + side] =
                    (cake_range){start, start + T / chunks + (c < T % chunks)};
            }
        }
        return 0;
    }
    }
    for (int r = 0; r < P; r++) {
        out->ranges[2 * r] = (cake_range){b[r], b[r + 1]};
        out->ranges[2 * r + 1] = (cake_range){b[r + 1], b[r + 1]};
    }
    return 0;
}

void demo_ranges_free(demo_ranges *r) {
    free(r->ranges);
    free(r->boundaries);
    r->ranges = NULL;
    r->boundaries = NULL;
}

int64_t demo_ranges_local_rows(const demo_ranges *r, int rank) {
    const cake_range *g = &r->ranges[2 * rank];
    return (g[0].end - g[0].start) + (g[1].end - g[1].start);
}

cake_status demo_partition_create(demo_partition_kind kind, const demo_ranges *r,
                                  const int64_t *cu_seqlens, int64_t num_seqs,
                                  cake_partition **out) {
    switch (kind) {
    case DEMO_PARTITION_CONTIGUOUS:
        return cake_partition_create_contiguous(cu_seqlens, num_seqs, r->num_ranks, out);
    case DEMO_PARTITION_UNEVEN:
        return cake_partition_create_boundaries(cu_seqlens, num_seqs, r->num_ranks,
                                                r->boundaries, out);
    case DEMO_PARTITION_ZIGZAG:
        return cake_partition_create_zigzag(cu_seqlens, num_seqs, r->num_ranks, out);
    }
    return CAKE_ERROR_INVALID_ARGUMENT;
}

/* The sequence holding global row g: the last i with cu[i] <= g (skips empty sequences). */
static int64_t sequence_of(const int64_t *cu, int64_t num_seqs, int64_t g) {
    int64_t lo = 0, hi = num_seqs - 1;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (cu[mid] <= g) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

int64_t demo_fragments(const demo_ranges *r, int rank, const int64_t *cu, int64_t num_seqs,
                       demo_fragment **out) {
    /* A fragment ends at a range's end or a sequence's end; ranges are cut there, in order. */
    int64_t count = 0, capacity = 0, local = 0;
    demo_fragment *list = NULL;
    for (int side = 0; side < 2; side++) {
        const cake_range g = r->ranges[2 * rank + side];
        for (int64_t start = g.start; start < g.end;) {
            const int64_t s = sequence_of(cu, num_seqs, start);
            const int64_t end = cu[s + 1] < g.end ? cu[s + 1] : g.end;
            /* A range that continues the previous one in global order and sequence extends it. */
            if (count > 0 && list[count - 1].global_start + list[count - 1].length == start &&
                list[count - 1].seq_start == cu[s]) {
                list[count - 1].length += end - start;
            } else {
                if (count == capacity) {
                    capacity = capacity ? 2 * capacity : 16;
                    demo_fragment *grown = realloc(list, sizeof *list * (size_t)capacity);
                    if (!grown) {
                        free(list);
                        return -1;
                    }
                    list = grown;
                }
                list[count++] = (demo_fragment){local, end - start, start, cu[s], cu[s + 1]};
            }
            local += end - start;
            start = end;
        }
    }
    *out = list;
    return count;
}

const char *demo_compare_fragments(const cake_plan *plan, const demo_fragment *fragments,
                                   int64_t count) {
    static char line[256];
    if (cake_plan_num_fragments(plan) != count) {
        snprintf(line, sizeof line, "the plan has %lld fragments, SPEC 2 gives %lld",
                 (long long)cake_plan_num_fragments(plan), (long long)count);
        return line;
    }
    for (int64_t f = 0; f < count; f++) {
        cake_fragment p = {0};
        const demo_fragment *d = &fragments[f];
        if (cake_plan_fragment(plan, f, &p) != CAKE_SUCCESS || p.local_start != d->local_start ||
            p.length != d->length || p.global_start != d->global_start ||
            p.seq_start != d->seq_start || p.seq_end != d->seq_end) {
            snprintf(line, sizeof line,
                     "fragment %lld: the plan has local %lld, length %lld, global %lld, sequence "
                     "[%lld, %lld); SPEC 2 gives %lld, %lld, %lld, [%lld, %lld)",
                     (long long)f, (long long)p.local_start, (long long)p.length,
                     (long long)p.global_start, (long long)p.seq_start, (long long)p.seq_end,
                     (long long)d->local_start, (long long)d->length, (long long)d->global_start,
                     (long long)d->seq_start, (long long)d->seq_end);
            return line;
        }
    }
    return NULL;
}
