/* The edge cases of the core issue on the GPU, each GPU vs CPU bitwise in every launch form (and
 * against the reference where noted), in every variant (no bias / bias x no activation / SiLU)
 * unless noted: S_local = 0, one row, fragments of 1, 2 and 3 rows, sequences spanning many ranks,
 * many fragments inside one 8-row item, C = 8, large C that is not a power of two, mixed C, C
 * around multiples of 64, row counts around the 8-row items and 256-row dw blocks, every depth
 * of the dw tree, AUTO on a call large enough to pick ordinary launches, SiLU's forward on a call
 * large enough for its second form, NaN and infinity, and NaN in several operands at once
 * (canonical NaN, bitwise). */
#include "cuda_tests.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* All ranks of tp in every launch form; with_ref also against the reference; ranks without rows
 * must come back with dw (and dbias) = +0.0 exactly; every NaN written is the canonical one.
 * Returns the number of mismatching arrays. */
static int check_case(const cc_problem *pb, const tu_partition *tp, const char *label, int with_ref,
                      unsigned char poison) {
    int bad = 0;
    tu_problem view;
    tu_ref ref;
    if (with_ref) {
        view = cc_problem_view(pb);
        tu_ref_compute(&ref, &view);
    }
    for (int k = 0; k < tp->P; k++) {
        cc_rank rk;
        cc_rank_init(&rk, pb, tp, k);
        bad += cc_check_all_forms(&rk, label, poison, ct_stream);
        bad += cc_check_canonical(label, &rk);
        if (with_ref) {
            char what[200];
            snprintf(what, sizeof what, "%s: last GPU run vs reference, rank %d", label, k);
            bad += cc_compare_reference(what, &rk, &view, &ref, tp->l2g[k]);
        }
        if (rk.S == 0)
            for (int i = 0; i < rk.n; i++)
                for (int64_t e = 0; e < rk.C[i] * 5; e++) {
                    uint32_t bits = 0;
                    if (e < rk.C[i] * 4)
                        memcpy(&bits, &rk.g_dw[i][e], 4);
                    else if (rk.with_bias)
                        memcpy(&bits, &rk.g_dbias[i][e - rk.C[i] * 4], 4);
                    if (bits != 0) {
                        if (cc_printing())
                            tu_report("%s: rank %d has no rows but %s[%d][%" PRId64 "] = 0x%08x, "
                                      "want +0.0",
                                      label, k, e < rk.C[i] * 4 ? "dw" : "dbias", i,
                                      e < rk.C[i] * 4 ? e : e - rk.C[i] * 4, bits);
                        bad++;
                        break;
                    }
                }
        cc_rank_free(&rk);
    }
    if (with_ref)
        tu_ref_free(&ref);
    return bad;
}

/* Variant sets of check_fixed: bit v stands for variant v (tu_variant_name). */
enum { V_PLAIN = 1, V_BIAS = 2, V_SILU = 4, V_BIAS_SILU = 8, V_ALL = 15 };

/* A fixed batch, for each variant of `variants` with fresh random values; partitions built by
 * `kind` (or ranges when counts != NULL). */
static int check_fixed_v(tu_rng *r, const char *label, const int64_t *cu_values, int64_t num_seqs,
                         int n, const int64_t *C, tu_kind kind, int P, int64_t max_chunk,
                         const int64_t *counts, const cake_range *ranges, int with_ref,
                         int variants) {
    int bad = 0;
    for (int v = 0; v < TU_VARIANTS; v++) {
        if (!(variants & (1 << v)))
            continue;
        cc_problem pb;
        cc_problem_init(&pb, r, TU_MODERATE, cc_cu_copy(cu_values, num_seqs), num_seqs, n, C);
        cc_problem_set_variant(&pb, r, TU_MODERATE, v);
        tu_partition tp;
        tu_set_ctx("%s (%s): %s P=%d, T=%" PRId64 ", %" PRId64 " seqs, %d tensors, C[0]=%" PRId64,
                   label, tu_variant_name[v], counts ? "explicit ranges" : tu_kind_name[kind], P,
                   pb.T, num_seqs, n, C[0]);
        if (counts)
            TU_OK(tu_partition_explicit(&tp, pb.cu, num_seqs, P, counts, ranges));
        else
            TU_OK(tu_partition_make(&tp, r, kind, P, pb.cu, num_seqs, max_chunk));
        bad += check_case(&pb, &tp, label, with_ref, 0xff);
        tu_partition_free(&tp);
        cc_problem_free(&pb);
    }
    return bad;
}

