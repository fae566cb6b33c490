"""Transparent huge pages for the large CPU outputs the C calls write (Linux).

PyTorch's CPU allocator (glibc's malloc underneath) maps a block of this size fresh for every
``torch.empty_like`` and unmaps it when the tensor is freed, so each call's y (forward) and dx
(backward) are new pages, and the kernels' first write to every 4 KiB of them is a page fault.
Before the call, ``advise_huge_pages`` asks the kernel for transparent huge pages over the
2 MiB-aligned interior of each such output (``madvise(MADV_HUGEPAGE)``): one fault per 2 MiB
instead of 512. On a 2-core AMD EPYC at 3 x [32768, 4096] the forward through the API went
from 440 to 107 ms (the C call into touched memory: 52; docs/PERFORMANCE.md). That is the hint
PyTorch's own ``THP_MEM_ALLOC_ENABLE=1`` gives all of its large allocations; here it covers
cake's outputs alone, with nothing to set. A hint about memory the tensor owns: its contents,
lifetime and every bit the kernels write are unchanged, and where transparent huge pages are off
(mode "never"), or the call fails, nothing else changes either.
"""
import ctypes
import sys

_HUGE_PAGE = 2 << 20
# Outputs from this size on (16 or more huge pages, where one system call per output is small
# beside the thousands of faults it saves; the C library streams a call's outputs from the same
# size, CAKE_CPU_STREAM_BYTES)
MIN_BYTES = 32 << 20
_MADV_HUGEPAGE = 14  # Linux, every architecture


def _find_madvise():
    if not sys.platform.startswith("linux"):
        return None
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


_madvise = _find_madvise()


def huge_page_range(address, nbytes):
    """(start, length) of the whole 2 MiB pages inside [address, address + nbytes), or None."""
    start = (address + _HUGE_PAGE - 1) & ~(_HUGE_PAGE - 1)
    end = (address + nbytes) & ~(_HUGE_PAGE - 1)
    return (start, end - start) if end > start else None


def advise_huge_pages(tensors):
    """The hint for each CPU tensor of at least MIN_BYTES; returns how many were advised."""
    if _madvise is None:
        return 0
    advised = 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        if t.device.type != "cpu" or nbytes < MIN_BYTES:
            continue
        pages = huge_page_range(t.data_ptr(), nbytes)
        if pages is not None and _madvise(pages[0], pages[1], _MADV_HUGEPAGE) == 0:
            advised += 1
    return advised
