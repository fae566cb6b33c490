/* The CPU kernels against the independent reference (reference.c, reference_bias_silu.c),
 * bitwise: y, dx, dw and dbias on random data, random cu_seqlens (empty and length-1 sequences),
 * random partitions of every kind, every rank (each fed history/future rows taken from the
 * global data), each trial in one of the four variants (plain, bias, SiLU, bias + SiLU). Also a
 * few hand-worked values that pin the reference itself (tap order, rounding, canonical NaN, the
 * dw tree). */
#include "test_util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"

/* The reference's bf16 rounding on values worked by hand. */
static void test_reference_rounding(void **state) {
    (void)state;
    static const struct {
        uint32_t in;
        uint16_t out;
    } cases[] = {
        {0x3f800000, 0x3f80}, /* 1 */
        {0x3f808000, 0x3f80}, /* 1 + 2^-8: tie, to even (down) */
        {0x3f818000, 0x3f82}, /* tie, to even (up) */
        {0x3f808001, 0x3f81}, /* just above the tie */
        {0xbf80ffff, 0xbf81}, /* negative, rounds away */
        {0x7f7fffff, 0x7f80}, /* largest float: overflows to +inf */
        {0x7f7f7fff, 0x7f7f}, /* just below the tie: stays finite */
        {0xff7fffff, 0xff80}, /* -inf */
        {0x7f800000, 0x7f80}, /* inf stays inf */
        {0x00000001, 0x0000}, /* smallest subnormal: rounds to +0 */
        {0x00018000, 0x0002}, /* subnormal tie, to even (up): no flush to zero */
        {0x00010000, 0x0001}, /* smallest bf16 subnormal, exact */
        {0x80008000, 0x8000}, /* -0 side tie: to even (-0) */
        {0x7f800001, 0x7fc0}, /* signalling NaN with low payload: the NaN, not inf */
        {0xff812345, 0x7fc0}, /* negative NaN with payload: the canonical NaN (SPEC 3) */
        {0xffc00000, 0x7fc0}, /* -NaN */
        {0x7fffffff, 0x7fc0}, /* all payload bits */
        {0x7fc10000, 0x7fc0}, /* quiet NaN with a bf16-visible payload */
        {0xff800000, 0xff80}, /* -inf stays -inf */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float f;
        memcpy(&f, &cases[i].in, 4);
        uint16_t got = ref_f32_to_bf16(f);
        TU_CHECK(got == cases[i].out, "bf16(0x%08x) = 0x%04x, want 0x%04x", (unsigned)cases[i].in,
                 got, cases[i].out);
    }
    /* fp32 outputs: NaN becomes 0x7FC00000, everything else (infinities too) is kept */
    static const uint32_t in32[] = {0x7f800001u, 0xffc00000u, 0xffffffffu, 0x7fc00001u,
                                    0x7f800000u, 0xff800000u, 0x80000000u, 0x00000001u};
    for (size_t i = 0; i < sizeof in32 / sizeof in32[0]; i++) {
        float f, g;
        uint32_t out;
        memcpy(&f, &in32[i], 4);
        g = ref_f32_canonical(f);
        memcpy(&out, &g, 4);
        uint32_t want = (in32[i] & 0x7fffffffu) > 0x7f800000u ? 0x7fc00000u : in32[i];
        TU_CHECK(out == want, "canonical(0x%08x) = 0x%08x, want 0x%08x", (unsigned)in32[i],
                 (unsigned)out, (unsigned)want);
    }
}

/* One sequence, x = 1..5, w = {8, 4, 2, 1}: y(t) = 8 x(t-3) + 4 x(t-2) + 2 x(t-1) + x(t), and
 * dx(t) = dy(t) + 2 dy(t+1) + 4 dy(t+2) + 8 dy(t+3), all exact in bf16. A reversed tap order
 * gives other values. Checked on the reference and the library. */
