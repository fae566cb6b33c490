/* Partitions and plans (SPEC 2): the library's fragments and halo rows against a brute-force
 * computation from a global owner array built from our own range lists; partition and plan
 * constructor errors (status, message, untouched outputs). */
#include "test_util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Coverage counters: the random trials must actually reach these cases. */
static int64_t g_multi_hop, g_empty_ranks, g_local_halo, g_tiny_fragments;

static void check_halo(const char *what, int64_t f, int j, cake_halo_row got, int64_t g,
                       int inside, const int *owner, const int64_t *owner_local, int rank) {
    cake_halo_row want = {-1, -1, -1, 0};
    if (inside)
        want = (cake_halo_row){g, owner_local[g], owner[g], owner[g] == rank};
    TU_CHECK(got.global_row == want.global_row && got.local_row == want.local_row &&
                 got.rank == want.rank && got.is_local == want.is_local,
             "rank %d fragment %" PRId64 " %s[%d]: got {global %" PRId64 ", local %" PRId64
             ", rank %d, is_local %d}, want {%" PRId64 ", %" PRId64 ", %d, %d}",
             rank, f, what, j, got.global_row, got.local_row, (int)got.rank, (int)got.is_local,
             want.global_row, want.local_row, (int)want.rank, (int)want.is_local);
}

