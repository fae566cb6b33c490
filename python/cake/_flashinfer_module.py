"""``flashinfer.cake_causal_conv1d_det_train_kcp``: cake's API under the seed's full name.

Deterministic context-parallel short causal convolutions (width 4) for training; the same
objects as :mod:`cake.causal_conv1d_det_train_kcp` (see there). Importable after
``pip install .`` of cake, with or without FlashInfer installed (``_cake_flashinfer.py``
serves this name; FlashInfer's own package is left alone, and a FlashInfer that ships this
module itself, as flashinfer-python 0.7.4 does, keeps it).
"""
from cake.causal_conv1d_det_train_kcp import (ContextDetKcp, RecomputeHandleDetKcp,
                                              cake_causal_conv1d_det_kcp,
                                              cake_causal_conv1d_det_multi_kcp)

__all__ = ["cake_causal_conv1d_det_kcp", "cake_causal_conv1d_det_multi_kcp", "ContextDetKcp",
           "RecomputeHandleDetKcp"]
