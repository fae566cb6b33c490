/* Harness: the partition constructors and cake_plan_create on hostile cu_seqlens, rank counts,
 * boundaries and range lists. A spec oracle (fuzz_layout) decides whether the arguments are
 * valid: invalid ones must fail with CAKE_ERROR_INVALID_ARGUMENT, a message naming a bad
 * argument and *out untouched; valid ones must give the model's ranges, fragments and halo rows
 * on every rank. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_layout.h"
#include "fuzz_util.h"

enum { KIND_CONTIGUOUS, KIND_BOUNDARIES, KIND_ZIGZAG, KIND_RANGES };
/* Bounds that keep one input well under 64 MB and 10 ms (every rank is planned and checked);
 * beyond them only calls that must fail on a scalar argument (before any array is read) are
 * made. */
enum { MAX_SEQS = 4096, MAX_RANKS_SPLIT = 1 << 12, MAX_RANKS_ARRAYS = 1 << 10, MAX_RANGES = 4096 };

typedef struct input {
    int kind, P;
    int64_t num_seqs, T;
    int64_t *cu;            /* max(num_seqs + 1, 1) entries */
    int64_t *boundaries;    /* P + 1 entries (KIND_BOUNDARIES) */
    int64_t *counts;        /* P entries (KIND_RANGES) */
    cake_range *ranges;
    int64_t num_ranges;     /* entries of `ranges` */
    int null_cu, null_out, null_array;
    const char *names[8];   /* the bad arguments, for the message check */
    int num_names;
} input;

static void bad(input *in, const char *name) { in->names[in->num_names++] = name; }

static void decode_cu(fz_reader *r, input *in, int hostile_first) {
    const uint8_t b = fz_u8(r);
    in->num_seqs = b < 240 ? b % 24 : fz_hostile_i64(r);
    if (in->num_seqs > MAX_SEQS) in->num_seqs %= MAX_SEQS + 1;
    const int64_t n = in->num_seqs >= 0 ? in->num_seqs + 1 : 1;
    in->cu = fz_malloc(sizeof(int64_t) * (size_t)n);
    in->cu[0] = hostile_first ? fz_hostile_i64(r) : 0;
    for (int64_t i = 1; i < n; i++) {
        const uint8_t m = fz_u8(r);
        const int64_t prev = in->cu[i - 1];
        in->cu[i] = m < 160   ? fz_sat_add(prev, m % 9) /* 0: an empty sequence */
                    : m < 200 ? fz_sat_add(prev, fz_u8(r))
                    : m < 216 ? fz_sat_add(prev, fz_u32(r))
                    : m < 224 ? fz_sat_add(prev, -1 - m % 4) /* decreasing */
                              : fz_hostile_i64(r);
    }
    in->T = in->cu[n - 1];
}

/* A row in [0, T], mostly in the right place for `slot` of `slots` equal pieces. */
static int64_t decode_row(fz_reader *r, int64_t T, int64_t prev, int64_t slot, int64_t slots) {
    const uint8_t m = fz_u8(r);
    if (m < 96) return fz_sat_add(prev, m % 6);
    if (m < 192) { /* near the even split, jittered by -2..2 */
        const int64_t even = (int64_t)((__int128)T * slot / slots);
        return fz_sat_add(even, (int64_t)(m % 5) - 2);
    }
    if (m < 224) return (int64_t)((__int128)T * fz_u8(r) / 256);
    return fz_hostile_i64(r);
}

static void decode_boundaries(fz_reader *r, input *in, uint8_t flags) {
    in->boundaries = fz_malloc(sizeof(int64_t) * ((size_t)in->P + 1));
    in->boundaries[0] = (flags & 2) ? fz_hostile_i64(r) : 0;
    for (int k = 1; k < in->P; k++)
        in->boundaries[k] = decode_row(r, in->T, in->boundaries[k - 1], k, in->P);
    in->boundaries[in->P] = (flags & 4) ? fz_hostile_i64(r) : in->T;
}

/* Counts per rank, then a valid cover of [0, T) cut into that many pieces, shuffled over the
 * slots, then a few corrupted ends. */