static void test_hand_taps(void **state) {
    (void)state;
    tu_set_ctx("hand taps");
    enum { T = 5, C = 8 };
    const int64_t cu[] = {0, T}, ch[] = {C};
    const float want_y[T] = {1, 4, 11, 26, 41}, want_dx[T] = {49, 64, 31, 14, 5};
    cake_bf16 x[T * C], y[T * C], ry[T * C], dx[T * C], rdx[T * C];
    float w[C * 4], dw[C * 4];
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++)
            x[t * C + c] = ref_f32_to_bf16((float)(t + 1));
    for (int c = 0; c < C; c++)
        for (int k = 0; k < 4; k++)
            w[c * 4 + k] = (float)(8 >> k);
    const cake_bf16 *xs[] = {x};
    const float *ws[] = {w};
    cake_bf16 *ys[] = {y}, *dxs[] = {dx};
    float *dws[] = {dw};
    TU_OK(cake_cpu_forward_single_rank(cu, 1, 1, ch, xs, ws, NULL, ys, NULL));
    TU_OK(cake_cpu_backward_single_rank(cu, 1, 1, ch, xs, ws, NULL, xs, dxs, dws,
                                        NULL)); /* dy = x */
    ref_forward(cu, 1, C, x, w, ry);
    ref_backward_dx(cu, 1, C, x, w, rdx);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            cake_bf16 wy = ref_f32_to_bf16(want_y[t]), wdx = ref_f32_to_bf16(want_dx[t]);
            TU_CHECK(ry[t * C + c] == wy && rdx[t * C + c] == wdx, "reference row %d", t);
            TU_CHECK(y[t * C + c] == wy, "y row %d: got 0x%04x want 0x%04x", t, y[t * C + c], wy);
            TU_CHECK(dx[t * C + c] == wdx, "dx row %d: got 0x%04x want 0x%04x", t, dx[t * C + c],
                     wdx);
        }
}

/* dw tree on 4 blocks: x = 1 everywhere, dy = 1 at local row 0 and 2^-24 at rows 256, 512 and
 * 768, else 0. Tap 3 partials are {1, 2^-24, 2^-24, 2^-24}: the spec's tree gives
 * (1 + 2^-24) + (2^-24 + 2^-24) = 1 + 2^-23 (0x3f800001); a left-to-right sum gives 1. Taps 0-2
 * see +0.0 padding at row 0: 3 * 2^-24 (0x34400000) either way. */
static void test_hand_tree(void **state) {
    (void)state;
    tu_set_ctx("hand dw tree");
    enum { T = 1000, C = 8 };
    const int64_t cu[] = {0, T}, ch[] = {C};
    cake_bf16 *x = tu_malloc(T * C * sizeof *x), *dy = tu_malloc(T * C * sizeof *dy);
    cake_bf16 *dx = tu_malloc(T * C * sizeof *dx);
    int64_t *l2g = tu_malloc(T * sizeof *l2g);
    float w[C * 4], dw[C * 4], rdw[C * 4];
    for (int64_t i = 0; i < T * C; i++) {
        int64_t t = i / C;
        x[i] = 0x3f80;
        dy[i] = t == 0 ? 0x3f80 : (t == 256 || t == 512 || t == 768) ? 0x3380 /* 2^-24 */ : 0;
    }
    for (int64_t t = 0; t < T; t++)
        l2g[t] = t;
    for (int i = 0; i < C * 4; i++)
        w[i] = 0.5f;
    const cake_bf16 *xs[] = {x}, *dys[] = {dy};
    const float *ws[] = {w};
    cake_bf16 *dxs[] = {dx};
    float *dws[] = {dw};
    TU_OK(cake_cpu_backward_single_rank(cu, 1, 1, ch, xs, ws, NULL, dys, dxs, dws, NULL));
    ref_dw(cu, 1, C, x, dy, l2g, T, rdw);
    for (int c = 0; c < C; c++)
        for (int k = 0; k < 4; k++) {
            uint32_t want = k == 3 ? 0x3f800001u : 0x34400000u, got, ref;
            memcpy(&got, &dw[c * 4 + k], 4);
            memcpy(&ref, &rdw[c * 4 + k], 4);
            TU_CHECK(ref == want, "reference dw[%d][%d] = 0x%08x, want 0x%08x", c, k,
                     (unsigned)ref, (unsigned)want);
            TU_CHECK(got == want, "dw[%d][%d] = 0x%08x, want 0x%08x", c, k, (unsigned)got,
                     (unsigned)want);
        }
    free(x);
    free(dy);
    free(dx);
    free(l2g);
}

