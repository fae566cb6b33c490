"""cake: deterministic context-parallel short causal convolutions for PyTorch.

See :mod:`cake.causal_conv1d_det_train_kcp` for the API; its four names are re-exported here.
The C library (libcake.so, or libcake_cuda.so with the GPU kernels) is loaded on first use:
from $CAKE_LIBRARY when set, else from this package's directory.
"""
from .causal_conv1d_det_train_kcp import (ContextDetKcp, RecomputeHandleDetKcp,
                                          cake_causal_conv1d_det_kcp,
                                          cake_causal_conv1d_det_multi_kcp)

__all__ = ["cake_causal_conv1d_det_kcp", "cake_causal_conv1d_det_multi_kcp", "ContextDetKcp",
           "RecomputeHandleDetKcp"]
__version__ = "0.1.0"