/* Every variant. */
static int check_fixed(tu_rng *r, const char *label, const int64_t *cu_values, int64_t num_seqs,
                       int n, const int64_t *C, tu_kind kind, int P, int64_t max_chunk,
                       const int64_t *counts, const cake_range *ranges, int with_ref) {
    return check_fixed_v(r, label, cu_values, num_seqs, n, C, kind, P, max_chunk, counts, ranges,
                         with_ref, V_ALL);
}

void test_empty_ranks(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, CT_STREAM_EDGE);
    int bad = 0;
    const int64_t C2[] = {8, 40};
    /* T = 0: no sequences, or only empty ones; every rank has S_local = 0 */
    const int64_t cu_none[] = {0}, cu_empty[] = {0, 0, 0, 0};
    for (int kind = 0; kind < TU_KIND_COUNT; kind++) {
        bad += check_fixed(&r, "T = 0, no sequences", cu_none, 0, 2, C2, (tu_kind)kind, 3, 4, NULL,
                           NULL, 0);
        bad += check_fixed(&r, "T = 0, empty sequences", cu_empty, 3, 2, C2, (tu_kind)kind, 2, 4,
                           NULL, NULL, 0);
    }
    /* rows on one rank only: rank 1 holds just an empty range, rank 2 no range at all */
    const int64_t cu[] = {0, 5, 5, 9}, counts[] = {1, 1, 0};
    const cake_range ranges[] = {{0, 9}, {4, 4}};
    bad += check_fixed(&r, "one rank holds every row", cu, 3, 2, C2, TU_RANGES, 3, 0, counts,
                       ranges, 1);
    /* more ranks than rows: ranks 9..11 are empty, the others hold one row each */
    bad +=
        check_fixed(&r, "12 ranks over 9 rows", cu, 3, 2, C2, TU_CONTIGUOUS, 12, 0, NULL, NULL, 1);
    TU_CHECK(bad == 0, "%d arrays differ (see above)", bad);
}

void test_one_row(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, CT_STREAM_EDGE + 100);
    int bad = 0;
    const int64_t cu1[] = {0, 1}, cu_pad[] = {0, 0, 1, 1}, C1[] = {8}, C3[] = {8, 264, 16};
    bad += check_fixed(&r, "one row", cu1, 1, 1, C1, TU_CONTIGUOUS, 1, 0, NULL, NULL, 1);
    bad += check_fixed(&r, "one row, three tensors", cu1, 1, 3, C3, TU_CONTIGUOUS, 1, 0, NULL, NULL,
                       1);
    bad += check_fixed(&r, "one row between empty sequences", cu_pad, 3, 3, C3, TU_CONTIGUOUS, 2, 0,
                       NULL, NULL, 1);
    /* one row per rank: each fragment's history lies 1, 2 and 3 ranks back */
    const int64_t cu7[] = {0, 7};
    bad += check_fixed(&r, "one row per rank", cu7, 1, 3, C3, TU_CONTIGUOUS, 7, 0, NULL, NULL, 1);
    TU_CHECK(bad == 0, "%d arrays differ (see above)", bad);
}

/* Fragments shorter than 3 rows (halo rows several ranks back or elsewhere on the same rank),
 * sequences spanning every rank, and many fragments inside one 8-row forward item. */
