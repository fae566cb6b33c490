/* Partitions: validated copies of cu_seqlens and every rank's ordered ranges, plus an owner
 * index (the non-empty ranges sorted by start) so any rank can find who holds a global row. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

struct cake_partition {
    int num_ranks;
    int64_t num_seqs;
    int64_t total_rows;
    int64_t *cu_seqlens;    /* num_seqs + 1 */
    int64_t *range_offset;  /* num_ranks + 1: rank r's ranges are ranges[range_offset[r] ..) */
    cake_range *ranges;
    int64_t *local_rows;    /* per rank */
    /* Owner index over the non-empty ranges, sorted by start. */
    int64_t num_sorted;
    int64_t *sorted_start;
    int64_t *sorted_local_start; /* local row of sorted_start on its owner */
    int32_t *sorted_rank;
};

void cake_partition_destroy(cake_partition *p) {
    if (!p) return;
    free(p->cu_seqlens);
    free(p->range_offset);
    free(p->ranges);
    free(p->local_rows);
    free(p->sorted_start);
    free(p->sorted_local_start);
    free(p->sorted_rank);
    free(p);
}

static cake_status check_cu_seqlens(const int64_t *cu_seqlens, int64_t num_seqs) {
    if (num_seqs < 0)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "num_seqs: expected >= 0, got %lld", (long long)num_seqs);
    if (!cu_seqlens)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "cu_seqlens: expected a pointer, got NULL");
    if (cu_seqlens[0] != 0)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "cu_seqlens[0]: expected 0, got %lld",
                         (long long)cu_seqlens[0]);
    for (int64_t i = 1; i <= num_seqs; i++)
        if (cu_seqlens[i] < cu_seqlens[i - 1])
            return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                             "cu_seqlens[%lld]: expected >= cu_seqlens[%lld] = %lld "
                             "(non-decreasing), got %lld",
                             (long long)i, (long long)(i - 1), (long long)cu_seqlens[i - 1],
                             (long long)cu_seqlens[i]);
    return CAKE_SUCCESS;
}

static cake_status check_num_ranks(int num_ranks) {
    if (num_ranks < 1)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "num_ranks: expected >= 1, got %d",
                         num_ranks);
    return CAKE_SUCCESS;
}

typedef struct sort_entry {
    int64_t start, end, index;
} sort_entry;

