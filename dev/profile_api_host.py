#!/usr/bin/env python3
"""Where the host time of the public API's forward+backward goes (issue 10): torch.profiler's
CPU view (every thread, autograd's device thread included) of cake's multi call at the host
shape of bench_api.py (3 x [2048, 2048]), eager and under torch.compile, beside torch's own
y = 2 x and F.conv1d, each forward+backward with torch.autograd.grad, no synchronisation inside
the loop.

Prints, per case, the host microseconds per call and the profiler's table by self CPU time.
Usage: CAKE_LIBRARY=... PYTHONPATH=python python dev/profile_api_host.py [--device cuda|cpu]
"""
import argparse
import collections
import json
import os
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import bench_api  # noqa: E402  (the benchmark's inputs and closures: the same calls)


def python_frames(prof, calls, rows, tag):
    """The Python functions' inclusive time per call, from the profiler's trace (kept under
    $OUT as trace-<tag>.json where OUT is set)."""
    path = os.path.join(os.environ.get("OUT") or tempfile.gettempdir(), f"trace-{tag}.json")
    prof.export_chrome_trace(path)
    with open(path, encoding="utf-8", errors="replace") as f:  # (torch 2.6 writes stray bytes)
        events = json.loads(f.read(), strict=False)["traceEvents"]
    total = collections.defaultdict(float)
    for e in events:
        if e.get("cat") == "python_function" and e.get("ph") == "X":
            total[e["name"]] += e["dur"]
    print("Python functions, inclusive us per call:")
    for fn, us in sorted(total.items(), key=lambda kv: -kv[1])[:rows]:
        print(f"{us / calls:9.1f}  {fn}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rows", type=int, default=25, help="rows of each profiler table")
    args = ap.parse_args()
    import cake
    _, n, S, C, mean = bench_api.HOST_SHAPE
    if args.device == "cpu":
        S, C = 256, 64
    cu, xs, ws, dys = bench_api.make_inputs(n, S, C, mean, 2, args.device)
    ctx = cake.ContextDetKcp(cu)
    cases = {
        "cake api": bench_api.cake_api(cake, ctx, xs, ws, dys, False)[1],
        "cake compiled": bench_api.cake_api(cake, ctx, xs, ws, dys, True)[1],
        "torch 2x": bench_api.autograd_floor(xs, dys, False)[1],
        "python Function 2x": bench_api.autograd_floor(xs, dys, True)[1],
        "torch conv1d": bench_api.torch_conv(xs, ws, dys)[1],
    }
    for name, fn in cases.items():
        us = bench_api.host_us(fn, 50, args.device)
        # Python frames too for cake's own calls: which function the time is in
        with profile(activities=[ProfilerActivity.CPU], with_stack=name.startswith("cake")) as prof:
            for _ in range(args.calls):
                fn()
            bench_api.sync(args.device)
        print(f"\n==== {name}: {us:.1f} us host per forward+backward ({args.device})")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows,
                                        max_name_column_width=60))
        if name.startswith("cake"):
            python_frames(prof, args.calls, args.rows, name.replace(" ", "-"))


if __name__ == "__main__":
    main()
