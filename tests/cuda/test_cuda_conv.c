/* GPU equals CPU, bitwise, for y, dx, dw and dbias in every variant (no bias / bias x no
 * activation / SiLU): random packed batches, partitions and channel counts on every rank, every
 * launch form (cooperative OFF, ON, AUTO), library and caller workspace; multi equals single
 * calls; calls of more than 8 tensors (split by the launcher); run to run; GPU against the
 * independent reference of tests/reference.h; and the ordering with the kernels around a call.
 *
 * Usage: test_cuda_conv            all tests (exit 77 when there is no GPU)
 *        test_cuda_conv --small    one small case of each kind, for compute-sanitizer
 *        test_cuda_conv --only P   the tests whose names match P (cmocka's * and ?)
 * Seed: CAKE_TEST_SEED, as for the CPU tests. */
#include "cuda_tests.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cudaStream_t ct_stream;

/* Stop a test after this many mismatching arrays: enough to diagnose, short enough to read. */
#define CT_MAX_REPORTS 12

/* Problem shapes of the random trials: many short sequences to few long ones; sizes keep the CPU
 * side (data, truth) of the whole program to seconds. */
typedef struct shape {
    int64_t max_seqs, max_len, max_c;
} shape;
static const shape k_shapes[] = {{40, 4, 256}, {20, 40, 128}, {12, 300, 96}, {6, 1500, 40}};
static const tu_profile k_profiles[] = {TU_MODERATE, TU_WIDE, TU_TINY};
static const char *const k_profile_name[] = {"moderate", "wide", "tiny"};

/* A random problem of n tensors in `variant`; with force8 one of them has C = 8. */
static void random_problem(tu_rng *r, cc_problem *pb, const shape *sh, tu_profile prof, int n,
                           int force8, int variant) {
    int64_t *cu, C[CC_MAX_TENSORS];
    int64_t ns = tu_random_cu(r, sh->max_seqs, sh->max_len, &cu);
    tu_random_channels(r, n, sh->max_c, C);
    if (force8)
        C[tu_range(r, 0, n - 1)] = 8;
    cc_problem_init(pb, r, prof, cu, ns, n, C);
    cc_problem_set_variant(pb, r, prof, variant);
}

static void describe_channels(const cc_problem *pb, char *buf, size_t size) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < pb->n && used + 24 < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%" PRId64, i ? "," : "", pb->C[i]);
}

void test_random_trials(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, CT_STREAM_RANDOM);
    int bad = 0;
    const int trials = 48;
    for (int trial = 0; trial < trials && bad < CT_MAX_REPORTS; trial++) {
        const shape *sh = &k_shapes[trial % 4];
        const int prof = (trial / 4) % 3;
        cc_problem pb;
        /* every shape and profile in every variant: 12 trials per variant */
        const int variant = trial / 12;
        random_problem(&r, &pb, sh, k_profiles[prof], (int)tu_range(&r, 1, 4), trial % 5 == 0,
                       variant);
        tu_kind kind = (tu_kind)((trial + trial / 4) % TU_KIND_COUNT); /* every shape, every kind */
        int P = (int)tu_range(&r, 1, 8);
        int64_t max_chunk = tu_range(&r, 1, trial % 2 ? 5 : 400);
        char chans[128];
        describe_channels(&pb, chans, sizeof chans);
        tu_set_ctx("random trial %d (%s): %s partition P=%d (max chunk %" PRId64 "), T=%" PRId64
                   ", %" PRId64 " seqs, C={%s}, %s values",
                   trial, tu_variant_name[variant], tu_kind_name[kind], P, max_chunk, pb.T,
                   pb.num_seqs, chans, k_profile_name[prof]);
        tu_partition tp;
        TU_OK(tu_partition_make(&tp, &r, kind, P, pb.cu, pb.num_seqs, max_chunk));
        bad += cc_check_partition(&pb, &tp, "random", 0xff, trial % 3 ? ct_stream : 0);
        tu_partition_free(&tp);
        cc_problem_free(&pb);
    }
    TU_CHECK(bad == 0, "%d arrays differ (see above)", bad);
}

/* Copies of one rank's GPU results, to compare later runs with. */
typedef struct saved {
    int n;
    cake_bf16 *y[CC_MAX_TENSORS], *dx[CC_MAX_TENSORS];
    float *dw[CC_MAX_TENSORS], *dbias[CC_MAX_TENSORS];
} saved;