static int compare_start(const void *a, const void *b) {
    const sort_entry *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

/* Validates the ranges against T and builds the owner index. */
static cake_status build_owner_index(cake_partition *p) {
    int64_t total = p->range_offset[p->num_ranks];
    for (int64_t i = 0; i < total; i++) {
        const cake_range r = p->ranges[i];
        if (r.start < 0 || r.end > p->total_rows || r.start > r.end)
            return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                             "ranges[%lld]: expected 0 <= start <= end <= T = %lld, got [%lld, %lld)",
                             (long long)i, (long long)p->total_rows, (long long)r.start,
                             (long long)r.end);
    }
    sort_entry *entries = malloc(sizeof *entries * (size_t)(total > 0 ? total : 1));
    int64_t *range_local_start = malloc(sizeof(int64_t) * (size_t)(total > 0 ? total : 1));
    int32_t *range_rank = malloc(sizeof(int32_t) * (size_t)(total > 0 ? total : 1));
    if (!entries || !range_local_start || !range_rank) {
        free(entries);
        free(range_local_start);
        free(range_rank);
        return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "partition: out of memory for %lld ranges",
                         (long long)total);
    }
    int64_t n = 0;
    cake_status status = CAKE_SUCCESS;
    for (int r = 0; r < p->num_ranks && status == CAKE_SUCCESS; r++) {
        int64_t local = 0;
        for (int64_t i = p->range_offset[r]; i < p->range_offset[r + 1]; i++) {
            range_local_start[i] = local;
            range_rank[i] = r;
            /* Disjoint ranges of [0, T) cannot sum past T: an overflow means overlaps. */
            if (__builtin_add_overflow(local, p->ranges[i].end - p->ranges[i].start, &local)) {
                status = cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                                   "ranges: expected to cover [0, %lld) exactly once, but rank %d's "
                                   "ranges hold more rows than that", (long long)p->total_rows, r);
                break;
            }
            if (p->ranges[i].end > p->ranges[i].start)
                entries[n++] = (sort_entry){p->ranges[i].start, p->ranges[i].end, i};
        }
        p->local_rows[r] = local;
    }
    qsort(entries, (size_t)n, sizeof *entries, compare_start);
    int64_t covered = 0;
    for (int64_t k = 0; k < n && status == CAKE_SUCCESS; k++) {
        if (entries[k].start > covered)
            status = cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                               "ranges: expected to cover [0, %lld) exactly once, but rows "
                               "[%lld, %lld) belong to no range",
                               (long long)p->total_rows, (long long)covered,
                               (long long)entries[k].start);
        else if (entries[k].start < covered)
            status = cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                               "ranges[%lld]: expected to cover [0, %lld) exactly once, but "
                               "[%lld, %lld) overlaps another range at row %lld",
                               (long long)entries[k].index, (long long)p->total_rows,
                               (long long)entries[k].start, (long long)entries[k].end,
                               (long long)entries[k].start);
        covered = entries[k].end;
    }
    if (status == CAKE_SUCCESS && covered != p->total_rows)
        status = cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                           "ranges: expected to cover [0, %lld) exactly once, but rows "
                           "[%lld, %lld) belong to no range",
                           (long long)p->total_rows, (long long)covered,
                           (long long)p->total_rows);
    if (status == CAKE_SUCCESS) {
        size_t count = (size_t)(n > 0 ? n : 1);
        p->num_sorted = n;
        p->sorted_start = malloc(sizeof(int64_t) * count);
        p->sorted_local_start = malloc(sizeof(int64_t) * count);
        p->sorted_rank = malloc(sizeof(int32_t) * count);
        if (!p->sorted_start || !p->sorted_local_start || !p->sorted_rank)
            status = cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "partition: out of memory");
        else
            for (int64_t k = 0; k < n; k++) {
                p->sorted_start[k] = entries[k].start;
                p->sorted_local_start[k] = range_local_start[entries[k].index];
                p->sorted_rank[k] = range_rank[entries[k].index];
            }
    }
    free(entries);
    free(range_local_start);
    free(range_rank);
    return status;
}

/* Builds a partition from per-rank range lists after the common argument checks. */
static cake_status create(const int64_t *cu_seqlens, int64_t num_seqs, int num_ranks,
                          const int64_t *range_counts, const cake_range *ranges,
                          cake_partition **out) {
    int64_t total = 0;
    for (int r = 0; r < num_ranks; r++) {
        if (range_counts[r] < 0)
            return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                             "range_counts[%d]: expected >= 0, got %lld", r,
                             (long long)range_counts[r]);
        if (range_counts[r] > INT64_MAX / (int64_t)sizeof(cake_range) - total)
            return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                             "range_counts[%d]: %lld ranges overflow the total", r,
                             (long long)range_counts[r]);
        total += range_counts[r];
    }
    if (total > 0 && !ranges)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "ranges: expected a pointer, got NULL");
    cake_partition *p = calloc(1, sizeof *p);
    if (!p) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "partition: out of memory");
    p->num_ranks = num_ranks;
    p->num_seqs = num_seqs;
    p->total_rows = cu_seqlens[num_seqs];
    p->cu_seqlens = malloc(sizeof(int64_t) * (size_t)(num_seqs + 1));
    p->range_offset = malloc(sizeof(int64_t) * ((size_t)num_ranks + 1));
    p->ranges = malloc(sizeof(cake_range) * (size_t)(total > 0 ? total : 1));
    p->local_rows = malloc(sizeof(int64_t) * (size_t)num_ranks);
    if (!p->cu_seqlens || !p->range_offset || !p->ranges || !p->local_rows) {
        cake_partition_destroy(p);
        return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "partition: out of memory");
    }
    memcpy(p->cu_seqlens, cu_seqlens, sizeof(int64_t) * (size_t)(num_seqs + 1));
    if (total > 0) memcpy(p->ranges, ranges, sizeof(cake_range) * (size_t)total);
    p->range_offset[0] = 0;
    for (int r = 0; r < num_ranks; r++) p->range_offset[r + 1] = p->range_offset[r] + range_counts[r];
    cake_status status = build_owner_index(p);
    if (status != CAKE_SUCCESS) {
        cake_partition_destroy(p);
        return status;
    }
    *out = p;
    return CAKE_SUCCESS;
}