/* A random problem in variant `variant` (tu_variant_name). */
static void random_problem(tu_rng *r, tu_problem *pb, int64_t **cu, int64_t max_seqs,
                           int64_t max_len, int64_t max_c, tu_profile prof, int variant) {
    int64_t ns = tu_random_cu(r, max_seqs, max_len, cu), C[TU_MAX_TENSORS];
    int n = (int)tu_range(r, 1, 3);
    tu_random_channels(r, n, max_c, C);
    tu_problem_init(pb, r, prof, *cu, ns, n, C);
    tu_problem_set_params(pb, r, prof, tu_variant_bias(variant), tu_variant_activation(variant));
}

/* P = 1 through the single-rank entry points. */
static void test_single_rank(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 201);
    for (int trial = 0; trial < 150; trial++) {
        int64_t *cu;
        tu_problem pb;
        tu_ref ref;
        tu_rank_out o;
        static const tu_profile profs[] = {TU_WIDE, TU_MODERATE, TU_NARROW};
        random_problem(&r, &pb, &cu, 12, trial % 4 == 0 ? 400 : 60, 64, profs[trial % 3],
                       (trial / 3) % TU_VARIANTS);
        tu_set_ctx("single rank trial %d (%s): T=%" PRId64 ", %" PRId64 " seqs, %d tensors", trial,
                   tu_variant_name[tu_problem_variant(&pb)], pb.T, pb.num_seqs, pb.n);
        int64_t *l2g = tu_malloc((size_t)pb.T * sizeof *l2g);
        for (int64_t t = 0; t < pb.T; t++)
            l2g[t] = t;
        tu_ref_compute(&ref, &pb);
        TU_OK(tu_run_single(&pb, NULL, &o));
        TU_CHECK(tu_check_rank("single rank", &pb, &ref, l2g, &o, 0) == 0, "mismatch");
        tu_rank_out_free(&o);
        tu_ref_free(&ref);
        tu_problem_free(&pb);
        free(l2g);
        free(cu);
    }
}

static void run_partition_trial(const tu_problem *pb, const tu_partition *tp) {
    tu_ref ref;
    tu_ref_compute(&ref, pb);
    for (int k = 0; k < tp->P; k++) {
        tu_rank_out o;
        char label[64];
        snprintf(label, sizeof label, "rank %d of %d (S_local %" PRId64 ")", k, tp->P,
                 tp->local_rows[k]);
        TU_OK(tu_run_rank(pb, tp, k, NULL, 0, &o));
        TU_CHECK(tu_check_rank(label, pb, &ref, tp->l2g[k], &o, 0) == 0, "mismatch");
        tu_rank_out_free(&o);
    }
    tu_ref_free(&ref);
}

/* Random partitions of every kind, every rank. */
static void test_partitions(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 202);
    for (int trial = 0; trial < 400; trial++) {
        int64_t *cu;
        tu_problem pb;
        tu_partition tp;
        /* every kind in every variant: kind = trial % 4, variant = (trial / 4) % 4 */
        random_problem(&r, &pb, &cu, 10, trial % 5 == 0 ? 6 : 60, 48,
                       trial % 7 == 0 ? TU_WIDE : trial % 3 == 0 ? TU_NARROW : TU_MODERATE,
                       (trial / TU_KIND_COUNT) % TU_VARIANTS);
        tu_kind kind = (tu_kind)(trial % TU_KIND_COUNT);
        int P = (int)tu_range(&r, 1, 8);
        int64_t max_chunk = trial % 3 == 0 ? 2 : tu_range(&r, 1, 40);
        tu_set_ctx("partition trial %d (%s): %s P=%d, T=%" PRId64 ", %" PRId64 " seqs, %d tensors",
                   trial, tu_variant_name[tu_problem_variant(&pb)], tu_kind_name[kind], P, pb.T,
                   pb.num_seqs, pb.n);
        TU_OK(tu_partition_make(&tp, &r, kind, P, cu, pb.num_seqs, max_chunk));
        run_partition_trial(&pb, &tp);
        tu_partition_free(&tp);
        tu_problem_free(&pb);
        free(cu);
    }
}