static void save(saved *s, const cc_rank *rk) {
    memset(s, 0, sizeof *s);
    s->n = rk->n;
    for (int i = 0; i < rk->n; i++) {
        size_t rb = (size_t)(rk->S * rk->C[i]) * sizeof(cake_bf16), wb = (size_t)rk->C[i] * 16;
        s->y[i] = tu_malloc(rb);
        s->dx[i] = tu_malloc(rb);
        s->dw[i] = tu_malloc(wb);
        if (rb) {
            memcpy(s->y[i], rk->g_y[i], rb);
            memcpy(s->dx[i], rk->g_dx[i], rb);
        }
        memcpy(s->dw[i], rk->g_dw[i], wb);
        if (rk->with_bias) {
            s->dbias[i] = tu_malloc((size_t)rk->C[i] * 4);
            memcpy(s->dbias[i], rk->g_dbias[i], (size_t)rk->C[i] * 4);
        }
    }
}

static void saved_free(saved *s) {
    for (int i = 0; i < s->n; i++) {
        free(s->y[i]);
        free(s->dx[i]);
        free(s->dw[i]);
        free(s->dbias[i]);
    }
}

/* rk's current GPU results of tensors [first, first + count) against saved ones, bitwise. */
static int compare_saved(const char *label, const cc_rank *rk, const saved *s, int first,
                         int count) {
    int bad = 0;
    char what[256];
    for (int i = first; i < first + count; i++) {
        snprintf(what, sizeof what, "%s: y[%d] (C=%" PRId64 ")", label, i, rk->C[i]);
        bad += cc_diff16(what, rk->g_y[i], s->y[i], rk->S, rk->C[i]);
        snprintf(what, sizeof what, "%s: dx[%d] (C=%" PRId64 ")", label, i, rk->C[i]);
        bad += cc_diff16(what, rk->g_dx[i], s->dx[i], rk->S, rk->C[i]);
        snprintf(what, sizeof what, "%s: dw[%d] (C=%" PRId64 ")", label, i, rk->C[i]);
        bad += cc_diff32(what, rk->g_dw[i], s->dw[i], rk->C[i], 4);
        if (rk->with_bias) {
            snprintf(what, sizeof what, "%s: dbias[%d] (C=%" PRId64 ")", label, i, rk->C[i]);
            bad += cc_diff32(what, rk->g_dbias[i], s->dbias[i], 1, rk->C[i]);
        }
    }
    return bad;
}

void test_multi_equals_single(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, CT_STREAM_MULTI);
    cake_cooperative forms[3];
    const int nforms = cc_coop_forms(forms);
    int bad = 0;
    for (int trial = 0; trial < 10 && bad < CT_MAX_REPORTS; trial++) {
        cc_problem pb;
        const shape sh = {10, trial % 2 ? 600 : 30, 136};
        const int variant = (trial + 1) / 2 % TU_VARIANTS;
        random_problem(&r, &pb, &sh, TU_MODERATE, (int)tu_range(&r, 2, 6), 1, variant);
        tu_kind kind = (tu_kind)(trial % TU_KIND_COUNT);
        int P = (int)tu_range(&r, 1, 4);
        char chans[128];
        describe_channels(&pb, chans, sizeof chans);
        tu_set_ctx("multi vs single trial %d (%s): %s P=%d, T=%" PRId64 ", C={%s}", trial,
                   tu_variant_name[variant], tu_kind_name[kind], P, pb.T, chans);
        tu_partition tp;
        TU_OK(tu_partition_make(&tp, &r, kind, P, pb.cu, pb.num_seqs, tu_range(&r, 1, 40)));
        for (int k = 0; k < P; k++) {
            cc_rank rk;
            cc_rank_init(&rk, &pb, &tp, k);
            for (int j = 0; j < nforms; j++) {
                cc_launch multi = {0, pb.n, forms[j], CC_WS_EXACT, 0xff, ct_stream};
                char label[200];
                snprintf(label, sizeof label, "multi call, cooperative=%s", cc_coop_name(forms[j]));
                cc_gpu_run(&rk, &multi);
                bad += cc_compare_truth(label, &rk, 0, pb.n);
                saved s;
                save(&s, &rk);
                for (int i = 0; i < pb.n; i++) {
                    cc_launch one = {i, 1, forms[j], (cc_workspace)(i % 2), 0xff, ct_stream};
                    snprintf(label, sizeof label,
                             "single call of tensor %d vs multi call, "
                             "cooperative=%s",
                             i, cc_coop_name(forms[j]));
                    cc_gpu_run(&rk, &one);
                    bad += compare_saved(label, &rk, &s, i, 1);
                }
                saved_free(&s);
            }
            cc_rank_free(&rk);
        }
        tu_partition_free(&tp);
        cc_problem_free(&pb);
    }
    TU_CHECK(bad == 0, "%d arrays differ (see above)", bad);
}

