"""bench/bench_api.py runs end to end on the CPU (a smoke test: nothing here is timed)."""
import json
import os
import pathlib
import subprocess
import sys

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "bench_api.py"


def test_bench_api_quick_cpu(tmp_path):
    out = tmp_path / "bench.json"
    env = dict(os.environ, CAKE_NUM_THREADS="1")
    run = subprocess.run([sys.executable, str(BENCH), "--quick", "--device", "cpu",
                          "--no-compile", "--json", str(out)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "host time" in run.stdout or "wall time" in run.stdout, run.stdout
    result = json.loads(out.read_text())
    impls = {r["impl"] for r in result["rows"] if r["us"] is not None}
    assert {"cake C ctx calls", "cake api", "torch conv1d", "cake C ctx calls silu+bias",
            "cake ShortConv silu+bias", "cake multi silu+bias"} <= impls, impls
    assert [h["impl"] for h in result["host_us"]["rows"]] == [
        "cake C ctx calls", "cake api", "torch 2x (autograd floor)", "python Function 2x",
        "cake C ctx calls silu+bias", "cake multi silu+bias"]
    # FLA's rows are there too: timed where its kernels run, else marked absent or failed
    fla = [r for r in result["rows"] if r["impl"].startswith("fla act=silu bias")]
    assert fla and all(r["us"] is not None or r["note"].startswith(("absent", "failed"))
                       for r in fla), fla
