"""The ctypes mirrors of cake.h's structs (cake._lib) have the C layout: size, field names and
offsets, as the system C compiler lays them out (tests/struct_layout.c, compiled here).

cake/_lib.py is loaded on its own (it needs only ctypes), so this runs without torch and
without the C library."""
import ctypes
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests" / "struct_layout.c"


def _load_lib_module():
    path = ROOT / "python" / "cake" / "_lib.py"
    if not path.exists():  # not a source checkout: the installed package's
        from cake import _lib
        return _lib
    spec = importlib.util.spec_from_file_location("cake_lib_for_layout", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_lib = _load_lib_module()

# C struct -> the name of its ctypes mirror in cake._lib
MIRRORS = {
    "cake_range": "Range",
    "cake_halo_row": "HaloRow",
    "cake_fragment": "Fragment",
    "cake_transfer": "Transfer",
    "cake_transport": "Transport",
    "cake_cpu_options": "CpuOptions",
    "cake_ctx_options": "CtxOptions",
    "cake_ctx_stats": "CtxStats",
    "cake_conv_params": "ConvParams",
}


def _compiler():
    for candidate in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    return None


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    """{struct: {"size": n, "fields": {name: offset}}} from the C compiler."""
    if not SOURCE.exists():
        pytest.skip(f"{SOURCE} not found (the tests run from a source checkout)")
    cc = _compiler()
    if cc is None:
        pytest.skip("no C compiler (cc, gcc, clang or $CC) to compile tests/struct_layout.c")
    exe = tmp_path_factory.mktemp("struct_layout") / "struct_layout"
    build = subprocess.run([cc, "-std=c11", "-I", str(ROOT / "include"), str(SOURCE), "-o",
                            str(exe)], capture_output=True, text=True)
    assert build.returncode == 0, f"{cc} failed on {SOURCE}:\n{build.stderr}"
    run = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
    return json.loads(run.stdout)


def test_every_mirrored_struct_is_printed(c_layout):
    assert sorted(c_layout) == sorted(MIRRORS), \
        "tests/struct_layout.c and this test list different structs"


@pytest.mark.parametrize("c_name", sorted(MIRRORS))
def test_layout_matches(c_layout, c_name):
    py_name = MIRRORS[c_name]
    mirror = getattr(_lib, py_name, None)
    if mirror is None:
        pytest.skip(f"cake._lib has no {py_name} (the mirror of {c_name}) yet")
    want = c_layout[c_name]
    got_fields = {name: getattr(mirror, name).offset for name, *_ in mirror._fields_}
    assert list(got_fields) == list(want["fields"]), \
        f"{py_name}: fields {list(got_fields)}, {c_name} has {list(want['fields'])}"
    assert got_fields == want["fields"], \
        f"{py_name}: offsets {got_fields}, {c_name} has {want['fields']}"
    assert ctypes.sizeof(mirror) == want["size"], \
        f"{py_name}: {ctypes.sizeof(mirror)} bytes, {c_name} has {want['size']}"