/* The launcher takes 8 tensors per launch: calls of 9, 16, 17 and 20 tensors are split, and a
 * call of tensors [3, n) (9 or more, so split too) checks the offsets of the split. */
void test_more_than_eight_tensors(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, CT_STREAM_SPLIT);
    static const int counts[] = {9, 16, 17, 20};
    cake_cooperative forms[3];
    const int nforms = cc_coop_forms(forms);
    int bad = 0;
    for (int trial = 0; trial < 4 && bad < CT_MAX_REPORTS; trial++) {
        cc_problem pb;
        const shape sh = {8, trial % 2 ? 400 : 20, 48};
        const int variant = 3 - trial; /* bias + SiLU, SiLU, bias, plain */
        random_problem(&r, &pb, &sh, TU_MODERATE, counts[trial], 1, variant);
        char chans[128];
        describe_channels(&pb, chans, sizeof chans);
        tu_set_ctx("%d tensors in one call, trial %d (%s): ranges P=3, T=%" PRId64 ", C={%s}",
                   pb.n, trial, tu_variant_name[variant], pb.T, chans);
        tu_partition tp;
        TU_OK(tu_partition_make(&tp, &r, TU_RANGES, 3, pb.cu, pb.num_seqs, tu_range(&r, 1, 60)));
        for (int k = 0; k < tp.P; k++) {
            cc_rank rk;
            cc_rank_init(&rk, &pb, &tp, k);
            bad += cc_check_all_forms(&rk, "more than 8 tensors", 0xff, ct_stream);
            for (int j = 0; j < nforms && pb.n >= 12; j++) {
                cc_launch l = {3, pb.n - 3, forms[j], (cc_workspace)(j % 2), 0xff, ct_stream};
                cc_gpu_run(&rk, &l);
                bad += cc_compare_truth("tensors [3, n) in one call", &rk, 3, pb.n - 3);
            }
            cc_rank_free(&rk);
        }
        tu_partition_free(&tp);
        cc_problem_free(&pb);
    }
    TU_CHECK(bad == 0, "%d arrays differ (see above)", bad);
}

/* The same call repeated gives the same bits (atomics or a grid-shape dependence would show). */
void test_run_to_run(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, CT_STREAM_REPEAT);
    cake_cooperative forms[3];
    const int nforms = cc_coop_forms(forms);
    int bad = 0;
    for (int trial = 0; trial < 4 && bad < CT_MAX_REPORTS; trial++) {
        cc_problem pb;
        const shape sh = {6, 4000, 96};
        const int variant = (trial + 3) % TU_VARIANTS; /* bias + SiLU first */
        random_problem(&r, &pb, &sh, k_profiles[trial % 3], 3, 1, variant);
        tu_set_ctx("run to run trial %d (%s): zigzag P=2, T=%" PRId64, trial,
                   tu_variant_name[variant], pb.T);
        tu_partition tp;
        TU_OK(tu_partition_make(&tp, &r, TU_ZIGZAG, 2, pb.cu, pb.num_seqs, 1));
        for (int k = 0; k < tp.P; k++) {
            cc_rank rk;
            cc_rank_init(&rk, &pb, &tp, k);
            for (int j = 0; j < nforms; j++) {
                cc_launch l = {0, pb.n, forms[j], CC_WS_NULL, 0xff, ct_stream};
                cc_gpu_run(&rk, &l);
                saved first;
                save(&first, &rk);
                for (int rep = 1; rep < 4; rep++) {
                    char label[160];
                    l.ws = (cc_workspace)(rep % 2);
                    l.stream = rep == 2 ? 0 : ct_stream;
                    snprintf(label, sizeof label, "run %d vs run 0, cooperative=%s", rep,
                             cc_coop_name(forms[j]));
                    cc_gpu_run(&rk, &l);
                    bad += compare_saved(label, &rk, &first, 0, pb.n);
                }
                bad += cc_compare_truth("run to run, last run", &rk, 0, pb.n);
                saved_free(&first);
            }
            cc_rank_free(&rk);
        }
        tu_partition_free(&tp);
        cc_problem_free(&pb);
    }
    TU_CHECK(bad == 0, "%d arrays differ (see above)", bad);
}

