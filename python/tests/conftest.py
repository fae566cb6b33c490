"""Test settings: gloo over loopback (the spawned workers inherit the environment), two CPU
threads, and a private Inductor cache for the session (so torch.compile tests never reuse
artifacts compiled by another checkout or version of the ops)."""
import atexit
import os
import shutil
import tempfile

os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
os.environ.setdefault("CAKE_NUM_THREADS", "2")
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="cake-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