/* Ranks with several 256-row dw blocks, sizes around the block edges (0, 1, 255, 256, 257, 511,
 * 512, 513) and block counts whose tree is lopsided (7, 9, 14), in a mix of sequences. */
static void test_block_edges(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 203);
    const int64_t sizes[] = {256, 257, 0, 511, 1, 512, 255, 513, 2300, 1700, 3500};
    enum { P = sizeof sizes / sizeof sizes[0] };
    for (int trial = 0; trial < 4; trial++) {
        int64_t T = 0, counts[P], C[1] = {trial % 2 ? 16 : 8};
        cake_range ranges[P];
        for (int k = 0; k < P; k++) {
            counts[k] = 1;
            ranges[k] = (cake_range){T, T + sizes[k]};
            T += sizes[k];
        }
        /* a few long sequences with empty and short ones in between */
        int64_t cu[24], ns = 0;
        cu[0] = 0;
        while (cu[ns] < T && ns < 22) {
            int64_t len = tu_range(&r, 0, 3) == 0 ? tu_range(&r, 0, 2) : tu_range(&r, 100, 900);
            cu[ns + 1] = cu[ns] + len < T ? cu[ns] + len : T;
            ns++;
        }
        if (cu[ns] < T) {
            cu[ns + 1] = T;
            ns++;
        }
        tu_problem pb;
        tu_partition tp;
        tu_problem_init(&pb, &r, TU_MODERATE, cu, ns, 1, C);
        tu_problem_set_params(&pb, &r, TU_MODERATE, tu_variant_bias(trial),
                              tu_variant_activation(trial)); /* each variant once */
        tu_set_ctx("block edges trial %d (%s): T=%" PRId64 ", %" PRId64 " seqs", trial,
                   tu_variant_name[trial], T, ns);
        TU_OK(tu_partition_explicit(&tp, cu, ns, P, counts, ranges));
        run_partition_trial(&pb, &tp);
        tu_partition_free(&tp);
        tu_problem_free(&pb);
    }
}

/* Tens of dw blocks on one rank, so that a multi-threaded dw splits them into chunks; every
 * thread count against the reference. */
