"""cake: deterministic context-parallel short causal convolutions for PyTorch.

See :mod:`cake.causal_conv1d_det_train_kcp` for the API; its four names are re-exported here,
with :class:`CakeError` (a RuntimeError carrying the C library's status). Beyond the seed,
:mod:`cake.short_convolution`: :class:`ShortConvolution`, a drop-in for FLA's
``fla.modules.ShortConvolution`` (bias and SiLU fused, context parallel),
:func:`short_convolution_multi` (a layer's q, k and v modules as one multi call) and
:func:`set_conv_context`. The same four names
are also importable as ``flashinfer.cake_causal_conv1d_det_train_kcp`` (the seed's full name),
except where an installed FlashInfer ships that module itself (flashinfer-python 0.7.4 does):
its own is left in place.
The C library (libcake.so, or libcake_cuda.so with the GPU kernels) is loaded on first use:
from $CAKE_LIBRARY when set, else from this package's directory. Needs torch >= 2.6.
"""
import torch as _torch

from ._lib import CakeError

_version = tuple(int(p) for p in _torch.__version__.split("+")[0].split(".")[:2])
if _version < (2, 6):
    raise ImportError(f"cake needs torch >= 2.6 (torch.library custom ops, torch.compile); "
                      f"this is torch {_torch.__version__}")

from .causal_conv1d_det_train_kcp import (ContextDetKcp, RecomputeHandleDetKcp,  # noqa: E402
                                          cake_causal_conv1d_det_kcp,
                                          cake_causal_conv1d_det_multi_kcp)

from .short_convolution import (ShortConvolution, set_conv_context,  # noqa: E402
                                short_convolution_multi)

__all__ = ["cake_causal_conv1d_det_kcp", "cake_causal_conv1d_det_multi_kcp", "ContextDetKcp",
           "RecomputeHandleDetKcp", "CakeError", "ShortConvolution", "short_convolution_multi",
           "set_conv_context"]
__version__ = "1.1.0"