/* Every rank's plan against the brute force. */
static void check_plans(const tu_partition *tp, const int64_t *cu, int64_t num_seqs) {
    int64_t T = tp->T;
    int *owner = tu_malloc((size_t)T * sizeof *owner);
    int64_t *owner_local = tu_malloc((size_t)T * sizeof *owner_local);
    int64_t *seq_of = tu_seq_of_rows(cu, num_seqs);
    for (int64_t g = 0; g < T; g++)
        owner[g] = -1;
    for (int k = 0; k < tp->P; k++)
        for (int64_t t = 0; t < tp->local_rows[k]; t++) {
            int64_t g = tp->l2g[k][t];
            assert_int_equal(owner[g], -1); /* our own description covers each row once */
            owner[g] = k;
            owner_local[g] = t;
        }
    for (int64_t g = 0; g < T; g++)
        assert_int_not_equal(owner[g], -1);

    TU_CHECK(cake_partition_num_ranks(tp->lib) == tp->P, "num_ranks");
    TU_CHECK(cake_partition_total_rows(tp->lib) == T, "total_rows %" PRId64,
             cake_partition_total_rows(tp->lib));
    TU_CHECK(cake_partition_num_seqs(tp->lib) == num_seqs, "num_seqs");
    for (int k = 0; k < tp->P; k++) {
        int64_t rows = -7, S = tp->local_rows[k];
        const int64_t *l2g = tp->l2g[k];
        TU_OK(cake_partition_local_rows(tp->lib, k, &rows));
        TU_CHECK(rows == S, "rank %d: local_rows %" PRId64 ", want %" PRId64, k, rows, S);
        g_empty_ranks += S == 0;

        cake_plan *plan = NULL;
        TU_OK(cake_plan_create(tp->lib, k, &plan));
        TU_CHECK(cake_plan_rank(plan) == k, "plan rank");
        TU_CHECK(cake_plan_local_rows(plan) == S, "plan local rows");

        /* Brute force: a fragment starts where the global row does not follow the previous
         * local row's or the sequence changes. */
        int64_t nf = 0;
        for (int64_t t = 0; t < S; t++)
            nf += t == 0 || l2g[t] != l2g[t - 1] + 1 || seq_of[l2g[t]] != seq_of[l2g[t - 1]];
        TU_CHECK(cake_plan_num_fragments(plan) == nf, "rank %d: %" PRId64 " fragments, want %" PRId64,
                 k, cake_plan_num_fragments(plan), nf);
        TU_CHECK(cake_plan_pool_rows(plan) == 3 * nf, "rank %d: pool_rows %" PRId64 ", want %" PRId64,
                 k, cake_plan_pool_rows(plan), 3 * nf);

        int64_t f = 0;
        for (int64_t t = 0; t < S; f++) {
            int64_t len = 1, g0 = l2g[t], q = seq_of[g0];
            while (t + len < S && l2g[t + len] == g0 + len && seq_of[l2g[t + len]] == q)
                len++;
            cake_fragment fr;
            TU_OK(cake_plan_fragment(plan, f, &fr));
            TU_CHECK(fr.local_start == t && fr.length == len && fr.global_start == g0 &&
                         fr.seq_index == q && fr.seq_start == cu[q] && fr.seq_end == cu[q + 1],
                     "rank %d fragment %" PRId64 ": got {local %" PRId64 ", len %" PRId64
                     ", global %" PRId64 ", seq %" PRId64 " [%" PRId64 ", %" PRId64
                     ")}, want {%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 " [%" PRId64
                     ", %" PRId64 ")}",
                     k, f, fr.local_start, fr.length, fr.global_start, fr.seq_index, fr.seq_start,
                     fr.seq_end, t, len, g0, q, cu[q], cu[q + 1]);
            int ranks_seen[3], distinct = 0;
            for (int j = 0; j < CAKE_HALO_ROWS; j++) {
                int64_t hg = g0 - 3 + j, fg = g0 + len + j;
                int hin = hg >= cu[q], fin = fg < cu[q + 1];
                check_halo("history", f, j, fr.history[j], hg, hin, owner, owner_local, k);
                check_halo("future", f, j, fr.future[j], fg, fin, owner, owner_local, k);
                if (hin) {
                    int seen = 0;
                    for (int i = 0; i < distinct; i++)
                        seen |= ranks_seen[i] == owner[hg];
                    if (!seen)
                        ranks_seen[distinct++] = owner[hg];
                    g_local_halo += owner[hg] == k;
                }
            }
            g_multi_hop += distinct >= 2;
            g_tiny_fragments += len <= 2;
            t += len;
        }
        cake_plan_destroy(plan);
    }
    free(owner);
    free(owner_local);
    free(seq_of);
}

/* Worked by hand: T = 12, sequences [0,5) [5,5) [5,12), zigzag over 2 ranks gives chunks of 3;
 * rank 0 holds global rows 0-2, 9-11 and rank 1 rows 3-8. */
static void test_hand_zigzag(void **state) {
    (void)state;
    tu_set_ctx("hand-worked zigzag");
    const int64_t cu[] = {0, 5, 5, 12};
    cake_partition *p = NULL;
    cake_plan *plan = NULL;
    cake_fragment fr;
    int64_t rows;
    TU_OK(cake_partition_create_zigzag(cu, 3, 2, &p));
    TU_OK(cake_partition_local_rows(p, 0, &rows));
    assert_int_equal(rows, 6);
    TU_OK(cake_plan_create(p, 1, &plan));
    assert_int_equal(cake_plan_num_fragments(plan), 2);
    TU_OK(cake_plan_fragment(plan, 0, &fr)); /* rows 3-4 of sequence 0 */
    assert_true(fr.local_start == 0 && fr.length == 2 && fr.global_start == 3);
    assert_true(fr.seq_index == 0 && fr.seq_start == 0 && fr.seq_end == 5);
    for (int j = 0; j < 3; j++) {
        assert_true(fr.history[j].global_row == j && fr.history[j].rank == 0);
        assert_true(fr.history[j].local_row == j && fr.history[j].is_local == 0);
        assert_true(fr.future[j].global_row == -1 && fr.future[j].rank == -1);
    }
    TU_OK(cake_plan_fragment(plan, 1, &fr)); /* rows 5-8 of sequence 2, not the empty 1 */
    assert_true(fr.local_start == 2 && fr.length == 4 && fr.global_start == 5);
    assert_true(fr.seq_index == 2 && fr.seq_start == 5 && fr.seq_end == 12);
    for (int j = 0; j < 3; j++) {
        assert_true(fr.history[j].global_row == -1 && fr.history[j].local_row == -1);
        assert_true(fr.future[j].global_row == 9 + j && fr.future[j].rank == 0);
        assert_true(fr.future[j].local_row == 3 + j && fr.future[j].is_local == 0);
    }
    cake_plan_destroy(plan);
    cake_partition_destroy(p);
}

/* Uneven T: contiguous gives the first T % P ranks one extra row, zigzag the first T % 2P
 * chunks. */
static void test_uneven_sizes(void **state) {
    (void)state;
    tu_set_ctx("uneven sizes");
    const int64_t cu[] = {0, 13};
    cake_partition *p = NULL;
    int64_t rows;
    TU_OK(cake_partition_create_contiguous(cu, 1, 3, &p)); /* 5 4 4 */
    const int64_t want_c[] = {5, 4, 4};
    for (int k = 0; k < 3; k++) {
        TU_OK(cake_partition_local_rows(p, k, &rows));
        assert_int_equal(rows, want_c[k]);
    }
    cake_partition_destroy(p);
    TU_OK(cake_partition_create_zigzag(cu, 1, 2, &p)); /* chunks 4 3 3 3: ranks 4+3, 3+3 */
    const int64_t want_z[] = {7, 6};
    for (int k = 0; k < 2; k++) {
        TU_OK(cake_partition_local_rows(p, k, &rows));
        assert_int_equal(rows, want_z[k]);
    }
    cake_partition_destroy(p);
}

static void test_random_plans(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 101);
    for (int trial = 0; trial < 3000; trial++) {
        int64_t *cu;
        int64_t max_len = trial % 3 == 0 ? 4 : 40;
        int64_t ns = tu_random_cu(&r, 12, max_len, &cu);
        tu_kind kind = (tu_kind)(trial % TU_KIND_COUNT);
        int P = (int)tu_range(&r, 1, 9);
        int64_t max_chunk = trial % 2 ? 2 : tu_range(&r, 1, 30);
        tu_set_ctx("random plans trial %d: %s, P=%d, T=%" PRId64 ", %" PRId64 " seqs", trial,
                   tu_kind_name[kind], P, cu[ns], ns);
        tu_partition tp;
        TU_OK(tu_partition_make(&tp, &r, kind, P, cu, ns, max_chunk));
        check_plans(&tp, cu, ns);
        tu_partition_free(&tp);
        free(cu);
    }
    TU_CHECK(g_multi_hop > 0 && g_empty_ranks > 0 && g_local_halo > 0 && g_tiny_fragments > 0,
             "coverage: multi-hop %" PRId64 ", empty ranks %" PRId64 ", local halo rows %" PRId64
             ", tiny fragments %" PRId64,
             g_multi_hop, g_empty_ranks, g_local_halo, g_tiny_fragments);
}

