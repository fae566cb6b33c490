/* Regressions found by the fuzzers (fuzz/, docs/RELIABILITY.md). Each test replays one
 * reproducer, fuzz/corpus/<harness>/regression-<name>, as the plain API calls it decodes to (run
 * a reproducer with FUZZ_VERBOSE=1 to see them), so both the normal and the sanitizer build catch
 * the bug coming back: signed overflow shows only under UBSan, the memory errors everywhere. */
#include "test_util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SENTINEL 0xa5

static int untouched(const void *buffer, size_t bytes) {
    const unsigned char *b = buffer;
    for (size_t i = 0; i < bytes; i++)
        if (b[i] != SENTINEL) return 0;
    return 1;
}

/* Every fragment's future rows, on every rank: inside the sequence or -1, computed without
 * forming e + j past INT64_MAX. */
static void check_future_rows(const cake_partition *part) {
    for (int rank = 0; rank < cake_partition_num_ranks(part); rank++) {
        cake_plan *plan = NULL;
        TU_OK(cake_plan_create(part, rank, &plan));
        for (int64_t f = 0; f < cake_plan_num_fragments(plan); f++) {
            cake_fragment fr;
            TU_OK(cake_plan_fragment(plan, f, &fr));
            const int64_t e = fr.global_start + fr.length;
            for (int j = 0; j < CAKE_HALO_ROWS; j++) {
                const int64_t want = j < fr.seq_end - e ? e + j : -1;
                TU_CHECK(fr.future[j].global_row == want,
                         "rank %d fragment %" PRId64 " future[%d]: global row %" PRId64
                         ", want %" PRId64, rank, f, j, fr.future[j].global_row, want);
            }
        }
        cake_plan_destroy(plan);
    }
}

/* fuzz_partition/regression-plan-future-row-overflow: a fragment ending at T = INT64_MAX made
 * cake_plan_create form end + 1 and end + 2 (signed overflow). */
static void test_plan_future_rows_near_int64_max(void **state) {
    (void)state;
    tu_set_ctx("plan future rows at T near INT64_MAX");
    const int64_t cu[] = {0, 0, 0, 0, INT64_MAX - 7, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX,
                          INT64_MAX};
    cake_partition *part = NULL;
    TU_OK(cake_partition_create_zigzag(cu, 9, 7, &part)); /* the fuzzer's input */
    check_future_rows(part);
    cake_partition_destroy(part);
    for (int64_t back = 3; back >= 0; back--) { /* one sequence of T = INT64_MAX - 3 .. INT64_MAX */
        const int64_t one[] = {0, INT64_MAX - back};
        TU_OK(cake_partition_create_contiguous(one, 1, 1, &part));
        check_future_rows(part);
        cake_partition_destroy(part);
    }
}

/* fuzz_partition/regression-ranges-local-rows-overflow: overlapping ranges near INT64_MAX made
 * the row count of a rank overflow before the overlap was reported. */
static void test_ranges_row_count_overflow(void **state) {
    (void)state;
    tu_set_ctx("overlapping ranges near INT64_MAX");
    const int64_t cu[] = {0, 6, 9, 12, INT64_MAX - 7, INT64_MAX - 6, INT64_MAX - 4, INT64_MAX - 4,
                          INT64_MAX - 4, INT64_MAX - 2};
    const int64_t counts[] = {3};
    const cake_range ranges[] = {{0, INT64_MAX - 8},
                                 {7277816997830721533, 7277816997830721533},
                                 {0, 7277816997830721533}};
    cake_partition *sentinel = (cake_partition *)&counts, *part = sentinel;
    tu_expect_invalid(cake_partition_create_ranges(cu, 9, 1, counts, ranges, &part),
                      "cake_partition_create_ranges", "ranges", TU_NO_VALUE, 0);
    TU_CHECK(part == sentinel, "*out written on failure");
    const int64_t whole[] = {0, INT64_MAX}, two[] = {2};
    const cake_range twice[] = {{0, INT64_MAX}, {0, INT64_MAX}};
    tu_expect_invalid(cake_partition_create_ranges(whole, 1, 1, two, twice, &part),
                      "cake_partition_create_ranges", "ranges", TU_NO_VALUE, 0);
    TU_CHECK(part == sentinel, "*out written on failure");
}

/* fuzz_args/regression-weight-bytes-overflow: with no rows the channel check let any multiple of
 * 8 through, and the aliasing check then computed channels * 16 bytes of w (signed overflow). */