static void decode_ranges(fz_reader *r, input *in) {
    in->counts = fz_malloc(sizeof(int64_t) * (size_t)in->P);
    __int128 total = 0;
    for (int k = 0; k < in->P; k++) {
        const uint8_t c = fz_u8(r);
        in->counts[k] = c < 224 ? c % 4 : fz_hostile_i64(r);
        if (in->counts[k] > 0) total += in->counts[k];
    }
    in->num_ranges = total <= MAX_RANGES ? (int64_t)total : 0;
    in->ranges = fz_malloc(sizeof(cake_range) * (size_t)in->num_ranges);
    const int64_t K = in->num_ranges;
    int64_t *cuts = fz_malloc(sizeof(int64_t) * (size_t)(K + 1));
    cuts[0] = 0;
    for (int64_t k = 1; k < K; k++) {
        int64_t c = decode_row(r, in->T, cuts[k - 1], k, K);
        c = c < cuts[k - 1] ? cuts[k - 1] : c > in->T ? in->T : c; /* valid before corruption */
        cuts[k] = c;
    }
    if (K) cuts[K] = in->T;
    for (int64_t k = 0; k < K; k++) in->ranges[k] = (cake_range){cuts[k], cuts[k + 1]};
    for (int64_t k = K - 1; k > 0; k--) { /* Fisher-Yates from the input */
        const int64_t j = fz_range(r, 0, k);
        const cake_range t = in->ranges[k];
        in->ranges[k] = in->ranges[j];
        in->ranges[j] = t;
    }
    for (int c = fz_u8(r) % 4; c > 0 && K > 0; c--) {
        cake_range *g = &in->ranges[fz_range(r, 0, K - 1)];
        int64_t *end = (fz_u8(r) & 1) ? &g->start : &g->end;
        const uint8_t m = fz_u8(r);
        *end = m < 64 ? fz_sat_add(*end, (int64_t)(m % 7) - 3)
               : m < 128 ? (m & 1 ? in->T : 0)
               : m < 160 ? fz_sat_add(in->T, 1)
                         : fz_hostile_i64(r);
    }
    free(cuts);
}

/* The spec's verdict on the kind's own arrays (cu and P already valid). */
static void judge_kind(input *in) {
    const int P = in->P;
    if (in->kind == KIND_BOUNDARIES) {
        if (in->null_array) return bad(in, "boundaries");
        int ok = in->boundaries[0] == 0 && in->boundaries[P] == in->T;
        for (int k = 1; k <= P; k++) ok &= in->boundaries[k] >= in->boundaries[k - 1];
        if (!ok) bad(in, "boundaries");
    } else if (in->kind == KIND_RANGES) {
        if (in->null_array == 1) return bad(in, "range_counts");
        __int128 total = 0;
        int negative = 0;
        for (int k = 0; k < P; k++) {
            negative |= in->counts[k] < 0;
            if (in->counts[k] > 0) total += in->counts[k];
        }
        if (negative || total * (__int128)sizeof(cake_range) > INT64_MAX)
            return bad(in, "range_counts");
        if (in->null_array == 2 && total > 0) return bad(in, "ranges");
    }
}

/* Every global row is held exactly once, judged from the library's own fragments. */
static int by_global(const void *a, const void *b) {
    const cake_fragment *x = a, *y = b;
    return x->global_start < y->global_start ? -1 : x->global_start > y->global_start;
}

static void check_tiling(const cake_partition *part, int P, int64_t T) {
    int64_t total = 0, n = 0;
    cake_plan **plans = fz_malloc(sizeof *plans * (size_t)P);
    for (int k = 0; k < P; k++) {
        FZ_CHECK(cake_plan_create(part, k, &plans[k]) == CAKE_SUCCESS, "plan %d: %s", k,
                 cake_last_error());
        total += cake_plan_num_fragments(plans[k]);
    }
    cake_fragment *all = fz_malloc(sizeof *all * (size_t)total);
    for (int k = 0; k < P; k++) {
        for (int64_t f = 0; f < cake_plan_num_fragments(plans[k]); f++)
            cake_plan_fragment(plans[k], f, &all[n++]);
        cake_plan_destroy(plans[k]);
    }
    qsort(all, (size_t)n, sizeof *all, by_global);
    int64_t covered = 0;
    for (int64_t f = 0; f < n; f++) {
        FZ_CHECK(all[f].length >= 1 && all[f].global_start == covered,
                 "rows %" PRId64 "..: held twice or by no rank (fragment at %" PRId64 ")", covered,
                 all[f].global_start);
        covered += all[f].length;
    }
    FZ_CHECK(covered == T, "rows [%" PRId64 ", %" PRId64 ") belong to no rank", covered, T);
    free(all);
    free(plans);
}

