/* test_cuda_conv --small: one small case of each kind, for compute-sanitizer (memcheck,
 * racecheck), where every kernel runs many times slower. Forward and backward, cooperative OFF,
 * ON and AUTO, library and exact-size caller workspace (an overrun of it is a memcheck error),
 * pools from other ranks, a rank without rows, a call split into launches of 8 tensors, and a dw
 * tree of two passes; each in a variant (bias, SiLU: their kernels read the bias, the x half of
 * the future pool and write dbias), the short-fragment case in all four. Results are still
 * compared with the CPU, bitwise. */
#include "cuda_tests.h"

#include <inttypes.h>

static int small_case(tu_rng *r, const char *label, const int64_t *cu_values, int64_t num_seqs,
                      int n, int64_t max_c, tu_kind kind, int P, int64_t max_chunk,
                      const int64_t *counts, const cake_range *ranges, int variant) {
    int64_t C[CC_MAX_TENSORS];
    tu_random_channels(r, n, max_c, C);
    C[0] = 8;
    cc_problem pb;
    cc_problem_init(&pb, r, TU_MODERATE, cc_cu_copy(cu_values, num_seqs), num_seqs, n, C);
    cc_problem_set_variant(&pb, r, TU_MODERATE, variant);
    tu_set_ctx("small: %s (%s), P=%d, T=%" PRId64 ", %d tensors", label, tu_variant_name[variant],
               P, pb.T, n);
    tu_partition tp;
    if (counts)
        TU_OK(tu_partition_explicit(&tp, pb.cu, num_seqs, P, counts, ranges));
    else
        TU_OK(tu_partition_make(&tp, r, kind, P, pb.cu, num_seqs, max_chunk));
    int bad = cc_check_partition(&pb, &tp, label, 0xff, ct_stream);
    tu_partition_free(&tp);
    cc_problem_free(&pb);
    return bad;
}

void test_small_cases(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, CT_STREAM_SMALL);
    int bad = 0;
    const int64_t cu[] = {0, 3, 4, 4, 21, 40, 45};
    /* short fragments, halo rows from other ranks and from the same rank */
    for (int v = 0; v < TU_VARIANTS; v++)
        bad += small_case(&r, "ranges, chunks of 1-3 rows", cu, 6, 2, 32, TU_RANGES, 3, 3, NULL,
                          NULL, v);
    /* zigzag over 4 ranks */
    bad += small_case(&r, "zigzag", cu, 6, 2, 32, TU_ZIGZAG, 4, 0, NULL, NULL, 2);
    /* a rank without rows (NULL row arrays and pools) */
    const int64_t counts[] = {1, 0, 2};
    const cake_range ranges[] = {{0, 20}, {30, 45}, {20, 30}};
    bad += small_case(&r, "a rank without rows", cu, 6, 2, 16, TU_RANGES, 3, 0, counts, ranges, 1);
    /* 9 tensors: the launcher splits the call at 8 */
    bad += small_case(&r, "9 tensors in one call", cu, 6, 9, 16, TU_CONTIGUOUS, 2, 0, NULL, NULL,
                      3);
    /* 33 dw blocks: the tree takes two passes (two launches, or two grid barriers) */
    const int64_t cu_tree[] = {0, 100, 33 * 256 + 3};
    bad += small_case(&r, "two-pass dw tree", cu_tree, 2, 1, 8, TU_CONTIGUOUS, 1, 0, NULL, NULL, 3);
    TU_CHECK(bad == 0, "%d arrays differ (see above)", bad);
}
