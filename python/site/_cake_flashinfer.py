"""Serves ``flashinfer.cake_causal_conv1d_det_train_kcp``, the seed's full name of cake's API.

Loaded at interpreter start by ``cake-flashinfer.pth`` (installed beside it by ``pip install
.``); imports nothing but the standard library, and does nothing until that one module name is
imported. It appends a finder to ``sys.meta_path`` that answers for exactly
``flashinfer.cake_causal_conv1d_det_train_kcp`` (the module ``cake/_flashinfer_module.py``,
which re-exports cake's four names), and only after every other finder said no:

* with FlashInfer (``flashinfer-python``) installed, in the same site directory or another one,
  ``flashinfer`` stays FlashInfer's package, untouched; only the one name, where FlashInfer
  does not have it, comes from here. flashinfer-python 0.7.4 ships a module of that name itself
  (its Blackwell kernels, with its own context API): where such a FlashInfer is installed its
  module wins, and cake's API is imported from ``cake``;
* without FlashInfer there is no ``flashinfer`` package to import, and none is installed: the
  finder provides an empty ``flashinfer`` namespace only while that one module is being
  imported, so ``importlib.util.find_spec("flashinfer")``, which vLLM, SGLang and others use to
  detect FlashInfer, still says it is absent until someone imports the cake module by name.

Nothing is written into a ``flashinfer`` directory, so installing or uninstalling either package,
in either order, never touches the other's files.
"""
import os
import sys

NAME = "flashinfer.cake_causal_conv1d_det_train_kcp"
PARENT = "flashinfer"


def _module():
    """The file of cake's module for NAME, or None when cake is not installed (found without
    importing cake, which would import torch)."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("cake")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "_flashinfer_module.py")
    return path if os.path.isfile(path) else None


def _importing_us():
    """Whether an import (or importlib.util.find_spec) of NAME is what asks for the parent."""
    frame = sys._getframe(2)
    for _ in range(64):
        if frame is None:
            return False
        if "importlib" in frame.f_code.co_filename:
            local = frame.f_locals
            if local.get("name") == NAME or local.get("fullname") == NAME:
                return True
        frame = frame.f_back
    return False


class CakeFlashInferFinder:
    """A meta path finder for NAME (and, without FlashInfer, its parent while NAME loads)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == NAME:
            module = _module()
            if module is None:
                return None
            import importlib.util
            return importlib.util.spec_from_file_location(NAME, module)
        if fullname == PARENT and _importing_us() and _module() is not None:
            import importlib.machinery
            spec = importlib.machinery.ModuleSpec(PARENT, None, is_package=True)
            spec.submodule_search_locations = []  # a namespace of nothing but NAME
            return spec
        return None

    def invalidate_caches(self):
        pass


def install():
    """Appends the finder once (last: every other finder, FlashInfer's package included, is
    asked first)."""
    if not any(type(f).__name__ == "CakeFlashInferFinder" for f in sys.meta_path):
        sys.meta_path.append(CakeFlashInferFinder())


install()