void test_short_fragments(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, CT_STREAM_EDGE + 200);
    int bad = 0;
    const int64_t C2[] = {8, 24};
    const int64_t cu_long[] = {0, 500}, cu_mixed[] = {0, 1, 3, 90, 90, 91, 300, 302, 600};
    for (int64_t chunk = 1; chunk <= 3; chunk++)
        for (int P = 2; P <= 8; P += 3) {
            char label[96];
            snprintf(label, sizeof label, "one sequence, chunks of 1..%" PRId64 " rows", chunk);
            bad += check_fixed(&r, label, cu_long, 1, 2, C2, TU_RANGES, P, chunk, NULL, NULL,
                               chunk == 1);
            snprintf(label, sizeof label, "mixed sequences, chunks of 1..%" PRId64 " rows", chunk);
            bad += check_fixed(&r, label, cu_mixed, 8, 2, C2, TU_RANGES, P, chunk, NULL, NULL, 0);
        }
    /* zigzag with 2-row chunks: one sequence across all 8 ranks */
    const int64_t cu32[] = {0, 32}, cu35[] = {0, 35};
    bad += check_fixed(&r, "zigzag, 2-row chunks", cu32, 1, 2, C2, TU_ZIGZAG, 8, 0, NULL, NULL, 1);
    bad +=
        check_fixed(&r, "zigzag, 2-3-row chunks", cu35, 1, 2, C2, TU_ZIGZAG, 8, 0, NULL, NULL, 1);
    /* every row its own sequence or 2-row sequence: up to 8 fragments per 8-row item, P = 1 */
    int64_t cu_tiny[41];
    cu_tiny[0] = 0;
    for (int q = 0; q < 40; q++)
        cu_tiny[q + 1] = cu_tiny[q] + 1 + (q % 3 == 2);
    bad += check_fixed(&r, "sequences of 1-2 rows", cu_tiny, 40, 2, C2, TU_CONTIGUOUS, 1, 0, NULL,
                       NULL, 1);
    /* one sequence, rows dealt out one by one and shuffled: every local row a fragment */
    const int64_t cu_one[] = {0, 64};
    bad +=
        check_fixed(&r, "single-row fragments", cu_one, 1, 2, C2, TU_RANGES, 2, 1, NULL, NULL, 1);
    TU_CHECK(bad == 0, "%d arrays differ (see above)", bad);
}

void test_channel_counts(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, CT_STREAM_EDGE + 300);
    int bad = 0;
    const int64_t cu[] = {0, 3, 100, 100, 277, 290, 600}; /* T = 600 */
    const int64_t c8[] = {8}, c4104[] = {4104}, c2056[] = {2056}, mixed[] = {8, 4104, 24, 520};
    bad += check_fixed(&r, "C = 8", cu, 6, 1, c8, TU_RANGES, 3, 40, NULL, NULL, 1);
    bad += check_fixed(&r, "C = 4104", cu, 6, 1, c4104, TU_ZIGZAG, 2, 0, NULL, NULL, 1);
    bad += check_fixed(&r, "C = 2056", cu, 6, 1, c2056, TU_RANGES, 2, 7, NULL, NULL, 0);
    bad += check_fixed(&r, "mixed C", cu, 6, 4, mixed, TU_RANGES, 3, 100, NULL, NULL, 1);
    /* around multiples of 64 (the backward's channel tiles): full and partial last tiles */
    const int64_t tiles[] = {56, 64, 72, 120, 128, 136, 192, 200};
    bad += check_fixed(&r, "C around multiples of 64", cu, 6, 8, tiles, TU_RANGES, 2, 50, NULL,
                       NULL, 1);
    /* calls large enough for forward items longer than 8 rows (16 and 64 on an H200), with
     * sequence bounds inside the items */
    const int64_t cu_items[] = {0, 5, 700, 701, 1500, 2050}, c_items[] = {2056}, c_long[] = {8200};
    bad += check_fixed(&r, "forward items of 16 rows", cu_items, 5, 1, c_items, TU_CONTIGUOUS, 1,
                       0, NULL, NULL, 0);
    bad += check_fixed(&r, "forward items of 64 rows", cu_items, 5, 1, c_long, TU_CONTIGUOUS, 1, 0,
                       NULL, NULL, 0);
    /* C = 8 everywhere over random batches */
    for (int trial = 0; trial < 6; trial++) {
        int64_t *cu_r, C[3] = {8, 8, 8};
        int64_t ns = tu_random_cu(&r, 10, trial % 2 ? 500 : 20, &cu_r);
        cc_problem pb;
        cc_problem_init(&pb, &r, TU_WIDE, cu_r, ns, 3, C);
        cc_problem_set_variant(&pb, &r, TU_WIDE, (trial + 3) % TU_VARIANTS);
        tu_kind kind = (tu_kind)(trial % TU_KIND_COUNT);
        tu_set_ctx("C = 8 trial %d (%s): %s P=4, T=%" PRId64, trial,
                   tu_variant_name[(trial + 3) % TU_VARIANTS], tu_kind_name[kind], pb.T);
        tu_partition tp;
        TU_OK(tu_partition_make(&tp, &r, kind, 4, pb.cu, ns, tu_range(&r, 1, 20)));
        bad += check_case(&pb, &tp, "C = 8, random", 0, 0xff);
        tu_partition_free(&tp);
        cc_problem_free(&pb);
    }
    TU_CHECK(bad == 0, "%d arrays differ (see above)", bad);
}

