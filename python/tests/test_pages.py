"""The huge-page hint on large CPU outputs (cake/_pages.py): which memory it names, that the
binding gives it for y and dx and nothing else, and that outputs stay bitwise the C library's
single-rank entry points' (which are not given it)."""
import os
import types

import pytest
import torch

import cake
from cake import _pages
from _problems import assert_all_bitwise, make_biases, run_variant, single_rank_reference

MIB = 1 << 20


def test_huge_page_range():
    huge = 2 * MIB
    assert _pages.huge_page_range(0, huge) == (0, huge)
    assert _pages.huge_page_range(4096, huge) is None  # no whole 2 MiB page inside
    assert _pages.huge_page_range(4096, 3 * huge) == (huge, 2 * huge)
    assert _pages.huge_page_range(huge + 16, 5 * huge + 100) == (2 * huge, 4 * huge)
    assert _pages.huge_page_range(3 * huge - 1, huge + 1) == (3 * huge, huge)
    assert _pages.huge_page_range(3 * huge - 1, huge) is None
    for address, nbytes in [(12345 * 4096, 77 * MIB + 3), (7 * huge, 9 * huge), (1, huge)]:
        pages = _pages.huge_page_range(address, nbytes)
        if pages is not None:
            start, length = pages
            assert start % huge == 0 and length % huge == 0 and length > 0
            assert address <= start and start + length <= address + nbytes


def big_problem(seed, rows, channels):
    """One sequence of `rows` rows and one tensor of `channels` channels (random, not zeros)."""
    g = torch.Generator().manual_seed(seed)
    p = types.SimpleNamespace(seed=seed, cu=[0, rows], channels=[channels], T=rows)
    p.xs = [(torch.randn(rows, channels, generator=g) * 2).to(torch.bfloat16)]
    p.ws = [torch.rand(channels, 4, generator=g) - 0.5]
    p.dys = [torch.randn(rows, channels, generator=g).to(torch.bfloat16)]
    return p


@pytest.mark.parametrize("variant", [("none", False), ("silu", True)],
                         ids=["plain", "silu+bias"])
def test_large_outputs_advised_and_bitwise(monkeypatch, variant):
    """A call whose y and dx are 33.6 MB each: the hint names whole 2 MiB pages inside y (in the
    forward) and inside dx (in the backward), once each, and every output is bitwise the
    single-rank entry points'. A small call gives no hint."""
    calls = []

    def record(start, length, advice):
        calls.append((start, length, advice))
        return 0

    monkeypatch.setattr(_pages, "_madvise", record)
    act, with_bias = variant
    p = big_problem(31, 4100, 4096)
    assert p.xs[0].numel() * 2 >= _pages.MIN_BYTES
    bs = make_biases(p) if with_bias else None
    got = run_variant(cake.ContextDetKcp(p.cu), p.xs, p.ws, bs, p.dys, True, act)
    assert_all_bitwise(got, single_rank_reference(p, act, bs), f"{act} bias={with_bias}")
    ys, dxs = got[0], got[1]
    assert len(calls) == 2, calls
    for (start, length, advice), out in zip(calls, (ys[0], dxs[0])):
        assert advice == 14  # MADV_HUGEPAGE
        assert (start, length) == _pages.huge_page_range(out.data_ptr(), out.numel() * 2)

    calls.clear()
    small = big_problem(32, 300, 64)
    run_variant(cake.ContextDetKcp(small.cu), small.xs, small.ws, None, small.dys, True, "none")
    assert calls == []


@pytest.mark.skipif(not os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"),
                    reason="no transparent huge pages in this kernel")
def test_madvise_accepted():
    """Where the kernel has transparent huge pages, it takes the hint on a large CPU tensor
    (whatever its mode; the mode decides only whether faults then take huge pages)."""
    t = torch.empty(64 * MIB, dtype=torch.uint8)
    assert _pages.advise_huge_pages([t]) == 1
    assert _pages.advise_huge_pages([t[: MIB]]) == 0  # below MIN_BYTES
