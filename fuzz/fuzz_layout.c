#include "fuzz_layout.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"

int fz_cu_valid(const int64_t *cu, int64_t num_seqs) {
    if (num_seqs < 0 || !cu || cu[0] != 0) return 0;
    for (int64_t i = 0; i < num_seqs; i++)
        if (cu[i + 1] < cu[i]) return 0;
    return 1;
}

void fz_layout_free(fz_layout *l) {
    free(l->first);
    free(l->ranges);
    free(l->local_rows);
    free(l->range_local);
    free(l->range_rank);
    free(l->sorted);
    memset(l, 0, sizeof *l);
}

static const fz_layout *sort_layout; /* qsort has no context argument; the harness is serial */

static int by_start(const void *a, const void *b) {
    const cake_range *x = &sort_layout->ranges[*(const int64_t *)a];
    const cake_range *y = &sort_layout->ranges[*(const int64_t *)b];
    return x->start < y->start ? -1 : x->start > y->start;
}

int fz_layout_ranges(fz_layout *l, const int64_t *cu, int64_t num_seqs, int P,
                     const int64_t *counts, const cake_range *ranges) {
    memset(l, 0, sizeof *l);
    l->P = P;
    l->cu = cu;
    l->num_seqs = num_seqs;
    l->T = cu[num_seqs];
    l->first = fz_malloc(sizeof(int64_t) * ((size_t)P + 1));
    l->first[0] = 0;
    for (int r = 0; r < P; r++) l->first[r + 1] = l->first[r] + counts[r];
    const int64_t total = l->first[P];
    l->ranges = fz_malloc(sizeof(cake_range) * (size_t)total);
    if (total) memcpy(l->ranges, ranges, sizeof(cake_range) * (size_t)total);
    l->local_rows = fz_malloc(sizeof(int64_t) * (size_t)P);
    l->range_local = fz_malloc(sizeof(int64_t) * (size_t)total);
    l->range_rank = fz_malloc(sizeof(int32_t) * (size_t)total);
    l->sorted = fz_malloc(sizeof(int64_t) * (size_t)total);
    for (int64_t i = 0; i < total; i++) {
        const cake_range g = l->ranges[i];
        if (g.start < 0 || g.start > g.end || g.end > l->T) {
            fz_layout_free(l);
            return 0;
        }
        if (g.end > g.start) l->sorted[l->num_sorted++] = i;
    }
    sort_layout = l;
    qsort(l->sorted, (size_t)l->num_sorted, sizeof(int64_t), by_start);
    int64_t covered = 0; /* exactly once: each non-empty range starts where the last ended */
    for (int64_t k = 0; k < l->num_sorted; k++) {
        const cake_range g = l->ranges[l->sorted[k]];
        if (g.start != covered) {
            fz_layout_free(l);
            return 0;
        }
        covered = g.end;
    }
    if (covered != l->T) {
        fz_layout_free(l);
        return 0;
    }
    for (int r = 0; r < P; r++) { /* sums of disjoint ranges of [0, T): no overflow */
        int64_t local = 0;
        for (int64_t i = l->first[r]; i < l->first[r + 1]; i++) {
            l->range_local[i] = local;
            l->range_rank[i] = r;
            local += l->ranges[i].end - l->ranges[i].start;
        }
        l->local_rows[r] = local;
    }
    return 1;
}

/* Chunk `i` of `rows` rows cut into `chunks` equal pieces, the longer ones first: the first
 * rows % chunks chunks have one more row. Written as lengths summed, not as a closed form. */
static void split(int64_t rows, int64_t chunks, cake_range *out) {
    const int64_t base = rows / chunks, longer = rows % chunks;
    int64_t start = 0;
    for (int64_t i = 0; i < chunks; i++) {
        const int64_t length = base + (i < longer);
        out[i] = (cake_range){start, start + length};
        start += length;
    }
}

static void layout_from(fz_layout *l, const int64_t *cu, int64_t num_seqs, int P,
                        int64_t per_rank, const cake_range *ranges) {
    int64_t *counts = fz_malloc(sizeof(int64_t) * (size_t)P);
    for (int r = 0; r < P; r++) counts[r] = per_rank;
    const int ok = fz_layout_ranges(l, cu, num_seqs, P, counts, ranges);
    FZ_CHECK(ok, "harness: its own contiguous/zigzag layout does not cover [0, T)");
    free(counts);
}