/* Row counts and sequence bounds at and around multiples of 8 (forward items) and 256 (dw
 * blocks), fragments crossing block boundaries; 1792-2304 rows (7 to 9 dw blocks); dw trees of
 * two passes, the second folding 2 to 8 roots (34 to 226 dw blocks, full and partial last
 * groups of 32). */
void test_block_boundaries(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, CT_STREAM_EDGE + 400);
    int bad = 0;
    const int64_t C2[] = {16, 8};
    static const int64_t lengths[] = {7,    8,    9,    255,  256,  257,   263,
                                      511,  512,  513,  1000, 1792, 2048,  2049,
                                      2304, 8451, 25600, 41211, 57244, 57601};
    for (size_t k = 0; k < sizeof lengths / sizeof lengths[0]; k++) {
        const int64_t cu[] = {0, lengths[k]};
        char label[64];
        snprintf(label, sizeof label, "one sequence of %" PRId64 " rows", lengths[k]);
        bad += check_fixed(&r, label, cu, 1, 2, C2, TU_CONTIGUOUS, 1, 0, NULL, NULL, 1);
    }
    const int64_t cu_b[] = {0, 7, 8, 9, 255, 256, 257, 511, 513, 520, 1031, 1281};
    bad += check_fixed(&r, "sequence bounds at 8k +- 1 and 256k +- 1", cu_b, 11, 2, C2,
                       TU_CONTIGUOUS, 1, 0, NULL, NULL, 1);
    for (int kind = 0; kind < TU_KIND_COUNT; kind++)
        bad += check_fixed(&r, "fragments across blocks", cu_b, 11, 2, C2, (tu_kind)kind, 3, 300,
                           NULL, NULL, 0);
    TU_CHECK(bad == 0, "%d arrays differ (see above)", bad);
}

/* dw trees of every depth the launcher plans: 1 block, 32 (one pass), 33 and 1024 (two),
 * 1025 and 1100 (three), plus odd leftovers; checked against the reference too. */
void test_tree_depths(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, CT_STREAM_TREE);
    int bad = 0;
    static const int64_t rows[] = {100,        32 * 256,       32 * 256 + 1,   33 * 256 - 5,
                                   1024 * 256, 1024 * 256 + 3, 1100 * 256 - 77};
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        const int64_t T = rows[k];
        const int64_t cu[] = {0, T / 3, T / 3, T - 1000 > T / 3 ? T - 1000 : T / 3, T};
        const int64_t C[] = {8};
        char label[96];
        snprintf(label, sizeof label, "dw tree over %" PRId64 " rows (%" PRId64 " blocks)", T,
                 (T + 255) / 256);
        bad += check_fixed(&r, label, cu, 4, 1, C, TU_CONTIGUOUS, 1, 0, NULL, NULL, 1);
        if (T > 100000)
            bad += check_fixed(&r, label, cu, 4, 1, C, TU_ZIGZAG, 2, 0, NULL, NULL, 0);
    }
    TU_CHECK(bad == 0, "%d arrays differ (see above)", bad);
}

