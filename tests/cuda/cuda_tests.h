/* The cmocka tests of test_cuda_conv, one file per concern, registered in test_cuda_conv.c. */
#ifndef CAKE_TEST_CUDA_TESTS_H
#define CAKE_TEST_CUDA_TESTS_H

#include "cuda_case.h"

/* RNG streams of this program, apart from the CPU tests' streams (401...). */
enum {
    CT_STREAM_RANDOM = 9101,
    CT_STREAM_MULTI,
    CT_STREAM_SPLIT,
    CT_STREAM_REPEAT,
    CT_STREAM_REFERENCE,
    CT_STREAM_EDGE,
    CT_STREAM_TREE,
    CT_STREAM_NAN,
    CT_STREAM_BAD,
    CT_STREAM_SMALL,
    CT_STREAM_ORDERING,
};

/* The stream most tests launch on (a created one; some calls use the default stream). */
extern cudaStream_t ct_stream;

/* test_cuda_conv.c: random problems and partitions, GPU vs CPU */
void test_random_trials(void **state);
void test_multi_equals_single(void **state);
void test_more_than_eight_tensors(void **state);
void test_run_to_run(void **state);
void test_against_reference(void **state);

/* cuda_edge_cases.c */
void test_empty_ranks(void **state);
void test_one_row(void **state);
void test_short_fragments(void **state);
void test_channel_counts(void **state);
void test_block_boundaries(void **state);
void test_tree_depths(void **state);
void test_tree_depths_fused(void **state);
void test_auto_large(void **state);
void test_silu_large_forward(void **state);
void test_nan_inf(void **state);
void test_nan_several_operands(void **state);

/* cuda_bad_input.c */
void test_bad_input(void **state);
void test_bad_input_empty_rank(void **state);

/* cuda_ordering.c: the kernels around a call (early starts of dependent launches) */
void test_ordering(void **state);

/* cuda_small.c: the sanitizer run (test_cuda_conv --small) */
void test_small_cases(void **state);

#endif