/* GPU results straight against the independent reference (not through the CPU path). */
void test_against_reference(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, CT_STREAM_REFERENCE);
    cake_cooperative forms[3];
    const int nforms = cc_coop_forms(forms);
    int bad = 0;
    for (int trial = 0; trial < 8 && bad < CT_MAX_REPORTS; trial++) {
        cc_problem pb;
        const shape sh = {12, trial % 2 ? 700 : 12, 64};
        const int variant = (trial / 2 + 1) % TU_VARIANTS;
        random_problem(&r, &pb, &sh, k_profiles[trial % 3], (int)tu_range(&r, 1, 3), 1, variant);
        tu_kind kind = (tu_kind)(trial % TU_KIND_COUNT);
        int P = (int)tu_range(&r, 1, 5);
        tu_set_ctx("GPU vs reference trial %d (%s): %s P=%d, T=%" PRId64, trial,
                   tu_variant_name[variant], tu_kind_name[kind], P, pb.T);
        tu_partition tp;
        TU_OK(tu_partition_make(&tp, &r, kind, P, pb.cu, pb.num_seqs, tu_range(&r, 1, 9)));
        tu_problem view = cc_problem_view(&pb);
        tu_ref ref;
        tu_ref_compute(&ref, &view);
        for (int k = 0; k < P; k++) {
            cc_rank rk;
            cc_rank_init(&rk, &pb, &tp, k);
            for (int j = 0; j < nforms; j++) {
                cc_launch l = {0, pb.n, forms[j], (cc_workspace)(j % 2), 0xff, ct_stream};
                cc_gpu_run(&rk, &l);
                char label[128];
                snprintf(label, sizeof label, "GPU (cooperative=%s, rank %d) vs reference",
                         cc_coop_name(forms[j]), k);
                bad += cc_compare_reference(label, &rk, &view, &ref, tp.l2g[k]);
            }
            cc_rank_free(&rk);
        }
        tu_ref_free(&ref);
        tu_partition_free(&tp);
        cc_problem_free(&pb);
    }
    TU_CHECK(bad == 0, "%d arrays differ (see above)", bad);
}

int main(int argc, char **argv) {
    const int small = argc == 2 && strcmp(argv[1], "--small") == 0;
    const int only = argc == 3 && strcmp(argv[1], "--only") == 0;
    if (argc > 1 && !small && !only) {
        fprintf(stderr, "usage: %s [--small | --only TEST_NAME_PATTERN]\n", argv[0]);
        return 2;
    }
    if (only) /* one test of the full set (a pattern with * and ?), e.g. under compute-sanitizer */
        cmocka_set_test_filter(argv[2]);
    (void)tu_seed(); /* prints the seed first */
    cu_require_gpu();
    cudaError_t err = cudaStreamCreateWithFlags(&ct_stream, cudaStreamNonBlocking);
    if (err != cudaSuccess) {
        fprintf(stderr, "[cake-test] FAILED: cudaStreamCreate: %s\n", cudaGetErrorString(err));
        return 1;
    }
    int failed;
    if (small) {
        const struct CMUnitTest tests[] = {cmocka_unit_test(test_small_cases)};
        failed = cmocka_run_group_tests_name("cuda_conv_small", tests, NULL, NULL);
    } else {
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_bad_input),
            cmocka_unit_test(test_bad_input_empty_rank),
            cmocka_unit_test(test_empty_ranks),
            cmocka_unit_test(test_one_row),
            cmocka_unit_test(test_short_fragments),
            cmocka_unit_test(test_channel_counts),
            cmocka_unit_test(test_block_boundaries),
            cmocka_unit_test(test_tree_depths),
            cmocka_unit_test(test_tree_depths_fused),
            cmocka_unit_test(test_nan_inf),
            cmocka_unit_test(test_nan_several_operands),
            cmocka_unit_test(test_random_trials),
            cmocka_unit_test(test_multi_equals_single),
            cmocka_unit_test(test_more_than_eight_tensors),
            cmocka_unit_test(test_run_to_run),
            cmocka_unit_test(test_against_reference),
            cmocka_unit_test(test_auto_large),
            cmocka_unit_test(test_silu_large_forward),
            cmocka_unit_test(test_ordering),
        };
        failed = cmocka_run_group_tests_name("cuda_conv", tests, NULL, NULL);
    }
    cudaStreamDestroy(ct_stream);
    return failed;
}