/* Queries with bad ranks and indices fail and leave their outputs alone. */
static void check_bad_queries(fz_reader *r, const cake_partition *part, int P) {
    const int rank = (fz_u8(r) & 1) ? fz_hostile_int(r) : (fz_u8(r) & 1 ? -1 : P);
    /* Getters given NULL return 0 (-1 for a rank); destroy functions accept NULL. */
    FZ_CHECK(cake_partition_num_ranks(NULL) == 0 && cake_partition_total_rows(NULL) == 0 &&
                 cake_partition_num_seqs(NULL) == 0 && cake_plan_rank(NULL) == -1 &&
                 cake_plan_local_rows(NULL) == 0 && cake_plan_num_fragments(NULL) == 0 &&
                 cake_plan_pool_rows(NULL) == 0,
             "a getter given NULL did not return 0 (-1 for the rank)");
    cake_partition_destroy(NULL);
    cake_plan_destroy(NULL);
    if (rank >= 0 && rank < P) return;
    fz_count("cake_partition_local_rows, cake_plan_create, cake_plan_fragment: bad rank, index");
    static const char *const rank_name[] = {"rank"};
    int64_t rows = 0x5a5a;
    fz_expect_failure("cake_partition_local_rows", cake_partition_local_rows(part, rank, &rows),
                      1u << CAKE_ERROR_INVALID_ARGUMENT, rank_name, 1);
    FZ_CHECK(rows == 0x5a5a, "cake_partition_local_rows wrote its output on failure");
    cake_plan *sentinel = (cake_plan *)&rows, *plan = sentinel;
    fz_expect_failure("cake_plan_create", cake_plan_create(part, rank, &plan),
                      1u << CAKE_ERROR_INVALID_ARGUMENT, rank_name, 1);
    FZ_CHECK(plan == sentinel, "cake_plan_create wrote *out on failure");
    FZ_CHECK(cake_plan_create(part, 0, &plan) == CAKE_SUCCESS, "plan 0: %s", cake_last_error());
    const int64_t index = (fz_u8(r) & 1) ? fz_hostile_i64(r) : cake_plan_num_fragments(plan);
    if (index < 0 || index >= cake_plan_num_fragments(plan)) {
        static const char *const index_name[] = {"index"};
        cake_fragment frag;
        memset(&frag, FZ_SENTINEL, sizeof frag);
        fz_expect_failure("cake_plan_fragment", cake_plan_fragment(plan, index, &frag),
                          1u << CAKE_ERROR_INVALID_ARGUMENT, index_name, 1);
        FZ_CHECK(fz_untouched(&frag, sizeof frag), "cake_plan_fragment wrote *out on failure");
    }
    cake_plan_destroy(plan);
}