void fz_layout_contiguous(fz_layout *l, const int64_t *cu, int64_t num_seqs, int P) {
    cake_range *ranges = fz_malloc(sizeof(cake_range) * (size_t)P);
    split(cu[num_seqs], P, ranges);
    layout_from(l, cu, num_seqs, P, 1, ranges);
    free(ranges);
}

void fz_layout_zigzag(fz_layout *l, const int64_t *cu, int64_t num_seqs, int P) {
    const int64_t chunks = 2 * (int64_t)P;
    cake_range *c = fz_malloc(sizeof(cake_range) * (size_t)chunks);
    cake_range *ranges = fz_malloc(sizeof(cake_range) * (size_t)chunks);
    split(cu[num_seqs], chunks, c);
    for (int r = 0; r < P; r++) { /* rank r: chunks r and 2P-1-r, in that order */
        ranges[2 * r] = c[r];
        ranges[2 * r + 1] = c[chunks - 1 - r];
    }
    layout_from(l, cu, num_seqs, P, 2, ranges);
    free(c);
    free(ranges);
}

int64_t fz_seq_of(const fz_layout *l, int64_t g) {
    int64_t lo = 0, hi = l->num_seqs - 1; /* the last i with cu[i] <= g */
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (l->cu[mid] <= g) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

void fz_owner(const fz_layout *l, int64_t g, int32_t *rank, int64_t *local) {
    int64_t lo = 0, hi = l->num_sorted - 1;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (l->ranges[l->sorted[mid]].start <= g) lo = mid;
        else hi = mid - 1;
    }
    const int64_t i = l->sorted[lo];
    FZ_CHECK(l->ranges[i].start <= g && g < l->ranges[i].end, "harness: no owner for row %" PRId64, g);
    *rank = l->range_rank[i];
    *local = l->range_local[i] + (g - l->ranges[i].start);
}

static cake_halo_row halo(const fz_layout *l, int rank, int64_t g, int inside) {
    cake_halo_row row = {-1, -1, -1, 0};
    if (!inside) return row;
    row.global_row = g;
    fz_owner(l, g, &row.rank, &row.local_row);
    row.is_local = row.rank == rank;
    return row;
}

cake_fragment *fz_fragments(const fz_layout *l, int rank, int64_t *count) {
    int64_t pieces = 0; /* one per (range, sequence) piece at most */
    for (int64_t i = l->first[rank]; i < l->first[rank + 1]; i++)
        if (l->ranges[i].end > l->ranges[i].start)
            pieces += fz_seq_of(l, l->ranges[i].end - 1) - fz_seq_of(l, l->ranges[i].start) + 1;
    cake_fragment *out = fz_malloc(sizeof *out * (size_t)pieces);
    int64_t n = 0, local = 0;
    for (int64_t i = l->first[rank]; i < l->first[rank + 1]; i++)
        for (int64_t g = l->ranges[i].start; g < l->ranges[i].end;) {
            const int64_t s = fz_seq_of(l, g);
            const int64_t end = l->cu[s + 1] < l->ranges[i].end ? l->cu[s + 1] : l->ranges[i].end;
            cake_fragment *prev = n ? &out[n - 1] : NULL;
            if (prev && prev->seq_index == s && prev->global_start + prev->length == g)
                prev->length += end - g;
            else
                out[n++] = (cake_fragment){.local_start = local, .length = end - g,
                                           .global_start = g, .seq_index = s,
                                           .seq_start = l->cu[s], .seq_end = l->cu[s + 1]};
            local += end - g;
            g = end;
        }
    for (int64_t f = 0; f < n; f++) {
        cake_fragment *fr = &out[f];
        const int64_t e = fr->global_start + fr->length; /* <= T: no overflow */
        for (int j = 0; j < CAKE_HALO_ROWS; j++) {
            const int64_t h = fr->global_start - CAKE_HALO_ROWS + j;
            fr->history[j] = halo(l, rank, h, h >= fr->seq_start);
            /* e + j < seq_end, written so that e + j is never formed when it would overflow */
            const int future_inside = j < fr->seq_end - e;
            fr->future[j] = halo(l, rank, future_inside ? e + j : -1, future_inside);
        }
    }
    *count = n;
    return out;
}

static int same_halo(cake_halo_row a, cake_halo_row b) {
    return a.global_row == b.global_row && a.local_row == b.local_row && a.rank == b.rank &&
           a.is_local == b.is_local;
}