/* The same depths of the dw tree through the fused walk (the tests above have too few channels
 * for it, so they run the tiles, or at most 2048 rows the panels): channels wide enough that the launcher picks the walk (dw
 * blocks x channel pairs at least an eighth of the device's resident threads, its rule), for 32
 * blocks (one tree pass), 33 and 515 (two, the last group partial) and 1100 (three); against the
 * reference too. With CAKE_CUDA_DW_FOLD=1 the walk's kernel folds the first two passes itself,
 * and this is the test of that fold. */
void test_tree_depths_fused(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, CT_STREAM_TREE + 1);
    int bad = 0, device, sms, per_sm;
    TU_CHECK(cudaGetDevice(&device) == cudaSuccess, "cudaGetDevice");
    TU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess &&
                 cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device) ==
                     cudaSuccess,
             "cudaDeviceGetAttribute");
    const int64_t walk_columns = (int64_t)sms * per_sm / 8; /* dw blocks x channel pairs */
    static const int64_t blocks[] = {32, 33, 515, 1100};
    for (size_t k = 0; k < sizeof blocks / sizeof blocks[0]; k++) {
        const int64_t T = blocks[k] * 256 - (k % 2 ? 77 : 0);
        const int64_t pairs = (walk_columns + blocks[k] - 1) / blocks[k];
        const int64_t C[] = {(2 * pairs + 7) / 8 * 8};
        const int64_t cu[] = {0, T / 3, T - 300, T};
        char label[112];
        snprintf(label, sizeof label, "dw tree folded by the walk, %" PRId64 " rows (%" PRId64
                 " blocks), C = %" PRId64, T, (T + 255) / 256, C[0]);
        bad += check_fixed_v(&r, label, cu, 3, 1, C, TU_CONTIGUOUS, 1, 0, NULL, NULL, 1,
                             V_PLAIN | V_BIAS_SILU);
    }
    TU_CHECK(bad == 0, "%d arrays differ (see above)", bad);
}

/* More than 2^24 elements in one call: AUTO picks ordinary launches (by the launcher's rule), and
 * ON has to loop its capped grid over many items. Two variants per case. */
void test_auto_large(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, CT_STREAM_EDGE + 500);
    int bad = 0;
    const int64_t cu[] = {0, 9, 30000, 30000, 65601}, C1[] = {256}, C2[] = {128, 136};
    bad += check_fixed_v(&r, "2^24 + elements, one tensor", cu, 4, 1, C1, TU_CONTIGUOUS, 1, 0,
                         NULL, NULL, 0, V_PLAIN | V_BIAS_SILU);
    bad += check_fixed_v(&r, "2^24 + elements over two tensors", cu, 4, 2, C2, TU_ZIGZAG, 1, 0,
                         NULL, NULL, 0, V_BIAS | V_SILU);
    TU_CHECK(bad == 0, "%d arrays differ (see above)", bad);
}

/* SiLU's forward has a second form for calls that give every resident thread a whole item at two
 * pairs a thread (pick_large_forward, src/cuda/conv_cuda.cu); the other tests' calls are below
 * that size. A call well above it (each of two ranks 12288 rows x 1024 threads of 4 channels,
 * items of 64 rows: 196608 items, twice what an H200 keeps resident), with SiLU and bias + SiLU,
 * with and without NaN and infinities (the full sequence and the canonical NaN of its batches):
 * GPU = CPU bitwise in every launch form. */