static void check_success(fz_reader *r, const input *in, const cake_partition *part) {
    FZ_CHECK(cake_partition_num_ranks(part) == in->P && cake_partition_total_rows(part) == in->T &&
                 cake_partition_num_seqs(part) == in->num_seqs,
             "partition getters: P %d T %" PRId64 " seqs %" PRId64,
             cake_partition_num_ranks(part), cake_partition_total_rows(part),
             cake_partition_num_seqs(part));
    fz_layout l;
    if (in->kind == KIND_CONTIGUOUS || in->kind == KIND_BOUNDARIES) {
        if (in->kind == KIND_CONTIGUOUS) {
            fz_layout_contiguous(&l, in->cu, in->num_seqs, in->P);
        } else {
            int64_t *ones = fz_malloc(sizeof(int64_t) * (size_t)in->P);
            cake_range *ranges = fz_malloc(sizeof(cake_range) * (size_t)in->P);
            for (int k = 0; k < in->P; k++) {
                ones[k] = 1;
                ranges[k] = (cake_range){in->boundaries[k], in->boundaries[k + 1]};
            }
            FZ_CHECK(fz_layout_ranges(&l, in->cu, in->num_seqs, in->P, ones, ranges),
                     "harness: valid boundaries give an invalid layout");
            free(ones);
            free(ranges);
        }
    } else if (in->kind == KIND_ZIGZAG) {
        fz_layout_zigzag(&l, in->cu, in->num_seqs, in->P);
    } else {
        FZ_CHECK(fz_layout_ranges(&l, in->cu, in->num_seqs, in->P, in->counts, in->ranges),
                 "harness: accepted ranges are invalid in the model");
    }
    for (int k = 0; k < in->P; k++) {
        int64_t rows = -1;
        FZ_CHECK(cake_partition_local_rows(part, k, &rows) == CAKE_SUCCESS && rows == l.local_rows[k],
                 "rank %d: local rows %" PRId64 ", want %" PRId64, k, rows, l.local_rows[k]);
        cake_plan *plan = NULL;
        FZ_CHECK(cake_plan_create(part, k, &plan) == CAKE_SUCCESS, "cake_plan_create(%d): %s", k,
                 cake_last_error());
        fz_check_plan(&l, plan, k);
        cake_plan_destroy(plan);
    }
    check_tiling(part, in->P, in->T);
    check_bad_queries(r, part, in->P);
    fz_layout_free(&l);
}

static void free_input(input *in) {
    free(in->cu);
    free(in->boundaries);
    free(in->counts);
    free(in->ranges);
}

