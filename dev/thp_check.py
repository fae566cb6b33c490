#!/usr/bin/env python3
"""Whether a CPU forward's y lands on transparent huge pages (Linux): one forward of
[32768, 4096] three times, then AnonHugePages (/proc/self/smaps) of the mapping that holds y
from its first 2 MiB boundary on (madvise splits the mapping there). `off`: the binding's hint
(cake/_pages.py) switched off.

    CAKE_LIBRARY=build/libcake.so PYTHONPATH=python python3 dev/thp_check.py [on|off]
"""
import sys

import torch

import cake
import cake._pages


def anon_huge_kb(address):
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1])
    return None


def main():
    if sys.argv[1:] == ["off"]:
        cake._pages._madvise = None
    T, C = 32768, 4096
    ctx = cake.ContextDetKcp([0, T])
    x = torch.randn(T, C).to(torch.bfloat16)
    w = torch.rand(C, 4) - 0.5
    for _ in range(3):
        y = cake.cake_causal_conv1d_det_kcp(x, w, ctx)
        start = cake._pages.huge_page_range(y.data_ptr(), y.numel() * 2)[0]
        print(f"hint {'off' if cake._pages._madvise is None else 'on'}: y {y.numel() * 2 >> 20} "
              f"MiB, AnonHugePages of the mapping at its first 2 MiB boundary "
              f"{anon_huge_kb(start)} kB")
        del y


if __name__ == "__main__":
    main()