static void test_many_blocks(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 204);
    const int64_t rows[] = {6200, 16500, 9000};
    const int threads[] = {1, 2, 3, 7};
    for (int trial = 0; trial < 3; trial++) {
        int64_t T = rows[trial], cu[] = {0, 3, 3, T - 700, T - 699, T}, C[2] = {8, 8 * (trial + 1)};
        tu_problem pb;
        tu_ref ref;
        tu_problem_init(&pb, &r, TU_MODERATE, cu, 5, trial == 1 ? 1 : 2, C);
        const int variant = 3 - trial; /* bias + SiLU, SiLU, bias */
        tu_problem_set_params(&pb, &r, TU_NARROW, tu_variant_bias(variant),
                              tu_variant_activation(variant));
        tu_ref_compute(&ref, &pb);
        int64_t *l2g = tu_malloc((size_t)T * sizeof *l2g);
        for (int64_t t = 0; t < T; t++)
            l2g[t] = t;
        for (int j = 0; j < 4; j++) {
            cake_cpu_options opt = {threads[j], CAKE_CPU_ISA_AUTO};
            tu_rank_out o;
            tu_set_ctx("many blocks trial %d (%s): T=%" PRId64 ", threads %d", trial,
                       tu_variant_name[variant], T, threads[j]);
            TU_OK(tu_run_single(&pb, &opt, &o));
            TU_CHECK(tu_check_rank("single rank", &pb, &ref, l2g, &o, 0) == 0, "mismatch");
            tu_rank_out_free(&o);
        }
        /* two ranks holding most of the rows, in two ranges each */
        const int64_t counts[] = {2, 2};
        const cake_range ranges[] = {{0, 40}, {T / 2, T}, {40, T / 2}, {0, 0}};
        tu_partition tp;
        TU_OK(tu_partition_explicit(&tp, cu, 5, 2, counts, ranges));
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 4; j += 3) {
                cake_cpu_options opt = {threads[j], CAKE_CPU_ISA_AUTO};
                tu_rank_out o;
                tu_set_ctx("many blocks trial %d (%s): T=%" PRId64 ", rank %d, threads %d", trial,
                           tu_variant_name[variant], T, k, threads[j]);
                TU_OK(tu_run_rank(&pb, &tp, k, &opt, 0, &o));
                TU_CHECK(tu_check_rank("rank", &pb, &ref, tp.l2g[k], &o, 0) == 0, "mismatch");
                tu_rank_out_free(&o);
            }
        tu_partition_free(&tp);
        free(l2g);
        tu_ref_free(&ref);
        tu_problem_free(&pb);
    }
}

/* The reference's row-restricted form (ref_rows_p, for one rank's share of a batch) gives the
 * bits of the whole-batch functions at every row it computes, in every variant. */
static void test_reference_rows(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, 205);
    for (int trial = 0; trial < 16; trial++) {
        int64_t *cu;
        tu_problem pb;
        random_problem(&r, &pb, &cu, 8, 60, 24, TU_NARROW, trial % TU_VARIANTS);
        tu_partition tp;
        TU_OK(tu_partition_make(&tp, &r, TU_RANGES, 3, cu, pb.num_seqs, 1 + trial % 5));
        tu_set_ctx("reference rows trial %d (%s): T=%" PRId64, trial,
                   tu_variant_name[tu_problem_variant(&pb)], pb.T);
        tu_ref whole;
        tu_ref_compute(&whole, &pb);
        for (int k = 0; k < tp.P; k++) {
            tu_ref part;
            tu_ref_compute_rows(&part, &pb, tp.l2g[k], tp.local_rows[k]);
            for (int i = 0; i < pb.n; i++) {
                const int64_t C = pb.C[i];
                int64_t *seq_of = tu_seq_of_rows(pb.cu, pb.num_seqs);
                for (int64_t t = 0; t < tp.local_rows[k]; t++) {
                    const int64_t g = tp.l2g[k][t], end = pb.cu[seq_of[g] + 1];
                    TU_CHECK(memcmp(part.y[i] + g * C, whole.y[i] + g * C, (size_t)C * 2) == 0 &&
                                 memcmp(part.dx[i] + g * C, whole.dx[i] + g * C,
                                        (size_t)C * 2) == 0,
                             "rank %d, tensor %d, global row %" PRId64 ": y or dx differ", k, i,
                             g);
                    for (int64_t j = 0; j < 4 && g + j < end; j++)
                        TU_CHECK(memcmp(part.g[i] + (g + j) * C, whole.g[i] + (g + j) * C,
                                        (size_t)C * 4) == 0,
                                 "rank %d, tensor %d, global row %" PRId64 ": g differs", k, i,
                                 g + j);
                }
                free(seq_of);
            }
            tu_ref_free(&part);
        }
        tu_ref_free(&whole);
        tu_partition_free(&tp);
        tu_problem_free(&pb);
        free(cu);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_rounding), cmocka_unit_test(test_hand_taps),
        cmocka_unit_test(test_hand_tree),          cmocka_unit_test(test_single_rank),
        cmocka_unit_test(test_partitions),         cmocka_unit_test(test_block_edges),
        cmocka_unit_test(test_many_blocks),        cmocka_unit_test(test_reference_rows),
    };
    tu_seed();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