/* T = 0 (no sequences, or only empty ones): every rank is empty, plans have no fragments. */
static void test_empty_batch(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 102);
    const int64_t cu0[] = {0}, cu3[] = {0, 0, 0, 0};
    for (int c = 0; c < 2; c++)
        for (int kind = 0; kind < TU_KIND_COUNT; kind++) {
            tu_set_ctx("empty batch, %s, %d seqs", tu_kind_name[kind], c ? 3 : 0);
            tu_partition tp;
            TU_OK(tu_partition_make(&tp, &r, (tu_kind)kind, 3, c ? cu3 : cu0, c ? 3 : 0, 1));
            check_plans(&tp, c ? cu3 : cu0, c ? 3 : 0);
            tu_partition_free(&tp);
        }
}

/* ---- errors ---------------------------------------------------------------------------------- */

static char g_dummy;
#define PART_SENTINEL ((cake_partition *)(void *)&g_dummy)
#define PLAN_SENTINEL ((cake_plan *)(void *)&g_dummy)

/* Run a constructor expected to fail; its output must keep the sentinel. */
#define EXPECT_PART_FAIL(call_expr, name, what, value)                                            \
    do {                                                                                          \
        cake_partition *out = PART_SENTINEL;                                                      \
        cake_status st_ = (call_expr);                                                            \
        tu_expect_invalid(st_, #call_expr, name, what, value);                                    \
        TU_CHECK(out == PART_SENTINEL, "%s wrote its output", #call_expr);                        \
    } while (0)

static void test_partition_errors(void **state) {
    (void)state;
    tu_set_ctx("partition constructor errors");
    const int64_t cu[] = {0, 4, 4, 10}, b_ok[] = {0, 3, 7, 10};
    const int64_t bad0[] = {3, 4, 4, 10}, bad_mono[] = {0, 6, 4, 10};
    cake_partition *ok = NULL;
    TU_OK(cake_partition_create_boundaries(cu, 3, 3, b_ok, &ok));
    cake_partition_destroy(ok);

    /* cu_seqlens, num_seqs, num_ranks and out, for each constructor */
    const int64_t cnt[] = {2, 1};
    const cake_range rg[] = {{0, 3}, {6, 10}, {3, 6}};
    for (int c = 0; c < 4; c++) {
        const int64_t *b = b_ok;
#define CREATE(cu_, ns_, P_, out_)                                                                \
    (c == 0   ? cake_partition_create_contiguous(cu_, ns_, P_, out_)                              \
     : c == 1 ? cake_partition_create_boundaries(cu_, ns_, P_, b, out_)                           \
     : c == 2 ? cake_partition_create_zigzag(cu_, ns_, P_, out_)                                  \
              : cake_partition_create_ranges(cu_, ns_, P_, cnt, rg, out_))
        int P = c == 1 ? 3 : 2;
        tu_set_ctx("partition constructor errors, constructor %d", c);
        EXPECT_PART_FAIL(CREATE(NULL, 3, P, &out), "cu_seqlens", TU_NULL, 0);
        EXPECT_PART_FAIL(CREATE(cu, -1, P, &out), "num_seqs", TU_VALUE, -1);
        EXPECT_PART_FAIL(CREATE(bad0, 3, P, &out), "cu_seqlens[0]", TU_VALUE, 3);
        EXPECT_PART_FAIL(CREATE(bad_mono, 3, P, &out), "cu_seqlens[2]", TU_VALUE, 4);
        EXPECT_PART_FAIL(CREATE(cu, 3, 0, &out), "num_ranks", TU_VALUE, 0);
        EXPECT_PART_FAIL(CREATE(cu, 3, -2, &out), "num_ranks", TU_VALUE, -2);
        cake_status st = CREATE(cu, 3, P, NULL);
        tu_expect_invalid(st, "constructor with out = NULL", "out", TU_NULL, 0);
#undef CREATE
    }

    tu_set_ctx("boundaries errors");
    const int64_t b_first[] = {1, 3, 7, 10}, b_mono[] = {0, 7, 3, 10}, b_neg[] = {0, -1, 7, 10};
    const int64_t b_short[] = {0, 3, 7, 9}, b_long[] = {0, 3, 7, 11};
    EXPECT_PART_FAIL(cake_partition_create_boundaries(cu, 3, 3, NULL, &out), "boundaries", TU_NULL, 0);
    EXPECT_PART_FAIL(cake_partition_create_boundaries(cu, 3, 3, b_first, &out), "boundaries[0]",
                     TU_VALUE, 1);
    EXPECT_PART_FAIL(cake_partition_create_boundaries(cu, 3, 3, b_mono, &out), "boundaries[2]",
                     TU_VALUE, 3);
    EXPECT_PART_FAIL(cake_partition_create_boundaries(cu, 3, 3, b_neg, &out), "boundaries[1]",
                     TU_VALUE, -1);
    EXPECT_PART_FAIL(cake_partition_create_boundaries(cu, 3, 3, b_short, &out), "boundaries[3]",
                     TU_VALUE, 9);
    EXPECT_PART_FAIL(cake_partition_create_boundaries(cu, 3, 3, b_long, &out), "boundaries[3]",
                     TU_VALUE, 11);

    tu_set_ctx("ranges errors");
    const int64_t neg_cnt[] = {2, -1}, cnt22[] = {2, 2};
    EXPECT_PART_FAIL(cake_partition_create_ranges(cu, 3, 2, NULL, rg, &out), "range_counts",
                     TU_NULL, 0);
    EXPECT_PART_FAIL(cake_partition_create_ranges(cu, 3, 2, cnt, NULL, &out), "ranges", TU_NULL, 0);
    EXPECT_PART_FAIL(cake_partition_create_ranges(cu, 3, 2, neg_cnt, rg, &out), "range_counts[1]",
                     TU_VALUE, -1);
    const cake_range past_end[] = {{0, 3}, {6, 11}, {3, 6}};
    EXPECT_PART_FAIL(cake_partition_create_ranges(cu, 3, 2, cnt, past_end, &out), "ranges[1]",
                     TU_VALUE, 11);
    const cake_range before[] = {{-2, 3}, {6, 10}, {3, 6}};
    EXPECT_PART_FAIL(cake_partition_create_ranges(cu, 3, 2, cnt, before, &out), "ranges[0]",
                     TU_VALUE, -2);
    /* gap (row 6 owned by nobody), overlap (row 3 twice), reversed range: the message must name
     * the ranges and one of the rows at fault */
    const cake_range gap[] = {{0, 3}, {7, 10}, {3, 6}}, overlap[] = {{0, 4}, {6, 10}, {3, 6}};
    const cake_range reversed[] = {{0, 3}, {6, 10}, {3, 6}, {6, 4}};
    struct {
        const char *what;
        const int64_t *counts;
        const cake_range *ranges;
        int64_t v1, v2;
    } cases[] = {{"gap", cnt, gap, 6, 7}, {"overlap", cnt, overlap, 3, 4},
                 {"reversed", cnt22, reversed, 6, 4}};
    for (int i = 0; i < 3; i++) {
        cake_partition *out = PART_SENTINEL;
        cake_status st = cake_partition_create_ranges(cu, 3, 2, cases[i].counts, cases[i].ranges, &out);
        tu_expect_invalid(st, cases[i].what, "ranges", TU_NO_VALUE, 0);
        const char *msg = cake_last_error();
        TU_CHECK(tu_msg_has_number(msg, cases[i].v1) || tu_msg_has_number(msg, cases[i].v2),
                 "%s: message \"%s\" gives neither %" PRId64 " nor %" PRId64, cases[i].what, msg,
                 cases[i].v1, cases[i].v2);
        TU_CHECK(out == PART_SENTINEL, "%s: output written", cases[i].what);
    }
}

static void test_plan_errors(void **state) {
    (void)state;
    tu_set_ctx("plan and accessor errors");
    const int64_t cu[] = {0, 4, 4, 10};
    cake_partition *p = NULL;
    TU_OK(cake_partition_create_contiguous(cu, 3, 3, &p));

    cake_plan *out = PLAN_SENTINEL;
    tu_expect_invalid(cake_plan_create(NULL, 0, &out), "plan_create(NULL)", "partition", TU_NULL, 0);
    tu_expect_invalid(cake_plan_create(p, -1, &out), "plan_create(rank -1)", "rank", TU_VALUE, -1);
    tu_expect_invalid(cake_plan_create(p, 3, &out), "plan_create(rank 3)", "rank", TU_VALUE, 3);
    TU_CHECK(out == PLAN_SENTINEL, "plan_create wrote its output on failure");
    tu_expect_invalid(cake_plan_create(p, 0, NULL), "plan_create(out NULL)", "out", TU_NULL, 0);

    int64_t rows = -77;
    tu_expect_invalid(cake_partition_local_rows(NULL, 0, &rows), "local_rows(NULL)", "partition",
                      TU_NULL, 0);
    tu_expect_invalid(cake_partition_local_rows(p, 3, &rows), "local_rows(rank 3)", "rank",
                      TU_VALUE, 3);
    tu_expect_invalid(cake_partition_local_rows(p, -5, &rows), "local_rows(rank -5)", "rank",
                      TU_VALUE, -5);
    TU_CHECK(rows == -77, "local_rows wrote its output on failure");
    tu_expect_invalid(cake_partition_local_rows(p, 0, NULL), "local_rows(rows NULL)", "rows",
                      TU_NULL, 0);

    cake_plan *plan = NULL;
    TU_OK(cake_plan_create(p, 1, &plan));
    int64_t nf = cake_plan_num_fragments(plan);
    cake_fragment fr, sentinel;
    memset(&fr, 0xa5, sizeof fr);
    memcpy(&sentinel, &fr, sizeof fr);
    tu_expect_invalid(cake_plan_fragment(NULL, 0, &fr), "fragment(NULL)", "plan", TU_NULL, 0);
    tu_expect_invalid(cake_plan_fragment(plan, -1, &fr), "fragment(-1)", "index", TU_VALUE, -1);
    tu_expect_invalid(cake_plan_fragment(plan, nf, &fr), "fragment(nf)", "index", TU_VALUE, nf);
    TU_CHECK(memcmp(&fr, &sentinel, sizeof fr) == 0, "plan_fragment wrote its output on failure");
    tu_expect_invalid(cake_plan_fragment(plan, 0, NULL), "fragment(out NULL)", "out", TU_NULL, 0);
    cake_plan_destroy(plan);
    cake_partition_destroy(p);
    cake_partition_destroy(NULL); /* destroy functions accept NULL */
    cake_plan_destroy(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_zigzag),      cmocka_unit_test(test_uneven_sizes),
        cmocka_unit_test(test_random_plans),     cmocka_unit_test(test_empty_batch),
        cmocka_unit_test(test_partition_errors), cmocka_unit_test(test_plan_errors),
    };
    tu_seed();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