static cake_status check_common(const int64_t *cu_seqlens, int64_t num_seqs, int num_ranks,
                                cake_partition **out) {
    cake_clear_error();
    if (!out) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "out: expected a pointer, got NULL");
    CAKE_CHECK(check_cu_seqlens(cu_seqlens, num_seqs));
    return check_num_ranks(num_ranks);
}

/* One range per rank from boundaries (already validated), then the common constructor. */
static cake_status create_from_boundaries(const int64_t *cu_seqlens, int64_t num_seqs,
                                          int num_ranks, const int64_t *boundaries,
                                          cake_partition **out) {
    cake_range *ranges = malloc(sizeof *ranges * (size_t)num_ranks);
    int64_t *counts = malloc(sizeof *counts * (size_t)num_ranks);
    cake_status status;
    if (!ranges || !counts) {
        status = cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "partition: out of memory");
    } else {
        for (int r = 0; r < num_ranks; r++) {
            ranges[r] = (cake_range){boundaries[r], boundaries[r + 1]};
            counts[r] = 1;
        }
        status = create(cu_seqlens, num_seqs, num_ranks, counts, ranges, out);
    }
    free(ranges);
    free(counts);
    return status;
}

cake_status cake_partition_create_boundaries(const int64_t *cu_seqlens, int64_t num_seqs,
                                             int num_ranks, const int64_t *boundaries,
                                             cake_partition **out) {
    CAKE_CHECK(check_common(cu_seqlens, num_seqs, num_ranks, out));
    if (!boundaries)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "boundaries: expected a pointer, got NULL");
    const int64_t total_rows = cu_seqlens[num_seqs];
    if (boundaries[0] != 0)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "boundaries[0]: expected 0, got %lld",
                         (long long)boundaries[0]);
    if (boundaries[num_ranks] != total_rows)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "boundaries[%d]: expected T = %lld, got %lld",
                         num_ranks, (long long)total_rows, (long long)boundaries[num_ranks]);
    for (int r = 1; r <= num_ranks; r++)
        if (boundaries[r] < boundaries[r - 1])
            return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                             "boundaries[%d]: expected >= boundaries[%d] = %lld, got %lld", r,
                             r - 1, (long long)boundaries[r - 1], (long long)boundaries[r]);
    return create_from_boundaries(cu_seqlens, num_seqs, num_ranks, boundaries, out);
}

/* Start of chunk i when `rows` are cut into `chunks` pieces, the first rows % chunks one longer. */
static int64_t even_split(int64_t rows, int64_t chunks, int64_t i) {
    const int64_t base = rows / chunks, extra = rows % chunks;
    return i * base + (i < extra ? i : extra);
}

cake_status cake_partition_create_contiguous(const int64_t *cu_seqlens, int64_t num_seqs,
                                             int num_ranks, cake_partition **out) {
    CAKE_CHECK(check_common(cu_seqlens, num_seqs, num_ranks, out));
    int64_t *boundaries = malloc(sizeof *boundaries * ((size_t)num_ranks + 1));
    if (!boundaries) return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "partition: out of memory");
    for (int r = 0; r <= num_ranks; r++)
        boundaries[r] = even_split(cu_seqlens[num_seqs], num_ranks, r);
    cake_status status = create_from_boundaries(cu_seqlens, num_seqs, num_ranks, boundaries, out);
    free(boundaries);
    return status;
}

