/* Ordering with the kernels around a call (test_ordering). The library's kernels may start
 * before the kernel ahead of them in the stream has ended (src/cuda/dependent_launch.cuh); they
 * must still read what that kernel wrote and must not overwrite what it still reads. Right before
 * each call a helper kernel (late_access.h) lets its dependents start, waits 200 us, and only
 * then writes one of the call's inputs (x before the forward, dy before the backward; the device
 * copies held other random values until then) and copies away one of the call's outputs as it
 * was before the call (y, dx: a poison pattern). Each launch form of the library runs: the
 * forward's two forms, the panels, the tiles with their tree launch, the fused walk with its
 * tree passes. Results bitwise against the CPU, the copied outputs bitwise the poison. */
#include "cuda_tests.h"
#include "late_access.h"

#include <inttypes.h>
#include <stdlib.h>

enum { CT_LATE_WAIT_US = 200 };

static int ordering_case(tu_rng *r, const char *label, int64_t T, int64_t C, int variant) {
    const int64_t cu[] = {0, T / 3, T / 3 + 1, T - 5, T};
    const int64_t channels[1] = {C};
    cc_problem pb;
    cc_problem_init(&pb, r, TU_MODERATE, cc_cu_copy(cu, 4), 4, 1, channels);
    cc_problem_set_variant(&pb, r, TU_MODERATE, variant);
    tu_set_ctx("ordering: %s (%s), T=%" PRId64 ", C=%" PRId64, label, tu_variant_name[variant], T,
               C);
    tu_partition tp;
    TU_OK(tu_partition_make(&tp, r, TU_ZIGZAG, 2, pb.cu, 4, 0));
    cc_rank rk;
    cc_rank_init(&rk, &pb, &tp, 0);
    const size_t bytes = (size_t)(rk.S * C) * sizeof(cake_bf16);
    const unsigned char poison = 0x5a;

    /* The true x and dy wait in staging copies; the call's own copies hold decoys. */
    cake_bf16 *decoy = tu_malloc(bytes);
    void *staged_x = cu_upload(rk.x[0], bytes), *staged_dy = cu_upload(rk.dy[0], bytes);
    tu_fill_bf16(r, TU_MODERATE, decoy, rk.S * C);
    cu_free(rk.d_x[0]);
    rk.d_x[0] = cu_upload(decoy, bytes);
    tu_fill_bf16(r, TU_MODERATE, decoy, rk.S * C);
    cu_free(rk.d_dy[0]);
    rk.d_dy[0] = cu_upload(decoy, bytes);
    void *seen_y = cu_alloc(bytes), *seen_dx = cu_alloc(bytes);

    cake_conv_params fwd, bwd;
    cc_call_params(&rk, 0, &fwd, &bwd);
    size_t ws_bytes = 0; /* a caller workspace: no allocation between the helper and the call */
    TU_OK(cake_cuda_backward_workspace_size(rk.dplan, 1, rk.C, &bwd, &ws_bytes));
    void *ws = cu_alloc(ws_bytes);
    CU_CHECK(cudaMemsetAsync(rk.d_y[0], poison, bytes, ct_stream));
    CU_CHECK(cudaMemsetAsync(rk.d_dx[0], poison, bytes, ct_stream));

    CU_CHECK(ct_late_access(rk.d_x[0], staged_x, seen_y, rk.d_y[0], bytes, CT_LATE_WAIT_US,
                            ct_stream));
    TU_OK(cake_cuda_forward(rk.dplan, 1, rk.C, (const cake_bf16 *const *)rk.d_x,
                            (const float *const *)rk.d_w, &fwd, (const cake_bf16 *const *)rk.d_hist,
                            rk.d_y, CAKE_COOPERATIVE_OFF, ct_stream));
    CU_CHECK(ct_late_access(rk.d_dy[0], staged_dy, seen_dx, rk.d_dx[0], bytes, CT_LATE_WAIT_US,
                            ct_stream));
    TU_OK(cake_cuda_backward(rk.dplan, 1, rk.C, (const cake_bf16 *const *)rk.d_x,
                             (const float *const *)rk.d_w, &bwd, (const cake_bf16 *const *)rk.d_hist,
                             (const cake_bf16 *const *)rk.d_dy, (const cake_bf16 *const *)rk.d_fut,
                             rk.d_dx, rk.d_dw, CAKE_COOPERATIVE_OFF, ws, ws_bytes, ct_stream));
    cu_sync(ct_stream, label);

    cc_download_results(&rk, 0, 1);
    int bad = cc_compare_truth(label, &rk, 0, 1);
    cu_download(decoy, seen_y, bytes);
    bad += cu_count_not_poison("y before the forward, read by the kernel ahead of it", decoy, bytes,
                               poison) != 0;
    cu_download(decoy, seen_dx, bytes);
    bad += cu_count_not_poison("dx before the backward, read by the kernel ahead of it", decoy,
                               bytes, poison) != 0;

    cu_free(ws);
    cu_free(seen_y);
    cu_free(seen_dx);
    cu_free(staged_x);
    cu_free(staged_dy);
    free(decoy);
    cc_rank_free(&rk);
    tu_partition_free(&tp);
    cc_problem_free(&pb);
    return bad;
}

void test_ordering(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_init(&r, CT_STREAM_ORDERING);
    int bad = 0;
    /* rank 0 of two holds about half the rows: the small forward, the panels (plain, bias) and
     * the tiles with their tree launch (SiLU) */
    for (int v = 0; v < TU_VARIANTS; v++) bad += ordering_case(&r, "small", 4000, 64, v);
    /* the large forward's form and the fused walk with its tree passes */
    bad += ordering_case(&r, "large", 80000, 1024, 0);
    bad += ordering_case(&r, "large", 80000, 1024, 3);
    TU_CHECK(bad == 0, "%d arrays differ (see above)", bad);
}