static void test_weight_bytes_overflow(void **state) {
    (void)state;
    tu_set_ctx("weight bytes overflow with no rows");
    const int64_t cu[] = {0}, C = INT64_MAX & ~(int64_t)7;
    float *w = tu_malloc(128);
    memset(w, 0, 128);
    cake_bf16 *rows[1] = {NULL};
    const float *ws[] = {w};
    float *dws[] = {w}; /* dw is w: a bad call whatever the channel count */
    const cake_cpu_options opt = {1, CAKE_CPU_ISA_AUTO};
    cake_status st = cake_cpu_backward_single_rank(cu, 0, 1, &C, (const cake_bf16 *const *)rows,
                                                   ws, NULL, (const cake_bf16 *const *)rows, rows,
                                                       dws,
                                                   &opt);
    TU_CHECK(st == CAKE_ERROR_INVALID_ARGUMENT &&
                 (tu_msg_names(cake_last_error(), "channels[0]") ||
                  tu_msg_names(cake_last_error(), "dw[0]")),
             "got %s: %s", cake_status_string(st), cake_last_error());
    for (int k = 0; k < 32; k++) TU_CHECK(w[k] == 0.0f, "w[%d] written", k);

    /* An empty rank and a channel count whose w would not fit in memory: no overflow, and
     * either nothing to do or a message about the channel count. */
    const int64_t two_seqs[] = {0, 4, 5}, C60 = (int64_t)1 << 60;
    cake_partition *part;
    cake_plan *plan;
    TU_OK(cake_partition_create_contiguous(two_seqs, 2, 8, &part));
    TU_OK(cake_plan_create(part, 7, &plan)); /* 5 rows over 8 ranks: rank 7 has none */
    cake_bf16 *ys[] = {NULL};
    st = cake_cpu_forward(plan, 1, &C60, (const cake_bf16 *const *)rows, ws, NULL,
                          (const cake_bf16 *const *)rows, ys, &opt);
    TU_CHECK(st == CAKE_SUCCESS || (st == CAKE_ERROR_INVALID_ARGUMENT &&
                                    tu_msg_names(cake_last_error(), "channels[0]")),
             "got %s: %s", cake_status_string(st), cake_last_error());
    cake_plan_destroy(plan);
    cake_partition_destroy(part);
    free(w);
}

/* fuzz_args/regression-single-rank-pool-overflow: the single-rank calls sized their halo pools
 * from a channel count whose rows overflow (pools * C wrapped, then the fill ran past a 2-byte
 * block). The call must fail on the channel count and write nothing. */
static void test_single_rank_pool_overflow(void **state) {
    (void)state;
    tu_set_ctx("single-rank pools with overflowing channels");
    const int64_t cu[] = {0, 5, 5, 11}, C = (int64_t)1 << 62;
    const size_t bytes = 11 * 8 * sizeof(cake_bf16);
    cake_bf16 *x = tu_malloc(bytes), *y = tu_malloc(bytes), *dx = tu_malloc(bytes);
    float *w = tu_malloc(32 * sizeof(float)), *dw = tu_malloc(32 * sizeof(float));
    memset(x, 0, bytes);
    memset(w, 0, 32 * sizeof(float));
    memset(y, SENTINEL, bytes);
    memset(dx, SENTINEL, bytes);
    memset(dw, SENTINEL, 32 * sizeof(float));
    const cake_bf16 *xs[] = {x};
    const float *ws[] = {w};
    cake_bf16 *ys[] = {y}, *dxs[] = {dx};
    float *dws[] = {dw};
    tu_expect_invalid(cake_cpu_forward_single_rank(cu, 3, 1, &C, xs, ws, NULL, ys, NULL),
                      "cake_cpu_forward_single_rank", "channels[0]", TU_NO_VALUE, 0);
    tu_expect_invalid(cake_cpu_backward_single_rank(cu, 3, 1, &C, xs, ws, NULL, xs, dxs, dws, NULL),
                      "cake_cpu_backward_single_rank", "channels[0]", TU_NO_VALUE, 0);
    TU_CHECK(untouched(y, bytes) && untouched(dx, bytes) && untouched(dw, 32 * sizeof(float)),
             "an output was written on failure");
    free(x);
    free(y);
    free(dx);
    free(w);
    free(dw);
}

/* fuzz_args/regression-single-rank-allocates-before-checks: with x NULL and 2^32 channels (11
 * rows: a valid count) the single-rank call allocated 48 GiB of pools before checking x, and
 * reported CAKE_ERROR_OUT_OF_MEMORY (or ASan aborted) instead of naming x. */
static void test_single_rank_checks_before_allocating(void **state) {
    (void)state;
    tu_set_ctx("single-rank argument checks before pool allocation");
    const int64_t cu[] = {0, 5, 5, 11}, C = (int64_t)1 << 32;
    float w[32] = {0};
    const cake_bf16 *xs[] = {NULL};
    const float *ws[] = {w};
    cake_bf16 y[8];
    cake_bf16 *ys[] = {y};
    tu_expect_invalid(cake_cpu_forward_single_rank(cu, 3, 1, &C, xs, ws, NULL, ys, NULL),
                      "cake_cpu_forward_single_rank", "x[0]", TU_NULL, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_future_rows_near_int64_max),
        cmocka_unit_test(test_ranges_row_count_overflow),
        cmocka_unit_test(test_weight_bytes_overflow),
        cmocka_unit_test(test_single_rank_checks_before_allocating),
        cmocka_unit_test(test_single_rank_pool_overflow), /* last: it corrupts the heap */
    };
    tu_seed();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