cake_status cake_partition_create_zigzag(const int64_t *cu_seqlens, int64_t num_seqs,
                                         int num_ranks, cake_partition **out) {
    CAKE_CHECK(check_common(cu_seqlens, num_seqs, num_ranks, out));
    const int64_t chunks = 2 * (int64_t)num_ranks, rows = cu_seqlens[num_seqs];
    cake_range *ranges = malloc(sizeof *ranges * (size_t)chunks);
    int64_t *counts = malloc(sizeof *counts * (size_t)num_ranks);
    cake_status status;
    if (!ranges || !counts) {
        status = cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "partition: out of memory");
    } else {
        for (int r = 0; r < num_ranks; r++) {
            const int64_t a = r, b = chunks - 1 - r;
            ranges[2 * r] = (cake_range){even_split(rows, chunks, a), even_split(rows, chunks, a + 1)};
            ranges[2 * r + 1] = (cake_range){even_split(rows, chunks, b), even_split(rows, chunks, b + 1)};
            counts[r] = 2;
        }
        status = create(cu_seqlens, num_seqs, num_ranks, counts, ranges, out);
    }
    free(ranges);
    free(counts);
    return status;
}

cake_status cake_partition_create_ranges(const int64_t *cu_seqlens, int64_t num_seqs,
                                         int num_ranks, const int64_t *range_counts,
                                         const cake_range *ranges, cake_partition **out) {
    CAKE_CHECK(check_common(cu_seqlens, num_seqs, num_ranks, out));
    if (!range_counts)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "range_counts: expected a pointer, got NULL");
    return create(cu_seqlens, num_seqs, num_ranks, range_counts, ranges, out);
}

int cake_partition_num_ranks(const cake_partition *p) { return p ? p->num_ranks : 0; }
int64_t cake_partition_total_rows(const cake_partition *p) { return p ? p->total_rows : 0; }
int64_t cake_partition_num_seqs(const cake_partition *p) { return p ? p->num_seqs : 0; }
const int64_t *cake_partition_cu_seqlens(const cake_partition *p) { return p->cu_seqlens; }

cake_status cake_partition_local_rows(const cake_partition *p, int rank, int64_t *rows) {
    cake_clear_error();
    if (!p) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "partition: expected a pointer, got NULL");
    if (!rows) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "rows: expected a pointer, got NULL");
    if (rank < 0 || rank >= p->num_ranks)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "rank: expected 0 <= rank < %d, got %d",
                         p->num_ranks, rank);
    *rows = p->local_rows[rank];
    return CAKE_SUCCESS;
}

const cake_range *cake_partition_ranges(const cake_partition *p, int rank, int64_t *count) {
    *count = p->range_offset[rank + 1] - p->range_offset[rank];
    return p->ranges + p->range_offset[rank];
}

/* Last index i in [0, n) with a[i] <= key; a is sorted and a[0] <= key. */
static int64_t last_at_most(const int64_t *a, int64_t n, int64_t key) {
    int64_t lo = 0, hi = n; /* invariant: a[lo] <= key, answer in [lo, hi) */
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (a[mid] <= key) lo = mid;
        else hi = mid;
    }
    return lo;
}

int64_t cake_sequence_of_row(const int64_t *cu_seqlens, int64_t num_seqs, int64_t g) {
    return last_at_most(cu_seqlens, num_seqs + 1, g);
}

void cake_partition_owner(const cake_partition *p, int64_t g, int32_t *rank, int64_t *local_row) {
    const int64_t k = last_at_most(p->sorted_start, p->num_sorted, g);
    *rank = p->sorted_rank[k];
    *local_row = p->sorted_local_start[k] + (g - p->sorted_start[k]);
}
