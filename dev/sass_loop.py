#!/usr/bin/env python3
"""SASS instructions an element in the hot loops of one CUDA kernel (no GPU needed).

Compiles src/cuda/conv_cuda.cu for sm_90 as CMake does (-O3 -fmad=false, plus any -D flags
given), disassembles it with cuobjdump (from the toolkit, or else from the nvidia-cuda-cuobjdump
and nvidia-cuda-nvdisasm wheels, fetched with pip into a cache folder) and, for the kernels whose demangled name contains
the pattern, prints each loop (a backward branch) holding at least --min-rcp reciprocals
(MUFU.RCP: one per silu or silu' in the SiLU kernels), its length, its length per reciprocal and
its instruction mix, the shortest (the walk's step) first. Usage:

    python3 dev/sass_loop.py 'backward_kernel<false, 3>'              # the fused bias+SiLU backward
    python3 dev/sass_loop.py 'forward_kernel<3>' -DCAKE_CUDA_SILU_BATCH_ROWS=2
"""
import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WHEEL_CACHE = os.path.join(tempfile.gettempdir(), "cake-cuobjdump")
# what disassembled nvcc 13.0's sm_90 code here (cuobjdump runs nvdisasm)
WHEELS = ["nvidia-cuda-cuobjdump==13.5.37", "nvidia-cuda-nvdisasm==13.5.37"]


def cuobjdump():
    found = shutil.which("cuobjdump")
    if found:
        return found
    tools = glob.glob(os.path.join(WHEEL_CACHE, "nvidia", "*", "bin", "*"))
    if len(tools) < 2:
        os.makedirs(WHEEL_CACHE, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--upgrade",
                        "--target", WHEEL_CACHE, *WHEELS], check=True)
        tools = glob.glob(os.path.join(WHEEL_CACHE, "nvidia", "*", "bin", "*"))
    for tool in tools:
        os.chmod(tool, 0o755)
    bin_dir = os.path.dirname(tools[0])
    os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    return os.path.join(bin_dir, "cuobjdump")


def opcode(text):
    words = text.split()
    return (words[1] if words[0].startswith("@") else words[0]).split(".")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kernel", help="a part of the demangled kernel name")
    ap.add_argument("flags", nargs="*", help="-D flags for nvcc")
    ap.add_argument("--min-rcp", type=int, default=8, help="loops with at least this many MUFU.RCP")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "conv.cubin")
        subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-O3", "-fmad=false", "-std=c++17",
                        *args.flags, "-I" + os.path.join(ROOT, "include"),
                        "-I" + os.path.join(ROOT, "src"), "-I" + os.path.join(ROOT, "src", "cuda"),
                        os.path.join(ROOT, "src", "cuda", "conv_cuda.cu"), "-o", cubin], check=True)
        sass = subprocess.run([cuobjdump(), "-sass", cubin], check=True, capture_output=True,
                              text=True).stdout
    for part in re.split(r"\n\s*Function : ", sass)[1:]:
        name = subprocess.run(["c++filt", part.split("\n", 1)[0]], capture_output=True,
                              text=True).stdout.strip()
        if args.kernel not in name:
            continue
        ins = [(int(a, 16), t.strip()) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", part)]
        index = {a: i for i, (a, _) in enumerate(ins)}
        print(f"{name}: {len(ins)} instructions")
        loops = []
        for i, (a, t) in enumerate(ins):
            m = re.search(r"BRA[^0-9]*0x([0-9a-f]+)", t)
            if not m or int(m.group(1), 16) >= a or int(m.group(1), 16) not in index:
                continue
            body = [x for _, x in ins[index[int(m.group(1), 16)]:i + 1]]
            rcp = sum("MUFU.RCP" in x for x in body)
            if rcp < args.min_rcp:
                continue
            loops.append((len(body), f"{m.group(1)}-{a:x}", rcp, body))
        for length, where, rcp, body in sorted(loops):  # the shortest: the walk's step
            mix = collections.Counter(opcode(x) for x in body).most_common(14)
            per = f", {length / rcp:.1f} a reciprocal" if rcp else ""
            print(f"  loop {where}: {length} instructions, {rcp} MUFU.RCP{per}")
            print("    " + ", ".join(f"{k} {v}" for k, v in mix))


if __name__ == "__main__":
    main()
