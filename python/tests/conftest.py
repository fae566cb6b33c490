"""Test settings: gloo over loopback (the spawned workers inherit the environment)."""
import os

os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
os.environ.setdefault("CAKE_NUM_THREADS", "2")