static void print_input(const input *in) {
    static const char *const kinds[] = {"contiguous", "boundaries", "zigzag", "ranges"};
    fprintf(stderr, "%s: P %d, num_seqs %" PRId64 "%s%s%s, cu_seqlens", kinds[in->kind], in->P,
            in->num_seqs, in->null_cu ? ", cu NULL" : "", in->null_out ? ", out NULL" : "",
            in->null_array ? ", array NULL" : "");
    for (int64_t i = 0; i <= in->num_seqs && i < 64; i++) fprintf(stderr, " %" PRId64, in->cu[i]);
    if (in->boundaries) {
        fprintf(stderr, "\n  boundaries");
        for (int k = 0; k <= in->P && k < 64; k++) fprintf(stderr, " %" PRId64, in->boundaries[k]);
    }
    if (in->counts) {
        fprintf(stderr, "\n  range_counts");
        for (int k = 0; k < in->P && k < 64; k++) fprintf(stderr, " %" PRId64, in->counts[k]);
        fprintf(stderr, "\n  ranges");
        for (int64_t k = 0; k < in->num_ranges && k < 64; k++)
            fprintf(stderr, " [%" PRId64 ", %" PRId64 ")", in->ranges[k].start, in->ranges[k].end);
    }
    fprintf(stderr, "\n  expected: %s", in->num_names ? "failure naming" : "success");
    for (int k = 0; k < in->num_names; k++) fprintf(stderr, " %s", in->names[k]);
    fputc('\n', stderr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_reader r = {data, size, 0};
    input in = {0};
    in.kind = fz_u8(&r) % 4;
    const uint8_t flags = fz_u8(&r);
    const uint8_t p = fz_u8(&r);
    in.P = p < 200 ? 1 + p % 8 : p < 232 ? (int)fz_range(&r, 9, 300) : fz_hostile_int(&r);
    decode_cu(&r, &in, flags & 1);
    in.null_cu = (flags & 0xe0) == 0x20;
    in.null_out = (flags & 0xe0) == 0x40;
    in.null_array = (flags & 0xe0) == 0x60 ? 1 : (flags & 0xe0) == 0x80 ? 2 : 0;

    if (in.null_out) bad(&in, "out");
    if (in.num_seqs < 0) bad(&in, "num_seqs");
    const int cu_ok = !in.null_cu && fz_cu_valid(in.cu, in.num_seqs);
    if (in.num_seqs >= 0 && !cu_ok) bad(&in, "cu_seqlens");
    if (in.P < 1) bad(&in, "num_ranks");
    /* Arrays of P entries exist only up to a bound; past it, only scalar failures are tried. */
    const int arrays = in.kind == KIND_BOUNDARIES || in.kind == KIND_RANGES;
    const int max_p = arrays ? MAX_RANKS_ARRAYS : MAX_RANKS_SPLIT;
    if (in.P > max_p && in.num_names == 0) {
        free_input(&in);
        return 0;
    }
    if (arrays && in.P >= 1 && in.P <= max_p) {
        if (in.kind == KIND_BOUNDARIES) decode_boundaries(&r, &in, flags);
        else decode_ranges(&r, &in);
    }
    if (in.num_names == 0) judge_kind(&in);
    if (in.num_names == 0 && in.kind == KIND_RANGES) { /* more ranges than we can supply */
        int64_t claimed = 0;
        for (int k = 0; k < in.P; k++) claimed += in.counts[k];
        if (claimed != in.num_ranges) {
            free_input(&in);
            return 0;
        }
    }
    int layout_ok = 1; /* ranges: bounds and exact cover, judged by the model */
    if (in.num_names == 0 && in.kind == KIND_RANGES) {
        fz_layout l;
        layout_ok = fz_layout_ranges(&l, in.cu, in.num_seqs, in.P, in.counts, in.ranges);
        if (layout_ok) fz_layout_free(&l);
        else bad(&in, "ranges");
    }

    if (fz_verbose()) print_input(&in);
    int64_t dummy[2] = {0, 0};
    cake_partition *sentinel = (cake_partition *)dummy, *part = sentinel;
    cake_partition **out = in.null_out ? NULL : &part;
    const int64_t *cu = in.null_cu ? NULL : in.cu;
    const int64_t *boundaries = in.boundaries ? in.boundaries : dummy;
    const int64_t *counts = in.counts ? in.counts : dummy;
    const cake_range *ranges = in.ranges ? in.ranges : (const cake_range *)dummy;
    cake_status st;
    switch (in.kind) {
    case KIND_CONTIGUOUS: st = cake_partition_create_contiguous(cu, in.num_seqs, in.P, out); break;
    case KIND_BOUNDARIES:
        st = cake_partition_create_boundaries(cu, in.num_seqs, in.P,
                                              in.null_array ? NULL : boundaries, out);
        break;
    case KIND_ZIGZAG: st = cake_partition_create_zigzag(cu, in.num_seqs, in.P, out); break;
    default:
        st = cake_partition_create_ranges(cu, in.num_seqs, in.P,
                                          in.null_array == 1 ? NULL : counts,
                                          in.null_array == 2 ? NULL : ranges, out);
        break;
    }
    static const char *const kinds[] = {"contiguous", "boundaries", "zigzag", "ranges"};
    if (fz_verbose()) fprintf(stderr, "  -> %s: %s\n", cake_status_string(st), cake_last_error());
    if (in.num_names > 0) {
        for (int k = 0; k < in.num_names; k++)
            fz_count("cake_partition_create_%s: bad %s", kinds[in.kind], in.names[k]);
        fz_expect_failure("cake_partition_create", st, 1u << CAKE_ERROR_INVALID_ARGUMENT, in.names,
                          in.num_names);
        FZ_CHECK(part == sentinel, "cake_partition_create wrote *out on failure");
    } else {
        fz_count("cake_partition_create_%s: valid, T %s, P %s", kinds[in.kind],
                 in.T > ((int64_t)1 << 32) ? "> 2^32" : "<= 2^32", in.P > 8 ? "> 8" : "<= 8");
        FZ_CHECK(st == CAKE_SUCCESS, "kind %d, P %d, T %" PRId64 ": valid arguments rejected: %s",
                 in.kind, in.P, in.T, cake_last_error());
        FZ_CHECK(part != sentinel && part != NULL, "cake_partition_create: no partition");
        check_success(&r, &in, part);
        cake_partition_destroy(part);
    }
    free_input(&in);
    return 0;
}
