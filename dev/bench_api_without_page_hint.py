#!/usr/bin/env python3
"""bench/bench_api.py with the binding's huge-page hint on large CPU outputs switched off
(cake/_pages.py), to measure what the hint gives in one session: the same arguments.

    CAKE_LIBRARY=build/libcake.so PYTHONPATH=python python3 dev/bench_api_without_page_hint.py \
        --device cpu --shapes "3x[32768,4096]" --no-compile
"""
import os
import runpy
import sys

import cake._pages

cake._pages._madvise = None
bench = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench",
                     "bench_api.py")
sys.argv = [bench] + sys.argv[1:]
runpy.run_path(bench, run_name="__main__")