void fz_check_plan(const fz_layout *l, const cake_plan *plan, int rank) {
    FZ_CHECK(cake_plan_rank(plan) == rank, "plan rank %d, want %d", cake_plan_rank(plan), rank);
    FZ_CHECK(cake_plan_local_rows(plan) == l->local_rows[rank],
             "rank %d: plan has %" PRId64 " local rows, want %" PRId64, rank,
             cake_plan_local_rows(plan), l->local_rows[rank]);
    int64_t n;
    cake_fragment *want = fz_fragments(l, rank, &n);
    FZ_CHECK(cake_plan_num_fragments(plan) == n, "rank %d: %" PRId64 " fragments, want %" PRId64,
             rank, cake_plan_num_fragments(plan), n);
    FZ_CHECK(cake_plan_pool_rows(plan) == CAKE_HALO_ROWS * n,
             "rank %d: pool rows %" PRId64 ", want %" PRId64, rank, cake_plan_pool_rows(plan),
             CAKE_HALO_ROWS * n);
    for (int64_t f = 0; f < n; f++) {
        cake_fragment got;
        FZ_CHECK(cake_plan_fragment(plan, f, &got) == CAKE_SUCCESS, "cake_plan_fragment(%" PRId64
                 ") failed: %s", f, cake_last_error());
        const cake_fragment *w = &want[f];
        FZ_CHECK(got.local_start == w->local_start && got.length == w->length &&
                     got.global_start == w->global_start && got.seq_index == w->seq_index &&
                     got.seq_start == w->seq_start && got.seq_end == w->seq_end,
                 "rank %d fragment %" PRId64 ": got {local %" PRId64 ", len %" PRId64
                 ", global %" PRId64 ", seq %" PRId64 "}, want {%" PRId64 ", %" PRId64 ", %" PRId64
                 ", %" PRId64 "}", rank, f, got.local_start, got.length, got.global_start,
                 got.seq_index, w->local_start, w->length, w->global_start, w->seq_index);
        for (int j = 0; j < CAKE_HALO_ROWS; j++) {
            FZ_CHECK(same_halo(got.history[j], w->history[j]),
                     "rank %d fragment %" PRId64 " history[%d]: got {%" PRId64 ", %" PRId64
                     ", %d, %d}, want {%" PRId64 ", %" PRId64 ", %d, %d}", rank, f, j,
                     got.history[j].global_row, got.history[j].local_row, got.history[j].rank,
                     got.history[j].is_local, w->history[j].global_row, w->history[j].local_row,
                     w->history[j].rank, w->history[j].is_local);
            FZ_CHECK(same_halo(got.future[j], w->future[j]),
                     "rank %d fragment %" PRId64 " future[%d]: got {%" PRId64 ", %" PRId64
                     ", %d, %d}, want {%" PRId64 ", %" PRId64 ", %d, %d}", rank, f, j,
                     got.future[j].global_row, got.future[j].local_row, got.future[j].rank,
                     got.future[j].is_local, w->future[j].global_row, w->future[j].local_row,
                     w->future[j].rank, w->future[j].is_local);
        }
    }
    free(want);
}

int64_t *fz_l2g(const fz_layout *l, int rank) {
    int64_t *out = fz_malloc(sizeof(int64_t) * (size_t)l->local_rows[rank]), t = 0;
    for (int64_t i = l->first[rank]; i < l->first[rank + 1]; i++)
        for (int64_t g = l->ranges[i].start; g < l->ranges[i].end; g++) out[t++] = g;
    return out;
}

void fz_pools(const cake_fragment *frags, int64_t count, int64_t C, const cake_bf16 *x,
              const cake_bf16 *dy, cake_bf16 *history, cake_bf16 *future) {
    for (int64_t f = 0; f < count; f++)
        for (int j = 0; j < CAKE_HALO_ROWS; j++) {
            const int64_t slot = (f * CAKE_HALO_ROWS + j) * C;
            const cake_halo_row h = frags[f].history[j], u = frags[f].future[j];
            for (int64_t c = 0; c < C; c++) {
                if (history) history[slot + c] = h.global_row < 0 ? 0 : x[h.global_row * C + c];
                if (future) future[slot + c] = u.global_row < 0 ? 0 : dy[u.global_row * C + c];
            }
        }
}