void test_silu_large_forward(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, CT_STREAM_EDGE + 600);
    int bad = 0;
    const int64_t cu[] = {0, 7, 13001, 24576}, C[] = {4096};
    for (int v = 2; v < TU_VARIANTS; v++) /* SiLU, bias + SiLU */
        for (int specials = 0; specials < 2; specials++) {
            cc_problem pb;
            cc_problem_init(&pb, &r, TU_MODERATE, cc_cu_copy(cu, 3), 3, 1, C);
            cc_problem_set_variant(&pb, &r, TU_MODERATE, v);
            if (specials)
                cc_inject_specials(&pb, &r, 1);
            tu_set_ctx("large SiLU forward (%s)%s: zigzag P=2, T=%" PRId64 ", C=%" PRId64,
                       tu_variant_name[v], specials ? ", NaN and infinities" : "", pb.T, C[0]);
            tu_partition tp;
            TU_OK(tu_partition_make(&tp, &r, TU_ZIGZAG, 2, pb.cu, 3, 0));
            bad += check_case(&pb, &tp, "large SiLU forward", 0, 0x5a);
            tu_partition_free(&tp);
            cc_problem_free(&pb);
        }
    TU_CHECK(bad == 0, "%d arrays differ (see above)", bad);
}

/* NaN and infinity in x, dy, w and the bias, in every variant: GPU equals CPU bitwise (every NaN
 * output is the canonical one on both), and equals the reference. The poison is finite here
 * (0x5a5a), so an unwritten element cannot pass as a NaN. */
void test_nan_inf(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, CT_STREAM_NAN);
    int bad = 0;
    for (int trial = 0; trial < 12; trial++) {
        int64_t *cu, C[3];
        int64_t ns = tu_random_cu(&r, 8, trial % 2 ? 400 : 12, &cu);
        int n = (int)tu_range(&r, 1, 3);
        tu_random_channels(&r, n, 48, C);
        cc_problem pb;
        cc_problem_init(&pb, &r, TU_MODERATE, cu, ns, n, C);
        const int variant = (trial / 3) % TU_VARIANTS;
        cc_problem_set_variant(&pb, &r, TU_MODERATE, variant);
        cc_inject_specials(&pb, &r, (int)tu_range(&r, 1, 4));
        tu_kind kind = (tu_kind)(trial % TU_KIND_COUNT);
        int P = (int)tu_range(&r, 1, 4);
        tu_set_ctx("NaN/inf trial %d (%s): %s P=%d, T=%" PRId64 ", %d tensors", trial,
                   tu_variant_name[variant], tu_kind_name[kind], P, pb.T, n);
        tu_partition tp;
        TU_OK(tu_partition_make(&tp, &r, kind, P, pb.cu, ns, tu_range(&r, 1, 8)));
        bad += check_case(&pb, &tp, "NaN/inf", n <= TU_MAX_TENSORS, 0x5a);
        tu_partition_free(&tp);
        cc_problem_free(&pb);
    }
    TU_CHECK(bad == 0, "%d arrays differ (see above)", bad);
}

/* NaN in several operands at once (x and dy in the same rows and channel pairs, x of the next
 * row, two weights, two bias values) beside infinities, in every variant, over short fragments
 * and whole batches: GPU = CPU = reference bitwise, every NaN exactly 0x7FC0 / 0x7FC00000, in
 * every launch form. */
void test_nan_several_operands(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, CT_STREAM_NAN + 1);
    int bad = 0;
    for (int trial = 0; trial < 8; trial++) {
        const int64_t cu_v[] = {0, 9, 9, 40, 41, 300 + 91 * trial}, C[2] = {16, 8};
        cc_problem pb;
        cc_problem_init(&pb, &r, TU_NARROW, cc_cu_copy(cu_v, 5), 5, 2, C);
        const int variant = trial % TU_VARIANTS;
        cc_problem_set_variant(&pb, &r, TU_NARROW, variant);
        cc_inject_nan_operands(&pb, &r, 6 + trial);
        tu_set_ctx("several NaN operands, trial %d (%s): T=%" PRId64, trial,
                   tu_variant_name[variant], pb.T);
        tu_partition tp;
        if (trial < 4)
            TU_OK(tu_partition_make(&tp, &r, TU_RANGES, 3, pb.cu, 5, 1 + trial % 3));
        else
            TU_OK(tu_partition_make(&tp, &r, TU_CONTIGUOUS, 1, pb.cu, 5, 1));
        bad += check_case(&pb, &tp, "several NaN operands", 1, 0x5a);
        tu_partition_free(&tp);
        cc_problem_free(&pb);
    }
    TU_CHECK(bad == 0, "%d arrays differ (see above)", bad);
}
