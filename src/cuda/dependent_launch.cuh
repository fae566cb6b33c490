/* Programmatic dependent launch (compute capability 9.0 and later).
 *
 * The host launches every ordinary kernel of the library with the programmatic stream
 * serialization attribute (conv_cuda.cu, `launch`), so the GPU may start its blocks before the
 * kernel ahead of it in the stream has finished: their start-up (block placement, the launch's
 * own latency) then overlaps that kernel's tail. In exchange each kernel must not touch global
 * memory before `griddepcontrol.wait`, which returns once every kernel it depends on has
 * completed and its writes are visible: so the wait is each kernel's first statement, and
 * nothing is read or written earlier, neither the inputs another kernel wrote nor the outputs
 * another kernel may still read.
 *
 * A kernel may also let its own dependents start at once (`launch_dependents`): they are placed
 * only when every block of this kernel has started (or ended), so they never take a place this
 * kernel's blocks need, and they wait as above. Without it they start as its blocks end. Launched
 * without the attribute (the cooperative form, a device before 9.0) the wait returns at once. */
#ifndef CAKE_CUDA_DEPENDENT_LAUNCH_CUH
#define CAKE_CUDA_DEPENDENT_LAUNCH_CUH

/* 1: launches with the attribute and kernels that wait; 0: ordinary launches (a measurement
 * variant). H100, 1 x [2048, 2048] forward, queued: plain 7.0-7.1 us against 7.5-8.2, bias + SiLU
 * 9.9-10.0 against 10.5-10.8; the large shapes within 1 % (docs/PERFORMANCE.md, thirteenth
 * session). */
#ifndef CAKE_CUDA_DEPENDENT_LAUNCH
#define CAKE_CUDA_DEPENDENT_LAUNCH 1
#endif

/* 0: the kernels skip the wait, a deliberately broken build that test_cuda_conv's
 * test_ordering must fail (never a default). */
#ifndef CAKE_CUDA_DEPENDENT_WAIT
#define CAKE_CUDA_DEPENDENT_WAIT 1
#endif

/* 0: the kernels that leave block partials to the tree's launch (the walks, the tiles) let it
 * start only as their blocks end; 1: at once, like the others. H100, 1 x [2048, 2048] bias +
 * SiLU backward (the tiles, then the tree), queued: 32.2-32.5 us with 0, 34.1-34.8 with 1,
 * 33.3-34.1 with ordinary launches (docs/PERFORMANCE.md, thirteenth session). */
#ifndef CAKE_CUDA_DEPENDENT_EARLY_PARTIALS
#define CAKE_CUDA_DEPENDENT_EARLY_PARTIALS 0
#endif

namespace cake_cuda {

/* Every kernel's first statement; `early`: its dependents may start at once. */
template <bool early = true>
__device__ __forceinline__ void dependent_launch_begin() {
#if CAKE_CUDA_DEPENDENT_LAUNCH && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (early) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#if CAKE_CUDA_DEPENDENT_WAIT
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
#endif
}

} // namespace cake_cuda

#endif
