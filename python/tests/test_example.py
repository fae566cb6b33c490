"""examples/kda_block.py under torchrun with 2 ranks: its losses equal the single-process run."""
import os
import pathlib
import subprocess
import sys

import torch

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "kda_block.py"


def torchrun(nproc, *args):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}"]
    if int(torch.__version__.split(".")[0]) < 2:
        # torch 1.x's torchrun cannot parse its default "--redirects 0" on Python 3.11
        # (IntFlag iteration changed); redirecting stdout to its log and teeing it works.
        cmd += ["--redirects", "1", "--tee", "1"]
    env = dict(os.environ, GLOO_SOCKET_IFNAME=os.environ.get("GLOO_SOCKET_IFNAME", "lo"))
    return subprocess.run(cmd + [str(EXAMPLE), *args], capture_output=True, text=True,
                          timeout=240, env=env)


def test_example_two_ranks_equal_single_process():
    run = torchrun(2, "--steps", "3", "--rows-per-rank", "256")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "losses of 2 ranks bitwise equal to the single-process run: True" in run.stdout, \
        run.stdout
    steps = [line for line in run.stdout.splitlines() if "step " in line and "loss" in line]
    assert len(steps) == 3 and all("exchanges: forward 1, backward 1" in s for s in steps), \
        run.stdout


def test_example_single_process():
    run = subprocess.run([sys.executable, str(EXAMPLE), "--single", "--steps", "2",
                          "--rows-per-rank", "256"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("[single] step") == 2, run.stdout
